//! Writing what the user names with `-o`.
//!
//! `-o` names a place to put bytes, not a file noa may replace. An atomic
//! rename swaps out whatever the name pointed at: a symlink would become a
//! regular file (the file it pointed at left stale), and as root `-o
//! /dev/null` would replace the device node with a file that then fills up.
//! So only a regular file (or a name with nothing there yet) is written
//! atomically; symlinks are followed to the file they name, and anything else
//! (a device, a FIFO, a socket, `/dev/stdout`) is opened and written straight
//! through, never renamed over.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::atomic::{self, Replacing};

/// How many symlinks are followed before giving up, as the kernel does.
const MAX_HOPS: usize = 40;

/// Writes `bytes` to the output the user named.
///
/// - a regular file, or a path with nothing there: atomically (a temp file
///   beside it, fsync, rename), so a reader never sees half a view and a
///   failed write leaves the old file whole;
/// - a symlink: the same, applied to the file at the end of the chain (the
///   temp file goes in that file's directory), so the link stays a link and
///   its target gets the bytes; a dangling link creates its target;
/// - anything else (character or block device, FIFO, socket), and a name for
///   an open descriptor (`/dev/stdout`, `/dev/fd/N`, `/proc/self/fd/N`, even
///   when it is a redirected file): opened for writing and written straight
///   through, never replaced. A descriptor is opened to append, so `noa … -o
///   /dev/stdout >> log` adds to the log rather than writing over it.
pub fn write_output(path: &Path, bytes: &[u8]) -> io::Result<()> {
    stage_output(path, bytes)?.put(bytes)
}

/// An output made ready by [`stage_output`] but not yet seen by a reader.
pub enum StagedOutput<'p> {
    /// A temp file beside the regular file it replaces, written and synced.
    Replacing(Replacing),
    /// Anything written straight through, written once put.
    Through {
        /// What the user named.
        path: &'p Path,
        /// Whether to add to what is there (a descriptor's file).
        append: bool,
    },
}

/// [`write_output`] up to the point where a reader would see the bytes: a
/// file replaced is written and synced beside its name, and a device or
/// descriptor is only looked at. A turn does this beside saving its state,
/// whose syncs it would otherwise wait behind, and puts the view in place
/// once the state is saved; dropped unput, nothing was written where the
/// output goes.
pub fn stage_output<'p>(path: &'p Path, bytes: &[u8]) -> io::Result<StagedOutput<'p>> {
    let through = |append| StagedOutput::Through { path, append };
    match fs::metadata(path) {
        Ok(meta) if meta.is_file() => {
            let (target, descriptor) = final_target(path)?;
            if descriptor {
                Ok(through(true))
            } else {
                replacing(&target, bytes)
            }
        }
        // A directory fails to open for writing (EISDIR) and is left as it is.
        Ok(_) => Ok(through(final_target(path).is_ok_and(|(_, d)| d))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let (target, _) = final_target(path)?;
            replacing(&target, bytes)
        }
        Err(e) => Err(e),
    }
}

impl StagedOutput<'_> {
    /// Puts the output in place: the temp file renamed over its name and
    /// the rename synced, or `bytes`, the ones staged, written through.
    pub fn put(self, bytes: &[u8]) -> io::Result<()> {
        match self {
            StagedOutput::Replacing(replacing) => {
                let dir = atomic::parent(replacing.path()).to_path_buf();
                replacing.finish()?;
                atomic::sync_dir(&dir)
            }
            StagedOutput::Through { path, append } => write_through(path, bytes, append),
        }
    }
}

/// A new version of the regular file `target` written and synced beside
/// it, first removing the temp files that killed runs left beside it for
/// the same name.
fn replacing<'p>(target: &Path, bytes: &[u8]) -> io::Result<StagedOutput<'p>> {
    if let Some(name) = target.file_name().and_then(|n| n.to_str()) {
        super::files::sweep_temps(atomic::parent(target), Some(name));
    }
    let (file, replacing) = atomic::write_beside(target, bytes)?;
    file.sync_all()?;
    Ok(StagedOutput::Replacing(replacing))
}

