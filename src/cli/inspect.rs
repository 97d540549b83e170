//! `noa inspect`: what a session's state holds, for a person or a script.
//!
//! Reads the state (and the transcript when one is named), projects the view
//! on a copy of the state and writes nothing but the `--svg` file: the block
//! map, the stats, the context breakdown and window usage, the tier tree and
//! a one-line context map. Without a transcript there is no current view, so
//! only what the state alone holds is shown, and the output says so.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use comfy_table::{CellAlignment, ContentArrangement, Table, presets};
use serde::Serialize;
use serde_json::Value;

use super::args::{Global, InspectArgs};
use super::batch::{self, Done, Lines, Named};
use super::context::{Context, Turn};
use super::settings::{self, Settings};
use super::{CliError, Exit};
use crate::engine::{
    Bill, Block, CompressionState, Config, CoreMessage, Figures, Gauge, HostCompaction, IdSet,
    Name, Prices, Reclaim, Reclaimed, ReclaimedOutput, Run, STRIP_LEGEND, Segment, SvgInput,
    format_breakdown, format_total, map, protected_ids, summary_tokens, svg, tokens, tree,
};
use crate::formats::read_usage;
use crate::store::{Purpose, SessionDir, write_atomic};

/// Characters in the terminal context map.
const STRIP_WIDTH: usize = 60;
/// Topics longer than this are cut in the table (the JSON has them whole).
const TOPIC_WIDTH: usize = 40;

/// What the current view adds to the state: only known with a transcript.
struct Current {
    /// The turn's figures, as `project` reports them.
    figures: Figures,
    /// Where the window came from, in words.
    window_from: &'static str,
    /// The same, as the text says it after the window.
    window_said: &'static str,
    history: Vec<Segment>,
    view: Vec<Segment>,
    /// What each block reclaimed, by id: the panel's and the SVG's figure.
    reclaimed: BTreeMap<String, Reclaimed>,
    /// The turn's scale: estimated tokens to the provider's.
    gauge: Gauge,
}

/// Runs `noa inspect` on one transcript (or a session named alone), or
/// with `--json` on each of many. Works on a copy of the state: writes
/// nothing but the `--svg` file.
pub fn run(global: &Global, args: &InspectArgs) -> Result<Exit, CliError> {
    if args.transcripts.is_empty() {
        return inspect(global, args, None)?.print(global);
    }
    match batch::named(&args.transcripts)? {
        Named::One(path) => inspect(global, args, Some(&path))?.print(global),
        Named::Many(paths) => {
            batch::refuse(global.session.as_deref().map(|_| "--session"), "session")?;
            batch::refuse(args.block.as_deref().map(|_| "--block"), "session's block")?;
            batch::refuse(args.svg.as_ref().map(|_| "--svg"), "file")?;
            if !args.json {
                return Err(CliError::Usage(
                    "inspect over several transcripts prints one JSON line each: add --json".into(),
                ));
            }
            let each = |g: &Global, p: &Path| inspect(g, args, Some(p));
            Ok(batch::run_each(
                global,
                "inspect",
                Lines::Json,
                &paths,
                each,
            ))
        }
    }
}

/// The settings beside the transcript, or the global ones without one.
fn settings_of(global: &Global, cx: Option<&Context>) -> Result<Settings, CliError> {
    Ok(match cx {
        Some(cx) => cx.settings.clone(),
        None => settings::load(global, None)?,
    })
}

/// The state `inspect` shows, and the session it is of.
struct Stored {
    session: SessionDir,
    state: CompressionState,
    /// No state was found: `state` is a new one.
    fresh: bool,
}

/// With a transcript, the state a command would use: its own, the one it
/// inherits from a parent session, or the one its records rebuild; without,
/// the named session's as stored, which must exist.
fn stored_state(global: &Global, cx: Option<&Context>) -> Result<Stored, CliError> {
    let session = match cx {
        Some(cx) => cx.session.dir().clone(),
        None => session_only(global)?,
    };
    let stored = match cx {
        Some(cx) => {
            Some(cx.state()?).filter(|s| !s.blocks.is_empty() || !s.message_refs.is_empty())
        }
        None => session.load()?,
    };
    if stored.is_none() && cx.is_none() {
        return Err(CliError::Usage(format!(
            "no state for session {:?}: {} does not exist",
            session.session,
            session.state_path().display()
        )));
    }
    let fresh = stored.is_none();
    let state = stored.unwrap_or_else(|| CompressionState::new(&session.session));
    Ok(Stored {
        session,
        state,
        fresh,
    })
}

