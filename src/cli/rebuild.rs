//! `noa rebuild`: the state from the transcript alone.

use std::fs;
use std::io::{IsTerminal, Write};

use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;

use super::args::{Global, RebuildArgs};
use super::input::{Loaded, load, warn};
use super::{CliError, Exit, clock, settings};
use crate::engine::lineage;
use crate::engine::rebuild::{RebuildInput, ReplayOutcome, differences, rebuild, recorded_calls};
use crate::engine::state::CompressionState;
use crate::store::{SessionDir, SessionLock, write_atomic};

/// Runs `noa rebuild`.
pub fn run(global: &Global, args: &RebuildArgs) -> Result<Exit, CliError> {
    let loaded = load(global, &args.transcript)?;
    let session = &loaded.session;
    let settings = settings::load(global, Some(&args.transcript))?;
    session.create()?;
    let _lock = SessionLock::acquire(&session.dir)?;
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

    let history = loaded.transcript.cores();
    let base = base_state(&loaded)?;
    let root = fs::canonicalize(&session.dir)
        .unwrap_or_else(|_| session.dir.clone())
        .to_string_lossy()
        .into_owned();
    let now = clock::now();
    let created = clock::rfc3339(now);
    let calls = recorded_calls(&history).len();
    let bar = progress(global, calls as u64);
    let rebuilt = rebuild(&RebuildInput {
        history: &history,
        base: &base,
        config: &settings.for_host(&base.host, Some(loaded.transcript.format)),
        recorded: &loaded.transcript.recorded(),
        archive_root: &root,
        now,
        created: &created,
        on_step: &|n| bar.set_position(n as u64 + 1),
    });
    bar.finish_and_clear();

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

    // Archives first: adopt what is on disk, write what is missing.
    let (mut adopted, mut written) = (0, 0);
    for a in &rebuilt.archives {
        let path = session.dir.join(&a.rel);
        if path.exists() {
            adopted += 1;
            continue;
        }
        path.parent()
            .map_or(Ok(()), fs::create_dir_all)
            .and_then(|_| write_atomic(&path, a.contents.as_bytes()))
            .map_err(|source| CliError::Io {
                path: path.clone(),
                source,
            })?;
        written += 1;
    }
    session.save(&rebuilt.state)?;
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
    warn(global, &loaded.transcript.warnings);
    Ok(Exit::Success)
}

/// What a rebuild starts from: a parent's ledger for a derived session, else
/// nothing.
fn base_state(loaded: &Loaded) -> Result<CompressionState, CliError> {
    for parent in loaded.parents.iter().take(lineage::MAX_DEPTH) {
        if let Some(p) = SessionDir::new(&loaded.base, parent)
            .load()?
            .filter(|p| !p.blocks.is_empty())
        {
            return Ok(lineage::derive_child(&p, &loaded.session.session));
        }
    }
    Ok(CompressionState::new(&loaded.session.session))
}

fn progress(global: &Global, len: u64) -> ProgressBar {
    if global.quiet || len < 20 || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    if let Ok(style) = ProgressStyle::with_template("replaying {bar:30} {pos}/{len} Compress calls")
    {
        bar.set_style(style);
    }
    bar
}

fn print(text: &str) -> Result<(), CliError> {
    writeln!(std::io::stdout().lock(), "{text}").map_err(|source| CliError::Io {
        path: "<stdout>".into(),
        source,
    })
}
