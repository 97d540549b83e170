//! Refs never move: appending turns keeps every earlier message's ref.

use std::collections::BTreeMap;

use crate::common::{TempDir, json_report, noa, project, testdata};

fn refs(state_dir: &std::path::Path) -> BTreeMap<String, String> {
    let session = std::fs::read_dir(state_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.join("state.json").exists())
        .unwrap();
    crate::common::refs_of(&session.join("state.json"))
        .by_id()
        .map(|(id, r)| (id.to_string(), r.to_string()))
        .collect()
}

/// Every file of every session under `state_dir`, by path.
fn state_files(state_dir: &std::path::Path) -> BTreeMap<std::path::PathBuf, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut dirs = vec![state_dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                files.insert(path.clone(), std::fs::read(&path).unwrap());
            }
        }
    }
    files
}

#[test]
fn appending_turns_never_changes_a_ref_and_a_retried_turn_changes_nothing() {
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
    // A host retrying the last turn changes nothing the session kept: its
    // pacing has seen this turn already.
    let kept = state_files(&state_dir);
    project(&transcript, &state_dir, &[]);
    assert_eq!(state_files(&state_dir), kept);
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

#[test]
fn a_session_past_the_last_ref_says_how_many_messages_have_none() {
    let dir = TempDir::new();
    let state_dir = dir.path().join("state");
    let transcript = dir.path().join("session.jsonl");
    let lines = [
        r#"{"role":"user","content":"Fix the parser."}"#,
        r#"{"role":"assistant","content":"Looking at it."}"#,
        r#"{"role":"user","content":"And the tests."}"#,
    ];
    std::fs::write(&transcript, format!("{}\n", lines[0])).unwrap();
    project(&transcript, &state_dir, &[]);
    // Turns since took every ref but the last.
    let session = noa::store::SessionDir::new(&state_dir, "session");
    let mut state = session.load().unwrap().unwrap();
    for i in 2..99_999 {
        let (r, id) = (format!("m{i:05}"), format!("h_old{i}"));
        state.message_refs.insert(&id, &r);
    }
    session.save(&state).unwrap();
    std::fs::write(&transcript, lines.join("\n") + "\n").unwrap();
    let (view, out) = project(&transcript, &state_dir, &["--report", "json"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let report: serde_json::Value = json_report(&stderr);
    let counts = (report["new_refs"].as_u64(), report["unnumbered"].as_u64());
    assert_eq!(counts, (Some(1), Some(1)));
    assert!(stderr.contains("1 message(s) have none"), "{stderr}");
    assert!(
        view[0]["content"]
            .as_str()
            .unwrap()
            .contains(r#"id="m00001""#)
    );
    assert_eq!(view[1]["content"], "Looking at it.");
    assert_eq!(view[2]["content"], "And the tests.", "no ref, no tag");
}

#[test]
fn a_host_retrying_a_turn_changes_nothing() {
    // A retry gives the provider's figure for the last request again: the
    // request before the turn, not the view the turn made.
    let figures = ["--limit", "30000", "--input-tokens", "21000"];
    let nudge = ["--limit", "30000", "--nudge"];
    // Far over its window: outputs cut, exchanges left out, an emergency
    // nudge that tells how far the view grew since the one before.
    let over = ["--limit", "40000"];
    // The provider refused the request as too long: the retry gives the
    // error and its figure again, after a first try that cut outputs.
    let refused = [
        "--limit",
        "30000",
        "--overflow-error",
        "prompt is too long: 215000 tokens > 200000 maximum",
        "--input-tokens",
        "215000",
    ];
    for (log, args) in [
        ("real/claude-code/tool-heavy.jsonl", &refused[..]),
        ("real/claude-code/tool-heavy.jsonl", &figures[..]),
        ("real/claude-code/tool-heavy.jsonl", &nudge[..]),
        (
            "real/claude-code/long-session-with-compaction.jsonl",
            &over[..],
        ),
    ] {
        let full = std::fs::read_to_string(testdata(log)).unwrap();
        let lines: Vec<&str> = full.lines().collect();
        let dir = TempDir::new();
        let transcript = dir.path().join("session.jsonl");
        let state_dir = dir.path().join("state");
        std::fs::write(&transcript, lines[..lines.len() * 2 / 3].join("\n") + "\n").unwrap();
        project(&transcript, &state_dir, &args[..2]);
        std::fs::write(&transcript, full.clone()).unwrap();
        let (_, made) = project(&transcript, &state_dir, args);
        let kept = state_files(&state_dir);
        let (_, again) = project(&transcript, &state_dir, args);
        assert!(
            made.stdout == again.stdout,
            "{log} {args:?}: the view changed"
        );
        assert!(
            state_files(&state_dir) == kept,
            "{log} {args:?}: the state changed"
        );
    }
}
