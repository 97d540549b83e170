//! Writing a view: the engine's cores back into provider request messages.
//!
//! Consecutive cores from one host message become that message again, with
//! only the kept blocks, each edited as the engine's [`Edit`] says (never by
//! comparing texts); everything else about the message comes from its
//! original JSON. Cores with no host message (block
//! summaries, the nudge) and every core of a conversion to another format are
//! written from the core alone.

use std::borrow::Cow;
use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::{ContentBlock, HostMessage, Transcript, ViewFormat, anthropic, chat, codex};
use crate::engine::ContentType;
use crate::engine::Edit;
use crate::engine::quote::{quote_markers, quote_markers_before};
use crate::engine::{CoreMessage, IdMap, IdSet};

/// What a writer does to a block's original JSON, from the engine's [`Edit`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum BlockEdit {
    /// Unchanged.
    None,
    /// Something (a ref tag) was appended.
    Append(String),
    /// The text was replaced (a truncated tool output, stubbed Compress
    /// arguments).
    Replace(String),
}

impl BlockEdit {
    fn of(core: &CoreMessage) -> BlockEdit {
        match &core.edit {
            Edit::None => BlockEdit::None,
            Edit::Tagged(suffix) => BlockEdit::Append(suffix.clone()),
            Edit::Truncated(_) | Edit::ArgsShortened | Edit::Reclaimed => {
                BlockEdit::Replace(shown_text(core).into_owned())
            }
        }
    }

    /// The new arguments of a tool call, when they were rewritten.
    pub(crate) fn call_arguments(&self) -> Option<&str> {
        match self {
            BlockEdit::Replace(args) => Some(args),
            _ => None,
        }
    }

    /// A tool call's `input` object with its arguments rewritten; the
    /// original when they were not, or do not parse as JSON, with any look-
    /// alike of noa's markers in its strings quoted.
    pub(crate) fn apply_input(&self, input: &Value) -> Value {
        self.call_arguments()
            .and_then(|args| serde_json::from_str(args).ok())
            .unwrap_or_else(|| quoted_value(input.clone()))
    }

    /// The edited form of a plain string, look-alikes of noa's markers in
    /// what came from the log quoted (see [`quote_markers`]).
    pub(crate) fn apply_str(&self, s: &str) -> String {
        match self {
            BlockEdit::None => quote_markers(s).into_owned(),
            BlockEdit::Append(suffix) => format!("{}{suffix}", quote_markers(s)),
            BlockEdit::Replace(new) => new.clone(),
        }
    }

    /// A copy of a content part (`{"type": …, "text": …}`) with its text edited.
    pub(crate) fn apply_part(&self, part: &Value) -> Value {
        let mut p = part.clone();
        if let Some(Value::String(t)) = p.get_mut("text") {
            *t = self.apply_str(t);
        }
        p
    }

    /// The edited form of a tool output that may be a string, a list of
    /// parts, or absent. `text_type` is the part type a new text part gets.
    pub(crate) fn apply_content(&self, content: Value, text_type: &str) -> Value {
        let text_part = |t: &str| json!({ "type": text_type, "text": t });
        match (self, content) {
            (_, Value::String(s)) => Value::String(self.apply_str(&s)),
            (BlockEdit::None, c) => quoted_value(c),
            (BlockEdit::Append(suffix), Value::Array(parts)) => {
                let mut parts: Vec<Value> = parts.into_iter().map(quoted_value).collect();
                let last_text = parts
                    .iter_mut()
                    .rev()
                    .find_map(|p| match p.get_mut("text") {
                        Some(Value::String(t)) => Some(t),
                        _ => None,
                    });
                match last_text {
                    Some(t) => t.push_str(suffix),
                    None => parts.push(text_part(suffix.trim_start_matches('\n'))),
                }
                Value::Array(parts)
            }
            (BlockEdit::Replace(new), Value::Array(parts)) => {
                let mut kept: Vec<Value> = vec![text_part(new)];
                kept.extend(parts.into_iter().filter(|p| p.get("text").is_none()));
                Value::Array(kept)
            }
            (BlockEdit::Append(suffix), _) => {
                Value::String(suffix.trim_start_matches('\n').to_string())
            }
            (BlockEdit::Replace(new), _) => Value::String(new.clone()),
        }
    }
}

/// The words a view's core was read with: its text less the ref tag this
/// turn appended. Readers move a block's words into its core and leave a
/// null in its JSON; writers put these back there, then edit as
/// [`BlockEdit`] says. (A cut text is replaced whole by its edit.)
///
/// Look-alikes of noa's markers in them are quoted, but in reasoning, whose
/// signature covers its every byte.
pub(crate) fn read_words(shown: &CoreMessage) -> Cow<'_, str> {
    let words = match &shown.edit {
        Edit::Tagged(tag) => shown.text.strip_suffix(tag.as_str()),
        _ => None,
    }
    .unwrap_or(&shown.text);
    match shown.content_type {
        ContentType::Reasoning => Cow::Borrowed(words),
        _ => quote_markers(words),
    }
}

/// The text a core goes out with when it is written from the core alone:
/// as noa wrote it for noa's own (summaries, the nudge, the note of what
/// was left out) and reasoning, else with look-alikes of noa's markers
/// quoted, noa's own ref tag at its end kept.
pub(crate) fn shown_text(c: &CoreMessage) -> Cow<'_, str> {
    // noa's line for a reclaimed output quotes what it names itself.
    let noas = c.id.starts_with(NOA_IDS) || c.edit == Edit::Reclaimed;
    if noas || c.content_type == ContentType::Reasoning {
        return Cow::Borrowed(&c.text);
    }
    match &c.edit {
        Edit::Tagged(tag) | Edit::Truncated(tag) => quote_markers_before(&c.text, tag),
        _ => quote_markers(&c.text),
    }
}

