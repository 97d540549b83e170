//! Provider request rules, checked on every view noa writes.
//!
//! Each checker states what the provider's API accepts in a request's
//! message list; a view that breaks any rule would be refused as it stands.

use std::collections::HashSet;

use serde_json::Value;

use crate::common::{TempDir, project, real_transcripts};

fn keys_within(v: &Value, allowed: &[&str], what: &str) -> Result<(), String> {
    let obj = v
        .as_object()
        .ok_or(format!("{what} is not an object: {v}"))?;
    match obj.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err(format!(
            "{what} carries field {k:?}, which the request does not take"
        )),
        None => Ok(()),
    }
}

/// Anthropic Messages: alternating turns, every tool_use answered first thing
/// in the next user message, every tool_result answering the turn before it,
/// no empty or whitespace-only text, request fields only.
pub fn check_anthropic(view: &[Value]) -> Result<(), String> {
    let mut pending: HashSet<String> = HashSet::new();
    let mut prev_role = "";
    for (i, m) in view.iter().enumerate() {
        let at = format!("message {i}");
        keys_within(m, &["role", "content"], &at)?;
        let role = m["role"].as_str().ok_or(format!("{at}: no role"))?;
        if role != "user" && role != "assistant" {
            return Err(format!("{at}: role {role:?}"));
        }
        if role == prev_role && role == "user" {
            return Err(format!("{at}: two user messages in a row"));
        }
        let blocks: Vec<Value> = match &m["content"] {
            Value::String(s) if !s.trim().is_empty() => {
                vec![serde_json::json!({"type": "text", "text": s})]
            }
            Value::Array(b) if !b.is_empty() => b.clone(),
            other => return Err(format!("{at}: empty or invalid content {other}")),
        };
        if role == "user" {
            let mut seen_other = false;
            let mut answered = HashSet::new();
            for b in &blocks {
                if b["type"] == "tool_result" {
                    if seen_other {
                        return Err(format!("{at}: tool_result after other content"));
                    }
                    let id = b["tool_use_id"].as_str().unwrap_or("").to_string();
                    if !pending.contains(&id) {
                        return Err(format!(
                            "{at}: tool_result {id} answers no tool_use of the previous message"
                        ));
                    }
                    answered.insert(id);
                } else {
                    seen_other = true;
                }
            }
            if answered != pending {
                return Err(format!(
                    "{at}: tool_use {:?} not answered here",
                    pending.difference(&answered).collect::<Vec<_>>()
                ));
            }
            pending.clear();
        } else if !pending.is_empty() {
            return Err(format!("{at}: tool_use {pending:?} left unanswered"));
        }
        if blocks
            .last()
            .is_some_and(|b| b["type"] == "thinking" || b["type"] == "redacted_thinking")
        {
            return Err(format!("{at}: thinking with nothing after it in its turn"));
        }
        for b in &blocks {
            check_anthropic_block(b, role, &at)?;
            if b["type"] == "tool_use" {
                pending.insert(b["id"].as_str().unwrap_or("").to_string());
            }
        }
        prev_role = role;
    }
    if !pending.is_empty() {
        return Err(format!(
            "the view ends with unanswered tool_use {pending:?}"
        ));
    }
    Ok(())
}

fn check_anthropic_block(b: &Value, role: &str, at: &str) -> Result<(), String> {
    let kind = b["type"]
        .as_str()
        .ok_or(format!("{at}: block without type"))?;
    let (allowed, side): (&[&str], &str) = match kind {
        "text" => (&["type", "text", "citations", "cache_control"], "any"),
        "thinking" => (&["type", "thinking", "signature"], "assistant"),
        "redacted_thinking" => (&["type", "data"], "assistant"),
        "tool_use" => (
            &["type", "id", "name", "input", "cache_control"],
            "assistant",
        ),
        "tool_result" => (
            &[
                "type",
                "tool_use_id",
                "content",
                "is_error",
                "cache_control",
            ],
            "user",
        ),
        "image" | "document" => (
            &[
                "type",
                "source",
                "title",
                "context",
                "citations",
                "cache_control",
            ],
            "user",
        ),
        other => return Err(format!("{at}: unexpected block type {other:?}")),
    };
    keys_within(b, allowed, &format!("{at} {kind} block"))?;
    if side != "any" && side != role {
        return Err(format!("{at}: {kind} block in a {role} message"));
    }
    if kind == "text" && b["text"].as_str().is_none_or(|t| t.trim().is_empty()) {
        return Err(format!("{at}: empty text block"));
    }
    if kind == "thinking" && b["signature"].as_str().is_none() {
        return Err(format!("{at}: thinking without a signature"));
    }
    Ok(())
}

