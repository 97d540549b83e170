//! The flat message every transcript format projects into.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use super::marker::marked;
use super::name::Name;
use super::tokenizer::Tokenizer;
use super::tokens::{Ends, Tally};

/// The name of noa's own tool, the one the model compresses with. Its calls
/// and results are hard-protected and never offered for compression.
pub const COMPRESS_TOOL: &str = "Compress";

/// Who produced a message, as the engine sees it.
///
/// `System` carries instructions (system or developer prompts): they get no
/// ref and are never offered for compression, so a summary can never swallow
/// the rules the agent runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// System or developer instructions.
    System,
    /// The user, or anything the host injects on the user's side.
    User,
    /// The model.
    Assistant,
    /// A tool's answer to a call.
    Tool,
}

impl Role {
    /// The lowercase name used in ids and archives.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// What one content block holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ContentType {
    /// Plain text.
    Text,
    /// A tool call made by the model.
    ToolCall,
    /// The result answering a tool call.
    ToolResult,
    /// Model reasoning (thinking); carried verbatim, never tagged.
    Reasoning,
}

impl ContentType {
    /// The kebab-case name used in ids and archives.
    pub fn as_str(self) -> &'static str {
        match self {
            ContentType::Text => "text",
            ContentType::ToolCall => "tool-call",
            ContentType::ToolResult => "tool-result",
            ContentType::Reasoning => "reasoning",
        }
    }
}

/// What the engine did to a block's text on its way into the view.
///
/// Writers replay this on the block's original JSON instead of guessing from
/// the text, so the request carries exactly what the engine decided and
/// counted. Where a block came from is its `id`: one read from the
/// transcript names its host block, a synthetic one (a block summary, the
/// nudge) has none and is written from the core alone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Edit {
    /// Shown as logged.
    #[default]
    None,
    /// A ref tag was appended: the original text is intact before this suffix.
    Tagged(String),
    /// The text was cut short (a truncated tool output); `text` is what is
    /// sent, and ends with this ref tag suffix (empty when untagged).
    Truncated(String),
    /// A Compress call's arguments with long summaries stubbed; `text` is
    /// the arguments sent.
    ArgsShortened,
    /// A dead tool output shown as noa's line about it (see
    /// `turn::reclaim`), maybe with its ref tag after.
    Reclaimed,
}

/// One content block of one host message, flattened.
///
/// A host message with three blocks (say thinking, text, tool call) becomes
/// three `CoreMessage`s. `id` is the stable identity the ref map is keyed by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoreMessage {
    /// Stable identity (`h_…` content hash, or a synthetic id such as `noa_nudge`).
    pub id: Name,
    /// Who produced it.
    pub role: Role,
    /// What kind of block it is.
    pub content_type: ContentType,
    /// The block's text: prose, tool arguments, tool output or reasoning.
    pub text: String,
    /// Tool name for calls and results; empty otherwise.
    pub tool_name: Name,
    /// Call id pairing a call with its result; empty otherwise.
    pub tool_call_id: Name,
    /// True for blocks whose payload is not text a tag can be appended to
    /// (images, opaque provider items). Their `text` is a short stand-in used
    /// only for size estimates.
    pub opaque: bool,
    /// What the engine changed in `text`; writers apply it to the original.
    pub edit: Edit,
    /// The text's token count, once taken: a turn asks for it many times
    /// (pruning, the zone, the recommendation, the gauge, truncation).
    pub counted: Counted,
    /// The length in bytes of a text whose words were not read: `text` is
    /// then empty. A warm turn leaves long tool outputs in the read cache
    /// until its view shows them (see
    /// [`Unfilled`](crate::engine::turn::Unfilled)); only an output known
    /// to hold no marker, counted by the estimate, whose memo knows its
    /// tally ([`Counted::tally_known`]), and, when it holds a CJK character,
    /// with its [`ends`](CoreMessage::ends), so that its length, its tally
    /// and its ends are all a projection needs of it.
    pub withheld: Option<NonZeroU32>,
    /// Which of the first and last characters of words not read are CJK
    /// ones ([`Ends`]), for words that hold any: a cut of them is tallied
    /// from these. Kept only while the words are not held
    /// ([`CoreMessage::let_go`]).
    pub ends: Option<Box<Ends>>,
}

