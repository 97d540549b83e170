//! Prune: covered messages leave the view and their blocks' summaries take
//! their place.

use crate::engine::model::identity::{IdMap, IdSet};

use super::carry::{Carry, Planned};
use super::deferred::DeferredOutputs;
use super::hide;
use super::sync::Coverage;
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
    let covered = Coverage::of(&state.blocks);
    prune_marked(view, state, &covered, DeferredOutputs::default(), |_| {
        IdSet::default()
    })
    .view
}

/// What [`prune_marked`] gives.
pub struct Pruned<'a> {
    /// The view, summaries in place.
    pub view: Vec<CoreMessage>,
    /// For each message of the history: whether it was taken out. Every
    /// other message's words a later turn may need, as long as no block is
    /// taken away.
    pub hidden: Vec<bool>,
    /// The tool results the view holds without their words.
    pub deferred: DeferredOutputs<'a>,
}

/// [`prune`] with the turn's [`Coverage`] of `state`'s blocks, and a flag
/// for each message of `view` (see [`Pruned`]). Of the messages kept, the
/// Compress exchanges `spent` names, given them all in order, are left out
/// (see [`hide::spent_calls`]) and the others copied by `deferred`, which
/// may hold tool results without their words.
/// Summaries are placed as if the spent exchanges were still there, so the
/// view is what hiding them from the whole view would leave.
pub fn prune_marked<'a>(
    view: &'a [CoreMessage],
    state: &CompressionState,
    covered: &Coverage,
    deferred: DeferredOutputs<'a>,
    spent: impl FnOnce(&[&'a CoreMessage]) -> IdSet<'a>,
) -> Pruned<'a> {
    // The first active block standing for each message, looked up once.
    let (firsts, shown) = if covered.is_empty() {
        (vec![None; view.len()], IdSet::default())
    } else {
        let firsts = covered.firsts(view);
        let shown = shown_anyway(view, &firsts);
        (firsts, shown)
    };

    // Where each block's summary goes: how many messages were kept before
    // the first message it takes out.
    let mut anchor: Vec<Option<usize>> = vec![None; state.blocks.len()];
    let mut kept: Vec<&'a CoreMessage> = Vec::with_capacity(view.len());
    // For each kept message: whether an assistant's turn ended among the
    // messages taken out just before it.
    let mut turn_ended: Vec<bool> = Vec::with_capacity(view.len());
    let mut ended = false;
    let mut hidden = Vec::with_capacity(view.len());
    let mut taken_at: IdMap<'_, usize> = IdMap::default();
    for (m, first) in view.iter().zip(firsts) {
        let block = first.filter(|_| !shown.contains(m.id.as_str()));
        match block {
            Some(b) => {
                anchor[b].get_or_insert(kept.len());
                if !covered.more().is_empty() {
                    taken_at.entry(m.id.as_str()).or_insert(kept.len());
                }
                ended |= m.role != Role::Assistant;
            }
            None => {
                kept.push(m);
                turn_ended.push(std::mem::take(&mut ended));
            }
        }
        hidden.push(block.is_some());
    }
    for &(id, b) in covered.more() {
        if let Some(&at) = taken_at.get(id) {
            let a = anchor[b].get_or_insert(at);
            *a = (*a).min(at);
        }
    }
    let (view, deferred) = place((kept, &turn_ended), anchor, state, deferred, spent);
    Pruned {
        view,
        hidden,
        deferred,
    }
}

/// [`prune_marked`] for a rebuild's call, from what its [`Carry`] holds of
/// the history up to the call (brought to the state's blocks): the same
/// view, but no flags of what is hidden, which a call does not read (the
/// `hidden` of what it gives is empty).
pub fn prune_carried<'a>(
    carry: &Carry<'a>,
    state: &CompressionState,
    mut deferred: DeferredOutputs<'a>,
    spent: impl FnOnce(&[&'a CoreMessage]) -> IdSet<'a>,
) -> Pruned<'a> {
    let Some(plan) = carry.plan(&state.blocks) else {
        let kept = (carry.kept(), &carry.turns_ended()[..]);
        let (view, deferred) = place(kept, carry.anchors(), state, deferred, spent);
        return Pruned {
            view,
            hidden: Vec::new(),
            deferred,
        };
    };
    deferred.reserve(
        (plan.iter())
            .filter(
                |p| matches!(p, Planned::Message(m) if m.content_type == ContentType::ToolResult),
            )
            .count(),
    );
    // One more for the nudge a turn may end the view with.
    let mut view = Vec::with_capacity(plan.len() + 1);
    view.extend(plan.into_iter().map(|p| match p {
        Planned::Message(m) => deferred.copy(m),
        Planned::Summary(b) => render_summary(&state.blocks[b]),
    }));
    Pruned {
        view,
        hidden: Vec::new(),
        deferred,
    }
}

