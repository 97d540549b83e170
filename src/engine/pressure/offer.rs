//! A nudge as data: what a script reads where a model reads the nudge's
//! text. The nudge and its offer are made from the same decision and the
//! same recommendation, so a loop that never parses prose sends what a
//! model reading the nudge would, down to the Compress call's arguments.

use serde::Serialize;

use super::gauge::Gauge;
use super::nudge::{Decision, reclaim_target};
use super::ranges::RangeInfo;
use super::recommend::Recommendation;
use crate::engine::model::config::Config;
use crate::engine::model::refs::ref_to_index;
use crate::engine::model::state::Block;
use crate::engine::model::summary::render_summary;

/// Which nudge it is, for a script to branch on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NudgeKind {
    /// Tier 1, advisory: compress finished message ranges.
    Ranged,
    /// Tier 2 or 3: fold the summaries of the tier below into one.
    Tier,
    /// At the limit, whatever the tier: compress before anything else.
    Emergency,
}

/// Everything a nudge asks for, as data. `ranges` or `blocks` is empty:
/// a tier-1 nudge offers message ranges, a tier-2/3 nudge the blocks to
/// fold.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Offer {
    /// Which nudge.
    pub kind: NudgeKind,
    /// The tier a call answering it makes: 1 for ranges, 2 or 3 for a fold.
    pub tier: u8,
    /// The context is at its limit.
    pub emergency: bool,
    /// The message ranges offered, oldest first (tier 1).
    pub ranges: Vec<RangeInfo>,
    /// The blocks to fold, oldest first (tier 2 and 3).
    pub blocks: Vec<OfferedBlock>,
    /// What the ranges or blocks offered hold together: what answering
    /// with all of them frees at most.
    pub offered_tokens: usize,
    /// The least a tier-1 call is asked to free (the nudge's "free at
    /// least"); `None` for a fold, which is asked to take every block.
    pub least_to_free: Option<usize>,
    /// The arguments of a Compress call that takes everything offered,
    /// summaries left empty for the model (or the script) to write.
    pub arguments: CompressArgs,
}

/// A block a tier-2/3 nudge asks to fold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OfferedBlock {
    /// `bN`.
    pub block_id: String,
    /// Its tier.
    pub tier: u8,
    /// First ref it covers.
    pub start_ref: String,
    /// Last ref it covers.
    pub end_ref: String,
    /// Messages it stands for.
    pub messages: usize,
    /// Tokens of the originals it replaced.
    pub replaced_tokens: usize,
    /// Tokens its rendered summary takes in the view now: what folding it
    /// takes out, before the new summary goes in.
    pub tokens: usize,
    /// Its topic; empty when it has none.
    pub topic: String,
}

/// A `Compress` call's arguments as the apply side reads them (see
/// `parse_compress_args`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CompressArgs {
    /// A few words naming the call, inherited by entries without one;
    /// empty to fill in, or to leave out.
    pub topic: String,
    /// One entry per range, oldest first.
    pub content: Vec<CompressEntry>,
}

/// One range of a Compress call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CompressEntry {
    /// First ref (`mNNNNN`) or block id (`bN`).
    pub start_id: String,
    /// Last ref or block id.
    pub end_id: String,
    /// The summary that takes the range's place: empty here, to be written.
    pub summary: String,
}

impl CompressEntry {
    fn between(start: &str, end: &str) -> CompressEntry {
        CompressEntry {
            start_id: start.to_string(),
            end_id: end.to_string(),
            summary: String::new(),
        }
    }
}

/// What [`offer`] reads: a turn's decision and recommendation, and what
/// they were made on.
#[derive(Debug, Clone, Copy)]
pub struct OfferInput<'a> {
    /// The nudge decision.
    pub decision: &'a Decision,
    /// What the nudge lists.
    pub recommendation: &'a Recommendation,
    /// The state's blocks the recommendation was made on.
    pub blocks: &'a [Block],
    /// How estimates became the provider's figures this turn.
    pub gauge: &'a Gauge,
    /// The size the turn's decisions were taken on.
    pub before_cuts: usize,
    /// The config the turn decided on (the window less the reply's room).
    pub config: &'a Config,
}

/// The nudge a turn appended, as data; `None` when it appended none.
pub fn offer(input: &OfferInput) -> Option<Offer> {
    let d = input.decision;
    if !d.inject {
        return None;
    }
    let tier = d.tier.clamp(1, 3);
    let kind = match (d.emergency, tier) {
        (true, _) => NudgeKind::Emergency,
        (false, 1) => NudgeKind::Ranged,
        (false, _) => NudgeKind::Tier,
    };
    let rec = input.recommendation;
    if tier > 1 {
        let blocks = offered_blocks(input, tier);
        let content = match (blocks.first(), blocks.last()) {
            (Some(a), Some(b)) => vec![CompressEntry::between(&a.block_id, &b.block_id)],
            _ => Vec::new(),
        };
        return Some(Offer {
            kind,
            tier,
            emergency: d.emergency,
            ranges: Vec::new(),
            offered_tokens: blocks.iter().map(|b| b.tokens).sum(),
            blocks,
            least_to_free: None,
            arguments: CompressArgs {
                topic: String::new(),
                content,
            },
        });
    }
    let offered = rec.ranges.iter().map(|r| r.tokens).sum();
    let content = (rec.ranges.iter())
        .map(|r| CompressEntry::between(&r.start_ref, &r.end_ref))
        .collect();
    Some(Offer {
        kind,
        tier,
        emergency: d.emergency,
        ranges: rec.ranges.clone(),
        blocks: Vec::new(),
        offered_tokens: offered,
        least_to_free: Some(reclaim_target(input.config, input.before_cuts, offered)),
        arguments: CompressArgs {
            topic: String::new(),
            content,
        },
    })
}