/// The path at the end of `path`'s symlink chain (the last link's target,
/// which need not exist), and whether the chain passes through a name for an
/// open file descriptor, whose link text is not a path to rename over.
fn final_target(path: &Path) -> io::Result<(PathBuf, bool)> {
    let mut current = path.to_path_buf();
    let mut descriptor = names_descriptor(&current);
    for _ in 0..MAX_HOPS {
        match fs::symlink_metadata(&current) {
            Ok(m) if m.file_type().is_symlink() => {
                let link = fs::read_link(&current)?;
                // A relative target is relative to the link's own directory;
                // the kernel resolves any `..` in it when the path is used.
                current = match current.parent() {
                    Some(dir) if link.is_relative() => dir.join(link),
                    _ => link,
                };
                descriptor |= names_descriptor(&current);
            }
            Ok(_) => return Ok((current, descriptor)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((current, descriptor)),
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::other(format!(
        "too many levels of symbolic links: {}",
        path.display()
    )))
}

/// Whether `p` names an open file descriptor rather than a file.
fn names_descriptor(p: &Path) -> bool {
    p == Path::new("/dev/stdout")
        || p == Path::new("/dev/stderr")
        || p.starts_with("/dev/fd")
        || (p.starts_with("/proc") && p.parent().is_some_and(|d| d.ends_with("fd")))
}

/// Opens what `path` names (following links) without creating, truncating or
/// renaming anything, and writes `bytes` to it.
fn write_through(path: &Path, bytes: &[u8], append: bool) -> io::Result<()> {
    let mut f = OpenOptions::new().write(true).append(append).open(path)?;
    f.write_all(bytes)?;
    f.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{FileTypeExt, symlink};
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A fresh directory under the system temp dir, removed on drop.
    struct Dir(PathBuf);

    impl Dir {
        fn new(tag: &str) -> Dir {
            static N: AtomicUsize = AtomicUsize::new(0);
            let p = std::env::temp_dir().join(format!(
                "noa-output-{tag}-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::SeqCst)
            ));
            let _ = fs::remove_dir_all(&p);
            fs::create_dir_all(&p).unwrap();
            Dir(p)
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn a_new_file_is_created() {
        let d = Dir::new("new");
        let p = d.0.join("view.jsonl");
        write_output(&p, b"fresh").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"fresh");
        assert_eq!(names(&d.0), ["view.jsonl"]);
    }

    #[test]
    fn a_regular_file_is_replaced_atomically() {
        use std::os::unix::fs::MetadataExt;
        let d = Dir::new("regular");
        let p = d.0.join("view.jsonl");
        fs::write(&p, b"old contents, longer than the new").unwrap();
        let before = fs::metadata(&p).unwrap().ino();
        write_output(&p, b"new").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"new");
        // Renamed over, not rewritten in place: a new inode, no temp left.
        assert_ne!(fs::metadata(&p).unwrap().ino(), before);
        assert_eq!(names(&d.0), ["view.jsonl"]);
    }

    #[test]
    fn a_symlink_stays_a_link_and_its_target_gets_the_bytes() {
        let d = Dir::new("link");
        let real_dir = d.0.join("real");
        fs::create_dir_all(&real_dir).unwrap();
        let target = real_dir.join("view.jsonl");
        fs::write(&target, b"old").unwrap();
        // A relative link, through a second link, from another directory.
        let links = d.0.join("links");
        fs::create_dir_all(&links).unwrap();
        symlink("../real/view.jsonl", links.join("hop")).unwrap();
        symlink("hop", links.join("out")).unwrap();
        write_output(&links.join("out"), b"new").unwrap();
        for l in ["out", "hop"] {
            let m = fs::symlink_metadata(links.join(l)).unwrap();
            assert!(m.file_type().is_symlink(), "{l} is no longer a symlink");
        }
        assert_eq!(fs::read(&target).unwrap(), b"new");
        // The temp file went beside the target and is gone.
        assert_eq!(names(&real_dir), ["view.jsonl"]);
        assert_eq!(names(&links), ["hop", "out"]);
    }

    #[test]
    fn a_dead_runs_temp_file_beside_the_output_is_removed() {
        let d = Dir::new("leftover");
        let p = d.0.join("view.jsonl");
        // Process ids past the kernel's highest are never running.
        fs::write(d.0.join(".view.jsonl.999999999.tmp"), b"half a view").unwrap();
        fs::write(d.0.join(".other.jsonl.999999999.tmp"), b"not ours").unwrap();
        write_output(&p, b"whole").unwrap();
        assert_eq!(names(&d.0), [".other.jsonl.999999999.tmp", "view.jsonl"]);
    }

    #[test]
    fn a_staged_output_is_seen_only_once_put_and_not_at_all_if_dropped() {
        let d = Dir::new("staged");
        let p = d.0.join("view.jsonl");
        fs::write(&p, b"last turn's").unwrap();
        // Staged and dropped, as when the state cannot be saved.
        drop(stage_output(&p, b"this turn's").unwrap());
        assert_eq!(fs::read(&p).unwrap(), b"last turn's");
        assert_eq!(names(&d.0), ["view.jsonl"]);
        let staged = stage_output(&p, b"this turn's").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"last turn's");
        staged.put(b"this turn's").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"this turn's");
        assert_eq!(names(&d.0), ["view.jsonl"]);
    }

    #[test]
    fn an_output_written_through_is_written_only_once_put() {
        let d = Dir::new("staged-through");
        let file = d.0.join("log.jsonl");
        fs::write(&file, b"before\n").unwrap();
        // A name for an open descriptor is written through, appending.
        let f = fs::OpenOptions::new().append(true).open(&file).unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&f);
        let name = PathBuf::from(format!("/proc/self/fd/{fd}"));
        let staged = stage_output(&name, b"view\n").unwrap();
        assert_eq!(fs::read(&file).unwrap(), b"before\n");
        staged.put(b"view\n").unwrap();
        assert_eq!(fs::read(&file).unwrap(), b"before\nview\n");
    }

    #[test]
    fn a_dangling_symlink_creates_its_target() {
        let d = Dir::new("dangling");
        symlink("made.jsonl", d.0.join("out")).unwrap();
        write_output(&d.0.join("out"), b"bytes").unwrap();
        assert!(
            fs::symlink_metadata(d.0.join("out"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(fs::read(d.0.join("made.jsonl")).unwrap(), b"bytes");
    }

    #[test]
    fn a_fifo_is_written_through_and_stays_a_fifo() {
        let d = Dir::new("fifo");
        let fifo = d.0.join("pipe");
        match std::process::Command::new("mkfifo").arg(&fifo).status() {
            Ok(s) => assert!(s.success(), "mkfifo failed"),
            Err(e) => {
                eprintln!("skipped: mkfifo is not available ({e})");
                return;
            }
        }
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || fs::read(&fifo).unwrap())
        };
        write_output(&fifo, b"through the pipe").unwrap();
        assert_eq!(reader.join().unwrap(), b"through the pipe");
        let m = fs::symlink_metadata(&fifo).unwrap();
        assert!(m.file_type().is_fifo(), "the FIFO was replaced");
        assert_eq!(names(&d.0), ["pipe"]);
    }

    #[test]
    fn dev_null_stays_a_character_device() {
        let null = Path::new("/dev/null");
        write_output(null, b"discarded").unwrap();
        let m = fs::symlink_metadata(null).unwrap();
        assert!(m.file_type().is_char_device(), "/dev/null was replaced");
    }

    #[test]
    fn a_directory_is_an_error_and_left_alone() {
        let d = Dir::new("dir");
        let sub = d.0.join("sub");
        fs::create_dir_all(&sub).unwrap();
        assert!(write_output(&sub, b"x").is_err());
        assert!(fs::metadata(&sub).unwrap().is_dir());
        assert!(names(&sub).is_empty());
    }

    #[test]
    fn descriptor_names_are_recognised() {
        for p in [
            "/dev/stdout",
            "/dev/stderr",
            "/dev/fd/1",
            "/proc/self/fd/1",
            "/proc/123/fd/4",
        ] {
            assert!(names_descriptor(Path::new(p)), "{p}");
        }
        for p in ["/dev/null", "/tmp/fd/1", "/proc/self/status", "out.jsonl"] {
            assert!(!names_descriptor(Path::new(p)), "{p}");
        }
    }
}