/// A message's token count, kept with it once counted, with the counter
/// that took it: a count by another tokenizer is taken afresh. What a read
/// of the text learned is kept too ([`Facts`]): that it is all ASCII (it
/// is then tallied by its length), that it holds no truncation marker (it
/// is then cut without being searched), and, for an estimate, its tally:
/// its CJK characters and how the count was rounded, from which the other
/// characters follow. A first turn learns them all once, where the words
/// are read (offered to be set aside, or where the ids are hashed), while
/// they are in cache ([`Counted::learn`]), so the passes that count, tag
/// and cut a long history need not read them again, in any script.
///
/// A memo, not content: it never makes two messages unequal, and every
/// change of the text through [`CoreMessage::append_tag`] or
/// [`CoreMessage::replace_text`] forgets it.
///
/// Held in one atomic word (the counter above the count, 0 for none), so
/// messages can be read from several threads at once, archives rendered
/// and ids hashed side by side; a relaxed load or store of a word costs
/// what a plain one does. Two threads counting the same message store the
/// same figure.
#[derive(Debug, Default)]
pub struct Counted(AtomicU64);

/// Where the counter that took a [`Counted`] word's count is (two bits).
const COUNTER_SHIFT: u32 = 32;
/// The bit of a [`Counted`] word that says the text is all ASCII.
const ASCII: u64 = 1 << 34;
/// The bit of a [`Counted`] word that says the text holds no [`MARKER`](super::marker::MARKER).
const UNMARKED: u64 = 1 << 35;
/// The bits of the text's facts, which outlast a count by another counter.
const FACTS: u64 = ASCII | UNMARKED;
/// The bit of an estimate's [`Counted`] word that says its tally is known:
/// the estimate is the CJK characters, held from [`CJK_SHIFT`] up, and
/// the others over four, rounded up; the two bits from [`ROUND_SHIFT`] say
/// by how much it was rounded, so the other characters can be told from
/// the count. Not one of [`FACTS`]: another counter's count leaves nothing
/// to tell them from.
const TALLIED: u64 = 1 << 36;
/// Where the rounding of a [`TALLIED`] estimate starts.
const ROUND_SHIFT: u32 = 37;
/// Where the CJK characters of a [`TALLIED`] estimate start: the rest of
/// the word, room for more than any text but a few hundred megabytes of
/// CJK holds (one that holds more is counted without its tally kept).
const CJK_SHIFT: u32 = 39;

/// What one read of a text tells beside its count.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Facts {
    /// The text is all ASCII.
    pub ascii: bool,
    /// The text holds no truncation marker.
    pub unmarked: bool,
    /// Of a text counted by the estimate, how much its count was rounded
    /// up: four times its count less its CJK characters, less the other
    /// characters, from which they follow. `None` when its tally is not
    /// known.
    pub round: Option<u8>,
    /// Of a text whose tally is known, its CJK characters.
    pub cjk: usize,
}

/// Which counter took the count a [`Counted`] word holds (0 for none).
fn counter(word: u64) -> u64 {
    (word >> COUNTER_SHIFT) & 3
}

impl Counted {
    /// A count already known, say from a cache of an earlier turn.
    pub fn known(tokenizer: Tokenizer, tokens: usize) -> Counted {
        Counted(AtomicU64::new(Self::word(tokenizer, tokens)))
    }

    /// [`Counted::known`], with what is known of the text ([`Facts`]; its
    /// tally only for a count by the estimate).
    pub fn known_with(tokenizer: Tokenizer, tokens: usize, facts: Facts) -> Counted {
        let bits = flag(facts.ascii, ASCII) | flag(facts.unmarked, UNMARKED);
        let tallied = match (tokenizer, facts.round) {
            (Tokenizer::Estimate, Some(round)) => tallied(round, facts.cjk),
            _ => 0,
        };
        Counted(AtomicU64::new(
            Self::word(tokenizer, tokens) | bits | tallied,
        ))
    }

    /// The word of the estimate whose tally is `tally`, of a text of `len`
    /// bytes: all ASCII when every byte is a character counted a quarter,
    /// with its rounding and CJK characters, from which the tally follows.
    fn estimate(tally: Tally, len: usize) -> u64 {
        let tokens = tally.tokens();
        // Rounding a quarter up adds at most three.
        let round = (4 * (tokens - tally.cjk()) - (tally.chars() - tally.cjk())) as u8;
        Self::word(Tokenizer::Estimate, tokens)
            | flag(tally == Tally::ascii(len), ASCII)
            | tallied(round, tally.cjk())
    }

