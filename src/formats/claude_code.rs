//! Claude Code session logs.
//!
//! A session is a tree of records linked by `uuid`/`parentUuid`; the
//! conversation the model saw is one branch of it (the newest, as the host
//! resumes it: see [`choice`]), plus the parallel tool calls and results
//! that hang off it as side branches. One API response is written as one line per content block, all
//! sharing `message.id`: those lines are one message. Progress, snapshots,
//! queue operations, sidechains (subagents) and system records are not part
//! of what the model saw. A `compact_boundary` starts a new root: what came
//! before it is summarised by the `isCompactSummary` record after it.

use crate::engine::HostCompaction;
use std::borrow::{Borrow, Cow};
use std::cell::{Cell, OnceCell};
use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::thread;

use crate::engine::{ContentType, CoreMessage, IdHash, IdMap, IdSet};
use xxhash_rust::xxh3::xxh3_64;

use serde::Deserialize;
use serde::de::{IgnoredAny, MapAccess, SeqAccess};
use serde_json::Value;

use super::anthropic::{ToolNames, host_message};
use super::lean::{self, Lean, Scalar};
use super::{
    Appended, BadLines, BranchChoice, Format, HostMessage, ReadAgain, ReadError, ResumeState,
    Transcript, jsonl, span,
};
use choice::Choice;

#[path = "choice.rs"]
mod choice;

const EXPECTED: &str =
    "each line is one Claude Code session record (a JSON object with a \"type\")";

/// One line of the log, read lean: what choosing the conversation needs of
/// its record. The record is parsed whole only once it is chosen, so the
/// log's records are never all built at once.
struct Line<'a> {
    line: usize,
    /// Where its text lies in the text read lean (a piece of the log, or
    /// the lines appended to it).
    at: Range<usize>,
    head: Head<'a>,
}

/// The fields of a record the choice reads: strings are kept only where
/// they are strings, as `Value::as_str` reads them, and flags only where
/// they are `true`.
#[derive(Default)]
struct Head<'a> {
    object: bool,
    /// `"user"` or `"assistant"`.
    conversation: Option<Role>,
    /// `subtype` is `"compact_boundary"`.
    compact_boundary: bool,
    uuid: Option<Cow<'a, str>>,
    parent: Option<Cow<'a, str>>,
    session: Option<Cow<'a, str>>,
    agent: Option<Cow<'a, str>>,
    /// Whether it has a `sessionId` or `agentId` key, of any value.
    names_session: bool,
    sidechain: bool,
    api_error: bool,
    /// `isMeta`: a record the host wrote itself (the caveat before local
    /// commands, a custom command's prompt).
    meta: bool,
    /// `timestamp`, when it is a string.
    timestamp: Option<Cow<'a, str>>,
    /// `message`, when it is an object.
    message: Option<MessageHead<'a>>,
    /// `compactMetadata` (a `compact_boundary`'s), parsed whole: a log
    /// holds few.
    compaction: Option<Box<Value>>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    User,
    Assistant,
}

impl Role {
    fn name(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }
}

/// The fields of a record's `message` the choice reads.
#[derive(Default)]
struct MessageHead<'a> {
    id: Option<Cow<'a, str>>,
    /// Whether it has a `content` key, of any value.
    has_content: bool,
    /// The ids of the `tool_use` blocks of its content.
    calls: Vec<Cow<'a, str>>,
    /// The `tool_use_id`s of the `tool_result` blocks of its content.
    results: Vec<Cow<'a, str>>,
    /// How its content opens (see [`Opening`]).
    opening: Opening,
}

/// One content block, for its kind and the ids it names.
#[derive(Default)]
struct ItemHead<'a> {
    kind: Scalar<'a>,
    id: Scalar<'a>,
    tool_use_id: Scalar<'a>,
    /// How its `text` opens; read of a content's first block only.
    opening: Opening,
}

/// How a record's text opens, as far as choosing the conversation goes: a
/// local command (`/export`, `/model`) is run by the host itself, which
/// writes the command, its output and a caveat before them into the log;
/// the model is told not to answer them, and they do not make a branch the
/// conversation.
#[derive(Default, Clone, Copy, PartialEq, Eq)]
enum Opening {
    #[default]
    Other,
    /// One of [`LOCAL_TAGS`].
    LocalCommand,
    /// `Caveat:`, as the caveat before local commands opened before it
    /// had a tag of its own (a caveat only when the record is `isMeta`).
    Caveat,
}

/// The tags a local command's records open with.
const LOCAL_TAGS: [&str; 5] = [
    "<command-name>",
    "<command-message>",
    "<local-command-stdout>",
    "<local-command-stderr>",
    "<local-command-caveat>",
];

impl<'de> Lean<'de> for Opening {
    fn string(s: &str) -> Self {
        let s = s.trim_start();
        if LOCAL_TAGS.iter().any(|tag| s.starts_with(tag)) {
            Opening::LocalCommand
        } else if s.starts_with("Caveat:") {
            Opening::Caveat
        } else {
            Opening::Other
        }
    }
}

impl<'de> Lean<'de> for Head<'de> {
    fn map<A: MapAccess<'de>>(mut map: A) -> Result<Self, A::Error> {
        let mut h = Head {
            object: true,
            ..Head::default()
        };
        while let Some(key) = lean::next_key(&mut map)? {
            let mut scalar = || lean::next_value::<Scalar, _>(&mut map);
            match key.as_ref() {
                "type" => {
                    h.conversation = match scalar()?.as_str() {
                        Some("user") => Some(Role::User),
                        Some("assistant") => Some(Role::Assistant),
                        _ => None,
                    }
                }
                "subtype" => h.compact_boundary = scalar()?.as_str() == Some("compact_boundary"),
                "uuid" => h.uuid = scalar()?.into_str(),
                "parentUuid" => h.parent = scalar()?.into_str(),
                "sessionId" => h.session = scalar()?.into_str(),
                "agentId" => h.agent = scalar()?.into_str(),
                "isSidechain" => h.sidechain = scalar()?.is_true(),
                "isApiErrorMessage" => h.api_error = scalar()?.is_true(),
                "isMeta" => h.meta = scalar()?.is_true(),
                "timestamp" => h.timestamp = scalar()?.into_str(),
                // An answer's text is not looked at (see [`Opening`]): the
                // host writes `type` before `message`.
                "message" if h.conversation == Some(Role::Assistant) => {
                    h.message = lean::next_value::<AnswerHead, _>(&mut map)?.0
                }
                "message" => h.message = lean::next_value(&mut map)?,
                "compactMetadata" => h.compaction = Some(Box::new(map.next_value()?)),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            h.names_session |= matches!(key.as_ref(), "sessionId" | "agentId");
        }
        Ok(h)
    }
}

impl<'de> Lean<'de> for Option<MessageHead<'de>> {
    fn map<A: MapAccess<'de>>(map: A) -> Result<Self, A::Error> {
        message_head::<A, true>(map)
    }
}

/// An assistant record's `message`, read without looking at how its text
/// opens: only the user's records are local commands.
#[derive(Default)]
struct AnswerHead<'a>(Option<MessageHead<'a>>);

impl<'de> Lean<'de> for AnswerHead<'de> {
    fn map<A: MapAccess<'de>>(map: A) -> Result<Self, A::Error> {
        message_head::<A, false>(map).map(AnswerHead)
    }
}

/// A record's `message` read for what the choice needs; with `LOOK`, how
/// its text opens too.
fn message_head<'de, A: MapAccess<'de>, const LOOK: bool>(
    mut map: A,
) -> Result<Option<MessageHead<'de>>, A::Error> {
    let mut m = MessageHead::default();
    while let Some(key) = lean::next_key(&mut map)? {
        match key.as_ref() {
            "id" => m.id = lean::next_value::<Scalar, _>(&mut map)?.into_str(),
            "content" => {
                let Content::<LOOK>(items, opening) = lean::next_value(&mut map)?;
                m.has_content = true;
                m.opening = opening;
                m.calls.clear();
                m.results.clear();
                for item in items {
                    match item.kind.as_str() {
                        Some("tool_use") => m.calls.extend(item.id.into_str()),
                        Some("tool_result") => m.results.extend(item.tool_use_id.into_str()),
                        _ => {}
                    }
                }
            }
            _ => {
                map.next_value::<IgnoredAny>()?;
            }
        }
    }
    Ok(Some(m))
}

/// A message's content blocks, when the content is a list, and with
/// `LOOK` how it opens (a string, or the first block's text).
#[derive(Default)]
struct Content<'a, const LOOK: bool>(Vec<ItemHead<'a>>, Opening);

impl<'de, const LOOK: bool> Lean<'de> for Content<'de, LOOK> {
    fn string(s: &str) -> Self {
        match LOOK {
            true => Content(Vec::new(), Opening::string(s)),
            false => Content::default(),
        }
    }

    fn list<A: SeqAccess<'de>>(mut list: A) -> Result<Self, A::Error> {
        let mut items = Vec::new();
        // Only the first block's text is looked at: every other text is
        // passed over unread.
        let first: Option<FirstItem> = match LOOK {
            true => lean::next_item(&mut list)?,
            false => lean::next_item::<ItemHead, _>(&mut list)?.map(FirstItem),
        };
        let opening = first.as_ref().map_or(Opening::Other, |f| f.0.opening);
        items.extend(first.map(|f| f.0));
        while let Some(item) = lean::next_item(&mut list)? {
            items.push(item);
        }
        Ok(Content(items, opening))
    }
}

