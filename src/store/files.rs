//! Opening files in a session directory without following links.
//!
//! The state dir sits beside the transcript by default, where others may
//! write: a link planted in place of a log or a temp file would aim noa's
//! writes at whatever it points to. So every file noa opens there is opened
//! with `O_NOFOLLOW` (a link is refused, `ELOOP`), every file it makes is
//! made exclusively (`O_EXCL`: nothing, not even a link, may stand in its
//! place), and a rename only ever replaces the name itself, never what a
//! link there points to.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

/// Opens the existing file at `path` to read, refusing a link.
pub fn open_read(path: &Path) -> io::Result<File> {
    no_follow(OpenOptions::new().read(true)).open(path)
}

/// Opens the existing file at `path` to write in place, refusing a link.
pub fn open_write(path: &Path) -> io::Result<File> {
    no_follow(OpenOptions::new().write(true)).open(path)
}

/// Opens `path` to write, making it if it is not there, refusing a link:
/// for the lock file, which is never truncated.
pub fn open_or_make(path: &Path) -> io::Result<File> {
    no_follow(OpenOptions::new().write(true).create(true).truncate(false)).open(path)
}

/// Makes a new file at `path` to read and write; fails if anything, a link
/// included, is there already.
pub fn make_new(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(path)
}

/// The name of this process's temp file for `name` in the same directory:
/// `.NAME.PID.tmp`. The process id says whose it is, so a later run can tell
/// a dead run's leftovers from a live one's.
pub fn temp_name(name: &str) -> String {
    format!(".{name}.{}.tmp", std::process::id())
}

/// Makes this process's temp file for `name` in `dir` (see [`temp_name`]):
/// a leftover of the same name (a dead process that had this id) is removed
/// first, which removes a link itself, never its target, and the file is
/// then made exclusively. The file is removed again when the returned path
/// is dropped before it is persisted: a write that fails anywhere leaves
/// nothing behind.
pub fn make_temp(dir: &Path, name: &str) -> io::Result<(File, tempfile::TempPath)> {
    let path = dir.join(temp_name(name));
    #[cfg(test)]
    if let Some(e) = faults::injected(&path) {
        return Err(e);
    }
    match fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let prefix = format!(".{name}.{}", std::process::id());
    let mut builder = tempfile::Builder::new();
    // The whole name is the prefix and suffix: no random part, so the
    // sweep can read whose the file is.
    builder.prefix(&prefix).suffix(".tmp").rand_bytes(0);
    // As a file made the plain way: what the umask leaves of read and write
    // for all, not the owner alone.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        builder.permissions(fs::Permissions::from_mode(0o666));
    }
    Ok(builder.tempfile_in(dir)?.into_parts())
}

/// Whether `e` is the refusal of a link by [`open_read`] or [`open_write`].
pub fn is_link(e: &io::Error) -> bool {
    #[cfg(unix)]
    {
        e.raw_os_error() == Some(libc::ELOOP)
    }
    #[cfg(not(unix))]
    {
        e.kind() == io::ErrorKind::InvalidInput && e.to_string().contains("symbolic link")
    }
}

/// The error of a link refused where a file would be made, as
/// [`is_link`] knows it.
pub fn link_refused() -> io::Error {
    #[cfg(unix)]
    {
        io::Error::from_raw_os_error(libc::ELOOP)
    }
    #[cfg(not(unix))]
    {
        io::Error::new(io::ErrorKind::InvalidInput, "a symbolic link")
    }
}

#[cfg(unix)]
fn no_follow(options: &mut OpenOptions) -> &mut OpenOptions {
    use std::os::unix::fs::OpenOptionsExt;
    options.custom_flags(libc::O_NOFOLLOW)
}

#[cfg(not(unix))]
fn no_follow(options: &mut OpenOptions) -> &mut OpenOptions {
    options
}

/// Removes the temp files in `dir` that dead runs left (see [`temp_name`]):
/// those of `.NAME.PID.tmp` whose process is gone, and, with `only` given,
/// only those of that NAME. A live process's files are left alone, and so
/// is anything else. Called by a run that holds the session's lock, or
/// about to write the file they were for.
///
/// Returns the first symbolic link among the entries it leaves, if any,
/// from the same look at the folder: noa makes none in a session
/// directory, so one there was planted, and the run that takes the lock
/// refuses the session before it writes anything, rather than at the first
/// file it would have opened through it.
pub fn sweep_temps(dir: &Path, only: Option<&str>) -> Option<PathBuf> {
    let entries = fs::read_dir(dir).ok()?;
    let mut link = None;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let dead = name.to_str().and_then(temp_parts).is_some_and(|(of, pid)| {
            only.is_none_or(|o| o == of) && pid != std::process::id() && !alive(pid)
        });
        if dead {
            let _ = fs::remove_file(entry.path());
        } else if link.is_none() && entry.file_type().is_ok_and(|t| t.is_symlink()) {
            link = Some(entry.path());
        }
    }
    link
}

