//! Helpers shared by the integration tests.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The project's own testdata folder.
pub fn testdata(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata")
        .join(rel)
}

/// Every real transcript bundled with the project, with its view format.
pub fn real_transcripts() -> Vec<(PathBuf, &'static str)> {
    let mut out = Vec::new();
    for (dir, view) in [
        ("real/claude-code", "anthropic"),
        ("real/claude-code-edge", "anthropic"),
        ("real/codex", "responses"),
    ] {
        let mut files: Vec<PathBuf> = std::fs::read_dir(testdata(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
            .collect();
        files.sort();
        out.extend(files.into_iter().map(|p| (p, view)));
    }
    out
}

/// A fresh empty directory under the system temp dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new() -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        // Of one length whatever the process and the order tests run in:
        // panels name archives under it, and a loop's byte counts, and so
        // its decisions, must not hang on that.
        let p = std::env::temp_dir().join(format!(
            "noa-{:07}-{:04}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The ref map of the state at `state_path` (`<dir>/<session>/state.json`),
/// as noa loads it: state.json and the refs log beside it.
pub fn refs_of(state_path: &Path) -> noa::engine::MessageRefs {
    let dir = state_path.parent().unwrap();
    let session = dir.file_name().unwrap().to_str().unwrap();
    noa::store::SessionDir::new(dir.parent().unwrap(), session)
        .load()
        .unwrap()
        .unwrap()
        .message_refs
}

/// The state at `state_path` as JSON, as noa loads it: state.json with
/// its blocks and ref map from the logs beside it.
pub fn state_json(state_path: &Path) -> serde_json::Value {
    let dir = state_path.parent().unwrap();
    let session = dir.file_name().unwrap().to_str().unwrap();
    let state = noa::store::SessionDir::new(dir.parent().unwrap(), session)
        .load()
        .unwrap()
        .unwrap();
    serde_json::to_value(state).unwrap()
}

/// Writes `blocks` as the state's blocks, as a person editing the files by
/// hand would: blocks.jsonl afresh, and state.json's count of it.
pub fn edit_blocks(state_path: &Path, blocks: &serde_json::Value) {
    let log: String = blocks
        .as_array()
        .unwrap()
        .iter()
        .map(|b| format!("{b}\n"))
        .collect();
    std::fs::write(state_path.with_file_name("blocks.jsonl"), &log).unwrap();
    let mut state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(state_path).unwrap()).unwrap();
    state["blocksLog"] = serde_json::json!({
        "bytes": log.len(),
        "lines": log.lines().count(),
        "digest": noa::store::digest(log.as_bytes()),
    });
    std::fs::write(state_path, serde_json::to_vec_pretty(&state).unwrap()).unwrap();
}

/// The report `--report json` writes, from a run's standard error `err`:
/// its last line, after any warnings.
pub fn json_report(err: &str) -> Value {
    let line = err.lines().last().unwrap_or_default();
    serde_json::from_str(line).unwrap_or_else(|e| panic!("no JSON report last ({e}): {err}"))
}

/// [`json_report`] of the run `out`.
pub fn json_report_of(out: &Output) -> Value {
    json_report(&String::from_utf8_lossy(&out.stderr))
}

/// Runs `noa` with the given arguments, no colour, from `cwd`.
pub fn noa(cwd: &Path, args: &[&str]) -> Output {
    noa_with(cwd, args, &[])
}

/// [`noa`] with `NOA_SET_ASIDE_FROM=0`: a transcript of any size read
/// whole sets its long outputs aside.
pub fn noa_setting_aside(cwd: &Path, args: &[&str]) -> Output {
    noa_with(cwd, args, &[("NOA_SET_ASIDE_FROM", "0")])
}

fn noa_with(cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_noa"))
        .args(args)
        .current_dir(cwd)
        .env("NO_COLOR", "1")
        .env_remove("NOA_STATE_DIR")
        .env_remove("NOA_SET_ASIDE_FROM")
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

/// Runs `noa project` on a transcript with a private state dir; returns the
/// view's lines parsed, and the raw output.
pub fn project(
    transcript: &Path,
    state: &Path,
    extra: &[&str],
) -> (Vec<serde_json::Value>, Output) {
    let mut args = vec![
        "project",
        transcript.to_str().unwrap(),
        "--state-dir",
        state.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    std::fs::create_dir_all(state).unwrap();
    let out = noa(state, &args);
    assert!(
        out.status.success(),
        "noa {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = String::from_utf8(out.stdout.clone())
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("view line is not JSON ({e}): {l}"))
        })
        .collect();
    (lines, out)
}

/// Compares `actual` with the checked-in `tests/golden/<name>`;
/// `NOA_BLESS=1` rewrites the file instead, after a deliberate change.
pub fn golden(name: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("NOA_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|_| panic!("{} missing; run with NOA_BLESS=1", path.display()));
    pretty_assertions::assert_eq!(expected, actual, "golden {name}");
}

/// Copies the directory `from` to `to`, replacing what was there.
pub fn copy_dir(from: &Path, to: &Path) {
    let _ = std::fs::remove_dir_all(to);
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// The text between `before` and the next `after` in `s`.
pub fn between<'a>(s: &'a str, before: &str, after: &str) -> &'a str {
    let from = s
        .find(before)
        .unwrap_or_else(|| panic!("no {before:?} in {s}"))
        + before.len();
    let len = s[from..]
        .find(after)
        .unwrap_or_else(|| panic!("no {after:?} after {before:?} in {s}"));
    &s[from..from + len]
}

/// A Claude Code log written a record at a time, each response with usage.
#[derive(Default)]
pub struct ClaudeLog {
    pub lines: Vec<Value>,
    responses: usize,
}

impl ClaudeLog {
    pub fn push(&mut self, kind: &str, message: Value) {
        let n = self.lines.len();
        let parent = n.checked_sub(1).map(|p| format!("u{p}"));
        self.lines.push(json!({
            "type": kind, "uuid": format!("u{n}"), "parentUuid": parent,
            "sessionId": "bill", "isSidechain": false,
            "timestamp": format!("2026-12-01T10:{:02}:{:02}Z", n / 60, n % 60),
            "message": message,
        }));
    }

    pub fn user(&mut self, text: &str) {
        self.push("user", json!({"role": "user", "content": text}));
    }

    /// An assistant response whose prompt wrote `write` tokens to the
    /// cache and read `read`.
    pub fn answer(&mut self, content: Value, write: u64, read: u64) {
        self.responses += 1;
        let usage = json!({"input_tokens": 3, "cache_creation_input_tokens": write,
            "cache_read_input_tokens": read, "output_tokens": 50});
        let id = format!("msg_{}", self.responses);
        self.push(
            "assistant",
            json!({"id": id, "role": "assistant", "model": "claude", "content": content, "usage": usage}),
        );
    }

    pub fn exchange(&mut self, i: usize, write: u64, read: u64) {
        self.user(&format!(
            "step {i}: {}",
            "look at the parser and say what it does. ".repeat(40)
        ));
        let text = format!(
            "step {i} done: {}",
            "the parser reads tokens one at a time. ".repeat(40)
        );
        self.answer(json!([{"type": "text", "text": text}]), write, read);
    }

    pub fn write(&self, path: &Path) {
        let text: String = self.lines.iter().map(|l| format!("{l}\n")).collect();
        std::fs::write(path, text).unwrap();
    }
}

impl ClaudeLog {
    /// A tool call in an assistant response (usage: nothing written, all
    /// read), and its result in the next user record.
    pub fn tool(&mut self, id: &str, name: &str, input: Value, output: &str) {
        let call = json!([{"type": "tool_use", "id": id, "name": name, "input": input}]);
        self.answer(call, 0, 1_000);
        let result = json!([{"type": "tool_result", "tool_use_id": id, "content": output}]);
        self.push("user", json!({"role": "user", "content": result}));
    }
}
