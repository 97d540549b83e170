//! `noa rebuild`: the state from the transcript alone.

use std::path::Path;

use serde::Serialize;
use serde_json::Value;

use super::args::{Global, RebuildArgs};
use super::batch::{self, Done, Lines, Named};
use super::context::Context;
use super::{CliError, Exit};
use crate::engine::{self, CompressionState, ReplayOutcome, differences};
use crate::store::Purpose;

/// Runs `noa rebuild` on one transcript, or on each of many.
pub fn run(global: &Global, args: &RebuildArgs) -> Result<Exit, CliError> {
    match batch::named(&args.transcripts)? {
        Named::One(path) => rebuild(global, args, &path)?.print(global),
        Named::Many(paths) => {
            batch::refuse(global.session.as_deref().map(|_| "--session"), "session")?;
            let lines = if args.json { Lines::Json } else { Lines::Text };
            let each = |g: &Global, p: &Path| rebuild(g, args, p);
            Ok(batch::run_each(global, "rebuild", lines, &paths, each))
        }
    }
}

/// Rebuilds (or checks) the state of the transcript at `path`.
fn rebuild(global: &Global, args: &RebuildArgs, path: &Path) -> Result<Done, CliError> {
    let mut cx = Context::open(global, path, Purpose::Look)?;
    cx.session.lock()?;
    let config = cx.settings.config.clone();
    cx.read_reclaim_words(&config);
    let session = cx.session.dir();
    let exists = session.state_path().exists();
    if exists && !args.force && !args.check {
        return Err(CliError::Usage(format!(
            "{} exists; noa will not replace it. Pass --force to rebuild over it, or --check to compare",
            session.state_path().display()
        )));
    }
    let on_disk = if args.check { session.load()? } else { None };
    if args.check && on_disk.is_none() {
        return Err(CliError::Usage(format!(
            "{}: there is no state to check against",
            session.state_path().display()
        )));
    }

    let originals = cx.session.originals();
    let rebuilt = cx.rebuild(&originals)?;
    let replayed = rebuilt
        .replays
        .iter()
        .filter(|r| matches!(r.outcome, ReplayOutcome::Replayed { .. }))
        .count();
    if let Some(live) = on_disk {
        return Ok(checked(&cx, args, &live, &rebuilt, replayed));
    }

    let (adopted, written) = session.commit_rebuilt(
        &rebuilt.archives,
        (&originals, &cx.session.left_words()),
        &rebuilt.state,
    )?;
    let (json, text) = if args.json {
        let report = Rebuilt {
            replayed,
            calls: rebuilt.replays.len(),
            blocks: rebuilt.state.blocks.len(),
            archives_adopted: adopted,
            archives_written: written,
            state: session.state_path().display().to_string(),
        };
        (Some(to_json(&report)), None)
    } else {
        let text = format!(
            "noa rebuild: {replayed} of {} Compress call(s) replayed, {} block(s); archives: {adopted} adopted, {written} written; state {}\n{}",
            rebuilt.replays.len(),
            rebuilt.state.blocks.len(),
            session.state_path().display(),
            replay_lines(&rebuilt).join("\n")
        );
        (None, Some(text))
    };
    Ok(done(&cx, Exit::Success, json, text))
}

/// One line for each Compress call replayed or skipped, and its warnings.
fn replay_lines(rebuilt: &engine::Rebuilt) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for r in &rebuilt.replays {
        match &r.outcome {
            ReplayOutcome::Replayed { blocks } => {
                lines.push(format!("  {}: replayed → {}", r.call_id, blocks.join(", ")))
            }
            ReplayOutcome::Skipped(why) => lines.push(format!("  {}: skipped ({why})", r.call_id)),
        }
        lines.extend(r.warnings.iter().map(|w| format!("    warn: {w}")));
    }
    lines
}

/// `--check`: the rebuilt state against the one on disk, exit 1 when they
/// differ.
fn checked(
    cx: &Context,
    args: &RebuildArgs,
    live: &CompressionState,
    rebuilt: &engine::Rebuilt,
    replayed: usize,
) -> Done {
    let diffs = differences(live, &rebuilt.state);
    let exit = if diffs.is_empty() {
        Exit::Success
    } else {
        Exit::Rejected
    };
    if args.json {
        let report = Checked {
            replayed,
            calls: rebuilt.replays.len(),
            blocks: rebuilt.state.blocks.len(),
            differences: diffs,
        };
        return done(cx, exit, Some(to_json(&report)), None);
    }
    let text = if diffs.is_empty() {
        format!(
            "noa rebuild --check: the state on disk matches the transcript ({} block(s), {replayed} call(s) replayed)",
            rebuilt.state.blocks.len()
        )
    } else {
        format!(
            "noa rebuild --check: {} difference(s)\n{}",
            diffs.len(),
            diffs
                .iter()
                .map(|d| format!("  {d}"))
                .collect::<Vec<_>>()
                .join("\n")
        )
    };
    done(cx, exit, None, Some(text))
}

/// What one rebuild gave: `json` when it was asked for, else `text`.
fn done(cx: &Context, exit: Exit, json: Option<Value>, text: Option<String>) -> Done {
    Done {
        exit,
        json,
        text,
        notes: Vec::new(),
        warnings: cx.session.warnings(),
    }
}

/// `rebuild --json`: what was replayed and written.
#[derive(Serialize)]
struct Rebuilt {
    replayed: usize,
    calls: usize,
    blocks: usize,
    archives_adopted: usize,
    archives_written: usize,
    state: String,
}

/// `rebuild --check --json`: what was replayed and how the states differ.
#[derive(Serialize)]
struct Checked {
    replayed: usize,
    calls: usize,
    blocks: usize,
    differences: Vec<String>,
}

fn to_json(report: &impl Serialize) -> Value {
    serde_json::to_value(report).expect("a report always serializes")
}
