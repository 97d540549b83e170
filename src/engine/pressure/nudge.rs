//! When to ask the model to compress, and which tier.
//!
//! Every compression rewrites the request from its first changed message
//! on, and the provider bills that part at the uncached price; so the
//! pacing waits until a compression is worth its cache miss, then asks for
//! a deep one. Two bands. Under pressure (85% of the window, the 95%
//! emergency band, or inside the band when the next turn could reach the
//! truncation line) there is no pacing: a nudge goes out whenever a tier
//! would reclaim at least the minimum benefit, and of those it asks for the
//! one that sends least again for each token it frees. Below that, nudges
//! are paced by growth: one when the context has grown a cadence step since
//! the last, or on first sight of a large backlog. Every reclaim is counted
//! net of the nudge's own size, so a tier nudge has to pay for itself; and
//! in the growth band folding summaries into a higher tier, which rewrites
//! the request from the oldest block on, waits until they hold a real share
//! of the window.

use crate::engine::model::config::Config;
use crate::engine::model::state::NudgeState;
use crate::engine::model::tokens::format;

/// Windows this large and up keep the full growth unit; smaller windows get
/// a proportionally smaller one, so pacing still works at 32K or 40K.
const FULL_UNIT_WINDOW: usize = 128_000;

/// The growth unit: how much pending work makes a growth nudge worth it.
pub fn growth_unit(cfg: &Config) -> usize {
    let limit = cfg.context_limit;
    let n = &cfg.nudge;
    let by_ratio = (limit as f64 * n.growth_ratio).round() as usize;
    let floor = if limit >= FULL_UNIT_WINDOW {
        n.growth_floor
    } else {
        n.growth_floor * limit / FULL_UNIT_WINDOW
    };
    by_ratio.max(floor).min(n.growth_cap.max(1))
}

/// The cadence step: how much the context must grow between two growth
/// nudges. At most an eighth of the window, so pacing can resume before the
/// next request overflows.
pub fn cadence(cfg: &Config) -> usize {
    let unit = growth_unit(cfg);
    let n = &cfg.nudge;
    let step = n
        .min_growth_floor
        .max((unit as f64 * n.min_growth_ratio) as usize);
    step.min(cfg.context_limit / 8).max(1)
}

/// The least a nudge must reclaim to be sent.
pub fn min_benefit(cfg: &Config) -> usize {
    cfg.nudge.min_pressure_benefit_tokens.unwrap_or_else(|| {
        let limit = cfg.context_limit;
        ((limit as f64 * 0.01).round() as usize).max(5_000.min(limit / 16))
    })
}

/// Summaries are folded into a higher tier in the growth band only once
/// they hold this share of the window: below it they are a cheap, cached
/// prefix, and folding them would send the whole request again.
pub const CONSOLIDATION_SHARE: f64 = 0.10;

/// Where a tier-1 compression should bring the view, as a share of the
/// window: well under the nudge band, so the next nudge is far away.
pub const LOW_WATER: f64 = 0.5;

/// Tokens a tier-1 call should free from a view of `tokens` to reach the
/// low-water mark, at most `offered` (what the listed ranges hold).
pub fn reclaim_target(cfg: &Config, tokens: usize, offered: usize) -> usize {
    let low = (cfg.context_limit as f64 * LOW_WATER) as usize;
    tokens.saturating_sub(low).min(offered)
}

/// The fading memory of turn sizes: the largest step loses this fraction of
/// itself every turn.
const STEP_FADE: usize = 8;

/// How much the next turn may add: the larger of this turn's growth and the
/// largest growth seen lately (fading by an eighth a turn).
pub fn expected_step(stamps: &NudgeState, tokens: usize) -> usize {
    grown_this_turn(stamps, tokens).max(stamps.step_tokens)
}

fn grown_this_turn(stamps: &NudgeState, tokens: usize) -> usize {
    match stamps.last_turn_tokens {
        0 => 0,
        last => tokens.saturating_sub(last),
    }
}

/// What the decision looks at.
#[derive(Debug, Clone)]
pub struct DecideInput<'a> {
    /// Tokens of this turn's view, before any nudge.
    pub tokens: usize,
    /// Tokens each tier could reclaim: [tier 1, tier 2, tier 3].
    pub pending: [usize; 3],
    /// Active tier-1 and tier-2 block counts.
    pub block_counts: [usize; 2],
    /// What a nudge of each tier would itself cost, in tokens.
    pub nudge_cost: [usize; 3],
    /// Pacing stamps.
    pub nudge: &'a NudgeState,
    /// Engine settings (the window is `context_limit`).
    pub config: &'a Config,
}

