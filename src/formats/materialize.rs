//! Materializing: a pruned view written back as a transcript of the input's
//! own format, so the host can continue the session without noa.
//!
//! A view core read from the transcript brings back its original record —
//! every field, unknown ones included — with the record's content cut down
//! to the blocks the view keeps, each block exactly as it was logged. A
//! record none of whose blocks is kept is left out. A core with no source (a
//! block's summary) becomes a new user record in the format's own shape.
//! Kept blocks are written from the originals, never from the view's text, so
//! no ref tag or other edit of the view can reach the output.
//!
//! Consecutive view cores from one record are written as that record once.
//! Should the view split a record's blocks (a summary between them), each
//! run is written as its own copy of the record, so the output keeps the
//! view's order; for Claude Code the later copies get derived uuids.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::{Format, Slot, Transcript};
use crate::engine::CoreMessage;

/// Writes `view` (the engine's pruned view WITHOUT ref tags or nudge: covered
/// messages already replaced by summary cores) as a transcript in `t`'s OWN
/// format, one JSON record per line.
///
/// This is what `noa materialize` bakes a session's compression into: the
/// host reads the result as one of its own logs and carries on without noa.
/// Chat and Anthropic inputs come back as one message per line (JSONL) even
/// when they were read from an array or a request body. Codex output starts
/// with the rollout's `session_meta` line; `event_msg`, `turn_context` and
/// `compacted` lines are not written, and the items of a `compacted` line's
/// replacement history come back as `response_item` lines with its
/// timestamp. Claude Code output has one record per original line, relinked
/// by `parentUuid` into one linear chain in output order; progress,
/// snapshots, queue operations and system records are not written, and a
/// `logicalParentUuid` naming a record that is not written is dropped.
pub fn materialize(t: &Transcript, view: &[CoreMessage]) -> Vec<Value> {
    let pieces = pieces(t, view);
    let whole = whole_records(t);
    let kept = |record: usize, slots: &[Slot]| cut(t, &whole, record, slots);
    match t.format {
        Format::Chat | Format::Anthropic => pieces
            .iter()
            .map(|p| match p {
                Piece::Kept { record, slots } => kept(*record, slots),
                Piece::New(c) => json!({ "role": "user", "content": c.text }),
            })
            .collect(),
        Format::Codex => codex_lines(t, &pieces, kept),
        Format::ClaudeCode => claude_code_lines(t, &pieces, kept),
    }
}

/// Writes `view` as [`materialize`] does, as a new session with the id
/// `id` that the host can resume beside the original, the two never
/// mistaken for one another.
///
/// A Claude Code log has `id` as every record's `sessionId`, and every
/// record a fresh `uuid` (derived from `id`, so none is one of the
/// original's), linked by `parentUuid` into one chain in output order; a
/// `logicalParentUuid` or `sourceToolAssistantUUID` is pointed at the
/// record's new uuid, or dropped when it names a record not written. The
/// `message.usage` of each assistant record after the first summary is
/// left out: it counted a request that held what the summaries now stand
/// in for, so the host (and noa) would take the copy for far larger than
/// it is. A Codex rollout has `id` in its `session_meta`, and no usage of
/// its own (its `token_count` events are not written). Chat and Anthropic
/// logs name no session: they are written as [`materialize`] writes them.
pub fn materialize_new_session(t: &Transcript, view: &[CoreMessage], id: &str) -> Vec<Value> {
    match t.format {
        Format::ClaudeCode => {
            let pieces = pieces(t, view);
            let whole = whole_records(t);
            let kept = |record: usize, slots: &[Slot]| cut(t, &whole, record, slots);
            let first_summary = pieces.iter().position(|p| matches!(p, Piece::New(_)));
            // One record a piece, in order.
            let mut out = claude_code_lines(t, &pieces, kept);
            renew_claude_code(&mut out, id, first_summary);
            out
        }
        Format::Codex => {
            let mut out = materialize(t, view);
            renew_rollout(&mut out, t.session_id.as_deref(), id);
            out
        }
        Format::Chat | Format::Anthropic => materialize(t, view),
    }
}

