//! What the command line prints for a bundled real session, pinned as
//! insta snapshots (`tests/suite/snapshots/`): the `project` report line,
//! `ranges` as a person reads it, `inspect --json` and the panel `apply`
//! answers a Compress call with. Paths under the test's folder read
//! `[TMP]` and times `[TIME]`, so the snapshots hold on any machine. After a
//! deliberate change, `INSTA_UPDATE=always` rewrites them; review the diff.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

use crate::common::TempDir;
use crate::compress::{ClaudeCode, SUMMARY, Session};

/// `noa ARGS` from `cwd`, without colour, on a fixed clock.
fn noa_at(cwd: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_noa"))
        .args(args)
        .current_dir(cwd)
        .env("NO_COLOR", "1")
        .env("NOA_NOW", "1796400000")
        .env_remove("NOA_STATE_DIR")
        .env_remove("NOA_SET_ASIDE_FROM")
        .output()
        .unwrap()
}

/// `text` with the temp dir's path as `[TMP]`.
fn redacted(text: &str, tmp: &Path) -> String {
    text.replace(tmp.to_str().unwrap(), "[TMP]")
}

/// A JSON report with its paths as `[TMP]` and its times as `[TIME]`.
fn redacted_json(v: &mut Value, tmp: &Path) {
    match v {
        Value::String(s) => *s = redacted(s, tmp),
        Value::Array(a) => a.iter_mut().for_each(|x| redacted_json(x, tmp)),
        Value::Object(o) => {
            for (k, x) in o.iter_mut() {
                match k.as_str() {
                    "created" | "created_at" | "timestamp" => *x = json!("[TIME]"),
                    _ => redacted_json(x, tmp),
                }
            }
        }
        _ => {}
    }
}

/// A folder in `tmp` whose path is always as long: a summary's pointer to
/// its archive is priced into the figures the snapshots hold, so the
/// length of the path it names must not depend on where temp dirs are.
fn fixed_length_dir(tmp: &Path) -> PathBuf {
    const LENGTH: usize = 160;
    let taken = tmp.to_str().unwrap().len() + 1;
    assert!(
        taken < LENGTH,
        "the temp dir's path is too long for the snapshots"
    );
    let dir = tmp.join("d".repeat(LENGTH - taken));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn text_of(bytes: &[u8], tmp: &Path) -> String {
    redacted(String::from_utf8_lossy(bytes).trim_end(), tmp)
}

#[test]
fn a_real_session_through_the_command_line() {
    let dir = TempDir::new();
    let tmp = &fixed_length_dir(dir.path());
    let mut s = ClaudeCode::new(tmp);
    let transcript = s.path().to_str().unwrap().to_string();
    let state = tmp.join("state");
    let state = state.to_str().unwrap();
    let view = tmp.join("view.jsonl");
    let on = |command: &str, extra: &[&str]| {
        let mut args = vec![command, transcript.as_str(), "--state-dir", state];
        args.extend_from_slice(extra);
        let out = noa_at(tmp, &args);
        assert!(out.status.success(), "{command}: {out:?}");
        out
    };

    let projected = on("project", &["-o", view.to_str().unwrap()]);
    insta::assert_snapshot!("project_report", text_of(&projected.stderr, tmp));

    let ranges = on("ranges", &[]);
    insta::assert_snapshot!("ranges", text_of(&ranges.stdout, tmp));

    let args = json!({"topic": "early work", "content": [
        {"startId": "m00002", "endId": "m00100", "summary": SUMMARY}
    ]});
    s.append_call("snap_1", &args);
    let applied = on("apply", &[]);
    let panel = text_of(&applied.stdout, tmp);
    insta::assert_snapshot!("apply_panel", panel);
    s.append_result("snap_1", &panel, false);

    let inspected = on("inspect", &["--json"]);
    let mut report: Value = serde_json::from_slice(&inspected.stdout).unwrap();
    redacted_json(&mut report, tmp);
    insta::assert_snapshot!(
        "inspect_json",
        serde_json::to_string_pretty(&report).unwrap()
    );
}
