//! The agent loops a user copies, `examples/agent_loop.py` and
//! `examples/agent_loop.sh`, run against the built binary: each must finish
//! cleanly, answer nudges with Compress calls that apply, and leave a
//! transcript that is a valid chat log from which noa can rebuild its state.

use std::collections::HashMap;
use std::fs;
use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

use crate::common::{TempDir, noa};
use crate::providers::check_chat;

/// Runs `program script` (an example loop) against the built binary for
/// 60 turns at `limit`, in a fresh directory, and checks what it did.
fn run_example(program: &str, script: &str, limit: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = TempDir::new();
    let state = dir.path().join("state");
    let transcript = dir.path().join("t.jsonl");
    let out = Command::new(program)
        .arg(script)
        .args(["--noa", env!("CARGO_BIN_EXE_noa")])
        .args(["--turns", "60", "--limit", limit])
        .arg("--state-dir")
        .arg(&state)
        .arg("--transcript")
        .arg(&transcript)
        .current_dir(root)
        .env_remove("NOA_STATE_DIR")
        .env("TMPDIR", dir.path())
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {program} ({e}): this test runs {script} and needs {program} on PATH \
                 (python3 3.8 or newer for the Python loop)"
            )
        });
    check_loop(&out, dir.path(), &transcript, &state);
}

#[test]
fn the_python_example_loop_runs_and_compresses() {
    run_example("python3", "examples/agent_loop.py", "16000");
}

/// The bash loop, run as the README shows it, 60 turns at a 16K window.
/// It needs `jq`; where there is none the test says so and does nothing.
#[test]
fn the_bash_example_loop_runs_and_compresses() {
    if Command::new("jq").arg("--version").output().is_err() {
        eprintln!(
            "SKIPPED: examples/agent_loop.sh needs jq, and there is no jq on PATH (apt-get \
             install jq)"
        );
        return;
    }
    run_example("bash", "examples/agent_loop.sh", "16k");
}

/// What every example loop must leave: its one summary line says 60 turns
/// with compressions, no rejected call and no request over the window; the
/// transcript is a chat log with the system prompt, nothing of noa's view,
/// and every Compress call answered by a panel; and the transcript alone
/// rebuilds the state the loop left.
fn check_loop(out: &Output, dir: &Path, transcript: &Path, state: &Path) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the loop exited with {}:\n{stdout}\n{stderr}",
        out.status
    );

    // The one summary line: `turns=60 nudges=4 blocks_created=8 …`.
    let summary: HashMap<&str, &str> = stdout
        .lines()
        .last()
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .collect();
    let count = |key: &str| -> usize {
        summary
            .get(key)
            .and_then(|v| v.trim_end_matches('%').parse().ok())
            .unwrap_or_else(|| panic!("no {key}= in the summary:\n{stdout}"))
    };
    eprintln!("{stdout}{stderr}");
    assert_eq!(count("turns"), 60, "{stdout}");
    assert!(count("nudges") >= 1, "{stdout}");
    assert!(count("blocks_created") >= 1, "{stdout}");
    assert_eq!(count("rejected_calls"), 0, "{stdout}");
    assert_eq!(count("over_window"), 0, "{stdout}");
    assert!(count("peak") <= 100, "{stdout}");

    // The transcript: one chat message per line, every call answered, and
    // nothing of noa's view in it (no ref tags, no nudge).
    let text = fs::read_to_string(transcript).unwrap();
    let messages: Vec<Value> = text
        .lines()
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("transcript line {} is not JSON ({e}): {l}", i + 1))
        })
        .collect();
    check_chat(&messages).unwrap_or_else(|e| panic!("transcript: {e}"));
    assert_eq!(messages[0]["role"], "system");
    assert!(
        messages[0]["content"]
            .as_str()
            .is_some_and(|c| c.contains("noa context management")),
        "the system message lacks `noa prompt`"
    );
    for m in &messages[1..] {
        let line = m.to_string();
        assert!(
            !line.contains("<noa-ref") && !line.contains("Compressible ranges"),
            "noa's view leaked into the transcript: {line}"
        );
    }
    let compress_ids: Vec<&Value> = messages
        .iter()
        .filter_map(|m| m["tool_calls"].as_array())
        .flatten()
        .filter(|c| c["function"]["name"] == "Compress")
        .map(|c| &c["id"])
        .collect();
    assert!(
        !compress_ids.is_empty(),
        "no Compress call in the transcript"
    );
    for id in compress_ids {
        let result = messages
            .iter()
            .find(|m| m["role"] == "tool" && &m["tool_call_id"] == id)
            .unwrap();
        let panel = result["content"].as_str().unwrap();
        assert!(
            panel.starts_with("▣ noa"),
            "{id}'s result is not a panel: {panel}"
        );
    }

    // The transcript alone rebuilds the state the loop left.
    let check = noa(
        dir,
        &[
            "rebuild",
            transcript.to_str().unwrap(),
            "--state-dir",
            state.to_str().unwrap(),
            "--check",
        ],
    );
    assert!(
        check.status.success(),
        "rebuild --check: {}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
}
