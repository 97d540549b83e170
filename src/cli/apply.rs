//! `noa apply`: a Compress call becomes blocks, archives, and a panel.

use std::collections::HashMap;
use std::fs;
use std::io::{Read, Write};

use serde_json::json;

use super::args::{ApplyArgs, Global};
use super::clock;
use super::input::{load, warn};
use super::{CliError, Exit};
use super::{rebuild, settings};
use crate::engine::COMPRESS_TOOL;
use crate::engine::{self, ApplyInput, ApplyOutcome, NO_RANGES};
use crate::engine::{AppliedCall, CompressionState};
use crate::engine::{ContentType, CoreMessage, panel};
use crate::engine::{ParseKind, ParsedArgs, parse_compress_args};
use crate::engine::{TurnInput, project};
use crate::store::{SessionDir, SessionLock};

/// The shape the model should send, with placeholders that cannot be taken
/// for live refs.
const EXPECTED_SHAPE: &str = r#"{"topic": "<short label>", "content": [{"startId": "<first ref>", "endId": "<last ref>", "summary": "<your summary>"}]}"#;

/// Runs `noa apply`.
pub fn run(global: &Global, args: &ApplyArgs) -> Result<Exit, CliError> {
    if args.transcript.as_os_str() == "-"
        && args.args.as_ref().is_some_and(|a| a.as_os_str() == "-")
    {
        return Err(CliError::Usage(
            "the transcript and --args cannot both come from stdin; put one of them in a file"
                .into(),
        ));
    }
    let loaded = load(global, &args.transcript)?;
    let (t, session) = (&loaded.transcript, &loaded.session);
    let history = t.cores();
    let (raw, call_id, cut) = find_call(&history, args)?;

    session.create()?;
    let _lock = SessionLock::acquire(&session.dir)?;
    let settings = settings::load(global, Some(&args.transcript))?;
    let mut state = rebuild::state_for(global, &loaded, &settings, true)?;
    if let Some(done) = state
        .host
        .applied
        .get(&call_id)
        .filter(|_| !call_id.is_empty())
    {
        // A retry of a call already applied: the same answer, nothing changed.
        print_outcome(
            args.json,
            &done.panel,
            json!({"panel": done.panel, "call_id": call_id, "applied_before": true}),
        )?;
        warn(global, &t.warnings);
        return Ok(if done.rejected {
            Exit::Rejected
        } else {
            Exit::Success
        });
    }
    let config = settings.for_host(&state.host, Some(t.format));
    // The view the model saw: the same projection, on a copy of the state so
    // pacing and host counters are not counted twice. Refs it hands out stay.
    let view_of = |s: &CompressionState| {
        let mut scratch = s.clone();
        let p = project(
            &mut scratch,
            &TurnInput {
                history: &history[..cut],
                config: &config,
                input_tokens: None,
                recorded: &t.recorded(),
                sections: &settings.sections,
                force_nudge: false,
                keep_all: true,
            },
        );
        (p, scratch)
    };
    let (seen, scratch) = view_of(&state);
    state.message_refs = scratch.message_refs;
    state.token_snapshot = scratch.token_snapshot;

    let parsed = parse_compress_args(&raw);
    let key = dead_key(&parsed);
    let outcome = if !parsed.ok && !asks_nothing(&parsed) {
        unreadable(&state, &parsed)
    } else if state.host.dead_ranges.get(&key).copied().unwrap_or(0) >= 1 {
        refused_repeat(&state)
    } else {
        let originals: HashMap<&str, &CoreMessage> =
            history.iter().map(|m| (m.id.as_str(), m)).collect();
        let root = absolute(session);
        let now = clock::now();
        let created = clock::rfc3339(now);
        engine::apply(&ApplyInput {
            ranges: &parsed.ranges,
            view: &seen.view,
            originals: &originals,
            state: &state,
            config: &config,
            call_id: &call_id,
            archive_root: &root,
            created: &created,
            now,
            replay: false,
        })
    };

    let mut outcome = outcome;
    if parsed.ok {
        outcome.warnings.extend(
            parsed
                .invalid_reasons
                .iter()
                .map(|r| format!("Ignored an entry: {r}.")),
        );
    }
    if parsed.repaired() && !parsed.ranges.is_empty() {
        outcome.warnings.push(format!(
            "The arguments needed repair ({}); send plain JSON next time.",
            parsed.repairs.join(", ")
        ));
    }
    let written = write_archives(session, &outcome)?;
    let mut next = outcome.state.clone();
    let (after, reclaimed) = if outcome.created.is_empty() {
        (seen.measured, 0)
    } else {
        let now = view_of(&next).0;
        let reclaimed = panel::reclaimed_by_call(
            outcome.created.iter().map(|(b, _)| b),
            &next.blocks,
            &history,
            &now.view,
            &|t| config.count(t),
        );
        (now.measured, reclaimed)
    };
    record_attempt(&mut next, &outcome, key);
    let text = panel::answer(&outcome, seen.measured, after, reclaimed);
    if !call_id.is_empty() {
        next.host.applied.insert(
            call_id.clone(),
            AppliedCall {
                rejected: outcome.created.is_empty(),
                panel: text.clone(),
            },
        );
    }
    if let Err(e) = session.save(&next) {
        remove(&written);
        return Err(e.into());
    }

    let blocks: Vec<_> = outcome
        .created
        .iter()
        .map(|(b, _)| json!({"id": b.block_id, "tier": b.tier, "start": b.start_ref, "end": b.end_ref, "archive": b.archive_path, "tokens": b.compressed_tokens}))
        .collect();
    print_outcome(
        args.json,
        &text,
        json!({
            "panel": text, "call_id": call_id, "created": blocks, "errors": outcome.errors,
            "warnings": outcome.warnings, "parse": parsed.kind.as_str(), "repairs": parsed.repairs,
            "tokens_before": seen.measured, "tokens_after": after,
        }),
    )?;
    warn(global, &t.warnings);
    Ok(if outcome.created.is_empty() {
        Exit::Rejected
    } else {
        Exit::Success
    })
}

