//! OpenAI Chat Completions messages.

use serde_json::{Map, Value, json};

use super::anthropic::ToolNames;
use super::message_log::MessageLog;
use super::reassemble::{BlockEdit, Emitted, read_words, shown_text};
use super::{
    BlockSource, ContentBlock, Format, HostMessage, RawJson, ReadBlock, Slot, take_string,
};
use crate::engine::{ContentType, CoreMessage, Role};

const EXPECTED: &str =
    "each line (or array item) is one Chat Completions message: {\"role\": ..., \"content\": ...}";

/// Fields a Chat Completions request message may carry.
const MESSAGE_FIELDS: [&str; 7] = [
    "role",
    "content",
    "name",
    "tool_calls",
    "tool_call_id",
    "reasoning_content",
    "refusal",
];

/// Reads chat messages: JSONL, a JSON array, or `{"messages": [...]}`.
pub(crate) const LOG: MessageLog = MessageLog {
    format: Format::Chat,
    expected: EXPECTED,
    skipped: "not a chat message",
    message: host_message,
};

fn host_message(
    v: &mut Value,
    line: usize,
    record: usize,
    tools: &mut ToolNames,
) -> Option<HostMessage> {
    let obj = v.as_object_mut()?;
    let role_name = obj.get("role")?.as_str()?;
    let role = match role_name {
        "system" | "developer" => Role::System,
        "user" => Role::User,
        "assistant" => Role::Assistant,
        "tool" => Role::Tool,
        _ => return None,
    };
    let raw = request_fields(obj);
    // The words are moved into the cores; a block's JSON holds a null in
    // their place (see `filled`).
    let mut blocks = Vec::new();
    if role == Role::Tool {
        let content = obj.get_mut("content").map_or(Value::Null, Value::take);
        let call = obj.get("tool_call_id").and_then(Value::as_str);
        let result = tool_result_block(call.unwrap_or(""), content, record, tools);
        blocks.push(result);
        return Some(HostMessage::read(raw, blocks, line));
    }
    let mut take = |k: &str| obj.get_mut(k).map_or(Value::Null, Value::take);
    if let Value::String(r) = take("reasoning_content") {
        blocks.push(ReadBlock {
            core: CoreMessage::reasoning("", r),
            raw: RawJson::default(),
            source: BlockSource {
                record,
                slot: Slot::Reasoning,
            },
        });
    }
    content_blocks(take("content"), role, record, &mut blocks);
    call_blocks(take("tool_calls"), record, tools, &mut blocks);
    Some(HostMessage::read(raw, blocks, line))
}

/// The request fields as the message's JSON, the block-bearing ones null:
/// the blocks carry their contents, and a null keeps the field's place.
fn request_fields(obj: &Map<String, Value>) -> RawJson {
    static NULL: Value = Value::Null;
    RawJson::object(
        (obj.iter())
            .filter(|(k, _)| MESSAGE_FIELDS.contains(&k.as_str()))
            .map(|(k, v)| match k.as_str() {
                "content" | "tool_calls" | "reasoning_content" => (k.as_str(), &NULL),
                _ => (k.as_str(), v),
            }),
    )
}

/// A tool message's one block: its `content` as the result of the call
/// its `tool_call_id` names. A string's words move into the core; other
/// content is kept as the block's JSON.
fn tool_result_block(id: &str, content: Value, record: usize, tools: &ToolNames) -> ReadBlock {
    let (text, raw_content) = match content {
        Value::String(s) if !s.is_empty() => (s, Value::Null),
        content => (super::anthropic::result_text(Some(&content)), content),
    };
    ReadBlock {
        core: CoreMessage::tool_result("", id, tools.get(id), text),
        raw: raw_content.into(),
        source: BlockSource {
            record,
            slot: Slot::Content,
        },
    }
}

/// The blocks of a message's `content`: one for a string that is not
/// empty, else one for each part of an array, a part other than text kept
/// opaque.
fn content_blocks(content: Value, role: Role, record: usize, blocks: &mut Vec<ReadBlock>) {
    let source = |slot| BlockSource { record, slot };
    match content {
        Value::String(s) if !s.is_empty() => {
            blocks.push(ReadBlock {
                core: CoreMessage::text("", role, s),
                raw: RawJson::default(),
                source: source(Slot::Content),
            });
        }
        Value::Array(parts) => {
            for (i, mut p) in parts.into_iter().enumerate() {
                let kind = p.get("type").and_then(Value::as_str).unwrap_or("");
                let core = match kind {
                    "text" => p.get_mut("text").and_then(take_string),
                    _ => None,
                };
                let core = match core {
                    Some(t) => CoreMessage::text("", role, t),
                    None => CoreMessage {
                        opaque: true,
                        edit: Default::default(),
                        ..CoreMessage::text(
                            "",
                            role,
                            format!("[{}]", p["type"].as_str().unwrap_or("")),
                        )
                    },
                };
                blocks.push(ReadBlock {
                    core,
                    raw: p.into(),
                    source: source(Slot::Part(i)),
                });
            }
        }
        _ => {}
    }
}