/// What a session's state holds, with the transcript at `transcript` when
/// one is named.
fn inspect(
    global: &Global,
    args: &InspectArgs,
    transcript: Option<&Path>,
) -> Result<Done, CliError> {
    let cx = match transcript {
        Some(path) => Some(Context::open(global, path, Purpose::Look)?),
        None => None,
    };
    let Stored {
        session,
        state: stored,
        fresh,
    } = stored_state(global, cx.as_ref())?;

    if let Some(id) = &args.block {
        return print_archive(&session, &stored, id).map(Done::printed);
    }

    let settings = settings_of(global, cx.as_ref())?;
    let config = settings.for_host(
        &stored.host,
        cx.as_ref().map(|c| c.session.transcript().format),
    );
    let mut state = stored.clone();
    let current = (cx.as_ref()).map(|cx| current(cx, &mut state, &settings, &config, &stored));
    let bill = match (&cx, &current, transcript) {
        (Some(cx), Some(c), Some(path)) => bill_of(path, cx, &state, c, settings.prices),
        _ => None,
    };
    if let Some(file) = &args.svg {
        let drawn = Drawn {
            session: &session,
            state: &state,
            current: current.as_ref(),
            bill: bill.as_ref(),
        };
        write_svg(global, file, &drawn)?;
    }
    // Sizes on the turn's scale, as the figures are; the estimator's alone
    // without a transcript.
    let count = |m: &CoreMessage| match &current {
        Some(c) => c.gauge.scale(config.tokens(m)),
        None => config.tokens(m),
    };
    let report = Report {
        session: &session,
        stored: &stored,
        fresh,
        // Block activity as of this transcript; as stored when there is none.
        blocks: &state.blocks,
        base: &state_base(&session),
        current: current.as_ref(),
        count: &count,
        compactions: &state.host.compactions,
        bill: bill.as_ref(),
    };
    let warnings = cx.map(|cx| cx.session.warnings()).unwrap_or_default();
    Ok(report.done(args.json, warnings))
}

/// The session's bill from the usage its transcript records (`path`, read
/// again for it), each block's part in it priced by what it reclaimed;
/// `None` when the log records no usage (chat and Anthropic logs).
fn bill_of(
    path: &Path,
    cx: &Context,
    state: &CompressionState,
    c: &Current,
    prices: Option<Prices>,
) -> Option<Bill> {
    let text = fs::read_to_string(path).ok()?;
    let format = cx.session.transcript().format;
    let log = read_usage(&text, format);
    if log.responses.is_empty() {
        return None;
    }
    let weights = format.weights();
    let removed = |b: &Block| c.reclaimed.get(&b.block_id).map_or(0, |r| r.tokens as u64);
    Some(Bill::of(&log, &state.blocks, weights, prices, &removed))
}

/// The outputs reclaimed without the model, in one line: how many, and
/// the first few by ref; `None` when there are none.
fn reclaimed_line(
    state: &CompressionState,
    reclaimed: &BTreeMap<Name, ReclaimedOutput>,
) -> Option<String> {
    if reclaimed.is_empty() {
        return None;
    }
    let mut refs: Vec<&str> = (reclaimed.keys())
        .filter_map(|id| state.message_refs.usable(id))
        .collect();
    refs.sort_unstable();
    let shown = refs.iter().take(8).copied().collect::<Vec<_>>().join(", ");
    let more = refs.len().saturating_sub(8);
    let more = match more {
        0 => String::new(),
        n => format!(" and {n} more"),
    };
    let of_kind = |kind: fn(&Reclaim) -> bool| reclaimed.values().filter(|r| kind(&r.why)).count();
    let kinds = [
        (
            of_kind(|w| matches!(w, Reclaim::Stale { .. })),
            "stale read(s) of files changed since",
        ),
        (
            of_kind(|w| matches!(w, Reclaim::Repeat { .. })),
            "repeat(s) of a later output",
        ),
        (
            of_kind(|w| matches!(w, Reclaim::Spent { .. })),
            "input(s) of a failed call",
        ),
    ];
    let what: Vec<String> = (kinds.iter().filter(|(n, _)| *n > 0))
        .map(|(n, name)| format!("{n} {name}"))
        .collect();
    Some(format!(
        "Reclaimed without the model: {}, each shown as one line with its archive under \
         reclaimed/: {shown}{more}.",
        what.join(" and ")
    ))
}

