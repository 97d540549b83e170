//! Claude Code session logs.
//!
//! A session is a tree of records linked by `uuid`/`parentUuid`; the
//! conversation the model saw is the branch that ends at the last record,
//! plus the parallel tool calls and results that hang off it as side
//! branches. One API response is written as one line per content block, all
//! sharing `message.id`: those lines are one message. Progress, snapshots,
//! queue operations, sidechains (subagents) and system records are not part
//! of what the model saw. A `compact_boundary` starts a new root: what came
//! before it is summarised by the `isCompactSummary` record after it.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use serde_json::Value;

use super::anthropic::{ToolNames, host_message};
use super::jsonl::Record;
use super::{BadLines, Carry, Format, HostMessage, ReadError, Transcript, jsonl};

const EXPECTED: &str =
    "each line is one Claude Code session record (a JSON object with a \"type\")";

/// One conversation record (a user or assistant line).
struct Turn<'a> {
    /// Position in the parsed records.
    index: usize,
    line: usize,
    value: &'a Value,
    uuid: Option<&'a str>,
    parent: Option<&'a str>,
    assistant: bool,
    message_id: Option<&'a str>,
}

/// A session log's records, with the warnings reading them gave (by line).
pub(crate) fn parse(name: &str, text: &str, bad: BadLines) -> Result<Parsed, ReadError> {
    let mut warnings: Vec<(usize, String)> = Vec::new();
    let records = jsonl::records_from(name, text, 1, EXPECTED, bad, &mut |line, w| {
        warnings.push((line, w))
    })?;
    Ok((records, warnings))
}

/// Records and the warnings reading them gave, by line.
pub(crate) type Parsed = (Vec<Record>, Vec<(usize, String)>);

/// The messages the model saw, from a session log's records.
///
/// Warnings come in the order of the lines they name, so a log read on
/// from a prefix ([`read_after`]) warns as one read whole does.
///
/// Without `keep_records` each record's JSON is let go as soon as its
/// message is built (and those no message is built from, before), so the
/// parsed lines and the messages are never all held at once; the
/// transcript then carries no records (only `materialize` writes them back).
pub(crate) fn from_records(
    name: &str,
    mut records: Vec<Record>,
    mut warnings: Vec<(usize, String)>,
    keep_records: bool,
) -> Transcript {
    let session_id = records
        .iter()
        .find_map(|r| r.value.get("sessionId").and_then(Value::as_str))
        .map(str::to_string);

    // Parent links of every record, so chains that pass through progress or
    // system records can be followed.
    let mut parents: HashMap<&str, Option<&str>> = HashMap::new();
    let mut boundaries: HashSet<&str> = HashSet::new();
    let mut last_boundary = None;
    for (i, r) in records.iter().enumerate() {
        let Some(obj) = r.value.as_object() else {
            warnings.push((r.line, not_an_object(name, r.line)));
            continue;
        };
        let uuid = obj.get("uuid").and_then(Value::as_str);
        if let Some(u) = uuid {
            parents.insert(u, obj.get("parentUuid").and_then(Value::as_str));
        }
        if obj.get("subtype").and_then(Value::as_str) == Some("compact_boundary") {
            last_boundary = Some(i);
            boundaries.extend(uuid);
        }
    }

    // A subagent's own log holds nothing but sidechain records: then those
    // are the conversation, and the session that spawned it is its parent.
    let subagent = records.iter().any(|r| is_conversation(&r.value))
        && records
            .iter()
            .filter(|r| is_conversation(&r.value))
            .all(|r| sidechain(&r.value));
    let (session_id, parent_session) = if subagent {
        let agent = records
            .iter()
            .find_map(|r| r.value.get("agentId").and_then(Value::as_str))
            .map(str::to_string);
        (agent.or_else(|| session_id.clone()), session_id)
    } else {
        (session_id, None)
    };

    let start = last_boundary.map_or(0, |i| i + 1);
    let turns: Vec<Turn> = records
        .iter()
        .enumerate()
        .skip(start)
        .filter_map(|(i, r)| conversation_turn(name, i, r.line, &r.value, subagent, &mut warnings))
        .collect();
    let chosen = choose_branch(&turns, &parents, &boundaries);

    // What the messages are built from, and what the next lines need of the
    // records: taken while the records are only read.
    let plan: Vec<(usize, usize, bool)> = turns
        .iter()
        .zip(&chosen)
        .filter(|(_, keep)| **keep)
        .map(|(t, _)| (t.index, t.line, t.assistant))
        .collect();
    let carry = Carry {
        subagent: turns.first().map(|_| subagent),
        strays: turns
            .iter()
            .zip(&chosen)
            .filter(|(_, keep)| !**keep)
            .flat_map(|(t, _)| stray_ids(t))
            .map(str::to_string)
            .collect(),
        ..joining_point(&records, &turns)
    };
    let step = |(index, line, assistant): (usize, usize, bool), value| Step {
        index,
        line,
        assistant,
        value,
    };
    let built = if keep_records {
        let steps = plan
            .iter()
            .map(|&p| step(p, Cow::Borrowed(&records[p.0].value)));
        build_messages(name, steps, ToolNames::default(), &mut warnings)
    } else {
        let mut planned = vec![false; records.len()];
        for &(index, ..) in &plan {
            planned[index] = true;
        }
        for (r, _) in records.iter_mut().zip(planned).filter(|(_, p)| !p) {
            r.value = Value::Null;
        }
        let steps = plan
            .iter()
            .map(|&p| step(p, Cow::Owned(std::mem::take(&mut records[p.0].value))));
        build_messages(name, steps, ToolNames::default(), &mut warnings)
    };
    let carry = Carry {
        responses: sorted(built.by_message_id.keys().cloned()),
        ..carry
    };
    let Built { messages, kept, .. } = built;
    let originals = if keep_records {
        originals(records, &kept)
    } else {
        Vec::new()
    };
    finish(
        (session_id, parent_session),
        (messages, originals),
        warnings,
        carry,
    )
}

