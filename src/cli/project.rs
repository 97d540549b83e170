//! `noa project`: one turn's view.

use std::io::Write;

use serde_json::json;

use super::args::{Global, ProjectArgs, ReportArg, ViewArg};
use super::input::{emit, load, warn};
use super::{CliError, Exit};
use crate::engine::config::Config;
use crate::engine::state::CompressionState;
use crate::engine::tokens;
use crate::engine::turn;
use crate::formats::{ViewFormat, reassemble};
use crate::store::SessionLock;

/// Runs `noa project`.
pub fn run(global: &Global, args: &ProjectArgs) -> Result<Exit, CliError> {
    let loaded = load(global, &args.transcript)?;
    let (t, session) = (&loaded.transcript, &loaded.session);
    let to = args.to.map_or(t.format.view_format(), view_format);

    let _lock = if args.dry_run {
        None
    } else {
        session.create()?;
        Some(SessionLock::acquire(&session.dir)?)
    };
    let mut state = session
        .load()?
        .unwrap_or_else(|| CompressionState::new(&session.session));
    let history = t.cores();
    let projection = turn::project(&mut state, &history, &Config::for_window(global.limit));
    let (messages, conversion_warnings) = reassemble(t, &projection.view, to);

    let mut bytes = Vec::new();
    for m in &messages {
        serde_json::to_writer(&mut bytes, m).expect("a JSON value always serializes");
        bytes.push(b'\n');
    }
    if !args.dry_run {
        state.host.last_view_tokens = projection.tokens;
        session.save(&state)?;
    }
    emit(args.output.as_ref(), &bytes)?;

    let mut warnings = t.warnings.clone();
    warnings.extend(conversion_warnings);
    warn(global, &warnings);
    if !global.quiet {
        let state_path = (!args.dry_run).then(|| session.state_path().display().to_string());
        let line = match args.report {
            ReportArg::Json => json!({
                "format": t.format.name(),
                "view_format": to.name(),
                "history_messages": history.len(),
                "view_messages": messages.len(),
                "left_out_unpaired": projection.dropped_unpaired,
                "tokens": projection.tokens,
                "limit": global.limit,
                "new_refs": projection.new_refs,
                "state": state_path,
                "warnings": warnings,
            })
            .to_string(),
            ReportArg::Text => format!(
                "noa: {} → {} · {} messages in view ({} blocks, {} left out unpaired) · {} tokens ({}% of {}) · {} new refs{}",
                t.format.name(),
                to.name(),
                messages.len(),
                projection.view.len(),
                projection.dropped_unpaired,
                tokens::format(projection.tokens),
                projection.tokens * 100 / global.limit.max(1),
                tokens::format(global.limit),
                projection.new_refs,
                state_path
                    .map(|p| format!(" · state {p}"))
                    .unwrap_or_else(|| " · dry run, no state written".into()),
            ),
        };
        let _ = writeln!(std::io::stderr(), "{line}");
    }
    Ok(Exit::Success)
}

fn view_format(v: ViewArg) -> ViewFormat {
    match v {
        ViewArg::Chat => ViewFormat::Chat,
        ViewArg::Anthropic => ViewFormat::Anthropic,
        ViewArg::Responses => ViewFormat::Responses,
    }
}
