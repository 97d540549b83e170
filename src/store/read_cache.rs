//! The read cache: what the last turn read of a transcript, kept beside
//! state.json so the next turn reads only what was appended.
//!
//! It holds how far the transcript was read, a digest of those bytes, and
//! every message read from them: identity, kind, token count, and — only
//! for what may still be shown — the text and the JSON the view is written
//! from. Messages folded into blocks keep their figures but not their
//! words, so once most of a session is compressed the cache is small and
//! a turn costs the appended lines plus what is still visible. A long tool
//! output the transcript holds as one JSON string is not copied at all:
//! the cache keeps where that string starts ([`SPAN`]), and its words are
//! read from the transcript, whose prefix the turn proves unchanged.
//!
//! The cache is never trusted blindly: a transcript shorter than the prefix,
//! a prefix whose digest differs, another format, tokenizer or noa version,
//! or a file that does not decode or fails its own checksum, all mean "read
//! it whole". It is written without fsync: losing it costs one cold read,
//! nothing else.
//!
//! The file is its messages in segments, then a trailer (how far the
//! transcript was read, the session, the reader's resume state, how many
//! messages), then where the trailer starts and a checksum of everything
//! before but the long tool outputs a warm turn may leave unread: those
//! follow their segment's fields, each after a digest of its own, checked
//! when it is read, so a warm turn reads the fields and seeks past the
//! outputs it does not show. A turn that only
//! read on appends: the old trailer is cut off and the new messages and a
//! new trailer written in its place, the checksum taken on from where the
//! messages ended. A turn that folds words away writes the file anew.

use std::collections::{HashMap, HashSet};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::num::{NonZeroU32, NonZeroU64};
use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};

use crate::engine::tokens::Ends;
use crate::engine::{
    ContentType, CoreMessage, Counted, Cut, Facts, IdMap, KeptCut, Name, Role, Tokenizer,
    may_withhold, may_withhold_knowing,
};
use crate::formats::{
    BlockSource, ContentBlock, Format, HostMessage, RawJson, ResumeState, Slot, Transcript,
    string_end,
};

use super::atomic::Replacing;
use super::digest::{CacheDigest, cache_digest, read_at};
use super::{SessionDir, StoreError, with_room};

/// The file's first line, naming its layout's version: a cache of another
/// version is ignored and the transcript read whole. Any change to the
/// layout takes a new version.
const MAGIC: &[u8] = b"noa read cache 13\n";

/// The file beside state.json.
const FILE: &str = "read-cache.bin";

/// The shortest words that stand apart from the checksum, and so the
/// shortest a warm turn leaves in the file (see [`CoreMessage::withheld`]):
/// shorter ones cost less to decode than to find again when the view shows
/// them.
pub const WITHHELD_MIN: usize = 128;

/// The flag of a block whose words stand apart, those a warm read may
/// leave in the file ([`may_withhold`], [`WITHHELD_MIN`] bytes or more):
/// its fields give their length, and the words follow the fields of its
/// segment, each after a digest of them, none of it in the checksum.
const APART: u64 = 1 << 4;

/// The flag of a block whose words stand apart and lie in the transcript,
/// as one JSON string (see [`ContentBlock::words_at`]): its fields give where the
/// string starts, and the words are not in the file at all. A first turn
/// then writes none of the long outputs it reads, and the cache of an
/// uncompressed session is not a copy of its outputs.
const SPAN: u64 = 1 << 8;

/// The mark of a place of words in the transcript rather than in the read
/// cache or a set-aside file (see `SPAN`), where places are offsets.
pub const IN_TRANSCRIPT: u64 = 1 << 63;

/// The flag of a block counted by the estimate whose tally is known; the
/// two bits above it say how its count was rounded ([`Facts::round`]).
const TALLIED: u64 = 1 << 5;
const ROUND_SHIFT: u32 = 6;

/// The flag of a tallied block that holds CJK characters: how many
/// ([`Facts::cjk`]) follows its count.
const CJK: u64 = 1 << 9;

/// The flag of a block whose words stand apart and hold CJK characters:
/// which of their ends are CJK ones ([`Ends`]) follows their count, so
/// that a warm turn that leaves them in the file can cut them.
const ENDS: u64 = 1 << 10;

/// How many bytes of long words a segment gathers before it ends: they are
/// held in memory until their messages' fields are written.
const SEGMENT: usize = 1 << 20;

/// Where a message's line would be, the end of a segment: the length of its
/// words follows, then the words.
const SEGMENT_END: u64 = u64::MAX;

/// What one turn read of a transcript, its messages decoded into `M`: as
/// the cache keeps them, or straight into what a warm turn works on
/// ([`Warm`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ReadCache<M = Vec<CachedMessage>> {
    /// The format it was read as.
    pub format: Format,
    /// The counter the token figures were taken with.
    pub tokenizer: Tokenizer,
    /// Bytes of the transcript read: whole lines only.
    pub length: u64,
    /// Lines in those bytes.
    pub lines: u64,
    /// [`TranscriptDigest`](crate::store::TranscriptDigest) of those bytes.
    pub digest: u64,
    /// The session id the transcript gives.
    pub session_id: Option<String>,
    /// The session that spawned this one, for a subagent's log.
    pub parent_session: Option<String>,
    /// Warnings the read gave.
    pub warnings: Vec<String>,
    /// The messages read, in order.
    pub messages: M,
    /// What reading on after them needs to know.
    pub resume: ResumeState,
    /// The cuts of tool results the last turn made, by message id: the
    /// next takes them back while the prefix stands (see [`KeptCut`]).
    pub cuts: Vec<(String, KeptCut)>,
    /// Where its messages end, for a turn that appends to it.
    pub end: CacheEnd,
}

/// What a read cache's trailer says of the transcript it read, known
/// before its messages are decoded.
#[derive(Debug, Clone, Copy)]
pub struct CacheHead {
    /// The format it was read as.
    pub format: Format,
    /// Bytes of the transcript read: whole lines only.
    pub length: u64,
    /// Lines in those bytes.
    pub lines: u64,
    /// [`TranscriptDigest`](crate::store::TranscriptDigest) of those bytes.
    pub digest: u64,
}

/// Where a cache file's messages end, and what appending after them needs:
/// the checksum taken up to there, and what the file held then.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CacheEnd {
    /// Offset of the trailer, where the messages end.
    pub at: u64,
    /// The checksum's digest over the bytes before it.
    pub sum: CacheDigest,
    /// Messages before it.
    pub messages: usize,
    /// The file's length.
    pub len: u64,
    /// The counter its token figures were taken with.
    pub tokenizer: Tokenizer,
}

/// A transcript as the read cache gives it back.
pub struct Warm {
    /// The messages read, their JSON not yet parsed; their cores are in
    /// `history`.
    pub transcript: Transcript,
    /// The flat history, with the words that were kept.
    pub history: Vec<CoreMessage>,
    /// For each message of `history`, whether its words were not kept: by
    /// place, since every one of a long session's folded messages is.
    pub elided: Vec<bool>,
    /// The JSON of each message that may still be shown, and of its kept
    /// blocks.
    pub raws: Vec<Unparsed>,
    /// The last turn's cuts, as [`ReadCache::cuts`].
    pub cuts: Vec<(String, KeptCut)>,
    /// Where in the cache file the words of each message of `history` the
    /// turn was handed without them lie, by place in `history`, in order.
    pub withheld: Vec<(usize, u64)>,
    /// The cache file they are read from, when there are any.
    pub words: Option<WordsFile>,
}

/// A cached message's JSON, not parsed yet: its position, its own JSON and
/// its kept blocks' JSON by position.
pub type Unparsed = (usize, String, Vec<(usize, String)>);

/// The JSON of the cached messages a view shows, parsed into `t`:
/// `raws` as [`Warm`] left them, `shown` the ids of the view's messages.
/// False when a message's JSON does not parse (the cache is not one noa
/// wrote) and the transcript must be read whole.
pub fn fill_shown(t: &mut Transcript, raws: &[Unparsed], shown: &HashSet<&str>) -> bool {
    for (mi, raw, blocks) in raws {
        let Some(m) = t.messages.get_mut(*mi) else {
            return false;
        };
        if !m.blocks.iter().any(|b| shown.contains(b.id.as_str())) {
            continue;
        }
        let Some(raw) = RawJson::from_text(raw) else {
            return false;
        };
        m.raw = raw;
        for (bi, raw) in blocks {
            match (m.blocks.get_mut(*bi), RawJson::from_text(raw)) {
                (Some(b), Some(raw)) => b.raw = raw,
                _ => return false,
            }
        }
    }
    true
}

/// One host message as the cache keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct CachedMessage {
    /// Line it starts on.
    pub line: u64,
    /// The provider's prompt size recorded for it.
    pub prompt_tokens: Option<u64>,
    /// Its request JSON, when any of its blocks may still be shown.
    pub raw: Option<String>,
    /// Its blocks.
    pub blocks: Vec<CachedBlock>,
}

/// One block as the cache keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct CachedBlock {
    /// The flat message; its text is empty when `kept` is false.
    pub core: CoreMessage,
    /// Its token count.
    pub tokens: u64,
    /// What is known of its text (see [`Counted`]).
    pub facts: Facts,
    /// Whether its text and JSON were kept (it may still be shown).
    pub kept: bool,
    /// Its JSON, when kept.
    pub raw: Option<String>,
    /// Where it came from in the records.
    pub source: BlockSource,
    /// Where its words lie in the transcript, when the cache points there
    /// ([`SPAN`]): a cache written anew points there again, words read for
    /// the view or not.
    pub words_at: Option<NonZeroU64>,
}

/// What a turn leaves in the read cache, borrowed from the turn: the cache
/// is written straight from it, so saving it copies no message.
pub struct CacheSource<'a> {
    /// The transcript as read.
    pub transcript: &'a Transcript,
    /// The flat history (its texts moved out of the transcript's blocks).
    pub history: &'a [CoreMessage],
    /// The counter the token figures were taken with.
    pub tokenizer: Tokenizer,
    /// Bytes and lines read, and the digest of those bytes.
    pub mark: (u64, u64, u64),
    /// Which messages may still be shown, and so keep their words: given
    /// each message of `history` with its position.
    pub keep: &'a dyn Fn(usize, &CoreMessage) -> bool,
    /// The JSON an earlier cache kept that this turn did not parse.
    pub unparsed: &'a [Unparsed],
    /// The cuts the turn made ([`Projection::cuts`](crate::engine::Projection::cuts)).
    pub cuts: &'a [(String, KeptCut)],
    /// Where the words of the history's messages handed over without
    /// them lie ([`CoreMessage::withheld`]), for those the cache keeps:
    /// read as they are written, never all held at once.
    pub left: Option<Left<'a>>,
}

/// Where the words of history messages handed over without them lie.
#[derive(Debug, Clone, Copy)]
pub struct Left<'a> {
    /// Each one's place in the history, in order, and where its words
    /// start in `file`.
    pub at: &'a [(usize, u64)],
    /// The file they are in.
    pub file: &'a WordsFile,
}