/// One record a message is built from: its position in the parsed records,
/// its line, whose it is, and its JSON (borrowed, or taken from the record
/// to be let go once built).
struct Step<'v> {
    index: usize,
    line: usize,
    assistant: bool,
    value: Cow<'v, Value>,
}

/// The messages of the records the model saw, in order: the lines of one
/// response merged into one message, each response's recorded prompt size
/// kept.
fn build_messages<'v>(
    name: &str,
    steps: impl Iterator<Item = Step<'v>>,
    mut tools: ToolNames,
    warnings: &mut Vec<(usize, String)>,
) -> Built {
    let mut built = Built::default();
    for t in steps {
        let message = &t.value["message"];
        let id = message
            .get("id")
            .and_then(Value::as_str)
            .filter(|_| t.assistant)
            .map(str::to_string);
        let prompt_tokens = t.assistant.then(|| prompt_size(message)).flatten();
        let Some(m) = host_message(message, t.line, built.kept.len(), &mut tools) else {
            warnings.push((t.line, no_content(name, t.line)));
            continue;
        };
        built.kept.push(t.index);
        match id.as_ref().and_then(|id| built.by_message_id.get(id)) {
            Some(&at) => append_blocks(&mut built.messages[at], m),
            None => {
                if let Some(id) = id {
                    built.by_message_id.insert(id, built.messages.len());
                }
                built.messages.push(HostMessage { prompt_tokens, ..m });
            }
        }
    }
    built.messages.retain(|m| !m.blocks.is_empty());
    built
}

/// Messages built from records, and what the next lines need of them.
#[derive(Default)]
struct Built {
    messages: Vec<HostMessage>,
    /// Each response's message, by `message.id`.
    by_message_id: HashMap<String, usize>,
    /// Which parsed records the messages come from, in the order kept.
    kept: Vec<usize>,
}

/// The kept lines, moved out of the parse: one copy of each, none of the
/// progress and bookkeeping lines around them.
fn originals(mut records: Vec<Record>, kept: &[usize]) -> Vec<Value> {
    kept.iter()
        .map(|&i| std::mem::take(&mut records[i].value))
        .collect()
}

/// The transcript, warnings in the order of their lines.
fn finish(
    (session_id, parent_session): (Option<String>, Option<String>),
    (messages, originals): (Vec<HostMessage>, Vec<Value>),
    mut warnings: Vec<(usize, String)>,
    carry: Carry,
) -> Transcript {
    warnings.sort_by_key(|(line, _)| *line);
    Transcript {
        format: Format::ClaudeCode,
        session_id,
        parent_session,
        messages,
        warnings: warnings.into_iter().map(|(_, w)| w).collect(),
        records: originals,
        preamble: Vec::new(),
        carry,
    }
}

