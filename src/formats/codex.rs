//! Codex rollouts (`{timestamp, type, payload}` lines) and the Responses API
//! input items their views are written as.
//!
//! Only `response_item` payloads reach the model; `event_msg` lines are UI
//! copies of them. A `compacted` line replaces everything before it with its
//! `replacement_history`. A rollout is one conversation, its items in file
//! order, even when it holds more than one `session_meta` (a fork).

use crate::engine::HostCompaction;
use serde_json::{Value, json};

use super::anthropic::ToolNames;
use super::reassemble::{BlockEdit, Emitted, read_words, shown_text};
use super::{
    Appended, BadLines, BlockSource, CodexResume, ContentBlock, Format, HostMessage, RawJson,
    ReadBlock, ReadError, ResumeState, Slot, Transcript, jsonl, span, take_string,
};
use crate::engine::{ContentType, CoreMessage, Role};

const EXPECTED: &str =
    "each line is one Codex rollout item: {\"timestamp\": ..., \"type\": ..., \"payload\": {...}}";

/// Item types that are host bookkeeping, never sent to the model.
const HOST_ONLY_ITEMS: [&str; 1] = ["ghost_snapshot"];

/// A rollout's records, with the warnings reading them gave.
pub(crate) fn parse(name: &str, text: &str, bad: BadLines) -> Result<Parsed, ReadError> {
    let mut warnings = Vec::new();
    let records = jsonl::records(name, text, EXPECTED, bad, &mut warnings)?;
    Ok((records, warnings))
}

/// Records and the warnings reading them gave.
pub(crate) type Parsed = (Vec<jsonl::Record>, Vec<String>);

/// The messages of a rollout, from its records.
///
/// Without `keep_records` a line's item is moved out of it rather than
/// copied, and the line let go (see [`super::read_owned`]).
pub(crate) fn from_records(
    name: &str,
    records: Vec<jsonl::Record>,
    warnings: Vec<String>,
    keep_records: bool,
) -> Transcript {
    let mut rollout = Rollout::new(&CodexResume::default(), warnings);
    rollout.keep_records = keep_records;
    for r in records {
        rollout.take(name, r, None);
    }
    rollout.finish(ToolNames::default()).0
}

/// A rollout read a piece at a time, each piece ending where a line does:
/// its lines are parsed and taken in, and the piece let go. It reads as
/// [`parse`] and [`from_records`] read the whole text without records.
pub(crate) struct RolloutPieces {
    rollout: Rollout,
    bad_lines: Vec<String>,
}

impl RolloutPieces {
    pub(crate) fn new() -> RolloutPieces {
        let mut rollout = Rollout::new(&CodexResume::default(), Vec::new());
        rollout.keep_records = false;
        RolloutPieces {
            rollout,
            bad_lines: Vec::new(),
        }
    }

    /// Takes in the lines of `text`, which starts on line `first_line`, at
    /// `at` in the transcript.
    pub(crate) fn read(
        &mut self,
        name: &str,
        (text, at): (&str, u64),
        first_line: usize,
        bad: BadLines,
    ) -> Result<(), ReadError> {
        let bad_lines = &mut self.bad_lines;
        let records = records_at(name, (text, at), first_line, bad, &mut |_, w| {
            bad_lines.push(w)
        })?;
        for (r, output_at) in records {
            self.rollout.take(name, r, output_at);
        }
        Ok(())
    }

    /// The transcript of every piece read: bad lines warn first, as they
    /// do in a whole read.
    pub(crate) fn finish(mut self) -> Transcript {
        self.bad_lines.append(&mut self.rollout.warnings);
        self.rollout.warnings = self.bad_lines;
        self.rollout.finish(ToolNames::default()).0
    }
}

/// What reading on after a rollout's prefix knows of it.
pub(crate) struct Prefix {
    /// What the prefix's read left.
    pub(crate) resume: CodexResume,
    /// Whether the prefix named its session.
    pub(crate) has_session: bool,
}

