//! Any transcript rebuilt offline, as `noa rebuild` does: whatever Compress
//! calls and results it holds (the seeds hold real ones, which the fuzzer
//! mutates), the rebuild finishes without a panic, its blocks name messages
//! of the history, and the state it gives projects.
#![no_main]

use std::collections::HashSet;

use libfuzzer_sys::fuzz_target;
use noa::engine::{CompressionState, Config, CoreMessage, IdMap, RebuildInput, rebuild};
use noa::formats::{BadLines, read};

#[path = "turn.rs"]
mod turn;
use turn::turn;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(t) = read("fuzz", text, None, BadLines::Skip) else {
        return;
    };
    let history = t.cores();
    let recorded = t.recorded();
    let config = Config::default();
    let mut originals: IdMap<'_, &CoreMessage> = IdMap::default();
    originals.extend(history.iter().map(|m| (m.id.as_str(), m)));
    let base = CompressionState::new("fuzz");
    let rebuilt = rebuild(&RebuildInput {
        history: &history,
        originals: &originals,
        base: &base,
        config: &config,
        recorded: &recorded,
        archive_root: "/fuzz/session",
        now: 1_767_225_600,
        created: "2026-01-01T00:00:00Z",
        on_step: &|_| {},
        weights: t.format.weights(),
    });
    let ids: HashSet<&str> = history.iter().map(|m| m.id.as_str()).collect();
    for b in &rebuilt.state.blocks {
        for id in &b.direct_message_ids {
            let known = ids.contains(id.as_str());
            assert!(known, "block {} names {id}, not in the history", b.block_id);
        }
    }
    let mut state = rebuilt.state;
    turn(&mut state, &history, &recorded, &config);
});