/// The session a log's first lines name, and the one that spawned it when
/// its first conversation record is a sidechain (a subagent's own log), as
/// [`read`] names them from the whole log.
pub(crate) fn peek_session(head: &str) -> (Option<String>, Option<String>) {
    let field = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
    let (mut session, mut agent, mut first_sidechain) = (None, None, None);
    for v in head
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
    {
        session = session.or_else(|| field(&v, "sessionId"));
        agent = agent.or_else(|| field(&v, "agentId"));
        if first_sidechain.is_none() && is_conversation(&v) {
            first_sidechain = Some(sidechain(&v));
        }
        if session.is_some() && (first_sidechain == Some(false) || agent.is_some()) {
            break;
        }
    }
    match first_sidechain {
        Some(true) => (agent.or_else(|| session.clone()), session),
        _ => (session, None),
    }
}

fn sorted(ids: impl Iterator<Item = String>) -> Vec<String> {
    let mut ids: Vec<String> = ids.collect();
    ids.sort_unstable();
    ids
}

fn is_conversation(v: &Value) -> bool {
    matches!(
        v.get("type").and_then(Value::as_str),
        Some("user" | "assistant")
    )
}

fn sidechain(v: &Value) -> bool {
    v.get("isSidechain").and_then(Value::as_bool) == Some(true)
}

fn not_an_object(name: &str, line: usize) -> String {
    format!("{name}:{line}: not a JSON object; skipped")
}

fn no_content(name: &str, line: usize) -> String {
    format!("{name}:{line}: message has no usable content; skipped")
}

/// Where the next lines' branch must join this read's: the last
/// conversation record, and the records after it that chain back to it.
fn joining_point(records: &[Record], turns: &[Turn]) -> Carry {
    let Some(leaf) = turns.last() else {
        return Carry::default();
    };
    Carry {
        leaf: leaf.uuid.map(str::to_string),
        after_leaf: chained(&records[leaf.index + 1..], leaf.uuid.into_iter()),
        ..Carry::default()
    }
}

/// The uuids of the records that chain back, parent by parent, to one of
/// `ends`.
fn chained<'a>(records: &'a [Record], ends: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut chain: HashSet<&str> = ends.collect();
    let mut out = Vec::new();
    for r in records {
        let uuid = r.value.get("uuid").and_then(Value::as_str);
        let parent = r.value.get("parentUuid").and_then(Value::as_str);
        if let (Some(u), Some(p)) = (uuid, parent)
            && chain.contains(p)
        {
            chain.insert(u);
            out.push(u.to_string());
        }
    }
    out
}

/// Takes in the side branches of the chosen exchanges: the other lines of a
/// response in `responses`, then results that all answer a call made on
/// the branch (or in `calls`) and not in `answered` yet.
fn take_side_branches<'a>(
    turns: &[Turn<'a>],
    chosen: &mut [bool],
    responses: &HashSet<&str>,
    mut calls: HashSet<&'a str>,
    mut answered: HashSet<&'a str>,
) {
    for (t, c) in turns.iter().zip(chosen.iter_mut()) {
        if !*c && t.assistant && t.message_id.is_some_and(|id| responses.contains(id)) {
            *c = true;
        }
    }
    calls.extend(
        turns
            .iter()
            .zip(chosen.iter())
            .filter(|(t, c)| **c && t.assistant)
            .flat_map(|(t, _)| block_ids(t.value, "tool_use", "id")),
    );
    for (t, c) in turns.iter().zip(chosen.iter_mut()) {
        if *c || t.assistant {
            continue;
        }
        let results = block_ids(t.value, "tool_result", "tool_use_id");
        if !results.is_empty()
            && results
                .iter()
                .all(|id| calls.contains(id) && !answered.contains(id))
        {
            answered.extend(results);
            *c = true;
        }
    }
}

/// Ids a record off the branch holds that a later record could pull it in
/// by: its response's id, and the calls its results answer.
fn stray_ids<'a>(t: &Turn<'a>) -> Vec<&'a str> {
    let mut ids: Vec<&str> = block_ids(t.value, "tool_result", "tool_use_id");
    ids.extend(t.message_id.filter(|_| t.assistant));
    ids
}

