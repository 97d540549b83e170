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

use std::collections::{HashMap, HashSet};
use std::fmt::Write;

use serde::Serialize;

use super::message::{ContentType, CoreMessage, Role};
use super::prune::{block_of_summary, is_rendered_summary};
use super::refs::{NUDGE_ID, ref_to_index};
use super::state::{Block, CompressionState};
use super::tokens;
use super::truncate::MARKER;

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
    /// Estimated tokens: of the original in the history, as sent in the view.
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
    state.message_refs.usable(id).cloned().unwrap_or_default()
}

/// The class of a message that is in the view: truncated before protected
/// before its kind.
fn visible_class(m: &CoreMessage, state: &CompressionState, zone: &HashSet<&str>) -> Class {
    if state.host.truncated.contains(&m.id)
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
    zone: &HashSet<&str>,
) -> Vec<Segment> {
    let shown: HashMap<&str, &CoreMessage> = view.iter().map(|m| (m.id.as_str(), m)).collect();
    let mut cover: HashMap<&str, &Block> = HashMap::new();
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
            Segment {
                id: m.id.clone(),
                reference: reference(state, &m.id),
                class,
                tier,
                block,
                tokens: tokens::estimate(&m.text),
            }
        })
        .collect()
}

/// The view as sent (the nudge left out), message by message: summaries as
/// their block's tier, the rest by kind, protected or truncated.
pub fn view_segments(
    view: &[CoreMessage],
    state: &CompressionState,
    zone: &HashSet<&str>,
) -> Vec<Segment> {
    view.iter()
        .filter(|m| m.id != NUDGE_ID)
        .map(|m| {
            let summary_of = block_of_summary(&m.id)
                .filter(|_| is_rendered_summary(m))
                .map(|id| (id, state.blocks.iter().find(|b| b.block_id == id)));
            let (class, tier, block) = match summary_of {
                Some((id, b)) => (Class::Block, b.map_or(1, |b| b.tier), id.to_string()),
                None => (visible_class(m, state, zone), 0, String::new()),
            };
            Segment {
                id: m.id.clone(),
                reference: reference(state, &m.id),
                class,
                tier,
                block,
                tokens: tokens::estimate(&m.text),
            }
        })
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
        Class::Hidden => ' ',
    }
}

/// The free part of the window in the terminal strip.
pub const FREE: char = '·';
/// Where the window ends in the terminal strip.
pub const WINDOW_MARK: char = '|';

/// What the strip's characters mean, one line.
pub const STRIP_LEGEND: &str = "1 2 3 summary (tier) · - text · = tool · # recent zone · ! truncated · s system · · free · | window limit";

/// The terminal strip: `width` cells on the scale of the window (or of the
/// view, when the view is larger), each showing the class with the most
/// tokens in it, then the free window; the window mark is inserted where
/// the limit falls. A cell with any view tokens in it is never drawn free,
/// so even a tiny view shows.
pub fn strip(segments: &[Segment], width: usize, limit: usize) -> String {
    let width = width.max(1);
    let total: usize = segments.iter().map(|s| s.tokens).sum();
    let scale = total.max(limit).max(1) as f64;
    let per_cell = scale / width as f64;
    let mut tallies: Vec<Vec<(char, f64)>> = vec![Vec::new(); width];
    let mut at = 0usize;
    for s in segments.iter().filter(|s| s.tokens > 0) {
        let (a, b) = (at as f64, (at + s.tokens) as f64);
        at += s.tokens;
        let c = symbol(s.class, s.tier);
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

/// One block in the tier tree, with the blocks it absorbed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TreeNode {
    /// `bN`.
    pub id: String,
    /// Its tier.
    pub tier: u8,
    /// First ref it covers.
    pub start_ref: String,
    /// Last ref it covers.
    pub end_ref: String,
    /// Its topic.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub topic: String,
    /// Whether its summary is in the view.
    pub active: bool,
    /// The blocks it absorbed, oldest first.
    pub children: Vec<TreeNode>,
}

fn start_index(b: &Block) -> u32 {
    ref_to_index(&b.start_ref).unwrap_or(u32::MAX)
}

/// Which blocks absorbed which: the roots are the blocks nothing absorbed,
/// oldest first, each with the blocks it absorbed (from `direct_block_ids`)
/// beneath it. Every block is listed exactly once, even in a state whose
/// blocks name each other.
pub fn tier_tree(blocks: &[Block]) -> Vec<TreeNode> {
    let by_id: HashMap<&str, &Block> = blocks.iter().map(|b| (b.block_id.as_str(), b)).collect();
    let absorbed: HashSet<&str> = blocks
        .iter()
        .flat_map(|b| b.direct_block_ids.iter().map(String::as_str))
        .filter(|id| by_id.contains_key(id))
        .collect();
    let mut roots: Vec<&Block> = blocks
        .iter()
        .filter(|b| !absorbed.contains(b.block_id.as_str()))
        .collect();
    roots.sort_by_key(|b| start_index(b));
    let mut seen: HashSet<&str> = HashSet::new();
    let mut out: Vec<TreeNode> = roots
        .into_iter()
        .filter_map(|b| node(b, &by_id, &mut seen))
        .collect();
    // Blocks that absorb each other (a state no noa writes) are still shown.
    for b in blocks {
        out.extend(node(b, &by_id, &mut seen));
    }
    out
}

fn node<'a>(
    b: &'a Block,
    by_id: &HashMap<&str, &'a Block>,
    seen: &mut HashSet<&'a str>,
) -> Option<TreeNode> {
    if !seen.insert(b.block_id.as_str()) {
        return None;
    }
    let mut kids: Vec<&Block> = b
        .direct_block_ids
        .iter()
        .filter_map(|id| by_id.get(id.as_str()).copied())
        .collect();
    kids.sort_by_key(|k| start_index(k));
    let children = kids
        .into_iter()
        .filter_map(|k| node(k, by_id, seen))
        .collect();
    Some(TreeNode {
        id: b.block_id.clone(),
        tier: b.tier,
        start_ref: b.start_ref.clone(),
        end_ref: b.end_ref.clone(),
        topic: b.topic.clone(),
        active: b.active,
        children,
    })
}

