//! Transcript formats: reading host logs into [`CoreMessage`]s and writing
//! views back out as provider requests.
//!
//! Each reader turns a log into a [`Transcript`]: the model-visible host
//! messages in order, each holding its request-shaped JSON and one [`ContentBlock`]
//! per content block. A block keeps its own JSON beside the flat core, so
//! whatever the flat form cannot say (thinking signatures, `is_error`,
//! images, unknown fields) comes back untouched when the view is written.
//! The transcript also keeps the original records themselves, and each block
//! its place in them, so [`materialize`] can write a compressed session back
//! in the host's own format with every field the host wrote.

mod anthropic;
mod chat;
mod claude_code;
mod codex;
mod detect;
mod error;
mod jsonl;
mod lean;
mod materialize;
mod message_log;
mod raw_json;
mod reassemble;
mod resume;
mod span;
mod usage;

use std::num::NonZeroU64;

use serde_json::Value;

use crate::engine::tokens::Ends;
use crate::engine::{ClusterCounter, ContentType, CoreMessage, Counted, IdSet, Name, base_of};
use crate::engine::{HostCompaction, Recorded, Weights};

pub use detect::detect;
pub use error::ReadError;
pub use jsonl::{TextFrom, hold_back_unfinished, lines, newlines};
pub use materialize::{materialize, materialize_new_session, new_session_id};
pub use raw_json::RawJson;
pub use reassemble::{reassemble, reassemble_among};
pub use span::string_end;
pub use usage::read_usage;

/// A transcript format noa reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// OpenAI Chat Completions messages.
    Chat,
    /// Anthropic Messages API messages.
    Anthropic,
    /// Claude Code session records.
    ClaudeCode,
    /// Codex rollout lines.
    Codex,
}

impl Format {
    /// What a cache write and a cache read weigh at the provider whose
    /// requests this format records.
    pub fn weights(self) -> Weights {
        match self {
            Format::Codex | Format::Chat => Weights::OPENAI,
            Format::ClaudeCode | Format::Anthropic => Weights::ANTHROPIC,
        }
    }

    /// Every format, in the order detection tries them.
    pub const ALL: [Format; 4] = [
        Format::Codex,
        Format::ClaudeCode,
        Format::Anthropic,
        Format::Chat,
    ];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Format::Chat => "chat",
            Format::Anthropic => "anthropic",
            Format::ClaudeCode => "claude-code",
            Format::Codex => "codex",
        }
    }

    /// Tokens the host behind this format sends beside the messages (its
    /// system prompt and tool definitions), as measured on real sessions:
    /// Claude Code's first requests carry about 25K before any message,
    /// Codex's about 12K. A stand-in until the provider reports a figure.
    pub fn host_overhead(self) -> usize {
        match self {
            Format::ClaudeCode => 25_000,
            Format::Codex => 12_000,
            Format::Chat | Format::Anthropic => 0,
        }
    }

    /// The request format a view of this transcript is written in.
    pub fn view_format(self) -> ViewFormat {
        match self {
            Format::Chat => ViewFormat::Chat,
            Format::Anthropic | Format::ClaudeCode => ViewFormat::Anthropic,
            Format::Codex => ViewFormat::Responses,
        }
    }
}

/// A provider request format a view is written in, one message (or input
/// item) per line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ViewFormat {
    /// OpenAI Chat Completions `messages`.
    Chat,
    /// Anthropic Messages `messages`.
    Anthropic,
    /// OpenAI Responses `input` items.
    Responses,
}

impl ViewFormat {
    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            ViewFormat::Chat => "chat",
            ViewFormat::Anthropic => "anthropic",
            ViewFormat::Responses => "responses",
        }
    }
}

/// A transcript read into model-visible messages.
#[derive(Debug, Clone)]
pub struct Transcript {
    /// The format it was read as.
    pub format: Format,
    /// The id the log gives its session, if it gives one.
    pub session_id: Option<String>,
    /// For a subagent's own log (a Claude Code sidechain file): the session
    /// that spawned it, whose ledger it starts from and under whose
    /// directory its archives go.
    pub parent_session: Option<String>,
    /// Model-visible messages in the order the model saw them.
    pub messages: Vec<HostMessage>,
    /// Things skipped or repaired while reading, for the report.
    pub warnings: Vec<String>,
    /// The original records the messages were read from (log lines, or the
    /// message objects of an array), every field as read. Blocks point into
    /// it through [`BlockSource`], so [`materialize`] can write a kept
    /// message back exactly as the host wrote it, unknown fields included.
    pub records: Vec<Value>,
    /// Records a materialized transcript starts with that hold no message
    /// (Codex's `session_meta`): a host needs them to resume the session.
    pub preamble: Vec<Value>,
    /// What reading on after this transcript's last line needs to know.
    pub resume: ResumeState,
    /// The host's own compactions, oldest first; `summary_ref` is left for
    /// the caller, who has the refs.
    pub compactions: Vec<HostCompaction>,
}