impl CacheSource<'_> {
    /// Writes the cache to `out`, one message at a time.
    #[cfg(test)]
    pub fn write_to<W: Write>(&self, out: W) -> io::Result<W> {
        self.trailer(self.begin(out)?)
    }

    /// Writes the start of a new cache to `out`: its messages, all but the
    /// trailer.
    fn begin<W: Write>(&self, out: W) -> io::Result<Encoder<W>> {
        let mut e = Encoder::new(out);
        e.bytes(MAGIC)?;
        self.messages(&mut e, 0)?;
        Ok(e)
    }

    /// Writes what follows `end` in the file it was read from: the messages
    /// after the ones it holds, and the trailer. The messages it holds are
    /// left as written, words kept for messages since folded away
    /// included (a later turn that folds words away writes the file anew).
    pub fn append_to<W: Write>(&self, out: W, end: &CacheEnd) -> io::Result<W> {
        let mut e = Encoder {
            sum: end.sum.clone(),
            written: end.at,
            ..Encoder::new(out)
        };
        self.messages(&mut e, end.messages)?;
        self.trailer(e)
    }

    /// The messages from the `from`th on.
    fn messages<W: Write>(&self, e: &mut Encoder<W>, from: usize) -> io::Result<()> {
        let t = self.transcript;
        // Only those of the messages written here: a turn that appends
        // nothing to a long uncompressed session's cache holds tens of
        // thousands before them.
        let unparsed: HashMap<usize, &Unparsed> = (self.unparsed.iter())
            .filter(|u| u.0 >= from)
            .map(|u| (u.0, u))
            .collect();
        let before: usize = t.messages.iter().take(from).map(|m| m.blocks.len()).sum();
        let mut flat = self.history.iter().enumerate().skip(before);
        let mut kept = Vec::new();
        let mut left = self.left.map(|l| (l.at, l.file.in_order()));
        for (mi, m) in t.messages.iter().enumerate().skip(from) {
            let cores: Vec<(usize, &CoreMessage)> = flat.by_ref().take(m.blocks.len()).collect();
            kept.clear();
            kept.extend(cores.iter().map(|&(i, c)| (self.keep)(i, c)));
            let earlier = unparsed.get(&mi);
            // JSON is serialized only where its words are kept.
            let raw = match earlier {
                _ if !kept.contains(&true) => None,
                Some((_, raw, _)) => Some(raw.as_str()),
                None => Some(m.raw.text()),
            };
            e.message(
                m.line as u64,
                m.prompt_tokens.map(|n| n as u64),
                raw,
                m.blocks.len(),
            )?;
            for (bi, ((b, (i, core)), &kept)) in m.blocks.iter().zip(cores).zip(&kept).enumerate() {
                let words = match (core.withheld, &mut left) {
                    (Some(len), Some((at, words)))
                        if kept && self.tokenizer == Tokenizer::Estimate =>
                    {
                        // The places come in order, as the history's do.
                        let skip = at.iter().take_while(|&&(j, _)| j < i).count();
                        *at = &at[skip..];
                        let Some(&(_, offset)) = at.first().filter(|&&(j, _)| j == i) else {
                            return Err(io::Error::new(
                                io::ErrorKind::NotFound,
                                "words a message was handed over without are not in the file",
                            ));
                        };
                        let len = len.get() as usize;
                        match offset & IN_TRANSCRIPT {
                            0 => Words::Digested(words.digested(offset, len)?),
                            _ => Words::InTranscript(offset & !IN_TRANSCRIPT, len),
                        }
                    }
                    _ => Words::Text(&core.text),
                };
                let tokens = match words {
                    Words::Text(text) => core.counted.of(self.tokenizer, text),
                    // Set aside with its count and facts learned.
                    Words::Digested(_) | Words::InTranscript(..) => {
                        core.counted.of(Tokenizer::Estimate, "")
                    }
                };
                let raw = match earlier {
                    _ if !kept => None,
                    Some((_, _, blocks)) => blocks
                        .iter()
                        .find(|(i, _)| *i == bi)
                        .map(|(_, r)| r.as_str()),
                    None => Some(b.raw.text()),
                };
                let words_at = b.words_at.map(|at| at.get());
                e.block(&BlockOut {
                    core,
                    words,
                    words_at,
                    kept,
                    tokens: tokens as u64,
                    facts: core.counted.facts(),
                    raw,
                    source: b.source,
                    tokenizer: self.tokenizer,
                })?;
            }
            e.end_segment(true)?;
        }
        e.end_segment(false)
    }

    fn trailer<W: Write>(&self, mut e: Encoder<W>) -> io::Result<W> {
        let t = self.transcript;
        let at = e.written;
        let (length, lines, digest) = self.mark;
        e.trailer(&Trailer {
            format: t.format,
            tokenizer: self.tokenizer,
            length,
            lines,
            digest,
            session_id: t.session_id.as_deref(),
            parent_session: t.parent_session.as_deref(),
            warnings: &t.warnings,
            resume: &t.resume,
            messages: t.messages.len(),
            blocks: t.messages.iter().map(|m| m.blocks.len()).sum(),
        })?;
        e.cuts(self.cuts, self.tokenizer)?;
        e.finish(at)
    }
}

/// One block as the cache writes it.
struct BlockOut<'a> {
    /// Its flat message.
    core: &'a CoreMessage,
    /// Its words, wherever they are.
    words: Words<'a>,
    /// Where its words lie in the transcript, when they are one JSON string there.
    words_at: Option<u64>,
    /// Whether its message's words are kept (a message the view may show).
    kept: bool,
    /// Its count on the cache's counter, and what is known of its text.
    tokens: u64,
    facts: Facts,
    /// Its JSON, when the cache holds it.
    raw: Option<&'a str>,
    /// Where it comes from in its host message.
    source: BlockSource,
    /// The cache's counter.
    tokenizer: Tokenizer,
}

/// What a cache's trailer says: how far the transcript was read (its
/// length, lines and digest), the session, the transcript's warnings, what
/// reading on needs, and how many messages and blocks come before it.
struct Trailer<'a> {
    format: Format,
    tokenizer: Tokenizer,
    length: u64,
    lines: u64,
    digest: u64,
    session_id: Option<&'a str>,
    parent_session: Option<&'a str>,
    warnings: &'a [String],
    resume: &'a ResumeState,
    messages: usize,
    blocks: usize,
}

/// `items` in the order of their ids, which are unique, so any sort gives
/// the one order. Each is sorted by its id's first eight bytes as a number,
/// held beside it, and by the whole id only where those are the same: a
/// long session has tens of thousands of cuts, sorted every turn, and
/// comparing their ids as strings read each one from wherever it lay.
fn in_id_order<'c, T>(items: impl Iterator<Item = &'c (String, T)>) -> Vec<&'c (String, T)> {
    let mut keyed: Vec<(u64, &(String, T))> = items.map(|k| (leading(&k.0), k)).collect();
    keyed.sort_unstable_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.0.cmp(&b.1.0)));
    keyed.into_iter().map(|(_, k)| k).collect()
}

/// The first eight bytes of `s` (zeros past its end) as a number: two
/// strings whose numbers differ order as the numbers do.
fn leading(s: &str) -> u64 {
    let mut first = [0u8; 8];
    let n = s.len().min(8);
    first[..n].copy_from_slice(&s.as_bytes()[..n]);
    u64::from_be_bytes(first)
}

/// Where a cache's messages are decoded to, a block at a time: a warm turn
/// builds what it works on as the blocks are read ([`WarmMessages`]), so the
/// cache's own form of a long session is never held beside it.
pub trait Decode: Sized {
    /// Room for `messages` messages of `blocks` blocks in all.
    fn with_capacity(messages: usize, blocks: usize) -> Self;
    /// One message, its blocks still to come: `blocks` of them.
    fn message(&mut self, message: CachedMessage, blocks: usize);
    /// One block of the last message, its core's count known; its words,
    /// when they stand apart, come at its segment's end.
    fn block(&mut self, block: CachedBlock);
    /// The words of a block decoded before: the `bi`th of the `mi`th
    /// message, the `i`th of all.
    fn fill(&mut self, at: Place, text: String);
    /// Where in the file the words of a block decoded before, handed over
    /// without them ([`CoreMessage::withheld`]), lie.
    fn left_at(&mut self, at: Place, words: u64);
}

/// A block's place among those decoded: its message's, its own in the
/// message, and its own among all.
#[derive(Debug, Clone, Copy)]
pub struct Place {
    mi: usize,
    bi: usize,
    i: usize,
}

impl Decode for Vec<CachedMessage> {
    fn with_capacity(messages: usize, _: usize) -> Self {
        Vec::with_capacity(messages)
    }
    fn message(&mut self, mut message: CachedMessage, blocks: usize) {
        message.blocks.reserve_exact(blocks);
        self.push(message);
    }
    fn block(&mut self, block: CachedBlock) {
        if let Some(m) = self.last_mut() {
            m.blocks.push(block);
        }
    }
    fn fill(&mut self, at: Place, text: String) {
        if let Some(b) = self.get_mut(at.mi).and_then(|m| m.blocks.get_mut(at.bi)) {
            b.core.text = text;
        }
    }
    fn left_at(&mut self, _: Place, _: u64) {}
}

/// The cached messages as a warm turn works on them: host messages, the
/// flat history beside them (each core written once, where the engine reads
/// it), and the JSON of what may still be shown, unparsed.
/// [`ReadCache::into_transcript`] makes them a [`Warm`] transcript.
pub struct WarmMessages {
    messages: Vec<HostMessage>,
    history: Vec<CoreMessage>,
    elided: Vec<bool>,
    raws: Vec<Unparsed>,
    withheld: Vec<(usize, u64)>,
    words: Option<WordsFile>,
}

impl Decode for WarmMessages {
    /// The messages and the history have room for the lines a turn reads
    /// on: they are a long session's largest lists.
    fn with_capacity(messages: usize, blocks: usize) -> Self {
        WarmMessages {
            messages: Vec::with_capacity(with_room(messages)),
            history: Vec::with_capacity(with_room(blocks)),
            elided: Vec::with_capacity(with_room(blocks)),
            raws: Vec::new(),
            withheld: Vec::new(),
            words: None,
        }
    }
    fn message(&mut self, m: CachedMessage, blocks: usize) {
        // Room for the JSON of each of its blocks: a list grown by pushing
        // has room for four, and most messages have one or two.
        if let Some(raw) = m.raw {
            let kept = Vec::with_capacity(blocks);
            self.raws.push((self.messages.len(), raw, kept));
        }
        self.messages.push(HostMessage {
            raw: RawJson::default(),
            blocks: Vec::with_capacity(blocks),
            cores: Vec::new(),
            line: m.line as usize,
            prompt_tokens: m.prompt_tokens.map(|n| n as usize),
        });
    }
    /// Blocks whose words were not kept come back with empty text and their
    /// count, and are marked by place: a view that would show one cannot be
    /// served from the cache.
    fn block(&mut self, b: CachedBlock) {
        let (mi, Some(m)) = (
            self.messages.len().wrapping_sub(1),
            self.messages.last_mut(),
        ) else {
            return;
        };
        if let (true, Some(raw), Some(kept)) =
            (b.kept, b.raw, self.raws.last_mut().filter(|r| r.0 == mi))
        {
            kept.2.push((m.blocks.len(), raw));
        }
        self.elided.push(!b.kept);
        m.blocks.push(ContentBlock {
            words_at: b.words_at,
            ..ContentBlock::of(&b.core, RawJson::default(), b.source)
        });
        self.history.push(b.core);
    }
    fn fill(&mut self, at: Place, text: String) {
        if let Some(m) = self.history.get_mut(at.i) {
            m.text = text;
        }
    }
    fn left_at(&mut self, at: Place, words: u64) {
        self.withheld.push((at.i, words));
    }
}

impl ReadCache<WarmMessages> {
    /// The transcript and flat history the cache stands for. The JSON the
    /// view is written from stays unparsed until [`fill_shown`] is told
    /// which messages the view shows. The transcript holds no records (a
    /// warm read serves the view, never `materialize`).
    pub fn into_transcript(self) -> Warm {
        let WarmMessages {
            messages,
            history,
            elided,
            raws,
            withheld,
            words,
        } = self.messages;
        let transcript = Transcript {
            format: self.format,
            session_id: self.session_id,
            parent_session: self.parent_session,
            messages,
            warnings: self.warnings,
            records: Vec::new(),
            preamble: Vec::new(),
            resume: self.resume,
            // Not kept: the state has those the whole read found.
            compactions: Vec::new(),
        };
        Warm {
            transcript,
            history,
            elided,
            raws,
            cuts: self.cuts,
            withheld,
            words,
        }
    }
}