    fn word(tokenizer: Tokenizer, tokens: usize) -> u64 {
        let counter = match tokenizer {
            Tokenizer::Estimate => 1,
            Tokenizer::O200k => 2,
            Tokenizer::Cl100k => 3,
        };
        (counter << COUNTER_SHIFT) | u64::from(tokens as u32)
    }

    /// The count of `text` by `tokenizer`, taken the first time (and kept
    /// in place of a count by another); the estimate learns whether the
    /// text is all ASCII as well.
    pub fn of(&self, tokenizer: Tokenizer, text: &str) -> usize {
        let kept = self.0.load(Ordering::Relaxed);
        if counter(kept) == counter(Self::word(tokenizer, 0)) {
            return (kept & u64::from(u32::MAX)) as usize;
        }
        let word = match tokenizer {
            Tokenizer::Estimate => Self::estimate(Tally::of(text), text.len()),
            _ => Self::word(tokenizer, tokenizer.count(text)),
        };
        self.0.store(word | kept & FACTS, Ordering::Relaxed);
        (word & u64::from(u32::MAX)) as usize
    }

    /// Learns what one read of `text` tells, when nothing is known of it
    /// yet: its estimate, whether it is all ASCII and whether it holds no
    /// marker.
    pub fn learn(&self, text: &str) {
        if self.0.load(Ordering::Relaxed) != 0 {
            return;
        }
        self.learn_tallied(text, Tally::of(text));
    }

    /// [`Counted::learn`], the text's tally taken already.
    pub fn learn_tallied(&self, text: &str, tally: Tally) {
        if self.0.load(Ordering::Relaxed) != 0 {
            return;
        }
        let word = Self::estimate(tally, text.len()) | flag(!marked(text), UNMARKED);
        self.0.store(word, Ordering::Relaxed);
    }

    /// The estimate's tally of `text`, this memo's text: read off the memo
    /// when it knows it, off its length when it is known to be ASCII, else
    /// taken (and its estimate kept when no count is).
    pub fn tally(&self, text: &str) -> Tally {
        if let Some(tally) = self.tally_known() {
            return tally;
        }
        if self.ascii() {
            return Tally::ascii(text.len());
        }
        let tally = Tally::of(text);
        if self.0.load(Ordering::Relaxed) == 0 {
            let word = Self::estimate(tally, text.len());
            self.0.store(word, Ordering::Relaxed);
        }
        tally
    }

    /// What is known of the text beside its count.
    pub fn facts(&self) -> Facts {
        let word = self.0.load(Ordering::Relaxed);
        let estimated = counter(word) == counter(Self::word(Tokenizer::Estimate, 0));
        let tallied = estimated && word & TALLIED != 0;
        Facts {
            ascii: word & ASCII != 0,
            unmarked: word & UNMARKED != 0,
            round: tallied.then_some((word >> ROUND_SHIFT & 3) as u8),
            cjk: if tallied {
                (word >> CJK_SHIFT) as usize
            } else {
                0
            },
        }
    }

    /// The estimate's tally of the text, told from its count, rounding and
    /// CJK characters (see [`Facts`]); `None` when that is not known.
    pub fn tally_known(&self) -> Option<Tally> {
        let facts = self.facts();
        let round = usize::from(facts.round?);
        let tokens = (self.0.load(Ordering::Relaxed) & u64::from(u32::MAX)) as usize;
        let other = (4 * tokens.checked_sub(facts.cjk)?).checked_sub(round)?;
        Some(Tally::of_chars(facts.cjk + other, facts.cjk))
    }

    /// The characters of a text counted by the estimate whose tally is
    /// known ([`Counted::tally_known`]); `None` when that is not known.
    pub fn chars(&self) -> Option<usize> {
        self.tally_known().map(Tally::chars)
    }

    /// Whether the text is known to be all ASCII.
    pub fn ascii(&self) -> bool {
        self.0.load(Ordering::Relaxed) & ASCII != 0
    }

    /// Whether the text is known to hold no truncation marker (see
    /// [`marked`](crate::engine::marked)).
    pub fn unmarked(&self) -> bool {
        self.0.load(Ordering::Relaxed) & UNMARKED != 0
    }

    /// Whether `text`, this memo's, holds a truncation marker: searched for only
    /// when that is not known.
    pub fn marked(&self, text: &str) -> bool {
        !self.unmarked() && marked(text)
    }
}