/// A content's first block: an [`ItemHead`] whose text is looked at.
#[derive(Default)]
struct FirstItem<'a>(ItemHead<'a>);

impl<'de> Lean<'de> for ItemHead<'de> {
    fn map<A: MapAccess<'de>>(map: A) -> Result<Self, A::Error> {
        item_head(map, false)
    }
}

impl<'de> Lean<'de> for FirstItem<'de> {
    fn map<A: MapAccess<'de>>(map: A) -> Result<Self, A::Error> {
        item_head(map, true).map(FirstItem)
    }
}

/// A content block read for its kind and ids, and with `text` how its text
/// opens.
fn item_head<'de, A: MapAccess<'de>>(mut map: A, text: bool) -> Result<ItemHead<'de>, A::Error> {
    let mut item = ItemHead::default();
    while let Some(key) = lean::next_key(&mut map)? {
        match key.as_ref() {
            "type" => item.kind = lean::next_value(&mut map)?,
            "id" => item.id = lean::next_value(&mut map)?,
            "tool_use_id" => item.tool_use_id = lean::next_value(&mut map)?,
            "text" if text => item.opening = lean::next_value(&mut map)?,
            _ => {
                map.next_value::<IgnoredAny>()?;
            }
        }
    }
    Ok(item)
}

impl<'a> Head<'a> {
    /// Every string it holds, in the order [`Head::rehome`] takes them.
    fn strings(&self) -> impl Iterator<Item = &str> {
        let message = self.message.as_ref();
        let fields = [&self.uuid, &self.parent, &self.session, &self.agent];
        (fields.into_iter().chain([&self.timestamp]))
            .chain(message.map(|m| &m.id))
            .filter_map(|s| s.as_deref())
            .chain(
                message
                    .into_iter()
                    .flat_map(|m| &m.calls)
                    .map(AsRef::as_ref),
            )
            .chain(
                message
                    .into_iter()
                    .flat_map(|m| &m.results)
                    .map(AsRef::as_ref),
            )
    }

    /// The head with each of its strings, in the order [`Head::strings`]
    /// gives them, as `next` gives it back.
    fn rehome<'s>(self, next: &mut impl FnMut(&str) -> &'s str) -> Head<'s> {
        let mut one = |s: Cow<'a, str>| -> Cow<'s, str> { Cow::Borrowed(next(&s)) };
        let (uuid, parent) = (self.uuid.map(&mut one), self.parent.map(&mut one));
        let (session, agent) = (self.session.map(&mut one), self.agent.map(&mut one));
        let timestamp = self.timestamp.map(&mut one);
        let message = self.message.map(|m| MessageHead {
            id: m.id.map(&mut one),
            has_content: m.has_content,
            calls: m.calls.into_iter().map(&mut one).collect(),
            results: m.results.into_iter().map(&mut one).collect(),
            opening: m.opening,
        });
        Head {
            object: self.object,
            conversation: self.conversation,
            compact_boundary: self.compact_boundary,
            uuid,
            parent,
            session,
            agent,
            names_session: self.names_session,
            sidechain: self.sidechain,
            api_error: self.api_error,
            meta: self.meta,
            timestamp,
            message,
            compaction: self.compaction,
        }
    }

    fn is_conversation(&self) -> bool {
        self.conversation.is_some()
    }

    fn calls(&self) -> impl Iterator<Item = &str> {
        self.message
            .iter()
            .flat_map(|m| m.calls.iter().map(AsRef::as_ref))
    }

    fn results(&self) -> impl Iterator<Item = &str> {
        self.message
            .iter()
            .flat_map(|m| m.results.iter().map(AsRef::as_ref))
    }
}

/// One conversation record (a user or assistant line).
struct Turn<'a> {
    /// Position in the read lines.
    index: usize,
    line: usize,
    head: &'a Head<'a>,
    /// As [`Line::at`].
    at: Range<usize>,
    uuid: Option<&'a str>,
    parent: Option<&'a str>,
    assistant: bool,
    message_id: Option<&'a str>,
}

impl Turn<'_> {
    /// Whether this record can make its branch the conversation: an answer,
    /// or a user record that is not a local command's nor the caveat
    /// before them (see [`Opening`]).
    fn seen(&self) -> bool {
        if self.assistant {
            return true;
        }
        match self.head.message.as_ref().map(|m| m.opening) {
            None | Some(Opening::Other) => true,
            Some(Opening::LocalCommand) => false,
            Some(Opening::Caveat) => !self.head.meta,
        }
    }

    fn timestamp(&self) -> Option<&str> {
        self.head.timestamp.as_deref()
    }
}

fn lean_lines<'t>(
    name: &str,
    whole: &'t str,
    first_line: usize,
    bad: BadLines,
    warn: &mut dyn FnMut(usize, String),
) -> Result<Vec<Line<'t>>, ReadError> {
    jsonl::lines_from(
        name,
        whole,
        first_line,
        EXPECTED,
        bad,
        warn,
        |line, text| {
            let start = jsonl::offset_in(whole, text);
            let at = start..start + text.len();
            lean::from_str(text).map(|head| Line { line, at, head })
        },
    )
}

/// The messages the model saw, from a session log's text.
///
/// Warnings come in the order of the lines they name, so a log read on
/// from a prefix ([`read_after`]) warns as one read whole does.
///
/// Every line is read lean first; only the chosen records are then parsed
/// whole, one at a time, each let go once its message is built; with
/// `keep_records` they are kept as the transcript's records (only
/// `materialize` writes them back).
pub(crate) fn read(
    name: &str,
    text: &str,
    bad: BadLines,
    keep_records: bool,
    leaf: Option<&str>,
) -> Result<Transcript, ReadError> {
    let how = Building {
        name,
        bad,
        keep_records,
    };
    read_pieces(
        how,
        &mut [Cow::Borrowed(text)],
        leaf,
        None,
        (&|| {}, &|_| {}),
    )
}

