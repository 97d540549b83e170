//! Every knob of the engine, with the defaults a 200K-token window wants.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::message::{CoreMessage, task_index};
use super::tokenizer::Tokenizer;

/// Windows this large and up keep [`DEFAULT_ZONE_TOKENS`] in the recent
/// zone when `preserve_recent_tokens` is not set; a smaller one keeps a
/// proportional share, as it gets a proportional growth unit. Every
/// compression sends the request again from its first range on, the zone
/// included, and what it leaves is the floor the next one waits on: at
/// 30K, 5,000 tokens kept whole were a fifth of the window sent again with
/// each compression, and the floor they made brought the next one twice as
/// soon as a host that keeps four turns.
pub const FULL_ZONE_WINDOW: usize = 128_000;

/// The tokens the recent zone holds at least on a window of
/// [`FULL_ZONE_WINDOW`] and up, when `preserve_recent_tokens` is not set.
pub const DEFAULT_ZONE_TOKENS: usize = 5_000;

/// Engine configuration. Every field has a default; a config file may set any
/// subset (see the README for the file format).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "snake_case", deny_unknown_fields)]
pub struct Config {
    /// The model's context window, in tokens.
    pub context_limit: usize,
    /// Tiers of compression.
    pub tiers: TierConfig,
    /// When and how hard to nudge.
    pub nudge: NudgeConfig,
    /// Emergency truncation.
    pub truncate: TruncateConfig,
    /// Limits on one Compress call.
    pub compress: CompressConfig,
    /// The last N visible messages are never compressed.
    pub preserve_recent_messages: usize,
    /// Nor the last N tokens of visible messages; default 5,000 on a
    /// window of 128K and up, a proportional share on a smaller one
    /// ([`Config::recent_zone_tokens`]). A value set is kept as set.
    pub preserve_recent_tokens: Option<usize>,
    /// Failed Compress attempts in a row before nudging pauses.
    pub max_compress_attempts: u32,
    /// Tool-name patterns never compressed (`Name`, or `prefix*`), beside `Compress` itself.
    pub protected_tools: Vec<String>,
    /// The recent zone never holds more than this share of the window.
    pub recent_zone_share: f64,
    /// Room kept free for the model's reply, in tokens; default min(8192, an
    /// eighth of the window).
    pub reserve_output: Option<usize>,
    /// Tokens the host sends beside the messages (system prompt, tool
    /// definitions), counted until the provider reports a real figure;
    /// default: what the transcript's host is known to send.
    pub request_overhead: Option<usize>,
    /// How tokens are counted: `estimate`, or an exact BPE count (`o200k`, `cl100k`).
    pub tokenizer: Tokenizer,
    /// Whether a compression also reclaims dead tool outputs: reads of a
    /// file changed since, outputs given again word for word.
    pub reclaim: bool,
    /// A host's own file tools, beside those noa knows (Claude Code's and
    /// Codex's): what makes a read stale. A config file gives them in its
    /// `[reclaim]` table.
    #[serde(skip)]
    pub file_tools: FileTools,
    /// The room [`Config::budgeted`] took off the window for the reply (0
    /// before): what makes the window known again, to report it.
    #[serde(skip)]
    pub reserved: usize,
}

/// What a window must hold that compression can never free: the first user
/// message (the task stays in view whatever covers it), the recent zone the
/// current step still uses, and the room kept for the reply. A window
/// smaller than these together can only be overrun.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Floor {
    /// Tokens of the task.
    pub task: usize,
    /// Tokens the recent zone holds in a session long enough to fill it.
    pub zone: usize,
    /// Tokens kept for the reply.
    pub reserve: usize,
    /// The window these were worked out for.
    pub window: usize,
}

impl Floor {
    /// The three together.
    pub fn total(&self) -> usize {
        self.task + self.zone + self.reserve
    }

    /// Whether the window holds them, with a token to spare for the rest.
    pub fn holds(&self) -> bool {
        self.total() < self.window
    }
}

