use super::*;
use crate::engine::model::refs;
use crate::engine::model::tokens;
use crate::engine::test_support::{block, call, result, say, user};

/// The recommendation as a turn makes it, with what `st`'s active blocks
/// stand for.
fn recommend(view: &[CoreMessage], st: &CompressionState, cfg: &Config) -> Recommendation {
    let covered = |id: &str| {
        (st.blocks.iter()).any(|b| b.active && b.effective_message_ids.iter().any(|m| m == id))
    };
    super::recommend(view, st, &covered, cfg, &|m| tokens::chars(&m.text))
}

fn state_for(view: &[CoreMessage]) -> CompressionState {
    let mut st = CompressionState::new("s");
    let protected = |m: &CoreMessage| m.tool_name == "Compress" || m.tool_name == "Write";
    refs::assign(
        &mut st.message_refs,
        view,
        1,
        protected,
        &mut Default::default(),
    );
    st
}

fn sized(mut m: CoreMessage, chars: usize) -> CoreMessage {
    m.text = "x".repeat(chars);
    m
}

fn tails(view: &mut Vec<CoreMessage>) {
    for i in 0..6 {
        view.push(sized(user(&format!("tail{i}")), 4000));
    }
}

#[test]
fn runs_break_at_a_user_message_after_three() {
    let mut v = vec![
        sized(user("a"), 2000),
        sized(say("b"), 2000),
        sized(say("c"), 2000),
        sized(say("d"), 2000),
        sized(user("e"), 2000),
        sized(say("f"), 2000),
    ];
    tails(&mut v);
    let st = state_for(&v);
    // A small window: runs of 500 tokens already hold a tenth of it.
    let cfg = Config {
        compress: crate::engine::model::config::CompressConfig {
            min_compress_range: 1,
            ..Default::default()
        },
        ..Config::for_window(5_000)
    };
    let rec = recommend(&v, &st, &cfg);
    assert!(rec.ranges.len() >= 2, "{:?}", rec.ranges);
    assert_eq!(
        (
            rec.ranges[0].start_ref.as_str(),
            rec.ranges[0].end_ref.as_str()
        ),
        ("m00001", "m00004")
    );
    assert_eq!(rec.ranges[1].start_ref, "m00005");
}

#[test]
fn small_runs_merge_up_to_the_gate_with_the_tool_share_of_their_tokens() {
    let mut v = vec![user("u")];
    for i in 0..3 {
        v.push(sized(
            call(&format!("c{i}"), &format!("t{i}"), "Edit"),
            1000,
        ));
        v.push(sized(
            result(&format!("r{i}"), &format!("t{i}"), "Edit"),
            1000,
        ));
        v.push(sized(user(&format!("q{i}")), 1000));
        v.push(sized(say(&format!("s{i}")), 1000));
    }
    tails(&mut v);
    let st = state_for(&v);
    // At 5K a fifth of the window is less than the gate: the gate decides.
    let rec = recommend(&v, &st, &Config::for_window(5_000));
    // Runs of three or four messages merge until the first passes the gate.
    let r = &rec.ranges[0];
    assert_eq!(
        (r.start_ref.as_str(), r.end_ref.as_str(), r.count),
        ("m00001", "m00007", 7)
    );
    assert!(r.chars >= 5000);
    // 4 of its 7 messages are tool traffic, but 1,000 of its ~1,500 tokens.
    assert_eq!(r.tool_pct, 67, "{r:?}");
}

#[test]
fn fragments_are_not_offered() {
    let mut v = vec![user("u"), sized(say("tiny"), 100), sized(user("later"), 10)];
    for i in 0..5 {
        v.push(sized(user(&format!("tail{i}")), 4000));
    }
    let st = state_for(&v);
    let rec = recommend(&v, &st, &Config::default());
    assert!(rec.ranges.is_empty(), "{:?}", rec.ranges);
}

