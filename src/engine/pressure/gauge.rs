//! The size of a request on the provider's scale.
//!
//! noa's own count covers only the messages it sees. The provider's count of
//! the same request also holds the host's system prompt and tool
//! definitions, which no transcript records, and its tokenizer splits code
//! finer than four characters a token. So wherever the provider has said how
//! large a request was — recorded in the transcript (Claude Code's
//! `message.usage`, Codex's `token_count` events) or handed in by the host
//! (`--input-tokens`) — that figure is the anchor, and only what changed
//! since is estimated, scaled by what the same session taught about the
//! estimator. Claude Code decides its own compaction the same way: the last
//! response's usage plus a rough count of what came after it.

use crate::engine::model::identity::IdSet;

use serde::{Deserialize, Serialize};

use crate::engine::model::config::Config;
use crate::engine::model::message::COMPRESS_TOOL;
use crate::engine::model::message::CoreMessage;
use crate::engine::model::state::{Calibration, CompressionState};
use crate::engine::turn::HistoryIndex;

/// A prompt size the provider reported for one request of the transcript.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recorded {
    /// Flat history index of the response it was counted for: the request
    /// held every message before it.
    pub at: usize,
    /// Prompt tokens, cached ones included.
    pub tokens: usize,
}

/// Where a request's figure comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// The transcript's latest recorded usage, plus an estimate of what came after.
    Recorded,
    /// The host's `--input-tokens` for the last request, plus an estimate of what changed.
    Host,
    /// Figures the host gave on earlier turns, kept in the state.
    Learned,
    /// noa's estimate alone (plus the configured request overhead).
    Estimate,
}

impl Source {
    /// The name reports use.
    pub fn name(self) -> &'static str {
        match self {
            Source::Recorded => "recorded",
            Source::Host => "host",
            Source::Learned => "learned",
            Source::Estimate => "estimate",
        }
    }
}

/// Turns an estimate of the view into the provider's figure for the request:
/// `base + ratio × estimate`. `base` holds what the provider counts beyond
/// the messages (and the estimate's error on the part it has seen); `ratio`
/// corrects the estimator for this session's text.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gauge {
    /// Tokens the provider counts beyond `ratio ×` the estimate.
    pub base: f64,
    /// Provider tokens per estimated token.
    pub ratio: f64,
    /// Where the anchor came from.
    pub source: Source,
    /// The latest figure the transcript records, when it was set aside as
    /// one that cannot be right (see `PLAUSIBLE_SHARE`).
    pub set_aside: Option<Recorded>,
}

impl Gauge {
    /// The provider's figure for a view whose estimate is `estimate`.
    pub fn tokens(&self, estimate: usize) -> usize {
        (self.base + self.ratio * estimate as f64).round().max(0.0) as usize
    }

    /// The largest view estimate that stays within `tokens` on the
    /// provider's scale.
    pub fn estimate_for(&self, tokens: usize) -> usize {
        ((tokens as f64 - self.base) / self.ratio).max(0.0) as usize
    }

    /// Provider tokens for a part of the view: the ratio without the base.
    pub fn scale(&self, estimate: usize) -> usize {
        (self.ratio * estimate as f64).round() as usize
    }

    /// What the host sends beside the messages: the base, never below 0.
    pub fn host(&self) -> usize {
        self.base.round().max(0.0) as usize
    }
}

/// Ratios outside this band say more about a figure than about the text.
const RATIO_BOUNDS: (f64, f64) = (0.5, 8.0);

/// A recorded prompt size below this share of noa's estimate of the
/// messages that request held cannot be the provider's count of it: hosts
/// write placeholders (a Claude Code line whose usage says
/// `input_tokens: 10` and nothing of the cache), and anchored on one the
/// gauge read a 42K view as 0 tokens. The provider counts every message
/// and more (the host's prompt and tools), and the estimate runs below its
/// count on code and prose alike: on the bundled real transcripts the
/// recorded figure is 1.0 to 8 times the estimate at every checkpoint, so
/// half of it is far below anything real.
pub const PLAUSIBLE_SHARE: f64 = 0.5;