/// Reads the lines `appended` after a `prefix` read earlier. Besides the new
/// messages, a prompt size the new lines record for a response the prefix
/// holds: at which item it starts, and the tokens. `None` when the new
/// lines would change how the prefix reads — a compaction, or a session
/// named where the prefix named none.
pub(crate) fn read_after(
    name: &str,
    appended: Appended,
    bad: BadLines,
    prefix: &Prefix,
    tools: ToolNames,
) -> Option<Result<(Transcript, Option<SizeBefore>), ReadError>> {
    let Appended {
        text,
        at,
        first_line,
    } = appended;
    let (resume, has_session) = (&prefix.resume, prefix.has_session);
    let mut warnings = Vec::new();
    let records = match records_at(name, (text, at), first_line, bad, &mut |_, w| {
        warnings.push(w)
    }) {
        Ok(r) => r,
        Err(e) => return Some(Err(e)),
    };
    let mut rollout = Rollout::new(resume, warnings);
    for (r, output_at) in records {
        let kind = r.value.get("type").and_then(Value::as_str);
        if kind == Some("compacted") || (kind == Some("session_meta") && !has_session) {
            return None;
        }
        rollout.take(name, r, output_at);
    }
    Some(Ok(rollout.finish(tools)))
}

/// The lines of `text` (at `at` in the transcript) as records, each with
/// where its tool output's string lies in the transcript, when it is one
/// ([`span::payload_output`]).
fn records_at(
    name: &str,
    text: (&str, u64),
    first_line: usize,
    bad: BadLines,
    warn: &mut dyn FnMut(usize, String),
) -> Result<Vec<(jsonl::Record, Option<u64>)>, ReadError> {
    let read = jsonl::records_at(
        name,
        text,
        first_line,
        EXPECTED,
        bad,
        warn,
        span::payload_output,
    )?;
    Ok((read.into_iter())
        .map(|(r, line_at, output)| (r, output.map(|o| line_at + o as u64)))
        .collect())
}

