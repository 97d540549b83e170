//! Rebuilding the state from the transcript alone.
//!
//! No model is involved: the summaries are in the recorded Compress
//! arguments, so replaying a call gives back the very text the live run
//! stored. A call is replayed when its recorded result shows a block,
//! against the view as it stood at that point of the log, and every block
//! it made live comes back, with its errors kept as warnings. That is what
//! the live run applied, partial successes included.

use crate::engine::model::identity::{IdMap, IdSet};
use std::collections::{HashMap, HashSet};

use super::apply::{ApplyInput, ApplyOutcome, apply};
use super::archive::ArchiveFile;
use super::call::{CallInput, answer, answer_with, give_back_blocks, lend, view_at};
use super::panel::block_count;
use super::parse_args::{CompressRange, ParsedArgs, parse_compress_args};
use crate::engine::model::config::Config;
use crate::engine::model::message::COMPRESS_TOOL;
use crate::engine::model::message::{ContentType, CoreMessage};
use crate::engine::model::refs::{parse_block_id, ref_to_index};
use crate::engine::model::state::{AppliedCall, Block, CompressionState};
use crate::engine::pressure::gauge::Recorded;
use crate::engine::pressure::prompt::Sections;
use crate::engine::report::bill::Weights;
use crate::engine::turn::reclaim::Scan;
use crate::engine::turn::{HistoryIndex, TurnInput, project};
use std::cell::RefCell;

/// One Compress call found in the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedCall {
    /// The call's place: the model saw `history[..cut]`. Earlier blocks of
    /// its own response are in it too, harmlessly (they index no refs); a
    /// walk back over assistant blocks would also drop the reply before
    /// the nudge, which the model did see, since the transcript does not
    /// hold the nudge that stood between them.
    pub cut: usize,
    /// The call's tool-call id.
    pub call_id: String,
    /// The raw arguments.
    pub args: String,
    /// The recorded result (the panel), if the log has one.
    pub panel: Option<String>,
}

/// Every Compress call in the history, in order, with its recorded result.
pub fn recorded_calls(history: &[CoreMessage]) -> Vec<RecordedCall> {
    let results: IdMap<'_, &str> = history
        .iter()
        .filter(|m| m.content_type == ContentType::ToolResult && m.tool_name == COMPRESS_TOOL)
        .map(|m| (m.tool_call_id.as_str(), m.text.as_str()))
        .collect();
    let mut out = Vec::new();
    for (i, m) in history.iter().enumerate() {
        if m.content_type != ContentType::ToolCall || m.tool_name != COMPRESS_TOOL {
            continue;
        }
        out.push(RecordedCall {
            cut: i,
            call_id: m.tool_call_id.to_string(),
            args: m.text.clone(),
            panel: results.get(m.tool_call_id.as_str()).map(|p| p.to_string()),
        });
    }
    out
}

/// What happened to one recorded call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplayOutcome {
    /// Replayed: the blocks it made again.
    Replayed {
        /// Block ids made.
        blocks: Vec<String>,
    },
    /// Not replayed, and why.
    Skipped(String),
}

/// One recorded call and what its replay did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replay {
    /// The call's tool-call id.
    pub call_id: String,
    /// What happened.
    pub outcome: ReplayOutcome,
    /// Errors and warnings of the replay, kept as warnings.
    pub warnings: Vec<String>,
}

/// The rebuilt state, the archives its blocks need, and a replay per call.
#[derive(Debug, Clone)]
pub struct Rebuilt {
    /// The state, with refs for the whole history.
    pub state: CompressionState,
    /// Archives of the blocks made, to adopt when on disk or write when not.
    pub archives: Vec<ArchiveFile>,
    /// One entry per Compress call in the log.
    pub replays: Vec<Replay>,
}

