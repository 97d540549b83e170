//! `noa project` from the command line: outputs, reports and failure paths.

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::common::{TempDir, golden, json_report, json_report_of, noa, project, testdata};

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).replace(env!("CARGO_MANIFEST_DIR"), "[ROOT]")
}

#[test]
fn short_claude_code_session_view() {
    let dir = TempDir::new();
    let (_, out) = project(&testdata("real/claude-code/short.jsonl"), dir.path(), &[]);
    golden("short.view.jsonl", &String::from_utf8(out.stdout).unwrap());
}

#[test]
fn codex_plain_rollout_view_head() {
    let dir = TempDir::new();
    let (_, out) = project(&testdata("real/codex/rollout-plain.jsonl"), dir.path(), &[]);
    let head: String = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .take(12)
        .map(|l| format!("{l}\n"))
        .collect();
    golden("rollout-plain.view-head.jsonl", &head);
}

#[test]
fn report_line_and_json_report() {
    let dir = TempDir::new();
    let path = testdata("real/claude-code/tool-heavy.jsonl");
    let (_, out) = project(&path, dir.path(), &["--dry-run"]);
    golden("tool-heavy.report.txt", &stderr(&out));
    let (_, out) = project(&path, dir.path(), &["--report", "json"]);
    let report: Value =
        serde_json::from_str(String::from_utf8(out.stderr).unwrap().trim()).unwrap();
    assert_eq!(report["format"], "claude-code");
    assert_eq!(report["view_format"], "anthropic");
    assert_eq!(report["new_refs"], 21);
    assert!(report["state"].as_str().unwrap().ends_with("state.json"));
}

/// A first turn far over its window chooses what it leaves out before it
/// cuts anything: every cut it counts, in its report, its nudge and the
/// session's cuts, is one the view shows. So does a later turn, whose
/// earlier cuts may now be left out, and one that cut before it knew it
/// would leave messages out.
#[test]
fn only_what_stays_in_view_is_cut() {
    let path = testdata("real/claude-code/long-session-with-compaction.jsonl");
    for (limit, shown) in [("16000", 0), ("60000", 2)] {
        let dir = TempDir::new();
        let (view, report) = turn_counting_cuts(&path, dir.path(), limit, shown);
        assert!(
            report["omitted"].as_u64().unwrap() > 100,
            "{limit}: {report}"
        );
        let nudge = view.last().unwrap().to_string();
        assert_eq!(
            nudge.contains("tool results in this context were cut"),
            shown > 0,
            "{limit}"
        );
        let session = fs::read_dir(dir.path())
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        let logged = fs::read_to_string(session.join("truncated.log")).unwrap_or_default();
        assert_eq!(
            logged.lines().filter(|l| l.starts_with("+ ")).count(),
            shown,
            "{limit}: {logged}"
        );
    }
    // Two thirds of the session, then all of it, at 60K: the first turn
    // cuts 9 outputs and leaves 5 of them out; the second leaves out the
    // 4 it showed.
    let full = fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = full.lines().collect();
    let dir = TempDir::new();
    let log = dir.path().join("session.jsonl");
    fs::write(&log, lines[..lines.len() * 2 / 3].join("\n") + "\n").unwrap();
    turn_counting_cuts(&log, &dir.path().join("state"), "60000", 4);
    fs::write(&log, &full).unwrap();
    turn_counting_cuts(&log, &dir.path().join("state"), "60000", 0);
}

/// A turn of `log` at `limit`, whose report and view both count `shown`
/// cuts; its view and report.
fn turn_counting_cuts(log: &Path, state: &Path, limit: &str, shown: usize) -> (Vec<Value>, Value) {
    let (view, out) = project(log, state, &["--limit", limit, "--report", "json"]);
    // The report is the last line: at 16K a warning comes first, that the
    // host's own share fills the window.
    let stderr = String::from_utf8(out.stderr).unwrap();
    let report: Value = json_report(&stderr);
    // The nudge, the last message, names the marker when there are cuts.
    let cuts: usize = (view[..view.len() - 1].iter())
        .map(|m| {
            m.to_string()
                .matches("[truncated for context space")
                .count()
        })
        .sum();
    assert_eq!(cuts, shown, "{limit}");
    assert_eq!(report["truncated"], shown, "{limit}");
    (view, report)
}

