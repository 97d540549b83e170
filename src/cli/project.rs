//! `noa project`: one turn's view.

use std::io::Write;

use serde::Serialize;

use super::args::{Global, ProjectArgs, ReportArg, ViewArg};
use super::context::{Context, Turn};
use super::output::{check_output, stage, warn};
use super::{CliError, Exit};
use crate::engine::{
    CompressionState, Figures, HostCompaction, Offer, OfferInput, Projection, offer, tokens,
    window_from_error,
};
use crate::formats::{Transcript, ViewFormat, reassemble_among};
use crate::store::{Access, CacheDraft, CacheWrite, Projected, Purpose, StoreError};

/// Runs `noa project`.
pub fn run(global: &Global, args: &ProjectArgs) -> Result<Exit, CliError> {
    check_output(args.output.as_ref())?;
    let mut cx = open_for_turn(global, args)?;
    let learned = args.overflow_error.as_deref().map(window_from_error);
    let unread_window = matches!(learned, Some(None))
        .then(|| "--overflow-error names no window size; the window stays as it was".to_string());
    let learn = |state: &mut CompressionState| {
        if let Some(Some(w)) = learned {
            state.host.learned_window = Some(w);
        }
    };
    let mut state = cx.turn_state()?;
    learn(&mut state);
    let turn = Turn {
        input_tokens: args.input_tokens.and_then(|f| f.0),
        force_nudge: args.nudge,
    };
    // Words set aside that another counter must read are read back first.
    if cx.session.set_aside() && !cx.decides_unread(&state) && !cx.session.read_withheld() {
        cx.session.read_whole()?;
    }
    let native = cx.session.transcript().format.view_format();
    let to = args.to.map_or(native, view_format);
    let render = |cx: &Context, p: &Projection| render_view(p, cx.session.transcript(), to);
    let Turned { p, view, draft } = turn_with_draft(&mut cx, &mut state, turn, learn, render)?;
    let output = args.output.as_ref();
    let mut saved_warnings = Vec::new();
    // The view is rendered if the turn left it to now, and written and
    // synced while the state is saved; it is seen once the state is.
    let (view, staged) = std::thread::scope(|s| {
        let t = cx.session.transcript();
        let readying = s.spawn(|| {
            let view = view.unwrap_or_else(|| render_view(&p, t, to));
            let staged = stage(output, &view.bytes);
            (view, staged)
        });
        let saved = match args.dry_run {
            true => Ok(()),
            false => save_turn(&cx, &mut state, &p, draft, &mut saved_warnings),
        };
        // A panic there is a bug, and goes on as this thread's would.
        let readied = (readying.join()).unwrap_or_else(|e| std::panic::resume_unwind(e));
        saved.map(|()| readied)
    })?;
    let staged = staged?;
    let mut warnings = turn_warnings(&cx, &p, &state, unread_window, view.warnings);
    warnings.extend(saved_warnings);
    staged.put(&view.bytes)?;
    warn(global, &warnings);
    if !global.quiet {
        let shown = Shown {
            p: &p,
            state: &state,
            view_messages: view.messages,
            warnings: &warnings,
        };
        let _ = writeln!(
            std::io::stderr(),
            "{}",
            report_line(global, args, &cx, &shown)
        );
    }
    // The state goes with the history (see `Session::finish`).
    std::mem::forget(state);
    cx.session.finish();
    Ok(Exit::Success)
}

/// The session opened for the turn, locked unless it is a dry run. A
/// window too small for the session is refused before the session's folder
/// is made or locked: nothing is written.
fn open_for_turn<'g>(global: &'g Global, args: &ProjectArgs) -> Result<Context<'g>, CliError> {
    let access = if args.dry_run {
        Access::Read
    } else {
        Access::Write
    };
    let mut cx = Context::open(global, &args.transcript, Purpose::Turn(access))?;
    cx.settings.check_floor(cx.session.history())?;
    if access == Access::Write {
        cx.session.lock()?;
    }
    Ok(cx)
}

/// What a turn warns of: the read's warnings, the settings', a window the
/// overflow error did not name (`unread_window`), a window the host's own
/// share fills, refs run out, the view's conversion (`view_warnings`) and
/// words set aside.
fn turn_warnings(
    cx: &Context,
    p: &Projection,
    state: &CompressionState,
    unread_window: Option<String>,
    view_warnings: Vec<String>,
) -> Vec<String> {
    let mut warnings = cx.session.warnings();
    warnings.extend(cx.settings.warnings.iter().cloned());
    warnings.extend(unread_window);
    warnings.extend(host_fills_window(cx, p, state));
    warnings.extend(refs_run_out(p));
    warnings.extend(view_warnings);
    warnings.extend(set_aside_figure(cx, p, state));
    warnings
}

