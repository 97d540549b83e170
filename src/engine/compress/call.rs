//! Answering one Compress call: the host's policy around [`apply`].
//!
//! `apply` turns ranges into blocks. Around it sits what an agent loop
//! needs: the view the model saw when it made the call, arguments too broken
//! to read, a batch that already failed and would fail again, the warnings
//! about repaired or ignored entries, the panel with its before → after
//! figures, and the counters that pace the next nudge. Both `noa apply` and
//! `noa rebuild` answer calls here, so a rebuilt state keeps the same books
//! as the live one.

use crate::engine::model::identity::IdMap;

use super::apply::{ApplyInput, ApplyOutcome, NO_RANGES, apply};
use super::archive::ArchiveFile;
use super::panel::{self, Reclaimed};
use super::parse_args::{ParseKind, ParsedArgs, parse_compress_args};
use super::reclaim::{ReclaimInput, first_index, reclaim_dead};
use crate::engine::model::config::Config;
use crate::engine::model::message::CoreMessage;
use crate::engine::model::state::{AppliedCall, Block, CompressionState};
use crate::engine::pressure::gauge::Recorded;
use crate::engine::pressure::prompt::Sections;
use crate::engine::report::bill::{Expected, Weights};
use crate::engine::turn::reclaim::Scan;
use crate::engine::turn::truncate::KeptCut;
use crate::engine::turn::{HistoryIndex, Projection, TurnInput, project, project_with_index};
use std::cell::RefCell;
use std::collections::HashSet;

use crate::engine::model::name::Name;
use crate::engine::model::summary::summary_id;

/// The shape the model should send, with placeholders that cannot be taken
/// for live refs.
const EXPECTED_SHAPE: &str = r#"{"topic": "<short label>", "content": [{"startId": "<first ref>", "endId": "<last ref>", "summary": "<your summary>"}]}"#;

/// The most ranges one call may ask for. A nudge offers a handful, and a
/// model that answers it sends fewer still; a call of thousands is a model
/// gone astray or arguments forged, and applied it would fold every block
/// again and leave the call itself in every later view.
pub const MAX_RANGES: usize = 50;

/// The longest arguments one call may send, in bytes: room for
/// [`MAX_RANGES`] summaries of some 20,000 characters, the default ceiling
/// of one.
pub const MAX_ARGS_BYTES: usize = 1 << 20;

/// Why a call asks for more than one call may, if it does.
fn over_limits(args: &str, parsed: &ParsedArgs) -> Option<String> {
    let entries = parsed.ranges.len() + parsed.invalid_items;
    if args.len() > MAX_ARGS_BYTES {
        return Some(format!(
            "The arguments are {} bytes; one Compress call may send at most {MAX_ARGS_BYTES}. Send fewer ranges, with shorter summaries.",
            args.len()
        ));
    }
    (entries > MAX_RANGES).then(|| {
        format!(
            "The call asks for {entries} ranges; one Compress call may ask for at most {MAX_RANGES}. Send a few large ranges, the oldest first."
        )
    })
}

/// One call and everything answering it depends on.
#[derive(Clone, Copy)]
pub struct CallInput<'a> {
    /// The raw argument string.
    pub args: &'a str,
    /// The call's id; empty for arguments handed in from outside the log.
    pub call_id: &'a str,
    /// The whole history.
    pub history: &'a [CoreMessage],
    /// Every history message by id: what archives keep. Built once by the
    /// caller, since a rebuild answers every call over the same history.
    pub originals: &'a IdMap<'a, &'a CoreMessage>,
    /// The model saw `history[..cut]` when it made the call.
    pub cut: usize,
    /// Engine settings.
    pub config: &'a Config,
    /// Prompt sizes the transcript records.
    pub recorded: &'a [Recorded],
    /// Prompt sections, as `project` is given them.
    pub sections: &'a Sections,
    /// Absolute session directory, for archive paths.
    pub archive_root: &'a str,
    /// Creation time of the blocks, RFC 3339.
    pub created: &'a str,
    /// Creation time of the blocks, Unix seconds.
    pub now: i64,
    /// Cuts an earlier turn made, as [`TurnInput::cuts`].
    pub cuts: &'a IdMap<'a, KeptCut>,
    /// What the projections of earlier cuts of `history` found, for a
    /// rebuild answering call after call (see `engine::turn::HistoryIndex`).
    pub index: Option<&'a RefCell<HistoryIndex<'a>>>,
    /// The dead outputs found in earlier cuts of `history`, walked on from
    /// call to call in a rebuild; a call alone walks its history afresh.
    pub scan: Option<&'a RefCell<Scan>>,
    /// What the provider weighs cache writes and reads at: the panel's line
    /// on the bill is priced with them.
    pub weights: Weights,
}

