//! The recommendation: what may be compressed now, what may not and why,
//! and how much each tier would reclaim.

use super::ranges::{BlockSpan, Breakdown, ProtectReason, ProtectedRange, RangeInfo};
use super::zone;
use crate::engine::model::config::Config;
use crate::engine::model::message::{ContentType, CoreMessage, Role, task_index};
use crate::engine::model::refs::{NUDGE_ID, ref_to_index};
use crate::engine::model::state::{Block, CompressionState};
use crate::engine::model::summary::{block_of_summary, is_rendered_summary, render_summary};

/// Ranges smaller than this many tokens are not offered: a fragment in a
/// batch can sink the whole batch at the size gate.
pub const VIABLE_RANGE_MIN_TOKENS: usize = 200;

/// Neighbouring runs are merged until a range holds this share of the
/// window (a fifth): a nudge offers a few large ranges, so one call goes
/// deep in few blocks and the next compression is far away.
pub const RANGE_SHARE: f64 = 0.20;

/// Everything a nudge, `noa ranges` or `noa inspect` reports about a view.
#[derive(Debug, Clone, Default)]
pub struct Recommendation {
    /// Compressible runs, oldest first, merged up to the size gate.
    pub ranges: Vec<RangeInfo>,
    /// Protected runs, oldest first.
    pub protected: Vec<ProtectedRange>,
    /// Active blocks, by first ref.
    pub blocks: Vec<BlockSpan>,
    /// Tokens each tier could reclaim: [tier 1, tier 2, tier 3].
    pub pending: [usize; 3],
    /// Where the active tier-1 and tier-2 blocks are in the state's blocks
    /// (what a tier-2 and a tier-3 nudge consolidate): places, not copies,
    /// since a block carries every id it stands for.
    pub tier_blocks: [Vec<usize>; 2],
}

impl Recommendation {
    /// Every token figure through `scale`, from the estimator's to the
    /// provider's: what a nudge, `ranges` and `inspect` show, and what the
    /// decision weighs, so a range reads the same wherever it appears.
    pub fn scaled(mut self, scale: impl Fn(usize) -> usize) -> Recommendation {
        for r in &mut self.ranges {
            r.tokens = scale(r.tokens);
        }
        for p in &mut self.protected {
            p.tokens = scale(p.tokens);
        }
        self.pending = self.pending.map(&scale);
        self
    }

    /// The blocks a nudge of `tier` asks to fold (the active blocks of the
    /// tier below; none for tier 1) among `blocks`, the state's blocks this
    /// was built on.
    pub fn targets<'b>(&self, tier: u8, blocks: &'b [Block]) -> Vec<&'b Block> {
        let at = match tier {
            2 => &self.tier_blocks[0],
            3 => &self.tier_blocks[1],
            _ => return Vec::new(),
        };
        at.iter().map(|&i| &blocks[i]).collect()
    }
}

/// Builds the recommendation for a view (before any nudge is appended).
/// `covered` tells whether an active block of `state` stands for a message
/// (by id), `chars` the length of a message's text (a view may hold some
/// without their words yet).
pub fn recommend(
    view: &[CoreMessage],
    state: &CompressionState,
    covered: &dyn Fn(&str) -> bool,
    cfg: &Config,
    chars: &dyn Fn(&CoreMessage) -> usize,
) -> Recommendation {
    let found = find_runs(&RunSearch {
        view,
        state,
        covered,
        cfg,
        chars,
    });
    let ranges = offered_ranges(found.runs, cfg);
    let blocks = active_block_spans(state);
    let tier_blocks = [blocks_of_tier(state, 1), blocks_of_tier(state, 2)];
    let pending = pending_tokens(&ranges, &tier_blocks, state, cfg);
    Recommendation {
        ranges,
        protected: found.protected,
        blocks,
        pending,
        tier_blocks,
    }
}

/// The view and what [`recommend`] was given to read it with.
struct RunSearch<'a> {
    view: &'a [CoreMessage],
    state: &'a CompressionState,
    covered: &'a dyn Fn(&str) -> bool,
    cfg: &'a Config,
    chars: &'a dyn Fn(&CoreMessage) -> usize,
}

/// The view cut into compressible runs and protected runs, oldest first.
struct FoundRuns {
    runs: Vec<Run>,
    protected: Vec<ProtectedRange>,
}

