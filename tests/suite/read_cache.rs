//! The read cache: a turn read on from the cache gives the same view and
//! the same state as the transcript read whole, whatever happened to the
//! transcript or the state in between.
//!
//! Every turn is run twice from the same state: once as the host runs it
//! (with the cache the last turn left) and once with the cache removed, and
//! the two must agree byte for byte.

use std::fs;
use std::path::Path;

use serde_json::{Value, json};

use super::agent_loop::ranges_from_nudge;
use super::common::{TempDir, copy_dir, json_report, json_report_of, noa, noa_setting_aside};
use super::synth;

const LIMIT: usize = 30_000;

/// The log format a session is written in.
#[derive(Clone, Copy, PartialEq)]
enum Shape {
    Chat,
    Anthropic,
    ClaudeCode,
    /// The bundled Codex rollout, whose session is its `session_meta` id.
    Codex,
}

impl Shape {
    /// The session's folder under the state dir.
    fn session(self) -> &'static str {
        match self {
            Shape::ClaudeCode => "s1",
            Shape::Codex => "019c8a4c-ed82-79a1-aa28-7738fc5ab61a",
            Shape::Chat | Shape::Anthropic => "t",
        }
    }
}

/// Writes messages as log lines: as they are, or as Claude Code records
/// (one content block each, chained by parentUuid, a response's blocks
/// sharing its id).
struct Log {
    shape: Shape,
    records: usize,
    parent: Value,
}

impl Log {
    fn lines(&mut self, m: &Value) -> String {
        if self.shape != Shape::ClaudeCode {
            return format!("{m}\n");
        }
        let role = m["role"].as_str().unwrap();
        let blocks = match &m["content"] {
            Value::Array(b) => b.clone(),
            text => vec![json!({"type": "text", "text": text})],
        };
        let id = format!("msg_{}", self.records);
        let mut out = String::new();
        for mut b in blocks {
            // An output of several lines numbered as Claude Code's Read
            // tool numbers a file's (an arrow after each number): not
            // ASCII, as most of a real session's output bytes are not.
            if let Some(text) = b["content"].as_str().filter(|t| t.lines().nth(1).is_some()) {
                let numbered: String = (text.lines().enumerate())
                    .map(|(i, line)| format!("{:>6}\u{2192}{line}\n", i + 1))
                    .collect();
                b["content"] = json!(numbered);
            }
            self.records += 1;
            let uuid = format!("00000000-0000-4000-8000-{:012}", self.records);
            let record = json!({"parentUuid": self.parent, "isSidechain": false, "type": role, "sessionId": "s1",
                "uuid": uuid, "timestamp": "2026-12-01T00:00:00Z", "message": {"id": id, "role": role, "content": [b]}});
            out.push_str(&format!("{record}\n"));
            self.parent = json!(uuid);
        }
        out
    }
}

/// What one projection gave: the view, the report and the state written.
struct Turn {
    view: String,
    report: Value,
    state: String,
}

fn project(dir: &Path, st: &str, shape: Shape) -> Turn {
    project_file(dir, st, "t.jsonl", shape.session())
}

/// `noa project` of `file` with state under `st`, the session's state
/// being `session`'s.
fn project_file(dir: &Path, st: &str, file: &str, session: &str) -> Turn {
    project_with(dir, st, (file, session), noa)
}

/// [`project`], a transcript read whole setting its long outputs aside.
fn project_setting_aside(dir: &Path, st: &str, shape: Shape) -> Turn {
    project_with(dir, st, ("t.jsonl", shape.session()), noa_setting_aside)
}

