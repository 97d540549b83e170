//! The panel: the Compress tool's result, what the model reads back.
//!
//! Each block line reports the span the block actually covers, not the refs
//! the model asked for: a ledger built from the request would drift from
//! what happened. The panel is kept short, since it sits in the view.

use crate::engine::model::identity::{IdMap, IdSet};
use std::fmt::Write;

use serde::Serialize;

use super::apply::ApplyOutcome;
use crate::engine::model::message::CoreMessage;
use crate::engine::model::name::Name;
use crate::engine::model::state::Block;
use crate::engine::model::summary::render_summary;
use crate::engine::model::tokens::format;
use crate::engine::report::bill::Expected;

/// What one block reclaimed, and the two figures it is the difference of.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Reclaimed {
    /// Tokens the block took out of the view: its direct messages the view
    /// no longer shows, at their original size, plus for a tier 2/3 block the
    /// rendered summaries of the blocks it absorbed.
    pub taken: usize,
    /// Tokens of the block's own rendered summary, header and archive pointer
    /// included: what it put back.
    pub summary: usize,
    /// `taken - summary`, floored at 0: the block's reclaimed tokens.
    pub tokens: usize,
}

/// Tokens of a block's summary as it is rendered into the view
/// (`render_summary`: header, topic, summary and archive pointer).
pub fn summary_tokens(block: &Block, tokens: &dyn Fn(&CoreMessage) -> usize) -> usize {
    tokens(&render_summary(block))
}

/// What blocks' reclaimed figures are taken against, indexed once: the
/// blocks by id, the history's originals by id and the ids the view shows.
/// A figure then costs its own block's size, so the figures of every block
/// (a call's, or a whole session's for `inspect`) cost one pass over the
/// history rather than one per block.
pub struct Ledger<'a> {
    /// Every block by id (the first, should an id repeat).
    blocks: IdMap<'a, &'a Block>,
    /// Each history message by id (the first, should an id repeat).
    originals: IdMap<'a, &'a CoreMessage>,
    /// The ids the view shows.
    shown: IdSet<'a>,
    tokens: &'a dyn Fn(&CoreMessage) -> usize,
}

impl<'a> Ledger<'a> {
    /// Indexes `blocks` (the state's, where absorbed blocks are found),
    /// `history` (the originals: untruncated, untagged) and `view` (any view
    /// projected with the blocks in the state: after the call for the panel,
    /// the current one for `inspect`), to count with `tokens`, the session's
    /// counter ([`Config::tokens`](crate::engine::model::config::Config::tokens)),
    /// so the figures are on the same scale as the rest of the report. An
    /// original's count is the one it carries: its words are not read again.
    pub fn new(
        blocks: &'a [Block],
        history: &'a [CoreMessage],
        view: &'a [CoreMessage],
        tokens: &'a dyn Fn(&CoreMessage) -> usize,
    ) -> Self {
        let mut by_id = IdMap::with_capacity_and_hasher(blocks.len(), Default::default());
        for b in blocks {
            by_id.entry(b.block_id.as_str()).or_insert(b);
        }
        let mut originals = IdMap::with_capacity_and_hasher(history.len(), Default::default());
        for m in history {
            originals.entry(m.id.as_str()).or_insert(m);
        }
        Ledger {
            blocks: by_id,
            originals,
            shown: view.iter().map(|m| m.id.as_str()).collect(),
            tokens,
        }
    }

    /// A block's reclaimed tokens: the one figure the panel, `noa inspect`
    /// (table, stats and `--json`) and the SVG map report for it.
    ///
    /// It is what the block took out of the view less what it put back: the
    /// tokens of its direct messages, counted on the originals, minus every
    /// message the view still shows, plus for a tier 2/3 block the rendered
    /// summaries of the blocks it absorbed; less the tokens of its own
    /// rendered summary; floored at 0.
    ///
    /// A message the view still shows was never reclaimed, even when the
    /// block's range covers it and its archive holds it. The first user
    /// message (the task) is the case that matters: prune pins it in the view
    /// whatever covers it, so counting it would overstate the block by the
    /// size of the task. Reasoning kept beside a visible action and the half
    /// of a Compress exchange kept whole are left out for the same reason.
    ///
    /// Messages of a block later absorbed stay out of any view projected
    /// after, so the figure does not change when the block is folded into a
    /// higher tier.
    pub fn reclaimed(&self, block: &Block) -> Reclaimed {
        let mut counted: IdSet<'_> =
            IdSet::with_capacity_and_hasher(block.direct_message_ids.len(), Default::default());
        let messages: usize = block
            .direct_message_ids
            .iter()
            .map(Name::as_str)
            .filter(|id| !self.shown.contains(id) && counted.insert(id))
            .filter_map(|id| self.originals.get(id))
            .map(|m| (self.tokens)(m))
            .sum();
        let absorbed: usize = block
            .direct_block_ids
            .iter()
            .filter_map(|id| self.blocks.get(id.as_str()))
            .map(|b| summary_tokens(b, self.tokens))
            .sum();
        let taken = messages + absorbed;
        let summary = summary_tokens(block, self.tokens);
        Reclaimed {
            taken,
            summary,
            tokens: taken.saturating_sub(summary),
        }
    }
}

