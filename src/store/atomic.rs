//! Atomic file replacement.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::files;

/// Writes `bytes` to `path` so that readers see either the old file or the
/// whole new one: a temp file beside it is written and synced, then renamed
/// over the target, and the directory is synced so the rename survives a crash.
/// The temp file is made exclusively (see `files::make_temp`) and the
/// rename replaces the name, so a link at either name is never written
/// through.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    replace_synced(path, bytes)?;
    sync_dir(parent(path))
}

/// [`write_atomic`] but for the directory's sync, left to the caller: a
/// batch of files in one directory (a call's archives) then syncs it once,
/// not once a file.
pub fn replace_synced(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let (file, replacing) = write_beside(path, bytes)?;
    file.sync_all()?;
    replacing.finish()
}

/// `bytes` written to a new temp file beside `path` and on their way to
/// disk ([`start_writeback`]): neither synced nor in place yet, so that
/// the caller syncs and places it when the time comes.
pub fn write_beside(path: &Path, bytes: &[u8]) -> io::Result<(File, Replacing)> {
    let (mut file, replacing) = Replacing::begin(path)?;
    file.write_all(bytes)?;
    start_writeback(&file);
    Ok((file, replacing))
}

/// A new version of a file being written to this process's temp file
/// beside it (see [`files::make_temp`]), to be renamed over it when whole.
/// Dropped unfinished, the temp file is removed. The one way noa replaces a
/// file: [`write_atomic`], and the read cache, which is not synced.
pub struct Replacing {
    tmp: tempfile::TempPath,
    path: PathBuf,
}

impl Replacing {
    /// The temp file for a new version of `path`, made beside it.
    pub fn begin(path: &Path) -> io::Result<(File, Replacing)> {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
        let (file, tmp) = files::make_temp(parent(path), name)?;
        let path = path.to_path_buf();
        Ok((file, Replacing { tmp, path }))
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Renames the temp file over the file, whatever its writer has made
    /// of it (synced or not); on failure the temp file is removed.
    pub fn finish(self) -> io::Result<()> {
        self.tmp.persist(&self.path).map_err(|e| e.error)
    }
}

/// Starts writing `file`'s pages out without waiting for them: a batch of
/// new files each started this way before any is synced then waits for
/// its writes together, where a file written then synced at a time waits
/// for each in turn. Only a hint: what fails shows when the file is synced.
pub fn start_writeback(file: &File) {
    #[cfg(target_os = "linux")]
    // SAFETY: the call reads no memory of ours; a bad descriptor is only an
    // error, and the file is open.
    unsafe {
        libc::sync_file_range(
            std::os::fd::AsRawFd::as_raw_fd(file),
            0,
            0,
            libc::SYNC_FILE_RANGE_WRITE,
        );
    }
    #[cfg(not(target_os = "linux"))]
    let _ = file;
}

/// Syncs a directory, so the renames into it survive a crash.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// The directory `path` is in.
pub fn parent(path: &Path) -> &Path {
    path.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn replaces_and_leaves_no_temp_file() {
        let dir = std::env::temp_dir().join(format!("noa-atomic-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let p = dir.join("state.json");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        let names: Vec<_> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("state.json")]);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_failed_write_keeps_the_old_file() {
        let dir = std::env::temp_dir().join(format!("noa-atomic-fail-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let p = dir.join("state.json");
        write_atomic(&p, b"old").unwrap();
        // A directory where the file should go makes the rename fail.
        let blocked = dir.join("blocked");
        fs::create_dir_all(blocked.join("inner")).unwrap();
        assert!(write_atomic(&blocked, b"new").is_err());
        assert_eq!(fs::read(&p).unwrap(), b"old");
        fs::remove_dir_all(&dir).unwrap();
    }
}