/// The bits of a [`TALLIED`] estimate rounded up by `round`, of a text of
/// `cjk` CJK characters; none when there are more than the word holds.
fn tallied(round: u8, cjk: usize) -> u64 {
    match u64::try_from(cjk) {
        Ok(cjk) if cjk < 1 << (64 - CJK_SHIFT) => {
            TALLIED | u64::from(round & 3) << ROUND_SHIFT | cjk << CJK_SHIFT
        }
        _ => 0,
    }
}

/// `bit` when `set`.
fn flag(set: bool, bit: u64) -> u64 {
    if set { bit } else { 0 }
}

impl Clone for Counted {
    fn clone(&self) -> Counted {
        Counted(AtomicU64::new(self.0.load(Ordering::Relaxed)))
    }
}

impl PartialEq for Counted {
    fn eq(&self, _: &Counted) -> bool {
        true
    }
}

impl Eq for Counted {}

impl CoreMessage {
    /// A text block with the given identity.
    pub fn text(id: impl Into<Name>, role: Role, text: impl Into<String>) -> Self {
        CoreMessage {
            id: id.into(),
            role,
            content_type: ContentType::Text,
            text: text.into(),
            tool_name: Name::default(),
            tool_call_id: Name::default(),
            opaque: false,
            edit: Edit::None,
            counted: Counted::default(),
            withheld: None,
            ends: None,
        }
    }

    /// A tool call block.
    pub fn tool_call(
        id: impl Into<Name>,
        call_id: impl Into<Name>,
        tool: impl Into<Name>,
        args: impl Into<String>,
    ) -> Self {
        CoreMessage {
            id: id.into(),
            role: Role::Assistant,
            content_type: ContentType::ToolCall,
            text: args.into(),
            tool_name: tool.into(),
            tool_call_id: call_id.into(),
            opaque: false,
            edit: Edit::None,
            counted: Counted::default(),
            withheld: None,
            ends: None,
        }
    }

    /// A tool result block.
    pub fn tool_result(
        id: impl Into<Name>,
        call_id: impl Into<Name>,
        tool: impl Into<Name>,
        output: impl Into<String>,
    ) -> Self {
        CoreMessage {
            id: id.into(),
            role: Role::Tool,
            content_type: ContentType::ToolResult,
            text: output.into(),
            tool_name: tool.into(),
            tool_call_id: call_id.into(),
            opaque: false,
            edit: Edit::None,
            counted: Counted::default(),
            withheld: None,
            ends: None,
        }
    }

    /// A reasoning block.
    pub fn reasoning(id: impl Into<Name>, text: impl Into<String>) -> Self {
        CoreMessage {
            id: id.into(),
            role: Role::Assistant,
            content_type: ContentType::Reasoning,
            text: text.into(),
            tool_name: Name::default(),
            tool_call_id: Name::default(),
            opaque: false,
            edit: Edit::None,
            counted: Counted::default(),
            withheld: None,
            ends: None,
        }
    }

    /// A copy of everything but the words: for the places that keep a
    /// message's identity and figures without its text.
    pub fn without_text(&self) -> CoreMessage {
        CoreMessage {
            id: self.id.clone(),
            role: self.role,
            content_type: self.content_type,
            text: String::new(),
            tool_name: self.tool_name.clone(),
            tool_call_id: self.tool_call_id.clone(),
            opaque: self.opaque,
            edit: self.edit.clone(),
            counted: self.counted.clone(),
            withheld: None,
            ends: None,
        }
    }

    /// The length of its text in bytes, its words read or not (see
    /// [`CoreMessage::withheld`]).
    pub fn text_len(&self) -> usize {
        self.withheld.map_or(self.text.len(), |n| n.get() as usize)
    }

    /// The estimate's tally of its text, its words read or not: read off
    /// the memo when it knows it, or the length when the text is known to
    /// be ASCII (see [`Counted::tally`]); words not read are only ever
    /// those whose memo knows it.
    pub fn tally(&self) -> Tally {
        match self.withheld {
            Some(len) => (self.counted.tally_known()).unwrap_or(Tally::ascii(len.get() as usize)),
            None => self.counted.tally(&self.text),
        }
    }

