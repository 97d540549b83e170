//! The units a range may not cut: a model response with the tool results that
//! answer it.
//!
//! An exchange is one run of assistant blocks (reasoning, text, tool calls:
//! everything one response produced) plus the tool results right after it.
//! Covering part of an exchange would leave a call without its result, a
//! result without its call, or thinking without the action it led to, and a
//! strict provider refuses each of those. Ranges therefore snap outward to
//! whole exchanges, and a summary is only ever placed between two of them.

use super::message::{ContentType, CoreMessage, Role};

/// For each message, the index range `[start, end]` of the exchange it
/// belongs to. A run of assistant blocks that calls tools is one exchange
/// with the results that follow it; a run without calls splits into one
/// exchange per text block (with the reasoning before it); anything else
/// stands alone.
pub fn spans(msgs: &[CoreMessage]) -> Vec<(usize, usize)> {
    fn mark(out: &mut [(usize, usize)], start: usize, end: usize) {
        out[start..=end].iter_mut().for_each(|s| *s = (start, end));
    }
    let mut out: Vec<(usize, usize)> = (0..msgs.len()).map(|i| (i, i)).collect();
    let mut i = 0;
    while i < msgs.len() {
        if msgs[i].role != Role::Assistant {
            i += 1;
            continue;
        }
        let start = i;
        while i < msgs.len() && msgs[i].role == Role::Assistant {
            i += 1;
        }
        if msgs[start..i]
            .iter()
            .any(|m| m.content_type == ContentType::ToolCall)
        {
            while i < msgs.len() && msgs[i].content_type == ContentType::ToolResult {
                i += 1;
            }
            mark(&mut out, start, i - 1);
            continue;
        }
        let mut unit = start;
        for (j, m) in msgs.iter().enumerate().take(i).skip(start) {
            if m.content_type != ContentType::Reasoning || j + 1 == i {
                mark(&mut out, unit, j);
                unit = j + 1;
            }
        }
    }
    out
}

/// Widens `[start, end]` to whole exchanges, given the messages' [`spans`]
/// (taken once for all the ranges of a call).
pub fn snap(spans: &[(usize, usize)], start: usize, end: usize) -> (usize, usize) {
    let Some(last) = spans.len().checked_sub(1) else {
        return (start, end);
    };
    (spans[start.min(last)].0, spans[end.min(last)].1)
}

/// Whether a user message may be placed after a message of role `prev`
/// (`None`: at the start) and before `next` without landing inside an
/// exchange.
pub fn is_boundary(prev: Option<Role>, next: &CoreMessage) -> bool {
    match prev {
        None => true,
        Some(prev) => {
            next.content_type != ContentType::ToolResult
                && !(prev == Role::Assistant && next.role == Role::Assistant)
        }
    }
}

/// [`is_boundary`] for a summary standing where messages were taken out:
/// two assistant messages that the history did not hold side by side (a
/// user message or a tool result came between them, the first turn ended)
/// are two turns, and a summary may stand between them. Held to the rule
/// for adjacent ones, it was pushed past the next turn and its results,
/// and a writer then joined the two turns into one.
pub fn may_stand_between(prev: Option<Role>, next: &CoreMessage, turn_ended: bool) -> bool {
    is_boundary(prev, next)
        || (turn_ended && prev == Some(Role::Assistant) && next.role == Role::Assistant)
}

/// Whether an assistant's turn ends among `between`, the messages the
/// history held between two others.
pub fn turn_ends_in(between: &[CoreMessage]) -> bool {
    between.iter().any(|m| m.role != Role::Assistant)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(id: &str) -> CoreMessage {
        CoreMessage::text(id, Role::User, id)
    }
    fn call(id: &str, cid: &str) -> CoreMessage {
        CoreMessage::tool_call(id, cid, "Read", "{}")
    }
    fn result(id: &str, cid: &str) -> CoreMessage {
        CoreMessage::tool_result(id, cid, "Read", "out")
    }
    fn think(id: &str) -> CoreMessage {
        CoreMessage::reasoning(id, id)
    }

    #[test]
    fn pulls_the_result_forward_and_the_call_back() {
        let v = [user("u"), call("c", "t1"), result("r", "t1"), user("u2")];
        assert_eq!(snap(&spans(&v), 1, 1), (1, 2));
        let v = [call("c", "t1"), result("r", "t1")];
        assert_eq!(snap(&spans(&v), 1, 1), (0, 1));
    }

    #[test]
    fn a_gap_ends_the_exchange() {
        let v = [call("c", "t1"), user("u"), result("r", "t1")];
        assert_eq!(snap(&spans(&v), 0, 0), (0, 0));
    }

    #[test]
    fn reasoning_stays_with_its_action() {
        let v = [think("k"), call("c", "x1"), user("u")];
        assert_eq!(snap(&spans(&v), 0, 0), (0, 1));
        let v = [think("k1"), think("k2"), call("c", "x1")];
        assert_eq!(snap(&spans(&v), 2, 2), (0, 2));
        let v = [
            user("u"),
            think("k"),
            call("c", "x1"),
            result("r", "x1"),
            user("u2"),
        ];
        assert_eq!(snap(&spans(&v), 2, 2), (1, 3));
    }

    #[test]
    fn replies_without_calls_split_per_text() {
        let say = |id: &str| CoreMessage::text(id, Role::Assistant, id);
        let v = [user("u"), say("a"), think("k"), say("b"), say("c")];
        let s = spans(&v);
        assert_eq!(s[1], (1, 1));
        assert_eq!(s[2], (2, 3));
        assert_eq!(s[3], (2, 3));
        assert_eq!(s[4], (4, 4));
    }

    #[test]
    fn parallel_calls_are_one_unit() {
        let v = [
            user("u"),
            call("c1", "a"),
            call("c2", "b"),
            result("r1", "a"),
            result("r2", "b"),
            user("u2"),
        ];
        assert_eq!(snap(&spans(&v), 1, 3), (1, 4));
        let between = |i: usize| is_boundary(i.checked_sub(1).map(|p| v[p].role), &v[i]);
        assert!(!between(2));
        assert!(!between(3));
        assert!(!between(4));
        assert!(between(5));
        assert!(between(1));
    }
}
