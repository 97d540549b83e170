//! Tool results a turn's view holds without their words until the view is
//! done: most of a long session's bytes are tool output, and most of that
//! is cut or left out before the view goes out, so copying it into the view
//! first would copy it for nothing.
//!
//! A held result is a copy of its history message with an empty text; the
//! original stays in the history, borrowed. Its ref tag, its count and its
//! length are kept here as the view's steps ask for them, and a cut is
//! measured on the original (see [`truncate`](super::truncate)) without
//! being built; a cut an earlier turn made of the same output is taken
//! back instead while it still fits (see [`KeptCut`]). When the view is
//! done, what is still in it gets its text: the words copied in and tagged,
//! or its cut built. A result whose words the history does not hold
//! ([`CoreMessage::withheld`]) is decided on by its length, tally and ends
//! alone, and left for the host to fill in ([`Unfilled`]).

use std::cell::Cell;

use crate::engine::model::config::Config;
use crate::engine::model::identity::{IdMap, Places};
use crate::engine::model::marker::marked;
use crate::engine::model::message::{
    COMPRESS_TOOL, ContentType, CoreMessage, Counted, Edit, Facts,
};
use crate::engine::model::tag;
use crate::engine::model::tokenizer::Tokenizer;
use crate::engine::model::tokens::{self, Tally};

use super::truncate::{self, Body, Cut, KeptCut, fingerprint};

/// The results held without their words, by id. One made by `default`
/// holds nothing: its copies are whole.
#[derive(Debug, Default)]
pub struct DeferredOutputs<'a> {
    /// What is held of each result, in the order they were copied; one
    /// worded since stays, no longer held, so places do not move.
    held: Vec<Held<'a>>,
    /// Places in `held` by id: every pass over a long view looks each
    /// result up, and a table of places stays in cache where a map of ids
    /// and what is held of them did not.
    index: Places,
    /// How many of `held` are still held.
    live: usize,
    /// The place after the last one looked up: the passes over a view take
    /// its results in order, so the next one looked for is most often
    /// there, and found without hashing its id.
    next: Cell<usize>,
    /// Cuts an earlier turn made, by id, to take back (see [`KeptCut`]);
    /// `None` in one that holds nothing.
    kept: Option<&'a IdMap<'a, KeptCut>>,
    /// The cuts of held results made this turn, for the next to take back.
    made: Vec<(&'a str, KeptCut)>,
    /// The results in view whose words the history did not hold.
    unfilled: Vec<Unfilled>,
}

/// Whether a projection can be handed `m` without its `len` bytes of words
/// ([`CoreMessage::withheld`]) and decide on it as it would with them: a
/// tool result (not a Compress answer, whose words the host's books read),
/// counted by the estimate, whose tally is known (its characters of each
/// kind then follow from its count: see [`Facts`]), known to hold no
/// marker, and from a tool named short enough that its ref tag is shorter
/// than what a cut keeps. Its length, its tally and, when it holds CJK
/// characters, its ends ([`CoreMessage::ends`], taken when its words are
/// let go) are then all a projection reads of it.
pub fn may_withhold(m: &CoreMessage, len: usize, tokenizer: Tokenizer) -> bool {
    may_withhold_knowing(m, m.counted.facts(), len, tokenizer)
}

/// [`may_withhold`], with what is known of the text given apart from its
/// count ([`Facts`]): whether it holds no marker, and its tally.
pub fn may_withhold_knowing(
    m: &CoreMessage,
    facts: Facts,
    len: usize,
    tokenizer: Tokenizer,
) -> bool {
    facts.round.is_some() && facts.unmarked && may_withhold_once_read(m, len, tokenizer)
}

/// What [`may_withhold`] asks that can be told without reading the words:
/// a reader can hand `m`'s words to another thread on this alone, and have
/// them back should they hold a marker or too many CJK characters for
/// their tally to be kept.
pub fn may_withhold_once_read(m: &CoreMessage, len: usize, tokenizer: Tokenizer) -> bool {
    m.content_type == ContentType::ToolResult
        && m.tool_name != COMPRESS_TOOL
        && m.tool_name.len() <= MAX_WITHHELD_TOOL_NAME
        && tokenizer == Tokenizer::Estimate
        && len > 0
        && u32::try_from(len).is_ok()
}

/// The longest tool name [`may_withhold`] takes: its tag (a ref, a figure
/// and the name, about fifty bytes more) stays shorter than the fewest
/// characters a cut keeps ([`truncate::LAST_RESORT_KEEP_CHARS`]).
const MAX_WITHHELD_TOOL_NAME: usize = 256;

