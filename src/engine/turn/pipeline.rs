//! One turn's projection: the history in, the view to send out.
//!
//! Order matters and is fixed: refs are assigned over the whole history
//! first (so every message has its address before anything is hidden), then
//! blocks are synced to the history, covered messages give way to summaries,
//! spent Compress exchanges are hidden and the view is trimmed to what the
//! provider accepts. The view is then measured; if it is near the window the
//! largest old tool outputs are cut; tags are rendered with their token
//! figures frozen in the state; and last the nudge decision is taken and, if
//! it says so, the nudge is appended as the final user message.

use crate::engine::model::identity::{IdMap, IdSet};

use super::deferred::{DeferredOutputs, Unfilled};
use super::figures::Figures;
use super::history_index::HistoryIndex;
use super::host;
use super::leave_out::{beyond_cutting, leave_out_first};
use super::truncate::{self, KeptCut, Truncation};
use super::{hide, prune, view};
use crate::engine::compress::reclaim::{Dead, Offered, dead_in_view};
use crate::engine::model::config::Config;
use crate::engine::model::message::COMPRESS_TOOL;
use crate::engine::model::message::{ContentType, CoreMessage, Edit, Role};
use crate::engine::model::name::Name;
use crate::engine::model::protect::is_tool_protected;
use crate::engine::model::refs::{Assigned, NUDGE_ID, OMITTED_ID};
use crate::engine::model::state::{Block, CompressionState, HostState, MessageRefs, NudgeState};
use crate::engine::model::tag;
use crate::engine::pressure::gauge::{self, Gauge, GaugeInput, Recorded, Source};
use crate::engine::pressure::nudge::{self, DecideInput, Decision};
use crate::engine::pressure::nudge_text::{self, NudgeInput};
use crate::engine::pressure::prompt::Sections;
use crate::engine::pressure::ranges::Breakdown;
use crate::engine::pressure::recommend::{Recommendation, breakdown, recommend};
use std::collections::{BTreeMap, BTreeSet};

/// What one turn is projected from.
#[derive(Debug, Clone, Copy)]
pub struct TurnInput<'a> {
    /// The model-visible history, flattened.
    pub history: &'a [CoreMessage],
    /// Engine settings; `context_limit` is the window in force (less the
    /// room kept for the reply: see [`Config::budgeted`]).
    pub config: &'a Config,
    /// The provider's input-token figure for the last request, if the host gave it.
    pub input_tokens: Option<usize>,
    /// Prompt sizes the transcript itself records.
    pub recorded: &'a [Recorded],
    /// Host overrides for the surface sections of the nudge.
    pub sections: &'a Sections,
    /// Nudge this turn whatever the pacing says: the host's "compact now".
    pub force_nudge: bool,
    /// A view a Compress call is resolved against (or a rebuild takes its
    /// refs from), not one that goes out. It keeps every message, over the
    /// window or not: it must hold whatever the nudge offered, even what
    /// the request itself had to leave out. And its tool results get no
    /// words: a call reads the view's ids, refs and counts, and the
    /// originals for what it archives, so copying every output of a long
    /// session into the view only held the words twice.
    pub for_call: bool,
    /// Cuts of tool results an earlier turn made ([`Projection::cuts`]),
    /// by id, when the history they were made of is unchanged: each is taken
    /// back if it still fits, rather than made again from the whole output.
    pub cuts: &'a IdMap<'a, KeptCut>,
}

/// The outcome of one projection.
#[derive(Debug, Clone)]
pub struct Projection {
    /// The messages to send: tags rendered, maybe truncated, maybe a nudge last.
    pub view: Vec<CoreMessage>,
    /// For each history message, whether a block takes it out of the view:
    /// what a later turn will not need the words of while the blocks stand.
    pub hidden: Vec<bool>,
    /// Refs handed out this turn.
    pub new_refs: usize,
    /// History messages without a ref because the ref space is exhausted
    /// (see `refs::Assigned`).
    pub unnumbered: usize,
    /// Every figure a surface shows of this turn.
    pub figures: Figures,
    /// How estimates became provider figures, and where the anchor came from.
    pub gauge: Gauge,
    /// History messages left out of the view as unpaired.
    pub dropped_unpaired: usize,
    /// What emergency truncation cut (the last resort's cuts included).
    pub truncation: Truncation,
    /// Messages the last resort left out of the view.
    pub omitted: usize,
    /// The cuts of tool results this turn made or took back, by id: what
    /// the next turn's [`TurnInput::cuts`] may take back.
    pub cuts: Vec<(String, KeptCut)>,
    /// The tool results in `view` left empty because the history did not
    /// hold their words ([`CoreMessage::withheld`]): the host fills them in
    /// before the view goes out.
    pub unfilled: Vec<Unfilled>,
    /// The nudge decision, with its reason.
    pub decision: Decision,
    /// What may and may not be compressed now.
    pub recommendation: Recommendation,
    /// The stale reads in view a nudged compression will reclaim too, on the
    /// provider's scale (none when the turn does not nudge).
    pub dead: Dead,
}

/// Projects the history into this turn's view, updating refs, block
/// activity, token figures, nudge pacing and host counters in `state`.
pub fn project(state: &mut CompressionState, input: &TurnInput) -> Projection {
    let mut index = HistoryIndex::new(input.history, input.recorded, input.config);
    project_with_index(state, input, &mut index)
}

/// [`project`] for a prefix of the history `index` was made for, going on
/// from what the index found of the prefix it saw last (see [`HistoryIndex`]): a
/// rebuild projects at each recorded call this way, walking only what
/// changed since the call before.
pub fn project_with_index<'a>(
    state: &mut CompressionState,
    input: &TurnInput<'a>,
    index: &mut HistoryIndex<'a>,
) -> Projection {
    let history = input.history;
    host::observe(&mut state.host, history);
    let numbered = number(state, input, index);
    let index = &*index;
    let covered = |id: &str| index.covers(id);
    let shown = show(state, input, index);
    let mut m = measure(state, input, shown, index);
    // The same turn projected again (a host retrying, nothing appended):
    // the same view, nudge included, and pacing is not counted twice.
    let same_turn = state.host.nudged && state.host.history_len == history.len();
    let growth = match same_turn {
        true => state.host.nudge_growth,
        false => growth_since_nudge(&state.nudge, m.measured),
    };
    let price = Pricing::new(m.gauge, input.config, m.measured, growth, &covered);
    let nudging = decide_nudge(state, input, &price, &m, same_turn);
    let inject = nudging.decision.inject;
    let room = price.room(m.estimate, nudging.reserve, inject, &state.host);
    let cut = &mut state.host.truncated;
    let fitted = fit(
        &mut m.view,
        &mut m.deferred,
        &mut m.truncation,
        cut,
        &room,
        !input.for_call,
    );
    // What the nudge lists is priced on the view with this turn's cuts, so
    // the same turn projected again (its cuts now sticky) says the same;
    // and it still lists what the last step below leaves out, which `apply`
    // can resolve.
    let rec = if m.truncation.count > m.reapplied {
        price.recommend(&m.view, state, &m.deferred)
    } else {
        nudging.rec
    };
    let decision = withdrawn_if_empty(nudging.decision, &rec, input.force_nudge);
    let dead = reclaimed_with_nudge(state, input, &price, (&m.view, &rec, &m.hidden), &decision);
    finish(
        Finishing {
            view: m.view,
            deferred: m.deferred,
            truncation: m.truncation,
            hidden: m.hidden,
            dropped_unpaired: m.dropped_unpaired,
            numbered,
            rec,
            decision,
            fitted,
            reserve: nudging.reserve,
            same_turn,
            dead,
        },
        &price,
        &mut state.host,
        &state.message_refs,
        &state.blocks,
        input,
    )
}

