//! Dead tool outputs reclaimed with a compression (see
//! [`turn::reclaim`](crate::engine::turn::reclaim)): the compression changes
//! the prompt anyway, so they go in the same change, each archived first.
//!
//! Only those at or after the first message the compression changes: the
//! prompt before it is the provider's cached prefix, and an output
//! reclaimed there would make the next request write it all again for the
//! few tokens the line saves on each later one. A consolidation of older
//! summaries changes the prompt from its oldest block on, and takes the
//! dead outputs there.

use serde::Serialize;

use crate::engine::compress::archive::{ArchiveFile, ArchiveInput, Entry};
use crate::engine::model::config::Config;
use crate::engine::model::identity::IdSet;
use crate::engine::model::message::CoreMessage;
use crate::engine::model::protect::is_tool_protected;
use crate::engine::model::refs::ref_to_index;
use crate::engine::model::state::{Block, CompressionState, Reclaim, ReclaimedOutput};
use crate::engine::pressure::recommend::Recommendation;
use crate::engine::pressure::zone::protected_ids;
use crate::engine::turn::reclaim::{self, Scan};

/// What reclaiming needs of the call it goes with.
pub struct ReclaimInput<'a> {
    /// The call's history: everything before the call.
    pub history: &'a [CoreMessage],
    /// Engine settings (the recent zone, protected tools).
    pub config: &'a Config,
    /// Absolute session directory, for archive paths.
    pub archive_root: &'a str,
    /// Creation time for the archives, RFC 3339.
    pub created: &'a str,
    /// Whether a block stands for a message, which is then out of view
    /// anyway and left alone.
    pub covered: &'a dyn Fn(&str) -> bool,
    /// The ref index of the first message the compression changes: outputs
    /// before it are left (see the module's doc).
    pub from: u32,
}

/// Reclaims the dead outputs `scan` found in the call's history, but those
/// of the recent zone or of a protected tool and those reclaimed before:
/// each is marked in `state` as of this call, and its archive returned.
pub fn reclaim_dead(
    state: &mut CompressionState,
    scan: &Scan,
    input: &ReclaimInput,
) -> Vec<ArchiveFile> {
    let (history, cfg) = (input.history, input.config);
    let mut archives = Vec::new();
    for (place, why, r) in candidates(state, scan, history, cfg, input.from) {
        let m = &history[place];
        if (input.covered)(&m.id) {
            continue;
        }
        let rel = format!("reclaimed/{r}.md");
        let header = Block {
            block_id: "reclaimed".into(),
            topic: reclaim::reason(why),
            archive_rel: rel.clone(),
            start_ref: r.clone(),
            end_ref: r.clone(),
            compressed_tokens: cfg.tokens(m),
            ..Block::default()
        };
        let entry = Entry::Message {
            reference: Some(&r),
            message: m,
        };
        archives.push(ArchiveFile::new(
            rel.clone(),
            &ArchiveInput {
                block: &header,
                session: &state.session_id,
                created: input.created,
                entries: vec![entry],
            },
        ));
        let output = ReclaimedOutput {
            why: why.clone(),
            at: history.len(),
            archive: format!("{}/{rel}", input.archive_root.trim_end_matches('/')),
        };
        state.host.reclaimed.insert(m.id.clone(), output);
    }
    archives
}

/// The outputs a compression that changes the prompt from the ref index
/// `from` on would reclaim (see [`reclaim_dead`]): their places in
/// `history`, why, and their refs.
pub fn candidates<'s>(
    state: &CompressionState,
    scan: &'s Scan,
    history: &[CoreMessage],
    cfg: &Config,
    from: u32,
) -> Vec<(usize, &'s Reclaim, String)> {
    let zone = protected_ids(recent_tail(history, cfg), state, cfg);
    let mut out = Vec::new();
    for (place, why) in scan.found() {
        let m = &history[*place];
        let taken = state.host.reclaimed.contains_key(m.id.as_str());
        let kept =
            zone.contains(m.id.as_str()) || is_tool_protected(&m.tool_name, &cfg.protected_tools);
        let after = |r: &&str| ref_to_index(r).is_some_and(|i| i >= from);
        if let Some(r) = state
            .message_refs
            .usable(&m.id)
            .filter(|r| !taken && !kept && after(r))
        {
            out.push((*place, why, r.to_string()));
        }
    }
    out
}

