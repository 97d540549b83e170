use crate::engine::model::identity::IdMap;
use pretty_assertions::assert_eq;

use super::*;
use crate::engine::model::message::Role;
use crate::engine::model::refs;
use crate::engine::test_support::block;

const LONG: &str = "Decided on JWT with rotating refresh tokens because sessions must survive restarts; \
    middleware lives in src/auth/jwt.rs:40-88, tests in tests/auth.rs; the old cookie path is removed. \
    Open: key rotation schedule. User asked (m00001) to keep the public API unchanged.";

/// The task (m00001), `n` assistant fillers of `chars` characters each
/// (m00002…), and six 1000-token user tails that fill the recent zone.
struct Fixture {
    view: Vec<CoreMessage>,
    state: CompressionState,
    config: Config,
}

fn fixture(n: usize, chars: usize) -> Fixture {
    let mut view = vec![CoreMessage::text("u0", Role::User, "the task")];
    for i in 0..n {
        view.push(CoreMessage::text(
            format!("a{i}"),
            Role::Assistant,
            "x".repeat(chars),
        ));
    }
    for i in 0..6 {
        view.push(CoreMessage::text(
            format!("tail{i}"),
            Role::User,
            "t".repeat(4000),
        ));
    }
    let mut state = CompressionState::new("sess");
    refs::assign(
        &mut state.message_refs,
        &view,
        1,
        |_| false,
        &mut Default::default(),
    );
    Fixture {
        view,
        state,
        config: Config::default(),
    }
}

fn range(start: &str, end: &str, summary: &str) -> CompressRange {
    CompressRange {
        start: start.into(),
        end: end.into(),
        summary: summary.into(),
        topic: String::new(),
        summary_max_chars: None,
    }
}

/// The fixture's view by id: the originals its archives are rendered from.
fn originals(f: &Fixture) -> IdMap<'_, &CoreMessage> {
    f.view.iter().map(|m| (m.id.as_str(), m)).collect()
}

fn run(f: &Fixture, ranges: &[CompressRange]) -> ApplyOutcome {
    apply(&ApplyInput {
        ranges,
        view: &f.view,
        originals: &originals(f),
        state: &f.state,
        config: &f.config,
        call_id: "toolu_1",
        archive_root: "/archive",
        created: "2026-09-14T10:00:00+08:00",
        now: 1_789_000_000,
        replay: false,
        index: None,
    })
}

#[test]
fn creates_a_block_and_its_archive() {
    let f = fixture(6, 2000);
    let mut r = range("m00002", "m00005", LONG);
    r.topic = "JWT 认证方案".into();
    let out = run(&f, &[r]);
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    assert_eq!(out.created.len(), 1);
    let (b, partial) = &out.created[0];
    assert!(!partial);
    assert_eq!((b.block_id.as_str(), b.tier), ("b1", 1));
    assert_eq!(
        (b.start_ref.as_str(), b.end_ref.as_str()),
        ("m00002", "m00005")
    );
    assert_eq!(b.archive_rel, "tier1/b1_m00002-m00005.md");
    assert_eq!(b.archive_path, "/archive/tier1/b1_m00002-m00005.md");
    assert_eq!(b.compress_call_id, "toolu_1");
    assert_eq!(b.direct_message_ids, ["a0", "a1", "a2", "a3"]);
    assert_eq!(out.archives.len(), 1);
    let a = &out.archives[0].render(&originals(&f));
    for want in [
        "block: b1",
        "tier: 1",
        "topic: JWT 认证方案",
        "session: sess",
    ] {
        assert!(a.contains(want), "{want}");
    }
    let mut state = f.state.clone();
    out.commit(&mut state);
    assert_eq!(state.stats.compression_count, 1);
    assert_eq!(state.next_block_id, 2);
    assert_eq!(state.blocks.len(), 1);
}