/// The bill in words: totals, then what each compression did.
fn bill_text(bill: &Bill) -> String {
    let (t, w) = (&bill.totals, &bill.weights);
    // Against a fresh input token; where writing costs nothing extra, only
    // reading is weighed.
    let weighed = match w.cache_write == 1.0 {
        true => format!("one read from the cache weighs {}", w.cache_read),
        false => format!(
            "one written to the cache weighs {}, one read from it {}",
            w.cache_write, w.cache_read
        ),
    };
    let mut out = format!(
        "Bill ({} requests recorded; against a fresh input token, {weighed}):",
        t.requests
    );
    let _ = write!(
        out,
        "\n  prompts {} tokens: {} fresh, {} written to the cache, {} read from it ({:.0}% read)",
        format_total(t.fresh + t.cache_write + t.cache_read),
        format_total(t.fresh),
        format_total(t.cache_write),
        format_total(t.cache_read),
        t.reused * 100.0,
    );
    let _ = write!(
        out,
        "\n  output {} tokens (reasoning {}); the prompts weigh {} fresh-input tokens",
        format_total(t.output),
        format_total(t.reasoning),
        format_total(t.weighted),
    );
    if let Some(cost) = t.cost {
        let _ = write!(out, "; cost {cost:.2} at the config file's prices");
    }
    for b in &bill.blocks {
        let _ = write!(out, "\n  {}: call on line {}; ", b.block, b.call_line);
        if b.requests_since == 0 {
            out.push_str("no request after it yet");
            continue;
        }
        let paid = match b.paid_back_after {
            Some(n) => format!(
                "paid back after {n} of the {} requests since",
                b.requests_since
            ),
            None => format!("not paid back yet ({} requests since)", b.requests_since),
        };
        let _ = write!(
            out,
            "the next request wrote {} (usually {}); it takes ~{} out of each; {paid}",
            format_total(b.rewrote),
            format_total(b.usual),
            format_total(b.removed),
        );
    }
    out
}

/// What the current view adds, projected on `state` (a copy of `stored`).
fn current(
    cx: &Context,
    state: &mut CompressionState,
    settings: &settings::Settings,
    config: &Config,
    stored: &CompressionState,
) -> Current {
    let p = cx.project(state, Turn::default());
    let zone: IdSet<'_> = protected_ids(&p.view, state, config);
    let history = cx.session.history();
    // Every size on the provider's scale, as the figures are.
    let count = |m: &CoreMessage| p.gauge.scale(config.tokens(m));
    Current {
        figures: p.figures,
        window_from: settings.window_source(&stored.host),
        window_said: settings.window_said(&stored.host),
        history: map::history_segments(history, &p.view, state, &zone, &count),
        view: map::view_segments(&p.view, state, &zone, &count),
        reclaimed: map::reclaimed_by_block(history, &p.view, &state.blocks, &count),
        gauge: p.gauge,
    }
}

/// What `--svg` draws the map of.
struct Drawn<'a> {
    session: &'a SessionDir,
    state: &'a CompressionState,
    /// The current view: the map needs the transcript.
    current: Option<&'a Current>,
    bill: Option<&'a Bill>,
}

/// Draws the context map to `file`.
fn write_svg(global: &Global, file: &Path, drawn: &Drawn) -> Result<(), CliError> {
    let (session, state, bill) = (drawn.session, drawn.state, drawn.bill);
    let Some(c) = drawn.current else {
        return Err(CliError::Usage(
            "--svg needs the transcript: the map is drawn from its messages".into(),
        ));
    };
    let svg = svg::svg(&SvgInput {
        session: &session.session,
        history: &c.history,
        view: &c.view,
        figures: &c.figures,
        compactions: &state.host.compactions,
        blocks: &state.blocks,
        reclaimed: &c.reclaimed,
        bill,
    });
    write_atomic(file, svg.as_bytes()).map_err(|source| CliError::Io {
        path: file.to_path_buf(),
        error: source,
    })?;
    if !global.quiet {
        let _ = writeln!(
            std::io::stderr(),
            "noa: context map written to {}",
            file.display()
        );
    }
    Ok(())
}

