use super::*;
use crate::engine::model::message::{COMPRESS_TOOL, Role};
use crate::engine::model::state::Block;
use crate::engine::model::summary::{SUMMARY_HEADER, is_rendered_summary};
use crate::engine::test_support::{block, call, ids, pruned, result, say, think, user};

fn prune(history: &[CoreMessage], state: &CompressionState) -> Vec<CoreMessage> {
    pruned(history, state)
}

fn state_with(blocks: Vec<Block>) -> CompressionState {
    let mut st = CompressionState::new("s");
    st.blocks = blocks;
    st
}

#[test]
fn no_blocks_no_change() {
    let v = vec![user("a"), say("b")];
    assert_eq!(prune(&v, &state_with(vec![])), v);
}

#[test]
fn covered_messages_give_way_to_the_summary() {
    let v = vec![user("m1"), say("m2"), user("m3"), user("m4")];
    let out = prune(&v, &state_with(vec![block("b1", 1, &["m2", "m3"])]));
    assert_eq!(ids(&out), ["m1", "noa_summary_b1", "m4"]);
    assert!(out[1].text.starts_with(SUMMARY_HEADER));
}

#[test]
fn the_first_user_message_stays() {
    let v = vec![user("m1"), say("m2")];
    let out = prune(&v, &state_with(vec![block("b1", 1, &["m1", "m2"])]));
    assert_eq!(ids(&out), ["m1", "noa_summary_b1"]);
}

#[test]
fn summaries_follow_coverage_order_then_block_number() {
    let v = vec![user("m1"), say("m2"), user("m3"), say("m4")];
    let out = prune(
        &v,
        &state_with(vec![block("b2", 1, &["m4"]), block("b1", 1, &["m2"])]),
    );
    assert_eq!(ids(&out), ["m1", "noa_summary_b1", "m3", "noa_summary_b2"]);
    let v = vec![user("u"), say("x"), say("y")];
    let out = prune(
        &v,
        &state_with(vec![block("b2", 1, &["y"]), block("b1", 1, &["x"])]),
    );
    assert_eq!(ids(&out), ["u", "noa_summary_b1", "noa_summary_b2"]);
}

#[test]
fn blocks_over_the_same_messages_each_find_their_place() {
    // Two live blocks share m3 (a block that came back to life): each
    // summary goes where its own first covered message was.
    let v = vec![user("m1"), say("m2"), user("m3"), say("m4"), user("m5")];
    let out = prune(
        &v,
        &state_with(vec![
            block("b1", 1, &["m4", "m3"]),
            block("b2", 1, &["m3", "m2"]),
        ]),
    );
    assert_eq!(ids(&out), ["m1", "noa_summary_b1", "noa_summary_b2", "m5"]);
    let v = vec![user("m1"), say("m2"), user("m3"), say("m4"), user("m5")];
    let out = prune(
        &v,
        &state_with(vec![block("b1", 1, &["m2"]), block("b2", 1, &["m2", "m4"])]),
    );
    assert_eq!(
        ids(&out),
        ["m1", "noa_summary_b1", "noa_summary_b2", "m3", "m5"]
    );
}

#[test]
fn everything_covered_leaves_task_and_summary() {
    let v = vec![user("a"), say("b"), say("c")];
    let out = prune(&v, &state_with(vec![block("b1", 1, &["a", "b", "c"])]));
    assert_eq!(out.len(), 2);
}

#[test]
fn reasoning_beside_a_visible_action_stays() {
    let v = vec![
        user("u"),
        say("old1"),
        think("k1"),
        call("a1", "t1", "Read"),
        result("r1", "t1", "Read"),
    ];
    let out = prune(&v, &state_with(vec![block("b1", 1, &["old1", "k1"])]));
    assert_eq!(ids(&out), ["u", "noa_summary_b1", "k1", "a1", "r1"]);
}

#[test]
fn a_whole_covered_turn_goes() {
    let v = vec![
        user("u"),
        think("k1"),
        call("a1", "t1", "Read"),
        result("r1", "t1", "Read"),
        user("recent"),
    ];
    let out = prune(&v, &state_with(vec![block("b1", 1, &["k1", "a1", "r1"])]));
    assert_eq!(ids(&out), ["u", "noa_summary_b1", "recent"]);
}