/// The view of the messages `kept`, with each block's summary placed where
/// `anchor` says (how many kept messages come before it), moved on to the
/// next place it may stand (see [`exchange::may_stand_between`], told by
/// `turn_ended` for each kept message whether a turn ended among the
/// messages taken out before it); the Compress exchanges `spent` names
/// left out.
fn place<'a>(
    (kept, turn_ended): (Vec<&'a CoreMessage>, &[bool]),
    anchor: Vec<Option<usize>>,
    state: &CompressionState,
    mut deferred: DeferredOutputs<'a>,
    spent: impl FnOnce(&[&'a CoreMessage]) -> IdSet<'a>,
) -> (Vec<CoreMessage>, DeferredOutputs<'a>) {
    let mut placed: Vec<(usize, u64, CoreMessage)> = state
        .blocks
        .iter()
        .zip(anchor)
        .filter_map(|(b, at)| Some((at?, block_number(&b.block_id), render_summary(b))))
        .collect();
    placed.sort_by_key(|(anchor, n, _)| (*anchor, *n));
    let spent = spent(&kept);
    // One more for the nudge a turn may end the view with: a full list of
    // a long history pushed one more is copied into one twice its size.
    let mut out = Vec::with_capacity(kept.len() + placed.len() + 1);
    deferred.reserve(
        kept.iter()
            .filter(|m| m.content_type == ContentType::ToolResult)
            .count(),
    );
    let mut pending = placed.into_iter().peekable();
    let mut last = None;
    for (i, m) in kept.into_iter().enumerate() {
        while let Some((anchor, _, _)) = pending.peek() {
            let ended = turn_ended.get(i).copied().unwrap_or(false);
            if *anchor > i || !exchange::may_stand_between(last, m, ended) {
                break;
            }
            let summary = pending.next().expect("peeked").2;
            last = Some(summary.role);
            out.push(summary);
        }
        last = Some(m.role);
        if !hide::is_spent(m, &spent) {
            out.push(deferred.copy(m));
        }
    }
    out.extend(pending.map(|(_, _, s)| s));
    (out, deferred)
}

fn shown_anyway<'a>(view: &'a [CoreMessage], firsts: &[Option<usize>]) -> IdSet<'a> {
    let mut shown = IdSet::default();
    if let Some(task) = task_index(view) {
        shown.insert(view[task].id.as_str());
    }
    let hidden =
        |i: usize, shown: &IdSet| firsts[i].is_some() && !shown.contains(view[i].id.as_str());
    keep_reasoning_of_visible_actions(view, &mut shown, hidden);
    keep_compress_pairs_whole(view, &mut shown, hidden);
    shown
}

pub(crate) fn block_number(id: &str) -> u64 {
    id.trim_start_matches('b').parse().unwrap_or(u64::MAX)
}

/// Shows reasoning in an assistant run whose text or tool call stays
/// visible; `hidden` is asked of a message by its place in `view`.
fn keep_reasoning_of_visible_actions<'a>(
    view: &'a [CoreMessage],
    shown: &mut IdSet<'a>,
    hidden: impl Fn(usize, &IdSet) -> bool,
) {
    let spans = exchange::spans(view);
    let mut i = 0;
    while i < view.len() {
        let (start, end) = spans[i];
        let acts_visible = (start..=end).any(|j| {
            let m = &view[j];
            m.role == Role::Assistant
                && matches!(m.content_type, ContentType::Text | ContentType::ToolCall)
                && !hidden(j, shown)
        });
        if acts_visible {
            for m in view[start..=end]
                .iter()
                .filter(|m| m.content_type == ContentType::Reasoning)
            {
                shown.insert(m.id.as_str());
            }
        }
        i = end + 1;
    }
}

/// A Compress call and its result are shown together or not at all. The
/// halves are grouped by call id in one pass, so a log of many Compress
/// calls costs each call its own halves.
fn keep_compress_pairs_whole<'a>(
    view: &'a [CoreMessage],
    shown: &mut IdSet<'a>,
    hidden: impl Fn(usize, &IdSet) -> bool,
) {
    let mut halves: IdMap<'_, Vec<usize>> = IdMap::default();
    for (i, m) in view.iter().enumerate() {
        if m.tool_name == COMPRESS_TOOL && !m.tool_call_id.is_empty() {
            halves.entry(m.tool_call_id.as_str()).or_default().push(i);
        }
    }
    for pair in halves.values().filter(|h| {
        h.iter()
            .any(|&i| view[i].content_type == ContentType::ToolCall)
    }) {
        let n = pair.iter().filter(|&&i| hidden(i, shown)).count();
        if n > 0 && n < pair.len() {
            for &i in pair {
                shown.insert(view[i].id.as_str());
            }
        }
    }
}

#[cfg(test)]
#[path = "prune_tests.rs"]
mod tests;