/// The blocks of a message's `tool_calls`, each call's tool name noted in
/// `tools` for the result that answers it.
fn call_blocks(calls: Value, record: usize, tools: &mut ToolNames, blocks: &mut Vec<ReadBlock>) {
    let calls = match calls {
        Value::Array(calls) => calls,
        _ => Vec::new(),
    };
    for (i, mut call) in calls.into_iter().enumerate() {
        let id = call
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let f = call.get_mut("function");
        let name = f
            .as_ref()
            .and_then(|f| f.get("name"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        // Empty arguments stay: a null there is the log's own.
        let args = f
            .and_then(|f| f.get_mut("arguments"))
            .filter(|a| a.as_str().is_some_and(|a| !a.is_empty()))
            .and_then(take_string)
            .unwrap_or_default();
        tools.note(&id, &name);
        blocks.push(ReadBlock {
            core: CoreMessage::tool_call("", id, name, args),
            raw: call.into(),
            source: BlockSource {
                record,
                slot: Slot::ToolCall(i),
            },
        });
    }
}

/// Writes one message from its original and the blocks the view keeps;
/// `shown` are the view's cores of those blocks, in the same order.
pub(crate) fn rebuild(
    msg: &HostMessage,
    parts: &[(&ContentBlock, BlockEdit)],
    shown: &[CoreMessage],
) -> Value {
    let mut out = match msg.raw.value() {
        Value::Object(o) => o,
        _ => Map::new(),
    };
    if msg
        .blocks
        .first()
        .is_some_and(|b| b.kind == ContentType::ToolResult)
    {
        return tool_message(out, parts, shown);
    }
    out.remove("reasoning_content");
    let string_content = msg
        .blocks
        .iter()
        .any(|b| b.source.slot == Slot::Content && b.kind == ContentType::Text);
    let mut content_parts = Vec::new();
    let mut calls = Vec::new();
    for ((b, edit), c) in parts.iter().zip(shown) {
        let raw = filled(b, c);
        match b.kind {
            ContentType::Reasoning => {
                out.insert("reasoning_content".into(), raw);
            }
            ContentType::ToolCall => {
                let mut call = raw;
                if let (Some(args), Some(f)) = (edit.call_arguments(), call.get_mut("function")) {
                    f["arguments"] = Value::String(args.to_string());
                }
                calls.push(call);
            }
            _ if string_content => {
                out.insert(
                    "content".into(),
                    Value::String(edit.apply_str(raw.as_str().unwrap_or(""))),
                );
            }
            _ => {
                content_parts.push(edit.apply_part(&raw));
            }
        }
    }
    if !string_content {
        out.insert("content".into(), parts_content(content_parts));
    }
    if calls.is_empty() {
        out.remove("tool_calls");
    } else {
        out.insert("tool_calls".into(), Value::Array(calls));
    }
    Value::Object(out)
}

/// A tool message, `out`, with the content the view keeps of its result.
fn tool_message(
    mut out: Map<String, Value>,
    parts: &[(&ContentBlock, BlockEdit)],
    shown: &[CoreMessage],
) -> Value {
    if let (Some((b, edit)), Some(c)) = (parts.first(), shown.first()) {
        out.insert("content".into(), edit.apply_content(filled(b, c), "text"));
    }
    Value::Object(out)
}

/// A message's `content` of parts: `null` when none is left.
fn parts_content(parts: Vec<Value>) -> Value {
    if parts.is_empty() {
        Value::Null
    } else {
        Value::Array(parts)
    }
}

/// A block's JSON with the words reading moved into its core put back, as
/// the view's core `shown` was read (see [`read_words`]). The nulls reading
/// left are told from the log's own by the block's kind: reasoning and
/// string content are always moved; a tool's output and a call's arguments
/// only when not empty, so a null there with no words is the log's.
fn filled(b: &ContentBlock, shown: &CoreMessage) -> Value {
    let words = read_words(shown);
    let put = |at: &mut Value| *at = Value::String(words.to_string());
    let mut raw = b.raw.value();
    match (b.kind, &mut raw) {
        _ if b.opaque => {}
        (ContentType::Reasoning | ContentType::Text, at @ Value::Null) => put(at),
        (ContentType::ToolResult, at @ Value::Null) if !words.is_empty() => put(at),
        (ContentType::Text, part) => {
            if let Some(at @ Value::Null) = part.get_mut("text") {
                put(at);
            }
        }
        (ContentType::ToolCall, call) => {
            let args = call
                .get_mut("function")
                .and_then(|f| f.get_mut("arguments"));
            if let (Some(at @ Value::Null), false) = (args, words.is_empty()) {
                put(at);
            }
        }
        _ => {}
    }
    raw
}

/// Writes messages from cores alone: synthetic messages and conversions.
pub(crate) fn synthesize(cores: &[&CoreMessage], out: &mut Emitted) {
    let mut text = Vec::new();
    let mut calls = Vec::new();
    let mut reasoning = Vec::new();
    let mut role = "user";
    for c in cores {
        match (c.content_type, c.role) {
            _ if c.opaque => out.lost("an opaque block (image or provider item)"),
            (ContentType::ToolResult, _) => {
                out.push(
                    json!({ "role": "tool", "tool_call_id": c.tool_call_id, "content": shown_text(c) }),
                );
            }
            (ContentType::ToolCall, _) => {
                role = "assistant";
                calls.push(json!({
                    "id": c.tool_call_id, "type": "function",
                    "function": { "name": c.tool_name, "arguments": shown_text(c) }
                }));
            }
            (ContentType::Reasoning, _) => {
                out.lost("the signature or encrypted form of reasoning (its text is kept)");
                role = "assistant";
                reasoning.push(c.text.as_str());
            }
            (ContentType::Text, r) => {
                role = match r {
                    Role::Assistant => "assistant",
                    Role::System => "system",
                    _ => "user",
                };
                text.push(shown_text(c));
            }
        }
    }
    if text.is_empty() && calls.is_empty() {
        return;
    }
    let mut m = Map::new();
    m.insert("role".into(), json!(role));
    m.insert(
        "content".into(),
        if text.is_empty() {
            Value::Null
        } else {
            json!(text.join("\n\n"))
        },
    );
    if !reasoning.is_empty() {
        m.insert("reasoning_content".into(), json!(reasoning.join("\n\n")));
    }
    if !calls.is_empty() {
        m.insert("tool_calls".into(), Value::Array(calls));
    }
    out.push(Value::Object(m));
}

/// Moves the tool messages answering an assistant message to right after it,
/// keeping their order: Chat Completions wants the answers before anything else.
pub(crate) fn hoist_tool_messages(messages: Vec<Value>) -> Vec<Value> {
    let mut out = Vec::with_capacity(messages.len());
    let mut rest = merge_assistant_runs(messages).into_iter().peekable();
    while let Some(m) = rest.next() {
        let is_assistant = m["role"] == "assistant";
        out.push(m);
        if !is_assistant {
            continue;
        }
        let mut others = Vec::new();
        while let Some(next) = rest.next_if(|n| n["role"] != "assistant") {
            if next["role"] == "tool" {
                out.push(next);
            } else {
                others.push(next);
            }
        }
        out.extend(others);
    }
    out
}

/// Joins consecutive assistant messages into one. Formats that write each
/// call as its own item (Responses) would otherwise leave a call unanswered
/// before the next assistant message.
fn merge_assistant_runs(messages: Vec<Value>) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::with_capacity(messages.len());
    for m in messages {
        match out.last_mut() {
            Some(prev) if prev["role"] == "assistant" && m["role"] == "assistant" => {
                for key in ["content", "reasoning_content"] {
                    let joined = match (prev[key].as_str(), m[key].as_str()) {
                        (Some(a), Some(b)) => json!(format!("{a}\n\n{b}")),
                        (None, Some(b)) => json!(b),
                        _ => continue,
                    };
                    prev[key] = joined;
                }
                if let Some(calls) = m["tool_calls"].as_array() {
                    let mut all = prev["tool_calls"].as_array().cloned().unwrap_or_default();
                    all.extend(calls.iter().cloned());
                    prev["tool_calls"] = Value::Array(all);
                }
            }
            _ => out.push(m),
        }
    }
    out
}