/// A fresh session id for a copy of `t` made of `view` at `now` (Unix
/// seconds, which the caller reads from its clock): a hash of the
/// original's id, the view's content (its messages' ids, which are hashes
/// of what they hold) and the time, so copies made at different times
/// never share an id, and one made again from the same state at the same
/// time is the same bytes. It is shaped as a version-4 UUID, as the hosts
/// make their own session ids, in case a host checks the id it is asked to
/// resume.
pub fn new_session_id(t: &Transcript, view: &[CoreMessage], now: i64) -> String {
    let mut digest = Sha256::new()
        .chain_update(b"noa-new-session\0")
        .chain_update(t.session_id.as_deref().unwrap_or("").as_bytes())
        .chain_update(format!("\0{now}\0"));
    for c in view {
        digest.update(c.id.as_str().as_bytes());
        digest.update(b"\0");
    }
    uuid_text(&digest.finalize(), 0x40)
}

/// A materialized Claude Code log made a new session `id` (see
/// [`materialize_new_session`]); `first_summary` is the place of the first
/// summary record, after which assistant records lose their usage.
fn renew_claude_code(records: &mut [Value], id: &str, first_summary: Option<usize>) {
    // Each original uuid to the new uuid of the first record that had it.
    let mut renamed: HashMap<String, String> = HashMap::new();
    for (i, r) in records.iter_mut().enumerate() {
        let Some(obj) = r.as_object_mut() else {
            continue;
        };
        let old = obj.get("uuid").and_then(Value::as_str).unwrap_or_default();
        // The place makes it unique even where the original repeats one.
        let new = derived_uuid(id, &format!("{i}:{old}"));
        renamed
            .entry(old.to_string())
            .or_insert_with(|| new.clone());
        obj.insert("uuid".into(), json!(new));
        obj.insert("sessionId".into(), json!(id));
        let assistant = obj.get("type").and_then(Value::as_str) == Some("assistant");
        if assistant
            && first_summary.is_some_and(|f| i > f)
            && let Some(Value::Object(message)) = obj.get_mut("message")
        {
            message.shift_remove("usage");
        }
    }
    for obj in records.iter_mut().filter_map(Value::as_object_mut) {
        for key in ["logicalParentUuid", "sourceToolAssistantUUID"] {
            let Some(old) = obj.get(key).and_then(Value::as_str) else {
                continue;
            };
            match renamed.get(old) {
                Some(new) => {
                    obj.insert(key.into(), json!(new));
                }
                None => {
                    obj.shift_remove(key);
                }
            }
        }
    }
    link(records);
}

/// A materialized rollout made a new session `id`: the `session_meta`
/// line naming the original (`old`; the first, when it names none) names
/// `id`. A forked rollout's later `session_meta` lines name the sessions
/// it was forked from, and stay.
fn renew_rollout(lines: &mut [Value], old: Option<&str>, id: &str) {
    let metas = lines
        .iter_mut()
        .filter(|l| l.get("type").and_then(Value::as_str) == Some("session_meta"))
        .filter_map(|l| l.pointer_mut("/payload/id"));
    for (n, meta) in metas.enumerate() {
        let named = match old {
            Some(old) => meta.as_str() == Some(old),
            None => n == 0,
        };
        if named {
            *meta = json!(id);
        }
    }
}

/// One stretch of the output.
enum Piece<'a> {
    /// Consecutive view cores from one original record: the record and the
    /// places of those blocks in it, in view order.
    Kept { record: usize, slots: Vec<Slot> },
    /// A core with no source in the transcript (a block's summary).
    New(&'a CoreMessage),
}

/// Splits the view into runs of one record each and sourceless cores.
fn pieces<'a>(t: &Transcript, view: &'a [CoreMessage]) -> Vec<Piece<'a>> {
    let sources: HashMap<&str, _> = t
        .messages
        .iter()
        .flat_map(|m| &m.blocks)
        .map(|b| (b.id.as_str(), b.source))
        .collect();
    let mut out: Vec<Piece> = Vec::new();
    for c in view {
        match sources.get(c.id.as_str()) {
            Some(s) => match out.last_mut() {
                Some(Piece::Kept { record, slots }) if *record == s.record => slots.push(s.slot),
                _ => out.push(Piece::Kept {
                    record: s.record,
                    slots: vec![s.slot],
                }),
            },
            None => out.push(Piece::New(c)),
        }
    }
    out
}

/// Every record's blocks in their original order: a run equal to this is the
/// record whole, written back without a change.
fn whole_records(t: &Transcript) -> Vec<Vec<Slot>> {
    let mut whole = vec![Vec::new(); t.records.len()];
    for b in t.messages.iter().flat_map(|m| &m.blocks) {
        if let Some(slots) = whole.get_mut(b.source.record) {
            slots.push(b.source.slot);
        }
    }
    whole
}

