//! What a command prints beside its answer: warnings on stderr, and the
//! output the user named with `-o`, or stdout.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::CliError;
use super::args::Global;
use crate::store::{StagedOutput, stage_output};

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

/// Refuses an `-o` path whose folder does not exist, before anything is
/// read or written: found only at the end, it would fail after the state
/// was saved.
pub fn check_output(output: Option<&PathBuf>) -> Result<(), CliError> {
    let Some(path) = output else {
        return Ok(());
    };
    let folder = path.parent().filter(|p| !p.as_os_str().is_empty());
    match folder {
        Some(f) if !f.is_dir() => Err(CliError::Usage(format!(
            "-o {}: the folder {} does not exist; make it first, or name a file in a folder that does",
            path.display(),
            f.display()
        ))),
        _ => Ok(()),
    }
}

/// Writes bytes to the output the user named (atomically when it is a
/// regular file, straight through when it is a device or FIFO: see
/// [`crate::store::write_output`]), or to stdout.
pub fn emit(output: Option<&PathBuf>, bytes: &[u8]) -> Result<(), CliError> {
    stage(output, bytes)?.put(bytes)
}

/// Output made ready by [`stage`], put where it goes by [`Staged::put`].
pub enum Staged<'p> {
    /// The file named, and what was readied for it.
    File(&'p Path, StagedOutput<'p>),
    /// Stdout, written when put.
    Stdout,
}

/// [`emit`] but for the last step, that makes the bytes seen (see
/// [`crate::store::stage_output`]): stdout is written only when put.
pub fn stage<'p>(output: Option<&'p PathBuf>, bytes: &[u8]) -> Result<Staged<'p>, CliError> {
    match output {
        Some(p) => stage_output(p, bytes)
            .map(|staged| Staged::File(p, staged))
            .map_err(|source| io_error(p, source)),
        None => Ok(Staged::Stdout),
    }
}

impl Staged<'_> {
    /// Makes `bytes`, the ones staged, seen: a file put in place, or
    /// stdout written.
    pub fn put(self, bytes: &[u8]) -> Result<(), CliError> {
        match self {
            Staged::File(p, staged) => staged.put(bytes).map_err(|source| io_error(p, source)),
            Staged::Stdout => {
                let mut out = io::stdout().lock();
                out.write_all(bytes)
                    .and_then(|_| out.flush())
                    .map_err(|source| io_error(Path::new("<stdout>"), source))
            }
        }
    }
}

/// The error for `path` that `error` makes.
fn io_error(path: &Path, error: io::Error) -> CliError {
    CliError::Io {
        path: path.to_path_buf(),
        error,
    }
}