#[test]
fn the_recent_zone_is_reported_with_its_reason() {
    let mut v = vec![sized(user("ask"), 100)];
    for i in 0..20 {
        v.push(sized(say(&format!("a{i}")), 40_000));
    }
    let st = state_for(&v);
    let rec = recommend(&v, &st, &Config::default());
    assert_eq!(rec.protected[0].start_ref, "m00001");
    assert_eq!(rec.protected[0].reason, ProtectReason::LastUserMessage);
    assert!(
        rec.protected
            .iter()
            .any(|p| p.reason == ProtectReason::Recent)
    );
    assert!(rec.ranges.iter().all(|r| r.start_ref != "m00001"));
}

#[test]
fn hard_protected_tools_are_not_reported() {
    let mut v = vec![
        user("u"),
        call("w", "t1", "Write"),
        result("wr", "t1", "Write"),
    ];
    tails(&mut v);
    let st = state_for(&v);
    let rec = recommend(&v, &st, &Config::default());
    assert!(
        rec.protected
            .iter()
            .all(|p| !p.tools.contains(&"Write".to_string()))
    );
}

#[test]
fn pending_per_tier() {
    let mut v = vec![user("u")];
    for i in 0..6 {
        v.push(sized(say(&format!("s{i}")), 4000));
    }
    tails(&mut v);
    let mut st = state_for(&v);
    let mut b1 = block("b1", 1, &["gone"]);
    b1.summary = "summary text ".repeat(40);
    let mut b2 = block("b2", 2, &["gone2"]);
    b2.summary = "distilled ".repeat(10);
    st.blocks = vec![b1, b2];
    let rec = recommend(&v, &st, &Config::default());
    assert!(rec.pending[0] >= 6000, "{:?}", rec.pending);
    // A tier reclaims its blocks' whole rendered summaries.
    let rendered = |b: &Block| tokens::estimate(&render_summary(b).text);
    assert_eq!(rec.pending[1], rendered(&st.blocks[0]));
    assert_eq!(rec.pending[2], rendered(&st.blocks[1]));
    assert!(rec.pending[1] > tokens::estimate(&"summary text ".repeat(40)));
    assert_eq!(rec.tier_blocks[0].len(), 1);
    assert_eq!(rec.blocks.len(), 2);
}

#[test]
fn breakdown_buckets() {
    let v = vec![
        sized(user("a"), 400),
        CoreMessage::tool_result("b", "t", "Read", "b".repeat(800)),
        CoreMessage::text(
            "noa_summary_b1",
            Role::User,
            format!(
                "{}\n{}",
                crate::engine::model::summary::SUMMARY_HEADER,
                "c".repeat(400)
            ),
        ),
        CoreMessage::text(
            "d",
            Role::Assistant,
            format!("```go\n{}\n```", "d".repeat(400)),
        ),
        CoreMessage::text("s", Role::System, "rules"),
    ];
    let b = breakdown(&v, &Config::default());
    assert!(
        b.text > 0 && b.tool > 0 && b.summaries > 0 && b.code > 0 && b.system > 0,
        "{b:?}"
    );
}

#[test]
fn nothing_protected_with_zero_knobs() {
    let mut v = vec![user("u")];
    tails(&mut v);
    let st = state_for(&v);
    let cfg = Config {
        preserve_recent_messages: 0,
        preserve_recent_tokens: Some(0),
        ..Config::default()
    };
    let rec = recommend(&v, &st, &cfg);
    assert!(
        rec.protected
            .iter()
            .all(|p| p.reason == ProtectReason::LastUserMessage)
    );
}

#[test]
fn a_range_holding_the_task_is_flagged() {
    let mut v = vec![sized(user("task"), 3000)];
    for i in 0..4 {
        v.push(sized(say(&format!("s{i}")), 2000));
    }
    tails(&mut v);
    let st = state_for(&v);
    let rec = recommend(&v, &st, &Config::default());
    assert!(rec.ranges[0].holds_task, "{:?}", rec.ranges);
    let line = crate::engine::pressure::nudge_text::format_ranges(&rec.ranges, &[]);
    assert!(line.contains("holds the task"), "{line}");
}

