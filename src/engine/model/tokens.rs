//! Token estimation and the compact figures shown in tags and panels.

/// Whether a character is counted as a whole token on its own: CJK ideographs,
/// kana and Hangul syllables carry roughly a token each. The definition,
/// which [`cjk3`] reads off a character's bytes.
#[cfg(test)]
fn is_cjk(c: char) -> bool {
    matches!(c as u32, 0x4E00..=0x9FFF | 0x3040..=0x30FF | 0xAC00..=0xD7AF)
}

/// The length of the character that starts at `bytes[at]`, in a valid
/// UTF-8 text, and whether it is a CJK one (see [`cjk3`]), told from its
/// bytes without decoding it: every such character takes three.
#[inline]
fn char_at(bytes: &[u8], at: usize) -> (usize, bool) {
    match bytes[at] {
        0..0x80 => (1, false),
        0xF0.. => (4, false),
        lead @ 0xE0.. => (3, cjk3(lead, bytes[at + 1], bytes[at + 2])),
        _ => (2, false),
    }
}

/// Whether the three bytes `lead`, `b1`, `b2` encode a character counted
/// a whole token on its own, as CJK ideographs, kana and Hangul syllables
/// carry roughly a token each: kana are U+3040–U+30FF (`E3 81 80`–`E3 83 BF`),
/// ideographs U+4E00–U+9FFF (`E4 B8 80`–`E9 BF BF`), Hangul syllables
/// U+AC00–U+D7AF (`EA B0 80`–`ED 9E AF`).
#[inline]
fn cjk3(lead: u8, b1: u8, b2: u8) -> bool {
    match lead {
        0xE3 => (0x81..=0x83).contains(&b1),
        0xE4 => b1 >= 0xB8,
        0xE5..=0xE9 | 0xEB | 0xEC => true,
        0xEA => b1 >= 0xB0,
        0xED => b1 < 0x9E || b1 == 0x9E && b2 <= 0xAF,
        _ => false,
    }
}

/// Whether the character whose lead byte, of three or four, is at
/// `bytes[at]` is a CJK one.
#[inline]
fn cjk_at(bytes: &[u8], at: usize) -> bool {
    bytes[at] < 0xF0 && cjk3(bytes[at], bytes[at + 1], bytes[at + 2])
}

/// Whether the eight bytes from `at` are there and all ASCII.
#[inline]
fn ascii_word(bytes: &[u8], at: usize) -> bool {
    bytes.get(at..at + 8).is_some_and(|w| {
        u64::from_le_bytes(w.try_into().expect("eight")) & 0x8080_8080_8080_8080 == 0
    })
}

/// Estimates tokens: one per CJK character plus one per four other characters
/// (rounded up). Counted per Unicode scalar, so astral characters are not
/// double-counted the way UTF-16 counting would.
pub fn estimate(text: &str) -> usize {
    Tally::of(text).tokens()
}

/// The characters [`estimate`] counts in a text: CJK ones, a token each,
/// and the others, a token per four. The tallies of pieces add up to the
/// tally of the pieces joined, so a text counted in parts is read once.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    cjk: usize,
    other: usize,
}

