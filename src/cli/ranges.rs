//! `noa ranges`: the recommendation, for a person or a script.

use std::io::Write;

use serde::Serialize;

use super::args::{Global, RangesArgs};
use super::context::{Context, Turn};
use super::output::warn;
use super::project::offer_of;
use super::{CliError, Exit};
use crate::engine::{
    BlockSpan, Config, CoreMessage, Dead, Figures, Offer, Offered, Projection, ProtectedRange,
    RangeInfo, dead_in_view, format_block_map, format_breakdown, format_ranges, tokens,
};
use crate::store::Purpose;

/// Runs `noa ranges`. Works on a copy of the state: writes nothing.
pub fn run(global: &Global, args: &RangesArgs) -> Result<Exit, CliError> {
    let cx = Context::open(global, &args.transcript, Purpose::Look)?;
    cx.settings.check_floor(cx.session.history())?;
    let mut state = cx.state()?;
    let config = cx.config(&state);
    let p = cx.project(&mut state, Turn::default());
    let r = &p.recommendation;
    let count = |m: &CoreMessage| p.gauge.scale(config.tokens(m));
    // What the next compression reclaims too: the nudge's, or a tier-1 one.
    let tier = if p.decision.inject {
        p.decision.tier
    } else {
        1
    };
    let offered = Offered::of(&p.recommendation, tier);
    let dead = dead_in_view(
        &state,
        cx.session.history(),
        &config,
        (&p.view, &offered, &p.hidden),
        &count,
    );
    let text = if args.json {
        // One schema with `project --report json`: the figures flat, then
        // what only the recommendation holds.
        serde_json::to_string(&RangesReport {
            figures: p.figures,
            window_from: cx.settings.window_source(&state.host),
            ranges: &r.ranges,
            protected: &r.protected,
            blocks: &r.blocks,
            pending: Pending {
                tier1: r.pending[0],
                tier2: r.pending[1],
                tier3: r.pending[2],
            },
            nudge: offer_of(&cx, &p, &state),
            reclaimable: dead,
            emergency: p.decision.emergency,
            reason: &p.decision.reason,
        })
        .expect("a report always serializes")
    } else {
        ranges_text(&p, &config, &dead)
    };
    writeln!(std::io::stdout().lock(), "{text}").map_err(|source| CliError::Io {
        path: "<stdout>".into(),
        error: source,
    })?;
    warn(global, &cx.session.warnings());
    Ok(Exit::Success)
}

/// `noa ranges` for a person: what may be compressed and what may not, the
/// blocks, the stale reads the next compression reclaims, the breakdown and
/// the nudge decision.
fn ranges_text(p: &Projection, config: &Config, dead: &Dead) -> String {
    let r = &p.recommendation;
    let mut parts = vec![format_ranges(&r.ranges, &r.protected)];
    let chars: usize = r.ranges.iter().map(|x| x.chars).sum();
    let min = config.compress.min_compress_range;
    if !r.ranges.is_empty() && chars < min {
        parts.push(format!(
            "Too small to compress yet: these hold {chars} characters together, and a Compress call needs at least {min}. Wait until more work is done."
        ));
    }
    let map = format_block_map(&r.blocks);
    if !map.is_empty() {
        parts.push(map);
    }
    if dead.outputs > 0 {
        parts.push(format!(
            "With the next compression: {} dead tool output(s) (stale reads of files changed since, \
             outputs repeated word for word, a failed call's input), ~{} tokens, are reclaimed \
             without the model (each archived, shown as one line).",
            dead.outputs,
            tokens::format(dead.tokens)
        ));
    }
    parts.push(format_breakdown(&p.figures.breakdown, 0));
    parts.push(format!("Nudge: {}", p.decision.reason));
    parts.join("\n\n")
}

/// `ranges --json`.
#[derive(Serialize)]
struct RangesReport<'a> {
    #[serde(flatten)]
    figures: Figures,
    window_from: &'static str,
    ranges: &'a [RangeInfo],
    protected: &'a [ProtectedRange],
    blocks: &'a [BlockSpan],
    pending: Pending,
    /// The nudge this turn carries, as `project --report json` gives it.
    nudge: Option<Offer>,
    /// What the next compression reclaims without the model.
    reclaimable: Dead,
    emergency: bool,
    reason: &'a str,
}

/// What each tier could reclaim now.
#[derive(Serialize)]
struct Pending {
    tier1: usize,
    tier2: usize,
    tier3: usize,
}
