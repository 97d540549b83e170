//! Which records of a Claude Code log make the conversation: the branch
//! from the last record back to the root, through records that are not
//! turns, past a rewound prompt, with uuids two records share, and when
//! the links run in a circle; and which branch that is, when local
//! commands' records hang elsewhere, when two branches grew side by side,
//! and when `--leaf` names one.

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

/// A conversation record at `time` (seconds past 10:00) whose content is
/// the string `text`, with `extra` fields (`isMeta`, say) added.
fn at(
    kind: &str,
    uuid: &str,
    parent: Option<&str>,
    time: u32,
    text: &str,
    extra: serde_json::Value,
) -> String {
    let mut r = serde_json::json!({
        "type": kind,
        "uuid": uuid,
        "parentUuid": parent,
        "sessionId": "s",
        "timestamp": format!("2025-06-14T10:{:02}:{:02}.000Z", time / 60, time % 60),
        "message": {"role": kind, "content": text, "id": format!("msg_{uuid}")},
    });
    if let (Some(r), Some(extra)) = (r.as_object_mut(), extra.as_object()) {
        r.extend(extra.clone());
    }
    format!("{r}\n")
}

fn plain(kind: &str, uuid: &str, parent: Option<&str>, time: u32, text: &str) -> String {
    at(kind, uuid, parent, time, text, serde_json::json!({}))
}

/// A session from mid-2025: the caveat the host writes before local
/// commands opens it, and the `/export` commands run at its end hang off
/// that first record, not off the last answer.
pub(super) fn local_commands_off_the_root() -> Vec<String> {
    let caveat =
        "Caveat: The messages below were generated by the user while running local commands.";
    vec![
        at(
            "user",
            "c0",
            None,
            0,
            caveat,
            serde_json::json!({"isMeta": true}),
        ),
        plain("user", "u1", Some("c0"), 5, "fix the bug"),
        plain("assistant", "a1", Some("u1"), 10, "looking"),
        plain("user", "u2", Some("a1"), 15, "and the test"),
        plain("assistant", "a2", Some("u2"), 20, "both done"),
        plain(
            "user",
            "x1",
            Some("c0"),
            30,
            "<command-name>/export</command-name>\n<command-message>export</command-message>",
        ),
        plain(
            "user",
            "x2",
            Some("x1"),
            31,
            "<local-command-stdout>Conversation exported</local-command-stdout>",
        ),
        plain(
            "user",
            "x3",
            Some("c0"),
            40,
            "<command-name>/export</command-name>",
        ),
        plain(
            "user",
            "x4",
            Some("x3"),
            41,
            "<local-command-stdout>Conversation exported</local-command-stdout>",
        ),
    ]
}

/// A rewind: the user went back to the first answer and asked again.
pub(super) fn rewound() -> Vec<String> {
    vec![
        plain("user", "u1", None, 0, "task"),
        plain("assistant", "a1", Some("u1"), 5, "first answer"),
        plain("user", "u2", Some("a1"), 10, "abandoned prompt"),
        plain("assistant", "a2", Some("u2"), 15, "abandoned answer"),
        plain("user", "u3", Some("a1"), 20, "rewritten prompt"),
        plain("assistant", "a3", Some("u3"), 25, "last answer"),
    ]
}

/// A compaction, then the `/compact` command's own records hung off the
/// boundary, then the conversation going on from the summary.
pub(super) fn compacted_then_local_commands() -> Vec<String> {
    let boundary = serde_json::json!({
        "type": "system", "subtype": "compact_boundary", "uuid": "b0",
        "parentUuid": null, "sessionId": "s", "compactMetadata": {"trigger": "manual"},
    });
    vec![
        plain("user", "u0", None, 0, "old task"),
        plain("assistant", "a0", Some("u0"), 5, "old answer"),
        format!("{boundary}\n"),
        at(
            "user",
            "s0",
            Some("b0"),
            10,
            "This session is being continued from a previous conversation.",
            serde_json::json!({"isCompactSummary": true}),
        ),
        plain(
            "user",
            "x1",
            Some("b0"),
            11,
            "<command-name>/compact</command-name>",
        ),
        plain(
            "user",
            "x2",
            Some("x1"),
            12,
            "<local-command-stdout>Compacted</local-command-stdout>",
        ),
        plain("user", "u1", Some("s0"), 20, "next step"),
        plain("assistant", "a1", Some("u1"), 25, "on it"),
    ]
}

/// Two branches that grew side by side from one answer (two windows on
/// one session): the left one's last record is the newest.
pub(super) fn two_live_branches() -> Vec<String> {
    vec![
        plain("user", "u1", None, 0, "task"),
        plain("assistant", "a1", Some("u1"), 5, "answer"),
        plain("user", "l1", Some("a1"), 60, "left prompt"),
        plain("user", "r1", Some("a1"), 90, "right prompt"),
        plain("assistant", "l2", Some("l1"), 120, "left answer"),
        plain("assistant", "r2", Some("r1"), 150, "right answer"),
        plain("user", "l3", Some("l2"), 180, "left again"),
    ]
}

/// Every hand-made layout, by name.
pub(super) fn layouts() -> Vec<(&'static str, Vec<String>)> {
    vec![
        ("local commands off the root", local_commands_off_the_root()),
        ("rewound", rewound()),
        (
            "compacted, then local commands",
            compacted_then_local_commands(),
        ),
        ("two live branches", two_live_branches()),
    ]
}

/// The conversation read from `records` with `--leaf` as given: its texts,
/// its warnings and how its branch was chosen.
fn read_leaf(records: &[String], leaf: Option<&str>) -> (Vec<String>, Vec<String>, BranchChoice) {
    let log = records.concat();
    let t = read_owned_at_leaf(
        "log.jsonl",
        log,
        Format::ClaudeCode,
        BadLines::Fail,
        false,
        leaf,
    )
    .unwrap();
    let texts = t
        .messages
        .iter()
        .flat_map(|m| m.cores.iter().map(|c| c.text.clone()));
    (texts.collect(), t.warnings, t.resume.branch)
}