/// Walks the view once: addressable messages outside the recent zone and
/// not yet compressed form runs; the recent zone forms protected runs;
/// anything else is a gap that starts a new segment.
fn find_runs(search: &RunSearch) -> FoundRuns {
    let RunSearch {
        view,
        state,
        covered,
        cfg,
        chars,
    } = *search;
    let zone = zone::protected_ids(view, state, cfg);
    let mut runs: Vec<Run> = Vec::new();
    let mut protected: Vec<ProtectedRange> = Vec::new();
    let mut segment = 0usize;
    let mut open: Option<Run> = None;
    // Past the first message of the recent zone, what is compressible is a
    // re-runnable exchange between protected ones.
    let mut in_zone = false;
    let first_user = task_index(view).map(|i| view[i].id.as_str());
    let last_user = view
        .iter()
        .rev()
        .find(|m| m.role == Role::User && m.content_type == ContentType::Text && has_ref(state, m))
        .map(|m| m.id.as_str());
    // The view is in the order its refs were handed out.
    let mut near = 0;
    for m in view {
        let Some(r) = state.message_refs.usable_near(&m.id, &mut near) else {
            // Summaries, hard-protected messages, instructions: a gap.
            runs.extend(open.take());
            segment += 1;
            continue;
        };
        if covered(&m.id) {
            runs.extend(open.take());
            segment += 1;
            continue;
        }
        let t = cfg.tokens(m);
        if zone.contains(m.id.as_str()) {
            runs.extend(open.take());
            segment += 1;
            let reason = if Some(m.id.as_str()) == last_user {
                ProtectReason::LastUserMessage
            } else {
                ProtectReason::Recent
            };
            // The latest user message is protected wherever it is: in a
            // session with no user message since the task, that is the
            // task, and the zone has not begun there.
            in_zone |= Some(m.id.as_str()) != first_user;
            extend_protected(&mut protected, r, t, m, reason);
            continue;
        }
        let is_user = m.role == Role::User && m.content_type == ContentType::Text;
        if is_user && open.as_ref().is_some_and(|o| o.info.count >= 3) {
            runs.extend(open.take());
        }
        let run = open.get_or_insert_with(|| Run::new(r, segment, in_zone));
        run.add(r, t, chars(m), m, is_user);
        run.info.holds_task |= Some(m.id.as_str()) == first_user;
    }
    runs.extend(open);
    FoundRuns { runs, protected }
}

/// The ranges offered: runs merged up to the size gate and a share of the
/// window, without the fragments too small to be worth a block.
fn offered_ranges(runs: Vec<Run>, cfg: &Config) -> Vec<RangeInfo> {
    let min_chars = cfg.compress.min_compress_range;
    let target = (cfg.context_limit as f64 * RANGE_SHARE) as usize;
    // Inside the recent zone only an output big enough to pass the size
    // gate on its own is offered: a small one would cost a block, a summary
    // and a panel line for little room.
    merge_to_threshold(runs, min_chars, target)
        .into_iter()
        .filter(|r| r.info.tokens >= VIABLE_RANGE_MIN_TOKENS)
        .filter(|r| !r.in_zone || r.info.chars >= min_chars)
        .map(|r| r.info)
        .collect()
}

/// The active blocks' spans, by first ref.
fn active_block_spans(state: &CompressionState) -> Vec<BlockSpan> {
    let mut blocks: Vec<BlockSpan> = state
        .blocks
        .iter()
        .filter(|b| b.active)
        .map(|b| BlockSpan {
            block_id: b.block_id.clone(),
            tier: b.tier,
            start_ref: b.start_ref.clone(),
            end_ref: b.end_ref.clone(),
        })
        .collect();
    blocks.sort_by_key(|b| ref_to_index(&b.start_ref).unwrap_or(0));
    blocks
}

/// Where the active blocks of tier `t` are in the state's blocks.
fn blocks_of_tier(state: &CompressionState, t: u8) -> Vec<usize> {
    (state.blocks.iter().enumerate())
        .filter(|(_, b)| b.active && b.tier == t)
        .map(|(i, _)| i)
        .collect()
}

/// Tokens each tier could reclaim: tier 1 the offered ranges that pass the
/// size gate, tiers 2 and 3 the summaries of the tier below.
fn pending_tokens(
    ranges: &[RangeInfo],
    tier_blocks: &[Vec<usize>; 2],
    state: &CompressionState,
    cfg: &Config,
) -> [usize; 3] {
    let min_chars = cfg.compress.min_compress_range;
    // What consolidating a tier takes out of the view: each block's whole
    // rendered summary (header and archive pointer included).
    let summary_tokens = |at: &[usize]| {
        at.iter()
            .map(|&i| cfg.count(&render_summary(&state.blocks[i]).text))
            .sum::<usize>()
    };
    [
        ranges
            .iter()
            .filter(|r| r.chars >= min_chars)
            .map(|r| r.tokens)
            .sum(),
        summary_tokens(&tier_blocks[0]),
        summary_tokens(&tier_blocks[1]),
    ]
}

fn has_ref(state: &CompressionState, m: &CoreMessage) -> bool {
    state.message_refs.usable(&m.id).is_some()
}

