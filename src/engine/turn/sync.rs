//! Which blocks are live in this view.

use crate::engine::model::identity::IdSet;
use std::collections::HashSet;

use crate::engine::model::message::CoreMessage;
use crate::engine::model::state::CompressionState;

/// Marks each block active or not for this view: a block absorbed by another
/// is inactive; otherwise it is active while any message it stands for is in
/// the history (so a block can come back to life). Token figures of refs no
/// longer in the history are dropped.
pub fn sync_blocks(state: &mut CompressionState, history: &[CoreMessage]) {
    let mut present = IdSet::with_capacity_and_hasher(history.len(), Default::default());
    present.extend(history.iter().map(|m| m.id.as_str()));
    let absorbed: HashSet<String> = state
        .blocks
        .iter()
        .flat_map(|b| b.direct_block_ids.iter().cloned())
        .collect();
    for b in &mut state.blocks {
        b.active = !absorbed.contains(&b.block_id)
            && b.effective_message_ids
                .iter()
                .any(|id| present.contains(id.as_str()));
    }
    let mut live = IdSet::with_capacity_and_hasher(history.len(), Default::default());
    live.extend(
        history
            .iter()
            .filter_map(|m| state.message_refs.usable(&m.id))
            .map(String::as_str),
    );
    state
        .token_snapshot
        .retain(|r, _| live.contains(r.as_str()));
}

/// Every message id an active block stands for.
pub fn covered_ids(state: &CompressionState) -> IdSet<'_> {
    let active = || state.blocks.iter().filter(|b| b.active);
    // Sized up front: a long session's blocks cover most of its history.
    let mut covered = IdSet::with_capacity_and_hasher(
        active().map(|b| b.effective_message_ids.len()).sum(),
        Default::default(),
    );
    covered.extend(active().flat_map(|b| b.effective_message_ids.iter().map(String::as_str)));
    covered
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::model::message::Role;
    use crate::engine::model::refs::BLOCKED;
    use crate::engine::test_support::block;

    fn msg(id: &str) -> CoreMessage {
        CoreMessage::text(id, Role::User, id)
    }

    #[test]
    fn absorbed_blocks_are_inactive() {
        let mut st = CompressionState::new("s");
        let mut b2 = block("b2", 2, &["m1"]);
        b2.direct_block_ids = vec!["b1".into()];
        st.blocks = vec![block("b1", 1, &["m1"]), b2];
        sync_blocks(&mut st, &[msg("m1")]);
        assert!(!st.blocks[0].active);
        assert!(st.blocks[1].active);
    }

    #[test]
    fn blocks_follow_their_messages() {
        let mut st = CompressionState::new("s");
        st.blocks = vec![block("b1", 1, &["gone"])];
        sync_blocks(&mut st, &[msg("other")]);
        assert!(!st.blocks[0].active);
        sync_blocks(&mut st, &[msg("gone")]);
        assert!(
            st.blocks[0].active,
            "a block comes back when its messages do"
        );
    }

    #[test]
    fn token_figures_of_vanished_refs_are_dropped() {
        let mut st = CompressionState::new("s");
        for (raw, r) in [("live", "m00001"), ("dead", "m00002")] {
            st.message_refs.by_raw.insert(raw.into(), r.into());
            st.message_refs.by_ref.insert(r.into(), raw.into());
        }
        st.message_refs.by_raw.insert("p".into(), BLOCKED.into());
        st.token_snapshot = [
            ("m00001".to_string(), 10),
            ("m00002".to_string(), 20),
            ("m00003".to_string(), 30),
        ]
        .into();
        sync_blocks(&mut st, &[msg("live"), msg("p")]);
        assert_eq!(st.token_snapshot, [("m00001".to_string(), 10)].into());
    }
}