/// The end of `history` the recent zone can lie in: never more than the
/// window, so the zone is found without walking a long history.
fn recent_tail<'h>(history: &'h [CoreMessage], cfg: &Config) -> &'h [CoreMessage] {
    let mut tokens = 0;
    let start = (history.iter().rposition(|m| {
        tokens += cfg.tokens(m);
        tokens > cfg.context_limit
    }))
    .unwrap_or(0);
    &history[start..]
}

/// Stale reads in view that the next compression reclaims: how many, and
/// their tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Dead {
    /// How many.
    pub outputs: usize,
    /// Their tokens, on the scale they were counted on.
    pub tokens: usize,
}

/// The dead outputs of `history` that `view` shows and the compression
/// `offered` would reclaim (see [`Offered`]); `count` sizes each.
///
/// `hidden` says which messages of `history` a block takes out of the view
/// ([`Projection::hidden`](crate::engine::Projection::hidden)). An output
/// counts only if it is shown and the compression changes the prompt at
/// or before it, so the walk starts at the first such message: on a long
/// compressed session, its last few thousand messages of a hundred
/// thousand.
pub fn dead_in_view(
    state: &CompressionState,
    history: &[CoreMessage],
    cfg: &Config,
    (view, offered, hidden): (&[CoreMessage], &Offered, &[bool]),
    count: &dyn Fn(&CoreMessage) -> usize,
) -> Dead {
    if !cfg.reclaim {
        return Dead::default();
    }
    let from = offered.from();
    let counts = |p: &usize| {
        !hidden.get(*p).copied().unwrap_or(false)
            && (state.message_refs.usable(&history[*p].id))
                .and_then(ref_to_index)
                .is_some_and(|i| i >= from)
    };
    let start = (0..history.len()).find(counts).unwrap_or(history.len());
    let scan = Scan::from_place(&cfg.file_tools, history, start)
        .unwrap_or_else(|| Scan::whole(&cfg.file_tools, history));
    let places = candidates(state, &scan, history, cfg, from);
    if places.is_empty() {
        return Dead::default();
    }
    let shown: IdSet<'_> = view.iter().map(|m| m.id.as_str()).collect();
    let mut dead = Dead::default();
    for m in places.into_iter().map(|(p, _, _)| &history[p]) {
        let folded = (state.message_refs.usable(&m.id)).is_some_and(|r| offered.holds(r));
        if shown.contains(m.id.as_str()) && !folded {
            dead.outputs += 1;
            dead.tokens += count(m);
        }
    }
    dead
}

/// What a compression a nudge (or `ranges`) offers takes: the spans of
/// refs it folds away, as ref indices. It changes the prompt from the
/// first on, and a dead output inside one goes with its block, not as a
/// line of its own.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Offered(Vec<(u32, u32)>);

impl Offered {
    /// What `rec` offers at `tier`: its ranges, or for a consolidation
    /// the blocks of the tiers below.
    pub fn of(rec: &Recommendation, tier: u8) -> Offered {
        let ends: Vec<(&str, &str)> = match tier {
            1 => (rec.ranges.iter())
                .map(|r| (r.start_ref.as_str(), r.end_ref.as_str()))
                .collect(),
            _ => (rec.blocks.iter())
                .filter(|b| b.tier < tier)
                .map(|b| (b.start_ref.as_str(), b.end_ref.as_str()))
                .collect(),
        };
        let spans = ends
            .into_iter()
            .filter_map(|(a, b)| Some((ref_to_index(a)?, ref_to_index(b)?)));
        Offered(spans.collect())
    }

    /// The ref index the prompt changes from; `u32::MAX` for nothing.
    fn from(&self) -> u32 {
        self.0.iter().map(|&(a, _)| a).min().unwrap_or(u32::MAX)
    }

    /// Whether the ref `r` is inside a span.
    fn holds(&self, r: &str) -> bool {
        ref_to_index(r).is_some_and(|i| self.0.iter().any(|&(a, b)| (a..=b).contains(&i)))
    }
}

