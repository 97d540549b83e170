//! The context map: where a session's tokens are, drawn for a person.
//!
//! `noa inspect` shows it two ways. The terminal strip is the view as sent,
//! on the scale of the window, one character per stretch of tokens, so a
//! glance says how full the window is and with what. The SVG draws the whole
//! history message by message, each message as wide as its tokens and
//! coloured by what became of it (still visible, folded into a block, in the
//! recent zone, truncated, not sent), with the view measured against the
//! window beneath it. Everything here is pure: the CLI computes the view and
//! the zone, and writes the result.

use crate::engine::model::identity::{IdMap, IdSet};
use std::collections::BTreeMap;

use serde::Serialize;

use crate::engine::compress::panel::{Ledger, Reclaimed};
use crate::engine::model::marker::MARKER;
use crate::engine::model::message::{ContentType, CoreMessage, Role};
use crate::engine::model::refs::NUDGE_ID;
use crate::engine::model::state::{Block, CompressionState};
use crate::engine::model::summary::{block_of_summary, is_rendered_summary};

/// What a stretch of the map stands for. One class per message: a message
/// in the recent zone is drawn as protected whatever its kind, because that
/// is what matters when deciding what to compress.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Class {
    /// System or developer instructions.
    System,
    /// Visible user text.
    User,
    /// Visible assistant text or reasoning.
    Assistant,
    /// A visible tool call or result.
    Tool,
    /// Folded into a block: in the history, a message an active block covers;
    /// in the view, a block's summary. The segment names the block and tier.
    Block,
    /// In the recent zone: visible and not compressible now.
    Protected,
    /// A tool result cut by emergency truncation.
    Truncated,
    /// A tool output reclaimed without the model (a stale read, a
    /// repeat): one line in the view, the original archived.
    Reclaimed,
    /// In the history but not sent: spent Compress exchanges, unpaired calls.
    Hidden,
}

/// One message on the map.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Segment {
    /// The message id (a summary's view id for summaries).
    pub id: String,
    /// Its ref, when it has one.
    #[serde(rename = "ref", skip_serializing_if = "String::is_empty")]
    pub reference: String,
    /// What it is on the map.
    pub class: Class,
    /// The block's tier for [`Class::Block`]; 0 otherwise.
    #[serde(skip_serializing_if = "is_zero")]
    pub tier: u8,
    /// The block that covers it (or whose summary it is); empty otherwise.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub block: String,
    /// Tokens on the provider's scale: of the original in the history, as
    /// sent in the view.
    pub tokens: usize,
}

fn is_zero(n: &u8) -> bool {
    *n == 0
}

/// Neighbouring segments of one class (and one block), for drawing and for
/// scripts: a thousand-message history is a handful of runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Run {
    /// What the run is.
    pub class: Class,
    /// The block's tier for [`Class::Block`]; 0 otherwise.
    #[serde(skip_serializing_if = "is_zero")]
    pub tier: u8,
    /// The block, for [`Class::Block`].
    #[serde(skip_serializing_if = "String::is_empty")]
    pub block: String,
    /// First ref in the run, if any message in it has one.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub start_ref: String,
    /// Last ref in the run.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub end_ref: String,
    /// Messages in it.
    pub messages: usize,
    /// Tokens in it.
    pub tokens: usize,
}

/// The kind of a visible message, before zone and truncation are weighed.
fn kind(m: &CoreMessage) -> Class {
    match (m.role, m.content_type) {
        (Role::System, _) => Class::System,
        (_, ContentType::ToolCall | ContentType::ToolResult) | (Role::Tool, _) => Class::Tool,
        (Role::User, _) => Class::User,
        _ => Class::Assistant,
    }
}

fn reference(state: &CompressionState, id: &str) -> String {
    state
        .message_refs
        .usable(id)
        .unwrap_or_default()
        .to_string()
}