#[cfg(test)]
impl ReadCache {
    /// The cache as bytes, as [`CacheSource::write_to`] writes them.
    fn encode(&self) -> Vec<u8> {
        let write = |e: &mut Encoder<Vec<u8>>| -> io::Result<()> {
            e.bytes(MAGIC)?;
            for m in &self.messages {
                e.message(m.line, m.prompt_tokens, m.raw.as_deref(), m.blocks.len())?;
                for b in &m.blocks {
                    e.block(&BlockOut {
                        core: &b.core,
                        words: Words::Text(&b.core.text),
                        words_at: None,
                        kept: b.kept,
                        tokens: b.tokens,
                        facts: b.facts,
                        raw: b.raw.as_deref(),
                        source: b.source,
                        tokenizer: self.tokenizer,
                    })?;
                }
                e.end_segment(true)?;
            }
            e.end_segment(false)
        };
        let mut e = Encoder::new(Vec::new());
        write(&mut e).expect("writing to memory");
        let at = e.written;
        e.trailer(&Trailer {
            format: self.format,
            tokenizer: self.tokenizer,
            length: self.length,
            lines: self.lines,
            digest: self.digest,
            session_id: self.session_id.as_deref(),
            parent_session: self.parent_session.as_deref(),
            warnings: &self.warnings,
            resume: &self.resume,
            messages: self.messages.len(),
            blocks: self.messages.iter().map(|m| m.blocks.len()).sum(),
        })
        .expect("writing to memory");
        e.cuts(&self.cuts, self.tokenizer)
            .expect("writing to memory");
        e.finish(at).expect("writing to memory")
    }

    /// The cache from its bytes; `None` when they are not a cache this
    /// version of noa wrote whole.
    pub fn decode(bytes: &[u8]) -> Option<ReadCache> {
        ReadCache::read_from(io::Cursor::new(bytes), false)
    }
}

impl<M: Decode> ReadCache<M> {
    /// The cache read from `file`; `None` when it is not a cache this
    /// version of noa wrote whole. The trailer is read first, then the
    /// messages a chunk at a time, so a cache that holds a long session's
    /// words is never held whole beside the messages decoded from it. The
    /// checksum is checked once all is read, and nothing is returned unless
    /// it holds. With `withhold`, the words that stand apart (the tool
    /// outputs a projection can decide on by length, tally and ends alone,
    /// [`may_withhold`])
    /// are sought past and left in the file, their digests unchecked until
    /// they are read: a long uncompressed session's turn shows few of them;
    /// without it, each is read and checked.
    #[cfg(test)]
    fn read_from(file: impl Read + Seek, withhold: bool) -> Option<ReadCache<M>> {
        ReadCache::read_from_after(file, withhold, |_| Some(()))
    }

    /// [`ReadCache::read_from`], with `head` told what the trailer says of
    /// the transcript before the messages are decoded: a warm turn starts
    /// proving the prefix unchanged meanwhile. `None` from it stops the read.
    fn read_from_after(
        mut file: impl Read + Seek,
        withhold: bool,
        head: impl FnOnce(&CacheHead) -> Option<()>,
    ) -> Option<ReadCache<M>> {
        let len = file.seek(SeekFrom::End(0)).ok()?;
        let mut last = [0u8; 16];
        file.seek(SeekFrom::Start(len.checked_sub(16)?)).ok()?;
        file.read_exact(&mut last).ok()?;
        let [at, sum] = [&last[..8], &last[8..]]
            .map(|b| u64::from_le_bytes(b.try_into().expect("eight bytes")));
        // The trailer runs from `at` to the checksum, `at` itself included.
        let mut trailer = vec![0u8; usize::try_from((len - 8).checked_sub(at)?).ok()?];
        file.seek(SeekFrom::Start(at)).ok()?;
        file.read_exact(&mut trailer).ok()?;
        let mut r = Reader(trailer.get(..trailer.len().checked_sub(8)?)?);
        if r.str()? != env!("CARGO_PKG_VERSION") {
            return None;
        }
        let format = r.str()?;
        let format = Format::ALL.into_iter().find(|f| f.name() == format)?;
        let tokenizer = r.str()?;
        let tokenizer = [Tokenizer::Estimate, Tokenizer::O200k, Tokenizer::Cl100k]
            .into_iter()
            .find(|t| t.name() == tokenizer)?;
        let (length, lines, digest) = (r.u64()?, r.u64()?, r.u64()?);
        let session_id = r.opt()?;
        let parent_session = r.opt()?;
        let warnings = r.list()?;
        let resume = ResumeState::from_bytes(r.bytes()?)?;
        let (n, blocks) = (r.u64()?, r.u64()?);
        let cuts = r.cuts(tokenizer)?;
        if !r.0.is_empty() {
            return None;
        }
        head(&CacheHead {
            format,
            length,
            lines,
            digest,
        })?;
        file.rewind().ok()?;
        let mut r = Chunks::new(file.take(at), at);
        if r.take(MAGIC.len())? != MAGIC {
            return None;
        }
        // Sized up front: a count cannot promise more items than bytes left.
        let room = |n: u64, r: &Chunks<_>| usize::try_from(n).unwrap_or(usize::MAX).min(r.left());
        let mut messages = M::with_capacity(room(n, &r), room(blocks, &r));
        let mut decoded = 0u64;
        // The blocks of the segment whose words stand apart, with their
        // length and whether they are left in the file.
        let mut apart: Vec<(Place, usize, bool)> = Vec::new();
        for mi in 0..n {
            let mut line = r.u64()?;
            if line == SEGMENT_END {
                r.segment(&mut apart, &mut messages)?;
                line = r.u64()?;
            }
            let prompt_tokens = r.u64()?.checked_sub(1);
            let raw = r.opt()?;
            let n = r.u64()?;
            let head = CachedMessage {
                line,
                prompt_tokens,
                raw,
                blocks: Vec::new(),
            };
            messages.message(head, room(n, &r));
            for bi in 0..n {
                let id = r.name()?;
                let role = role_of(r.u64()?)?;
                let content_type = kind_of(r.u64()?)?;
                let tool_name = r.name()?;
                let tool_call_id = r.name()?;
                let flags = r.u64()?;
                let tokens = r.u64()?;
                let (facts, ends) = r.facts(flags)?;
                let kept = flags & 2 != 0;
                let mut core = CoreMessage {
                    id,
                    role,
                    content_type,
                    tool_name,
                    tool_call_id,
                    opaque: flags & 1 != 0,
                    counted: Counted::known_with(tokenizer, usize::try_from(tokens).ok()?, facts),
                    ends,
                    ..CoreMessage::text("", role, String::new())
                };
                let len = usize::try_from(r.u64()?).ok()?;
                let mut words_at = None;
                if flags & APART != 0 {
                    let left = withhold && kept && may_withhold(&core, len, tokenizer);
                    match left {
                        true => core.withheld = u32::try_from(len).ok().and_then(NonZeroU32::new),
                        // Its ends are for words not read.
                        false => core.ends = None,
                    }
                    let (mi, bi, i) = (
                        usize::try_from(mi).ok()?,
                        usize::try_from(bi).ok()?,
                        usize::try_from(decoded).ok()?,
                    );
                    let place = Place { mi, bi, i };
                    if flags & SPAN != 0 {
                        words_at = NonZeroU64::new(r.u64()?);
                        // Words in the transcript are only ever left there:
                        // a read that must hold them reads the transcript.
                        let at = words_at?.get();
                        (left && at & IN_TRANSCRIPT == 0).then_some(())?;
                        messages.left_at(place, IN_TRANSCRIPT | at);
                    } else {
                        apart.push((place, len, left));
                    }
                } else {
                    core.text = std::str::from_utf8(r.take(len)?).ok()?.to_string();
                }
                let raw = r.opt()?;
                let record = usize::try_from(r.u64()?).ok()?;
                let slot = slot_of(r.u64()?, r.u64()?)?;
                let block = CachedBlock {
                    core,
                    tokens,
                    facts,
                    kept,
                    raw,
                    source: BlockSource { record, slot },
                    words_at,
                };
                messages.block(block);
                decoded += 1;
            }
        }
        if decoded != blocks {
            return None;
        }
        // The last segment ends after the last message.
        if r.left() != 0 {
            (r.u64()? == SEGMENT_END).then_some(())?;
            r.segment(&mut apart, &mut messages)?;
        }
        if r.left() != 0 || !apart.is_empty() {
            return None;
        }
        // The checksum is taken through the messages first: where they end
        // is where a turn that appends takes it on from.
        let through = r.sum_through();
        let mut whole = through.clone();
        whole.update(&trailer);
        if whole.finish() != sum {
            return None;
        }
        let end = CacheEnd {
            at,
            sum: through,
            messages: usize::try_from(n).ok()?,
            len,
            tokenizer,
        };
        let cache = ReadCache {
            format,
            tokenizer,
            length,
            lines,
            digest,
            session_id,
            parent_session,
            warnings,
            messages,
            resume,
            cuts,
            end,
        };
        Some(cache)
    }
}

impl StoreError {
    /// Whether it is the read cache that could not be read: words a warm
    /// read left there, missing or damaged. The transcript read whole has
    /// them.
    pub fn in_read_cache(&self) -> bool {
        matches!(self, StoreError::Io { path, .. } if path.file_name() == Some(FILE.as_ref()))
    }
}

impl SessionDir {
    /// Where the session's read cache lives.
    fn read_cache_path(&self) -> PathBuf {
        self.dir.join(FILE)
    }

    /// The session's read cache, if there is one that decodes. Long tool
    /// outputs' words are left in the file, held open ([`WordsFile`]).
    pub fn load_read_cache(
        &self,
        head: impl FnOnce(&CacheHead) -> Option<()>,
    ) -> Option<ReadCache<WarmMessages>> {
        let path = self.read_cache_path();
        let file = super::files::open_read(&path).ok()?;
        let mut cache = ReadCache::<WarmMessages>::read_from_after(&file, true, head)?;
        if !cache.messages.withheld.is_empty() {
            let file = Mutex::new(file);
            cache.messages.words = Some(WordsFile {
                path,
                file,
                writing: Mutex::default(),
                transcript: None,
            });
        }
        Some(cache)
    }

    /// Appends to the read cache what follows `end`, which it was read
    /// with: cut back to where its messages ended, then written on in place,
    /// not synced (a write cut short fails the checksum: the next turn
    /// reads whole). Written anew as [`SessionDir::save_read_cache`] does
    /// when the file is not the one read, or its figures were taken with
    /// another counter.
    pub fn append_read_cache(
        &self,
        source: &CacheSource,
        end: &CacheEnd,
    ) -> Result<(), StoreError> {
        let path = self.read_cache_path();
        let file = super::files::open_write(&path);
        let file = match file {
            Err(e) if super::files::is_link(&e) => return Err(StoreError::io(&path, e)),
            Ok(f)
                if end.tokenizer == source.tokenizer
                    && f.metadata().is_ok_and(|m| m.len() == end.len) =>
            {
                f
            }
            _ => return self.save_read_cache(source),
        };
        let result = file
            .set_len(end.at)
            .and_then(|()| {
                let mut f = file;
                f.seek(io::SeekFrom::Start(end.at))?;
                source.append_to(io::BufWriter::with_capacity(1 << 16, f), end)
            })
            .and_then(|w| w.into_inner().map_err(io::IntoInnerError::into_error));
        result.map(drop).map_err(|source| StoreError::Io {
            path,
            error: source,
        })
    }