#[test]
fn local_commands_hung_off_the_first_record_do_not_hide_the_conversation() {
    let (texts, warnings, branch) = read_leaf(&local_commands_off_the_root(), None);
    assert_eq!(
        texts[1..],
        ["fix the bug", "looking", "and the test", "both done"]
    );
    assert!(texts[0].starts_with("Caveat:"), "{texts:?}");
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(
        (branch.line, branch.seen, branch.last),
        (5, true, false),
        "ends at the last answer, not at the last record"
    );
    assert_eq!((branch.passed_seen, branch.passed_unseen), (0, 2));
    let said = branch.describe(Some("a2")).unwrap();
    assert!(
        said.contains("2 branch(es) of local commands alone passed over"),
        "{said}"
    );
}

#[test]
fn a_rewound_branch_is_passed_over_without_a_warning() {
    let (texts, warnings, branch) = read_leaf(&rewound(), None);
    assert_eq!(
        texts,
        ["task", "first answer", "rewritten prompt", "last answer"]
    );
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(
        (branch.passed_seen, branch.passed_unseen, branch.last),
        (1, 0, true)
    );
}

#[test]
fn after_a_compaction_local_commands_off_the_boundary_do_not_hide_the_summary() {
    let log = compacted_then_local_commands();
    // Cut before the conversation goes on: the summary alone.
    let (texts, warnings, branch) = read_leaf(&log[..6], None);
    assert_eq!(texts.len(), 1, "{texts:?}");
    assert!(texts[0].starts_with("This session is being continued"));
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!((branch.line, branch.passed_unseen), (4, 1));
    // And once it goes on from the summary.
    let (texts, _, branch) = read_leaf(&log, None);
    assert_eq!(texts[1..], ["next step", "on it"]);
    assert_eq!(
        (branch.line, branch.last, branch.passed_unseen),
        (8, true, 1)
    );
}

#[test]
fn of_two_live_branches_the_newest_is_read_with_a_warning_and_leaf_chooses() {
    let log = two_live_branches();
    let (texts, warnings, branch) = read_leaf(&log, None);
    assert_eq!(
        texts,
        ["task", "answer", "left prompt", "left answer", "left again"]
    );
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with("log.jsonl:6: another branch grew beside the conversation read")
            && warnings[0].contains("record r2, 4 records long")
            && warnings[0].contains("`--leaf r2`"),
        "{}",
        warnings[0]
    );
    assert_eq!((branch.passed_seen, branch.last), (1, true));
    // `--leaf` reads the other one, and warns of nothing.
    let (texts, warnings, branch) = read_leaf(&log, Some("r2"));
    assert_eq!(texts, ["task", "answer", "right prompt", "right answer"]);
    assert!(warnings.is_empty(), "{warnings:?}");
    assert!(branch.asked);
    assert!(
        branch
            .describe(Some("r2"))
            .unwrap()
            .contains("as --leaf asks")
    );
    // A record that is not a turn leads to the turn it hangs off.
    let mut with_progress = log.clone();
    with_progress.push(
        serde_json::json!({"type": "progress", "uuid": "p1", "parentUuid": "r2"}).to_string()
            + "\n",
    );
    let (texts, _, _) = read_leaf(&with_progress, Some("p1"));
    assert_eq!(texts.last().map(String::as_str), Some("right answer"));
    // A uuid no record has is refused, naming it.
    let log = log.concat();
    let e = read_owned_at_leaf(
        "log.jsonl",
        log,
        Format::ClaudeCode,
        BadLines::Fail,
        false,
        Some("nope"),
    )
    .unwrap_err();
    assert!(e.to_string().contains("--leaf nope"), "{e}");
}

#[test]
fn the_newest_branch_is_told_by_its_time_not_its_place_in_the_file() {
    let mut log = two_live_branches();
    // The left branch's last prompt was written last but is older than
    // the right answer (a clock that went back, or lines flushed late).
    log[6] = plain("user", "l3", Some("l2"), 140, "left again");
    let (texts, warnings, branch) = read_leaf(&log, None);
    assert_eq!(texts, ["task", "answer", "right prompt", "right answer"]);
    assert!(
        warnings[0].contains("record l3, 5 records long"),
        "{warnings:?}"
    );
    assert_eq!((branch.line, branch.last), (6, false));
}

#[test]
fn a_branch_is_as_new_as_its_newest_message_of_the_conversation() {
    // A local command run off the first answer after the conversation
    // went on: its records are newer, but hold no message of it.
    let mut log = rewound();
    log.push(plain(
        "user",
        "x1",
        Some("a1"),
        90,
        "<command-name>/model</command-name>",
    ));
    let (texts, warnings, branch) = read_leaf(&log, None);
    assert_eq!(
        texts,
        ["task", "first answer", "rewritten prompt", "last answer"]
    );
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!((branch.passed_seen, branch.passed_unseen), (1, 1));
}

#[test]
fn a_log_of_local_commands_alone_is_read_from_its_last_record() {
    let log = [
        plain("user", "x1", None, 0, "<command-name>/help</command-name>"),
        plain(
            "user",
            "x2",
            None,
            5,
            "<local-command-stdout>help</local-command-stdout>",
        ),
    ];
    let (texts, _, branch) = read_leaf(&log, None);
    assert_eq!(texts.len(), 2);
    assert!(!branch.seen);
    assert!(
        branch
            .describe(None)
            .unwrap()
            .contains("no branch holds more than local commands")
    );
}
