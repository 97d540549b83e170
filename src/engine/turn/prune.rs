//! Prune: covered messages leave the view and their blocks' summaries take
//! their place.

use crate::engine::model::identity::{IdMap, IdSet};

use super::sync::covered_ids;
use crate::engine::model::exchange;
use crate::engine::model::message::COMPRESS_TOOL;
use crate::engine::model::message::{ContentType, CoreMessage, Role, task_index};
use crate::engine::model::state::CompressionState;
use crate::engine::model::summary::render_summary;

/// Replaces what active blocks cover with their summaries.
///
/// Kept visible although covered: the first user message (the task and its
/// constraints), the reasoning of a response whose action stays visible, and
/// both halves of a Compress exchange when only one half is covered. Each
/// summary goes where its earliest covered message was, moved forward to the
/// next exchange boundary so it never sits inside a tool exchange.
pub fn prune(view: &[CoreMessage], state: &CompressionState) -> Vec<CoreMessage> {
    prune_marked(view, state).0
}

/// [`prune`], with a flag for each message of `view`: whether it was taken
/// out (it is in [`hidden_ids`]), found in the same pass.
pub fn prune_marked(
    view: &[CoreMessage],
    state: &CompressionState,
) -> (Vec<CoreMessage>, Vec<bool>) {
    let covered = hidden_ids(view, state);
    if covered.is_empty() {
        return (view.to_vec(), vec![false; view.len()]);
    }

    // Where each removed message would have been in the kept list.
    let mut kept: Vec<CoreMessage> = Vec::with_capacity(view.len());
    let mut hidden = Vec::with_capacity(view.len());
    let mut anchor_of: IdMap<'_, usize> =
        IdMap::with_capacity_and_hasher(covered.len(), Default::default());
    for m in view {
        let covers = covered.contains(m.id.as_str());
        if covers {
            anchor_of.entry(m.id.as_str()).or_insert(kept.len());
        } else {
            kept.push(m.clone());
        }
        hidden.push(covers);
    }
    let mut placed: Vec<(usize, u64, CoreMessage)> = state
        .blocks
        .iter()
        .filter(|b| b.active)
        .filter_map(|b| {
            let anchor = b
                .effective_message_ids
                .iter()
                .filter_map(|id| anchor_of.get(id.as_str()))
                .min()?;
            Some((*anchor, block_number(&b.block_id), render_summary(b)))
        })
        .collect();
    placed.sort_by_key(|(anchor, n, _)| (*anchor, *n));
    let mut out = Vec::with_capacity(kept.len() + placed.len());
    let mut pending = placed.into_iter().peekable();
    for (i, m) in kept.into_iter().enumerate() {
        while let Some((anchor, _, _)) = pending.peek() {
            if *anchor > i || !exchange::is_boundary_after(&out, &m) {
                break;
            }
            out.push(pending.next().expect("peeked").2);
        }
        out.push(m);
    }
    out.extend(pending.map(|(_, _, s)| s));
    (out, hidden)
}

/// Ids of the messages [`prune`] takes out of view: those the active
/// blocks cover, less the task, reasoning of a visible action and half a
/// Compress exchange. Every other message's words a later turn may need,
/// as long as no block is taken away.
pub fn hidden_ids<'a>(view: &'a [CoreMessage], state: &'a CompressionState) -> IdSet<'a> {
    let mut covered: IdSet<'a> = covered_ids(state);
    if covered.is_empty() {
        return covered;
    }
    if let Some(task) = task_index(view) {
        covered.remove(view[task].id.as_str());
    }
    keep_reasoning_of_visible_actions(view, &mut covered);
    keep_compress_pairs_whole(view, &mut covered);
    covered
}

fn block_number(id: &str) -> u64 {
    id.trim_start_matches('b').parse().unwrap_or(u64::MAX)
}

/// Uncovers reasoning in an assistant run whose text or tool call stays visible.
fn keep_reasoning_of_visible_actions<'a>(view: &'a [CoreMessage], covered: &mut IdSet<'a>) {
    let spans = exchange::spans(view);
    let mut i = 0;
    while i < view.len() {
        let (start, end) = spans[i];
        let run = &view[start..=end];
        let acts_visible = run.iter().any(|m| {
            m.role == Role::Assistant
                && matches!(m.content_type, ContentType::Text | ContentType::ToolCall)
                && !covered.contains(m.id.as_str())
        });
        if acts_visible {
            for m in run
                .iter()
                .filter(|m| m.content_type == ContentType::Reasoning)
            {
                covered.remove(m.id.as_str());
            }
        }
        i = end + 1;
    }
}

/// A Compress call and its result are shown together or not at all. The
/// halves are grouped by call id in one pass, so a log of many Compress
/// calls costs each call its own halves.
fn keep_compress_pairs_whole<'a>(view: &'a [CoreMessage], covered: &mut IdSet<'a>) {
    let mut halves: IdMap<'_, Vec<&CoreMessage>> = IdMap::default();
    for m in view
        .iter()
        .filter(|m| m.tool_name == COMPRESS_TOOL && !m.tool_call_id.is_empty())
    {
        halves.entry(m.tool_call_id.as_str()).or_default().push(m);
    }
    for pair in halves
        .values()
        .filter(|h| h.iter().any(|m| m.content_type == ContentType::ToolCall))
    {
        let n = pair
            .iter()
            .filter(|m| covered.contains(m.id.as_str()))
            .count();
        if n > 0 && n < pair.len() {
            for m in pair {
                covered.remove(m.id.as_str());
            }
        }
    }
}

#[cfg(test)]
#[path = "prune_tests.rs"]
mod tests;
