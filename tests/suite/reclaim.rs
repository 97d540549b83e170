//! Dead tool outputs reclaimed without the model: a Read of a file that a
//! later Edit changed, and an output the same call gave again word for
//! word, each shown as one line from the compression after it on, its
//! original archived, and found again by a rebuild.

use std::fs;
use std::path::Path;

use serde_json::{Value, json};

use crate::common::{ClaudeLog, TempDir, noa, state_json};
use crate::providers::check_anthropic;

/// A Claude Code session that talks a while (m00002–m00011; the tests
/// compress m00002–m00009, so the prompt changes before the tools), reads
/// `src/parser.rs`, runs the tests, edits the file, runs them again, then
/// goes on for a while.
fn session() -> ClaudeLog {
    let mut log = ClaudeLog::default();
    log.user("Fix the off-by-one in the parser.");
    for i in 0..5 {
        log.exchange(i, 500, 2_000);
    }
    let source = (1..=120)
        .map(|n| format!("{n:>6}→    let token_{n} = next(&mut input);\n"))
        .collect::<String>();
    log.tool(
        "r1",
        "Read",
        json!({"file_path": "/repo/src/parser.rs"}),
        &source,
    );
    let tests = "test parser::reads_tokens ... ok\n".repeat(60);
    log.tool("t1", "Bash", json!({"command": "cargo test"}), &tests);
    log.tool(
        "e1",
        "Edit",
        json!({"file_path": "/repo/src/parser.rs", "old_string": "a", "new_string": "b"}),
        "The file /repo/src/parser.rs has been updated.",
    );
    log.tool("t2", "Bash", json!({"command": "cargo test"}), &tests);
    for i in 0..12 {
        log.exchange(i, 500, 2_000);
    }
    log
}