/// Where and when a rebuild writes.
#[derive(Clone, Copy)]
pub struct RebuildInput<'a> {
    /// The whole history.
    pub history: &'a [CoreMessage],
    /// Every history message by id, as [`CallInput::originals`]: the caller
    /// renders the archives from the same index.
    pub originals: &'a IdMap<'a, &'a CoreMessage>,
    /// The state to start from: fresh, or a parent's ledger.
    pub base: &'a CompressionState,
    /// Engine settings.
    pub config: &'a Config,
    /// Prompt sizes the transcript records, as `project` is given them.
    pub recorded: &'a [Recorded],
    /// Absolute session directory, for archive paths.
    pub archive_root: &'a str,
    /// Creation time for blocks, Unix seconds.
    pub now: i64,
    /// Creation time for archives not on disk yet, RFC 3339.
    pub created: &'a str,
    /// Called after each recorded call (for progress bars).
    pub on_step: &'a dyn Fn(usize),
    /// What the provider weighs cache writes and reads at (see
    /// [`CallInput::weights`]).
    pub weights: Weights,
}

/// Replays the log's Compress calls onto `base`. Pure: writes nothing.
///
/// Every call is answered through the same policy as a live `apply`
/// (`call`), so the host's books (the repeat guard, the failure
/// count, each call's answer) come back as the live run kept them.
pub fn rebuild(input: &RebuildInput) -> Rebuilt {
    let history = input.history;
    let sections = Sections::default();
    let mut state = input.base.clone();
    let mut archives = Vec::new();
    let mut replays = Vec::new();
    let mut since = 0;
    let none = IdMap::default();
    // Each call's history is the last one's and more: one index walks on
    // from call to call rather than from the start at each.
    let scan = RefCell::new(Scan::new(&input.config.file_tools));
    let index = Some(RefCell::new(HistoryIndex::new(
        history,
        input.recorded,
        input.config,
    )));
    let calls = recorded_calls(history);
    for (n, call) in calls.iter().enumerate() {
        (input.on_step)(n);
        if user_spoke(&history[since..call.cut]) {
            state.host.consecutive_failures = 0;
        }
        since = call.cut;
        let at = CallInput {
            args: &call.args,
            call_id: &call.call_id,
            history,
            originals: input.originals,
            cut: call.cut,
            config: input.config,
            recorded: input.recorded,
            sections: &sections,
            archive_root: input.archive_root,
            created: input.created,
            now: input.now,
            cuts: &none,
            index: index.as_ref(),
            scan: Some(&scan),
            weights: input.weights,
        };
        let (replay, made) = replay_call(&mut state, &at, call.panel.as_deref());
        archives.extend(made);
        replays.push(replay);
    }
    if user_spoke(&history[since..]) {
        state.host.consecutive_failures = 0;
    }
    take_whole_history_refs(&mut state, input, &sections);
    Rebuilt {
        state,
        archives,
        replays,
    }
}

/// Replays one recorded call by what its recorded result shows: none (a
/// rejection, whose books are kept), blocks (remade), or no result at all.
/// Returns the replay and the archives of the blocks it made.
fn replay_call(
    state: &mut CompressionState,
    at: &CallInput,
    panel: Option<&str>,
) -> (Replay, Vec<ArchiveFile>) {
    match panel {
        Some(panel) if block_count(panel) == 0 => {
            keep_rejection(state, at, panel);
            let replay = Replay {
                call_id: at.call_id.to_string(),
                outcome: ReplayOutcome::Skipped("its recorded result shows no block".into()),
                warnings: Vec::new(),
            };
            (replay, Vec::new())
        }
        Some(panel) => replay_recorded(state, at, panel),
        None => replay_unanswered(state, at),
    }
}