/// How a call was answered.
#[derive(Debug, Clone)]
pub struct Answer {
    /// What `apply` did (or the rejection standing in for it).
    pub outcome: ApplyOutcome,
    /// How the arguments read.
    pub parsed: ParsedArgs,
    /// The panel: what the model reads back.
    pub panel: String,
    /// The state to keep: the outcome's, with the host's books updated and
    /// this answer recorded under the call id.
    pub state: CompressionState,
    /// The context before the call, on the provider's scale: the whole
    /// view the call was resolved against (see [`panel::render`]).
    pub context_before: usize,
    /// The context after it.
    pub context_after: usize,
    /// What the next request writes to the provider's cache again: the
    /// request from the first summary the call made on, on the same scale
    /// (expected; 0 when no block was made).
    pub rewrite: usize,
    /// What the call's blocks reclaimed, on the same scale.
    pub reclaimed: Reclaimed,
    /// What it is expected to do to the bill (the panel says it in a
    /// line); `None` when it made no block or was replayed from its record.
    pub expected: Option<Expected>,
    /// For each history message before the call, whether a block now
    /// hides it (see [`Projection::hidden`]); empty when the call made no
    /// block or was not priced again (a recorded call replayed).
    pub hidden: Vec<bool>,
    /// The cuts of the view after the call (see [`Projection::cuts`]);
    /// empty when `hidden` is.
    pub cuts: Vec<(String, KeptCut)>,
}

impl Answer {
    /// Whether the call made no block.
    pub fn rejected(&self) -> bool {
        self.outcome.created.is_empty()
    }
}

/// The answer already given to a call, when it was applied before: a
/// retried `apply` prints it again and changes nothing.
pub fn answered_before<'a>(state: &'a CompressionState, call_id: &str) -> Option<&'a AppliedCall> {
    state
        .host
        .applied
        .get(call_id)
        .filter(|_| !call_id.is_empty())
}

/// The view the model saw when it made the call: the same projection, on a
/// copy of the state so pacing and host counters are not counted twice.
/// Refs it hands out and the token figures it leaves are kept in `state`.
pub fn view_at(state: &mut CompressionState, input: &CallInput) -> Projection {
    project_lent(state, input, true)
}

/// The view at the call's cut, projected on a copy of `state` that is then
/// dropped; only the refs it hands out are kept.
fn scratch_view(state: &mut CompressionState, input: &CallInput) -> Projection {
    project_lent(state, input, false)
}

/// Projects the call's cut on a copy of `state` (see [`lend`]): the refs
/// it hands out are kept; the blocks come back marked active as they were;
/// with `figures`, the token figures are kept as the projection leaves them.
fn project_lent(state: &mut CompressionState, input: &CallInput, figures: bool) -> Projection {
    let (mut scratch, active) = lend(state);
    // Without `figures`, the projection works on a copy of them.
    let kept = (!figures).then(|| scratch.token_snapshot.clone());
    let p = project_at(&mut scratch, input);
    state.message_refs = scratch.message_refs;
    give_back_blocks(state, scratch.blocks, active);
    state.token_snapshot = kept.unwrap_or(scratch.token_snapshot);
    p
}

