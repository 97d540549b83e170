//! Each format read and written back with nothing changed gives back what
//! came in: the request fields of every message, byte for byte.

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::{BadLines, Format, ViewFormat, read, reassemble, reassemble_among};
use crate::engine::{ContentType, CoreMessage, Edit};

fn round_trip(text: &str, format: Format) -> Vec<Value> {
    let t = read("t", text, Some(format), BadLines::Fail).unwrap();
    let (out, warnings) = reassemble(&t, &t.cores(), format.view_format());
    assert!(warnings.is_empty(), "{warnings:?}");
    out
}

fn lines(values: &[Value]) -> String {
    values.iter().map(|v| format!("{v}\n")).collect()
}

#[test]
fn chat_messages_come_back_unchanged() {
    let input = vec![
        json!({"role": "system", "content": "You are terse."}),
        json!({"role": "user", "content": [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}),
        json!({"role": "assistant", "content": "Checking.", "reasoning_content": "think first", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{\"path\":\".\"}"}},
            {"id": "c2", "type": "function", "function": {"name": "cat", "arguments": "{}"}}]}),
        json!({"role": "tool", "tool_call_id": "c1", "content": "a b"}),
        json!({"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": "x"}]}),
        json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c3", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]}),
        json!({"role": "tool", "tool_call_id": "c3", "content": ""}),
        json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c4", "type": "function", "function": {"name": "ls", "arguments": ""}}]}),
        json!({"role": "tool", "tool_call_id": "c4", "content": null}),
        json!({"role": "assistant", "content": "Done."}),
    ];
    assert_eq!(round_trip(&lines(&input), Format::Chat), input);
}

#[test]
fn chat_array_and_request_body_forms_read_alike() {
    let msgs =
        json!([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]);
    let as_array = round_trip(&msgs.to_string(), Format::Chat);
    let as_body = round_trip(
        &json!({"model": "m", "messages": msgs}).to_string(),
        Format::Chat,
    );
    assert_eq!(as_array, msgs.as_array().unwrap().clone());
    assert_eq!(as_body, as_array);
}

#[test]
fn anthropic_messages_come_back_unchanged() {
    let input = vec![
        json!({"role": "user", "content": "Fix the bug."}),
        json!({"role": "assistant", "content": [
            {"type": "thinking", "thinking": "Where is it?", "signature": "EqQBCkgIARABGAIiQL+/sig=="},
            {"type": "redacted_thinking", "data": "opaque=="},
            {"type": "text", "text": "Reading."},
            {"type": "tool_use", "id": "t1", "name": "Read", "input": {"path": "a.rs", "n": 3}}]}),
        json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "fn main() {}", "is_error": false},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}},
            {"type": "text", "text": "also this"}]}),
        json!({"role": "assistant", "content": [{"type": "text", "text": "Fixed."}]}),
    ];
    assert_eq!(round_trip(&lines(&input), Format::Anthropic), input);
}

#[test]
fn anthropic_response_metadata_is_not_a_request_field() {
    let input = json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude", "stop_reason": "end_turn",
        "usage": {"input_tokens": 1}, "content": [{"type": "tool_use", "id": "t", "name": "x", "input": {}, "caller": {"type": "direct"}}]});
    let t = read(
        "t",
        &format!("{input}\n"),
        Some(Format::Anthropic),
        BadLines::Fail,
    )
    .unwrap();
    let (view, _) = reassemble(&t, &t.cores(), ViewFormat::Anthropic);
    assert_eq!(
        view,
        [
            json!({"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "x", "input": {}}]})
        ]
    );
}

#[test]
fn codex_items_come_back_byte_identical() {
    let text = include_str!("../../testdata/real/codex/rollout-plain.jsonl");
    let expected: String = text
        .lines()
        .filter_map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (v["type"] == "response_item").then(|| format!("{}\n", v["payload"]))
        })
        .collect();
    assert_eq!(lines(&round_trip(text, Format::Codex)), expected);
}