impl Tally {
    /// The tally of `text`.
    ///
    /// Thirty-two bytes at a time, passed over while they are ASCII; in a
    /// word of eight that is not, the characters are counted as its bytes
    /// less those that go on a character, and only the leads of three and
    /// four bytes are looked at for CJK ones. A file read numbers every
    /// line with an arrow, so most outputs of a Claude Code session are
    /// ASCII but for a character a line.
    pub fn of(text: &str) -> Tally {
        const HIGH: u64 = 0x8080_8080_8080_8080;
        let bytes = text.as_bytes();
        if bytes.is_ascii() {
            return Tally::ascii(bytes.len());
        }
        let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("eight"));
        let (mut later, mut cjk, mut at) = (0usize, 0usize, 0usize);
        while at + 32 <= bytes.len() {
            let ws = [word(at), word(at + 8), word(at + 16), word(at + 24)];
            if (ws[0] | ws[1] | ws[2] | ws[3]) & HIGH != 0 {
                for (k, w) in ws.into_iter().enumerate() {
                    // Bit 7 of each byte, from bits 7, 6 and 5 of the same
                    // byte: `10` starts the bytes that go on a character,
                    // `111` a lead of three or four.
                    later += (w & !(w << 1) & HIGH).count_ones() as usize;
                    let mut leads = w & (w << 1) & (w << 2) & HIGH;
                    while leads != 0 {
                        let i = at + 8 * k + leads.trailing_zeros() as usize / 8;
                        cjk += usize::from(cjk_at(bytes, i));
                        leads &= leads - 1;
                    }
                }
            }
            at += 32;
        }
        for (i, &b) in bytes.iter().enumerate().skip(at) {
            later += usize::from(b & 0xC0 == 0x80);
            cjk += usize::from(b >= 0xE0 && cjk_at(bytes, i));
        }
        let chars = bytes.len() - later;
        Tally {
            cjk,
            other: chars - cjk,
        }
    }

    /// The tally of an ASCII text of `len` bytes, read off without it.
    pub fn ascii(len: usize) -> Tally {
        Tally { cjk: 0, other: len }
    }

    /// The tally of `chars` characters, `cjk` of them CJK ones.
    pub fn of_chars(chars: usize, cjk: usize) -> Tally {
        Tally {
            cjk,
            other: chars.saturating_sub(cjk),
        }
    }

    /// What is left of this tally with `part`'s characters taken out: the
    /// tally of a text's middle, from the whole's and its ends'.
    pub fn less(self, part: Tally) -> Tally {
        Tally {
            cjk: self.cjk.saturating_sub(part.cjk),
            other: self.other.saturating_sub(part.other),
        }
    }

    /// The estimate of what was tallied.
    pub fn tokens(self) -> usize {
        self.cjk + self.other.div_ceil(4)
    }

    /// The CJK characters tallied.
    pub fn cjk(self) -> usize {
        self.cjk
    }

    /// The characters tallied, of both kinds.
    pub fn chars(self) -> usize {
        self.cjk + self.other
    }
}

/// The most characters [`Ends`] tells apart at either end of a text: as
/// many as a cut keeps at each end.
pub const ENDS_CHARS: usize = 2_000;

/// Which of a text's first and last [`ENDS_CHARS`] characters are CJK
/// ones: what the estimate needs to tally the ends a cut keeps of words it
/// does not read ([`CoreMessage::withheld`](crate::engine::CoreMessage::withheld)),
/// when they hold a CJK character. Of words without one every character
/// counts alike, and nothing need be known but how many there are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ends {
    /// Bit `i` of word `i / 64` set when the `i`th character is CJK.
    head: Vec<u64>,
    /// Bit `i` of word `i / 64` set when the `i`th character from the end
    /// (the last the 0th) is CJK.
    tail: Vec<u64>,
}

impl Ends {
    /// What `text` holds at its ends, read off their bytes.
    pub fn of(text: &str) -> Ends {
        Ends::read(text).0
    }

    /// [`Ends::of`] the text, and its tally, read together: each character
    /// once (the ends of a text of fewer than twice [`ENDS_CHARS`] meet,
    /// and its middle is tallied on its own).
    pub fn with_tally(text: &str) -> (Ends, Tally) {
        let (ends, ends_tally, middle) = Ends::read(text);
        (ends, ends_tally + Tally::of(&text[middle]))
    }

    /// The ends of `text`, read each character once and ASCII eight bytes
    /// at a time, with the tally of the characters they read and the bytes
    /// between them (empty when they meet).
    fn read(text: &str) -> (Ends, Tally, std::ops::Range<usize>) {
        let bytes = text.as_bytes();
        let (mut head, mut at) = (Bits::default(), 0);
        while at < bytes.len() && head.len < ENDS_CHARS {
            if bytes[at] < 0x80 {
                let step = match head.len + 8 <= ENDS_CHARS && ascii_word(bytes, at) {
                    true => 8,
                    false => 1,
                };
                (head.len, at) = (head.len + step, at + step);
                continue;
            }
            let (len, is_cjk) = char_at(bytes, at);
            head.push(is_cjk);
            at += len;
        }
        // The characters after the head, from the last on.
        let (mut tail, mut end) = (Bits::default(), bytes.len());
        while end > at && tail.len < ENDS_CHARS {
            if bytes[end - 1] < 0x80 {
                let step = match end >= at + 8 && tail.len + 8 <= ENDS_CHARS {
                    true if ascii_word(bytes, end - 8) => 8,
                    _ => 1,
                };
                (tail.len, end) = (tail.len + step, end - step);
                continue;
            }
            // A character is at most four bytes long.
            let from = end.saturating_sub(4).max(at);
            let start = (from..end).rev().find(|&i| bytes[i] & 0xC0 != 0x80);
            let start = start.expect("a character starts before it ends");
            tail.push(char_at(bytes, start).1);
            end = start;
        }
        let tally = head.tally() + tail.tally();
        // Should those be too few, the head's own, from its last.
        tail.push_reversed(&head, ENDS_CHARS - tail.len);
        let ends = Ends {
            head: head.finish(),
            tail: tail.finish(),
        };
        (ends, tally, at..end)
    }