/// The class of a message that is in the view: reclaimed, then truncated,
/// then protected, then its kind.
fn visible_class(m: &CoreMessage, state: &CompressionState, zone: &IdSet<'_>) -> Class {
    if state.host.reclaimed.contains_key(m.id.as_str()) {
        Class::Reclaimed
    } else if state.host.truncated.contains(m.id.as_str())
        || (m.content_type == ContentType::ToolResult && m.text.contains(MARKER))
    {
        Class::Truncated
    } else if zone.contains(m.id.as_str()) {
        Class::Protected
    } else {
        kind(m)
    }
}

/// The whole history, message by message, each marked by what became of it:
/// visible (by kind, or protected, or truncated) when it is in `view`, folded
/// into the active block that covers it, else not sent. Sizes are of the
/// originals, so covered spans show how much the blocks took out.
pub fn history_segments(
    history: &[CoreMessage],
    view: &[CoreMessage],
    state: &CompressionState,
    zone: &IdSet<'_>,
    tokens: &dyn Fn(&CoreMessage) -> usize,
) -> Vec<Segment> {
    let shown: IdMap<'_, &CoreMessage> = view.iter().map(|m| (m.id.as_str(), m)).collect();
    let mut cover: IdMap<'_, &Block> = IdMap::default();
    for b in state.blocks.iter().filter(|b| b.active) {
        for id in &b.effective_message_ids {
            cover.entry(id.as_str()).or_insert(b);
        }
    }
    history
        .iter()
        .map(|m| {
            let (class, tier, block) = match (shown.get(m.id.as_str()), cover.get(m.id.as_str())) {
                (Some(v), _) => (visible_class(v, state, zone), 0, String::new()),
                (None, Some(b)) => (Class::Block, b.tier, b.block_id.clone()),
                (None, None) => (Class::Hidden, 0, String::new()),
            };
            Segment::of(m, state, class, tier, block, tokens)
        })
        .collect()
}

/// The view as sent (the nudge left out), message by message: summaries as
/// their block's tier, the rest by kind, protected or truncated.
pub fn view_segments(
    view: &[CoreMessage],
    state: &CompressionState,
    zone: &IdSet<'_>,
    tokens: &dyn Fn(&CoreMessage) -> usize,
) -> Vec<Segment> {
    let mut blocks: IdMap<'_, &Block> = IdMap::default();
    for b in &state.blocks {
        blocks.entry(b.block_id.as_str()).or_insert(b);
    }
    view.iter()
        .filter(|m| m.id != NUDGE_ID)
        .map(|m| {
            let summary_of = block_of_summary(&m.id)
                .filter(|_| is_rendered_summary(m))
                .map(|id| (id, blocks.get(id)));
            let (class, tier, block) = match summary_of {
                Some((id, b)) => (Class::Block, b.map_or(1, |b| b.tier), id.to_string()),
                None => (visible_class(m, state, zone), 0, String::new()),
            };
            Segment::of(m, state, class, tier, block, tokens)
        })
        .collect()
}

impl Segment {
    /// The segment for one message, in a given class, `tokens` its size.
    fn of(
        m: &CoreMessage,
        state: &CompressionState,
        class: Class,
        tier: u8,
        block: String,
        tokens: &dyn Fn(&CoreMessage) -> usize,
    ) -> Segment {
        Segment {
            id: m.id.to_string(),
            reference: reference(state, &m.id),
            class,
            tier,
            block,
            tokens: tokens(m),
        }
    }
}

/// Every block's [`Reclaimed`] figure by block id, active or not, for
/// `inspect`'s table, stats and JSON and the SVG's labels:
/// [`Ledger::reclaimed`] on the originals in `history` and the `view` as
/// projected, with the session's
/// counter. Summed over all blocks it is what the session reclaimed, since a
/// tier 2/3 block counts as taken the summaries its absorbed blocks put back.
pub fn reclaimed_by_block(
    history: &[CoreMessage],
    view: &[CoreMessage],
    blocks: &[Block],
    tokens: &dyn Fn(&CoreMessage) -> usize,
) -> BTreeMap<String, Reclaimed> {
    let ledger = Ledger::new(blocks, history, view, tokens);
    blocks
        .iter()
        .map(|b| (b.block_id.clone(), ledger.reclaimed(b)))
        .collect()
}