/// The view tagged, with the cuts earlier turns made taken again, and
/// measured on the provider's scale.
struct Measured<'a> {
    view: Vec<CoreMessage>,
    deferred: DeferredOutputs<'a>,
    /// See [`Projection::hidden`].
    hidden: Vec<bool>,
    dropped_unpaired: usize,
    truncation: Truncation,
    /// How many of `truncation`'s cuts earlier turns made.
    reapplied: usize,
    /// The view's estimate, earlier cuts in it.
    estimate: usize,
    gauge: Gauge,
    /// The size decisions are taken on.
    measured: usize,
}

/// Tags the view, cuts again what earlier turns cut, and measures it,
/// learning from the host's figure for the last request on the way.
fn measure<'a>(
    state: &mut CompressionState,
    input: &TurnInput<'a>,
    shown: Shown<'a>,
    index: &HistoryIndex<'a>,
) -> Measured<'a> {
    let (history, cfg) = (input.history, input.config);
    let Shown {
        mut view,
        mut deferred,
        hidden,
        dropped_unpaired,
    } = shown;
    let (refs, snapshot) = (&state.message_refs, &mut state.token_snapshot);
    tag_view(&mut view, &mut deferred, refs, snapshot, cfg);
    // Results cut on earlier turns are cut again; the others held are
    // counted.
    let cut_before = (&state.host.truncated, &state.host.truncated_at);
    let (truncation, cuts) = truncate::reapply(&mut view, &mut deferred, cut_before, cfg);
    // Measure the view as it would go out, on the provider's scale.
    let estimate: usize = view.iter().map(|m| cfg.tokens(m)).sum();
    let g = gauge_view(state, input, &view, &cuts, index);
    let heard =
        (input.input_tokens).filter(|&n| gauge::repeated(state, history.len(), n).is_none());
    learn_from_host(&mut state.host, heard, &g, estimate);
    Measured {
        measured: g.tokens(estimate + retried(input, &cuts)),
        view,
        deferred,
        hidden,
        dropped_unpaired,
        reapplied: truncation.count,
        truncation,
        estimate,
        gauge: g,
    }
}

/// Whether the turn nudges, on what it recommends, and the room kept for
/// the nudge.
struct Nudging {
    /// What the nudge lists, on the view before this turn's cuts.
    rec: Recommendation,
    decision: Decision,
    /// Estimated tokens kept for the nudge.
    reserve: usize,
}

/// Decides on the nudge for the measured view: the pacing's decision,
/// settled for the host's wishes (or the first try's, on `same_turn`), and
/// the room its text will take.
fn decide_nudge(
    state: &mut CompressionState,
    input: &TurnInput,
    price: &Pricing,
    m: &Measured,
    same_turn: bool,
) -> Nudging {
    let rec = price.recommend(&m.view, state, &m.deferred);
    let shown_now = price.breakdown(&m.view);
    let rough = |tier: u8, truncated: usize| {
        let nudge = price.nudge(
            &rec,
            &state.blocks,
            tier,
            truncated,
            shown_now,
            Dead::default(),
        );
        nudge_text::rough_size(&nudge)
    };
    let decision = price.decide(&rec, &state.nudge, &rough);
    let decision = if same_turn {
        shown_again(decision, &state.host)
    } else {
        settle(
            decision,
            &mut state.host,
            &mut state.nudge,
            input,
            m.measured,
        )
    };
    // Truncation makes room for the nudge too: the request as sent must fit.
    // The same turn again keeps the room its first try kept: priced anew on
    // a view its own cuts made, the nudge would list other figures, and a
    // room a few tokens wider leaves out other messages.
    let reserve = match decision.inject {
        true if same_turn && state.host.nudge_reserve > 0 => state.host.nudge_reserve,
        true => rough(decision.tier, 1),
        false => 0,
    };
    Nudging {
        rec,
        decision,
        reserve,
    }
}

/// The dead outputs in `view` the compression `decision` asks for will
/// reclaim too (see [`Offered`]): a nudge counts them, and asks for that
/// much less.
fn reclaimed_with_nudge(
    state: &CompressionState,
    input: &TurnInput,
    price: &Pricing,
    (view, rec, hidden): (&[CoreMessage], &Recommendation, &[bool]),
    decision: &Decision,
) -> Dead {
    let cfg = input.config;
    match decision.inject && cfg.reclaim && !input.for_call {
        true => {
            let offered = Offered::of(rec, decision.tier);
            dead_in_view(state, input.history, cfg, (view, &offered, hidden), &|m| {
                price.gauge.scale(cfg.tokens(m))
            })
        }
        false => Dead::default(),
    }
}

/// A turn decided and cut to fit, to be finished.
struct Finishing<'a> {
    view: Vec<CoreMessage>,
    deferred: DeferredOutputs<'a>,
    truncation: Truncation,
    hidden: Vec<bool>,
    dropped_unpaired: usize,
    numbered: Assigned,
    /// What the nudge lists.
    rec: Recommendation,
    decision: Decision,
    fitted: Fitted,
    /// Estimated tokens kept for the nudge.
    reserve: usize,
    same_turn: bool,
    /// The stale reads the nudged compression will reclaim too.
    dead: Dead,
}

