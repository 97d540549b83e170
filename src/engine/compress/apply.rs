//! Applying one Compress call: ranges in, blocks and archives out.
//!
//! The order is fixed: resolve every range against the view the model saw,
//! widen each to whole tool exchanges, drop overlaps, check the batch is worth
//! it, then build each block in memory with its archive. Nothing is written
//! here: the caller writes every archive first and the state last, so a block
//! never exists without its originals on disk.

use crate::engine::model::identity::{IdMap, IdSet};
use std::collections::HashSet;

use super::archive::{ArchiveFile, ArchiveInput, Entry};
use super::boundary::{Resolver, Unresolved};
use super::parse_args::CompressRange;
use crate::engine::model::config::Config;
use crate::engine::model::exchange;
use crate::engine::model::message::COMPRESS_TOOL;
use crate::engine::model::message::{CoreMessage, task_index};
use crate::engine::model::name::Name;
use crate::engine::model::protect::is_tool_protected;
use crate::engine::model::refs::{BLOCKED, index_to_ref};
use crate::engine::model::state::{Block, CompressionState};
use crate::engine::model::summary::render_summary;
use crate::engine::model::tokens;
use crate::engine::pressure::zone;
use crate::engine::turn::HistoryIndex;

/// One Compress call, with everything it is resolved against.
#[derive(Debug, Clone)]
pub struct ApplyInput<'a> {
    /// The requested ranges.
    pub ranges: &'a [CompressRange],
    /// The view the model saw when it made the call; refs resolve against it.
    pub view: &'a [CoreMessage],
    /// Every history message by id, untruncated and untagged: archives are
    /// written from these, never from the view.
    pub originals: &'a IdMap<'a, &'a CoreMessage>,
    /// The state the view was projected with.
    pub state: &'a CompressionState,
    /// Engine settings.
    pub config: &'a Config,
    /// The call's tool-call id ("" for arguments given by hand).
    pub call_id: &'a str,
    /// Absolute path of the session directory archives go under.
    pub archive_root: &'a str,
    /// Creation time for archives, RFC 3339.
    pub created: &'a str,
    /// Creation time for blocks, Unix seconds.
    pub now: i64,
    /// Replaying a recorded call whose ranges are the spans the live call
    /// made: the recent zone and the size gate, which belonged to that
    /// moment, were already applied then and are not applied again.
    pub replay: bool,
    /// A rebuild's index, as the view's projection left it (see
    /// `Resolver::new`).
    pub index: Option<&'a HistoryIndex<'a>>,
}

/// What a call did, or why it did nothing.
///
/// It holds what the call changes, not a changed copy of the state: a
/// long session's state is mostly its ref map, and a rebuild applies a call
/// every few turns. [`ApplyOutcome::commit`] writes the change.
#[derive(Debug, Clone)]
pub struct ApplyOutcome {
    /// The block counter after the call: one past the last id it gave out.
    pub next_block_id: u64,
    /// Blocks made, each with whether its span holds refs it does not cover.
    pub created: Vec<(Block, bool)>,
    /// Archives to write before the state.
    pub archives: Vec<ArchiveFile>,
    /// Rejections, in words the model can act on.
    pub errors: Vec<String>,
    /// Adjustments the model should know about.
    pub warnings: Vec<String>,
    /// Higher-tier blocks left standing inside a range: (id, tier).
    pub surviving: Vec<(String, u8)>,
    /// The tier absorbed when blocks survived.
    pub absorbed_tier: u8,
    /// True when the ranges themselves were at fault (unknown, consumed, too
    /// small, nothing new), as opposed to a summary that needs rewriting.
    pub ranges_at_fault: bool,
}