/// `noa ARGS…` from `dir`, which must succeed; stdout.
fn run(dir: &Path, args: &[&str]) -> String {
    let out = noa(dir, args);
    assert!(
        out.status.success(),
        "noa {args:?}: {}{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Appends a Compress call over `start`–`end` and answers it with `noa apply`.
fn compress(
    dir: &Path,
    log: &mut ClaudeLog,
    path: &Path,
    (start, end): (&str, &str),
    extra: &[&str],
) {
    let (t, st) = (path.to_str().unwrap(), dir.join("st"));
    let args = json!({"topic": "chat", "content": [{"startId": start, "endId": end,
        "summary": "Talked through the parser's steps with the user; nothing to keep beyond that the parser reads one token at a time."}]});
    let call = json!([{"type": "tool_use", "id": "c1", "name": "Compress", "input": args}]);
    log.answer(call, 500, 2_000);
    log.write(path);
    let mut argv = vec!["apply", t, "--state-dir", st.to_str().unwrap()];
    argv.extend_from_slice(extra);
    let panel = run(dir, &argv);

    let result = json!([{"type": "tool_result", "tool_use_id": "c1", "content": panel}]);
    log.push("user", json!({"role": "user", "content": result}));
    log.exchange(99, 500, 2_000);
    log.write(path);
}

/// The view `noa project` sends, in Anthropic's form, checked against its rules.
fn view(dir: &Path, path: &Path, extra: &[&str]) -> Vec<Value> {
    let st = dir.join("st");
    let mut argv = vec![
        "project",
        path.to_str().unwrap(),
        "--state-dir",
        st.to_str().unwrap(),
        "--to",
        "anthropic",
    ];
    argv.extend_from_slice(extra);
    let out = run(dir, &argv);
    let lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    check_anthropic(&lines).unwrap();
    lines
}

/// The text of every tool result in `view`.
fn results(view: &[Value]) -> Vec<String> {
    view.iter()
        .filter_map(|m| m["content"].as_array())
        .flatten()
        .filter(|b| b["type"] == "tool_result")
        .map(|b| match &b["content"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect()
}

#[test]
fn a_stale_read_gives_way_to_a_line_with_the_compression() {
    let tmp = TempDir::new();
    let path = tmp.path().join("s.jsonl");
    let mut log = session();
    log.write(&path);
    let before = results(&view(tmp.path(), &path, &[]));
    assert!(
        before.iter().all(|r| !r.contains("[noa: stale read")),
        "nothing before a compression"
    );

    // `ranges` offers one range over the tools: the dead outputs would go
    // with its block, so it counts none to reclaim as lines.
    let (t, st) = (path.to_str().unwrap(), tmp.path().join("st"));
    let ranges = run(
        tmp.path(),
        &["ranges", t, "--state-dir", st.to_str().unwrap(), "--json"],
    );
    let ranges: Value = serde_json::from_str(&ranges).unwrap();
    assert_eq!(ranges["ranges"][0]["end_ref"], "m00030", "{ranges}");
    assert_eq!(ranges["reclaimable"]["outputs"], 0, "{ranges}");

    // The call compresses the chat before the tools: the prompt changes
    // from there on, and the dead outputs after it go with it.
    compress(tmp.path(), &mut log, &path, ("m00002", "m00009"), &[]);
    let after = results(&view(tmp.path(), &path, &[]));
    let stale = after
        .iter()
        .find(|r| r.contains("[noa: stale read"))
        .unwrap_or_else(|| panic!("the read is stale: {after:?}"));
    assert!(
        stale.contains("/repo/src/parser.rs was changed after it, by m00016"),
        "{stale}"
    );
    let tests = after
        .iter()
        .filter(|r| r.starts_with("test parser::reads_tokens"));
    assert_eq!(tests.count(), 1, "the later run stays whole: {after:?}");
    let repeat = after
        .iter()
        .find(|r| r.starts_with("[noa: repeat: "))
        .expect("the first run gives way to the second");
    assert!(repeat.contains("word for word, in m00019"), "{repeat}");

    let inspect = run(
        tmp.path(),
        &["inspect", t, "--state-dir", st.to_str().unwrap()],
    );
    assert!(
        inspect.contains(
            "Reclaimed without the model: 1 stale read(s) of files changed since and 1 repeat(s)"
        ),
        "{inspect}"
    );

    // The picture draws them as reclaimed.
    let svg = tmp.path().join("map.svg");
    run(
        tmp.path(),
        &[
            "inspect",
            t,
            "--state-dir",
            st.to_str().unwrap(),
            "--svg",
            svg.to_str().unwrap(),
        ],
    );
    let svg = fs::read_to_string(svg).unwrap();
    assert!(svg.contains("reclaimed tool output"), "the SVG shows them");

    // Each original is archived whole.
    let archive = stale.split(" is in ").nth(1).unwrap();
    let archive = &archive[..archive.find(".md").unwrap() + 3];
    let text = fs::read_to_string(archive).unwrap_or_else(|e| panic!("{archive}: {e}"));
    assert!(
        text.contains("120→    let token_120 = next(&mut input);"),
        "{text}"
    );
    assert!(
        text.contains("topic: stale read of /repo/src/parser.rs"),
        "{text}"
    );

    // A lost state comes back the same from the transcript.
    let check = run(
        tmp.path(),
        &["rebuild", t, "--state-dir", st.to_str().unwrap(), "--check"],
    );
    assert!(check.contains("matches") || check.is_empty(), "{check}");
    // The log's session is `bill` (see `ClaudeLog`).
    let state = |dir: &Path| state_json(&dir.join("bill").join("state.json"));
    let fresh = tmp.path().join("fresh");
    run(
        tmp.path(),
        &["rebuild", t, "--state-dir", fresh.to_str().unwrap()],
    );
    assert_eq!(
        state(&fresh)["host"]["reclaimed"]
            .as_object()
            .map(|o| o.len()),
        Some(2)
    );
    let mut live = state(&st)["host"]["reclaimed"].clone();
    let mut rebuilt = state(&fresh)["host"]["reclaimed"].clone();
    for r in [&mut live, &mut rebuilt] {
        for v in r.as_object_mut().unwrap().values_mut() {
            v.as_object_mut().unwrap().remove("archive");
        }
    }
    assert_eq!(live, rebuilt);
}

#[test]
fn no_reclaim_leaves_every_output() {
    let tmp = TempDir::new();
    let path = tmp.path().join("s.jsonl");
    let mut log = session();
    log.write(&path);
    compress(
        tmp.path(),
        &mut log,
        &path,
        ("m00002", "m00009"),
        &["--no-reclaim"],
    );
    let after = results(&view(tmp.path(), &path, &[]));
    assert!(after.iter().all(|r| !r.contains("[noa: ")), "{after:?}");
}

#[test]
fn dead_outputs_before_the_compression_stay_for_the_cached_prefix() {
    let tmp = TempDir::new();
    let path = tmp.path().join("s.jsonl");
    let mut log = session();
    log.write(&path);
    // The call compresses chat after the tools: the prompt before it is
    // the provider's cached prefix, which reclaiming would make it write
    // again.
    compress(tmp.path(), &mut log, &path, ("m00020", "m00027"), &[]);
    let after = results(&view(tmp.path(), &path, &[]));
    assert!(after.iter().all(|r| !r.contains("[noa: ")), "{after:?}");
}

/// The stale reads of a Claude Code log, found here from its records: the
/// `tool_use_id` of each `Read` whose file a later successful `Edit`,
/// `MultiEdit`, `Write` or `NotebookEdit` changed, with its output's size.
fn stale_reads(text: &str) -> Vec<(String, usize)> {
    let records: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let blocks = |r: &Value| -> Vec<Value> {
        r.pointer("/message/content")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let mut calls = std::collections::HashMap::new();
    let mut results = std::collections::HashMap::new();
    for (i, r) in records.iter().enumerate() {
        for b in blocks(r) {
            match b["type"].as_str() {
                Some("tool_use") => {
                    let path = b["input"]["file_path"]
                        .as_str()
                        .or(b["input"]["notebook_path"].as_str());
                    calls.insert(
                        b["id"].as_str().unwrap_or("").to_string(),
                        (
                            i,
                            b["name"].as_str().unwrap_or("").to_string(),
                            path.map(str::to_string),
                        ),
                    );
                }
                Some("tool_result") => {
                    let body = match &b["content"] {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    results.insert(
                        b["tool_use_id"].as_str().unwrap_or("").to_string(),
                        (i, body),
                    );
                }
                _ => {}
            }
        }
    }
    let changed_after = |path: &str, at: usize| {
        calls.iter().any(|(id, (_, name, p))| {
            ["Edit", "MultiEdit", "Write", "NotebookEdit"].contains(&name.as_str())
                && p.as_deref() == Some(path)
                && results.get(id).is_some_and(|(j, body)| {
                    *j > at && !body.trim_start().starts_with("<tool_use_error>")
                })
        })
    };
    let mut out: Vec<(String, usize)> = calls
        .iter()
        .filter(|(_, (_, name, _))| name == "Read")
        .filter_map(|(id, (_, _, p))| {
            let (at, body) = results.get(id)?;
            (body.len() >= 1_000 && changed_after(p.as_deref()?, *at))
                .then(|| (id.clone(), body.len()))
        })
        .collect();
    out.sort();
    out
}

/// On every bundled Claude Code session: once a compression has passed,
/// how much of its stale reads' text is still in view. The newest tool
/// results (the recent zone's) are left out of the count.
#[test]
fn stale_reads_of_real_sessions_leave_the_view_with_a_compression() {
    let tmp = TempDir::new();
    let mut all = (0, 0);
    for (path, _) in crate::common::real_transcripts() {
        let text = fs::read_to_string(&path).unwrap();
        if !text.contains("\"sessionId\"") {
            continue;
        }
        let stale = stale_reads(&text);
        if stale.is_empty() {
            continue;
        }
        let dir = tmp.path().join(path.file_stem().unwrap());
        fs::create_dir_all(&dir).unwrap();
        let copy = dir.join("t.jsonl");
        fs::copy(&path, &copy).unwrap();
        view(&dir, &copy, &["--limit", "200k"]);
        // A compression over the start of the session: the event turn.
        let args = dir.join("args.json");
        let st = dir.join("st");
        let applied = ["m00020", "m00008"].iter().any(|end| {
            let call = json!({"topic": "start", "content": [{"startId": "m00002", "endId": end,
                "summary": "The session's first steps: the user's request was read and the work began; nothing else to keep."}]});
            fs::write(&args, call.to_string()).unwrap();
            let (t, st, a) = (copy.to_str().unwrap(), st.to_str().unwrap(), args.to_str().unwrap());
            noa(&dir, &["apply", t, "--state-dir", st, "--args", a]).status.success()
        });
        if !applied {
            eprintln!("{}: too short for a compression", path.display());
            continue;
        }
        let after = view(&dir, &copy, &[]);
        let shown: std::collections::HashMap<String, String> = after
            .iter()
            .filter_map(|m| m["content"].as_array())
            .flatten()
            .filter(|b| b["type"] == "tool_result")
            .map(|b| {
                (
                    b["tool_use_id"].as_str().unwrap_or("").to_string(),
                    b["content"].to_string(),
                )
            })
            .collect();
        // The recent zone's: the last ten results in view.
        let order: Vec<&str> = after
            .iter()
            .filter_map(|m| m["content"].as_array())
            .flatten()
            .filter(|b| b["type"] == "tool_result")
            .filter_map(|b| b["tool_use_id"].as_str())
            .collect();
        let recent = &order[order.len().saturating_sub(10)..];
        let (mut left, mut total) = (0, 0);
        for (id, size) in &stale {
            let Some(body) = shown.get(id).filter(|_| !recent.contains(&id.as_str())) else {
                continue;
            };
            total += size;
            if !body.contains("[noa: stale read: ") {
                left += size;
            }
        }
        eprintln!(
            "{}: {} stale read(s); of the {total} bytes of those still in view outside the recent zone, {left} shown whole",
            path.display(),
            stale.len()
        );
        all = (all.0 + left, all.1 + total);
    }
    assert!(all.1 > 0, "the bundled sessions hold stale reads");
    assert!(
        all.0 * 10 <= all.1,
        "{} of {} stale bytes still in view",
        all.0,
        all.1
    );
}

/// Lines of a log in the shape of one format, with a Compress call over
/// `range` made and answered by `noa apply` after `before`, and an exchange
/// after it.
struct Lines {
    lines: Vec<Value>,
    codex: bool,
}

impl Lines {
    fn write(&self, path: &Path) {
        let text: String = self.lines.iter().map(|l| format!("{l}\n")).collect();
        fs::write(path, text).unwrap();
    }

    fn item(&mut self, payload: Value) {
        self.lines.push(match self.codex {
            true => json!({"timestamp": "2026-12-01T10:00:00Z", "type": "response_item", "payload": payload}),
            false => payload,
        });
    }

    fn user(&mut self, text: &str) {
        match self.codex {
            true => self.item(json!({"type": "message", "role": "user",
                "content": [{"type": "input_text", "text": text}]})),
            false => self.item(json!({"role": "user", "content": text})),
        }
    }

    fn assistant(&mut self, text: &str) {
        match self.codex {
            true => self.item(json!({"type": "message", "role": "assistant",
                "content": [{"type": "output_text", "text": text}]})),
            false => self.item(json!({"role": "assistant", "content": text})),
        }
    }

    fn call(&mut self, id: &str, name: &str, args: &str, output: &str) {
        if self.codex {
            self.item(
                json!({"type": "function_call", "name": name, "arguments": args, "call_id": id}),
            );
            self.item(json!({"type": "function_call_output", "call_id": id, "output": output}));
        } else {
            self.item(
                json!({"role": "assistant", "content": null, "tool_calls": [{"id": id,
                "type": "function", "function": {"name": name, "arguments": args}}]}),
            );
            self.item(json!({"role": "tool", "tool_call_id": id, "content": output}));
        }
    }

    fn chat(&mut self, turns: usize) {
        for i in 0..turns {
            self.user(&format!(
                "step {i}: {}",
                "what does the parser do next? ".repeat(30)
            ));
            self.assistant(&format!(
                "step {i}: {}",
                "it reads one token at a time. ".repeat(30)
            ));
        }
    }

    /// A Compress call over `start`–`end`, answered by `noa apply` with
    /// `extra` flags, and a turn after it.
    fn compress(&mut self, dir: &Path, path: &Path, (start, end): (&str, &str), extra: &[&str]) {
        let args = json!({"topic": "chat", "content": [{"startId": start, "endId": end,
            "summary": "Went through the parser step by step; it reads one token at a time and nothing else matters."}]});
        if self.codex {
            self.item(json!({"type": "function_call", "name": "Compress", "arguments": args.to_string(), "call_id": "k1"}));
        } else {
            self.item(json!({"role": "assistant", "content": null, "tool_calls": [{"id": "k1",
                "type": "function", "function": {"name": "Compress", "arguments": args.to_string()}}]}));
        }
        self.write(path);
        let panel = run_on(dir, "apply", path, extra);
        match self.codex {
            true => {
                self.item(json!({"type": "function_call_output", "call_id": "k1", "output": panel}))
            }
            false => self.item(json!({"role": "tool", "tool_call_id": "k1", "content": panel})),
        }
        self.chat(1);
        self.write(path);
    }
}

/// `noa COMMAND PATH --state-dir DIR/st EXTRA…`, which must succeed; stdout.
fn run_on(dir: &Path, command: &str, path: &Path, extra: &[&str]) -> String {
    let st = dir.join("st");
    let mut argv = vec![
        command,
        path.to_str().unwrap(),
        "--state-dir",
        st.to_str().unwrap(),
    ];
    argv.extend_from_slice(extra);
    run(dir, &argv)
}

/// The view `noa project` sends for `path`, as its lines.
fn outputs(dir: &Path, path: &Path, extra: &[&str]) -> String {
    run_on(dir, "project", path, extra)
}

/// A file's text as a read shows it: long enough to be worth a line.
fn source() -> String {
    (1..=80)
        .map(|n| format!("{n:>6}\tlet token_{n} = next(&mut input);\n"))
        .collect()
}

#[test]
fn a_codex_patch_makes_an_earlier_shell_read_stale() {
    let tmp = TempDir::new();
    let path = tmp.path().join("rollout.jsonl");
    let mut log = Lines {
        lines: Vec::new(),
        codex: true,
    };
    log.lines.push(
        json!({"timestamp": "2026-12-01T10:00:00Z", "type": "session_meta",
        "payload": {"id": "cx1", "timestamp": "2026-12-01T10:00:00Z", "cwd": "/repo"}}),
    );
    log.user("Fix the off-by-one in the parser.");
    log.chat(6);
    let read = json!({"cmd": "sed -n '1,200p' src/parser.rs", "workdir": "/repo"}).to_string();
    let listing = json!({"cmd": "ls -la src | head", "workdir": "/repo"}).to_string();
    log.call("r1", "exec_command", &read, &source());
    log.call("l1", "exec_command", &listing, &source());
    let patch =
        "*** Begin Patch\n*** Update File: /repo/src/parser.rs\n@@\n-a\n+b\n*** End Patch\n";
    log.item(
        json!({"type": "custom_tool_call", "status": "completed", "call_id": "p1",
        "name": "apply_patch", "input": patch}),
    );
    log.item(json!({"type": "custom_tool_call_output", "call_id": "p1",
        "output": "Success. Updated the following files:\nM /repo/src/parser.rs\n"}));
    log.chat(30);
    log.write(&path);
    // A turn first, so the call is answered on from the read cache.
    outputs(tmp.path(), &path, &[]);
    log.compress(tmp.path(), &path, ("m00002", "m00011"), &[]);
    let view = outputs(tmp.path(), &path, &[]);
    assert_eq!(
        view.matches("[noa: stale read: /repo/src/parser.rs was changed after it")
            .count(),
        1,
        "{view}"
    );
    assert_eq!(
        view.matches("let token_80").count(),
        1,
        "the piped listing stays: {view}"
    );
    let (t, st) = (path.to_str().unwrap(), tmp.path().join("st"));
    let check = run(
        tmp.path(),
        &["rebuild", t, "--state-dir", st.to_str().unwrap(), "--check"],
    );
    assert!(!check.contains("differ"), "{check}");
}

#[test]
fn a_chat_host_names_its_file_tools_in_the_reclaim_table() {
    let tmp = TempDir::new();
    let path = tmp.path().join("chat.jsonl");
    let mut log = Lines {
        lines: Vec::new(),
        codex: false,
    };
    log.user("Fix the off-by-one in the parser.");
    log.chat(6);
    log.call("r1", "read_file", r#"{"path": "src/parser.py"}"#, &source());
    log.call(
        "w1",
        "write_file",
        r#"{"path": "src/parser.py", "text": "x"}"#,
        "written",
    );
    log.chat(30);
    log.write(&path);
    // Without the table, noa does not know what the tools do.
    let mut plain = Lines {
        lines: log.lines.clone(),
        codex: false,
    };
    let other = tmp.path().join("plain");
    fs::create_dir(&other).unwrap();
    plain.compress(&other, &path, ("m00002", "m00011"), &[]);
    assert!(!outputs(&other, &path, &[]).contains("[noa: stale read"));

    log.write(&path);
    fs::write(
        tmp.path().join("noa.toml"),
        "[reclaim]\nreads = { read_file = \"path\" }\nchanges = { write_file = \"path\" }\n",
    )
    .unwrap();
    log.compress(tmp.path(), &path, ("m00002", "m00011"), &[]);
    let view = outputs(tmp.path(), &path, &[]);
    assert!(
        view.contains("[noa: stale read: src/parser.py was changed after it, by m00016"),
        "{view}"
    );
}

#[test]
fn the_long_input_of_a_failed_call_is_shortened_with_a_compression() {
    let tmp = TempDir::new();
    let path = tmp.path().join("s.jsonl");
    let mut log = ClaudeLog::default();
    log.user("Write the parser.");
    for i in 0..5 {
        log.exchange(i, 500, 2_000);
    }
    let content = "fn next(input: &mut Input) -> Token { todo!() }\n".repeat(40);
    log.tool(
        "w1",
        "Write",
        json!({"file_path": "/repo/src/parser.rs", "content": content}),
        "<tool_use_error>File has not been read yet. Read it first before writing to it.</tool_use_error>",
    );
    for i in 0..12 {
        log.exchange(i, 500, 2_000);
    }
    log.write(&path);
    let t = path.to_str().unwrap();
    let st = tmp.path().join("st");
    run(
        tmp.path(),
        &["project", t, "--state-dir", st.to_str().unwrap()],
    );
    compress(tmp.path(), &mut log, &path, ("m00002", "m00009"), &[]);
    let view = view(tmp.path(), &path, &[]);
    let write = (view.iter())
        .filter_map(|m| m["content"].as_array())
        .flatten()
        .find(|b| b["type"] == "tool_use" && b["name"] == "Write")
        .expect("the call stays, paired with its result");
    assert_eq!(
        write["input"]["file_path"], "/repo/src/parser.rs",
        "{write}"
    );
    let note = write["input"]["content"].as_str().unwrap();
    assert!(
        note.starts_with("[noa: spent input: this call failed, as m00013 says"),
        "{note}"
    );
    let archive = note.split(" are in ").nth(1).unwrap().trim_end_matches(']');
    let text = fs::read_to_string(archive).unwrap_or_else(|e| panic!("{archive}: {e}"));
    assert!(text.contains("todo!()"), "{text}");
    // The session materialized keeps the call as the host made it.
    let baked = run(
        tmp.path(),
        &["materialize", t, "--state-dir", st.to_str().unwrap()],
    );
    assert!(
        baked.contains("todo!()") && !baked.contains("[noa: spent input"),
        "{baked}"
    );
    let check = run(
        tmp.path(),
        &["rebuild", t, "--state-dir", st.to_str().unwrap(), "--check"],
    );
    assert!(!check.contains("differ"), "{check}");
}
