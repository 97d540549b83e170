//! Materializing gives back the host's own records: the untouched view
//! reproduces every model-visible record, and a compressed view comes out as
//! a log the host (and noa) reads as exactly that view.

use std::collections::{HashMap, HashSet};

use crate::engine::IdMap;

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::materialize;
use crate::engine::{ContentType, CoreMessage, Role};
use crate::formats::{BadLines, Format, Slot, Transcript, ViewFormat, read, reassemble};

const SHORT: &str = include_str!("../../testdata/real/claude-code/short.jsonl");
const TOOL_HEAVY: &str = include_str!("../../testdata/real/claude-code/tool-heavy.jsonl");
const SUBAGENTS: &str = include_str!("../../testdata/real/claude-code/spawns-subagents.jsonl");
const LONG: &str =
    include_str!("../../testdata/real/claude-code/long-session-with-compaction.jsonl");
const CODEX_PLAIN: &str = include_str!("../../testdata/real/codex/rollout-plain.jsonl");
const CODEX_COMPACTED: &str =
    include_str!("../../testdata/real/codex/rollout-with-remote-compaction.jsonl");

fn load(text: &str, format: Format) -> Transcript {
    read("t", text, Some(format), BadLines::Fail).unwrap()
}

fn parse(text: &str) -> Vec<Value> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn jsonl(values: &[Value]) -> String {
    values.iter().map(|v| format!("{v}\n")).collect()
}

fn strings(values: &[Value]) -> Vec<String> {
    values.iter().map(Value::to_string).collect()
}

fn texts(cores: &[CoreMessage]) -> Vec<&str> {
    cores.iter().map(|c| c.text.as_str()).collect()
}

fn ids(cores: &[CoreMessage]) -> Vec<&str> {
    cores.iter().map(|c| c.id.as_str()).collect()
}

/// A summary core as the engine renders it.
fn summary(n: u32) -> CoreMessage {
    CoreMessage::text(
        format!("noa_summary_b{n}"),
        Role::User,
        format!(
            "[Compressed conversation section] — part {n}\nThe user asked for a fix; the assistant read two files and patched one.\n\n<noa-archive block=\"b{n}\" tier=\"1\" range=\"m00002-m00009\" path=\"/s/tier1/b{n}.md\"/>"
        ),
    )
}

/// Positions of the user's own text messages: exchange boundaries, where the
/// engine puts summaries.
fn user_texts(cores: &[CoreMessage]) -> Vec<usize> {
    (0..cores.len())
        .filter(|&i| {
            let c = &cores[i];
            c.role == Role::User && c.content_type == ContentType::Text && !c.opaque
        })
        .collect()
}

/// `cores` with `[a, b)` replaced by `s`.
fn compress(cores: &[CoreMessage], a: usize, b: usize, s: CoreMessage) -> Vec<CoreMessage> {
    let mut view = cores[..a].to_vec();
    view.push(s);
    view.extend_from_slice(&cores[b..]);
    view
}

/// The output read back in its own format: no errors, no warnings, and the
/// view's text in the view's order.
fn rereads_as(out: &[Value], format: Format, view: &[CoreMessage]) -> Transcript {
    let again = read("out", &jsonl(out), Some(format), BadLines::Fail).unwrap();
    assert!(again.warnings.is_empty(), "{:?}", again.warnings);
    assert_eq!(texts(&again.cores()), texts(view));
    again
}

fn assert_untagged(out: &[Value]) {
    let text = jsonl(out);
    assert!(!text.contains("<noa-ref"), "a ref tag reached the output");
}

/// The record a view core was read from.
fn record_of<'a>(t: &'a Transcript, id: &str) -> &'a Value {
    let b = t
        .messages
        .iter()
        .flat_map(|m| &m.blocks)
        .find(|b| b.id == id)
        .unwrap();
    &t.records[b.source.record]
}

fn uuid_shaped(s: &str) -> bool {
    let groups: Vec<&str> = s.split('-').collect();
    groups.iter().map(|g| g.len()).collect::<Vec<_>>() == [8, 4, 4, 4, 12]
        && groups.iter().all(|g| {
            g.chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        })
}

fn blocks_of(record: &Value) -> Vec<&Value> {
    record["message"]["content"]
        .as_array()
        .into_iter()
        .flatten()
        .collect()
}

