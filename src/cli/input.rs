//! Reading the transcript and finding the session's directory.

use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use super::CliError;
use super::args::{FormatArg, Global};
use crate::formats::{self, BadLines, Format, Transcript};
use crate::store::SessionDir;

/// A transcript read from a file or stdin, with where its session lives.
pub struct Loaded {
    /// The transcript.
    pub transcript: Transcript,
    /// The session's directory.
    pub session: SessionDir,
}

/// Reads the transcript named on the command line and resolves its session
/// directory. Stdin needs an explicit state dir and session: noa never
/// guesses where originals are kept.
pub fn load(global: &Global, path: &Path) -> Result<Loaded, CliError> {
    let stdin = path.as_os_str() == "-";
    let (name, text) = if stdin {
        if global.state_dir.is_none() || global.session.is_none() {
            return Err(CliError::Usage(
                "reading a transcript from stdin needs --state-dir (or NOA_STATE_DIR) and --session: noa will not guess where to keep a session's state".into(),
            ));
        }
        let mut text = String::new();
        io::stdin()
            .read_to_string(&mut text)
            .map_err(|source| CliError::Io {
                path: "<stdin>".into(),
                source,
            })?;
        ("<stdin>".to_string(), text)
    } else {
        let text = fs::read_to_string(path).map_err(|source| CliError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        (path.display().to_string(), text)
    };
    let bad = if global.skip_bad_lines {
        BadLines::Skip
    } else {
        BadLines::Fail
    };
    let transcript = formats::read(&name, &text, format(global.format), bad)?;
    let session_id = global
        .session
        .clone()
        .or_else(|| transcript.session_id.clone())
        .or_else(|| path.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .ok_or_else(|| {
            CliError::Usage(format!(
                "{name}: cannot derive a session id; pass --session"
            ))
        })?;
    if session_id.is_empty()
        || session_id.contains(['/', '\\'])
        || session_id == "."
        || session_id == ".."
    {
        return Err(CliError::Usage(format!(
            "{session_id:?} cannot be a session id: it must be a plain directory name"
        )));
    }
    let base = match &global.state_dir {
        Some(d) => d.clone(),
        None => path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default()
            .join(".noa"),
    };
    Ok(Loaded {
        transcript,
        session: SessionDir::new(&base, &session_id),
    })
}

fn format(arg: FormatArg) -> Option<Format> {
    match arg {
        FormatArg::Auto => None,
        FormatArg::Chat => Some(Format::Chat),
        FormatArg::Anthropic => Some(Format::Anthropic),
        FormatArg::ClaudeCode => Some(Format::ClaudeCode),
        FormatArg::Codex => Some(Format::Codex),
    }
}

/// Prints warnings on stderr: every one with `-v`, a count otherwise.
pub fn warn(global: &Global, warnings: &[String]) {
    if global.quiet || warnings.is_empty() {
        return;
    }
    let mut err = io::stderr().lock();
    if global.verbose || warnings.len() <= 3 {
        for w in warnings {
            let _ = writeln!(err, "warning: {w}");
        }
    } else {
        let _ = writeln!(err, "warning: {}", warnings[0]);
        let _ = writeln!(
            err,
            "warning: … and {} more (-v lists them)",
            warnings.len() - 1
        );
    }
}

/// Writes bytes to a file atomically, or to stdout.
pub fn emit(output: Option<&PathBuf>, bytes: &[u8]) -> Result<(), CliError> {
    match output {
        Some(p) => crate::store::write_atomic(p, bytes).map_err(|source| CliError::Io {
            path: p.clone(),
            source,
        }),
        None => {
            let mut out = io::stdout().lock();
            out.write_all(bytes)
                .and_then(|_| out.flush())
                .map_err(|source| CliError::Io {
                    path: "<stdout>".into(),
                    source,
                })
        }
    }
}