/// The decision, with its reason (shown by `noa project -v` and reports).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Whether to append a nudge.
    pub inject: bool,
    /// Which tier it asks for (1–3).
    pub tier: u8,
    /// Usage is at or above the emergency threshold.
    pub emergency: bool,
    /// Usage is at or above the pressure threshold.
    pub pressure: bool,
    /// Why, in words; the pipeline adds what each tier could reclaim
    /// ([`ready`]).
    pub reason: String,
}

/// What each tier could reclaim, as a decision's reason ends: the same
/// figures the nudge and `ranges` list.
pub fn ready(pending: [usize; 3]) -> String {
    format!(
        "ready: T1({})/T2({})/T3({})",
        format(pending[0]),
        format(pending[1]),
        format(pending[2])
    )
}

/// Decides whether this turn's view gets a nudge.
pub fn decide(input: &DecideInput) -> Decision {
    let reading = Reading::new(input);
    if reading.pressure {
        return under_pressure(&reading);
    }
    if reading.usage < input.config.nudge.min_context_limit_pct {
        return reading.hold(
            1,
            format!("below the nudge band at {}% of the budget", reading.pct),
        );
    }
    in_growth_band(&reading)
}

/// What a decision weighs, worked out once from its input: how full the
/// window is, which band that puts the view in, and the tiers allowed.
struct Reading<'a> {
    input: &'a DecideInput<'a>,
    /// The window, at least 1.
    limit: usize,
    /// The view's share of the window.
    usage: f64,
    /// `usage` as a whole percentage, for reasons.
    pct: usize,
    /// At or above the emergency threshold.
    emergency: bool,
    /// Under pressure: no pacing, a nudge whenever it pays.
    pressure: bool,
    /// How much the next turn may add ([`expected_step`]).
    step: usize,
    /// The tiers the settings allow, lowest first.
    tiers: &'static [u8],
}

impl<'a> Reading<'a> {
    /// Reads the input: the view's share of the window and its band.
    fn new(input: &'a DecideInput<'a>) -> Self {
        let cfg = input.config;
        let limit = cfg.context_limit.max(1);
        let usage = input.tokens as f64 / limit as f64;
        let n = &cfg.nudge;
        let emergency = usage >= n.emergency_threshold_pct;
        // In the band, a turn as large as the largest seen lately would carry
        // the request (and the nudge it would then need) past the window, where
        // old output gets cut and the cached prefix breaks: ask now.
        let step = expected_step(input.nudge, input.tokens);
        let short_of_room =
            usage >= n.min_context_limit_pct && input.tokens + step + input.nudge_cost[0] >= limit;
        let pressure = emergency || usage >= n.max_context_limit_pct || short_of_room;
        let tiers: &'static [u8] = match cfg.max_tier() {
            1 => &[1],
            2 => &[1, 2],
            _ => &[1, 2, 3],
        };
        Reading {
            input,
            limit,
            usage,
            pct: (usage * 100.0).round() as usize,
            emergency,
            pressure,
            step,
            tiers,
        }
    }

    /// What tier `t` would reclaim, net of its own nudge's size.
    fn net(&self, t: u8) -> usize {
        let i = t as usize - 1;
        self.input.pending[i].saturating_sub(self.input.nudge_cost[i])
    }

    /// A decision to append a nudge asking for `tier`.
    fn send(&self, tier: u8, reason: String) -> Decision {
        Decision {
            inject: true,
            tier,
            emergency: self.emergency,
            pressure: self.pressure,
            reason,
        }
    }

    /// A decision to append no nudge (`tier` is the one that was weighed).
    fn hold(&self, tier: u8, reason: String) -> Decision {
        Decision {
            inject: false,
            ..self.send(tier, reason)
        }
    }
}

/// Under pressure there is no pacing: a nudge goes out whenever the best
/// tier would reclaim at least the minimum benefit.
fn under_pressure(r: &Reading) -> Decision {
    let cfg = r.input.config;
    let n = &cfg.nudge;
    let min = min_benefit(cfg);
    let best = pressure_tier(r, min);
    let pct = r.pct;
    let why = if r.usage >= n.max_context_limit_pct || r.emergency {
        format!("pressure at {pct}% of the budget before this turn's cuts")
    } else {
        format!(
            "pressure at {pct}% of the budget before this turn's cuts: a turn of {} would fill it",
            format(r.step)
        )
    };
    if r.net(best) >= min {
        return r.send(
            best,
            format!("{why}: tier {best} reclaims {}", format(r.net(best))),
        );
    }
    r.hold(
        best,
        format!(
            "{why} but the best tier reclaims only {} (< {} minimum benefit)",
            format(r.net(best)),
            format(min)
        ),
    )
}