// ---------------------------------------------------------------- claude-code

/// The untouched view gives back every line the model saw, each unchanged
/// but for its parent link, linked into one chain.
fn claude_code_full_view(text: &str) -> Vec<Value> {
    let t = load(text, Format::ClaudeCode);
    let out = materialize(&t, &t.cores());
    let lines = parse(text);
    let logged: HashMap<&str, &Value> = lines
        .iter()
        .filter_map(|v| Some((v.get("uuid")?.as_str()?, v)))
        .collect();

    for r in &out {
        let mut want = logged[r["uuid"].as_str().unwrap()].clone();
        want["parentUuid"] = r["parentUuid"].clone();
        assert_eq!(r.to_string(), want.to_string(), "a kept line changed");
        assert!(matches!(r["type"].as_str(), Some("user" | "assistant")));
    }
    let seen: HashSet<&str> = t
        .messages
        .iter()
        .flat_map(|m| &m.blocks)
        .map(|b| t.records[b.source.record]["uuid"].as_str().unwrap())
        .collect();
    let written: HashSet<&str> = out.iter().map(|r| r["uuid"].as_str().unwrap()).collect();
    assert_eq!(written, seen);
    assert_eq!(out.len(), seen.len(), "a line was written twice");

    assert_eq!(out[0]["parentUuid"], Value::Null);
    for w in out.windows(2) {
        assert_eq!(w[1]["parentUuid"], w[0]["uuid"]);
    }

    let signatures: Vec<(&str, &Value)> = out
        .iter()
        .flat_map(|r| blocks_of(r).into_iter().map(move |b| (r, b)))
        .filter(|(_, b)| b["type"] == "thinking")
        .map(|(r, b)| (r["uuid"].as_str().unwrap(), &b["signature"]))
        .collect();
    for (uuid, sig) in &signatures {
        let logged_sig = blocks_of(logged[uuid])
            .into_iter()
            .find(|b| b["type"] == "thinking")
            .map(|b| b["signature"].as_str().unwrap());
        assert_eq!(sig.as_str(), logged_sig, "thinking signature changed");
    }
    assert!(!signatures.is_empty());

    // What a request would not take is still there.
    assert!(
        out.iter()
            .flat_map(blocks_of)
            .any(|b| b.get("caller").is_some())
    );
    assert!(out.iter().any(|r| r.get("requestId").is_some()));
    assert!(out.iter().any(|r| r["message"].get("usage").is_some()));

    assert_untagged(&out);
    let again = rereads_as(&out, Format::ClaudeCode, &t.cores());
    assert_eq!(ids(&again.cores()), ids(&t.cores()));
    out
}

#[test]
fn claude_code_full_view_gives_back_every_model_visible_line() {
    claude_code_full_view(SHORT);
    claude_code_full_view(TOOL_HEAVY);
    claude_code_full_view(SUBAGENTS);
}

#[test]
fn claude_code_full_view_after_a_host_compaction_starts_at_its_summary() {
    let out = claude_code_full_view(LONG);
    assert_eq!(out[0]["isCompactSummary"], json!(true));
    assert!(out.iter().all(|r| r["type"] != "system"));
}

#[test]
fn claude_code_summary_stands_in_for_the_covered_lines() {
    let t = load(TOOL_HEAVY, Format::ClaudeCode);
    let cores = t.cores();
    let starts = user_texts(&cores);
    let (a, b) = (starts[1], starts[starts.len() - 1]);
    let s = summary(1);
    let view = compress(&cores, a, b, s.clone());
    let out = materialize(&t, &view);

    let written: HashSet<&str> = out.iter().map(|r| r["uuid"].as_str().unwrap()).collect();
    for c in &cores[a..b] {
        let uuid = record_of(&t, &c.id)["uuid"].as_str().unwrap();
        assert!(!written.contains(uuid), "a covered line is still there");
    }

    let i = out
        .iter()
        .position(|r| r["message"]["content"] == json!(s.text))
        .expect("the summary is written");
    let (before, r, after) = (&out[i - 1], &out[i], &out[i + 1]);
    assert_eq!(before["uuid"], record_of(&t, &view[a - 1].id)["uuid"]);
    assert_eq!(after["uuid"], record_of(&t, &view[a + 1].id)["uuid"]);

    let uuid = r["uuid"].as_str().unwrap();
    assert!(uuid_shaped(uuid), "{uuid}");
    let want = json!({
        "parentUuid": before["uuid"],
        "isSidechain": false,
        "userType": "external",
        "cwd": after["cwd"],
        "sessionId": t.session_id.as_deref().unwrap(),
        "version": after["version"],
        "gitBranch": after["gitBranch"],
        "type": "user",
        "message": { "role": "user", "content": s.text },
        "uuid": uuid,
        "timestamp": after["timestamp"],
    });
    assert_eq!(r.to_string(), want.to_string());
    assert_eq!(after["parentUuid"], json!(uuid));
    assert_eq!(out[0]["parentUuid"], Value::Null);
    for w in out.windows(2) {
        assert_eq!(w[1]["parentUuid"], w[0]["uuid"]);
    }

    assert_eq!(materialize(&t, &view), out, "not deterministic");
    assert_untagged(&out);
    rereads_as(&out, Format::ClaudeCode, &view);
}