/// A call never answered in the transcript (the host lost it, or the call
/// is the last thing in it): answered as asked, and the answer kept, so the
/// host's `apply` of it changes nothing. Returns the replay and the
/// archives of its blocks.
fn replay_unanswered(state: &mut CompressionState, at: &CallInput) -> (Replay, Vec<ArchiveFile>) {
    let answer = answer(std::mem::replace(state, CompressionState::new("")), at);
    let mut warnings = outcome_notes(&answer.outcome);
    warnings.push("no recorded result: replayed as asked".into());
    let blocks: Vec<String> = made_ids(&answer.outcome);
    *state = answer.state;
    let replay = Replay {
        call_id: at.call_id.to_string(),
        outcome: if blocks.is_empty() {
            ReplayOutcome::Skipped("the replay made no block".into())
        } else {
            ReplayOutcome::Replayed { blocks }
        },
        warnings,
    };
    (replay, answer.outcome.archives)
}

/// Gives the rebuilt state refs for the whole history, in the order the
/// live run handed them out, and each block the activity a projection of
/// the whole history leaves it with (found on a copy of the state).
fn take_whole_history_refs(
    state: &mut CompressionState,
    input: &RebuildInput,
    sections: &Sections,
) {
    let mut scratch = state.clone();
    project(
        &mut scratch,
        &TurnInput {
            history: input.history,
            config: input.config,
            input_tokens: None,
            recorded: input.recorded,
            sections,
            force_nudge: false,
            for_call: true,
            cuts: &IdMap::default(),
        },
    );
    state.message_refs = scratch.message_refs;
    state.token_snapshot = scratch.token_snapshot;
    let active: IdSet<'_> = scratch
        .blocks
        .iter()
        .filter(|b| b.active)
        .map(|b| b.block_id.as_str())
        .collect();
    for b in &mut state.blocks {
        b.active = active.contains(b.block_id.as_str());
    }
}

/// Whether the user said anything in `messages`: a live turn that sees it
/// clears the failure count, and so does the rebuild.
fn user_spoke(messages: &[CoreMessage]) -> bool {
    messages.iter().any(CoreMessage::is_user_text)
}

/// A call the live run rejected: answered again only to keep the books it
/// kept (the repeat guard, the failure count); its recorded answer is what a
/// retried `apply` prints.
fn keep_rejection(state: &mut CompressionState, at: &CallInput, panel: &str) {
    // Answered on a copy of the state lent to it: the blocks come back as
    // they were, without any the copy made.
    let (copy, active) = lend(state);
    let again = answer(copy, at);
    let rejected = again.rejected();
    give_back_blocks(state, again.state.blocks, active);
    state.message_refs = again.state.message_refs;
    state.token_snapshot = again.state.token_snapshot;
    if rejected {
        state.host.consecutive_failures = again.state.host.consecutive_failures;
        state.host.dead_ranges = again.state.host.dead_ranges;
    } else {
        state.host.consecutive_failures += 1;
    }
    record_answer(state, at.call_id, panel);
}

/// The recorded answer, as a retried `apply` of the call prints it.
fn record_answer(state: &mut CompressionState, call_id: &str, panel: &str) {
    state.host.applied.insert(
        call_id.to_string(),
        AppliedCall {
            rejected: block_count(panel) == 0,
            panel: panel.to_string(),
        },
    );
}