/// Tools of a host that read or change one file, by the argument naming
/// it: a read of a file a later call changed is stale. Only what is named
/// here is trusted; any other tool's effect is unknown and left alone.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FileTools {
    /// Tool name → the argument that holds the path of the file it shows.
    pub reads: BTreeMap<String, String>,
    /// Tool name → the argument that holds the path of the file it changes.
    pub changes: BTreeMap<String, String>,
}

/// Summaries of summaries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "snake_case", deny_unknown_fields)]
pub struct TierConfig {
    /// Whether tier 2 and 3 exist at all.
    pub enabled: bool,
    /// The highest tier (2 or 3).
    pub max_tier: u8,
    /// Active tier-1 blocks that make a tier-2 consolidation worth asking for.
    pub tier2_trigger: usize,
    /// Active tier-2 blocks that make a tier-3 consolidation worth asking for.
    pub tier3_trigger: usize,
}

/// Nudge bands and pacing, as fractions of the window and token counts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "snake_case", deny_unknown_fields)]
pub struct NudgeConfig {
    /// Above this share of the window, nudge whenever it pays.
    pub max_context_limit_pct: f64,
    /// Below this share, never nudge.
    pub min_context_limit_pct: f64,
    /// Above this share, the context is in the emergency band.
    pub emergency_threshold_pct: f64,
    /// Growth unit as a share of the window.
    pub growth_ratio: f64,
    /// Lower bound of the growth unit, in tokens.
    pub growth_floor: usize,
    /// Upper bound of the growth unit, in tokens.
    pub growth_cap: usize,
    /// Lower bound of the cadence step, in tokens.
    pub min_growth_floor: usize,
    /// Cadence step as a share of the growth unit.
    pub min_growth_ratio: f64,
    /// How much more than the growth unit tier-2/3 work must reclaim.
    pub tier2_growth_multiplier: f64,
    /// Least a pressure nudge must reclaim; default max(5000, 1% of the window).
    pub min_pressure_benefit_tokens: Option<usize>,
}

/// Emergency truncation of old tool output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "snake_case", deny_unknown_fields)]
pub struct TruncateConfig {
    /// Share of the window at which truncation starts.
    pub threshold: f64,
}

/// Limits on one Compress call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "snake_case", deny_unknown_fields)]
pub struct CompressConfig {
    /// Least characters one batch of message ranges must cover.
    pub min_compress_range: usize,
    /// Shortest summary accepted, in characters.
    pub min_summary_length: usize,
    /// Longest summary accepted, in characters (a call may raise it).
    pub max_summary_length: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            context_limit: 200_000,
            tiers: TierConfig::default(),
            nudge: NudgeConfig::default(),
            truncate: TruncateConfig::default(),
            compress: CompressConfig::default(),
            preserve_recent_messages: 5,
            preserve_recent_tokens: None,
            max_compress_attempts: 3,
            protected_tools: Vec::new(),
            recent_zone_share: 0.25,
            reserve_output: None,
            request_overhead: None,
            tokenizer: Tokenizer::Estimate,
            reclaim: true,
            file_tools: FileTools::default(),
            reserved: 0,
        }
    }
}

impl Default for TierConfig {
    fn default() -> Self {
        TierConfig {
            enabled: true,
            max_tier: 3,
            tier2_trigger: 5,
            tier3_trigger: 10,
        }
    }
}

impl Default for NudgeConfig {
    fn default() -> Self {
        NudgeConfig {
            max_context_limit_pct: 0.85,
            min_context_limit_pct: 0.80,
            emergency_threshold_pct: 0.95,
            growth_ratio: 0.05,
            growth_floor: 50_000,
            growth_cap: 50_000,
            min_growth_floor: 20_000,
            min_growth_ratio: 0.45,
            tier2_growth_multiplier: 1.5,
            min_pressure_benefit_tokens: None,
        }
    }
}

impl Default for TruncateConfig {
    fn default() -> Self {
        TruncateConfig { threshold: 0.95 }
    }
}