/// The tier tree drawn with box characters, one block a line:
/// `b4 (T2) m00002–m00065  topic`, absorbed blocks indented beneath.
/// A root whose summary is not in the view says so.
pub fn format_tree(roots: &[TreeNode]) -> String {
    let mut lines = Vec::new();
    for r in roots {
        let inactive = if r.active { "" } else { " · inactive" };
        lines.push(format!("{}{inactive}", tree_label(r)));
        tree_children(&r.children, "", &mut lines);
    }
    lines.join("\n")
}

fn tree_label(n: &TreeNode) -> String {
    let mut s = format!("{} (T{}) {}–{}", n.id, n.tier, n.start_ref, n.end_ref);
    if !n.topic.trim().is_empty() {
        s.push_str("  ");
        s.push_str(n.topic.trim());
    }
    s
}

fn tree_children(kids: &[TreeNode], prefix: &str, lines: &mut Vec<String>) {
    for (i, k) in kids.iter().enumerate() {
        let last = i + 1 == kids.len();
        let (branch, more) = if last {
            ("└── ", "    ")
        } else {
            ("├── ", "│   ")
        };
        lines.push(format!("{prefix}{branch}{}", tree_label(k)));
        tree_children(&k.children, &format!("{prefix}{more}"), lines);
    }
}

/// What the SVG map is drawn from.
#[derive(Debug, Clone, Copy)]
pub struct SvgInput<'a> {
    /// The session id, for the title.
    pub session: &'a str,
    /// The whole history, from [`history_segments`].
    pub history: &'a [Segment],
    /// The view as sent, from [`view_segments`].
    pub view: &'a [Segment],
    /// The view's measured tokens (what the window is judged on).
    pub measured: usize,
    /// The context window, in tokens.
    pub limit: usize,
    /// The session's blocks, for labels and tooltips.
    pub blocks: &'a [Block],
}

/// Canvas width, in SVG user units.
const WIDTH: f64 = 1200.0;
const MARGIN: f64 = 24.0;
const INNER: f64 = WIDTH - 2.0 * MARGIN;
const ROW_H: f64 = 40.0;
/// Room above each history row for the recent-zone bracket, below it for refs.
const ROW_GAP: f64 = 42.0;
const VIEW_H: f64 = 28.0;
/// Messages per history row before the strip wraps, and the most rows drawn.
const PER_ROW: usize = 100;
const MAX_ROWS: usize = 4;
/// Average glyph width of the 12-unit sans-serif labels, to decide what fits.
const GLYPH: f64 = 6.8;

const FONT: &str = "font-family=\"Helvetica, Arial, sans-serif\"";

/// Fill colour of a class (tiers from light to dark).
fn colour(class: Class, tier: u8) -> &'static str {
    match class {
        Class::System => "#9c755f",
        Class::User => "#4e79a7",
        Class::Assistant => "#76b7b2",
        Class::Tool => "#f28e2b",
        Class::Block => match tier {
            0 | 1 => "#c9b8e8",
            2 => "#8e6cc4",
            _ => "#553089",
        },
        Class::Protected => "#59a14f",
        Class::Truncated => "#e15759",
        Class::Hidden => "url(#hidden)",
    }
}

/// Colour of text drawn on a class's fill.
fn ink(class: Class, tier: u8) -> &'static str {
    match (class, tier) {
        (Class::Block, 0 | 1) | (Class::Hidden, _) => "#2b1d47",
        _ => "#ffffff",
    }
}

