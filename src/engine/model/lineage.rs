//! Forks and subagents start from their parent's ledger.

use super::state::{CompressionState, HostState, NudgeState, Stats};

/// How many ancestors are tried, nearest first.
pub const MAX_DEPTH: usize = 8;

/// A child session's state from its parent's: the ledger (blocks, refs,
/// token figures, next block id, archive paths, which stay where the
/// parent's files are) carries over, so the child can address what it
/// inherited and allocates no colliding ids; pacing, stats and host counters
/// start fresh, since they describe the parent's conversation.
pub fn derive_child(parent: &CompressionState, child_session: &str) -> CompressionState {
    CompressionState {
        session_id: child_session.to_string(),
        derived_from: parent.session_id.clone(),
        nudge: NudgeState::default(),
        stats: Stats::default(),
        host: HostState::default(),
        ..parent.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::test_support::block;

    #[test]
    fn the_ledger_carries_over_and_pacing_does_not() {
        let mut p = CompressionState::new("parent");
        p.blocks = vec![block("b1", 1, &["x"])];
        p.next_block_id = 2;
        p.message_refs.insert_id_only("x", "m00001");
        p.nudge.last_nudge_shown_tokens = 90_000;
        p.stats.compression_count = 4;
        p.host.consecutive_failures = 2;
        let c = derive_child(&p, "child");
        assert_eq!(c.session_id, "child");
        assert_eq!(c.derived_from, "parent");
        assert_eq!(c.blocks, p.blocks);
        assert_eq!(
            c.blocks[0].archive_path, "/archive/tier1/b1.md",
            "archives stay where they are"
        );
        assert_eq!(c.next_block_id, 2);
        assert_eq!(c.message_refs, p.message_refs);
        assert_eq!(c.nudge, NudgeState::default());
        assert_eq!(c.stats, Stats::default());
        assert_eq!(c.host, HostState::default());
    }
}
