//! `noa materialize --new-session`: a compressed session written as a new
//! one its host can resume beside the original, checked record by record.

use std::collections::HashSet;
use std::fs;
use std::path::Path;
use std::process::{Command, Output};

use serde_json::{Value, json};

use crate::common::{TempDir, project, testdata};
use crate::compress::{ClaudeCode, SUMMARY, Session, apply, tagged};

/// `noa` in `cwd` with the clock fixed, as the new session's id depends on it.
fn noa_at(cwd: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_noa"))
        .args(args)
        .current_dir(cwd)
        .env("NO_COLOR", "1")
        .env("NOA_NOW", "1789000000")
        .env_remove("NOA_STATE_DIR")
        .output()
        .unwrap()
}

fn lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Each bundled Claude Code session, compressed by a Compress call, then
/// materialized as a new session: one new session id throughout, fresh
/// uuids none of which is an original's, one unbroken `parentUuid` chain,
/// the summary as a user record, no usage after it, and a log noa reads.
#[test]
fn a_new_session_is_one_fresh_chain_of_fresh_records() {
    let mut files: Vec<_> = fs::read_dir(testdata("real/claude-code"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 4);
    for file in files {
        let dir = TempDir::new();
        // The short sessions hold less than a range's usual least.
        fs::write(
            dir.path().join("noa.toml"),
            "[engine.compress]\nmin_compress_range = 100\n",
        )
        .unwrap();
        let mut session = ClaudeCode::from(dir.path(), &file);
        let state = dir.path().join("state");
        let (view, _) = project(session.path(), &state, &[]);
        let tags = tagged(&view);
        let (start, end) = (&tags[1].0, &tags[tags.len() / 2].0);
        let args = json!({"topic": "early work", "content": [{"startId": start, "endId": end, "summary": SUMMARY}]});
        let (code, panel) = apply(&mut session, &state, "cmp_new", args);
        assert_eq!(code, 0, "{}: {panel}", file.display());
        check_new_session(session.path(), &state);
    }
}

/// Materializes `transcript` as a new session into a directory and checks
/// the copy record by record against the original.
fn check_new_session(transcript: &Path, state: &Path) {
    let original = lines(&fs::read_to_string(transcript).unwrap());
    let old_id = original
        .iter()
        .find_map(|r| r["sessionId"].as_str())
        .unwrap();
    let originals: HashSet<&str> = original.iter().filter_map(|r| r["uuid"].as_str()).collect();
    let out_dir = state.join("copy");
    fs::create_dir_all(&out_dir).unwrap();
    let (t, s, o) = (
        transcript.to_str().unwrap(),
        state.to_str().unwrap(),
        out_dir.to_str().unwrap(),
    );
    let args = ["materialize", t, "--state-dir", s, "--new-session", "-o", o];
    let out = noa_at(state, &args);
    let note = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(0), "{note}");
    let written: Vec<_> = fs::read_dir(&out_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(written.len(), 1);
    let copy = lines(&fs::read_to_string(&written[0]).unwrap());
    let new_id = copy[0]["sessionId"].as_str().unwrap();
    assert_ne!(new_id, old_id);
    assert_eq!(
        written[0].file_name().unwrap().to_str().unwrap(),
        format!("{new_id}.jsonl")
    );
    assert!(note.contains(&format!("new session {new_id}")), "{note}");
    assert!(note.contains("1 block(s) baked in"), "{note}");

    let mut uuids = HashSet::new();
    let mut previous = Value::Null;
    let mut summaries = 0;
    for (i, r) in copy.iter().enumerate() {
        assert_eq!(r["sessionId"], new_id, "record {i}");
        assert_eq!(r["parentUuid"], previous, "record {i}");
        let uuid = r["uuid"].as_str().unwrap();
        assert!(uuids.insert(uuid), "record {i}: uuid {uuid} twice");
        assert!(!originals.contains(uuid), "record {i}: an original's uuid");
        for key in ["logicalParentUuid", "sourceToolAssistantUUID"] {
            if let Some(u) = r[key].as_str() {
                assert!(
                    uuids.contains(u),
                    "record {i}: {key} names no earlier record"
                );
            }
        }
        let text = r["message"]["content"].to_string();
        if text.contains("[Compressed conversation section]") {
            assert_eq!(r["type"], "user");
            summaries += 1;
        }
        if summaries > 0 && r["type"] == "assistant" {
            assert!(
                r["message"].get("usage").is_none(),
                "record {i}: usage kept"
            );
        }
        previous = r["uuid"].clone();
    }
    assert_eq!(summaries, 1);
    assert_eq!(copy[0]["parentUuid"], Value::Null);

    // noa reads it, as a session of its own.
    let fresh = state.join("fresh");
    let (_, out) = project(&written[0], &fresh, &[]);
    assert!(out.status.success());
    assert!(fresh.join(new_id).join("state.json").exists());
    // The same state at the same time gives the same copy.
    let again = noa_at(state, &args[..5]);
    assert!(
        again.stdout == fs::read(&written[0]).unwrap(),
        "not the same copy"
    );
}

/// A Codex rollout gets a fresh id in its `session_meta`, under the name
/// Codex gives a rollout; with no state, the note says nothing was
/// compressed; a chat log, which names no session, is refused.
#[test]
fn a_rollout_gets_a_fresh_id_and_a_chat_log_is_refused() {
    let dir = TempDir::new();
    let rollout = testdata("real/codex/rollout-plain.jsonl");
    let out = noa_at(
        dir.path(),
        &[
            "materialize",
            rollout.to_str().unwrap(),
            "--state-dir",
            "s",
            "--new-session",
            "-o",
            ".",
        ],
    );
    let note = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(0), "{note}");
    assert!(
        note.contains("the session has no state, so nothing is compressed"),
        "{note}"
    );
    let written: Vec<_> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("rollout-"))
        .collect();
    assert_eq!(written.len(), 1, "{written:?}");
    let copy = lines(&fs::read_to_string(dir.path().join(&written[0])).unwrap());
    assert_eq!(copy[0]["type"], "session_meta");
    let id = copy[0]["payload"]["id"].as_str().unwrap();
    assert_ne!(id, "019c8a4c-ed82-79a1-aa28-7738fc5ab61a");
    assert_eq!(
        written[0],
        format!("rollout-2026-09-10T00-26-40-{id}.jsonl")
    );

    fs::write(
        dir.path().join("chat.jsonl"),
        "{\"role\":\"user\",\"content\":\"hi\"}\n",
    )
    .unwrap();
    let out = noa_at(dir.path(), &["materialize", "chat.jsonl", "--new-session"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("names no session of its own"));
}
