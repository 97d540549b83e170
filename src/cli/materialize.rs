//! `noa materialize`: the compression written into a plain transcript, in
//! the session it came from or, with `--new-session`, as a new session the
//! host can resume beside the original.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use super::args::{Global, MaterializeArgs};
use super::batch::{self, Done, Lines, Named};
use super::context::Context;
use super::output::{check_output, emit};
use super::{CliError, Exit, clock};
use crate::engine::resumable_view;
use crate::formats::{self, Format, Transcript};
use crate::store::Purpose;

/// Where a materialized transcript goes.
#[derive(Debug, Clone)]
enum Target {
    /// Stdout.
    Stdout,
    /// The file `-o` names.
    File(PathBuf),
    /// Into the directory `-o` names: under the transcript's own file name,
    /// or the new session's (see [`Session`]).
    Into(PathBuf),
}

/// Which session the copy belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Session {
    /// The original's: the copy stands in for it.
    Same,
    /// A new one, with an id of its own (`--new-session`).
    New,
}

/// Runs `noa materialize` on one transcript, to stdout, `-o FILE` or into
/// `-o DIR`; or on each of many, into `-o DIR`. Reads the state
/// (rebuilding a lost one in memory) but writes none.
pub fn run(global: &Global, args: &MaterializeArgs) -> Result<Exit, CliError> {
    let session = match args.new_session {
        true => Session::New,
        false => Session::Same,
    };
    match batch::named(&args.transcripts)? {
        Named::One(path) => {
            let target = match args.output.as_deref() {
                None => Target::Stdout,
                Some(dir) if dir.is_dir() => {
                    Target::Into(output_dir(Some(dir), std::slice::from_ref(&path), session)?)
                }
                Some(file) => {
                    check_output(Some(&file.to_path_buf()))?;
                    Target::File(file.to_path_buf())
                }
            };
            materialize(global, &path, &target, session)?.print(global)
        }
        Named::Many(paths) => {
            batch::refuse(global.session.as_deref().map(|_| "--session"), "session")?;
            let target = Target::Into(output_dir(args.output.as_deref(), &paths, session)?);
            let each = |g: &Global, p: &Path| materialize(g, p, &target, session);
            Ok(batch::run_each(
                global,
                "materialize",
                Lines::Text,
                &paths,
                each,
            ))
        }
    }
}

/// Writes the transcript at `path` with its compression baked in to
/// `target`, in its own session or a new one; a note on stderr says what
/// was written.
fn materialize(
    global: &Global,
    path: &Path,
    target: &Target,
    session: Session,
) -> Result<Done, CliError> {
    let cx = Context::open(global, path, Purpose::Records)?;
    let t = cx.session.transcript();
    if session == Session::New && t.session_id.is_none() {
        return Err(CliError::Usage(format!(
            "{}: a {} log names no session of its own; --new-session is for Claude Code sessions and Codex rollouts",
            path.display(),
            t.format.name()
        )));
    }
    let state = cx.state()?;
    let view = resumable_view(&state, cx.session.history(), &cx.config(&state));
    let now = clock::now();
    let new_id = (session == Session::New).then(|| formats::new_session_id(t, &view, now));
    let records = match &new_id {
        Some(id) => formats::materialize_new_session(t, &view, id),
        None => formats::materialize(t, &view),
    };
    let mut bytes = Vec::new();
    for record in &records {
        serde_json::to_writer(&mut bytes, record).expect("a JSON value always serializes");
        bytes.push(b'\n');
    }
    let out = match target {
        Target::Stdout => None,
        Target::File(file) => Some(file.clone()),
        Target::Into(dir) => Some(dir.join(file_name(path, t, new_id.as_deref(), now))),
    };
    emit(out.as_ref(), &bytes)?;
    let written = Written {
        out: out.as_deref(),
        records: records.len(),
        blocks: state.blocks.iter().filter(|b| b.active).count(),
        had_state: cx.session.dir().state_path().exists(),
        new_id: new_id.as_deref(),
    };
    Ok(Done {
        notes: vec![written.note(t)],
        warnings: cx.session.warnings(),
        ..Done::printed(Exit::Success)
    })
}