    /// Replaces the read cache: a temp file renamed over it, not synced.
    pub fn save_read_cache(&self, source: &CacheSource) -> Result<(), StoreError> {
        source.finish_draft(source.draft(&self.dir)?)
    }
}

/// The read cache a warm read left words in ([`CoreMessage::withheld`]),
/// held open from the read on: the words come from the very file whose
/// checksum the read checked, whatever is renamed over its path meanwhile
/// (a dry run takes no lock). A writer appending to the file leaves the
/// bytes the read took in as they were.
#[derive(Debug)]
pub struct WordsFile {
    path: PathBuf,
    file: Mutex<std::fs::File>,
    /// The words still being written to it, when they are (see
    /// [`AsideFile::write_later`]): a read waits for them.
    writing: Mutex<Writing>,
    /// The transcript the turn read, for the words that lie there
    /// ([`IN_TRANSCRIPT`]), with its name: read at places, by any number
    /// of threads at once (an `apply` renders its archives on several).
    transcript: Option<(String, std::fs::File)>,
}

/// Whether a [`WordsFile`]'s words are all in it.
#[derive(Debug, Default)]
enum Writing {
    #[default]
    Done,
    Pending(std::thread::JoinHandle<io::Result<()>>),
    Failed(io::ErrorKind, String),
}

impl WordsFile {
    /// The file at `path`, as a warm read leaves it open.
    #[cfg(test)]
    pub(crate) fn open(path: PathBuf) -> io::Result<WordsFile> {
        let file = Mutex::new(super::files::open_read(&path)?);
        Ok(WordsFile {
            path,
            file,
            writing: Mutex::default(),
            transcript: None,
        })
    }

    /// Reads the words that lie in the transcript ([`IN_TRANSCRIPT`]) from
    /// `file`, the transcript the turn read (named `name`), held open: the
    /// one whose prefix the turn proves unchanged by its digest.
    pub fn reading_transcript(&mut self, name: String, file: std::fs::File) {
        self.transcript = Some((name, file));
    }

    /// The words at each `(offset, length)` of the file, each checked
    /// against the digest before it; or, for an offset marked
    /// [`IN_TRANSCRIPT`], in the transcript, checked for their length.
    pub fn read(&self, spans: &[(u64, usize)]) -> Result<Vec<String>, StoreError> {
        self.ready().map_err(|source| StoreError::Io {
            path: self.path.clone(),
            error: source,
        })?;
        // Taken for the first words of the file itself: those in the
        // transcript are read by any number of threads at once.
        let mut file = None;
        let read = spans.iter().map(|&(at, len)| {
            if at & IN_TRANSCRIPT != 0 {
                return self.in_transcript(at & !IN_TRANSCRIPT, len);
            }
            let file = file
                .get_or_insert_with(|| self.file.lock().unwrap_or_else(PoisonError::into_inner));
            let mut d = [0u8; 8];
            let mut words = vec![0u8; len];
            file.seek(SeekFrom::Start(
                at.checked_sub(8).ok_or(io::ErrorKind::InvalidData)?,
            ))?;
            file.read_exact(&mut d)?;
            file.read_exact(&mut words)?;
            if cache_digest(&words) != u64::from_le_bytes(d) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "words that do not match their digest",
                ));
            }
            String::from_utf8(words).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
        });
        read.collect::<io::Result<_>>()
            .map_err(|source| StoreError::Io {
                path: self.path.clone(),
                error: source,
            })
    }

    /// The words of the JSON string at `at` in the transcript, which are
    /// `len` bytes once read: its bytes are read a little past `len` at
    /// first, and on (up to the six bytes an escape can take for one)
    /// until the string ends. An error when they are not such a string's.
    fn in_transcript(&self, at: u64, len: usize) -> io::Result<String> {
        let Some((name, file)) = &self.transcript else {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                "words that lie in the transcript, with no transcript to read them from",
            ));
        };
        let damaged = |what: &str| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("the words at byte {at} of {name}: {what}"),
            )
        };
        let most = 6 * len + 2;
        let (mut buf, mut want) = (Vec::new(), (len + len / 8 + 64).min(most));
        loop {
            let have = buf.len();
            buf.resize(want, 0);
            let mut got = have;
            while got < want {
                match read_at(file, &mut buf[got..], at + got as u64)? {
                    0 => break,
                    n => got += n,
                }
            }
            buf.truncate(got);
            if buf.first() != Some(&b'"') {
                return Err(damaged("not a string"));
            }
            if let Some(end) = string_end(&buf, 0) {
                let words: String =
                    serde_json::from_slice(&buf[..end]).map_err(|e| damaged(&e.to_string()))?;
                return match words.len() == len {
                    true => Ok(words),
                    false => Err(damaged("not the words the read cache names")),
                };
            }
            if buf.len() < want || want == most {
                return Err(damaged("a string that does not end"));
            }
            want = (want * 2).min(most);
        }
    }

    /// The words at `at`, `len` bytes, checked against the digest before
    /// them, read through `buf`, which holds the file's bytes from
    /// `start`: a read of words in the order they lie reads the file a
    /// megabyte at a time rather than a word at a time.
    fn read_through<'b>(
        &self,
        (buf, start): (&'b mut Vec<u8>, &mut u64),
        at: u64,
        len: usize,
    ) -> io::Result<&'b [u8]> {
        let from = at.checked_sub(8).ok_or(io::ErrorKind::InvalidData)?;
        let end = at + len as u64;
        if from < *start || end > *start + buf.len() as u64 {
            self.ready()?;
            let mut file = self.file.lock().unwrap_or_else(PoisonError::into_inner);
            file.seek(SeekFrom::Start(from))?;
            buf.clear();
            (&mut *file)
                .take((len + 8).max(1 << 20) as u64)
                .read_to_end(buf)?;
            *start = from;
            if buf.len() < len + 8 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        }
        let here = (from - *start) as usize;
        Ok(&buf[here..here + 8 + len])
    }

    /// Waits for the words still being written, if any: an error when
    /// they could not be.
    fn ready(&self) -> io::Result<()> {
        let mut writing = self.writing.lock().unwrap_or_else(PoisonError::into_inner);
        if let Writing::Pending(_) = &*writing
            && let Writing::Pending(h) = std::mem::take(&mut *writing)
        {
            *writing = match h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)) {
                Ok(()) => Writing::Done,
                Err(e) => Writing::Failed(e.kind(), e.to_string()),
            };
        }
        match &*writing {
            Writing::Failed(kind, what) => Err(io::Error::new(*kind, what.clone())),
            _ => Ok(()),
        }
    }

    /// A reader of its words for a pass that asks for them in the order
    /// they lie.
    fn in_order(&self) -> InOrder<'_> {
        InOrder {
            file: self,
            buf: Vec::new(),
            start: 0,
        }
    }

    /// Where the words of each message lie in it (`at`, by id), to be read
    /// by the messages' ids.
    pub fn left<'a>(&'a self, at: IdMap<'a, u64>) -> LeftWords<'a> {
        LeftWords {
            file: Some(self),
            at,
        }
    }
}

/// Long tool outputs a first turn sets aside as it reads a long
/// transcript, so their words are not all held at once: written as the
/// read cache writes the words it keeps apart (each after its digest), and
/// read back as a [`WordsFile`] for the few the view shows and for the
/// cache the turn leaves. The file is unlinked as soon as it is made: it
/// is the process's alone, and goes with it however the process ends.
#[derive(Debug)]
pub struct AsideFile {
    file: std::fs::File,
    path: PathBuf,
    written: u64,
}

impl AsideFile {
    /// A new file in `dir`, already unlinked.
    pub fn create(dir: &std::path::Path) -> io::Result<AsideFile> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(super::files::temp_name("set-aside"));
        let (file, made) = super::files::make_temp(dir, "set-aside")?;
        // Where a file cannot be unlinked while open, it stays until the
        // process is done with it.
        let _ = made.close();
        Ok(AsideFile {
            file,
            path,
            written: 0,
        })
    }

    /// One writing to `file`, as it stands (say a device that is full).
    #[cfg(test)]
    pub fn over(file: std::fs::File) -> AsideFile {
        AsideFile {
            file,
            path: PathBuf::from("aside"),
            written: 0,
        }
    }

    /// Writes each of `words` after its digest, in one call where the
    /// system takes them all (the words are copied once, into the file's
    /// pages); returns where each one starts, as [`WordsFile::read`] takes
    /// it.
    pub fn put(&mut self, words: &[&str]) -> io::Result<Vec<u64>> {
        let digests: Vec<[u8; 8]> = (words.iter())
            .map(|w| cache_digest(w.as_bytes()).to_le_bytes())
            .collect();
        let mut slices: Vec<io::IoSlice<'_>> = (digests.iter().zip(words))
            .flat_map(|(d, w)| [io::IoSlice::new(d), io::IoSlice::new(w.as_bytes())])
            .collect();
        let mut left = &mut slices[..];
        while !left.is_empty() {
            match self.file.write_vectored(left) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => io::IoSlice::advance_slices(&mut left, n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok((words.iter())
            .map(|w| {
                self.written += 8 + w.len() as u64;
                self.written - w.len() as u64
            })
            .collect())
    }

    /// The words written, to be read back.
    pub fn into_words(self) -> WordsFile {
        WordsFile {
            path: self.path,
            file: Mutex::new(self.file),
            writing: Mutex::default(),
            transcript: None,
        }
    }

    /// Writes `words` on a thread of its own, each after its digest, a
    /// megabyte at a time, each freed once written; returns the file to
    /// read them back from, whose reads wait for the writing (and fail if
    /// it failed). Each one's place is where the one before ends, eight
    /// bytes of digest on: the caller knows them before they are written.
    /// The words come back when no reader can be had of the file.
    pub fn write_later(self, words: Vec<String>) -> Result<WordsFile, (io::Error, Vec<String>)> {
        let file = match self.file.try_clone() {
            Ok(file) => file,
            Err(e) => return Err((e, words)),
        };
        let path = self.path.clone();
        let mut out = self;
        let writing = std::thread::spawn(move || {
            let mut batch = Vec::new();
            let mut bytes = 0;
            for w in words {
                bytes += w.len();
                batch.push(w);
                if bytes >= 1 << 20 {
                    out.put(&batch.iter().map(String::as_str).collect::<Vec<_>>())?;
                    (batch, bytes) = (Vec::new(), 0);
                }
            }
            out.put(&batch.iter().map(String::as_str).collect::<Vec<_>>())?;
            Ok(())
        });
        Ok(WordsFile {
            path,
            file: Mutex::new(file),
            writing: Mutex::new(Writing::Pending(writing)),
            transcript: None,
        })
    }
}

/// Where a warm read left the words of the messages it handed over without
/// them ([`CoreMessage::withheld`]): the read cache, and where each one's
/// words start in it, by message id. Empty after a whole read. What an
/// archive of such messages is rendered from, one archive's words at a time.
#[derive(Debug, Default)]
pub struct LeftWords<'a> {
    file: Option<&'a WordsFile>,
    at: IdMap<'a, u64>,
}

impl LeftWords<'_> {
    /// The words of each message `(id, length)` names, from the read cache.
    pub fn words(&self, wanted: &[(&str, usize)]) -> Result<Vec<String>, StoreError> {
        let spans = wanted
            .iter()
            .map(|&(id, len)| Some((*self.at.get(id)?, len)))
            .collect::<Option<Vec<_>>>();
        match (self.file, spans) {
            (Some(file), Some(spans)) => file.read(&spans),
            _ => Err(StoreError::Io {
                path: PathBuf::from(FILE),
                error: io::Error::new(
                    io::ErrorKind::NotFound,
                    "words a message was handed over without are not in the read cache",
                ),
            }),
        }
    }

    /// `messages` given their words from the read cache.
    pub fn worded(&self, messages: &[&CoreMessage]) -> Result<Vec<CoreMessage>, StoreError> {
        let wanted: Vec<(&str, usize)> = (messages.iter())
            .map(|m| (m.id.as_str(), m.text_len()))
            .collect();
        let words = self.words(&wanted)?;
        Ok(messages
            .iter()
            .zip(words)
            .map(|(m, text)| CoreMessage {
                text,
                withheld: None,
                ends: None,
                ..(*m).clone()
            })
            .collect())
    }
}

