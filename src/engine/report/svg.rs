//! The context map as an SVG picture, for `noa inspect --svg`: the whole
//! history message by message, each as wide as its tokens and coloured by
//! what became of it, with the view measured against the window beneath.

use crate::engine::model::identity::IdMap;
use std::collections::BTreeMap;
use std::fmt::Write;

use crate::engine::compress::panel::Reclaimed;
use crate::engine::model::state::Block;
use crate::engine::model::state::HostCompaction;
use crate::engine::model::tokens;
use crate::engine::turn::Figures;

use super::bill::Bill;
use super::map::{Class, Run, Segment, runs};

/// What the SVG map is drawn from.
#[derive(Debug, Clone, Copy)]
pub struct SvgInput<'a> {
    /// The session id, for the title.
    pub session: &'a str,
    /// The whole history, from [`history_segments`](super::map::history_segments).
    pub history: &'a [Segment],
    /// The view as sent, from [`view_segments`](super::map::view_segments).
    pub view: &'a [Segment],
    /// The turn's figures: the bar is drawn to the request and labelled
    /// with it; where the request is more than the view's messages come
    /// to, the rest is the host's own prompt and tools, drawn first.
    pub figures: &'a Figures,
    /// The host's own compactions, named under the history.
    pub compactions: &'a [HostCompaction],
    /// The session's blocks, for labels and tooltips.
    pub blocks: &'a [Block],
    /// What each block reclaimed, by block id, from
    /// [`reclaimed_by_block`](super::map::reclaimed_by_block): the figure
    /// written on its span.
    pub reclaimed: &'a BTreeMap<String, Reclaimed>,
    /// What the transcript records of the bill, named under the history.
    pub bill: Option<&'a Bill>,
}

/// The fill of the host's own share of the request in the view's bar.
const HOST_FILL: &str = "#9aa5b1";

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
        Class::Reclaimed => "#edc948",
        Class::Hidden => "url(#hidden)",
    }
}

/// Colour of text drawn on a class's fill.
fn ink(class: Class, tier: u8) -> &'static str {
    match (class, tier) {
        (Class::Block, 0 | 1) | (Class::Hidden | Class::Reclaimed, _) => "#2b1d47",
        _ => "#ffffff",
    }
}

/// The legend, in drawing order: the swatch's class and tier (none for the
/// window line), and its label.
const LEGEND: [(Swatch, &str); 13] = [
    (Swatch::Of(Class::User, 0), "user text"),
    (Swatch::Of(Class::Assistant, 0), "assistant text"),
    (Swatch::Of(Class::Tool, 0), "tool calls and results"),
    (Swatch::Of(Class::System, 0), "instructions"),
    (Swatch::Of(Class::Block, 1), "tier 1 block"),
    (Swatch::Of(Class::Block, 2), "tier 2 block"),
    (Swatch::Of(Class::Block, 3), "tier 3 block"),
    (Swatch::Of(Class::Protected, 0), "recent zone (protected)"),
    (Swatch::Of(Class::Truncated, 0), "truncated"),
    (
        Swatch::Of(Class::Reclaimed, 0),
        "reclaimed (stale read, repeat)",
    ),
    (Swatch::Of(Class::Hidden, 0), "not sent"),
    (Swatch::Host, "the host's prompt and tools"),
    (Swatch::Window, "window limit"),
];

/// What a legend entry shows.
#[derive(Clone, Copy)]
enum Swatch {
    /// The colour of a kind of message.
    Of(Class, u8),
    /// The colour of the host's share of the request.
    Host,
    /// The window's line.
    Window,
}

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