/// A call whose recorded result shows blocks: replayed as it was asked when
/// that gives back those blocks (ids, tiers, spans); else from the recorded
/// spans themselves, since the live run had a window or a recent zone this
/// one does not know. Returns the replay and the archives of its blocks.
fn replay_recorded(
    state: &mut CompressionState,
    at: &CallInput,
    panel: &str,
) -> (Replay, Vec<ArchiveFile>) {
    let seen = view_at(state, at);
    let parsed = parse_compress_args(at.args);
    let made = recorded_blocks(panel);
    if let Some(first) = made.first() {
        state.next_block_id = state.next_block_id.max(first.number);
    }
    let index = at.index.map(RefCell::borrow);
    let run = |ranges: &[CompressRange], replay: bool| {
        apply(&ApplyInput {
            ranges,
            view: &seen.view,
            originals: at.originals,
            state,
            config: at.config,
            call_id: at.call_id,
            archive_root: at.archive_root,
            created: at.created,
            now: at.now,
            replay,
            index: index.as_deref(),
        })
    };
    let asked = run(&parsed.ranges, false);
    // The recorded spans are looked for only when the call as asked does
    // not give the recorded blocks back: without an index, finding them
    // walks every message the active blocks cover.
    let ranges = if made.is_empty() || remade(&asked, &made) {
        Vec::new()
    } else {
        replay_ranges(&made, &parsed.ranges, state, index.as_deref())
    };
    let from_spans = !ranges.is_empty();
    let out = if from_spans {
        run(&ranges, true)
    } else {
        asked
    };
    drop(index);
    let mut warnings = outcome_notes(&out);
    if from_spans {
        // What the live call refused is in its recorded result only.
        warnings.extend(recorded_errors(panel));
    }
    let remade = Remade {
        out,
        parsed,
        recorded: made.len(),
        before_cuts: seen.figures.before_cuts,
        warnings,
    };
    answer_replay(state, at, panel, remade)
}

/// A recorded call replayed, to be answered.
struct Remade {
    out: ApplyOutcome,
    parsed: ParsedArgs,
    /// How many blocks the recorded result shows.
    recorded: usize,
    /// The view's size before the turn's cuts, where the call was made.
    before_cuts: usize,
    warnings: Vec<String>,
}

/// Answers a replayed call as the live one was answered (its recorded
/// `panel`), noting where the replay's blocks differ from the record's.
fn answer_replay(
    state: &mut CompressionState,
    at: &CallInput,
    panel: &str,
    remade: Remade,
) -> (Replay, Vec<ArchiveFile>) {
    let Remade {
        out,
        parsed,
        recorded,
        before_cuts,
        mut warnings,
    } = remade;
    if out.created.is_empty() {
        record_answer(state, at.call_id, panel);
        let replay = Replay {
            call_id: at.call_id.to_string(),
            outcome: ReplayOutcome::Skipped("the replay made no block".into()),
            warnings,
        };
        return (replay, Vec::new());
    }
    if out.created.len() != recorded {
        warnings.push(format!(
            "the recorded result shows {recorded} block(s), the replay made {}",
            out.created.len()
        ));
    }
    let blocks = made_ids(&out);
    let answered = answer_with(
        std::mem::replace(state, CompressionState::new("")),
        out,
        parsed,
        at,
        before_cuts,
        Some(panel),
    );
    *state = answered.state;
    let replay = Replay {
        call_id: at.call_id.to_string(),
        outcome: ReplayOutcome::Replayed { blocks },
        warnings,
    };
    (replay, answered.outcome.archives)
}

/// An outcome's errors and warnings, kept as the replay's warnings.
fn outcome_notes(out: &ApplyOutcome) -> Vec<String> {
    out.errors.iter().chain(&out.warnings).cloned().collect()
}

fn made_ids(out: &ApplyOutcome) -> Vec<String> {
    out.created
        .iter()
        .map(|(b, _)| b.block_id.clone())
        .collect()
}

/// A block as a recorded panel names it: `b7(T1)=m00012–m00030`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MadeBlock {
    /// The number in its id.
    pub number: u64,
    /// Its tier.
    pub tier: u8,
    /// First and last ref it covers.
    pub start: String,
    /// Last ref it covers.
    pub end: String,
}

