//! What the provider billed, as the transcript records it: each response's
//! token usage, and where each Compress call was made.
//!
//! Read apart from the conversation, for a session's bill: every response
//! the provider answered was billed, on whatever branch, so this counts
//! them all, each once. Claude Code writes a response's usage on each of
//! its records (one a content block), under the response's `message.id`;
//! Codex writes a `token_count` event after each response and repeats it
//! after the response's tool outputs, with the session's running total
//! unchanged. Chat and Anthropic logs record no usage.

use serde_json::Value;

use super::Format;
use super::jsonl::lines;
use crate::engine::{COMPRESS_TOOL, ResponseUsage, UsageLog};

/// The usage `text`, a log of `format`, records. Lines that do not parse
/// are passed over: the conversation's reader reports them.
pub fn read_usage(text: &str, format: Format) -> UsageLog {
    let mut log = UsageLog::default();
    let mut seen = std::collections::HashSet::new();
    let mut total = None;
    for (at, line) in lines(text).enumerate() {
        let line_no = at + 1;
        // Most lines hold none of these: they are not parsed.
        let answer = !log.calls.is_empty()
            && (line.contains("tool_result") || line.contains("function_call_output"));
        if !answer && !line.contains("usage") && !line.contains(COMPRESS_TOOL) {
            continue;
        }
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        match format {
            Format::ClaudeCode => claude_code_line(&v, line_no, &mut seen, &mut log),
            Format::Codex => codex_line(&v, line_no, &mut total, &mut log),
            _ => {}
        }
    }
    log
}

fn claude_code_line(
    v: &Value,
    line: usize,
    seen: &mut std::collections::HashSet<String>,
    log: &mut UsageLog,
) {
    let Some(message) = v.get("message") else {
        return;
    };
    for block in message
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let text = |k: &str| block.get(k).and_then(Value::as_str);
        match text("type") {
            Some("tool_use") if text("name") == Some(COMPRESS_TOOL) => {
                if let Some(id) = text("id") {
                    log.calls.push((id.to_string(), line).into());
                }
            }
            Some("tool_result") => answered(log, text("tool_use_id"), line),
            _ => {}
        }
    }
    if v.get("type").and_then(Value::as_str) != Some("assistant") {
        return;
    }
    let Some(usage) = message.get("usage") else {
        return;
    };
    let field = |k: &str| usage.get(k).and_then(Value::as_u64).unwrap_or(0);
    let response = ResponseUsage {
        line,
        fresh: field("input_tokens"),
        cache_write: field("cache_creation_input_tokens"),
        cache_read: field("cache_read_input_tokens"),
        output: field("output_tokens"),
        reasoning: 0,
    };
    // A usage of nothing is a message the host wrote itself.
    if response.prompt() == 0 {
        return;
    }
    let id = message
        .get("id")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if id.is_empty() || seen.insert(id.to_string()) {
        log.responses.push(response);
    }
}

/// Notes that the Compress call `id`, if it is one, was answered on `line`.
fn answered(log: &mut UsageLog, id: Option<&str>, line: usize) {
    if let Some(call) = (log.calls.iter_mut()).find(|c| Some(c.id.as_str()) == id) {
        call.answered.get_or_insert(line);
    }
}

fn codex_line(v: &Value, line: usize, total: &mut Option<u64>, log: &mut UsageLog) {
    let Some(p) = v.get("payload") else {
        return;
    };
    let kind = |k: &str| p.get("type").and_then(Value::as_str) == Some(k);
    if kind("function_call_output") {
        answered(log, p.get("call_id").and_then(Value::as_str), line);
        return;
    }
    if kind("function_call")
        && p.get("name").and_then(Value::as_str) == Some(COMPRESS_TOOL)
        && let Some(id) = p.get("call_id").and_then(Value::as_str)
    {
        log.calls.push((id.to_string(), line).into());
        return;
    }
    if !kind("token_count") {
        return;
    }
    let Some(last) = p.pointer("/info/last_token_usage") else {
        return;
    };
    // A repeat of the last event says nothing new.
    let running = p
        .pointer("/info/total_token_usage/total_tokens")
        .and_then(Value::as_u64);
    if running.is_some() && running == *total {
        return;
    }
    *total = running;
    let field = |k: &str| last.get(k).and_then(Value::as_u64).unwrap_or(0);
    let (input, cached) = (field("input_tokens"), field("cached_input_tokens"));
    log.responses.push(ResponseUsage {
        line,
        fresh: input.saturating_sub(cached),
        cache_write: 0,
        cache_read: cached.min(input),
        output: field("output_tokens"),
        reasoning: field("reasoning_output_tokens"),
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claude_code_response_counts_once_across_its_records() {
        let usage = r#""usage":{"input_tokens":10,"cache_creation_input_tokens":200,"cache_read_input_tokens":3000,"output_tokens":40}"#;
        let text = format!(
            "{{\"type\":\"assistant\",\"message\":{{\"id\":\"r1\",\"content\":[{{\"type\":\"text\",\"text\":\"a\"}}],{usage}}}}}\n\
             {{\"type\":\"assistant\",\"message\":{{\"id\":\"r1\",\"content\":[{{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":\"Compress\",\"input\":{{}}}}],{usage}}}}}\n"
        );
        let log = read_usage(&text, Format::ClaudeCode);
        assert_eq!(log.responses.len(), 1);
        let r = log.responses[0];
        assert_eq!(
            (r.line, r.fresh, r.cache_write, r.cache_read, r.output),
            (1, 10, 200, 3000, 40)
        );
        assert_eq!(log.calls.len(), 1);
        assert_eq!((log.calls[0].id.as_str(), log.calls[0].line), ("t1", 2));
    }

    #[test]
    fn a_repeated_codex_count_is_passed_over() {
        let event = |total: u64| {
            format!(
                "{{\"type\":\"event_msg\",\"payload\":{{\"type\":\"token_count\",\"info\":{{\"total_token_usage\":{{\"total_tokens\":{total}}},\"last_token_usage\":{{\"input_tokens\":100,\"cached_input_tokens\":60,\"output_tokens\":7,\"reasoning_output_tokens\":3}}}}}}}}\n"
            )
        };
        let text = [event(107), event(107), event(214)].concat();
        let log = read_usage(&text, Format::Codex);
        let lines: Vec<usize> = log.responses.iter().map(|r| r.line).collect();
        assert_eq!(lines, [1, 3]);
        let r = log.responses[0];
        assert_eq!(
            (r.fresh, r.cache_read, r.output, r.reasoning),
            (40, 60, 7, 3)
        );
    }
}