#[test]
fn a_half_covered_compress_exchange_stays_whole() {
    let v = vec![
        user("u"),
        say("old1"),
        call("cc", "tc", "Compress"),
        result("cr", "tc", "Compress"),
    ];
    let out = prune(&v, &state_with(vec![block("b1", 1, &["old1", "cr"])]));
    assert!(ids(&out).contains(&"cc") && ids(&out).contains(&"cr"));
}

#[test]
fn a_summary_never_lands_inside_a_tool_exchange() {
    // A block covering one result of a parallel pair: the summary must wait
    // until the exchange is over, and one covering the head of a response
    // goes before what remains of it.
    let v = vec![
        user("u"),
        say("x"),
        call("c1", "a", "Read"),
        call("c2", "b", "Read"),
        result("r1", "a", "Read"),
        result("r2", "b", "Read"),
        user("later"),
    ];
    let out = prune(&v, &state_with(vec![block("b1", 1, &["r1"])]));
    assert_eq!(
        ids(&out),
        ["u", "x", "c1", "c2", "r2", "noa_summary_b1", "later"]
    );
    let out = prune(&v, &state_with(vec![block("b1", 1, &["c2"])]));
    assert_eq!(
        ids(&out),
        ["u", "x", "c1", "r1", "r2", "noa_summary_b1", "later"]
    );
    let out = prune(&v, &state_with(vec![block("b1", 1, &["x", "c1"])]));
    assert_eq!(
        ids(&out),
        ["u", "noa_summary_b1", "c2", "r1", "r2", "later"]
    );
}

#[test]
fn summary_rendering() {
    let mut b = block("b5", 2, &[]);
    b.topic = "认证子系统".into();
    b.summary = "  decided on JWT  ".into();
    b.start_ref = "m00012".into();
    b.end_ref = "m00160".into();
    b.archive_path = "/data/noa/s/tier2/b5.md".into();
    let m = render_summary(&b);
    assert_eq!(m.id, "noa_summary_b5");
    assert!(is_rendered_summary(&m));
    let lines: Vec<&str> = m.text.lines().collect();
    assert_eq!(lines[0], "[Compressed conversation section] — 认证子系统");
    assert_eq!(lines[1], "decided on JWT");
    assert_eq!(
        *lines.last().unwrap(),
        r#"<noa-archive block="b5" tier="2" range="m00012-m00160" path="/data/noa/s/tier2/b5.md"/>"#
    );
    assert!(!m.text.contains("<noa-ref") && !m.text.contains(" id=\"m"));

    let mut bare = block("b1", 1, &[]);
    bare.summary = String::new();
    assert!(
        render_summary(&bare)
            .text
            .starts_with("[Compressed conversation section]\n\n<noa-archive")
    );
}

#[test]
fn only_noa_summaries_count_as_rendered() {
    let good = CoreMessage::text(
        "noa_summary_b1",
        Role::User,
        format!("{SUMMARY_HEADER} — topic"),
    );
    assert!(is_rendered_summary(&good));
    let cases = [
        CoreMessage::text("other", Role::User, SUMMARY_HEADER),
        CoreMessage::text("noa_summary_b1", Role::Assistant, SUMMARY_HEADER),
        CoreMessage {
            content_type: ContentType::ToolResult,
            ..good.clone()
        },
        CoreMessage::text("noa_summary_b1", Role::User, "host wrote this"),
    ];
    for m in cases {
        assert!(!is_rendered_summary(&m), "{m:?}");
    }
}

#[test]
fn prune_is_idempotent() {
    let v = vec![user("m1"), say("m2"), user("m3"), user("m4")];
    let st = state_with(vec![block("b1", 1, &["m2", "m3"])]);
    let once = prune(&v, &st);
    for _ in 0..20 {
        assert_eq!(prune(&v, &st), once);
    }
}

#[test]
fn spent_compress_exchanges_leave_without_moving_summaries() {
    // b0 came of the call `cx` and was folded away since: the call is spent.
    let mut b0 = block("b0", 1, &["gone"]);
    (b0.compress_call_id, b0.active) = ("cx".into(), false);
    let st = state_with(vec![b0, block("b1", 1, &["m2"])]);
    let v = vec![
        user("m1"),
        call("c", "cx", COMPRESS_TOOL),
        say("m2"),
        say("m3"),
    ];
    let out = prune(&v, &st);
    // The summary still waits for the end of the assistant run the spent
    // call began, as it would with the call in view.
    assert_eq!(ids(&out), ["m1", "m3", "noa_summary_b1"]);
}