/// Finishes a turn: leaves out what still does not fit, puts the words
/// back into the view, appends the nudge, works out the figures and keeps
/// in the host's books what the next turn needs.
fn finish(
    mut t: Finishing,
    price: &Pricing,
    host: &mut HostState,
    refs: &MessageRefs,
    blocks: &[Block],
    input: &TurnInput,
) -> Projection {
    let cfg = input.config;
    let omitted = match (t.fitted.over && !input.for_call, t.fitted.gone.take()) {
        (true, Some(gone)) => {
            truncate::drop_gone(&mut t.view, gone, |gone| omitted_note(gone, refs))
        }
        (true, None) => leave_out(&mut t.view, &t.fitted, refs, cfg),
        (false, _) => 0,
    };
    // What was cut, this turn or before, and then left out is not a cut the
    // view shows.
    if omitted > 0 {
        t.truncation.count = (t.view.iter())
            .filter(|m| matches!(m.edit, Edit::Truncated(_)))
            .count();
    }
    if !input.for_call {
        t.deferred.word_all(&mut t.view);
    }
    let unfilled = t.deferred.unfilled();
    let cuts = (t.deferred.made())
        .map(|(id, cut)| (id.to_string(), cut))
        .collect();
    let decision = &mut t.decision;
    if decision.inject {
        let breakdown = price.breakdown(&t.view);
        let nudge = price.nudge(
            &t.rec,
            blocks,
            decision.tier,
            t.truncation.count,
            breakdown,
            t.dead,
        );
        let nudge = NudgeInput {
            emergency: decision.emergency,
            ..nudge
        };
        let text = nudge_text::render(&nudge, input.sections);
        t.view.push(CoreMessage::text(NUDGE_ID, Role::User, text));
    }
    let estimated = breakdown(&t.view, cfg);
    let (g, measured) = (&price.gauge, price.measured);
    let figures = Figures::of(g, estimated, measured, cfg.window(), cfg.context_limit);
    let turn = Remembered {
        sent: estimated.messages(),
        decision,
        growth: price.growth,
        reserve: t.reserve,
        same_turn: t.same_turn,
    };
    remember(host, input.history.len(), &turn);
    decision.reason = with_ready(&decision.reason, &t.rec, t.truncation.count);
    Projection {
        view: t.view,
        hidden: t.hidden,
        new_refs: t.numbered.new,
        unnumbered: t.numbered.unnumbered,
        figures,
        gauge: *g,
        dropped_unpaired: t.dropped_unpaired,
        truncation: t.truncation,
        omitted,
        cuts,
        unfilled,
        decision: t.decision,
        recommendation: t.rec,
        dead: t.dead,
    }
}

/// Hands out refs over the whole history and brings the blocks up to it,
/// going on from where `index` left off.
fn number(state: &mut CompressionState, input: &TurnInput, index: &mut HistoryIndex) -> Assigned {
    let (history, cfg) = (input.history, input.config);
    debug_assert!(
        index.serves(history) && index.reads(input.recorded, cfg),
        "an index serves the history, figures and config it was made for"
    );
    let next = state.message_refs.highest_used() + 1;
    let protected = |m: &CoreMessage| hard_protected(m, cfg);
    let assigned = index.advance(state, history.len(), next, protected);
    index.sum_recorded();
    assigned
}

/// The view before it is tagged, measured and fitted.
struct Shown<'a> {
    view: Vec<CoreMessage>,
    /// See [`Projection::hidden`].
    hidden: Vec<bool>,
    /// The tool results in `view` held without their words so far.
    deferred: DeferredOutputs<'a>,
    /// History messages left out as unpaired.
    dropped_unpaired: usize,
}

/// What the model may see of the history: covered messages give way to
/// their summaries, spent Compress exchanges go, kept calls are stubbed
/// and what is left unpaired is dropped. Tool results come without their
/// words until the view is done: what is cut is cut from the original,
/// and what is left out never copied.
fn show<'a>(
    state: &CompressionState,
    input: &TurnInput<'a>,
    index: &HistoryIndex<'a>,
) -> Shown<'a> {
    let deferred = DeferredOutputs::holding(input.cuts);
    let pruned = prune::prune(index, state, deferred);
    let mut shown = pruned.view;
    hide::stub_calls(&mut shown);
    let before_pairing = shown.len();
    let view = view::drop_unpaired(shown);
    Shown {
        dropped_unpaired: before_pairing - view.len(),
        view,
        hidden: index.hidden().to_vec(),
        deferred: pruned.deferred,
    }
}

/// Tags every taggable message of `view` with its ref, where it stands (a
/// long view's messages are not moved); the view is in the order its refs
/// were handed out.
fn tag_view(
    view: &mut [CoreMessage],
    deferred: &mut DeferredOutputs,
    refs: &MessageRefs,
    snapshot: &mut BTreeMap<Name, usize>,
    cfg: &Config,
) {
    let mut near = 0;
    let mut figures = Frozen::after(snapshot);
    for m in view {
        let near = &mut near;
        let figures = &mut figures;
        if !deferred.tag(m, |original| tag_for(refs, figures, original, cfg, near))
            && let Some(t) = tag_for(refs, figures, m, cfg, near)
        {
            m.append_tag(&t);
        }
    }
    figures.keep();
}

/// The token snapshot as tags read and freeze it: the figures frozen for
/// refs past its last are gathered in ref order and put in at the end,
/// where each inserted alone searched the tree from its root (most of
/// tagging a long first turn, whose every ref is new).
struct Frozen<'s> {
    snapshot: &'s mut BTreeMap<Name, usize>,
    /// The snapshot's last ref when tagging began.
    last: Option<Name>,
    /// Figures of refs past `last`, by ref.
    past: Vec<(Name, usize)>,
}