/// Prints the panel, or with `--json` the report object that holds it.
fn print_outcome(json: bool, panel: &str, report: serde_json::Value) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    let printed = if json {
        writeln!(out, "{report}")
    } else {
        writeln!(out, "{panel}")
    };
    printed.map_err(|source| CliError::Io {
        path: "<stdout>".into(),
        source,
    })
}

/// The raw arguments, the call id, and how much of the history the model
/// had seen when it made the call (everything before the call's message).
fn find_call(
    history: &[CoreMessage],
    args: &ApplyArgs,
) -> Result<(String, String, usize), CliError> {
    if let Some(path) = &args.args {
        let mut raw = String::new();
        if path.as_os_str() == "-" {
            std::io::stdin()
                .read_to_string(&mut raw)
                .map_err(|source| CliError::Io {
                    path: "<stdin>".into(),
                    source,
                })?;
        } else {
            raw = fs::read_to_string(path).map_err(|source| CliError::Io {
                path: path.clone(),
                source,
            })?;
        }
        return Ok((raw, String::new(), history.len()));
    }
    let answered: std::collections::HashSet<&str> = history
        .iter()
        .filter(|m| m.content_type == ContentType::ToolResult)
        .map(|m| m.tool_call_id.as_str())
        .collect();
    let position = history.iter().rposition(|m| {
        m.content_type == ContentType::ToolCall
            && m.tool_name == COMPRESS_TOOL
            && match &args.call_id {
                Some(id) => m.tool_call_id == *id,
                None => !answered.contains(m.tool_call_id.as_str()),
            }
    });
    let Some(i) = position else {
        return Err(CliError::Usage(match &args.call_id {
            Some(id) => format!("no Compress call with id {id:?} in the transcript"),
            None => "no Compress call without a result in the transcript; name one with --call-id or pass --args".into(),
        }));
    };
    // The model saw everything before the call (see `RecordedCall::cut`).
    Ok((history[i].text.clone(), history[i].tool_call_id.clone(), i))
}