/// [`read`] of a log held in pieces, each ending where a line does: a piece
/// is let go once the records chosen from it are built, so the log's text
/// and all the messages built from it are never held at once; `let_go` is
/// called after each. The records of a log held in more than one piece are
/// built on two threads (see [`build`]). With `at`, where the first piece
/// starts in the transcript, the tool results note where their words lie
/// in it ([`ContentBlock::words_at`](super::ContentBlock::words_at)). With
/// `leaf`, the conversation is the branch ending at the record it names.
/// `built` is called with each message once its blocks are hashed (see
/// [`PieceReader::finish`](super::PieceReader::finish)).
fn read_pieces(
    how: Building,
    pieces: &mut [Cow<'_, str>],
    leaf: Option<&str>,
    at: Option<u64>,
    (let_go, built): Finishing,
) -> Result<Transcript, ReadError> {
    let (name, bad) = (how.name, how.bad);
    let mut scanned = Scanned::default();
    let mut first_line = 1;
    for piece in pieces.iter() {
        scanned.piece(name, piece, first_line, bad);
        first_line += jsonl::newlines(piece.as_bytes());
    }
    let mut warnings: Vec<(usize, String)> = Vec::new();
    let plan = plan(name, scanned, leaf, &mut warnings)?;
    build(
        how,
        Source::Held(pieces, at),
        plan,
        warnings,
        (let_go, built),
    )
}

/// The size of log from which its pieces are read lean on a thread of
/// their own (see [`PieceScan`]): one held in a few pieces, so that the
/// thread reads each while the next comes in. In pieces of a sixteenth of
/// the log, the thread costs little memory.
const TWO_THREADS_FROM: usize = 4 << 20;

/// A Claude Code log read a piece at a time. Once [`TWO_THREADS_FROM`]
/// bytes are in, each piece is read lean on a thread of its own as it
/// comes, while the file's next piece is read; the records are chosen and
/// built once every piece is in, as [`read_pieces`] does, on two threads
/// whatever the log's size (one held in a single piece is built on one):
/// building them is most of a first turn's reading, and the thread that
/// parses the later records holds only them. Given a way to read the
/// pieces again ([`PieceScan::read_again`]), a long log's are each let go
/// once read lean, and read again to be built.
pub(crate) struct PieceScan {
    name: String,
    bad: BadLines,
    /// The record `--leaf` names, when it names one.
    leaf: Option<String>,
    /// Pieces read while the log is short, with their first lines.
    held: Vec<(String, usize)>,
    bytes: usize,
    two_threads_from: usize,
    scanning: Option<Scanning>,
    /// Set when the log is let go unfinished (read whole after all).
    stop: Arc<AtomicBool>,
    /// How the pieces are read again, when they can be.
    again: Option<Box<dyn ReadAgain>>,
    /// Where each piece sent to be let go lies, when they can be read
    /// again.
    places: Vec<Place>,
}

/// Where a piece lies in the transcript, and the digest of its text, which
/// its text read again must have.
struct Place {
    at: u64,
    len: usize,
    digest: u64,
}

impl Place {
    /// The place of `piece`, which follows the piece at `before` (the
    /// log's first when there is none).
    fn after(before: Option<&Place>, piece: &str) -> Place {
        Place {
            at: before.map_or(0, |p| p.at + p.len as u64),
            len: piece.len(),
            digest: xxh3_64(piece.as_bytes()),
        }
    }
}

/// How many pieces may wait for the scanning thread.
const IN_FLIGHT: usize = 2;

/// The thread a long log's pieces go to as they come.
struct Scanning {
    send: mpsc::SyncSender<(String, usize)>,
    done: thread::JoinHandle<Scan>,
    /// The pieces it let go, emptied, for the next to be read into.
    spare: Option<mpsc::Receiver<String>>,
}

/// What the scanning thread gives back: the pieces, and what it chose.
type Scan = (Vec<String>, Result<Plan, ReadError>, Vec<(usize, String)>);

impl PieceScan {
    pub(crate) fn new(name: &str, bad: BadLines) -> PieceScan {
        PieceScan {
            name: name.to_string(),
            bad,
            leaf: None,
            held: Vec::new(),
            bytes: 0,
            two_threads_from: TWO_THREADS_FROM,
            scanning: None,
            stop: Arc::new(AtomicBool::new(false)),
            again: None,
            places: Vec::new(),
        }
    }

    /// Lets go of each piece of a long log once it is read lean, reading
    /// it again with `again` to build its records: the log's text is then
    /// never all held at once. Given before the first piece.
    pub(crate) fn read_again(&mut self, again: Box<dyn ReadAgain>) {
        self.again = Some(again);
    }

    /// Reads a log of any size as a long one is: its pieces read lean on a
    /// thread of their own.
    pub(crate) fn on_two_threads(&mut self) {
        self.two_threads_from = 0;
    }

    /// Reads the conversation as the branch ending at the record `leaf`
    /// names (see [`choice::choose`]). Given before the first piece.
    pub(crate) fn choose_leaf(&mut self, leaf: &str) {
        self.leaf = Some(leaf.to_string());
    }

    /// Reads the next piece, whose first line is `first_line`.
    pub(crate) fn read(&mut self, piece: String, first_line: usize) {
        self.bytes += piece.len();
        self.held.push((piece, first_line));
        if self.bytes < self.two_threads_from {
            return;
        }
        let scanning = self.scanning.get_or_insert_with(|| {
            // A reader ahead of the thread waits for it, rather than
            // hold more pieces than it can read lean.
            let (send, receive) = mpsc::sync_channel(IN_FLIGHT);
            let (name, stop) = (self.name.clone(), Arc::clone(&self.stop));
            let (bad, leaf) = (self.bad, self.leaf.clone());
            let (back, spare) = match self.again {
                Some(_) => {
                    let (back, spare) = mpsc::channel();
                    (Some(back), Some(spare))
                }
                None => (None, None),
            };
            let done =
                thread::spawn(move || scan(&name, (bad, leaf.as_deref()), (&receive, back), &stop));
            Scanning { send, done, spare }
        });
        for held in self.held.drain(..) {
            // Digested only once on its way to be let go: a short log's
            // pieces, held, are never read again.
            if self.again.is_some() {
                self.places.push(Place::after(self.places.last(), &held.0));
            }
            // Only a thread that panicked has hung up: `finish` says so.
            let _ = scanning.send.send(held);
        }
    }

    /// A piece let go once read, emptied, for the next piece to be read
    /// into: its pages are already the process's.
    pub(crate) fn spare(&mut self) -> Option<String> {
        self.scanning.as_ref()?.spare.as_ref()?.try_recv().ok()
    }

    /// The transcript of every piece read; `let_go` is called each time a
    /// piece is let go.
    pub(crate) fn finish(
        mut self,
        let_go: &(dyn Fn() + Sync),
        built: &dyn Fn(&mut HostMessage),
    ) -> Result<Transcript, ReadError> {
        let (name, bad) = (self.name.clone(), self.bad);
        // A log long enough for two threads has its scanning thread.
        let Some(Scanning { send, done, .. }) = self.scanning.take() else {
            let mut pieces: Vec<Cow<'_, str>> =
                self.held.drain(..).map(|(p, _)| Cow::Owned(p)).collect();
            let how = Building {
                name: &name,
                bad,
                keep_records: false,
            };
            let leaf = self.leaf.as_deref();
            return read_pieces(how, &mut pieces, leaf, Some(0), (let_go, built));
        };
        drop(send);
        let (pieces, plan, warnings) = done.join().unwrap_or_else(|e| std::panic::resume_unwind(e));
        // What reading lean made and let go (the lines, the choice) goes
        // back before the build begins.
        let_go();
        let mut pieces: Vec<Cow<'_, str>> = pieces.into_iter().map(Cow::Owned).collect();
        let how = Building {
            name: &name,
            bad,
            keep_records: false,
        };
        let source = match &self.again {
            Some(again) => Source::Again(again.as_ref(), &self.places),
            None => Source::Held(&mut pieces, Some(0)),
        };
        build(how, source, plan?, warnings, (let_go, built))
    }
}

/// Reads the pieces `receive` gives lean as they come, then chooses the
/// conversation (the branch ending at `leaf`, when it names a record): the
/// scanning thread of a [`PieceScan`]. With `back`, each piece is let go
/// once read, and sent back emptied; none is kept.
fn scan(
    name: &str,
    (bad, leaf): (BadLines, Option<&str>),
    (receive, back): (
        &mpsc::Receiver<(String, usize)>,
        Option<mpsc::Sender<String>>,
    ),
    stop: &AtomicBool,
) -> Scan {
    let kept = Kept::default();
    let mut scanned = Scanned::default();
    for (piece, first_line) in receive {
        if stop.load(Ordering::Relaxed) {
            return (Vec::new(), Ok(Plan::default()), Vec::new());
        }
        match &back {
            Some(back) => {
                scanned.piece_let_go(name, (&piece, first_line), bad, &kept);
                let mut piece = piece;
                piece.clear();
                // The reader may be done, and gone.
                let _ = back.send(piece);
            }
            None => scanned.piece(name, kept.keep(piece), first_line, bad),
        }
    }
    let mut warnings = Vec::new();
    let plan = plan(name, scanned, leaf, &mut warnings);
    let pieces = match back {
        Some(_) => Vec::new(),
        None => kept.into_pieces(),
    };
    (pieces, plan, warnings)
}

impl Drop for PieceScan {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Pieces (or the strings of their lines: see [`detach`]) kept as they
/// come, each where it was put, so the lines read from one borrow it while
/// later ones are added.
struct Kept {
    /// Chunk `k` has room for `FIRST << k` pieces, made when first needed.
    chunks: [OnceCell<Box<[OnceCell<String>]>>; 32],
    len: Cell<usize>,
}

impl Default for Kept {
    fn default() -> Kept {
        Kept {
            chunks: [const { OnceCell::new() }; 32],
            len: Cell::new(0),
        }
    }
}

impl Kept {
    const FIRST: usize = 16;

    /// Keeps the next piece.
    fn keep(&self, piece: String) -> &str {
        let i = self.len.get();
        self.len.set(i + 1);
        let chunk = (i / Self::FIRST + 1).ilog2() as usize;
        let at = i - Self::FIRST * ((1 << chunk) - 1);
        let cells = self.chunks[chunk]
            .get_or_init(|| (0..Self::FIRST << chunk).map(|_| OnceCell::new()).collect());
        cells[at].get_or_init(|| piece)
    }

    /// The pieces, in the order they were kept.
    fn into_pieces(self) -> Vec<String> {
        (self.chunks.into_iter())
            .filter_map(OnceCell::into_inner)
            .flat_map(|cells| cells.into_vec())
            .filter_map(OnceCell::into_inner)
            .collect()
    }
}

/// Builds the records `plan` chose among the pieces of `source`, letting
/// go of each piece once its records are built. The later pieces' records
/// (see [`later_half`]) are parsed on a thread of their own while this one
/// builds the earlier ones, then taken in order.
fn build(
    how: Building,
    source: Source,
    plan: Plan,
    mut warnings: Vec<(usize, String)>,
    (let_go, built): Finishing,
) -> Result<Transcript, ReadError> {
    let changed = || ReadError::Changed {
        name: how.name.to_string(),
    };
    let (early, late) = plan.steps.split_at(later_half(&plan.steps));
    // Where each piece starts, taken before any is let go.
    let starts = source.starts();
    let (mut early_part, mut late_part) = source.split(late.first().map(|s| s.piece));
    let place = |step: &Step| Some(starts.as_ref()?[step.piece] + step.at.start as u64);
    let mut build = Builder::new(how, ToolNames::default(), built);
    let stop = AtomicBool::new(false);
    let parse_late = || {
        let mut parsed = Vec::with_capacity(late.len());
        let mut tools = ToolNames::default();
        let read = walk(&mut late_part, late, let_go, |step, text| {
            let record = parse_record(how, step.record(text, place(step)), &mut tools);
            let failed = record.is_err() && how.bad == BadLines::Fail;
            parsed.push((step.line, record));
            !failed && !stop.load(Ordering::Relaxed)
        });
        read.map(|()| parsed)
    };
    std::thread::scope(|s| {
        let late = (!late.is_empty()).then(|| s.spawn(parse_late));
        let mut failed = None;
        let read = walk(&mut early_part, early, let_go, |step, text| {
            failed = build
                .add(step.record(text, place(step)), &mut warnings)
                .err();
            failed.is_none()
        });
        if let Some(e) = failed.or_else(|| read.err().map(|Changed| changed())) {
            stop.store(true, Ordering::Relaxed);
            return Err(e);
        }
        let late = late.map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)));
        let late = late.transpose().map_err(|Changed| changed())?;
        for (line, record) in late.into_iter().flatten() {
            build.take_from_elsewhere(line, record, &mut warnings)?;
        }
        Ok(())
    })?;
    let built = build.finish();
    let resume = ResumeState {
        responses: sorted(built.by_message_id.keys().cloned()),
        ..plan.resume
    };
    let mut transcript = finish(
        plan.session,
        (built.messages, built.originals),
        warnings,
        resume,
    );
    transcript.compactions = plan.compactions;
    Ok(transcript)
}