impl<'s> Frozen<'s> {
    fn after(snapshot: &'s mut BTreeMap<Name, usize>) -> Frozen<'s> {
        let last = snapshot.last_key_value().map(|(r, _)| r.clone());
        Frozen {
            snapshot,
            last,
            past: Vec::new(),
        }
    }

    /// The figure of `r`: the one frozen for it, or `count`'s, frozen now.
    fn figure(&mut self, r: &str, count: impl FnOnce() -> usize) -> usize {
        let r = Name::new(r);
        if self.last.as_ref().is_some_and(|last| r <= *last) {
            return *self.snapshot.entry(r).or_insert_with(count);
        }
        match self.past.last() {
            Some((last, figure)) if *last == r => *figure,
            Some((last, _)) if *last > r => match self.past.binary_search_by(|(q, _)| q.cmp(&r)) {
                Ok(at) => self.past[at].1,
                Err(at) => {
                    let figure = count();
                    self.past.insert(at, (r, figure));
                    figure
                }
            },
            _ => {
                let figure = count();
                self.past.push((r, figure));
                figure
            }
        }
    }

    /// Puts the figures frozen past the snapshot's last into it: built as
    /// one tree and joined when they are many, inserted when few.
    fn keep(self) {
        if self.past.len() > self.snapshot.len() / 8 {
            let mut past: BTreeMap<Name, usize> = self.past.into_iter().collect();
            self.snapshot.append(&mut past);
        } else {
            self.snapshot.extend(self.past);
        }
    }
}

/// The view on the provider's scale (see [`gauge::gauge`]); `cuts` are the
/// earlier cuts in it.
fn gauge_view(
    state: &CompressionState,
    input: &TurnInput,
    view: &[CoreMessage],
    cuts: &[(usize, usize, usize)],
    index: &HistoryIndex,
) -> Gauge {
    gauge::gauge(&GaugeInput {
        history: input.history,
        view,
        recorded: input.recorded,
        input_tokens: input.input_tokens,
        state,
        config: input.config,
        cuts,
        index,
    })
}

/// How much the context grew since the last nudge shown.
fn growth_since_nudge(pacing: &NudgeState, measured: usize) -> usize {
    match pacing.last_nudge_shown_tokens {
        0 => 0,
        shown => measured.saturating_sub(shown),
    }
}

/// Learns from `heard`, the host's figure for the last request when it is
/// not the one learned from already (a host retrying the turn).
fn learn_from_host(host: &mut HostState, heard: Option<usize>, g: &Gauge, estimate: usize) {
    if let Some(n) = heard {
        let sent = match host.last_view_tokens {
            0 => estimate,
            sent => sent,
        };
        gauge::learn(&mut host.calibration, g, n, sent);
    }
}

/// What the cuts made at this very history length saved: decisions are
/// taken on the view before the turn's own cuts, and cuts made at this
/// length were made by this turn, tried before (a host retrying), so they
/// count as the first try counted them. A call's view is the view as the
/// model saw it, cuts and all.
fn retried(input: &TurnInput, cuts: &[(usize, usize, usize)]) -> usize {
    if input.for_call {
        return 0;
    }
    cuts.iter()
        .filter(|&&(_, _, made)| made == input.history.len())
        .map(|&(_, saved, _)| saved)
        .sum()
}

/// The decision of the same turn again: it nudges again as its first try
/// did, and says so; pacing is not stamped twice.
fn shown_again(mut decision: Decision, host: &HostState) -> Decision {
    decision.inject = true;
    decision.tier = host.nudge_tier.max(1);
    decision.emergency = host.nudge_emergency;
    decision.reason = match &host.nudge_reason {
        // Taken on the first try's view, before the cuts it made.
        Some(first) => format!("the same turn again, its nudge shown again: {first}"),
        None => format!(
            "the same turn again, its nudge shown again; {}",
            decision.reason
        ),
    };
    decision
}

/// A tier-1 nudge whose ranges this turn's cuts shrank below what a range
/// must hold offers nothing a call could name: it is not sent (a call
/// answering it could only be rejected). One the host `asked` for still goes.
fn withdrawn_if_empty(mut decision: Decision, rec: &Recommendation, asked: bool) -> Decision {
    if !asked && decision.inject && decision.tier == 1 && rec.ranges.is_empty() {
        decision.inject = false;
        decision.reason = format!(
            "{}; not sent: after this turn's cuts no range is left to offer",
            decision.reason
        );
    }
    decision
}

/// The decision as it stands once the turn is known: the host's "compact
/// now" nudges whatever the pacing says, and failed attempts in a row hold
/// nudges back. The pacing is stamped.
fn settle(
    mut decision: Decision,
    host: &mut HostState,
    pacing: &mut NudgeState,
    input: &TurnInput,
    measured: usize,
) -> Decision {
    let cfg = input.config;
    if input.force_nudge {
        decision.inject = true;
        decision.reason = format!("asked for by the host; {}", decision.reason);
    } else if decision.inject && host::suppressed(host, measured, cfg) {
        decision.inject = false;
        decision.reason = format!(
            "suppressed after {} failed attempt(s) in a row; {}",
            host.consecutive_failures, decision.reason
        );
    }
    nudge::stamp(pacing, measured, &decision, cfg);
    decision
}

/// What the request must fit in, and how sure its figure is.
struct Room<'g> {
    gauge: Gauge,
    /// The view's estimate, earlier cuts in it.
    estimate: usize,
    /// The size decisions were taken on.
    measured: usize,
    /// Estimated tokens kept for the nudge.
    reserve: usize,
    nudged: bool,
    config: &'g Config,
    /// The provider's figures have taught the estimator's ratio.
    calibrated: bool,
}

/// Where cutting to fit left the view.
struct Fitted {
    /// The view's estimate after the cuts.
    left: usize,
    /// Still over the window: what the last resort leaves out aims at
    /// `target` (an estimate).
    over: bool,
    target: usize,
    /// By place in the view, the messages the last resort chose to leave
    /// out before it cut anything.
    gone: Option<Vec<bool>>,
}

/// Cuts old tool output when the request nears the window, then, when that
/// is not enough and nothing the model can do comes in time, the largest
/// outputs, recent ones too; each cut joins the session's cuts, `cut`. A
/// view no cut can bring under the window (`may_leave_out`: not a call's)
/// first chooses the messages [`finish`] leaves out, and cuts the rest.
fn fit(
    view: &mut [CoreMessage],
    deferred: &mut DeferredOutputs,
    truncation: &mut Truncation,
    cut: &mut BTreeSet<Name>,
    room: &Room,
    may_leave_out: bool,
) -> Fitted {
    let (g, cfg, reserve) = (&room.gauge, room.config, room.reserve);
    let over = |left: usize| g.tokens(left + reserve) > cfg.context_limit;
    // The last resort aims a little under the window, so the next turn
    // does not land on the edge again.
    let target = g
        .estimate_for(cfg.context_limit * 9 / 10)
        .saturating_sub(reserve);
    // A view that no cut brings under the window chooses what it leaves
    // out first, and cuts only what stays: the passes below would cut every
    // output, and most of them would then be left out.
    if may_leave_out && beyond_cutting(view, cfg, |uncut| uncut > target && over(uncut)) {
        let out = leave_out_first(view, (target, cfg), (cut, deferred));
        truncation.absorb(out.cut);
        return Fitted {
            left: out.left,
            over: true,
            target,
            gone: Some(out.gone),
        };
    }
    let mut left = room.estimate;
    let threshold = (cfg.context_limit as f64 * cfg.truncate.threshold) as usize;
    // A view that indexes a nudge and fits the window as it is goes out
    // uncut: the model is asked to compress now, and cutting output it is
    // about to fold away would break the cached prefix for nothing. Only
    // when the figure can be held to the window that closely: the provider's
    // figures have taught the estimator's ratio, or the host sends none and
    // the estimate is the only scale there is.
    let sure = g.source == Source::Estimate || room.calibrated;
    let needed = room.measured + g.scale(reserve);
    let fits_with_nudge = room.nudged && sure && needed <= cfg.context_limit;
    if needed >= threshold && !fits_with_nudge {
        let target = g
            .estimate_for((threshold as f64 * 0.9) as usize)
            .saturating_sub(reserve);
        let more = truncate::truncate(view, room.estimate, target, cfg, cut, deferred);
        left -= more.saved;
        truncation.absorb(more);
    }
    if over(left) {
        let more = truncate::cut_largest(view, left, target, cfg, cut, deferred);
        left -= more.saved;
        truncation.absorb(more);
    }
    Fitted {
        left,
        over: over(left),
        target,
        gone: None,
    }
}

/// What the next turn needs to know of this one.
struct Remembered<'d> {
    /// The view's estimate as sent, nudge included.
    sent: usize,
    decision: &'d Decision,
    growth: usize,
    reserve: usize,
    same_turn: bool,
}