/// A tool result in view whose words the history did not hold
/// ([`CoreMessage::withheld`]): its text is left empty, for the host to
/// read the words and [`Unfilled::fill`] it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unfilled {
    /// Its place in the view.
    pub at: usize,
    /// The length of its words, in bytes.
    pub len: usize,
    suffix: String,
    cut: Option<Cut>,
}

impl Unfilled {
    /// Gives `m`, the view's message at [`Unfilled::at`], its text from
    /// `words`, the original's: what it would have been, had they been read.
    pub fn fill(&self, m: &mut CoreMessage, words: &str) {
        dress(m, words, &self.suffix, self.cut.as_ref());
    }
}

/// Gives a view's copy `m` its text from its original's `words` and the
/// `suffix` its tag adds: cut, or whole and tagged, its count kept.
fn dress(m: &mut CoreMessage, words: &str, suffix: &str, cut: Option<&Cut>) {
    if let Some(c) = cut {
        m.text = c.text(words, suffix);
        return;
    }
    let counted = m.counted.clone();
    m.text = words.to_string();
    if !suffix.is_empty() {
        m.append_tag(tag::of_suffix(suffix));
    }
    m.counted = counted;
}

#[derive(Debug)]
struct Held<'a> {
    original: &'a CoreMessage,
    /// False once its words were copied in.
    live: bool,
    /// What its ref tag, once given, adds to the text (see
    /// [`tag::suffix`]); empty while it has none. The tag itself is not
    /// kept beside it: a long view holds tens of thousands of results,
    /// most of them left out before it goes.
    suffix: String,
    /// Characters of the text with the tag, once counted.
    chars: Option<usize>,
    /// The cut made, once made: its text is built when the view is done.
    cut: Option<Cut>,
}

impl Held<'_> {
    /// What a cut of it is made of: its words, or what is known of them
    /// when they were not read.
    fn body(&self) -> Body<'_> {
        match self.original.withheld {
            Some(len) => Body::Unread {
                len: len.get() as usize,
                tally: self.original.tally(),
                ends: self.original.ends.as_deref(),
            },
            None => Body::Words(&self.original.text, &self.original.counted),
        }
    }
}