/// Chat Completions: tool calls answered by the tool messages right after
/// their assistant message, every tool message answering one, request fields only.
pub fn check_chat(view: &[Value]) -> Result<(), String> {
    let mut pending: HashSet<String> = HashSet::new();
    for (i, m) in view.iter().enumerate() {
        let at = format!("message {i}");
        keys_within(
            m,
            &[
                "role",
                "content",
                "name",
                "tool_calls",
                "tool_call_id",
                "reasoning_content",
                "refusal",
            ],
            &at,
        )?;
        let role = m["role"].as_str().unwrap_or("");
        match role {
            "tool" => {
                let id = m["tool_call_id"].as_str().unwrap_or("");
                if !pending.remove(id) {
                    return Err(format!("{at}: tool message {id} answers no open call"));
                }
            }
            "system" | "developer" | "user" | "assistant" => {
                if !pending.is_empty() {
                    return Err(format!(
                        "{at}: calls {pending:?} not answered before the next message"
                    ));
                }
                if role == "assistant" {
                    for c in m["tool_calls"].as_array().into_iter().flatten() {
                        keys_within(c, &["id", "type", "function"], &format!("{at} tool call"))?;
                        if !c["function"]["arguments"].is_string() {
                            return Err(format!("{at}: tool call arguments must be a JSON string"));
                        }
                        pending.insert(c["id"].as_str().unwrap_or("").to_string());
                    }
                    if m["content"].is_null() && m.get("tool_calls").is_none() {
                        return Err(format!(
                            "{at}: assistant message with neither content nor tool calls"
                        ));
                    }
                } else if m["content"].is_null() {
                    return Err(format!("{at}: {role} message without content"));
                }
            }
            other => return Err(format!("{at}: role {other:?}")),
        }
    }
    match pending.is_empty() {
        true => Ok(()),
        false => Err(format!("the view ends with unanswered calls {pending:?}")),
    }
}

/// Responses input items: every call answered by an output with its call_id,
/// every output answering an earlier call, reasoning followed by the item it
/// produced, no host bookkeeping items.
pub fn check_responses(view: &[Value]) -> Result<(), String> {
    let mut calls: HashSet<String> = HashSet::new();
    let mut answered: HashSet<String> = HashSet::new();
    for (i, item) in view.iter().enumerate() {
        let at = format!("item {i}");
        let kind = item["type"].as_str().ok_or(format!("{at}: no type"))?;
        match kind {
            "message" => {
                keys_within(
                    item,
                    &["type", "role", "content", "phase", "id", "status"],
                    &at,
                )?;
                let role = item["role"].as_str().unwrap_or("");
                let parts: &[&str] = match role {
                    "assistant" => &["output_text", "refusal"],
                    "user" | "system" | "developer" => &["input_text", "input_image", "input_file"],
                    other => return Err(format!("{at}: role {other:?}")),
                };
                for p in item["content"]
                    .as_array()
                    .ok_or(format!("{at}: content is not a list"))?
                {
                    if !parts.contains(&p["type"].as_str().unwrap_or("")) {
                        return Err(format!("{at}: {} part in a {role} message", p["type"]));
                    }
                }
            }
            "function_call" | "custom_tool_call" | "local_shell_call" => {
                calls.insert(item["call_id"].as_str().unwrap_or("").to_string());
            }
            "function_call_output" | "custom_tool_call_output" | "local_shell_call_output" => {
                let id = item["call_id"].as_str().unwrap_or("").to_string();
                if !calls.contains(&id) || !answered.insert(id.clone()) {
                    return Err(format!("{at}: output {id} answers no earlier call"));
                }
            }
            "reasoning" => {
                let next = view.get(i + 1).map(|n| {
                    (
                        n["type"].as_str().unwrap_or(""),
                        n["role"].as_str().unwrap_or(""),
                    )
                });
                match next {
                    Some(("message", "assistant"))
                    | Some((
                        "function_call" | "custom_tool_call" | "web_search_call"
                        | "local_shell_call",
                        _,
                    )) => {}
                    Some(("reasoning", _)) => {}
                    other => return Err(format!("{at}: reasoning followed by {other:?}")),
                }
            }
            "ghost_snapshot" => return Err(format!("{at}: host bookkeeping item")),
            _ => {}
        }
    }
    match calls.difference(&answered).next() {
        Some(id) => Err(format!("call {id} has no output")),
        None => Ok(()),
    }
}