/// How many of the latest records are tried for a plausible one before the
/// gauge does without them.
const RECORDS_TRIED: usize = 4;
/// Estimated tokens of growth a learned ratio needs before it is trusted.
const MIN_SAMPLE: u64 = 2_000;

/// What the gauge is worked out from.
#[derive(Clone, Copy)]
pub struct GaugeInput<'a> {
    /// The model-visible history.
    pub history: &'a [CoreMessage],
    /// This turn's view, tagged and with earlier cuts in place.
    pub view: &'a [CoreMessage],
    /// Prompt sizes the transcript records.
    pub recorded: &'a [Recorded],
    /// The host's figure for the last request, if it gave one.
    pub input_tokens: Option<usize>,
    /// Blocks (which call made each) and what earlier turns learned.
    pub state: &'a CompressionState,
    /// `request_overhead` stands in for the host's prompt when nothing was reported.
    pub config: &'a Config,
    /// Earlier cuts in the view: its index, the tokens it saved, and the
    /// history length when it was made.
    pub cuts: &'a [(usize, usize, usize)],
    /// The turn's index, brought to this history: what it knows of the
    /// history's recorded figures and Compress calls stands in for reading
    /// the history again.
    pub index: &'a HistoryIndex<'a>,
}

/// The gauge for this turn. The host's figure wins when it gave one; then
/// the transcript's latest record; then what earlier host figures taught.
pub fn gauge(input: &GaugeInput) -> Gauge {
    let ratio = recorded_ratio(input)
        .or_else(|| input.state.host.calibration.ratio())
        .unwrap_or(1.0);
    let mut set_aside = None;
    let at = |base: f64, source, set_aside| Gauge {
        base,
        ratio,
        source,
        set_aside,
    };
    if let Some(n) = input.input_tokens {
        let then = match (
            repeated(input.state, input.history.len(), n),
            input.state.host.last_view_tokens,
        ) {
            (Some(counted), _) => counted,
            (None, 0) => input.view.iter().map(|m| input.config.tokens(m)).sum(),
            (None, sent) => sent,
        };
        return at(n as f64 - ratio * then as f64, Source::Host, None);
    }
    let len = input.history.len();
    let latest = input.recorded.iter().rev().filter(|r| r.at <= len);
    for mark in latest.take(RECORDS_TRIED) {
        let then = estimate_then(input, mark.at);
        if (mark.tokens as f64) < PLAUSIBLE_SHARE * then as f64 {
            set_aside.get_or_insert(*mark);
            continue;
        }
        let base = mark.tokens as f64 - ratio * then as f64;
        return at(base, Source::Recorded, set_aside);
    }
    match input.state.host.calibration.base {
        Some(base) => at(base as f64, Source::Learned, set_aside),
        None => at(
            input.config.request_overhead.unwrap_or(0) as f64,
            Source::Estimate,
            set_aside,
        ),
    }
}

/// The estimate of the request a host figure `n` counted, when the turn
/// is the last one again (the history as long as it was then) and `n` is
/// the figure it learned from: a host retrying a turn gives the last
/// request's figure again, and it is about the request before that turn's
/// view, not about the view itself. `None` for a figure not heard before,
/// which is learned from.
pub fn repeated(state: &CompressionState, history_len: usize, n: usize) -> Option<usize> {
    match state.host.calibration.last {
        Some((last, counted)) if last == n && state.host.history_len == history_len => {
            Some(counted)
        }
        _ => None,
    }
}