/// A copy of `state` that a projection or an answer may change, with what
/// is most of a long session's state lent rather than copied (a rebuild
/// makes a copy per call): the ref map, the blocks and the token figures
/// move to the copy; the answers to earlier calls, one a call, which
/// neither reads, stay behind and the copy has none. Returns the blocks'
/// active flags too, for [`give_back_blocks`].
pub(super) fn lend(state: &mut CompressionState) -> (CompressionState, Vec<bool>) {
    let active = state.blocks.iter().map(|b| b.active).collect();
    let applied = std::mem::take(&mut state.host.applied);
    let copy = CompressionState {
        message_refs: std::mem::take(&mut state.message_refs),
        blocks: std::mem::take(&mut state.blocks),
        token_snapshot: std::mem::take(&mut state.token_snapshot),
        ..state.clone()
    };
    state.host.applied = applied;
    (copy, active)
}

/// Takes back the blocks [`lend`] lent as they were: any the copy made are
/// dropped, and each is marked active as it was.
pub(super) fn give_back_blocks(
    state: &mut CompressionState,
    mut blocks: Vec<Block>,
    active: Vec<bool>,
) {
    blocks.truncate(active.len());
    for (b, was) in blocks.iter_mut().zip(active) {
        b.active = was;
    }
    state.blocks = blocks;
}

fn project_at(state: &mut CompressionState, input: &CallInput) -> Projection {
    let turn = TurnInput {
        history: &input.history[..input.cut],
        config: input.config,
        input_tokens: None,
        recorded: input.recorded,
        sections: input.sections,
        force_nudge: false,
        for_call: true,
        cuts: input.cuts,
    };
    match input.index {
        Some(index) => project_with_index(state, &turn, &mut index.borrow_mut()),
        None => project(state, &turn),
    }
}

/// The part of the request after the call that follows its first new
/// summary: what the provider's cache no longer holds.
fn rewritten(now: &Projection, made: &[(Block, bool)], config: &Config) -> usize {
    let ids: HashSet<String> = (made.iter())
        .map(|(b, _)| summary_id(&b.block_id))
        .collect();
    let first =
        (now.view.iter().position(|m| ids.contains(m.id.as_str()))).unwrap_or(now.view.len());
    let kept: usize = (now.view[..first].iter())
        .map(|m| now.gauge.scale(config.tokens(m)))
        .sum();
    now.figures
        .before_cuts
        .saturating_sub(now.figures.breakdown.host + kept)
}

/// Reclaims the dead outputs of the call's history with the compression
/// it made (see [`reclaim_dead`]), walking on from what a rebuild's scan
/// found at earlier calls; gives their archives.
fn reclaim_with(
    state: &mut CompressionState,
    input: &CallInput,
    made: &[(Block, bool)],
) -> Vec<ArchiveFile> {
    let history = &input.history[..input.cut];
    let mut fresh = Scan::new(&input.config.file_tools);
    let mut kept = input.scan.map(RefCell::borrow_mut);
    let scan = kept.as_deref_mut().unwrap_or(&mut fresh);
    scan.extend_to(input.history, input.cut);
    if scan.found().is_empty() {
        return Vec::new();
    }
    // What a block stands for is out of view anyway: this call's blocks,
    // and those before it, as a rebuild's index knows them or as the
    // blocks say.
    let index = input.index.map(RefCell::borrow);
    let mut covered: HashSet<Name> = (made.iter())
        .flat_map(|(b, _)| b.effective_message_ids.iter().cloned())
        .collect();
    if index.is_none() {
        let active = state.blocks.iter().filter(|b| b.active);
        covered.extend(active.flat_map(|b| b.effective_message_ids.iter().cloned()));
    }
    let covered = |id: &str| covered.contains(id) || index.as_ref().is_some_and(|i| i.covers(id));
    let reclaim = ReclaimInput {
        history,
        config: input.config,
        archive_root: input.archive_root,
        created: input.created,
        covered: &covered,
        from: first_index(made.iter().map(|(b, _)| b.start_ref.as_str())),
    };
    reclaim_dead(state, scan, &reclaim)
}