/// What a reader needs to know of the lines it read to read on after them
/// ([`read_after`]) as a whole read would: a Claude Code log's branch, a
/// Codex rollout's prompt sizes. A chat or Anthropic log needs nothing its
/// messages do not say.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResumeState {
    /// Whether the log is a subagent's own; `None` before any conversation
    /// record, when the next lines decide it.
    pub subagent: Option<bool>,
    /// The uuid of the last conversation record: where the branch the model
    /// saw ends, and the next lines' branch must join it.
    pub leaf: Option<String>,
    /// Records after it that chain back to it (progress, system lines).
    pub after_leaf: Vec<String>,
    /// `message.id`s of the responses read.
    pub responses: Vec<String>,
    /// Ids by which a later record could pull a record left off the branch
    /// back in: its response id, the calls its results answer.
    pub strays: Vec<String>,
    /// A Codex rollout's: where its prompt sizes stand.
    pub codex: Option<CodexResume>,
    /// A Claude Code log's: how its conversation was chosen among its
    /// branches, so that a read on from it says so as a whole read does,
    /// and knows when it cannot go on from the branch it chose.
    pub branch: BranchChoice,
}

/// How a Claude Code log's conversation was chosen among the branches its
/// records make: the one the host would go on with when it resumes the
/// session (see `docs/formats.md`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BranchChoice {
    /// The line of the record the conversation ends at; 0 for a log with
    /// no conversation record.
    pub line: usize,
    /// Whether `--leaf` named it.
    pub asked: bool,
    /// Whether it ends at the log's last conversation record. Only then
    /// can the next lines be read on from it: new records that hang
    /// elsewhere could make another branch the newest.
    pub last: bool,
    /// Whether it holds a message of the conversation: a record other than
    /// a local command's (`/export`, its output, the caveat before it),
    /// which the host runs itself and the model does not answer.
    pub seen: bool,
    /// Branches passed over that hold messages of the conversation:
    /// rewound, or grown beside it (those are warned of).
    pub passed_seen: usize,
    /// Branches passed over that hold only local commands' records.
    pub passed_unseen: usize,
}

impl BranchChoice {
    /// One line on which branch was read and why, for `project -v`;
    /// `leaf` is the uuid of its last record, when it has one.
    pub fn describe(&self, leaf: Option<&str>) -> Option<String> {
        if self.line == 0 {
            return None;
        }
        let record = leaf.map_or(String::new(), |u| format!(" (record {u})"));
        let why = if self.asked {
            "as --leaf asks".to_string()
        } else if !self.seen {
            "the last one: no branch holds more than local commands".to_string()
        } else if self.passed_seen == 0 && self.passed_unseen == 0 {
            "the log's only one".to_string()
        } else if self.passed_seen == 0 {
            "the only one holding more than local commands".to_string()
        } else {
            format!("the newest of {}", self.passed_seen + 1)
        };
        let unseen = match self.passed_unseen {
            0 => String::new(),
            n => format!("; {n} branch(es) of local commands alone passed over"),
        };
        Some(format!(
            "conversation: the branch ending on line {}{record}, {why}{unseen}",
            self.line
        ))
    }
}

/// What reading on after a Codex rollout needs: a `token_count` event
/// gives its size to the item that started the response, which may be
/// before the new lines.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CodexResume {
    /// Items read.
    pub items: usize,
    /// The run of model output the items end with.
    pub trailing_outputs: usize,
    /// The item the last prompt size was counted at.
    pub floor: usize,
    /// Whether the model has put out anything since.
    pub output_since_count: bool,
    /// A prompt size not given to a message yet.
    pub pending: Option<usize>,
    /// The item of the last message.
    pub last_message: Option<usize>,
}

/// One model-visible message of a host log.
#[derive(Debug, Clone)]
pub struct HostMessage {
    /// The message as its provider's request takes it: content blocks and
    /// every field the request accepts, no response metadata.
    pub raw: RawJson,
    /// Its content blocks, flattened.
    pub blocks: Vec<ContentBlock>,
    /// The flat form of each block, in the same order, until
    /// [`Transcript::take_cores`] moves them into the history: the history
    /// then is the one copy of them, and a block keeps only what the writers
    /// read. Empty for a message a warm turn took from its read cache, whose
    /// cores were decoded straight into the history.
    pub cores: Vec<CoreMessage>,
    /// 1-based line of the log it starts on.
    pub line: usize,
    /// For a response the log says the size of: the prompt tokens the
    /// provider counted for the request this message answered (system
    /// prompt and tool definitions included, which the log does not hold).
    pub prompt_tokens: Option<usize>,
}

impl HostMessage {
    /// A message read from a log, its blocks and their cores in lists of
    /// their exact length. A list grown by pushing has room for four, and
    /// most messages have one or two: the spare room would be a tenth of a
    /// large transcript's memory once read.
    fn read(raw: RawJson, read: Vec<ReadBlock>, line: usize) -> HostMessage {
        let mut blocks = Vec::with_capacity(read.len());
        let mut cores = Vec::with_capacity(read.len());
        for ReadBlock { core, raw, source } in read {
            blocks.push(ContentBlock::of(&core, raw, source));
            cores.push(core);
        }
        HostMessage {
            raw,
            blocks,
            cores,
            line,
            prompt_tokens: None,
        }
    }
}

