//! Emergency truncation: the mechanical backstop when the model has not
//! compressed in time.
//!
//! Only the view changes; the transcript and the archives keep every output
//! whole. The largest old tool results are cut first, keeping their head and
//! their tail (where errors and summaries usually are), until the view is back
//! under the target. A result cut once stays cut on later turns, so its bytes
//! do not flip back and forth in the provider's prefix cache.

use std::collections::{BTreeMap, BTreeSet};

use crate::engine::model::config::Config;
use crate::engine::model::identity::IdMap;
use crate::engine::model::marker::{MARKER, marked};
use crate::engine::model::message::{ContentType, CoreMessage, Counted, Edit, task_index};
use crate::engine::model::name::Name;
use crate::engine::model::summary::SUMMARY_ID_PREFIX;
use crate::engine::model::tokenizer::Tokenizer;
use crate::engine::model::tokens::{self, ENDS_CHARS, Ends, Tally, push_decimal};

use super::deferred::DeferredOutputs;

/// Results smaller than this many tokens are left alone while larger ones can
/// be cut.
pub const MIN_TOKENS: usize = 1_000;
/// Characters kept at each end of a cut result.
pub const KEEP_CHARS: usize = 2_000;
// Words not read are cut from what their ends hold.
const _: () = assert!(KEEP_CHARS <= ENDS_CHARS);
/// When cutting the large results is not enough, results down to this many
/// tokens are cut too, keeping less of each end.
pub const LAST_RESORT_MIN_TOKENS: usize = 250;
/// Characters kept at each end in that last pass.
pub const LAST_RESORT_KEEP_CHARS: usize = 400;
/// The passes of the last resort, in order: the outputs of so many tokens
/// and more each, and the characters kept at each end of them.
pub(super) const PASSES: [(usize, usize); 2] = [
    (MIN_TOKENS, KEEP_CHARS),
    (LAST_RESORT_MIN_TOKENS, LAST_RESORT_KEEP_CHARS),
];

/// What truncation did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Truncation {
    /// Results cut this turn (newly or again); once messages are left out,
    /// those the view still shows.
    pub count: usize,
    /// Estimated tokens taken out of the view.
    pub saved: usize,
}

impl Truncation {
    fn add(&mut self, saved: usize) {
        self.count += 1;
        self.saved += saved;
    }

    /// Adds what another pass cut.
    pub fn absorb(&mut self, other: Truncation) {
        self.count += other.count;
        self.saved += other.saved;
    }
}

/// Cuts made on earlier turns, made again: a result cut once stays cut.
/// A result the view holds without its words is cut from its original (see
/// [`DeferredOutputs`]); every other held result is counted here. Also returns,
/// for each cut, its place in the view, what it saved, and the history
/// length `first_at` says it was first cut at (0 where it says none).
pub fn reapply(
    view: &mut [CoreMessage],
    deferred: &mut DeferredOutputs,
    (sticky, first_at): (&BTreeSet<Name>, &BTreeMap<Name, usize>),
    cfg: &Config,
) -> (Truncation, Vec<(usize, usize, usize)>) {
    let mut done = Truncation::default();
    let mut each = Vec::new();
    for (i, m) in view.iter_mut().enumerate() {
        // Only tool results are ever cut ([`cut_largest`] takes no other):
        // the others, most of a view, are not looked up. The results are
        // looked up one by one: a view holds at most a window's worth, and
        // a long session has cut tens of thousands, most folded away since,
        // which a table of them all would hash every turn.
        let made = match m.content_type {
            ContentType::ToolResult if sticky.contains(m.id.as_str()) => {
                Some(first_at.get(m.id.as_str()).copied().unwrap_or(0))
            }
            _ => None,
        };
        let Some(made) = made else {
            deferred.count(m, cfg);
            continue;
        };
        let at = deferred.place(m);
        let saved = cut_either((m, at), KEEP_CHARS, cfg, deferred)
            .or_else(|| cut_either((m, at), LAST_RESORT_KEEP_CHARS, cfg, deferred));
        match saved {
            Some(saved) => {
                done.add(saved);
                each.push((i, saved, made));
            }
            None => deferred.count(m, cfg),
        }
    }
    (done, each)
}

/// Cuts the largest tool results before the last `preserve_recent_messages`
/// until the view's estimate (`estimate` now) is down to `target`; first
/// the large ones, then, if that is not enough, the mid-size ones with less
/// kept. Ids cut are added to `sticky`.
pub fn truncate(
    view: &mut [CoreMessage],
    estimate: usize,
    target: usize,
    cfg: &Config,
    sticky: &mut BTreeSet<Name>,
    deferred: &mut DeferredOutputs,
) -> Truncation {
    let protected_from = view.len().saturating_sub(cfg.preserve_recent_messages);
    cut_largest(
        &mut view[..protected_from],
        estimate,
        target,
        cfg,
        sticky,
        deferred,
    )
}