/// Saves the turn's state, and the read cache for the next turn (from
/// `draft` when the turn drafted one); a cache that cannot be saved is only
/// a warning: it saves work, and the next turn reads whatever cache it
/// finds with care.
fn save_turn(
    cx: &Context,
    state: &mut CompressionState,
    p: &Projection,
    draft: Option<Result<CacheDraft, StoreError>>,
    warnings: &mut Vec<String>,
) -> Result<(), CliError> {
    if let Some(w) = cx.settings.given_window() {
        state.host.window = Some(w);
    }
    cx.session.dir().save(state)?;
    let tokenizer = cx.config(state).tokenizer;
    let cached = match draft {
        Some(draft) => cx.session.finish_read_cache(draft, tokenizer, &p.cuts),
        None => {
            let projected = Projected {
                hidden: &p.hidden,
                view: &p.view,
                cuts: &p.cuts,
            };
            (cx.session).save_read_cache(tokenizer, projected, CacheWrite::Append)
        }
    };
    if let Err(e) = cached {
        warnings.push(format!("the read cache was not saved: {e}"));
    }
    Ok(())
}

/// A turn projected, its view rendered unless it is left to render beside
/// the save, and the read cache drafted beside it when the turn drafts one.
struct Turned {
    p: Projection,
    view: Option<Rendered>,
    draft: Option<Result<CacheDraft, StoreError>>,
}

/// Projects the turn, drafting the read cache on the other core when it
/// can (a first turn reading whole: see
/// [`Session::drafting`](crate::store::Session::drafting)), else as
/// [`project_turn`] does.
fn turn_with_draft(
    cx: &mut Context,
    state: &mut CompressionState,
    turn: Turn,
    learn: impl Fn(&mut CompressionState),
    render: impl Fn(&Context, &Projection) -> Rendered,
) -> Result<Turned, CliError> {
    let tokenizer = cx.config(state).tokenizer;
    let drafting = cx.session.drafting(state, tokenizer);
    let drafted = drafting.map(|d| {
        let (mut p, draft) = d.beside(|| cx.project(state, turn));
        let filled = cx.session.fill_unfilled(&mut p);
        (p, draft, filled)
    });
    match drafted {
        // A first turn's view has nothing to wait for once filled.
        Some((p, draft, true)) => Ok(Turned {
            p,
            view: None,
            draft: Some(draft),
        }),
        // The words set aside for the view could not be read back: the
        // turn starts again from the transcript read whole and the state
        // on disk, nothing written yet.
        Some((_, draft, false)) => {
            if let Ok(draft) = draft {
                draft.discard();
            }
            cx.session.read_whole()?;
            *state = cx.reload_state()?;
            learn(state);
            let (p, view) = project_turn(cx, state, turn, learn, render)?;
            Ok(Turned {
                p,
                view: Some(view),
                draft: None,
            })
        }
        None => {
            let (p, view) = project_turn(cx, state, turn, learn, render)?;
            Ok(Turned {
                p,
                view: Some(view),
                draft: None,
            })
        }
    }
}

/// The warning for a window whose budget the host's prompt and tools fill
/// alone: no view fits it, however much the model compresses, and the
/// window is more likely wrong than the session.
fn host_fills_window(cx: &Context, p: &Projection, state: &CompressionState) -> Option<String> {
    let f = &p.figures;
    (f.breakdown.host >= f.budget).then(|| {
        format!(
            "the host's prompt and tools alone come to {} ({}), past the {} budget of the {} \
             window {}: no view can fit, however much is compressed; check that window",
            tokens::format(f.breakdown.host),
            f.source.name(),
            tokens::format(f.budget),
            tokens::format(f.window),
            cx.settings.window_said(&state.host),
        )
    })
}

/// The warning for history messages left without a ref.
fn refs_run_out(p: &Projection) -> Option<String> {
    (p.unnumbered > 0).then(|| {
        format!(
            "every ref from m00001 to m99999 is taken: {} message(s) have none, so no Compress call can \
             name them and they stay in view until cut to fit; a new session numbers from m00001 again",
            p.unnumbered
        )
    })
}

/// The warning for a recorded figure the gauge set aside as a placeholder.
fn set_aside_figure(cx: &Context, p: &Projection, state: &CompressionState) -> Option<String> {
    let mark = p.gauge.set_aside?;
    let before = (cx.session.history().get(mark.at))
        .and_then(|m| state.message_refs.get(&m.id))
        .map_or(String::new(), |r| format!(" for the response at {r}"));
    Some(format!(
        "the transcript records a prompt of {} tokens{before}, less than half of what the \
         messages that request held come to: set aside as a placeholder, not a provider's count",
        mark.tokens
    ))
}

