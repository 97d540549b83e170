//! Message refs (`m00042`) and block ids (`b5`): parsing, rendering, assignment.
//!
//! A ref is handed out the first time a message is seen and never changes
//! after: not on compression, not on rebuild, not on restart. Models keep refs
//! in their working memory; a ref that moved would point them at the wrong text.

use super::message::CoreMessage;
use super::state::{MessageRefs, RefName};
use super::summary::SUMMARY_ID_PREFIX;

/// The lowest and highest ref numbers.
pub const MIN_REF: u32 = 1;
/// Refs are five digits wide, so this is the last one.
pub const MAX_REF: u32 = 99_999;
/// The by-raw entry of a hard-protected message: it is known, but has no number.
pub const BLOCKED: &str = "BLOCKED";
/// Id of the nudge message appended to a view.
pub const NUDGE_ID: &str = "noa_nudge";
/// Id of the note that stands for messages the last resort left out.
pub const OMITTED_ID: &str = "noa_omitted";

/// `42` → `m00042`; `None` outside `1..=99999`.
pub fn index_to_ref(index: u32) -> Option<String> {
    (MIN_REF..=MAX_REF)
        .contains(&index)
        .then(|| RefName::numbered(index).to_string())
}

/// The number of a ref in its five-digit form (`m00042` → 42), and `None`
/// for any other string: the ref [`index_to_ref`] gives back is this one.
pub fn canonical_index(r: &str) -> Option<u32> {
    let digits = r.strip_prefix('m')?.as_bytes();
    if digits.len() != 5 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = digits.iter().fold(0, |n, &d| n * 10 + u32::from(d - b'0'));
    (n >= MIN_REF).then_some(n)
}

/// Parses a ref leniently: surrounding space and case are ignored and leading
/// zeros are optional (`m1`, ` M00007 `), but the number must be in range.
pub fn ref_to_index(s: &str) -> Option<u32> {
    let digits = s.trim().strip_prefix(['m', 'M'])?;
    let significant = digits.trim_start_matches('0');
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || significant.len() > 5 {
        return None;
    }
    let n: u32 = significant.parse().ok()?;
    (MIN_REF..=MAX_REF).contains(&n).then_some(n)
}

/// Normalises a ref to its canonical five-digit form.
pub fn normalize_ref(s: &str) -> Option<String> {
    ref_to_index(s).and_then(index_to_ref)
}

/// Parses a block id: `b5`, `b005`, ` B12 `, a bare `5`, or `b3(T2)` as
/// printed in panels. Returns the canonical `bN`.
pub fn parse_block_id(s: &str) -> Option<String> {
    let mut s = s.trim().to_ascii_lowercase();
    if let Some(open) = s.find("(t")
        && s.ends_with(')')
        && s[open + 2..s.len() - 1].bytes().all(|b| b.is_ascii_digit())
    {
        s.truncate(open);
    }
    let digits = s.strip_prefix('b').unwrap_or(&s);
    let significant = digits.trim_start_matches('0');
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || significant.len() > 9 {
        return None;
    }
    let n: u64 = significant.parse().ok()?;
    (n >= 1).then(|| format!("b{n}"))
}

/// One end of a Compress range: a message ref or a block id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Boundary {
    /// A message ref, canonical (`m00012`).
    Message(String),
    /// A block id, canonical (`b5`).
    Block(String),
}

/// Parses a range end. A bare number names a block, as panels print them.
pub fn parse_boundary(s: &str) -> Option<Boundary> {
    if let Some(r) = normalize_ref(s) {
        return Some(Boundary::Message(r));
    }
    parse_block_id(s).map(Boundary::Block)
}

/// Whether a message is one noa put into the view itself (a summary, the
/// nudge, the note on omitted messages): those are not history and get no ref.
pub fn is_synthetic(id: &str) -> bool {
    id.starts_with(SUMMARY_ID_PREFIX) || id == NUDGE_ID || id == OMITTED_ID
}

/// What [`assign`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Assigned {
    /// Refs handed out.
    pub new: usize,
    /// Messages left without a ref because every number up to
    /// [`MAX_REF`] is taken: they cannot be named in a Compress call, so
    /// they stay in view until the session ends.
    pub unnumbered: usize,
}

/// The usable refs of a history, by number: what [`assign`] finds as it
/// looks each message up, so that nothing after it looks them up again.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Held {
    numbered: Vec<bool>,
    /// Refs in another form than five digits, which only a hand-edited map
    /// holds.
    odd: Vec<String>,
}

impl Held {
    /// The usable refs of `history` in `refs`, looked up one by one.
    #[cfg(test)]
    pub fn of(refs: &MessageRefs, history: &[CoreMessage]) -> Held {
        let mut held = Held::default();
        for r in history.iter().filter_map(|m| refs.usable(&m.id)) {
            held.add(r);
        }
        held
    }

    fn add(&mut self, r: &str) {
        match canonical_index(r) {
            Some(n) => self.add_number(n),
            None => self.odd.push(r.to_string()),
        }
    }

    /// The list grows to the highest number held, not to every number
    /// there could be: a rebuild fills one per replayed call.
    fn add_number(&mut self, n: u32) {
        let n = n as usize;
        if n >= self.numbered.len() {
            self.numbered.resize(n + 1, false);
        }
        self.numbered[n] = true;
    }

    /// Whether a message of the history holds the ref `r`.
    pub fn holds(&self, r: &str) -> bool {
        match canonical_index(r) {
            Some(n) => self.numbered.get(n as usize).copied().unwrap_or(false),
            None => self.odd.iter().any(|o| o == r),
        }
    }
}

/// Gives every message that has none yet a ref, starting the search at
/// `next` and skipping numbers already taken. Messages `is_protected` accepts
/// are recorded as [`BLOCKED`] and use no number. Once the ref space is
/// exhausted the rest are counted as unnumbered, and no error is raised: the
/// turn still goes out. The refs the messages hold, old and new, are added
/// to `held` (those of the history before them, when they are appended).
pub fn assign(
    refs: &mut MessageRefs,
    messages: &[CoreMessage],
    next: u32,
    is_protected: impl Fn(&CoreMessage) -> bool,
    held: &mut Held,
) -> Assigned {
    let mut cursor = next.max(MIN_REF);
    let (mut new, mut unnumbered) = (0, 0);
    // A first turn numbers every message: the map is sized once.
    if refs.is_empty() {
        let highest = cursor as usize - 1 + messages.len();
        refs.reserve(messages.len(), highest.min(MAX_REF as usize) as u32);
    }
    // Where the next message is likely known: just after the one before.
    let mut guess = 0;
    for m in messages {
        if let Some((r, at)) = refs.get_near(&m.id, guess) {
            guess = at + 1;
            if r != BLOCKED {
                held.add(r);
            }
            continue;
        }
        if m.id.is_empty() || is_synthetic(&m.id) {
            continue;
        }
        if is_protected(m) {
            refs.block(&m.id);
            continue;
        }
        let Some(n) = next_free(refs, &mut cursor) else {
            unnumbered += 1;
            continue;
        };
        held.add_number(n);
        refs.insert_numbered(&m.id, n);
        new += 1;
    }
    Assigned { new, unnumbered }
}

fn next_free(refs: &MessageRefs, cursor: &mut u32) -> Option<u32> {
    while *cursor <= MAX_REF {
        let n = *cursor;
        *cursor += 1;
        if !refs.has_number(n) {
            return Some(n);
        }
    }
    None
}

#[cfg(test)]
#[path = "refs_tests.rs"]
mod tests;
