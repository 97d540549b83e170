//! Which records of a Claude Code log make the conversation: the branch
//! from the last record back to the root, through records that are not
//! turns, past a rewound prompt, with uuids two records share, and when
//! the links run in a circle.

use super::*;

/// A record of `kind` (`user`, `assistant`, or a bookkeeping type such as
/// `progress`), its text the message's content.
fn record(kind: &str, uuid: &str, parent: Option<&str>, text: &str) -> String {
    let mut r = serde_json::json!({
        "type": kind,
        "uuid": uuid,
        "parentUuid": parent,
        "sessionId": "s",
    });
    if kind == "user" || kind == "assistant" {
        r["message"] = serde_json::json!({
            "role": kind,
            "content": [{"type": "text", "text": text}],
            "id": format!("msg_{uuid}"),
        });
    }
    format!("{r}\n")
}

/// The texts of the conversation read from `records`, in order.
fn conversation(records: &[String]) -> Vec<String> {
    let log = records.concat();
    let t = read("log.jsonl", &log, Some(Format::ClaudeCode), BadLines::Fail).unwrap();
    t.messages
        .iter()
        .flat_map(|m| m.cores.iter().map(|c| c.text.clone()))
        .collect()
}

#[test]
fn a_rewound_prompt_and_its_replies_are_left_out() {
    let log = [
        record("user", "u1", None, "task"),
        record("assistant", "a1", Some("u1"), "first answer"),
        record("user", "u2", Some("a1"), "abandoned prompt"),
        record("assistant", "a2", Some("u2"), "abandoned answer"),
        record("user", "u3", Some("a1"), "rewritten prompt"),
        record("assistant", "a3", Some("u3"), "last answer"),
    ];
    assert_eq!(
        conversation(&log),
        ["task", "first answer", "rewritten prompt", "last answer"]
    );
}

#[test]
fn a_chain_through_records_that_are_not_turns_is_followed() {
    let log = [
        record("user", "u1", None, "task"),
        record("assistant", "a1", Some("u1"), "answer"),
        record("progress", "p1", Some("a1"), ""),
        record("system", "s1", Some("p1"), ""),
        record("user", "u2", Some("s1"), "abandoned"),
        record("user", "u3", Some("s1"), "next prompt"),
        record("progress", "p2", Some("u3"), ""),
        record("assistant", "a2", Some("p2"), "last answer"),
    ];
    assert_eq!(
        conversation(&log),
        ["task", "answer", "next prompt", "last answer"]
    );
}

#[test]
fn a_uuid_two_turns_share_stands_for_the_later_one() {
    // The same record written twice, then a branch from the first copy.
    let log = [
        record("user", "u1", None, "task"),
        record("assistant", "a1", Some("u1"), "answer"),
        record("user", "u2", Some("a1"), "again"),
        record("assistant", "a1", Some("u2"), "answer written twice"),
        record("user", "u3", Some("a1"), "next prompt"),
        record("assistant", "a3", Some("u3"), "last answer"),
    ];
    // The walk from the last answer reaches the later copy, then its prompt,
    // whose parent is that uuid again: the walk ends there, and the first
    // copy joins as a line of the same response (its message id).
    assert_eq!(
        conversation(&log),
        [
            "answer",
            "answer written twice",
            "again",
            "next prompt",
            "last answer"
        ]
    );
}

#[test]
fn links_that_run_in_a_circle_end_the_walk() {
    let log = [
        record("user", "u1", Some("a2"), "task"),
        record("assistant", "a1", Some("u1"), "answer"),
        record("user", "u2", Some("a1"), "prompt"),
        record("assistant", "a2", Some("u2"), "last answer"),
    ];
    assert_eq!(
        conversation(&log),
        ["task", "answer", "prompt", "last answer"]
    );
}

#[test]
fn a_record_with_no_parent_links_to_the_turn_before_it() {
    let log = [
        record("user", "u1", None, "task"),
        record("assistant", "a1", None, "answer"),
        record("user", "u2", None, "prompt"),
        record("assistant", "a2", None, "last answer"),
    ];
    assert_eq!(
        conversation(&log),
        ["task", "answer", "prompt", "last answer"]
    );
}
