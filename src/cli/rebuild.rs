//! `noa rebuild`: the state from the transcript alone.

use std::io::Write;

use serde_json::json;

use super::args::{Global, RebuildArgs};
use super::context::Context;
use super::output::warn;
use super::{CliError, Exit};
use crate::engine::{ReplayOutcome, differences};
use crate::store::Purpose;

/// Runs `noa rebuild`.
pub fn run(global: &Global, args: &RebuildArgs) -> Result<Exit, CliError> {
    let mut cx = Context::open(global, &args.transcript, Purpose::Look)?;
    cx.session.lock()?;
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

    if let Some(live) = on_disk {
        let diffs = differences(&live, &rebuilt.state);
        let text = if args.json {
            json!({"replayed": replayed, "calls": rebuilt.replays.len(), "blocks": rebuilt.state.blocks.len(), "differences": diffs}).to_string()
        } else if diffs.is_empty() {
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
        print(&text)?;
        return Ok(if diffs.is_empty() {
            Exit::Success
        } else {
            Exit::Rejected
        });
    }

    let (adopted, written) = session.commit_rebuilt(
        &rebuilt.archives,
        (&originals, &cx.session.left_words()),
        &rebuilt.state,
    )?;
    let text = if args.json {
        json!({
            "replayed": replayed, "calls": rebuilt.replays.len(), "blocks": rebuilt.state.blocks.len(),
            "archives_adopted": adopted, "archives_written": written,
            "state": session.state_path().display().to_string(),
        })
        .to_string()
    } else {
        format!(
            "noa rebuild: {replayed} of {} Compress call(s) replayed, {} block(s); archives: {adopted} adopted, {written} written; state {}\n{}",
            rebuilt.replays.len(),
            rebuilt.state.blocks.len(),
            session.state_path().display(),
            lines.join("\n")
        )
    };
    print(text.trim_end())?;
    warn(global, &cx.session.warnings());
    Ok(Exit::Success)
}

fn print(text: &str) -> Result<(), CliError> {
    writeln!(std::io::stdout().lock(), "{text}").map_err(|source| CliError::Io {
        path: "<stdout>".into(),
        error: source,
    })
}
