//! `noa materialize`: the compression written into a plain transcript.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use super::args::{Global, MaterializeArgs};
use super::batch::{self, Done, Lines, Named};
use super::context::Context;
use super::output::{check_output, emit};
use super::{CliError, Exit};
use crate::engine::resumable_view;
use crate::formats;
use crate::store::Purpose;

/// Runs `noa materialize` on one transcript, to stdout or `-o FILE`; or
/// on each of many, into `-o DIR`, one file each under its own name.
/// Reads the state (rebuilding a lost one in memory) but writes none.
pub fn run(global: &Global, args: &MaterializeArgs) -> Result<Exit, CliError> {
    match batch::named(&args.transcripts)? {
        Named::One(path) => {
            check_output(args.output.as_ref())?;
            materialize(global, &path, args.output.as_deref())?.print(global)
        }
        Named::Many(paths) => {
            batch::refuse(global.session.as_deref().map(|_| "--session"), "session")?;
            let dir = output_dir(args.output.as_deref(), &paths)?;
            let each = |g: &Global, p: &Path| {
                let out = dir.join(p.file_name().unwrap_or(p.as_os_str()));
                materialize(g, p, Some(&out))
            };
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
/// `output`, or stdout.
fn materialize(global: &Global, path: &Path, output: Option<&Path>) -> Result<Done, CliError> {
    let cx = Context::open(global, path, Purpose::Records)?;
    let t = cx.session.transcript();
    let state = cx.state()?;
    let view = resumable_view(&state, cx.session.history(), &cx.config(&state));
    let mut bytes = Vec::new();
    for record in formats::materialize(t, &view) {
        serde_json::to_writer(&mut bytes, &record).expect("a JSON value always serializes");
        bytes.push(b'\n');
    }
    emit(output.map(Path::to_path_buf).as_ref(), &bytes)?;
    Ok(Done {
        warnings: cx.session.warnings(),
        ..Done::printed(Exit::Success)
    })
}

/// The directory `-o` names for many transcripts' outputs, checked before
/// any is written: it exists, no two transcripts share a file name, and no
/// output would land on a transcript named.
fn output_dir(output: Option<&Path>, paths: &[PathBuf]) -> Result<PathBuf, CliError> {
    let usage = |why: String| Err(CliError::Usage(why));
    let Some(dir) = output.filter(|d| d.is_dir()) else {
        return usage(
            "materialize over several transcripts writes one file each: name an existing directory with -o DIR".into(),
        );
    };
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
                "-o {}: {} would be written over; name another directory",
                dir.display(),
                p.display()
            ));
        }
    }
    Ok(dir.to_path_buf())
}