/// The session named by `--session` under `--state-dir`, for inspecting
/// without a transcript.
fn session_only(global: &Global) -> Result<SessionDir, CliError> {
    let (Some(base), Some(id)) = (&global.state_dir, &global.session) else {
        return Err(CliError::Usage(
            "inspect needs a transcript, or --session with --state-dir (or NOA_STATE_DIR) to name the session".into(),
        ));
    };
    if id.is_empty() || id.contains(['/', '\\']) || id == "." || id == ".." {
        return Err(CliError::Usage(format!(
            "{id:?} cannot be a session id: it must be a plain directory name"
        )));
    }
    Ok(SessionDir::new(base, id))
}

/// The state dir (the session dir's parent) as archive paths name it:
/// apply writes them from the canonical session dir.
fn state_base(session: &SessionDir) -> PathBuf {
    let dir = fs::canonicalize(&session.dir).unwrap_or_else(|_| session.dir.clone());
    dir.parent().map(Path::to_path_buf).unwrap_or_default()
}

/// A block's archive relative to the state dir (`<session>/tier1/…`), or
/// its absolute path when it lies outside (a block inherited from elsewhere).
fn archive_shown(b: &Block, session: &SessionDir, base: &Path) -> String {
    if b.archive_path.is_empty() {
        return if b.archive_rel.is_empty() {
            String::new()
        } else {
            format!("{}/{}", session.session, b.archive_rel)
        };
    }
    match Path::new(&b.archive_path).strip_prefix(base) {
        Ok(rel) if !base.as_os_str().is_empty() => rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy())
            .collect::<Vec<_>>()
            .join("/"),
        _ => b.archive_path.clone(),
    }
}

/// What `inspect` reports on.
struct Report<'a> {
    session: &'a SessionDir,
    stored: &'a CompressionState,
    /// No state was stored yet.
    fresh: bool,
    /// The blocks, active as of the transcript when there is one.
    blocks: &'a [Block],
    base: &'a Path,
    current: Option<&'a Current>,
    /// The session's token counter.
    count: &'a dyn Fn(&CoreMessage) -> usize,
    /// The host's own compactions.
    compactions: &'a [HostCompaction],
    /// What the transcript records of the bill.
    bill: Option<&'a Bill>,
}

impl Report<'_> {
    /// What a block reclaimed; `None` without a transcript, since which of
    /// its messages the view still shows, and their sizes, are not known.
    fn reclaimed(&self, b: &Block) -> Option<Reclaimed> {
        self.current
            .and_then(|c| c.reclaimed.get(&b.block_id).copied())
    }

    /// What every block reclaimed, summed: the session's figure, since a
    /// tier 2/3 block counts the summaries it absorbed as taken.
    fn total_reclaimed(&self) -> Option<usize> {
        self.current
            .map(|c| c.reclaimed.values().map(|r| r.tokens).sum())
    }

    /// Tokens of a block's rendered summary, on the session's counter.
    fn summary(&self, b: &Block) -> usize {
        summary_tokens(b, self.count)
    }
}

fn span(b: &Block) -> String {
    format!("{}–{}", b.start_ref, b.end_ref)
}

fn cut(s: &str, max: usize) -> String {
    let s = s.trim();
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let head: String = s.chars().take(max - 1).collect();
        format!("{head}…")
    }
}

