use super::*;
use crate::engine::model::config::Config;
use crate::engine::model::name::Name;
use crate::engine::model::state::Block;
use crate::engine::pressure::gauge::Recorded;
use crate::engine::pressure::prompt::Sections;
use crate::engine::test_support::{block, call, result, say, think, user};
use crate::engine::turn::{Projection, TurnInput, project, project_with_index};
use proptest::prelude::*;

/// A history of exchanges as agent loops make them: prose, reasoning,
/// tool calls answered (in parallel too), Compress calls and their results.
fn history(kinds: &[u8]) -> Vec<CoreMessage> {
    let mut h = vec![user("m0")];
    for (i, &k) in kinds.iter().enumerate() {
        let id = |n: usize| format!("m{i}_{n}");
        let cid = |n: usize| format!("c{i}_{n}");
        match k % 8 {
            0 => h.push(user(&id(0))),
            1 => h.extend([think(&id(0)), say(&id(1))]),
            2 => h.extend([
                think(&id(0)),
                call(&id(1), &cid(0), "Read"),
                CoreMessage::tool_result(id(2), cid(0), "Read", "a line read\n".repeat(200)),
            ]),
            3 => h.extend([
                say(&id(0)),
                call(&id(1), &cid(0), "Bash"),
                call(&id(2), &cid(1), "Read"),
                result(&id(3), &cid(0), "Bash"),
                result(&id(4), &cid(1), "Read"),
            ]),
            4 => h.extend([
                call(&id(0), &cid(0), COMPRESS_TOOL),
                result(&id(1), &cid(0), COMPRESS_TOOL),
            ]),
            5 => h.extend([think(&id(0)), think(&id(1)), say(&id(2))]),
            6 => h.extend([say(&id(0)), user(&id(1))]),
            // Now and then a Compress call that names no call id.
            _ if k > 250 => h.extend([call(&id(0), "", COMPRESS_TOOL), user(&id(1))]),
            _ => h.extend([
                say(&id(0)),
                call(&id(1), &cid(0), COMPRESS_TOOL),
                result(&id(2), &cid(0), COMPRESS_TOOL),
                user(&id(3)),
            ]),
        }
    }
    h
}

/// One step of a rebuild: the history is cut further on, and blocks are
/// made over spans of it (some folding earlier blocks into a higher tier).
#[derive(Debug, Clone)]
struct Step {
    /// How far past the last cut, as a share of what is left.
    grow: u8,
    /// Blocks made: (start, length) as shares of the history, whether the
    /// block folds the last block made, and which Compress call made it
    /// (as a share of the calls; past them, none).
    made: Vec<(u8, u8, bool, u8)>,
    /// Whether a call is answered on a copy first, whose blocks are then
    /// let go (a rejection replayed), before the cut is projected.
    ghost: bool,
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(
        (
            any::<u8>(),
            prop::collection::vec((any::<u8>(), 0u8..40, any::<bool>(), any::<u8>()), 0..3),
            prop::bool::weighted(0.1),
        )
            .prop_map(|(grow, made, ghost)| Step { grow, made, ghost }),
        1..8,
    )
}

/// Makes the step's blocks over `h` in `st` (the same ones in each state).
fn make_blocks(st: &mut CompressionState, h: &[CoreMessage], step: &Step) {
    let calls: Vec<&str> = h
        .iter()
        .filter(|m| m.is_compress_call())
        .map(|m| m.tool_call_id.as_str())
        .collect();
    for &(start, len, fold, by) in &step.made {
        let start = usize::from(start) * h.len() / 256;
        let end = (start + usize::from(len) * h.len() / 256).min(h.len() - 1);
        let ids: Vec<&str> = h[start..=end].iter().map(|m| m.id.as_str()).collect();
        let n = st.blocks.len() + 1;
        let mut b = block(&format!("b{n}"), 1, &ids);
        b.compressed_tokens = 40 * ids.len();
        if let Some(call) = calls.get(usize::from(by) * (calls.len() + 2) / 256) {
            b.compress_call_id = call.to_string();
        }
        if fold && let Some(last) = st.blocks.last() {
            b.tier = last.tier + 1;
            b.direct_block_ids = vec![Name::new(&last.block_id)];
            let mut all = last.effective_message_ids.clone();
            all.extend(b.effective_message_ids.iter().cloned());
            b.effective_message_ids = all;
        }
        st.blocks.push(b);
    }
}