/// A small log shaped like Claude Code's, with a user line of three blocks.
const MULTI_BLOCK_LOG: &str = r#"{"parentUuid":null,"isSidechain":false,"userType":"external","cwd":"/w","sessionId":"s-1","version":"2.1.39","gitBranch":"main","type":"user","message":{"role":"user","content":"read a.rs"},"uuid":"u1","timestamp":"2026-01-01T00:00:01Z"}
{"parentUuid":"u1","isSidechain":false,"userType":"external","cwd":"/w","sessionId":"s-1","version":"2.1.39","gitBranch":"main","message":{"model":"claude","id":"msg_1","type":"message","role":"assistant","content":[{"type":"tool_use","id":"t1","name":"Read","input":{"path":"a.rs"},"caller":{"type":"direct"}}],"usage":{"output_tokens":3}},"requestId":"r1","type":"assistant","uuid":"a1","timestamp":"2026-01-01T00:00:02Z"}
{"parentUuid":"a1","logicalParentUuid":"gone","isSidechain":false,"userType":"external","cwd":"/w","sessionId":"s-1","version":"2.1.39","gitBranch":"main","type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"fn main() {}"},{"type":"text","text":"first note"},{"type":"text","text":"second note"}]},"uuid":"u2","timestamp":"2026-01-01T00:00:03Z","toolUseResult":{"file":"a.rs"},"sourceToolAssistantUUID":"a1"}
{"parentUuid":"u2","isSidechain":false,"userType":"external","cwd":"/w","sessionId":"s-1","version":"2.1.39","gitBranch":"main","message":{"model":"claude","id":"msg_2","type":"message","role":"assistant","content":[{"type":"text","text":"Done."}]},"requestId":"r2","type":"assistant","uuid":"a2","timestamp":"2026-01-01T00:00:04Z"}
"#;

#[test]
fn claude_code_line_keeps_only_the_blocks_the_view_keeps() {
    let t = load(MULTI_BLOCK_LOG, Format::ClaudeCode);
    let cores = t.cores();
    assert_eq!(cores.len(), 6);
    let view: Vec<CoreMessage> = [0, 1, 2, 4, 5].iter().map(|&i| cores[i].clone()).collect();
    let out = materialize(&t, &view);
    assert_eq!(out.len(), 4);
    let mut want = parse(MULTI_BLOCK_LOG)[2].clone();
    want["message"]["content"] = json!([
        {"type": "tool_result", "tool_use_id": "t1", "content": "fn main() {}"},
        {"type": "text", "text": "second note"}
    ]);
    // Its parent stays, as it was already the line before; the logical
    // parent named a line that is not written.
    want.as_object_mut()
        .unwrap()
        .shift_remove("logicalParentUuid");
    assert_eq!(out[2].to_string(), want.to_string());
    rereads_as(&out, Format::ClaudeCode, &view);
}

#[test]
fn claude_code_line_split_by_a_summary_is_written_in_two_pieces() {
    let t = load(MULTI_BLOCK_LOG, Format::ClaudeCode);
    let cores = t.cores();
    let mut view = cores[..4].to_vec();
    view.push(summary(2));
    view.extend_from_slice(&cores[4..]);
    let out = materialize(&t, &view);
    let kinds: Vec<&str> = out.iter().map(|r| r["uuid"].as_str().unwrap()).collect();
    assert_eq!(kinds[..3], ["u1", "a1", "u2"]);
    assert_eq!(out.len(), 6);
    assert_eq!(blocks_of(&out[2]).len(), 2);
    assert_eq!(out[3]["message"]["content"], json!(summary(2).text));
    assert_eq!(
        blocks_of(&out[4]),
        [&json!({"type": "text", "text": "second note"})]
    );
    let second = out[4]["uuid"].as_str().unwrap();
    assert!(uuid_shaped(second) && second != "u2");
    assert_eq!(out[4]["toolUseResult"], json!({"file": "a.rs"}));
    let unique: HashSet<&str> = out.iter().map(|r| r["uuid"].as_str().unwrap()).collect();
    assert_eq!(unique.len(), out.len());
    for w in out.windows(2) {
        assert_eq!(w[1]["parentUuid"], w[0]["uuid"]);
    }
    rereads_as(&out, Format::ClaudeCode, &view);
}

// ---------------------------------------------------------------------- codex

fn response_items<'a>(lines: impl IntoIterator<Item = &'a Value>) -> Vec<Value> {
    lines
        .into_iter()
        .filter(|l| l["type"] == "response_item" && l["payload"]["type"] != "ghost_snapshot")
        .cloned()
        .collect()
}