impl ApplyOutcome {
    /// A call that made nothing, with why.
    pub fn rejected(
        state: &CompressionState,
        errors: Vec<String>,
        warnings: Vec<String>,
        ranges_at_fault: bool,
    ) -> Self {
        ApplyOutcome {
            next_block_id: state.next_block_id,
            created: Vec::new(),
            archives: Vec::new(),
            errors,
            warnings,
            surviving: Vec::new(),
            absorbed_tier: 0,
            ranges_at_fault,
        }
    }

    /// Writes the call into `state`, the state its view was projected
    /// with: the new blocks (those they fold turn inactive), the counters,
    /// and fresh nudge pacing. A call that made nothing leaves it as it was.
    pub fn commit(&self, state: &mut CompressionState) {
        if self.created.is_empty() {
            return;
        }
        let absorbed: HashSet<&str> = self
            .created
            .iter()
            .flat_map(|(b, _)| b.direct_block_ids.iter().map(Name::as_str))
            .collect();
        for b in &mut state.blocks {
            if absorbed.contains(b.block_id.as_str()) {
                b.active = false;
            }
        }
        state
            .blocks
            .extend(self.created.iter().map(|(b, _)| b.clone()));
        state.next_block_id = self.next_block_id;
        state.stats.compression_count += self.created.len();
        state.stats.tokens_compressed += self
            .created
            .iter()
            .map(|(b, _)| b.compressed_tokens)
            .sum::<usize>();
        state.nudge = Default::default();
    }
}

/// The text a call with nothing to do gets: neither success nor failure.
pub const NO_RANGES: &str = "No ranges provided.";

struct Span<'r> {
    range: &'r CompressRange,
    start: usize,
    end: usize,
    names_block: bool,
}

/// Applies a Compress call. Pure: writes nothing.
pub fn apply(input: &ApplyInput) -> ApplyOutcome {
    let state = input.state;
    if input.ranges.is_empty() {
        return ApplyOutcome::rejected(state, vec![NO_RANGES.to_string()], Vec::new(), false);
    }
    let resolver = Resolver::new(input.view, state, input.index);
    let exchanges = exchange::spans(input.view);
    let resolved = resolve_ranges(input, &resolver, &exchanges);
    if resolved.spans.is_empty() {
        return nothing_resolved(input, resolved);
    }
    let mut notes = resolved.notes;
    let kept = drop_overlaps(resolved.spans, &mut notes.warnings);
    if !input.replay
        && !kept.iter().any(|s| s.names_block)
        && let Err(e) = size_gate(input, &resolver, &kept)
    {
        notes.errors.push(e);
        return ApplyOutcome::rejected(state, notes.errors, notes.warnings, true);
    }
    let zone = if input.replay {
        IdSet::default()
    } else {
        zone::protected_ids(input.view, state, input.config)
    };
    Builder::new(input, resolver, exchanges, &zone).build_all(&kept, notes)
}

/// Errors and warnings gathered over a call, in the order they arose.
#[derive(Default)]
struct Notes {
    errors: Vec<String>,
    warnings: Vec<String>,
}

/// The requested ranges resolved against the view, each widened to whole
/// tool exchanges, with what went wrong for the others.
struct ResolvedRanges<'r> {
    spans: Vec<Span<'r>>,
    notes: Notes,
    /// How many ranges named a ref unknown to this session.
    unknown: usize,
}

/// Resolves every requested range against the view the model saw and
/// widens it to whole tool exchanges; a range that does not resolve becomes
/// an error naming it.
fn resolve_ranges<'r>(
    input: &ApplyInput<'r>,
    resolver: &Resolver,
    exchanges: &[(usize, usize)],
) -> ResolvedRanges<'r> {
    let mut notes = Notes::default();
    let mut spans = Vec::new();
    let mut unknown = 0;
    for r in input.ranges {
        match resolver.resolve(&r.start, &r.end) {
            Ok(res) => {
                notes.warnings.extend(res.warnings);
                let (start, end) = exchange::snap(exchanges, res.start, res.end);
                spans.push(Span {
                    range: r,
                    start,
                    end,
                    names_block: res.names_block,
                });
            }
            Err(e) => {
                unknown += usize::from(matches!(e, Unresolved::Unknown(_)));
                notes.errors.push(format!(
                    "{}..{}: {}",
                    r.start.trim(),
                    r.end.trim(),
                    e.message()
                ));
            }
        }
    }
    ResolvedRanges {
        spans,
        notes,
        unknown,
    }
}