fn same(a: &Projection, b: &Projection) -> Result<(), TestCaseError> {
    prop_assert_eq!(&a.view, &b.view);
    prop_assert_eq!(a.new_refs, b.new_refs);
    prop_assert_eq!(a.unnumbered, b.unnumbered);
    prop_assert_eq!(a.figures.before_cuts, b.figures.before_cuts);
    prop_assert_eq!(a.figures.request, b.figures.request);
    Ok(())
}

proptest::proptest! {
    /// Projected with an index, cut after cut, a history gives the view,
    /// refs, figures and state it gives projected afresh each time.
    #[test]
    fn a_carried_projection_is_the_projection(
        kinds in prop::collection::vec(any::<u8>(), 1..40),
        steps in steps(),
        window in 200usize..4000,
        recorded_every in 0usize..5,
    ) {
        let h = history(&kinds);
        // Prompt sizes recorded for some responses, as a Claude Code log
        // records them, growing (a Compress call between two does not count).
        let recorded: Vec<Recorded> = (h.iter().enumerate())
            .filter(|(i, m)| recorded_every > 0 && m.role == Role::Assistant && i % recorded_every == 0)
            .map(|(i, _)| Recorded { at: i, tokens: 500 + 45 * i })
            .collect();
        let config = Config { context_limit: window, ..Config::default() };
        let sections = Sections::default();
        let none = Default::default();
        let mut index = HistoryIndex::new(&h, &recorded, &config);
        let (mut fresh, mut carried) = (CompressionState::new("s"), CompressionState::new("s"));
        let mut cut = 0;
        for step in &steps {
            cut += (h.len() - cut) * usize::from(step.grow) / 255;
            cut = cut.max(1);
            let turn = TurnInput {
                history: &h[..cut],
                config: &config,
                input_tokens: None,
                recorded: &recorded,
                sections: &sections,
                force_nudge: false,
                for_call: true,
                cuts: &none,
            };
            if step.ghost {
                // As a rejection is replayed: its refs and figures kept,
                // its blocks let go.
                let (mut f, mut c) = (fresh.clone(), carried.clone());
                make_blocks(&mut f, &h, step);
                make_blocks(&mut c, &h, step);
                let a = project(&mut f, &turn);
                let b = project_with_index(&mut c, &turn, &mut index);
                same(&a, &b)?;
                (fresh.message_refs, fresh.token_snapshot) = (f.message_refs, f.token_snapshot);
                (carried.message_refs, carried.token_snapshot) = (c.message_refs, c.token_snapshot);
            }
            make_blocks(&mut fresh, &h, step);
            make_blocks(&mut carried, &h, step);
            let a = project(&mut fresh, &turn);
            let b = project_with_index(&mut carried, &turn, &mut index);
            same(&a, &b)?;
            prop_assert_eq!(&fresh, &carried);
            for m in &h[..cut] {
                let covered = fresh.blocks.iter().any(|b| {
                    b.active && b.effective_message_ids.contains(&m.id)
                });
                prop_assert_eq!(index.covers(&m.id), covered);
            }
            // A call's projection leaves the blocks as the call found them.
            for b in fresh.blocks.iter_mut().chain(&mut carried.blocks) {
                b.active = true;
            }
        }
    }
}

#[test]
fn messages_of_one_id_are_covered_together() {
    // A history a host built by hand may hold an id twice, or none: a block
    // that stands for an id stands for each message holding it.
    let h = vec![user("t"), say("a"), user("b"), say("a"), user(""), say("")];
    let mut st = CompressionState::new("s");
    st.blocks = vec![block("b1", 1, &["a"])];
    let config = Config::default();
    let mut index = HistoryIndex::new(&h, &[], &config);
    index.advance(&mut st, h.len(), 1, |_| false);
    assert!(st.blocks[0].active && index.covers("a") && !index.covers(""));
    let kept: Vec<&str> = index.kept().iter().map(|m| m.id.as_str()).collect();
    assert_eq!(kept, ["t", "b", "", ""]);
    assert_eq!(index.anchors(), [Some(1)]);
}

#[test]
fn counted_places_sum_over_any_first_stretch() {
    let mut r = Ranks::default();
    let kept = [0, 3, 4, 9, 64, 70, 200];
    for at in kept {
        r.set(at, true);
    }
    r.set(3, false);
    r.count();
    let kept: Vec<usize> = kept.into_iter().filter(|&at| at != 3).collect();
    for at in 0..260 {
        let want = kept.iter().filter(|&&k| k < at).count();
        assert_eq!(r.before(at), want, "before {at}");
    }
    for (k, &at) in kept.iter().enumerate() {
        assert_eq!(r.select(k), at, "select {k}");
    }
}