/// What a call reclaimed, for the panel's headline: the sum of
/// [`Ledger::reclaimed`] over the blocks it made, with `blocks`, `history`,
/// `view` and `tokens` as [`Ledger::new`] takes them (the state and the view
/// after the call).
pub fn reclaimed_by_call<'a>(
    made: impl IntoIterator<Item = &'a Block>,
    blocks: &[Block],
    history: &[CoreMessage],
    view: &[CoreMessage],
    tokens: &dyn Fn(&CoreMessage) -> usize,
) -> Reclaimed {
    let ledger = Ledger::new(blocks, history, view, tokens);
    made.into_iter()
        .map(|b| ledger.reclaimed(b))
        .fold(Reclaimed::default(), |sum, r| Reclaimed {
            taken: sum.taken + r.taken,
            summary: sum.summary + r.summary,
            tokens: sum.tokens + r.tokens,
        })
}

/// What a panel reports.
#[derive(Debug, Clone, Default)]
pub struct PanelInput<'a> {
    /// View tokens before the call.
    pub before: usize,
    /// View tokens after it.
    pub after: usize,
    /// Blocks created, with whether each span holds refs it does not cover.
    pub blocks: Vec<(&'a Block, bool)>,
    /// Higher-tier blocks left standing inside a requested range: (id, tier).
    pub surviving: Vec<(String, u8)>,
    /// The tier that was absorbed, for the surviving note.
    pub absorbed_tier: u8,
    /// Rejections the model should correct.
    pub errors: Vec<String>,
    /// Things done that the model should know about.
    pub warnings: Vec<String>,
}

/// Renders the panel, its headline reporting `reclaimed`: what the call's
/// blocks reclaimed, from [`reclaimed_by_call`]. The two figures are named
/// apart: the context (the whole view the call was resolved against, old
/// cuts in it, nothing left out to fit) falls by what the blocks reclaimed
/// only where it showed their originals whole; an output cut to fit, or a
/// message left out, is reclaimed at its original size.
pub fn render(p: &PanelInput, reclaimed: Reclaimed) -> String {
    let mut out = String::new();
    if p.blocks.is_empty() {
        out.push_str("▣ noa | 0 blocks created");
    } else {
        let _ = write!(
            out,
            "▣ noa | context {} → {} tokens · ~{} reclaimed ({} of originals for {} of summaries)",
            format(p.before),
            format(p.after),
            format(reclaimed.tokens),
            format(reclaimed.taken),
            format(reclaimed.summary)
        );
        for (b, partial) in &p.blocks {
            let star = if *partial { "*" } else { "" };
            let _ = write!(
                out,
                "\n  {}(T{})={}–{}{star} → {}",
                b.block_id, b.tier, b.start_ref, b.end_ref, b.archive_path
            );
        }
        if p.blocks.iter().any(|(_, partial)| *partial) {
            out.push_str(
                "\n  (* its span also holds messages this block does not cover; they stay as they were)",
            );
        }
    }
    for (id, tier) in &p.surviving {
        let _ = write!(
            out,
            "\n  note: {id}(T{tier}) lay inside a requested range and stays as it is: only tier {} was absorbed. Compress that tier on its own.",
            p.absorbed_tier
        );
    }
    for e in &p.errors {
        let _ = write!(out, "\n  error: {e}");
    }
    for w in &p.warnings {
        let _ = write!(out, "\n  warn: {w}");
    }
    out
}