/// The rejection of a call none of whose ranges resolved. When every ref
/// was unknown, one error says so, with figures to diagnose it by, in place
/// of an error per range.
fn nothing_resolved(input: &ApplyInput, resolved: ResolvedRanges) -> ApplyOutcome {
    let state = input.state;
    let mut errors = resolved.notes.errors;
    if resolved.unknown == input.ranges.len() {
        errors = vec![format!(
            "None of the {n} requested range(s) resolved: every ref is unknown to this session, and refs are never renumbered. Use refs shown in the current view. [diagnostics: highest ref {high}, unknown ranges {unknown}/{n}, {c} compression(s), {b} block(s)]",
            n = input.ranges.len(),
            high = index_to_ref(state.message_refs.highest_used()).unwrap_or_else(|| "none".into()),
            unknown = resolved.unknown,
            c = state.stats.compression_count,
            b = state.blocks.len(),
        )];
    }
    ApplyOutcome::rejected(state, errors, resolved.notes.warnings, true)
}

/// The spans in view order with overlaps dropped: the earlier range takes
/// precedence, and each one skipped is a warning.
fn drop_overlaps<'r>(mut spans: Vec<Span<'r>>, warnings: &mut Vec<String>) -> Vec<Span<'r>> {
    spans.sort_by_key(|s| (s.start, s.end));
    let mut kept: Vec<Span> = Vec::with_capacity(spans.len());
    for s in spans {
        match kept.last() {
            Some(prev) if s.start <= prev.end => warnings.push(format!(
                "Skipped range {}..{}: it overlaps an earlier range in this call, which takes precedence. Keep ranges disjoint.",
                s.range.start.trim(),
                s.range.end.trim()
            )),
            _ => kept.push(s),
        }
    }
    kept
}

/// The size gate: the ranges together must hold enough addressable
/// content, counted from the originals, to be worth a block. Returns the
/// error when they do not.
fn size_gate(input: &ApplyInput, resolver: &Resolver, kept: &[Span]) -> Result<(), String> {
    let state = input.state;
    let addressable =
        |m: &CoreMessage| !resolver.covered(&m.id) && state.message_refs.usable(&m.id).is_some();
    let original_chars = |m: &CoreMessage| {
        input
            .originals
            .get(m.id.as_str())
            .map_or_else(|| tokens::chars(&m.text), |o| o.tally().chars())
    };
    let min = input.config.compress.min_compress_range;
    // Counted only until the gate is passed: the figure is shown only
    // when it is not, and a call over most of a long history need not
    // count it all.
    let chars = kept
        .iter()
        .flat_map(|s| &input.view[s.start..=s.end])
        .filter(|m| addressable(m))
        .map(original_chars)
        .try_fold(0, |sum, n| match sum + n {
            sum if sum > 0 && sum >= min => Err(sum),
            sum => Ok(sum),
        })
        .unwrap_or_else(|passed| passed);
    if chars == 0 {
        return Err("Every requested range is already compressed: its content is covered by an active block.".into());
    }
    if chars < min {
        return Err(format!(
            "Total compressible content too small ({chars} chars across {} range(s), min {min}). Combine more messages into fewer, larger ranges.",
            kept.len()
        ));
    }
    Ok(())
}

#[derive(Default)]
struct Built {
    created: Vec<(Block, bool)>,
    archives: Vec<ArchiveFile>,
    warnings: Vec<String>,
    surviving: Vec<(String, u8)>,
    absorbed_tier: u8,
    range_fault: bool,
}