/// The least index of `refs`; `u32::MAX` for none.
pub fn first_index<'r>(refs: impl IntoIterator<Item = &'r str>) -> u32 {
    (refs.into_iter().filter_map(ref_to_index).min()).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::pressure::ranges::{BlockSpan, RangeInfo};

    fn range(start: &str, end: &str) -> RangeInfo {
        RangeInfo {
            start_ref: start.into(),
            end_ref: end.into(),
            count: 2,
            tokens: 100,
            chars: 400,
            tool_pct: 0,
            user_messages: 1,
            holds_task: false,
        }
    }

    /// A session whose first exchange a block takes out of view: a read of
    /// `a` there made stale, then a read of `a` in view made stale by an
    /// edit made beside a read of `b`.
    fn read_edited_in_view() -> (CompressionState, Vec<CoreMessage>) {
        use crate::engine::model::message::Role;
        let body = "fn main() {}\n".repeat(100);
        let call = |id: &str, k: &str, tool: &str, file: &str| {
            let args = format!(r#"{{"file_path": "{file}"}}"#);
            CoreMessage::tool_call(id, k, tool, args)
        };
        let result =
            |id: &str, k: &str, tool: &str, text: &str| CoreMessage::tool_result(id, k, tool, text);
        let history = vec![
            CoreMessage::text("u1", Role::User, "tidy the parser"),
            call("c1", "k1", "Read", "a"),
            result("o1", "k1", "Read", &body),
            call("c2", "k2", "Edit", "a"),
            result("o2", "k2", "Edit", "The file a has been updated."),
            CoreMessage::text("u2", Role::User, "and again"),
            call("c3", "k3", "Read", "a"),
            result("o3", "k3", "Read", &body),
            call("c4", "k4", "Read", "b"),
            call("c5", "k5", "Edit", "a"),
            result("o4", "k4", "Read", &body),
            result("o5", "k5", "Edit", "The file a has been updated."),
            CoreMessage::text("a1", Role::Assistant, "done"),
            CoreMessage::text("u3", Role::User, "thanks"),
        ];
        let mut state = CompressionState::new("s");
        for (i, m) in history.iter().enumerate() {
            state
                .message_refs
                .add_logged(&format!("m{:05}", i + 1), &m.id);
        }
        (state, history)
    }

    #[test]
    fn a_dead_output_in_view_is_counted_however_much_is_hidden_before_it() {
        let (state, history) = read_edited_in_view();
        let cfg = Config {
            preserve_recent_messages: 1,
            ..Config::default()
        };
        let count = |m: &CoreMessage| cfg.tokens(m);
        let offered = Offered::of(
            &Recommendation {
                ranges: vec![range("m00006", "m00006")],
                ..Recommendation::default()
            },
            1,
        );
        let read = cfg.tokens(&history[7]);
        let expected = Dead {
            outputs: 1,
            tokens: read,
        };
        // The first exchange hidden by a block, or left in view: the read
        // there comes before what the compression changes, and counts
        // neither way.
        let mut hidden = vec![false; history.len()];
        for seen in [false, true] {
            hidden[1..5].fill(seen);
            let view: Vec<CoreMessage> = (history.iter().zip(&hidden))
                .filter(|(_, h)| !**h)
                .map(|(m, _)| m.clone())
                .collect();
            let dead = dead_in_view(&state, &history, &cfg, (&view, &offered, &hidden), &count);
            assert_eq!(dead, expected, "first exchange hidden: {seen}");
        }
        // Offered from the read of `b` on, whose call comes before it with
        // the edit's: the walk from there misses the edit's call and walks
        // it all, and the stale read, before the change, counts not.
        let offered = Offered::of(
            &Recommendation {
                ranges: vec![range("m00011", "m00011")],
                ..Recommendation::default()
            },
            1,
        );
        let dead = dead_in_view(
            &state,
            &history,
            &cfg,
            (&history, &offered, &hidden),
            &count,
        );
        assert_eq!(dead, Dead::default());
    }

    #[test]
    fn a_compression_changes_the_prompt_from_what_it_offers_first() {
        let rec = Recommendation {
            ranges: vec![range("m00010", "m00020"), range("m00030", "m00040")],
            blocks: vec![BlockSpan {
                block_id: "b1".into(),
                tier: 1,
                start_ref: "m00002".into(),
                end_ref: "m00008".into(),
            }],
            ..Recommendation::default()
        };
        let tier1 = Offered::of(&rec, 1);
        assert_eq!(tier1.from(), 10);
        assert!(tier1.holds("m00015") && !tier1.holds("m00025") && !tier1.holds("m00005"));
        let tier2 = Offered::of(&rec, 2);
        assert_eq!(tier2.from(), 2);
        assert_eq!(Offered::default().from(), u32::MAX);
    }
}