/// The cutting passes over `view`, largest results first, until its
/// estimate is down to `target`. Over the whole view, it is the first step
/// of the last resort: recent outputs are cut too.
pub fn cut_largest(
    view: &mut [CoreMessage],
    estimate: usize,
    target: usize,
    cfg: &Config,
    sticky: &mut BTreeSet<Name>,
    deferred: &mut DeferredOutputs,
) -> Truncation {
    let mut done = Truncation::default();
    // Every output large enough for either pass, sized (a memo) and ordered
    // once, largest first; an output is searched for the marker only when
    // its turn to be cut comes, so the many large enough that the target is
    // reached before them are never read. Each output's place among the
    // held ones is found here, where they come in the view's order and are
    // found without hashing, and outputs this turn has cut already are
    // passed over.
    let mut candidates: Vec<(usize, usize, Option<usize>)> = view
        .iter()
        .enumerate()
        .filter(|(_, m)| m.content_type == ContentType::ToolResult)
        .map(|(i, m)| (i, cfg.tokens(m), deferred.place(m)))
        .filter(|&(_, t, at)| t >= LAST_RESORT_MIN_TOKENS && !deferred.cut_made_at(at))
        .collect();
    candidates.sort_by_key(|&(i, t, _)| (std::cmp::Reverse(t), i));
    for (min_tokens, keep) in PASSES {
        // What the first pass cut is marked by the time the second comes.
        let large = candidates.iter().take_while(|&&(_, t, _)| t >= min_tokens);
        for &(i, _, at) in large {
            if estimate.saturating_sub(done.saved) <= target {
                return done;
            }
            if deferred.marked_at(at, &view[i]) {
                continue;
            }
            if let Some(saved) = cut_either((&mut view[i], at), keep, cfg, deferred) {
                sticky.insert(view[i].id.clone());
                done.add(saved);
            }
        }
    }
    done
}

/// The last step of the last resort, when even cutting every output does
/// not bring the view (estimate `estimate`) down to `target`: leave out the
/// oldest whole exchanges after the task, putting a note in their place
/// that says what is missing and where it is (`note` is given what goes,
/// oldest first). The view stays a valid request: exchanges go whole, and
/// the task, block summaries and the last exchange stay. Returns how many
/// messages were left out; they are dropped where they stand, so a session
/// far over its window is not copied to leave it out.
pub fn omit(
    view: &mut Vec<CoreMessage>,
    estimate: usize,
    target: usize,
    cfg: &Config,
    note: impl Fn(&[&CoreMessage]) -> CoreMessage,
) -> usize {
    let mut left = estimate;
    let spans = crate::engine::model::exchange::spans(view);
    let mut gone = vec![false; view.len()];
    for (start, end) in exchanges_that_may_go(view, &spans) {
        if left <= target {
            break;
        }
        let unit = &view[start..=end];
        left = left.saturating_sub(unit.iter().map(|m| cfg.tokens(m)).sum());
        gone[start..=end].fill(true);
    }
    keep_pairs_together(view, &spans, &mut gone);
    drop_gone(view, gone, note)
}

/// The exchanges the last resort may leave out, oldest first, each by its
/// first and last place among `spans` (see [`exchange::spans`](crate::engine::model::exchange::spans)).
/// The task (the first user message) and whatever precedes it stay, and so
/// do block summaries, which are what the model consolidates next, and the
/// last exchange.
pub(super) fn exchanges_that_may_go(
    view: &[CoreMessage],
    spans: &[(usize, usize)],
) -> Vec<(usize, usize)> {
    let first = task_index(view).map_or(0, |i| spans[i].1 + 1);
    let last_span = spans.last().map_or(0, |s| s.0);
    let mut units = Vec::new();
    let mut at = first;
    while at < last_span {
        let end = spans[at].1;
        if !(view[at..=end].iter()).any(|m| m.id.starts_with(SUMMARY_ID_PREFIX)) {
            units.push((at, end));
        }
        at = end + 1;
    }
    units
}

/// Drops the messages of `view` that `gone` marks, with a note (`note` is
/// given them, oldest first) where the first stood; how many went.
pub(super) fn drop_gone(
    view: &mut Vec<CoreMessage>,
    gone: Vec<bool>,
    note: impl Fn(&[&CoreMessage]) -> CoreMessage,
) -> usize {
    let Some(place) = gone.iter().position(|&g| g) else {
        return 0;
    };
    let omitted: Vec<&CoreMessage> = view
        .iter()
        .zip(&gone)
        .filter(|(_, g)| **g)
        .map(|(m, _)| m)
        .collect();
    let (count, note) = (omitted.len(), note(&omitted));
    let mut gone = gone.into_iter();
    view.retain(|_| !gone.next().unwrap_or(false));
    view.insert(place, note);
    count
}

/// Makes what [`omit`] leaves out keep every call with its results: an
/// exchange (`spans`) is its calls and the results right after them, but a
/// result may stand further on (a Codex rollout can hold a message between
/// a call and its output). A result that stays keeps its call's exchange
/// with it; then every result goes or stays with its call.
pub(super) fn keep_pairs_together(
    view: &[CoreMessage],
    spans: &[(usize, usize)],
    gone: &mut [bool],
) {
    let calls: IdMap<'_, usize> = (view.iter().enumerate())
        .filter(|(_, m)| m.content_type == ContentType::ToolCall)
        .map(|(i, m)| (m.tool_call_id.as_str(), i))
        .collect();
    // Each result with its call's place, looked up once for both passes.
    let answers: Vec<(usize, usize)> = (view.iter().enumerate())
        .filter(|(_, m)| m.content_type == ContentType::ToolResult)
        .filter_map(|(i, m)| Some((i, *calls.get(m.tool_call_id.as_str())?)))
        .collect();
    for &(i, c) in &answers {
        if !gone[i] && gone[c] {
            let (start, end) = spans[c];
            gone[start..=end].iter_mut().for_each(|g| *g = false);
        }
    }
    for &(i, c) in &answers {
        gone[i] = gone[c];
    }
}

/// Cuts one result to `keep` characters at each end; `None` when it is too
/// short for that to save anything.
fn cut(m: &mut CoreMessage, keep: usize, cfg: &Config) -> Option<usize> {
    let c = cut_pieces(Body::Words(&m.text, &m.counted), "", keep, cfg, || {
        cfg.tokens(m)
    })?;
    let text = c.text(&m.text, "");
    // The tag was in the words cut: it ends the tail they keep.
    let tag = match &m.edit {
        Edit::Tagged(suffix) if text.ends_with(suffix.as_str()) => suffix.clone(),
        _ => String::new(),
    };
    m.replace_text(text, Edit::Truncated(tag));
    m.counted = Counted::known(cfg.tokenizer, c.after);
    Some(c.saved())
}