/// The block map. `tokens` is what a block took out of the view → what its
/// summary put back, `reclaimed` the difference; both `?` without a
/// transcript.
fn block_table(r: &Report) -> String {
    let mut t = Table::new();
    t.load_preset(presets::ASCII_MARKDOWN)
        .set_content_arrangement(ContentArrangement::Disabled)
        .set_header([
            "id",
            "tier",
            "active",
            "span",
            "messages",
            "tokens",
            "reclaimed",
            "topic",
            "archive",
        ]);
    for b in r.blocks {
        let figure = r.reclaimed(b);
        t.add_row([
            b.block_id.clone(),
            format!("T{}", b.tier),
            if b.active { "yes" } else { "no" }.to_string(),
            span(b),
            b.effective_message_ids.len().to_string(),
            format!(
                "{} → {}",
                figure.map_or("?".into(), |f| tokens::format(f.taken)),
                tokens::format(r.summary(b))
            ),
            figure.map_or("?".into(), |f| tokens::format(f.tokens)),
            cut(&b.topic, TOPIC_WIDTH),
            archive_shown(b, r.session, r.base),
        ]);
    }
    for i in [4, 5, 6] {
        if let Some(c) = t.column_mut(i) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
    t.to_string()
}

/// The stats line; the tokens reclaimed only with a transcript (see
/// [`Report::total_reclaimed`]).
fn stats_line(r: &Report) -> String {
    let (stored, blocks) = (r.stored, r.blocks);
    let active = blocks.iter().filter(|b| b.active).count();
    let s = &stored.stats;
    let reclaimed = r
        .total_reclaimed()
        .map(|n| format!(" · {} tokens reclaimed", tokens::format(n)))
        .unwrap_or_default();
    format!(
        "Stats: {} compression{}{reclaimed} · {active} of {} block{} active · {} refs handed out · next block b{}",
        s.compression_count,
        if s.compression_count == 1 { "" } else { "s" },
        blocks.len(),
        if blocks.len() == 1 { "" } else { "s" },
        stored.message_refs.refs(),
        stored.next_block_id
    )
}

impl Report<'_> {
    /// The report printed as JSON (`json`) or text, with the read's
    /// `warnings`.
    fn done(&self, json: bool, warnings: Vec<String>) -> Done {
        let (json, text) = match json {
            true => (Some(to_json(self)), None),
            false => (None, Some(to_text(self))),
        };
        Done {
            exit: Exit::Success,
            json,
            text,
            notes: Vec::new(),
            warnings,
        }
    }
}

fn to_text(r: &Report) -> String {
    let (session, blocks, current) = (r.session, r.blocks, r.current);
    let mut parts = vec![format!(
        "Session {} · {}",
        session.session,
        session.dir.display()
    )];
    if r.fresh {
        parts.push(format!(
            "No state yet ({} does not exist): nothing has been compressed; what follows is \
             the transcript as the next `noa project` would see it.",
            session.state_path().display()
        ));
    }
    if current.is_none() {
        parts.push(
            "No transcript given: what follows is the state alone. Block activity is as last \
             stored; the tokens reclaimed, context breakdown, window usage and map need the \
             transcript."
                .into(),
        );
    }
    if blocks.is_empty() {
        parts.push("Blocks: none yet.".into());
    } else {
        let active = blocks.iter().filter(|b| b.active).count();
        parts.push(format!(
            "Blocks ({}, {active} active):\n{}",
            blocks.len(),
            block_table(r)
        ));
    }
    parts.push(stats_line(r));
    if let Some(line) = reclaimed_line(r.stored, &r.stored.host.reclaimed) {
        parts.push(line);
    }
    parts.extend(r.compactions.iter().map(compaction_line));
    if let Some(c) = current {
        parts.push(request_text(c));
    }
    if let Some(bill) = r.bill {
        parts.push(bill_text(bill));
    }
    if !blocks.is_empty() {
        parts.push(format!(
            "Tier tree:\n{}",
            tree::format_tree(&tree::tier_tree(blocks))
        ));
    }
    if let Some(c) = current {
        parts.push(map_text(c));
    }
    parts.join("\n\n")
}

/// A compaction the host made, as a sentence.
fn compaction_line(c: &HostCompaction) -> String {
    let mut line = c.describe();
    if let Some(first) = line.get_mut(..1) {
        first.make_ascii_uppercase();
    }
    format!("{line}.")
}