#[test]
fn codex_full_view_gives_back_session_meta_and_every_response_item() {
    let t = load(CODEX_PLAIN, Format::Codex);
    let out = materialize(&t, &t.cores());
    let lines = parse(CODEX_PLAIN);
    let mut want = vec![
        lines
            .iter()
            .find(|l| l["type"] == "session_meta")
            .unwrap()
            .clone(),
    ];
    want.extend(response_items(&lines));
    assert_eq!(strings(&out), strings(&want));
    assert_untagged(&out);
    let again = rereads_as(&out, Format::Codex, &t.cores());
    assert_eq!(ids(&again.cores()), ids(&t.cores()));
    assert_eq!(again.session_id, t.session_id);
}

#[test]
fn codex_full_view_after_a_compaction_writes_its_history_as_items() {
    let t = load(CODEX_COMPACTED, Format::Codex);
    let out = materialize(&t, &t.cores());
    let lines = parse(CODEX_COMPACTED);
    let at = lines.iter().position(|l| l["type"] == "compacted").unwrap();
    let compacted = &lines[at];
    let mut want = vec![lines[0].clone()];
    assert_eq!(want[0]["type"], "session_meta");
    for item in compacted["payload"]["replacement_history"]
        .as_array()
        .unwrap()
    {
        want.push(json!({
            "timestamp": compacted["timestamp"],
            "type": "response_item",
            "payload": item,
        }));
    }
    want.extend(response_items(&lines[at + 1..]));
    assert_eq!(strings(&out), strings(&want));
    assert!(out.iter().all(|l| l["type"] != "compacted"));
    assert_untagged(&out);
    let again = rereads_as(&out, Format::Codex, &t.cores());
    assert_eq!(ids(&again.cores()), ids(&t.cores()));
}

#[test]
fn codex_summary_stands_in_for_the_covered_items() {
    let t = load(CODEX_PLAIN, Format::Codex);
    let cores = t.cores();
    let starts = user_texts(&cores);
    let (a, b) = (starts[1], starts[starts.len() - 2]);
    let s = summary(1);
    let view = compress(&cores, a, b, s.clone());
    let out = materialize(&t, &view);

    // session_meta, the kept items in view order, the summary in its place.
    let mut want: Vec<Value> = t.preamble.clone();
    for c in &view {
        if c.id == s.id {
            want.push(Value::Null);
        } else {
            want.push(record_of(&t, &c.id).clone());
        }
    }
    let i = want.iter().position(Value::is_null).unwrap();
    want[i] = json!({
        "timestamp": want[i + 1]["timestamp"],
        "type": "response_item",
        "payload": {
            "type": "message",
            "role": "user",
            "content": [{ "type": "input_text", "text": s.text }],
        },
    });
    assert_eq!(strings(&out), strings(&want));
    assert_untagged(&out);
    rereads_as(&out, Format::Codex, &view);
}

