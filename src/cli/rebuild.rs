//! `noa rebuild`: the state from the transcript alone.

use std::fs;
use std::io::{IsTerminal, Write};

use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;

use super::args::{Global, RebuildArgs};
use super::input::{Loaded, load, session_state, warn};
use super::{CliError, Exit, clock, settings};
use crate::engine::COMPRESS_TOOL;
use crate::engine::CompressionState;
use crate::engine::block_count;
use crate::engine::lineage;
use crate::engine::{ContentType, CoreMessage};
use crate::engine::{RebuildInput, Rebuilt, ReplayOutcome, differences, rebuild, recorded_calls};
use crate::store::{SessionDir, SessionLock};

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
    let rebuilt = replay(global, &loaded, &settings, &history)?;
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

    let (adopted, written) = session.commit_rebuilt(&rebuilt.archives, &rebuilt.state)?;
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

/// Replays the transcript's Compress calls onto the session's base (a
/// parent's ledger, or nothing), with a progress bar on long logs.
fn replay(
    global: &Global,
    loaded: &Loaded,
    settings: &settings::Settings,
    history: &[CoreMessage],
) -> Result<Rebuilt, CliError> {
    let session = &loaded.session;
    let base = base_state(loaded)?;
    let root = fs::canonicalize(&session.dir)
        .unwrap_or_else(|_| session.dir.clone())
        .to_string_lossy()
        .into_owned();
    let now = clock::now();
    let created = clock::rfc3339(now);
    let bar = progress(global, recorded_calls(history).len() as u64);
    let rebuilt = rebuild(&RebuildInput {
        history,
        base: &base,
        config: &settings.for_host(&base.host, Some(loaded.transcript.format)),
        recorded: &loaded.transcript.recorded(),
        archive_root: &root,
        now,
        created: &created,
        on_step: &|n| bar.set_position(n as u64 + 1),
    });
    bar.finish_and_clear();
    Ok(rebuilt)
}

/// The state a session lost, from the transcript's records: when the
/// session has no state.json but the transcript records Compress calls
/// that made blocks, the state is rebuilt (and, with `write`, saved with its
/// archives) before the command goes on, and one line on stderr says so.
/// `None` when there is a state, or nothing to rebuild.
fn recover(
    global: &Global,
    loaded: &Loaded,
    settings: &settings::Settings,
    write: bool,
) -> Result<Option<CompressionState>, CliError> {
    let session = &loaded.session;
    if session.state_path().exists() {
        return Ok(None);
    }
    let history = loaded.transcript.cores();
    let calls = recorded_calls(&history);
    if !calls
        .iter()
        .any(|c| c.panel.as_deref().is_some_and(|p| block_count(p) > 0))
    {
        return Ok(None);
    }
    let rebuilt = replay(global, loaded, settings, &history)?;
    if write {
        session.commit_rebuilt(&rebuilt.archives, &rebuilt.state)?;
    }
    if !global.quiet {
        let _ = writeln!(
            std::io::stderr(),
            "noa: {} had no state: rebuilt it from the {} Compress call(s) the transcript records ({} block(s)){}",
            session.dir.display(),
            calls.len(),
            rebuilt.state.blocks.len(),
            if write { "" } else { "; not saved" },
        );
    }
    Ok(Some(rebuilt.state))
}

/// The state a command works on: the session's own (or a parent's), or,
/// when it was lost, the one the transcript's records rebuild.
pub fn state_for(
    global: &Global,
    loaded: &Loaded,
    settings: &settings::Settings,
    write: bool,
) -> Result<CompressionState, CliError> {
    let state = session_state(loaded)?;
    // A ledger inherited from a parent already holds what the shared part
    // of the log made.
    if !state.blocks.is_empty() || loaded.session.state_path().exists() {
        report_unknown_calls(global, loaded, &state);
        return Ok(state);
    }
    Ok(recover(global, loaded, settings, write)?.unwrap_or(state))
}

/// Says so when the transcript records Compress calls that made blocks the
/// state knows nothing of: the state is not the one this log built.
fn report_unknown_calls(global: &Global, loaded: &Loaded, state: &CompressionState) {
    if global.quiet {
        return;
    }
    let known = |id: &str| {
        state.host.applied.contains_key(id) || state.blocks.iter().any(|b| b.compress_call_id == id)
    };
    let unknown: Vec<&str> = loaded
        .transcript
        .messages
        .iter()
        .flat_map(|m| &m.blocks)
        .map(|b| &b.core)
        .filter(|m| {
            m.content_type == ContentType::ToolResult
                && m.tool_name == COMPRESS_TOOL
                && block_count(&m.text) > 0
                && !known(&m.tool_call_id)
        })
        .map(|m| m.tool_call_id.as_str())
        .collect();
    if let Some(first) = unknown.first() {
        let _ = writeln!(
            std::io::stderr(),
            "noa: warning: {} does not know {} Compress call(s) the transcript records as applied ({first}{}); `noa rebuild --check` lists the differences",
            loaded.session.state_path().display(),
            unknown.len(),
            if unknown.len() > 1 { ", …" } else { "" },
        );
    }
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
