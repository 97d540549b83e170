//! Telling a transcript's format from its first records.

use serde_json::Value;

use super::{Format, ReadError};

/// How many records detection looks at before giving up.
pub(crate) const LOOKAHEAD: usize = 50;

/// Detects the format from the first records (or the first messages of a
/// JSON array or `{"messages": [...]}` document).
pub fn detect(name: &str, text: &str) -> Result<Format, ReadError> {
    if text.trim().is_empty() {
        return Err(ReadError::UnknownFormat {
            name: name.to_string(),
            why: if text.is_empty() {
                "the file is empty".into()
            } else {
                "the file holds only blank lines".into()
            },
        });
    }
    let samples = samples(text);
    if samples.is_empty() {
        return Err(ReadError::UnknownFormat {
            name: name.to_string(),
            why: "no JSON records in the first lines".into(),
        });
    }
    let mut plain_messages = false;
    for v in &samples {
        if let Some(f) = decisive(v) {
            return Ok(f);
        }
        plain_messages |= v.get("role").is_some();
    }
    if plain_messages {
        // Plain-text role/content messages read the same either way.
        return Ok(Format::Chat);
    }
    Err(ReadError::UnknownFormat {
        name: name.to_string(),
        why: "the first records have neither a rollout \"type\"/\"payload\", a session record \"type\", nor a message \"role\"".into(),
    })
}

/// The first records worth looking at, whichever container holds them.
fn samples(text: &str) -> Vec<Value> {
    let trimmed = text.trim_start();
    if (trimmed.starts_with('[') || trimmed.starts_with('{'))
        && let Ok(doc) = serde_json::from_str::<Value>(text)
    {
        let list = match &doc {
            Value::Array(items) => Some(items.clone()),
            Value::Object(o) if o.get("role").is_none() => {
                o.get("messages").and_then(Value::as_array).cloned()
            }
            _ => None,
        };
        if let Some(items) = list {
            return items.into_iter().take(LOOKAHEAD).collect();
        }
    }
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .take(LOOKAHEAD)
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(Value::is_object)
        .collect()
}

/// A record that by itself says which format it is from.
fn decisive(v: &Value) -> Option<Format> {
    let kind = v.get("type").and_then(Value::as_str);
    if v.get("payload").is_some()
        && matches!(
            kind,
            Some("session_meta" | "response_item" | "turn_context" | "event_msg" | "compacted")
        )
    {
        return Some(Format::Codex);
    }
    if matches!(
        kind,
        Some(
            "user"
                | "assistant"
                | "system"
                | "progress"
                | "summary"
                | "file-history-snapshot"
                | "queue-operation"
        )
    ) && (v.get("uuid").is_some()
        || v.get("sessionId").is_some()
        || v.get("message").is_some()
        || kind == Some("summary"))
    {
        return Some(Format::ClaudeCode);
    }
    v.get("role")?;
    if v.get("tool_calls").is_some()
        || v.get("tool_call_id").is_some()
        || v.get("reasoning_content").is_some()
    {
        return Some(Format::Chat);
    }
    if matches!(
        v.get("role").and_then(Value::as_str),
        Some("system" | "developer" | "tool")
    ) {
        return Some(Format::Chat);
    }
    let blocks = v.get("content").and_then(Value::as_array)?;
    blocks
        .iter()
        .find_map(|b| match b.get("type").and_then(Value::as_str)? {
            "tool_use" | "tool_result" | "thinking" | "redacted_thinking" | "image" => {
                Some(Format::Anthropic)
            }
            "image_url" | "input_audio" => Some(Format::Chat),
            _ => None,
        })
}