#[test]
fn codex_message_keeps_only_the_parts_the_view_keeps() {
    let t = load(CODEX_COMPACTED, Format::Codex);
    let m = t
        .messages
        .iter()
        .find(|m| m.blocks.len() == 4 && m.blocks[2].opaque)
        .expect("a user message with an image");
    let dropped = m.blocks[1].id.clone();
    let record = m.blocks[1].source.record;
    let view: Vec<CoreMessage> = t.cores().into_iter().filter(|c| c.id != dropped).collect();
    let out = materialize(&t, &view);

    let mut want = t.records[record].clone();
    let parts = want["payload"]["content"].as_array().unwrap().clone();
    want["payload"]["content"] = json!([parts[0], parts[2], parts[3]]);
    let want = want.to_string();
    assert!(out.iter().map(Value::to_string).any(|l| l == want));
    assert_eq!(out.len(), 1 + t.records.len());
    rereads_as(&out, Format::Codex, &view);
}

#[test]
fn codex_summary_with_nothing_after_it_takes_the_time_before_it() {
    let t = load(CODEX_PLAIN, Format::Codex);
    let mut view = t.cores();
    view.push(summary(3));
    let out = materialize(&t, &view);
    let n = out.len();
    assert_eq!(out[n - 1]["timestamp"], out[n - 2]["timestamp"]);
    rereads_as(&out, Format::Codex, &view);
}

// ----------------------------------------------------------------------- chat