/// [`cut`], from the original when the view holds `m` without its words
/// (at `at`, its [`DeferredOutputs::place`]).
pub(super) fn cut_either(
    (m, at): (&mut CoreMessage, Option<usize>),
    keep: usize,
    cfg: &Config,
    deferred: &mut DeferredOutputs,
) -> Option<usize> {
    match deferred.cut_at(at, m, keep, cfg) {
        Some(saved) => saved,
        None => cut(m, keep, cfg),
    }
}

/// A cut of a result: where its kept head ends and its kept tail starts,
/// and its figures; the note put between them is written from the figures
/// when the text is built. Plain numbers, so a later turn can take it back
/// rather than read the output through again (see [`KeptCut`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cut {
    /// Bytes of the head kept.
    pub head_end: usize,
    /// Where the tail kept starts.
    pub tail_start: usize,
    /// The count of the whole, as the note gives it.
    pub before: usize,
    /// The count of what was cut out, as the note gives it.
    pub cut_tokens: usize,
    /// Its count.
    pub after: usize,
    /// Characters in its text.
    pub chars: usize,
    /// Whether `head_end` and `tail_start` count characters rather than
    /// bytes: a cut of a text that is not all ASCII, so that a cut of its
    /// words not read is the cut of its words read.
    /// Its bytes are placed when its text is built.
    pub in_chars: bool,
}

impl Cut {
    /// The text of the cut of `text` followed by `suffix`, built in one
    /// allocation.
    pub fn text(&self, text: &str, suffix: &str) -> String {
        let (head_end, tail_start) = self.ends(text);
        let (head, tail) = (&text[..head_end], &text[tail_start..]);
        let mut cut = String::with_capacity(head.len() + NOTE_LEN + tail.len() + suffix.len());
        cut.push_str(head);
        write_note(&mut cut, self.cut_tokens, self.before);
        cut.push_str(tail);
        cut.push_str(suffix);
        cut
    }

    /// Whether its ends fall on character boundaries of `text`, in order:
    /// a cut kept from another turn is never sliced at a wrong place.
    pub fn fits(&self, text: &str) -> bool {
        match self.in_chars {
            true => self.head_end <= self.tail_start && self.tail_start <= tokens::chars(text),
            false => {
                self.head_end <= self.tail_start
                    && text.is_char_boundary(self.head_end)
                    && text.is_char_boundary(self.tail_start)
            }
        }
    }

    /// The byte offsets of its ends in `text`, which it [`fits`](Cut::fits).
    fn ends(&self, text: &str) -> (usize, usize) {
        match self.in_chars {
            false => (self.head_end, self.tail_start),
            true => {
                let at = |n: usize| text.char_indices().nth(n).map_or(text.len(), |(i, _)| i);
                (at(self.head_end), at(self.tail_start))
            }
        }
    }

    /// What the cut saves.
    pub fn saved(&self) -> usize {
        self.before.saturating_sub(self.after)
    }
}

/// What stands between a cut's head and tail.
fn note(cut_tokens: usize, before: usize) -> String {
    let mut note = String::with_capacity(NOTE_LEN);
    write_note(&mut note, cut_tokens, before);
    note
}

/// Room for a note with its two figures.
const NOTE_LEN: usize = 180;

/// Appends the note to `out`, piece by piece: every turn builds one for
/// every cut output it sends.
fn write_note(out: &mut String, cut_tokens: usize, before: usize) {
    out.push_str("\n\n...");
    out.push_str(MARKER);
    out.push_str(" — about ");
    push_decimal(out, cut_tokens);
    out.push_str(" tokens cut from the middle of ~");
    push_decimal(out, before);
    out.push_str("; the transcript keeps the full output]...\n\n");
}

/// A cut made on a turn, kept for the next: a result cut once is cut again
/// every turn, the same way, and taking the cut back saves reading the
/// whole output for the marker and its count. It is taken back only for
/// the same counter, keep, text length and tag; the caller vouches that
/// the text is the same (the transcript's prefix it was read from is
/// unchanged).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeptCut {
    /// The counter its figures are on.
    pub tokenizer: Tokenizer,
    /// Characters kept at each end.
    pub keep: usize,
    /// Bytes of the text cut.
    pub text_len: usize,
    /// `fingerprint` of the tag that followed it.
    pub suffix: u64,
    /// The cut.
    pub cut: Cut,
}

/// A 64-bit fingerprint (FNV-1a) of a cut's suffix: the ref tag, a few
/// dozen bytes, whose figure and name a kept cut must still match.
pub fn fingerprint(suffix: &str) -> u64 {
    suffix.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// `body` as words not read when what the memo knows of them settles the
/// cut: an estimate's count of a text with no marker and no CJK characters,
/// whose tally is known.
fn unread_when_known<'b>(body: Body<'b>, cfg: &Config) -> Body<'b> {
    match body {
        Body::Words(text, memo) if cfg.tokenizer == Tokenizer::Estimate && memo.unmarked() => {
            match memo.tally_known() {
                Some(tally) if tally.cjk() == 0 => Body::Unread {
                    len: text.len(),
                    tally,
                    ends: None,
                },
                _ => body,
            }
        }
        _ => body,
    }
}

/// Whether `body` followed by `suffix` is long enough to cut to `keep`
/// characters at each end, and holds no cut marker already.
fn worth_cutting(body: Body, suffix: &str, keep: usize) -> bool {
    // More than `n` characters, not counted when the length settles it (a
    // character takes one to four bytes).
    let n = 2 * keep + 200;
    let len = body.len() + suffix.len();
    let longer = len > n && (len / 4 > n || body.chars() + tokens::chars(suffix) > n);
    // The marker has no line break, and a tag starts on a line of its own
    // (or is the whole body): it cannot straddle the two.
    longer && !body.marked() && !marked(suffix)
}

