//! One offline command over many transcripts (`rebuild`, `inspect --json`,
//! `materialize`): each named file, or every `*.jsonl` in a named
//! directory, run one after the other, one result each, a failure in one
//! not stopping the rest.

use std::fs;
use std::io::{self, IsTerminal, Write};
use std::path::{Path, PathBuf};

use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{Map, Value};

use super::args::{Bars, Global};
use super::output::warn;
use super::{CliError, Exit};

/// The transcripts a command was named.
#[derive(Debug)]
pub enum Named {
    /// One file (or `-`): the command runs as it always has.
    One(PathBuf),
    /// Several, or a directory's: one result each.
    Many(Vec<PathBuf>),
}

/// Sorts the paths a command was given: several, or any directory (all
/// the `*.jsonl` files in it, sorted by name), make a batch, whatever the
/// directory holds, so a script gets the same shape of output every time.
pub fn named(paths: &[PathBuf]) -> Result<Named, CliError> {
    match paths {
        [one] if !one.is_dir() => Ok(Named::One(one.clone())),
        _ => {
            let mut all = Vec::new();
            for p in paths {
                if p.is_dir() {
                    all.extend(jsonl_in(p)?);
                } else {
                    all.push(p.clone());
                }
            }
            Ok(Named::Many(all))
        }
    }
}

/// The `*.jsonl` files directly in `dir`, sorted; an error when there are
/// none, which is a mistake in what was named.
fn jsonl_in(dir: &Path) -> Result<Vec<PathBuf>, CliError> {
    let io = |error| CliError::Io {
        path: dir.to_path_buf(),
        error,
    };
    let mut files = Vec::new();
    for entry in fs::read_dir(dir).map_err(io)? {
        let path = entry.map_err(io)?.path();
        if path.is_file() && path.extension().is_some_and(|e| e == "jsonl") {
            files.push(path);
        }
    }
    if files.is_empty() {
        return Err(CliError::Usage(format!(
            "{}: no *.jsonl transcript in this directory",
            dir.display()
        )));
    }
    files.sort();
    Ok(files)
}

/// Refuses an option that names one session or one file, which cannot
/// hold for many transcripts.
pub fn refuse(option: Option<&str>, what: &str) -> Result<(), CliError> {
    match option {
        Some(option) => Err(CliError::Usage(format!(
            "{option} names one {what}; with several transcripts each is its own"
        ))),
        None => Ok(()),
    }
}

/// What a command made of one transcript, for it to print alone or as one
/// result of many.
#[derive(Debug)]
pub struct Done {
    /// How it ended.
    pub exit: Exit,
    /// The result as a JSON object, when the command was asked for JSON.
    pub json: Option<Value>,
    /// The result in words for stdout, when it was not.
    pub text: Option<String>,
    /// Lines for stderr on what was done (a file written, say).
    pub notes: Vec<String>,
    /// What the read warns of.
    pub warnings: Vec<String>,
}

impl Done {
    /// What a command that printed its answer itself gives.
    pub fn printed(exit: Exit) -> Done {
        Done {
            exit,
            json: None,
            text: None,
            notes: Vec::new(),
            warnings: Vec::new(),
        }
    }

    /// Prints what one transcript gave, as a command named one prints it:
    /// the result on stdout, the notes and warnings on stderr.
    pub fn print(self, global: &Global) -> Result<Exit, CliError> {
        let line = match (&self.json, &self.text) {
            (Some(json), _) => Some(json.to_string()),
            (None, Some(text)) => Some(text.trim_end().to_string()),
            (None, None) => None,
        };
        if let Some(line) = line {
            writeln!(io::stdout().lock(), "{line}").map_err(|source| CliError::Io {
                path: "<stdout>".into(),
                error: source,
            })?;
        }
        self.tell(global);
        Ok(self.exit)
    }

