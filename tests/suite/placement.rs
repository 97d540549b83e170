//! Where a summary stands, on real transcripts: a middle range whose
//! neighbours are both assistant turns is compressed, and in every view
//! format the summary stands between the message before its range and the
//! message after it, and those two are not joined into one.

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::common::{TempDir, project, testdata};
use crate::compress::{ClaudeCode, Session, apply, collect_texts};
use crate::providers::{check_anthropic, check_chat, check_responses};

/// The header every rendered summary starts with.
const SUMMARY_MARK: &str = "[Compressed conversation section]";

/// A Codex rollout copied from `testdata/`, with calls appended as Codex
/// writes them.
struct Codex {
    path: PathBuf,
}

impl Codex {
    fn new(dir: &Path) -> Codex {
        let path = dir.join("rollout.jsonl");
        fs::copy(testdata("real/codex/rollout-plain.jsonl"), &path).unwrap();
        Codex { path }
    }

    fn item(&self, payload: Value) {
        let line = json!({"timestamp": "2026-02-23T12:00:00.000Z", "type": "response_item", "payload": payload});
        let mut text = fs::read_to_string(&self.path).unwrap();
        text.push_str(&line.to_string());
        text.push('\n');
        fs::write(&self.path, text).unwrap();
    }
}

impl Session for Codex {
    fn path(&self) -> &Path {
        &self.path
    }
    fn append_call(&mut self, call_id: &str, args: &Value) {
        self.item(json!({"type": "function_call", "name": "Compress", "arguments": args.to_string(), "call_id": call_id}));
    }
    fn append_result(&mut self, call_id: &str, panel: &str, _: bool) {
        self.item(json!({"type": "function_call_output", "call_id": call_id, "output": panel}));
    }
    fn check(&self, view: &[Value]) {
        check_responses(view).unwrap_or_else(|e| panic!("responses view broken: {e}"));
    }
}