/// A [`WordsFile`] read in the order its words lie (see
/// [`WordsFile::in_order`]).
struct InOrder<'a> {
    file: &'a WordsFile,
    buf: Vec<u8>,
    start: u64,
}

impl InOrder<'_> {
    /// The `len` bytes of words at `at`, after their digest, as they lie:
    /// not checked against it, for a writer that copies both into a file
    /// whose reader checks them.
    fn digested(&mut self, at: u64, len: usize) -> io::Result<&[u8]> {
        self.file
            .read_through((&mut self.buf, &mut self.start), at, len)
    }
}

/// A new read cache in its temp file, its messages written and its trailer
/// not yet: see [`CacheSource::draft`].
pub struct CacheDraft {
    out: Encoder<io::BufWriter<std::fs::File>>,
    replacing: Replacing,
}

impl CacheDraft {
    /// Lets the draft go: its temp file is removed.
    pub fn discard(self) {}
}

impl CacheSource<'_> {
    /// Writes a new read cache's messages to a temp file in the session
    /// directory `dir`. A turn that can hide nothing (a first turn, with
    /// no blocks) keeps every word, so it writes them while it projects;
    /// [`CacheSource::finish_draft`] adds the trailer, with the turn's
    /// cuts, once it is done.
    pub fn draft(&self, dir: &std::path::Path) -> Result<CacheDraft, StoreError> {
        let path = dir.join(FILE);
        let written = Replacing::begin(&path).and_then(|(f, replacing)| {
            let out = self.begin(io::BufWriter::with_capacity(1 << 16, f))?;
            Ok(CacheDraft { out, replacing })
        });
        written.map_err(|source| StoreError::Io {
            path,
            error: source,
        })
    }

    /// Ends `draft` with this source's trailer and puts it in place of the
    /// cache, not synced.
    pub fn finish_draft(&self, draft: CacheDraft) -> Result<(), StoreError> {
        let CacheDraft { out, replacing } = draft;
        let path = replacing.path().to_path_buf();
        let result = self
            .trailer(out)
            .and_then(|w| w.into_inner().map_err(io::IntoInnerError::into_error))
            .and_then(|_| replacing.finish());
        result.map_err(|source| StoreError::Io {
            path,
            error: source,
        })
    }
}

/// A block's words as the writer is given them: its text, or words set
/// aside in a file, read back after their digest.
#[derive(Clone, Copy)]
enum Words<'w> {
    Text(&'w str),
    Digested(&'w [u8]),
    /// Words a turn holds no copy of, that lie in the transcript as the
    /// JSON string at the place given, and are the length given once read.
    InTranscript(u64, usize),
}

impl Words<'_> {
    /// Their length in bytes.
    fn len(self) -> usize {
        match self {
            Words::Text(text) => text.len(),
            Words::Digested(digested) => digested.len() - 8,
            Words::InTranscript(_, len) => len,
        }
    }

    /// Which of their ends are CJK ones, read from them; an error for
    /// words that are not here, whose message carries its ends (see
    /// [`CoreMessage::let_go`]).
    fn ends(self) -> io::Result<Ends> {
        let text = match self {
            Words::Text(text) => text,
            Words::Digested(digested) => std::str::from_utf8(&digested[8..])
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?,
            Words::InTranscript(..) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "words left in the transcript came without their ends",
                ));
            }
        };
        Ok(Ends::of(text))
    }
}

/// Writes the cache's fields, taking every byte into the checksum that
/// ends the file.
struct Encoder<W> {
    out: W,
    sum: CacheDigest,
    /// Bytes of the file before the next one, counting those still here.
    written: u64,
    /// Fields gather here and go to the checksum and the writer a chunk at
    /// a time: a cache is hundreds of thousands of small fields.
    buf: Vec<u8>,
    /// The long words of the segment, each after its digest: written once
    /// its fields are.
    words: Vec<u8>,
}

/// How many bytes [`Encoder`] gathers before it passes them on.
const CHUNK: usize = 64 * 1024;

impl<W: Write> Encoder<W> {
    fn new(out: W) -> Encoder<W> {
        Encoder {
            out,
            sum: CacheDigest::default(),
            written: 0,
            buf: Vec::with_capacity(CHUNK),
            words: Vec::new(),
        }
    }

    fn bytes(&mut self, b: &[u8]) -> io::Result<()> {
        self.written += b.len() as u64;
        self.buf.extend_from_slice(b);
        if self.buf.len() >= CHUNK {
            self.pass_on()?;
        }
        Ok(())
    }
    fn pass_on(&mut self) -> io::Result<()> {
        self.sum.update(&self.buf);
        self.out.write_all(&self.buf)?;
        self.buf.clear();
        Ok(())
    }
    fn u64(&mut self, n: u64) -> io::Result<()> {
        self.bytes(&n.to_le_bytes())
    }
    /// Long words, apart from the checksum, for the segment's end: their
    /// digest, then them.
    fn apart(&mut self, words: &[u8]) {
        self.words
            .extend_from_slice(&cache_digest(words).to_le_bytes());
        self.words.extend_from_slice(words);
    }
    /// Ends the segment, when it holds long words: its end and their
    /// length, then the words. `full` ends it only once it holds
    /// [`SEGMENT`] bytes of them.
    fn end_segment(&mut self, full: bool) -> io::Result<()> {
        if self.words.is_empty() || full && self.words.len() < SEGMENT {
            return Ok(());
        }
        self.u64(SEGMENT_END)?;
        self.u64(self.words.len() as u64)?;
        self.pass_on()?;
        self.out.write_all(&self.words)?;
        self.written += self.words.len() as u64;
        self.words.clear();
        Ok(())
    }
    fn str(&mut self, s: &str) -> io::Result<()> {
        self.u64(s.len() as u64)?;
        self.bytes(s.as_bytes())
    }
    fn list(&mut self, items: &[String]) -> io::Result<()> {
        self.u64(items.len() as u64)?;
        items.iter().try_for_each(|s| self.str(s))
    }
    fn opt(&mut self, s: Option<&str>) -> io::Result<()> {
        match s {
            Some(s) => {
                self.bytes(&[1])?;
                self.str(s)
            }
            None => self.bytes(&[0]),
        }
    }

    /// Everything after the messages (see [`Trailer`]).
    fn trailer(&mut self, t: &Trailer) -> io::Result<()> {
        self.str(env!("CARGO_PKG_VERSION"))?;
        self.str(t.format.name())?;
        self.str(t.tokenizer.name())?;
        self.u64(t.length)?;
        self.u64(t.lines)?;
        self.u64(t.digest)?;
        self.opt(t.session_id)?;
        self.opt(t.parent_session)?;
        self.list(t.warnings)?;
        // The reader's own bytes: the cache does not know its fields.
        let resume = t.resume.to_bytes();
        self.u64(resume.len() as u64)?;
        self.bytes(&resume)?;
        self.u64(t.messages as u64)?;
        self.u64(t.blocks as u64)
    }

    /// The turn's cuts on the cache's counter, `tokenizer`: how many, then
    /// each with its message id, in the order of the ids: a turn makes its
    /// cuts largest output first and a retry of it takes them back in the
    /// view's order, and both leave the same cache.
    fn cuts(&mut self, cuts: &[(String, KeptCut)], tokenizer: Tokenizer) -> io::Result<()> {
        let on = in_id_order(cuts.iter().filter(|k| k.1.tokenizer == tokenizer));
        self.u64(on.len() as u64)?;
        for (id, k) in on {
            self.str(id)?;
            let c = &k.cut;
            for n in [
                k.keep,
                k.text_len,
                c.head_end,
                c.tail_start,
                usize::from(c.in_chars),
            ] {
                self.u64(n as u64)?;
            }
            self.u64(k.suffix)?;
            for n in [c.before, c.cut_tokens, c.after, c.chars] {
                self.u64(n as u64)?;
            }
        }
        Ok(())
    }

    /// One host message, before its `blocks` blocks.
    fn message(
        &mut self,
        line: u64,
        prompt_tokens: Option<u64>,
        raw: Option<&str>,
        blocks: usize,
    ) -> io::Result<()> {
        self.u64(line)?;
        self.u64(prompt_tokens.map_or(0, |n| n + 1))?;
        self.opt(raw)?;
        self.u64(blocks as u64)
    }

    /// One block: its flat message, with the words only when kept, and
    /// its count with what is known of its text ([`Facts`]).
    fn block(&mut self, b: &BlockOut) -> io::Result<()> {
        let (c, words, words_at, kept) = (b.core, b.words, b.words_at, b.kept);
        let (tokens, facts, raw, source, tokenizer) =
            (b.tokens, b.facts, b.raw, b.source, b.tokenizer);
        if kept && c.withheld.is_some() && matches!(words, Words::Text("")) {
            // Its words are in the file being replaced: never written empty.
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a message's words were not read from the read cache",
            ));
        }
        self.str(&c.id)?;
        self.u64(role_code(c.role))?;
        self.u64(kind_code(c.content_type))?;
        self.str(&c.tool_name)?;
        self.str(&c.tool_call_id)?;
        let tallied = facts
            .round
            .map_or(0, |r| TALLIED | u64::from(r & 3) << ROUND_SHIFT);
        let cjk = if facts.cjk > 0 { CJK } else { 0 };
        let bits = u64::from(facts.ascii) << 2 | u64::from(facts.unmarked) << 3 | tallied | cjk;
        let len = words.len();
        let apart = kept && len >= WITHHELD_MIN && may_withhold_knowing(c, facts, len, tokenizer);
        // The ends of words that stand apart and hold CJK characters.
        let ends = match &c.ends {
            _ if !apart || facts.cjk == 0 => None,
            Some(ends) => Some(std::borrow::Cow::Borrowed(&**ends)),
            None => Some(std::borrow::Cow::Owned(words.ends()?)),
        };
        // Where long words lie in the transcript, when they do.
        let span = match words {
            Words::InTranscript(at, _) => Some(at),
            Words::Text(_) => words_at,
            Words::Digested(_) => None,
        }
        .filter(|_| apart);
        let flags = u64::from(c.opaque) | u64::from(kept) << 1 | bits;
        let flags = flags | if apart { APART } else { 0 } | if span.is_some() { SPAN } else { 0 };
        let flags = flags | if ends.is_some() { ENDS } else { 0 };
        self.u64(flags)?;
        self.u64(tokens)?;
        if cjk != 0 {
            self.u64(facts.cjk as u64)?;
        }
        if let Some(ends) = ends {
            let (head, tail) = ends.words();
            for words in [head, tail] {
                self.u64(words.len() as u64)?;
                words.iter().try_for_each(|&w| self.u64(w))?;
            }
        }
        if let Some(at) = span {
            self.u64(len as u64)?;
            self.u64(at)?;
            return self.block_end(raw, source);
        }
        match words {
            Words::Text(text) if apart => {
                self.u64(len as u64)?;
                self.apart(text.as_bytes());
            }
            Words::Digested(digested) if apart => {
                self.u64(len as u64)?;
                self.words.extend_from_slice(digested);
            }
            Words::Text(text) => self.str(if kept { text } else { "" })?,
            Words::Digested(digested) => {
                let text = std::str::from_utf8(&digested[8..])
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                self.str(if kept { text } else { "" })?;
            }
            // Only words a turn could leave where they are are handed over
            // without them, and those stand apart.
            Words::InTranscript(..) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "words that lie in the transcript do not stand apart",
                ));
            }
        }
        self.block_end(raw, source)
    }

    /// The fields of a block after its words: its JSON and its source.
    fn block_end(&mut self, raw: Option<&str>, source: BlockSource) -> io::Result<()> {
        self.opt(raw)?;
        self.u64(source.record as u64)?;
        let (slot, n) = slot_code(source.slot);
        self.u64(slot)?;
        self.u64(n)
    }

    /// Ends the file with where its trailer starts (`at`), and the checksum
    /// of every byte before it.
    fn finish(mut self, at: u64) -> io::Result<W> {
        self.u64(at)?;
        self.pass_on()?;
        let sum = self.sum.finish();
        self.out.write_all(&sum.to_le_bytes())?;
        Ok(self.out)
    }
}

