//! Rebuild, lineage and host compactions.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use serde_json::{Value, json};

use crate::agent_loop::{Fault, run_loop_in};
use crate::common::{TempDir, noa, project, testdata};
use crate::synth::{chat_session, jsonl};

/// Every archive under a session dir, with its bytes.
pub fn archives(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    for tier in ["tier1", "tier2", "tier3"] {
        let Ok(entries) = fs::read_dir(dir.join(tier)) else {
            continue;
        };
        for e in entries {
            let p = e.unwrap().path();
            out.insert(
                format!("{tier}/{}", p.file_name().unwrap().to_string_lossy()),
                fs::read(&p).unwrap(),
            );
        }
    }
    out
}

pub fn blocks(state: &Value) -> Vec<Value> {
    state["blocks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            json!([
                b["blockId"],
                b["tier"],
                b["summary"],
                b["startRef"],
                b["endRef"],
                b["active"],
                b["directBlockIds"],
                b["effectiveMessageIds"]
            ])
        })
        .collect()
}

#[test]
fn rebuild_after_a_loop_gives_back_the_live_state() {
    let dir = TempDir::new();
    let stats = run_loop_in(
        dir.path(),
        5,
        120,
        30_000,
        &[
            (2, Fault::Partial),
            (4, Fault::Rejected),
            (6, Fault::Overreach),
        ],
    );
    eprintln!("loop at 30K: {stats:?}");
    assert!(stats.blocks >= 4, "{stats:?}");
    assert_eq!(stats.rejected, 1, "{stats:?}");
    let session = dir.path().join("st/agent");
    let state_path = session.join("state.json");
    let live = super::common::state_json(&state_path);
    let live_refs = super::common::refs_of(&state_path);
    let before = archives(&session);
    assert_eq!(before.len(), live["blocks"].as_array().unwrap().len());

    // The partly successful call's panel records its error next to its block.
    let transcript = fs::read_to_string(dir.path().join("agent.jsonl")).unwrap();
    let partial = transcript.lines().any(|l| {
        l.contains("\"role\":\"tool\"") && l.contains("m09990..m09999: ") && l.contains("(T1)=")
    });
    assert!(
        transcript.contains("(recent zone)") || transcript.contains("Stopped the range"),
        "the zone clipped some range"
    );
    assert!(
        partial,
        "the loop must record a partial success:\n{}",
        transcript
            .lines()
            .filter(|l| l.contains("▣ noa"))
            .collect::<Vec<_>>()
            .join("\n")
    );

    let view_of = || {
        noa(
            dir.path(),
            &[
                "project",
                "agent.jsonl",
                "--state-dir",
                "st",
                "--limit",
                "30000",
                "--dry-run",
            ],
        )
        .stdout
    };
    let live_view = view_of();
    fs::remove_file(&state_path).unwrap();
    assert_eq!(
        String::from_utf8(view_of()).unwrap(),
        String::from_utf8(live_view).unwrap(),
        "without state.json, project shows the view the state would have given"
    );
    // No window given: what each call made is in its recorded result.
    let out = noa(dir.path(), &["rebuild", "agent.jsonl", "--state-dir", "st"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = String::from_utf8(out.stdout).unwrap();
    assert!(
        report.contains("warn: m09990..m09999:"),
        "errors of a partial success are kept as warnings:\n{report}"
    );
    let rebuilt = super::common::state_json(&state_path);
    assert_eq!(blocks(&rebuilt), blocks(&live));
    assert_eq!(super::common::refs_of(&state_path), live_refs);
    assert_eq!(
        archives(&session),
        before,
        "archives are adopted byte for byte"
    );

    let out = noa(
        dir.path(),
        &["rebuild", "agent.jsonl", "--state-dir", "st", "--check"],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );

    let kept = fs::read(&state_path).unwrap();
    let out = noa(dir.path(), &["rebuild", "agent.jsonl", "--state-dir", "st"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--force"));
    assert_eq!(
        fs::read(&state_path).unwrap(),
        kept,
        "a refused rebuild leaves state.json untouched"
    );
}

#[test]
fn check_reports_every_difference() {
    let dir = TempDir::new();
    run_loop_in(dir.path(), 6, 80, 40_000, &[]);
    let state_path = dir.path().join("st/agent/state.json");
    let mut live = super::common::state_json(&state_path);
    live["blocks"][0]["summary"] = json!("edited by hand");
    live["blocks"][0]["tier"] = json!(2);
    super::common::edit_blocks(&state_path, &live["blocks"]);
    let out = noa(
        dir.path(),
        &["rebuild", "agent.jsonl", "--state-dir", "st", "--check"],
    );
    assert_eq!(out.status.code(), Some(1));
    let report = String::from_utf8(out.stdout).unwrap();
    assert!(
        report.contains("b1: tier differs") && report.contains("b1: summary differs"),
        "{report}"
    );
}

#[test]
fn codex_view_has_nothing_from_before_its_compaction() {
    let path = testdata("real/codex/rollout-with-remote-compaction.jsonl");
    let text = fs::read_to_string(&path).unwrap();
    let compacted = text
        .lines()
        .position(|l| l.contains("\"type\":\"compacted\""))
        .unwrap();
    let before: Vec<String> = text
        .lines()
        .take(compacted)
        .filter_map(|l| {
            let v: Value = serde_json::from_str(l).ok()?;
            (v["type"] == "response_item")
                .then(|| v["payload"]["call_id"].as_str().map(str::to_string))
                .flatten()
        })
        .collect();
    assert!(!before.is_empty());
    let dir = TempDir::new();
    let (view, out) = project(&path, dir.path(), &[]);
    let raw = String::from_utf8(out.stdout).unwrap();
    for id in &before {
        assert!(
            !raw.contains(id.as_str()),
            "call {id} from before the compaction is in the view"
        );
    }
    assert!(
        view.iter().any(|i| i["type"] == "compaction"),
        "the compaction item stands in for the history"
    );
}

#[test]
fn a_fork_starts_from_its_parents_ledger() {
    let dir = TempDir::new();
    run_loop_in(dir.path(), 8, 80, 40_000, &[]);
    let parent = super::common::state_json(&dir.path().join("st/agent/state.json"));
    assert!(!parent["blocks"].as_array().unwrap().is_empty());
    // The fork is the same log under another session, continued.
    let mut text = fs::read_to_string(dir.path().join("agent.jsonl")).unwrap();
    text.push_str(&format!(
        "{}\n",
        json!({"role": "user", "content": "Now a different direction."})
    ));
    fs::write(dir.path().join("fork.jsonl"), text).unwrap();
    let out = noa(
        dir.path(),
        &[
            "project",
            "fork.jsonl",
            "--state-dir",
            "st",
            "--parent",
            "agent",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let child = super::common::state_json(&dir.path().join("st/fork/state.json"));
    assert_eq!(child["derivedFrom"], "agent");
    assert_eq!(
        child["blocks"], parent["blocks"],
        "blocks, spans and archive paths carry over"
    );
    assert_eq!(child["nextBlockId"], parent["nextBlockId"]);
    assert_eq!(child["stats"]["compressionCount"], 0, "stats start fresh");
    let view = String::from_utf8(out.stdout).unwrap();
    assert!(
        view.contains("[Compressed conversation section]"),
        "the inherited summaries are in the fork's view"
    );
    let out = noa(
        dir.path(),
        &["inspect", "fork.jsonl", "--state-dir", "st", "--json"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["blocks"].as_array().unwrap().len(),
        parent["blocks"].as_array().unwrap().len()
    );
}

#[test]
fn a_state_from_another_transcript_is_refused() {
    let dir = TempDir::new();
    fs::write(dir.path().join("a.jsonl"), jsonl(&chat_session(1, 10))).unwrap();
    fs::write(dir.path().join("b.jsonl"), jsonl(&chat_session(2, 10))).unwrap();
    let out = noa(
        dir.path(),
        &[
            "project",
            "a.jsonl",
            "--state-dir",
            "st",
            "--session",
            "shared",
        ],
    );
    assert!(out.status.success());
    let out = noa(
        dir.path(),
        &[
            "project",
            "b.jsonl",
            "--state-dir",
            "st",
            "--session",
            "shared",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("belongs to a different transcript"));
}

#[test]
fn a_subagent_log_lives_under_its_parent() {
    let dir = TempDir::new();
    // A subagent's own log: every conversation record is a sidechain record
    // carrying the parent's sessionId and the agent's id.
    let text = fs::read_to_string(testdata("real/claude-code/short.jsonl")).unwrap();
    let mut session = String::new();
    let lines: Vec<String> = text
        .lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            if v["type"] == "user" || v["type"] == "assistant" {
                v["isSidechain"] = json!(true);
                v["agentId"] = json!("a1b2c3");
                session = v["sessionId"].as_str().unwrap().to_string();
            }
            v.to_string()
        })
        .collect();
    fs::write(
        dir.path().join("agent-a1b2c3.jsonl"),
        lines.join("\n") + "\n",
    )
    .unwrap();
    let out = noa(
        dir.path(),
        &["project", "agent-a1b2c3.jsonl", "--state-dir", "st"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !out.stdout.is_empty(),
        "the subagent's own conversation is its view"
    );
    let state = dir
        .path()
        .join("st")
        .join(&session)
        .join("subagents/a1b2c3/state.json");
    assert!(state.exists(), "no state at {}", state.display());
}

/// The JSON lines `out` printed on stdout.
fn json_lines(out: &std::process::Output) -> Vec<Value> {
    String::from_utf8(out.stdout.clone())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// A batch rebuild of every bundled transcript and one broken file: one
/// result each, in order, the broken one failing with its place and not
/// stopping the rest, and the exit code saying one failed.
#[test]
fn a_batch_rebuild_reports_each_transcript() {
    let dir = TempDir::new();
    let broken = dir.path().join("broken.jsonl");
    fs::write(
        &broken,
        "{\"role\":\"user\",\"content\":\"hi\"}\n{\"role\":\"assistant\", bad}\n",
    )
    .unwrap();
    let mut paths: Vec<String> = crate::common::real_transcripts()
        .into_iter()
        .map(|(p, _)| p.display().to_string())
        .collect();
    paths.insert(paths.len() / 2, broken.display().to_string());
    let run = |state: &str, json: bool| {
        let mut args = vec!["rebuild", "--state-dir", state];
        args.extend(json.then_some("--json"));
        args.extend(paths.iter().map(String::as_str));
        noa(dir.path(), &args)
    };

    let out = run("json", true);
    assert_eq!(out.status.code(), Some(2));
    let lines = json_lines(&out);
    assert_eq!(lines.len(), paths.len());
    for (line, path) in lines.iter().zip(&paths) {
        assert_eq!(line["transcript"], path.as_str());
        if *path == broken.display().to_string() {
            assert_eq!(line["ok"], false);
            assert_eq!(line["exit"], 2);
            assert_eq!(line["line"], 2);
            assert!(line["error"].as_str().unwrap().contains("invalid JSON"));
        } else {
            assert_eq!(line["ok"], true, "{line}");
            assert!(dir.path().join(line["state"].as_str().unwrap()).exists());
        }
    }

    // In words: a line each on stdout, the failure and a count on stderr.
    let out = run("text", false);
    assert_eq!(out.status.code(), Some(2));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stdout.matches(": noa rebuild: ").count(), paths.len() - 1);
    assert!(stderr.contains("broken.jsonl failed (exit 2)"), "{stderr}");
    let count = format!(
        "{} transcript(s), {} done, 1 failed",
        paths.len(),
        paths.len() - 1
    );
    assert!(stderr.contains(&count), "{stderr}");

    // All done again, a state each now there: every one refused alike.
    let out = run("json", true);
    assert!(json_lines(&out).iter().all(|l| l["ok"] == false));
}

/// `inspect --json` over a directory: one JSON line per `*.jsonl` in it,
/// sorted; `materialize -o DIR` writes each as it writes one alone.
#[test]
fn inspect_and_materialize_take_a_directory() {
    let dir = TempDir::new();
    let real = testdata("real/claude-code");
    let state = dir.path().join("state");
    let state = state.to_str().unwrap();
    let out = noa(
        dir.path(),
        &[
            "inspect",
            "--json",
            real.to_str().unwrap(),
            "--state-dir",
            state,
        ],
    );
    assert_eq!(out.status.code(), Some(0));
    let mut files: Vec<String> = fs::read_dir(&real)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .map(|p| p.display().to_string())
        .collect();
    files.sort();
    let lines = json_lines(&out);
    let named: Vec<&str> = lines
        .iter()
        .map(|l| l["transcript"].as_str().unwrap())
        .collect();
    assert_eq!(named, files);
    assert!(
        lines
            .iter()
            .all(|l| l["ok"] == true && l["request"].is_u64())
    );

    let outputs = dir.path().join("out");
    fs::create_dir(&outputs).unwrap();
    let args = [
        "materialize",
        real.to_str().unwrap(),
        "--state-dir",
        state,
        "-o",
        "out",
    ];
    assert_eq!(noa(dir.path(), &args).status.code(), Some(0));
    for file in &files {
        let alone = noa(dir.path(), &["materialize", file, "--state-dir", state]);
        let name = Path::new(file).file_name().unwrap();
        assert_eq!(
            fs::read(outputs.join(name)).unwrap(),
            alone.stdout,
            "{file}"
        );
    }
    // Options that name one session or one file are refused for many.
    for args in [
        vec!["materialize", real.to_str().unwrap()],
        vec!["materialize", real.to_str().unwrap(), "-o", "out/x.jsonl"],
        vec!["rebuild", real.to_str().unwrap(), "--session", "s"],
        vec!["inspect", real.to_str().unwrap()],
        vec![
            "inspect",
            "--json",
            real.to_str().unwrap(),
            "--svg",
            "m.svg",
        ],
    ] {
        assert_eq!(noa(dir.path(), &args).status.code(), Some(2), "{args:?}");
    }
}