/// One content block: what the writers need of it, and its own JSON.
#[derive(Debug, Clone)]
pub struct ContentBlock {
    /// The identity of its core: how a view's message finds the block it
    /// was made from.
    pub id: Name,
    /// What kind of block it is.
    pub kind: ContentType,
    /// Whether its payload is not text (see [`CoreMessage::opaque`]).
    pub opaque: bool,
    /// The block as the view format writes it.
    pub raw: RawJson,
    /// Where the block sits in [`Transcript::records`]: what
    /// [`materialize`] writes back when the block is kept.
    pub source: BlockSource,
    /// Where in the transcript the JSON string its words were read from
    /// starts (its opening quote), when they are one string of a line read
    /// at a known place: the read cache points there rather than copying
    /// them.
    pub words_at: Option<NonZeroU64>,
}

impl ContentBlock {
    /// The block of `core`, as `raw` writes it and `source` places it.
    pub fn of(core: &CoreMessage, raw: RawJson, source: BlockSource) -> ContentBlock {
        ContentBlock {
            id: core.id.clone(),
            kind: core.content_type,
            opaque: core.opaque,
            raw,
            source,
            words_at: None,
        }
    }
}

/// A block as a reader makes it, its core beside it.
#[derive(Debug)]
pub(crate) struct ReadBlock {
    pub(crate) core: CoreMessage,
    pub(crate) raw: RawJson,
    pub(crate) source: BlockSource,
}

/// Where one block came from: a record and the place in it. An index rather
/// than a copy, so keeping the originals costs one copy per record, not one
/// per block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockSource {
    /// Index into [`Transcript::records`].
    pub record: usize,
    /// The place in that record.
    pub slot: Slot,
}

/// The place of a block inside its record. Which list a position counts in
/// depends on the format: the message's `content` (for Claude Code the
/// record's `message.content`, for Codex the item's `content`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Slot {
    /// The record's content as a whole: string content, a chat tool
    /// message's content, or a whole Codex item.
    Content,
    /// Position in the record's content list.
    Part(usize),
    /// Position in a chat message's `tool_calls`.
    ToolCall(usize),
    /// A chat message's `reasoning_content`.
    Reasoning,
}

impl Transcript {
    /// Which branch of a Claude Code log was read as the conversation and
    /// why, in one line (see [`BranchChoice::describe`]); `None` for the
    /// other formats, which hold one conversation a log.
    pub fn branch_read(&self) -> Option<String> {
        match self.format {
            Format::ClaudeCode => (self.resume.branch).describe(self.resume.leaf.as_deref()),
            _ => None,
        }
    }

    /// The provider's recorded prompt sizes, each at the flat history index
    /// of the response it was counted for: that request held everything
    /// before it.
    pub fn recorded(&self) -> Vec<Recorded> {
        let mut at = 0;
        let mut out = Vec::new();
        for m in &self.messages {
            if let Some(tokens) = m.prompt_tokens {
                out.push(Recorded { at, tokens });
            }
            at += m.blocks.len();
        }
        out
    }

    /// The flat history the engine works on, in order, copied.
    pub fn cores(&self) -> Vec<CoreMessage> {
        self.messages
            .iter()
            .flat_map(|m| m.cores.iter().cloned())
            .collect()
    }

    /// The cores the messages hold, in order, moved out rather than copied:
    /// the blocks keep their identities and kinds, which is all the writers
    /// read of them, and the history is the one copy of the cores. For a
    /// transcript read whole that is the flat history; for one read on from
    /// a cache, what follows the cached prefix.
    pub fn take_cores(&mut self) -> Vec<CoreMessage> {
        let blocks: usize = self.messages.iter().map(|m| m.cores.len()).sum();
        // Sized once: the history of a long session is its largest list.
        let mut cores = Vec::with_capacity(blocks);
        for m in &mut self.messages {
            cores.append(&mut m.cores);
            m.cores = Vec::new();
        }
        cores
    }
}

/// The string `v` holds, moved out and a null left in its place; `None`,
/// and `v` untouched, when it holds something else. Readers move a block's
/// words into its core this way, so a transcript holds them once.
fn take_string(v: &mut Value) -> Option<String> {
    match v.take() {
        Value::String(s) => Some(s),
        other => {
            *v = other;
            None
        }
    }
}

/// How to treat lines that are not valid JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BadLines {
    /// Stop at the first one.
    #[default]
    Fail,
    /// Skip it with a warning.
    Skip,
}

/// A transcript's bytes as text. Invalid UTF-8 is an error naming its line
/// and column; with [`BadLines::Skip`] the bad bytes are replaced instead,
/// with a warning naming the lines. A NUL byte means the file is not text.
/// What real hosts write and JSON readers refuse is repaired in place (see
/// [`repaired`]): a leading byte-order mark silently, lone surrogate escapes
/// with a warning naming their lines. The warnings are what was replaced:
/// a text with any is not the file's bytes as they are.
pub fn decode(
    name: &str,
    bytes: Vec<u8>,
    bad: BadLines,
) -> Result<(String, Vec<String>), ReadError> {
    let (mut text, mut warnings) = decode_utf8(name, bytes, bad)?;
    warnings.extend(repaired(name, &mut text));
    Ok((text, warnings))
}