/// The legend, in drawing order: the swatch's class and tier (none for the
/// window line), and its label.
const LEGEND: [(Option<(Class, u8)>, &str); 11] = [
    (Some((Class::User, 0)), "user text"),
    (Some((Class::Assistant, 0)), "assistant text"),
    (Some((Class::Tool, 0)), "tool calls and results"),
    (Some((Class::System, 0)), "instructions"),
    (Some((Class::Block, 1)), "tier 1 block"),
    (Some((Class::Block, 2)), "tier 2 block"),
    (Some((Class::Block, 3)), "tier 3 block"),
    (Some((Class::Protected, 0)), "recent zone (protected)"),
    (Some((Class::Truncated, 0)), "truncated"),
    (Some((Class::Hidden, 0)), "not sent"),
    (None, "window limit"),
];

/// Escapes text for an SVG text node or attribute.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if (c as u32) < 0x20 && c != '\t' && c != '\n' => {}
            c => out.push(c),
        }
    }
    out
}

/// A piece of one segment on one history row, in canvas units.
#[derive(Debug, Clone, Copy)]
struct Piece {
    segment: usize,
    x0: f64,
    x1: f64,
}

/// Lays the history out on `rows` rows of equal token capacity; a segment
/// that crosses a row's end continues on the next.
fn lay_out(segments: &[Segment], rows: usize) -> Vec<Vec<Piece>> {
    let total: usize = segments.iter().map(|s| s.tokens).sum();
    let cap = (total.max(1) as f64) / rows as f64;
    let mut out: Vec<Vec<Piece>> = vec![Vec::new(); rows];
    let mut at = 0.0f64;
    for (i, s) in segments.iter().enumerate() {
        let (a, b) = (at, at + s.tokens as f64);
        at = b;
        let first = ((a / cap) as usize).min(rows - 1);
        let last = ((b / cap).ceil() as usize).clamp(first + 1, rows);
        for (r, row) in out.iter_mut().enumerate().take(last).skip(first) {
            let lo = a.max(r as f64 * cap) - r as f64 * cap;
            let hi = b.min((r + 1) as f64 * cap) - r as f64 * cap;
            if hi > lo || (s.tokens == 0 && r == first) {
                row.push(Piece {
                    segment: i,
                    x0: MARGIN + lo / cap * INNER,
                    x1: MARGIN + hi / cap * INNER,
                });
            }
        }
    }
    out
}

/// Groups a row's pieces into drawable runs of one class and block.
fn group<'a>(pieces: &'a [Piece], segments: &[Segment]) -> Vec<&'a [Piece]> {
    let mut out = Vec::new();
    let mut start = 0;
    for i in 1..=pieces.len() {
        let split = i == pieces.len() || {
            let (a, b) = (
                &segments[pieces[i - 1].segment],
                &segments[pieces[i].segment],
            );
            (a.class, a.tier, &a.block) != (b.class, b.tier, &b.block)
        };
        if split {
            if i > start {
                out.push(&pieces[start..i]);
            }
            start = i;
        }
    }
    out
}

fn span_text(first: &str, last: &str) -> String {
    match (first.is_empty(), last.is_empty() || last == first) {
        (true, _) => String::new(),
        (false, true) => first.to_string(),
        (false, false) => format!("{first}–{last}"),
    }
}

/// What a run is, for its tooltip.
fn describe(run: &[Piece], segments: &[Segment], blocks: &[Block]) -> String {
    let segs: Vec<&Segment> = {
        let mut v: Vec<usize> = run.iter().map(|p| p.segment).collect();
        v.dedup();
        v.into_iter().map(|i| &segments[i]).collect()
    };
    let first = segs
        .iter()
        .find(|s| !s.reference.is_empty())
        .map_or("", |s| s.reference.as_str());
    let last = segs
        .iter()
        .rev()
        .find(|s| !s.reference.is_empty())
        .map_or("", |s| s.reference.as_str());
    let tokens: usize = segs.iter().map(|s| s.tokens).sum();
    let s = segs[0];
    let what = match s.class {
        Class::System => "instructions".to_string(),
        Class::User => "user text".to_string(),
        Class::Assistant => "assistant".to_string(),
        Class::Tool => "tool traffic".to_string(),
        Class::Protected => "recent zone (protected)".to_string(),
        Class::Truncated => "truncated tool output".to_string(),
        Class::Hidden => "not sent".to_string(),
        Class::Block => {
            let topic = blocks
                .iter()
                .find(|b| b.block_id == s.block)
                .map(|b| b.topic.trim())
                .filter(|t| !t.is_empty())
                .map(|t| format!(" “{t}”"))
                .unwrap_or_default();
            format!("{} (T{}){topic}", s.block, s.tier)
        }
    };
    let span = span_text(first, last);
    let span = if span.is_empty() {
        String::new()
    } else {
        format!(" · {span}")
    };
    format!(
        "{what}{span} · {} message{} · {} tokens",
        segs.len(),
        if segs.len() == 1 { "" } else { "s" },
        tokens::format(tokens)
    )
}