/// What a materialize wrote, for its note on stderr.
struct Written<'a> {
    /// The file; stdout when none.
    out: Option<&'a Path>,
    records: usize,
    /// Active blocks baked in.
    blocks: usize,
    /// Whether the session had a state on disk.
    had_state: bool,
    /// The copy's session id, when it is a new session.
    new_id: Option<&'a str>,
}

impl Written<'_> {
    /// One line: where, how much, what was baked in, and the new session.
    fn note(&self, t: &Transcript) -> String {
        let place = self
            .out
            .map_or("stdout".to_string(), |p| p.display().to_string());
        let what = match (self.blocks, self.had_state) {
            (0, false) => {
                "the session has no state, so nothing is compressed: the conversation as it is"
                    .to_string()
            }
            (0, true) => {
                "no active block, so nothing is compressed: the conversation as it is".to_string()
            }
            (n, _) => format!("{n} block(s) baked in"),
        };
        let new = match (self.new_id, t.format) {
            (Some(id), Format::ClaudeCode) => {
                format!("; new session {id} (resume it with `claude --resume {id}`)")
            }
            (Some(id), _) => format!("; new session {id} (resume it with `codex resume {id}`)"),
            (None, _) => String::new(),
        };
        format!(
            "noa materialize: wrote {} record(s) to {place}, {what}{new}",
            self.records
        )
    }
}

/// The file a transcript is written to in `-o DIR`: its own name, or for
/// a new session the name its host gives a session's log (Claude Code
/// `<id>.jsonl`; Codex `rollout-<time>-<id>.jsonl`), so the host finds it.
fn file_name(path: &Path, t: &Transcript, new_id: Option<&str>, now: i64) -> PathBuf {
    match (new_id, t.format) {
        (Some(id), Format::Codex) => {
            let time = clock::rfc3339(now).replace(':', "-");
            let time = time.trim_end_matches('Z');
            PathBuf::from(format!("rollout-{time}-{id}.jsonl"))
        }
        (Some(id), _) => PathBuf::from(format!("{id}.jsonl")),
        (None, _) => PathBuf::from(path.file_name().unwrap_or(path.as_os_str())),
    }
}

/// The directory `-o` names for the outputs, checked before any is
/// written: it exists and, for copies under the transcripts' own names, no
/// two share a name and none would land on a transcript named.
fn output_dir(
    output: Option<&Path>,
    paths: &[PathBuf],
    session: Session,
) -> Result<PathBuf, CliError> {
    let usage = |why: String| Err(CliError::Usage(why));
    let Some(dir) = output.filter(|d| d.is_dir()) else {
        return usage(
            "materialize over several transcripts writes one file each: name an existing directory with -o DIR".into(),
        );
    };
    // A new session's file is named by its new id.
    if session == Session::New {
        return Ok(dir.to_path_buf());
    }
    let inputs: HashSet<PathBuf> = paths.iter().filter_map(|p| p.canonicalize().ok()).collect();
    let mut names = HashSet::new();
    for p in paths {
        let Some(name) = p.file_name() else {
            return usage(format!("{}: not a transcript file", p.display()));
        };
        if !names.insert(name) {
            return usage(format!(
                "two transcripts are named {}: their outputs in {} would be one file",
                name.to_string_lossy(),
                dir.display()
            ));
        }
        let out = dir.canonicalize().map(|d| d.join(name));
        if out.is_ok_and(|out| inputs.contains(&out)) {
            return usage(format!(
                "-o {}: {} would be written over; name another directory, or add --new-session",
                dir.display(),
                p.display()
            ));
        }
    }
    Ok(dir.to_path_buf())
}