/// Where the build finds the text of a log's pieces.
enum Source<'p, 't> {
    /// The pieces, held since they were read; the first starts at the
    /// place given in the transcript, when that is known.
    Held(&'p mut [Cow<'t, str>], Option<u64>),
    /// The pieces let go once read lean, read again from the transcript
    /// (see [`PieceScan::read_again`]).
    Again(&'p dyn ReadAgain, &'p [Place]),
}

impl<'p, 't> Source<'p, 't> {
    /// Where each piece starts in the transcript, when that is known.
    fn starts(&self) -> Option<Vec<u64>> {
        match self {
            Source::Held(pieces, start) => start.map(|start| piece_starts(pieces, start)),
            Source::Again(_, places) => Some(places.iter().map(|p| p.at).collect()),
        }
    }

    /// The pieces before piece `at` (all of them without it), and the
    /// rest.
    fn split(self, at: Option<usize>) -> (Part<'p, 't>, Part<'p, 't>) {
        match self {
            Source::Held(pieces, _) => {
                let at = at.unwrap_or(pieces.len());
                let (early, late) = pieces.split_at_mut(at);
                let held = |pieces, first| Part::Held {
                    pieces,
                    first,
                    next: 0,
                };
                (held(early, 0), held(late, at))
            }
            Source::Again(again, places) => {
                let part = || Part::Again {
                    again,
                    places,
                    text: String::new(),
                };
                (part(), part())
            }
        }
    }
}

/// The pieces one of a build's two threads reads its records from.
enum Part<'p, 't> {
    /// Held pieces, the first of which is piece `first` of the log; those
    /// before the `next` are let go.
    Held {
        pieces: &'p mut [Cow<'t, str>],
        first: usize,
        next: usize,
    },
    /// Pieces read again, each into `text` in turn.
    Again {
        again: &'p dyn ReadAgain,
        places: &'p [Place],
        text: String,
    },
}

/// A piece read again was not what was read the first time.
struct Changed;

impl Part<'_, '_> {
    /// The text of piece `k`, every held piece before it let go (and
    /// `let_go` called after each).
    fn text(&mut self, k: usize, let_go: &(dyn Fn() + Sync)) -> Result<&str, Changed> {
        match self {
            Part::Held {
                pieces,
                first,
                next,
            } => {
                while *next < k - *first {
                    pieces[*next] = Cow::Borrowed("");
                    *next += 1;
                    let_go();
                }
                Ok(&pieces[k - *first])
            }
            Part::Again {
                again,
                places,
                text,
            } => {
                let place = &places[k];
                let read = again.read_again(place.at, place.len, text);
                match read && place.digest == xxh3_64(text.as_bytes()) {
                    true => Ok(text),
                    false => Err(Changed),
                }
            }
        }
    }

    /// Lets go of every piece left.
    fn let_go_all(&mut self, let_go: &(dyn Fn() + Sync)) {
        match self {
            Part::Held { pieces, .. } => pieces.iter_mut().for_each(|p| *p = Cow::Borrowed("")),
            Part::Again { text, .. } => *text = String::new(),
        }
        let_go();
    }
}

/// Where each of `pieces` starts in the transcript, the first at `at`, and
/// where the last ends.
fn piece_starts(pieces: &[Cow<'_, str>], at: u64) -> Vec<u64> {
    let ends = pieces.iter().scan(at, |end, p| {
        *end += p.len() as u64;
        Some(*end)
    });
    std::iter::once(at).chain(ends).collect()
}

/// Where the steps of a log held in several pieces are split between two
/// threads: at the first step of the piece holding the middle of the
/// chosen records' bytes, so each half lets go of pieces of its own. All
/// of them (no split) for a log in one piece.
fn later_half(steps: &[Step]) -> usize {
    let total: usize = steps.iter().map(|s| s.at.len()).sum();
    let mut bytes = 0;
    let Some(middle) = steps.iter().position(|s| {
        bytes += s.at.len();
        bytes >= total / 2
    }) else {
        return steps.len();
    };
    let piece = steps[middle].piece;
    match steps.partition_point(|s| s.piece < piece) {
        0 => steps.len(),
        at => at,
    }
}

/// Calls `each` with the steps in order and their text among the pieces
/// of `part`, letting go of each piece once the steps are past it, and of
/// the rest at the end; stops when `each` says so.
fn walk(
    part: &mut Part,
    steps: &[Step],
    let_go: &(dyn Fn() + Sync),
    mut each: impl FnMut(&Step, &str) -> bool,
) -> Result<(), Changed> {
    for run in steps.chunk_by(|a, b| a.piece == b.piece) {
        let text = part.text(run[0].piece, let_go)?;
        if !run.iter().all(|step| each(step, &text[step.at.clone()])) {
            return Ok(());
        }
    }
    part.let_go_all(let_go);
    Ok(())
}

/// What reading a log lean decides: the records to build, the session, and
/// what reading on needs (all but the responses, which building finds).
#[derive(Default)]
struct Plan {
    steps: Vec<Step>,
    session: (Option<String>, Option<String>),
    resume: ResumeState,
    compactions: Vec<HostCompaction>,
}

/// A chosen record: where its text is among the pieces, and its line.
struct Step {
    piece: usize,
    at: std::ops::Range<usize>,
    line: usize,
    assistant: bool,
}

impl Step {
    /// The record this step chose, whose text is `text`, at `at` in the
    /// transcript when that is known.
    fn record<'t>(&self, text: &'t str, at: Option<u64>) -> RecordAt<'t> {
        RecordAt {
            line: self.line,
            assistant: self.assistant,
            text,
            at,
        }
    }
}

/// The lines of a log read lean a piece at a time, as the pieces come.
#[derive(Default)]
struct Scanned<'s> {
    /// Each piece's lines.
    pieces: Vec<Vec<Line<'s>>>,
    warnings: Vec<(usize, String)>,
    /// The first bad line, when bad lines stop the read: no piece after it
    /// is read.
    failed: Option<ReadError>,
}

impl<'s> Scanned<'s> {
    /// Reads the piece `text`, whose first line is `first_line`, lean.
    fn piece(&mut self, name: &str, text: &'s str, first_line: usize, bad: BadLines) {
        let lines = self.lean(name, text, first_line, bad);
        self.pieces.push(lines);
    }

    /// [`Scanned::piece`], the lines moved off `text` into `kept` (see
    /// [`detach`]), so the piece can be let go.
    fn piece_let_go(
        &mut self,
        name: &str,
        (text, first_line): (&str, usize),
        bad: BadLines,
        kept: &'s Kept,
    ) {
        let lines = self.lean(name, text, first_line, bad);
        self.pieces.push(detach(lines, kept));
    }

    /// The lines of the piece `text` read lean; none after a bad line
    /// that stops the read.
    fn lean<'t>(
        &mut self,
        name: &str,
        text: &'t str,
        first_line: usize,
        bad: BadLines,
    ) -> Vec<Line<'t>> {
        let mut lines = Vec::new();
        if self.failed.is_none() {
            let warnings = &mut self.warnings;
            let mut warn = |line, w| warnings.push((line, w));
            match lean_lines(name, text, first_line, bad, &mut warn) {
                Ok(read) => lines = read,
                Err(e) => self.failed = Some(e),
            }
        }
        // Held until every piece is in: without the room a list grown by
        // doubling leaves.
        lines.shrink_to_fit();
        lines
    }
}

/// `lines`, read lean from a piece, moved off it: every string they hold
/// is copied into one that `kept` keeps, about a tenth of the piece, so
/// the piece itself can be let go.
fn detach<'s>(lines: Vec<Line<'_>>, kept: &'s Kept) -> Vec<Line<'s>> {
    let strings = || lines.iter().flat_map(|l| l.head.strings());
    let mut all = String::with_capacity(strings().map(str::len).sum());
    strings().for_each(|s| all.push_str(s));
    let all = kept.keep(all);
    let mut from = 0;
    let mut next = |s: &str| {
        let at = from;
        from += s.len();
        &all[at..from]
    };
    let moved = lines.into_iter().map(|l| Line {
        line: l.line,
        at: l.at,
        head: l.head.rehome(&mut next),
    });
    moved.collect()
}

/// Whose conversation a log is.
struct LogSession {
    /// The log is a subagent's own.
    subagent: bool,
    /// The session id, and the parent's for a subagent.
    session: (Option<String>, Option<String>),
}

/// Whose conversation `lines` are: a subagent's own log holds nothing but
/// sidechain records, and then those are the conversation, and the session
/// that spawned it is its parent.
fn log_session(lines: &[&Line]) -> LogSession {
    let session_id = lines
        .iter()
        .find_map(|l| l.head.session.as_deref())
        .map(str::to_string);
    let subagent = is_subagent_log(lines);
    let session = if subagent {
        subagent_session(lines, session_id)
    } else {
        (session_id, None)
    };
    LogSession { subagent, session }
}