/// Answers a call against `state`: reads its arguments, refuses what must be
/// refused, applies the rest, and keeps the books.
pub fn answer(mut state: CompressionState, input: &CallInput) -> Answer {
    let seen = view_at(&mut state, input);
    let parsed = parse_compress_args(input.args);
    let outcome = decide(&state, input, &seen, &parsed);
    answer_with(
        state,
        outcome,
        parsed,
        input,
        seen.figures.before_cuts,
        None,
    )
}

/// Refused unread, refused as a repeat, or applied.
fn decide(
    state: &CompressionState,
    input: &CallInput,
    seen: &Projection,
    parsed: &ParsedArgs,
) -> ApplyOutcome {
    if let Some(why) = over_limits(input.args, parsed) {
        return ApplyOutcome::rejected(state, vec![why], Vec::new(), false);
    }
    if !parsed.ok && !asks_nothing(parsed) {
        return unreadable(state, parsed);
    }
    if state
        .host
        .dead_ranges
        .get(&batch_key(parsed))
        .is_some_and(|&n| n >= 1)
    {
        return refused_repeat(state);
    }
    let index = input.index.map(RefCell::borrow);
    apply(&ApplyInput {
        ranges: &parsed.ranges,
        view: &seen.view,
        originals: input.originals,
        state,
        config: input.config,
        call_id: input.call_id,
        archive_root: input.archive_root,
        created: input.created,
        now: input.now,
        replay: false,
        index: index.as_deref(),
    })
}

/// What the model is told of its arguments: entries ignored, and repairs
/// they needed.
fn argument_notes(parsed: &ParsedArgs) -> Vec<String> {
    let mut notes = Vec::new();
    if parsed.ok {
        notes.extend(
            parsed
                .invalid_reasons
                .iter()
                .map(|r| format!("Ignored an entry: {r}.")),
        );
    }
    if parsed.repaired() && !parsed.ranges.is_empty() {
        notes.push(format!(
            "The arguments needed repair ({}); send plain JSON next time.",
            parsed.repairs.join(", ")
        ));
    }
    notes
}

/// The context after a call, as [`Answer`] reports it.
struct After {
    after: usize,
    reclaimed: Reclaimed,
    rewrite: usize,
    hidden: Vec<bool>,
    cuts: Vec<(String, KeptCut)>,
}

impl After {
    /// A call that made no block, or one kept as recorded: not priced.
    fn unchanged(before: usize) -> After {
        After {
            after: before,
            reclaimed: Reclaimed::default(),
            rewrite: 0,
            hidden: Vec::new(),
            cuts: Vec::new(),
        }
    }

    /// The view after the call's blocks, and what they reclaimed, on the
    /// provider's scale as the figures beside it.
    fn priced(next: &mut CompressionState, input: &CallInput, outcome: &ApplyOutcome) -> After {
        let now = scratch_view(next, input);
        let reclaimed = panel::reclaimed_by_call(
            outcome.created.iter().map(|(b, _)| b),
            &next.blocks,
            input.history,
            &now.view,
            &|m| now.gauge.scale(input.config.tokens(m)),
        );
        After {
            after: now.figures.before_cuts,
            reclaimed,
            rewrite: rewritten(&now, &outcome.created, input.config),
            hidden: now.hidden,
            cuts: now.cuts,
        }
    }
}

