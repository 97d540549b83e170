//! Every figure a person sees about a turn, worked out once by the
//! pipeline: the report line, `inspect`, `ranges`, the context map and the
//! SVG render these and compute none of their own.
//!
//! Token figures are on the provider's scale: the request as the provider
//! counts it (see [`Gauge`]), and each part of it the estimator's count
//! scaled by the same ratio, so the parts add up to the whole.

use serde::Serialize;

use crate::engine::pressure::gauge::{Gauge, Source};
use crate::engine::pressure::ranges::Breakdown;

/// One turn's figures, under the names every surface uses.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Figures {
    /// The model's context window.
    pub window: usize,
    /// The window less the room kept for the reply: every decision keeps
    /// the request within it.
    pub budget: usize,
    /// The request as sent: the view, its nudge and the host's share.
    pub request: usize,
    /// The view before this turn's cuts and nudge, with the host's share:
    /// what the turn's decisions were taken on.
    pub before_cuts: usize,
    /// Where the request's figure comes from.
    pub source: Source,
    /// Provider tokens per estimated token, for this session's text.
    pub ratio: f64,
    /// The request, part by part.
    pub breakdown: Breakdown,
}

impl Figures {
    /// The figures of a finished view: `estimated` is its breakdown on the
    /// estimator's scale, `before_cuts` what the decisions were taken on.
    pub fn of(
        gauge: &Gauge,
        estimated: Breakdown,
        before_cuts: usize,
        window: usize,
        budget: usize,
    ) -> Figures {
        let sent = estimated.messages();
        let request = gauge.tokens(sent);
        let mut breakdown = estimated.scaled(|t| gauge.scale(t));
        breakdown.host = request.saturating_sub(breakdown.messages());
        Figures {
            window,
            budget,
            request,
            before_cuts,
            source: gauge.source,
            ratio: (gauge.ratio * 1000.0).round() / 1000.0,
            breakdown,
        }
    }

    /// The request's share of the window, in whole percent.
    pub fn window_percent(&self) -> usize {
        percent(self.request, self.window)
    }

    /// The size decisions were taken on, as a share of the budget.
    pub fn budget_percent(&self) -> usize {
        percent(self.before_cuts, self.budget)
    }
}

/// `part` of `whole` in whole percent, rounded.
fn percent(part: usize, whole: usize) -> usize {
    ((part as f64 * 100.0) / whole.max(1) as f64).round() as usize
}