#[test]
fn a_cut_line_stops_with_its_position_and_writes_nothing() {
    let full = fs::read_to_string(testdata("real/claude-code/short.jsonl")).unwrap();
    let lines: Vec<&str> = full.lines().collect();
    let dir = TempDir::new();
    let transcript = dir.path().join("cut.jsonl");
    // Line 5 is cut in half; more lines follow it.
    let mut text = lines[..4].join("\n");
    text.push('\n');
    text.push_str(&lines[4][..lines[4].len() / 2]);
    text.push('\n');
    text.push_str(&lines[5..].join("\n"));
    text.push('\n');
    fs::write(&transcript, &text).unwrap();
    let out = noa(dir.path(), &["project", "cut.jsonl"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("cut.jsonl:5:"), "{err}");
    assert!(err.contains("invalid JSON"), "{err}");
    assert!(err.contains("Claude Code session record"), "{err}");
    assert!(out.stdout.is_empty());
    assert!(
        !dir.path().join(".noa").exists(),
        "nothing may be written on bad input"
    );

    let out = noa(
        dir.path(),
        &["project", "cut.jsonl", "--skip-bad-lines", "--dry-run"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stderr(&out).contains("warning: skipped bad line"));
}

/// `noa project --report json` in `dir` on `file`: its view, its report and
/// its warnings.
fn turn(dir: &Path, file: &str) -> (Vec<u8>, Value, Vec<String>) {
    let out = noa(dir, &["project", file, "--report", "json"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let report = json_report(&err);
    let warnings = err
        .lines()
        .filter(|l| l.starts_with("warning:"))
        .map(String::from);
    (out.stdout, report, warnings.collect())
}

/// The view of `text` projected from scratch, in a fresh state dir.
fn fresh_view(text: &str) -> Vec<u8> {
    let dir = TempDir::new();
    fs::write(dir.path().join("t.jsonl"), text).unwrap();
    turn(dir.path(), "t.jsonl").0
}

/// A host appending while noa reads, in every format: a last line cut
/// mid-JSON is left for the next turn with a warning, read whole, in
/// pieces and on from the read cache; once finished, the next turn reads
/// it, and the view is the one a fresh projection of the whole file gives.
#[test]
fn a_line_still_being_written_waits_for_the_next_turn() {
    let chat: String = (0..6)
        .map(|i| {
            format!(
                "{{\"role\":\"{}\",\"content\":\"message {i}\"}}\n",
                ["user", "assistant"][i % 2]
            )
        })
        .collect();
    // Over a megabyte, so it is read in two pieces and the line is cut in
    // the second: blank lines between its messages.
    let (head, tail) = chat.split_at(chat.match_indices('\n').nth(1).unwrap().0 + 1);
    let long = format!(
        "{head}{}{tail}",
        format!("{}\n", " ".repeat(999)).repeat(1100)
    );
    let logs = [
        (long, 1104),
        (
            fs::read_to_string(testdata("real/claude-code/short.jsonl")).unwrap(),
            12,
        ),
        (
            fs::read_to_string(testdata("real/codex/rollout-plain.jsonl")).unwrap(),
            699,
        ),
        (chat, 4),
    ];
    for (log, at) in logs {
        let lines: Vec<&str> = log.split_inclusive('\n').collect();
        let before: String = lines[..at].concat();
        let (line, next) = (lines[at], lines[at + 1]);
        let dir = TempDir::new();
        let path = dir.path().join("live.jsonl");
        let append = |text: &str| {
            let mut f = fs::OpenOptions::new()
                .append(true)
                .create(true)
                .open(&path)
                .unwrap();
            std::io::Write::write_all(&mut f, text.as_bytes()).unwrap();
        };
        // Read whole (the first turn), then on from the cache twice.
        append(&before);
        append(&line[..line.len() / 2]);
        let (view, report, warnings) = turn(dir.path(), "live.jsonl");
        assert_eq!(report["read"], "whole");
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        let want = format!(
            "warning: live.jsonl:{}: the last line is unfinished",
            at + 1
        );
        assert!(warnings[0].starts_with(&want), "{warnings:?}");
        assert_eq!(view, fresh_view(&before), "the unfinished line is left out");

        append(&line[line.len() / 2..]);
        let (view, report, warnings) = turn(dir.path(), "live.jsonl");
        assert_eq!(
            report["read"], "cache",
            "the cache read up to the unfinished line"
        );
        assert!(warnings.is_empty(), "{warnings:?}");
        let whole = format!("{before}{line}");
        assert_eq!(view, fresh_view(&whole), "the finished line is read");

        append(&next[..next.len() / 3]);
        let (view, report, warnings) = turn(dir.path(), "live.jsonl");
        assert_eq!(report["read"], "cache");
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert_eq!(view, fresh_view(&whole));
        append(&next[next.len() / 3..]);
        let (view, _, warnings) = turn(dir.path(), "live.jsonl");
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(view, fresh_view(&format!("{whole}{next}")));
    }
}

/// Offline commands read a transcript being written as a turn does: the
/// unfinished last line left out, with the warning.
#[test]
fn offline_commands_leave_an_unfinished_line_out() {
    let full = fs::read_to_string(testdata("real/claude-code/short.jsonl")).unwrap();
    let lines: Vec<&str> = full.split_inclusive('\n').collect();
    let before = lines[..10].concat();
    let dir = TempDir::new();
    fs::write(dir.path().join("done.jsonl"), &before).unwrap();
    fs::write(
        dir.path().join("live.jsonl"),
        format!("{before}{}", &lines[10][..99]),
    )
    .unwrap();
    let run = |args: &[&str]| {
        let out = noa(dir.path(), args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
        out
    };
    for file in ["done.jsonl", "live.jsonl"] {
        let state = format!("{file}.state");
        run(&["rebuild", file, "--state-dir", &state]);
    }
    let out = run(&[
        "materialize",
        "live.jsonl",
        "--state-dir",
        "live.jsonl.state",
    ]);
    assert!(stderr(&out).contains("live.jsonl:11: the last line is unfinished"));
    let done = run(&[
        "materialize",
        "done.jsonl",
        "--state-dir",
        "done.jsonl.state",
    ]);
    assert_eq!(out.stdout, done.stdout);
    let out = run(&[
        "inspect",
        "live.jsonl",
        "--state-dir",
        "live.jsonl.state",
        "--json",
    ]);
    assert!(stderr(&out).contains("the last line is unfinished"));
    // A cut line followed by others is still an error, with its place.
    fs::write(
        dir.path().join("bad.jsonl"),
        format!("{before}{}\n{}", &lines[10][..99], lines[11]),
    )
    .unwrap();
    let out = noa(dir.path(), &["rebuild", "bad.jsonl"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("bad.jsonl:11:"), "{}", stderr(&out));
}

#[test]
fn a_corrupt_state_is_never_replaced() {
    let dir = TempDir::new();
    let path = testdata("real/claude-code/short.jsonl");
    project(&path, dir.path(), &[]);
    let state = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path().join("state.json"))
        .find(|p| p.exists())
        .unwrap();
    fs::write(&state, "{\"version\": 1, \"blocks\": [").unwrap();
    let out = noa(
        dir.path(),
        &["project", path.to_str().unwrap(), "--state-dir", "."],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("noa rebuild"), "{}", stderr(&out));
    assert_eq!(
        fs::read_to_string(&state).unwrap(),
        "{\"version\": 1, \"blocks\": ["
    );

    fs::write(&state, "{\"version\": 7}").unwrap();
    let out = noa(
        dir.path(),
        &["project", path.to_str().unwrap(), "--state-dir", "."],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("version 7"), "{}", stderr(&out));
}

#[test]
fn state_lives_under_the_session_id() {
    let dir = TempDir::new();
    let src = testdata("real/claude-code/short.jsonl");
    fs::copy(&src, dir.path().join("t.jsonl")).unwrap();
    let out = noa(
        dir.path(),
        &["project", "t.jsonl", "-o", "view.jsonl", "-q"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(out.stderr.is_empty() && out.stdout.is_empty());
    // Claude Code logs name their session; the default state dir is .noa beside the transcript.
    let text = fs::read_to_string(&src).unwrap();
    let session = text
        .lines()
        .find_map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["sessionId"]
                .as_str()
                .map(str::to_string)
        })
        .unwrap();
    let session = session.as_str();
    let state: Value = serde_json::from_str(
        &fs::read_to_string(dir.path().join(".noa").join(session).join("state.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(state["version"], noa::engine::STATE_VERSION);
    assert_eq!(state["sessionId"], session);
    assert!(
        fs::read_to_string(dir.path().join("view.jsonl"))
            .unwrap()
            .lines()
            .count()
            > 0
    );

    let out = noa(
        dir.path(),
        &[
            "project",
            "t.jsonl",
            "--session",
            "mine",
            "--state-dir",
            "st",
            "--dry-run",
        ],
    );
    assert!(out.status.success());
    assert!(!dir.path().join("st").exists(), "--dry-run writes no state");
}

#[test]
fn stdin_with_state_dir_and_session() {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let dir = TempDir::new();
    let mut child = Command::new(env!("CARGO_BIN_EXE_noa"))
        .args(["project", "-", "--state-dir", "st", "--session", "s1"])
        .current_dir(dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let text = fs::read(testdata("real/codex/rollout-plain.jsonl")).unwrap();
    child.stdin.take().unwrap().write_all(&text).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(dir.path().join("st/s1/state.json").exists());
}

#[test]
fn an_unknown_format_names_what_was_tried() {
    let dir = TempDir::new();
    fs::write(
        dir.path().join("x.jsonl"),
        "{\"hello\": 1}\n{\"world\": 2}\n",
    )
    .unwrap();
    let out = noa(dir.path(), &["project", "x.jsonl"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("cannot tell the transcript format"), "{err}");
    assert!(err.contains("--format"), "{err}");
}

#[test]
fn compact_boundary_starts_the_view() {
    let path = testdata("real/claude-code/long-session-with-compaction.jsonl");
    let text = fs::read_to_string(&path).unwrap();
    let boundary = text
        .lines()
        .position(|l| l.contains("\"compact_boundary\""))
        .unwrap();
    let before: Vec<String> = text
        .lines()
        .take(boundary)
        .flat_map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            v["message"]["content"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|b| b["type"] == "tool_use")
                .map(|b| b["id"].as_str().unwrap().to_string())
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(!before.is_empty());
    let dir = TempDir::new();
    let (view, out) = project(&path, dir.path(), &[]);
    let raw = String::from_utf8(out.stdout).unwrap();
    for id in &before {
        assert!(
            !raw.contains(id.as_str()),
            "tool call {id} from before the boundary is in the view"
        );
    }
    let first = view[0]["content"].as_str().unwrap();
    assert!(
        first.starts_with("This session is being continued"),
        "{first}"
    );
}

#[test]
fn help_lists_project() {
    let dir = TempDir::new();
    let out = noa(dir.path(), &["--help"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("project"));
}

#[test]
fn an_empty_token_figure_is_accepted_and_the_host_can_ask_for_a_nudge() {
    let dir = TempDir::new();
    let path = testdata("real/claude-code/tool-heavy.jsonl");
    let (view, out) = project(
        &path,
        dir.path(),
        &["--input-tokens", "", "--report", "json"],
    );
    let report: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stderr).trim()).unwrap();
    assert!(report["nudge"].is_null(), "{report}");
    assert!(!view.is_empty());
    let (view, out) = project(&path, dir.path(), &["--nudge", "--report", "json"]);
    let report: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stderr).trim()).unwrap();
    assert_eq!(report["nudge"]["tier"], 1, "{report}");
    assert!(
        report["reason"]
            .as_str()
            .unwrap()
            .starts_with("asked for by the host")
    );
    crate::providers::check_anthropic(&view).unwrap();
    let bad = noa(
        dir.path(),
        &["project", path.to_str().unwrap(), "--input-tokens", "lots"],
    );
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("not a token count"));
}

#[test]
fn what_a_user_gets_wrong_is_exit_2_with_the_place() {
    let dir = TempDir::new();
    let bad = dir.path().join("latin1.jsonl");
    fs::write(
        &bad,
        b"{\"role\":\"user\",\"content\":\"hi\"}\n{\"role\":\"user\",\"content\":\"caf\xe9\"}\n",
    )
    .unwrap();
    let run = |args: &[&str]| noa(dir.path(), args);
    let out = run(&["project", bad.to_str().unwrap(), "--dry-run"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("latin1.jsonl:2:30: not valid UTF-8"), "{err}");
    // The same as one JSON object when JSON was asked for.
    let out = run(&[
        "project",
        bad.to_str().unwrap(),
        "--dry-run",
        "--report",
        "json",
    ]);
    let v: Value = serde_json::from_str(String::from_utf8_lossy(&out.stderr).trim()).unwrap();
    assert_eq!(
        (
            v["code"].as_str(),
            v["line"].as_u64(),
            v["column"].as_u64(),
            v["exit"].as_u64()
        ),
        (Some("noa::bad_encoding"), Some(2), Some(30), Some(2)),
        "{v}"
    );
    assert!(v["help"].as_str().unwrap().contains("--skip-bad-lines"));
    // --skip-bad-lines reads on, with a warning.
    let out = run(&[
        "project",
        bad.to_str().unwrap(),
        "--dry-run",
        "--skip-bad-lines",
        "-v",
    ]);
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid UTF-8 replaced on line(s) 2"));
    // A missing file, a directory, a binary: the user's mistakes, said once.
    for (path, says) in [
        (dir.path().join("nope.jsonl"), "no such file"),
        (dir.path().to_path_buf(), "a directory, not a transcript"),
        (PathBuf::from(env!("CARGO_BIN_EXE_noa")), "a binary file"),
    ] {
        let out = run(&["project", path.to_str().unwrap(), "--dry-run"]);
        assert_eq!(out.status.code(), Some(2), "{}", path.display());
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.matches(says).count(), 1, "{err}");
    }
}

/// A log named as a file is read in pieces of a few megabytes: one with a
/// bad line early and a NUL byte or bytes that are not UTF-8 further on
/// gets the error a whole read of the same bytes gives (from stdin), the
/// NUL or the encoding first.
#[test]
fn a_log_read_in_pieces_reports_what_a_whole_read_reports() {
    let dir = TempDir::new();
    let line = |i: usize| {
        let role = if i.is_multiple_of(2) {
            "user"
        } else {
            "assistant"
        };
        let words = format!("message {i} {}", "word ".repeat(400));
        format!("{}\n", serde_json::json!({"role": role, "content": words}))
    };
    // About 12 MB: the bad line in the first piece, the damage two pieces on.
    let lines: Vec<String> = (0..6_000).map(line).collect();
    for (name, damage) in [("nul.jsonl", &b"\0"[..]), ("latin.jsonl", &b"\xff\xfe"[..])] {
        let mut bytes = Vec::new();
        for (i, l) in lines.iter().enumerate() {
            match i {
                100 => bytes.extend_from_slice(b"{\"role\": \"user\", \"content\": \"cut\n"),
                5_500 => {
                    bytes.extend_from_slice(&l.as_bytes()[..30]);
                    bytes.extend_from_slice(damage);
                    bytes.extend_from_slice(&l.as_bytes()[30..]);
                }
                _ => bytes.extend_from_slice(l.as_bytes()),
            }
        }
        let path = dir.path().join(name);
        fs::write(&path, &bytes).unwrap();
        let whole = std::process::Command::new(env!("CARGO_BIN_EXE_noa"))
            .args([
                "project",
                "-",
                "--dry-run",
                "--format",
                "chat",
                "--report",
                "json",
            ])
            .args(["--state-dir", "st", "--session", "s"])
            .current_dir(dir.path())
            .stdin(fs::File::open(&path).unwrap())
            .output()
            .unwrap();
        let named = noa(
            dir.path(),
            &[
                "project",
                name,
                "--dry-run",
                "--format",
                "chat",
                "--report",
                "json",
            ],
        );
        assert_eq!(named.status.code(), Some(2), "{name}");
        let code = |out: &std::process::Output| json_report_of(out)["code"].clone();
        assert_eq!(code(&named), code(&whole), "{name}");
        assert_ne!(code(&named), "noa::bad_json", "{name}");
    }
}

#[test]
fn a_lost_refs_log_is_bad_input_and_nothing_is_written() {
    let dir = TempDir::new();
    let transcript = dir.path().join("chat.jsonl");
    fs::write(
        &transcript,
        crate::synth::jsonl(&crate::synth::chat_session(21, 10)),
    )
    .unwrap();
    let state = dir.path().join("st");
    project(&transcript, &state, &[]);
    let session = state.join("chat");
    let before = fs::read(session.join("state.json")).unwrap();
    fs::remove_file(session.join("refs.log")).unwrap();
    let out = noa(dir.path(), &["project", "chat.jsonl", "--state-dir", "st"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("the ref log is missing"), "{err}");
    assert!(err.contains("noa rebuild"), "{err}");
    assert_eq!(fs::read(session.join("state.json")).unwrap(), before);
}

#[test]
fn blocks_are_written_when_made_and_a_lost_blocks_log_is_bad_input() {
    let dir = TempDir::new();
    let stats = crate::agent_loop::run_loop_in(dir.path(), 3, 40, 30_000, &[]);
    assert!(stats.blocks > 0, "{stats:?}");
    let session = dir.path().join("st/agent");
    let log = fs::read(session.join("blocks.jsonl")).unwrap();
    assert!(
        !fs::read_to_string(session.join("state.json"))
            .unwrap()
            .contains("\"summary\""),
        "summaries live in the blocks log"
    );
    // A turn that makes no block leaves the log as it was.
    let transcript = dir.path().join("agent.jsonl");
    crate::agent_loop::project(dir.path(), &transcript, 30_000);
    assert_eq!(fs::read(session.join("blocks.jsonl")).unwrap(), log);

    let before = fs::read(session.join("state.json")).unwrap();
    fs::remove_file(session.join("blocks.jsonl")).unwrap();
    let out = noa(dir.path(), &["project", "agent.jsonl", "--state-dir", "st"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("the blocks log is missing"), "{err}");
    assert!(err.contains("rebuild TRANSCRIPT"), "{err}");
    assert_eq!(fs::read(session.join("state.json")).unwrap(), before);
}

/// `noa project` of `transcript` read from stdin, which is always read
/// whole (a file of JSONL messages is read in pieces).
fn project_stdin(
    transcript: &[u8],
    state: &std::path::Path,
    extra: &[&str],
) -> std::process::Output {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new(env!("CARGO_BIN_EXE_noa"))
        .args(["project", "-", "--session", "s", "--state-dir"])
        .arg(state)
        .args(extra)
        .env("NO_COLOR", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(transcript).unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn a_chat_log_read_in_pieces_gives_what_a_whole_read_gives() {
    let dir = TempDir::new();
    // Over 8 MB, so a file is read in several pieces; CRLF line ends.
    let mut lines = Vec::new();
    for i in 0..900 {
        let call = format!("c{i}");
        lines.push(serde_json::json!({"role": "user", "content": format!("step {i}")}));
        lines.push(
            serde_json::json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": call, "type": "function", "function": {"name": "Read", "arguments": "{}"}}
            ]}),
        );
        let output = format!("line {i} ").repeat(800 + i % 13 * 50);
        lines.push(serde_json::json!({"role": "tool", "tool_call_id": call, "content": output}));
    }
    let mut lines: Vec<String> = lines.iter().map(Value::to_string).collect();
    let log = lines.join("\r\n") + "\r\n";
    assert!(log.len() > 8 << 20, "{}", log.len());
    let file = dir.path().join("chat.jsonl");
    fs::write(&file, &log).unwrap();
    let limit = ["--limit", "64000"];
    let (_, pieces) = project(&file, &dir.path().join("a"), &limit);
    let whole = project_stdin(log.as_bytes(), &dir.path().join("b"), &limit);
    assert!(whole.status.success(), "{}", stderr(&whole));
    assert!(!pieces.stdout.is_empty());
    assert_eq!(pieces.stdout, whole.stdout);

    // A bad line past the first pieces stops both reads at its place.
    lines[2500] = r#"{"role": "user", "content": oops}"#.to_string();
    let log = lines.join("\n") + "\n";
    fs::write(&file, &log).unwrap();
    let pieces = noa(dir.path(), &["project", file.to_str().unwrap()]);
    let whole = project_stdin(log.as_bytes(), &dir.path().join("b"), &[]);
    assert_eq!(pieces.status.code(), Some(2));
    assert_eq!(whole.status.code(), Some(2));
    let said = stderr(&pieces).replace(file.to_str().unwrap(), "<stdin>");
    assert!(said.contains("<stdin>:2501:"), "{said}");
    assert_eq!(said, stderr(&whole));
}

/// A Claude Code log named as a file is read in pieces, read lean on a
/// thread of their own once a few are in, and its records built on two
/// threads, the later ones without the earlier: a log of several megabytes
/// with a prompt rewound early and, last, a turn of fifty calls whose
/// results straddle the split (each named from its call, made on the
/// other side) gives the view it gives read whole from stdin.
#[test]
fn a_claude_code_log_read_in_pieces_gives_what_a_whole_read_gives() {
    let dir = TempDir::new();
    let record =
        |kind: &str, uuid: &str, parent: Option<&str>, content: Value, id: Option<&str>| {
            let mut r = serde_json::json!({
                "type": kind, "uuid": uuid, "parentUuid": parent, "sessionId": "s",
                "message": {"role": kind, "content": content},
            });
            if let Some(id) = id {
                r["message"]["id"] = Value::from(id);
            }
            r.to_string()
        };
    let text = |t: &str| serde_json::json!([{"type": "text", "text": t}]);
    let mut lines = Vec::new();
    let mut last = String::from("u0");
    lines.push(record("user", "u0", None, text("the task"), None));
    for i in 1..1_500 {
        let (prompt, reply) = (format!("u{i}"), format!("a{i}"));
        if i == 300 {
            // A prompt the user rewound: it and its reply stay out of view.
            lines.push(record(
                "user",
                "x1",
                Some(&last),
                text("abandoned prompt"),
                None,
            ));
            lines.push(record(
                "assistant",
                "x2",
                Some("x1"),
                text("abandoned"),
                Some("m_x"),
            ));
        }
        let words = format!("step {i} ") + &"and more words ".repeat(100);
        lines.push(record("user", &prompt, Some(&last), text(&words), None));
        let answer = text(&format!("done {i}"));
        lines.push(record(
            "assistant",
            &reply,
            Some(&prompt),
            answer,
            Some(&format!("m{i}")),
        ));
        last = reply;
    }
    // The last turn: fifty calls of one response, then their results.
    for k in 0..50 {
        let call = serde_json::json!([{"type": "tool_use", "id": format!("c{k}"), "name": "Read", "input": {"k": k}}]);
        let uuid = format!("p{k}");
        lines.push(record(
            "assistant",
            &uuid,
            Some(&last),
            call,
            Some("m_last"),
        ));
        last = uuid;
    }
    for k in 0..50 {
        let output = format!("row {k} of the file\n").repeat(5_000);
        let result = serde_json::json!([{"type": "tool_result", "tool_use_id": format!("c{k}"), "content": output}]);
        let uuid = format!("r{k}");
        lines.push(record("user", &uuid, Some(&last), result, None));
        last = uuid;
    }
    let log = lines.join("\n") + "\n";
    assert!(log.len() > 6 << 20, "{}", log.len());
    let file = dir.path().join("session.jsonl");
    fs::write(&file, &log).unwrap();
    let (view, pieces) = project(&file, &dir.path().join("a"), &[]);
    let whole = project_stdin(log.as_bytes(), &dir.path().join("b"), &[]);
    assert!(whole.status.success(), "{}", stderr(&whole));
    assert_eq!(pieces.stdout, whole.stdout);
    let shown = serde_json::to_string(&view).unwrap();
    assert!(
        !shown.contains("abandoned"),
        "the rewound prompt is left out"
    );
    assert_eq!(
        shown.matches(r#"src=\"Read\""#).count(),
        50,
        "each result named"
    );
}

/// The process holds no transparent huge page while it waits for its
/// transcript: they are turned off as the binary is loaded, before the
/// runtime's first allocation, which would otherwise bring the allocator's
/// arena in as two pages of 2 MB (4 MB to zero for a run of any size).
#[cfg(target_os = "linux")]
#[test]
fn starts_without_huge_pages() {
    use std::io::Write;
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    let dir = TempDir::new();
    let mut child = Command::new(env!("CARGO_BIN_EXE_noa"))
        .args(["project", "-", "--session", "s", "--state-dir"])
        .arg(dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Until it sleeps, waiting on its stdin: the state after the command's
    // name in /proc's stat line.
    let stat = format!("/proc/{}/stat", child.id());
    let deadline = Instant::now() + Duration::from_secs(60);
    while fs::read_to_string(&stat)
        .unwrap()
        .rsplit_once(") ")
        .is_none_or(|(_, rest)| !rest.starts_with('S'))
    {
        assert!(Instant::now() < deadline, "noa never waited on its stdin");
        std::thread::sleep(Duration::from_millis(10));
    }
    let rollup = fs::read_to_string(format!("/proc/{}/smaps_rollup", child.id())).unwrap();
    let huge = rollup
        .lines()
        .find_map(|l| l.strip_prefix("AnonHugePages:"))
        .map(|kb| kb.trim().trim_end_matches("kB").trim().to_string());
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(b"{\"role\":\"user\",\"content\":\"hi\"}\n")
        .unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(huge.as_deref(), Some("0"), "{rollup}");
}

/// A Claude Code record at `secs` past 10:00 whose message is `text`.
fn cc_record(kind: &str, uuid: &str, parent: Option<&str>, secs: u32, text: &str) -> String {
    let record = serde_json::json!({
        "type": kind, "uuid": uuid, "parentUuid": parent, "sessionId": "branches",
        "timestamp": format!("2025-06-14T10:{:02}:{:02}Z", secs / 60, secs % 60),
        "isMeta": text.starts_with("Caveat:"),
        "message": {"role": kind, "content": text},
    });
    format!("{record}\n")
}

/// The last message of a view, as text.
fn last_text(view: &[Value]) -> String {
    let content = &view.last().unwrap()["content"];
    content
        .as_str()
        .map_or_else(|| content[0]["text"].to_string(), str::to_string)
}

#[test]
fn local_commands_hung_off_the_first_record_leave_the_conversation_in_view() {
    // A mid-2025 layout: `/export` run at the end hangs off the caveat
    // that opens the session, not off the last answer.
    let log = [
        cc_record(
            "user",
            "c0",
            None,
            0,
            "Caveat: The messages below were generated by the user while running local commands.",
        ),
        cc_record("user", "u1", Some("c0"), 5, "fix the bug"),
        cc_record("assistant", "a1", Some("u1"), 10, "fixed"),
        cc_record(
            "user",
            "x1",
            Some("c0"),
            30,
            "<command-name>/export</command-name>",
        ),
        cc_record(
            "user",
            "x2",
            Some("x1"),
            31,
            "<local-command-stdout>Exported</local-command-stdout>",
        ),
    ]
    .concat();
    let dir = TempDir::new();
    let transcript = dir.path().join("old.jsonl");
    fs::write(&transcript, log).unwrap();
    let (view, out) = project(&transcript, &dir.path().join("state"), &["-v"]);
    // The caveat and the prompt go as one user message, then the answer.
    assert_eq!(view.len(), 2, "{view:?}");
    assert_eq!(last_text(&view), "fixed");
    let err = stderr(&out);
    assert!(
        err.contains(
            "noa: conversation: the branch ending on line 3 (record a1), the only one holding \
             more than local commands; 1 branch(es) of local commands alone passed over"
        ),
        "{err}"
    );
    assert!(!err.contains("warning"), "{err}");
}

#[test]
fn two_live_branches_warn_and_leaf_chooses_between_them() {
    let log = [
        cc_record("user", "u1", None, 0, "task"),
        cc_record("assistant", "a1", Some("u1"), 5, "answer"),
        cc_record("user", "l1", Some("a1"), 60, "left prompt"),
        cc_record("user", "r1", Some("a1"), 90, "right prompt"),
        cc_record("assistant", "l2", Some("l1"), 120, "left answer"),
        cc_record("assistant", "r2", Some("r1"), 150, "right answer"),
        cc_record("user", "l3", Some("l2"), 180, "left again"),
    ]
    .concat();
    let dir = TempDir::new();
    let transcript = dir.path().join("two.jsonl");
    fs::write(&transcript, log).unwrap();
    let state = dir.path().join("state");
    let (first, out) = project(&transcript, &state, &["-v"]);
    assert!(last_text(&first).starts_with("left again"), "{first:?}");
    let err = stderr(&out);
    assert!(
        err.contains("two.jsonl:6: another branch grew beside the conversation read: it ends here, at record r2, 4 records long; the newest was read; `--leaf r2` reads it instead"),
        "{err}"
    );
    assert!(err.contains("(record l3), the newest of 2"), "{err}");
    // `--leaf` reads the other branch, warns of nothing, and leaves no
    // read cache for a turn without it.
    let (right, out) = project(&transcript, &state, &["--leaf", "r2", "-v"]);
    assert_eq!(last_text(&right), "right answer");
    let err = stderr(&out);
    assert!(!err.contains("warning"), "{err}");
    assert!(err.contains("(record r2), as --leaf asks"), "{err}");
    let (again, _) = project(&transcript, &state, &[]);
    assert!(last_text(&again).starts_with("left again"), "{again:?}");
    assert_eq!(again.len(), first.len());
    // A uuid no record has, and a format without branches, are refused.
    let out = noa(
        dir.path(),
        &[
            "project",
            transcript.to_str().unwrap(),
            "--leaf",
            "nope",
            "--dry-run",
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--leaf nope"), "{}", stderr(&out));
    let rollout = testdata("real/codex/rollout-plain.jsonl");
    let out = noa(
        dir.path(),
        &[
            "project",
            rollout.to_str().unwrap(),
            "--leaf",
            "r2",
            "--dry-run",
            "--state-dir",
            state.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--leaf names the"),
        "{}",
        stderr(&out)
    );
}

/// A first turn on a log that holds only its system prompt hands out no
/// ref; the next, once the user has spoken, goes on from that state.
#[test]
fn a_state_of_a_system_prompt_alone_takes_the_turn_after_it() {
    let dir = TempDir::new();
    let path = dir.path().join("t.jsonl");
    let st = dir.path().join("st");
    let (t, s) = (path.to_str().unwrap(), st.to_str().unwrap());
    std::fs::write(
        &path,
        "{\"role\":\"system\",\"content\":\"You are a careful agent.\"}\n",
    )
    .unwrap();
    let args = ["project", t, "--state-dir", s, "-o", "/dev/null"];
    assert!(noa(dir.path(), &args).status.success());
    let more = "{\"role\":\"user\",\"content\":\"Fix the parser.\"}\n";
    std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(more.as_bytes())
        .unwrap();
    let out = noa(dir.path(), &args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