#[test]
fn runs_merge_into_ranges_of_a_fifth_of_the_window() {
    // Twenty-four question-and-answer turns of about 1,000 tokens each.
    let mut v = Vec::new();
    for i in 0..24 {
        v.push(sized(user(&format!("q{i}")), 400));
        v.push(sized(say(&format!("a{i}")), 3600));
    }
    tails(&mut v);
    let st = state_for(&v);
    let ranges = |limit: usize| recommend(&v, &st, &Config::for_window(limit)).ranges;
    // At 200K nothing stops the merge before the zone: one range.
    let big = ranges(200_000);
    assert_eq!(big.len(), 1, "{big:?}");
    // At 30K a range stops once it holds 6,000 tokens.
    let small = ranges(30_000);
    assert!(small.len() >= 3, "{small:?}");
    assert!(
        small
            .iter()
            .rev()
            .skip(1)
            .all(|r| (6_000..7_100).contains(&r.tokens)),
        "{small:?}"
    );
}

#[test]
fn small_outputs_inside_the_recent_zone_are_not_offered() {
    // Old work, then recent turns whose small Reads sit between protected
    // questions and answers, and one large Read among them.
    let mut v = vec![sized(user("task"), 20_000), sized(say("done"), 20_000)];
    for i in 0..4 {
        v.push(sized(user(&format!("q{i}")), 40));
        v.push(call(&format!("c{i}"), &format!("t{i}"), "Read"));
        let size = if i == 1 { 8_000 } else { 1_000 };
        v.push(sized(
            result(&format!("r{i}"), &format!("t{i}"), "Read"),
            size,
        ));
        v.push(sized(say(&format!("s{i}")), 40));
    }
    let st = state_for(&v);
    // A zone floor of 5,000 tokens, as set.
    let cfg = Config {
        preserve_recent_messages: 12,
        preserve_recent_tokens: Some(5_000),
        ..Config::for_window(40_000)
    };
    assert_eq!(cfg.recent_zone_tokens(), 5_000);
    let rec = recommend(&v, &st, &cfg);
    let spans: Vec<(&str, &str)> = rec
        .ranges
        .iter()
        .map(|r| (r.start_ref.as_str(), r.end_ref.as_str()))
        .collect();
    // The old task (its answer fills the zone's token floor), and the large
    // Read (m00008–m00009); the small Reads would each cost a block for a
    // few hundred tokens.
    assert_eq!(
        spans,
        [("m00001", "m00001"), ("m00008", "m00009")],
        "{rec:?}"
    );
}

/// In a session whose only user message is the task, the task (protected
/// as the latest user message) does not begin the recent zone: an old Edit
/// exchange left between two summaries, below the size gate on its own, is
/// offered like any run outside the zone, not held to the zone's gate.
#[test]
fn an_autonomous_session_offers_an_old_exchange_between_summaries() {
    let mut v = vec![user("task")];
    for i in 0..10 {
        v.push(call(&format!("e{i}"), &format!("te{i}"), "Edit"));
        let done = result(&format!("f{i}"), &format!("te{i}"), "Edit");
        v.push(sized(done, 1_200));
        v.push(call(&format!("c{i}"), &format!("tr{i}"), "Read"));
        let page = result(&format!("r{i}"), &format!("tr{i}"), "Read");
        v.push(sized(page, 3_000));
    }
    let mut st = state_for(&v);
    // The reads of the first turns are summaries already; their Edits stay.
    for i in 0..4 {
        let (c, r) = (format!("c{i}"), format!("r{i}"));
        st.blocks
            .push(block(&format!("b{}", i + 1), 1, &[c.as_str(), r.as_str()]));
    }
    let rec = recommend(&v, &st, &Config::for_window(40_000));
    let offered = |r: &str| {
        rec.ranges.iter().any(|x| {
            let at = |s: &str| ref_to_index(s).unwrap_or(0);
            (at(&x.start_ref)..=at(&x.end_ref)).contains(&at(r))
        })
    };
    // f1, between b1 and b2, is the 7th message (m00007).
    assert!(offered("m00007"), "{:?}", rec.ranges);
}