fn project_with(
    dir: &Path,
    st: &str,
    (file, session): (&str, &str),
    noa: fn(&Path, &[&str]) -> std::process::Output,
) -> Turn {
    let out = noa(
        dir,
        &[
            "project",
            file,
            "--state-dir",
            st,
            "--limit",
            &LIMIT.to_string(),
            "--report",
            "json",
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{st}: {err}");
    let mut report: Value = json_report(&err);
    report["state"] = Value::Null;
    Turn {
        view: String::from_utf8(out.stdout).unwrap(),
        report,
        state: fs::read_to_string(dir.join(st).join(session).join("state.json")).unwrap(),
    }
}

/// Projects the turn as the host does and, from copies of the same state
/// without the read cache, whole: as it is read, and with its long
/// outputs set aside (see `noa_setting_aside`). Asserts they all agree,
/// and that both whole reads leave the same read cache; returns the
/// host's turn and how it read the transcript.
fn turn(dir: &Path, shape: Shape, what: &str) -> (Turn, String) {
    let first = !dir.join("st").exists();
    for copy in ["cold", "aside"] {
        let _ = fs::remove_dir_all(dir.join(copy));
        if !first {
            copy_dir(&dir.join("st"), &dir.join(copy));
            let cache = dir.join(copy).join(shape.session()).join("read-cache.bin");
            let _ = fs::remove_file(cache);
        }
    }
    let warm = project(dir, "st", shape);
    let aside = project_setting_aside(dir, "aside", shape);
    let mut whole = vec![("set aside", aside)];
    if !first {
        whole.push(("whole", project(dir, "cold", shape)));
    }
    for (how, cold) in whole {
        assert_eq!(cold.report["read"], "whole", "{what}, {how}");
        assert!(warm.view == cold.view, "{what}, {how}: the views differ");
        let mut report = warm.report.clone();
        report["read"] = cold.report["read"].clone();
        assert_eq!(report, cold.report, "{what}, {how}");
        assert!(
            warm.state == cold.state,
            "{what}, {how}: the states differ\n{}\n---\n{}",
            warm.state,
            cold.state
        );
    }
    let cache = |st: &str| fs::read(dir.join(st).join(shape.session()).join("read-cache.bin"));
    let against = if first { "st" } else { "cold" };
    assert!(
        cache("aside").ok() == cache(against).ok(),
        "{what}: a whole read that set its outputs aside left another read cache"
    );
    let read = warm.report["read"].as_str().unwrap().to_string();
    (warm, read)
}

/// The text of the view's last message (the nudge, when there is one).
fn last_text(view: &str) -> String {
    let m: Value = serde_json::from_str(view.lines().last().unwrap()).unwrap();
    match &m["content"] {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// A Compress call over the ranges a nudge lists, and its result line
/// once `noa apply` has answered it, in the session's format.
fn compress(
    dir: &Path,
    text: &mut String,
    log: &mut Log,
    (nudge, n): (&str, usize),
    warm_applies: &mut usize,
) {
    let content: Vec<Value> = ranges_from_nudge(nudge)
        .iter()
        .map(|(a, b)| json!({"startId": a, "endId": b, "summary": "Read the modules named there; nothing in them needs to change for the task."}))
        .collect();
    let args = json!({"topic": format!("early work {n}"), "content": content});
    let id = format!("cmp_{n}");
    let anthropic = log.shape != Shape::Chat;
    let call = if anthropic {
        json!({"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": "Compress", "input": args}]})
    } else {
        json!({"role": "assistant", "content": null, "tool_calls": [{"id": id, "type": "function", "function": {"name": "Compress", "arguments": args.to_string()}}]})
    };
    text.push_str(&log.lines(&call));
    fs::write(dir.join("t.jsonl"), &*text).unwrap();
    let session = log.shape.session();
    let cold = apply_whole(dir, session);
    let (code, panel, read) = apply(dir);
    assert!(matches!(code, Some(0 | 1)), "{panel}");
    *warm_applies += usize::from(read == "cache");
    let (cold_code, cold_panel, cold_files) = cold;
    assert_eq!((code, &panel), (cold_code, &cold_panel), "call {n}");
    let warm_files = session_files(dir, session);
    let names = |f: &[(String, String)]| f.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(names(&warm_files), names(&cold_files), "call {n}");
    for ((name, warm), (_, cold)) in warm_files.iter().zip(&cold_files) {
        assert!(
            warm == cold,
            "call {n}: apply read on from the cache left {name} otherwise than read whole:\n{warm}\n---\n{cold}"
        );
    }
    let result = if anthropic {
        json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": panel}]})
    } else {
        json!({"role": "tool", "tool_call_id": id, "content": panel})
    };
    text.push_str(&log.lines(&result));
}

/// `noa apply` on t.jsonl as it goes without the session's read cache: its
/// exit code, panel and session files. The state dir is then put back as
/// it was, under the same path (archive paths name it).
fn apply_whole(dir: &Path, session: &str) -> (Option<i32>, String, Vec<(String, String)>) {
    copy_dir(&dir.join("st"), &dir.join("host"));
    fs::remove_file(dir.join("st").join(session).join("read-cache.bin")).unwrap();
    let (code, panel, read) = apply(dir);
    assert_eq!(read, "whole");
    let files = session_files(dir, session);
    fs::remove_dir_all(dir.join("st")).unwrap();
    fs::rename(dir.join("host"), dir.join("st")).unwrap();
    (code, panel, files)
}

/// `noa apply -v` on t.jsonl with state under `st`: its exit code, panel,
/// and how it read the transcript.
fn apply(dir: &Path) -> (Option<i32>, String, String) {
    let out = noa(
        dir,
        &[
            "apply",
            "t.jsonl",
            "--state-dir",
            "st",
            "--limit",
            &LIMIT.to_string(),
            "-v",
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    let read = err
        .lines()
        .find_map(|l| l.strip_prefix("noa: apply: read "))
        .and_then(|l| l.split_once('(')?.1.split_once(')'))
        .map_or(String::new(), |(how, _)| how.to_string());
    let panel = String::from_utf8(out.stdout).unwrap();
    (out.status.code(), panel.trim_end().to_string(), read)
}

/// Every file of a session's state but the read cache and the lock, by
/// path, with the times of the run taken out.
fn session_files(dir: &Path, session: &str) -> Vec<(String, String)> {
    fn walk(root: &Path, at: &Path, out: &mut Vec<(String, String)>) {
        for e in fs::read_dir(at).unwrap() {
            let path = e.unwrap().path();
            let name = path.strip_prefix(root).unwrap().display().to_string();
            if path.is_dir() {
                walk(root, &path, out);
            } else if name != "read-cache.bin" && name != ".lock" {
                let text = fs::read_to_string(&path).unwrap();
                // Archives and blocks carry their creation time, and the
                // logs' digests in state.json cover those bytes.
                let timeless: Vec<&str> = text
                    .lines()
                    .filter(|l| {
                        !l.starts_with("created: ") && !l.trim_start().starts_with("\"digest\":")
                    })
                    .collect();
                let timeless = timeless.join("\n");
                let mut cut = String::new();
                for (i, part) in timeless.split("\"createdAt\":").enumerate() {
                    let rest = if i == 0 {
                        part
                    } else {
                        part.trim_start_matches(|c: char| c.is_ascii_digit())
                    };
                    cut.push_str(rest);
                }
                out.push((name, cut));
            }
        }
    }
    let root = dir.join("st").join(session);
    let mut out = Vec::new();
    walk(&root, &root, &mut out);
    out.sort();
    out
}

/// A scripted session through every kind of change a host makes to its
/// transcript and state between turns.
fn session(messages: Vec<Value>, shape: Shape) {
    let mut log = Log {
        shape,
        records: 0,
        parent: Value::Null,
    };
    let state = format!("st/{}/state.json", shape.session());
    let tmp = TempDir::new();
    let dir = tmp.path();
    let path = dir.join("t.jsonl");
    let mut text = String::new();
    let (mut reads, mut compressions, mut fallbacks, mut warm_applies) = (0, 0, 0, 0);
    // Turns read on from the cache that cut outputs again, from the cuts
    // the last turn kept or not.
    let mut recut = 0;
    let mut saved_state = None;
    let mut last_nudge = String::new();
    for (i, chunk) in messages.chunks(5).enumerate() {
        for m in chunk {
            text.push_str(&log.lines(m));
        }
        fs::write(&path, &text).unwrap();
        let (t, read) = turn(dir, shape, &format!("turn {i}, appended"));
        reads += usize::from(read == "cache");
        recut += usize::from(read == "cache" && t.report["truncated"].as_u64() > Some(0));
        if !t.report["nudge"].is_null() {
            compressions += 1;
            last_nudge = last_text(&t.view);
            compress(
                dir,
                &mut text,
                &mut log,
                (&last_nudge, compressions),
                &mut warm_applies,
            );
            fs::write(&path, &text).unwrap();
            let (_, read) = turn(dir, shape, &format!("turn {i}, after a compression"));
            reads += usize::from(read == "cache");
            if compressions == 1 {
                saved_state = Some(fs::read(dir.join(&state)).unwrap());
            }
        }
        match i % 9 {
            // Someone rewrites an early message at greater length: where the
            // prefix the cache read ended, a line is torn in two, and what
            // follows is not JSON. The turn reads it whole, as it would
            // with no cache, rather than report the torn line.
            1 => {
                let edited = text.replacen("Task: fix", "Task: find and fix, then test,", 1);
                fs::write(&path, &edited).unwrap();
                assert_eq!(turn(dir, shape, &format!("turn {i}, rewritten")).1, "whole");
                fs::write(&path, &text).unwrap();
            }
            // The host retries: nothing appended.
            3 => assert_eq!(turn(dir, shape, &format!("turn {i}, again")).1, "cache"),
            // Someone edits an early message: the prefix changed.
            5 => {
                let edited = text.replacen("Task: fix", "Task: mend", 1);
                fs::write(&path, &edited).unwrap();
                assert_eq!(turn(dir, shape, &format!("turn {i}, edited")).1, "whole");
                fs::write(&path, &text).unwrap();
            }
            // The host rewinds: the transcript is shorter than what was read.
            7 => {
                let cut = text.len() - text.lines().last().unwrap().len() - 1;
                fs::write(&path, &text[..cut]).unwrap();
                assert_eq!(turn(dir, shape, &format!("turn {i}, rewound")).1, "whole");
                fs::write(&path, &text).unwrap();
            }
            _ => {}
        }
        // A state from before the later compressions comes back: what the
        // cache left out is shown again, so the turn reads it whole.
        if compressions == 3
            && let Some(old) = saved_state.take()
        {
            let cache = dir.join("st").join(shape.session()).join("read-cache.bin");
            let later_cache = fs::read(&cache).unwrap();
            fs::write(dir.join(&state), &old).unwrap();
            let (_, read) = turn(dir, shape, &format!("turn {i}, an older state"));
            fallbacks += usize::from(read == "whole");
            // A call answered on it, before any turn, reads whole too.
            fs::write(dir.join(&state), &old).unwrap();
            fs::write(&cache, later_cache).unwrap();
            let before = warm_applies;
            compress(
                dir,
                &mut text,
                &mut log,
                (&last_nudge, 100 + compressions),
                &mut warm_applies,
            );
            assert_eq!(
                warm_applies, before,
                "apply on an older state read the cache"
            );
            fs::write(&path, &text).unwrap();
        }
    }
    lost_state(dir, shape);
    assert!(compressions >= 3, "{compressions} compressions");
    assert!(
        reads > messages.len() / 10,
        "{reads} turns read from the cache"
    );
    assert_eq!(fallbacks, 1, "the older state was not read whole");
    assert!(
        recut > 0,
        "no turn read on from the cache cut an output again"
    );
    assert!(
        warm_applies * 2 >= compressions,
        "{warm_applies} of {compressions} applies read from the cache"
    );
}

/// A host that lost the session's state: the next turn rebuilds it from
/// the Compress calls the transcript records, archives and all, and does
/// the same when it sets its long outputs aside (the archives are then
/// rendered from the set-aside words) as when it holds every word; and
/// when only state.json and the archives are lost, the turn reads on from
/// the read cache and renders them from the words the cache kept back.
fn lost_state(dir: &Path, shape: Shape) {
    let (st, session) = (dir.join("st"), shape.session());
    copy_dir(&st, &dir.join("kept"));
    fs::remove_dir_all(&st).unwrap();
    let whole = project(dir, "st", shape);
    let files = session_files(dir, session);
    assert!(
        files.iter().any(|(name, _)| name.ends_with(".md")),
        "no archive rebuilt"
    );
    let lost_files = |dir: &Path| {
        let state = dir.join("st").join(session);
        fs::remove_file(state.join("state.json")).unwrap();
        for e in fs::read_dir(&state).unwrap() {
            let path = e.unwrap().path();
            if path.is_dir() {
                fs::remove_dir_all(path).unwrap();
            }
        }
    };
    let runs = [("set aside", true), ("state.json and archives lost", false)];
    for (how, whole_dir_lost) in runs {
        fs::remove_dir_all(&st).unwrap();
        let turn = match whole_dir_lost {
            true => project_setting_aside(dir, "st", shape),
            false => {
                copy_dir(&dir.join("kept"), &st);
                lost_files(dir);
                project(dir, "st", shape)
            }
        };
        assert!(turn.view == whole.view, "{how}: the views differ");
        assert_eq!(turn.report["request"], whole.report["request"], "{how}");
        assert!(session_files(dir, session) == files, "{how}: other state");
    }
}

#[test]
fn chat_turns_read_from_the_cache_match_whole_reads() {
    session(synth::chat_session(11, 90), Shape::Chat);
}

#[test]
fn anthropic_turns_read_from_the_cache_match_whole_reads() {
    session(synth::anthropic_session(12, 90), Shape::Anthropic);
}

#[test]
fn claude_code_turns_read_from_the_cache_match_whole_reads() {
    session(synth::anthropic_session(15, 90), Shape::ClaudeCode);
}

#[test]
fn a_codex_rollout_read_on_from_the_cache_matches_whole_reads() {
    let tmp = TempDir::new();
    let dir = tmp.path();
    let rollout =
        fs::read_to_string(super::common::testdata("real/codex/rollout-plain.jsonl")).unwrap();
    let lines: Vec<&str> = rollout.lines().collect();
    let mut reads = 0;
    for end in (40..=lines.len()).step_by(60).chain([lines.len()]) {
        let text: String = lines[..end].iter().map(|l| format!("{l}\n")).collect();
        fs::write(dir.join("t.jsonl"), text).unwrap();
        reads += usize::from(turn(dir, Shape::Codex, &format!("{end} lines")).1 == "cache");
    }
    assert!(reads >= 10, "{reads} turns read from the cache");
}

/// Real logs as a long session's host runs them, growing and retried: a
/// turn read on from the cache, its long tool outputs' words left there
/// until its view shows them, gives the view, the report and the state a
/// whole read gives; a Codex rollout whose new lines change the prefix's
/// figures has the cache written anew with every word it keeps.
#[test]
fn real_logs_read_on_from_the_cache_match_whole_reads() {
    for file in [
        "real/claude-code/long-session-with-compaction.jsonl",
        "real/claude-code/tool-heavy.jsonl",
        "real/codex/rollout-with-remote-compaction.jsonl",
    ] {
        let tmp = TempDir::new();
        let dir = tmp.path();
        let log = fs::read_to_string(super::common::testdata(file)).unwrap();
        let lines: Vec<&str> = log.lines().collect();
        let n = lines.len();
        let mut reads = 0;
        for end in [n / 2, n * 3 / 4, n * 3 / 4, n, n] {
            let text: String = lines[..end].iter().map(|l| format!("{l}\n")).collect();
            fs::write(dir.join("t.jsonl"), text).unwrap();
            let session = fs::read_dir(dir.join("st")).ok().and_then(|mut d| {
                let e = d.next()?.ok()?;
                Some(e.file_name().to_string_lossy().into_owned())
            });
            let Some(session) = session else {
                // The first turn, read whole, names the session's folder.
                let limit = LIMIT.to_string();
                let args = ["project", "t.jsonl", "--state-dir", "st", "--limit", &limit];
                assert!(noa(dir, &args).status.success(), "{file}");
                continue;
            };
            copy_dir(&dir.join("st"), &dir.join("cold"));
            fs::remove_file(dir.join("cold").join(&session).join("read-cache.bin")).unwrap();
            let warm = project_file(dir, "st", "t.jsonl", &session);
            let cold = project_file(dir, "cold", "t.jsonl", &session);
            let what = format!("{file}, {end} of {n} lines");
            assert_eq!(cold.report["read"], "whole", "{what}");
            reads += usize::from(warm.report["read"] == "cache");
            assert!(warm.view == cold.view, "{what}: the views differ");
            assert!(warm.state == cold.state, "{what}: the states differ");
            let mut report = warm.report.clone();
            report["read"] = cold.report["read"].clone();
            assert_eq!(report, cold.report, "{what}");
            // The long outputs a Claude Code log holds as one string are
            // read from it when needed, never copied into the cache.
            let cache = fs::read(dir.join("st").join(&session).join("read-cache.bin")).unwrap();
            for out in long_string_outputs(&lines[..end]) {
                let copied = cache.windows(out.len()).any(|w| w == out.as_bytes());
                assert!(!copied, "{what}: an output in the cache");
            }
        }
        assert!(reads >= 3, "{file}: {reads} turns read from the cache");
    }
}

/// The `tool_result` outputs of Claude Code records that are one string
/// of 200 bytes or more, all ASCII and without the cut marker (outputs a
/// turn leaves unread).
fn long_string_outputs(lines: &[&str]) -> Vec<String> {
    let mut outputs = Vec::new();
    for line in lines {
        let Ok(r) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let blocks = r["message"]["content"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        outputs.extend(
            (blocks.iter())
                .filter(|b| b["type"] == "tool_result")
                .filter_map(|b| b["content"].as_str())
                .filter(|s| s.len() >= 200 && s.is_ascii() && !s.contains("[truncated"))
                .map(str::to_string),
        );
    }
    outputs
}

/// A transcript replaced by another of the same session, beside the state
/// that other one left but the read cache of the first: what the cache
/// holds belongs to no message of the state. The turn is the one the new
/// transcript gives read whole, not a refusal of the state: what the
/// transcript makes a turn say of its state waits for the prefix's digest.
#[test]
fn a_stale_cache_beside_the_state_of_another_transcript_is_not_held_against_it() {
    let tmp = TempDir::new();
    let dir = tmp.path();
    let (a, b) = (synth::chat_session(1, 12), synth::chat_session(2, 16));
    fs::write(dir.join("t.jsonl"), synth::jsonl(&a)).unwrap();
    project_file(dir, "st", "t.jsonl", "t");
    fs::write(dir.join("t.jsonl"), synth::jsonl(&b)).unwrap();
    project_file(dir, "other", "t.jsonl", "t");
    // The other transcript's state, beside the first one's cache.
    copy_dir(&dir.join("other"), &dir.join("cold"));
    fs::remove_file(dir.join("cold/t/read-cache.bin")).unwrap();
    copy_dir(&dir.join("cold"), &dir.join("st2"));
    fs::copy(
        dir.join("st/t/read-cache.bin"),
        dir.join("st2/t/read-cache.bin"),
    )
    .unwrap();
    let warm = project_file(dir, "st2", "t.jsonl", "t");
    let cold = project_file(dir, "cold", "t.jsonl", "t");
    assert_eq!(warm.report["read"], "whole");
    assert!(warm.view == cold.view, "the views differ");
    assert_eq!(warm.report, cold.report);
    assert!(warm.state == cold.state, "the states differ");
}

/// Flips a byte in the middle of every long output of the chat log `text`
/// the read cache at `cache` holds; returns how many. An output in parts
/// is held as its parts' text.
fn damage_long_outputs(cache: &Path, text: &str) -> usize {
    let mut bytes = fs::read(cache).unwrap();
    let mut damaged = 0;
    for line in text.lines() {
        let m: Value = serde_json::from_str(line).unwrap();
        let parts = m["content"][0]["text"].as_str();
        let Some(out) = m["content"]
            .as_str()
            .or(parts)
            .filter(|_| m["role"] == "tool")
        else {
            continue;
        };
        let out = out.as_bytes();
        if let Some(at) = (out.len() >= 200)
            .then(|| bytes.windows(out.len()).position(|w| w == out))
            .flatten()
        {
            bytes[at + out.len() / 2] ^= 1;
            damaged += 1;
        }
    }
    fs::write(cache, &bytes).unwrap();
    damaged
}

/// A transcript replaced by another that shares no message with it, whose
/// first line ends where the first one did, beside the first one's state
/// and read cache; the turn counts with another tokenizer, so it must read
/// the words the cache kept back before projecting. A first turn's cache
/// holds none of the long outputs: it points to them in the transcript,
/// where another transcript's bytes now lie, and that sends the turn to
/// the whole read. The state is refused as it is with no cache: it belongs
/// to the transcript the cache read, not this one.
#[test]
fn a_transcript_read_whole_before_projecting_is_checked_against_the_state() {
    let tmp = TempDir::new();
    let dir = tmp.path();
    let first = synth::jsonl(&synth::chat_session(1, 12));
    fs::write(dir.join("t.jsonl"), &first).unwrap();
    project_file(dir, "st", "t.jsonl", "t");
    assert_eq!(
        damage_long_outputs(&dir.join("st/t/read-cache.bin"), &first),
        0
    );
    let line = json!({"role": "user", "content": ""}).to_string();
    let pad = "x".repeat(first.len() - line.len() - 1);
    let other = format!(
        "{}\n{}",
        json!({"role": "user", "content": pad}),
        synth::jsonl(&synth::chat_session(2, 16))
    );
    assert_eq!(other.as_bytes()[first.len() - 1], b'\n');
    fs::write(dir.join("t.jsonl"), &other).unwrap();
    copy_dir(&dir.join("st"), &dir.join("cold"));
    fs::remove_file(dir.join("cold/t/read-cache.bin")).unwrap();
    for st in ["cold", "st"] {
        let out = noa(
            dir,
            &[
                "project",
                "t.jsonl",
                "--state-dir",
                st,
                "--tokenizer",
                "o200k",
            ],
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{st}: {err}");
        assert!(
            err.contains("belongs to a different transcript"),
            "{st}: {err}"
        );
    }
}

/// Words the read cache kept back (outputs in parts, which the transcript
/// does not hold as one string), damaged when a call needs them for its
/// archives (each long one carries its own digest, outside the cache's
/// checksum): the call is answered from the transcript read whole, as it
/// is without the cache, rather than failing on the cache.
#[test]
fn a_damaged_word_in_the_cache_costs_a_whole_read_not_the_call() {
    let tmp = TempDir::new();
    let dir = tmp.path();
    let mut log = Log {
        shape: Shape::Chat,
        records: 0,
        parent: Value::Null,
    };
    let mut text = String::new();
    let mut nudge = None;
    for chunk in synth::chat_session(11, 90).chunks(5) {
        for m in chunk {
            // Outputs in parts: the transcript does not hold their words as
            // one string, so the cache does.
            for line in log.lines(m).lines() {
                let mut m: Value = serde_json::from_str(line).unwrap();
                if let Some(out) = m["content"].as_str().filter(|_| m["role"] == "tool") {
                    m["content"] = json!([{"type": "text", "text": out}]);
                }
                text.push_str(&format!("{m}\n"));
            }
        }
        fs::write(dir.join("t.jsonl"), &text).unwrap();
        let t = project(dir, "st", Shape::Chat);
        if !t.report["nudge"].is_null() {
            nudge = Some(last_text(&t.view));
            break;
        }
    }
    let nudge = nudge.expect("a nudge");
    assert!(damage_long_outputs(&dir.join("st/t/read-cache.bin"), &text) > 0);
    let mut warm = 0;
    compress(dir, &mut text, &mut log, (&nudge, 1), &mut warm);
    assert_eq!(warm, 0, "the call was answered from the damaged cache");
}

#[test]
fn a_cache_from_another_version_or_damaged_is_not_used() {
    let tmp = TempDir::new();
    let dir = tmp.path();
    let messages = synth::chat_session(13, 20);
    fs::write(dir.join("t.jsonl"), synth::jsonl(&messages)).unwrap();
    assert_eq!(turn(dir, Shape::Chat, "first").1, "whole");
    assert_eq!(turn(dir, Shape::Chat, "second").1, "cache");
    let cache = dir.join("st/t/read-cache.bin");
    let bytes = fs::read(&cache).unwrap();
    let version = env!("CARGO_PKG_VERSION");
    let at = bytes
        .windows(version.len())
        .position(|w| w == version.as_bytes())
        .unwrap();
    let mut other = bytes.clone();
    other[at] = b'9';
    fs::write(&cache, &other).unwrap();
    assert_eq!(turn(dir, Shape::Chat, "another version").1, "whole");
    fs::write(&cache, &bytes[..bytes.len() / 2]).unwrap();
    assert_eq!(turn(dir, Shape::Chat, "cut short").1, "whole");
    // Its trailer whole, a message damaged: the prefix's digest was started
    // from the trailer before the damage was found, and is let go.
    let mut damaged = bytes.clone();
    damaged[bytes.len() / 3] ^= 0x55;
    fs::write(&cache, &damaged).unwrap();
    assert_eq!(turn(dir, Shape::Chat, "a message damaged").1, "whole");
    fs::remove_file(&cache).unwrap();
    assert_eq!(
        turn(
            dir,
            Shape::Chat,
            "no cache, as a state from before the cache"
        )
        .1,
        "whole"
    );
    assert_eq!(turn(dir, Shape::Chat, "and after it").1, "cache");
    // The state lost, the cache kept: the state comes back from the log,
    // which needs every word.
    fs::remove_file(dir.join("st/t/state.json")).unwrap();
    assert_eq!(project(dir, "st", Shape::Chat).report["read"], "whole");
}

#[test]
fn a_cache_that_cannot_be_written_costs_a_warning_not_the_turn() {
    let tmp = TempDir::new();
    let dir = tmp.path();
    let messages = synth::chat_session(16, 20);
    fs::write(dir.join("t.jsonl"), synth::jsonl(&messages)).unwrap();
    turn(dir, Shape::Chat, "first");
    // A directory where the cache goes: the rename over it fails.
    let cache = dir.join("st/t/read-cache.bin");
    fs::remove_file(&cache).unwrap();
    fs::create_dir_all(cache.join("in-the-way")).unwrap();
    let out = noa(dir, &["project", "t.jsonl", "--state-dir", "st", "-v"]);
    assert!(out.status.success());
    assert!(!out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("the read cache was not saved"));
    // The cache is written beside the projection on such a turn (no blocks
    // yet): its temp file goes with it.
    let left: Vec<_> = fs::read_dir(dir.join("st/t"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    assert_eq!(project(dir, "st", Shape::Chat).report["read"], "whole");
}

#[test]
fn a_dry_run_reads_from_the_cache_but_leaves_it_alone() {
    let tmp = TempDir::new();
    let dir = tmp.path();
    let messages = synth::chat_session(14, 20);
    fs::write(dir.join("t.jsonl"), synth::jsonl(&messages[..30])).unwrap();
    turn(dir, Shape::Chat, "first");
    let cache = fs::read(dir.join("st/t/read-cache.bin")).unwrap();
    fs::write(dir.join("t.jsonl"), synth::jsonl(&messages)).unwrap();
    let out = noa(
        dir,
        &[
            "project",
            "t.jsonl",
            "--state-dir",
            "st",
            "--dry-run",
            "--report",
            "json",
        ],
    );
    assert!(out.status.success());
    let report: Value = json_report_of(&out);
    assert_eq!(report["read"], "cache");
    assert_eq!(fs::read(dir.join("st/t/read-cache.bin")).unwrap(), cache);
}

/// A folder holding t.jsonl, a generated chat session of `turns` turns.
fn chat_log(seed: u64, turns: usize) -> TempDir {
    let tmp = TempDir::new();
    let log = synth::jsonl(&synth::chat_session(seed, turns));
    fs::write(tmp.path().join("t.jsonl"), log).unwrap();
    tmp
}

#[test]
fn a_turn_counted_by_another_tokenizer_reads_back_what_it_set_aside() {
    let tmp = chat_log(17, 40);
    let dir = tmp.path();
    let args = |st: &'static str| {
        [
            "project",
            "t.jsonl",
            "--state-dir",
            st,
            "--tokenizer",
            "o200k",
            "--limit",
            "20000",
        ]
    };
    let plain = noa(dir, &args("plain"));
    let aside = noa_setting_aside(dir, &args("aside"));
    assert!(plain.status.success() && aside.status.success());
    assert!(plain.stdout == aside.stdout, "the views differ");
    for file in ["state.json", "read-cache.bin", "refs.log"] {
        let read = |st: &str| fs::read(dir.join(st).join("t").join(file)).unwrap();
        assert!(read("plain") == read("aside"), "{file} differs");
    }
}

#[test]
fn a_first_turn_that_fails_leaves_no_state_dir_for_what_it_set_aside() {
    let tmp = chat_log(19, 30);
    let dir = tmp.path();
    let mut log = fs::read_to_string(dir.join("t.jsonl")).unwrap();
    log.push_str("{\"role\": \"user\", \"content\": \n");
    fs::write(dir.join("t.jsonl"), log).unwrap();
    let out = noa_setting_aside(dir, &["project", "t.jsonl"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        !dir.join(".noa").exists(),
        "a failed read left the state dir"
    );
}

#[test]
fn a_dry_run_sets_nothing_aside() {
    let tmp = chat_log(18, 20);
    let dir = tmp.path();
    let out = noa_setting_aside(dir, &["project", "t.jsonl", "--dry-run"]);
    assert!(out.status.success());
    assert!(!out.stdout.is_empty());
    assert!(!dir.join(".noa").exists(), "a dry run made the state dir");
}

/// The state dir of a session as an older noa left it: version 1 (every
/// map inline) or version 2 (the ref map in refs.log, the rest inline).
fn as_older_version(session: &Path, version: u64) {
    let mut state = super::common::state_json(&session.join("state.json"));
    let on_disk: Value =
        serde_json::from_slice(&fs::read(session.join("state.json")).unwrap()).unwrap();
    state["version"] = version.into();
    if version == 3 {
        // Version 3 kept every log, its block lines listing the messages a
        // block stands for whether or not they were its own.
        let blocks: String = fs::read_to_string(session.join("blocks.jsonl"))
            .unwrap()
            .lines()
            .map(|l| {
                let mut b: Value = serde_json::from_str(l).unwrap();
                if b.get("effectiveMessageIds").is_none() {
                    b["effectiveMessageIds"] = b["directMessageIds"].clone();
                }
                format!("{b}\n")
            })
            .collect();
        fs::write(session.join("blocks.jsonl"), &blocks).unwrap();
        let mut v3 = on_disk;
        v3["version"] = 3.into();
        v3["blocksLog"] = json!({
            "bytes": blocks.len(),
            "lines": blocks.lines().count(),
            "digest": noa::store::digest(blocks.as_bytes()),
        });
        fs::write(session.join("state.json"), v3.to_string()).unwrap();
        return;
    }
    if version == 2 {
        state["refsLog"] = on_disk["refsLog"].clone();
        state["messageRefs"] = on_disk["messageRefs"].clone();
    } else {
        fs::remove_file(session.join("refs.log")).unwrap();
    }
    for log in ["blocks.jsonl", "tokens.log", "truncated.log"] {
        let _ = fs::remove_file(session.join(log));
    }
    fs::write(
        session.join("state.json"),
        serde_json::to_vec_pretty(&state).unwrap(),
    )
    .unwrap();
}

#[test]
fn a_state_an_older_version_wrote_gives_the_same_turn_warm_and_whole() {
    let dir = TempDir::new();
    let stats = super::agent_loop::run_loop_in(dir.path(), 4, 60, LIMIT, &[]);
    assert!(stats.blocks > 0, "{stats:?}");
    let mut text = fs::read_to_string(dir.path().join("agent.jsonl")).unwrap();
    text.push_str(&format!(
        "{}\n",
        json!({"role": "user", "content": "Carry on with the cache sizing."})
    ));
    fs::write(dir.path().join("agent.jsonl"), &text).unwrap();
    for version in [1, 2, 3] {
        copy_dir(
            &dir.path().join("st"),
            &dir.path().join(format!("v{version}")),
        );
        as_older_version(&dir.path().join(format!("v{version}/agent")), version);
    }
    copy_dir(&dir.path().join("st"), &dir.path().join("whole"));
    fs::remove_file(dir.path().join("whole/agent/read-cache.bin")).unwrap();
    let turn = |st: &str| {
        let t = project_file(dir.path(), st, "agent.jsonl", "agent");
        let state = super::common::state_json(&dir.path().join(st).join("agent/state.json"));
        (t.view, t.report["read"].clone(), state)
    };
    let (view, read, state) = turn("st");
    assert_eq!(read, "cache");
    for st in ["v1", "v2", "v3", "whole"] {
        let (v, r, s) = turn(st);
        assert!(v == view, "{st}: the views differ");
        assert_eq!(s, state, "{st}: the states differ");
        assert_eq!(r, if st == "whole" { "whole" } else { "cache" }, "{st}");
    }
    // The older states were moved to the current version and its logs.
    for st in ["v1", "v2", "v3"] {
        let session = dir.path().join(st).join("agent");
        let on_disk: Value =
            serde_json::from_slice(&fs::read(session.join("state.json")).unwrap()).unwrap();
        assert_eq!(on_disk["version"], noa::engine::STATE_VERSION, "{st}");
        assert!(session.join("blocks.jsonl").exists() && session.join("refs.log").exists());
    }
}

#[test]
fn a_cache_counted_by_another_tokenizer_gives_the_turn_a_whole_read_gives() {
    let tmp = TempDir::new();
    let dir = tmp.path();
    let messages = synth::chat_session(17, 30);
    let run = |st: &str, tokenizer: &str| {
        let limit = LIMIT.to_string();
        let args = [
            "project",
            "t.jsonl",
            "--state-dir",
            st,
            "--limit",
            &limit,
            "--tokenizer",
            tokenizer,
            "--report",
            "json",
        ];
        let out = noa(dir, &args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{st}: {err}");
        let report: Value = json_report(&err);
        (
            String::from_utf8(out.stdout).unwrap(),
            report["read"].clone(),
        )
    };
    fs::write(dir.join("t.jsonl"), synth::jsonl(&messages[..40])).unwrap();
    run("st", "estimate");
    // Counted by another tokenizer, then read on from the cache that turn
    // wrote: each turn gives what a whole read gives.
    for end in [50, 60, 60] {
        fs::write(dir.join("t.jsonl"), synth::jsonl(&messages[..end])).unwrap();
        copy_dir(&dir.join("st"), &dir.join("cold"));
        fs::remove_file(dir.join("cold/t/read-cache.bin")).unwrap();
        let (warm, read) = run("st", "o200k");
        let (cold, _) = run("cold", "o200k");
        assert!(warm == cold, "{end} messages: the views differ");
        assert_eq!(read, "cache", "{end} messages");
    }
}

/// A warm turn loads the state while it decodes the read cache, but only
/// once it holds the session's lock: what another writer saved while the
/// turn waited for the lock is the state the turn starts from.
#[test]
fn a_warm_turn_starts_from_the_state_a_writer_left_while_it_waited() {
    let tmp = TempDir::new();
    let dir = tmp.path();
    fs::write(
        dir.join("t.jsonl"),
        synth::jsonl(&synth::chat_session(14, 20)),
    )
    .unwrap();
    turn(dir, Shape::Chat, "first");
    let session = dir.join("st/t");
    copy_dir(&session, &dir.join("before"));
    // The state the other writer leaves: the window an overflow error
    // named, which every later turn keeps.
    let err = "This model's maximum context length is 16384 tokens. However, your messages resulted in 20000 tokens.";
    let learned = noa(
        dir,
        &[
            "project",
            "t.jsonl",
            "--state-dir",
            "st",
            "--overflow-error",
            err,
        ],
    );
    assert!(learned.status.success());
    copy_dir(&session, &dir.join("learned"));
    let put = |from: &str| {
        for e in fs::read_dir(dir.join(from)).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_file() && e.file_name() != "read-cache.bin" {
                fs::copy(e.path(), session.join(e.file_name())).unwrap();
            }
        }
    };
    put("before");

    let lock = fs::File::open(session.join(".lock")).unwrap();
    lock.lock().unwrap();
    let turn = std::process::Command::new(env!("CARGO_BIN_EXE_noa"))
        .args([
            "project",
            "t.jsonl",
            "--state-dir",
            "st",
            "--report",
            "json",
        ])
        .current_dir(dir)
        .env_remove("NOA_STATE_DIR")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(400));
    put("learned");
    drop(lock);
    let out = turn.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let report: Value = json_report(&err);
    assert_eq!(report["read"], "cache", "{report}");
    assert_eq!(report["window"], 16384, "{report}");
}

/// A transcript of a few megabytes, whose prefix a warm turn digests a
/// megabyte at a time on two threads: an edit that keeps every length, in
/// the first megabyte, a middle one or the last (short of a megabyte),
/// sends the turn to a whole read, and the transcript as the last turn
/// read it, unchanged or appended to, is read on from the cache; each turn
/// gives what a whole read gives.
#[test]
fn an_edit_in_any_megabyte_of_a_long_prefix_costs_a_whole_read() {
    let tmp = chat_log(23, 700);
    let dir = tmp.path();
    let path = dir.join("t.jsonl");
    let mut text = fs::read_to_string(&path).unwrap();
    let mb = 1 << 20;
    assert!(text.len() > 3 * mb, "{} bytes", text.len());
    turn(dir, Shape::Chat, "first");
    assert_eq!(turn(dir, Shape::Chat, "unchanged").1, "cache");
    for at in [100, 2 * mb - 10, text.len() - 3000] {
        // The first letter of the next word of the generated prose.
        let found = at
            + ["parser", "token", "cache", "range", "error", "module"]
                .iter()
                .filter_map(|w| text[at..].find(w))
                .min()
                .expect("a word to edit");
        text.replace_range(found..found + 1, &text[found..=found].to_uppercase());
        fs::write(&path, &text).unwrap();
        let what = format!("edited at {found}");
        assert_eq!(turn(dir, Shape::Chat, &what).1, "whole", "{what}");
    }
    text.push_str(&synth::jsonl(&[
        json!({"role": "user", "content": "And the tests?"}),
    ]));
    fs::write(&path, &text).unwrap();
    assert_eq!(turn(dir, Shape::Chat, "appended").1, "cache");
}