/// Keeps the books for an outcome as [`answer`] does, and is how a rebuild
/// replaying recorded spans keeps them: commits the outcome to `state`, the
/// state the call was resolved against, adds the notes on the arguments,
/// prices the result, renders the panel and updates the host's books. With
/// the `recorded` panel, that is the answer kept, and the call is not
/// priced again.
pub fn answer_with(
    mut next: CompressionState,
    mut outcome: ApplyOutcome,
    parsed: ParsedArgs,
    input: &CallInput,
    before: usize,
    recorded: Option<&str>,
) -> Answer {
    outcome.warnings.extend(argument_notes(&parsed));
    outcome.commit(&mut next);
    if input.config.reclaim && !outcome.created.is_empty() {
        let made = reclaim_with(&mut next, input, &outcome.created);
        outcome.archives.extend(made);
    }
    let After {
        after,
        reclaimed,
        rewrite,
        hidden,
        cuts,
    } = match outcome.created.is_empty() || recorded.is_some() {
        true => After::unchanged(before),
        false => After::priced(&mut next, input, &outcome),
    };
    record_attempt(&mut next, &outcome, batch_key(&parsed));
    let expected = (!outcome.created.is_empty() && recorded.is_none())
        .then(|| Expected::of(rewrite, reclaimed.tokens, input.weights));
    let text = match recorded {
        Some(panel) => panel.to_string(),
        None => panel::answer(&outcome, before, after, reclaimed, expected),
    };
    if !input.call_id.is_empty() {
        next.host.applied.insert(
            input.call_id.to_string(),
            AppliedCall {
                rejected: outcome.created.is_empty(),
                panel: text.clone(),
            },
        );
    }
    Answer {
        outcome,
        parsed,
        panel: text,
        state: next,
        context_before: before,
        context_after: after,
        rewrite,
        reclaimed,
        expected,
        hidden,
        cuts,
    }
}

/// A call with no ranges at all (empty arguments or an empty list): it asks
/// for nothing, which is answered but counts neither way.
fn asks_nothing(p: &ParsedArgs) -> bool {
    matches!(p.kind, ParseKind::EmptyInput)
        || (matches!(p.kind, ParseKind::NoValidRanges) && p.invalid_items == 0)
}

/// The outcome for arguments that could not be read at all.
fn unreadable(state: &CompressionState, parsed: &ParsedArgs) -> ApplyOutcome {
    let mut why = format!(
        "Could not read the Compress arguments ({}).",
        parsed.kind.as_str()
    );
    for r in &parsed.invalid_reasons {
        why.push(' ');
        why.push_str(r);
        why.push('.');
    }
    why.push_str(" Expected: ");
    why.push_str(EXPECTED_SHAPE);
    ApplyOutcome::rejected(state, vec![why], Vec::new(), false)
}

/// The outcome for a batch that already failed once, unchanged.
fn refused_repeat(state: &CompressionState) -> ApplyOutcome {
    let live: Vec<String> = state
        .blocks
        .iter()
        .filter(|b| b.active)
        .map(|b| format!("{}(T{}) {}–{}", b.block_id, b.tier, b.start_ref, b.end_ref))
        .collect();
    let mut why = "These exact ranges already failed and would fail again; do not resend them. Pick ranges from the current view".to_string();
    if live.is_empty() {
        why.push('.');
    } else {
        why.push_str(&format!(
            ", or consolidate live blocks: {}.",
            live.join(", ")
        ));
    }
    ApplyOutcome::rejected(state, vec![why], Vec::new(), true)
}

/// The identity of a batch for the repeat guard: its ends, sorted.
fn batch_key(parsed: &ParsedArgs) -> String {
    let mut ends: Vec<String> = parsed
        .ranges
        .iter()
        .map(|r| {
            format!(
                "{}..{}",
                r.start.trim().to_lowercase(),
                r.end.trim().to_lowercase()
            )
        })
        .collect();
    ends.sort();
    ends.join(",")
}

