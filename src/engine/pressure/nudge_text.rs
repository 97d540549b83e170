//! The nudge: the message that asks the model to compress, rendered from the
//! decision's data.
//!
//! Deciding and rendering are separate so a host can present a decision its
//! own way, and so the decision logic can weigh a nudge's own size
//! ([`rough_size`]) before choosing to send it.
//!
//! Only the data lines carry real refs and block ids: the range table, the
//! block map and the target list. Every example elsewhere uses placeholders,
//! so nothing in the prose can be taken for a range on offer.

use std::fmt::Write;

use super::prompt::{Sections, how_to_compress_rules, pick, tier2_rules, tier3_rules};
use super::ranges::{BlockSpan, Breakdown, ProtectReason, ProtectedRange, RangeInfo};
use crate::engine::compress::reclaim::Dead;
use crate::engine::model::marker::MARKER as TRUNCATION_MARKER;
use crate::engine::model::state::Block;
use crate::engine::model::tokens;

/// What a nudge is rendered from.
#[derive(Debug, Clone)]
pub struct NudgeInput<'a> {
    /// 1 asks for message ranges; 2 and 3 ask to fold summaries into a higher
    /// tier. Values outside 1..=3 are clamped.
    pub tier: u8,
    /// The context is at its limit: the nudge drops its advisory tone.
    pub emergency: bool,
    /// Compressible ranges, oldest first.
    pub ranges: &'a [RangeInfo],
    /// Protected ranges, oldest first, shown so the model sees why gaps exist.
    pub protected: &'a [ProtectedRange],
    /// Active blocks, oldest first.
    pub blocks: &'a [BlockSpan],
    /// Where the context's tokens are.
    pub breakdown: Breakdown,
    /// Tokens added since the last nudge; 0 leaves the line out.
    pub growth: usize,
    /// Tool results mechanically truncated this turn.
    pub truncated: usize,
    /// The blocks a tier-2 or tier-3 nudge asks to fold.
    pub targets: Vec<&'a Block>,
    /// Tokens a tier-1 call should free to bring the context well under the
    /// nudge band; 0 leaves the line out.
    pub reclaim: usize,
    /// The stale reads the compression will reclaim too; none leaves the
    /// line out.
    pub dead: Dead,
}

/// How many blocks the block map lists; older ones are only counted, so the
/// map stays one readable line however long the session gets.
pub const BLOCK_MAP_SHOWN: usize = 8;

const EFFICIENCY_NOTE: &str = "This is an efficiency nudge, not a warning that the context is \
full: there is still room, but finished work is cheapest to fold away early. If anything listed \
below is work you are done with, compress it now, all in one call. If nothing qualifies yet, \
carry on with your task; this note is advisory.";

const PHILOSOPHY: &str = "WHY COMPRESS
Everything in the context is read again on every turn. Once a tool result, a file read or a \
discussion has served its purpose, what matters is what you learned from it, not the raw text. \
Compressing swaps that spent material for a short summary in your own words, while the original \
stays in an archive file you can open again. Done well, you keep every fact you need and free \
room for the work ahead; done carelessly, a lost detail is gone from view. Write each summary \
with care.";

const EMERGENCY_HEADLINE: &str = "CONTEXT LIMIT REACHED — compress now, before anything else. \
Start with tool output you have already read and used.";

const WHEN_TO: &str = "GOOD TIMES TO COMPRESS
- A sub-task is done and its tool output has been read and acted on.
- An investigation is over and its findings are written down (searches, file reads, sub-agent \
reports).
- Long build, test or log output has been interpreted and the result is known.
- A discussion has settled on a decision.
- You are about to start a new phase and the previous one is closed.";

const WHEN_NOT: &str = "DO NOT COMPRESS
- Material you still need word for word for the next step: the file you are editing, the error \
you are fixing, output you have not read yet.
- Work still under way whose outcome you do not know yet.
- The most recent messages and the latest user message: they are protected and would be \
refused.
- Anything, just for the sake of compressing: if nothing is finished, leave it.";

