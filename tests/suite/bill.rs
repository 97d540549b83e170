//! The bill `inspect` reports: totals equal to the provider's own records on
//! the bundled real sessions, and what a compression cost and saved on a
//! Claude Code log whose every response records its usage.

use std::collections::HashSet;
use std::fs;
use std::path::Path;

use serde_json::{Value, json};

use crate::common::{ClaudeLog as Log, TempDir, noa, real_transcripts};

/// `inspect --json` of `transcript`, its session under `state`.
fn inspect(state: &Path, transcript: &Path) -> Value {
    let (t, st) = (transcript.to_str().unwrap(), state.to_str().unwrap());
    let out = noa(state, &["inspect", t, "--state-dir", st, "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn n(v: &Value, pointer: &str) -> u64 {
    v.pointer(pointer).and_then(Value::as_u64).unwrap_or(0)
}

/// The totals of a Claude Code log, summed here from its records: every
/// assistant response once by its id.
fn claude_code_sums(text: &str) -> [u64; 5] {
    let (mut seen, mut sums) = (HashSet::new(), [0; 5]);
    for line in text.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        if v["type"] != "assistant" || v.pointer("/message/usage").is_none() {
            continue;
        }
        let u = &v["message"]["usage"];
        let prompt = n(u, "/input_tokens")
            + n(u, "/cache_creation_input_tokens")
            + n(u, "/cache_read_input_tokens");
        let id = v["message"]["id"].as_str().unwrap_or_default().to_string();
        if prompt == 0 || !seen.insert(id) {
            continue;
        }
        sums[0] += 1;
        sums[1] += n(u, "/input_tokens");
        sums[2] += n(u, "/cache_creation_input_tokens");
        sums[3] += n(u, "/cache_read_input_tokens");
        sums[4] += n(u, "/output_tokens");
    }
    sums
}

#[test]
fn the_bill_is_what_the_provider_recorded() {
    let tmp = TempDir::new();
    for (path, _) in real_transcripts() {
        let text = fs::read_to_string(&path).unwrap();
        let report = inspect(tmp.path(), &path);
        let t = &report["bill"]["totals"];
        let name = path.display();
        if text.contains("\"token_count\"") {
            // Codex keeps a running total beside each response's usage:
            // the responses noa counted must add up to it.
            let last = text
                .lines()
                .rev()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .find_map(|v| v.pointer("/payload/info/total_token_usage").cloned())
                .unwrap();
            let input = n(t, "/fresh") + n(t, "/cache_read");
            assert_eq!(input, n(&last, "/input_tokens"), "{name}");
            assert_eq!(
                n(t, "/cache_read"),
                n(&last, "/cached_input_tokens"),
                "{name}"
            );
            assert_eq!(n(t, "/output"), n(&last, "/output_tokens"), "{name}");
            assert_eq!(
                n(t, "/reasoning"),
                n(&last, "/reasoning_output_tokens"),
                "{name}"
            );
            continue;
        }
        let sums = claude_code_sums(&text);
        if sums[0] == 0 {
            assert!(report["bill"].is_null(), "{name}: no usage, no bill");
            continue;
        }
        let got = [
            "/requests",
            "/fresh",
            "/cache_write",
            "/cache_read",
            "/output",
        ]
        .map(|p| n(t, p));
        assert_eq!(got, sums, "{name}");
        let weighted = sums[1] as f64 + sums[2] as f64 * 1.25 + sums[3] as f64 * 0.1;
        assert_eq!(n(t, "/weighted"), weighted.round() as u64, "{name}");
    }
}

/// Twenty exchanges whose prompts grow, then a Compress call over
/// m00002–m00030 (unanswered).
fn with_a_call() -> Log {
    let mut log = Log::default();
    for i in 0..20 {
        log.exchange(i, 900 + 10 * i as u64, 1_000 * i as u64);
    }
    let args = json!({"topic": "parser", "content": [{"startId": "m00002", "endId": "m00030",
        "summary": "Read the parser over steps 0-14: it reads tokens one at a time; nothing changed."}]});
    let call = json!([{"type": "tool_use", "id": "toolu_c1", "name": "Compress", "input": args}]);
    log.answer(call, 1_000, 20_000);
    log
}

/// A turn of the log at `t` (state under `st`), so the call is answered
/// on from the read cache, then `apply --json` of its last call.
fn turn_then_apply(dir: &Path, t: &str, st: &str) -> Value {
    let project = ["project", t, "--state-dir", st, "-o", "/dev/null"];
    assert!(noa(dir, &project).status.success());
    let out = noa(dir, &["apply", t, "--state-dir", st, "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn a_compression_is_priced_from_the_requests_around_it() {
    let tmp = TempDir::new();
    let (path, st) = (tmp.path().join("s.jsonl"), tmp.path().to_str().unwrap());
    let mut log = with_a_call();
    let call_line = log.lines.len();
    log.write(&path);
    let t = path.to_str().unwrap();
    let applied = turn_then_apply(tmp.path(), t, st);
    let panel = applied["panel"].as_str().unwrap().to_string();
    // What the call expects: a rewrite of the request after its summary,
    // each later request shorter by what it reclaimed, paid back when
    // those reads at 0.1 cover the writing at 1.25.
    let e = &applied["expected"];
    let (rewrite, removed) = (n(e, "/rewrite"), n(e, "/removed"));
    assert_eq!(removed, n(&applied, "/reclaimed/tokens"));
    assert!(
        rewrite > 0 && rewrite < n(&applied, "/context_after"),
        "{applied}"
    );
    let after = (rewrite as f64 * 1.15 / (removed as f64 * 0.1)).ceil() as u64;
    assert_eq!(n(e, "/pays_back_after"), after);
    log.push(
        "user",
        json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_c1", "content": panel}]}),
    );
    // The request after the call writes again what followed the block's
    // first message; later ones read it.
    log.exchange(20, 25_000, 3_000);
    for i in 21..30 {
        log.exchange(i, 1_000, 9_000);
    }
    log.write(&path);
    let (b, after) = priced(tmp.path(), &path, call_line);
    assert!(after > 10, "pays back after {after}");
    assert!(b["paid_back_after"].is_null(), "not yet after 10 requests");
    let text =
        String::from_utf8(noa(tmp.path(), &["inspect", t, "--state-dir", st]).stdout).unwrap();
    assert!(
        text.contains(&format!("b1: call on line {call_line}")),
        "{text}"
    );
    assert!(
        text.contains("not paid back yet (10 requests since)"),
        "{text}"
    );

    for i in 30..60 {
        log.exchange(i, 1_000, 9_000);
    }
    log.write(&path);
    let (b, after) = priced(tmp.path(), &path, call_line);
    assert_eq!(n(&b, "/paid_back_after"), after);
    let text =
        String::from_utf8(noa(tmp.path(), &["inspect", t, "--state-dir", st]).stdout).unwrap();
    assert!(
        text.contains(&format!("paid back after {after} of the 40 requests since")),
        "{text}"
    );
}

/// The bill's figures for the block the call on `call_line` made, checked
/// against the usage the test wrote, and after how many requests it pays
/// back by the test's own reckoning.
fn priced(state: &Path, path: &Path, call_line: usize) -> (Value, u64) {
    let report = inspect(state, path);
    let b = report["bill"]["blocks"][0].clone();
    let reclaimed = report["blocks"][0]["reclaimed"].as_u64().unwrap();
    assert_eq!(b["block"], "b1");
    assert_eq!(n(&b, "/call_line"), call_line as u64);
    assert_eq!(n(&b, "/rewrote"), 25_003);
    // The five requests before it: four wrote 1,063 to 1,093, the call's
    // own 1,003; the middle one is 1,073.
    assert_eq!(n(&b, "/usual"), 1_073);
    assert_eq!(n(&b, "/removed"), reclaimed);
    assert!(reclaimed > 0);
    // Each later request reads `reclaimed` fewer tokens at 0.1; the rewrite
    // cost 1.25 where a read would have cost 0.1.
    let extra = (25_003.0 - 1_073.0) * (1.25 - 0.1);
    (b, (extra / (reclaimed as f64 * 0.1)).ceil() as u64)
}

/// The panel the model reads after `apply` says in one line what the
/// compression is expected to do to the bill: the figures of `apply
/// --json`'s `expected`, from the same computation; a plain `apply` (here
/// the same call again) prints that panel.
#[test]
fn the_panel_says_what_the_compression_is_expected_to_cost_and_save() {
    let tmp = TempDir::new();
    let (path, st) = (tmp.path().join("s.jsonl"), tmp.path().to_str().unwrap());
    let log = with_a_call();
    log.write(&path);
    let t = path.to_str().unwrap();
    let applied = turn_then_apply(tmp.path(), t, st);
    let panel = applied["panel"].as_str().unwrap();
    let e = &applied["expected"];
    let format = |k: &str| noa::engine::tokens::format(n(e, k) as usize);
    let line = format!(
        "  bill: the next request writes ~{} to the cache again, each later one is ~{} shorter; pays back after {} request(s)",
        format("/rewrite"),
        format("/removed"),
        n(e, "/pays_back_after")
    );
    assert!(n(e, "/pays_back_after") > 0, "{applied}");
    assert_eq!(panel.lines().nth(1), Some(line.as_str()), "{panel}");
    // The text the model reads is that panel, line included.
    let again = noa(tmp.path(), &["apply", t, "--state-dir", st]);
    assert_eq!(String::from_utf8_lossy(&again.stdout).trim_end(), panel);
}
