//! Anthropic Messages: `{role, content}` with string or block content.
//!
//! Claude Code records carry the same message shape, so its reader builds its
//! messages here too.

use std::collections::HashMap;

use serde_json::{Map, Value, json};

use super::message_log::MessageLog;
use super::reassemble::{BlockEdit, Emitted, read_words, shown_text};
use super::{
    BlockSource, ContentBlock, Format, HostMessage, RawJson, ReadBlock, Slot, take_string,
};
use crate::engine::{COMPRESS_TOOL, ContentType, CoreMessage, IdHash, Name, Role};

const EXPECTED: &str = "each line (or array item) is one Anthropic message: {\"role\": \"user\"|\"assistant\", \"content\": string or blocks}";

/// Reads Anthropic messages: JSONL, a JSON array, or `{"messages": [...]}`.
pub(crate) const LOG: MessageLog = MessageLog {
    format: Format::Anthropic,
    expected: EXPECTED,
    skipped: "not an Anthropic user/assistant message",
    message: host_message,
};

/// Remembers tool names by call id, so a result can say which tool made it.
#[derive(Default)]
pub(crate) struct ToolNames<'a> {
    named: HashMap<Name, Name, IdHash>,
    /// The flat history read before these lines, when reading on: a result
    /// that answers a call of its finds it from the latest back, so a turn
    /// names the few calls it needs rather than indexing all of them.
    earlier: &'a [CoreMessage],
}

impl<'a> ToolNames<'a> {
    /// Names that go on from the calls of `earlier`.
    pub(crate) fn after(earlier: &'a [CoreMessage]) -> ToolNames<'a> {
        ToolNames {
            named: HashMap::default(),
            earlier,
        }
    }
    pub(crate) fn note(&mut self, call_id: &str, tool: &str) {
        self.named.insert(Name::new(call_id), Name::new(tool));
    }
    pub(crate) fn get(&self, call_id: &str) -> Name {
        let earlier = || {
            self.earlier
                .iter()
                .rev()
                .find(|c| c.content_type == ContentType::ToolCall && c.tool_call_id == call_id)
                .map(|c| c.tool_name.clone())
        };
        self.named
            .get(call_id)
            .cloned()
            .or_else(earlier)
            .unwrap_or_default()
    }
}

/// Builds a host message from an Anthropic message object; `None` when the
/// value is not a user or assistant message. `record` is the index its blocks
/// name as their source in the transcript's records. The words are moved out
/// of `msg`, not copied: each block's core holds them, and its JSON keeps
/// their place (see [`words_key`]).
pub(crate) fn host_message(
    msg: &mut Value,
    line: usize,
    record: usize,
    tools: &mut ToolNames,
) -> Option<HostMessage> {
    let role = msg.get("role")?.as_str()?;
    let assistant = match role {
        "user" => false,
        "assistant" => true,
        _ => return None,
    };
    let role = role.to_string();
    let mut blocks = Vec::new();
    // The blocks carry the content; the message keeps only its form.
    let form = match msg.get_mut("content")? {
        Value::String(s) => {
            if !s.trim().is_empty() {
                let r = if assistant {
                    Role::Assistant
                } else {
                    Role::User
                };
                blocks.push(ReadBlock {
                    core: CoreMessage::text("", r, std::mem::take(s)),
                    raw: json!({ "type": "text", "text": null }).into(),
                    source: BlockSource {
                        record,
                        slot: Slot::Content,
                    },
                });
            }
            json!("")
        }
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                let source = BlockSource {
                    record,
                    slot: Slot::Part(i),
                };
                if let Some(b) = block(item.take(), assistant, source, tools) {
                    blocks.push(b);
                }
            }
            json!([])
        }
        _ => return None,
    };
    let raw = RawJson::object([("role", &Value::String(role)), ("content", &form)]);
    Some(HostMessage::read(raw, blocks, line))
}

/// `core` standing for a block the model sees only as a placeholder: its
/// original goes out as it came.
fn opaque(core: CoreMessage) -> CoreMessage {
    CoreMessage {
        opaque: true,
        edit: Default::default(),
        ..core
    }
}

/// A block's string field `k`, empty when it has none.
fn string_field(obj: &Map<String, Value>, k: &str) -> String {
    obj.get(k).and_then(Value::as_str).unwrap_or("").to_string()
}

/// A `tool_use` block read as a call.
struct ToolUse {
    core: CoreMessage,
    /// The key whose words were moved into the core.
    moved: Option<&'static str>,
}

