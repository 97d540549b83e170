//! `noa inspect` through the binary, on a real Claude Code session given three
//! tier-1 compressions and one tier-2 consolidation.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};

use crate::common::{TempDir, between, golden, noa, project, testdata};
use crate::compress::{ClaudeCode, SUMMARY, Session, tagged};

/// Fixed clock for archives, so their bytes are the same on every run.
const NOW: &str = "1789000000";

/// Length of the test's canonical temp dir. Archive paths are written into
/// summaries and panels, so the token figures in the golden table depend on
/// the path's length (never on its text): padding it to a fixed length makes
/// the table the same on every machine.
const DIR_LEN: usize = 100;

/// A fresh directory whose canonical path is [`DIR_LEN`] bytes long, removed
/// on drop.
struct FixedDir(PathBuf);

impl FixedDir {
    fn new() -> FixedDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let base = fs::canonicalize(std::env::temp_dir()).unwrap();
        let mut name = format!(
            "noa-inspect-{}-{}-",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        );
        let used = base.to_str().unwrap().len() + 1;
        assert!(
            used + name.len() <= DIR_LEN,
            "temp dir {} too long for this test",
            base.display()
        );
        name.push_str(&"x".repeat(DIR_LEN - used - name.len()));
        let p = base.join(name);
        let _ = fs::remove_dir_all(&p);
        fs::create_dir_all(&p).unwrap();
        assert_eq!(p.to_str().unwrap().len(), DIR_LEN);
        FixedDir(p)
    }
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for FixedDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// `noa` with the clock fixed.
fn noa_at(cwd: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_noa"))
        .args(args)
        .current_dir(cwd)
        .env("NO_COLOR", "1")
        .env("NOA_NOW", NOW)
        .env_remove("NOA_STATE_DIR")
        .output()
        .unwrap()
}