/// The blocks a tier nudge names, oldest span first, with what each holds
/// on the provider's scale.
fn offered_blocks(input: &OfferInput, tier: u8) -> Vec<OfferedBlock> {
    let mut blocks: Vec<OfferedBlock> = (input.recommendation.targets(tier, input.blocks))
        .into_iter()
        .map(|b| OfferedBlock {
            block_id: b.block_id.clone(),
            tier: b.tier,
            start_ref: b.start_ref.clone(),
            end_ref: b.end_ref.clone(),
            messages: b.effective_message_ids.len(),
            replaced_tokens: b.compressed_tokens,
            tokens: (input.gauge).scale(input.config.count(&render_summary(b).text)),
            topic: b.topic.clone(),
        })
        .collect();
    blocks.sort_by_key(|b| ref_to_index(&b.start_ref).unwrap_or(0));
    blocks
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::model::state::CompressionState;
    use crate::engine::pressure::gauge::Source;

    /// The estimator's figures as they stand: no host, no correction.
    fn plain() -> Gauge {
        Gauge {
            base: 0.0,
            ratio: 1.0,
            source: Source::Estimate,
            set_aside: None,
        }
    }

    fn decision(inject: bool, tier: u8, emergency: bool) -> Decision {
        Decision {
            inject,
            tier,
            emergency,
            pressure: emergency,
            reason: String::new(),
        }
    }

    fn range(start: &str, end: &str, tokens: usize) -> RangeInfo {
        RangeInfo {
            start_ref: start.into(),
            end_ref: end.into(),
            count: 3,
            tokens,
            chars: tokens * 4,
            tool_pct: 50,
            user_messages: 0,
            holds_task: false,
        }
    }

    #[test]
    fn a_ranged_nudge_offers_every_range_with_empty_summaries() {
        let rec = Recommendation {
            ranges: vec![
                range("m00002", "m00010", 6_000),
                range("m00012", "m00020", 4_000),
            ],
            ..Recommendation::default()
        };
        let cfg = Config::for_window(16_000);
        let gauge = plain();
        let d = decision(true, 1, false);
        let input = OfferInput {
            decision: &d,
            recommendation: &rec,
            blocks: &[],
            gauge: &gauge,
            before_cuts: 14_000,
            config: &cfg,
        };
        let o = offer(&input).expect("a nudge");
        assert_eq!(
            (o.kind, o.tier, o.offered_tokens),
            (NudgeKind::Ranged, 1, 10_000)
        );
        // Down to half the window: 6,000 of the 10,000 offered.
        assert_eq!(o.least_to_free, Some(6_000));
        let args = serde_json::to_value(&o.arguments).expect("serializes");
        assert_eq!(
            args,
            serde_json::json!({"topic": "", "content": [
                {"startId": "m00002", "endId": "m00010", "summary": ""},
                {"startId": "m00012", "endId": "m00020", "summary": ""},
            ]})
        );
        let none = decision(false, 1, false);
        assert!(
            offer(&OfferInput {
                decision: &none,
                ..input
            })
            .is_none()
        );
        let at_limit = decision(true, 1, true);
        let o = offer(&OfferInput {
            decision: &at_limit,
            ..input
        })
        .expect("a nudge");
        assert_eq!(o.kind, NudgeKind::Emergency);
    }

    #[test]
    fn a_tier_nudge_folds_its_targets_oldest_to_newest() {
        let mut state = CompressionState::new("s");
        for (id, start, end) in [("b2", "m00030", "m00040"), ("b1", "m00002", "m00020")] {
            let mut b = crate::engine::test_support::block(id, 1, &["x"]);
            b.start_ref = start.into();
            b.end_ref = end.into();
            state.blocks.push(b);
        }
        let rec = Recommendation {
            tier_blocks: [vec![0, 1], Vec::new()],
            ..Recommendation::default()
        };
        let cfg = Config::default();
        let gauge = plain();
        let d = decision(true, 2, false);
        let o = offer(&OfferInput {
            decision: &d,
            recommendation: &rec,
            blocks: &state.blocks,
            gauge: &gauge,
            before_cuts: 0,
            config: &cfg,
        })
        .expect("a nudge");
        assert_eq!(
            (o.kind, o.tier, o.least_to_free),
            (NudgeKind::Tier, 2, None)
        );
        let ids: Vec<&str> = o.blocks.iter().map(|b| b.block_id.as_str()).collect();
        assert_eq!(ids, ["b1", "b2"]);
        assert_eq!(o.arguments.content, [CompressEntry::between("b1", "b2")]);
        assert!(o.offered_tokens > 0);
    }
}