const CHAT_LOG: &str = r#"{"role":"system","content":"You are terse.","x_host":{"id":1}}
{"role":"user","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}},{"type":"text","text":"and this"}],"name":"marco"}
{"role":"assistant","content":"Checking.","reasoning_content":"think first","tool_calls":[{"id":"c1","type":"function","function":{"name":"ls","arguments":"{\"path\":\".\"}"}},{"id":"c2","type":"function","function":{"name":"cat","arguments":"{}"}}],"refusal":null,"annotations":[],"x_usage":{"tokens":3}}
{"role":"tool","tool_call_id":"c1","content":"a b","x_ms":12}
{"role":"tool","tool_call_id":"c2","content":[{"type":"text","text":"x"}]}
{"role":"user","content":"next"}
{"role":"assistant","content":"Done.","x_finish":"stop"}
"#;

#[test]
fn chat_full_view_gives_back_every_message_in_every_form() {
    let messages = parse(CHAT_LOG);
    let array = Value::Array(messages.clone()).to_string();
    let body = json!({ "model": "m", "messages": messages }).to_string();
    for text in [CHAT_LOG, array.as_str(), body.as_str()] {
        let t = load(text, Format::Chat);
        let out = materialize(&t, &t.cores());
        assert_eq!(strings(&out), strings(&messages));
        rereads_as(&out, Format::Chat, &t.cores());
    }
}

#[test]
fn chat_real_session_comes_back_with_its_unknown_fields() {
    // A real session's view as chat messages, each given a field no request knows.
    let cc = load(TOOL_HEAVY, Format::ClaudeCode);
    let (messages, _) = reassemble(&cc, &cc.cores(), ViewFormat::Chat);
    let messages: Vec<Value> = messages
        .into_iter()
        .enumerate()
        .map(|(i, mut m)| {
            m["x_host_seq"] = json!(i);
            m
        })
        .collect();
    let t = load(&json!({ "messages": messages }).to_string(), Format::Chat);
    let out = materialize(&t, &t.cores());
    assert_eq!(strings(&out), strings(&messages));
    assert_untagged(&out);
    rereads_as(&out, Format::Chat, &t.cores());
}

#[test]
fn chat_summary_and_cuts_keep_the_rest_of_each_message() {
    let t = load(CHAT_LOG, Format::Chat);
    let cores = t.cores();
    let find = |text: &str| cores.iter().position(|c| c.text == text).unwrap();
    let drop: HashSet<usize> = [
        find("and this"),
        find("think first"),
        find("Checking."),
        find("{}"),
        find("x"),
    ]
    .into();
    let mut view: Vec<CoreMessage> = (0..cores.len())
        .filter(|i| !drop.contains(i))
        .map(|i| cores[i].clone())
        .collect();
    let s = summary(1);
    let next = view.iter().position(|c| c.text == "next").unwrap();
    view.insert(next, s.clone());
    let out = materialize(&t, &view);

    let m = parse(CHAT_LOG);
    let want = vec![
        m[0].clone(),
        json!({"role":"user","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}],"name":"marco"}),
        json!({"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"ls","arguments":"{\"path\":\".\"}"}}],"refusal":null,"annotations":[],"x_usage":{"tokens":3}}),
        m[3].clone(),
        json!({"role": "user", "content": s.text}),
        m[5].clone(),
        m[6].clone(),
    ];
    assert_eq!(strings(&out), strings(&want));
    assert_untagged(&out);
    rereads_as(&out, Format::Chat, &view);
}

// ------------------------------------------------------------------ anthropic

/// The messages of a real Claude Code session as an Anthropic message list:
/// response metadata (`id`, `model`, `usage`) and block fields like `caller`
/// included.
fn anthropic_messages() -> Vec<Value> {
    parse(SHORT)
        .into_iter()
        .filter(|r| matches!(r["type"].as_str(), Some("user" | "assistant")))
        .map(|r| r["message"].clone())
        .collect()
}

fn carries_a_block(m: &Value) -> bool {
    match &m["content"] {
        Value::String(s) => !s.trim().is_empty(),
        Value::Array(blocks) => blocks
            .iter()
            .any(|b| b["type"] != "text" || !b["text"].as_str().unwrap_or("").trim().is_empty()),
        _ => false,
    }
}

#[test]
fn anthropic_full_view_gives_back_every_message_unchanged() {
    let messages = anthropic_messages();
    let t = load(
        &Value::Array(messages.clone()).to_string(),
        Format::Anthropic,
    );
    let out = materialize(&t, &t.cores());
    let want: Vec<Value> = messages.into_iter().filter(carries_a_block).collect();
    assert_eq!(strings(&out), strings(&want));
    let blocks: Vec<&Value> = out
        .iter()
        .flat_map(|m| m["content"].as_array().into_iter().flatten())
        .collect();
    assert!(blocks.iter().any(|b| b.get("caller").is_some()));
    assert!(
        blocks
            .iter()
            .any(|b| b["type"] == "thinking" && b["signature"].is_string())
    );
    assert!(out.iter().any(|m| m.get("usage").is_some()));
    assert_untagged(&out);
    let again = rereads_as(&out, Format::Anthropic, &t.cores());
    assert_eq!(ids(&again.cores()), ids(&t.cores()));
}

#[test]
fn anthropic_summary_stands_in_for_the_covered_messages() {
    let messages = anthropic_messages();
    let t = load(&jsonl(&messages), Format::Anthropic);
    let cores = t.cores();
    let s = summary(1);
    let view = compress(&cores, 1, cores.len() - 1, s.clone());
    let out = materialize(&t, &view);
    let want = vec![
        record_of(&t, &cores[0].id).clone(),
        json!({"role": "user", "content": s.text}),
        record_of(&t, &cores[cores.len() - 1].id).clone(),
    ];
    assert_eq!(strings(&out), strings(&want));
    assert_untagged(&out);
    rereads_as(&out, Format::Anthropic, &view);
}

#[test]
fn anthropic_message_keeps_only_the_blocks_the_view_keeps() {
    let log = r#"{"role":"user","content":"Fix the bug."}
{"id":"msg_1","type":"message","role":"assistant","model":"claude","content":[{"type":"thinking","thinking":"Where?","signature":"EqQBCkgIARAB+/sig=="},{"type":"text","text":"Reading."},{"type":"tool_use","id":"t1","name":"Read","input":{"path":"a.rs"},"caller":{"type":"direct"}},{"type":"tool_use","id":"t2","name":"Read","input":{"path":"b.rs"}}],"stop_reason":"tool_use","usage":{"input_tokens":1}}
{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"fn a() {}"},{"type":"tool_result","tool_use_id":"t2","content":"fn b() {}","is_error":false}]}
"#;
    let t = load(log, Format::Anthropic);
    let view: Vec<CoreMessage> = t
        .cores()
        .into_iter()
        .filter(|c| c.text != "Reading.")
        .collect();
    let out = materialize(&t, &view);
    let mut want = parse(log);
    let blocks = want[1]["content"].as_array().unwrap().clone();
    want[1]["content"] = json!([blocks[0], blocks[2], blocks[3]]);
    assert_eq!(strings(&out), strings(&want));
    rereads_as(&out, Format::Anthropic, &view);
}