    /// Ends read back from [`Ends::words`]: `None` when they are not.
    pub fn from_words(head: Vec<u64>, tail: Vec<u64>) -> Option<Ends> {
        let most = ENDS_CHARS.div_ceil(64);
        (head.len() <= most && tail.len() <= most).then_some(Ends { head, tail })
    }

    /// The words it is held in, head then tail, as [`Ends::from_words`]
    /// takes them.
    pub fn words(&self) -> (&[u64], &[u64]) {
        (&self.head, &self.tail)
    }

    /// The tally of the text's first `chars` characters, at most
    /// [`ENDS_CHARS`] and at most the text's.
    pub fn head(&self, chars: usize) -> Tally {
        Tally::of_chars(chars, cjk_among(&self.head, chars))
    }

    /// The tally of the text's last `chars` characters, as [`Ends::head`].
    pub fn tail(&self, chars: usize) -> Tally {
        Tally::of_chars(chars, cjk_among(&self.tail, chars))
    }
}

/// Bits gathered a character at a time, 64 to a word, at most
/// [`ENDS_CHARS`].
struct Bits {
    words: [u64; ENDS_CHARS.div_ceil(64)],
    len: usize,
}

impl Default for Bits {
    fn default() -> Bits {
        Bits {
            words: [0; ENDS_CHARS.div_ceil(64)],
            len: 0,
        }
    }
}

impl Bits {
    fn push(&mut self, set: bool) {
        self.words[self.len / 64] |= u64::from(set) << (self.len % 64);
        self.len += 1;
    }

    /// Pushes the low `n` bits of `word`, `n` at most 64.
    fn push_word(&mut self, word: u64, n: usize) {
        let word = if n < 64 { word & ((1 << n) - 1) } else { word };
        let (at, shift) = (self.len / 64, self.len % 64);
        self.words[at] |= word << shift;
        if shift > 0 && n > 64 - shift {
            self.words[at + 1] |= word >> (64 - shift);
        }
        self.len += n;
    }

    /// Pushes the last `n` bits of `from` (at most all), its last first,
    /// a word at a time.
    fn push_reversed(&mut self, from: &Bits, n: usize) {
        let n = n.min(from.len);
        let used = from.len.div_ceil(64);
        // Bit `j` of the reversed words is bit `64 * used - 1 - j` of
        // `from`: its last bit is bit `pad`.
        let reversed = |i: usize| match i < used {
            true => from.words[used - 1 - i].reverse_bits(),
            false => 0,
        };
        let pad = 64 * used - from.len;
        for k in 0..n.div_ceil(64) {
            let j = 64 * k + pad;
            let (i, shift) = (j / 64, j % 64);
            let mut word = reversed(i) >> shift;
            if shift > 0 {
                word |= reversed(i + 1) << (64 - shift);
            }
            self.push_word(word, (n - 64 * k).min(64));
        }
    }

    /// The tally of the characters it holds.
    fn tally(&self) -> Tally {
        let cjk = self.words.iter().map(|w| w.count_ones() as usize).sum();
        Tally::of_chars(self.len, cjk)
    }

    /// The words that hold a bit.
    fn finish(self) -> Vec<u64> {
        self.words[..self.len.div_ceil(64)].to_vec()
    }
}

/// The bits set among the first `n` of `words`.
fn cjk_among(words: &[u64], n: usize) -> usize {
    let whole = words.iter().take(n / 64).map(|w| w.count_ones() as usize);
    let part = match (n % 64, words.get(n / 64)) {
        (0, _) | (_, None) => 0,
        (bits, Some(w)) => (w & ((1u64 << bits) - 1)).count_ones() as usize,
    };
    whole.sum::<usize>() + part
}

impl std::ops::Add for Tally {
    type Output = Tally;