/// What a cut takes out of a text, as [`cut_pieces`] counts it.
struct Middle {
    /// The text's tokens, whole.
    before: usize,
    /// The middle's tokens.
    cut_tokens: usize,
    /// The middle's characters, when its tally is taken.
    chars: Option<usize>,
}

/// The middle of `body` at `range`, between the `kept` tallies of its head,
/// its tail and the suffix: from the tallies by the estimate, else counted
/// (`before` counting the whole). `None` for words not read, which only the
/// estimate counts.
fn measure_middle(
    body: Body,
    range: std::ops::Range<usize>,
    kept: &[Tally; 3],
    cfg: &Config,
    before: impl FnOnce() -> usize,
) -> Option<Middle> {
    match (cfg.tokenizer, body) {
        (Tokenizer::Estimate, _) => {
            let m = body.middle_tally(range, kept[0] + kept[1]);
            Some(Middle {
                before: (kept[0] + m + kept[1] + kept[2]).tokens(),
                cut_tokens: m.tokens(),
                chars: Some(m.chars()),
            })
        }
        (_, Body::Words(text, _)) => Some(Middle {
            before: before(),
            cut_tokens: cfg.count(&text[range]),
            chars: None,
        }),
        (_, Body::Unread { .. }) => None,
    }
}

/// [`cut`] of `body` followed by `suffix` (a ref tag, or nothing), read
/// where the two lie rather than joined first, and not built: every turn
/// cuts every sticky output again, and most of a long session's cuts are
/// left out before the view goes out. `before` counts the two joined,
/// asked only of a tokenizer other than the estimate, whose counts are
/// added up from the pieces in the one pass that counts the middle.
/// `suffix` must be shorter than `keep` characters: the tail kept then ends
/// with all of it. When the memo knows the text is all ASCII, what is cut
/// out is tallied by its length; when it knows the text's tally (see
/// [`Facts`](crate::engine::Facts)), the middle's is the whole's less the
/// ends'; when it knows the text holds no marker, the text is not searched
/// for one; and when it knows all that of a text without CJK characters,
/// the text is cut as words not read are, from its length and characters
/// alone: the same cut, without a pass over it.
pub fn cut_pieces(
    body: Body,
    suffix: &str,
    keep: usize,
    cfg: &Config,
    before: impl FnOnce() -> usize,
) -> Option<Cut> {
    let body = unread_when_known(body, cfg);
    if !worth_cutting(body, suffix, keep) {
        return None;
    }
    // Where the head ends and the tail starts in the body (bytes of words
    // read, characters of words not), counted in characters; the tail's
    // last characters are the suffix's.
    let tail_keep = keep - tokens::chars(suffix);
    let head_end = body.head_end(keep);
    let tail_start = body.tail_start(tail_keep);
    let kept = [
        body.head_tally(head_end)?,
        body.tail_tally(tail_start)?,
        Tally::of(suffix),
    ];
    let Middle {
        before,
        cut_tokens,
        chars: middle,
    } = measure_middle(body, head_end..tail_start, &kept, cfg, before)?;
    let noted = Tally::of(&note(cut_tokens, before)) + kept[0] + kept[1] + kept[2];
    // A cut of a text that is not all ASCII is placed by characters, so
    // that one made without the words is the one made with them.
    let chars = middle.map_or_else(|| body.chars(), |m| kept[0].chars() + m + kept[1].chars());
    let in_chars = body.len() != chars;
    let (head_end, tail_start) = match in_chars {
        true => (keep.min(chars), chars.saturating_sub(tail_keep)),
        false => (head_end, tail_start),
    };
    let mut cut = Cut {
        head_end,
        tail_start,
        before,
        cut_tokens,
        after: noted.tokens(),
        chars: noted.chars(),
        in_chars,
    };
    if cfg.tokenizer != Tokenizer::Estimate
        && let Body::Words(text, _) = body
    {
        cut.after = cfg.count(&cut.text(text, suffix));
    }
    Some(cut)
}

/// What a cut is made of: the words, with their memo, or what is known of
/// words not read ([`CoreMessage::withheld`]), which hold no marker: their
/// length, their tally, and, when they hold CJK characters, their ends.
/// Every figure of a cut of those by the estimate follows from these; the
/// cut is built once the words are read.
#[derive(Debug, Clone, Copy)]
pub enum Body<'a> {
    /// The words and what their memo knows of them.
    Words(&'a str, &'a Counted),
    /// Words not read: their length in bytes, their tally, and which of
    /// their ends are CJK characters (for words that hold any).
    Unread {
        len: usize,
        tally: Tally,
        ends: Option<&'a Ends>,
    },
}

impl<'a> Body<'a> {
    /// Its length in bytes.
    fn len(self) -> usize {
        match self {
            Body::Words(text, _) => text.len(),
            Body::Unread { len, .. } => len,
        }
    }

    /// Where it ends, placed as its ends are: its length in bytes, or in
    /// characters for words not read.
    fn end(self) -> usize {
        match self {
            Body::Words(text, _) => text.len(),
            Body::Unread { tally, .. } => tally.chars(),
        }
    }