/// A compressible run being built, with the segment it belongs to: runs of
/// one segment touch, so merging them spans nothing that is not compressible.
struct Run {
    info: RangeInfo,
    /// Tokens of its tool calls and results.
    tool: usize,
    segment: usize,
    /// It starts inside the recent zone.
    in_zone: bool,
}

impl Run {
    fn new(r: &str, segment: usize, in_zone: bool) -> Run {
        Run {
            info: RangeInfo {
                start_ref: r.to_string(),
                end_ref: r.to_string(),
                count: 0,
                tokens: 0,
                chars: 0,
                tool_pct: 0,
                user_messages: 0,
                holds_task: false,
            },
            tool: 0,
            segment,
            in_zone,
        }
    }
    /// Takes in the message `m` of ref `r`; the tool share is worked out
    /// when the runs are merged ([`merge_to_threshold`]).
    fn add(&mut self, r: &str, t: usize, chars: usize, m: &CoreMessage, is_user: bool) {
        // The last ref's text is written over, not made anew for each
        // message: a first turn walks every message of the history.
        self.info.end_ref.clear();
        self.info.end_ref.push_str(r);
        self.info.count += 1;
        self.info.tokens += t;
        self.info.chars += chars;
        self.info.user_messages += usize::from(is_user);
        if matches!(
            m.content_type,
            ContentType::ToolCall | ContentType::ToolResult
        ) {
            self.tool += t;
        }
    }
}

fn pct(part: usize, whole: usize) -> u32 {
    (part * 100 + whole / 2).checked_div(whole).unwrap_or(0) as u32
}

/// Merges neighbouring runs of a segment until each reaches `min_chars` (so
/// the ranges offered pass the size gate) and `target` tokens (so they are
/// few and large); the tool share is of their tokens together.
fn merge_to_threshold(runs: Vec<Run>, min_chars: usize, target: usize) -> Vec<Run> {
    let mut out: Vec<Run> = Vec::new();
    for mut run in runs {
        match out.last_mut() {
            Some(prev)
                if prev.segment == run.segment
                    && (prev.info.chars < min_chars || prev.info.tokens < target) =>
            {
                prev.info.end_ref = run.info.end_ref;
                prev.info.count += run.info.count;
                prev.info.tokens += run.info.tokens;
                prev.info.chars += run.info.chars;
                prev.info.user_messages += run.info.user_messages;
                prev.info.holds_task |= run.info.holds_task;
                prev.tool += run.tool;
                prev.info.tool_pct = pct(prev.tool, prev.info.tokens);
            }
            _ => {
                run.info.tool_pct = pct(run.tool, run.info.tokens);
                out.push(run);
            }
        }
    }
    out
}

fn extend_protected(
    protected: &mut Vec<ProtectedRange>,
    r: &str,
    t: usize,
    m: &CoreMessage,
    reason: ProtectReason,
) {
    let adjacent = protected.last().is_some_and(|p| {
        ref_to_index(&p.end_ref)
            .zip(ref_to_index(r))
            .is_some_and(|(a, b)| b == a + 1)
            && p.reason == reason
    });
    if !adjacent {
        protected.push(ProtectedRange {
            start_ref: r.to_string(),
            end_ref: r.to_string(),
            count: 0,
            tokens: 0,
            tools: Vec::new(),
            reason,
        });
    }
    let p = protected.last_mut().expect("pushed above");
    p.end_ref = r.to_string();
    p.count += 1;
    p.tokens += t;
    if !m.tool_name.is_empty() && !p.tools.iter().any(|t| *t == m.tool_name) {
        p.tools.push(m.tool_name.to_string());
    }
}

/// Buckets the view's estimated tokens: instructions, tool traffic,
/// summaries, code, text and the nudge (the host's share is not in a view).
pub fn breakdown(view: &[CoreMessage], cfg: &Config) -> Breakdown {
    let mut b = Breakdown::default();
    for m in view {
        let t = cfg.tokens(m);
        if m.id == NUDGE_ID {
            b.nudge += t;
        } else if is_rendered_summary(m) || block_of_summary(&m.id).is_some() {
            b.summaries += t;
        } else if m.role == Role::System {
            b.system += t;
        } else if matches!(
            m.content_type,
            ContentType::ToolCall | ContentType::ToolResult
        ) {
            b.tool += t;
        } else if is_mostly_code(&m.text) {
            b.code += t;
        } else {
            b.text += t;
        }
    }
    b
}

/// Whether more than half of a text is inside ``` fences.
fn is_mostly_code(text: &str) -> bool {
    let mut inside = false;
    let mut code = 0;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            inside = !inside;
            continue;
        }
        if inside {
            code += line.len() + 1;
        }
    }
    code * 2 > text.len()
}

#[cfg(test)]
#[path = "recommend_tests.rs"]
mod tests;
