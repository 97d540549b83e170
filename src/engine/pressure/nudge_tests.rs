use super::*;
use crate::engine::model::config::TierConfig;

fn at(tokens: usize, pending: usize, baseline: usize) -> Decision {
    let stamps = NudgeState {
        last_per_message_nudge_tokens: baseline,
        last_nudge_shown_tokens: baseline,
        ..NudgeState::default()
    };
    decide(&DecideInput {
        tokens,
        pending: [pending, 0, 0],
        block_counts: [0, 0],
        nudge_cost: [0, 0, 0],
        nudge: &stamps,
        config: &Config::default(),
    })
}

#[test]
fn derived_numbers_at_200k() {
    let c = Config::default();
    assert_eq!(growth_unit(&c), 50_000);
    assert_eq!(cadence(&c), 22_500);
    assert_eq!(min_benefit(&c), 5_000);
    assert_eq!(min_benefit(&Config::for_window(1_000_000)), 10_000);
    let explicit = Config {
        nudge: crate::engine::model::config::NudgeConfig {
            min_pressure_benefit_tokens: Some(0),
            ..Default::default()
        },
        ..Config::default()
    };
    assert_eq!(min_benefit(&explicit), 0);
}

#[test]
fn small_windows_get_a_smaller_unit() {
    let c40 = Config::for_window(40_000);
    let c400 = Config::for_window(400_000);
    assert!(growth_unit(&c40) < growth_unit(&c400));
    for limit in [40_000, 64_000, 128_000, 200_000] {
        let c = Config::for_window(limit);
        assert!(
            cadence(&c) * 4 <= limit,
            "cadence {} at {limit}",
            cadence(&c)
        );
        assert!(growth_unit(&c) <= limit / 2);
    }
    assert_eq!(growth_unit(&Config::for_window(128_000)), 50_000);
}

#[test]
fn below_cadence() {
    let d = at(165_000, 60_000, 160_000);
    assert!(!d.inject);
    assert_eq!(d.reason, "below cadence: grew 5.0K of 23K since last nudge");
}

#[test]
fn growth_fires() {
    let d = at(165_000, 60_000, 140_000);
    assert!(d.inject && d.tier == 1, "{d:?}");
}

#[test]
fn small_backlog_waits() {
    let d = at(165_000, 5_000, 140_000);
    assert!(!d.inject);
    assert!(
        d.reason.starts_with("growth ready but no tier qualifies"),
        "{}",
        d.reason
    );
}

#[test]
fn first_sight() {
    assert!(at(162_000, 60_000, 0).inject);
    let d = at(150_000, 60_000, 0);
    assert!(!d.inject, "75% is below the nudge band");
}

#[test]
fn pressure_needs_no_growth() {
    let d = at(172_000, 30_000, 171_000);
    assert!(d.inject && d.pressure && !d.emergency, "{d:?}");
    assert!(d.reason.starts_with("pressure at 86%"), "{}", d.reason);
}

#[test]
fn pressure_still_needs_a_minimum_benefit() {
    let d = at(172_000, 1_000, 0);
    assert!(!d.inject);
    assert!(d.reason.contains("minimum benefit"), "{}", d.reason);
}

#[test]
fn emergency() {
    let d = at(195_000, 30_000, 0);
    assert!(d.inject && d.emergency);
}

#[test]
fn every_reason_shows_the_backlog() {
    for d in [
        at(162_000, 60_000, 0),
        at(10_000, 0, 0),
        at(172_000, 1_000, 0),
    ] {
        assert!(!d.reason.is_empty(), "{}", d.reason);
    }
}

fn tier2(tokens: usize, baseline: usize, shown_t2: usize, cost: usize, cfg: &Config) -> Decision {
    let mut stamps = NudgeState {
        last_per_message_nudge_tokens: baseline,
        last_nudge_shown_tokens: baseline,
        ..NudgeState::default()
    };
    if shown_t2 > 0 {
        stamps.last_shown_by_tier.insert("2".into(), shown_t2);
    }
    decide(&DecideInput {
        tokens,
        pending: [0, 21_000, 0],
        block_counts: [5, 0],
        nudge_cost: [0, cost, 0],
        nudge: &stamps,
        config: cfg,
    })
}