/// A call with no ranges at all (empty arguments or an empty list): it asks
/// for nothing, which is answered but counts neither way.
fn asks_nothing(p: &ParsedArgs) -> bool {
    matches!(p.kind, ParseKind::EmptyInput)
        || (matches!(p.kind, ParseKind::NoValidRanges) && p.invalid_items == 0)
}

/// The outcome for arguments that could not be read at all.
fn unreadable(state: &CompressionState, parsed: &ParsedArgs) -> ApplyOutcome {
    let mut why = format!(
        "Could not read the Compress arguments ({}).",
        parsed.kind.as_str()
    );
    for r in &parsed.invalid_reasons {
        why.push(' ');
        why.push_str(r);
        why.push('.');
    }
    why.push_str(" Expected: ");
    why.push_str(EXPECTED_SHAPE);
    ApplyOutcome::rejected(state, vec![why], Vec::new(), false)
}

/// The outcome for a batch that already failed once, unchanged.
fn refused_repeat(state: &CompressionState) -> ApplyOutcome {
    let live: Vec<String> = state
        .blocks
        .iter()
        .filter(|b| b.active)
        .map(|b| {
            format!("{}(T{})={}–{}", b.block_id, b.tier, b.start_ref, b.end_ref).replace(")=", ") ")
        })
        .collect();
    let mut why = "These exact ranges already failed and would fail again; do not resend them. Pick ranges from the current view".to_string();
    if live.is_empty() {
        why.push('.');
    } else {
        why.push_str(&format!(
            ", or consolidate live blocks: {}.",
            live.join(", ")
        ));
    }
    ApplyOutcome::rejected(state, vec![why], Vec::new(), true)
}

/// The identity of a batch for the repeat guard: its ends, sorted.
fn dead_key(parsed: &ParsedArgs) -> String {
    let mut ends: Vec<String> = parsed
        .ranges
        .iter()
        .map(|r| {
            format!(
                "{}..{}",
                r.start.trim().to_lowercase(),
                r.end.trim().to_lowercase()
            )
        })
        .collect();
    ends.sort();
    ends.join(",")
}

/// Updates the host counters: a success clears them; a failure counts, and a
/// failure of the ranges themselves marks the batch so a repeat is refused.
fn record_attempt(state: &mut CompressionState, outcome: &ApplyOutcome, key: String) {
    if !outcome.created.is_empty() {
        state.host.consecutive_failures = 0;
        state.host.dead_ranges.clear();
        return;
    }
    if outcome.errors.iter().any(|e| e == NO_RANGES) {
        return;
    }
    state.host.consecutive_failures += 1;
    if outcome.ranges_at_fault && !key.is_empty() {
        *state.host.dead_ranges.entry(key).or_insert(0) += 1;
    }
}

/// Writes every archive before the state that names them; on any failure
/// removes those already written and reports it.
fn write_archives(
    session: &SessionDir,
    outcome: &ApplyOutcome,
) -> Result<Vec<std::path::PathBuf>, CliError> {
    let mut written = Vec::new();
    for a in &outcome.archives {
        match session.write(&a.rel, a.contents.as_bytes()) {
            Ok(path) => written.push(path),
            Err(e) => {
                remove(&written);
                return Err(e.into());
            }
        }
    }
    Ok(written)
}

fn remove(written: &[std::path::PathBuf]) {
    for p in written {
        let _ = fs::remove_file(p);
    }
}

/// The session directory as an absolute path, for archive pointers the model
/// can open from anywhere.
fn absolute(session: &SessionDir) -> String {
    let dir = fs::canonicalize(&session.dir).unwrap_or_else(|_| session.dir.clone());
    dir.to_string_lossy().into_owned()
}