/// What a turn's report is made from.
struct Shown<'a> {
    p: &'a Projection,
    state: &'a CompressionState,
    /// Messages in the view as it went out.
    view_messages: usize,
    warnings: &'a [String],
}

/// The report on stderr: the text line, or with `--report json` the
/// object.
fn report_line(global: &Global, args: &ProjectArgs, cx: &Context, shown: &Shown) -> String {
    let (t, settings, p, state) = (cx.session.transcript(), &cx.settings, shown.p, shown.state);
    let to = args.to.map_or(t.format.view_format(), view_format);
    let report = Report {
        format: t.format.name(),
        read: cx.session.read_how(),
        view_format: to.name(),
        history_messages: cx.session.history().len(),
        view_messages: shown.view_messages,
        left_out_unpaired: p.dropped_unpaired,
        figures: p.figures,
        window_from: settings.window_source(&state.host),
        tokenizer: cx.config(state).tokenizer.name(),
        omitted: p.omitted,
        new_refs: p.new_refs,
        unnumbered: p.unnumbered,
        truncated: p.truncation.count,
        nudge: offer_of(cx, p, state),
        emergency: p.decision.emergency,
        reason: &p.decision.reason,
        compactions: &state.host.compactions,
        state: (!args.dry_run).then(|| cx.session.dir().state_path().display().to_string()),
        config: settings.file.as_ref().map(|f| f.display().to_string()),
        warnings: shown.warnings,
        branch: t.branch_read(),
    };
    match args.report {
        ReportArg::Json => serde_json::to_string(&report).expect("a report always serializes"),
        ReportArg::Text => report.line(p.view.len(), global.verbose),
    }
}

/// The nudge `p` appended, as data: what a script answers it with,
/// `project --report json` and `ranges --json` alike.
pub(super) fn offer_of(cx: &Context, p: &Projection, state: &CompressionState) -> Option<Offer> {
    offer(&OfferInput {
        decision: &p.decision,
        recommendation: &p.recommendation,
        blocks: &state.blocks,
        gauge: &p.gauge,
        // What the stale reads the compression reclaims too leave to free.
        before_cuts: p.figures.before_cuts.saturating_sub(p.dead.tokens),
        config: &cx.config(state),
    })
}

/// What `project` says of a turn: `--report json` as it stands, the text
/// line from the same fields.
#[derive(Serialize)]
struct Report<'a> {
    format: &'static str,
    read: &'static str,
    view_format: &'static str,
    history_messages: usize,
    view_messages: usize,
    left_out_unpaired: usize,
    #[serde(flatten)]
    figures: Figures,
    window_from: &'static str,
    tokenizer: &'static str,
    omitted: usize,
    new_refs: usize,
    unnumbered: usize,
    truncated: usize,
    /// The nudge appended, as data (see `docs/commands.md`).
    nudge: Option<Offer>,
    emergency: bool,
    reason: &'a str,
    compactions: &'a [HostCompaction],
    state: Option<String>,
    config: Option<String>,
    warnings: &'a [String],
    /// Which branch of a Claude Code log was read, and why (`-v`).
    #[serde(skip)]
    branch: Option<String>,
}

impl Report<'_> {
    /// The one line on stderr (two with `verbose`); `parts` is how many
    /// messages the view holds before they are put back together.
    fn line(&self, parts: usize, verbose: bool) -> String {
        let f = &self.figures;
        let nudge = match &self.nudge {
            Some(o) if o.emergency => format!(" · nudge T{} (emergency)", o.tier),
            Some(o) => format!(" · nudge T{}", o.tier),
            None => String::new(),
        };
        let truncated = match self.truncated {
            0 => String::new(),
            n => format!(" · {n} truncated"),
        };
        let omitted = match self.omitted {
            0 => String::new(),
            n => format!(" · {n} left out to fit"),
        };
        let state = match &self.state {
            Some(s) => format!(" · state {s}"),
            None => " · dry run, no state written".into(),
        };
        let mut line = format!(
            "noa: {} → {} · {} messages in view ({parts} parts, {} left out unpaired) · request {} ({}) of the {} window ({}%){truncated}{omitted}{nudge} · {} new refs{state}",
            self.format,
            self.view_format,
            self.view_messages,
            self.left_out_unpaired,
            tokens::format(f.request),
            f.source.name(),
            tokens::format(f.window),
            f.window_percent(),
            self.new_refs,
        );
        if verbose {
            line.push_str(&format!(
                "\nnoa: {} before this turn's cuts, {}% of the {} budget; {} of the request is the host's\nnoa: nudge decision: {}",
                tokens::format(f.before_cuts),
                f.budget_percent(),
                tokens::format(f.budget),
                tokens::format(f.breakdown.host),
                self.reason
            ));
            if let Some(branch) = &self.branch {
                line.push_str(&format!("\nnoa: {branch}"));
            }
            for c in self.compactions {
                line.push_str(&format!("\nnoa: {}", c.describe()));
            }
        }
        line
    }
}