// ---------------------------------------------------------------- all formats

#[test]
fn ref_tags_in_the_view_text_never_reach_the_output() {
    // Kept blocks are written from the originals, so even a view whose text
    // still carries tags writes none.
    let cases = [
        (SHORT, Format::ClaudeCode),
        (CODEX_PLAIN, Format::Codex),
        (CHAT_LOG, Format::Chat),
    ];
    for (text, format) in cases {
        let t = load(text, format);
        let view: Vec<CoreMessage> = t
            .cores()
            .into_iter()
            .map(|mut c| {
                if c.is_taggable() {
                    c.text.push_str("\n<noa-ref id=\"m00001\" tokens=\"7\"/>");
                }
                c
            })
            .collect();
        let out = materialize(&t, &view);
        assert_untagged(&out);
        assert_eq!(out, materialize(&t, &t.cores()));
    }
}

#[test]
fn every_block_knows_its_place_in_its_record() {
    // The index materialize relies on: each block's slot names, in its
    // record, a value that is the block's request form or holds it.
    for (text, format) in [
        (SHORT, Format::ClaudeCode),
        (CODEX_COMPACTED, Format::Codex),
        (CHAT_LOG, Format::Chat),
    ] {
        let t = load(text, format);
        for b in t.messages.iter().flat_map(|m| &m.blocks) {
            let r = &t.records[b.source.record];
            let content = match format {
                Format::ClaudeCode => &r["message"]["content"],
                Format::Codex => &r["payload"]["content"],
                _ => &r["content"],
            };
            let at = match b.source.slot {
                Slot::Part(i) => &content[i],
                Slot::ToolCall(i) => &r["tool_calls"][i],
                Slot::Reasoning => &r["reasoning_content"],
                Slot::Content if format == Format::Codex => &r["payload"],
                Slot::Content => content,
            };
            assert!(!at.is_null(), "{:?} points at nothing", b.source);
        }
    }
}

// ------------------------------------------------------------ compress calls

/// A Claude Code log with two Compress exchanges, each after the stretch its
/// block covers; the second is followed by one more reply.
fn two_compress_calls_log() -> String {
    let mut lines = Vec::new();
    let mut parent = Value::Null;
    let mut push = |n: usize, kind: &str, message: Value| {
        let uuid = format!("00000000-0000-4000-8000-{n:012}");
        lines.push(json!({
            "parentUuid": parent, "isSidechain": false, "userType": "external", "cwd": "/w",
            "sessionId": "s-2", "version": "2.1.39", "gitBranch": "main", "type": kind,
            "message": message, "uuid": uuid,
            "timestamp": format!("2026-01-01T00:00:{n:02}Z"),
        }));
        parent = json!(uuid);
    };
    let user = |text: &str| json!({"role": "user", "content": text});
    let say = |id: &str, text: &str| json!({"id": id, "type": "message", "role": "assistant", "content": [{"type": "text", "text": text}]});
    let call = |id: &str, tool: &str, input: Value| json!({"id": format!("msg_{id}"), "type": "message", "role": "assistant", "content": [{"type": "tool_use", "id": id, "name": tool, "input": input}]});
    let result = |id: &str, text: &str| json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": text}]});
    let compress = |summary: &str| json!({"topic": "done", "content": [{"startId": "m00002", "endId": "m00005", "summary": summary}]});
    push(
        1,
        "user",
        user("Fix the parser, then the lexer, then the docs."),
    );
    push(2, "user", user("Start with src/parse.rs."));
    push(
        3,
        "assistant",
        call("toolu_read_1", "Read", json!({"path": "src/parse.rs"})),
    );
    push(4, "user", result("toolu_read_1", "fn parse() { todo!() }"));
    push(5, "assistant", say("msg_a1", "Patched the parser."));
    push(
        6,
        "assistant",
        call(
            "toolu_compress_1",
            "Compress",
            compress("SUMMARY ONE: the parser was patched."),
        ),
    );
    push(
        7,
        "user",
        result(
            "toolu_compress_1",
            "▣ noa | 1.2K → 0.1K tokens | b1 m00002-m00005",
        ),
    );
    push(8, "user", user("Now the lexer in src/lex.rs."));
    push(
        9,
        "assistant",
        call("toolu_read_2", "Read", json!({"path": "src/lex.rs"})),
    );
    push(10, "user", result("toolu_read_2", "fn lex() { todo!() }"));
    push(11, "assistant", say("msg_a2", "Patched the lexer."));
    push(
        12,
        "assistant",
        call(
            "toolu_compress_2",
            "Compress",
            compress("SUMMARY TWO: the lexer was patched."),
        ),
    );
    push(
        13,
        "user",
        result(
            "toolu_compress_2",
            "▣ noa | 1.1K → 0.1K tokens | b2 m00007-m00010",
        ),
    );
    push(14, "user", user("And the docs?"));
    push(15, "assistant", say("msg_a3", "Docs are next."));
    jsonl(&lines)
}

