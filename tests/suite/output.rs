//! `-o` writes to what it names and never replaces it: a symlink stays a
//! link with its target updated, a FIFO stays a FIFO and its reader gets the
//! view.

use std::fs;
use std::os::unix::fs::{FileTypeExt, symlink};

use crate::common::{TempDir, noa, testdata};

#[test]
fn output_through_a_symlink_or_into_a_fifo_replaces_nothing() {
    let dir = TempDir::new();
    let transcript = testdata("real/claude-code/short.jsonl");
    let state = dir.path().join("state");
    let run = |out: Option<&str>| {
        let mut args = vec![
            "project",
            transcript.to_str().unwrap(),
            "--dry-run",
            "--state-dir",
            state.to_str().unwrap(),
            "-q",
        ];
        args.extend(out.iter().flat_map(|o| ["-o", o]));
        let out = noa(dir.path(), &args);
        assert!(
            out.status.success(),
            "noa {args:?} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    };
    let view = run(None);
    assert!(!view.is_empty());

    // A symlink to a file: the link stays, the file gets the view.
    let target = dir.path().join("view.jsonl");
    fs::write(&target, b"stale").unwrap();
    symlink("view.jsonl", dir.path().join("link")).unwrap();
    assert!(run(Some("link")).is_empty());
    let m = fs::symlink_metadata(dir.path().join("link")).unwrap();
    assert!(m.file_type().is_symlink(), "-o replaced the symlink");
    assert_eq!(fs::read(&target).unwrap(), view);

    // A FIFO: written straight through to its reader, still a FIFO after.
    let fifo = dir.path().join("pipe");
    match std::process::Command::new("mkfifo").arg(&fifo).status() {
        Ok(s) => assert!(s.success(), "mkfifo failed"),
        Err(e) => {
            eprintln!("FIFO case skipped: mkfifo is not available ({e})");
            return;
        }
    }
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || fs::read(&fifo).unwrap())
    };
    assert!(run(Some("pipe")).is_empty());
    assert_eq!(reader.join().unwrap(), view);
    let m = fs::symlink_metadata(&fifo).unwrap();
    assert!(m.file_type().is_fifo(), "-o replaced the FIFO");

    // Nothing in the suite has replaced the system's /dev/null.
    let null = fs::symlink_metadata("/dev/null").unwrap();
    assert!(null.file_type().is_char_device());
}
