//! The panel: the Compress tool's result, what the model reads back.
//!
//! Each block line reports the span the block actually covers, not the refs
//! the model asked for: a ledger built from the request would drift from
//! what happened. The panel is kept short, since it sits in the view.

use std::fmt::Write;

use super::state::Block;
use super::tokens::format;

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

/// Renders the panel.
pub fn render(p: &PanelInput) -> String {
    let mut out = String::new();
    if p.blocks.is_empty() {
        out.push_str("▣ noa | 0 blocks created");
    } else {
        let saved = p.before.saturating_sub(p.after);
        let _ = write!(
            out,
            "▣ noa | {} → {} tokens (~{} reclaimed)",
            format(p.before),
            format(p.after),
            format(saved)
        );
        for (b, partial) in &p.blocks {
            let star = if *partial { "*" } else { "" };
            let _ = write!(
                out,
                "\n  {}(T{})={}–{}{star} → {}",
                b.block_id, b.tier, b.start_ref, b.end_ref, b.archive_path
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
        let text = render(&PanelInput {
            before: 12_000,
            after: 3_100,
            blocks: vec![(&b, false)],
            ..PanelInput::default()
        });
        assert!(
            text.starts_with("▣ noa | 12K → 3.1K tokens (~8.9K reclaimed)"),
            "{text}"
        );
        assert!(text.contains("\n  b1(T1)=m00002–m00005 → /archive/tier1/b1_m00002-m00005.md"));
        assert_eq!(block_count(&text), 1);
    }

    #[test]
    fn nothing_created() {
        let text = render(&PanelInput {
            errors: vec!["Summary too short (5 chars, min 50).".into()],
            ..PanelInput::default()
        });
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
        let text = render(&PanelInput {
            before: 10,
            after: 5,
            blocks: vec![(&b, true)],
            surviving: vec![("b3".into(), 2)],
            absorbed_tier: 1,
            warnings: vec!["Excluded 2 protected message(s) m00203, m00204 (recent zone).".into()],
            ..PanelInput::default()
        });
        assert!(text.contains("b5(T2)=m00012–m00160* →"));
        assert!(text.contains("note: b3(T2) lay inside a requested range"));
        assert!(text.contains("warn: Excluded 2 protected"));
        assert_eq!(block_count(&text), 1);
    }

    #[test]
    fn reclaimed_never_negative() {
        let b = made("b1", 1, "m1", "m2", "/p");
        assert!(
            render(&PanelInput {
                before: 10,
                after: 20,
                blocks: vec![(&b, false)],
                ..PanelInput::default()
            })
            .contains("(~0 reclaimed)")
        );
    }
}