/// The session a rollout's first lines name: its `session_meta` id.
pub(crate) fn peek_session(head: &str) -> Option<String> {
    head.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v.get("type").and_then(Value::as_str) == Some("session_meta"))
        .and_then(|v| {
            v.pointer("/payload/id")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
}

/// A prompt size new lines record for a response that started before them:
/// the item it starts at, and the tokens.
pub(crate) type SizeBefore = (usize, usize);

/// A prompt size a read carries over from its prefix.
struct Carried {
    /// For the prefix's message it was counted at.
    patch: Option<SizeBefore>,
    /// For the first message of this read, when the prefix has none there.
    pending: Option<usize>,
}

/// A rollout read line by line: on its own from the start, or on from a
/// prefix read earlier.
struct Rollout {
    session_id: Option<String>,
    preamble: Vec<Value>,
    /// Items before these, in the prefix.
    base: usize,
    /// The prefix's run of model output at its end, in items.
    trailing_outputs: usize,
    /// `items[i]` is a model-visible item with the line it is on, and
    /// where in the transcript a tool output's string lies when that is
    /// known ([`span::payload_output`]); `originals[i]` the rollout line it
    /// is written back as by `materialize` (for an item of a compaction's
    /// history, a `response_item` line made for it).
    items: Vec<(usize, Value, Option<u64>)>,
    originals: Vec<Value>,
    /// Prompt sizes from `token_count` events, each at the item that starts
    /// the response it was counted for. Codex repeats an event after the
    /// response's tool outputs; only one that follows new output counts.
    counted: Vec<(usize, usize)>,
    /// Where the last prompt size counted was, before these lines.
    floor: usize,
    output_since_count: bool,
    /// A prompt size counted before these lines and not yet given to a message.
    pending: Option<usize>,
    /// The item of the prefix's last message.
    last_message: Option<usize>,
    warnings: Vec<String>,
    /// Whether `originals` are kept (for `materialize`).
    keep_records: bool,
    /// The `compacted` lines read.
    compactions: Vec<HostCompaction>,
}

impl Rollout {
    fn new(resume: &CodexResume, warnings: Vec<String>) -> Rollout {
        Rollout {
            session_id: None,
            preamble: Vec::new(),
            base: resume.items,
            trailing_outputs: resume.trailing_outputs,
            items: Vec::new(),
            originals: Vec::new(),
            counted: Vec::new(),
            floor: resume.floor,
            output_since_count: resume.output_since_count,
            pending: resume.pending,
            last_message: resume.last_message,
            warnings,
            keep_records: true,
            compactions: Vec::new(),
        }
    }

    fn take(&mut self, name: &str, mut r: jsonl::Record, output_at: Option<u64>) {
        // A model-visible item: moved out of its line, and the line kept
        // (with a copy of the item) only for `materialize`.
        if r.value.get("type").and_then(Value::as_str) == Some("response_item")
            && let Some(p) = r.value.get_mut("payload").map(Value::take)
        {
            self.output_since_count |= is_output(&p);
            if self.keep_records {
                r.value["payload"] = p.clone();
                self.originals.push(r.value);
            }
            self.items.push((r.line, p, output_at));
            return;
        }
        let kind = r.value.get("type").and_then(Value::as_str).unwrap_or("");
        let payload = r.value.get("payload");
        match (kind, payload) {
            // A rollout forked from another starts with its own
            // `session_meta`, then copies the other's lines, whose own is
            // among them. Codex rebuilds the history from every
            // `response_item` in order, whatever `session_meta` lines fall
            // between them: so does noa, under the first id (the fork's).
            ("session_meta", Some(p)) => {
                if self.session_id.is_none() {
                    self.session_id = p.get("id").and_then(Value::as_str).map(str::to_string);
                }
                if self.preamble.is_empty() {
                    self.preamble.push(r.value.clone());
                }
            }
            ("event_msg", Some(p)) => self.count_usage(p),
            ("compacted", Some(p)) => self.compact(r.line, r.value.get("timestamp"), p),
            ("turn_context", _) => {}
            _ => self.warnings.push(format!(
                "{name}:{}: unknown rollout line type {kind:?}; skipped",
                r.line
            )),
        }
    }

    /// An event's token usage: the prompt size of the response it follows,
    /// counted once per response that read output.
    fn count_usage(&mut self, p: &Value) {
        let input = p
            .pointer("/info/last_token_usage/input_tokens")
            .and_then(Value::as_u64)
            .and_then(|n| usize::try_from(n).ok())
            .filter(|&n| n > 0);
        if let (Some(tokens), true) = (input, self.output_since_count) {
            let start = self.response_start();
            self.counted.push((start, tokens));
            self.output_since_count = false;
        }
    }

    /// A compaction on `line`: the history it leaves replaces the items read
    /// so far (its replacement history, or its message as a user's).
    fn compact(&mut self, line: usize, timestamp: Option<&Value>, p: &Value) {
        let history = match p.get("replacement_history").and_then(Value::as_array) {
            Some(history) => history.clone(),
            None => {
                let message = p.get("message").and_then(Value::as_str).unwrap_or("");
                vec![json!({ "type": "message", "role": "user",
                    "content": [{ "type": "input_text", "text": message }] })]
            }
        };
        self.originals = if self.keep_records {
            history
                .iter()
                .map(|item| response_item_line(timestamp, item.clone()))
                .collect()
        } else {
            Vec::new()
        };
        self.compactions.push(HostCompaction {
            line,
            records: line - 1 - self.compactions.last().map_or(0, |c| c.line),
            tokens_before: self.counted.last().map(|&(_, n)| n).or(self.pending),
            trigger: None,
            summary_ref: None,
        });
        self.items = history.into_iter().map(|h| (line, h, None)).collect();
        // Figures counted before a compaction describe a history that is
        // gone.
        self.counted.clear();
        self.floor = 0;
        self.output_since_count = false;
    }

    /// The item that starts the response now counted: back over the model's
    /// output, never before the last response counted.
    fn response_start(&self) -> usize {
        let floor = self.counted.last().map_or(self.floor, |&(at, _)| at);
        let mut start = self.base + self.items.len();
        while start > floor && start > self.base && is_output(&self.items[start - self.base - 1].1)
        {
            start -= 1;
        }
        if start == self.base {
            start = floor.max(self.base - self.trailing_outputs.min(self.base));
        }
        start
    }

    /// How many tool outputs end the rollout, the prefix's counted in when
    /// every item read here is one.
    fn outputs_at_end(&self) -> usize {
        let trailing = self
            .items
            .iter()
            .rev()
            .take_while(|(_, i, _)| is_output(i))
            .count();
        let all_output = trailing == self.items.len();
        trailing + if all_output { self.trailing_outputs } else { 0 }
    }

    /// Where a size counted for a response that started in the prefix
    /// goes: to the prefix's message there, or when it has none, to the
    /// first message here.
    fn carried(&self) -> Carried {
        let before = self
            .counted
            .iter()
            .rfind(|&&(at, _)| at < self.base)
            .copied();
        let patch = before.filter(|&(at, _)| self.last_message.is_some_and(|m| m >= at));
        let pending = match before {
            Some((_, tokens)) if patch.is_none() => Some(tokens),
            _ => self.pending,
        };
        Carried { patch, pending }
    }

    /// The messages, and a prompt size recorded here for a response that
    /// started before these lines (the item it starts at, the tokens).
    fn finish(self, mut tools: ToolNames) -> (Transcript, Option<SizeBefore>) {
        let Carried { patch, mut pending } = self.carried();
        let mut counted = self
            .counted
            .iter()
            .filter(|&&(at, _)| at >= self.base)
            .copied()
            .peekable();
        let mut last_message = self.last_message;
        let mut messages = Vec::new();
        let trailing_outputs = self.outputs_at_end();
        let items = self.items.len();
        for (i, (line, item, output_at)) in self.items.into_iter().enumerate() {
            let record = self.base + i;
            while let Some((_, tokens)) = counted.next_if(|&(at, _)| at <= record) {
                pending = Some(tokens);
            }
            if let Some(mut m) = host_message(item, line, record, &mut tools) {
                last_message = Some(record);
                if let Some(at) = output_at {
                    span::note_spans(&mut m, &[(Slot::Content, 0)], at);
                }
                messages.push(HostMessage {
                    prompt_tokens: pending.take(),
                    ..m
                });
            }
        }
        if let Some((_, tokens)) = counted.last() {
            pending = Some(tokens);
        }
        let resume = CodexResume {
            items: self.base + items,
            trailing_outputs,
            floor: self.counted.last().map_or(self.floor, |&(at, _)| at),
            output_since_count: self.output_since_count,
            pending,
            last_message,
        };
        let transcript = Transcript {
            format: Format::Codex,
            session_id: self.session_id,
            parent_session: None,
            messages,
            warnings: self.warnings,
            records: self.originals,
            preamble: self.preamble,
            resume: ResumeState {
                codex: Some(resume),
                ..ResumeState::default()
            },
            compactions: self.compactions,
        };
        (transcript, patch)
    }
}

/// Whether an item is something the model produced (as opposed to input
/// it was given): a response's reasoning, text, tool calls and searches.
fn is_output(item: &Value) -> bool {
    match item.get("type").and_then(Value::as_str) {
        Some("message") => item.get("role").and_then(Value::as_str) == Some("assistant"),
        Some(kind) => matches!(
            kind,
            "reasoning"
                | "function_call"
                | "custom_tool_call"
                | "local_shell_call"
                | "web_search_call"
        ),
        None => false,
    }
}

/// A rollout line carrying one model-visible item, stamped with `timestamp`
/// (left out when there is none).
fn response_item_line(timestamp: Option<&Value>, payload: Value) -> Value {
    let mut line = serde_json::Map::new();
    if let Some(ts) = timestamp {
        line.insert("timestamp".into(), ts.clone());
    }
    line.insert("type".into(), json!("response_item"));
    line.insert("payload".into(), payload);
    Value::Object(line)
}

fn host_message(
    mut item: Value,
    line: usize,
    record: usize,
    tools: &mut ToolNames,
) -> Option<HostMessage> {
    let whole = BlockSource {
        record,
        slot: Slot::Content,
    };
    let kind = item
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if HOST_ONLY_ITEMS.contains(&kind.as_str()) {
        return None;
    }
    let mut blocks = Vec::new();
    match kind.as_str() {
        "message" => message_blocks(&mut item, record, &mut blocks),
        "reasoning" => {
            let text = reasoning_text(&item);
            blocks.push(ReadBlock {
                core: CoreMessage::reasoning("", text),
                raw: RawJson::default(),
                source: whole,
            });
        }
        "function_call" | "custom_tool_call" | "local_shell_call" => {
            blocks.push(call_block(&mut item, &kind, tools, whole));
        }
        "function_call_output" | "custom_tool_call_output" | "local_shell_call_output" => {
            blocks.push(output_block(&mut item, tools, whole));
        }
        "compaction" | "compaction_summary" => blocks.push(ReadBlock {
            core: opaque_text(Role::System, "[compacted history]"),
            raw: RawJson::default(),
            source: whole,
        }),
        _ => blocks.push(ReadBlock {
            core: opaque_text(Role::Assistant, format!("[{kind}]")),
            raw: RawJson::default(),
            source: whole,
        }),
    }
    // A whole-item block keeps the item itself as its raw form, and a message
    // keeps its parts in its blocks: the host message holds only the rest.
    if kind == "message" {
        item["content"] = Value::Array(Vec::new());
    } else if let Some(b) = blocks.first_mut() {
        b.raw = std::mem::replace(&mut item, json!({ "type": kind })).into();
    }
    Some(HostMessage::read(item.into(), blocks, line))
}

/// A string field of an item, empty when it is missing or not a string.
fn string_field(item: &Value, k: &str) -> String {
    item.get(k)
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

/// An item's words, moved into its block's core, a null left in their
/// place (see `filled`); empty ones stay, so a null with no words is the
/// log's own.
fn take_words(item: &mut Value, k: &str) -> String {
    item.get_mut(k)
        .filter(|v| v.as_str().is_some_and(|w| !w.is_empty()))
        .and_then(take_string)
        .unwrap_or_default()
}

/// A block the model sees only as a placeholder `text`, such as an image
/// or an item of a kind not read.
fn opaque_text(role: Role, text: impl Into<String>) -> CoreMessage {
    CoreMessage {
        opaque: true,
        edit: Default::default(),
        ..CoreMessage::text("", role, text)
    }
}

/// A message item's blocks, one for each part of its content: the part's
/// text is moved into the core, and the rest of the part kept as its raw
/// form.
fn message_blocks(item: &mut Value, record: usize, blocks: &mut Vec<ReadBlock>) {
    let role = match string_field(item, "role").as_str() {
        "assistant" => Role::Assistant,
        "system" | "developer" => Role::System,
        _ => Role::User,
    };
    let parts = match item.get_mut("content").map(Value::take) {
        Some(Value::Array(parts)) => parts,
        _ => Vec::new(),
    };
    for (i, mut part) in parts.into_iter().enumerate() {
        let core = match part.get_mut("text").and_then(take_string) {
            Some(t) => CoreMessage::text("", role, t),
            None => opaque_text(role, "[image]"),
        };
        blocks.push(ReadBlock {
            core,
            raw: part.into(),
            source: BlockSource {
                record,
                slot: Slot::Part(i),
            },
        });
    }
}

/// The block of a tool call item of type `kind`, its tool's name noted in
/// `tools` for the output that answers it.
fn call_block(
    item: &mut Value,
    kind: &str,
    tools: &mut ToolNames,
    whole: BlockSource,
) -> ReadBlock {
    let (id, name) = (string_field(item, "call_id"), string_field(item, "name"));
    let args = match kind {
        "function_call" => take_words(item, "arguments"),
        "custom_tool_call" => take_words(item, "input"),
        _ => item.get("action").map(Value::to_string).unwrap_or_default(),
    };
    let name = if name.is_empty() {
        kind.to_string()
    } else {
        name
    };
    tools.note(&id, &name);
    ReadBlock {
        core: CoreMessage::tool_call("", id, name, args),
        raw: RawJson::default(),
        source: whole,
    }
}

/// The block of a tool output item, named by the call it answers.
fn output_block(item: &mut Value, tools: &ToolNames, whole: BlockSource) -> ReadBlock {
    let id = string_field(item, "call_id");
    let text = match item.get("output") {
        Some(Value::String(_)) => take_words(item, "output"),
        output => super::anthropic::result_text(output),
    };
    ReadBlock {
        core: CoreMessage::tool_result("", id.clone(), tools.get(&id), text),
        raw: RawJson::default(),
        source: whole,
    }
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

/// Writes one item from its original and the blocks the view keeps;
/// `shown` are the view's cores of those blocks, in the same order.
pub(crate) fn rebuild(
    msg: &HostMessage,
    parts: &[(&ContentBlock, BlockEdit)],
    shown: &[CoreMessage],
) -> Value {
    let raw = msg.raw.value();
    if raw["type"] == "message" {
        let mut item = raw;
        let content: Vec<Value> = parts
            .iter()
            .zip(shown)
            .map(|((b, edit), c)| edit.apply_part(&filled(b, c)))
            .collect();
        item["content"] = Value::Array(content);
        return item;
    }
    let (Some((b, edit)), Some(c)) = (parts.first(), shown.first()) else {
        return raw;
    };
    let mut item = filled(b, c);
    match (item.as_object_mut(), b.kind) {
        (Some(obj), ContentType::ToolResult) => {
            // Edited where it stands: the fields keep their order.
            let at = obj.entry("output").or_insert(Value::Null);
            *at = edit.apply_content(at.take(), "input_text");
        }
        (Some(obj), ContentType::ToolCall) => {
            if let Some(args) = edit.call_arguments() {
                let key = match obj.get("type").and_then(Value::as_str) {
                    Some("custom_tool_call") => "input",
                    _ => "arguments",
                };
                obj.insert(key.into(), Value::String(args.to_string()));
            }
        }
        _ => {}
    }
    item
}

/// A block's JSON with the words reading moved into its core put back, as
/// the view's core `shown` was read (see [`read_words`]): a message part's
/// text, a call's arguments or input, a tool's output.
fn filled(b: &ContentBlock, shown: &CoreMessage) -> Value {
    let mut raw = b.raw.value();
    let key = match (b.kind, raw["type"].as_str()) {
        _ if b.opaque => return raw,
        (ContentType::Text, _) => "text",
        (ContentType::ToolCall, Some("function_call")) => "arguments",
        (ContentType::ToolCall, Some("custom_tool_call")) => "input",
        (ContentType::ToolResult, _) => "output",
        _ => return raw,
    };
    // A part's text is always moved (it is what makes the part text); an
    // empty output or argument string stays, so a null with no words there is
    // the log's own.
    let words = read_words(shown);
    let moved = key == "text" || !words.is_empty();
    if let (Some(at @ Value::Null), true) = (raw.get_mut(key), moved) {
        *at = Value::String(words.to_string());
    }
    raw
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
                out.push(json!({ "type": "message", "role": role, "content": [{ "type": part, "text": shown_text(c) }] }));
            }
            ContentType::ToolCall => out.push(json!({
                "type": "function_call", "call_id": c.tool_call_id, "name": c.tool_name, "arguments": shown_text(c)
            })),
            ContentType::ToolResult => {
                out.push(json!({ "type": "function_call_output", "call_id": c.tool_call_id, "output": shown_text(c) }));
            }
        }
    }
}