/// What reading on needs to know of the prefix.
pub(crate) struct Prefix<'a> {
    /// What its read carried.
    pub carry: &'a Carry,
    /// The calls its messages make.
    pub calls: &'a HashSet<&'a str>,
    /// The calls its results answer.
    pub answered: &'a HashSet<&'a str>,
    /// Whether it named its session.
    pub has_session: bool,
}

/// Reads the lines appended after a prefix read earlier: what `carry` says
/// of the prefix (where its branch ends, its responses, the records it left
/// off), `answered` the calls its results answer, `tools` its calls' tool
/// names. `None` when the new lines would change how the prefix reads — a
/// compaction, a branch that leaves the prefix's last record (a rewind), a
/// record the prefix left off pulled back in, a response or an answer that
/// continues one of the prefix's, a subagent log that stops being one — or
/// name a session where the prefix named none: then the log is read whole.
pub(crate) fn read_after(
    name: &str,
    text: &str,
    first_line: usize,
    bad: BadLines,
    prefix: Prefix,
    tools: ToolNames,
) -> Option<Result<Transcript, ReadError>> {
    let Prefix {
        carry,
        calls,
        answered,
        has_session,
    } = prefix;
    let subagent = carry.subagent?;
    let mut warnings: Vec<(usize, String)> = Vec::new();
    let records = match jsonl::records_from(name, text, first_line, EXPECTED, bad, &mut |l, w| {
        warnings.push((l, w))
    }) {
        Ok(r) => r,
        Err(e) => return Some(Err(e)),
    };
    let mut parents: HashMap<&str, Option<&str>> = HashMap::new();
    for r in &records {
        let Some(obj) = r.value.as_object() else {
            warnings.push((r.line, not_an_object(name, r.line)));
            continue;
        };
        let names_session = obj.contains_key("sessionId") || obj.contains_key("agentId");
        if obj.get("subtype").and_then(Value::as_str) == Some("compact_boundary")
            || (subagent && is_conversation(&r.value) && !sidechain(&r.value))
            || (!has_session && names_session)
        {
            return None;
        }
        if let Some(u) = obj.get("uuid").and_then(Value::as_str) {
            parents.insert(u, obj.get("parentUuid").and_then(Value::as_str));
        }
    }
    let turns: Vec<Turn> = records
        .iter()
        .enumerate()
        .filter_map(|(i, r)| conversation_turn(name, i, r.line, &r.value, subagent, &mut warnings))
        .collect();
    let branch = tail_branch(&turns, &parents, carry)?;
    let chosen = choose_tail(&turns, branch, carry, calls, answered)?;
    let responses: HashSet<&str> = carry.responses.iter().map(String::as_str).collect();
    let strays: HashSet<&str> = carry.strays.iter().map(String::as_str).collect();
    let new_strays: Vec<String> = turns
        .iter()
        .zip(&chosen)
        .filter(|(_, keep)| !**keep)
        .flat_map(|(t, _)| stray_ids(t))
        .map(str::to_string)
        .collect();
    // A record that continues a response the prefix holds, or pulls in one
    // the prefix left off, changes how the prefix reads.
    let takes = |t: &Turn| {
        let id = t.message_id.filter(|_| t.assistant);
        !(id.is_some_and(|id| responses.contains(id) || strays.contains(id))
            || block_ids(t.value, "tool_use", "id")
                .iter()
                .any(|c| strays.contains(c)))
    };
    let chosen_turns = || turns.iter().zip(&chosen).filter(|(_, keep)| **keep);
    if !chosen_turns().all(|(t, _)| takes(t)) {
        return None;
    }
    let steps = chosen_turns().map(|(t, _)| Step {
        index: t.index,
        line: t.line,
        assistant: t.assistant,
        value: Cow::Borrowed(t.value),
    });
    let built = build_messages(name, steps, tools, &mut warnings);
    let joined = match turns.last() {
        Some(_) => joining_point(&records, &turns),
        None => {
            let ends = carry
                .leaf
                .iter()
                .chain(&carry.after_leaf)
                .map(String::as_str);
            let mut after_leaf = carry.after_leaf.clone();
            after_leaf.extend(chained(&records, ends));
            Carry {
                leaf: carry.leaf.clone(),
                after_leaf,
                ..Carry::default()
            }
        }
    };
    let carry = Carry {
        subagent: carry.subagent,
        responses: sorted(
            carry
                .responses
                .iter()
                .cloned()
                .chain(built.by_message_id.keys().cloned()),
        ),
        strays: carry.strays.iter().cloned().chain(new_strays).collect(),
        ..joined
    };
    let Built { messages, kept, .. } = built;
    Some(Ok(finish(
        (None, None),
        (messages, originals(records, &kept)),
        warnings,
        carry,
    )))
}