/// Keeps in the host's books what a later turn, or this one again, needs:
/// where this turn's cuts were made, the size sent, and how it nudged.
fn remember(host: &mut HostState, history_len: usize, turn: &Remembered) {
    // The cuts made this turn are those not yet placed.
    let made: Vec<Name> = (host.cuts())
        .filter(|(_, at)| at.is_none())
        .map(|(id, _)| id.clone())
        .collect();
    (host.truncated_at).extend(made.into_iter().map(|id| (id, history_len)));
    let d = turn.decision;
    host.last_view_tokens = turn.sent;
    host.history_len = history_len;
    host.nudged = d.inject;
    host.nudge_tier = if d.inject { d.tier } else { 0 };
    host.nudge_emergency = d.inject && d.emergency;
    host.nudge_growth = if d.inject { turn.growth } else { 0 };
    host.nudge_reserve = turn.reserve;
    if !turn.same_turn {
        host.nudge_reason = d.inject.then(|| d.reason.clone());
    }
}

/// The last resort: leaves out the oldest messages the view can do
/// without, down to `fitted`'s target, with a note where they were.
fn leave_out(
    view: &mut Vec<CoreMessage>,
    fitted: &Fitted,
    refs: &MessageRefs,
    cfg: &Config,
) -> usize {
    truncate::omit(view, fitted.left, fitted.target, cfg, |gone| {
        omitted_note(gone, refs)
    })
}

/// A decision's reason with what each tier could reclaim, as the nudge and
/// `ranges` list it (after this turn's cuts, when it made any).
fn with_ready(reason: &str, rec: &Recommendation, truncated: usize) -> String {
    let after = if truncated > 0 { "after them, " } else { "" };
    format!("{reason}; {after}{}", nudge::ready(rec.pending))
}

/// How a turn prices what it shows: on the provider's scale, as every
/// surface shows it, against the size its decisions are taken on.
struct Pricing<'t> {
    gauge: Gauge,
    config: &'t Config,
    /// The size decisions are taken on.
    measured: usize,
    /// How much the context grew since the last nudge.
    growth: usize,
    /// Whether an active block stands for a message, by id.
    covered: &'t dyn Fn(&str) -> bool,
}

impl<'t> Pricing<'t> {
    fn new(
        gauge: Gauge,
        config: &'t Config,
        measured: usize,
        growth: usize,
        covered: &'t dyn Fn(&str) -> bool,
    ) -> Pricing<'t> {
        Pricing {
            gauge,
            config,
            measured,
            growth,
            covered,
        }
    }

    /// The room a view of `estimate` must fit in, `reserve` kept for its
    /// nudge when it has one (`nudged`).
    fn room(&self, estimate: usize, reserve: usize, nudged: bool, host: &HostState) -> Room<'_> {
        Room {
            gauge: self.gauge,
            estimate,
            measured: self.measured,
            reserve,
            nudged,
            config: self.config,
            calibrated: host.calibration.ratio().is_some(),
        }
    }

    /// What may and may not be compressed in `view`.
    fn recommend(
        &self,
        view: &[CoreMessage],
        state: &CompressionState,
        deferred: &DeferredOutputs,
    ) -> Recommendation {
        recommend(view, state, self.covered, self.config, &|m| {
            deferred.chars(m)
        })
        .scaled(|t| self.gauge.scale(t))
    }

    /// What a nudge says the request is made of: the view it ends, and the
    /// host's share.
    fn breakdown(&self, view: &[CoreMessage]) -> Breakdown {
        Breakdown {
            host: self.gauge.host(),
            ..breakdown(view, self.config).scaled(|t| self.gauge.scale(t))
        }
    }

    /// The decision on `rec`, with the pacing stamps as they stand; `rough`
    /// is what a nudge of a tier would cost, estimated.
    fn decide(
        &self,
        rec: &Recommendation,
        pacing: &NudgeState,
        rough: &dyn Fn(u8, usize) -> usize,
    ) -> Decision {
        nudge::decide(&DecideInput {
            tokens: self.measured,
            pending: rec.pending,
            block_counts: rec.tier_blocks.each_ref().map(Vec::len),
            nudge_cost: [1, 2, 3].map(|t| self.gauge.scale(rough(t, 0))),
            nudge: pacing,
            config: self.config,
        })
    }

    /// What a nudge of `tier` shows, from `rec`, this turn's
    /// recommendation on the state's `blocks`.
    fn nudge<'r>(
        &self,
        rec: &'r Recommendation,
        blocks: &'r [Block],
        tier: u8,
        truncated: usize,
        breakdown: Breakdown,
        dead: Dead,
    ) -> NudgeInput<'r> {
        let offered = rec.ranges.iter().map(|r| r.tokens).sum();
        let left = self.measured.saturating_sub(dead.tokens);
        let reclaim = nudge::reclaim_target(self.config, left, offered);
        NudgeInput {
            tier,
            emergency: false,
            ranges: &rec.ranges,
            protected: &rec.protected,
            blocks: &rec.blocks,
            breakdown,
            growth: self.growth,
            truncated,
            targets: rec.targets(tier, blocks),
            reclaim: if tier == 1 { reclaim } else { 0 },
            dead,
        }
    }
}

/// The note that stands where the last resort left messages out: how many,
/// which refs, and that the transcript still holds them.
fn omitted_note(gone: &[&CoreMessage], refs: &MessageRefs) -> CoreMessage {
    // Only the first and the last ref are named: a session far over its
    // window leaves out most of its history.
    let usable = |m: &&CoreMessage| refs.usable(&m.id);
    let (first, last) = (
        gone.iter().find_map(usable),
        gone.iter().rev().find_map(usable),
    );
    let span = match (first, last) {
        (Some(a), Some(b)) if a != b => format!(" ({a}–{b})"),
        (Some(a), _) => format!(" ({a})"),
        _ => String::new(),
    };
    CoreMessage::text(
        OMITTED_ID,
        Role::User,
        format!(
            "[noa: {} earlier message(s){span} are left out of this request: even with old tool output cut, the conversation did not fit the context window. The session transcript keeps them unchanged.]",
            gone.len()
        ),
    )
}

/// Messages that never get a ref and are never compressed: instructions,
/// Compress itself, and configured tools.
fn hard_protected(m: &CoreMessage, cfg: &Config) -> bool {
    m.role == Role::System || is_tool_protected(&m.tool_name, &cfg.protected_tools)
}