/// The tier a pressure nudge asks for: of those that reclaim at least
/// `min`, the one that pays least for each token it frees (the lower on a
/// tie); when none does, the one that reclaims most.
fn pressure_tier(r: &Reading, min: usize) -> u8 {
    let worth = r.tiers.iter().copied().filter(|&t| r.net(t) >= min);
    let cheapest = worth.min_by(|&a, &b| cost_per_token(r, a).total_cmp(&cost_per_token(r, b)));
    cheapest.unwrap_or_else(|| {
        (r.tiers.iter().copied())
            .max_by_key(|&t| (r.net(t), std::cmp::Reverse(t)))
            .unwrap_or(1)
    })
}

/// What a compression of tier `t` costs for each token it frees: the
/// request it sends again uncached (from its first changed message on) and
/// its nudge, over what it frees net. Tier 1 keeps every summary in the
/// cached prefix before its first range, a fold of tier-1 summaries keeps
/// only the tier-2 ones before them, and a fold of tier-2 summaries keeps
/// none. So once tier-1 summaries pile up and the ranges left are small,
/// folding them costs little more to send and frees far more, and each
/// compression after it comes later.
fn cost_per_token(r: &Reading, t: u8) -> f64 {
    let [_, tier1_summaries, tier2_summaries] = r.input.pending;
    let kept = match t {
        1 => tier1_summaries + tier2_summaries,
        2 => tier2_summaries,
        _ => 0,
    };
    let resent = r.input.tokens.saturating_sub(kept) + r.input.nudge_cost[t as usize - 1];
    resent as f64 / r.net(t).max(1) as f64
}

/// The figures growth pacing weighs a nudge against.
struct GrowthPacing {
    /// Pending work that makes a growth nudge worth it ([`growth_unit`]).
    unit: usize,
    /// Growth needed between two nudges ([`cadence`]).
    cadence: usize,
    /// The least a nudge must reclaim ([`min_benefit`]).
    min_benefit: usize,
}

/// In the band without pressure, nudges are paced by growth: one when the
/// context has grown a cadence step since the last, or on first sight of a
/// large backlog. Tier 1 goes first; a higher tier only when it is due.
fn in_growth_band(r: &Reading) -> Decision {
    let input = r.input;
    let cfg = input.config;
    let pacing = GrowthPacing {
        unit: growth_unit(cfg),
        cadence: cadence(cfg),
        min_benefit: min_benefit(cfg),
    };
    let stamps = input.nudge;
    let grown = input.tokens.saturating_sub(pacing_reference(input));
    let first_sight = stamps.last_nudge_shown_tokens == 0
        && stamps.last_per_message_nudge_tokens == 0
        && input.pending.iter().max().copied().unwrap_or(0) >= pacing.unit;
    if !first_sight && grown < pacing.cadence {
        return r.hold(
            1,
            format!(
                "below cadence: grew {} of {} since last nudge",
                format(grown),
                format(pacing.cadence)
            ),
        );
    }
    if r.net(1) >= pacing.unit {
        return r.send(
            1,
            format!(
                "growth: tier 1 has {} pending (>= {})",
                format(input.pending[0]),
                format(pacing.unit)
            ),
        );
    }
    higher_tier(r, &pacing)
}

/// The size growth is measured from: the last nudge shown, else the
/// baseline pacing began at, else this view itself (no growth yet).
fn pacing_reference(input: &DecideInput) -> usize {
    let stamps = input.nudge;
    [
        stamps.last_nudge_shown_tokens,
        stamps.last_per_message_nudge_tokens,
        input.tokens,
    ]
    .into_iter()
    .find(|&t| t > 0)
    .unwrap_or(input.tokens)
}

