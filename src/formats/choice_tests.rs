//! The choice on every bundled real Claude Code log: the conversation read
//! against the deepest chain of messages the model saw (any record but a
//! local command's), and why the two differ where they do. (A Codex
//! rollout is one chain: every item.)

use std::path::Path;

use super::super::{conversation_turn, find_boundaries, is_subagent_log, lean_lines};
use super::*;
use crate::formats::BadLines;

/// What a log's choice comes to, counted in conversation records.
#[derive(Debug, PartialEq, Eq)]
struct Measured {
    /// Records of the conversation read.
    chosen: usize,
    /// The most messages the model saw on any one chain, leaf to root.
    deepest: usize,
    /// Why the two differ, when they do.
    why: String,
}

fn measure(text: &str) -> Measured {
    let lines = lean_lines("t", text, 1, BadLines::Fail, &mut |_, _| {}).unwrap();
    let lines: Vec<&Line> = lines.iter().collect();
    let mut warnings = Vec::new();
    let boundaries = find_boundaries("t", &lines, &mut warnings);
    let subagent = is_subagent_log(&lines);
    let start = boundaries.last.map_or(0, |i| i + 1);
    let turns: Vec<Turn> = (lines.iter().enumerate().skip(start))
        .filter_map(|(i, l)| conversation_turn("t", i, l, subagent, &mut warnings))
        .collect();
    let choice = choose("t", &turns, &lines, &boundaries.ids, None).unwrap();
    let up = Links::new(&turns, &lines, &boundaries.ids).up(&turns);
    let chain = |leaf: usize| {
        let mut on = vec![false; turns.len()];
        let mut at = Some(leaf);
        while let Some(i) = at.filter(|&i| !on[i]) {
            on[i] = true;
            at = up[i];
        }
        on
    };
    let seen_on = |on: &[bool]| {
        (turns.iter().zip(on))
            .filter(|(t, o)| **o && t.seen())
            .count()
    };
    let deepest = (0..turns.len())
        .map(|l| seen_on(&chain(l)))
        .max()
        .unwrap_or(0);
    let read = chain(choice.leaf.unwrap());
    let chosen = choice.chosen.iter().filter(|&&c| c).count();
    let side = (choice.chosen.iter().zip(&read))
        .filter(|(c, r)| **c && !**r)
        .count();
    let unseen = read.iter().filter(|&&r| r).count() - seen_on(&read);
    let mut why = Vec::new();
    if seen_on(&read) < deepest {
        why.push(format!(
            "a newer branch, {} messages shallower",
            deepest - seen_on(&read)
        ));
    }
    if side > 0 {
        why.push(format!(
            "{side} on side branches (parallel calls, their results)"
        ));
    }
    if unseen > 0 {
        why.push(format!("{unseen} local command record(s) on the chain"));
    }
    Measured {
        chosen,
        deepest,
        why: why.join(", "),
    }
}

#[test]
fn on_every_real_log_the_conversation_is_the_deepest_chain_the_model_saw() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/real");
    // (log, records read, the most messages of the conversation on one
    // chain, why they differ)
    let cases = [
        (
            "claude-code/short.jsonl",
            9,
            8,
            "1 on side branches (parallel calls, their results)",
        ),
        (
            "claude-code/tool-heavy.jsonl",
            22,
            17,
            "2 on side branches (parallel calls, their results), 3 local command record(s) on the chain",
        ),
        (
            "claude-code/spawns-subagents.jsonl",
            48,
            41,
            "6 on side branches (parallel calls, their results), 1 local command record(s) on the chain",
        ),
        (
            "claude-code/long-session-with-compaction.jsonl",
            217,
            216,
            "1 on side branches (parallel calls, their results)",
        ),
        (
            "claude-code-edge/edge-cases.jsonl",
            12,
            10,
            "2 local command record(s) on the chain",
        ),
        ("claude-code-edge/representative-messages.jsonl", 11, 11, ""),
    ];
    for (rel, chosen, deepest, why) in cases {
        let text = std::fs::read_to_string(root.join(rel)).unwrap();
        let want = Measured {
            chosen,
            deepest,
            why: why.to_string(),
        };
        assert_eq!(measure(&text), want, "{rel}");
    }
    // Every bundled Claude Code log is in the table.
    for dir in ["claude-code", "claude-code-edge"] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            let name = entry.unwrap().file_name().to_string_lossy().into_owned();
            let rel = format!("{dir}/{name}");
            assert!(
                !name.ends_with(".jsonl") || cases.iter().any(|c| c.0 == rel),
                "{rel} is not measured"
            );
        }
    }
}

#[test]
fn times_are_compared_whatever_the_length_of_their_fractions() {
    use Ordering::{Equal, Greater, Less};
    for (a, b, want) in [
        ("2025-06-14T10:00:01Z", "2025-06-14T10:00:01.5Z", Less),
        ("2025-06-14T10:00:01.50Z", "2025-06-14T10:00:01.5Z", Equal),
        ("2025-06-14T10:00:02Z", "2025-06-14T10:00:01.999Z", Greater),
        (
            "2025-06-14T10:00:01.123Z",
            "2025-06-14T10:00:01.12Z",
            Greater,
        ),
        ("2025-06-14T09:59:59.9Z", "2025-06-14T10:00:00Z", Less),
    ] {
        assert_eq!(later(Some(a), Some(b)), want, "{a} against {b}");
        assert_eq!(later(Some(b), Some(a)), want.reverse(), "{b} against {a}");
    }
    assert_eq!(later(None, Some("2025-06-14T10:00:00Z")), Less);
    assert_eq!(later(None, None), Equal);
}

#[test]
fn links_that_run_in_a_circle_are_cut_when_branches_are_weighed() {
    // Two branches, one of whose records names a descendant as its parent,
    // and progress records that link to each other.
    let record = |kind: &str, uuid: &str, parent: &str| {
        let mut r = serde_json::json!({"type": kind, "uuid": uuid, "parentUuid": parent});
        if kind != "progress" {
            r["message"] = serde_json::json!({"role": kind, "content": uuid});
        }
        format!("{r}\n")
    };
    let log = [
        record("user", "u1", "a2"),
        record("assistant", "a1", "u1"),
        record("user", "u2", "a1"),
        record("assistant", "a2", "u2"),
        record("progress", "p1", "p2"),
        record("progress", "p2", "p1"),
        record("user", "x1", "p1"),
        record("user", "y1", "a1"),
    ]
    .concat();
    let lines = lean_lines("t", &log, 1, BadLines::Fail, &mut |_, _| {}).unwrap();
    let lines: Vec<&Line> = lines.iter().collect();
    let mut warnings = Vec::new();
    let boundaries = find_boundaries("t", &lines, &mut warnings);
    let turns: Vec<Turn> = (lines.iter().enumerate())
        .filter_map(|(i, l)| conversation_turn("t", i, l, false, &mut warnings))
        .collect();
    let choice = choose("t", &turns, &lines, &boundaries.ids, None).unwrap();
    assert!(choice.chosen.iter().any(|&c| c));
    assert!(choice.leaf.is_some());
}
