//! Which token counter to use: the quick estimate, or an exact BPE count.
//!
//! The estimate ([`tokens::estimate`]) is what noa shows by default: it costs
//! nothing to start and is close enough to pace compression. A host that
//! budgets against a hard window can ask for the exact count of an OpenAI
//! encoding instead. The ranks are bundled in `tiktoken-rs`, so nothing is
//! read or downloaded at run time, and the engine stays pure.

use tiktoken_rs::CoreBPE;

use crate::engine::model::tokens;

/// How tokens are counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tokenizer {
    /// One token per CJK character plus one per four other characters: no
    /// ranks to load, and on noa's own sources and transcripts about a tenth
    /// under the exact count.
    #[default]
    Estimate,
    /// `o200k_base`, the encoding of GPT-4o, GPT-4.1, GPT-5 and the `o` series.
    O200k,
    /// `cl100k_base`, the encoding of GPT-4 and GPT-3.5.
    Cl100k,
}

impl Tokenizer {
    /// Counts the tokens of a text.
    ///
    /// The BPE ranks are decoded on the first count with that encoding, once
    /// per process (tiktoken-rs keeps each in a `LazyLock`), so a run that
    /// never asks for an exact count never pays the 0.1–0.2 s the ranks take
    /// to decode.
    ///
    /// Special-token text such as `<|endoftext|>` is counted as the ordinary
    /// text it is: inside a transcript it is something a user or a tool wrote,
    /// not a control token.
    pub fn count(self, text: &str) -> usize {
        match self {
            Tokenizer::Estimate => tokens::estimate(text),
            Tokenizer::O200k => bpe_count(tiktoken_rs::o200k_base_singleton(), text),
            Tokenizer::Cl100k => bpe_count(tiktoken_rs::cl100k_base_singleton(), text),
        }
    }

    /// The name the CLI, the config file and the reports use (serde writes
    /// the same).
    pub fn name(self) -> &'static str {
        match self {
            Tokenizer::Estimate => "estimate",
            Tokenizer::O200k => "o200k",
            Tokenizer::Cl100k => "cl100k",
        }
    }
}

/// The longest whitespace stretch handed to the BPE in one call.
///
/// The encodings' split regex backtracks over a whitespace run one stack
/// entry per character, and fancy-regex gives up near a million entries;
/// tiktoken-rs (like Python's tiktoken) unwraps that error, so a tool output
/// with a million blank characters in a row would panic. A quarter of that
/// leaves a wide margin.
const MAX_WHITESPACE_RUN: usize = 1 << 18;