impl Default for CompressConfig {
    fn default() -> Self {
        CompressConfig {
            min_compress_range: 5_000,
            min_summary_length: 50,
            max_summary_length: 20_000,
        }
    }
}

impl Config {
    /// The default configuration for a window of `limit` tokens.
    pub fn for_window(limit: usize) -> Config {
        Config {
            context_limit: limit,
            ..Config::default()
        }
    }

    /// Tokens in a text, as this config counts them.
    pub fn count(&self, text: &str) -> usize {
        self.tokenizer.count(text)
    }

    /// Tokens in a message's text, counted once and kept with it.
    pub fn tokens(&self, m: &CoreMessage) -> usize {
        m.counted.of(self.tokenizer, &m.text)
    }

    /// Tokens kept free for the reply.
    pub fn reserve(&self) -> usize {
        self.reserve_output
            .unwrap_or_else(|| 8_192.min(self.context_limit / 8))
            .min(self.context_limit / 2)
    }

    /// The config the engine decides on: the window less the room for the
    /// reply, so every band, nudge and cut keeps that room free.
    pub fn budgeted(&self) -> Config {
        let reserved = self.reserve();
        Config {
            context_limit: self.context_limit - reserved,
            reserve_output: Some(0),
            reserved: self.reserved + reserved,
            ..self.clone()
        }
    }

    /// The model's context window: the budget (`context_limit`) and the
    /// room kept for the reply.
    pub fn window(&self) -> usize {
        self.context_limit + self.reserved
    }

    /// The tokens the recent zone holds at least (beside its
    /// `preserve_recent_messages` messages): `preserve_recent_tokens` when
    /// set; else `DEFAULT_ZONE_TOKENS` on a window of `FULL_ZONE_WINDOW`
    /// and up, a proportional share on a smaller one (see
    /// [`Config::window`]).
    pub fn recent_zone_tokens(&self) -> usize {
        self.zone_tokens_at(self.window())
    }

    fn zone_tokens_at(&self, window: usize) -> usize {
        self.preserve_recent_tokens
            .unwrap_or(DEFAULT_ZONE_TOKENS * window.min(FULL_ZONE_WINDOW) / FULL_ZONE_WINDOW)
    }

    /// What a window of `context_limit` tokens must hold that no summary or
    /// cut can free, for `history`: its task, the recent zone and the room
    /// for the reply. Taken on the window as given, before
    /// [`Config::budgeted`] takes the reply's room off it.
    pub fn floor(&self, history: &[CoreMessage]) -> Floor {
        let task = task_index(history).map_or(0, |i| self.tokens(&history[i]));
        self.floor_at(self.context_limit, task)
    }

    fn floor_at(&self, window: usize, task: usize) -> Floor {
        let sized = Config {
            context_limit: window,
            ..self.clone()
        };
        let reserve = sized.reserve();
        let budget = window - reserve;
        // The zone is what the recent messages hold, capped at its share of
        // the budget: a session at least this long fills it.
        let cap = (budget as f64 * self.recent_zone_share) as usize;
        Floor {
            task,
            zone: self.zone_tokens_at(window).min(cap),
            reserve,
            window,
        }
    }

    /// The smallest window whose floor it holds, for a task of `task`
    /// tokens. What the floor needs grows more slowly than the window (the
    /// reply's room and the zone are shares of it, or capped), so the
    /// windows that hold it are all those from one size up: a binary search
    /// finds that size.
    pub fn smallest_window(&self, task: usize) -> usize {
        let reply = self.reserve_output.unwrap_or(8_192);
        let zone = self.preserve_recent_tokens.unwrap_or(DEFAULT_ZONE_TOKENS);
        let mut high = (task + zone + reply).saturating_mul(4).max(1);
        let mut low = 0;
        if !self.floor_at(high, task).holds() {
            return high;
        }
        while low + 1 < high {
            let mid = low + (high - low) / 2;
            match self.floor_at(mid, task).holds() {
                true => high = mid,
                false => low = mid,
            }
        }
        high
    }