/// Updates the host's books: a success clears them; a failure counts, and a
/// failure of the ranges themselves marks the batch so a repeat is refused.
fn record_attempt(state: &mut CompressionState, outcome: &ApplyOutcome, key: String) {
    if !outcome.created.is_empty() {
        state.host.consecutive_failures = 0;
        state.host.dead_ranges.clear();
        return;
    }
    if outcome.errors.iter().any(|e| e == NO_RANGES) {
        return;
    }
    state.host.consecutive_failures += 1;
    if outcome.ranges_at_fault && !key.is_empty() {
        *state.host.dead_ranges.entry(key).or_insert(0) += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::model::message::Role;

    fn history() -> Vec<CoreMessage> {
        let mut h = vec![CoreMessage::text("u0", Role::User, "the task")];
        for i in 1..40 {
            h.push(CoreMessage::text(
                format!("a{i}"),
                Role::Assistant,
                format!("step {i}: ").repeat(120),
            ));
            h.push(CoreMessage::text(
                format!("u{i}"),
                Role::User,
                format!("go on {i}"),
            ));
        }
        h
    }

    fn originals(h: &[CoreMessage]) -> IdMap<'_, &CoreMessage> {
        h.iter().map(|m| (m.id.as_str(), m)).collect()
    }

    fn input<'a>(
        args: &'a str,
        id: &'a str,
        h: &'a [CoreMessage],
        o: &'a IdMap<'a, &'a CoreMessage>,
        cfg: &'a Config,
    ) -> CallInput<'a> {
        static SECTIONS: std::sync::LazyLock<Sections> =
            std::sync::LazyLock::new(Sections::default);
        static NONE: std::sync::LazyLock<IdMap<'static, KeptCut>> =
            std::sync::LazyLock::new(IdMap::default);
        CallInput {
            args,
            call_id: id,
            history: h,
            originals: o,
            cut: h.len(),
            config: cfg,
            recorded: &[],
            sections: &SECTIONS,
            archive_root: "/s",
            created: "2026-01-01T00:00:00Z",
            now: 0,
            cuts: &NONE,
            index: None,
            scan: None,
            weights: Weights::ANTHROPIC,
        }
    }

    #[test]
    fn a_failed_batch_is_refused_when_sent_again_and_a_success_clears_the_books() {
        let h = history();
        let o = originals(&h);
        let cfg = Config::default();
        let state = CompressionState::new("s");
        let mut seen = state.clone();
        view_at(&mut seen, &input("", "", &h, &o, &cfg));
        let bad = r#"{"content": [{"startId": "m90000", "endId": "m90001", "summary": "x"}]}"#;
        let first = answer(seen, &input(bad, "c1", &h, &o, &cfg));
        assert!(first.rejected());
        assert_eq!(first.state.host.consecutive_failures, 1);
        assert_eq!(first.state.host.dead_ranges.len(), 1);
        assert!(answered_before(&first.state, "c1").is_some_and(|a| a.rejected));

        let again = answer(first.state, &input(bad, "c2", &h, &o, &cfg));
        assert!(again.panel.contains("already failed"), "{}", again.panel);
        assert_eq!(again.state.host.consecutive_failures, 2);

        let good = r#"{"content": [{"startId": "m00002", "endId": "m00030", "summary": "Did steps 1 to 15 of the plan, each one checked against the spec; nothing is left open."}]}"#;
        let ok = answer(again.state, &input(good, "c3", &h, &o, &cfg));
        assert!(!ok.rejected(), "{}", ok.panel);
        assert_eq!(ok.state.host.consecutive_failures, 0);
        assert!(ok.state.host.dead_ranges.is_empty());
        assert!(ok.context_after < ok.context_before);
    }

    #[test]
    fn unreadable_arguments_are_answered_with_the_expected_shape() {
        let h = history();
        let o = originals(&h);
        let cfg = Config::default();
        let a = answer(
            CompressionState::new("s"),
            &input("not json at all", "c1", &h, &o, &cfg),
        );
        assert!(a.rejected());
        assert!(
            a.panel.contains(r#""startId": "<first ref>""#),
            "{}",
            a.panel
        );
        assert!(a.state.host.dead_ranges.is_empty(), "not the ranges' fault");
    }

    #[test]
    fn an_empty_call_counts_neither_way() {
        let h = history();
        let o = originals(&h);
        let cfg = Config::default();
        let a = answer(
            CompressionState::new("s"),
            &input(r#"{"content": []}"#, "c1", &h, &o, &cfg),
        );
        assert!(a.rejected());
        assert_eq!(a.state.host.consecutive_failures, 0);
    }
}
