//! Keeps Compress exchanges from piling up in the view.
//!
//! Once a block's summary is in place, the call that made it says nothing the
//! summary does not; keeping every such call and its panel let them grow to a
//! quarter of the view. So only the latest successful exchange stays (the
//! model has to read how its call went), with failed calls after it (so the
//! model sees what to correct), and long summaries inside a kept call are
//! cut to a stub. The transcript keeps every call for `rebuild`.

use crate::engine::model::identity::{IdMap, IdSet};

use serde_json::Value;

use crate::engine::model::message::COMPRESS_TOOL;
use crate::engine::model::message::{CoreMessage, Edit};
use crate::engine::model::state::CompressionState;

/// How many failed calls after the last success stay visible.
pub const KEEP_FAILED: usize = 2;
/// Summaries in a kept call longer than this many characters are stubbed.
pub const STUB_CHARS: usize = 200;
/// Entries of a kept call past this many are left out of the view, with a
/// note of how many.
pub const STUB_ENTRIES: usize = 8;
/// Arguments of a kept call that do not parse are cut to this many
/// characters.
pub const STUB_UNREAD_CHARS: usize = 2_000;

/// The call ids of the Compress exchanges that leave the view, out of the
/// messages it would otherwise hold (in order): every call but the latest
/// success and the failures after it (see [`staying`]). Decided on
/// borrowed messages, so that a long session's spent calls, arguments and
/// all, are never copied.
pub fn spent_calls<'a>(
    view: impl IntoIterator<Item = &'a CoreMessage>,
    state: &CompressionState,
) -> IdSet<'a> {
    let calls: Vec<&str> = view
        .into_iter()
        .filter(|m| m.is_compress_call())
        .map(|m| m.tool_call_id.as_str())
        .collect();
    if calls.is_empty() {
        return IdSet::default();
    }
    // Whether a block stands for each call's exchange, and whether one that
    // does is active: looked up for the calls in view, by hash when there
    // are many, not gathered from every block a long session made.
    let many: IdSet<'_> = match calls.len() {
        0..=16 => IdSet::default(),
        _ => calls.iter().copied().collect(),
    };
    let mut block_of: IdMap<'_, bool> = IdMap::default();
    for b in state
        .blocks
        .iter()
        .filter(|b| !b.compress_call_id.is_empty())
    {
        let id = b.compress_call_id.as_str();
        let call = match many.is_empty() {
            true => calls.iter().copied().find(|&c| c == id),
            false => many.get(id).copied(),
        };
        if let Some(c) = call {
            *block_of.entry(c).or_insert(false) |= b.active;
        }
    }
    let keep: IdSet<'_> = staying(calls.iter().rev().copied(), |c| block_of.get(c).copied())
        .into_iter()
        .collect();
    calls.into_iter().filter(|id| !keep.contains(id)).collect()
}

/// The calls whose exchanges stay in view, out of those in view given last
/// first, `made` telling whether a call made blocks and whether one of them
/// is active: the latest call with an active block, and the last
/// [`KEEP_FAILED`] after it that made none. Only the calls after that
/// success are looked at.
pub fn staying<'a>(
    calls_from_last: impl IntoIterator<Item = &'a str>,
    made: impl Fn(&str) -> Option<bool>,
) -> Vec<&'a str> {
    let (mut stay, mut failed) = (Vec::new(), 0);
    for call in calls_from_last {
        match made(call) {
            None => {
                if failed < KEEP_FAILED {
                    stay.push(call);
                }
                failed += 1;
            }
            Some(true) => {
                stay.push(call);
                break;
            }
            Some(false) => {}
        }
    }
    stay
}

/// Whether `m` is half of an exchange in `spent` (see [`spent_calls`]).
pub fn is_spent(m: &CoreMessage, spent: &IdSet) -> bool {
    m.tool_name == COMPRESS_TOOL && spent.contains(m.tool_call_id.as_str())
}