const TOOL: &str = "USING COMPRESS
Call the `Compress` tool with a `content` list; each entry replaces one inclusive range:
- `startId` and `endId`: the first and last ref of the range (`mNNNNN`), copied from the list in \
this message or from the ref tags in the conversation; or block ids (`bN`) to fold existing \
summaries into a higher tier.
- `summary`: the text that takes the range's place (rules below).
- `topic` (optional): a few words naming the range.
Send every range in one call, oldest first, with no overlaps. The originals are archived before \
anything is replaced.";

const GENTLE_CLOSING: &str = "Send all the ranges you pick in a single Compress call, one \
`content` entry per range: `content: [{…}, {…}]`.";

const EMERGENCY_SHAPE: &str = "Arguments:
{\"topic\": \"...\", \"content\": [{\"startId\": \"<ref>\", \"endId\": \"<ref>\", \"summary\": \"...\"}]}
Take refs only from the ranges listed below or the ref tags in the conversation, and compress the \
oldest work first.";

const TIER2_GUIDANCE: &str = "Your tier-1 summaries have piled up. Fold the blocks listed below \
into one tier-2 summary: keep the outcomes, decisions and lessons, and let the process go. Name \
them by block id: the oldest as startId, the newest as endId.";

const TIER3_GUIDANCE: &str = "Your tier-2 summaries have piled up. Condense the blocks listed \
below into one tier-3 summary: a terse index of what shipped, what is still open, and the \
decisions and constraints that still hold. Tier 3 is the last layer; nothing compresses it \
further.";

const MULTI_TIER: &str = "HOW THE TIERS FIT TOGETHER
- Tier 1 summarises raw messages: what you write when you compress refs.
- Tier 2 distills several tier-1 summaries into outcomes, decisions and lessons.
- Tier 3 condenses tier-2 summaries into a short index. It is the last layer.
Every tier's originals stay in the archive, and each summary keeps its pointer, so a higher tier \
can be terse and the detail is still one file away. A call folds only the lowest tier present in \
its range; blocks of a higher tier inside it stay as they are.";

const TIER_EXAMPLE: &str = "Example: Compress({\"content\": [{\"startId\": \"<oldest target bN>\", \
\"endId\": \"<newest target bN>\", \"summary\": \"...\"}]})";

const NO_RANGES: &str =
    "[No compressible ranges found — compress any content you have already used.]";

/// Renders the nudge the model reads. Sections are separated by a blank line;
/// a section an override removed leaves no gap, so removing the first one
/// does not start the text with a blank line.
pub fn render(input: &NudgeInput, sections: &Sections) -> String {
    let tier = input.tier.clamp(1, 3);
    let breakdown = format_breakdown(&input.breakdown, input.growth);
    let truncation = truncation_notice(input.truncated);
    let philosophy = pick(&sections.philosophy, PHILOSOPHY);
    let parts: Vec<String> = if tier == 1 && !input.emergency {
        vec![
            truncation,
            pick(&sections.efficiency_note, EFFICIENCY_NOTE).to_string(),
            philosophy.to_string(),
            breakdown,
            WHEN_TO.to_string(),
            WHEN_NOT.to_string(),
            TOOL.to_string(),
            how_to_compress_rules().to_string(),
            format_ranges(input.ranges, input.protected),
            format_block_map(input.blocks),
            reclaim_line(input.reclaim, offered(input.ranges)),
            dead_line(input.dead),
            GENTLE_CLOSING.to_string(),
        ]
    } else if tier == 1 {
        vec![
            pick(&sections.emergency_headline, EMERGENCY_HEADLINE).to_string(),
            truncation,
            philosophy.to_string(),
            breakdown,
            WHEN_NOT.to_string(),
            TOOL.to_string(),
            EMERGENCY_SHAPE.to_string(),
            how_to_compress_rules().to_string(),
            format_ranges(input.ranges, input.protected),
            format_block_map(input.blocks),
            reclaim_line(input.reclaim, offered(input.ranges)),
            dead_line(input.dead),
        ]
    } else {
        // At the limit the efficiency note would contradict the trigger line
        // ("not a warning"), so an emergency tier nudge goes without it.
        let note = if input.emergency {
            ""
        } else {
            pick(&sections.efficiency_note, EFFICIENCY_NOTE)
        };
        let (guidance, rules) = if tier == 2 {
            (
                pick(&sections.tier2_guidance, TIER2_GUIDANCE),
                tier2_rules(),
            )
        } else {
            (
                pick(&sections.tier3_guidance, TIER3_GUIDANCE),
                tier3_rules(),
            )
        };
        vec![
            truncation,
            note.to_string(),
            philosophy.to_string(),
            breakdown,
            trigger_line(tier, input.emergency),
            guidance.to_string(),
            MULTI_TIER.to_string(),
            format_targets(tier, &input.targets),
            TOOL.to_string(),
            TIER_EXAMPLE.to_string(),
            how_to_compress_rules().to_string(),
            rules.to_string(),
        ]
    };
    parts
        .into_iter()
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// The estimated token cost of a nudge with the default texts, so the
/// decision logic can weigh what a nudge costs against what it may reclaim.
pub fn rough_size(input: &NudgeInput) -> usize {
    tokens::estimate(&render(input, &Sections::default()))
}

/// What the ranges a nudge offers hold, together.
fn offered(ranges: &[RangeInfo]) -> usize {
    ranges.iter().map(|r| r.tokens).sum()
}

/// The line on the dead outputs (stale reads, repeats) a compression
/// reclaims too; empty when there are none.
fn dead_line(dead: Dead) -> String {
    match dead.outputs {
        0 => String::new(),
        n => format!(
            "With your compression, noa also replaces {n} dead tool output(s) (reads of files changed \
             since, outputs repeated word for word; ~{} tokens) by a line each, the outputs archived: \
             the figure above already counts them.",
            tokens::format(dead.tokens)
        ),
    }
}

/// How deep a tier-1 call should go, and why one deep call is cheaper than
/// several shallow ones. Empty when no figure is given. A nudge never asks
/// for more than the ranges it offers hold (`offered`): when they hold
/// less, it asks for them all and says where the rest comes from.
pub fn reclaim_line(tokens: usize, offered: usize) -> String {
    if tokens == 0 {
        return String::new();
    }
    if offered < tokens {
        return format!(
            "Compress every range listed in this call, about {} in all, oldest first. That is \
             less than the {} that would bring the context back to about half of the room it has: the \
             rest comes later, from folding summaries into higher tiers, or from old tool \
             output cut to fit.",
            tokens::format(offered),
            tokens::format(tokens)
        );
    }
    format!(
        "Free at least {} in this call, oldest ranges first: that brings the context back to \
         about half of the room it has, so the next request to compress is far off. One deep \
         compression costs less than several small ones: after each, the provider reads the \
         request again from the first compressed message on.",
        tokens::format(tokens)
    )
}

/// The line that names a tier nudge, in a fixed bracketed form a host or a
/// log reader can match.
fn trigger_line(tier: u8, emergency: bool) -> String {
    match (tier, emergency) {
        (2, false) => "[TIER 2 DISTILLATION TRIGGER]".to_string(),
        (_, false) => "[TIER 3 CONDENSATION TRIGGER]".to_string(),
        (2, true) => "[EMERGENCY — TIER 2 DISTILLATION] The context is at its limit: distill the \
                      blocks below now, before anything else."
            .to_string(),
        (_, true) => "[EMERGENCY — TIER 3 CONDENSATION] The context is at its limit: condense \
                      the blocks below now, before anything else."
            .to_string(),
    }
}

/// The range table: what may be compressed, one line per run, oldest
/// first; then, apart, what may not be compressed now and why. A protected
/// span is never folded into a neighbouring range: `apply` stops a block
/// before it, so a range offered across it would only be cut short.
pub fn format_ranges(ranges: &[RangeInfo], protected: &[ProtectedRange]) -> String {
    if ranges.is_empty() {
        return NO_RANGES.to_string();
    }
    let mut out = format!("Compressible ranges ({}, oldest first):", ranges.len());
    for r in ranges {
        let users = match r.user_messages {
            0 => String::new(),
            1 => " · 1 user msg".to_string(),
            n => format!(" · {n} user msgs"),
        };
        let tool = r.tool_pct.min(100);
        let task = if r.holds_task {
            " · holds the task: keep its constraints"
        } else {
            ""
        };
        let _ = write!(
            out,
            "\n  {}–{}  {} msgs  {} [tool {tool}% | text {}%]{users}{task}",
            r.start_ref,
            r.end_ref,
            r.count,
            tokens::format(r.tokens),
            100 - tool
        );
    }
    if !protected.is_empty() {
        out.push_str("\nNot compressible now:");
        for p in protected {
            let why = match p.reason {
                ProtectReason::Recent => "recent, the current step still uses them",
                ProtectReason::LastUserMessage => "the latest user message",
            };
            let tools = if p.tools.is_empty() {
                String::new()
            } else {
                format!(" ({})", p.tools.join(", "))
            };
            let _ = write!(
                out,
                "\n  {}–{}  {} msgs  {} [PROTECTED: {why}{tools}]",
                p.start_ref,
                p.end_ref,
                p.count,
                tokens::format(p.tokens)
            );
        }
    }
    out
}

/// The active block map, `bN(Tk)=mA–mB` per block, the newest
/// `BLOCK_MAP_SHOWN` listed and older ones counted. Empty when there are no
/// blocks.
pub fn format_block_map(blocks: &[BlockSpan]) -> String {
    if blocks.is_empty() {
        return String::new();
    }
    let hidden = blocks.len().saturating_sub(BLOCK_MAP_SHOWN);
    let shown: Vec<String> = blocks[hidden..]
        .iter()
        .map(|b| format!("{}(T{})={}–{}", b.block_id, b.tier, b.start_ref, b.end_ref))
        .collect();
    let older = if hidden > 0 {
        format!("…+{hidden} older · ")
    } else {
        String::new()
    };
    format!(
        "Active blocks ({}): {older}{}",
        blocks.len(),
        shown.join(" · ")
    )
}

/// Where the context's tokens are, largest kinds named, empty kinds left out,
/// in the fixed order host, system, tool, summaries, code, text, nudge; then how much the
/// context grew since the last nudge when that is known.
pub fn format_breakdown(b: &Breakdown, growth: usize) -> String {
    let buckets = [
        ("host prompt and tools", b.host),
        ("system", b.system),
        ("tool", b.tool),
        ("summaries", b.summaries),
        ("code", b.code),
        ("text", b.text),
        ("nudge", b.nudge),
    ];
    let shown: Vec<String> = buckets
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(name, n)| format!("{} {name}", tokens::format(*n)))
        .collect();
    let mut lines = Vec::new();
    if !shown.is_empty() {
        lines.push(format!("Context breakdown: {}", shown.join(" | ")));
    }
    if growth > 0 {
        lines.push(format!("+{} since last nudge", tokens::format(growth)));
    }
    lines.join("\n")
}

/// The blocks a tier nudge asks to fold: id, messages it stands for, tokens
/// it replaced → tokens its summary costs now, and its topic.
pub fn format_targets(tier: u8, targets: &[&Block]) -> String {
    let source = tier.clamp(2, 3) - 1;
    if targets.is_empty() {
        return format!("Target blocks: none — no active tier-{source} blocks to fold.");
    }
    let verb = if source == 1 { "distill" } else { "condense" };
    let mut out = format!("Target tier-{source} blocks to {verb} ({}):", targets.len());
    for b in targets {
        out.push_str(&format!(
            "\n  {}  {} msgs  {}→{}",
            b.block_id,
            b.effective_message_ids.len(),
            tokens::format(b.compressed_tokens),
            tokens::format(tokens::estimate(&b.summary))
        ));
        if !b.topic.is_empty() {
            out.push_str(&format!("  \"{}\"", b.topic));
        }
    }
    out
}

/// Tells the model that some tool results were cut this turn, how to spot
/// them, and that re-running the tools is pointless: the full output is kept
/// outside the view. Empty when nothing was cut.
pub fn truncation_notice(n: usize) -> String {
    match n {
        0 => String::new(),
        1 => format!(
            "1 tool result in this context was cut short mechanically to make room; the cut is \
             marked \"{TRUNCATION_MARKER}\". Do not run that tool again just to see the rest: the \
             full output is kept in the transcript and goes to the archive when its range is \
             compressed."
        ),
        n => format!(
            "{n} tool results in this context were cut short mechanically to make room; each cut \
             is marked \"{TRUNCATION_MARKER}\". Do not run those tools again just to see the \
             rest: the full output is kept in the transcript and goes to the archive when its \
             range is compressed."
        ),
    }
}

#[cfg(test)]
#[path = "nudge_text_tests.rs"]
mod tests;
