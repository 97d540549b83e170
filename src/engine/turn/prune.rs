//! Prune: covered messages leave the view and their blocks' summaries take
//! their place.

use super::deferred::DeferredOutputs;
use super::history_index::{HistoryIndex, Planned};
use super::{hide, reclaim};
use crate::engine::model::exchange;
use crate::engine::model::message::{ContentType, CoreMessage, Edit};
use crate::engine::model::state::CompressionState;
use crate::engine::model::summary::render_summary;

/// What [`prune`] gives.
pub struct Pruned<'a> {
    /// The view, summaries in place.
    pub view: Vec<CoreMessage>,
    /// The tool results the view holds without their words.
    pub deferred: DeferredOutputs<'a>,
}

/// Replaces what active blocks cover with their summaries, from what
/// `index` found of the history (brought to the state's blocks).
///
/// Kept visible although covered: the first user message (the task and its
/// constraints), the reasoning of a response whose action stays visible, and
/// both halves of a Compress exchange when only one half is covered. Each
/// summary goes where its earliest covered message was, moved forward to the
/// next exchange boundary so it never sits inside a tool exchange. Of the
/// messages kept, the spent Compress exchanges are left out (see
/// [`hide::spent_calls`]), and the others are copied by `deferred`, which
/// may hold tool results without their words. Summaries are placed as if
/// the spent exchanges were still there, so the view is what hiding them
/// from the whole view would leave.
pub fn prune<'a>(
    index: &HistoryIndex<'a>,
    state: &CompressionState,
    mut deferred: DeferredOutputs<'a>,
) -> Pruned<'a> {
    let Some(plan) = index.plan(&state.blocks) else {
        let kept = (index.kept(), &index.turns_ended()[..]);
        let (view, deferred) = place(kept, index.anchors(), state, deferred);
        return Pruned { view, deferred };
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
        Planned::Message(m) => shown(m, state, &mut deferred),
        Planned::Summary(b) => render_summary(&state.blocks[b]),
    }));
    Pruned { view, deferred }
}

/// The view of the messages `kept`, with each block's summary placed where
/// `anchor` says (how many kept messages come before it), moved on to the
/// next place it may stand (see [`exchange::may_stand_between`], told by
/// `turn_ended` for each kept message whether a turn ended among the
/// messages taken out before it); the spent Compress exchanges left out.
fn place<'a>(
    (kept, turn_ended): (Vec<&'a CoreMessage>, &[bool]),
    anchor: Vec<Option<usize>>,
    state: &CompressionState,
    mut deferred: DeferredOutputs<'a>,
) -> (Vec<CoreMessage>, DeferredOutputs<'a>) {
    let mut placed: Vec<(usize, u64, CoreMessage)> = state
        .blocks
        .iter()
        .zip(anchor)
        .filter_map(|(b, at)| Some((at?, block_number(&b.block_id), render_summary(b))))
        .collect();
    placed.sort_by_key(|(anchor, n, _)| (*anchor, *n));
    let spent = hide::spent_calls(kept.iter().copied(), state);
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
            out.push(shown(m, state, &mut deferred));
        }
    }
    out.extend(pending.map(|(_, _, s)| s));
    (out, deferred)
}

/// The view's copy of `m`: noa's line for an output reclaimed (and a spent
/// call's arguments with it), else as `deferred` copies it.
fn shown<'a>(
    m: &'a CoreMessage,
    state: &CompressionState,
    deferred: &mut DeferredOutputs<'a>,
) -> CoreMessage {
    let reclaimed = &state.host.reclaimed;
    let tool = matches!(
        m.content_type,
        ContentType::ToolResult | ContentType::ToolCall
    );
    let Some(r) = (tool && !reclaimed.is_empty())
        .then(|| reclaimed.get(m.id.as_str()))
        .flatten()
    else {
        return deferred.copy(m);
    };
    let by = reclaim::made_dead_by(&r.why);
    let by_ref = state.message_refs.usable(by).unwrap_or("a later message");
    let line = reclaim::line(r, by_ref);
    let text = match m.content_type {
        ContentType::ToolCall => reclaim::spent_arguments(&m.text, &line),
        _ => line,
    };
    let mut out = m.without_text();
    out.replace_text(text, Edit::Reclaimed);
    out
}

pub(crate) fn block_number(id: &str) -> u64 {
    id.trim_start_matches('b').parse().unwrap_or(u64::MAX)
}

#[cfg(test)]
#[path = "prune_tests.rs"]
mod tests;