/// Stubs long summaries in the Compress calls that stay in the view.
pub fn stub_calls(view: &mut [CoreMessage]) {
    for m in view.iter_mut().filter(|m| m.is_compress_call()) {
        if let Some(stubbed) = stub_summaries(&m.text) {
            m.replace_text(stubbed, Edit::ArgsShortened);
        }
    }
}

/// Rewrites Compress arguments with every summary over [`STUB_CHARS`] cut
/// short and the entries past [`STUB_ENTRIES`] left out. Prose before the
/// JSON is kept; `content` keeps the form it came in (a list, or a string
/// holding one). Arguments that do not parse are cut to
/// [`STUB_UNREAD_CHARS`]. `None` when nothing changes.
pub fn stub_summaries(args: &str) -> Option<String> {
    stub_parsed(args).or_else(|| {
        let chars = args.chars().count();
        (chars > STUB_UNREAD_CHARS && !parses(args)).then(|| {
            let kept: String = args.chars().take(STUB_UNREAD_CHARS).collect();
            let left = chars - STUB_UNREAD_CHARS;
            format!("{kept}… [{left} more characters left out of this view]")
        })
    })
}

/// Whether the JSON in `args` (after any prose) parses.
fn parses(args: &str) -> bool {
    args.find('{')
        .is_some_and(|at| serde_json::from_str::<serde::de::IgnoredAny>(&args[at..]).is_ok())
}

/// [`stub_summaries`] of arguments that parse.
fn stub_parsed(args: &str) -> Option<String> {
    let start = args.find('{')?;
    let (prefix, json) = args.split_at(start);
    let mut v: Value = serde_json::from_str(json).ok()?;
    let content = v.get_mut("content")?;
    let changed = match content {
        Value::Array(items) => stub_items(items),
        Value::String(s) => {
            let mut items: Vec<Value> = serde_json::from_str(s).ok()?;
            let changed = stub_items(&mut items);
            if changed {
                *s = serde_json::to_string(&items).ok()?;
            }
            changed
        }
        _ => false,
    };
    changed.then(|| format!("{prefix}{v}"))
}