#[test]
fn claude_code_blocks_come_back_as_they_were() {
    let text = include_str!("../../testdata/real/claude-code/short.jsonl");
    let out = round_trip(text, Format::ClaudeCode);
    // Every block written is a block of the log with only request fields:
    // each field it has, it has with the logged value.
    let mut logged = Vec::new();
    for l in text.lines() {
        let v: Value = serde_json::from_str(l).unwrap();
        if let Some(blocks) = v["message"]["content"].as_array() {
            logged.extend(blocks.iter().cloned());
        }
    }
    let mut written = out.iter().filter(|m| m["content"].is_string()).count();
    for m in &out {
        for b in m["content"].as_array().into_iter().flatten() {
            let fields = b.as_object().unwrap();
            let found = logged
                .iter()
                .any(|l| fields.iter().all(|(k, v)| l.get(k) == Some(v)));
            assert!(found, "block not in the log as written: {b}");
            written += 1;
        }
    }
    assert_eq!(written, t_blocks(text));
}

fn t_blocks(text: &str) -> usize {
    read("t", text, None, BadLines::Fail).unwrap().cores().len()
}

#[test]
fn conversions_warn_about_what_they_drop() {
    let text = include_str!("../../testdata/real/claude-code/short.jsonl");
    let t = read("t", text, None, BadLines::Fail).unwrap();
    let (_, warnings) = reassemble(&t, &t.cores(), ViewFormat::Chat);
    assert!(
        warnings.iter().any(|w| w.contains("reasoning")),
        "{warnings:?}"
    );
}

#[test]
fn detection_tells_the_formats_apart() {
    use super::detect;
    let cases = [
        (
            include_str!("../../testdata/real/codex/rollout-plain.jsonl"),
            Format::Codex,
        ),
        (
            include_str!("../../testdata/real/claude-code/short.jsonl"),
            Format::ClaudeCode,
        ),
        (
            include_str!("../../testdata/real/claude-code-edge/edge-cases.jsonl"),
            Format::ClaudeCode,
        ),
        (
            "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"t\",\"content\":\"x\"}]}\n",
            Format::Anthropic,
        ),
        (
            "{\"role\":\"tool\",\"tool_call_id\":\"c\",\"content\":\"x\"}\n",
            Format::Chat,
        ),
        ("[{\"role\":\"user\",\"content\":\"hi\"}]", Format::Chat),
    ];
    for (text, want) in cases {
        assert_eq!(detect("t", text).unwrap(), want);
    }
    assert!(detect("t", "{\"a\":1}\n").is_err());
    assert!(detect("t", "").is_err());
}

#[test]
fn ids_ignore_a_tag_the_host_echoed_back() {
    let plain = read(
        "t",
        "{\"role\":\"user\",\"content\":\"hello\"}\n",
        Some(Format::Chat),
        BadLines::Fail,
    )
    .unwrap();
    let tagged = read(
        "t",
        "{\"role\":\"user\",\"content\":\"hello\\n<noa-ref id=\\\"m00001\\\" tokens=\\\"2\\\"/>\"}\n",
        Some(Format::Chat),
        BadLines::Fail,
    )
    .unwrap();
    assert_eq!(plain.cores()[0].id, tagged.cores()[0].id);
}

#[test]
fn repeated_blocks_get_numbered_ids() {
    let text = "{\"role\":\"user\",\"content\":\"again\"}\n{\"role\":\"assistant\",\"content\":\"ok\"}\n{\"role\":\"user\",\"content\":\"again\"}\n";
    let ids: Vec<String> = read("t", text, Some(Format::Chat), BadLines::Fail)
        .unwrap()
        .cores()
        .into_iter()
        .map(|c| c.id.to_string())
        .collect();
    assert_eq!(ids[2], format!("{}_1", ids[0]));
}

/// A log read keeping its records and letting them go gives the same
/// transcript but for the records.
fn reads_alike_without_records(text: &str, format: Format) {
    let read = |keep| super::read_owned("t", text.into(), format, BadLines::Skip, keep).unwrap();
    let (kept, let_go) = (read(true), read(false));
    assert!(!kept.records.is_empty() && let_go.records.is_empty());
    assert_eq!(kept.cores(), let_go.cores());
    assert_eq!(kept.warnings, let_go.warnings);
    assert_eq!(kept.resume, let_go.resume);
    assert_eq!(kept.preamble, let_go.preamble);
    let view = |t: &super::Transcript| reassemble(t, &t.cores(), format.view_format()).0;
    assert_eq!(view(&kept), view(&let_go));
}