/// The new conversation records on the branch that ends at the last of
/// them, when that branch joins the prefix's where it ended: the walk
/// [`choose_branch`] takes over the whole log then passes through them and
/// goes on exactly as it did over the prefix. `None` when it would leave
/// the prefix's branch (a rewind) or stop short of it.
fn tail_branch(
    turns: &[Turn],
    parents: &HashMap<&str, Option<&str>>,
    carry: &Carry,
) -> Option<Vec<bool>> {
    let Some(last) = turns.len().checked_sub(1) else {
        return Some(Vec::new());
    };
    let position: HashMap<&str, usize> = turns
        .iter()
        .enumerate()
        .filter_map(|(i, t)| Some((t.uuid?, i)))
        .collect();
    let mut on_branch = vec![false; turns.len()];
    let mut on_path: HashSet<&str> = HashSet::new();
    let mut i = last;
    'walk: loop {
        on_branch[i] = true;
        on_path.extend(turns[i].uuid);
        let mut parent = turns[i].parent;
        loop {
            match parent {
                Some(p) if on_path.contains(p) => return None,
                Some(p) if position.contains_key(p) => {
                    i = position[p];
                    continue 'walk;
                }
                Some(p) if parents.contains_key(p) => {
                    on_path.insert(p);
                    parent = parents[p];
                }
                Some(p) => {
                    if carry.leaf.as_deref() == Some(p) || carry.after_leaf.iter().any(|a| a == p) {
                        break 'walk;
                    }
                    return None;
                }
                None if i == 0 => break 'walk,
                None if on_branch[i - 1] => return None,
                None => {
                    i -= 1;
                    continue 'walk;
                }
            }
        }
    }
    Some(on_branch)
}

/// Which new records the model saw: the branch, and the side branches of
/// the same exchanges as [`choose_branch`] takes them in — blocks of a
/// response on the branch, results answering a call on it. `calls` and
/// `answered` are the prefix's. `None` when a record on the branch would
/// change how the prefix reads: an answer to a call the prefix already
/// answered (it could push out one the prefix took in).
fn choose_tail(
    turns: &[Turn],
    mut chosen: Vec<bool>,
    carry: &Carry,
    calls: &HashSet<&str>,
    answered: &HashSet<&str>,
) -> Option<Vec<bool>> {
    let on_branch: Vec<&Turn> = turns
        .iter()
        .zip(&chosen)
        .filter(|(_, c)| **c)
        .map(|(t, _)| t)
        .collect();
    let mut responses: HashSet<&str> = carry.responses.iter().map(String::as_str).collect();
    responses.extend(
        on_branch
            .iter()
            .filter(|t| t.assistant)
            .filter_map(|t| t.message_id),
    );
    let mut answered: HashSet<&str> = answered.clone();
    for t in on_branch.iter().filter(|t| !t.assistant) {
        for id in block_ids(t.value, "tool_result", "tool_use_id") {
            if !answered.insert(id) {
                return None;
            }
        }
    }
    take_side_branches(turns, &mut chosen, &responses, calls.clone(), answered);
    Some(chosen)
}

/// The prompt size the API reported for a response: fresh input plus what
/// was written to and read from the prompt cache. `None` when the record
/// carries no usage, or a zero one (synthetic messages the host wrote).
fn prompt_size(message: &Value) -> Option<usize> {
    let usage = message.get("usage")?;
    let field = |k: &str| usage.get(k).and_then(Value::as_u64).unwrap_or(0);
    let total = field("input_tokens")
        + field("cache_creation_input_tokens")
        + field("cache_read_input_tokens");
    usize::try_from(total).ok().filter(|&n| n > 0)
}