/// Chooses the conversation among the lines of every piece: the branch
/// ending at the record `asked` names, else as [`choice::choose`] says.
fn plan(
    name: &str,
    scanned: Scanned<'_>,
    asked: Option<&str>,
    warnings: &mut Vec<(usize, String)>,
) -> Result<Plan, ReadError> {
    let Scanned {
        pieces,
        warnings: read,
        failed,
    } = scanned;
    if let Some(e) = failed {
        return Err(e);
    }
    warnings.extend(read);
    let pieces = PieceLines::new(pieces);
    // The lines of every piece, where they lie: a line read lean is a few
    // hundred bytes, and a long log holds tens of thousands, too many to
    // copy into one list.
    let lines: Vec<&Line> = pieces.lines.iter().flatten().collect();
    let Boundaries {
        ids: boundaries,
        last: last_boundary,
        compactions,
    } = find_boundaries(name, &lines, warnings);
    let LogSession { subagent, session } = log_session(&lines);

    let start = last_boundary.map_or(0, |i| i + 1);
    let turns: Vec<Turn> = lines
        .iter()
        .enumerate()
        .skip(start)
        .filter_map(|(i, l)| conversation_turn(name, i, l, subagent, warnings))
        .collect();
    let Choice {
        chosen,
        leaf,
        about,
        warning,
    } = choice::choose(name, &turns, &lines, &boundaries, asked)?;
    warnings.extend(warning);
    let resume = ResumeState {
        subagent: turns.first().map(|_| subagent),
        strays: strays_left_off(&turns, &chosen),
        branch: about,
        ..joining_point(&lines, leaf.map(|i| &turns[i]))
    };
    Ok(Plan {
        steps: pieces.steps(&turns, &chosen),
        session,
        resume,
        compactions,
    })
}

/// Each piece's lines, and where they start among the lines of every
/// piece.
struct PieceLines<'s> {
    lines: Vec<Vec<Line<'s>>>,
    starts: Vec<usize>,
}

impl<'s> PieceLines<'s> {
    fn new(lines: Vec<Vec<Line<'s>>>) -> Self {
        let starts = lines.iter().scan(0, |count, read| {
            let start = *count;
            *count += read.len();
            Some(start)
        });
        PieceLines {
            starts: starts.collect(),
            lines,
        }
    }

    /// The chosen turns as steps: the piece each lies in, and where its
    /// text is in that piece.
    fn steps(&self, turns: &[Turn], chosen: &[bool]) -> Vec<Step> {
        let steps = turns.iter().zip(chosen).filter(|(_, keep)| **keep);
        steps
            .map(|(t, _)| {
                let piece = self.starts.partition_point(|&s| s <= t.index) - 1;
                Step {
                    piece,
                    at: t.at.clone(),
                    line: t.line,
                    assistant: t.assistant,
                }
            })
            .collect()
    }
}

/// The log's `compact_boundary` lines: their uuids, the position of the
/// last, and what each says it replaced.
struct Boundaries<'a> {
    ids: IdSet<'a>,
    last: Option<usize>,
    compactions: Vec<HostCompaction>,
}

/// Finds the compaction boundaries among `lines`, and warns of the lines
/// that are not JSON objects.
fn find_boundaries<'a>(
    name: &str,
    lines: &[&'a Line<'a>],
    warnings: &mut Vec<(usize, String)>,
) -> Boundaries<'a> {
    let mut ids: IdSet<'_> = IdSet::default();
    let mut last = None;
    let mut compactions = Vec::new();
    for (i, &l) in lines.iter().enumerate() {
        let h = &l.head;
        if !h.object {
            warnings.push((l.line, not_an_object(name, l.line)));
            continue;
        }
        if h.compact_boundary {
            let since = last.map_or(0, |b| b + 1);
            compactions.push(compaction(l, i - since));
            last = Some(i);
            ids.extend(h.uuid.as_deref());
        }
    }
    Boundaries {
        ids,
        last,
        compactions,
    }
}

/// Whether the log is a subagent's own: it has conversation records, all
/// of them sidechain ones.
fn is_subagent_log(lines: &[&Line]) -> bool {
    let conversation = || lines.iter().filter(|l| l.head.is_conversation());
    conversation().next().is_some() && conversation().all(|l| l.head.sidechain)
}

/// A subagent log's session and parent: the agent's id (else the session
/// id), spawned by the session its records name.
fn subagent_session(
    lines: &[&Line],
    session_id: Option<String>,
) -> (Option<String>, Option<String>) {
    let agent = lines
        .iter()
        .find_map(|l| l.head.agent.as_deref())
        .map(str::to_string);
    (agent.or_else(|| session_id.clone()), session_id)
}

/// The ids by which a later record could pull in the turns left off the
/// conversation (see [`stray_ids`]).
fn strays_left_off(turns: &[Turn], chosen: &[bool]) -> Vec<String> {
    turns
        .iter()
        .zip(chosen)
        .filter(|(_, keep)| !**keep)
        .flat_map(|(t, _)| stray_ids(t))
        .map(str::to_string)
        .collect()
}

/// What a `compact_boundary` line says it replaced: `records` lines came
/// before it, and its `compactMetadata` says the rest.
fn compaction(l: &Line, records: usize) -> HostCompaction {
    let field = |k: &str| l.head.compaction.as_ref().and_then(|m| m.get(k));
    HostCompaction {
        line: l.line,
        records,
        tokens_before: field("preTokens")
            .and_then(Value::as_u64)
            .and_then(|n| usize::try_from(n).ok()),
        trigger: field("trigger").and_then(Value::as_str).map(str::to_string),
        summary_ref: None,
    }
}

/// The messages of the records the model saw, in order: each record parsed
/// whole and let go once built (kept with `keep`), the lines of one
/// response merged into one message, each response's recorded prompt size
/// kept. A record the lean read took but a whole parse rejects (a string
/// with an unpaired surrogate escape) is a bad line as `bad` says.
struct Builder<'n, 't> {
    how: Building<'n>,
    tools: ToolNames<'t>,
    built: Built,
    /// Called with each message before it is kept (see [`Finishing`]).
    taking: &'n dyn Fn(&mut HostMessage),
}

impl<'n, 't> Builder<'n, 't> {
    fn new(how: Building<'n>, tools: ToolNames<'t>, taking: &'n dyn Fn(&mut HostMessage)) -> Self {
        Builder {
            how,
            tools,
            built: Built::default(),
            taking,
        }
    }

    /// Builds the record on `line`, whose text is `text`, at the place
    /// given in the transcript when it is known.
    fn add(
        &mut self,
        record: RecordAt,
        warnings: &mut Vec<(usize, String)>,
    ) -> Result<(), ReadError> {
        let line = record.line;
        let parsed = parse_record(self.how, record, &mut self.tools);
        self.take(line, parsed, warnings)
    }

    /// Takes in a record [`parse_record`] gave with the tool names of the
    /// records before it: it is kept as the next record, and the lines of
    /// one response become one message.
    fn take(
        &mut self,
        line: usize,
        record: Result<Option<Record>, ReadError>,
        warnings: &mut Vec<(usize, String)>,
    ) -> Result<(), ReadError> {
        let Record {
            mut message,
            response,
            original,
        } = match record {
            Ok(Some(record)) => record,
            Ok(None) => {
                warnings.push((line, no_content(self.how.name, line)));
                return Ok(());
            }
            Err(e) => {
                return match self.how.bad {
                    BadLines::Fail => Err(e),
                    BadLines::Skip => {
                        warnings.push((line, format!("skipped bad line: {e}")));
                        Ok(())
                    }
                };
            }
        };
        (self.taking)(&mut message);
        let built = &mut self.built;
        for b in &mut message.blocks {
            b.source.record = built.kept;
        }
        built.kept += 1;
        match response.as_ref().and_then(|id| built.by_message_id.get(id)) {
            Some(&at) => append_blocks(&mut built.messages[at], message),
            None => {
                if let Some(id) = response {
                    built.by_message_id.insert(id, built.messages.len());
                }
                built.messages.push(message);
            }
        }
        built.originals.extend(original);
        Ok(())
    }

    /// [`Builder::take`] of a record parsed without the records before
    /// it: its results are named from the calls before them, as
    /// [`parse_record`] names them in order.
    fn take_from_elsewhere(
        &mut self,
        line: usize,
        mut record: Result<Option<Record>, ReadError>,
        warnings: &mut Vec<(usize, String)>,
    ) -> Result<(), ReadError> {
        if let Ok(Some(r)) = &mut record {
            let mut renamed = false;
            for core in &mut r.message.cores {
                match core.content_type {
                    ContentType::ToolCall => self.tools.note(&core.tool_call_id, &core.tool_name),
                    ContentType::ToolResult => {
                        let tool = self.tools.get(&core.tool_call_id);
                        renamed |= core.tool_name != tool;
                        core.tool_name = tool;
                    }
                    _ => {}
                }
            }
            // A result hashed before its call's name was known.
            if renamed {
                super::hash_blocks(&mut r.message);
            }
        }
        self.take(line, record, warnings)
    }

    fn finish(mut self) -> Built {
        self.built.messages.retain(|m| !m.blocks.is_empty());
        self.built
    }
}

/// What the caller of a read in pieces is told as it finishes: when a
/// held piece is let go, and each message once its blocks are hashed, for
/// good (a result named after it was parsed is hashed again before).
type Finishing<'f> = (&'f (dyn Fn() + Sync), &'f dyn Fn(&mut HostMessage));