#[test]
fn archives_hold_the_originals_not_the_view_text() {
    let mut f = fixture(0, 0);
    let big = "unique-content ".repeat(500);
    f.view
        .insert(1, CoreMessage::text("big", Role::Assistant, big.clone()));
    f.state = CompressionState::new("sess");
    refs::assign(
        &mut f.state.message_refs,
        &f.view,
        1,
        |_| false,
        &mut Default::default(),
    );
    // The view the model saw had the message cut short; the archive must not.
    let originals_view = f.view.clone();
    f.view[1].text = "unique-content [truncated for context space]".into();
    let originals: IdMap<'_, &CoreMessage> =
        originals_view.iter().map(|m| (m.id.as_str(), m)).collect();
    let ranges = [range("m00002", "m00002", LONG)];
    let out = apply(&ApplyInput {
        ranges: &ranges,
        view: &f.view,
        originals: &originals,
        state: &f.state,
        config: &f.config,
        call_id: "c",
        archive_root: "/a",
        created: "",
        now: 0,
        replay: false,
        index: None,
    });
    assert_eq!(out.created.len(), 1, "{:?}", out.errors);
    assert_eq!(
        out.archives[0]
            .render(&originals)
            .matches("unique-content")
            .count(),
        500
    );
}

#[test]
fn a_small_batch_is_refused_whole() {
    let f = fixture(4, 50);
    let out = run(&f, &[range("m00002", "m00003", LONG)]);
    assert!(out.created.is_empty());
    assert_eq!(out.errors.len(), 1);
    assert!(
        out.errors[0].contains("too small (100 chars across 1 range(s), min 5000)"),
        "{}",
        out.errors[0]
    );
    assert!(out.archives.is_empty());
    assert!(out.ranges_at_fault);
}

#[test]
fn all_unknown_refs_get_diagnostics() {
    let f = fixture(4, 50);
    let out = run(&f, &[range("m09000", "m09001", LONG)]);
    let e = &out.errors[0];
    assert!(
        e.contains("unknown to this session")
            && e.contains("renumbered")
            && e.contains("diagnostics:"),
        "{e}"
    );
    assert!(e.contains("highest ref m00011"), "{e}");
}

#[test]
fn overlapping_ranges_keep_the_earlier() {
    let f = fixture(10, 2000);
    let out = run(
        &f,
        &[
            range("m00002", "m00006", LONG),
            range("m00004", "m00008", LONG),
        ],
    );
    assert_eq!(out.created.len(), 1);
    assert!(
        out.warnings
            .iter()
            .any(|w| w.contains("overlaps an earlier range")),
        "{:?}",
        out.warnings
    );
}

#[test]
fn summary_length_checks() {
    let f = fixture(6, 2000);
    for (summary, want) in [
        ("", "Summary is empty"),
        ("brief", "too short"),
        (&*"x".repeat(25_000), "too long"),
    ] {
        let out = run(&f, &[range("m00002", "m00005", summary)]);
        assert!(out.created.is_empty());
        assert!(
            out.errors.iter().any(|e| e.contains(want)),
            "{want}: {:?}",
            out.errors
        );
        assert!(
            !out.ranges_at_fault,
            "a summary problem is not the ranges' fault"
        );
    }
}

#[test]
fn summary_bounds_are_inclusive_and_counted_in_characters() {
    let f = fixture(6, 2000);
    let mut raised = range("m00002", "m00005", &"y".repeat(25_000));
    raised.summary_max_chars = Some(30_000);
    let cjk = "认证方案设计与实现决策记录".repeat(5);
    let cases = [
        (raised, true),
        (range("m00002", "m00005", &"s".repeat(50)), true),
        (range("m00002", "m00005", &"s".repeat(49)), false),
        (range("m00002", "m00005", &"s".repeat(20_000)), true),
        (range("m00002", "m00005", &cjk), true),
    ];
    for (r, ok) in cases {
        let len = r.summary.chars().count();
        assert_eq!(
            run(&f, &[r]).created.len() == 1,
            ok,
            "summary of {len} chars"
        );
    }
}

#[test]
fn the_recent_zone_is_not_compressible() {
    let f = fixture(2, 3000);
    let out = run(&f, &[range("m00008", "m00009", LONG)]);
    assert!(out.created.is_empty());
    assert!(
        out.errors
            .iter()
            .any(|e| e.contains("protected zone") || e.contains("too small")),
        "{:?}",
        out.errors
    );
}

