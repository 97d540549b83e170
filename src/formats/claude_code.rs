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

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use super::anthropic::{ToolNames, host_message};
use super::{BadLines, Format, HostMessage, ReadError, Transcript, jsonl};

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

/// Reads a session log into the messages the model saw.
pub(crate) fn read(name: &str, text: &str, bad: BadLines) -> Result<Transcript, ReadError> {
    let mut warnings = Vec::new();
    let records = jsonl::records(name, text, EXPECTED, bad, &mut warnings)?;
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
            warnings.push(format!("{name}:{}: not a JSON object; skipped", r.line));
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
    let is_conversation = |v: &Value| {
        matches!(
            v.get("type").and_then(Value::as_str),
            Some("user" | "assistant")
        )
    };
    let sidechain = |v: &Value| v.get("isSidechain").and_then(Value::as_bool) == Some(true);
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

    let mut tools = ToolNames::default();
    let mut messages: Vec<HostMessage> = Vec::new();
    let mut by_message_id: HashMap<&str, usize> = HashMap::new();
    // Which parsed records the messages come from, in the order they are kept.
    let mut kept_records: Vec<usize> = Vec::new();
    for (t, _) in turns.iter().zip(&chosen).filter(|(_, keep)| **keep) {
        let Some(m) = host_message(&t.value["message"], t.line, kept_records.len(), &mut tools)
        else {
            warnings.push(format!(
                "{name}:{}: message has no usable content; skipped",
                t.line
            ));
            continue;
        };
        kept_records.push(t.index);
        match t.message_id.and_then(|id| by_message_id.get(id)) {
            Some(&at) if t.assistant => append_blocks(&mut messages[at], m),
            _ => {
                if let (true, Some(id)) = (t.assistant, t.message_id) {
                    by_message_id.insert(id, messages.len());
                }
                let prompt_tokens = t.assistant.then(|| prompt_size(&t.value["message"]));
                messages.push(HostMessage {
                    prompt_tokens: prompt_tokens.flatten(),
                    ..m
                });
            }
        }
    }
    messages.retain(|m| !m.blocks.is_empty());
    // The kept lines move out of the parse: one copy of each, none of the
    // progress and bookkeeping lines around them.
    let mut records = records;
    let originals = kept_records
        .iter()
        .map(|&i| std::mem::take(&mut records[i].value))
        .collect();
    Ok(Transcript {
        format: Format::ClaudeCode,
        session_id,
        parent_session,
        messages,
        warnings,
        records: originals,
        preamble: Vec::new(),
    })
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
    warnings: &mut Vec<String>,
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
        warnings.push(format!(
            "{name}:{line}: {kind} record without message content; skipped"
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
    for (t, c) in turns.iter().zip(chosen.iter_mut()) {
        if !*c && t.assistant && t.message_id.is_some_and(|id| message_ids.contains(id)) {
            *c = true;
        }
    }
    let calls: HashSet<&str> = turns
        .iter()
        .zip(&chosen)
        .filter(|(t, c)| **c && t.assistant)
        .flat_map(|(t, _)| block_ids(t.value, "tool_use", "id"))
        .collect();
    let mut answered: HashSet<&str> = turns
        .iter()
        .zip(&chosen)
        .filter(|(t, c)| **c && !t.assistant)
        .flat_map(|(t, _)| block_ids(t.value, "tool_result", "tool_use_id"))
        .collect();
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