/// Fields read back as [`Encoder`] wrote them, from wherever `take`
/// finds the bytes.
trait Fields {
    /// The next `n` bytes; `None` past the end.
    fn take(&mut self, n: usize) -> Option<&[u8]>;
    /// How many bytes are left.
    fn left(&self) -> usize;

    #[inline(always)]
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    #[inline]
    fn str(&mut self) -> Option<&str> {
        let n = usize::try_from(self.u64()?).ok()?;
        std::str::from_utf8(self.take(n)?).ok()
    }
    /// A short text as a [`Name`]: the ids and tool names of every message,
    /// ASCII as noa derives them, are checked as such, which costs less
    /// than checking them as UTF-8.
    fn name(&mut self) -> Option<Name> {
        let n = usize::try_from(self.u64()?).ok()?;
        let bytes = self.take(n)?;
        Name::from_ascii(bytes).or_else(|| std::str::from_utf8(bytes).ok().map(Name::new))
    }
    fn list(&mut self) -> Option<Vec<String>> {
        (0..self.u64()?)
            .map(|_| self.str().map(str::to_string))
            .collect()
    }
    fn opt(&mut self) -> Option<Option<String>> {
        match self.take(1)?[0] {
            0 => Some(None),
            1 => Some(Some(self.str()?.to_string())),
            _ => None,
        }
    }
    /// Bytes after their length.
    fn bytes(&mut self) -> Option<&[u8]> {
        let n = usize::try_from(self.u64()?).ok()?;
        self.take(n)
    }
    /// What a block's `flags` and the fields after its count say is
    /// known of its text, and its ends when they are there.
    fn facts(&mut self, flags: u64) -> Option<(Facts, Option<Box<Ends>>)> {
        let tallied = flags & TALLIED != 0;
        let facts = Facts {
            ascii: flags & 4 != 0,
            unmarked: flags & 8 != 0,
            round: tallied.then_some((flags >> ROUND_SHIFT & 3) as u8),
            cjk: match flags & CJK {
                0 => 0,
                _ => usize::try_from(self.u64()?).ok()?,
            },
        };
        let ends = match flags & ENDS {
            0 => None,
            _ => {
                let mut words = || (0..self.u64()?).map(|_| self.u64()).collect::<Option<_>>();
                let head = words()?;
                Some(Box::new(Ends::from_words(head, words()?)?))
            }
        };
        // Words that hold CJK characters stand apart with their ends.
        let apart = flags & APART != 0;
        (!apart || facts.cjk == 0 || ends.is_some()).then_some((facts, ends))
    }
}

/// Fields of a trailer held in memory.
struct Reader<'a>(&'a [u8]);

impl Fields for Reader<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let (head, rest) = self.0.split_at_checked(n)?;
        self.0 = rest;
        Some(head)
    }
    fn left(&self) -> usize {
        self.0.len()
    }
}

/// How many bytes [`Chunks`] reads at a time: few enough that a chunk is
/// still in the core's own cache when its fields are decoded.
const READ_CHUNK: usize = 128 << 10;

/// Fields of a stream read a chunk at a time, every byte of them through
/// the checksum, and the words that stand apart from it passed over or
/// checked against their own digest.
struct Chunks<R> {
    src: io::Take<R>,
    /// The bytes `src` held to begin with.
    size: u64,
    buf: Vec<u8>,
    /// Where the next field starts in `buf`.
    at: usize,
    /// Where the bytes of `buf` the checksum has not taken in start: fields
    /// are taken in once they are read, a run of them at a time.
    summed: usize,
    sum: CacheDigest,
}

impl<R: Read + Seek> Chunks<R> {
    /// Fields of `src`, which holds `size` bytes.
    fn new(src: io::Take<R>, size: u64) -> Chunks<R> {
        Chunks {
            src,
            size,
            buf: Vec::new(),
            at: 0,
            summed: 0,
            sum: CacheDigest::default(),
        }
    }

    /// The checksum of every field read so far.
    fn sum_through(&mut self) -> CacheDigest {
        self.sum.update(&self.buf[self.summed..self.at]);
        self.summed = self.at;
        self.sum.clone()
    }

    /// Where the next field starts in the stream.
    fn position(&self) -> u64 {
        self.size - self.src.limit() - (self.buf.len() - self.at) as u64
    }

    /// Passes over the next `n` bytes, which stand apart from the checksum,
    /// without reading them: the file is sought past what is not held.
    fn pass(&mut self, n: u64) -> Option<()> {
        self.sum_through();
        if n > self.left() as u64 {
            return None;
        }
        let held = (self.buf.len() - self.at) as u64;
        if n <= held {
            self.at += n as usize;
        } else {
            let rest = n - held;
            let limit = self.src.limit() - rest;
            self.src
                .get_mut()
                .seek(SeekFrom::Current(rest as i64))
                .ok()?;
            self.src.set_limit(limit);
            self.buf.clear();
            self.at = 0;
        }
        self.summed = self.at;
        Some(())
    }

    /// The words of a segment (after its end and their length), given to
    /// the blocks `apart` names, or passed over where they are left in the
    /// file; `apart` is emptied.
    fn segment<M: Decode>(
        &mut self,
        apart: &mut Vec<(Place, usize, bool)>,
        messages: &mut M,
    ) -> Option<()> {
        let words = self.u64()?;
        let mut at = self.position();
        let end = at.checked_add(words)?;
        // Words left in the file are passed over a run at a time.
        for (place, len, left) in apart.drain(..) {
            if left {
                messages.left_at(place, at + 8);
            } else {
                self.pass(at - self.position())?;
                let text = std::str::from_utf8(self.take_apart(len)?).ok()?.to_string();
                messages.fill(place, text);
            }
            at += 8 + len as u64;
        }
        (at == end).then_some(())?;
        self.pass(end - self.position())
    }

    /// The next `n` words that stand apart, checked against their digest.
    fn take_apart(&mut self, n: usize) -> Option<&[u8]> {
        self.sum_through();
        let d = self.u64()?;
        self.summed = self.at;
        self.take(n)?;
        self.summed = self.at;
        let words = &self.buf[self.at - n..self.at];
        (cache_digest(words) == d).then_some(words)
    }

    /// Reads on until at least `n` bytes are held past `at`; kept out of
    /// `take`, which runs for every field, so that it stays small.
    #[cold]
    #[inline(never)]
    fn refill(&mut self, n: usize) -> Option<()> {
        // A length no bytes left could hold is damage, not a request for
        // that much memory.
        if n > self.left() {
            return None;
        }
        self.sum.update(&self.buf[self.summed..self.at]);
        self.buf.drain(..self.at);
        (self.at, self.summed) = (0, 0);
        let have = self.buf.len();
        let limit = usize::try_from(self.src.limit()).unwrap_or(usize::MAX);
        let want = n.max(READ_CHUNK).min(have.saturating_add(limit));
        self.buf.reserve_exact(want - have);
        let src = &mut self.src;
        src.take((want - have) as u64)
            .read_to_end(&mut self.buf)
            .ok()?;
        (self.buf.len() >= n).then_some(())
    }
}

impl<R: Read + Seek> Fields for Chunks<R> {
    #[inline(always)]
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        if self.buf.len() - self.at < n {
            self.refill(n)?;
        }
        let field = &self.buf[self.at..self.at + n];
        self.at += n;
        Some(field)
    }
    fn left(&self) -> usize {
        let limit = usize::try_from(self.src.limit()).unwrap_or(usize::MAX);
        (self.buf.len() - self.at).saturating_add(limit)
    }
}

impl Reader<'_> {
    /// The turn's cuts, on the cache's counter.
    fn cuts(&mut self, tokenizer: Tokenizer) -> Option<Vec<(String, KeptCut)>> {
        (0..self.u64()?)
            .map(|_| {
                let id = self.str()?.to_string();
                let mut f = [0u64; 10];
                for n in &mut f {
                    *n = self.u64()?;
                }
                let [
                    keep,
                    text_len,
                    head_end,
                    tail_start,
                    in_chars,
                    suffix,
                    before,
                    cut_tokens,
                    after,
                    chars,
                ] = f;
                let n = |n: u64| usize::try_from(n).ok();
                let cut = Cut {
                    head_end: n(head_end)?,
                    tail_start: n(tail_start)?,
                    before: n(before)?,
                    cut_tokens: n(cut_tokens)?,
                    after: n(after)?,
                    chars: n(chars)?,
                    in_chars: match in_chars {
                        0 => false,
                        1 => true,
                        _ => return None,
                    },
                };
                let kept = KeptCut {
                    tokenizer,
                    keep: n(keep)?,
                    text_len: n(text_len)?,
                    suffix,
                    cut,
                };
                Some((id, kept))
            })
            .collect()
    }
}

const ROLES: [Role; 4] = [Role::System, Role::User, Role::Assistant, Role::Tool];
const KINDS: [ContentType; 4] = [
    ContentType::Text,
    ContentType::ToolCall,
    ContentType::ToolResult,
    ContentType::Reasoning,
];

fn role_code(r: Role) -> u64 {
    ROLES
        .iter()
        .position(|&x| x == r)
        .expect("every role is listed") as u64
}

fn role_of(n: u64) -> Option<Role> {
    ROLES.get(usize::try_from(n).ok()?).copied()
}

fn kind_code(k: ContentType) -> u64 {
    KINDS
        .iter()
        .position(|&x| x == k)
        .expect("every kind is listed") as u64
}

fn kind_of(n: u64) -> Option<ContentType> {
    KINDS.get(usize::try_from(n).ok()?).copied()
}

fn slot_code(s: Slot) -> (u64, u64) {
    match s {
        Slot::Content => (0, 0),
        Slot::Part(i) => (1, i as u64),
        Slot::ToolCall(i) => (2, i as u64),
        Slot::Reasoning => (3, 0),
    }
}