/// A view as it goes out: its messages in the view format, as JSONL.
struct Rendered {
    /// How many messages it holds.
    messages: usize,
    /// What converting them to the view format had to say.
    warnings: Vec<String>,
    bytes: Vec<u8>,
}

/// The view of `p` in the format `to`.
fn render_view(p: &Projection, t: &Transcript, to: ViewFormat) -> Rendered {
    let (messages, warnings) = reassemble_among(t, &p.view, to, &p.hidden);
    // Room for about what the view takes, which a list grown by doubling
    // would have brought in twice over.
    let words: usize = p.view.iter().map(|m| m.text.len() + 128).sum();
    let mut bytes = Vec::with_capacity(words + words / 4);
    for m in &messages {
        serde_json::to_writer(&mut bytes, m).expect("a JSON value always serializes");
        bytes.push(b'\n');
    }
    Rendered {
        messages: messages.len(),
        warnings,
        bytes,
    }
}

/// Projects the turn and renders its view. A transcript read on from the
/// read cache is read whole after projecting when its prefix is not the one
/// the cache read (its digest is taken meanwhile: see
/// [`Session::confirm_prefix`](crate::store::Session::confirm_prefix)), when a message whose words
/// the cache left out is no longer hidden (the state folds less away than
/// when the cache was written), or the cache's JSON for a message in view
/// does not parse, or the words it kept back for the view cannot be read;
/// the turn is then projected afresh from the state on disk, with what
/// `learn` adds to it: the rare case pays for a second load, so the common
/// one keeps no copy of the state. Words kept back that this turn cannot do
/// without (another counter, a cache to write anew) are read before
/// projecting. The words the view shows are read and the view rendered
/// before the prefix is confirmed, while its digest is still being taken
/// on the other core: nothing of it is written or shown until it is.
fn project_turn(
    cx: &mut Context,
    state: &mut CompressionState,
    turn: Turn,
    learn: impl Fn(&mut CompressionState),
    render: impl Fn(&Context, &Projection) -> Rendered,
) -> Result<(Projection, Rendered), CliError> {
    // Another transcript than the cache read: the turn starts again from
    // it and the state on disk, as if there were no cache.
    let afresh = |cx: &mut Context, state: &mut CompressionState| -> Result<(), CliError> {
        cx.session.read_whole()?;
        *state = cx.state()?;
        learn(state);
        Ok(())
    };
    let warm = cx.session.warm();
    let unread_serves =
        cx.decides_unread(state) && cx.session.appends_cache(cx.config(state).tokenizer);
    if warm && !unread_serves && !cx.session.read_withheld() {
        // The state was checked against the transcript read on from the
        // cache: the one read whole is that one only if its prefix is.
        match cx.session.confirm_prefix() {
            true => cx.session.read_whole()?,
            false => afresh(cx, state)?,
        }
    }
    let mut p = cx.project(state, turn);
    // Words kept back, by the cache or set aside in a whole read, that
    // cannot be read back: the transcript is read whole (once the prefix
    // is confirmed, below).
    let filled = !(warm
        && (cx.session.unhides_elided(&p.hidden) || !cx.session.fill_view(&p.view)))
        && cx.session.fill_unfilled(&mut p);
    let rendered = filled.then(|| render(cx, &p));
    if warm && !cx.session.confirm_prefix() {
        afresh(cx, state)?;
        let p = cx.project(state, turn);
        let view = render(cx, &p);
        return Ok((p, view));
    }
    if let Some(view) = rendered {
        return Ok((p, view));
    }
    cx.session.read_whole()?;
    *state = cx.reload_state()?;
    learn(state);
    let p = cx.project(state, turn);
    let view = render(cx, &p);
    Ok((p, view))
}

fn view_format(v: ViewArg) -> ViewFormat {
    match v {
        ViewArg::Chat => ViewFormat::Chat,
        ViewArg::Anthropic => ViewFormat::Anthropic,
        ViewArg::Responses => ViewFormat::Responses,
    }
}