/// The label drawn on a covered span, as much of it as fits: the block, its
/// tier, and what it folded (the originals' tokens, as wide as the span) into
/// how many tokens of summary.
fn block_label(s: &Segment, segments: &[Segment], blocks: &[Block], width: f64) -> Option<String> {
    let mut options = Vec::new();
    if let Some(b) = blocks.iter().find(|b| b.block_id == s.block) {
        let covered = segments.iter().filter(|t| t.block == s.block);
        let (messages, before) = covered.fold((0, 0), |(n, t), x| (n + 1, t + x.tokens));
        let after = tokens::estimate(&super::prune::render_summary(b).text);
        options.push(format!(
            "{} · T{} · {messages} msgs · {} → {}",
            s.block,
            s.tier,
            tokens::format(before),
            tokens::format(after)
        ));
    }
    options.push(format!("{} · T{}", s.block, s.tier));
    options.push(s.block.clone());
    options
        .into_iter()
        .find(|o| o.chars().count() as f64 * GLYPH + 10.0 <= width)
}

/// Renders the SVG map: a title, the whole history (wrapped onto up to four
/// rows) with blocks labelled on the spans they cover and the recent zone
/// bracketed, the view as sent measured against the window with a line where
/// the window ends, and a legend. Plain SVG 1.1: rects, lines, paths and text,
/// a generic font, no scripts, images or external references.
pub fn svg(input: &SvgInput) -> String {
    let history = input.history;
    let rows = history.len().div_ceil(PER_ROW).clamp(1, MAX_ROWS);
    let laid = lay_out(history, rows);
    let history_tokens: usize = history.iter().map(|s| s.tokens).sum();
    let view_tokens: usize = input.view.iter().map(|s| s.tokens).sum();
    let limit = input.limit.max(1);
    let active = input.blocks.iter().filter(|b| b.active).count();

    let mut body = String::new();
    let mut y = MARGIN + 14.0;
    // Title and subtitle.
    let _ = writeln!(
        body,
        r##"<text x="{MARGIN}" y="{y:.1}" font-size="20" font-weight="bold" fill="#222">noa context map · {}</text>"##,
        escape(input.session)
    );
    y += 24.0;
    let _ = writeln!(
        body,
        r##"<text x="{MARGIN}" y="{y:.1}" font-size="13" fill="#555">{} tokens in view · {}% of the {} window · history {} tokens in {} messages · {} block{}, {active} active</text>"##,
        tokens::format(input.measured),
        input.measured * 100 / limit,
        tokens::format(input.limit),
        tokens::format(history_tokens),
        history.len(),
        input.blocks.len(),
        if input.blocks.len() == 1 { "" } else { "s" },
    );

    // The history.
    y += 34.0;
    section(
        &mut body,
        y,
        "History",
        "every message, oldest to newest, as wide as its tokens",
    );
    y += 8.0;
    for (r, pieces) in laid.iter().enumerate() {
        let top = y + 22.0 + r as f64 * (ROW_H + ROW_GAP);
        draw_history_row(&mut body, pieces, history, input.blocks, top);
    }
    y += 22.0 + rows as f64 * (ROW_H + ROW_GAP) - ROW_GAP + 24.0;

    // The view against the window.
    y += 16.0;
    section(
        &mut body,
        y,
        "View",
        &format!(
            "what is sent, against the {} window",
            tokens::format(input.limit)
        ),
    );
    let top = y + 26.0;
    draw_view_row(&mut body, input, view_tokens, top);
    y = top + VIEW_H + 40.0;

    // The legend.
    let mut x = MARGIN;
    for (swatch, label) in LEGEND {
        let w = 14.0 + 6.0 + label.chars().count() as f64 * GLYPH + 18.0;
        if x + w > WIDTH - MARGIN {
            x = MARGIN;
            y += 22.0;
        }
        if let Some((class, tier)) = swatch {
            let _ = writeln!(
                body,
                r##"<rect x="{x:.1}" y="{:.1}" width="14" height="14" rx="2" fill="{}" stroke="#00000022"/>"##,
                y - 11.0,
                colour(class, tier)
            );
        } else {
            let _ = writeln!(
                body,
                r##"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#222" stroke-width="2" stroke-dasharray="4 3"/>"##,
                x + 7.0,
                y - 11.0,
                x + 7.0,
                y + 3.0
            );
        }
        let _ = writeln!(
            body,
            r##"<text x="{:.1}" y="{y:.1}" font-size="12" fill="#333">{label}</text>"##,
            x + 20.0
        );
        x += w;
    }
    let height = y + MARGIN;

    let mut out = String::new();
    let _ = writeln!(out, r##"<?xml version="1.0" encoding="UTF-8"?>"##);
    let _ = writeln!(
        out,
        r##"<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="{WIDTH}" height="{height:.0}" viewBox="0 0 {WIDTH} {height:.0}" {FONT}>"##
    );
    let _ = writeln!(
        out,
        r##"<title>noa context map · {}</title>"##,
        escape(input.session)
    );
    let _ = writeln!(
        out,
        r##"<defs><pattern id="hidden" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" fill="#e6e6e6"/><line x1="0" y1="0" x2="0" y2="6" stroke="#bdbdbd" stroke-width="3"/></pattern></defs>"##
    );
    let _ = writeln!(
        out,
        r##"<rect x="0" y="0" width="{WIDTH}" height="{height:.0}" fill="#ffffff"/>"##
    );
    out.push_str(&body);
    out.push_str("</svg>\n");
    out
}

fn section(body: &mut String, y: f64, name: &str, note: &str) {
    let _ = writeln!(
        body,
        r##"<text x="{MARGIN}" y="{y:.1}" font-size="14" font-weight="bold" fill="#222">{name}<tspan dx="10" font-weight="normal" fill="#777" font-size="12">{}</tspan></text>"##,
        escape(note)
    );
}

fn draw_history_row(
    body: &mut String,
    pieces: &[Piece],
    segments: &[Segment],
    blocks: &[Block],
    top: f64,
) {
    let _ = writeln!(
        body,
        r##"<rect x="{MARGIN}" y="{top:.1}" width="{INNER}" height="{ROW_H}" fill="#f4f4f4"/>"##
    );
    let runs = group(pieces, segments);
    for run in &runs {
        let s = &segments[run[0].segment];
        let (x0, x1) = (run[0].x0, run[run.len() - 1].x1);
        let _ = writeln!(
            body,
            r##"<rect x="{x0:.2}" y="{top:.1}" width="{:.2}" height="{ROW_H}" fill="{}"><title>{}</title></rect>"##,
            (x1 - x0).max(0.0),
            colour(s.class, s.tier),
            escape(&describe(run, segments, blocks))
        );
        // Message by message: a hairline between messages wide enough to see.
        for pair in run.windows(2) {
            if pair[0].x1 - pair[0].x0 >= 3.0 || pair[1].x1 - pair[1].x0 >= 3.0 {
                let _ = writeln!(
                    body,
                    r##"<line x1="{x:.2}" y1="{top:.1}" x2="{x:.2}" y2="{:.1}" stroke="#ffffff" stroke-opacity="0.45" stroke-width="0.8"/>"##,
                    top + ROW_H,
                    x = pair[0].x1
                );
            }
        }
    }
    // Between runs, a clean white edge, so neighbouring blocks stay apart.
    for pair in runs.windows(2) {
        let x = pair[1][0].x0;
        let _ = writeln!(
            body,
            r##"<line x1="{x:.2}" y1="{top:.1}" x2="{x:.2}" y2="{:.1}" stroke="#ffffff" stroke-width="1.5"/>"##,
            top + ROW_H
        );
    }
    // Labels on covered spans.
    for run in &runs {
        let s = &segments[run[0].segment];
        if s.class != Class::Block {
            continue;
        }
        let (x0, x1) = (run[0].x0, run[run.len() - 1].x1);
        if let Some(label) = block_label(s, segments, blocks, x1 - x0) {
            let _ = writeln!(
                body,
                r##"<text x="{:.2}" y="{:.1}" font-size="12" font-weight="bold" text-anchor="middle" fill="{}">{}</text>"##,
                (x0 + x1) / 2.0,
                top + ROW_H / 2.0 + 4.0,
                ink(s.class, s.tier),
                escape(&label)
            );
        }
    }
    // The recent zone, bracketed above the row.
    let zone: Vec<&Piece> = pieces
        .iter()
        .filter(|p| segments[p.segment].class == Class::Protected)
        .collect();
    if let (Some(first), Some(last)) = (zone.first(), zone.last()) {
        let (x0, x1) = (first.x0, last.x1.max(first.x0 + 2.0));
        let _ = writeln!(
            body,
            r##"<path d="M {x0:.2} {:.1} V {:.1} H {x1:.2} V {:.1}" fill="none" stroke="#3d7a35" stroke-width="1.5"/>"##,
            top - 3.0,
            top - 8.0,
            top - 3.0
        );
        let label = "recent zone";
        let w = label.len() as f64 * GLYPH;
        let (x, anchor) = if x1 - x0 >= w {
            ((x0 + x1) / 2.0, "middle")
        } else {
            (x1, "end")
        };
        let _ = writeln!(
            body,
            r##"<text x="{x:.2}" y="{:.1}" font-size="11" text-anchor="{anchor}" fill="#3d7a35">{label}</text>"##,
            top - 11.0
        );
    }
    // The refs where the row starts and ends.
    let first = pieces
        .iter()
        .map(|p| &segments[p.segment].reference)
        .find(|r| !r.is_empty());
    let last = pieces
        .iter()
        .rev()
        .map(|p| &segments[p.segment].reference)
        .find(|r| !r.is_empty());
    if let Some(r) = first {
        let _ = writeln!(
            body,
            r##"<text x="{MARGIN}" y="{:.1}" font-size="10" fill="#888">{}</text>"##,
            top + ROW_H + 13.0,
            escape(r)
        );
    }
    if let Some(r) = last.filter(|l| Some(*l) != first) {
        let _ = writeln!(
            body,
            r##"<text x="{:.1}" y="{:.1}" font-size="10" text-anchor="end" fill="#888">{}</text>"##,
            WIDTH - MARGIN,
            top + ROW_H + 13.0,
            escape(r)
        );
    }
}

fn draw_view_row(body: &mut String, input: &SvgInput, view_tokens: usize, top: f64) {
    let limit = input.limit.max(1);
    let scale = view_tokens.max(input.measured).max(limit) as f64;
    let x_of = |t: f64| MARGIN + t / scale * INNER;
    // The window, empty.
    let _ = writeln!(
        body,
        r##"<rect x="{MARGIN}" y="{top:.1}" width="{:.2}" height="{VIEW_H}" fill="#f4f4f4" stroke="#d0d0d0"/>"##,
        x_of(limit as f64) - MARGIN
    );
    let mut at = 0usize;
    for r in runs(input.view) {
        let (x0, x1) = (x_of(at as f64), x_of((at + r.tokens) as f64));
        at += r.tokens;
        let what = match r.class {
            Class::Block => format!("summary of {} (T{})", r.block, r.tier),
            Class::Protected => "recent zone (protected)".to_string(),
            Class::Truncated => "truncated tool output".to_string(),
            Class::Tool => "tool traffic".to_string(),
            Class::User => "user text".to_string(),
            Class::Assistant => "assistant".to_string(),
            Class::System => "instructions".to_string(),
            Class::Hidden => "not sent".to_string(),
        };
        let _ = writeln!(
            body,
            r##"<rect x="{x0:.2}" y="{top:.1}" width="{:.2}" height="{VIEW_H}" fill="{}"><title>{} · {} message{} · {} tokens</title></rect>"##,
            (x1 - x0).max(0.0),
            colour(r.class, r.tier),
            escape(&what),
            r.messages,
            if r.messages == 1 { "" } else { "s" },
            tokens::format(r.tokens)
        );
    }
    // How much is used: beside the view's end when there is room before the
    // window line (or the canvas edge), else above the end of the bar.
    let end = x_of(view_tokens as f64);
    let used = format!(
        "{} · {}%",
        tokens::format(input.measured),
        input.measured * 100 / limit
    );
    let wx = x_of(limit as f64);
    let room = if end < wx { wx - 6.0 } else { WIDTH - MARGIN };
    let (x, y, anchor) = if end + 8.0 + used.chars().count() as f64 * GLYPH <= room {
        (end + 8.0, top + VIEW_H / 2.0 + 4.0, "start")
    } else {
        (end.min(WIDTH - MARGIN), top - 6.0, "end")
    };
    let _ = writeln!(
        body,
        r##"<text x="{x:.2}" y="{y:.1}" font-size="12" font-weight="bold" text-anchor="{anchor}" fill="#333">{}</text>"##,
        escape(&used)
    );
    // The window limit.
    let _ = writeln!(
        body,
        r##"<line class="window-limit" x1="{wx:.2}" y1="{:.1}" x2="{wx:.2}" y2="{:.1}" stroke="#222" stroke-width="2" stroke-dasharray="4 3"/>"##,
        top - 8.0,
        top + VIEW_H + 8.0
    );
    let (lx, anchor) = if wx - MARGIN < 90.0 {
        (wx + 4.0, "start")
    } else {
        (wx - 4.0, "end")
    };
    let _ = writeln!(
        body,
        r##"<text x="{lx:.2}" y="{:.1}" font-size="11" text-anchor="{anchor}" fill="#222">window {}</text>"##,
        top + VIEW_H + 20.0,
        tokens::format(input.limit)
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::test_support::{block, call, result, say, user};

    fn seg(class: Class, tokens: usize) -> Segment {
        Segment {
            id: String::new(),
            reference: String::new(),
            class,
            tier: 0,
            block: String::new(),
            tokens,
        }
    }

    fn with_refs(history: &[CoreMessage]) -> CompressionState {
        let mut st = CompressionState::new("s");
        for (i, m) in history.iter().enumerate() {
            let r = format!("m{:05}", i + 1);
            st.message_refs.by_raw.insert(m.id.clone(), r.clone());
            st.message_refs.by_ref.insert(r, m.id.clone());
        }
        st
    }

    /// A small history: task, two covered exchanges, a visible tail.
    fn fixture() -> (Vec<CoreMessage>, Vec<CoreMessage>, CompressionState) {
        let history = vec![
            user("u1"),
            say("a1"),
            call("c1", "t1", "Read"),
            result("r1", "t1", "Read"),
            say("a2"),
            user("u2"),
            say("a3"),
        ];
        let mut st = with_refs(&history);
        let mut b1 = block("b1", 1, &["a1", "c1", "r1"]);
        b1.start_ref = "m00002".into();
        b1.end_ref = "m00004".into();
        st.blocks.push(b1);
        let view: Vec<CoreMessage> = history
            .iter()
            .filter(|m| !["a1", "c1", "r1"].contains(&m.id.as_str()))
            .cloned()
            .collect();
        (history, view, st)
    }

    #[test]
    fn history_marks_covered_visible_and_protected() {
        let (history, view, st) = fixture();
        let zone: HashSet<&str> = ["u2", "a3"].into();
        let segs = history_segments(&history, &view, &st, &zone);
        let classes: Vec<Class> = segs.iter().map(|s| s.class).collect();
        assert_eq!(
            classes,
            [
                Class::User,
                Class::Block,
                Class::Block,
                Class::Block,
                Class::Assistant,
                Class::Protected,
                Class::Protected
            ]
        );
        assert!(segs[1..4].iter().all(|s| s.block == "b1" && s.tier == 1));
        assert_eq!(segs[0].reference, "m00001");
    }

    #[test]
    fn covered_runs_carry_their_block_and_refs() {
        let (history, view, st) = fixture();
        let segs = history_segments(&history, &view, &st, &HashSet::new());
        let rs = runs(&segs);
        let b = rs.iter().find(|r| r.class == Class::Block).unwrap();
        assert_eq!(
            (b.block.as_str(), b.tier, b.messages),
            ("b1", 1, 3),
            "{rs:?}"
        );
        assert_eq!(
            (b.start_ref.as_str(), b.end_ref.as_str()),
            ("m00002", "m00004")
        );
    }

    #[test]
    fn a_message_neither_shown_nor_covered_is_hidden() {
        let (history, mut view, st) = fixture();
        view.retain(|m| m.id != "a2");
        let segs = history_segments(&history, &view, &st, &HashSet::new());
        assert_eq!(segs[4].class, Class::Hidden);
    }

    #[test]
    fn view_summaries_take_their_block_tier_and_the_nudge_is_left_out() {
        let mut st = CompressionState::new("s");
        let mut b = block("b4", 2, &["x"]);
        b.topic = "done".into();
        st.blocks.push(b.clone());
        let view = vec![
            user("u"),
            crate::engine::prune::render_summary(&b),
            CoreMessage::text(NUDGE_ID, Role::User, "compress"),
        ];
        let segs = view_segments(&view, &st, &HashSet::new());
        assert_eq!(segs.len(), 2);
        assert_eq!(
            (segs[1].class, segs[1].tier, segs[1].block.as_str()),
            (Class::Block, 2, "b4")
        );
    }

    #[test]
    fn truncated_results_are_marked() {
        let mut st = CompressionState::new("s");
        st.host.truncated.insert("r".into());
        let view = vec![result("r", "t", "Bash")];
        let segs = view_segments(&view, &st, &["r"].into());
        assert_eq!(segs[0].class, Class::Truncated);
    }

    #[test]
    fn strip_is_proportional_on_the_window_scale() {
        let segs = [
            seg(Class::Tool, 300),
            seg(Class::User, 100),
            Segment {
                tier: 2,
                ..seg(Class::Block, 100)
            },
        ];
        // 500 of a 1000 window on 10 cells: 3 tool, 1 text, 1 summary, 5 free.
        assert_eq!(strip(&segs, 10, 1000), "[===-2·····|]");
        // Over the window: the mark falls inside.
        assert_eq!(strip(&segs, 10, 250), "[=====|=--22]");
    }

    #[test]
    fn a_tiny_view_still_shows() {
        let s = strip(&[seg(Class::Protected, 10)], 60, 200_000);
        assert!(s.starts_with("[#·"), "{s}");
        assert_eq!(s.chars().count(), 63);
        assert!(s.ends_with("|]"));
    }

    #[test]
    fn tier_tree_nests_absorbed_blocks() {
        let mut blocks = Vec::new();
        for (i, (s, e)) in [(2, 25), (26, 46), (47, 65)].into_iter().enumerate() {
            let mut b = block(&format!("b{}", i + 1), 1, &[]);
            b.start_ref = format!("m{s:05}");
            b.end_ref = format!("m{e:05}");
            b.active = false;
            blocks.push(b);
        }
        let mut b4 = block("b4", 2, &[]);
        b4.direct_block_ids = vec!["b1".into(), "b2".into(), "b3".into()];
        (b4.start_ref, b4.end_ref) = ("m00002".into(), "m00065".into());
        let mut b5 = block("b5", 1, &[]);
        (b5.start_ref, b5.end_ref) = ("m00070".into(), "m00090".into());
        // Creation order differs from span order: the tree is by span.
        blocks.insert(0, b5);
        blocks.push(b4);
        let tree = tier_tree(&blocks);
        assert_eq!(
            format_tree(&tree),
            "b4 (T2) m00002–m00065\n├── b1 (T1) m00002–m00025\n├── b2 (T1) m00026–m00046\n└── b3 (T1) m00047–m00065\nb5 (T1) m00070–m00090"
        );
        let json = serde_json::to_value(&tree).unwrap();
        assert_eq!(json[0]["children"][2]["id"], "b3");
    }

    #[test]
    fn a_cycle_in_the_state_does_not_loop() {
        let mut a = block("b1", 1, &[]);
        a.direct_block_ids = vec!["b2".into()];
        let mut b = block("b2", 2, &[]);
        b.direct_block_ids = vec!["b1".into()];
        let tree = tier_tree(&[a, b]);
        assert_eq!(format_tree(&tree), "b1 (T1) –\n└── b2 (T2) –");
    }

    /// A tag-stack check: every element opened is closed in order, and
    /// attribute values are quoted.
    fn well_formed(svg: &str) -> Result<(), String> {
        let body = svg
            .strip_prefix(r##"<?xml version="1.0" encoding="UTF-8"?>"##)
            .ok_or("no XML declaration")?;
        let mut stack: Vec<String> = Vec::new();
        let mut rest = body;
        let mut roots = 0;
        while let Some(open) = rest.find('<') {
            let text = &rest[..open];
            if text.contains('>') || (text.contains('&') && !entities_ok(text)) {
                return Err(format!("bad text {text:?}"));
            }
            if stack.is_empty() && !text.trim().is_empty() {
                return Err(format!("text outside the root: {text:?}"));
            }
            let close = rest[open..].find('>').ok_or("unclosed tag")? + open;
            let tag = &rest[open + 1..close];
            rest = &rest[close + 1..];
            if let Some(name) = tag.strip_prefix('/') {
                let top = stack.pop().ok_or(format!("stray </{name}>"))?;
                if top != name {
                    return Err(format!("</{name}> closes <{top}>"));
                }
                continue;
            }
            let self_closing = tag.ends_with('/');
            let tag = tag.trim_end_matches('/');
            let name = tag.split_whitespace().next().ok_or("empty tag")?;
            if tag.matches('"').count() % 2 != 0 {
                return Err(format!("unbalanced quotes in <{tag}>"));
            }
            if stack.is_empty() {
                roots += 1;
            }
            if !self_closing {
                stack.push(name.to_string());
            }
        }
        if !stack.is_empty() || roots != 1 {
            return Err(format!("open at end: {stack:?}, {roots} roots"));
        }
        Ok(())
    }

    fn entities_ok(text: &str) -> bool {
        text.split('&').skip(1).all(|s| {
            ["amp;", "lt;", "gt;", "quot;", "apos;"]
                .iter()
                .any(|e| s.starts_with(e))
        })
    }

    fn sample_svg() -> String {
        let (history, view, mut st) = fixture();
        st.blocks[0].topic = "reading <config> & \"setup\"".into();
        let zone: HashSet<&str> = ["u2", "a3"].into();
        let h = history_segments(&history, &view, &st, &zone);
        let v = view_segments(&view, &st, &zone);
        svg(&SvgInput {
            session: "s<1>",
            history: &h,
            view: &v,
            measured: 40,
            limit: 100,
            blocks: &st.blocks,
        })
    }

    #[test]
    fn svg_is_well_formed_with_legend_and_window_line() {
        let s = sample_svg();
        well_formed(&s).unwrap_or_else(|e| panic!("{e}\n{s}"));
        assert!(s.contains("class=\"window-limit\""), "{s}");
        for (_, label) in LEGEND {
            assert!(
                s.contains(&format!(">{label}</text>")),
                "legend lacks {label}"
            );
        }
        assert!(s.contains("noa context map · s&lt;1&gt;"));
        assert!(s.contains("reading &lt;config&gt; &amp; &quot;setup&quot;"));
        assert!(!s.contains("<script") && !s.contains("href"));
    }

    #[test]
    fn the_checker_catches_broken_markup() {
        assert!(well_formed("<?xml version=\"1.0\" encoding=\"UTF-8\"?><svg><g></svg>").is_err());
        assert!(well_formed("<?xml version=\"1.0\" encoding=\"UTF-8\"?><svg>a & b</svg>").is_err());
        assert!(well_formed("<?xml version=\"1.0\" encoding=\"UTF-8\"?><svg><g/></svg>").is_ok());
    }

    #[test]
    fn covered_spans_are_labelled_with_their_block() {
        let s = sample_svg();
        assert!(s.contains(">b1 · T1 · 3 msgs"), "{s}");
    }

    #[test]
    fn segments_are_as_wide_as_their_tokens() {
        let segs = [seg(Class::User, 100), seg(Class::Tool, 300)];
        let rows = lay_out(&segs, 1);
        let w: Vec<f64> = rows[0].iter().map(|p| p.x1 - p.x0).collect();
        assert!((w[1] / w[0] - 3.0).abs() < 1e-9, "{w:?}");
        assert!((w[0] + w[1] - INNER).abs() < 1e-9);
        // Wrapped on two rows, the tool output crosses into the second.
        let rows = lay_out(&segs, 2);
        assert_eq!(rows[0].len(), 2);
        assert_eq!(rows[1].len(), 1);
        assert!((rows[1][0].x1 - (MARGIN + INNER)).abs() < 1e-9);
    }
}