/// The request's breakdown and how much of the window and budget it takes.
fn request_text(c: &Current) -> String {
    let f = &c.figures;
    let breakdown = format_breakdown(&f.breakdown, 0);
    let mut window = format!(
        "Request: {} ({}) of the {} window {} ({}%), as sent",
        tokens::format(f.request),
        f.source.name(),
        tokens::format(f.window),
        c.window_said,
        f.window_percent(),
    );
    let _ = write!(
        window,
        "; {} before this turn's cuts, {}% of the {} budget",
        tokens::format(f.before_cuts),
        f.budget_percent(),
        tokens::format(f.budget),
    );
    if breakdown.is_empty() {
        window
    } else {
        format!("{breakdown}\n{window}")
    }
}

/// The one-line context map, with its scale and legend.
fn map_text(c: &Current) -> String {
    let f = &c.figures;
    let total = f.breakdown.host + c.view.iter().map(|s| s.tokens).sum::<usize>();
    let per = total.max(f.window).max(1) as f64 / STRIP_WIDTH as f64;
    format!(
        "Context map (one character ≈ {} tokens; | marks the {} window):\n{}\n{STRIP_LEGEND}",
        tokens::format(per.round() as usize),
        tokens::format(f.window),
        map::strip(&c.view, f.breakdown.host, STRIP_WIDTH, f.window)
    )
}

/// `inspect --json`: the state, and with a transcript the turn's figures
/// under `project --report json`'s names.
#[derive(Serialize)]
struct JsonReport<'a> {
    session: &'a str,
    state: Option<String>,
    transcript: bool,
    blocks: Vec<BlockReport<'a>>,
    stats: StatsReport,
    tree: Vec<tree::TreeNode>,
    compactions: &'a [HostCompaction],
    /// Tool outputs reclaimed without the model, by id.
    reclaimed_outputs: &'a BTreeMap<Name, ReclaimedOutput>,
    #[serde(flatten)]
    figures: Option<Figures>,
    window_from: Option<&'static str>,
    map: Option<MapReport>,
    /// What the transcript records of the bill; `null` when it records no
    /// usage.
    bill: Option<&'a Bill>,
}

/// One block in `inspect --json`.
#[derive(Serialize)]
struct BlockReport<'a> {
    id: &'a str,
    tier: u8,
    active: bool,
    start: &'a str,
    end: &'a str,
    messages: usize,
    direct_messages: usize,
    absorbed: &'a [Name],
    /// What the block took out (see [`Reclaimed`]); unknown without a
    /// transcript.
    tokens_before: Option<usize>,
    /// What its summary puts back.
    tokens_after: usize,
    reclaimed: Option<usize>,
    topic: &'a str,
    summary: &'a str,
    archive: String,
    archive_path: &'a str,
    archive_rel: &'a str,
    created_at: i64,
    compress_call_id: &'a str,
}

/// The stats in `inspect --json`.
#[derive(Serialize)]
struct StatsReport {
    compressions: usize,
    tokens_reclaimed: Option<usize>,
    active_blocks: usize,
    total_blocks: usize,
    refs: usize,
    next_block_id: String,
}

/// The context map in `inspect --json`.
#[derive(Serialize)]
struct MapReport {
    strip: String,
    view: Vec<Run>,
    history: Vec<Run>,
}

fn to_json(r: &Report) -> Value {
    let (session, stored, blocks, current) = (r.session, r.stored, r.blocks, r.current);
    let blocks_json = blocks
        .iter()
        .map(|b| {
            let figure = r.reclaimed(b);
            BlockReport {
                id: &b.block_id,
                tier: b.tier,
                active: b.active,
                start: &b.start_ref,
                end: &b.end_ref,
                messages: b.effective_message_ids.len(),
                direct_messages: b.direct_message_ids.len(),
                absorbed: &b.direct_block_ids,
                tokens_before: figure.map(|f| f.taken),
                tokens_after: r.summary(b),
                reclaimed: figure.map(|f| f.tokens),
                topic: &b.topic,
                summary: &b.summary,
                archive: archive_shown(b, session, r.base),
                archive_path: &b.archive_path,
                archive_rel: &b.archive_rel,
                created_at: b.created_at,
                compress_call_id: &b.compress_call_id,
            }
        })
        .collect();
    let report = JsonReport {
        session: &session.session,
        state: (!r.fresh).then(|| session.state_path().display().to_string()),
        transcript: current.is_some(),
        blocks: blocks_json,
        stats: StatsReport {
            compressions: stored.stats.compression_count,
            tokens_reclaimed: r.total_reclaimed(),
            active_blocks: blocks.iter().filter(|b| b.active).count(),
            total_blocks: blocks.len(),
            refs: stored.message_refs.refs(),
            next_block_id: format!("b{}", stored.next_block_id),
        },
        tree: tree::tier_tree(blocks),
        compactions: r.compactions,
        reclaimed_outputs: &stored.host.reclaimed,
        figures: current.map(|c| c.figures),
        window_from: current.map(|c| c.window_from),
        map: current.map(|c| MapReport {
            strip: map::strip(
                &c.view,
                c.figures.breakdown.host,
                STRIP_WIDTH,
                c.figures.window,
            ),
            view: map::runs(&c.view),
            history: map::runs(&c.history),
        }),
        bill: r.bill,
    };
    serde_json::to_value(&report).expect("a report always serializes")
}

