//! Token estimation and the compact figures shown in tags and panels.

/// Whether a character is counted as a whole token on its own: CJK ideographs,
/// kana and Hangul syllables carry roughly a token each.
fn is_cjk(c: char) -> bool {
    matches!(c as u32, 0x4E00..=0x9FFF | 0x3040..=0x30FF | 0xAC00..=0xD7AF)
}

/// Estimates tokens: one per CJK character plus one per four other characters
/// (rounded up). Counted per Unicode scalar, so astral characters are not
/// double-counted the way UTF-16 counting would.
pub fn estimate(text: &str) -> usize {
    if text.is_ascii() {
        return text.len().div_ceil(4);
    }
    let (cjk, other) = text.chars().fold((0usize, 0usize), |(cjk, other), c| {
        if is_cjk(c) {
            (cjk + 1, other)
        } else {
            (cjk, other + 1)
        }
    });
    cjk + other.div_ceil(4)
}

/// Characters in a text: its length when it is ASCII, which most tool
/// output is, without walking it.
pub fn chars(text: &str) -> usize {
    if text.is_ascii() {
        text.len()
    } else {
        text.chars().count()
    }
}

/// Renders a token count the way tags and panels show it: `999`, `1.2K`, `12K`.
///
/// Below 10K one decimal is kept; `9999` reads `10.0K` on purpose, so the
/// width of the figure says which band it is in.
pub fn format(n: usize) -> String {
    if n < 1000 {
        n.to_string()
    } else if n < 10_000 {
        format!("{:.1}K", n as f64 / 1000.0)
    } else {
        format!("{}K", (n as f64 / 1000.0).round() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimates_ascii_by_quarters() {
        assert_eq!(estimate(""), 0);
        assert_eq!(estimate("a"), 1);
        assert_eq!(estimate("abcd"), 1);
        assert_eq!(estimate("abcde"), 2);
        assert_eq!(estimate("abcdefgh"), 2);
    }

    #[test]
    fn counts_each_cjk_character() {
        assert_eq!(estimate("中文"), 2);
        assert_eq!(estimate("你好世界"), 4);
        assert_eq!(estimate("ひらがな"), 4);
        assert_eq!(estimate("한국어"), 3);
        assert_eq!(estimate("认证方案 auth.go"), 6);
    }

    #[test]
    fn counts_astral_characters_once() {
        assert_eq!(estimate("🎉🎉🎉🎉"), 1);
    }

    #[test]
    fn cjk_classification() {
        for c in ['中', '文', 'あ', 'ア', '한'] {
            assert!(is_cjk(c), "{c}");
        }
        for c in ['a', 'Z', '0', ' ', '\n', '·', '—'] {
            assert!(!is_cjk(c), "{c:?}");
        }
    }

    #[test]
    fn formats_figures() {
        let cases = [
            (0, "0"),
            (42, "42"),
            (999, "999"),
            (1000, "1.0K"),
            (2100, "2.1K"),
            (9999, "10.0K"),
            (10_000, "10K"),
            (12_345, "12K"),
            (120_000, "120K"),
        ];
        for (n, want) in cases {
            assert_eq!(format(n), want, "{n}");
        }
    }
}