/// The blocks a recorded panel shows, in the order they were made.
pub fn recorded_blocks(panel: &str) -> Vec<MadeBlock> {
    let mut out = Vec::new();
    for (at, _) in panel.match_indices("(T") {
        let head = &panel[..at];
        let digits = head.len() - head.trim_end_matches(|c: char| c.is_ascii_digit()).len();
        let Some(b) = head[..head.len() - digits].strip_suffix('b') else {
            continue;
        };
        if digits == 0 || b.ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let rest = &panel[at + 2..];
        let tier_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (tier, rest) = rest.split_at(tier_len);
        let Some(rest) = rest.strip_prefix(")=") else {
            continue;
        };
        let start: String = rest
            .chars()
            .take_while(char::is_ascii_alphanumeric)
            .collect();
        let Some(rest) = rest[start.len()..].strip_prefix('–') else {
            continue;
        };
        let end: String = rest
            .chars()
            .take_while(char::is_ascii_alphanumeric)
            .collect();
        let (Ok(number), Ok(tier)) = (head[head.len() - digits..].parse(), tier.parse()) else {
            continue;
        };
        out.push(MadeBlock {
            number,
            tier,
            start,
            end,
        });
    }
    out
}

/// Whether an outcome made exactly the recorded blocks: ids, tiers, spans.
fn remade(out: &ApplyOutcome, made: &[MadeBlock]) -> bool {
    out.created.len() == made.len()
        && out.created.iter().zip(made).all(|((b, _), m)| {
            b.block_id == format!("b{}", m.number)
                && b.tier == m.tier
                && b.start_ref == m.start
                && b.end_ref == m.end
        })
}

/// The errors a recorded panel reports (ranges of the call it refused).
fn recorded_errors(panel: &str) -> impl Iterator<Item = String> + '_ {
    panel
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("error: "))
        .map(str::to_string)
}

/// The ranges that remake the recorded blocks: each block's own span, its
/// ends named as messages, or as the blocks it folded where those hold
/// them, with the summary of the requested range it came from. Empty (the
/// call is replayed as it was asked) when a recorded block matches no
/// requested range.
fn replay_ranges(
    made: &[MadeBlock],
    asked: &[CompressRange],
    state: &CompressionState,
    index: Option<&HistoryIndex>,
) -> Vec<CompressRange> {
    let lookup = BlockLookup::new(state, index);
    let spans: Vec<Option<(u32, u32)>> = asked
        .iter()
        .map(|r| Some((lookup.start_number(&r.start)?, lookup.end_number(&r.end)?)))
        .collect();
    // A block is one unbroken run of the view: its span's ends are messages
    // it took, or the ends of blocks it folded, which the range then names.
    let edge = |r: &str| -> String {
        state
            .message_refs
            .id_of(r)
            .and_then(|id| lookup.over(id))
            .map_or_else(|| r.to_string(), |b| b.block_id.clone())
    };
    let mut out = Vec::new();
    for m in made {
        let (Some(s), Some(e)) = (ref_to_index(&m.start), ref_to_index(&m.end)) else {
            return Vec::new();
        };
        let Some(i) = most_overlapped(&spans, s, e) else {
            return Vec::new();
        };
        out.push(CompressRange {
            start: edge(&m.start),
            end: edge(&m.end),
            ..asked[i].clone()
        });
    }
    out
}

/// The requested span that overlaps `s..=e` most, the first of equals.
fn most_overlapped(spans: &[Option<(u32, u32)>], s: u32, e: u32) -> Option<usize> {
    spans
        .iter()
        .enumerate()
        .filter_map(|(i, sp)| {
            let (a, b) = (*sp)?;
            let overlap = e.min(b) as i64 - s.max(a) as i64;
            (overlap >= 0).then_some((overlap, i))
        })
        .max_by_key(|&(overlap, i)| (overlap, std::cmp::Reverse(i)))
        .map(|(_, i)| i)
}

/// Blocks by id, and the first active block covering each message: what
/// the index knows, or one pass over the blocks, however many ends look
/// them up.
struct BlockLookup<'s> {
    blocks: &'s [Block],
    index: Option<&'s HistoryIndex<'s>>,
    by_id: IdMap<'s, &'s Block>,
    cover: IdMap<'s, &'s Block>,
}

