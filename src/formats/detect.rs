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
    // Records are parsed one at a time, up to the first that decides.
    let (mut any, mut plain_messages) = (false, false);
    for v in samples(text) {
        if let Some(f) = decisive(&v) {
            return Ok(f);
        }
        any = true;
        plain_messages |= v.get("role").is_some();
    }
    if !any {
        return Err(ReadError::UnknownFormat {
            name: name.to_string(),
            why: "no JSON records in the first lines".into(),
        });
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

/// The first records worth looking at, whichever container holds them:
/// those of a JSON document, or else the log's lines, parsed as they are
/// asked for.
fn samples(text: &str) -> impl Iterator<Item = Value> + '_ {
    let listed = listed(text);
    let lines = listed.is_none().then(|| {
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .take(LOOKAHEAD)
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(Value::is_object)
    });
    (listed.into_iter().flatten().take(LOOKAHEAD)).chain(lines.into_iter().flatten())
}

/// The records of a transcript that is one JSON document: a list of them,
/// or an object that lists them under `messages`.
fn listed(text: &str) -> Option<Vec<Value>> {
    let trimmed = text.trim_start();
    if !(trimmed.starts_with('[') || trimmed.starts_with('{')) {
        return None;
    }
    match serde_json::from_str::<Value>(text).ok()? {
        Value::Array(items) => Some(items),
        Value::Object(mut o) if o.get("role").is_none() => match o.remove("messages") {
            Some(Value::Array(items)) => Some(items),
            _ => None,
        },
        _ => None,
    }
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