/// A growth nudge for the first higher tier that is due and not held back,
/// or no nudge, with what held each back.
fn higher_tier(r: &Reading, pacing: &GrowthPacing) -> Decision {
    let mut blocked = Vec::new();
    for &t in r.tiers.iter().filter(|&&t| t >= 2) {
        match weigh_higher_tier(r, t, pacing) {
            TierCheck::NotDue => {}
            TierCheck::Blocked(why) => blocked.push(why),
            TierCheck::Ready { count } => {
                return r.send(
                    t,
                    format!(
                        "growth: tier {t} ready ({count} block(s), {} pending)",
                        format(r.input.pending[t as usize - 1])
                    ),
                );
            }
        }
    }
    if blocked.is_empty() {
        r.hold(1, "growth ready but no tier qualifies".into())
    } else {
        r.hold(1, format!("blocked: {}", blocked.join(", ")))
    }
}

/// Where one higher tier stands in the growth band.
enum TierCheck {
    /// Neither its block count nor its size calls for it.
    NotDue,
    /// Due, but held back, with why (as a `blocked:` reason lists it).
    Blocked(String),
    /// Due and worth a nudge; `count` is its block count.
    Ready { count: usize },
}

/// Whether tier `t` (2 or 3) is due, by block count or by size, and
/// whether it is worth folding now.
fn weigh_higher_tier(r: &Reading, t: u8, pacing: &GrowthPacing) -> TierCheck {
    let input = r.input;
    let cfg = input.config;
    let (count, trigger) = match t {
        2 => (input.block_counts[0], cfg.tiers.tier2_trigger),
        _ => (input.block_counts[1], cfg.tiers.tier3_trigger),
    };
    let pending = input.pending[t as usize - 1];
    let bigger_than_lower = (1..t).all(|lower| pending > input.pending[lower as usize - 1]);
    let by_count = count >= trigger;
    let by_size = pending as f64 >= pacing.unit as f64 * cfg.nudge.tier2_growth_multiplier
        && bigger_than_lower;
    if !(by_count || by_size) {
        return TierCheck::NotDue;
    }
    let floor = (r.limit as f64 * CONSOLIDATION_SHARE) as usize;
    if pending < floor {
        return TierCheck::Blocked(format!(
            "T{t} (its summaries hold {} < {}, cheaper kept)",
            format(pending),
            format(floor)
        ));
    }
    if r.net(t) < pacing.min_benefit {
        return TierCheck::Blocked(format!(
            "T{t} (reclaims {} < {})",
            format(r.net(t)),
            format(pacing.min_benefit)
        ));
    }
    let last = input
        .nudge
        .last_shown_by_tier
        .get(&t.to_string())
        .copied()
        .unwrap_or(0);
    if last != 0 && input.tokens.saturating_sub(last) < pacing.cadence {
        return TierCheck::Blocked(format!("T{t} (cadence)"));
    }
    TierCheck::Ready { count }
}

/// Updates the pacing stamps after a decision. A view that shrank by more
/// than a growth unit (a compression landed) re-anchors the baseline and
/// clears the shown stamps, so pacing restarts from the new size.
pub fn stamp(nudge: &mut NudgeState, tokens: usize, decision: &Decision, cfg: &Config) {
    // A view of the very size of the last one is the same turn sent again
    // (a host retrying): the memory of steps does not fade for it.
    if tokens != nudge.last_turn_tokens {
        let grown = grown_this_turn(nudge, tokens);
        nudge.step_tokens = grown.max(nudge.step_tokens - nudge.step_tokens / STEP_FADE);
    }
    nudge.last_turn_tokens = tokens;
    let unit = growth_unit(cfg);
    if nudge.last_per_message_nudge_tokens > 0
        && tokens + unit < nudge.last_per_message_nudge_tokens
    {
        nudge.last_per_message_nudge_tokens = tokens;
        nudge.last_nudge_shown_tokens = 0;
        nudge.last_shown_by_tier.clear();
    }
    if nudge.last_per_message_nudge_tokens == 0 {
        nudge.last_per_message_nudge_tokens = tokens;
    }
    if decision.inject {
        nudge.last_nudge_shown_tokens = tokens;
        nudge
            .last_shown_by_tier
            .insert(decision.tier.to_string(), tokens);
    }
}

#[cfg(test)]
#[path = "nudge_tests.rs"]
mod tests;

#[cfg(test)]
mod reclaim_tests {
    use super::*;

    #[test]
    fn a_call_is_asked_to_reach_half_the_window() {
        let cfg = Config::for_window(40_000);
        assert_eq!(reclaim_target(&cfg, 34_000, 30_000), 14_000);
        assert_eq!(
            reclaim_target(&cfg, 34_000, 9_000),
            9_000,
            "at most what is offered"
        );
        assert_eq!(reclaim_target(&cfg, 15_000, 9_000), 0, "already under");
    }
}
