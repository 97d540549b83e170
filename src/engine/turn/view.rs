//! Keeps a view a request the provider accepts: every tool call answered,
//! every result answering a call, reasoning only where a turn follows it.
//!
//! All three providers pair calls and results per turn: the results for the
//! calls of one assistant turn must come after that turn and before the next
//! one. A call or result that lost its partner (a pending call at the end of
//! a log, a result whose call was never written) is left out of the view; the
//! transcript itself keeps it.

use crate::engine::model::identity::IdSet;

use crate::engine::model::message::{ContentType, CoreMessage, Role};

/// Drops unpaired tool calls and results, then reasoning that no longer leads
/// into an assistant action, until nothing changes.
pub fn drop_unpaired(mut messages: Vec<CoreMessage>) -> Vec<CoreMessage> {
    loop {
        let before = messages.len();
        keep_marked(&mut messages, paired_mask);
        keep_marked(&mut messages, leading_mask);
        if messages.len() == before {
            return messages;
        }
    }
}

/// Keeps the messages `mask` marks, in place: a long view where it marks
/// every one (most turns) is not moved at all.
fn keep_marked(messages: &mut Vec<CoreMessage>, mask: fn(&[CoreMessage]) -> Vec<bool>) {
    let mut keep = mask(messages).into_iter();
    messages.retain(|_| keep.next().unwrap_or(true));
}

/// Marks which messages keep their place: calls answered in the section after
/// their turn, results answering a call of the turn just before.
fn paired_mask(messages: &[CoreMessage]) -> Vec<bool> {
    let mut keep = vec![true; messages.len()];
    // A turn's calls and the results that answered them, kept across turns
    // so that a long history's turns make no set of their own.
    let (mut calls, mut answered) = (CallIds::default(), CallIds::default());
    let mut i = 0;
    while i < messages.len() {
        if messages[i].role != Role::Assistant {
            // Results before any assistant turn answer nothing.
            if messages[i].content_type == ContentType::ToolResult {
                keep[i] = false;
            }
            i += 1;
            continue;
        }
        let turn_start = i;
        while i < messages.len() && messages[i].role == Role::Assistant {
            i += 1;
        }
        let answers_start = i;
        while i < messages.len() && messages[i].role != Role::Assistant {
            i += 1;
        }
        calls.refill(
            messages[turn_start..answers_start]
                .iter()
                .filter(|m| m.content_type == ContentType::ToolCall)
                .map(|m| m.tool_call_id.as_str()),
        );
        answered.clear();
        for j in answers_start..i {
            let m = &messages[j];
            if m.content_type == ContentType::ToolResult {
                if calls.contains(m.tool_call_id.as_str())
                    && answered.insert(m.tool_call_id.as_str())
                {
                    continue;
                }
                keep[j] = false;
            }
        }
        for j in turn_start..answers_start {
            let m = &messages[j];
            if m.content_type == ContentType::ToolCall
                && !answered.contains(m.tool_call_id.as_str())
            {
                keep[j] = false;
            }
        }
    }
    keep
}

/// The call ids of one turn: a list looked through while there are few
/// (most turns make one call or a handful), a set once there are many.
#[derive(Default)]
struct CallIds<'a> {
    few: Vec<&'a str>,
    many: IdSet<'a>,
}

impl<'a> CallIds<'a> {
    /// How many a list holds before they go in a set.
    const FEW: usize = 16;

    /// Holds `ids` alone.
    fn refill(&mut self, ids: impl IntoIterator<Item = &'a str>) {
        self.clear();
        for id in ids {
            self.insert(id);
        }
    }

    /// Holds none, keeping the room it has.
    fn clear(&mut self) {
        self.few.clear();
        self.many.clear();
    }

    fn contains(&self, id: &str) -> bool {
        match self.many.is_empty() {
            true => self.few.contains(&id),
            false => self.many.contains(id),
        }
    }

    /// Adds `id`; whether it was not there.
    fn insert(&mut self, id: &'a str) -> bool {
        if !self.many.is_empty() {
            return self.many.insert(id);
        }
        if self.few.contains(&id) {
            return false;
        }
        self.few.push(id);
        if self.few.len() > Self::FEW {
            self.many.extend(self.few.drain(..));
        }
        true
    }
}