fn stub_items(items: &mut Vec<Value>) -> bool {
    let mut changed = false;
    if items.len() > STUB_ENTRIES {
        let left = items.len() - STUB_ENTRIES;
        items.truncate(STUB_ENTRIES);
        items.push(serde_json::json!({
            "omitted": format!("{left} more entries left out of this view")
        }));
        changed = true;
    }
    for item in items {
        if let Some(Value::String(s)) = item.get_mut("summary")
            && s.chars().count() > STUB_CHARS
        {
            *s = s.chars().take(STUB_CHARS - 1).chain(['…']).collect();
            changed = true;
        }
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::test_support::{block, ids, user};

    /// Both steps, as a turn takes them: the spent exchanges left out, the
    /// summaries of those kept stubbed.
    fn hide_compress_calls(view: Vec<CoreMessage>, state: &CompressionState) -> Vec<CoreMessage> {
        let spent = spent_calls(&view, state);
        let mut kept: Vec<CoreMessage> = (view.iter())
            .filter(|m| !is_spent(m, &spent))
            .cloned()
            .collect();
        stub_calls(&mut kept);
        kept
    }

    fn args(summary: &str) -> String {
        serde_json::json!({"content": [{"startId": "m00001", "endId": "m00009", "summary": summary}]}).to_string()
    }
    fn exchange(call_id: &str, summary: &str) -> [CoreMessage; 2] {
        [
            CoreMessage::tool_call(
                format!("call-{call_id}"),
                call_id,
                COMPRESS_TOOL,
                args(summary),
            ),
            CoreMessage::tool_result(
                format!("res-{call_id}"),
                call_id,
                COMPRESS_TOOL,
                "▣ noa | 12K → 3K tokens",
            ),
        ]
    }
    fn state(blocks: &[(&str, &str, bool)]) -> CompressionState {
        let mut st = CompressionState::new("s");
        for (id, call, active) in blocks {
            let mut b = block(id, 1, &["x"]);
            b.compress_call_id = call.to_string();
            b.active = *active;
            st.blocks.push(b);
        }
        st
    }

    #[test]
    fn the_latest_success_stays_older_ones_go() {
        let mut v = vec![user("u")];
        v.extend(exchange("t1", "first"));
        v.extend(exchange("t2", "second"));
        let out = hide_compress_calls(v, &state(&[("b1", "t1", true), ("b2", "t2", true)]));
        assert_eq!(ids(&out), ["u", "call-t2", "res-t2"]);
    }

    #[test]
    fn a_dead_blocks_call_goes() {
        let mut v = vec![user("keep")];
        v.extend(exchange("t1", "s"));
        let out = hide_compress_calls(v, &state(&[("b1", "t1", false)]));
        assert_eq!(ids(&out), ["keep"]);
    }

    #[test]
    fn recent_failures_stay_two_at_most() {
        let v: Vec<CoreMessage> = ["t1", "t2", "t3"]
            .iter()
            .map(|t| CoreMessage::tool_call(format!("c{t}"), *t, COMPRESS_TOOL, "{}"))
            .collect();
        let out = hide_compress_calls(v, &state(&[]));
        assert_eq!(ids(&out), ["ct2", "ct3"]);
    }

    #[test]
    fn failures_before_the_last_success_go() {
        let mut v = vec![user("u")];
        v.extend(exchange("t1", "failed"));
        v.extend(exchange("t2", "ok"));
        let out = hide_compress_calls(v, &state(&[("b1", "t2", true)]));
        assert_eq!(ids(&out), ["u", "call-t2", "res-t2"]);
    }

    #[test]
    fn long_summaries_are_stubbed() {
        let long = "detail ".repeat(500);
        let out = stub_summaries(&args(&long)).unwrap();
        let v: Value = serde_json::from_str(&out).unwrap();
        let s = v["content"][0]["summary"].as_str().unwrap();
        assert_eq!(s.chars().count(), STUB_CHARS);
        assert!(s.ends_with('…'));
    }

    #[test]
    fn short_or_unparsable_arguments_are_left_alone() {
        assert_eq!(stub_summaries(&args("a brief summary")), None);
        assert_eq!(stub_summaries("not json at all"), None);
    }

    #[test]
    fn a_call_of_many_entries_or_long_broken_arguments_is_shortened() {
        let entries: Vec<Value> = (0..10_000)
            .map(|i| serde_json::json!({"startId": "m00001", "endId": "m00002", "summary": format!("s{i}")}))
            .collect();
        let raw = serde_json::json!({"content": entries}).to_string();
        let out: Value = serde_json::from_str(&stub_summaries(&raw).unwrap()).unwrap();
        let content = out["content"].as_array().unwrap();
        assert_eq!(content.len(), STUB_ENTRIES + 1);
        assert_eq!(
            content[STUB_ENTRIES]["omitted"],
            "9992 more entries left out of this view"
        );
        let broken = format!("{{\"content\": [{}", "x".repeat(50_000));
        let out = stub_summaries(&broken).unwrap();
        assert!(
            out.chars().count() < STUB_UNREAD_CHARS + 60,
            "{}",
            out.len()
        );
        assert!(
            out.ends_with("[48013 more characters left out of this view]"),
            "{out}"
        );
    }

    #[test]
    fn stringified_content_stays_a_string() {
        let inner =
            serde_json::json!([{"startId": "m1", "endId": "m2", "summary": "d".repeat(500)}])
                .to_string();
        let raw = serde_json::json!({"content": inner}).to_string();
        let out: Value = serde_json::from_str(&stub_summaries(&raw).unwrap()).unwrap();
        assert!(out["content"].is_string());
    }

    #[test]
    fn prose_before_the_json_is_kept() {
        let raw = format!("I'll compress that range.\n{}", args(&"s".repeat(300)));
        assert!(
            stub_summaries(&raw)
                .unwrap()
                .starts_with("I'll compress that range.\n{")
        );
    }

    #[test]
    fn nothing_to_do_without_compress_calls() {
        let v = vec![user("a")];
        assert_eq!(hide_compress_calls(v.clone(), &state(&[])), v);
    }
}