    /// Its words when they are not known to be all ASCII. Of the others,
    /// every figure below follows from the characters, where the ends are
    /// placed (bytes of ASCII words, characters of words not read): a long
    /// view cuts thousands of outputs, and reading each one's ends again
    /// to learn that would cost a third of the cutting.
    fn mixed(self) -> Option<&'a str> {
        match self {
            Body::Words(text, memo) if !memo.ascii() => Some(text),
            _ => None,
        }
    }

    fn chars(self) -> usize {
        match self {
            Body::Unread { tally, .. } => tally.chars(),
            Body::Words(text, memo) => match self.mixed() {
                Some(_) => memo.chars().unwrap_or_else(|| tokens::chars(text)),
                None => text.len(),
            },
        }
    }

    fn marked(self) -> bool {
        match self {
            Body::Words(text, memo) => memo.marked(text),
            Body::Unread { .. } => false,
        }
    }

    fn head_end(self, keep: usize) -> usize {
        match self.mixed() {
            Some(text) => head_end(text, keep),
            None => keep.min(self.chars()),
        }
    }

    fn tail_start(self, keep: usize) -> usize {
        match self.mixed() {
            Some(text) => tail_start(text, keep),
            None => self.chars().saturating_sub(keep),
        }
    }

    /// The estimate's tally of what lies before `head_end`, placed as its
    /// ends are. `None` only for words not read that hold CJK characters
    /// without their ends, which are never handed over.
    fn head_tally(self, head_end: usize) -> Option<Tally> {
        match (self.mixed(), self) {
            (Some(text), _) => Some(Tally::of(&text[..head_end])),
            (None, Body::Unread { tally, ends, .. }) if tally.cjk() > 0 => {
                Some(ends?.head(head_end))
            }
            // No CJK character: every one counts as an ASCII one does.
            (None, _) => Some(Tally::ascii(head_end)),
        }
    }

    /// The estimate's tally of what lies from `tail_start` on, as
    /// [`Body::head_tally`].
    fn tail_tally(self, tail_start: usize) -> Option<Tally> {
        let tail = self.end() - tail_start;
        match (self.mixed(), self) {
            (Some(text), _) => Some(Tally::of(&text[tail_start..])),
            (None, Body::Unread { tally, ends, .. }) if tally.cjk() > 0 => Some(ends?.tail(tail)),
            (None, _) => Some(Tally::ascii(tail)),
        }
    }

    /// The estimate's tally of what lies in `middle`, between the ends
    /// whose tally is `ends`: the whole's less theirs when the whole's is
    /// known, the middle read through when not.
    fn middle_tally(self, middle: std::ops::Range<usize>, ends: Tally) -> Tally {
        match self {
            Body::Unread { tally, .. } => tally.less(ends),
            Body::Words(text, memo) => match (memo.tally_known(), self.mixed()) {
                (Some(whole), _) => whole.less(ends),
                (None, Some(_)) => Tally::of(&text[middle]),
                (None, None) => Tally::ascii(middle.len()),
            },
        }
    }

    /// Whether `cut`'s ends fall on character boundaries of it, in order
    /// (see [`Cut::fits`]).
    pub fn fits(self, cut: &Cut) -> bool {
        match self {
            Body::Words(text, _) => cut.fits(text),
            Body::Unread { len, tally, .. } => {
                cut.in_chars == (len != tally.chars())
                    && cut.head_end <= cut.tail_start
                    && cut.tail_start <= tally.chars()
            }
        }
    }
}

/// The byte offset where the first `keep` characters of `text` end (its
/// length when it is shorter). Read off directly when those bytes are ASCII,
/// as most tool output is: every turn re-cuts every sticky output.
fn head_end(text: &str, keep: usize) -> usize {
    match text.as_bytes().get(..keep) {
        Some(head) if head.is_ascii() => keep,
        _ => text.char_indices().nth(keep).map_or(text.len(), |(i, _)| i),
    }
}