fn check(view_format: &str, view: &[Value]) -> Result<(), String> {
    match view_format {
        "anthropic" => check_anthropic(view),
        "chat" => check_chat(view),
        "responses" => check_responses(view),
        other => panic!("no checker for {other}"),
    }
}

#[test]
fn every_real_transcript_projects_to_a_valid_request() {
    for (path, view_format) in real_transcripts() {
        let dir = TempDir::new();
        let (view, _) = project(&path, dir.path(), &[]);
        assert!(!view.is_empty(), "{}: empty view", path.display());
        if let Err(e) = check(view_format, &view) {
            panic!(
                "{}: {view_format} view breaks the provider's rules: {e}",
                path.display()
            );
        }
    }
}

#[test]
fn conversions_are_valid_requests_too() {
    for (path, _) in real_transcripts() {
        for to in ["chat", "anthropic", "responses"] {
            let dir = TempDir::new();
            let (view, _) = project(&path, dir.path(), &["--to", to, "--dry-run"]);
            if let Err(e) = check(to, &view) {
                panic!("{} --to {to}: {e}", path.display());
            }
        }
    }
}

#[test]
fn thinking_signatures_come_back_byte_identical() {
    let path = crate::common::testdata("real/claude-code/short.jsonl");
    let input = std::fs::read_to_string(&path).unwrap();
    let mut signatures = HashSet::new();
    for line in input.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        for b in v["message"]["content"].as_array().into_iter().flatten() {
            if let Some(s) = b["signature"].as_str() {
                signatures.insert(s.to_string());
            }
        }
    }
    assert!(!signatures.is_empty());
    let dir = TempDir::new();
    let (view, out) = project(&path, dir.path(), &[]);
    let raw_view = String::from_utf8(out.stdout).unwrap();
    let mut seen = 0;
    for m in &view {
        for b in m["content"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|b| b["type"] == "thinking")
        {
            let sig = b["signature"].as_str().unwrap();
            assert!(signatures.contains(sig), "signature changed: {sig}");
            // The serialized bytes carry the signature exactly as it came in.
            assert!(raw_view.contains(&serde_json::to_string(sig).unwrap()));
            seen += 1;
        }
    }
    assert_eq!(seen, signatures.len());
}

#[test]
fn checkers_catch_broken_views() {
    use serde_json::json;
    let unanswered = [
        json!({"role": "user", "content": "hi"}),
        json!({"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "x", "input": {}}]}),
    ];
    assert!(check_anthropic(&unanswered).is_err());
    let metadata = [json!({"role": "user", "content": "hi", "id": "msg_1"})];
    assert!(check_anthropic(&metadata).is_err());
    let orphan = [json!({"role": "tool", "tool_call_id": "x", "content": "out"})];
    assert!(check_chat(&orphan).is_err());
    let dangling = [
        json!({"type": "reasoning", "summary": []}),
        json!({"type": "message", "role": "user", "content": []}),
    ];
    assert!(check_responses(&dangling).is_err());
}