fn slot_of(kind: u64, n: u64) -> Option<Slot> {
    let n = usize::try_from(n).ok()?;
    match kind {
        0 => Some(Slot::Content),
        1 => Some(Slot::Part(n)),
        2 => Some(Slot::ToolCall(n)),
        3 => Some(Slot::Reasoning),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Cuts are written in the order of their ids, whichever order
        /// they come in: ids shorter or longer than eight bytes, sharing
        /// their first bytes, or holding NULs and characters of several
        /// bytes.
        #[test]
        fn cuts_go_in_the_order_of_their_ids(
            ids in proptest::collection::btree_set("(h_)?[0a-c\\x00é]{0,10}", 0..40),
            turn in 0usize..40,
        ) {
            let want: Vec<&String> = ids.iter().collect();
            let mut items: Vec<(String, usize)> = ids.iter().map(|id| (id.clone(), 0)).collect();
            items.reverse();
            let half = turn.min(items.len());
            items[..half].reverse();
            let got: Vec<&String> = in_id_order(items.iter()).into_iter().map(|k| &k.0).collect();
            proptest::prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn a_damaged_cache_does_not_decode() {
        let cache = ReadCache {
            format: Format::Chat,
            tokenizer: Tokenizer::Estimate,
            length: 10,
            lines: 1,
            digest: 7,
            session_id: Some("s".into()),
            parent_session: None,
            warnings: vec!["w".into()],
            resume: ResumeState {
                subagent: Some(false),
                leaf: Some("u1".into()),
                after_leaf: vec!["u2".into()],
                responses: vec!["msg_1".into()],
                strays: Vec::new(),
                codex: Some(crate::formats::CodexResume {
                    items: 3,
                    trailing_outputs: 1,
                    floor: 2,
                    output_since_count: true,
                    pending: Some(0),
                    last_message: None,
                }),
                branch: crate::formats::BranchChoice::default(),
            },
            messages: vec![CachedMessage {
                line: 1,
                prompt_tokens: Some(0),
                raw: Some("{}".into()),
                blocks: vec![
                    CachedBlock {
                        // Long enough to stand apart from the checksum.
                        core: CoreMessage::tool_result("h_1", "c1", "Read", "out ".repeat(40)),
                        tokens: 40,
                        facts: Facts {
                            ascii: true,
                            unmarked: true,
                            round: Some(0),
                            cjk: 0,
                        },
                        kept: true,
                        raw: Some("\"out\"".into()),
                        source: BlockSource {
                            record: 0,
                            slot: Slot::Part(2),
                        },
                        words_at: None,
                    },
                    // Long words that hold CJK characters stand apart with
                    // their ends.
                    CachedBlock {
                        core: CoreMessage::tool_result("h_1c", "c1", "Read", "输出 ".repeat(40)),
                        tokens: 90,
                        facts: Facts {
                            ascii: false,
                            unmarked: true,
                            round: Some(0),
                            cjk: 80,
                        },
                        kept: true,
                        raw: Some("\"输出\"".into()),
                        source: BlockSource {
                            record: 0,
                            slot: Slot::Part(3),
                        },
                        words_at: None,
                    },
                    // A name past the inline length, one not ASCII, and a
                    // block whose words were not kept.
                    CachedBlock {
                        core: CoreMessage::tool_call(
                            "h_2",
                            "toolu_0116Hyi5v8ut7Ffb7d8qV1Sc",
                            "détail",
                            "",
                        ),
                        tokens: 1,
                        facts: Facts::default(),
                        kept: false,
                        raw: None,
                        source: BlockSource {
                            record: 0,
                            slot: Slot::Part(3),
                        },
                        words_at: None,
                    },
                ],
            }],
            cuts: vec![(
                "h_1".into(),
                KeptCut {
                    tokenizer: Tokenizer::Estimate,
                    keep: 2_000,
                    text_len: 9_000,
                    suffix: u64::MAX - 1,
                    cut: Cut {
                        head_end: 2_000,
                        tail_start: 6_950,
                        before: 2_260,
                        cut_tokens: 1_238,
                        after: 1_047,
                        chars: 4_188,
                        in_chars: true,
                    },
                },
            )],
            end: CacheEnd::default(),
        };
        let bytes = cache.encode();
        let mut decoded = ReadCache::decode(&bytes).unwrap();
        // Where the messages end: the trailer follows them, and the
        // checksum taken through them, all but the words that stand apart
        // and their digest, is the one appending goes on from.
        let end = std::mem::take(&mut decoded.end);
        assert_eq!(decoded, cache);
        assert_eq!((end.messages, end.len), (1, bytes.len() as u64));
        // The two long outputs stand apart, each after its digest.
        let apart: Vec<(usize, usize)> = (cache.messages[0].blocks[..2].iter())
            .map(|b| {
                let words = b.core.text.as_bytes();
                let w = bytes.windows(words.len()).position(|b| b == words).unwrap();
                assert_eq!(bytes[w - 8..w], cache_digest(words).to_le_bytes());
                (w - 8, w + words.len())
            })
            .collect();
        assert_eq!(end.sum, {
            let mut d = CacheDigest::default();
            d.update(&bytes[..apart[0].0]);
            d.update(&bytes[apart[0].1..apart[1].0]);
            d.update(&bytes[apart[1].1..end.at as usize]);
            d
        });
        assert_eq!(ReadCache::decode(&bytes[..bytes.len() - 1]), None);
        assert_eq!(ReadCache::decode(&[bytes.as_slice(), b"x"].concat()), None);
        assert_eq!(ReadCache::decode(b"state"), None);
        // A byte changed anywhere, in the messages or the trailer, is damage.
        for at in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x20;
            assert_eq!(ReadCache::decode(&damaged), None, "byte {at}");
        }
        // Messages past what one read takes in, words longer than it
        // included, are read a chunk at a time to the same cache.
        let mut large = cache.clone();
        let message = large.messages[0].clone();
        large.messages = (0..3_000).map(|_| message.clone()).collect();
        large.messages[1_500].blocks[0].core.text = "words ".repeat(READ_CHUNK / 2);
        let bytes = large.encode();
        assert!(bytes.len() > 3 * READ_CHUNK, "{}", bytes.len());
        let mut decoded = ReadCache::decode(&bytes).unwrap();
        decoded.end = CacheEnd::default();
        assert_eq!(decoded, large);
        // A warm read passes over every one of those words, reading the
        // fields and seeking past the words (but for what one read takes
        // in past a segment's fields), and finds each where it said.
        let read = std::rc::Rc::new(std::cell::Cell::new(0));
        let file = Counting(io::Cursor::new(&bytes), std::rc::Rc::clone(&read));
        let warm = ReadCache::<WarmMessages>::read_from(file, true).unwrap();
        let warm = warm.into_transcript();
        // Two long outputs a message, one of them in CJK.
        assert_eq!(warm.withheld.len(), 6_000);
        let mut left = 0;
        for &(i, at) in &warm.withheld {
            let words = large.messages[i / 3].blocks[i % 3].core.text.as_bytes();
            assert_eq!(warm.history[i].text_len(), words.len());
            assert_eq!(&bytes[at as usize..][..words.len()], words);
            left += words.len();
        }
        // Each segment's words are passed over after its fields, one read
        // taking in some of them.
        assert!(
            read.get() + left <= bytes.len() + READ_CHUNK * left.div_ceil(SEGMENT),
            "{} of {} read",
            read.get(),
            bytes.len()
        );
    }

    /// A file that counts the bytes read from it.
    struct Counting<R>(R, std::rc::Rc<std::cell::Cell<usize>>);

    impl<R: Read> Read for Counting<R> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.0.read(buf)?;
            self.1.set(self.1.get() + n);
            Ok(n)
        }
    }

    impl<R: Seek> Seek for Counting<R> {
        fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
            self.0.seek(to)
        }
    }
}

#[cfg(test)]
mod append_tests {
    use super::*;
    use crate::engine::tokens::Tally;
    use crate::formats::{BadLines, read};
    use serde_json::json;

    /// A chat log of `n` exchanges, its words long enough to count.
    fn log(n: usize) -> String {
        (0..n)
            .map(|i| {
                format!(
                    "{{\"role\":\"user\",\"content\":\"question {i}: {}\"}}\n{{\"role\":\"assistant\",\"content\":\"answer {i}\"}}\n",
                    "why ".repeat(i % 7)
                )
            })
            .collect()
    }