#[test]
fn blocks_made_over_messages_not_reached_yet_stand_once_reached() {
    let h = vec![user("a"), say("b"), user("c"), say("d")];
    let mut st = CompressionState::new("s");
    st.blocks = vec![block("b1", 1, &["d"]) as Block];
    let config = Config::default();
    let mut index = HistoryIndex::new(&h, &[], &config);
    index.advance(&mut st, 2, 1, |_| false);
    assert!(!st.blocks[0].active, "d is not in the first two messages");
    index.advance(&mut st, 4, 3, |_| false);
    assert!(st.blocks[0].active);
    assert!(index.covers("d") && !index.covers("c"));
    assert_eq!(index.kept().len(), 3);
    assert_eq!(index.anchors(), [Some(3)]);
}

/// Brings a fresh index to the whole of `history`, as a turn does: the
/// blocks marked active and the token figures of refs it no longer holds
/// dropped.
fn sync_with(st: &mut CompressionState, history: &[CoreMessage]) {
    let config = Config::default();
    let next = st.message_refs.highest_used() + 1;
    HistoryIndex::new(history, &[], &config).advance(st, history.len(), next, |_| false);
}

fn msg(id: &str) -> CoreMessage {
    CoreMessage::text(id, Role::User, id)
}

#[test]
fn absorbed_blocks_are_inactive() {
    let mut st = CompressionState::new("s");
    let mut b2 = block("b2", 2, &["m1"]);
    b2.direct_block_ids = vec!["b1".into()];
    st.blocks = vec![block("b1", 1, &["m1"]), b2];
    sync_with(&mut st, &[msg("m1")]);
    assert!(!st.blocks[0].active);
    assert!(st.blocks[1].active);
}

#[test]
fn blocks_follow_their_messages() {
    let mut st = CompressionState::new("s");
    st.blocks = vec![block("b1", 1, &["gone"])];
    sync_with(&mut st, &[msg("other")]);
    assert!(!st.blocks[0].active);
    sync_with(&mut st, &[msg("gone")]);
    assert!(
        st.blocks[0].active,
        "a block comes back when its messages do"
    );
}

#[test]
fn a_block_whose_first_message_is_gone_lives_on_its_others() {
    let mut st = CompressionState::new("s");
    st.blocks = vec![
        block("b1", 1, &["gone", "kept"]),
        block("b2", 1, &["gone", "also gone"]),
        block("b3", 1, &["kept"]),
    ];
    sync_with(&mut st, &[msg("kept")]);
    let active: Vec<bool> = st.blocks.iter().map(|b| b.active).collect();
    assert_eq!(active, [true, false, true]);
}

#[test]
fn a_ref_in_another_form_keeps_its_figure_while_its_message_stays() {
    let mut st = CompressionState::new("s");
    for (raw, r) in [("a", "m00001"), ("b", "m2"), ("c", "m3")] {
        st.message_refs.insert(raw, r);
    }
    st.token_snapshot = [
        ("m00001".into(), 10),
        ("m2".into(), 20),
        ("m3".into(), 30),
        ("m00002".into(), 40),
    ]
    .into();
    sync_with(&mut st, &[msg("a"), msg("b")]);
    let kept: Vec<&str> = st.token_snapshot.keys().map(Name::as_str).collect();
    assert_eq!(kept, ["m00001", "m2"]);
}

#[test]
fn token_figures_of_vanished_refs_are_dropped() {
    let mut st = CompressionState::new("s");
    for (raw, r) in [("live", "m00001"), ("dead", "m00002")] {
        st.message_refs.insert(raw, r);
    }
    st.message_refs.block("p");
    st.token_snapshot = [
        ("m00001".into(), 10),
        ("m00002".into(), 20),
        ("m00003".into(), 30),
    ]
    .into();
    sync_with(&mut st, &[msg("live"), msg("p")]);
    assert_eq!(st.token_snapshot, [("m00001".into(), 10)].into());
}

#[test]
fn figures_are_kept_whatever_order_the_history_holds_their_refs_in() {
    let mut st = CompressionState::new("s");
    let raws = ["a", "b", "c", "d", "e"];
    for (i, raw) in raws.iter().enumerate() {
        let r = format!("m{:05}", i + 1);
        st.message_refs.insert(raw, &r);
        st.token_snapshot.insert(r.into(), i);
    }
    // A rewritten history: refs out of order, one message gone.
    sync_with(&mut st, &[msg("e"), msg("b"), msg("a"), msg("d")]);
    let kept: Vec<&str> = st.token_snapshot.keys().map(Name::as_str).collect();
    assert_eq!(kept, ["m00001", "m00002", "m00004", "m00005"]);
}