/// What every range of one call is built against.
struct Builder<'a> {
    input: &'a ApplyInput<'a>,
    state: &'a CompressionState,
    cfg: &'a Config,
    /// Where each message of the view is, and each block by id.
    resolver: Resolver<'a>,
    /// The view's exchanges ([`exchange::spans`]).
    exchanges: Vec<(usize, usize)>,
    zone: &'a IdSet<'a>,
    task: Option<&'a str>,
}

/// What a range folds: the lowest tier among the live blocks in it, which
/// is absorbed, and the tier the new block gets.
struct Fold<'a> {
    tier: u8,
    target: u8,
    absorbed: Vec<&'a Block>,
}

impl Fold<'_> {
    /// Whether a block whose summary is in the range is one of `absorbed`
    /// (live, of the lowest tier there), without searching that list.
    fn absorbs(&self, b: &Block) -> bool {
        b.active && b.tier == self.target
    }
}

impl<'a> Builder<'a> {
    /// A builder for one call's ranges; `zone` is the recent zone they must
    /// leave visible (empty for a replay).
    fn new(
        input: &'a ApplyInput<'a>,
        resolver: Resolver<'a>,
        exchanges: Vec<(usize, usize)>,
        zone: &'a IdSet<'a>,
    ) -> Self {
        let view = input.view;
        Builder {
            input,
            state: input.state,
            cfg: input.config,
            resolver,
            exchanges,
            zone,
            task: task_index(view).map(|i| view[i].id.as_str()),
        }
    }

    /// Builds each kept span's block and archive, numbering the blocks on
    /// from the state's counter, and gathers the outcome: the blocks made,
    /// or a rejection when none was.
    fn build_all(&self, kept: &[Span], notes: Notes) -> ApplyOutcome {
        let state = self.state;
        let Notes {
            mut errors,
            mut warnings,
        } = notes;
        let mut next_id = state.next_block_id;
        let mut out = Built::default();
        for s in kept {
            match self.build(s, &mut next_id, &mut out) {
                Ok(()) => {}
                Err(e) => errors.push(format!(
                    "{}..{}: {e}",
                    s.range.start.trim(),
                    s.range.end.trim()
                )),
            }
        }
        warnings.extend(std::mem::take(&mut out.warnings));
        if out.created.is_empty() {
            let at_fault = out.range_fault;
            return ApplyOutcome {
                surviving: out.surviving,
                absorbed_tier: out.absorbed_tier,
                ..ApplyOutcome::rejected(state, errors, warnings, at_fault)
            };
        }
        ApplyOutcome {
            next_block_id: next_id,
            created: out.created,
            archives: out.archives,
            errors,
            warnings,
            surviving: out.surviving,
            absorbed_tier: out.absorbed_tier,
            ranges_at_fault: false,
        }
    }

    /// Builds one range's block and archive, or says why not.
    fn build(&self, s: &Span, next_id: &mut u64, out: &mut Built) -> Result<(), String> {
        let view = self.input.view;
        let end = self.clip(s, out);
        let slice = &view[s.start..=end];
        let fold = self.fold(slice, out);
        let direct = self.direct(s.start, slice, &fold, out)?;
        let summary = self.summary(s.range)?;
        if let Some(task) = self
            .task
            .filter(|t| direct.iter().any(|&i| view[i].id == *t))
        {
            let r = self.state.message_refs.get(task).unwrap_or_default();
            out.warnings.push(format!("{r} is the first user message (the task): it stays in the view verbatim, and is archived too."));
        }
        let block = self.block(s.range, summary, &direct, &fold, next_id);
        let archive = self.archive(s.start, slice, &direct, &fold, &block);
        let taken: IdSet<'_> = block.direct_message_ids.iter().map(Name::as_str).collect();
        let partial =
            slice.iter().any(|m| {
                self.resolver.summary_block(m).is_none()
                    && !taken.contains(m.id.as_str())
                    && self.state.message_refs.usable(&m.id).is_some_and(|r| {
                        r >= block.start_ref.as_str() && r <= block.end_ref.as_str()
                    })
            });
        out.archives.push(archive);
        out.created.push((block, partial));
        Ok(())
    }