/// The panel for what one call did: the tool result `apply` prints and a
/// rebuild keeps for a call the transcript never answered. `before` and
/// `after` are the context around the call; `reclaimed` is
/// [`reclaimed_by_call`] for its blocks.
pub fn answer(
    out: &ApplyOutcome,
    before: usize,
    after: usize,
    reclaimed: Reclaimed,
    expected: Option<Expected>,
) -> String {
    let mut text = render(
        &PanelInput {
            before,
            after,
            blocks: out
                .created
                .iter()
                .map(|(b, partial)| (b, *partial))
                .collect(),
            surviving: out.surviving.clone(),
            absorbed_tier: out.absorbed_tier,
            errors: out.errors.clone(),
            warnings: out.warnings.clone(),
        },
        reclaimed,
    );
    // Under the headline, beside the figures it follows from; the block
    // lines, each ending in its archive, stay last.
    if let Some(e) = expected {
        let head = text.find('\n').unwrap_or(text.len());
        text.insert_str(head, &format!("\n  {}", e.line()));
    }
    text
}

/// How many blocks a panel reports, counted from its `bN(Tk)=` lines. Rebuild
/// uses it to tell which recorded calls made a block.
pub fn block_count(panel: &str) -> usize {
    let bytes = panel.as_bytes();
    let mut count = 0;
    for (i, _) in panel.match_indices('b') {
        if i > 0 && (bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_') {
            continue;
        }
        let rest = &panel[i + 1..];
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            continue;
        }
        let Some(tail) = rest[digits..].strip_prefix("(T") else {
            continue;
        };
        let tier = tail.bytes().take_while(u8::is_ascii_digit).count();
        if tier > 0 && tail[tier..].starts_with(")=") {
            count += 1;
        }
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::test_support::block;

    fn made(id: &str, tier: u8, start: &str, end: &str, path: &str) -> Block {
        let mut b = block(id, tier, &[]);
        b.start_ref = start.into();
        b.end_ref = end.into();
        b.archive_path = path.into();
        b
    }

    #[test]
    fn success_headline_and_block_line() {
        let b = made(
            "b1",
            1,
            "m00002",
            "m00005",
            "/archive/tier1/b1_m00002-m00005.md",
        );
        let text = render(
            &PanelInput {
                before: 12_000,
                after: 3_100,
                blocks: vec![(&b, false)],
                ..PanelInput::default()
            },
            Reclaimed {
                taken: 9_400,
                summary: 500,
                tokens: 8_900,
            },
        );
        assert!(
            text.starts_with(
                "▣ noa | context 12K → 3.1K tokens · ~8.9K reclaimed (9.4K of originals for 500 of summaries)"
            ),
            "{text}"
        );
        assert!(text.contains("\n  b1(T1)=m00002–m00005 → /archive/tier1/b1_m00002-m00005.md"));
        assert_eq!(block_count(&text), 1);
    }

    #[test]
    fn nothing_created() {
        let text = render(
            &PanelInput {
                errors: vec!["Summary too short (5 chars, min 50).".into()],
                ..PanelInput::default()
            },
            Reclaimed::default(),
        );
        assert_eq!(
            text,
            "▣ noa | 0 blocks created\n  error: Summary too short (5 chars, min 50)."
        );
        assert_eq!(block_count(&text), 0);
    }

    #[test]
    fn counting_ignores_notes() {
        let text = "▣ noa | 50K → 9K tokens (~41K reclaimed)\n  b6(T2)=m00012–m00160* → /a/b6.md\n  b7(T1)=m00161–m00204 → /a/b7.md\n  note: b3(T2) lay inside a requested range";
        assert_eq!(block_count(text), 2);
        assert_eq!(block_count("ab1(T1)=x"), 0);
    }

    #[test]
    fn surviving_blocks_and_warnings() {
        let b = made("b5", 2, "m00012", "m00160", "/a/b5.md");
        let text = render(
            &PanelInput {
                before: 10,
                after: 5,
                blocks: vec![(&b, true)],
                surviving: vec![("b3".into(), 2)],
                absorbed_tier: 1,
                warnings: vec![
                    "Excluded 2 protected message(s) m00203, m00204 (recent zone).".into(),
                ],
                ..PanelInput::default()
            },
            Reclaimed {
                taken: 6,
                summary: 1,
                tokens: 5,
            },
        );
        assert!(text.contains("b5(T2)=m00012–m00160* →"));
        assert!(text.contains("(* its span also holds messages this block does not cover"));
        assert!(text.contains("note: b3(T2) lay inside a requested range"));
        assert!(text.contains("warn: Excluded 2 protected"));
        assert_eq!(block_count(&text), 1);
    }
}