/// Records what a host figure teaches, so later turns without one still
/// count the host's prompt and correct the estimator: the base, and the
/// growth of provider figures against the growth of estimates.
pub fn learn(calibration: &mut Calibration, gauge: &Gauge, input_tokens: usize, sent: usize) {
    if let Some((f0, e0)) = calibration.last {
        let (df, de) = (input_tokens as i64 - f0 as i64, sent as i64 - e0 as i64);
        // Only growth in the same direction says something about the ratio.
        if de.abs() >= 200 && df.signum() == de.signum() {
            calibration.provider_growth += df.unsigned_abs();
            calibration.estimate_growth += de.unsigned_abs();
        }
    }
    calibration.last = Some((input_tokens, sent));
    calibration.base = Some(gauge.base.round() as i64);
}

impl Calibration {
    /// The estimator's correction, once enough growth was seen.
    pub fn ratio(&self) -> Option<f64> {
        (self.estimate_growth >= MIN_SAMPLE).then(|| {
            (self.provider_growth as f64 / self.estimate_growth as f64)
                .clamp(RATIO_BOUNDS.0, RATIO_BOUNDS.1)
        })
    }
}

/// About what the line standing for a reclaimed output counts.
const LINE_TOKENS: usize = 60;

/// The estimator's correction from the transcript's own records: provider
/// growth over estimated growth between consecutive records, where nothing
/// but new messages came between them (no Compress call).
fn recorded_ratio(input: &GaugeInput) -> Option<f64> {
    let walked = input.index.recorded_growth();
    let (provider, estimate) = walked.unwrap_or_else(|| {
        (input.recorded.windows(2))
            .filter(|pair| pair[1].at <= input.history.len())
            .filter_map(|pair| growth((pair[0], pair[1]), input.history, input.config))
            .fold((0, 0), |(p, e), (dp, de)| (p + dp, e + de))
    });
    (estimate >= MIN_SAMPLE)
        .then(|| (provider as f64 / estimate as f64).clamp(RATIO_BOUNDS.0, RATIO_BOUNDS.1))
}

/// Provider growth and estimated growth between two consecutive records,
/// `a` and `b` within `history`: `None` where more than new messages came
/// between them (a Compress call), or the figures did not grow.
pub(crate) fn growth(
    (a, b): (Recorded, Recorded),
    history: &[CoreMessage],
    config: &Config,
) -> Option<(u64, u64)> {
    if b.tokens <= a.tokens || b.at <= a.at {
        return None;
    }
    let between = &history[a.at..b.at];
    if between.iter().any(|m| m.tool_name == COMPRESS_TOOL) {
        return None;
    }
    let estimate: u64 = between.iter().map(|m| config.tokens(m) as u64).sum();
    let provider = (b.tokens - a.tokens) as u64;
    // Growth far out of proportion to what came between (from a
    // placeholder figure to a real one) teaches nothing of the text.
    let ratio = provider as f64 / estimate.max(1) as f64;
    (ratio <= RATIO_BOUNDS.1).then_some((provider, estimate))
}