/// The ref numbers tagged in a message, in order.
fn refs_in(m: &Value) -> Vec<u32> {
    let mut texts = Vec::new();
    collect_texts(m, &mut texts);
    let mut refs = Vec::new();
    for t in texts {
        for (at, _) in t.match_indices("<noa-ref id=\"m") {
            let digits: String = t[at + 14..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            refs.extend(digits.parse::<u32>().ok());
        }
    }
    refs
}

/// The refs and summaries of a view in the order they appear, each with
/// the message it is in: `None` stands for a summary.
fn sequence(view: &[Value]) -> Vec<(usize, Option<u32>)> {
    let mut out = Vec::new();
    for (i, m) in view.iter().enumerate() {
        let mut texts = Vec::new();
        collect_texts(m, &mut texts);
        for t in texts {
            let mut marks: Vec<(usize, Option<u32>)> = t
                .match_indices("<noa-ref id=\"m")
                .filter_map(|(at, _)| {
                    let digits: String = t[at + 14..]
                        .chars()
                        .take_while(char::is_ascii_digit)
                        .collect();
                    Some((at, Some(digits.parse().ok()?)))
                })
                .collect();
            marks.extend(t.match_indices(SUMMARY_MARK).map(|(at, _)| (at, None)));
            marks.sort_by_key(|&(at, _)| at);
            out.extend(marks.into_iter().map(|(_, r)| (i, r)));
        }
    }
    out
}

/// Middle ranges whose neighbours are assistant messages of `view` (a chat
/// view): from the first ref after one assistant message to the last ref
/// before a later one. An assistant message carries no ref tag of its
/// own (the model is not shown tags in its own words), so a range is told
/// by the tags of the messages around it; one that starts at the result of
/// the assistant's own call is the shape that once joined two turns.
/// Nearest the middle of the view first.
fn ranges_between_assistants(view: &[Value]) -> Vec<(u32, u32)> {
    let tags: Vec<Vec<u32>> = view.iter().map(refs_in).collect();
    let first_after = |i: usize| tags[i + 1..].iter().flatten().next().copied();
    let last_before = |j: usize| tags[..j].iter().flatten().next_back().copied();
    let assistant = |i: usize| view[i]["role"] == "assistant";
    let mut order: Vec<usize> = (1..view.len()).filter(|&i| assistant(i)).collect();
    order.sort_by_key(|&i| i.abs_diff(view.len() / 2));
    let mut out = Vec::new();
    for i in order {
        let later = (i + 4..view.len()).filter(|&j| assistant(j));
        for j in later {
            if let (Some(start), Some(end)) = (first_after(i), last_before(j))
                && end >= start + 4
            {
                out.push((start, end));
                break;
            }
        }
    }
    out
}

fn reference(n: u32) -> String {
    format!("m{n:05}")
}

/// Compresses the first range between two assistant turns that `apply`
/// takes, and checks where its summary stands in every view format, all at
/// a window of `limit`, which the whole session fits in.
fn summary_stands_between(s: &mut dyn Session, dir: &Path, limit: &str) {
    // The bundled Codex rollouts had their texts redacted to a few words:
    // any range is large enough, and the recent zone is kept small, or
    // the whole rollout would be in it.
    fs::write(
        dir.join("noa.toml"),
        "[engine]\npreserve_recent_tokens = 300\n[engine.compress]\nmin_compress_range = 1\n",
    )
    .unwrap();
    let state = dir.join("state");
    let (view, _) = project(
        s.path(),
        &state,
        &["--limit", limit, "--to", "chat", "--dry-run"],
    );
    let candidates = ranges_between_assistants(&view);
    assert!(
        !candidates.is_empty(),
        "no range between two assistant turns"
    );
    let mut panels = Vec::new();
    let applied = candidates.iter().take(40).enumerate().find_map(|(n, &(start, end))| {
        let args = json!({"content": [{"startId": reference(start), "endId": reference(end), "summary": crate::compress::SUMMARY}]});
        let (code, panel) = apply(s, &state, &format!("call_place_{n}"), args);
        panels.push(panel);
        (code == 0).then_some((start, end))
    });
    let (start, end) =
        applied.unwrap_or_else(|| panic!("apply took none of the ranges: {panels:#?}"));
    for to in ["chat", "anthropic", "responses"] {
        let (view, _) = project(
            s.path(),
            &state,
            &["--limit", limit, "--to", to, "--dry-run"],
        );
        match to {
            "chat" => check_chat(&view),
            "anthropic" => check_anthropic(&view),
            _ => check_responses(&view),
        }
        .unwrap_or_else(|e| panic!("{to}: {e}"));
        let seq = sequence(&view);
        let summary = seq
            .iter()
            .position(|&(_, r)| r.is_none())
            .unwrap_or_else(|| panic!("{to}: no summary in view"));
        let before = seq[..summary]
            .iter()
            .rev()
            .find_map(|&(i, r)| r.map(|r| (i, r)));
        let after = seq[summary..].iter().find_map(|&(i, r)| r.map(|r| (i, r)));
        let ((b, before), (a, after), at) = (before.unwrap(), after.unwrap(), seq[summary].0);
        assert!(
            before < start && after > end,
            "{to}: m{before:05} and m{after:05} stand around the summary of {}–{}",
            reference(start),
            reference(end)
        );
        assert!(
            seq.iter()
                .all(|&(_, r)| r.is_none_or(|r| r < start || r > end)),
            "{to}: a covered ref is still in view"
        );
        assert!(
            seq.iter()
                .take(summary)
                .all(|&(_, r)| r.is_none_or(|r| r < start))
                && seq
                    .iter()
                    .skip(summary)
                    .all(|&(_, r)| r.is_none_or(|r| r > end)),
            "{to}: the summary is not where its range was"
        );
        assert!(
            b < a,
            "{to}: the messages before and after the range were joined"
        );
        assert!(
            b <= at && at <= a,
            "{to}: the summary stands in message {at}, not between {b} and {a}"
        );
    }
}

#[test]
fn in_a_claude_code_session_the_summary_stands_between_two_assistant_turns() {
    let dir = TempDir::new();
    let mut s = ClaudeCode::new(dir.path());
    summary_stands_between(&mut s, dir.path(), "1m");
}

#[test]
fn in_a_codex_rollout_the_summary_stands_between_two_assistant_turns() {
    let dir = TempDir::new();
    let mut s = Codex::new(dir.path());
    summary_stands_between(&mut s, dir.path(), "1m");
}
