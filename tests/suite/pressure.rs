//! Context pressure from the command line: truncation near the window,
//! `ranges`, `prompt`, config files and the provider's own figures.

use std::fs;

use serde_json::Value;

use crate::common::{TempDir, json_report_of, noa, project, testdata};
use crate::providers::check_anthropic;
use crate::synth::{chat_session, jsonl};

#[test]
fn the_real_session_at_60k_is_truncated_and_still_valid() {
    let dir = TempDir::new();
    let path = testdata("real/claude-code/long-session-with-compaction.jsonl");
    let (view, out) = project(&path, dir.path(), &["--limit", "60000", "--report", "json"]);
    check_anthropic(&view).unwrap();
    let raw = String::from_utf8(out.stdout).unwrap();
    assert!(
        raw.contains("[truncated for context space"),
        "no truncation marker"
    );
    let report: Value = serde_json::from_str(String::from_utf8_lossy(&out.stderr).trim()).unwrap();
    assert!(report["truncated"].as_u64().unwrap() > 0);
    assert_eq!(
        report["nudge"]["tier"], 1,
        "an emergency nudge asks for tier 1"
    );
    assert_eq!(report["nudge"]["kind"], "emergency");
    assert_eq!(report["emergency"], true);
    // The nudge is the last user message and names real ranges.
    let last = view.last().unwrap();
    let text: String = last["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|b| b["text"].as_str())
        .collect();
    assert!(text.contains("Compressible ranges ("), "{text:.300}");
    // The transcript itself is untouched: truncation is for the view only.
    let original = fs::read_to_string(&path).unwrap();
    assert!(!original.contains("[truncated for context space"));
}

#[test]
fn truncated_results_stay_cut_on_the_next_turn() {
    let dir = TempDir::new();
    let path = testdata("real/claude-code/long-session-with-compaction.jsonl");
    let (_, first) = project(&path, dir.path(), &["--limit", "60000"]);
    let (_, second) = project(&path, dir.path(), &["--limit", "60000"]);
    let cut = |o: &std::process::Output| {
        String::from_utf8_lossy(&o.stdout)
            .matches("[truncated for context space —")
            .count()
    };
    assert!(cut(&first) > 0);
    assert_eq!(cut(&first), cut(&second));
}

#[test]
fn ranges_json_lists_refs_and_the_table_reads() {
    let dir = TempDir::new();
    let path = testdata("real/claude-code/long-session-with-compaction.jsonl");
    let state = dir.path().to_str().unwrap();
    let out = noa(
        dir.path(),
        &[
            "ranges",
            path.to_str().unwrap(),
            "--state-dir",
            state,
            "--json",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let ranges = v["ranges"].as_array().unwrap();
    assert!(!ranges.is_empty());
    for r in ranges {
        for end in ["start_ref", "end_ref"] {
            let s = r[end].as_str().unwrap();
            assert!(s.len() == 6 && s.starts_with('m'), "{s}");
        }
    }
    assert!(
        v["protected"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["reason"] == "last-user-message")
    );
    assert!(
        !dir.path()
            .join("4d5611e5-241a-462a-8d15-5122611a9569")
            .exists(),
        "ranges writes no state"
    );
    let out = noa(
        dir.path(),
        &["ranges", path.to_str().unwrap(), "--state-dir", state],
    );
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(table.starts_with("Compressible ranges ("), "{table}");
    assert!(table.contains("Context breakdown:"));
}

#[test]
fn prompt_and_tool_schemas() {
    let dir = TempDir::new();
    let out = noa(dir.path(), &["prompt"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("noa context management"));
    assert!(text.contains("<noa-ref") && text.contains("<noa-archive"));
    for (flavour, name_at) in [
        ("chat", "/function/name"),
        ("anthropic", "/name"),
        ("responses", "/name"),
    ] {
        let out = noa(dir.path(), &["prompt", "--tool-schema", "--for", flavour]);
        assert!(out.status.success());
        let v: Value =
            serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{flavour}: {e}"));
        assert_eq!(
            v.pointer(name_at).and_then(Value::as_str),
            Some("Compress"),
            "{flavour}"
        );
        let params = v
            .pointer("/function/parameters")
            .or(v.get("input_schema"))
            .or(v.get("parameters"))
            .unwrap();
        assert!(
            params["properties"]["content"].get("type").is_none(),
            "{flavour}: content must carry no type"
        );
        assert_eq!(params["required"], serde_json::json!(["content"]));
    }
}

#[test]
fn a_config_file_beside_the_transcript_is_read_and_flags_win() {
    let dir = TempDir::new();
    let path = dir.path().join("chat.jsonl");
    fs::write(&path, jsonl(&chat_session(2, 40))).unwrap();
    fs::write(dir.path().join("noa.toml"), "[engine]\ncontext_limit = 12000\n[prompt]\nemergency_headline = \"OUT OF ROOM — compress now.\"\n").unwrap();
    let (view, out) = project(&path, &dir.path().join("st"), &["--report", "json"]);
    let report: Value = serde_json::from_str(String::from_utf8_lossy(&out.stderr).trim()).unwrap();
    assert_eq!(report["window"], 12000);
    assert!(report["config"].as_str().unwrap().ends_with("noa.toml"));
    let last = view.last().unwrap()["content"].as_str().unwrap_or("");
    assert!(
        last.starts_with("OUT OF ROOM"),
        "the host's headline replaces ours: {last:.200}"
    );
    let (_, out) = project(
        &path,
        &dir.path().join("st2"),
        &["--report", "json", "--limit", "500000"],
    );
    let report: Value = serde_json::from_str(String::from_utf8_lossy(&out.stderr).trim()).unwrap();
    assert_eq!(report["window"], 500000, "flags win over the file");

    fs::write(dir.path().join("noa.toml"), "[engine]\ncontext_limt = 1\n").unwrap();
    let out = noa(
        dir.path(),
        &["project", path.to_str().unwrap(), "--state-dir", "st3"],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("context_limt"));

    fs::write(
        dir.path().join("noa.toml"),
        "[engine.nudge]\nmin_context_limit_pct = 0.9\n",
    )
    .unwrap();
    let out = noa(
        dir.path(),
        &[
            "project",
            path.to_str().unwrap(),
            "--state-dir",
            "st4",
            "--dry-run",
        ],
    );
    assert!(
        out.status.success(),
        "a doubtful value is a warning, not a failure"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("warning: nudge.min_context_limit_pct"));
}

#[test]
fn the_provider_teaches_the_window_and_the_size() {
    let dir = TempDir::new();
    let path = dir.path().join("chat.jsonl");
    fs::write(&path, jsonl(&chat_session(3, 30))).unwrap();
    let st = dir.path().join("st");
    let (_, out) = project(&path, &st, &["--report", "json"]);
    let before: Value = serde_json::from_str(String::from_utf8_lossy(&out.stderr).trim()).unwrap();
    let tokens = before["request"].as_u64().unwrap();
    // The provider counted more than the estimate: decisions use its figure.
    let reported = (tokens * 2).to_string();
    let (_, out) = project(
        &path,
        &st,
        &["--report", "json", "--input-tokens", &reported],
    );
    let r: Value = serde_json::from_str(String::from_utf8_lossy(&out.stderr).trim()).unwrap();
    assert!(r["before_cuts"].as_u64().unwrap() >= tokens * 2, "{r}");
    // An overflow error names the real window; it is remembered. What the
    // provider counted past the estimate is the host's share, which now
    // fills that window's budget: a warning line comes before the report.
    let err = "This model's maximum context length is 16384 tokens. However, your messages resulted in 20000 tokens.";
    let report = json_report_of;
    let (_, out) = project(&path, &st, &["--report", "json", "--overflow-error", err]);
    let r = report(&out);
    assert_eq!(r["window"], 16384);
    let (_, out) = project(&path, &st, &["--report", "json"]);
    let r = report(&out);
    assert_eq!(r["window"], 16384, "the learned window persists");
}