#[test]
fn tier_two_by_block_count() {
    let d = tier2(165_000, 140_000, 0, 0, &Config::default());
    assert!(d.inject && d.tier == 2, "{d:?}");
}

#[test]
fn tier_two_pays_for_itself() {
    // A nudge that costs more than it reclaims is not sent.
    let d = tier2(165_000, 140_000, 0, 17_000, &Config::default());
    assert!(!d.inject, "{d:?}");
    assert!(d.reason.contains("T2 (reclaims"), "{}", d.reason);
}

#[test]
fn tier_two_has_its_own_cadence() {
    let d = tier2(165_000, 140_000, 164_000, 0, &Config::default());
    assert!(!d.inject);
    assert!(d.reason.contains("cadence"), "{}", d.reason);
}

#[test]
fn tier_two_not_below_the_band() {
    let d = tier2(60_000, 30_000, 0, 0, &Config::default());
    assert!(!(d.inject && d.tier == 2));
}

#[test]
fn tiers_off_means_tier_one_only() {
    let cfg = Config {
        tiers: TierConfig {
            enabled: false,
            ..TierConfig::default()
        },
        ..Config::default()
    };
    let d = tier2(165_000, 140_000, 0, 0, &cfg);
    assert!(!(d.inject && d.tier >= 2));
}

#[test]
fn tiny_windows_explain_themselves() {
    let cfg = Config::for_window(1_000);
    let stamps = NudgeState::default();
    let d = decide(&DecideInput {
        tokens: 990,
        pending: [500, 0, 0],
        block_counts: [0, 0],
        nudge_cost: [0; 3],
        nudge: &stamps,
        config: &cfg,
    });
    assert!(!d.reason.is_empty());
}

#[test]
fn emergency_at_40k() {
    let cfg = Config::for_window(40_000);
    let stamps = NudgeState::default();
    let d = decide(&DecideInput {
        tokens: 38_400,
        pending: [20_000, 0, 0],
        block_counts: [0, 0],
        nudge_cost: [0; 3],
        nudge: &stamps,
        config: &cfg,
    });
    assert!(d.inject && d.emergency);
}

#[test]
fn stamping() {
    let cfg = Config::default();
    let quiet = Decision {
        inject: false,
        tier: 1,
        emergency: false,
        pressure: false,
        reason: String::new(),
    };
    let mut s = NudgeState {
        last_per_message_nudge_tokens: 150_000,
        last_nudge_shown_tokens: 148_000,
        ..NudgeState::default()
    };
    s.last_shown_by_tier.insert("2".into(), 140_000);
    stamp(&mut s, 60_000, &quiet, &cfg);
    assert_eq!(
        (s.last_per_message_nudge_tokens, s.last_nudge_shown_tokens),
        (60_000, 0)
    );
    assert!(s.last_shown_by_tier.is_empty());

    let mut s = NudgeState::default();
    stamp(&mut s, 42_000, &quiet, &cfg);
    assert_eq!(s.last_per_message_nudge_tokens, 42_000);

    let mut s = NudgeState {
        last_per_message_nudge_tokens: 100_000,
        ..NudgeState::default()
    };
    let t2 = Decision {
        inject: true,
        tier: 2,
        ..quiet
    };
    stamp(&mut s, 120_000, &t2, &cfg);
    assert_eq!(s.last_nudge_shown_tokens, 120_000);
    assert_eq!(s.last_shown_by_tier["2"], 120_000);
}

/// The decision at `tokens` of a 40K window with `pending` tier-1 work,
/// when the largest turn seen lately added `step` tokens.
fn with_step(tokens: usize, pending: usize, step: usize) -> Decision {
    let stamps = NudgeState {
        last_per_message_nudge_tokens: tokens,
        last_nudge_shown_tokens: tokens,
        last_turn_tokens: tokens,
        step_tokens: step,
        ..NudgeState::default()
    };
    decide(&DecideInput {
        tokens,
        pending: [pending, 0, 0],
        block_counts: [0, 0],
        nudge_cost: [1_500, 0, 0],
        nudge: &stamps,
        config: &Config::for_window(40_000),
    })
}