/// The view without what only a live session needs: no tags, no
/// truncation, no nudge, and no Compress exchanges. What `materialize`
/// writes, so a session can go on without noa. Works on a copy of the state.
///
/// The live view keeps the latest Compress exchange (and failures after it)
/// because the model must read how its call went; once materialized, the summaries
/// stand on their own and a call to a tool the host no longer runs says
/// nothing, so every Compress call and its result are left out. Whatever is
/// left unpaired by that (reasoning that led only into the call) goes too.
pub fn resumable_view(
    state: &CompressionState,
    history: &[CoreMessage],
    cfg: &Config,
) -> Vec<CoreMessage> {
    let mut state = state.clone();
    let next = state.message_refs.highest_used() + 1;
    let mut index = HistoryIndex::new(history, &[], cfg);
    index.advance(&mut state, history.len(), next, |m| hard_protected(m, cfg));
    let pruned = prune::prune(&index, &state, DeferredOutputs::default()).view;
    let calls: IdSet<'_> = pruned
        .iter()
        .filter(|m| m.is_compress_call())
        .map(|m| m.tool_call_id.as_str())
        .collect();
    let spent = |m: &CoreMessage| match m.content_type {
        ContentType::ToolCall => m.tool_name == COMPRESS_TOOL,
        ContentType::ToolResult => {
            m.tool_name == COMPRESS_TOOL || calls.contains(m.tool_call_id.as_str())
        }
        _ => false,
    };
    let kept: Vec<CoreMessage> = pruned.iter().filter(|m| !spent(m)).cloned().collect();
    view::drop_unpaired(kept)
}