#[test]
fn a_compression_resets_nudge_pacing() {
    let mut f = fixture(6, 2000);
    f.state.nudge.last_per_message_nudge_tokens = 120_000;
    f.state.nudge.last_nudge_shown_tokens = 118_000;
    f.state.nudge.last_shown_by_tier.insert("2".into(), 100_000);
    let out = run(&f, &[range("m00002", "m00005", LONG)]);
    let mut state = f.state.clone();
    out.commit(&mut state);
    assert_eq!(state.nudge, Default::default());
}

#[test]
fn nothing_to_do_is_neutral() {
    let f = fixture(4, 2000);
    let out = run(&f, &[]);
    assert_eq!(out.errors, [NO_RANGES]);
    assert!(!out.ranges_at_fault);
}

#[test]
fn a_single_large_message_makes_a_block() {
    let f = fixture(3, 30_000);
    let out = run(&f, &[range("m00002", "m00002", LONG)]);
    assert_eq!(out.created.len(), 1);
    assert_eq!(out.created[0].0.start_ref, out.created[0].0.end_ref);
}

#[test]
fn block_refs_without_blocks_are_unknown() {
    let f = fixture(4, 2000);
    let out = run(&f, &[range("b1", "b2", LONG)]);
    assert!(out.created.is_empty());
    assert!(!out.errors.is_empty());
}

fn with_summaries(tiers: &[u8]) -> Fixture {
    let mut f = fixture(0, 0);
    let tails = f.view.split_off(1);
    for (i, t) in tiers.iter().enumerate() {
        let id = format!("b{}", i + 1);
        let mut b = block(&id, *t, &[&format!("gone{}", i + 1)]);
        b.summary = LONG.into();
        f.view.push(render_summary(&b));
        f.state.blocks.push(b);
    }
    f.view.extend(tails);
    f.state.next_block_id = tiers.len() as u64 + 1;
    f
}

#[test]
fn only_the_lowest_tier_is_absorbed() {
    let f = with_summaries(&[1, 1, 2, 1]);
    let mut r = range("b1", "b4", LONG);
    r.topic = "consolidated".into();
    let out = run(&f, &[r]);
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    let (b, _) = &out.created[0];
    assert_eq!((b.block_id.as_str(), b.tier), ("b5", 2));
    assert_eq!(b.direct_block_ids, ["b1", "b2", "b4"]);
    assert_eq!(out.surviving, [("b3".to_string(), 2)]);
    let mut state = f.state.clone();
    out.commit(&mut state);
    let active: Vec<(&str, bool)> = state
        .blocks
        .iter()
        .map(|b| (b.block_id.as_str(), b.active))
        .collect();
    assert_eq!(
        active,
        [
            ("b1", false),
            ("b2", false),
            ("b3", true),
            ("b4", false),
            ("b5", true)
        ]
    );
    assert!(
        out.archives[0]
            .render(&originals(&f))
            .contains("consumed_blocks: [b1, b2, b4]")
    );
}

#[test]
fn tiers_step_up_and_stop_at_the_top() {
    for (tiers, want) in [(vec![1, 1, 1], 2), (vec![2, 2, 2], 3)] {
        let f = with_summaries(&tiers);
        let out = run(&f, &[range("b1", &format!("b{}", tiers.len()), LONG)]);
        assert_eq!(out.created[0].0.tier, want, "{tiers:?}");
    }
    let f = with_summaries(&[3, 3]);
    let out = run(&f, &[range("b1", "b2", LONG)]);
    assert!(out.created.is_empty());
    assert!(
        out.errors.iter().any(|e| e.contains("top tier")),
        "{:?}",
        out.errors
    );
    let mut f = with_summaries(&[2, 2]);
    f.config.tiers.max_tier = 2;
    let out = run(&f, &[range("b1", "b2", LONG)]);
    assert!(out.created.is_empty() && out.archives.is_empty());
    assert!(
        out.errors
            .iter()
            .any(|e| e.contains("Tier 2 is the top tier")),
        "{:?}",
        out.errors
    );
}

#[test]
fn one_block_never_covers_nothing() {
    let f = with_summaries(&[1]);
    let out = run(&f, &[range("b1", "b1", LONG)]);
    for (b, _) in &out.created {
        assert!(!b.effective_message_ids.is_empty() || !b.direct_block_ids.is_empty());
    }
}