impl<'s> BlockLookup<'s> {
    fn new(state: &'s CompressionState, index: Option<&'s HistoryIndex<'s>>) -> Self {
        let index = index.filter(|c| c.has_seen(&state.blocks));
        let mut by_id: IdMap<'_, &Block> = IdMap::default();
        let mut cover: IdMap<'_, &Block> = IdMap::default();
        if index.is_none() {
            for b in &state.blocks {
                by_id.entry(b.block_id.as_str()).or_insert(b);
                if b.active {
                    for id in &b.effective_message_ids {
                        cover.entry(id.as_str()).or_insert(b);
                    }
                }
            }
        }
        BlockLookup {
            blocks: &state.blocks,
            index,
            by_id,
            cover,
        }
    }

    /// The block of id `id`.
    fn block(&self, id: &str) -> Option<&'s Block> {
        match self.index {
            Some(c) => c.block_named(id).map(|i| &self.blocks[i]),
            None => self.by_id.get(id).copied(),
        }
    }

    /// The first active block over message `id`.
    fn over(&self, id: &str) -> Option<&'s Block> {
        match self.index {
            Some(c) => c.first_over(id, self.blocks).map(|i| &self.blocks[i]),
            None => self.cover.get(id).copied(),
        }
    }

    /// The number of the message a range's start `r` names: a ref's, or
    /// the first of a block's.
    fn start_number(&self, r: &str) -> Option<u32> {
        if let Some(id) = parse_block_id(r) {
            let b = self.block(id.as_str())?;
            return ref_to_index(&b.start_ref).or_else(|| ref_to_index(&b.end_ref));
        }
        ref_to_index(r)
    }

    /// The number of the message a range's end `r` names: a ref's, or the
    /// last of a block's.
    fn end_number(&self, r: &str) -> Option<u32> {
        match parse_block_id(r) {
            Some(id) => ref_to_index(&self.block(id.as_str())?.end_ref),
            None => ref_to_index(r),
        }
    }
}

/// Every way two states differ in what they record: blocks (ids, tiers,
/// summaries, spans, coverage, activity, archives), refs, and the batches
/// the repeat guard refuses. Creation times, pacing and counters are not
/// compared: they follow the turns, which a log does not record.
pub fn differences(live: &CompressionState, rebuilt: &CompressionState) -> Vec<String> {
    let mut out = block_differences(live, rebuilt);
    out.extend(book_differences(live, rebuilt));
    out
}

/// How the two states' blocks differ, block by block in id order: blocks
/// only one of them has, and the fields that differ where both have one.
fn block_differences(live: &CompressionState, rebuilt: &CompressionState) -> Vec<String> {
    let mut out = Vec::new();
    let by_id = |s: &CompressionState| -> HashMap<String, Block> {
        s.blocks
            .iter()
            .map(|b| (b.block_id.clone(), b.clone()))
            .collect()
    };
    let (a, b) = (by_id(live), by_id(rebuilt));
    let mut ids: Vec<&String> = a
        .keys()
        .chain(b.keys())
        .collect::<HashSet<_>>()
        .into_iter()
        .collect();
    ids.sort_by_key(|id| {
        id.trim_start_matches('b')
            .parse::<u64>()
            .unwrap_or(u64::MAX)
    });
    for id in ids {
        match (a.get(id), b.get(id)) {
            (Some(x), None) if x.compress_call_id.is_empty() => out.push(format!(
                "{id}: applied from --args, so it has no call in the transcript and is not rebuilt"
            )),
            (Some(_), None) => out.push(format!("{id}: in the state on disk, not rebuilt")),
            (None, Some(_)) => out.push(format!("{id}: rebuilt, not in the state on disk")),
            (Some(x), Some(y)) => out.extend(field_differences(id, x, y)),
            (None, None) => {}
        }
    }
    out
}