/// The ref tag of a taggable message that has a ref, its token figure
/// frozen the first time it is shown. Its ref is looked for at `near`
/// first, which is left just after it.
fn tag_for(
    refs: &MessageRefs,
    figures: &mut Frozen,
    m: &CoreMessage,
    cfg: &Config,
    near: &mut usize,
) -> Option<String> {
    if !m.is_taggable() {
        return None;
    }
    let r = refs.usable_near(&m.id, near)?;
    let figure = figures.figure(r, || cfg.tokens(m));
    let source = match (m.content_type, m.tool_name.is_empty()) {
        (ContentType::ToolResult, true) => Some("tool"),
        (ContentType::ToolResult, false) => Some(m.tool_name.as_str()),
        _ => None,
    };
    Some(tag::render(r, figure, source))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::model::refs::BLOCKED;
    use crate::engine::model::tokenizer::Tokenizer;
    use crate::engine::turn::truncate::Cut;

    fn turn(history: &[CoreMessage]) -> TurnInput<'_> {
        static CONFIG: std::sync::LazyLock<Config> = std::sync::LazyLock::new(Config::default);
        static SECTIONS: std::sync::LazyLock<Sections> =
            std::sync::LazyLock::new(Sections::default);
        static NONE: std::sync::LazyLock<IdMap<'static, KeptCut>> =
            std::sync::LazyLock::new(IdMap::default);
        TurnInput {
            history,
            config: &CONFIG,
            input_tokens: None,
            recorded: &[],
            sections: &SECTIONS,
            force_nudge: false,
            for_call: false,
            cuts: &NONE,
        }
    }

    #[test]
    fn the_host_can_ask_for_a_nudge_now() {
        let mut st = CompressionState::new("s");
        let h: Vec<CoreMessage> = (0..6)
            .map(|i| CoreMessage::text(format!("m{i}"), Role::User, "x".repeat(4_000)))
            .collect();
        let quiet = project(&mut st.clone(), &turn(&h));
        assert!(!quiet.decision.inject, "far below the nudge band");
        let asked = project(
            &mut st,
            &TurnInput {
                force_nudge: true,
                ..turn(&h)
            },
        );
        assert!(asked.decision.inject, "{}", asked.decision.reason);
        assert_eq!(asked.view.last().unwrap().id, NUDGE_ID);
        assert!(asked.decision.reason.starts_with("asked for by the host"));
    }

    /// A history whose view is about 24,000 tokens plus `extra`: a task,
    /// eight old Read outputs of 3,000 tokens, a recent exchange.
    fn large(extra: usize) -> Vec<CoreMessage> {
        let mut h = vec![CoreMessage::text("task", Role::User, "fix the parser")];
        for i in 0..8 {
            h.push(CoreMessage::tool_call(
                format!("c{i}"),
                format!("t{i}"),
                "Read",
                "{}",
            ));
            let body = format!("line {i}\n").repeat(12_000 / 7);
            h.push(CoreMessage::tool_result(
                format!("r{i}"),
                format!("t{i}"),
                "Read",
                body,
            ));
        }
        h.push(CoreMessage::text("q", Role::User, "x ".repeat(2 * extra)));
        h.push(CoreMessage::text("a", Role::Assistant, "looking"));
        h
    }

    #[test]
    fn a_nudge_that_fits_goes_out_uncut_when_the_scale_is_known() {
        static SECTIONS: std::sync::LazyLock<Sections> =
            std::sync::LazyLock::new(Sections::default);
        let cfg = Config::for_window(40_000);
        let input = |h: &[CoreMessage], tokens: Option<usize>| -> Projection {
            let input = TurnInput {
                history: h,
                config: &cfg,
                input_tokens: tokens,
                recorded: &[],
                sections: &SECTIONS,
                force_nudge: true,
                for_call: false,
                cuts: &IdMap::default(),
            };
            project(&mut CompressionState::new("s"), &input)
        };
        // Grow the view until, nudge included, it passes the truncation line
        // (95%) but still fits the window.
        let mut checked = 0;
        for extra in (10_000..16_000).step_by(250) {
            let h = large(extra);
            let p = input(&h, None);
            let line = cfg.context_limit * 95 / 100;
            if p.truncation.count > 0 || p.figures.request < line {
                continue;
            }
            assert!(
                p.figures.request <= cfg.context_limit,
                "{} over the window",
                p.figures.request
            );
            assert!(p.decision.inject);
            checked += 1;
            // The same request when the host gave a figure whose ratio is not
            // learned yet: noa's figure may be off, so the line holds.
            let q = input(&h, Some(p.figures.before_cuts));
            assert!(q.truncation.count > 0, "{}: not cut", q.figures.request);
        }
        assert!(
            checked > 0,
            "no size landed between the line and the window"
        );
    }

    #[test]
    fn a_view_for_a_call_counts_as_the_request_and_holds_no_output() {
        let cfg = Config::for_window(20_000);
        let h = large(0);
        let request = TurnInput {
            config: &cfg,
            ..turn(&h)
        };
        let st = CompressionState::new("s");
        let (mut a, mut b) = (st.clone(), st);
        let sent = project(&mut a, &request);
        let call = project(
            &mut b,
            &TurnInput {
                for_call: true,
                ..request
            },
        );
        // Cut to fit, nothing left out: the two views hold the same messages.
        assert!(sent.truncation.count > 0 && sent.omitted == 0);
        assert_eq!(
            (
                call.figures.request,
                call.figures.before_cuts,
                call.truncation.count
            ),
            (
                sent.figures.request,
                sent.figures.before_cuts,
                sent.truncation.count
            )
        );
        assert_eq!(call.cuts, sent.cuts);
        assert_eq!(call.hidden, sent.hidden);
        assert_eq!(call.view.len(), sent.view.len());
        for (c, s) in call.view.iter().zip(&sent.view) {
            assert_eq!(c.id, s.id);
            assert_eq!(cfg.tokens(c), cfg.tokens(s), "{}", s.id);
            match s.content_type {
                ContentType::ToolResult => assert!(c.text.is_empty(), "{}", s.id),
                _ => assert_eq!(c.text, s.text),
            }
        }
        assert_eq!(a.message_refs, b.message_refs);
        assert_eq!(a.token_snapshot, b.token_snapshot);
    }

    #[test]
    fn a_cut_kept_from_the_last_turn_is_taken_back_only_while_it_fits() {
        let cfg = Config::for_window(20_000);
        let h = large(0);
        let input = TurnInput {
            config: &cfg,
            ..turn(&h)
        };
        let mut st = CompressionState::new("s");
        let first = project(&mut st, &input);
        assert!(first.truncation.count > 0 && !first.cuts.is_empty());
        let kept: IdMap<'_, KeptCut> = first.cuts.iter().map(|(id, c)| (id.as_str(), *c)).collect();
        let with = |cuts: &IdMap<'_, KeptCut>| {
            let mut next = st.clone();
            let p = project(&mut next, &TurnInput { cuts, ..input });
            (p, next)
        };
        let words = |p: &Projection| -> Vec<(String, String)> {
            p.view
                .iter()
                .map(|m| (m.id.to_string(), m.text.clone()))
                .collect()
        };

        // The next turn, taking the cuts back or making them again: the same.
        let (fresh, fresh_state) = with(&IdMap::default());
        let (again, again_state) = with(&kept);
        assert_eq!(words(&again), words(&fresh));
        assert_eq!(
            (again.figures.request, again.figures.before_cuts),
            (fresh.figures.request, fresh.figures.before_cuts)
        );
        assert_eq!(again.cuts, fresh.cuts);
        assert_eq!(again_state, fresh_state);

        // Taken back, not made again: a figure changed in the kept cut shows.
        let (id, c) = &first.cuts[0];
        let note = |n: usize| format!("about {n} tokens cut");
        let shown = |p: &Projection| p.view.iter().find(|m| m.id == *id).unwrap().text.clone();
        let mut odd = *c;
        odd.cut.cut_tokens += 1;
        let (p, _) = with(&[(id.as_str(), odd)].into_iter().collect());
        assert!(
            shown(&p).contains(&note(c.cut.cut_tokens + 1)),
            "{}",
            shown(&p)
        );
        // Another tag, keep, length or counter, or ends out of order: made
        // again from the output.
        for stale in [
            KeptCut {
                suffix: odd.suffix ^ 1,
                ..odd
            },
            KeptCut {
                keep: odd.keep + 1,
                ..odd
            },
            KeptCut {
                text_len: odd.text_len + 1,
                ..odd
            },
            KeptCut {
                tokenizer: Tokenizer::O200k,
                ..odd
            },
            KeptCut {
                cut: Cut {
                    head_end: odd.cut.tail_start + 1,
                    ..odd.cut
                },
                ..odd
            },
        ] {
            let (p, _) = with(&[(id.as_str(), stale)].into_iter().collect());
            assert!(shown(&p).contains(&note(c.cut.cut_tokens)), "{}", shown(&p));
        }
    }

    #[test]
    fn assigns_refs_and_tags_user_text() {
        let mut st = CompressionState::new("s");
        let h = vec![
            CoreMessage::text("a", Role::User, "the task"),
            CoreMessage::text("b", Role::Assistant, "reply"),
        ];
        let p = project(&mut st, &turn(&h));
        assert_eq!(st.message_refs.get("a"), Some("m00001"));
        assert_eq!(st.message_refs.get("b"), Some("m00002"));
        assert_eq!(
            p.view[0].text,
            "the task\n<noa-ref id=\"m00001\" tokens=\"2\"/>"
        );
        assert_eq!(p.view[1].text, "reply");
        assert_eq!(p.new_refs, 2);
    }

    #[test]
    fn the_note_on_what_is_left_out_names_its_first_and_last_ref() {
        let mut refs = MessageRefs::default();
        refs.insert("sys", BLOCKED);
        refs.insert("b", "m00002");
        refs.insert("c", "m00003");
        refs.insert("d", "m00004");
        let m = |id: &str| CoreMessage::text(id, Role::Assistant, "x");
        let gone = [m("sys"), m("b"), m("c"), m("d"), m("new")];
        let gone: Vec<&CoreMessage> = gone.iter().collect();
        let note = omitted_note(&gone, &refs);
        assert_eq!(note.id, OMITTED_ID);
        assert!(
            note.text
                .starts_with("[noa: 5 earlier message(s) (m00002–m00004) are")
        );
        let one = omitted_note(&gone[..2], &refs);
        assert!(
            one.text
                .starts_with("[noa: 2 earlier message(s) (m00002) are")
        );
        let none = omitted_note(&[gone[0], gone[4]], &refs);
        assert!(none.text.starts_with("[noa: 2 earlier message(s) are"));
    }

    #[test]
    fn messages_past_the_last_ref_are_counted_and_stay_untagged() {
        let mut st = CompressionState::new("s");
        for i in 1..=crate::engine::model::refs::MAX_REF {
            let r = crate::engine::model::refs::index_to_ref(i).unwrap();
            st.message_refs.insert(&format!("old{i}"), &r);
        }
        let h = vec![
            CoreMessage::text("a", Role::User, "the task"),
            CoreMessage::text("b", Role::Assistant, "reply"),
        ];
        let p = project(&mut st, &turn(&h));
        assert_eq!((p.new_refs, p.unnumbered), (0, 2));
        assert_eq!(p.view[0].text, "the task", "no ref to tag it with");
        assert!(!st.message_refs.knows("a"));
    }

    #[test]
    fn tool_results_name_their_source_and_compress_is_blocked() {
        let mut st = CompressionState::new("s");
        let h = vec![
            CoreMessage::text("u", Role::User, "go"),
            CoreMessage::tool_call("c", "t1", "Read", "{}"),
            CoreMessage::tool_result("r", "t1", "Read", "file body"),
            CoreMessage::tool_call("cc", "t2", "Compress", "{}"),
            CoreMessage::tool_result("cr", "t2", "Compress", "panel"),
        ];
        let p = project(&mut st, &turn(&h));
        assert!(p.view[2].text.ends_with("src=\"Read\"/>"));
        assert_eq!(st.message_refs.get("cc"), Some(BLOCKED));
        assert_eq!(st.message_refs.get("cr"), Some(BLOCKED));
        assert_eq!(p.view[4].text, "panel");
    }

    /// `history` as a warm turn hands it over: the words of every output
    /// [`may_withhold`](crate::engine::turn::may_withhold) takes left out,
    /// what a first read learns of each text known.
    fn without_long_words(history: &[CoreMessage]) -> Vec<CoreMessage> {
        history
            .iter()
            .map(|m| {
                let mut w = m.clone();
                w.counted.learn(&m.text);
                let len = m.text.len();
                if crate::engine::turn::may_withhold(&w, len, Tokenizer::Estimate) {
                    w.let_go();
                }
                w
            })
            .collect()
    }

    proptest::proptest! {
        /// Figures frozen through [`Frozen`] are those the snapshot's own
        /// entries give, read one at a time: the first figure asked for a
        /// ref stands, whatever order the refs come in.
        #[test]
        fn frozen_figures_are_the_snapshots_own(
            before in proptest::collection::btree_map(0u32..60, 0usize..1000, 0..30),
            asked in proptest::collection::vec((0u32..90, 0usize..1000), 0..120),
        ) {
            // Numbered refs, and a few in another form, which sort apart.
            let r = |n: u32| match n % 23 {
                0 => format!("x{n}"),
                _ => format!("m{n:05}"),
            };
            let before: BTreeMap<Name, usize> =
                before.into_iter().map(|(n, f)| (Name::new(&r(n)), f)).collect();
            let (mut one_at_a_time, mut snapshot) = (before.clone(), before);
            let mut frozen = Frozen::after(&mut snapshot);
            for (n, f) in asked {
                let expected = *one_at_a_time.entry(Name::new(&r(n))).or_insert(f);
                proptest::prop_assert_eq!(frozen.figure(&r(n), || f), expected);
            }
            frozen.keep();
            proptest::prop_assert_eq!(snapshot, one_at_a_time);
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

        /// A turn handed long outputs (ASCII, accented, with CJK
        /// characters at their ends or only in their middle) without their
        /// words, their words filled in once the view is done, gives the
        /// view, the figures, the cuts and the state the turn with every
        /// word gives; and so does the next turn, taking back the cuts the
        /// first made: over windows that leave them whole, cut them or
        /// leave most out, for outputs with a marker (which keep their
        /// words) among them.
        #[test]
        fn a_turn_without_the_words_of_long_outputs_gives_what_it_gives_with_them(
            sizes in proptest::collection::vec((0usize..30_000, 0u8..8), 1..24),
            window in 6_000usize..80_000,
        ) {
            let mut h = vec![CoreMessage::text("task", Role::User, "fix the parser")];
            for (i, &(size, kind)) in sizes.iter().enumerate() {
                let mut body = format!("line {i} of the output\n").repeat(size / 22 + 1);
                match kind {
                    0 => body.push('é'),
                    1 => body.push_str(crate::engine::model::marker::MARKER),
                    3 => body.insert(body.len() / 2, '中'),
                    4 => body = body.replace(" of", " \u{2192}"),
                    5 => body = body.replace("output", "输出结果"),
                    _ => {}
                }
                let tool = if kind == 2 { "Compress" } else { "Read" };
                h.push(CoreMessage::tool_call(format!("c{i}"), format!("t{i}"), tool, "{}"));
                h.push(CoreMessage::tool_result(format!("r{i}"), format!("t{i}"), tool, body));
                h.push(CoreMessage::text(format!("a{i}"), Role::Assistant, "next"));
            }
            let left = without_long_words(&h);
            let cfg = Config::for_window(window);
            let (mut whole, mut warm) = (CompressionState::new("s"), CompressionState::new("s"));
            let (mut cuts_whole, mut cuts_warm) = (Vec::new(), Vec::new());
            for _ in 0..2 {
                let run = |st: &mut CompressionState, history: &[CoreMessage], kept: &[(String, KeptCut)]| {
                    let kept: IdMap<'_, KeptCut> = kept.iter().map(|(id, c)| (id.as_str(), *c)).collect();
                    project(st, &TurnInput { config: &cfg, cuts: &kept, ..turn(history) })
                };
                let want = run(&mut whole, &h, &cuts_whole);
                let mut got = run(&mut warm, &left, &cuts_warm);
                let words: IdMap<'_, &str> = h.iter().map(|m| (m.id.as_str(), m.text.as_str())).collect();
                for u in &got.unfilled {
                    let m = &mut got.view[u.at];
                    let w = words[m.id.as_str()];
                    proptest::prop_assert_eq!(u.len, w.len());
                    u.fill(m, w);
                }
                proptest::prop_assert!(want.unfilled.is_empty());
                proptest::prop_assert_eq!(&got.view, &want.view);
                let counts = |p: &Projection| p.view.iter().map(|m| cfg.tokens(m)).collect::<Vec<_>>();
                proptest::prop_assert_eq!(counts(&got), counts(&want));
                proptest::prop_assert_eq!(
                    (got.figures.request, got.figures.before_cuts, got.truncation.count, got.truncation.saved, got.omitted),
                    (want.figures.request, want.figures.before_cuts, want.truncation.count, want.truncation.saved, want.omitted)
                );
                proptest::prop_assert_eq!(&got.cuts, &want.cuts);
                proptest::prop_assert_eq!(&warm, &whole);
                (cuts_whole, cuts_warm) = (want.cuts, got.cuts);
            }
        }
    }

    #[test]
    fn token_figures_are_frozen_at_first_render() {
        let mut st = CompressionState::new("s");
        let h = vec![CoreMessage::text("a", Role::User, "x".repeat(4000))];
        let first = project(&mut st, &turn(&h)).view[0].text.clone();
        st.token_snapshot.insert("m00001".into(), 1000);
        let again = project(&mut st, &turn(&h)).view[0].text.clone();
        assert_eq!(first, again);
        assert!(first.ends_with("tokens=\"1.0K\"/>"));
    }

    #[test]
    fn a_ranged_nudge_left_with_no_range_after_the_cuts_is_not_sent() {
        use crate::engine::pressure::ranges::RangeInfo;
        let asked = |tier: u8| Decision {
            inject: true,
            tier,
            emergency: false,
            pressure: true,
            reason: "pressure".into(),
        };
        let empty = Recommendation::default();
        let d = withdrawn_if_empty(asked(1), &empty, false);
        assert!(!d.inject, "{d:?}");
        assert!(d.reason.contains("no range is left to offer"), "{d:?}");
        // A fold names blocks, not ranges; and a range left keeps the nudge.
        assert!(withdrawn_if_empty(asked(2), &empty, false).inject);
        assert!(
            withdrawn_if_empty(asked(1), &empty, true).inject,
            "the host asked"
        );
        let one = Recommendation {
            ranges: vec![RangeInfo {
                start_ref: "m00002".into(),
                end_ref: "m00009".into(),
                count: 8,
                tokens: 3_000,
                chars: 12_000,
                tool_pct: 90,
                user_messages: 0,
                holds_task: false,
            }],
            ..Recommendation::default()
        };
        assert!(withdrawn_if_empty(asked(1), &one, false).inject);
    }
}
