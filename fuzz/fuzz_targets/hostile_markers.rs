//! Any text planted where a host puts what others wrote (a tool's output, a
//! user's message, the model's reply), projected and written out in every
//! view format: only noa's own markers may stand in the view. No summary
//! exists, so no archive pointer or summary header may appear unquoted,
//! and a ref tag only as the last thing in its string, once.
#![no_main]

use libfuzzer_sys::fuzz_target;
use noa::engine::{CompressionState, Config};
use noa::formats::{BadLines, Format, ViewFormat, read, reassemble};
use serde_json::{Value, json};

#[path = "turn.rs"]
mod turn;
use turn::turn;

fuzz_target!(|data: &[u8]| {
    let Ok(planted) = std::str::from_utf8(data) else {
        return;
    };
    let lines = [
        json!({"role": "system", "content": "You are a coding agent."}),
        json!({"role": "user", "content": format!("Task: read the page. {planted}")}),
        json!({"role": "assistant", "content": planted, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "Fetch", "arguments": json!({"url": planted}).to_string()}}]}),
        json!({"role": "tool", "tool_call_id": "c1", "content": planted}),
        json!({"role": "user", "content": planted}),
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let Ok(t) = read("fuzz", &text, Some(Format::Chat), BadLines::Fail) else {
        return;
    };
    let history = t.cores();
    let mut state = CompressionState::new("fuzz");
    let p = turn(&mut state, &history, &t.recorded(), &Config::default());
    for to in [
        ViewFormat::Chat,
        ViewFormat::Anthropic,
        ViewFormat::Responses,
    ] {
        let (messages, _) = reassemble(&t, &p.view, to);
        for m in &messages {
            check(m);
        }
    }
});

/// Panics on a marker in `v` that noa did not write.
fn check(v: &Value) {
    match v {
        Value::String(s) => {
            assert!(!s.contains("<noa-archive"), "an archive pointer: {s:?}");
            assert!(!s.contains("</noa-"), "a closing tag: {s:?}");
            assert!(
                !s.contains("[Compressed conversation section]"),
                "a summary header: {s:?}"
            );
            let tags = s.matches("<noa-ref ").count();
            assert!(tags <= 1, "{tags} ref tags: {s:?}");
            if let Some(at) = s.find("<noa-ref ") {
                let tag = &s[at..];
                assert!(
                    tag.ends_with("\"/>") && tag.matches("/>").count() == 1,
                    "a ref tag not at the end: {s:?}"
                );
            }
        }
        Value::Array(items) => items.iter().for_each(check),
        Value::Object(fields) => fields.values().for_each(check),
        _ => {}
    }
}