/// Marks which messages keep their place: reasoning runs not followed,
/// within the same turn, by assistant text or a tool call are not, since
/// reasoning with nothing after it is not a turn a provider takes back.
fn leading_mask(messages: &[CoreMessage]) -> Vec<bool> {
    let mut keep = vec![true; messages.len()];
    let mut i = 0;
    while i < messages.len() {
        if messages[i].content_type != ContentType::Reasoning {
            i += 1;
            continue;
        }
        let start = i;
        while i < messages.len() && messages[i].content_type == ContentType::Reasoning {
            i += 1;
        }
        let leads_somewhere = messages.get(i).is_some_and(|m| {
            m.role == Role::Assistant
                && matches!(m.content_type, ContentType::Text | ContentType::ToolCall)
        });
        if !leads_somewhere {
            keep[start..i].iter_mut().for_each(|k| *k = false);
        }
    }
    keep
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(id: &str) -> CoreMessage {
        CoreMessage::text(id, Role::User, id)
    }
    fn say(id: &str) -> CoreMessage {
        CoreMessage::text(id, Role::Assistant, id)
    }
    fn call(id: &str, cid: &str) -> CoreMessage {
        CoreMessage::tool_call(id, cid, "Bash", "{}")
    }
    fn result(id: &str, cid: &str) -> CoreMessage {
        CoreMessage::tool_result(id, cid, "Bash", "out")
    }
    fn think(id: &str) -> CoreMessage {
        CoreMessage::reasoning(id, id)
    }
    fn ids(v: &[CoreMessage]) -> Vec<&str> {
        v.iter().map(|m| m.id.as_str()).collect()
    }

    #[test]
    fn keeps_a_well_formed_exchange() {
        let v = vec![
            user("u"),
            think("r"),
            call("c1", "x"),
            call("c2", "y"),
            result("t1", "x"),
            result("t2", "y"),
            say("a"),
        ];
        assert_eq!(
            ids(&drop_unpaired(v)),
            ["u", "r", "c1", "c2", "t1", "t2", "a"]
        );
    }

    #[test]
    fn drops_a_pending_call_and_its_reasoning() {
        let v = vec![user("u"), think("r"), call("c1", "x")];
        assert_eq!(ids(&drop_unpaired(v)), ["u"]);
    }

    #[test]
    fn drops_a_result_without_its_call() {
        let v = vec![user("u"), result("t1", "x"), say("a"), result("t2", "y")];
        assert_eq!(ids(&drop_unpaired(v)), ["u", "a"]);
    }

    #[test]
    fn a_result_after_a_later_turn_pairs_nothing() {
        let v = vec![
            user("u"),
            call("c1", "x"),
            user("u2"),
            say("a"),
            result("t1", "x"),
        ];
        assert_eq!(ids(&drop_unpaired(v)), ["u", "u2", "a"]);
    }

    #[test]
    fn text_in_the_same_turn_does_not_split_it() {
        let v = vec![user("u"), call("c1", "x"), say("a"), result("t1", "x")];
        assert_eq!(ids(&drop_unpaired(v)), ["u", "c1", "a", "t1"]);
    }

    /// More calls in a turn than a list holds: the same pairing, through
    /// a set.
    #[test]
    fn a_turn_of_many_calls_pairs_each_with_its_first_result() {
        for calls in [3, 40] {
            let mut v = vec![user("u")];
            v.extend((0..calls).map(|k| call(&format!("c{k}"), &format!("x{k}"))));
            // No result for x1; x2 answered twice; one for a call never made.
            let answered = (0..calls).filter(|&k| k != 1).chain([2]);
            v.extend(answered.map(|k| result(&format!("t{k}"), &format!("x{k}"))));
            v.push(result("stray", "x-none"));
            let kept = drop_unpaired(v);
            let calls_kept = (0..calls).filter(|&k| k != 1).map(|k| format!("c{k}"));
            let results_kept = (0..calls).filter(|&k| k != 1).map(|k| format!("t{k}"));
            let expected: Vec<String> = std::iter::once("u".to_string())
                .chain(calls_kept)
                .chain(results_kept)
                .collect();
            assert_eq!(ids(&kept), expected, "{calls} calls");
        }
    }

    #[test]
    fn duplicate_results_keep_the_first() {
        let v = vec![call("c1", "x"), result("t1", "x"), result("t2", "x")];
        assert_eq!(ids(&drop_unpaired(v)), ["c1", "t1"]);
    }

    #[test]
    fn reasoning_before_text_stays() {
        let v = vec![user("u"), think("r1"), think("r2"), say("a")];
        assert_eq!(ids(&drop_unpaired(v)), ["u", "r1", "r2", "a"]);
    }
}