/// Repairs `text` in place as [`decode`] does; the warning for the lone
/// surrogates it replaced, if any.
pub fn repaired(name: &str, text: &mut String) -> Option<String> {
    let lines = jsonl::repair(text);
    (!lines.is_empty()).then(|| {
        let lines: Vec<String> = lines.iter().map(usize::to_string).collect();
        format!(
            "{name}: a lone UTF-16 surrogate escape read as U+FFFD on line(s) {}",
            lines.join(", ")
        )
    })
}

/// [`decode`] but for the repair.
fn decode_utf8(
    name: &str,
    bytes: Vec<u8>,
    bad: BadLines,
) -> Result<(String, Vec<String>), ReadError> {
    if let Some(at) = memchr::memchr(0, &bytes) {
        let (line, _) = place(&bytes, at);
        return Err(ReadError::NotATranscript {
            name: name.to_string(),
            why: format!("a binary file, not a transcript (a NUL byte on line {line})"),
            help: "name the session's JSONL log".into(),
        });
    }
    match String::from_utf8(bytes) {
        Ok(text) => Ok((text, Vec::new())),
        Err(e) => {
            let bytes = e.into_bytes();
            let at = std::str::from_utf8(&bytes).map_or_else(|e| e.valid_up_to(), |_| 0);
            let (line, column) = place(&bytes, at);
            if bad == BadLines::Fail {
                return Err(ReadError::Encoding {
                    name: name.to_string(),
                    line,
                    column,
                });
            }
            let text = String::from_utf8_lossy(&bytes).into_owned();
            let lines: Vec<String> = text
                .lines()
                .enumerate()
                .filter(|(_, l)| l.contains('\u{FFFD}'))
                .map(|(i, _)| (i + 1).to_string())
                .collect();
            let warning = format!(
                "{name}: invalid UTF-8 replaced on line(s) {}",
                lines.join(", ")
            );
            Ok((text, vec![warning]))
        }
    }
}

/// The 1-based line and byte column of byte `at`.
fn place(bytes: &[u8], at: usize) -> (usize, usize) {
    let before = &bytes[..at];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let start = before
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    (line, at - start + 1)
}

/// Reads a transcript from its text. `name` is used in diagnostics.
pub fn read(
    name: &str,
    text: &str,
    format: Option<Format>,
    bad: BadLines,
) -> Result<Transcript, ReadError> {
    let format = match format {
        Some(f) => f,
        None => detect(name, text)?,
    };
    Ok(Parsed::of(format, name, text, (bad, None), true)?.build(name, true))
}

/// [`read`], taking the text: it is dropped once its lines are parsed, so
/// the file's bytes and the messages built from them are never held at once.
/// Without `keep_records` the parsed lines are let go as their messages are
/// built, or may be: the transcript's `records` are for `materialize` alone.
///
/// A Claude Code log is the exception: its text is held until its messages
/// are built, since its lines are first read lean (ids and links only) and
/// only the records of the conversation are then parsed whole, one at a
/// time; its progress and bookkeeping records, and those of abandoned
/// branches, are never built at all.
pub fn read_owned(
    name: &str,
    text: String,
    format: Format,
    bad: BadLines,
    keep_records: bool,
) -> Result<Transcript, ReadError> {
    read_owned_at_leaf(name, text, format, bad, keep_records, None)
}

/// [`read_owned`], a Claude Code log's conversation being the branch that
/// ends at the record `leaf` names, when it names one (`--leaf`: see
/// `docs/formats.md`). The other formats hold one conversation a log.
pub fn read_owned_at_leaf(
    name: &str,
    text: String,
    format: Format,
    bad: BadLines,
    keep_records: bool,
    leaf: Option<&str>,
) -> Result<Transcript, ReadError> {
    let parsed = Parsed::of(format, name, &text, (bad, leaf), keep_records)?;
    drop(text);
    Ok(parsed.build(name, keep_records))
}

/// A JSONL log read a piece at a time, each piece ending where a line does:
/// a turn never holds the file's text and all the messages built from it
/// at once. It reads as [`read_owned`] reads the whole text without records.
pub struct PieceReader {
    pieces: Pieces,
    name: String,
    bad: BadLines,
    next_line: usize,
    /// Where the next piece starts in the transcript: the pieces are the
    /// log's bytes from its first, in order.
    next_at: u64,
    aside: Option<Aside>,
    /// How many of the messages built so far have their blocks hashed
    /// (a chat or Anthropic log's; see [`PieceReader::read`]).
    hashed: usize,
}

/// Where the blocks a reader builds go as they are built (see
/// [`PieceReader::set_aside`]), and how many it has handed over.
struct Aside {
    taker: Box<dyn SetAside>,
    messages: usize,
    blocks: usize,
}

/// Takes the words of blocks a [`PieceReader`] builds, as it builds them,
/// so a long log's are not all held at once: what it takes it leaves as
/// [`CoreMessage::withheld`] says, and once the log is read it gives back
/// what it learned of each block's words ([`Taken`]), the reader then
/// giving every block its id.
pub trait SetAside {
    /// Offered `core`, the `at`th block of the log, just built, whose
    /// words lie in the transcript at `words_at` when that is known (see
    /// [`ContentBlock::words_at`]).
    fn offer(&mut self, at: usize, core: &mut CoreMessage, words_at: Option<NonZeroU64>);
    /// The blocks taken, in order.
    fn finish(&mut self) -> Vec<Taken>;
}