/// The original record with only the blocks at `slots`, in that order.
fn cut(t: &Transcript, whole: &[Vec<Slot>], record: usize, slots: &[Slot]) -> Value {
    let mut v = t.records[record].clone();
    if whole[record] == slots {
        return v;
    }
    let content = match t.format {
        Format::Chat => {
            cut_chat(&mut v, slots);
            return v;
        }
        Format::Anthropic => v.get_mut("content"),
        Format::ClaudeCode => v.pointer_mut("/message/content"),
        Format::Codex => v.pointer_mut("/payload/content"),
    };
    if let Some(Value::Array(parts)) = content {
        *parts = pick(parts, slots, |s| match s {
            Slot::Part(i) => Some(i),
            _ => None,
        });
    }
    v
}

/// A chat message cut down: text parts, tool calls and reasoning each kept
/// only when the view keeps them. Content with nothing left becomes `null`,
/// as an assistant message with only tool calls has it.
fn cut_chat(v: &mut Value, slots: &[Slot]) {
    let Some(obj) = v.as_object_mut() else {
        return;
    };
    if !slots.contains(&Slot::Reasoning) {
        obj.shift_remove("reasoning_content");
    }
    if !slots.contains(&Slot::Content)
        && let Some(content) = obj.get_mut("content")
    {
        let parts = match content {
            Value::Array(parts) => pick(parts, slots, |s| match s {
                Slot::Part(i) => Some(i),
                _ => None,
            }),
            _ => Vec::new(),
        };
        *content = if parts.is_empty() {
            Value::Null
        } else {
            Value::Array(parts)
        };
    }
    if let Some(Value::Array(calls)) = obj.get("tool_calls") {
        let calls = pick(calls, slots, |s| match s {
            Slot::ToolCall(i) => Some(i),
            _ => None,
        });
        if calls.is_empty() {
            obj.shift_remove("tool_calls");
        } else {
            obj.insert("tool_calls".into(), Value::Array(calls));
        }
    }
}

/// The items of `list` at the positions `slots` name (through `position`),
/// in slot order.
fn pick(list: &[Value], slots: &[Slot], position: impl Fn(Slot) -> Option<usize>) -> Vec<Value> {
    slots
        .iter()
        .filter_map(|&s| position(s))
        .filter_map(|i| list.get(i).cloned())
        .collect()
}

/// A Codex rollout: `session_meta`, then one `response_item` line per kept
/// item and per summary. A summary takes the timestamp of the nearest
/// following line, else the nearest preceding one, so the log's times stay
/// in order; with neither it has none.
fn codex_lines(
    t: &Transcript,
    pieces: &[Piece],
    kept: impl Fn(usize, &[Slot]) -> Value,
) -> Vec<Value> {
    let mut lines: Vec<Value> = t.preamble.clone();
    let mut new_at = Vec::new();
    for p in pieces {
        match p {
            Piece::Kept { record, slots } => lines.push(kept(*record, slots)),
            Piece::New(c) => {
                new_at.push(lines.len());
                lines.push(json!({
                    "timestamp": null,
                    "type": "response_item",
                    "payload": {
                        "type": "message",
                        "role": "user",
                        "content": [{ "type": "input_text", "text": c.text }],
                    },
                }));
            }
        }
    }
    let stamps: Vec<Option<Value>> = lines
        .iter()
        .enumerate()
        .map(|(i, l)| {
            (!new_at.contains(&i))
                .then(|| l.get("timestamp").cloned())
                .flatten()
        })
        .collect();
    for &i in &new_at {
        let near = stamps[i + 1..]
            .iter()
            .chain(stamps[..i].iter().rev())
            .find_map(Option::as_ref);
        if let Some(obj) = lines[i].as_object_mut() {
            match near {
                Some(ts) => {
                    obj.insert("timestamp".into(), ts.clone());
                }
                None => {
                    obj.shift_remove("timestamp");
                }
            }
        }
    }
    lines
}