impl<'a> DeferredOutputs<'a> {
    /// One that holds the tool results it copies, and takes back the
    /// cuts in `kept` that still fit.
    pub fn holding(kept: &'a IdMap<'a, KeptCut>) -> DeferredOutputs<'a> {
        DeferredOutputs {
            held: Vec::new(),
            index: Places::default(),
            live: 0,
            next: Cell::new(0),
            kept: Some(kept),
            made: Vec::new(),
            unfilled: Vec::new(),
        }
    }

    /// Room for `results` tool results to be held: a long view's list grown
    /// by pushing was copied each time it doubled.
    pub fn reserve(&mut self, results: usize) {
        if self.kept.is_some() {
            self.held.reserve_exact(results);
            self.index.reserve(results);
        }
    }

    /// The view's copy of `m`: without its words when it is a tool result
    /// and this holds them.
    pub fn copy(&mut self, m: &'a CoreMessage) -> CoreMessage {
        if self.kept.is_none() || m.content_type != ContentType::ToolResult {
            return m.clone();
        }
        let held = Held {
            original: m,
            live: true,
            suffix: String::new(),
            chars: None,
            cut: None,
        };
        let list = &mut self.held;
        match self
            .index
            .find_or_add(&m.id, list.len(), |at| list[at].original.id.as_str())
        {
            None => {
                list.push(held);
                self.live += 1;
            }
            Some(at) => {
                self.live += usize::from(!list[at].live);
                list[at] = held;
            }
        }
        m.without_text()
    }

    /// Whether `m` may be held: only tool results are, so other messages
    /// are not looked up.
    fn may_hold(&self, m: &CoreMessage) -> bool {
        m.content_type == ContentType::ToolResult && self.live > 0
    }

    /// Where what is held of `m` is: found once, for a pass that asks
    /// several things of it (see [`DeferredOutputs::marked_at`]), or asks out of
    /// the view's order, where each lookup would hash its id.
    pub fn place(&self, m: &CoreMessage) -> Option<usize> {
        if !self.may_hold(m) {
            return None;
        }
        let id_at = |at: usize| self.held.get(at).map(|h| h.original.id.as_str());
        let at = self.index.find_near(&m.id, self.next.get(), id_at)?;
        self.next.set(at + 1);
        self.held[at].live.then_some(at)
    }

    /// What is held of `m`.
    fn held_as(&self, m: &CoreMessage) -> Option<&Held<'a>> {
        self.held_at(self.place(m))
    }

    /// What is held of `m`, to change.
    fn held_mut(&mut self, m: &CoreMessage) -> Option<&mut Held<'a>> {
        let at = self.place(m);
        self.held_at_mut(at)
    }

    /// What is held at `at`, a message's [`DeferredOutputs::place`], while it is.
    fn held_at(&self, at: Option<usize>) -> Option<&Held<'a>> {
        self.held.get(at?).filter(|h| h.live)
    }

    /// [`DeferredOutputs::held_at`], to change.
    fn held_at_mut(&mut self, at: Option<usize>) -> Option<&mut Held<'a>> {
        self.held.get_mut(at?).filter(|h| h.live)
    }

    /// Gives a held message its ref tag, asked of `tag` with the original
    /// (`None` for none). False when `m` is not held.
    pub fn tag(
        &mut self,
        m: &CoreMessage,
        tag: impl FnOnce(&CoreMessage) -> Option<String>,
    ) -> bool {
        let Some(h) = self.held_mut(m) else {
            return false;
        };
        h.suffix =
            tag(h.original).map_or(String::new(), |t| tag::suffix(h.original.text_len(), &t));
        true
    }

    /// Counts a held message's words with its tag, as if both were in its
    /// text: its count, as any message's, is taken before the view is
    /// measured (a result cut again is counted by its cut instead).
    pub fn count(&mut self, m: &mut CoreMessage, cfg: &Config) {
        let Some(h) = self.held_mut(m).filter(|h| h.cut.is_none()) else {
            return;
        };
        let text = h.original.text.as_str();
        let count = match (cfg.tokenizer, h.suffix.is_empty()) {
            (_, true) => cfg.tokens(h.original),
            (Tokenizer::Estimate, false) => {
                // Every character is tallied as one kind or the other; the
                // original's tally is read off its length when it is ASCII.
                let tally = h.original.tally() + Tally::of(&h.suffix);
                h.chars = Some(tally.chars());
                tally.tokens()
            }
            (_, false) => cfg.count(&[text, h.suffix.as_str()].concat()),
        };
        m.counted = Counted::known(cfg.tokenizer, count);
    }

    /// Characters in a message's text, a held one's as it will be.
    pub fn chars(&self, m: &CoreMessage) -> usize {
        match self.held_as(m) {
            Some(Held { cut: Some(c), .. }) => c.chars,
            // The original's characters read off its length when it is
            // known to be ASCII, as its count with a tag is.
            Some(h) => h
                .chars
                .unwrap_or_else(|| h.original.tally().chars() + tokens::chars(&h.suffix)),
            // Read off the length where the text is known to be ASCII,
            // or off its memo where that knows its tally: most of a long
            // history's are, and scanning them all was a pass over every
            // word of it.
            None if m.counted.ascii() => m.text.len(),
            None => (m.counted.chars()).unwrap_or_else(|| tokens::chars(&m.text)),
        }
    }

    /// Whether this turn has cut the held message whose
    /// [`DeferredOutputs::place`] is `at`.
    pub fn cut_made_at(&self, at: Option<usize>) -> bool {
        matches!(self.held_at(at), Some(Held { cut: Some(_), .. }))
    }

    /// Whether the text of `m`, whose [`DeferredOutputs::place`] is `at`, is a
    /// cut result already.
    pub fn marked_at(&self, at: Option<usize>, m: &CoreMessage) -> bool {
        match self.held_at(at) {
            // A cut's note carries the marker.
            Some(Held { cut: Some(_), .. }) => true,
            Some(h) => h.original.counted.marked(&h.original.text) || marked(&h.suffix),
            None => m.counted.marked(&m.text),
        }
    }

    /// Cuts a held message, `m` at `at` (its [`DeferredOutputs::place`]), to
    /// `keep` characters at each end, from its original and its tag, and
    /// returns what it saved; the message takes the cut's count, and its
    /// text is built when the view is done. `None` when `m` is not held, or
    /// no longer: a tag as long as what a cut keeps (a tool named at that
    /// length) has the words copied in, to be cut as any message's are
    /// (words not read are never named at that length: see
    /// [`CoreMessage::withheld`]). `Some(None)` when there is nothing to cut.
    pub fn cut_at(
        &mut self,
        at: Option<usize>,
        m: &mut CoreMessage,
        keep: usize,
        cfg: &Config,
    ) -> Option<Option<usize>> {
        let kept = self.kept;
        let h = self.held_at_mut(at)?;
        let long_tag = tokens::chars(&h.suffix) >= keep;
        if long_tag && h.original.withheld.is_none() {
            self.word(m);
            return None;
        }
        if h.cut.is_some() || long_tag {
            return Some(None);
        }
        let (body, text_len) = (h.body(), h.original.text_len());
        let id = h.original.id.as_str();
        let suffix = fingerprint(&h.suffix);
        let again = kept.and_then(|k| k.get(id)).filter(|k| {
            (k.tokenizer, k.keep, k.text_len, k.suffix) == (cfg.tokenizer, keep, text_len, suffix)
                && body.fits(&k.cut)
        });
        let joined = || cfg.count(&[h.original.text.as_str(), h.suffix.as_str()].concat());
        let Some(cut) = again
            .map(|k| k.cut)
            .or_else(|| truncate::cut_pieces(body, &h.suffix, keep, cfg, joined))
        else {
            return Some(None);
        };
        let saved = cut.saved();
        m.edit = Edit::Truncated(h.suffix.clone());
        m.counted = Counted::known(cfg.tokenizer, cut.after);
        h.cut = Some(cut);
        self.made.push((
            id,
            KeptCut {
                tokenizer: cfg.tokenizer,
                keep,
                text_len,
                suffix,
                cut,
            },
        ));
        Some(Some(saved))
    }

    /// The cuts of held results made this turn, taken back or not.
    pub fn made(&self) -> impl Iterator<Item = (&'a str, KeptCut)> + '_ {
        self.made.iter().copied()
    }

    /// Copies a held message's words in, tagged as any message's are: it
    /// is no longer held. Only for one whose words were read (those not
    /// read are listed by [`DeferredOutputs::word_all`]).
    fn word(&mut self, m: &mut CoreMessage) {
        if let Some(at) = self.place(m) {
            self.word_at(at, m);
        }
    }

    /// [`DeferredOutputs::word`] of `m`, held at `at` (its [`DeferredOutputs::place`]).
    fn word_at(&mut self, at: usize, m: &mut CoreMessage) {
        let h = &mut self.held[at];
        debug_assert!(h.original.withheld.is_none(), "{}: no words to copy", m.id);
        h.live = false;
        self.live -= 1;
        let h = &*h;
        dress(m, &h.original.text, &h.suffix, h.cut.as_ref());
    }

    /// Copies the words of every message of `view` still held; those whose
    /// words were not read are left empty, and listed for the host to fill
    /// in ([`DeferredOutputs::unfilled`]).
    pub fn word_all(&mut self, view: &mut [CoreMessage]) {
        if self.live == 0 {
            return;
        }
        for (i, m) in view.iter_mut().enumerate() {
            let Some(at) = self.place(m) else {
                continue;
            };
            let h = &mut self.held[at];
            let Some(len) = h.original.withheld else {
                self.word_at(at, m);
                continue;
            };
            h.live = false;
            self.live -= 1;
            self.unfilled.push(Unfilled {
                at: i,
                len: len.get() as usize,
                suffix: std::mem::take(&mut h.suffix),
                cut: h.cut,
            });
        }
    }

    /// The results in view left without their words by
    /// [`DeferredOutputs::word_all`], in the view's order.
    pub fn unfilled(&mut self) -> Vec<Unfilled> {
        std::mem::take(&mut self.unfilled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The longest tag a result whose words were not read can have (the
    /// highest ref, the widest figure, the longest name it takes) is
    /// shorter than what the last resort's cut keeps: such a result is
    /// always cut from its length, never worded first.
    #[test]
    fn a_withheld_result_s_tag_is_shorter_than_any_cut_keeps() {
        let name = "n".repeat(MAX_WITHHELD_TOOL_NAME);
        let tag = tag::render("m99999", usize::MAX / 2, Some(&name));
        let suffix = tag::suffix(1, &tag);
        assert!(
            tokens::chars(&suffix) < truncate::LAST_RESORT_KEEP_CHARS,
            "{suffix}"
        );
        let m = CoreMessage::tool_result("r", "c", name.as_str(), "");
        m.counted.learn("plain words");
        assert!(may_withhold(&m, 11, Tokenizer::Estimate));
        let longer = CoreMessage::tool_result("r", "c", format!("{name}n"), "");
        longer.counted.learn("plain words");
        assert!(!may_withhold(&longer, 11, Tokenizer::Estimate));
        assert!(!may_withhold(&m, 11, Tokenizer::O200k));
        let marked = CoreMessage::tool_result("r", "c", "Read", "");
        marked.counted.learn(crate::engine::model::marker::MARKER);
        assert!(!may_withhold(&marked, 11, Tokenizer::Estimate));
    }
}