    /// Whether a message must stay visible: hard-protected or in the recent
    /// zone, and not already compressed.
    fn stays(&self, m: &CoreMessage) -> bool {
        self.resolver.summary_block(m).is_none()
            && !self.resolver.covered(&m.id)
            && self.state.message_refs.get(&m.id).is_some_and(|r| {
                r == BLOCKED
                    || is_tool_protected(&m.tool_name, &self.cfg.protected_tools)
                    || self.zone.contains(m.id.as_str())
            })
    }

    /// Whether a range would take a message: a block's summary to fold, or
    /// an addressable message that may go.
    fn takes(&self, m: &CoreMessage) -> bool {
        self.resolver.summary_block(m).is_some()
            || (!self.resolver.covered(&m.id)
                && self.state.message_refs.usable(&m.id).is_some()
                && !self.stays(m))
    }

    /// The range's last index. A block is one unbroken run of the visible
    /// history: no message that stays visible may sit inside its span, or
    /// the summary would stand before messages it describes as past. So the
    /// range stops at the first message that must stay once the run has
    /// begun, summaries of blocks to fold included.
    fn clip(&self, s: &Span, out: &mut Built) -> usize {
        let view = self.input.view;
        let Some(first) = (s.start..=s.end).find(|&i| self.takes(&view[i])) else {
            return s.end;
        };
        let Some(stop) = (first..=s.end).find(|&i| self.stays(&view[i])) else {
            return s.end;
        };
        let later = view[stop..=s.end].iter().filter(|m| self.takes(m)).count();
        if later == 0 {
            return s.end;
        }
        let m = &view[stop];
        let why = if self.zone.contains(m.id.as_str()) {
            "it is in the recent zone".to_string()
        } else if m.tool_name.is_empty() {
            "it cannot be compressed".to_string()
        } else {
            format!("{} is a protected tool", m.tool_name)
        };
        let at = self
            .state
            .message_refs
            .usable(&m.id)
            .unwrap_or("a protected message");
        out.warnings.push(format!(
            "Stopped the range at {at} ({why}): {later} later message(s) stay visible, so the block covers one unbroken run."
        ));
        stop - 1
    }