#[test]
fn a_claude_code_log_read_without_its_records_gives_the_same_messages() {
    for text in [
        include_str!("../../testdata/real/claude-code/long-session-with-compaction.jsonl"),
        include_str!("../../testdata/real/claude-code/spawns-subagents.jsonl"),
        include_str!("../../testdata/real/claude-code/tool-heavy.jsonl"),
        include_str!("../../testdata/real/claude-code-edge/edge-cases.jsonl"),
    ] {
        reads_alike_without_records(text, Format::ClaudeCode);
    }
}

/// A Claude Code log's lines are read lean first and its conversation's
/// records parsed whole after: a record only the whole parse rejects (an
/// unpaired surrogate escape, which a lean read passes over) is still a bad
/// line, placed at its line, and skipping it keeps the rest.
#[test]
fn a_claude_code_record_only_a_whole_parse_rejects_is_a_bad_line() {
    let record = |uuid: &str, parent: Option<&str>, kind: &str, text: &str| {
        let body = json!({"role": kind, "content": [{"type": "text", "text": "TEXT"}]});
        let line = json!({"type": kind, "uuid": uuid, "parentUuid": parent, "message": body});
        line.to_string().replace("TEXT", text)
    };
    let log = [
        record("a", None, "user", "hello"),
        record("b", Some("a"), "assistant", "bad \\ud800 escape"),
        record("c", Some("b"), "user", "still here"),
    ]
    .join("\n")
        + "\n";
    let err = read("t", &log, Some(Format::ClaudeCode), BadLines::Fail).unwrap_err();
    assert!(err.to_string().contains("t:2:"), "{err}");
    let t = read("t", &log, Some(Format::ClaudeCode), BadLines::Skip).unwrap();
    let texts: Vec<String> = t.cores().into_iter().map(|c| c.text).collect();
    assert_eq!(texts, ["hello", "still here"]);
    assert!(
        t.warnings.iter().any(|w| w.contains("skipped bad line")),
        "{:?}",
        t.warnings
    );
    // One far into the log stops it at its own line all the same.
    let mut long: Vec<String> = (0..1_500)
        .map(|i| {
            let (kind, parent) = if i % 2 == 0 {
                ("user", i)
            } else {
                ("assistant", i)
            };
            let parent = (parent > 0).then(|| format!("r{}", parent - 1));
            record(
                &format!("r{i}"),
                parent.as_deref(),
                kind,
                &format!("step {i}"),
            )
        })
        .collect();
    long[1_201] = record("r1201", Some("r1200"), "assistant", "bad \\ud800 escape");
    let long = long.join("\n") + "\n";
    let err = read("t", &long, Some(Format::ClaudeCode), BadLines::Fail).unwrap_err();
    assert!(err.to_string().contains("t:1202:"), "{err}");
    let t = read("t", &long, Some(Format::ClaudeCode), BadLines::Skip).unwrap();
    assert_eq!(t.cores().len(), 1_499);
}

#[test]
fn a_message_log_read_without_its_records_gives_the_same_messages() {
    let chat = lines(&[
        json!({"role": "system", "content": "Be brief."}),
        json!({"role": "user", "content": "Read the file."}),
        json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "Read", "arguments": "{\"path\":\"a.rs\"}"}}]}),
        json!({"role": "tool", "tool_call_id": "c1", "content": "fn main() {}"}),
        json!({"role": "nobody", "content": "skipped"}),
        json!({"role": "assistant", "content": "Done."}),
    ]);
    let anthropic = lines(&[
        json!({"role": "user", "content": "Read the file."}),
        json!({"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {"path": "a.rs"}}]}),
        json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "fn main() {}"}]}),
    ]);
    reads_alike_without_records(&chat, Format::Chat);
    reads_alike_without_records(&anthropic, Format::Anthropic);
}

#[test]
fn a_codex_rollout_read_without_its_lines_gives_the_same_messages() {
    for text in [
        include_str!("../../testdata/real/codex/rollout-plain.jsonl"),
        include_str!("../../testdata/real/codex/rollout-with-remote-compaction.jsonl"),
    ] {
        reads_alike_without_records(text, Format::Codex);
    }
}