    /// What a turn that read `text` whole, into `t` and `history`, leaves a
    /// cache of: the messages `keep` says keep their words.
    fn read_whole<'a>(
        t: &'a Transcript,
        history: &'a [CoreMessage],
        text: &str,
        keep: &'a dyn Fn(usize, &CoreMessage) -> bool,
    ) -> CacheSource<'a> {
        CacheSource {
            transcript: t,
            history,
            tokenizer: Tokenizer::Estimate,
            mark: (
                text.len() as u64,
                text.lines().count() as u64,
                crate::store::transcript_digest(text.as_bytes()),
            ),
            keep,
            unparsed: &[],
            cuts: &[],
            left: None,
        }
    }

    /// The cache a turn leaves after reading `text` whole, every word kept
    /// but those of the messages `fold` names; appended to `end` when given.
    fn written(text: &str, fold: &[usize], end: Option<&CacheEnd>, base: &[u8]) -> Vec<u8> {
        let mut t = read("t", text, None, BadLines::Fail).unwrap();
        let history = t.take_cores();
        let keep = |i: usize, _: &CoreMessage| !fold.contains(&i);
        let source = read_whole(&t, &history, text, &keep);
        match end {
            None => source.write_to(Vec::new()).unwrap(),
            Some(end) => {
                let kept = base[..end.at as usize].to_vec();
                source.append_to(kept, end).unwrap()
            }
        }
    }

    #[test]
    fn a_cache_appended_to_reads_as_one_written_whole() {
        let (short, long) = (log(6), log(9));
        let first = written(&short, &[], None, &[]);
        let end = ReadCache::decode(&first).unwrap().end;
        assert_eq!(end.messages, 12);
        let appended = written(&long, &[], Some(&end), &first);
        // What the first turn wrote of its messages stays byte for byte.
        assert_eq!(appended[..end.at as usize], first[..end.at as usize]);
        let whole = written(&long, &[], None, &[]);
        assert_eq!(appended, whole);
        // Words a later turn folds away stay where they were written; a
        // cache written anew leaves them out. Both read back to the same
        // transcript but for those words.
        let folding = written(&long, &[0, 1], Some(&end), &first);
        let anew = written(&long, &[0, 1], None, &[]);
        assert_eq!(folding, whole);
        assert!(anew.len() < whole.len());
        let (a, b) = (
            ReadCache::decode(&folding).unwrap(),
            ReadCache::decode(&anew).unwrap(),
        );
        assert_eq!(a.messages[2..], b.messages[2..]);
        assert_eq!((a.length, a.lines, a.digest), (b.length, b.lines, b.digest));
        // A write cut short does not decode: the next turn reads whole.
        for cut in [1, 9, appended.len() - end.at as usize - 1] {
            assert_eq!(ReadCache::decode(&appended[..appended.len() - cut]), None);
        }
    }

    fn warm(bytes: &[u8], withhold: bool) -> Option<Warm> {
        let read = ReadCache::<WarmMessages>::read_from(io::Cursor::new(bytes), withhold);
        read.map(ReadCache::into_transcript)
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(32))]

        /// Over chat logs of tool outputs of every kind (short, long, not
        /// ASCII, with CJK characters, holding the marker, some folded
        /// away), a warm read that leaves words in the file gives the
        /// history a read of every word gives but for those texts, and each
        /// of those lies in the file where the read says, byte for byte,
        /// in any script, those with CJK characters with their ends.
        #[test]
        fn words_left_in_the_cache_lie_where_the_read_says(
            outputs in proptest::collection::vec(("[a-z \n]{0,400}", 0u8..7), 1..30),
            fold in proptest::collection::vec(0usize..90, 0..6),
        ) {
            let mut lines = vec![json!({"role": "user", "content": "go"}).to_string()];
            for (i, (words, kind)) in outputs.iter().enumerate() {
                let words = match kind {
                    0 => format!("{words}é"),
                    1 => format!("{words}[truncated for context space"),
                    2 => words.repeat(3),
                    3 => format!("{words}中"),
                    _ => words.clone(),
                };
                let id = format!("c{i}");
                let call = json!({"id": id, "type": "function", "function": {"name": "Bash", "arguments": "{}"}});
                lines.push(json!({"role": "assistant", "content": null, "tool_calls": [call]}).to_string());
                lines.push(json!({"role": "tool", "tool_call_id": id, "content": words}).to_string());
            }
            let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
            let bytes = written(&text, &fold, None, &[]);
            let (left, whole) = (warm(&bytes, true).unwrap(), warm(&bytes, false).unwrap());
            proptest::prop_assert!(whole.withheld.is_empty());
            let mut at = left.withheld.iter().peekable();
            for (i, (m, w)) in left.history.iter().zip(&whole.history).enumerate() {
                match at.next_if(|(j, _)| *j == i) {
                    Some(&(_, start)) => {
                        let len = w.text.len();
                        proptest::prop_assert!(m.text.is_empty() && m.text_len() == len && len >= WITHHELD_MIN);
                        proptest::prop_assert_eq!(&bytes[start as usize..][..len], w.text.as_bytes());
                        proptest::prop_assert!(!w.text.contains("[truncated"));
                        // Words with CJK characters are left with their ends.
                        let ends = w.text.contains('中').then(|| Ends::of(&w.text));
                        proptest::prop_assert_eq!(m.ends.as_deref(), ends.as_ref());
                    }
                    None => proptest::prop_assert_eq!(m, w),
                }
            }
            proptest::prop_assert!(at.next().is_none());
        }
    }

    #[test]
    fn a_warm_read_leaves_long_outputs_in_the_file_where_it_finds_them_again() {
        let long = "a line of output, all ASCII\n".repeat(40);
        let accented = "une ligne répétée\n".repeat(40);
        let cjk = "中".repeat(200);
        let call = |id: &str| json!({"id": id, "type": "function", "function": {"name": "Read", "arguments": "{}"}});
        let lines = [
            json!({"role": "user", "content": "read them"}),
            json!({"role": "assistant", "content": null, "tool_calls": [call("c1"), call("c2"), call("c3"), call("c4"), call("c5")]}),
            json!({"role": "tool", "tool_call_id": "c1", "content": long}),
            json!({"role": "tool", "tool_call_id": "c2", "content": cjk}),
            json!({"role": "tool", "tool_call_id": "c3", "content": "short"}),
            json!({"role": "tool", "tool_call_id": "c4", "content": format!("{long}[truncated for context space]")}),
            json!({"role": "tool", "tool_call_id": "c5", "content": accented}),
        ];
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        let bytes = written(&text, &[], None, &[]);
        let (left, whole) = (warm(&bytes, true).unwrap(), warm(&bytes, false).unwrap());
        // Only the long outputs without the marker stay in the file, in
        // any script, their tally known without them.
        assert!(whole.withheld.is_empty());
        let [(i, at), (c, at_cjk), (j, at_accented)] = left.withheld[..] else {
            panic!("{:?}", left.withheld);
        };
        for (k, at, words) in [
            (i, at, &long),
            (c, at_cjk, &cjk),
            (j, at_accented, &accented),
        ] {
            let m = &left.history[k];
            assert_eq!((m.text.as_str(), m.text_len()), ("", words.len()));
            assert_eq!(m.tally(), Tally::of(words));
            assert_eq!(&bytes[at as usize..][..words.len()], words.as_bytes());
            assert_eq!(&whole.history[k].text, words);
        }
        assert_eq!(left.history[c].ends.as_deref(), Some(&Ends::of(&cjk)));
        let worded: Vec<&str> = left.history.iter().map(|m| m.text.as_str()).collect();
        let all: Vec<&str> = whole.history.iter().map(|m| m.text.as_str()).collect();
        assert_eq!(worded[..i], all[..i]);
        assert_eq!(worded[i + 1..c], all[i + 1..c]);
        assert_eq!(worded[c + 1..j], all[c + 1..j]);
        assert_eq!(worded[j + 1..], all[j + 1..]);
        // Words left in the file stand apart from the checksum: a read of
        // every word finds them damaged, a warm read only once it reads
        // them (below).
        let mut damaged = bytes.clone();
        damaged[at as usize + 3] ^= 0x20;
        assert!(warm(&damaged, false).is_none());
        assert_eq!(warm(&damaged, true).unwrap().withheld, left.withheld);
        // A cache written from a history without those words is refused,
        // never written with them empty.
        let t = read("t", &text, None, BadLines::Fail).unwrap();
        let keep = |_: usize, _: &CoreMessage| true;
        let source = CacheSource {
            transcript: &t,
            history: &left.history,
            tokenizer: Tokenizer::Estimate,
            mark: (0, 0, 0),
            keep: &keep,
            unparsed: &[],
            cuts: &[],
            left: None,
        };
        assert!(source.write_to(Vec::new()).is_err());
        // Read back from the session's cache file: found where the read
        // left them; words past the file's end or not UTF-8 are an error,
        // and the turn reads the transcript whole.
        let base = std::env::temp_dir().join(format!("noa-words-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let session = SessionDir::new(&base, "s");
        session.create().unwrap();
        let mut file = bytes.clone();
        let bad = file.len() as u64;
        file.extend_from_slice(&[0xff, 0xfe]);
        std::fs::write(session.read_cache_path(), &file).unwrap();
        let held = WordsFile::open(session.read_cache_path()).unwrap();
        // Another cache renamed over it changes nothing for the one held.
        let other = base.join("other");
        std::fs::write(&other, "x".repeat(file.len())).unwrap();
        std::fs::rename(&other, session.read_cache_path()).unwrap();
        let words = held.read(&[(at, long.len()), (at, long.len())]).unwrap();
        assert_eq!(words, [long.clone(), long.clone()]);
        // Less than the words whole does not match their digest.
        assert!(held.read(&[(at, 4)]).is_err());
        assert!(held.read(&[(bad, 2)]).is_err());
        assert!(held.read(&[(bad, 9)]).is_err());
        std::fs::write(session.read_cache_path(), &damaged).unwrap();
        let damaged = WordsFile::open(session.read_cache_path()).unwrap();
        assert!(damaged.read(&[(at, long.len())]).is_err());
        std::fs::remove_dir_all(&base).unwrap();
    }

    /// `text` read in pieces, as a first turn reads a file: its tool
    /// outputs that are one string know where they lie in it.
    fn read_in_pieces(text: &str) -> Transcript {
        let mut r = crate::formats::read_in_pieces(None, "t", text, true, BadLines::Fail).unwrap();
        r.read(text.to_string()).unwrap();
        r.finish(&|| {}, &|_| {}).unwrap()
    }

    #[test]
    fn words_that_lie_in_the_transcript_are_pointed_to_and_read_from_it() {
        let long = "a line of \"output\"\twith\u{1}escapes\n".repeat(40);
        let accented = "une ligne répétée 😀\n".repeat(40);
        let cjk = "中".repeat(200);
        // Every byte an escape: the string is six times its words.
        let escaped = "\u{1}".repeat(300);
        let call = |id: &str| json!({"id": id, "type": "function", "function": {"name": "Read", "arguments": "{}"}});
        let calls: Vec<serde_json::Value> = (1..=6).map(|i| call(&format!("c{i}"))).collect();
        let lines = [
            json!({"role": "user", "content": "read them"}),
            json!({"role": "assistant", "content": null, "tool_calls": calls}),
            json!({"role": "tool", "tool_call_id": "c1", "content": long}),
            json!({"role": "tool", "tool_call_id": "c2", "content": cjk}),
            json!({"role": "tool", "content": accented, "tool_call_id": "c3"}),
            json!({"role": "tool", "tool_call_id": "c4", "content": [{"type": "text", "text": long}]}),
            json!({"role": "tool", "tool_call_id": "c5", "content": escaped}),
            json!({"role": "tool", "tool_call_id": "c6", "content": "short"}),
        ];
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        let mut t = read_in_pieces(&text);
        let history = t.take_cores();
        let keep = |_: usize, _: &CoreMessage| true;
        let source = read_whole(&t, &history, &text, &keep);
        let bytes = source.write_to(Vec::new()).unwrap();
        let holds = |words: &str| bytes.windows(words.len()).any(|w| w == words.as_bytes());
        // The long outputs that are one string are not in the cache, in
        // any script; the one in parts is.
        assert!(!holds(&accented) && !holds(&escaped) && holds(&long) && !holds(&cjk));
        // A read of every word cannot be served: they are not there.
        assert!(warm(&bytes, false).is_none());
        let left = warm(&bytes, true).unwrap();
        let in_transcript: Vec<(usize, u64)> = (left.withheld.iter())
            .filter(|(_, at)| at & IN_TRANSCRIPT != 0)
            .copied()
            .collect();
        assert_eq!(in_transcript.len(), 4, "{:?}", left.withheld);
        let dir = std::env::temp_dir().join(format!("noa-in-transcript-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.jsonl");
        std::fs::write(&path, &text).unwrap();
        std::fs::write(dir.join("cache"), &bytes).unwrap();
        let mut words = WordsFile::open(dir.join("cache")).unwrap();
        let wanted: Vec<(u64, usize)> = (in_transcript.iter())
            .map(|&(i, at)| (at, left.history[i].text_len()))
            .collect();
        // Without the transcript they cannot be read.
        assert!(words.read(&wanted).is_err());
        words.reading_transcript("t.jsonl".into(), std::fs::File::open(&path).unwrap());
        let read = words.read(&wanted).unwrap();
        assert_eq!(
            read,
            [long.clone(), cjk.clone(), accented.clone(), escaped.clone()]
        );
        // A cache written anew from the warm read, the shown words filled
        // from the transcript, points to them again rather than copying.
        let mut filled = left.history.clone();
        let mut from_transcript = in_transcript.iter().zip(&read);
        for &(i, at) in &left.withheld {
            let len = filled[i].text_len();
            filled[i].hold(match at & IN_TRANSCRIPT {
                0 => String::from_utf8(bytes[at as usize..][..len].to_vec()).unwrap(),
                _ => from_transcript.next().unwrap().1.clone(),
            });
        }
        let again = CacheSource {
            transcript: &left.transcript,
            history: &filled,
            unparsed: &left.raws,
            ..source
        };
        let rewritten = again.write_to(Vec::new()).unwrap();
        let copied = |words: &str| {
            rewritten
                .windows(words.len())
                .any(|w| w == words.as_bytes())
        };
        assert!(!copied(&accented) && !copied(&escaped) && !copied(&cjk));
        assert_eq!(warm(&rewritten, true).unwrap().withheld, left.withheld);
        // Words of another length, a place where no string starts, and a
        // transcript cut short are errors: the turn reads it whole.
        let (at, len) = wanted[0];
        assert!(words.read(&[(at, len - 1)]).is_err());
        assert!(words.read(&[(at + 1, len)]).is_err());
        let cut = (at & !IN_TRANSCRIPT) as usize + 50;
        std::fs::write(&path, &text[..cut]).unwrap();
        words.reading_transcript("t.jsonl".into(), std::fs::File::open(&path).unwrap());
        assert!(words.read(&[(at, len)]).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn words_written_later_are_read_back_once_written_or_fail_when_they_cannot_be() {
        let words: Vec<String> = (0..3000)
            .map(|i| format!("output {i}\n").repeat(i % 300 + 1))
            .collect();
        let mut at = Vec::new();
        let mut end = 0;
        for w in &words {
            at.push((end + 8, w.len()));
            end += 8 + w.len() as u64;
        }
        let dir = std::env::temp_dir().join(format!("noa-later-{}", std::process::id()));
        let file = AsideFile::create(&dir).unwrap();
        // Made and unlinked at once: nothing is left in the directory.
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        let later = file.write_later(words.clone()).unwrap();
        assert_eq!(later.read(&at).unwrap(), words);
        let mut in_order = later.in_order();
        for (w, &(at, len)) in words.iter().zip(&at) {
            let digested = in_order.digested(at, len).unwrap();
            assert_eq!(&digested[8..], w.as_bytes());
            assert_eq!(digested[..8], cache_digest(w.as_bytes()).to_le_bytes());
        }
        std::fs::remove_dir_all(&dir).unwrap();
        let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") else {
            return;
        };
        let failed = AsideFile::over(full).write_later(words).unwrap();
        assert!(failed.read(&at[..1]).is_err());
        assert!(failed.in_order().digested(at[0].0, at[0].1).is_err());
    }
}