    /// Tiers: only the lowest tier among the blocks in range is absorbed;
    /// higher ones are left standing and reported.
    fn fold(&self, slice: &[CoreMessage], out: &mut Built) -> Fold<'a> {
        let nested: Vec<&Block> = slice
            .iter()
            .filter_map(|m| self.resolver.summary_block(m))
            .filter(|b| b.active)
            .collect();
        let target = nested.iter().map(|b| b.tier).min().unwrap_or(0);
        for b in nested.iter().filter(|b| b.tier != target) {
            out.surviving.push((b.block_id.clone(), b.tier));
            out.absorbed_tier = target;
        }
        Fold {
            tier: (target + 1).min(self.cfg.max_tier()),
            target,
            absorbed: nested.into_iter().filter(|b| b.tier == target).collect(),
        }
    }

    /// The messages of `slice` (from view index `start`) that are not
    /// summaries, covered or without a ref, by whether the block may take
    /// them.
    fn sort_out<'s>(&'s self, start: usize, slice: &[CoreMessage]) -> Sorted<'s> {
        let mut sorted = Sorted::default();
        for (off, m) in slice.iter().enumerate() {
            let i = start + off;
            if self.resolver.summary_block(m).is_some() || self.resolver.covered(&m.id) {
                continue;
            }
            let Some(r) = self.state.message_refs.get(&m.id) else {
                continue;
            };
            if r == BLOCKED || is_tool_protected(&m.tool_name, &self.cfg.protected_tools) {
                sorted.excluded.push(i);
            } else if self.zone.contains(m.id.as_str()) {
                sorted.excluded.push(i);
                sorted.zoned.push(r);
            } else {
                sorted.direct.push(i);
            }
        }
        sorted
    }

    /// The view indices the block takes itself: addressable, not
    /// hard-protected, not in the recent zone, and never half an exchange.
    fn direct(
        &self,
        start: usize,
        slice: &[CoreMessage],
        fold: &Fold,
        out: &mut Built,
    ) -> Result<Vec<usize>, String> {
        let Sorted {
            mut direct,
            excluded,
            zoned,
        } = self.sort_out(start, slice);
        if !zoned.is_empty() {
            if direct.is_empty() && fold.absorbed.is_empty() {
                out.range_fault = true;
                return Err(format!(
                    "Range is entirely within the protected zone (the most recent messages and the last user message): {}. Pick older messages.",
                    ref_list(&zoned)
                ));
            }
            out.warnings.push(format!(
                "Left {} protected message(s) out of the range (recent zone): {}.",
                zoned.len(),
                ref_list(&zoned)
            ));
        }
        let withdrawn =
            withdraw_split_exchanges(self.input.view, &self.exchanges, &mut direct, &excluded);
        if withdrawn > 0 {
            out.warnings.push(format!(
                "Left {withdrawn} message(s) out to keep tool exchanges whole (a call, its result and its reasoning go together)."
            ));
        }
        if direct.is_empty() && fold.absorbed.is_empty() {
            out.range_fault = true;
            return Err("Range contains no new content: everything in it is already compressed or protected. To consolidate blocks, name them (b1..b4) as the ends.".into());
        }
        let max_tier = self.cfg.max_tier();
        if fold.target == max_tier && direct.is_empty() {
            out.range_fault = true;
            return Err(format!(
                "Tier {max_tier} is the top tier: folding tier-{max_tier} blocks into another tier-{max_tier} block reclaims nothing. Compress a lower tier, or include new messages in the range."
            ));
        }
        Ok(direct)
    }

    /// The range's summary, trimmed, when its length is within bounds.
    fn summary<'r>(&self, range: &'r CompressRange) -> Result<&'r str, String> {
        let summary = range.summary.trim();
        let n = summary.chars().count();
        let max = range
            .summary_max_chars
            .unwrap_or(self.cfg.compress.max_summary_length);
        let min = self.cfg.compress.min_summary_length;
        if n == 0 {
            return Err(
                "Summary is empty: write the summary that is to replace this range.".into(),
            );
        }
        if n < min {
            return Err(format!(
                "Summary too short ({n} chars, min {min}): it cannot stand in for what it replaces."
            ));
        }
        if n > max {
            return Err(format!(
                "Summary too long ({n} chars, max {max}): tighten it, or split the range."
            ));
        }
        Ok(summary)
    }

    /// A message as the history holds it: untruncated and untagged.
    fn original(&self, m: &'a CoreMessage) -> &'a CoreMessage {
        self.input
            .originals
            .get(m.id.as_str())
            .copied()
            .unwrap_or(m)
    }

    /// The block, with the next block id taken from `next_id`.
    fn block(
        &self,
        range: &CompressRange,
        summary: &str,
        direct: &[usize],
        fold: &Fold,
        next_id: &mut u64,
    ) -> Block {
        let view = self.input.view;
        let direct_ids: Vec<Name> = direct.iter().map(|&i| view[i].id.clone()).collect();
        let mut effective = direct_ids.clone();
        for b in &fold.absorbed {
            effective.extend(b.effective_message_ids.iter().cloned());
        }
        let refs: Vec<&str> = effective
            .iter()
            .filter_map(|id| self.state.message_refs.usable(id))
            .collect();
        let start_ref = refs.iter().min().map(|r| r.to_string()).unwrap_or_default();
        let end_ref = refs.iter().max().map(|r| r.to_string()).unwrap_or_default();
        let compressed_tokens = direct
            .iter()
            .map(|&i| self.cfg.tokens(self.original(&view[i])))
            .sum::<usize>()
            + fold
                .absorbed
                .iter()
                .map(|b| self.cfg.count(&render_summary(b).text))
                .sum::<usize>();
        let block_id = format!("b{}", (*next_id).max(1));
        *next_id = (*next_id).max(1) + 1;
        let rel = super::archive::rel_path(fold.tier, &block_id, &start_ref, &end_ref);
        Block {
            block_id,
            tier: fold.tier,
            topic: range.topic.trim().to_string(),
            summary: summary.to_string(),
            direct_message_ids: direct_ids,
            effective_message_ids: effective,
            direct_block_ids: fold
                .absorbed
                .iter()
                .map(|b| Name::new(&b.block_id))
                .collect(),
            archive_path: format!("{}/{rel}", self.input.archive_root.trim_end_matches('/')),
            archive_rel: rel,
            compressed_tokens,
            start_ref,
            end_ref,
            created_at: self.input.now,
            active: true,
            compress_call_id: self.input.call_id.to_string(),
        }
    }

    /// The archive: entries in view order, originals rather than view text,
    /// folded blocks as their summaries.
    fn archive(
        &self,
        start: usize,
        slice: &'a [CoreMessage],
        direct: &[usize],
        fold: &Fold,
        block: &Block,
    ) -> ArchiveFile {
        let direct: HashSet<usize> = direct.iter().copied().collect();
        let mut entries: Vec<Entry> = Vec::new();
        for (off, m) in slice.iter().enumerate() {
            if let Some(b) = self.resolver.summary_block(m).filter(|b| fold.absorbs(b)) {
                entries.push(Entry::Block(b));
            } else if direct.contains(&(start + off)) {
                let o = self.original(m);
                entries.push(Entry::Message {
                    reference: self.state.message_refs.get(&o.id),
                    message: o,
                });
            }
        }
        ArchiveFile::new(
            block.archive_rel.clone(),
            &ArchiveInput {
                block,
                session: &self.state.session_id,
                created: self.input.created,
                entries,
            },
        )
    }
}