#[test]
fn a_large_turn_ahead_brings_the_pressure_forward() {
    // At 81% a turn as large as the last big one (7,000) and the nudge it
    // would need no longer fit: the nudge goes out now, while the view can
    // still carry it uncut.
    let d = with_step(32_500, 20_000, 7_000);
    assert!(d.inject && d.pressure && !d.emergency, "{d:?}");
    assert!(d.reason.contains("would fill it"), "{}", d.reason);
    // Small turns leave room: wait for the pressure band.
    let d = with_step(32_500, 20_000, 1_000);
    assert!(!d.inject && !d.pressure, "{d:?}");
    // Below the band a large step alone does not nudge.
    let d = with_step(20_000, 15_000, 30_000);
    assert!(!d.inject && !d.pressure, "{d:?}");
}

#[test]
fn the_largest_step_fades_and_compressions_do_not_count() {
    let cfg = Config::for_window(40_000);
    let quiet = Decision {
        inject: false,
        tier: 1,
        emergency: false,
        pressure: false,
        reason: String::new(),
    };
    let mut s = NudgeState::default();
    stamp(&mut s, 10_000, &quiet, &cfg);
    assert_eq!((s.last_turn_tokens, s.step_tokens), (10_000, 0));
    stamp(&mut s, 18_000, &quiet, &cfg);
    assert_eq!(s.step_tokens, 8_000);
    assert_eq!(expected_step(&s, 18_500), 8_000);
    assert_eq!(expected_step(&s, 30_000), 12_000, "this turn's own growth");
    stamp(&mut s, 18_500, &quiet, &cfg);
    assert_eq!(s.step_tokens, 7_000, "an eighth fades each turn");
    let retried = s.clone();
    stamp(&mut s, 18_500, &quiet, &cfg);
    assert_eq!(s, retried, "the same view again is not another turn");
    // A compression shrinks the view: no growth, the memory only fades.
    stamp(&mut s, 4_000, &quiet, &cfg);
    assert_eq!((s.last_turn_tokens, s.step_tokens), (4_000, 6_125));
}

#[test]
fn consolidation_waits_until_the_summaries_hold_a_share_of_the_window() {
    let stamps = NudgeState {
        last_per_message_nudge_tokens: 140_000,
        last_nudge_shown_tokens: 140_000,
        ..NudgeState::default()
    };
    let d = decide(&DecideInput {
        tokens: 165_000,
        pending: [0, 6_500, 0],
        block_counts: [12, 0],
        nudge_cost: [0; 3],
        nudge: &stamps,
        config: &Config::default(),
    });
    assert!(!d.inject, "{d:?}");
    assert!(d.reason.contains("cheaper kept"), "{}", d.reason);
}

#[test]
fn under_pressure_the_tier_that_sends_least_for_what_it_frees_goes() {
    let stamps = NudgeState::default();
    let decide_at = |pending: [usize; 3], nudge_cost: [usize; 3]| {
        decide(&DecideInput {
            tokens: 180_000,
            pending,
            block_counts: [12, 0],
            nudge_cost,
            nudge: &stamps,
            config: &Config::default(),
        })
    };
    // Tier 2 would reclaim more, but tier 1 sends 120K again (the summaries
    // stay cached before its ranges) for 50K, tier 2 180K for 60K.
    let d = decide_at([50_000, 60_000, 0], [0; 3]);
    assert!(d.inject && d.tier == 1, "{d:?}");
    // Tier 1 has little left: folding frees ten times as much.
    let d = decide_at([6_000, 60_000, 0], [0; 3]);
    assert!(d.inject && d.tier == 2, "{d:?}");
    // Tier 1 alone would bring the view under the band (180K less 24K net,
    // under 160K), but after a run of small compressions the summaries
    // outweigh what it frees, even with a fold's nudge listing every block.
    let d = decide_at([40_000, 80_000, 0], [16_000, 10_000, 0]);
    assert!(d.inject && d.tier == 2, "{d:?}");
}
