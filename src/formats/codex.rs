//! Codex rollouts (`{timestamp, type, payload}` lines) and the Responses API
//! input items their views are written as.
//!
//! Only `response_item` payloads reach the model; `event_msg` lines are UI
//! copies of them. A `compacted` line replaces everything before it with its
//! `replacement_history`.

use serde_json::{Value, json};

use super::anthropic::ToolNames;
use super::reassemble::{BlockEdit, Emitted};
use super::{BadLines, Block, Format, HostMessage, ReadError, Transcript, jsonl};
use crate::engine::{ContentType, CoreMessage, Role};

const EXPECTED: &str =
    "each line is one Codex rollout item: {\"timestamp\": ..., \"type\": ..., \"payload\": {...}}";

/// Item types that are host bookkeeping, never sent to the model.
const HOST_ONLY_ITEMS: [&str; 1] = ["ghost_snapshot"];

/// Reads a rollout.
pub(crate) fn read(name: &str, text: &str, bad: BadLines) -> Result<Transcript, ReadError> {
    let mut warnings = Vec::new();
    let records = jsonl::records(name, text, EXPECTED, bad, &mut warnings)?;
    let mut session_id = None;
    let mut items: Vec<(usize, Value)> = Vec::new();
    for r in records {
        let kind = r.value.get("type").and_then(Value::as_str).unwrap_or("");
        let payload = r.value.get("payload");
        match (kind, payload) {
            ("session_meta", Some(p)) => {
                if session_id.is_none() {
                    session_id = p.get("id").and_then(Value::as_str).map(str::to_string);
                }
            }
            ("response_item", Some(p)) => items.push((r.line, p.clone())),
            ("compacted", Some(p)) => {
                if let Some(history) = p.get("replacement_history").and_then(Value::as_array) {
                    items = history.iter().map(|h| (r.line, h.clone())).collect();
                } else {
                    let message = p.get("message").and_then(Value::as_str).unwrap_or("");
                    let summary = json!({ "type": "message", "role": "user",
                        "content": [{ "type": "input_text", "text": message }] });
                    items = vec![(r.line, summary)];
                }
            }
            ("event_msg" | "turn_context", _) => {}
            _ => warnings.push(format!(
                "{name}:{}: unknown rollout line type {kind:?}; skipped",
                r.line
            )),
        }
    }
    let mut tools = ToolNames::default();
    let messages = items
        .into_iter()
        .filter_map(|(line, item)| host_message(item, line, &mut tools))
        .collect();
    Ok(Transcript {
        format: Format::Codex,
        session_id,
        messages,
        warnings,
    })
}

fn host_message(item: Value, line: usize, tools: &mut ToolNames) -> Option<HostMessage> {
    let kind = item
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if HOST_ONLY_ITEMS.contains(&kind.as_str()) {
        return None;
    }
    let s = |k: &str| {
        item.get(k)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let mut blocks = Vec::new();
    match kind.as_str() {
        "message" => {
            let role = match s("role").as_str() {
                "assistant" => Role::Assistant,
                "system" | "developer" => Role::System,
                _ => Role::User,
            };
            for part in item
                .get("content")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let core = match part.get("text").and_then(Value::as_str) {
                    Some(t) => CoreMessage::text("", role, t),
                    None => CoreMessage {
                        opaque: true,
                        ..CoreMessage::text("", role, "[image]")
                    },
                };
                blocks.push(Block {
                    core,
                    raw: part.clone(),
                });
            }
        }
        "reasoning" => {
            let text = reasoning_text(&item);
            blocks.push(Block {
                core: CoreMessage::reasoning("", text),
                raw: Value::Null,
            });
        }
        "function_call" | "custom_tool_call" | "local_shell_call" => {
            let (id, name) = (s("call_id"), s("name"));
            let args = match kind.as_str() {
                "function_call" => s("arguments"),
                "custom_tool_call" => s("input"),
                _ => item.get("action").map(Value::to_string).unwrap_or_default(),
            };
            let name = if name.is_empty() { kind.clone() } else { name };
            tools.note(&id, &name);
            blocks.push(Block {
                core: CoreMessage::tool_call("", id, name, args),
                raw: Value::Null,
            });
        }
        "function_call_output" | "custom_tool_call_output" | "local_shell_call_output" => {
            let id = s("call_id");
            let text = super::anthropic::result_text(item.get("output"));
            blocks.push(Block {
                core: CoreMessage::tool_result("", id.clone(), tools.get(&id), text),
                raw: Value::Null,
            });
        }
        "compaction" | "compaction_summary" => {
            let core = CoreMessage {
                opaque: true,
                ..CoreMessage::text("", Role::System, "[compacted history]")
            };
            blocks.push(Block {
                core,
                raw: Value::Null,
            });
        }
        _ => {
            let core = CoreMessage {
                opaque: true,
                ..CoreMessage::text("", Role::Assistant, format!("[{kind}]"))
            };
            blocks.push(Block {
                core,
                raw: Value::Null,
            });
        }
    }
    // Whole-item blocks keep the item itself as their raw form.
    if kind != "message"
        && let Some(b) = blocks.first_mut()
    {
        b.raw = item.clone();
    }
    Some(HostMessage {
        raw: item,
        blocks,
        line,
    })
}

/// Reasoning summaries and any plain reasoning text, joined.
fn reasoning_text(item: &Value) -> String {
    ["summary", "content"]
        .iter()
        .filter_map(|k| item.get(*k).and_then(Value::as_array))
        .flatten()
        .filter_map(|p| p.get("text").and_then(Value::as_str))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Writes one item from its original and the blocks the view keeps.
pub(crate) fn rebuild(msg: &HostMessage, parts: &[(&Block, BlockEdit)]) -> Value {
    let mut item = msg.raw.clone();
    if item["type"] == "message" {
        let content: Vec<Value> = parts
            .iter()
            .map(|(b, edit)| {
                let mut p = b.raw.clone();
                if let (false, Some(Value::String(t))) = (edit.is_none(), p.get_mut("text")) {
                    *t = edit.apply_str(t);
                }
                p
            })
            .collect();
        item["content"] = Value::Array(content);
        return item;
    }
    if let (Some((b, edit)), Some(obj)) = (parts.first(), item.as_object_mut())
        && b.core.content_type == ContentType::ToolResult
        && !edit.is_none()
    {
        let output = obj.remove("output").unwrap_or(Value::Null);
        obj.insert("output".into(), edit.apply_content(output, "input_text"));
    }
    item
}

/// Writes items from cores alone: synthetic messages and conversions.
pub(crate) fn synthesize(cores: &[&CoreMessage], out: &mut Emitted) {
    for c in cores {
        match c.content_type {
            _ if c.opaque => out.lost("an opaque block (image or provider item)"),
            ContentType::Reasoning => out.lost("reasoning (Responses needs its encrypted form)"),
            ContentType::Text => {
                let (role, part) = match c.role {
                    Role::Assistant => ("assistant", "output_text"),
                    Role::System => ("developer", "input_text"),
                    _ => ("user", "input_text"),
                };
                out.push(json!({ "type": "message", "role": role, "content": [{ "type": part, "text": c.text }] }));
            }
            ContentType::ToolCall => out.push(json!({
                "type": "function_call", "call_id": c.tool_call_id, "name": c.tool_name, "arguments": c.text
            })),
            ContentType::ToolResult => {
                out.push(json!({ "type": "function_call_output", "call_id": c.tool_call_id, "output": c.text }));
            }
        }
    }
}