/// The call a `tool_use` block makes, its tool's name noted in `tools`. The
/// input's JSON text is the core's; the object is let go. A Compress call's
/// is kept: a view may stub its summaries into text that is no longer JSON,
/// and then writes the original.
fn tool_use(obj: &mut Map<String, Value>, tools: &mut ToolNames) -> ToolUse {
    let (id, name) = (string_field(obj, "id"), string_field(obj, "name"));
    tools.note(&id, &name);
    let mut moved = None;
    // Written straight into bytes, as `RawJson` writes: `Value::to_string`
    // goes through the formatter a piece at a time.
    let text = |v: &Value| serde_json::to_string(v).expect("a JSON value always serializes");
    let input = match obj.get_mut("input") {
        Some(input) if !input.is_null() && name != COMPRESS_TOOL => {
            moved = Some("input");
            text(&input.take())
        }
        input => input.map(|v| text(v)).unwrap_or_default(),
    };
    ToolUse {
        core: CoreMessage::tool_call("", id, name, input),
        moved,
    }
}

/// Flattens one content block; `None` for blocks a request may not carry
/// (whitespace-only text) or that are not blocks at all.
fn block(
    item: Value,
    assistant: bool,
    source: BlockSource,
    tools: &mut ToolNames,
) -> Option<ReadBlock> {
    let Value::Object(mut obj) = item else {
        return None;
    };
    let kind = obj
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let side = if assistant {
        Role::Assistant
    } else {
        Role::User
    };
    // The key whose words were moved into the core.
    let mut moved = None;
    let mut words = |obj: &mut Map<String, Value>, key: &'static str| {
        let text = obj.get_mut(key).and_then(take_string);
        moved = moved.or(text.is_some().then_some(key));
        text.unwrap_or_default()
    };
    let core = match kind.as_str() {
        "text" => {
            let text = words(&mut obj, "text");
            if text.trim().is_empty() {
                return None;
            }
            CoreMessage::text("", side, text)
        }
        "thinking" => CoreMessage::reasoning("", words(&mut obj, "thinking")),
        "redacted_thinking" => opaque(CoreMessage::reasoning("", "[redacted thinking]")),
        "tool_use" => {
            let call = tool_use(&mut obj, tools);
            moved = call.moved;
            call.core
        }
        "tool_result" => {
            let id = string_field(&obj, "tool_use_id");
            let text = match obj.get("content") {
                Some(Value::String(_)) => words(&mut obj, "content"),
                content => result_text(content),
            };
            CoreMessage::tool_result("", id.clone(), tools.get(&id), text)
        }
        _ => opaque(CoreMessage::text("", side, format!("[{kind}]"))),
    };
    keep_request_fields(&kind, &mut obj, moved);
    Some(ReadBlock {
        core,
        raw: Value::Object(obj).into(),
        source,
    })
}

/// Drops the fields a request may not carry from a block of type `kind`,
/// and the nulls (a request may not carry those either), but for the null
/// left at `moved`, which stands for the words. Unknown types are kept
/// whole: noa cannot tell what they need.
fn keep_request_fields(kind: &str, obj: &mut Map<String, Value>, moved: Option<&str>) {
    let allowed: &[&str] = match kind {
        "text" => &["type", "text", "citations", "cache_control"],
        "thinking" => &["type", "thinking", "signature"],
        "redacted_thinking" => &["type", "data"],
        "tool_use" => &["type", "id", "name", "input", "cache_control"],
        "tool_result" => &[
            "type",
            "tool_use_id",
            "content",
            "is_error",
            "cache_control",
        ],
        "image" => &["type", "source", "cache_control"],
        "document" => &[
            "type",
            "source",
            "title",
            "context",
            "citations",
            "cache_control",
        ],
        _ => return,
    };
    obj.retain(|k, v| allowed.contains(&k.as_str()) && (!v.is_null() || moved == Some(k.as_str())));
}

/// The key of an Anthropic-shaped block's JSON whose words its core holds
/// (for a call, its input as JSON text): a null there stands for them. A
/// request never carries a null in these fields (reading drops them), so
/// the null is always this one. Opaque blocks keep their JSON whole: their
/// identity is hashed from it.
pub(crate) fn words_key(b: &ContentBlock, raw: &Value) -> Option<&'static str> {
    let key = match b.kind {
        ContentType::Text => "text",
        ContentType::Reasoning => "thinking",
        ContentType::ToolResult => "content",
        ContentType::ToolCall => "input",
    };
    (!b.opaque && raw.get(key).is_some_and(Value::is_null)).then_some(key)
}