    /// Lets go of its words, which lie elsewhere to be read back, keeping
    /// what a projection needs of them ([`CoreMessage::withheld`]): their
    /// length, and, when they hold a CJK character, which of their ends
    /// are CJK ones ([`Ends`]). Returns the words.
    pub fn let_go(&mut self) -> String {
        let text = std::mem::take(&mut self.text);
        self.withheld = u32::try_from(text.len()).ok().and_then(NonZeroU32::new);
        self.ends = (self.counted.facts().cjk > 0).then(|| Box::new(Ends::of(&text)));
        text
    }

    /// Takes back its words, let go by [`CoreMessage::let_go`].
    pub fn hold(&mut self, text: String) {
        self.text = text;
        self.withheld = None;
        self.ends = None;
    }

    /// Appends a ref tag as `tag::append` lays it out.
    pub fn append_tag(&mut self, tag: &str) {
        let start = self.text.len();
        super::tag::append(&mut self.text, tag);
        let suffix = self.text[start..].to_string();
        self.counted = Counted::default();
        self.edit = match std::mem::take(&mut self.edit) {
            Edit::None => Edit::Tagged(suffix),
            Edit::Tagged(before) => Edit::Tagged(before + &suffix),
            other => other,
        };
    }

    /// Replaces the text with `text`, recording why.
    pub fn replace_text(&mut self, text: String, why: Edit) {
        self.text = text;
        self.edit = why;
        self.counted = Counted::default();
    }

    /// Whether this is user-side prose (not an image or provider item).
    pub fn is_user_text(&self) -> bool {
        self.role == Role::User && self.content_type == ContentType::Text && !self.opaque
    }

    /// Whether this is a call of the Compress tool.
    pub fn is_compress_call(&self) -> bool {
        self.content_type == ContentType::ToolCall && self.tool_name == COMPRESS_TOOL
    }

    /// Whether this is a Compress call or the result answering one.
    pub fn is_compress(&self) -> bool {
        self.tool_name == COMPRESS_TOOL
            && matches!(
                self.content_type,
                ContentType::ToolCall | ContentType::ToolResult
            )
    }

    /// Whether a ref tag is appended to this block when it is rendered:
    /// user text and tool results, never model output or instructions.
    pub fn is_taggable(&self) -> bool {
        !self.opaque
            && matches!(
                (self.role, self.content_type),
                (Role::User, ContentType::Text) | (_, ContentType::ToolResult)
            )
    }
}