/// Reads a stretch of a log again, for a [`PieceReader`] that let go of it
/// (see [`PieceReader::read_again`]).
pub trait ReadAgain: Send + Sync {
    /// The `len` bytes at `at` in the log into `into`, made text as the
    /// reader was given them; false when they cannot be read.
    fn read_again(&self, at: u64, len: usize, into: &mut String) -> bool;
}

/// A block a [`SetAside`] took, as it gives it back: what was learned of
/// its words where they went, so the reader's thread never reads them.
#[derive(Debug)]
pub struct Taken {
    /// Its place among the log's blocks.
    pub at: usize,
    /// Its base ([`ClusterCounter::base`]).
    pub base: Name,
    /// Its count and facts.
    pub counted: Counted,
    /// Its ends ([`CoreMessage::ends`]), when it holds a CJK character.
    pub ends: Option<Box<Ends>>,
    /// Its words, when they were not set aside after all (say the disk
    /// filled), to go back where they were.
    pub words: Option<String>,
}

enum Pieces {
    /// A chat or Anthropic log: each piece parsed as it comes, and its
    /// messages built while the next is parsed.
    Built(message_log::PipedBuilder),
    /// A Claude Code log: its lines are all read lean before any record is
    /// chosen, so the pieces are held until then, and each let go once the
    /// records chosen from it are built.
    Scanned(claude_code::PieceScan),
    /// A Codex rollout: each piece's lines parsed and taken in, and the
    /// piece let go.
    Rollout(codex::RolloutPieces),
}

/// A reader for a log that starts with `head` (whole lines, or the whole
/// log when `whole`), `format` given or detected from `head`; `None` when
/// the log must be read whole to read as [`read_owned`] reads it: a JSON
/// array or `{"messages": [...]}` document, a message log whose first line
/// is not a whole object (a document spread over lines), or a head too
/// short to detect the format from.
pub fn read_in_pieces(
    format: Option<Format>,
    name: &str,
    head: &str,
    whole: bool,
    bad: BadLines,
) -> Option<PieceReader> {
    let mut records = jsonl::lines(head).filter(|l| !l.trim().is_empty());
    let first = records.next();
    let format = match format {
        Some(f) => f,
        // Detection looks at the first records: the head must hold them all.
        None if whole || records.nth(detect::LOOKAHEAD - 1).is_some() => detect(name, head).ok()?,
        None => return None,
    };
    let pieces = match format {
        Format::Chat | Format::Anthropic => {
            let log = match format {
                Format::Chat => &chat::LOG,
                _ => &anthropic::LOG,
            };
            let one_line = first
                .is_some_and(|l| serde_json::from_str::<Value>(l).is_ok_and(|v| v.is_object()));
            if !one_line || jsonl::is_document(head) {
                return None;
            }
            Pieces::Built(message_log::PipedBuilder::new(log, name, bad))
        }
        Format::ClaudeCode => Pieces::Scanned(claude_code::PieceScan::new(name, bad)),
        Format::Codex => Pieces::Rollout(codex::RolloutPieces::new()),
    };
    Some(PieceReader {
        pieces,
        name: name.to_string(),
        bad,
        next_line: 1,
        next_at: 0,
        aside: None,
        hashed: 0,
    })
}

impl PieceReader {
    /// Reads the next piece: whole lines, but for the last piece, which
    /// ends where the log does.
    pub fn read(&mut self, piece: String) -> Result<(), ReadError> {
        let (lines, len) = (newlines(&piece), piece.len() as u64);
        match &mut self.pieces {
            Pieces::Built(built) => built.read(piece, (self.next_line, self.next_at))?,
            Pieces::Scanned(scan) => scan.read(piece, self.next_line),
            Pieces::Rollout(rollout) => {
                rollout.read(&self.name, (&piece, self.next_at), self.next_line, self.bad)?
            }
        }
        self.next_line += lines;
        self.next_at += len;
        if let Pieces::Built(built) = &mut self.pieces {
            let messages = built.built_messages();
            if let Some(aside) = &mut self.aside {
                aside.offer(messages);
            }
            // Hashed here, while the next piece is built on the other
            // thread: this one only reads, and waits on that one. What is
            // set aside is hashed where it is written.
            messages[self.hashed..].iter_mut().for_each(hash_unhashed);
            self.hashed = messages.len();
        }
        Ok(())
    }

    /// Offers every block built from here on to `taker` (see [`SetAside`]),
    /// as each piece is built: a chat or Anthropic log's. A Claude Code log
    /// or a rollout, whose messages are built once every piece is in (and
    /// a Claude Code message may take blocks from records far after its
    /// first), keeps its words: offered then, they cost the turn a pass
    /// over them all on one thread for memory it had already reached. (A
    /// Claude Code log's caller may let go of words the transcript holds as
    /// one string as each message is built: see [`PieceReader::finish`].)
    /// Only for a reader that [`PieceReader::may_set_aside`].
    pub fn set_aside(&mut self, taker: Box<dyn SetAside>) {
        debug_assert!(
            self.may_set_aside(),
            "only a message log's blocks are set aside"
        );
        self.aside = Some(Aside {
            taker,
            messages: 0,
            blocks: 0,
        });
    }