#[test]
fn chat_words_are_held_once() {
    let input = [
        json!({"role": "user", "content": [{"type": "text", "text": "look"}]}),
        json!({"role": "assistant", "content": "Checking.", "reasoning_content": "think first", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{\"path\":\".\"}"}}]}),
        json!({"role": "tool", "tool_call_id": "c1", "content": "a b"}),
    ];
    let t = read("t", &lines(&input), Some(Format::Chat), BadLines::Fail).unwrap();
    let blocks: Vec<_> = (t.messages.iter())
        .flat_map(|m| m.blocks.iter().zip(&m.cores))
        .collect();
    assert_eq!(blocks.len(), 5);
    for (b, core) in blocks {
        assert!(!core.text.is_empty());
        assert!(!b.raw.to_string().contains(&core.text), "{}", b.raw);
    }
}

#[test]
fn anthropic_shaped_words_are_held_once() {
    // Every block that carries words as a string keeps them in its core
    // only: its JSON holds a null in their place, which writing fills.
    let text = include_str!("../../testdata/real/claude-code/long-session-with-compaction.jsonl");
    let t = read("t", text, Some(Format::ClaudeCode), BadLines::Fail).unwrap();
    let mut held_once = 0;
    for b in t.messages.iter().flat_map(|m| &m.blocks) {
        let words_in_json = |k: &str| b.raw.value().get(k).is_some_and(|v| !v.is_null());
        assert!(
            !words_in_json("text") && !words_in_json("thinking") && !words_in_json("input"),
            "words held twice: {}",
            b.raw
        );
        if super::anthropic::words_key(b, &b.raw.value()).is_some() {
            held_once += 1;
        }
    }
    assert!(held_once > 100, "{held_once}");
    // And the view written from them is the log's blocks, words in place.
    let out = round_trip(text, Format::ClaudeCode);
    let written: usize = out
        .iter()
        .map(|m| m["content"].as_array().map_or(1, Vec::len))
        .sum();
    assert_eq!(written, t.cores().len());
    for b in out.iter().filter_map(|m| m["content"].as_array()).flatten() {
        for k in ["text", "thinking", "content"] {
            assert!(!b.get(k).is_some_and(Value::is_null), "{b}");
        }
    }
}

#[test]
fn edited_words_are_written_from_the_view_with_the_rest_as_logged() {
    // Each format's words live in the cores alone: a tag the view appends
    // and an output it cuts are written from the view, with every other
    // field of the block as logged.
    let chat = [
        json!({"role": "user", "content": [{"type": "text", "text": "look", "cache_control": {"type": "ephemeral"}}]}),
        json!({"role": "assistant", "content": "Checking.", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]}),
        json!({"role": "tool", "tool_call_id": "c1", "content": "a b"}),
    ];
    let anthropic = [
        json!({"role": "user", "content": [{"type": "text", "text": "look", "cache_control": {"type": "ephemeral"}}]}),
        json!({"role": "assistant", "content": [{"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "c1", "name": "ls", "input": {}}]}),
        json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "a b", "is_error": false}]}),
    ];
    for (input, format) in [(chat, Format::Chat), (anthropic, Format::Anthropic)] {
        let t = read("t", &lines(&input), Some(format), BadLines::Fail).unwrap();
        let mut view = t.cores();
        view[0].append_tag("m00001");
        view[3].replace_text("[cut]".into(), Edit::Truncated(String::new()));
        let (out, _) = reassemble(&t, &view, format.view_format());
        let text = lines(&out);
        assert!(text.contains(&view[0].text.replace('\n', "\\n")), "{text}");
        assert!(
            text.contains("\"cache_control\":{\"type\":\"ephemeral\"}"),
            "{text}"
        );
        assert!(text.contains("[cut]") && !text.contains("a b"), "{text}");
        assert!(text.contains("Checking."), "{text}");
    }
}