/// Prints one block's archive: exit 2 for a block the session does not
/// have, 3 when its archive file cannot be read.
fn print_archive(
    session: &SessionDir,
    state: &CompressionState,
    id: &str,
) -> Result<Exit, CliError> {
    let wanted = normalize_block_id(id);
    let Some(b) = state
        .blocks
        .iter()
        .find(|b| Some(&b.block_id) == wanted.as_ref())
    else {
        let known: Vec<&str> = state.blocks.iter().map(|b| b.block_id.as_str()).collect();
        let have = if known.is_empty() {
            "it has no blocks yet".to_string()
        } else {
            format!("it has {}", known.join(", "))
        };
        return Err(CliError::Usage(format!(
            "no block {id:?} in session {}: {have}",
            session.session
        )));
    };
    let text = session.read_archive(b)?;
    let mut out = std::io::stdout().lock();
    out.write_all(&text)
        .and_then(|_| out.flush())
        .map_err(|source| CliError::Io {
            path: "<stdout>".into(),
            error: source,
        })?;
    Ok(Exit::Success)
}

/// `b3`, `B3`, `3` and `b3(T1)` all name block b3.
fn normalize_block_id(id: &str) -> Option<String> {
    let s = id.trim().to_ascii_lowercase();
    let s = s.split('(').next().unwrap_or("").trim();
    let digits = s.strip_prefix('b').unwrap_or(s);
    (!digits.is_empty() && digits.bytes().all(|c| c.is_ascii_digit()))
        .then(|| format!("b{}", digits.trim_start_matches('0')))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_ids_are_read_leniently() {
        for s in ["b3", "B3", "3", " b3(T1) ", "b03"] {
            assert_eq!(normalize_block_id(s).as_deref(), Some("b3"), "{s}");
        }
        assert_eq!(normalize_block_id("m3"), None);
        assert_eq!(normalize_block_id("b"), None);
    }

    #[test]
    fn archives_are_shown_relative_to_the_state_dir() {
        let session = SessionDir::new(Path::new("/s"), "abc");
        let mut b = crate::engine::Block {
            block_id: "b1".into(),
            tier: 1,
            topic: String::new(),
            summary: String::new(),
            direct_message_ids: vec![],
            effective_message_ids: vec![],
            direct_block_ids: vec![],
            archive_path: "/s/abc/tier1/b1_m00002-m00005.md".into(),
            archive_rel: "tier1/b1_m00002-m00005.md".into(),
            compressed_tokens: 0,
            start_ref: String::new(),
            end_ref: String::new(),
            created_at: 0,
            active: true,
            compress_call_id: String::new(),
        };
        assert_eq!(
            archive_shown(&b, &session, Path::new("/s")),
            "abc/tier1/b1_m00002-m00005.md"
        );
        b.archive_path = "/elsewhere/parent/tier1/b1.md".into();
        assert_eq!(
            archive_shown(&b, &session, Path::new("/s")),
            "/elsewhere/parent/tier1/b1.md"
        );
        b.archive_path.clear();
        assert_eq!(
            archive_shown(&b, &session, Path::new("/s")),
            "abc/tier1/b1_m00002-m00005.md"
        );
    }
}
