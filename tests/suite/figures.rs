//! One turn, one set of figures: `project`'s report line and JSON,
//! `inspect` (text, JSON, SVG), `ranges` (text, JSON) and the nudge say
//! the same number under the same name, on a real Claude Code session and
//! on generated loops, at windows from 16K to 200K.

use std::fs;
use std::path::Path;

use serde_json::Value;

use crate::common::{TempDir, between, json_report, noa, testdata};
use crate::compress::collect_texts;

/// `noa ARGS…` on `transcript` with the state in `state`; stdout and stderr.
fn run(state: &Path, args: &[&str]) -> (String, String) {
    let out = noa(state, args);
    assert!(
        out.status.success(),
        "noa {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// The context map `inspect --svg` draws of `transcript`, whose session
/// is under `state`.
fn svg_of(state: &Path, transcript: &str) -> String {
    let svg = state.join("map.svg");
    let (st, out) = (state.to_str().unwrap(), svg.to_str().unwrap());
    run(
        state,
        &["inspect", transcript, "--state-dir", st, "--svg", out],
    );
    fs::read_to_string(&svg).unwrap()
}

/// A figure as noa prints it (`950`, `1.2K`, `39K`, `1.5M`), in tokens.
fn parse_figure(s: &str) -> f64 {
    let (n, unit) = match s.strip_suffix('K') {
        Some(n) => (n, 1e3),
        None => match s.strip_suffix('M') {
            Some(n) => (n, 1e6),
            None => (s, 1.0),
        },
    };
    n.parse::<f64>()
        .unwrap_or_else(|_| panic!("not a figure: {s:?}"))
        * unit
}

/// What one session's surfaces say, checked against each other.
fn surfaces_agree(transcript: &Path, state: &Path, limit: &str) {
    let t = transcript.to_str().unwrap();
    let st = state.to_str().unwrap();
    let view_file = state.join("view.jsonl");
    let turn = ["project", t, "--state-dir", st, "--limit", limit];
    let (_, line) = run(
        state,
        &[&turn[..], &["-o", view_file.to_str().unwrap()]].concat(),
    );
    // The same turn again (a host retrying): the same view, byte for byte,
    // and as JSON the same figures.
    let again = state.join("again.jsonl");
    run(
        state,
        &[&turn[..], &["-o", again.to_str().unwrap()]].concat(),
    );
    assert!(
        fs::read(&view_file).unwrap() == fs::read(&again).unwrap(),
        "the same turn again gave another view"
    );
    let (_, json) = run(
        state,
        &[&turn[..], &["--report", "json", "--dry-run"]].concat(),
    );
    let report: Value = serde_json::from_str(json.trim()).unwrap();
    let figure = |key: &str| noa::engine::tokens::format(report[key].as_u64().unwrap() as usize);
    let percent = |part: &str, whole: &str| {
        let (p, w) = (
            report[part].as_f64().unwrap(),
            report[whole].as_f64().unwrap(),
        );
        ((p * 100.0) / w).round() as u64
    };

    // The report line names the request against the window.
    let said = format!(
        "request {} ({}) of the {} window ({}%)",
        figure("request"),
        report["source"].as_str().unwrap(),
        figure("window"),
        percent("request", "window"),
    );
    assert!(line.contains(&said), "{line}\nlacks {said}");

    // inspect: the same request, window and share; the same budget.
    let (text, _) = run(state, &["inspect", t, "--state-dir", st]);
    let request_line = text.lines().find(|l| l.starts_with("Request: ")).unwrap();
    assert!(
        request_line.starts_with(&format!(
            "Request: {} ({}) of the {} window from --limit of the last turn ({}%),",
            figure("request"),
            report["source"].as_str().unwrap(),
            figure("window"),
            percent("request", "window")
        )),
        "{request_line}"
    );
    assert!(
        request_line.contains(&format!(
            "{} before this turn's cuts, {}% of the {} budget",
            figure("before_cuts"),
            percent("before_cuts", "budget"),
            figure("budget")
        )),
        "{request_line}"
    );
    // The breakdown's parts add up to the request, and ranges shows the
    // same breakdown as inspect.
    let parts: u64 = (report["breakdown"].as_object().unwrap().values())
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(parts, report["request"].as_u64().unwrap(), "{report}");
    let breakdown = |text: &str| {
        text.lines()
            .find(|l| l.starts_with("Context breakdown: "))
            .unwrap()
            .to_string()
    };
    let (ranges, _) = run(state, &["ranges", t, "--state-dir", st]);
    assert_eq!(breakdown(&ranges), breakdown(&text));
    let host = figure_of(&report["breakdown"]["host"]);
    if report["breakdown"]["host"].as_u64().unwrap() > 0 {
        assert!(
            breakdown(&text).contains(&format!("{host} host prompt and tools")),
            "{text}"
        );
    }

    // The SVG is labelled with the request, and says so in the same words.
    let drawn = svg_of(state, t);
    assert!(
        drawn.contains(&format!(
            "request {} · {}% of the {} window",
            figure("request"),
            percent("request", "window"),
            figure("window")
        )),
        "the SVG's subtitle"
    );
    assert!(drawn.contains(&format!(
        "{} · {}%</text>",
        figure("request"),
        percent("request", "window")
    )));

    // A nudge lists what `ranges` lists, and never asks for more.
    let view = fs::read_to_string(&view_file).unwrap();
    let last: Value = serde_json::from_str(view.lines().last().unwrap()).unwrap();
    let mut texts = Vec::new();
    collect_texts(&last, &mut texts);
    let Some(nudge) = texts.iter().find(|t| t.contains("Compressible ranges (")) else {
        assert!(report["nudge"].is_null(), "{report}");
        return;
    };
    let listed = |text: &str| -> Vec<String> {
        text.lines()
            .skip_while(|l| !l.starts_with("Compressible ranges ("))
            .skip(1)
            .take_while(|l| l.starts_with("  m"))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(
        listed(nudge),
        listed(&ranges),
        "the nudge and ranges list alike"
    );
    let offered: f64 = listed(nudge)
        .iter()
        .map(|l| parse_figure(l.split_whitespace().nth(3).unwrap()))
        .sum();
    let ask = if nudge.contains("Free at least ") {
        parse_figure(between(nudge, "Free at least ", " in this call"))
    } else if nudge.contains("Compress every range listed") {
        parse_figure(between(nudge, "listed in this call, about ", " in all"))
    } else {
        0.0
    };
    // Each figure is rounded to two digits where it is printed.
    assert!(
        ask <= offered * 1.05 + 100.0,
        "asks for {ask} above ranges holding {offered}:\n{nudge}"
    );
}

fn figure_of(v: &Value) -> String {
    noa::engine::tokens::format(v.as_u64().unwrap() as usize)
}

/// `transcript` written into a fresh folder, with a state dir beside it,
/// then every surface checked at `limit`.
fn in_a_fresh_folder(name: &str, transcript: &str, limit: &str) {
    let dir = TempDir::new();
    let path = dir.path().join(name);
    fs::write(&path, transcript).unwrap();
    let state = dir.path().join("state");
    fs::create_dir_all(&state).unwrap();
    surfaces_agree(&path, &state, limit);
}

#[test]
fn a_real_claude_code_session_reads_the_same_everywhere_at_60k_and_200k() {
    let real = testdata("real/claude-code/long-session-with-compaction.jsonl");
    let text = fs::read_to_string(real).unwrap();
    for limit in ["60k", "200k"] {
        in_a_fresh_folder("session.jsonl", &text, limit);
    }
}

/// The real session's host sends 28K of its own (system prompt and tools,
/// from the provider's recorded usage) beside the messages: a window whose
/// budget that fills is warned of, in the warning's figures the report
/// line and JSON give; one with room for it is not.
#[test]
fn a_window_the_host_alone_fills_is_warned_of_in_the_reports_figures() {
    let real = testdata("real/claude-code/long-session-with-compaction.jsonl");
    let real = real.to_str().unwrap();
    for (limit, fills) in [("16k", true), ("60k", false)] {
        let dir = TempDir::new();
        let st = dir.path().to_str().unwrap();
        let args = [
            "project",
            real,
            "--state-dir",
            st,
            "--limit",
            limit,
            "--report",
            "json",
            "-o",
            "/dev/null",
        ];
        let (_, err) = run(dir.path(), &args);
        let report: Value = json_report(&err);
        let warnings = report["warnings"].to_string();
        assert_eq!(
            warnings.contains("host's prompt and tools"),
            fills,
            "{limit}: {warnings}"
        );
        if fills {
            let host = report["breakdown"]["host"].as_f64().unwrap();
            let said = [
                (between(&warnings, "alone come to ", " ("), host),
                (
                    between(&warnings, "past the ", " budget"),
                    report["budget"].as_f64().unwrap(),
                ),
                (
                    between(&warnings, "budget of the ", " window"),
                    report["window"].as_f64().unwrap(),
                ),
            ];
            for (shown, figure) in said {
                let shown = parse_figure(shown);
                assert!(
                    (shown - figure).abs() <= figure * 0.05,
                    "{shown} against {figure}"
                );
            }
            assert!(
                host > report["budget"].as_f64().unwrap()
                    && warnings.contains("window from --limit:")
            );
        }
    }
}

#[test]
fn a_generated_loop_reads_the_same_everywhere_at_16k_and_60k() {
    for (limit, turns) in [("16k", 40), ("60k", 160)] {
        let text = crate::synth::jsonl(&crate::synth::chat_session(7, turns));
        in_a_fresh_folder("chat.jsonl", &text, limit);
    }
}

/// The panel's headline and `apply --json` give the same figures under
/// their names: the context before and after the call, and what its block
/// reclaimed (originals for summaries).
#[test]
fn the_panel_and_apply_json_name_the_same_figures() {
    use crate::compress::{ClaudeCode, Session};
    let dir = TempDir::new();
    let mut s = ClaudeCode::new(dir.path());
    let state = dir.path().join("state");
    fs::create_dir_all(&state).unwrap();
    let (t, st) = (
        s.path().to_str().unwrap().to_string(),
        state.to_str().unwrap(),
    );
    run(
        &state,
        &[
            "project",
            &t,
            "--state-dir",
            st,
            "--limit",
            "60k",
            "-o",
            "/dev/null",
        ],
    );
    let args = serde_json::json!({"content": [{"startId": "m00002", "endId": "m00150", "summary": crate::compress::SUMMARY}]});
    s.append_call("call_figures", &args);
    let (out, _) = run(&state, &["apply", &t, "--state-dir", st, "--json"]);
    let answer: Value = serde_json::from_str(out.trim()).unwrap();
    let f = |v: &Value| noa::engine::tokens::format(v.as_u64().unwrap() as usize);
    let r = &answer["reclaimed"];
    let headline = format!(
        "▣ noa | context {} → {} tokens · ~{} reclaimed ({} of originals for {} of summaries)",
        f(&answer["context_before"]),
        f(&answer["context_after"]),
        f(&r["tokens"]),
        f(&r["taken"]),
        f(&r["summary"])
    );
    let panel = answer["panel"].as_str().unwrap();
    assert!(
        panel.starts_with(&headline),
        "{panel}\nis not headed {headline}"
    );
    assert_eq!(
        r["tokens"].as_u64().unwrap(),
        r["taken"].as_u64().unwrap() - r["summary"].as_u64().unwrap()
    );
}

/// A host's own compaction shows wherever the history does: `project -v`
/// says how many records it dropped, `inspect` names it in text and JSON,
/// and the SVG writes it under the history, on a real Claude Code session
/// (`compact_boundary`) and a real Codex rollout (`compacted`).
#[test]
fn a_host_compaction_shows_in_project_inspect_and_the_svg() {
    let cases = [
        (
            "real/claude-code/long-session-with-compaction.jsonl",
            "line 754 (auto): the 753 record(s) before it are not sent, 170K tokens recorded before it; its summary is m00001",
        ),
        (
            "real/codex/rollout-with-remote-compaction.jsonl",
            "line 1788: the 1787 record(s) before it are not sent, 210K tokens recorded before it; its summary is m00001",
        ),
    ];
    for (real, said) in cases {
        let dir = TempDir::new();
        let path = dir.path().join("t.jsonl");
        fs::copy(testdata(real), &path).unwrap();
        let state = dir.path().join("state");
        fs::create_dir_all(&state).unwrap();
        let (t, st) = (path.to_str().unwrap(), state.to_str().unwrap());
        let (_, report) = run(
            &state,
            &["project", t, "--state-dir", st, "-o", "/dev/null", "-v"],
        );
        let line = format!("the host compacted the conversation at {said}");
        assert!(report.contains(&format!("noa: {line}")), "{report}");
        let (text, _) = run(&state, &["inspect", t, "--state-dir", st]);
        assert!(text.contains(&line[1..]), "{text}");
        let (json, _) = run(&state, &["inspect", t, "--state-dir", st, "--json"]);
        let v: Value = serde_json::from_str(json.trim()).unwrap();
        let c = &v["compactions"][0];
        assert_eq!(v["compactions"].as_array().unwrap().len(), 1, "{v}");
        assert_eq!(c["summary_ref"], "m00001");
        assert!(c["records"].as_u64().unwrap() > 0 && c["tokens_before"].as_u64().unwrap() > 0);
        let drawn = svg_of(&state, t);
        assert!(
            drawn.contains(&format!("Not drawn: {line}.")),
            "the SVG names it"
        );
    }
}