    /// Whether the log's blocks can be set aside as they are built (see
    /// [`PieceReader::set_aside`]).
    pub fn may_set_aside(&self) -> bool {
        matches!(self.pieces, Pieces::Built(_))
    }

    /// Reads a Claude Code log's conversation as the branch ending at the
    /// record `leaf` names (`--leaf`); the other formats hold one
    /// conversation a log. Given before the first piece.
    pub fn choose_leaf(&mut self, leaf: &str) {
        if let Pieces::Scanned(scan) = &mut self.pieces {
            scan.choose_leaf(leaf);
        }
    }

    /// Reads a long Claude Code log's pieces again with `again` to build
    /// its records, each let go once read lean: its text is then never all
    /// held at once. A piece read again must be the text it was: else the
    /// read fails with [`ReadError::Changed`]. Given before the first
    /// piece; the other formats build as they read, and need not.
    pub fn read_again(&mut self, again: Box<dyn ReadAgain>) {
        if let Pieces::Scanned(scan) = &mut self.pieces {
            scan.read_again(again);
        }
    }

    /// A piece let go once read (see [`PieceReader::read_again`]),
    /// emptied, for the next piece to be read into.
    pub fn spare(&mut self) -> Option<String> {
        match &mut self.pieces {
            Pieces::Scanned(scan) => scan.spare(),
            _ => None,
        }
    }

    /// Reads a log of any size on as many threads as a long one is read
    /// on (a Claude Code log's).
    pub fn on_two_threads(&mut self) {
        if let Pieces::Scanned(scan) = &mut self.pieces {
            scan.on_two_threads();
        }
    }

    /// How many lines the pieces read so far end.
    pub fn lines(&self) -> usize {
        self.next_line - 1
    }

    /// The transcript of every piece read, every block given its identity.
    /// `let_go` is called each time a held piece is let go (a Claude Code
    /// log's), so the caller can hand its pages back while the rest is
    /// built; `built` with each message of a Claude Code log once its
    /// blocks are hashed, so the caller can let go of words it sets aside
    /// while the rest is built.
    pub fn finish(
        self,
        let_go: &(dyn Fn() + Sync),
        built: &dyn Fn(&mut HostMessage),
    ) -> Result<Transcript, ReadError> {
        let mut transcript = match self.pieces {
            Pieces::Built(built) => built.finish()?,
            Pieces::Scanned(scan) => scan.finish(let_go, built)?,
            Pieces::Rollout(rollout) => rollout.finish(),
        };
        if let Some(mut aside) = self.aside {
            aside.offer(&mut transcript.messages);
            aside.give_bases(&mut transcript.messages);
            let_go();
        }
        assign_ids(&mut transcript);
        Ok(transcript)
    }
}

impl Aside {
    /// Offers the blocks of `messages` not offered yet.
    fn offer(&mut self, messages: &mut [HostMessage]) {
        for m in messages.iter_mut().skip(self.messages) {
            for (core, b) in m.cores.iter_mut().zip(&m.blocks) {
                self.taker.offer(self.blocks, core, b.words_at);
                self.blocks += 1;
            }
        }
        self.messages = self.messages.max(messages.len());
    }

    /// Gives each block taken its base as its id, for [`assign_ids`], what
    /// was learned of its words, and its words back when they were not set
    /// aside.
    fn give_bases(&mut self, messages: &mut [HostMessage]) {
        let mut taken = self.taker.finish().into_iter().peekable();
        let cores = messages.iter_mut().flat_map(|m| m.cores.iter_mut());
        for (at, core) in cores.enumerate() {
            if let Some(t) = taken.next_if(|t| t.at == at) {
                core.id = t.base;
                core.counted = t.counted;
                core.ends = t.ends;
                if let Some(words) = t.words {
                    core.hold(words);
                }
            }
        }
    }
}

/// A transcript's lines parsed, its messages not built yet.
enum Parsed {
    Log(
        &'static message_log::MessageLog,
        Vec<jsonl::Record>,
        Vec<String>,
    ),
    /// A log's messages, built as its lines are read: a JSONL message log
    /// read without its records, or a Claude Code log, of which only the
    /// records of the conversation are parsed whole (see [`read_owned`]).
    Built(Box<Transcript>),
    Codex(codex::Parsed),
}

impl Parsed {
    fn of(
        format: Format,
        name: &str,
        text: &str,
        (bad, leaf): (BadLines, Option<&str>),
        keep_records: bool,
    ) -> Result<Parsed, ReadError> {
        let log = |log: &'static message_log::MessageLog| {
            if !keep_records && !jsonl::is_document(text) {
                return Ok(Parsed::Built(Box::new(log.read_lines(name, text, bad)?)));
            }
            let (records, warnings) = log.parse(name, text, bad)?;
            Ok(Parsed::Log(log, records, warnings))
        };
        Ok(match format {
            Format::Chat => log(&chat::LOG)?,
            Format::Anthropic => log(&anthropic::LOG)?,
            Format::ClaudeCode => Parsed::Built(Box::new(claude_code::read(
                name,
                text,
                bad,
                keep_records,
                leaf,
            )?)),
            Format::Codex => Parsed::Codex(codex::parse(name, text, bad)?),
        })
    }

    /// The transcript, every block given its identity; see [`read_owned`]
    /// for `keep_records`.
    fn build(self, name: &str, keep_records: bool) -> Transcript {
        let mut transcript = match self {
            Parsed::Log(log, records, warnings) => {
                let tools = anthropic::ToolNames::default();
                log.messages_of(name, records, tools, (warnings, keep_records))
            }
            Parsed::Built(transcript) => *transcript,
            Parsed::Codex((records, warnings)) => {
                codex::from_records(name, records, warnings, keep_records)
            }
        };
        assign_ids(&mut transcript);
        transcript
    }
}