/// `.NAME.PID.tmp` → (NAME, PID).
fn temp_parts(name: &str) -> Option<(&str, u32)> {
    let inner = name.strip_prefix('.')?.strip_suffix(".tmp")?;
    let (of, pid) = inner.rsplit_once('.')?;
    let pid = pid.parse().ok()?;
    (!of.is_empty()).then_some((of, pid))
}

/// Whether process `pid` is running. Where that cannot be asked, every
/// process counts as running and nothing is swept.
fn alive(pid: u32) -> bool {
    #[cfg(unix)]
    {
        let Ok(pid) = libc::pid_t::try_from(pid) else {
            return true;
        };
        // SAFETY: signal 0 sends nothing; it only asks whether the process
        // exists and may be signalled.
        let found = unsafe { libc::kill(pid, 0) } == 0;
        found || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
    }
    #[cfg(not(unix))]
    {
        let _ = pid;
        true
    }
}

/// Failures injected into [`make_temp`] by the store's own tests.
#[cfg(test)]
pub mod faults {
    use std::cell::RefCell;
    use std::io;
    use std::path::Path;

    thread_local! {
        static FAIL: RefCell<Option<(String, i32)>> = const { RefCell::new(None) };
    }

    /// Until the guard is dropped, this thread's temp files for `name`
    /// fail to be made with the error number `errno` (28, ENOSPC: a full
    /// disk).
    pub fn fail_temps_for(name: &str, errno: i32) -> Guard {
        FAIL.with(|f| f.replace(Some((name.to_string(), errno))));
        Guard
    }

    /// Ends what [`fail_temps_for`] began.
    pub struct Guard;

    impl Drop for Guard {
        fn drop(&mut self) {
            FAIL.with(|f| f.replace(None));
        }
    }

    pub(super) fn injected(path: &Path) -> Option<io::Error> {
        let name = path.file_name()?.to_str()?;
        FAIL.with(|f| {
            let f = f.borrow();
            let (of, errno) = f.as_ref()?;
            let want = super::temp_name(of);
            (name == want).then(|| io::Error::from_raw_os_error(*errno))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn dir(tag: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("noa-files-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn links_are_refused_and_their_targets_untouched() {
        let d = dir("links");
        let target = d.join("notes.txt");
        fs::write(&target, b"mine").unwrap();
        symlink(&target, d.join("log")).unwrap();
        for e in [
            open_write(&d.join("log")).unwrap_err(),
            open_read(&d.join("log")).unwrap_err(),
            open_or_make(&d.join("log")).unwrap_err(),
        ] {
            assert!(is_link(&e), "{e}");
        }
        assert_eq!(
            make_new(&d.join("log")).unwrap_err().kind(),
            io::ErrorKind::AlreadyExists
        );
        // A temp name taken by a link: the link goes, the target stays.
        let tmp = d.join(temp_name("state.json"));
        symlink(&target, &tmp).unwrap();
        let (_file, made) = make_temp(&d, "state.json").unwrap();
        assert!(!fs::symlink_metadata(&tmp).unwrap().file_type().is_symlink());
        drop(made);
        assert!(!tmp.exists(), "a temp file let go is removed");
        assert_eq!(fs::read(&target).unwrap(), b"mine");
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_sweep_takes_dead_runs_temps_only() {
        let d = dir("sweep");
        // Process ids past the kernel's highest are never running.
        let dead = ".state.json.999999999.tmp";
        let dead_view = ".view.jsonl.999999998.tmp";
        let ours = temp_name("read-cache.bin");
        let parent = format!(".blocks.jsonl.{}.tmp", std::os::unix::process::parent_id());
        for n in [
            dead,
            dead_view,
            &ours,
            &parent,
            "state.json",
            ".lock",
            ".x.tmp",
        ] {
            fs::write(d.join(n), b"").unwrap();
        }
        assert_eq!(sweep_temps(&d, Some("view.jsonl")), None);
        assert!(!d.join(dead_view).exists() && d.join(dead).exists());
        std::os::unix::fs::symlink(d.join("state.json"), d.join("planted")).unwrap();
        assert_eq!(sweep_temps(&d, None), Some(d.join("planted")));
        fs::remove_file(d.join("planted")).unwrap();
        let mut left: Vec<String> = fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        let mut want = vec![".lock", ".x.tmp", "state.json", &ours, &parent];
        want.sort();
        assert_eq!(left, want);
        fs::remove_dir_all(&d).unwrap();
    }
}
