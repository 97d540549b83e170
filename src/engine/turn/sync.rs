//! Which blocks are live in this view.

use crate::engine::model::identity::{IdMap, IdSet, Places};

use crate::engine::model::message::CoreMessage;
use crate::engine::model::name::Name;
use crate::engine::model::refs::Held;
use crate::engine::model::state::{Block, CompressionState};

/// Marks each block active or not for this view: a block absorbed by another
/// is inactive; otherwise it is active while any message it stands for is in
/// the history (so a block can come back to life). Token figures of refs no
/// longer in the history (`held` holds those it still has) are dropped.
pub fn sync_blocks(state: &mut CompressionState, history: &[CoreMessage], held: &Held) {
    let absorbed: IdSet<'_> = state
        .blocks
        .iter()
        .flat_map(|b| b.direct_block_ids.iter().map(Name::as_str))
        .collect();
    let active = present_blocks(&state.blocks, &absorbed, history);
    for (b, active) in state.blocks.iter_mut().zip(active) {
        b.active = active;
    }
    state.token_snapshot.retain(|r, _| held.holds(r));
}

/// Whether each block not `absorbed` stands for a message of the history.
/// Each is looked for by its first message, which the history holds unless
/// it was rewritten: the history is walked once against those few ids, and
/// only a block whose first message is gone has the rest of its messages
/// looked for among every id of the history.
fn present_blocks(blocks: &[Block], absorbed: &IdSet, history: &[CoreMessage]) -> Vec<bool> {
    let mut firsts: IdMap<'_, Vec<usize>> = IdMap::default();
    for (i, b) in blocks.iter().enumerate() {
        if let Some(first) = b.effective_message_ids.first()
            && !absorbed.contains(b.block_id.as_str())
        {
            firsts.entry(first.as_str()).or_default().push(i);
        }
    }
    let mut active = vec![false; blocks.len()];
    if firsts.is_empty() {
        return active;
    }
    for m in history {
        if let Some(found) = firsts.get(m.id.as_str()) {
            for &i in found {
                active[i] = true;
            }
        }
    }
    let missing: Vec<usize> = (firsts.values().flatten().copied())
        .filter(|&i| !active[i])
        .collect();
    if !missing.is_empty() {
        let present: IdSet<'_> = history.iter().map(|m| m.id.as_str()).collect();
        for i in missing {
            active[i] = blocks[i].effective_message_ids[1..]
                .iter()
                .any(|id| present.contains(id.as_str()));
        }
    }
    active
}

/// Which active blocks stand for each message: what pruning asks of every
/// message of the history and the recommendation of every message in view.
/// Built once a turn, since a long session's blocks cover most of it.
#[derive(Debug, Default)]
pub struct Coverage<'a> {
    /// Each covered message once, with the first active block (its index in
    /// the state's blocks) that stands for it, in the order taken in: a
    /// block at a time, each in its own order, which is about the order of
    /// the history.
    order: Vec<(&'a Name, u32)>,
    /// Places in `order` by id: eight bytes a covered message, where a map
    /// of the ids themselves was four times the memory, all of it fresh
    /// pages a long session's turn faulted in.
    index: Places,
    /// Later blocks standing for a message an earlier one stands for too:
    /// rare (blocks that came back to life over the same messages), and
    /// each still needs its place in the view.
    more: Vec<(&'a str, usize)>,
}

impl<'a> Coverage<'a> {
    /// The coverage of the active `blocks`.
    pub fn of(blocks: &'a [Block]) -> Coverage<'a> {
        let active = || blocks.iter().enumerate().filter(|(_, b)| b.active);
        let ids = active().map(|(_, b)| b.effective_message_ids.len()).sum();
        let mut index = Places::with_capacity(ids);
        let mut order: Vec<(&Name, u32)> = Vec::with_capacity(ids);
        let mut more = Vec::new();
        for (i, b) in active() {
            for id in &b.effective_message_ids {
                match index.find_or_add(id, order.len(), |at| order[at].0.as_str()) {
                    None => order.push((id, i as u32)),
                    Some(at) if order[at].1 != i as u32 => more.push((id.as_str(), i)),
                    Some(_) => {}
                }
            }
        }
        Coverage { order, index, more }
    }

    /// The first active block standing for `id`, and its place in `order`.
    fn find(&self, id: &str) -> Option<(usize, usize)> {
        self.index
            .find(id, |at| self.order[at].0.as_str())
            .map(|at| (self.order[at].1 as usize, at))
    }

    /// The first active block standing for each message of `history`,
    /// each looked for first just after the one before among the covered:
    /// blocks take their messages in the history's order, so most are
    /// found without hashing.
    pub fn firsts(&self, history: &[CoreMessage]) -> Vec<Option<usize>> {
        let mut guess = 0;
        let id_at = |at: usize| self.order.get(at).map(|o| o.0.as_str());
        history
            .iter()
            .map(|m| {
                let at = self.index.find_near(&m.id, guess, id_at)?;
                guess = at + 1;
                Some(self.order[at].1 as usize)
            })
            .collect()
    }

    /// Whether no active block stands for anything.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// Whether an active block stands for the message `id`.
    pub fn contains(&self, id: &str) -> bool {
        self.find(id).is_some()
    }

    /// The later blocks standing for a message, with its id.
    pub fn more(&self) -> &[(&'a str, usize)] {
        &self.more
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::model::message::Role;
    use crate::engine::test_support::block;

    fn sync_with(st: &mut CompressionState, history: &[CoreMessage]) {
        let held = Held::of(&st.message_refs, history);
        sync_blocks(st, history, &held);
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
}