/// A user or assistant record that belongs to the conversation (the main
/// one, or a subagent's own in its sidechain file).
fn conversation_turn<'a>(
    name: &str,
    index: usize,
    line: usize,
    v: &'a Value,
    subagent: bool,
    warnings: &mut Vec<(usize, String)>,
) -> Option<Turn<'a>> {
    let obj = v.as_object()?;
    let kind = obj.get("type").and_then(Value::as_str)?;
    if !matches!(kind, "user" | "assistant") {
        return None;
    }
    if (!subagent && obj.get("isSidechain").and_then(Value::as_bool) == Some(true))
        || obj.get("isApiErrorMessage").and_then(Value::as_bool) == Some(true)
    {
        return None;
    }
    let message = obj.get("message");
    if message.is_none_or(|m| m.get("content").is_none()) {
        warnings.push((
            line,
            format!("{name}:{line}: {kind} record without message content; skipped"),
        ));
        return None;
    }
    Some(Turn {
        index,
        line,
        value: v,
        uuid: obj.get("uuid").and_then(Value::as_str),
        parent: obj.get("parentUuid").and_then(Value::as_str),
        assistant: kind == "assistant",
        message_id: message.and_then(|m| m.get("id")).and_then(Value::as_str),
    })
}

/// Marks the turns on the branch the model saw.
///
/// Walks from the last turn to its root. A record with no known parent (hand
/// written logs leave `parentUuid` null everywhere) links to the turn before
/// it in the file. Side branches are taken in when they are part of the same
/// exchange: blocks of a response already chosen, and tool results answering
/// a chosen call. Abandoned branches (a rewound prompt and its replies) stay out.
fn choose_branch(
    turns: &[Turn],
    parents: &HashMap<&str, Option<&str>>,
    boundaries: &HashSet<&str>,
) -> Vec<bool> {
    let mut chosen = vec![false; turns.len()];
    let Some(leaf) = turns.len().checked_sub(1) else {
        return chosen;
    };
    let position: HashMap<&str, usize> = turns
        .iter()
        .enumerate()
        .filter_map(|(i, t)| Some((t.uuid?, i)))
        .collect();
    let mut on_path: HashSet<&str> = HashSet::new();
    let mut i = leaf;
    'walk: loop {
        chosen[i] = true;
        on_path.extend(turns[i].uuid);
        let mut parent = turns[i].parent;
        // Follow the chain through records that are not turns.
        loop {
            match parent {
                Some(p) if boundaries.contains(p) => break 'walk,
                Some(p) if on_path.contains(p) => break 'walk,
                Some(p) if position.contains_key(p) => {
                    i = position[p];
                    continue 'walk;
                }
                Some(p) if parents.contains_key(p) => {
                    on_path.insert(p);
                    parent = parents[p];
                }
                _ => {
                    if i == 0 || chosen[i - 1] {
                        break 'walk;
                    }
                    i -= 1;
                    continue 'walk;
                }
            }
        }
    }
    // Side branches of the same exchanges.
    let message_ids: HashSet<&str> = turns
        .iter()
        .zip(&chosen)
        .filter(|(t, c)| **c && t.assistant)
        .filter_map(|(t, _)| t.message_id)
        .collect();
    let answered: HashSet<&str> = turns
        .iter()
        .zip(&chosen)
        .filter(|(t, c)| **c && !t.assistant)
        .flat_map(|(t, _)| block_ids(t.value, "tool_result", "tool_use_id"))
        .collect();
    take_side_branches(turns, &mut chosen, &message_ids, HashSet::new(), answered);
    chosen
}

/// The ids named by blocks of one type in a record's message content.
fn block_ids<'a>(v: &'a Value, kind: &str, field: &str) -> Vec<&'a str> {
    v["message"]["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some(kind))
        .filter_map(|b| b.get(field).and_then(Value::as_str))
        .collect()
}

/// Adds a later line's blocks to the message its response started.
fn append_blocks(target: &mut HostMessage, more: HostMessage) {
    if let (Some(a), Some(b)) = (
        target.raw["content"].as_array_mut(),
        more.raw["content"].as_array(),
    ) {
        a.extend(b.iter().cloned());
    }
    target.blocks.extend(more.blocks);
}