/// Merges neighbouring segments of one class and block.
pub fn runs(segments: &[Segment]) -> Vec<Run> {
    let mut out: Vec<Run> = Vec::new();
    for s in segments {
        match out.last_mut() {
            Some(r) if r.class == s.class && r.tier == s.tier && r.block == s.block => {
                r.messages += 1;
                r.tokens += s.tokens;
                if !s.reference.is_empty() {
                    if r.start_ref.is_empty() {
                        r.start_ref = s.reference.clone();
                    }
                    r.end_ref = s.reference.clone();
                }
            }
            _ => out.push(Run {
                class: s.class,
                tier: s.tier,
                block: s.block.clone(),
                start_ref: s.reference.clone(),
                end_ref: s.reference.clone(),
                messages: 1,
                tokens: s.tokens,
            }),
        }
    }
    out
}

/// The character a class is drawn with in the terminal strip.
pub fn symbol(class: Class, tier: u8) -> char {
    match class {
        Class::System => 's',
        Class::User | Class::Assistant => '-',
        Class::Tool => '=',
        Class::Block => match tier {
            0 | 1 => '1',
            2 => '2',
            _ => '3',
        },
        Class::Protected => '#',
        Class::Truncated => '!',
        Class::Reclaimed => 'r',
        Class::Hidden => ' ',
    }
}

/// The free part of the window in the terminal strip.
pub const FREE: char = '·';
/// Where the window ends in the terminal strip.
pub const WINDOW_MARK: char = '|';

/// What the strip's characters mean, one line.
pub const STRIP_LEGEND: &str = "h the host's prompt and tools · 1 2 3 summary (tier) · - text · = tool · # recent zone · ! truncated · r reclaimed · s system · · free · | window limit";

/// The host's share of the request in the terminal strip.
pub const HOST: char = 'h';

/// The terminal strip: `width` cells on the scale of the window (or of the
/// request, when it is larger): the host's share first, then the view's
/// segments, each cell showing what has the most tokens in it, then the
/// free window; the window mark is inserted where the limit falls. A cell
/// with any tokens in it is never drawn free, so even a tiny view shows.
pub fn strip(segments: &[Segment], host: usize, width: usize, limit: usize) -> String {
    let width = width.max(1);
    let total: usize = host + segments.iter().map(|s| s.tokens).sum::<usize>();
    let scale = total.max(limit).max(1) as f64;
    let per_cell = scale / width as f64;
    let mut tallies: Vec<Vec<(char, f64)>> = vec![Vec::new(); width];
    let mut at = 0usize;
    let parts = std::iter::once((HOST, host))
        .chain(segments.iter().map(|s| (symbol(s.class, s.tier), s.tokens)));
    for (c, tokens) in parts.filter(|&(_, t)| t > 0) {
        let (a, b) = (at as f64, (at + tokens) as f64);
        at += tokens;
        let first = ((a / per_cell) as usize).min(width - 1);
        let last = (((b / per_cell).ceil() as usize).max(first + 1)).min(width);
        for (i, tally) in tallies.iter_mut().enumerate().take(last).skip(first) {
            let lo = a.max(i as f64 * per_cell);
            let hi = b.min((i + 1) as f64 * per_cell);
            if hi <= lo {
                continue;
            }
            match tally.iter_mut().find(|(ch, _)| *ch == c) {
                Some((_, n)) => *n += hi - lo,
                None => tally.push((c, hi - lo)),
            }
        }
    }
    let cells: Vec<char> = tallies
        .iter()
        .map(|t| {
            t.iter()
                .fold(None::<(char, f64)>, |best, &(c, n)| match best {
                    Some((_, m)) if m >= n => best,
                    _ => Some((c, n)),
                })
                .map_or(FREE, |(c, _)| c)
        })
        .collect();
    let mark = ((limit as f64 / per_cell).round() as usize).min(width);
    let mut out = String::with_capacity(width + 3);
    out.push('[');
    out.extend(&cells[..mark]);
    out.push(WINDOW_MARK);
    out.extend(&cells[mark..]);
    out.push(']');
    out
}

#[cfg(test)]
#[path = "map_tests.rs"]
pub(crate) mod tests;