/// A chosen record's message, built on its own.
struct Record {
    /// The message, its response's prompt size kept.
    message: HostMessage,
    /// A response's `message.id`: the log's other lines of it join it.
    response: Option<String>,
    /// The record whole, when kept.
    original: Option<Value>,
}

/// How a log's records are built into messages.
#[derive(Debug, Clone, Copy)]
struct Building<'n> {
    /// The log's name, for errors and warnings.
    name: &'n str,
    bad: BadLines,
    /// Whether each record is kept whole beside its message (for
    /// `materialize`).
    keep_records: bool,
}

/// A chosen record: its line, whether it is the assistant's, its text and
/// where that lies in the transcript, when it is known.
#[derive(Debug, Clone, Copy)]
struct RecordAt<'t> {
    line: usize,
    assistant: bool,
    text: &'t str,
    at: Option<u64>,
}

/// Parses the chosen record `text`, on `line`, and builds its message:
/// `None` when it has none a request could carry. Only the message is
/// parsed: the other fields (a tool's output again in `toolUseResult`,
/// bookkeeping) are passed over, unless the record is kept whole. A result
/// is named from `tools`, the calls noted before it.
fn parse_record(
    how: Building,
    record: RecordAt,
    tools: &mut ToolNames,
) -> Result<Option<Record>, ReadError> {
    let (name, keep) = (how.name, how.keep_records);
    let RecordAt {
        line,
        assistant,
        text,
        at,
    } = record;
    let parsed = match keep {
        true => serde_json::from_str::<Value>(text)
            .map(|v| (v.get("message").cloned().unwrap_or_default(), Some(v))),
        false => serde_json::from_str::<MessageOnly>(text).map(|r| (r.message, None)),
    };
    let (mut message, original) =
        parsed.map_err(|err| ReadError::syntax(name, line, text, &err, EXPECTED, false))?;
    let message = &mut message;
    let response = message
        .get("id")
        .and_then(Value::as_str)
        .filter(|_| assistant)
        .map(str::to_string);
    let prompt_tokens = assistant.then(|| prompt_size(message)).flatten();
    // Found before the message is built, which moves its strings out.
    let spans = match at {
        Some(_) => span::output_spans(message, text, Some("message")),
        None => Vec::new(),
    };
    Ok(host_message(message, line, 0, tools).map(|mut m| {
        if let Some(at) = at {
            span::note_spans(&mut m, &spans, at);
        }
        super::hash_blocks(&mut m);
        Record {
            message: HostMessage { prompt_tokens, ..m },
            response,
            original,
        }
    }))
}

/// A record read for its message alone.
#[derive(Deserialize)]
struct MessageOnly {
    #[serde(default)]
    message: Value,
}

/// Messages built from records, and what the next lines need of them.
#[derive(Default)]
struct Built {
    messages: Vec<HostMessage>,
    /// Each response's message, by `message.id`.
    by_message_id: HashMap<String, usize, IdHash>,
    /// How many records the messages come from.
    kept: usize,
    /// Those records, when kept.
    originals: Vec<Value>,
}

/// The transcript, warnings in the order of their lines.
fn finish(
    (session_id, parent_session): (Option<String>, Option<String>),
    (messages, originals): (Vec<HostMessage>, Vec<Value>),
    mut warnings: Vec<(usize, String)>,
    resume: ResumeState,
) -> Transcript {
    warnings.sort_by_key(|(line, _)| *line);
    Transcript {
        format: Format::ClaudeCode,
        session_id,
        parent_session,
        messages,
        warnings: warnings.into_iter().map(|(_, w)| w).collect(),
        records: originals,
        preamble: Vec::new(),
        resume,
        compactions: Vec::new(),
    }
}

/// The session a log's first lines name, and the one that spawned it when
/// its first conversation record is a sidechain (a subagent's own log), as
/// [`read`] names them from the whole log.
pub(crate) fn peek_session(head: &str) -> (Option<String>, Option<String>) {
    let field = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
    let (mut session, mut agent, mut first_sidechain) = (None, None, None);
    for v in head
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
    {
        session = session.or_else(|| field(&v, "sessionId"));
        agent = agent.or_else(|| field(&v, "agentId"));
        if first_sidechain.is_none() && is_conversation(&v) {
            first_sidechain = Some(sidechain(&v));
        }
        if session.is_some() && (first_sidechain == Some(false) || agent.is_some()) {
            break;
        }
    }
    match first_sidechain {
        Some(true) => (agent.or_else(|| session.clone()), session),
        _ => (session, None),
    }
}

fn sorted(ids: impl Iterator<Item = String>) -> Vec<String> {
    let mut ids: Vec<String> = ids.collect();
    ids.sort_unstable();
    ids
}

fn is_conversation(v: &Value) -> bool {
    matches!(
        v.get("type").and_then(Value::as_str),
        Some("user" | "assistant")
    )
}

fn sidechain(v: &Value) -> bool {
    v.get("isSidechain").and_then(Value::as_bool) == Some(true)
}

fn not_an_object(name: &str, line: usize) -> String {
    format!("{name}:{line}: not a JSON object; skipped")
}

fn no_content(name: &str, line: usize) -> String {
    format!("{name}:{line}: message has no usable content; skipped")
}

/// Where the next lines' branch must join this read's: the record the
/// conversation ends at, and the records after it that chain back to it.
fn joining_point<'a, L: Borrow<Line<'a>>>(lines: &[L], leaf: Option<&Turn>) -> ResumeState {
    let Some(leaf) = leaf else {
        return ResumeState::default();
    };
    ResumeState {
        leaf: leaf.uuid.map(str::to_string),
        after_leaf: chained(&lines[leaf.index + 1..], leaf.uuid.into_iter()),
        ..ResumeState::default()
    }
}

/// The uuids of the records that chain back, parent by parent, to one of
/// `ends`.
fn chained<'a, 'e, L: Borrow<Line<'a>>>(
    lines: &[L],
    ends: impl Iterator<Item = &'e str>,
) -> Vec<String> {
    let mut chain: IdSet<'_> = ends.collect();
    let mut out = Vec::new();
    for l in lines {
        let h = &l.borrow().head;
        if let (Some(u), Some(p)) = (h.uuid.as_deref(), h.parent.as_deref())
            && chain.contains(p)
        {
            chain.insert(u);
            out.push(u.to_string());
        }
    }
    out
}

/// The parent link of every record read as an object, by uuid (a uuid two
/// records share stands for the later one).
fn parent_links<'a>(lines: &[&'a Line<'a>]) -> IdMap<'a, Option<&'a str>> {
    let mut parents = IdMap::with_capacity_and_hasher(lines.len(), IdHash::default());
    for l in lines.iter().filter(|l| l.head.object) {
        if let Some(u) = l.head.uuid.as_deref() {
            parents.insert(u, l.head.parent.as_deref());
        }
    }
    parents
}

/// Takes in the side branches of the chosen exchanges: the other lines of a
/// response in `responses`, then results that all answer a call made on
/// the branch (or in `calls`) and not in `answered` yet.
fn take_side_branches<'a>(
    turns: &[Turn<'a>],
    chosen: &mut [bool],
    responses: &IdSet<'_>,
    mut calls: IdSet<'a>,
    mut answered: IdSet<'a>,
) {
    for (t, c) in turns.iter().zip(chosen.iter_mut()) {
        if !*c && t.assistant && t.message_id.is_some_and(|id| responses.contains(id)) {
            *c = true;
        }
    }
    calls.extend(
        turns
            .iter()
            .zip(chosen.iter())
            .filter(|(t, c)| **c && t.assistant)
            .flat_map(|(t, _)| t.head.calls()),
    );
    for (t, c) in turns.iter().zip(chosen.iter_mut()) {
        if *c || t.assistant {
            continue;
        }
        let results: Vec<&str> = t.head.results().collect();
        if !results.is_empty()
            && results
                .iter()
                .all(|id| calls.contains(id) && !answered.contains(id))
        {
            answered.extend(results);
            *c = true;
        }
    }
}

/// Ids a record off the branch holds that a later record could pull it in
/// by: its response's id, and the calls its results answer.
fn stray_ids<'a>(t: &Turn<'a>) -> Vec<&'a str> {
    let mut ids: Vec<&str> = t.head.results().collect();
    ids.extend(t.message_id.filter(|_| t.assistant));
    ids
}

/// What reading on needs to know of the prefix.
pub(crate) struct Prefix<'a> {
    /// What its read carried, taken on into the new lines'.
    pub resume: ResumeState,
    /// Its flat history: the calls it makes and answers.
    pub cores: &'a [CoreMessage],
    /// Whether it named its session.
    pub has_session: bool,
}