    /// The highest tier in effect: 1 with tiers off, else 2 or 3.
    pub fn max_tier(&self) -> u8 {
        match (self.tiers.enabled, self.tiers.max_tier) {
            (false, _) => 1,
            (true, 2) => 2,
            _ => 3,
        }
    }

    /// Questionable values, each named. Never an error: a doubtful knob
    /// degrades behaviour but must not stop an agent loop.
    pub fn validate(&self) -> Vec<String> {
        let mut w = Vec::new();
        let n = &self.nudge;
        if self.context_limit == 0 {
            w.push("context_limit is 0; the window must be positive".to_string());
        }
        if n.min_context_limit_pct > n.max_context_limit_pct {
            w.push(format!(
                "nudge.min_context_limit_pct ({}) is above nudge.max_context_limit_pct ({})",
                n.min_context_limit_pct, n.max_context_limit_pct
            ));
        }
        if n.max_context_limit_pct > n.emergency_threshold_pct {
            w.push(format!(
                "nudge.max_context_limit_pct ({}) is above nudge.emergency_threshold_pct ({})",
                n.max_context_limit_pct, n.emergency_threshold_pct
            ));
        }
        if !(self.truncate.threshold > 0.0 && self.truncate.threshold <= 1.0) {
            w.push(format!(
                "truncate.threshold ({}) must be in (0, 1]",
                self.truncate.threshold
            ));
        }
        if self.tiers.tier2_trigger < 1 {
            w.push("tiers.tier2_trigger must be at least 1".to_string());
        }
        if self.tiers.tier3_trigger <= self.tiers.tier2_trigger {
            w.push(format!(
                "tiers.tier3_trigger ({}) should be above tiers.tier2_trigger ({})",
                self.tiers.tier3_trigger, self.tiers.tier2_trigger
            ));
        }
        if !matches!(self.tiers.max_tier, 2 | 3) {
            w.push(format!(
                "tiers.max_tier ({}) must be 2 or 3; using 3",
                self.tiers.max_tier
            ));
        }
        if self.compress.min_summary_length >= self.compress.max_summary_length {
            w.push(format!(
                "compress.min_summary_length ({}) is not below compress.max_summary_length ({})",
                self.compress.min_summary_length, self.compress.max_summary_length
            ));
        }
        if self.max_compress_attempts < 1 {
            w.push("max_compress_attempts must be at least 1".to_string());
        }
        w
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults() {
        let c = Config::default();
        assert_eq!(c.context_limit, 200_000);
        assert_eq!(
            (
                c.tiers.max_tier,
                c.tiers.tier2_trigger,
                c.tiers.tier3_trigger
            ),
            (3, 5, 10)
        );
        assert_eq!(c.nudge.max_context_limit_pct, 0.85);
        assert_eq!(c.nudge.min_context_limit_pct, 0.80);
        assert_eq!(c.nudge.emergency_threshold_pct, 0.95);
        assert_eq!(
            (
                c.nudge.growth_floor,
                c.nudge.growth_cap,
                c.nudge.min_growth_floor
            ),
            (50_000, 50_000, 20_000)
        );
        assert_eq!(c.nudge.min_growth_ratio, 0.45);
        assert_eq!(c.nudge.tier2_growth_multiplier, 1.5);
        assert_eq!(c.truncate.threshold, 0.95);
        assert_eq!(
            (
                c.compress.min_compress_range,
                c.compress.min_summary_length,
                c.compress.max_summary_length
            ),
            (5_000, 50, 20_000)
        );
        assert_eq!(
            (
                c.preserve_recent_messages,
                c.preserve_recent_tokens,
                c.max_compress_attempts
            ),
            (5, None, 3)
        );
        assert!(c.validate().is_empty());
        let two = Config {
            tiers: TierConfig {
                max_tier: 2,
                ..TierConfig::default()
            },
            ..Config::default()
        };
        assert!(two.validate().is_empty());
    }

    #[test]
    fn each_doubtful_value_is_named() {
        let cases: Vec<(Config, &str)> = vec![
            (
                Config {
                    context_limit: 0,
                    ..Config::default()
                },
                "context_limit",
            ),
            (
                Config {
                    nudge: NudgeConfig {
                        min_context_limit_pct: 0.9,
                        ..NudgeConfig::default()
                    },
                    ..Config::default()
                },
                "min_context_limit_pct",
            ),
            (
                Config {
                    nudge: NudgeConfig {
                        max_context_limit_pct: 0.99,
                        ..NudgeConfig::default()
                    },
                    ..Config::default()
                },
                "max_context_limit_pct",
            ),
            (
                Config {
                    truncate: TruncateConfig { threshold: 0.0 },
                    ..Config::default()
                },
                "truncate.threshold",
            ),
            (
                Config {
                    truncate: TruncateConfig { threshold: 1.5 },
                    ..Config::default()
                },
                "truncate.threshold",
            ),
            (
                Config {
                    tiers: TierConfig {
                        tier2_trigger: 0,
                        ..TierConfig::default()
                    },
                    ..Config::default()
                },
                "tier2_trigger",
            ),
            (
                Config {
                    tiers: TierConfig {
                        tier3_trigger: 5,
                        ..TierConfig::default()
                    },
                    ..Config::default()
                },
                "tier3_trigger",
            ),
            (
                Config {
                    tiers: TierConfig {
                        max_tier: 5,
                        ..TierConfig::default()
                    },
                    ..Config::default()
                },
                "max_tier",
            ),
            (
                Config {
                    tiers: TierConfig {
                        max_tier: 1,
                        ..TierConfig::default()
                    },
                    ..Config::default()
                },
                "max_tier",
            ),
            (
                Config {
                    compress: CompressConfig {
                        min_summary_length: 30_000,
                        ..CompressConfig::default()
                    },
                    ..Config::default()
                },
                "min_summary_length",
            ),
            (
                Config {
                    max_compress_attempts: 0,
                    ..Config::default()
                },
                "max_compress_attempts",
            ),
        ];
        for (c, name) in cases {
            let w = c.validate();
            assert!(w.iter().any(|m| m.contains(name)), "{name}: {w:?}");
        }
    }

    #[test]
    fn the_floor_is_the_task_the_zone_and_the_reply() {
        let c = Config::for_window(16_000);
        let f = c.floor_at(16_000, 1_000);
        // An eighth of the window for the reply; the zone's 5,000 tokens of
        // a 128K window, an eighth at 16K, under its cap of a quarter of the
        // 14,000 left.
        assert_eq!((f.task, f.zone, f.reserve), (1_000, 625, 2_000));
        let large = c.floor_at(400_000, 1_000);
        assert_eq!(large.zone, 5_000);
        // A zone set is kept as set, at any window.
        let set = Config {
            preserve_recent_tokens: Some(3_000),
            ..Config::for_window(16_000)
        };
        assert_eq!(set.floor_at(16_000, 1_000).zone, 3_000);
        assert_eq!(set.recent_zone_tokens(), 3_000);
        assert!(f.holds());
        let w = c.smallest_window(1_000);
        assert!(c.floor_at(w, 1_000).holds());
        assert!(!c.floor_at(w - 1, 1_000).holds());
        // A large task needs a window to match, whatever the window given.
        let big = c.smallest_window(40_000);
        assert!(big > 40_000 && c.floor_at(big, 40_000).holds(), "{big}");
        assert!(!c.floor_at(big - 1, 40_000).holds());
    }

    #[test]
    fn max_tier_in_effect() {
        assert_eq!(Config::default().max_tier(), 3);
        let off = Config {
            tiers: TierConfig {
                enabled: false,
                ..TierConfig::default()
            },
            ..Config::default()
        };
        assert_eq!(off.max_tier(), 1);
        let odd = Config {
            tiers: TierConfig {
                max_tier: 1,
                ..TierConfig::default()
            },
            ..Config::default()
        };
        assert_eq!(odd.max_tier(), 3);
    }
}
