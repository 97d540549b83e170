//! The `noa` command line: parse arguments, run a command, report, exit.

#[cfg(target_os = "linux")]
pub mod alloc;
mod apply;
mod args;
mod batch;
mod clock;
mod completions;
mod context;
mod exit;
mod hooks;
mod inspect;
mod materialize;
mod output;
mod project;
mod prompt;
mod ranges;
mod rebuild;
mod settings;

use std::io::{self, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use miette::Diagnostic;
use thiserror::Error;

pub use args::Cli;
pub use exit::Exit;
pub use hooks::huge_pages_off;

use crate::formats::ReadError;
use crate::store::{ErrorKind, StoreError};

/// Everything a command can fail with, each mapped to an exit code.
#[derive(Debug, Error, Diagnostic)]
pub enum CliError {
    /// The transcript could not be read.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Read(#[from] ReadError),
    /// The session's files could not be read or written.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Store(StoreError),
    /// The arguments do not make sense together.
    #[error("{0}")]
    #[diagnostic(code(noa::usage))]
    Usage(String),
    /// A file could not be read or written.
    #[error("{path}: {error}")]
    #[diagnostic(code(noa::io))]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause, said in the message (not a source, which would say
        /// it a second time).
        error: io::Error,
    },
}

/// A store error, as the command line says it: the transcript's own
/// failures as if the command line had read it (the file and place named
/// in a JSON error), the session's as the store's.
impl From<StoreError> for CliError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Transcript(e) => CliError::Read(e),
            StoreError::TranscriptIo { path, error } => CliError::Io { path, error },
            e => CliError::Store(e),
        }
    }
}

/// An error as `--json` prints it.
#[derive(serde::Serialize)]
struct ErrorReport {
    code: Option<String>,
    exit: u8,
    message: String,
    file: Option<String>,
    line: Option<usize>,
    column: Option<usize>,
    help: Option<String>,
}

impl CliError {
    /// The exit code: a store error by its kind, not by its variant, so a
    /// variant added to the store is sorted where it is declared.
    fn exit(&self) -> Exit {
        match self {
            CliError::Read(_) | CliError::Usage(_) => Exit::BadInput,
            CliError::Store(e) => match e.kind() {
                ErrorKind::BadInput => Exit::BadInput,
                ErrorKind::Failure => Exit::Failure,
            },
            CliError::Io { .. } => Exit::Failure,
        }
    }

    /// The error as one JSON object, for a host that asked for JSON:
    /// code, message, file, line, column, help (null where they do not apply).
    fn to_json(&self) -> serde_json::Value {
        use miette::Diagnostic;
        let (file, line, column) = match self {
            CliError::Read(r) => {
                let (file, line, column) = r.location();
                (Some(file.to_string()), line, column)
            }
            CliError::Io { path, .. } => (Some(path.display().to_string()), None, None),
            CliError::Store(_) | CliError::Usage(_) => (None, None, None),
        };
        let report = ErrorReport {
            code: self.code().map(|c| c.to_string()),
            exit: self.exit() as u8,
            message: self.to_string(),
            file,
            line,
            column,
            help: self.help().map(|h| h.to_string()),
        };
        serde_json::to_value(report).expect("a report always serializes")
    }

    fn is_broken_pipe(&self) -> bool {
        matches!(self, CliError::Io { error: source, .. } if source.kind() == io::ErrorKind::BrokenPipe)
    }
}

/// Runs the command line and returns the process exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let color = io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let _ = miette::set_hook(Box::new(move |_| {
        Box::new(
            miette::MietteHandlerOpts::new()
                .color(color)
                .unicode(color)
                .build(),
        )
    }));
    let json = wants_json(&cli.command);
    match run(cli) {
        Ok(code) => code.into(),
        Err(e) if e.is_broken_pipe() => Exit::Success.into(),
        Err(e) => {
            let code = e.exit();
            let _ = if json {
                writeln!(io::stderr(), "{}", e.to_json())
            } else {
                writeln!(io::stderr(), "{:?}", miette::Report::new(e))
            };
            code.into()
        }
    }
}

/// Whether the command was asked for JSON, so its errors come as JSON too.
fn wants_json(command: &args::Command) -> bool {
    use args::Command as C;
    match command {
        C::Project(a) => a.report == args::ReportArg::Json,
        C::Apply(a) => a.json,
        C::Rebuild(a) => a.json,
        C::Ranges(a) => a.json,
        C::Inspect(a) => a.json,
        C::Materialize(_) | C::Prompt(_) | C::Completions(_) => false,
    }
}

fn run(cli: Cli) -> Result<Exit, CliError> {
    match cli.command {
        args::Command::Project(a) => project::run(&cli.global, &a),
        args::Command::Apply(a) => apply::run(&cli.global, &a),
        args::Command::Materialize(a) => materialize::run(&cli.global, &a),
        args::Command::Ranges(a) => ranges::run(&cli.global, &a),
        args::Command::Prompt(a) => prompt::run(&cli.global, &a),
        args::Command::Rebuild(a) => rebuild::run(&cli.global, &a),
        args::Command::Inspect(a) => inspect::run(&cli.global, &a),
        args::Command::Completions(a) => completions::run(&a),
    }
}