/// Gives every block its content-hash identity, counting repeats in order.
fn assign_ids(t: &mut Transcript) {
    hash_the_rest(&mut t.messages);
    let mut ids = ClusterCounter::default();
    ids.reserve(t.messages.iter().map(|m| m.cores.len()).sum());
    give_ids(&mut t.messages, &mut ids);
}

/// Gives each block of `messages` (its core, and the block itself) the id
/// `ids` makes of its base, which its core holds as its id until then.
fn give_ids(messages: &mut [HostMessage], ids: &mut ClusterCounter) {
    for m in messages {
        for (b, core) in m.blocks.iter_mut().zip(&mut m.cores) {
            core.id = ids.next(std::mem::take(&mut core.id));
            b.id = core.id.clone();
        }
    }
}

/// Gives each block of `m` its base ([`ClusterCounter::base`]) as its
/// id, for [`assign_ids`] to number, its count learned on the way: for a
/// reader that builds messages on more than one thread, so each hashes its
/// own while their words are in its cache, not in a pass of its own once
/// all are built.
fn hash_blocks(m: &mut HostMessage) {
    for (core, b) in m.cores.iter_mut().zip(&m.blocks) {
        core.id = base_learning(core, b);
    }
}

/// Gives each block of `m` not hashed yet its base as its id, as
/// [`hash_blocks`] does; a block whose words were set aside is hashed
/// where they are written.
fn hash_unhashed(m: &mut HostMessage) {
    for (core, b) in m.cores.iter_mut().zip(&m.blocks) {
        if core.id.is_empty() && core.withheld.is_none() {
            core.id = base_learning(core, b);
        }
    }
}

/// The base of `core`, the block `b` stands for ([`ClusterCounter::base`]),
/// its count learned while its words are in cache from hashing.
fn base_learning(core: &CoreMessage, b: &ContentBlock) -> Name {
    let base = ClusterCounter::base(core, || b.raw.text().to_string());
    core.counted.learn(&core.text);
    base
}

/// Gives each block of `messages` that was not hashed where it was built,
/// or where its words were set aside, its id before repeats are told apart
/// ([`ClusterCounter::base`]); each text's count and facts are learned on
/// the way ([`Counted::learn`](crate::engine::Counted::learn)), while the
/// text is in cache from hashing. A long transcript's blocks are hashed on
/// as many threads as the machine offers (up to four), each taking a run
/// of messages with about as many bytes to hash as the others: sha256 over
/// every word read was a tenth of a first turn.
fn hash_the_rest(messages: &mut [HostMessage]) {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(4));
    hash_the_rest_on(messages, threads)
}

/// [`hash_the_rest`] on at most `threads` threads.
fn hash_the_rest_on(messages: &mut [HostMessage], threads: usize) {
    let run = |messages: &mut [HostMessage]| messages.iter_mut().for_each(hash_unhashed);
    // Bytes a block costs to hash, about: its words, and a little for the rest.
    let size = |m: &HostMessage| -> usize {
        (m.cores.iter())
            .filter(|c| c.id.is_empty())
            .map(|c| c.text.len() + 64)
            .sum()
    };
    let total: usize = messages.iter().map(size).sum();
    if threads < 2 || total < 1 << 20 {
        return run(messages);
    }
    std::thread::scope(|s| {
        let mut rest = messages;
        for _ in 1..threads {
            let (mut at, mut bytes) = (0, 0);
            while at < rest.len() && bytes < total / threads {
                bytes += size(&rest[at]);
                at += 1;
            }
            let (first, after) = std::mem::take(&mut rest).split_at_mut(at);
            s.spawn(move || run(first));
            rest = after;
        }
        run(rest);
    });
}

/// The format and the session a log's first lines name: its session id
/// and, for a subagent's own log, the session that spawned it. A guess made
/// to find the read cache before the log is read (and checked once it is).
pub fn peek_session(
    name: &str,
    head: &str,
    format: Option<Format>,
) -> Option<(Format, Option<String>, Option<String>)> {
    let format = match format {
        Some(f) => f,
        None => detect(name, head).ok()?,
    };
    match format {
        Format::Chat | Format::Anthropic => Some((format, None, None)),
        Format::ClaudeCode => {
            let (session, parent) = claude_code::peek_session(head);
            Some((format, session, parent))
        }
        Format::Codex => Some((format, codex::peek_session(head), None)),
    }
}