/// What the ids of the cores noa writes itself start with: block summaries
/// (whose model-written words are quoted when they are rendered), the
/// nudge and the note of messages left out.
const NOA_IDS: &str = "noa_";

/// `v` with look-alikes of noa's markers quoted in every string it holds.
fn quoted_value(v: Value) -> Value {
    match v {
        Value::String(s) => match quote_markers(&s) {
            Cow::Borrowed(_) => Value::String(s),
            Cow::Owned(q) => Value::String(q),
        },
        Value::Array(items) => Value::Array(items.into_iter().map(quoted_value).collect()),
        Value::Object(fields) => Value::Object(
            fields
                .into_iter()
                .map(|(k, v)| (k, quoted_value(v)))
                .collect(),
        ),
        other => other,
    }
}

/// Messages written so far, and what a conversion could not carry.
#[derive(Debug, Default)]
pub(crate) struct Emitted {
    pub messages: Vec<Value>,
    lost: BTreeSet<String>,
}

impl Emitted {
    pub(crate) fn push(&mut self, v: Value) {
        self.messages.push(v);
    }
    pub(crate) fn lost(&mut self, what: &str) {
        self.lost.insert(what.to_string());
    }
}

/// Writes `view` as request messages in `to`. Returns the messages and a
/// warning for each kind of thing a conversion had to drop.
pub fn reassemble(
    t: &Transcript,
    view: &[CoreMessage],
    to: ViewFormat,
) -> (Vec<Value>, Vec<String>) {
    reassemble_among(t, view, to, &[])
}

/// Where each message of `view` came from among the transcript's blocks
/// (its message's place, and the block's in it). Only the view's ids are
/// indexed, and a message whose blocks are all `hidden` is passed over.
fn where_shown_from<'t>(
    t: &'t Transcript,
    view: &[CoreMessage],
    hidden: &[bool],
) -> IdMap<'t, (usize, usize)> {
    let shown: IdSet = view.iter().map(|m| m.id.as_str()).collect();
    let mut index: IdMap<(usize, usize)> = IdMap::default();
    let mut flat = 0;
    for (mi, m) in t.messages.iter().enumerate() {
        let from = flat;
        flat += m.blocks.len();
        if hidden.get(from..flat).is_some_and(|h| !h.contains(&false)) {
            continue;
        }
        for (bi, b) in m.blocks.iter().enumerate() {
            let id = b.id.as_str();
            if hidden.get(from + bi) != Some(&true) && shown.contains(id) {
                index.insert(id, (mi, bi));
            }
        }
    }
    index
}

/// [`reassemble`], told which of the transcript's blocks the view leaves
/// out: `hidden` marks them by place among all its blocks, as the flat
/// history lays them out (a projection's [`hidden`]). A long session's view
/// is a small part of its transcript, and the blocks folded away are passed
/// over without their ids being looked up.
///
/// [`hidden`]: crate::engine::Projection::hidden
pub fn reassemble_among(
    t: &Transcript,
    view: &[CoreMessage],
    to: ViewFormat,
    hidden: &[bool],
) -> (Vec<Value>, Vec<String>) {
    let native = to == t.format.view_format();
    let index = where_shown_from(t, view, hidden);
    let mut out = Emitted::default();
    let mut i = 0;
    while i < view.len() {
        let origin = index.get(view[i].id.as_str()).map(|&(mi, _)| mi);
        let mut j = i + 1;
        while j < view.len()
            && origin.is_some()
            && index.get(view[j].id.as_str()).map(|&(mi, _)| mi) == origin
        {
            j += 1;
        }
        let group = &view[i..j];
        match origin {
            Some(mi) if native => {
                let msg = &t.messages[mi];
                let parts: Vec<(&ContentBlock, BlockEdit)> = group
                    .iter()
                    .map(|c| (&msg.blocks[index[c.id.as_str()].1], BlockEdit::of(c)))
                    .collect();
                rebuild(to, msg, (&parts, group), &mut out);
            }
            _ => synthesize(to, &group.iter().collect::<Vec<_>>(), &mut out),
        }
        i = j;
    }
    let messages = match to {
        ViewFormat::Anthropic => anthropic::merge_role_runs(out.messages),
        ViewFormat::Chat => chat::hoist_tool_messages(out.messages),
        _ => out.messages,
    };
    let warnings = out
        .lost
        .into_iter()
        .map(|what| {
            format!(
                "converting {} to {}: dropped {what}",
                t.format.name(),
                to.name()
            )
        })
        .collect();
    (messages, warnings)
}

/// One host message from its kept blocks, with the view's cores of them.
fn rebuild(
    to: ViewFormat,
    msg: &HostMessage,
    (parts, shown): (&[(&ContentBlock, BlockEdit)], &[CoreMessage]),
    out: &mut Emitted,
) {
    match to {
        ViewFormat::Anthropic => out.push(anthropic::rebuild(msg, parts, shown)),
        ViewFormat::Chat => out.push(chat::rebuild(msg, parts, shown)),
        ViewFormat::Responses => out.push(codex::rebuild(msg, parts, shown)),
    }
}

fn synthesize(to: ViewFormat, cores: &[&CoreMessage], out: &mut Emitted) {
    match to {
        ViewFormat::Anthropic => anthropic::synthesize(cores, out),
        ViewFormat::Chat => chat::synthesize(cores, out),
        ViewFormat::Responses => codex::synthesize(cores, out),
    }
}