/// What a run is, for its tooltip; `blocks` by id.
fn describe(run: &[Piece], segments: &[Segment], blocks: &IdMap<'_, &Block>) -> String {
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
        Class::Reclaimed => "reclaimed tool output".to_string(),
        Class::Hidden => "not sent".to_string(),
        Class::Block => {
            let topic = blocks
                .get(s.block.as_str())
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
/// tier, how many messages the span holds, and what the block reclaimed (the
/// same figure as the panel and `noa inspect`), given how many `messages`
/// the block covers.
fn block_label(
    s: &Segment,
    messages: usize,
    reclaimed: &BTreeMap<String, Reclaimed>,
    width: f64,
) -> Option<String> {
    let mut options = Vec::new();
    if let Some(r) = reclaimed.get(&s.block) {
        let figure = tokens::format(r.tokens);
        options.push(format!(
            "{} · T{} · {messages} msgs · {figure} reclaimed",
            s.block, s.tier
        ));
        options.push(format!("{} · T{} · {figure} reclaimed", s.block, s.tier));
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
    let mut body = String::new();
    let y = draw_title(&mut body, input, MARGIN + 14.0);
    let y = draw_history(&mut body, input, y);
    let y = draw_view(&mut body, input, y);
    let y = draw_legend(&mut body, y);
    document(input.session, y + MARGIN, &body)
}

/// Draws the title and the subtitle beneath it, the title's baseline at
/// `y`; gives the subtitle's.
fn draw_title(body: &mut String, input: &SvgInput, mut y: f64) -> f64 {
    let history = input.history;
    let history_tokens: usize = history.iter().map(|s| s.tokens).sum();
    let active = input.blocks.iter().filter(|b| b.active).count();
    let _ = writeln!(
        body,
        r##"<text x="{MARGIN}" y="{y:.1}" font-size="20" font-weight="bold" fill="#222">noa context map · {}</text>"##,
        escape(input.session)
    );
    y += 24.0;
    let _ = writeln!(
        body,
        r##"<text x="{MARGIN}" y="{y:.1}" font-size="13" fill="#555">request {} · {}% of the {} window · history {} tokens in {} messages · {} block{}, {active} active</text>"##,
        tokens::format(input.figures.request),
        input.figures.window_percent(),
        tokens::format(input.figures.window),
        tokens::format(history_tokens),
        history.len(),
        input.blocks.len(),
        if input.blocks.len() == 1 { "" } else { "s" },
    );
    y
}

/// Draws the history section below the line at `y`: its heading, its rows,
/// and the host's compactions, which are not drawn, named beneath; gives
/// the last line's `y`.
fn draw_history(body: &mut String, input: &SvgInput, mut y: f64) -> f64 {
    let history = input.history;
    let rows = history.len().div_ceil(PER_ROW).clamp(1, MAX_ROWS);
    let laid = lay_out(history, rows);
    y += 34.0;
    section(
        body,
        y,
        "History",
        "every message, oldest to newest, as wide as its tokens",
    );
    y += 8.0;
    for (r, pieces) in laid.iter().enumerate() {
        let top = y + 22.0 + r as f64 * (ROW_H + ROW_GAP);
        draw_history_row(body, pieces, history, input, top);
    }
    y += 22.0 + rows as f64 * (ROW_H + ROW_GAP) - ROW_GAP + 24.0;
    for c in input.compactions {
        let _ = writeln!(
            body,
            r##"<text class="host-compaction" x="{MARGIN}" y="{y:.1}" font-size="12" fill="#555">Not drawn: {}.</text>"##,
            escape(&c.describe())
        );
        y += 18.0;
    }
    if let Some(bill) = input.bill {
        let _ = writeln!(
            body,
            r##"<text class="bill" x="{MARGIN}" y="{y:.1}" font-size="12" fill="#555">Bill: {}.</text>"##,
            escape(&bill.totals.describe())
        );
        y += 18.0;
    }
    y
}

/// Draws the view section below the line at `y`: its heading and the view
/// against the window; gives the `y` the legend starts at.
fn draw_view(body: &mut String, input: &SvgInput, mut y: f64) -> f64 {
    let view_tokens: usize = input.view.iter().map(|s| s.tokens).sum();
    y += 16.0;
    section(
        body,
        y,
        "View",
        &format!(
            "what is sent, against the {} window",
            tokens::format(input.figures.window)
        ),
    );
    let top = y + 26.0;
    draw_view_row(body, input, view_tokens, top);
    top + VIEW_H + 40.0
}

/// Draws the legend, its first line at `y`, wrapping where the canvas
/// ends; gives its last line's `y`.
fn draw_legend(body: &mut String, mut y: f64) -> f64 {
    let mut x = MARGIN;
    for (swatch, label) in LEGEND {
        let w = 14.0 + 6.0 + label.chars().count() as f64 * GLYPH + 18.0;
        if x + w > WIDTH - MARGIN {
            x = MARGIN;
            y += 22.0;
        }
        let fill = match swatch {
            Swatch::Of(class, tier) => Some(colour(class, tier)),
            Swatch::Host => Some(HOST_FILL),
            Swatch::Window => None,
        };
        if let Some(fill) = fill {
            let _ = writeln!(
                body,
                r##"<rect x="{x:.1}" y="{:.1}" width="14" height="14" rx="2" fill="{fill}" stroke="#00000022"/>"##,
                y - 11.0,
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
    y
}

/// The SVG document around the drawn `body`: the header, the title, the
/// hatch pattern of what was not sent, and a white canvas `height` tall.
fn document(session: &str, height: f64, body: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(out, r##"<?xml version="1.0" encoding="UTF-8"?>"##);
    let _ = writeln!(
        out,
        r##"<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="{WIDTH}" height="{height:.0}" viewBox="0 0 {WIDTH} {height:.0}" {FONT}>"##
    );
    let _ = writeln!(
        out,
        r##"<title>noa context map · {}</title>"##,
        escape(session)
    );
    let _ = writeln!(
        out,
        r##"<defs><pattern id="hidden" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" fill="#e6e6e6"/><line x1="0" y1="0" x2="0" y2="6" stroke="#bdbdbd" stroke-width="3"/></pattern></defs>"##
    );
    let _ = writeln!(
        out,
        r##"<rect x="0" y="0" width="{WIDTH}" height="{height:.0}" fill="#ffffff"/>"##
    );
    out.push_str(body);
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

/// One history row being drawn: its pieces, the segments they are cut
/// from, and the `y` of its top.
struct Row<'a> {
    pieces: &'a [Piece],
    segments: &'a [Segment],
    top: f64,
}

/// Draws one history row at `top`: its background, its runs, the labels
/// on covered spans, the recent zone's bracket and the refs at its ends.
fn draw_history_row(
    body: &mut String,
    pieces: &[Piece],
    segments: &[Segment],
    input: &SvgInput,
    top: f64,
) {
    let row = Row {
        pieces,
        segments,
        top,
    };
    let _ = writeln!(
        body,
        r##"<rect x="{MARGIN}" y="{top:.1}" width="{INNER}" height="{ROW_H}" fill="#f4f4f4"/>"##
    );
    let runs = group(pieces, segments);
    // Looked up for every run, so indexed once: blocks by id, and how many
    // messages each covers.
    let mut blocks: IdMap<'_, &Block> = IdMap::default();
    for b in input.blocks {
        blocks.entry(b.block_id.as_str()).or_insert(b);
    }
    let mut covers: IdMap<'_, usize> = IdMap::default();
    for s in segments {
        *covers.entry(s.block.as_str()).or_default() += 1;
    }
    draw_runs(body, &row, &runs, &blocks);
    draw_block_labels(body, &row, &runs, &covers, input.reclaimed);
    draw_recent_zone(body, &row);
    draw_row_refs(body, &row);
}

/// Draws a row's runs, each with its tooltip and a hairline between its
/// messages, and a white edge between runs; `blocks` by id.
fn draw_runs(body: &mut String, row: &Row, runs: &[&[Piece]], blocks: &IdMap<'_, &Block>) {
    let (segments, top) = (row.segments, row.top);
    for run in runs {
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
}

/// Draws the labels on a row's covered spans, as much of each as fits;
/// `covers` is how many messages each block covers.
fn draw_block_labels(
    body: &mut String,
    row: &Row,
    runs: &[&[Piece]],
    covers: &IdMap<'_, usize>,
    reclaimed: &BTreeMap<String, Reclaimed>,
) {
    for run in runs {
        let s = &row.segments[run[0].segment];
        if s.class != Class::Block {
            continue;
        }
        let (x0, x1) = (run[0].x0, run[run.len() - 1].x1);
        let messages = covers[s.block.as_str()];
        if let Some(label) = block_label(s, messages, reclaimed, x1 - x0) {
            let _ = writeln!(
                body,
                r##"<text x="{:.2}" y="{:.1}" font-size="12" font-weight="bold" text-anchor="middle" fill="{}">{}</text>"##,
                (x0 + x1) / 2.0,
                row.top + ROW_H / 2.0 + 4.0,
                ink(s.class, s.tier),
                escape(&label)
            );
        }
    }
}

/// Draws the recent zone's bracket above the row, when the row holds any
/// of it.
fn draw_recent_zone(body: &mut String, row: &Row) {
    let top = row.top;
    let zone: Vec<&Piece> = row
        .pieces
        .iter()
        .filter(|p| row.segments[p.segment].class == Class::Protected)
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
}

/// Draws the refs where the row starts and ends, beneath it.
fn draw_row_refs(body: &mut String, row: &Row) {
    let (pieces, segments, top) = (row.pieces, row.segments, row.top);
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
    let limit = input.figures.window.max(1);
    let sent = input.figures.request;
    let scale = sent.max(limit) as f64;
    let x_of = |t: f64| MARGIN + t / scale * INNER;
    // The window, empty.
    let _ = writeln!(
        body,
        r##"<rect x="{MARGIN}" y="{top:.1}" width="{:.2}" height="{VIEW_H}" fill="#f4f4f4" stroke="#d0d0d0"/>"##,
        x_of(limit as f64) - MARGIN
    );
    // The bar ends at the figure it is labelled with: the host's share
    // first, then the messages (the nudge, not drawn, spread over them).
    let host = input.figures.breakdown.host.min(sent);
    if host > 0 {
        let _ = writeln!(
            body,
            r##"<rect x="{MARGIN}" y="{top:.1}" width="{:.2}" height="{VIEW_H}" fill="{HOST_FILL}"><title>the host's prompt and tools · {} tokens (the provider's figure less the messages)</title></rect>"##,
            x_of(host as f64) - MARGIN,
            tokens::format(host)
        );
    }
    let shrink = match view_tokens {
        0 => 1.0,
        v => (sent - host) as f64 / v as f64,
    };
    let mut at = host as f64;
    for r in runs(input.view) {
        let width = r.tokens as f64 * shrink;
        let (x0, x1) = (x_of(at), x_of(at + width));
        at += width;
        let what = run_name(&r);
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
    let wx = x_of(limit as f64);
    draw_used(body, input, x_of(sent as f64), wx, top);
    draw_window_limit(body, input, wx, top);
}

/// What a run of the view row is, as its tooltip names it.
fn run_name(r: &Run) -> String {
    match r.class {
        Class::Block => format!("summary of {} (T{})", r.block, r.tier),
        Class::Protected => "recent zone (protected)".to_string(),
        Class::Truncated => "truncated tool output".to_string(),
        Class::Reclaimed => "reclaimed tool output".to_string(),
        Class::Tool => "tool traffic".to_string(),
        Class::User => "user text".to_string(),
        Class::Assistant => "assistant".to_string(),
        Class::System => "instructions".to_string(),
        Class::Hidden => "not sent".to_string(),
    }
}

/// How much of the window is used, at the view's `end`: beside it when
/// there is room before the window line at `wx` (or the canvas edge), else
/// above the end of the bar.
fn draw_used(body: &mut String, input: &SvgInput, end: f64, wx: f64, top: f64) {
    let used = format!(
        "{} · {}%",
        tokens::format(input.figures.request),
        input.figures.window_percent()
    );
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
}

/// The window's limit, a dashed line at `wx`, labelled.
fn draw_window_limit(body: &mut String, input: &SvgInput, wx: f64, top: f64) {
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
        tokens::format(input.figures.window)
    );
}

#[cfg(test)]
#[path = "svg_tests.rs"]
mod tests;