/// Whether a transcript can be read on from where an earlier read stopped
/// ([`read_after`]) instead of whole again: JSONL logs (which [`read_after`]
/// still reads whole when new lines change how the old ones read). A single
/// JSON document cannot.
pub fn resumable(format: Format, text: &str) -> bool {
    match format {
        Format::Chat | Format::Anthropic => !jsonl::is_document(text),
        Format::ClaudeCode | Format::Codex => true,
    }
}

/// Lines appended to a transcript after what an earlier turn read of it.
#[derive(Debug, Clone, Copy)]
pub struct Appended<'a> {
    /// Their text: what follows the prefix's bytes.
    pub text: &'a str,
    /// Where it starts in the transcript, in bytes.
    pub at: u64,
    /// The number of its first line.
    pub first_line: usize,
}

/// Reads the lines appended to a transcript after `prefix`, what an earlier
/// turn read of it, and adds them to it; `earlier` is the
/// prefix's flat history (a warm read keeps it beside the messages). Read
/// this way, the messages, their ids and tool names are those a whole read
/// gives, for a transcript [`resumable`] says may be read on.
///
/// `None` for a format that is read whole.
pub fn read_after(
    name: &str,
    appended: Appended,
    mut prefix: Transcript,
    earlier: &[CoreMessage],
    bad: BadLines,
) -> Option<Result<ReadOn, ReadError>> {
    let (mut tail, patch) = match read_tail(name, appended, &mut prefix, earlier, bad)? {
        Ok(read) => read,
        Err(e) => return Some(Err(e)),
    };
    number_tail(&prefix, &mut tail);
    if let Some((at, tokens)) = patch {
        let target = prefix
            .messages
            .iter_mut()
            .find(|m| m.blocks.first().is_some_and(|b| b.source.record >= at));
        target?.prompt_tokens = Some(tokens);
    }
    let prefix_changed = patch.is_some();
    // A rollout numbers its items on from the prefix's; the others from 0.
    let base = match prefix.format {
        Format::Codex => 0,
        _ => prefix.records.len(),
    };
    for b in tail.messages.iter_mut().flat_map(|m| &mut m.blocks) {
        b.source.record += base;
    }
    prefix.messages.append(&mut tail.messages);
    prefix.warnings.append(&mut tail.warnings);
    prefix.records.append(&mut tail.records);
    if tail.format != Format::Chat && tail.format != Format::Anthropic {
        prefix.resume = tail.resume;
    }
    Some(Ok(ReadOn {
        transcript: prefix,
        prefix_changed,
    }))
}

/// The lines appended after `prefix` read in its format, and the prompt
/// size they give a response the prefix holds (a rollout's).
fn read_tail(
    name: &str,
    appended: Appended,
    prefix: &mut Transcript,
    earlier: &[CoreMessage],
    bad: BadLines,
) -> Option<Result<(Transcript, Option<codex::SizeBefore>), ReadError>> {
    let resume = match prefix.format {
        Format::ClaudeCode => std::mem::take(&mut prefix.resume),
        _ => ResumeState::default(),
    };
    let tools = anthropic::ToolNames::after(earlier);
    let tail = match prefix.format {
        Format::Chat => chat::LOG.read_after(name, appended, bad, tools),
        Format::Anthropic => anthropic::LOG.read_after(name, appended, bad, tools),
        Format::ClaudeCode => {
            let prefix = claude_code::Prefix {
                resume,
                cores: earlier,
                has_session: prefix.session_id.is_some(),
            };
            claude_code::read_after(name, appended, bad, prefix, tools)?
        }
        Format::Codex => {
            let prefix = codex::Prefix {
                resume: prefix.resume.codex.take()?,
                has_session: prefix.session_id.is_some(),
            };
            return codex::read_after(name, appended, bad, &prefix, tools);
        }
    };
    Some(tail.map(|t| (t, None)))
}

/// Gives the tail's blocks their ids, going on from the prefix's: the new
/// blocks' bases first, so the prefix's ids are counted only where they
/// share one, not all indexed every turn.
fn number_tail(prefix: &Transcript, tail: &mut Transcript) {
    hash_the_rest(&mut tail.messages);
    let cores = tail.messages.iter().flat_map(|m| &m.cores);
    let wanted: IdSet<'_> = cores.map(|c| c.id.as_str()).collect();
    // Nothing appended (a retry) looks at none of them.
    let mut ids = ClusterCounter::resume(
        prefix
            .messages
            .iter()
            .take_while(|_| !wanted.is_empty())
            .flat_map(|m| &m.blocks)
            .map(|b| b.id.as_str())
            .filter(|id| wanted.contains(base_of(id))),
    );
    give_ids(&mut tail.messages, &mut ids);
}

/// A transcript read on from a prefix ([`read_after`]).
pub struct ReadOn {
    /// The prefix and what follows it, as one transcript.
    pub transcript: Transcript,
    /// Whether the new lines changed a message of the prefix: a Codex
    /// rollout's prompt size given to a response the prefix holds.
    pub prefix_changed: bool,
}

#[cfg(test)]
#[path = "round_trip_tests.rs"]
mod round_trip_tests;

#[cfg(test)]
#[path = "read_after_tests.rs"]
mod read_after_tests;

#[cfg(test)]
#[path = "branch_tests.rs"]
mod branch_tests;