/// The text of a tool result's content: a string, or its text parts joined.
pub(crate) fn result_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// Writes one message from its original and the blocks the view keeps;
/// `shown` are the view's cores of those blocks, in the same order.
pub(crate) fn rebuild(
    msg: &HostMessage,
    parts: &[(&ContentBlock, BlockEdit)],
    shown: &[CoreMessage],
) -> Value {
    let raw = msg.raw.value();
    let role = &raw["role"];
    let mut content = parts
        .iter()
        .zip(shown)
        .map(|((b, edit), c)| edit_block(b, edit, c));
    if let (1, true) = (parts.len(), raw["content"].is_string()) {
        let text = content.next().map_or(Value::Null, |mut b| b["text"].take());
        return json!({ "role": role, "content": text });
    }
    json!({ "role": role, "content": content.collect::<Vec<_>>() })
}

/// One kept block as the view writes it: its words put back from the view's
/// core (as read, before this turn's tag), then edited.
fn edit_block(b: &ContentBlock, edit: &BlockEdit, shown: &CoreMessage) -> Value {
    let mut raw = b.raw.value();
    if let (Some(key), Value::Object(o)) = (words_key(b, &raw), &mut raw) {
        let words = read_words(shown);
        let words = match key {
            // A call's input was an object; its text parses back to it.
            "input" => serde_json::from_str(&words).unwrap_or(Value::Null),
            _ => Value::String(words.to_string()),
        };
        o.insert(key.into(), words);
    }
    // Text, results and calls go through their edit even when it is none:
    // look-alikes of noa's markers in them are quoted there.
    match (b.kind, &mut raw) {
        _ if b.opaque => {}
        (ContentType::Text, Value::Object(o)) => {
            let t = edit.apply_str(o.get("text").and_then(Value::as_str).unwrap_or(""));
            o.insert("text".into(), Value::String(t));
        }
        (ContentType::ToolResult, Value::Object(o)) => {
            // Edited where it stands: the fields keep their order.
            let at = o.entry("content").or_insert(Value::Null);
            *at = edit.apply_content(at.take(), "text");
        }
        (ContentType::ToolCall, Value::Object(o)) => {
            let input = edit.apply_input(o.get("input").unwrap_or(&Value::Null));
            o.insert("input".into(), input);
        }
        _ => {}
    }
    raw
}

/// Writes a message from cores alone: synthetic messages, and conversions
/// from another format. Returns what could not be carried.
pub(crate) fn synthesize(cores: &[&CoreMessage], out: &mut Emitted) {
    let assistant = cores.iter().any(|c| c.role == Role::Assistant);
    let mut content = Vec::new();
    for c in cores {
        match c.content_type {
            _ if c.opaque => out.lost("an opaque block (image or provider item)"),
            ContentType::Reasoning => out.lost("reasoning (it has no Anthropic signature)"),
            ContentType::Text => {
                if c.role == Role::System {
                    out.lost("a system message's role (carried as user text)");
                }
                content.push(json!({ "type": "text", "text": shown_text(c) }));
            }
            ContentType::ToolCall => {
                let input: Value =
                    serde_json::from_str(&shown_text(c)).unwrap_or_else(|_| json!({}));
                content.push(json!({ "type": "tool_use", "id": c.tool_call_id, "name": c.tool_name, "input": input }));
            }
            ContentType::ToolResult => {
                content.push(json!({ "type": "tool_result", "tool_use_id": c.tool_call_id, "content": shown_text(c) }));
            }
        }
    }
    if !content.is_empty() {
        let role = if assistant { "assistant" } else { "user" };
        out.push(json!({ "role": role, "content": content }));
    }
}

/// Merges consecutive messages of one role into one, tool results first in
/// user messages, so every tool_use is answered in the very next message as
/// the API requires. (The API itself joins consecutive same-role turns; doing
/// it here makes the pairing visible in the view.)
pub(crate) fn merge_role_runs(messages: Vec<Value>) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::with_capacity(messages.len());
    let mut merged: Vec<bool> = Vec::with_capacity(messages.len());
    for mut m in messages {
        match out.last_mut() {
            Some(prev) if prev["role"] == m["role"] => {
                let mut blocks = as_blocks(prev["content"].take());
                blocks.extend(as_blocks(m["content"].take()));
                prev["content"] = Value::Array(blocks);
                *merged.last_mut().expect("one flag a message") = true;
            }
            _ => {
                out.push(m);
                merged.push(false);
            }
        }
    }
    // Results first, each run sorted once: a stable sort of the whole run
    // orders it as sorting after every merge would.
    for (m, _) in out
        .iter_mut()
        .zip(merged)
        .filter(|(m, merged)| *merged || m["role"] == "user")
    {
        if let Value::Array(blocks) = &mut m["content"] {
            blocks.sort_by_key(|b| b["type"] != "tool_result");
        }
    }
    out
}

fn as_blocks(content: Value) -> Vec<Value> {
    match content {
        Value::String(s) => vec![json!({ "type": "text", "text": s })],
        Value::Array(v) => v,
        _ => Vec::new(),
    }
}