fn apply(s: &mut ClaudeCode, state: &Path, call_id: &str, args: Value) {
    s.append_call(call_id, &args);
    let out = noa_at(
        state,
        &[
            "apply",
            s.path().to_str().unwrap(),
            "--state-dir",
            state.to_str().unwrap(),
        ],
    );
    let panel = String::from_utf8(out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{panel}");
    s.append_result(call_id, panel.trim_end(), false);
}

/// The session with b1..b3 (tier 1) folded into b4 (tier 2).
struct Compressed {
    dir: FixedDir,
    session: ClaudeCode,
}

impl Compressed {
    fn new() -> Compressed {
        let dir = FixedDir::new();
        let mut session = ClaudeCode::new(dir.path());
        let state = dir.path().join("state");
        let (view, _) = project(session.path(), &state, &[]);
        let tags = tagged(&view);
        for (k, (a, b)) in [(1, 8), (9, 16), (17, 24)].into_iter().enumerate() {
            let args = json!({"topic": format!("part {k}"), "content": [{"startId": tags[a].0, "endId": tags[b].0, "summary": format!("{SUMMARY} (part {k})")}]});
            apply(&mut session, &state, &format!("cmp_{k}"), args);
            project(session.path(), &state, &[]);
        }
        let args = json!({"topic": "consolidated", "content": [{"startId": "b1", "endId": "b3", "summary": format!("Tier 2 — {SUMMARY}")}]});
        apply(&mut session, &state, "cmp_t2", args);
        Compressed { dir, session }
    }

    fn state(&self) -> String {
        self.dir.path().join("state").to_str().unwrap().to_string()
    }

    fn transcript(&self) -> &str {
        self.session.path().to_str().unwrap()
    }

    /// `noa inspect TRANSCRIPT --state-dir STATE extra…`
    fn inspect(&self, extra: &[&str]) -> Output {
        let state = self.state();
        let mut args = vec!["inspect", self.transcript(), "--state-dir", &state];
        args.extend_from_slice(extra);
        noa_at(self.dir.path(), &args)
    }

    /// Replaces the temp dir with `[TMP]`.
    fn scrub(&self, s: &str) -> String {
        s.replace(self.dir.path().to_str().unwrap(), "[TMP]")
    }
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

#[test]
fn inspect_shows_blocks_tiers_json_and_archives() {
    let c = Compressed::new();
    let text = stdout(&c.inspect(&[]));
    for (id, tier) in [("b1", "T1"), ("b2", "T1"), ("b3", "T1"), ("b4", "T2")] {
        assert!(
            text.lines()
                .any(|l| l.starts_with(&format!("| {id} ")) && l.contains(&format!("| {tier} "))),
            "{id} {tier} missing:\n{text}"
        );
    }
    assert!(
        text.contains("├── b1 (T1)") && text.contains("└── b3 (T1)"),
        "{text}"
    );
    assert!(text.contains("Request: "), "{text}");
    golden("inspect.claude-code.txt", &c.scrub(&text));

    // JSON: parses, lists b1..b4, nests the tree, carries the map.
    let v: Value = serde_json::from_str(&stdout(&c.inspect(&["--json"]))).unwrap();
    let ids: Vec<&str> = v["blocks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["b1", "b2", "b3", "b4"]);
    assert_eq!(v["blocks"][3]["tier"], 2);
    assert_eq!(v["blocks"][3]["active"], true);
    assert_eq!(v["blocks"][0]["active"], false);
    assert_eq!(v["stats"]["compressions"], 4);
    assert_eq!(v["stats"]["next_block_id"], "b5");
    let tree = &v["tree"][0];
    assert_eq!(tree["id"], "b4");
    let kids: Vec<&str> = tree["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["id"].as_str().unwrap())
        .collect();
    assert_eq!(kids, ["b1", "b2", "b3"]);
    let snapshot = serde_json::to_string_pretty(
        &json!({"blocks": v["blocks"], "stats": v["stats"], "tree": v["tree"]}),
    )
    .unwrap();
    golden("inspect.claude-code.json", &c.scrub(&snapshot));
    assert!(v["request"].as_u64().unwrap() > 0);
    assert_eq!(v["window"], 200_000);
    assert!(v["breakdown"]["summaries"].as_u64().unwrap() > 0);
    assert!(
        v["map"]["history"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["class"] == "block" && r["block"] == "b4" && r["tier"] == 2),
        "{}",
        v["map"]
    );
    let archive = v["blocks"][0]["archive"].as_str().unwrap();
    assert!(
        archive.starts_with(&format!("{}/tier1/b1_", v["session"].as_str().unwrap())),
        "{archive}"
    );

    // --block prints the archive, as written.
    let block = stdout(&c.inspect(&["--block", "b1"]));
    let path = v["blocks"][0]["archive_path"].as_str().unwrap();
    assert_eq!(block, fs::read_to_string(path).unwrap());
    assert!(block.starts_with("---\nblock: b1\ntier: 1\n"), "{block}");
    assert!(block.contains("created: 2026-09-10T00:26:40Z"), "{block}");
    let b4 = stdout(&c.inspect(&["--block", "4"]));
    assert!(b4.contains("consumed_blocks: [b1, b2, b3]"), "{b4}");
}

#[test]
fn inspect_errors_and_the_state_alone() {
    let c = Compressed::new();
    let out = c.inspect(&["--block", "b9"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no block \"b9\"") && err.contains("b3, b4"),
        "{err}"
    );

    let v: Value = serde_json::from_str(&stdout(&c.inspect(&["--json"]))).unwrap();
    fs::remove_file(v["blocks"][1]["archive_path"].as_str().unwrap()).unwrap();
    let out = c.inspect(&["--block", "b2"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("b2_"));

    // Without a transcript: the state alone, and it says so.
    let session = v["session"].as_str().unwrap();
    let state = c.state();
    let out = noa(
        c.dir.path(),
        &["inspect", "--session", session, "--state-dir", &state],
    );
    let text = stdout(&out);
    assert!(text.contains("No transcript given"), "{text}");
    assert!(
        text.contains("| b4 ") && text.contains("└── b3 (T1)"),
        "{text}"
    );
    assert!(
        !text.contains("Window:") && !text.contains("Context map"),
        "{text}"
    );
    let out = noa(
        c.dir.path(),
        &[
            "inspect",
            "--session",
            session,
            "--state-dir",
            &state,
            "--json",
        ],
    );
    let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["transcript"], false);
    assert_eq!(v["blocks"].as_array().unwrap().len(), 4);
    assert!(v["map"].is_null() && v["request"].is_null());

    // A transcript whose state was lost: rebuilt from its records for the
    // look, saved nowhere, and it says so.
    let fresh = c.dir.path().join("fresh");
    let out = noa(
        c.dir.path(),
        &[
            "inspect",
            c.transcript(),
            "--state-dir",
            fresh.to_str().unwrap(),
        ],
    );
    let text = stdout(&out);
    assert!(text.contains("Blocks (4, 1 active)"), "{text}");
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("had no state: rebuilt it from the 4 Compress call(s)"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("Request: ") && !fresh.exists(), "{text}");
    // One that never compressed: the view alone, and it says so.
    let short = testdata("real/claude-code/short.jsonl");
    let out = noa(
        c.dir.path(),
        &[
            "inspect",
            short.to_str().unwrap(),
            "--state-dir",
            fresh.to_str().unwrap(),
        ],
    );
    let text = stdout(&out);
    assert!(
        text.contains("No state yet") && text.contains("Blocks: none yet."),
        "{text}"
    );

    // Naming nothing, or a session that has no state, is a usage error.
    let out = noa(c.dir.path(), &["inspect"]);
    assert_eq!(out.status.code(), Some(2));
    let out = noa(
        c.dir.path(),
        &["inspect", "--session", "nope", "--state-dir", &state],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no state"));
}

#[test]
fn inspect_svg_writes_a_well_formed_map() {
    let c = Compressed::new();
    let file = c.dir.path().join("map.svg");
    let out = c.inspect(&["--svg", file.to_str().unwrap(), "-q"]);
    stdout(&out);
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let svg = fs::read_to_string(&file).unwrap();
    if let Some(keep) = std::env::var_os("NOA_KEEP_SVG") {
        fs::write(keep, &svg).unwrap();
    }
    check_tags(&svg);
    assert!(svg.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg "));
    assert!(svg.contains("class=\"window-limit\""));
    assert!(svg.contains(">window limit</text>") && svg.contains(">tier 2 block</text>"));
    assert!(svg.contains(">b4 · T2"), "the covered span is labelled");
    assert!(!svg.contains("<script") && !svg.contains("href"));
}

/// Every element opened is closed, in order, under one root.
fn check_tags(svg: &str) {
    let mut stack: Vec<&str> = Vec::new();
    let mut rest = svg.split_once("?>").unwrap().1;
    let mut roots = 0;
    while let Some(open) = rest.find('<') {
        assert!(!rest[..open].contains('>'), "stray > before {open}");
        let close = open + rest[open..].find('>').expect("unclosed tag");
        let tag = &rest[open + 1..close];
        rest = &rest[close + 1..];
        assert_eq!(tag.matches('"').count() % 2, 0, "quotes in <{tag}>");
        if let Some(name) = tag.strip_prefix('/') {
            assert_eq!(stack.pop(), Some(name), "</{name}> out of order");
        } else {
            if stack.is_empty() {
                roots += 1;
            }
            if !tag.ends_with('/') {
                stack.push(tag.split_whitespace().next().unwrap());
            }
        }
    }
    assert!(stack.is_empty(), "left open: {stack:?}");
    assert_eq!(roots, 1);
}

/// One compression on the real session whose range starts at the first user
/// message, which prune keeps in the view: its panel, and the session.
struct TaskCovered {
    dir: FixedDir,
    session: ClaudeCode,
    panel: String,
    /// The first user message's text as the model saw it, ref tag removed.
    task: String,
}

impl TaskCovered {
    fn new() -> TaskCovered {
        let dir = FixedDir::new();
        let mut session = ClaudeCode::new(dir.path());
        let state = dir.path().join("state");
        let (view, _) = project(session.path(), &state, &[]);
        let tags = tagged(&view);
        assert_eq!(tags[0].0, "m00001");
        let args = json!({"topic": "task and setup", "content": [{"startId": tags[0].0, "endId": tags[24].0, "summary": SUMMARY}]});
        session.append_call("cmp_task", &args);
        let out = noa_at(
            &state,
            &[
                "apply",
                session.path().to_str().unwrap(),
                "--state-dir",
                state.to_str().unwrap(),
            ],
        );
        let panel = String::from_utf8(out.stdout).unwrap();
        assert_eq!(out.status.code(), Some(0), "{panel}");
        assert!(
            panel.contains("m00001 is the first user message"),
            "{panel}"
        );
        session.append_result("cmp_task", panel.trim_end(), false);
        TaskCovered {
            dir,
            session,
            panel,
            task: tags[0].1.clone(),
        }
    }

    /// `noa inspect TRANSCRIPT --state-dir STATE extra…`
    fn inspect(&self, extra: &[&str]) -> Output {
        let state = self.dir.path().join("state");
        let mut args = vec![
            "inspect",
            self.session.path().to_str().unwrap(),
            "--state-dir",
            state.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        noa_at(self.dir.path(), &args)
    }

    /// b1's figures in `inspect --json`: (tokens_before, reclaimed).
    fn json_figures(&self) -> (u64, u64) {
        let v: Value = serde_json::from_str(&stdout(&self.inspect(&["--json"]))).unwrap();
        let b = &v["blocks"][0];
        assert_eq!(b["id"], "b1");
        assert_eq!(v["stats"]["tokens_reclaimed"], b["reclaimed"]);
        (
            b["tokens_before"].as_u64().unwrap(),
            b["reclaimed"].as_u64().unwrap(),
        )
    }
}

#[test]
fn reclaimed_is_one_figure_in_inspect_and_the_svg_and_leaves_out_the_task() {
    let c = TaskCovered::new();
    let (before, reclaimed) = c.json_figures();
    let figure = noa::engine::tokens::format(reclaimed as usize);

    // The task stays in the view, so it is not counted: apply's record of
    // what the range held is larger by exactly the task.
    let state = crate::common::state_json(
        &fs::read_dir(c.dir.path().join("state"))
            .unwrap()
            .find_map(|e| {
                let p = e.unwrap().path().join("state.json");
                p.exists().then_some(p)
            })
            .unwrap(),
    );
    // The state keeps the estimator's figure; inspect shows the provider's
    // (each message scaled and rounded on its own).
    let recorded = state["blocks"][0]["compressedTokens"].as_u64().unwrap() as f64;
    let inspected: serde_json::Value =
        serde_json::from_str(&stdout(&c.inspect(&["--json"]))).unwrap();
    let ratio = inspected["ratio"].as_f64().unwrap();
    let task = noa::engine::tokens::estimate(&c.task) as f64;
    let left_out = recorded * ratio - before as f64;
    assert!(
        (left_out - task * ratio).abs() <= 0.01 * before as f64 + 50.0,
        "tokens_before leaves out the first user message, and only it: {left_out} vs {}",
        task * ratio
    );
    assert!(reclaimed < before && reclaimed > 0);

    // The table and the stats line.
    let text = stdout(&c.inspect(&[]));
    let row = text.lines().find(|l| l.starts_with("| b1 ")).unwrap();
    let cells: Vec<&str> = row.split('|').map(str::trim).collect();
    assert_eq!(cells[7], figure, "{text}");
    assert!(
        text.contains(&format!("· {figure} tokens reclaimed ·")),
        "{text}"
    );

    // The SVG label on b1's span.
    let file = c.dir.path().join("map.svg");
    stdout(&c.inspect(&["--svg", file.to_str().unwrap(), "-q"]));
    let svg = fs::read_to_string(&file).unwrap();
    let label = between(&svg, ">b1 · T1 · ", "</text>");
    assert_eq!(
        label.rsplit(" · ").next().unwrap(),
        format!("{figure} reclaimed"),
        "{label}"
    );
}

#[test]
fn the_panel_reports_the_figure_inspect_and_the_svg_report() {
    let c = TaskCovered::new();
    let (_, reclaimed) = c.json_figures();
    let figure = noa::engine::tokens::format(reclaimed as usize);
    let panel = between(&c.panel, "· ~", " reclaimed (");
    assert_eq!(panel, figure, "{}", c.panel);
    let file = c.dir.path().join("map.svg");
    stdout(&c.inspect(&["--svg", file.to_str().unwrap(), "-q"]));
    let svg = fs::read_to_string(&file).unwrap();
    assert!(
        svg.contains(&format!("{panel} reclaimed</text>")),
        "the SVG label says {panel}"
    );
}

/// A session keeps the window its last turn was given: `inspect`, `ranges`
/// and the next `project` without `--limit` speak of it, and say where it
/// came from; a flag given to them wins.
#[test]
fn the_window_is_remembered_and_every_surface_gives_the_same_figures() {
    let dir = TempDir::new();
    let path = dir.path().join("chat.jsonl");
    fs::write(
        &path,
        crate::synth::jsonl(&crate::synth::chat_session(41, 30)),
    )
    .unwrap();
    let p = path.to_str().unwrap();
    let run = |args: &[&str]| -> Value {
        let out = noa(dir.path(), args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = match args[0] {
            "project" => String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap()
                .to_string(),
            _ => String::from_utf8(out.stdout).unwrap(),
        };
        serde_json::from_str(&text).unwrap()
    };
    assert_eq!(
        run(&["project", p, "--limit", "16k", "--report", "json"])["window"],
        16_000
    );
    let inspected = run(&["inspect", p, "--json"]);
    assert_eq!(inspected["window"], 16_000);
    assert_eq!(inspected["window_from"], "--limit of the last turn");
    assert_eq!(run(&["project", p, "--report", "json"])["window"], 16_000);
    let given = run(&["inspect", p, "--json", "--limit", "60000"]);
    assert_eq!(
        (given["window"].clone(), given["window_from"].clone()),
        (json!(60_000), json!("--limit"))
    );
    // The ranges are offered against the same window's budget, under the
    // names project gives them.
    let ranges = run(&["ranges", p, "--json"]);
    assert_eq!(
        (ranges["window"].clone(), ranges["budget"].clone()),
        (json!(16_000), json!(14_000))
    );
    let report = run(&["project", p, "--report", "json", "--dry-run"]);
    let figures = [
        "window",
        "budget",
        "request",
        "before_cuts",
        "source",
        "ratio",
        "breakdown",
        "window_from",
    ];
    for key in figures {
        assert!(!report[key].is_null(), "{key}");
        assert_eq!(ranges[key], report[key], "{key}");
    }
    // And inspect says what project says, under the same names.
    let inspected = run(&["inspect", p, "--json"]);
    for key in figures {
        assert_eq!(inspected[key], report[key], "{key}");
    }
    // The parts add up to the request.
    let parts: u64 = (report["breakdown"].as_object().unwrap().values())
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(parts, report["request"].as_u64().unwrap(), "{report}");
}