    /// The notes and warnings on stderr.
    fn tell(&self, global: &Global) {
        if !global.quiet {
            let mut err = io::stderr().lock();
            for note in &self.notes {
                let _ = writeln!(err, "{note}");
            }
        }
        warn(global, &self.warnings);
    }
}

/// How a batch prints each result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lines {
    /// One JSON object a transcript on stdout, failures included.
    Json,
    /// The command's words, each result headed by its transcript.
    Text,
}

/// Runs `one` on each transcript of `paths` in turn, printing each result
/// as it comes, with a progress bar on a terminal. The exit code is the
/// most severe any transcript gave: 3 (I/O) over 2 (bad input) over 1
/// (rejected, or states that differ) over 0.
pub fn run_each(
    global: &Global,
    verb: &str,
    lines: Lines,
    paths: &[PathBuf],
    mut one: impl FnMut(&Global, &Path) -> Result<Done, CliError>,
) -> Exit {
    let bar = progress(global, verb, paths.len() as u64);
    // Each transcript's own bars (a long replay, a large read) would draw
    // over the batch's.
    let mut inner = global.clone();
    inner.bars = Bars::BatchOnly;
    let (mut worst, mut failed) = (Exit::Success, 0);
    for path in paths {
        let result = one(&inner, path);
        let exit = match &result {
            Ok(done) => done.exit,
            Err(e) => e.exit(),
        };
        failed += usize::from(result.is_err());
        if exit as u8 > worst as u8 {
            worst = exit;
        }
        bar.suspend(|| show(global, lines, path, result));
        bar.inc(1);
    }
    bar.finish_and_clear();
    if !global.quiet && lines == Lines::Text {
        let _ = writeln!(
            io::stderr(),
            "noa {verb}: {} transcript(s), {} done, {failed} failed",
            paths.len(),
            paths.len() - failed
        );
    }
    worst
}

/// Prints one transcript's result in a batch.
fn show(global: &Global, lines: Lines, path: &Path, result: Result<Done, CliError>) {
    let name = path.display().to_string();
    let mut out = io::stdout().lock();
    match (result, lines) {
        (Ok(done), Lines::Json) => {
            let mut line = Map::new();
            line.insert("transcript".into(), name.into());
            line.insert("ok".into(), true.into());
            if let Some(Value::Object(result)) = &done.json {
                for (k, v) in result {
                    line.entry(k.clone()).or_insert_with(|| v.clone());
                }
            }
            let _ = writeln!(out, "{}", Value::Object(line));
            done.tell(global);
        }
        (Ok(done), Lines::Text) => {
            if let Some(text) = &done.text {
                let _ = writeln!(out, "{name}: {}", text.trim_end());
            }
            done.tell(global);
        }
        (Err(e), Lines::Json) => {
            let mut line = Map::new();
            line.insert("transcript".into(), name.into());
            line.insert("ok".into(), false.into());
            line.insert("error".into(), e.to_string().into());
            line.insert("exit".into(), (e.exit() as u8).into());
            // The rest of the error as a command named one gives it.
            if let Value::Object(error) = e.to_json() {
                for (k, v) in error {
                    if k != "message" {
                        line.entry(k).or_insert(v);
                    }
                }
            }
            let _ = writeln!(out, "{}", Value::Object(line));
        }
        (Err(e), Lines::Text) => {
            let code = e.exit() as u8;
            let report = miette::Report::new(e);
            let _ = writeln!(
                io::stderr(),
                "noa: {name} failed (exit {code}):\n{report:?}"
            );
        }
    }
}

/// A bar of the transcripts done, on a terminal only and not with `-q`.
fn progress(global: &Global, verb: &str, len: u64) -> ProgressBar {
    if global.quiet || !io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    let template = format!("{verb} {{bar:30}} {{pos}}/{{len}} transcripts");
    if let Ok(style) = ProgressStyle::with_template(&template) {
        bar.set_style(style);
    }
    bar
}