/// The byte offset where the last `keep` characters of `text` start (0 when
/// it is shorter; `keep` is at least 1), read off as [`head_end`] is.
fn tail_start(text: &str, keep: usize) -> usize {
    match text.len().checked_sub(keep) {
        Some(start) if text.as_bytes()[start..].is_ascii() => start,
        _ => text
            .char_indices()
            .rev()
            .nth(keep - 1)
            .map_or(0, |(i, _)| i),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::model::identity::IdMap;
    use crate::engine::model::message::Role;
    use crate::engine::model::tokenizer::Tokenizer;

    /// Where the turn asks truncation to bring the view down to.
    const TARGET: usize = 171_000;

    fn result(id: &str, chars: usize) -> CoreMessage {
        CoreMessage::tool_result(id, id, "Bash", "x".repeat(chars))
    }
    /// How many results a turn's truncation cuts in `view`, measured at
    /// 195K against the test target, with no cut before.
    fn cuts(view: &mut [CoreMessage], cfg: &Config) -> usize {
        let (mut sticky, mut deferred) = (BTreeSet::new(), DeferredOutputs::default());
        truncate(view, 195_000, TARGET, cfg, &mut sticky, &mut deferred).count
    }
    fn tail(view: &mut Vec<CoreMessage>) {
        for i in 0..5 {
            view.push(CoreMessage::text(
                format!("recent{i}"),
                Role::User,
                "recent",
            ));
        }
    }

    #[test]
    fn the_note_reads_as_its_figures_say() {
        for (cut, before) in [(0, 0), (7, 1_234), (98_765, 100_000), (usize::MAX, 10)] {
            assert_eq!(
                note(cut, before),
                format!(
                    "\n\n...{MARKER} — about {cut} tokens cut from the middle of ~{before}; the transcript keeps the full output]...\n\n"
                )
            );
        }
        assert!(note(usize::MAX, usize::MAX).len() <= NOTE_LEN);
    }

    #[test]
    fn nothing_below_the_threshold() {
        let mut v = vec![result("a", 100_000)];
        assert_eq!(
            truncate(
                &mut v,
                100_000,
                TARGET,
                &Config::default(),
                &mut BTreeSet::new(),
                &mut DeferredOutputs::default(),
            )
            .count,
            0
        );
    }

    #[test]
    fn the_largest_goes_first() {
        let mut v = vec![
            result("small", 20_000),
            result("huge", 200_000),
            result("medium", 40_000),
        ];
        tail(&mut v);
        let mut sticky = BTreeSet::new();
        let t = truncate(
            &mut v,
            195_000,
            TARGET,
            &Config::default(),
            &mut sticky,
            &mut DeferredOutputs::default(),
        );
        assert_eq!(t.count, 1);
        assert!(v[1].text.contains(MARKER));
        assert!(!v[0].text.contains(MARKER) && !v[2].text.contains(MARKER));
        assert!(t.saved > 0);
        assert!(sticky.contains("huge"));
    }

    #[test]
    fn a_cut_output_carries_the_count_of_its_new_text() {
        for tokenizer in [Tokenizer::Estimate, Tokenizer::O200k] {
            let cfg = Config {
                tokenizer,
                ..Config::default()
            };
            let body = format!(
                "{}{}{}",
                "日志 ".repeat(900),
                "y".repeat(9_000),
                "末尾 ".repeat(900)
            );
            let mut m = CoreMessage::tool_result("r", "c", "Bash", body);
            let saved = cut(&mut m, KEEP_CHARS, &cfg).expect("long enough to cut");
            let fresh = cfg.count(&m.text);
            assert_eq!(cfg.tokens(&m), fresh, "{tokenizer:?}");
            assert!(saved > 0 && m.text.contains(MARKER));
        }
    }

    #[test]
    fn head_and_tail_survive() {
        let body = format!(
            "{}{}{}",
            "H".repeat(3000),
            "M".repeat(100_000),
            "T".repeat(3000)
        );
        let mut v = vec![CoreMessage::tool_result("r", "r", "Bash", body)];
        tail(&mut v);
        truncate(
            &mut v,
            195_000,
            TARGET,
            &Config::default(),
            &mut BTreeSet::new(),
            &mut DeferredOutputs::default(),
        );
        assert!(v[0].text.starts_with(&"H".repeat(2000)));
        assert!(v[0].text.ends_with(&"T".repeat(2000)));
        assert!(v[0].text.contains("tokens cut from the middle"));
    }

    #[test]
    fn nothing_to_cut() {
        let cfg = Config::default();
        let mut marked = vec![CoreMessage::tool_result(
            "m",
            "m",
            "Bash",
            format!("{MARKER}]{}", "x".repeat(100_000)),
        )];
        tail(&mut marked);
        assert_eq!(cuts(&mut marked, &cfg), 0);
        let mut recent: Vec<CoreMessage> =
            (0..5).map(|i| result(&format!("r{i}"), 100_000)).collect();
        assert_eq!(cuts(&mut recent, &cfg), 0);
        let mut user = vec![CoreMessage::text("u", Role::User, "x".repeat(200_000))];
        tail(&mut user);
        assert_eq!(cuts(&mut user, &cfg), 0);
        let mut small = vec![result("s", 800)];
        tail(&mut small);
        assert_eq!(cuts(&mut small, &cfg), 0);
    }

    #[test]
    fn zero_preserve() {
        let cfg = Config {
            preserve_recent_messages: 0,
            ..Config::default()
        };
        let mut v = vec![result("a", 200_000)];
        assert_eq!(cuts(&mut v, &cfg), 1);
    }

    #[test]
    fn the_last_resort_cuts_recent_output_then_leaves_out_old_exchanges() {
        let cfg = Config::default();
        let mut v = vec![CoreMessage::text("task", Role::User, "the task")];
        for i in 0..10 {
            v.push(CoreMessage::tool_call(
                format!("c{i}"),
                format!("t{i}"),
                "Edit",
                "{}",
            ));
            v.push(result(&format!("t{i}"), 400));
            v.push(CoreMessage::text(
                format!("a{i}"),
                Role::Assistant,
                "x".repeat(4_000),
            ));
        }
        let recent = v.len() - 2;
        v[recent].text = "y".repeat(40_000);
        let estimate: usize = v.iter().map(|m| cfg.count(&m.text)).sum();
        let mut sticky = BTreeSet::new();
        let note = |gone: &[&CoreMessage]| {
            let first = &gone[0].id;
            CoreMessage::text(
                "note",
                Role::User,
                format!("{} left out from {first}", gone.len()),
            )
        };
        let cut = cut_largest(
            &mut v,
            estimate,
            8_000,
            &cfg,
            &mut sticky,
            &mut DeferredOutputs::default(),
        );
        assert_eq!(cut.count, 1, "the recent output is cut");
        assert!(sticky.contains("t9"));
        let omitted = omit(&mut v, estimate - cut.saved, 8_000, &cfg, note);
        assert!(omitted > 0);
        assert_eq!(v[0].id, "task");
        // Oldest first, whole exchanges.
        assert_eq!(v[1].text, format!("{omitted} left out from c0"));
        assert!(v.iter().map(|m| cfg.count(&m.text)).sum::<usize>() <= 8_000 + 100);
        assert_eq!(v.last().unwrap().id, "a9");
    }

    /// A result that does not follow its call at once (a Codex rollout
    /// can hold messages between them) goes or stays with it: never a
    /// result left in view without its call, or a call without its result.
    #[test]
    fn what_is_left_out_keeps_calls_with_their_results() {
        let cfg = Config::default();
        let note =
            |gone: &[&CoreMessage]| CoreMessage::text("note", Role::User, gone.len().to_string());
        let big = "y".repeat(20_000);
        let paired = |v: &[CoreMessage]| {
            let calls: BTreeSet<&str> = (v.iter())
                .filter(|m| m.content_type == ContentType::ToolCall)
                .map(|m| m.tool_call_id.as_str())
                .collect();
            let results: BTreeSet<&str> = (v.iter())
                .filter(|m| m.content_type == ContentType::ToolResult)
                .map(|m| m.tool_call_id.as_str())
                .collect();
            calls == results
        };
        // The result is the last message: the call stays for it.
        let mut v = vec![
            CoreMessage::text("task", Role::User, "the task"),
            CoreMessage::tool_call("c1", "k1", "Read", "{}"),
            CoreMessage::text("dev", Role::User, big.clone()),
            CoreMessage::text("u", Role::User, big.clone()),
            CoreMessage::tool_result("r1", "k1", "Read", "out"),
        ];
        let estimate: usize = v.iter().map(|m| cfg.count(&m.text)).sum();
        assert!(omit(&mut v, estimate, 1_000, &cfg, note) > 0);
        assert!(paired(&v), "{:?}", ids(&v));
        assert_eq!(ids(&v), ["task", "c1", "note", "r1"]);
        // A later exchange stays: call and result go together.
        let mut v = vec![
            CoreMessage::text("task", Role::User, "the task"),
            CoreMessage::tool_call("c1", "k1", "Read", "{}"),
            CoreMessage::text("u", Role::User, big.clone()),
            CoreMessage::tool_result("r1", "k1", "Read", big.clone()),
            CoreMessage::tool_call("c2", "k2", "Read", "{}"),
            CoreMessage::tool_result("r2", "k2", "Read", "out"),
        ];
        let estimate: usize = v.iter().map(|m| cfg.count(&m.text)).sum();
        assert!(omit(&mut v, estimate, 1_000, &cfg, note) > 0);
        assert!(paired(&v), "{:?}", ids(&v));
        assert_eq!(ids(&v), ["task", "note", "c2", "r2"]);
    }

    fn ids(v: &[CoreMessage]) -> Vec<&str> {
        v.iter().map(|m| m.id.as_str()).collect()
    }

    /// Each output cut again is paired with where it was first cut,
    /// whichever other ids either list holds before, between or after it.
    #[test]
    fn each_cut_again_says_where_it_was_first_cut() {
        let cfg = Config::default();
        let sticky = BTreeSet::from(["b", "d", "f", "h"].map(Name::from));
        let first_at = BTreeMap::from(
            [("a", 1), ("d", 4), ("e", 5), ("h", 8), ("i", 9)].map(|(k, n)| (Name::from(k), n)),
        );
        let mut v: Vec<CoreMessage> = ["b", "c", "d", "f", "h"]
            .map(|id| result(id, 200_000))
            .into();
        tail(&mut v);
        let (t, cuts) = reapply(
            &mut v,
            &mut DeferredOutputs::default(),
            (&sticky, &first_at),
            &cfg,
        );
        let made: Vec<(usize, usize)> = cuts.iter().map(|&(i, _, n)| (i, n)).collect();
        assert_eq!(made, vec![(0, 0), (2, 4), (3, 0), (4, 8)]);
        assert_eq!(t.count, 4);
    }

    #[test]
    fn a_cut_result_stays_cut() {
        let cfg = Config::default();
        let sticky = BTreeSet::from([Name::from("a")]);
        let first_at = BTreeMap::from([(Name::from("a"), 7)]);
        let mut v = vec![result("a", 200_000)];
        tail(&mut v);
        let (t, cuts) = reapply(
            &mut v,
            &mut DeferredOutputs::default(),
            (&sticky, &first_at),
            &cfg,
        );
        assert_eq!(t.count, 1);
        assert_eq!(cuts, vec![(0, t.saved, 7)], "where it was first cut");
        assert!(v[0].text.contains(MARKER));
        // Held without its words, it is cut from the original alike.
        let history = [result("a", 200_000)];
        let none = IdMap::default();
        let mut deferred = DeferredOutputs::holding(&none);
        let mut held: Vec<CoreMessage> = history.iter().map(|m| deferred.copy(m)).collect();
        deferred.tag(&held[0], |_| None);
        assert!(held[0].text.is_empty());
        let (again, cuts) = reapply(&mut held, &mut deferred, (&sticky, &BTreeMap::new()), &cfg);
        assert_eq!((again.count, again.saved), (t.count, t.saved));
        assert_eq!(cuts, vec![(0, t.saved, 0)], "first cut at no known length");
        assert!(held[0].text.is_empty(), "built only when the view is done");
        deferred.word_all(&mut held);
        assert_eq!(held[0].text, v[0].text);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        /// A result held without its words, tagged and cut again from its
        /// original, comes out as the tagged copy cut, byte for byte and
        /// count for count, with either kind of tokenizer, with or without
        /// a tag, for a text cut before, and whether what a first read
        /// learns of the original is known; and one left uncut as the
        /// tagged copy.
        #[test]
        fn a_held_result_comes_out_as_the_tagged_copy(
            mut words in proptest::collection::vec("[a-z é中\n]{1,12}", 0..900),
            tagged in proptest::bool::ANY,
            encoding in proptest::bool::ANY,
            cut_before in proptest::bool::ANY,
            learned in proptest::bool::ANY,
        ) {
            if cut_before {
                words.insert(words.len() / 2, MARKER.to_string());
            }
            let cfg = Config {
                tokenizer: if encoding { Tokenizer::O200k } else { Tokenizer::Estimate },
                ..Config::default()
            };
            let original = CoreMessage::tool_result("r", "t", "Bash", words.concat());
            // What a first read learns of the original (its count, whether
            // it is ASCII, whether it holds the marker) spares the held copy
            // reading it again, and changes nothing it comes out as.
            if learned {
                original.counted.learn(&original.text);
            }
            let tag = tagged.then(|| r#"<noa-ref id="m00001" tokens="9" src="Bash"/>"#.to_string());
            let sticky = BTreeSet::from([Name::from("r")]);
            let mut whole = vec![original.clone()];
            if let Some(t) = &tag {
                whole[0].append_tag(t);
            }
            let none = IdMap::default();
            let mut deferred = DeferredOutputs::holding(&none);
            let mut held = vec![deferred.copy(&original)];
            deferred.tag(&held[0], |_| tag);
            let mut counted = held[0].clone();
            deferred.count(&mut counted, &cfg);
            proptest::prop_assert_eq!(cfg.tokens(&counted), cfg.tokens(&whole[0]));
            let at = deferred.place(&held[0]);
            proptest::prop_assert_eq!(deferred.marked_at(at, &held[0]), marked(&whole[0].text));
            proptest::prop_assert_eq!(deferred.chars(&held[0]), tokens::chars(&whole[0].text));
            let none = BTreeMap::new();
            let (want, _) = reapply(&mut whole, &mut DeferredOutputs::default(), (&sticky, &none), &cfg);
            let (got, _) = reapply(&mut held, &mut deferred, (&sticky, &none), &cfg);
            deferred.word_all(&mut held);
            proptest::prop_assert_eq!((got.count, got.saved), (want.count, want.saved));
            proptest::prop_assert_eq!(&held[0].text, &whole[0].text);
            proptest::prop_assert_eq!(&held[0].edit, &whole[0].edit);
            proptest::prop_assert_eq!(cfg.tokens(&held[0]), cfg.tokens(&whole[0]));
        }

        /// Held results are looked for where the last lookup left off, and
        /// found wherever they are: asked for in any order, with messages
        /// that are not held between them, each gives what it holds.
        #[test]
        fn held_results_are_found_in_any_order(
            order in proptest::strategy::Strategy::prop_shuffle(proptest::strategy::Just(
                (0..8).collect::<Vec<usize>>(),
            )),
        ) {
            let originals: Vec<CoreMessage> = (0..8)
                .map(|i| match i % 3 {
                    0 => CoreMessage::text(format!("t{i}"), Role::Assistant, "y".repeat(i + 1)),
                    _ => CoreMessage::tool_result(format!("r{i}"), format!("c{i}"), "Bash", "x".repeat(10 * (i + 1))),
                })
                .collect();
            let none = IdMap::default();
            let mut deferred = DeferredOutputs::holding(&none);
            let view: Vec<CoreMessage> = originals.iter().map(|m| deferred.copy(m)).collect();
            for &i in &order {
                let held = i % 3 != 0;
                let chars = if held { 10 * (i + 1) } else { i + 1 };
                proptest::prop_assert_eq!(deferred.chars(&view[i]), chars);
                proptest::prop_assert!(!deferred.cut_made_at(deferred.place(&view[i])));
                proptest::prop_assert_eq!(view[i].text.is_empty(), held);
            }
        }

        /// A cut of words known to be all ASCII, whose figures follow from
        /// their length, is the cut of the same words read through.
        #[test]
        fn a_cut_of_words_known_ascii_is_the_cut_read_through(
            pieces in proptest::collection::vec("[a-z \n]{1,40}", 0..400),
            accent in proptest::option::of((0usize..400, "[é中]")),
            keep in proptest::sample::select(vec![KEEP_CHARS, LAST_RESORT_KEEP_CHARS]),
        ) {
            let mut text = pieces.concat();
            if let Some((at, c)) = accent {
                text.insert_str(at.min(text.len()), &c);
            }
            let cfg = Config::default();
            let learned = Counted::default();
            learned.learn(&text);
            let read = cut_pieces(Body::Words(&text, &Counted::default()), "", keep, &cfg, || 0);
            let known = cut_pieces(Body::Words(&text, &learned), "", keep, &cfg, || 0);
            proptest::prop_assert_eq!(known, read);
        }

        /// A cut of words not read, placed by their length, tally and
        /// ends alone, is the cut of the same words read through, as is
        /// one of words whose memo knows their tally, and builds the same
        /// text from them, in any script.
        #[test]
        fn a_cut_of_words_not_read_is_the_cut_read_through(
            pieces in proptest::collection::vec("[a-z \n]{1,40}|é|\u{2192}|[中文한]{1,9}", 0..400),
            keep in proptest::sample::select(vec![KEEP_CHARS, LAST_RESORT_KEEP_CHARS]),
            suffix in proptest::option::of("\n\\[m0001[0-9] · [0-9]{1,4} tok · Read\\]"),
        ) {
            let text = pieces.concat();
            let suffix = suffix.unwrap_or_default();
            let cfg = Config::default();
            let learned = Counted::default();
            learned.learn(&text);
            let ends = Ends::of(&text);
            let unread = Body::Unread {
                len: text.len(),
                tally: learned.tally_known().unwrap(),
                ends: Some(&ends),
            };
            // Read through: a memo that knows nothing has every figure
            // taken from the words.
            let read = cut_pieces(Body::Words(&text, &Counted::default()), &suffix, keep, &cfg, || 0);
            let known = cut_pieces(Body::Words(&text, &learned), &suffix, keep, &cfg, || 0);
            let blind = cut_pieces(unread, &suffix, keep, &cfg, || 0);
            proptest::prop_assert_eq!(blind, read);
            proptest::prop_assert_eq!(known, read);
            if let Some(c) = blind {
                proptest::prop_assert!(unread.fits(&c) && Body::Words(&text, &learned).fits(&c));
                proptest::prop_assert_eq!(c.in_chars, !text.is_ascii());
                let built = c.text(&text, &suffix);
                proptest::prop_assert_eq!(tokens::chars(&built), c.chars);
            }
        }

        #[test]
        fn the_kept_ends_are_counted_in_characters(text in "[a é中]{0,30}", keep in 1usize..12) {
            let head = text.char_indices().nth(keep).map_or(text.len(), |(i, _)| i);
            let tail = text.char_indices().rev().nth(keep - 1).map_or(0, |(i, _)| i);
            proptest::prop_assert_eq!(head_end(&text, keep), head);
            proptest::prop_assert_eq!(tail_start(&text, keep), tail);
        }
    }
}