    fn add(self, o: Tally) -> Tally {
        Tally {
            cjk: self.cjk + o.cjk,
            other: self.other + o.other,
        }
    }
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

/// Appends `n` in decimal digits, without the formatter: built for every
/// cut output a turn sends, and every line of a long session's logs.
pub fn push_decimal(out: &mut String, mut n: usize) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend(digits[at..].iter().map(|&d| char::from(d)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_number_is_written_as_its_decimal_digits() {
        for n in [0, 7, 10, 99, 100, 12_345, 1 << 40, usize::MAX] {
            let mut text = String::from("x");
            push_decimal(&mut text, n);
            assert_eq!(text, format!("x{n}"));
        }
    }

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
    fn mixed_text_counts_as_char_by_char() {
        let texts = [
            "plain ascii text that runs past eight bytes",
            "tag — with a dash in a long line of ascii text around it",
            "中文 mixed with ascii 认证方案 auth.go and more ascii after it",
            "é",
            "🎉 emoji then ascii for a while, then 한국어",
        ];
        for t in texts {
            let slow = t.chars().filter(|&c| is_cjk(c)).count()
                + t.chars().filter(|&c| !is_cjk(c)).count().div_ceil(4);
            assert_eq!(estimate(t), slow, "{t}");
        }
    }

    proptest::proptest! {
        #[test]
        fn estimate_is_its_definition(t in "(\\PC|[a-z ]{0,20}|[中文한]){0,60}") {
            let slow = t.chars().filter(|&c| is_cjk(c)).count()
                + t.chars().filter(|&c| !is_cjk(c)).count().div_ceil(4);
            proptest::prop_assert_eq!(estimate(&t), slow);
        }

        /// Counted a word at a time, any text tallies as its characters
        /// do, CJK ones at the edges of their ranges and leads at any place
        /// in a word included.
        #[test]
        fn a_tally_counts_each_character(
            t in "([a-z ]{0,19}|[\u{303f}\u{3040}\u{30ff}\u{3100}\u{4dff}\u{4e00}\u{9fff}\u{a000}\u{abff}\u{ac00}\u{d7af}\u{d7b0}→é😀]|\\PC){0,80}",
        ) {
            let cjk = t.chars().filter(|&c| is_cjk(c)).count();
            let other = t.chars().count() - cjk;
            proptest::prop_assert_eq!(Tally::of(&t), Tally { cjk, other });
        }

        #[test]
        fn pieces_add_up_to_the_joined_text(
            a in "(\\PC|[a-z ]{0,20}|[中文한]){0,30}",
            b in "(\\PC|[a-z ]{0,20}|[中文한]){0,30}",
            c in "[a-z —]{0,9}",
        ) {
            let joined = format!("{a}{c}{b}");
            let pieces = Tally::of(&a) + Tally::of(&c) + Tally::of(&b);
            proptest::prop_assert_eq!(pieces, Tally::of(&joined));
            proptest::prop_assert_eq!(pieces.tokens(), estimate(&joined));
        }
    }

    proptest::proptest! {
        /// The ends tally as the text's first and last characters do.
        #[test]
        fn ends_tally_as_the_text_s_ends(
            t in "(\\PC|[a-z ]{0,20}|[中文한]{0,9}){0,300}",
            n in 0usize..ENDS_CHARS,
        ) {
            let chars: Vec<char> = t.chars().collect();
            let n = n.min(chars.len());
            let ends = Ends::of(&t);
            let (head, tail) = ends.words();
            let ends = Ends::from_words(head.to_vec(), tail.to_vec()).unwrap();
            let text = |cs: &[char]| cs.iter().collect::<String>();
            proptest::prop_assert_eq!(ends.head(n), Tally::of(&text(&chars[..n])));
            proptest::prop_assert_eq!(ends.tail(n), Tally::of(&text(&chars[chars.len() - n..])));
        }
    }

    proptest::proptest! {
        /// The ends read with ASCII taken eight bytes at a time, and the
        /// tail of a short text taken from its head, are the bits of each
        /// character read one at a time.
        #[test]
        fn ends_are_each_character_s_bits(t in "([a-z ]{0,40}|[中文한é]{0,9}){0,500}") {
            let bits = |chars: &mut dyn Iterator<Item = char>| {
                let mut bits = Bits::default();
                chars.take(ENDS_CHARS).for_each(|c| bits.push(is_cjk(c)));
                bits.finish()
            };
            let (ends, tally) = Ends::with_tally(&t);
            proptest::prop_assert_eq!(tally, Tally::of(&t));
            proptest::prop_assert_eq!(&ends.head, &bits(&mut t.chars()));
            proptest::prop_assert_eq!(&ends.tail, &bits(&mut t.chars().rev()));
        }
    }

    #[test]
    fn counts_astral_characters_once() {
        assert_eq!(estimate("🎉🎉🎉🎉"), 1);
    }

    /// Every character of three bytes is told CJK or not from its bytes as
    /// from its code point.
    #[test]
    fn cjk_is_told_from_the_bytes_as_from_the_character() {
        for c in ('\u{800}'..='\u{FFFF}').filter(|c| c.len_utf8() == 3) {
            let mut b = [0u8; 4];
            c.encode_utf8(&mut b);
            assert_eq!(cjk3(b[0], b[1], b[2]), is_cjk(c), "{c:?}");
        }
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