/// The fields in which two versions of block `id` differ, `x` on disk and
/// `y` rebuilt, each shown cut to 60 characters.
fn field_differences(id: &str, x: &Block, y: &Block) -> Vec<String> {
    let fields: [(&str, String, String); 10] = [
        ("tier", x.tier.to_string(), y.tier.to_string()),
        ("topic", x.topic.clone(), y.topic.clone()),
        ("summary", x.summary.clone(), y.summary.clone()),
        (
            "span",
            format!("{}–{}", x.start_ref, x.end_ref),
            format!("{}–{}", y.start_ref, y.end_ref),
        ),
        ("active", x.active.to_string(), y.active.to_string()),
        (
            "messages",
            x.direct_message_ids.join(","),
            y.direct_message_ids.join(","),
        ),
        (
            "coverage",
            x.effective_message_ids.join(","),
            y.effective_message_ids.join(","),
        ),
        (
            "absorbed",
            x.direct_block_ids.join(","),
            y.direct_block_ids.join(","),
        ),
        ("archive", x.archive_rel.clone(), y.archive_rel.clone()),
        (
            "call",
            x.compress_call_id.clone(),
            y.compress_call_id.clone(),
        ),
    ];
    fields
        .into_iter()
        .filter(|(_, l, r)| l != r)
        .map(|(name, l, r)| format!("{id}: {name} differs ({l:.60} on disk, {r:.60} rebuilt)"))
        .collect()
}

/// How the two states' books differ beyond their blocks: refs, the block
/// counter, and the batches the repeat guard refuses.
fn book_differences(live: &CompressionState, rebuilt: &CompressionState) -> Vec<String> {
    let mut out = Vec::new();
    let refs_differ = live
        .message_refs
        .by_id()
        .filter(|(k, v)| rebuilt.message_refs.get(k) != Some(*v))
        .count();
    if refs_differ > 0 {
        out.push(format!("{refs_differ} ref(s) differ"));
    }
    if live.next_block_id != rebuilt.next_block_id {
        out.push(format!(
            "next block id: {} on disk, {} rebuilt",
            live.next_block_id, rebuilt.next_block_id
        ));
    }
    if live.host.dead_ranges != rebuilt.host.dead_ranges {
        let keys = |s: &CompressionState| {
            s.host
                .dead_ranges
                .keys()
                .cloned()
                .collect::<Vec<_>>()
                .join(" ")
        };
        out.push(format!(
            "refused batches: [{}] on disk, [{}] rebuilt",
            keys(live),
            keys(rebuilt)
        ));
    }
    // Outputs reclaimed, and at which call: where each is archived follows
    // the state dir, which a rebuild may put elsewhere.
    let reclaimed = |s: &CompressionState| -> Vec<(String, usize)> {
        (s.host.reclaimed.iter())
            .map(|(id, r)| (id.to_string(), r.at))
            .collect()
    };
    let (on_disk, again) = (reclaimed(live), reclaimed(rebuilt));
    if on_disk != again {
        out.push(format!(
            "outputs reclaimed without the model: {} on disk, {} rebuilt",
            on_disk.len(),
            again.len()
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_panel_names_the_blocks_it_made() {
        let panel = "▣ noa | 18K → 16K tokens (~1.7K reclaimed)\n  b19(T1)=m00234–m00242* → /st/tier1/b19_m00234-m00242.md\n  b20(T2)=m00002–m00233 → /st/tier2/b20.md\n  warn: consolidate live blocks: b1(T1) m00002–m00031, b2(T1) m00032–m00041\n  error: ab3(T1)=m00001–m00002 is not a block line";
        let made = recorded_blocks(panel);
        assert_eq!(
            made,
            [
                MadeBlock {
                    number: 19,
                    tier: 1,
                    start: "m00234".into(),
                    end: "m00242".into()
                },
                MadeBlock {
                    number: 20,
                    tier: 2,
                    start: "m00002".into(),
                    end: "m00233".into()
                },
            ]
        );
        assert_eq!(
            made.len(),
            crate::engine::compress::panel::block_count(panel)
        );
    }
}