/// Reads the lines appended after a prefix read earlier: what `resume` says
/// of the prefix (where its branch ends, its responses, the records it left
/// off), its messages' calls and answers, `tools` its calls' tool
/// names. `None` when the new lines would change how the prefix reads — a
/// compaction, a branch that leaves the prefix's last record (a rewind), a
/// record the prefix left off pulled back in, a response or an answer that
/// continues one of the prefix's, a subagent log that stops being one — or
/// name a session where the prefix named none: then the log is read whole.
pub(crate) fn read_after(
    name: &str,
    appended: Appended,
    bad: BadLines,
    prefix: Prefix,
    tools: ToolNames,
) -> Option<Result<Transcript, ReadError>> {
    let Appended {
        text, first_line, ..
    } = appended;
    let Prefix {
        resume,
        cores: earlier,
        has_session,
    } = prefix;
    let subagent = resume.subagent?;
    // A prefix read from a branch that does not end at its last record
    // (or that `--leaf` named) is read whole again: new records could
    // make another branch the newest.
    if !resume.branch.last || resume.branch.asked {
        return None;
    }
    let mut warnings: Vec<(usize, String)> = Vec::new();
    let lines = match lean_lines(name, text, first_line, bad, &mut |l, w| {
        warnings.push((l, w))
    }) {
        Ok(l) => l,
        Err(e) => return Some(Err(e)),
    };
    let shape = PrefixShape {
        subagent,
        has_session,
    };
    let parents = new_parent_links(name, &lines, shape, &mut warnings)?;
    let turns: Vec<Turn> = lines
        .iter()
        .enumerate()
        .filter_map(|(i, l)| conversation_turn(name, i, l, subagent, &mut warnings))
        .collect();
    let on_branch = all_on_branch(&turns, &parents, earlier, &resume)?;
    let how = Building {
        name,
        bad,
        keep_records: true,
    };
    let built = match build_appended(how, tools, appended, on_branch.iter(), &mut warnings) {
        Ok(built) => built,
        Err(e) => return Some(Err(e)),
    };
    let joined = joining_point_after(&lines, &turns, &resume);
    let resume = resume_after(resume, joined, &built);
    Some(Ok(finish(
        (None, None),
        (built.messages, built.originals),
        warnings,
        resume,
    )))
}

/// The appended `turns`, when they are all on one branch that goes on from
/// the prefix's and leaves what the prefix read alone; `None` when the log
/// must be read whole. A new record left off the branch is a branch of its
/// own, which a whole read weighs against this one.
fn all_on_branch<'t, 'a>(
    turns: &'t [Turn<'a>],
    parents: &IdMap<'_, Option<&str>>,
    earlier: &[CoreMessage],
    resume: &ResumeState,
) -> Option<&'t [Turn<'a>]> {
    let branch = tail_branch(turns, parents, resume)?;
    let known = PrefixIds::named_by(turns, earlier, resume);
    let chosen = choose_tail(
        turns,
        branch,
        &known.responses,
        &known.calls,
        &known.answered,
    )?;
    if chosen.iter().any(|&keep| !keep) {
        return None;
    }
    turns
        .iter()
        .all(|t| known.leaves_prefix_alone(t))
        .then_some(turns)
}

/// Builds the appended `turns`, each record placed in the transcript by
/// where its text lies in the appended text.
fn build_appended<'t>(
    how: Building,
    tools: ToolNames,
    appended: Appended,
    turns: impl Iterator<Item = &'t Turn<'t>>,
    warnings: &mut Vec<(usize, String)>,
) -> Result<Built, ReadError> {
    let mut build = Builder::new(how, tools, &|_| {});
    for t in turns {
        let record = RecordAt {
            line: t.line,
            assistant: t.assistant,
            text: &appended.text[t.at.clone()],
            at: Some(appended.at + t.at.start as u64),
        };
        build.add(record, warnings)?;
    }
    Ok(build.finish())
}

/// What of the prefix a new line could contradict: whether it is a
/// subagent's own log, and whether it named its session.
#[derive(Clone, Copy)]
struct PrefixShape {
    subagent: bool,
    has_session: bool,
}

/// The parent link of every new record read as an object, by uuid; the
/// lines that are not objects are warned of. `None` when a line changes
/// how the prefix reads: a compaction, a record of the main conversation
/// in a subagent's log, or a session named where the prefix named none.
fn new_parent_links<'a>(
    name: &str,
    lines: &'a [Line<'a>],
    shape: PrefixShape,
    warnings: &mut Vec<(usize, String)>,
) -> Option<IdMap<'a, Option<&'a str>>> {
    let mut parents: IdMap<'_, Option<&str>> =
        IdMap::with_capacity_and_hasher(lines.len(), IdHash::default());
    for l in lines {
        let h = &l.head;
        if !h.object {
            warnings.push((l.line, not_an_object(name, l.line)));
            continue;
        }
        if h.compact_boundary
            || (shape.subagent && h.is_conversation() && !h.sidechain)
            || (!shape.has_session && h.names_session)
        {
            return None;
        }
        if let Some(u) = h.uuid.as_deref() {
            parents.insert(u, h.parent.as_deref());
        }
    }
    Some(parents)
}

/// The prefix's calls, answers, responses and strays that the new records
/// name.
struct PrefixIds<'a> {
    calls: IdSet<'a>,
    answered: IdSet<'a>,
    responses: IdSet<'a>,
    strays: IdSet<'a>,
}

impl<'a> PrefixIds<'a> {
    /// The ids of the prefix's that the new records `turns` name. The
    /// prefix's calls, answers, responses and strays are looked up only by
    /// the ids the new records name: indexing them all would cost every
    /// turn the whole history.
    fn named_by(turns: &[Turn], earlier: &'a [CoreMessage], resume: &'a ResumeState) -> Self {
        let named: IdSet<'_> = turns
            .iter()
            .flat_map(|t| t.head.calls().chain(t.head.results()).chain(t.message_id))
            .collect();
        let (mut calls, mut answered) = (IdSet::default(), IdSet::default());
        for c in earlier {
            let id = c.tool_call_id.as_str();
            if named.contains(id) {
                match c.content_type {
                    ContentType::ToolCall => calls.insert(id),
                    ContentType::ToolResult => answered.insert(id),
                    _ => false,
                };
            }
        }
        fn known<'a>(ids: &'a [String], named: &IdSet<'_>) -> IdSet<'a> {
            ids.iter()
                .map(String::as_str)
                .filter(|id| named.contains(id))
                .collect()
        }
        PrefixIds {
            calls,
            answered,
            responses: known(&resume.responses, &named),
            strays: known(&resume.strays, &named),
        }
    }

    /// Whether the new record `t` leaves how the prefix reads as it is. A
    /// record that continues a response the prefix holds, or pulls in one
    /// the prefix left off, changes how the prefix reads.
    fn leaves_prefix_alone(&self, t: &Turn) -> bool {
        let id = t.message_id.filter(|_| t.assistant);
        !(id.is_some_and(|id| self.responses.contains(id) || self.strays.contains(id))
            || t.head.calls().any(|c| self.strays.contains(c)))
    }
}

/// Where the lines after these must join: the new lines' own joining point
/// when they hold turns (all on the branch, which ends at the last), else
/// the prefix's, with the new records that chain back to it; and the
/// branch as a whole read would describe it.
fn joining_point_after(lines: &[Line], turns: &[Turn], resume: &ResumeState) -> ResumeState {
    let branch = BranchChoice {
        line: turns.last().map_or(resume.branch.line, |t| t.line),
        seen: resume.branch.seen || turns.iter().any(Turn::seen),
        ..resume.branch
    };
    match turns.last() {
        Some(last) => ResumeState {
            branch,
            ..joining_point(lines, Some(last))
        },
        None => {
            let ends = resume
                .leaf
                .iter()
                .chain(&resume.after_leaf)
                .map(String::as_str);
            let mut after_leaf = resume.after_leaf.clone();
            after_leaf.extend(chained(lines, ends));
            ResumeState {
                leaf: resume.leaf.clone(),
                after_leaf,
                branch,
                ..ResumeState::default()
            }
        }
    }
}

/// What reading on after the new lines needs: the prefix's `resume` state
/// with the new responses taken on, joined at `joined`. (No new record is
/// left off the branch: such lines are read whole.)
fn resume_after(mut resume: ResumeState, joined: ResumeState, built: &Built) -> ResumeState {
    // Taken on, not copied: the prefix's responses are sorted already, and
    // a stable sort merges the few new ones in.
    let mut responses = std::mem::take(&mut resume.responses);
    responses.extend(built.by_message_id.keys().cloned());
    responses.sort();
    ResumeState {
        subagent: resume.subagent,
        responses,
        strays: std::mem::take(&mut resume.strays),
        ..joined
    }
}

/// The new conversation records on the branch that ends at the last of
/// them, when that branch joins the prefix's where it ended: the walk
/// [`choose_branch`] takes over the whole log then passes through them and
/// goes on exactly as it did over the prefix. `None` when it would leave
/// the prefix's branch (a rewind) or stop short of it.
fn tail_branch(
    turns: &[Turn],
    parents: &IdMap<'_, Option<&str>>,
    resume: &ResumeState,
) -> Option<Vec<bool>> {
    let Some(last) = turns.len().checked_sub(1) else {
        return Some(Vec::new());
    };
    let position: IdMap<'_, usize> = turns
        .iter()
        .enumerate()
        .filter_map(|(i, t)| Some((t.uuid?, i)))
        .collect();
    let mut on_branch = vec![false; turns.len()];
    let mut on_path: IdSet<'_> = IdSet::default();
    let mut i = last;
    'walk: loop {
        on_branch[i] = true;
        on_path.extend(turns[i].uuid);
        let mut parent = turns[i].parent;
        loop {
            match parent {
                Some(p) if on_path.contains(p) => return None,
                Some(p) if position.contains_key(p) => {
                    i = position[p];
                    continue 'walk;
                }
                Some(p) if parents.contains_key(p) => {
                    on_path.insert(p);
                    parent = parents[p];
                }
                Some(p) => {
                    if resume.leaf.as_deref() == Some(p) || resume.after_leaf.iter().any(|a| a == p)
                    {
                        break 'walk;
                    }
                    return None;
                }
                None if i == 0 => break 'walk,
                None if on_branch[i - 1] => return None,
                None => {
                    i -= 1;
                    continue 'walk;
                }
            }
        }
    }
    Some(on_branch)
}