/// The estimate of the request recorded at history index `at`, as well as
/// it can be told now: this view's part before it, plus what blocks and
/// cuts made since then took out of that part.
fn estimate_then(input: &GaugeInput, at: usize) -> usize {
    let later = &input.history[at..];
    let after: IdSet<'_> = later.iter().map(|m| m.id.as_str()).collect();
    let split = input
        .view
        .iter()
        .position(|m| after.contains(m.id.as_str()))
        .unwrap_or(input.view.len());
    let before: usize = input.view[..split]
        .iter()
        .map(|m| input.config.tokens(m))
        .sum();
    // Cuts made after the record: that request still held those outputs whole.
    let uncut: usize = input
        .cuts
        .iter()
        .filter(|&&(i, _, made)| i < split && made > at)
        .map(|&(_, saved, _)| saved)
        .sum();
    // Blocks made after the record: by a call that came later, or by the
    // call being applied now (not in the history yet), over messages that
    // request held.
    let index = input.index;
    let reclaimed: usize = (input.state.blocks.iter())
        .filter(|b| !b.compress_call_id.is_empty() && !index.called_before(&b.compress_call_id, at))
        .filter(|b| {
            b.direct_message_ids
                .iter()
                .any(|id| index.placed_before(id, at))
        })
        .map(|b| {
            b.compressed_tokens
                .saturating_sub(input.config.count(&b.summary))
        })
        .sum();
    // Outputs reclaimed after the record, by a later call: that request
    // held them whole, where the view holds a line (those a block stands
    // for are counted with it).
    let lines: usize = (input.state.host.reclaimed.iter())
        .filter(|(id, r)| r.at > at && !index.covers(id))
        .filter_map(|(id, _)| index.message_before(id, at))
        .map(|m| input.config.tokens(m).saturating_sub(LINE_TOKENS))
        .sum();
    before + uncut + reclaimed + lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::model::message::Role;

    fn msgs(n: usize, chars: usize) -> Vec<CoreMessage> {
        (0..n)
            .map(|i| CoreMessage::text(format!("m{i}"), Role::User, "x".repeat(chars)))
            .collect()
    }

    /// An index brought to the whole of `history`, as a turn brings it (on a
    /// copy of `state`).
    fn walked<'a>(
        history: &'a [CoreMessage],
        recorded: &'a [Recorded],
        state: &CompressionState,
        config: &'a Config,
    ) -> HistoryIndex<'a> {
        let mut index = HistoryIndex::new(history, recorded, config);
        index.advance(&mut state.clone(), history.len(), 1, |_| false);
        index.sum_recorded();
        index
    }

    fn input<'a>(
        history: &'a [CoreMessage],
        recorded: &'a [Recorded],
        state: &'a CompressionState,
        config: &'a Config,
        index: &'a HistoryIndex<'a>,
    ) -> GaugeInput<'a> {
        GaugeInput {
            history,
            view: history,
            recorded,
            input_tokens: None,
            state,
            config,
            cuts: &[],
            index,
        }
    }

    #[test]
    fn without_figures_it_is_the_estimate_plus_the_overhead() {
        let h = msgs(4, 400);
        let st = CompressionState::new("s");
        let cfg = Config {
            request_overhead: Some(1_000),
            ..Config::default()
        };
        let index = walked(&h, &[], &st, &cfg);
        let g = gauge(&input(&h, &[], &st, &cfg, &index));
        assert_eq!(g.source, Source::Estimate);
        assert_eq!(g.tokens(400), 1_400);
    }

    #[test]
    fn a_record_anchors_and_only_what_came_after_is_estimated() {
        let h = msgs(10, 400);
        let st = CompressionState::new("s");
        let cfg = Config::default();
        // The request before message 6 held 6 × 100 estimated tokens; the
        // provider counted 20,600 (a 20K system prompt and tools).
        let rec = [Recorded {
            at: 6,
            tokens: 20_600,
        }];
        let index = walked(&h, &rec, &st, &cfg);
        let g = gauge(&input(&h, &rec, &st, &cfg, &index));
        assert_eq!(g.source, Source::Recorded);
        assert_eq!(g.tokens(1_000), 21_000);
    }

    #[test]
    fn consecutive_records_teach_the_ratio() {
        let h = msgs(40, 400);
        let st = CompressionState::new("s");
        let cfg = Config::default();
        // 1.5 provider tokens per estimated token between records.
        let rec: Vec<Recorded> = (1..=4)
            .map(|k| Recorded {
                at: k * 10 - 5,
                tokens: 10_000 + k * 1_500,
            })
            .collect();
        let index = walked(&h, &rec, &st, &cfg);
        let g = gauge(&input(&h, &rec, &st, &cfg, &index));
        assert!((g.ratio - 1.5).abs() < 1e-9, "{g:?}");
        // Anchored on the last record (35 messages, 3,500 estimated).
        assert_eq!(g.tokens(3_500), 16_000);
        assert_eq!(g.tokens(4_000), 16_750);
    }

    #[test]
    fn the_host_figure_wins_and_is_learned() {
        let h = msgs(4, 400);
        let mut st = CompressionState::new("s");
        st.host.last_view_tokens = 300;
        let cfg = Config::default();
        let index = walked(&h, &[], &st, &cfg);
        let mut i = input(&h, &[], &st, &cfg, &index);
        i.input_tokens = Some(5_300);
        let g = gauge(&i);
        assert_eq!(g.source, Source::Host);
        assert_eq!(g.tokens(400), 5_400);
        let mut cal = Calibration::default();
        learn(&mut cal, &g, 5_300, 300);
        let mut later = CompressionState::new("s");
        later.host.calibration = cal;
        let index = walked(&h, &[], &later, &cfg);
        let g = gauge(&input(&h, &[], &later, &cfg, &index));
        assert_eq!(g.source, Source::Learned);
        assert_eq!(g.tokens(400), 5_400);
    }

    #[test]
    fn a_figure_given_again_for_the_same_turn_is_about_the_request_before() {
        let h = msgs(4, 400);
        let cfg = Config::default();
        let mut st = CompressionState::new("s");
        st.host.last_view_tokens = 300;
        let index = walked(&h, &[], &st, &cfg);
        let mut i = input(&h, &[], &st, &cfg, &index);
        i.input_tokens = Some(5_300);
        let first = gauge(&i);
        learn(&mut st.host.calibration, &first, 5_300, 300);
        // The turn is made: its view (400) is what the next figure counts.
        st.host.last_view_tokens = 400;
        st.host.history_len = h.len();
        assert_eq!(repeated(&st, h.len(), 5_300), Some(300));
        let index = walked(&h, &[], &st, &cfg);
        let mut again = input(&h, &[], &st, &cfg, &index);
        again.input_tokens = Some(5_300);
        assert_eq!(gauge(&again).tokens(400), first.tokens(400), "a retry");
        // A new figure, or the same one once the history grew, is news.
        assert_eq!(repeated(&st, h.len(), 5_900), None);
        assert_eq!(repeated(&st, h.len() + 1, 5_300), None);
        again.input_tokens = Some(5_900);
        assert_eq!(gauge(&again).tokens(400), 5_900);
    }

    #[test]
    fn host_growth_teaches_the_ratio() {
        let mut cal = Calibration::default();
        let g = Gauge {
            set_aside: None,
            base: 0.0,
            ratio: 1.0,
            source: Source::Host,
        };
        learn(&mut cal, &g, 10_000, 5_000);
        assert_eq!(cal.ratio(), None);
        learn(&mut cal, &g, 13_000, 7_000);
        assert_eq!(cal.ratio(), Some(1.5));
    }

    #[test]
    fn blocks_made_after_a_record_are_taken_off_its_anchor() {
        let mut h = msgs(6, 400);
        h.push(CoreMessage::tool_call("c", "call_1", COMPRESS_TOOL, "{}"));
        let mut st = CompressionState::new("s");
        st.blocks.push(crate::engine::model::state::Block {
            compressed_tokens: 300,
            summary: "abcd".into(),
            compress_call_id: "call_1".into(),
            ..crate::engine::test_support::block("b1", 1, &["m0", "m1", "m2"])
        });
        let cfg = Config::default();
        // The view now holds 3 of the first 6 messages; the record before
        // the Compress call saw all six.
        let view: Vec<CoreMessage> = h[3..].to_vec();
        let rec = [Recorded {
            at: 6,
            tokens: 10_600,
        }];
        let index = walked(&h, &rec, &st, &cfg);
        let g = gauge(&GaugeInput {
            view: &view,
            ..input(&h, &rec, &st, &cfg, &index)
        });
        // then = 300 (visible part) + 299 (reclaimed) ⇒ base ≈ 10,001.
        assert_eq!(g.tokens(0), 10_001);
    }
}