/// Where the task is: the first user prose of a view or history. It stays
/// visible whatever covers it, so a summary never takes the instructions
/// the session started from.
pub fn task_index(messages: &[CoreMessage]) -> Option<usize> {
    messages.iter().position(CoreMessage::is_user_text)
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// The estimate kept with a message is the text's, and so is the
        /// tally read off the memo: by its length only when the text is
        /// all ASCII, which the memo then says.
        #[test]
        fn the_memo_tallies_as_the_text_does(text in "(\\PC|[a-z ]{0,20}|[中文한]){0,40}") {
            let m = CoreMessage::tool_result("r", "c", "Read", text.clone());
            let tokenizer = Tokenizer::Estimate;
            proptest::prop_assert_eq!(m.counted.of(tokenizer, &m.text), tokenizer.count(&text));
            proptest::prop_assert_eq!(m.counted.ascii(), text.is_ascii());
            proptest::prop_assert_eq!(m.counted.tally(&m.text), Tally::of(&text));
            let fresh = CoreMessage::tool_result("r", "c", "Read", text.clone());
            proptest::prop_assert_eq!(fresh.counted.tally(&fresh.text), Tally::of(&text));
            proptest::prop_assert_eq!(fresh.counted.of(tokenizer, &text), tokenizer.count(&text));
            proptest::prop_assert_eq!(fresh.counted.ascii(), text.is_ascii());
        }
    }

    proptest::proptest! {
        /// The tally of a text, in any script, is told from its estimate,
        /// how it was rounded and its CJK characters, learned in one read
        /// and kept through a cache's flags; of one counted by another
        /// counter it is not known.
        #[test]
        fn the_tally_of_a_text_follows_from_its_count(text in "(\\PC|[a-z ]{0,20}|[é→中]){0,40}") {
            let m = CoreMessage::tool_result("r", "c", "Read", text.clone());
            m.counted.learn(&text);
            let (tally, chars) = (Tally::of(&text), text.chars().count());
            proptest::prop_assert_eq!(m.counted.tally_known(), Some(tally));
            proptest::prop_assert_eq!(m.counted.chars(), Some(chars));
            let facts = m.counted.facts();
            proptest::prop_assert_eq!(facts.cjk, tally.cjk());
            let tokens = Tokenizer::Estimate.count(&text);
            let kept = Counted::known_with(Tokenizer::Estimate, tokens, facts);
            proptest::prop_assert_eq!(kept.facts(), facts);
            proptest::prop_assert_eq!(kept.tally_known(), Some(tally));
            proptest::prop_assert_eq!(Counted::known_with(Tokenizer::O200k, tokens, facts).chars(), None);
            m.counted.of(Tokenizer::O200k, &text);
            proptest::prop_assert_eq!(m.counted.chars(), None);
            proptest::prop_assert_eq!(m.counted.ascii(), text.is_ascii());
        }

        /// Words let go keep their tally and, when they hold CJK
        /// characters, their ends; taken back, they are as they were.
        #[test]
        fn words_let_go_keep_what_a_cut_needs(text in "(\\PC|[a-z ]{0,20}|[é→中]){1,40}") {
            let mut m = CoreMessage::tool_result("r", "c", "Read", text.clone());
            m.counted.learn(&text);
            let whole = m.clone();
            let words = m.let_go();
            proptest::prop_assert_eq!(&words, &text);
            proptest::prop_assert_eq!((m.text_len(), m.tally()), (text.len(), Tally::of(&text)));
            let cjk = Tally::of(&text).cjk() > 0;
            let ends = cjk.then(|| Ends::of(&text));
            proptest::prop_assert_eq!(m.ends.as_deref(), ends.as_ref());
            m.hold(words);
            proptest::prop_assert_eq!(m, whole);
        }
    }

    #[test]
    fn a_changed_text_is_counted_again() {
        let mut m = CoreMessage::text("u", Role::User, "plain words");
        assert_eq!(m.counted.of(Tokenizer::Estimate, &m.text), 3);
        assert!(m.counted.ascii());
        m.append_tag("认证");
        assert!(!m.counted.ascii());
        assert_eq!(
            m.counted.of(Tokenizer::Estimate, &m.text),
            Tokenizer::Estimate.count(&m.text)
        );
        assert!(!m.counted.ascii());
        m.replace_text("中".into(), Edit::Truncated(String::new()));
        assert_eq!(m.counted.of(Tokenizer::Estimate, &m.text), 1);
    }

    #[test]
    fn another_counter_counts_afresh_and_the_facts_stay() {
        let m = CoreMessage::text("u", Role::User, "abcdefgh");
        m.counted.learn(&m.text);
        assert_eq!(m.counted.of(Tokenizer::Estimate, &m.text), 2);
        let exact = Tokenizer::O200k.count(&m.text);
        assert_eq!(m.counted.of(Tokenizer::O200k, &m.text), exact);
        assert!(m.counted.ascii() && m.counted.unmarked());
        assert_eq!(m.counted.of(Tokenizer::Estimate, &m.text), 2);
        let facts = Facts {
            ascii: true,
            unmarked: false,
            round: Some(1),
            cjk: 0,
        };
        let known = Counted::known_with(Tokenizer::O200k, 7, facts);
        assert_eq!(known.of(Tokenizer::O200k, "ignored"), 7);
        assert!(known.ascii() && !known.unmarked());
        assert_eq!(
            Counted::known(Tokenizer::Estimate, 5).of(Tokenizer::O200k, "ab"),
            1
        );
    }

    #[test]
    fn one_read_learns_the_count_and_the_facts_once() {
        let marked = format!("head {} tail", super::super::marker::MARKER);
        for (text, ascii, unmarked) in [
            ("plain output", true, true),
            ("sortie é", false, true),
            (marked.as_str(), true, false),
        ] {
            let m = CoreMessage::tool_result("r", "c", "Read", text);
            m.counted.learn(text);
            assert_eq!(
                m.counted.of(Tokenizer::Estimate, "not read"),
                Tokenizer::Estimate.count(text)
            );
            assert_eq!(
                (m.counted.ascii(), m.counted.unmarked()),
                (ascii, unmarked),
                "{text}"
            );
            assert_eq!(m.counted.marked(text), !unmarked);
            // Learned once: a memo already holding a count is left as it is.
            m.counted.learn("中文 and a different text");
            assert_eq!(m.counted.ascii(), ascii);
        }
        // Unknown, the marker is searched for.
        let m = CoreMessage::tool_result("r", "c", "Read", marked.clone());
        assert!(m.counted.marked(&m.text) && !m.counted.unmarked());
    }
}