#[test]
fn a_codex_rollout_writes_edited_words_from_the_view() {
    let text = include_str!("../../testdata/real/codex/rollout-plain.jsonl");
    let t = read("t", text, Some(Format::Codex), BadLines::Fail).unwrap();
    let mut view = t.cores();
    let kind = |c: &CoreMessage, k| !c.opaque && c.content_type == k;
    let said = view
        .iter()
        .position(|c| kind(c, ContentType::Text))
        .unwrap();
    let output = view
        .iter()
        .position(|c| kind(c, ContentType::ToolResult))
        .unwrap();
    view[said].append_tag("m00001");
    view[output].replace_text("[cut]".into(), Edit::Truncated(String::new()));
    let (out, _) = reassemble(&t, &view, ViewFormat::Responses);
    let written = lines(&out);
    // Every item's words are written, as the view holds them: as JSON
    // strings, escapes and all, less the quotes.
    let mut words = 0;
    for c in view.iter().filter(|c| !c.opaque && !c.text.is_empty()) {
        let quoted = Value::String(c.text.clone()).to_string();
        assert!(
            written.contains(&quoted[1..quoted.len() - 1]),
            "lost: {}",
            c.text
        );
        words += 1;
    }
    assert!(words > 3, "{words}");
    assert!(!written.contains(&t.cores()[output].text));
}

/// Ids hashed on several threads are the ids one thread gives: each run of
/// messages is hashed in place, and repeats are numbered across the runs
/// once all are hashed.
#[test]
fn ids_hashed_on_threads_are_the_ids_one_thread_gives() {
    // Over a megabyte of words, with repeats that land in different runs.
    let text: String = (0..3_000)
        .map(|i| {
            let words = format!("output {} ", i % 40).repeat(60);
            let line =
                json!({"role": if i % 2 == 0 { "user" } else { "assistant" }, "content": words});
            format!("{line}\n")
        })
        .collect();
    let t = read("t", &text, None, BadLines::Fail).unwrap();
    let ids = |t: &super::Transcript| -> Vec<String> {
        (t.messages.iter().flat_map(|m| &m.blocks))
            .map(|b| b.id.to_string())
            .collect()
    };
    // The blocks as read, before hashing: no ids.
    let mut unhashed = t.messages.clone();
    for core in unhashed.iter_mut().flat_map(|m| &mut m.cores) {
        core.id = Default::default();
    }
    let hashed_on = |threads| {
        let mut messages = unhashed.clone();
        super::hash_the_rest_on(&mut messages, threads);
        let cores = messages.iter().flat_map(|m| &m.cores);
        cores.map(|c| c.id.to_string()).collect::<Vec<_>>()
    };
    let one = hashed_on(1);
    assert!(one.iter().all(|id| !id.is_empty()));
    for threads in [2, 3, 4] {
        assert_eq!(hashed_on(threads), one, "{threads} threads");
    }
    // Repeats are numbered in order, on the bases the threads gave.
    assert!(
        ids(&t).iter().any(|id| id.ends_with("_74")),
        "{:?}",
        &ids(&t)[..3]
    );
}

/// Told which blocks the view leaves out, the writer passes them over
/// without looking them up, and writes what it writes when it looks up
/// every block: over real logs, every format written, with views that fold
/// away runs of messages, single blocks of a message and nothing at all.
#[test]
fn a_view_written_knowing_what_it_leaves_out_is_the_view_written_looking_everything_up() {
    let logs = [
        (
            include_str!("../../testdata/real/claude-code/tool-heavy.jsonl"),
            Format::ClaudeCode,
        ),
        (
            include_str!("../../testdata/real/claude-code/long-session-with-compaction.jsonl"),
            Format::ClaudeCode,
        ),
        (
            include_str!("../../testdata/real/codex/rollout-plain.jsonl"),
            Format::Codex,
        ),
    ];
    for (text, format) in logs {
        let t = read("t", text, Some(format), BadLines::Fail).unwrap();
        let cores = t.cores();
        for fold in [
            |_: usize| false,
            |i: usize| !i.is_multiple_of(3),
            |i: usize| i < 40 || i % 7 == 2,
        ] {
            let hidden: Vec<bool> = (0..cores.len()).map(fold).collect();
            let view: Vec<CoreMessage> = (cores.iter().zip(&hidden))
                .filter(|(_, h)| !**h)
                .map(|(m, _)| m.clone())
                .collect();
            for to in [
                ViewFormat::Anthropic,
                ViewFormat::Chat,
                ViewFormat::Responses,
            ] {
                assert_eq!(
                    reassemble_among(&t, &view, to, &hidden),
                    reassemble(&t, &view, to),
                    "{format:?} to {to:?}"
                );
            }
        }
    }
}
