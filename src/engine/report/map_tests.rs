use super::*;
use crate::engine::model::identity::IdSet;
use crate::engine::report::tree::*;
use crate::engine::test_support::{block, call, result, say, user};

pub(crate) fn seg(class: Class, tokens: usize) -> Segment {
    Segment {
        id: String::new(),
        reference: String::new(),
        class,
        tier: 0,
        block: String::new(),
        tokens,
    }
}

pub(crate) fn with_refs(history: &[CoreMessage]) -> CompressionState {
    let mut st = CompressionState::new("s");
    for (i, m) in history.iter().enumerate() {
        let r = format!("m{:05}", i + 1);
        st.message_refs.insert(&m.id, &r);
    }
    st
}

/// A small history: task, two covered exchanges, a visible tail.
pub(crate) fn fixture() -> (Vec<CoreMessage>, Vec<CoreMessage>, CompressionState) {
    let history = vec![
        user("u1"),
        say("a1"),
        call("c1", "t1", "Read"),
        result("r1", "t1", "Read"),
        say("a2"),
        user("u2"),
        say("a3"),
    ];
    let mut st = with_refs(&history);
    let mut b1 = block("b1", 1, &["a1", "c1", "r1"]);
    b1.start_ref = "m00002".into();
    b1.end_ref = "m00004".into();
    st.blocks.push(b1);
    let view: Vec<CoreMessage> = history
        .iter()
        .filter(|m| !["a1", "c1", "r1"].contains(&m.id.as_str()))
        .cloned()
        .collect();
    (history, view, st)
}

#[test]
fn history_marks_covered_visible_and_protected() {
    let (history, view, st) = fixture();
    let zone: IdSet<'_> = ["u2", "a3"].into_iter().collect();
    let segs = history_segments(&history, &view, &st, &zone, &estimate);
    let classes: Vec<Class> = segs.iter().map(|s| s.class).collect();
    assert_eq!(
        classes,
        [
            Class::User,
            Class::Block,
            Class::Block,
            Class::Block,
            Class::Assistant,
            Class::Protected,
            Class::Protected
        ]
    );
    assert!(segs[1..4].iter().all(|s| s.block == "b1" && s.tier == 1));
    assert_eq!(segs[0].reference, "m00001");
}

#[test]
fn covered_runs_carry_their_block_and_refs() {
    let (history, view, st) = fixture();
    let segs = history_segments(&history, &view, &st, &IdSet::default(), &estimate);
    let rs = runs(&segs);
    let b = rs.iter().find(|r| r.class == Class::Block).unwrap();
    assert_eq!(
        (b.block.as_str(), b.tier, b.messages),
        ("b1", 1, 3),
        "{rs:?}"
    );
    assert_eq!(
        (b.start_ref.as_str(), b.end_ref.as_str()),
        ("m00002", "m00004")
    );
}

#[test]
fn a_message_neither_shown_nor_covered_is_hidden() {
    let (history, mut view, st) = fixture();
    view.retain(|m| m.id != "a2");
    let segs = history_segments(&history, &view, &st, &IdSet::default(), &estimate);
    assert_eq!(segs[4].class, Class::Hidden);
}

#[test]
fn view_summaries_take_their_block_tier_and_the_nudge_is_left_out() {
    let mut st = CompressionState::new("s");
    let mut b = block("b4", 2, &["x"]);
    b.topic = "done".into();
    st.blocks.push(b.clone());
    let view = vec![
        user("u"),
        crate::engine::model::summary::render_summary(&b),
        CoreMessage::text(NUDGE_ID, Role::User, "compress"),
    ];
    let segs = view_segments(&view, &st, &IdSet::default(), &estimate);
    assert_eq!(segs.len(), 2);
    assert_eq!(
        (segs[1].class, segs[1].tier, segs[1].block.as_str()),
        (Class::Block, 2, "b4")
    );
}

#[test]
fn truncated_results_are_marked() {
    let mut st = CompressionState::new("s");
    st.host.truncated.insert("r".into());
    let view = vec![result("r", "t", "Bash")];
    let segs = view_segments(&view, &st, &["r"].into_iter().collect(), &estimate);
    assert_eq!(segs[0].class, Class::Truncated);
}

#[test]
fn strip_is_proportional_on_the_window_scale() {
    let segs = [
        seg(Class::Tool, 300),
        seg(Class::User, 100),
        Segment {
            tier: 2,
            ..seg(Class::Block, 100)
        },
    ];
    // 500 of a 1000 window on 10 cells: 3 tool, 1 text, 1 summary, 5 free.
    assert_eq!(strip(&segs, 0, 10, 1000), "[===-2·····|]");
    // Over the window: the mark falls inside.
    assert_eq!(strip(&segs, 0, 10, 250), "[=====|=--22]");
    // The host's share comes first.
    assert_eq!(strip(&segs, 200, 10, 1000), "[hh===-2···|]");
}

/// What the segments are sized by in these tests: the estimator alone.
fn estimate(m: &CoreMessage) -> usize {
    crate::engine::model::tokens::estimate(&m.text)
}

#[test]
fn a_tiny_view_still_shows() {
    let s = strip(&[seg(Class::Protected, 10)], 0, 60, 200_000);
    assert!(s.starts_with("[#·"), "{s}");
    assert_eq!(s.chars().count(), 63);
    assert!(s.ends_with("|]"));
}

#[test]
fn tier_tree_nests_absorbed_blocks() {
    let mut blocks = Vec::new();
    for (i, (s, e)) in [(2, 25), (26, 46), (47, 65)].into_iter().enumerate() {
        let mut b = block(&format!("b{}", i + 1), 1, &[]);
        b.start_ref = format!("m{s:05}");
        b.end_ref = format!("m{e:05}");
        b.active = false;
        blocks.push(b);
    }
    let mut b4 = block("b4", 2, &[]);
    b4.direct_block_ids = vec!["b1".into(), "b2".into(), "b3".into()];
    (b4.start_ref, b4.end_ref) = ("m00002".into(), "m00065".into());
    let mut b5 = block("b5", 1, &[]);
    (b5.start_ref, b5.end_ref) = ("m00070".into(), "m00090".into());
    // Creation order differs from span order: the tree is by span.
    blocks.insert(0, b5);
    blocks.push(b4);
    let tree = tier_tree(&blocks);
    assert_eq!(
        format_tree(&tree),
        "b4 (T2) m00002–m00065\n├── b1 (T1) m00002–m00025\n├── b2 (T1) m00026–m00046\n└── b3 (T1) m00047–m00065\nb5 (T1) m00070–m00090"
    );
    let json = serde_json::to_value(&tree).unwrap();
    assert_eq!(json[0]["children"][2]["id"], "b3");
}

#[test]
fn a_cycle_in_the_state_does_not_loop() {
    let mut a = block("b1", 1, &[]);
    a.direct_block_ids = vec!["b2".into()];
    let mut b = block("b2", 2, &[]);
    b.direct_block_ids = vec!["b1".into()];
    let tree = tier_tree(&[a, b]);
    assert_eq!(format_tree(&tree), "b1 (T1) –\n└── b2 (T2) –");
}
