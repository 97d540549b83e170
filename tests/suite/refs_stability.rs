//! Refs never move: appending turns keeps every earlier message's ref.

use std::collections::BTreeMap;

use crate::common::{TempDir, noa, project, testdata};

fn refs(state_dir: &std::path::Path) -> BTreeMap<String, String> {
    let session = std::fs::read_dir(state_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.join("state.json").exists())
        .unwrap();
    crate::common::refs_of(&session.join("state.json"))
        .by_raw
        .into_iter()
        .collect()
}

#[test]
fn appending_turns_never_changes_a_ref() {
    let full = std::fs::read_to_string(testdata(
        "real/claude-code/long-session-with-compaction.jsonl",
    ))
    .unwrap();
    let lines: Vec<&str> = full.lines().collect();
    let dir = TempDir::new();
    let transcript = dir.path().join("session.jsonl");
    let state_dir = dir.path().join("state");
    let mut before: BTreeMap<String, String> = BTreeMap::new();
    for cut in [lines.len() * 2 / 3, lines.len() * 5 / 6, lines.len()] {
        std::fs::write(&transcript, lines[..cut].join("\n") + "\n").unwrap();
        project(&transcript, &state_dir, &[]);
        let after = refs(&state_dir);
        for (id, r) in &before {
            assert_eq!(after.get(id), Some(r), "ref of {id} moved");
        }
        assert!(after.len() >= before.len());
        before = after;
    }
}

#[test]
fn projecting_twice_gives_the_same_bytes() {
    for (path, _) in crate::common::real_transcripts() {
        let dir = TempDir::new();
        let (_, first) = project(&path, dir.path(), &[]);
        let (_, second) = project(&path, dir.path(), &[]);
        assert_eq!(first.stdout, second.stdout, "{}", path.display());
        let fresh = TempDir::new();
        let (_, dry) = project(&path, fresh.path(), &["--dry-run"]);
        assert_eq!(first.stdout, dry.stdout, "{}", path.display());
    }
}

#[test]
fn stdin_needs_an_explicit_place_for_state() {
    let dir = TempDir::new();
    let out = noa(dir.path(), &["project", "-"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--state-dir"));
}