#[test]
fn spent_compress_exchanges_are_left_out_and_their_summaries_stay() {
    use crate::engine::Config;
    use crate::engine::Sections;
    use crate::engine::{Block, CompressionState, Name};
    use crate::engine::{TurnInput, project};

    let log = two_compress_calls_log();
    let t = load(&log, Format::ClaudeCode);
    let cores = t.cores();
    let texts_of = |from: &str, to: &str| -> Vec<Name> {
        let a = cores.iter().position(|c| c.text.contains(from)).unwrap();
        let b = cores.iter().position(|c| c.text.contains(to)).unwrap();
        cores[a..=b].iter().map(|c| c.id.clone()).collect()
    };
    let block = |id: &str, call: &str, summary: &str, covers: Vec<Name>| Block {
        block_id: id.into(),
        tier: 1,
        topic: "done".into(),
        summary: summary.into(),
        direct_message_ids: covers.clone(),
        effective_message_ids: covers,
        direct_block_ids: Vec::new(),
        archive_path: format!("/s/tier1/{id}.md"),
        archive_rel: format!("tier1/{id}.md"),
        compressed_tokens: 1000,
        start_ref: String::new(),
        end_ref: String::new(),
        created_at: 0,
        active: true,
        compress_call_id: call.into(),
    };
    let mut state = CompressionState::new("s-2");
    state.blocks.push(block(
        "b1",
        "toolu_compress_1",
        "SUMMARY ONE: the parser was patched.",
        texts_of("Start with src/parse.rs.", "Patched the parser."),
    ));
    state.blocks.push(block(
        "b2",
        "toolu_compress_2",
        "SUMMARY TWO: the lexer was patched.",
        texts_of("Now the lexer", "Patched the lexer."),
    ));
    let config = Config::default();

    // The live view still shows the latest exchange: the model reads its panel.
    let live = project(
        &mut state.clone(),
        &TurnInput {
            history: &cores,
            config: &config,
            input_tokens: None,
            recorded: &[],
            sections: &Sections::default(),
            force_nudge: false,
            for_call: false,
            cuts: &IdMap::default(),
        },
    )
    .view;
    assert!(
        live.iter().any(
            |c| c.tool_call_id == "toolu_compress_2" && c.content_type == ContentType::ToolCall
        )
    );

    let view = crate::engine::resumable_view(&state, &cores, &config);
    let out = materialize(&t, &view);
    let text = jsonl(&out);
    for gone in [
        "toolu_compress_1",
        "toolu_compress_2",
        "\"Compress\"",
        "▣ noa",
    ] {
        assert!(
            !text.contains(gone),
            "{gone} is still in the output:\n{text}"
        );
    }
    for summary in ["SUMMARY ONE", "SUMMARY TWO"] {
        assert_eq!(text.matches(summary).count(), 1, "{summary}:\n{text}");
    }
    for covered in ["Patched the parser.", "fn lex()", "toolu_read_1"] {
        assert!(!text.contains(covered), "{covered} was covered:\n{text}");
    }
    for kept in ["Fix the parser", "And the docs?", "Docs are next."] {
        assert!(text.contains(kept), "{kept} is missing:\n{text}");
    }
    assert_eq!(out[0]["parentUuid"], Value::Null);
    for w in out.windows(2) {
        assert_eq!(w[1]["parentUuid"], w[0]["uuid"]);
    }
    assert_untagged(&out);
    rereads_as(&out, Format::ClaudeCode, &view);
}