/// A list of refs short enough for a panel: the first few and a count.
fn ref_list(refs: &[&str]) -> String {
    const SHOWN: usize = 4;
    match refs.len() {
        n if n <= SHOWN + 1 => refs.join(", "),
        n => format!("{}, … and {} more", refs[..SHOWN].join(", "), n - SHOWN),
    }
}

/// Removes from `direct` every exchange that also has an excluded member, so
/// no call, result or reasoning is split from the rest of its exchange.
/// Compress exchanges are shown whole anyway, so they split nothing.
/// Returns how many messages were withdrawn. `spans` are the view's
/// exchanges ([`exchange::spans`]).
fn withdraw_split_exchanges(
    view: &[CoreMessage],
    spans: &[(usize, usize)],
    direct: &mut Vec<usize>,
    excluded: &[usize],
) -> usize {
    let taken: HashSet<(usize, usize)> = direct.iter().map(|&d| spans[d]).collect();
    let split: HashSet<(usize, usize)> = excluded
        .iter()
        .filter(|&&i| view[i].tool_name != COMPRESS_TOOL)
        .map(|&i| spans[i])
        .filter(|span| taken.contains(span))
        .collect();
    let before = direct.len();
    direct.retain(|&d| !split.contains(&spans[d]));
    before - direct.len()
}

/// The messages of a range, by whether a block may take them itself.
#[derive(Default)]
struct Sorted<'s> {
    /// View indices the block may take.
    direct: Vec<usize>,
    /// View indices it may not: protected, or in the recent zone.
    excluded: Vec<usize>,
    /// The refs of those in the recent zone.
    zoned: Vec<&'s str>,
}

#[cfg(test)]
#[path = "apply_tests.rs"]
mod tests;