/// Which new records the model saw: the branch, and the side branches of
/// the same exchanges as [`choose_branch`] takes them in — blocks of a
/// response on the branch, results answering a call on it. `calls` and
/// `answered` are the prefix's. `None` when a record on the branch would
/// change how the prefix reads: an answer to a call the prefix already
/// answered (it could push out one the prefix took in).
fn choose_tail(
    turns: &[Turn],
    mut chosen: Vec<bool>,
    responses: &IdSet<'_>,
    calls: &IdSet<'_>,
    answered: &IdSet<'_>,
) -> Option<Vec<bool>> {
    let on_branch: Vec<&Turn> = turns
        .iter()
        .zip(&chosen)
        .filter(|(_, c)| **c)
        .map(|(t, _)| t)
        .collect();
    let mut responses = responses.clone();
    responses.extend(
        on_branch
            .iter()
            .filter(|t| t.assistant)
            .filter_map(|t| t.message_id),
    );
    let mut answered: IdSet<'_> = answered.clone();
    for t in on_branch.iter().filter(|t| !t.assistant) {
        for id in t.head.results() {
            if !answered.insert(id) {
                return None;
            }
        }
    }
    take_side_branches(turns, &mut chosen, &responses, calls.clone(), answered);
    Some(chosen)
}

/// The prompt size the API reported for a response: fresh input plus what
/// was written to and read from the prompt cache. `None` when the record
/// carries no usage, or a zero one (synthetic messages the host wrote).
fn prompt_size(message: &Value) -> Option<usize> {
    let usage = message.get("usage")?;
    let field = |k: &str| usage.get(k).and_then(Value::as_u64).unwrap_or(0);
    let total = field("input_tokens")
        + field("cache_creation_input_tokens")
        + field("cache_read_input_tokens");
    usize::try_from(total).ok().filter(|&n| n > 0)
}

/// A user or assistant record that belongs to the conversation (the main
/// one, or a subagent's own in its sidechain file).
fn conversation_turn<'a>(
    name: &str,
    index: usize,
    l: &'a Line<'a>,
    subagent: bool,
    warnings: &mut Vec<(usize, String)>,
) -> Option<Turn<'a>> {
    let (h, line) = (&l.head, l.line);
    let role = h.conversation?;
    if (!subagent && h.sidechain) || h.api_error {
        return None;
    }
    let message = h.message.as_ref();
    if message.is_none_or(|m| !m.has_content) {
        warnings.push((
            line,
            format!(
                "{name}:{line}: {kind} record without message content; skipped",
                kind = role.name()
            ),
        ));
        return None;
    }
    Some(Turn {
        index,
        line,
        head: h,
        at: l.at.clone(),
        uuid: h.uuid.as_deref(),
        parent: h.parent.as_deref(),
        assistant: role == Role::Assistant,
        message_id: message.and_then(|m| m.id.as_deref()),
    })
}

/// Marks the turns on the branch that ends at turn `leaf` (see
/// [`choice::choose`] for which leaf that is).
///
/// Walks from the leaf to its root. A record with no known parent (hand
/// written logs leave `parentUuid` null everywhere) links to the turn before
/// it in the file. Side branches are taken in when they are part of the same
/// exchange: blocks of a response already chosen, and tool results answering
/// a chosen call. Abandoned branches (a rewound prompt and its replies) stay out.
fn choose_branch(
    turns: &[Turn],
    lines: &[&Line],
    boundaries: &IdSet<'_>,
    leaf: usize,
) -> Vec<bool> {
    let mut chosen = vec![false; turns.len()];
    if leaf >= turns.len() {
        return chosen;
    }
    let mut walk = RootWalk::new(turns, lines, boundaries);
    let mut i = leaf;
    loop {
        chosen[i] = true;
        walk.mark(i);
        match walk.step_from(i) {
            Upward::Stop => break,
            Upward::To(at) => i = at,
            Upward::Before if i == 0 || chosen[i - 1] => break,
            Upward::Before => i -= 1,
        }
    }
    // Side branches of the same exchanges, if any turn is off the branch:
    // none in a log never rewound, whose sets below cost a quarter of the
    // choice at 99K lines.
    if chosen.iter().all(|&c| c) {
        return chosen;
    }
    let message_ids: IdSet<'_> = turns
        .iter()
        .zip(&chosen)
        .filter(|(t, c)| **c && t.assistant)
        .filter_map(|(t, _)| t.message_id)
        .collect();
    let answered: IdSet<'_> = turns
        .iter()
        .zip(&chosen)
        .filter(|(t, c)| **c && !t.assistant)
        .flat_map(|(t, _)| t.head.results())
        .collect();
    take_side_branches(turns, &mut chosen, &message_ids, IdSet::default(), answered);
    chosen
}

/// Where a walk from a leaf to its root goes from a turn.
enum Upward {
    /// The walk ends: at a compaction boundary, or where it meets itself.
    Stop,
    /// On to the turn at this place, the parent.
    To(usize),
    /// On to the turn before in the file: the parent is unknown.
    Before,
}

/// A walk from a leaf to its root, and the records it has passed.
struct RootWalk<'a> {
    turns: &'a [Turn<'a>],
    lines: &'a [&'a Line<'a>],
    boundaries: &'a IdSet<'a>,
    /// Each turn's place by its uuid; a uuid two turns share stands for the
    /// later one.
    position: IdMap<'a, usize>,
    /// No two turns share a uuid.
    unique: bool,
    /// The turns on the path, by their uuid's place.
    on_path: Vec<bool>,
    /// The records on the path between turns that are not turns
    /// (progress, system), by uuid.
    between: IdSet<'a>,
    /// Parent links of every record, taken only when a chain passes
    /// through records that are not turns.
    parents: OnceCell<IdMap<'a, Option<&'a str>>>,
}

impl<'a> RootWalk<'a> {
    fn new(turns: &'a [Turn<'a>], lines: &'a [&'a Line<'a>], boundaries: &'a IdSet<'a>) -> Self {
        // Sized for the whole log: the path is most of it, and a table grown
        // by doubling hashes every id again at each step.
        let mut position: IdMap<'a, usize> =
            IdMap::with_capacity_and_hasher(turns.len(), IdHash::default());
        let mut unique = true;
        for (i, t) in turns.iter().enumerate() {
            if let Some(u) = t.uuid {
                unique &= position.insert(u, i).is_none();
            }
        }
        RootWalk {
            turns,
            lines,
            boundaries,
            position,
            unique,
            on_path: vec![false; turns.len()],
            between: IdSet::default(),
            parents: OnceCell::new(),
        }
    }

    /// Puts turn `i` on the path.
    fn mark(&mut self, i: usize) {
        let turn = &self.turns[i];
        let place = match self.unique {
            true => turn.uuid.map(|_| i),
            false => turn.uuid.and_then(|u| self.position.get(u).copied()),
        };
        if let Some(at) = place {
            self.on_path[at] = true;
        }
    }

    /// Where the walk goes from turn `i`: its parent, followed through
    /// records that are not turns.
    fn step_from(&mut self, i: usize) -> Upward {
        let turns = self.turns;
        let mut parent = turns[i].parent;
        while let Some(p) = parent {
            if self.boundaries.contains(p) {
                return Upward::Stop;
            }
            // Most turns follow the one before them, whose uuid, when no
            // two turns share one, is its place.
            let at = match i.checked_sub(1) {
                Some(before) if self.unique && turns[before].uuid == Some(p) => Some(before),
                _ => self.position.get(p).copied(),
            };
            if let Some(at) = at {
                return match self.on_path[at] {
                    true => Upward::Stop,
                    false => Upward::To(at),
                };
            }
            if self.between.contains(p) {
                return Upward::Stop;
            }
            let lines = self.lines;
            let Some(&up) = self.parents.get_or_init(|| parent_links(lines)).get(p) else {
                break;
            };
            self.between.insert(p);
            parent = up;
        }
        Upward::Before
    }
}

/// Adds a later line's blocks to the message its response started.
fn append_blocks(target: &mut HostMessage, more: HostMessage) {
    let (mut raw, more_raw) = (target.raw.value(), more.raw.value());
    if let (Some(a), Some(b)) = (
        raw["content"].as_array_mut(),
        more_raw["content"].as_array(),
    ) {
        a.extend(b.iter().cloned());
        target.raw = raw.into();
    }
    target.blocks.reserve_exact(more.blocks.len());
    target.blocks.extend(more.blocks);
    target.cores.reserve_exact(more.cores.len());
    target.cores.extend(more.cores);
}

#[cfg(test)]
mod kept_tests {
    use super::Kept;

    #[test]
    fn pieces_stay_where_they_were_kept_and_come_back_in_order() {
        let kept = Kept::default();
        let texts: Vec<String> = (0..1_000).map(|i| format!("piece {i}\n")).collect();
        let held: Vec<&str> = texts.iter().map(|t| kept.keep(t.clone())).collect();
        // Every earlier piece is still there, unmoved, as later ones come.
        for (h, t) in held.iter().zip(&texts) {
            assert_eq!(h, t);
        }
        assert_eq!(kept.into_pieces(), texts);
    }
}