#[test]
fn ranges_widen_to_whole_tool_exchanges() {
    let mut f = fixture(0, 0);
    let tails = f.view.split_off(1);
    f.view.push(CoreMessage::reasoning("k1", "x".repeat(3000)));
    f.view
        .push(CoreMessage::tool_call("c1", "t1", "Edit", "{}"));
    f.view
        .push(CoreMessage::tool_call("c2", "t2", "Edit", "{}"));
    f.view.push(CoreMessage::tool_result(
        "r1",
        "t1",
        "Edit",
        "y".repeat(3000),
    ));
    f.view
        .push(CoreMessage::tool_result("r2", "t2", "Edit", "ok"));
    f.view.extend(tails);
    f.state = CompressionState::new("sess");
    refs::assign(
        &mut f.state.message_refs,
        &f.view,
        1,
        |_| false,
        &mut Default::default(),
    );
    // Asking for the reasoning alone takes the whole exchange.
    let out = run(&f, &[range("m00002", "m00002", LONG)]);
    assert_eq!(out.created.len(), 1, "{:?}", out.errors);
    assert_eq!(
        out.created[0].0.direct_message_ids,
        ["k1", "c1", "c2", "r1", "r2"]
    );
}

#[test]
fn compress_messages_are_never_covered() {
    let mut f = fixture(6, 2000);
    f.view
        .insert(3, CoreMessage::tool_call("cc", "tc", "Compress", "{}"));
    f.view
        .insert(4, CoreMessage::tool_result("cr", "tc", "Compress", "panel"));
    f.state = CompressionState::new("sess");
    let protected = |m: &CoreMessage| m.tool_name == "Compress";
    refs::assign(
        &mut f.state.message_refs,
        &f.view,
        1,
        protected,
        &mut Default::default(),
    );
    let out = run(&f, &[range("m00002", "m00005", LONG)]);
    assert_eq!(out.created.len(), 1, "{:?}", out.errors);
    let b = &out.created[0].0;
    assert!(
        !b.direct_message_ids
            .iter()
            .any(|id| id == "cc" || id == "cr")
    );
}

#[test]
fn the_first_user_message_is_archived_but_said_to_stay() {
    let f = fixture(6, 2000);
    let out = run(&f, &[range("m00001", "m00005", LONG)]);
    assert_eq!(out.created.len(), 1, "{:?}", out.errors);
    assert!(
        out.warnings
            .iter()
            .any(|w| w.contains("m00001 is the first user message")),
        "{:?}",
        out.warnings
    );
}

#[test]
fn one_bad_range_does_not_sink_the_others() {
    let f = fixture(10, 2000);
    let out = run(
        &f,
        &[
            range("m00002", "m00005", LONG),
            range("m00007", "m00009", "too brief"),
        ],
    );
    assert_eq!(out.created.len(), 1);
    assert_eq!(out.errors.len(), 1);
    assert!(
        out.errors[0].starts_with("m00007..m00009: Summary too short"),
        "{:?}",
        out.errors
    );
}

#[test]
fn a_range_reaching_a_protected_message_stops_before_it() {
    let mut f = fixture(8, 2000);
    f.view[5] = CoreMessage::text("q", Role::User, "x".repeat(2000));
    f.view
        .insert(6, CoreMessage::tool_call("e", "te", "Edit", "{}"));
    f.view
        .insert(7, CoreMessage::tool_result("er", "te", "Edit", "done"));
    f.config.protected_tools = vec!["Edit".into()];
    f.state = CompressionState::new("sess");
    refs::assign(
        &mut f.state.message_refs,
        &f.view,
        1,
        |_| false,
        &mut Default::default(),
    );
    let out = run(&f, &[range("m00002", "m00010", LONG)]);
    assert_eq!(out.created.len(), 1, "{:?}", out.errors);
    let b = &out.created[0].0;
    assert_eq!(b.direct_message_ids, ["a0", "a1", "a2", "a3", "q"]);
    assert_eq!(
        (b.start_ref.as_str(), b.end_ref.as_str()),
        ("m00002", "m00006")
    );
    assert!(
        out.warnings
            .iter()
            .any(|w| w.contains("Stopped the range at m00007") && w.contains("Edit")),
        "{:?}",
        out.warnings
    );
}