/// A Claude Code session log: one record per kept line, summaries as user
/// records, all linked into one chain in output order.
fn claude_code_lines(
    t: &Transcript,
    pieces: &[Piece],
    kept: impl Fn(usize, &[Slot]) -> Value,
) -> Vec<Value> {
    let session = t.session_id.as_deref().unwrap_or("");
    let mut out: Vec<Value> = Vec::with_capacity(pieces.len());
    let mut new_at: Vec<(usize, &CoreMessage)> = Vec::new();
    let mut copies: HashMap<usize, usize> = HashMap::new();
    for p in pieces {
        match p {
            Piece::Kept { record, slots } => {
                let mut v = kept(*record, slots);
                let n = copies.entry(*record).or_default();
                if *n > 0
                    && let Some(Value::String(u)) = v.get_mut("uuid")
                {
                    *u = derived_uuid(session, &format!("{u}#{n}"));
                }
                *n += 1;
                out.push(v);
            }
            Piece::New(c) => {
                new_at.push((out.len(), c));
                out.push(Value::Null);
            }
        }
    }
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for &(i, c) in &new_at {
        let n = seen.entry(c.id.as_str()).or_default();
        let key = match *n {
            0 => c.id.to_string(),
            n => format!("{}#{n}", c.id),
        };
        *n += 1;
        let neighbour = out[i + 1..]
            .iter()
            .chain(out[..i].iter().rev())
            .find(|v| v.is_object());
        out[i] = summary_record(t, neighbour, &c.text, derived_uuid(session, &key));
    }
    link(&mut out);
    out
}

/// A summary as a Claude Code user record, with the session details (and
/// the time) of a neighbouring record so the host files it with the rest.
fn summary_record(t: &Transcript, neighbour: Option<&Value>, text: &str, uuid: String) -> Value {
    let from = |k: &str| neighbour.and_then(|n| n.get(k)).cloned();
    let mut r = Map::new();
    r.insert("parentUuid".into(), Value::Null);
    r.insert("isSidechain".into(), json!(false));
    r.insert("userType".into(), json!("external"));
    for k in ["cwd", "sessionId", "version", "gitBranch"] {
        let v = match k {
            "sessionId" => from(k).or_else(|| t.session_id.clone().map(Value::String)),
            _ => from(k),
        };
        if let Some(v) = v {
            r.insert(k.into(), v);
        }
    }
    r.insert("type".into(), json!("user"));
    r.insert("message".into(), json!({ "role": "user", "content": text }));
    r.insert("uuid".into(), json!(uuid));
    if let Some(ts) = from("timestamp") {
        r.insert("timestamp".into(), ts);
    }
    Value::Object(r)
}

/// Points each record's `parentUuid` at the record before it (the first at
/// nothing), so the host follows exactly the written conversation. A
/// `logicalParentUuid` that names a record not written would dangle, and is
/// dropped; one naming a written record is left as it is.
fn link(records: &mut [Value]) {
    let written: HashSet<String> = records
        .iter()
        .filter_map(|r| r.get("uuid").and_then(Value::as_str).map(str::to_string))
        .collect();
    let mut previous = Value::Null;
    for r in records.iter_mut() {
        let Some(obj) = r.as_object_mut() else {
            continue;
        };
        obj.insert("parentUuid".into(), previous.clone());
        if obj
            .get("logicalParentUuid")
            .and_then(Value::as_str)
            .is_some_and(|u| !written.contains(u))
        {
            obj.shift_remove("logicalParentUuid");
        }
        if let Some(u) = obj.get("uuid").filter(|u| u.is_string()) {
            previous = u.clone();
        }
    }
}

/// A UUID-shaped id (RFC 9562 version 8: custom, here a SHA-256 of the
/// session and a key) for a record noa writes. Derived, not random, so the
/// same view always materializes to the same bytes.
fn derived_uuid(session: &str, key: &str) -> String {
    let digest = Sha256::new()
        .chain_update(b"noa-materialize\0")
        .chain_update(session.as_bytes())
        .chain_update(b"\0")
        .chain_update(key.as_bytes())
        .finalize();
    uuid_text(&digest, 0x80)
}

/// The first 16 bytes of `digest` as a UUID's text, with the version
/// nibble `version` (`0x40` for 4, `0x80` for 8) and the RFC 9562 variant.
fn uuid_text(digest: &[u8], version: u8) -> String {
    let mut b = [0u8; 16];
    b.copy_from_slice(&digest[..16]);
    b[6] = (b[6] & 0x0f) | version;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

#[cfg(test)]
#[path = "materialize_tests.rs"]
mod tests;
