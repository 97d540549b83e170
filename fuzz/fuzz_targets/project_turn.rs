//! A transcript that parses, projected on a fresh state: the projection must
//! not panic, and its view must keep every tool call paired with its result
//! (the invariant `engine::view` keeps: a call's result comes in the
//! non-assistant section right after the call's turn, once; every result
//! answers a call of the assistant turn just before it). Run with the default
//! window and with a tiny one (so truncation and omission run too), each
//! projected twice (the same turn again, as a retrying host does), and the
//! view written back out in the transcript's request format.
#![no_main]

use std::collections::HashSet;

use libfuzzer_sys::fuzz_target;
use noa::engine::CompressionState;
use noa::engine::Config;
use noa::engine::{ContentType, CoreMessage, Role};
use noa::formats::{BadLines, read, reassemble};

#[path = "turn.rs"]
mod turn;
use turn::turn;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(t) = read("fuzz", text, None, BadLines::Skip) else {
        return;
    };
    let history = t.cores();
    let recorded = t.recorded();
    for limit in [None, Some(1_000)] {
        let mut config = Config::default();
        if let Some(l) = limit {
            config.context_limit = l;
        }
        let mut state = CompressionState::new("fuzz");
        for _ in 0..2 {
            let p = turn(&mut state, &history, &recorded, &config);
            check_pairing(&p.view);
            let _ = reassemble(&t, &p.view, t.format.view_format());
        }
    }
});

/// Panics when a tool call in `view` is unanswered or a result answers no
/// call of the turn before it.
fn check_pairing(view: &[CoreMessage]) {
    let mut i = 0;
    while i < view.len() {
        if view[i].role != Role::Assistant {
            assert!(
                view[i].content_type != ContentType::ToolResult,
                "tool result {:?} at {i} before any assistant turn",
                view[i].tool_call_id
            );
            i += 1;
            continue;
        }
        let turn = i;
        while i < view.len() && view[i].role == Role::Assistant {
            i += 1;
        }
        let answers = i;
        while i < view.len() && view[i].role != Role::Assistant {
            i += 1;
        }
        let calls: HashSet<&str> = view[turn..answers]
            .iter()
            .filter(|m| m.content_type == ContentType::ToolCall)
            .map(|m| m.tool_call_id.as_str())
            .collect();
        let mut answered = HashSet::new();
        for (j, m) in view.iter().enumerate().take(i).skip(answers) {
            if m.content_type == ContentType::ToolResult {
                let id = m.tool_call_id.as_str();
                assert!(
                    calls.contains(id),
                    "tool result {id:?} at {j} answers no call of the turn before it"
                );
                assert!(
                    answered.insert(id),
                    "tool call {id:?} answered twice (second at {j})"
                );
            }
        }
        for (j, m) in view.iter().enumerate().take(answers).skip(turn) {
            if m.content_type == ContentType::ToolCall {
                let id = m.tool_call_id.as_str();
                assert!(
                    answered.contains(id),
                    "tool call {id:?} at {j} is never answered"
                );
            }
        }
    }
}