/// Counts with a BPE, cutting whitespace runs longer than
/// [`MAX_WHITESPACE_RUN`] into stretches counted one by one.
///
/// Every text without such a run, which is every text tiktoken itself can
/// count, is counted in one call and so exactly. A cut run may come out a
/// token or two off at each cut, where tiktoken would have panicked.
fn bpe_count(bpe: &CoreBPE, text: &str) -> usize {
    // A text no longer than the limit in bytes cannot hold a run that long.
    if text.len() <= MAX_WHITESPACE_RUN {
        return bpe.encode_ordinary(text).len();
    }
    let mut total = 0;
    let mut start = 0;
    let mut run = 0;
    for (i, c) in text.char_indices() {
        // `char::is_whitespace` is Unicode White_Space, the regex's `\s`.
        if !c.is_whitespace() {
            run = 0;
            continue;
        }
        run += 1;
        if run == MAX_WHITESPACE_RUN {
            let end = i + c.len_utf8();
            total += bpe.encode_ordinary(&text[start..end]).len();
            start = end;
            run = 0;
        }
    }
    total + bpe.encode_ordinary(&text[start..]).len()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Expected counts are Python's `tiktoken` 0.14 (`encode_ordinary`) run
    // on the rank files bundled in tiktoken-rs, which match the sha256 that
    // tiktoken pins for `o200k_base` and `cl100k_base`.

    /// (text, o200k, cl100k)
    const CASES: &[(&str, usize, usize)] = &[
        ("", 0, 0),
        ("hello world", 2, 2),
        ("The quick brown fox jumps over the lazy dog.", 10, 10),
        (
            "fn main() {\n    let v: Vec<u32> = (0..10).map(|x| x * 2).collect();\n    println!(\"{v:?}\");\n}\n",
            36,
            36,
        ),
        // Code where the encodings part: o200k splits where lowercase turns
        // to uppercase (`xAC` is `x` + `AC`), and has no `.chars` merge.
        (
            "    matches!(c as u32, 0x4E00..=0x9FFF | 0x3040..=0x30FF | 0xAC00..=0xD7AF)",
            46,
            44,
        ),
        ("        text.chars().count()", 7, 6),
        // o200k has far more merges for CJK, Cyrillic and emoji than cl100k.
        ("认证方案的设计与实现", 6, 9),
        ("こんにちは世界", 2, 4),
        ("Привет, мир! Как дела?", 8, 12),
        ("🎉🎉🎉🎉", 8, 12),
        ("    \n\n\t  trailing   ", 4, 4),
    ];

    #[test]
    fn exact_counts_for_o200k() {
        for &(text, want, _) in CASES {
            assert_eq!(Tokenizer::O200k.count(text), want, "{text:?}");
        }
    }

    #[test]
    fn exact_counts_for_cl100k() {
        for &(text, _, want) in CASES {
            assert_eq!(Tokenizer::Cl100k.count(text), want, "{text:?}");
        }
    }

    #[test]
    fn special_token_text_counts_as_ordinary_text() {
        // Allowed as specials these would be 1 token each; as text they are 7.
        assert_eq!(Tokenizer::O200k.count("<|endoftext|>"), 7);
        assert_eq!(Tokenizer::Cl100k.count("<|endoftext|>"), 7);
        let mixed = "before <|endoftext|> after <|endofprompt|> <|fim_prefix|>";
        assert_eq!(Tokenizer::O200k.count(mixed), 22);
        assert_eq!(Tokenizer::Cl100k.count(mixed), 20);
    }

    #[test]
    fn long_whitespace_runs_are_counted_without_panicking() {
        // tiktoken panics on this text. Its pieces are 1_099_999 spaces and
        // ` x`; tiktoken's `_encode_single_piece` on them gives 8594 + 1, and
        // counting the run in cut stretches comes to the same.
        let text = format!("{}x", " ".repeat(1_100_000));
        assert_eq!(Tokenizer::O200k.count(&text), 8595);
        assert_eq!(Tokenizer::Cl100k.count(&text), 8595);
        // Below the cut a long run is one call, exact as tiktoken has it.
        let text = format!("a{}b", " ".repeat(MAX_WHITESPACE_RUN - 1));
        assert_eq!(Tokenizer::O200k.count(&text), 2051);
        assert_eq!(Tokenizer::Cl100k.count(&text), 2051);
    }

    #[test]
    fn estimate_is_tokens_estimate() {
        for text in [
            "",
            "a",
            "abcde",
            "认证方案 auth.go",
            "🎉🎉🎉🎉",
            "<|endoftext|>",
        ] {
            assert_eq!(Tokenizer::Estimate.count(text), tokens::estimate(text));
        }
        assert_eq!(Tokenizer::default(), Tokenizer::Estimate);
    }

    #[test]
    fn names_round_trip_through_serde() {
        for t in [Tokenizer::Estimate, Tokenizer::O200k, Tokenizer::Cl100k] {
            let json = serde_json::to_string(&t).unwrap();
            assert_eq!(json, format!("\"{}\"", t.name()));
            assert_eq!(serde_json::from_str::<Tokenizer>(&json).unwrap(), t);
        }
        assert!(serde_json::from_str::<Tokenizer>("\"gpt-4o\"").is_err());
    }
}
