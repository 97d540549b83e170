//! Any Compress arguments answered against a session, as `noa apply` does:
//! refused or applied, never a panic, and never more than the limits allow.
//! What it made must project, every tool call still answered once.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use noa::engine::{
    CallInput, CompressionState, Config, CoreMessage, IdMap, MAX_RANGES, Sections, answer_call,
};
use noa::formats::{BadLines, Format, Transcript, read};
use serde_json::json;

#[path = "turn.rs"]
mod turn;
use turn::turn;

/// A session of twenty exchanges with long outputs, read once.
fn session() -> &'static Transcript {
    static T: OnceLock<Transcript> = OnceLock::new();
    T.get_or_init(|| {
        let mut lines = vec![
            json!({"role": "system", "content": "You are a coding agent."}),
            json!({"role": "user", "content": "Task: fix the parser."}),
        ];
        for i in 0..20 {
            let id = format!("c{i}");
            lines.push(json!({"role": "assistant", "content": format!("Reading part {i}."), "tool_calls": [{"id": id, "type": "function", "function": {"name": "Read", "arguments": json!({"path": format!("src/p{i}.rs")}).to_string()}}]}));
            lines.push(json!({"role": "tool", "tool_call_id": id, "content": format!("fn part_{i}() {{}}\n").repeat(120)}));
        }
        lines.push(json!({"role": "user", "content": "Go on."}));
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        read("fuzz", &text, Some(Format::Chat), BadLines::Fail).expect("the session reads")
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(args) = std::str::from_utf8(data) else {
        return;
    };
    let t = session();
    let history = t.cores();
    let recorded = t.recorded();
    let sections = Sections::default();
    let config = Config::default();
    let none = IdMap::default();
    let mut originals: IdMap<'_, &CoreMessage> = IdMap::default();
    originals.extend(history.iter().map(|m| (m.id.as_str(), m)));
    let mut state = CompressionState::new("fuzz");
    turn(&mut state, &history, &recorded, &config);
    let answer = answer_call(
        state,
        &CallInput {
            args,
            call_id: "call",
            history: &history,
            originals: &originals,
            cut: history.len(),
            config: &config,
            recorded: &recorded,
            sections: &sections,
            archive_root: "/fuzz/session",
            created: "2026-01-01T00:00:00Z",
            now: 1_767_225_600,
            cuts: &none,
            index: None,
            scan: None,
            weights: t.format.weights(),
        },
    );
    assert!(!answer.panel.is_empty());
    assert!(answer.outcome.created.len() <= MAX_RANGES);
    let mut state = answer.state;
    let p = turn(&mut state, &history, &recorded, &config);
    let calls = p
        .view
        .iter()
        .filter(|m| m.content_type == noa::engine::ContentType::ToolCall);
    for call in calls {
        let answers = p
            .view
            .iter()
            .filter(|m| {
                m.content_type == noa::engine::ContentType::ToolResult
                    && m.tool_call_id == call.tool_call_id
            })
            .count();
        assert_eq!(
            answers, 1,
            "call {:?} answered {answers} times",
            call.tool_call_id
        );
    }
});
