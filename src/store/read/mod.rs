//! Reading a session's transcript: whole, in pieces, or on from the read
//! cache the last turn left; and finding the session's directory from what
//! was read.

mod pieces;
mod warm;

use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use super::{
    CacheEnd, SessionDir, SessionLock, StoreError, Unparsed, WordsFile, transcript_digest,
};
use crate::engine::{CompressionState, CoreMessage, KeptCut};
use crate::formats::{self, BadLines, Format, ReadError, TextFrom, Transcript};
use warm::PrefixCheck;

/// What only the program opening a session knows: where sessions live,
/// which session and format the transcript is, and how to read it.
#[derive(Debug, Clone, Default)]
pub struct SessionOptions {
    /// The directory sessions live under; `.noa` beside the transcript when
    /// not given.
    pub state_dir: Option<PathBuf>,
    /// The session's id; the transcript's own, else its file stem, when not
    /// given.
    pub session: Option<String>,
    /// Sessions to inherit from when this one has no state yet, nearest
    /// first.
    pub parents: Vec<String>,
    /// The transcript's format; detected when not given.
    pub format: Option<Format>,
    /// The last record of the Claude Code conversation to read, when it is
    /// not the newest one. Such a read leaves no read cache: the cache holds
    /// the conversation a turn reads without it.
    pub leaf: Option<String>,
    /// What a line that is not valid JSON does.
    pub bad_lines: BadLines,
}

/// What the program opening a session does at a few points of a read, for
/// what the store cannot know: whether a person watches, and how the
/// program's allocator is best used. Each does nothing unless the program
/// says otherwise.
pub trait ReadHooks: Sync {
    /// A read of `bytes` bytes of the transcript `name` begins, which the
    /// program may show. What it returns is called when the read ends.
    fn reading(&self, _name: &str, _bytes: usize) -> Box<dyn FnOnce()> {
        Box::new(|| {})
    }

    /// A read on from the read cache begins: what a turn read that way
    /// frees of its large blocks, it does not take again, so the program
    /// may hand them back as they are freed, until a read whole begins
    /// ([`ReadHooks::reading`]).
    fn reading_on(&self) {}

    /// Reading let go of most of what it held (the transcript's text, or a
    /// piece of it): the program may hand the freed memory back to the
    /// system, since what it builds next does not reuse it.
    fn let_go(&self) {}

    /// A turn's one projection of a whole history begins: most of what it
    /// frees from here on is not needed again, so the program may hand
    /// freed memory back at once rather than keep it for reuse.
    fn freeing_for_good(&self) {}
}

/// Whether a command writes the session (and so takes its lock first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Reads only: no directory made, no lock taken, nothing saved.
    Read,
    /// Writes: the session directory is made and locked for the command.
    Write,
}

/// A transcript read from a file or stdin, with where its session lives.
pub(super) struct Loaded {
    /// The path it was named by (`-` for stdin).
    pub path: PathBuf,
    /// The transcript.
    pub transcript: Transcript,
    /// The session's directory.
    pub session: SessionDir,
    /// The state dir all sessions live under.
    pub base: PathBuf,
    /// Ancestors to inherit from, nearest first.
    pub parents: Vec<String>,
    /// How the transcript was read, for the read cache.
    pub read: HowRead,
    /// What a turn read on from the read cache took of its session while
    /// the cache was decoded, when it was asked to.
    pub ahead: Option<LockAndState>,
    /// The warning for an unfinished last line left for the next read
    /// (see [`formats::hold_back_unfinished`]). Kept apart from the
    /// transcript's warnings, which the read cache keeps: the next turn
    /// finds the line finished.
    pub held: Option<String>,
}

/// The session's lock and state, taken on a thread of their own while a
/// warm turn decodes the read cache: loading a long session's state takes
/// about as long as decoding its cache. The state is loaded under the lock
/// when the command writes, as opening the session would take it, so it is
/// the state the command may change.
pub(super) struct LockAndState {
    /// The lock, when the command writes: taken, or why not.
    pub lock: Option<Result<SessionLock, StoreError>>,
    /// The state on disk; `None` when it was not loaded (the lock failed).
    pub state: Option<Result<Option<CompressionState>, StoreError>>,
}

/// How a transcript was read: whole, or on from an earlier turn's read
/// cache; and what the next turn's cache needs to know of the bytes.
#[derive(Debug, Default)]
pub(super) struct HowRead {
    /// Length, lines and digest of the bytes read, when they can be cached:
    /// a line-by-line format, whole lines, nothing replaced in decoding.
    /// Read on from the cache, it is known once `check` is confirmed.
    pub mark: Option<(u64, u64, u64)>,
    /// Read on from the cache: the digest of the prefix, still being taken
    /// (see [`HowRead::confirm`]).
    pub check: Option<PrefixCheck>,
    /// From the cache: the flat history of the prefix, texts included
    /// where they were kept.
    pub prefix: Vec<CoreMessage>,
    /// From the cache: for each message of `prefix`, whether its words were
    /// left out (those past its end were read and have them).
    pub elided: Vec<bool>,
    /// From the cache: the JSON of the messages that may be shown, parsed
    /// once the view says which are.
    pub raws: Vec<Unparsed>,
    /// Whether the transcript was read on from the cache.
    pub warm: bool,
    /// Where the cache read on from ends, when what it holds still stands
    /// as written: a turn may append to it.
    pub appendable: Option<CacheEnd>,
    /// From the cache: the cuts the last turn made, when the messages they
    /// were made of still stand as the cache holds them.
    pub cuts: Vec<(String, KeptCut)>,
    /// Where the words of each message handed over without them lie, by
    /// its place in the history (see [`CoreMessage::withheld`]): messages
    /// of `prefix` the cache kept them of, or, read whole, long outputs set
    /// aside as they were read (see [`super::set_aside`]).
    pub withheld: Vec<(usize, u64)>,
    /// The file those words are read from, held open: the read cache, or
    /// the file they were set aside in.
    pub words: Option<WordsFile>,
}

impl HowRead {
    /// Whether the transcript's prefix is the one the read cache read,
    /// waiting for its digest if it is still being taken; true for a
    /// transcript read whole. Once it is, the bytes read are marked for the
    /// cache the turn leaves.
    pub fn confirm(&mut self) -> bool {
        let Some(check) = self.check.take() else {
            return true;
        };
        self.mark = check.finish();
        self.mark.is_some()
    }
}

/// One transcript to read, with what the program said of it.
#[derive(Clone, Copy)]
pub(super) struct Reader<'a> {
    /// The path it was named by (`-` for stdin).
    pub path: &'a Path,
    pub options: &'a SessionOptions,
    pub hooks: &'a dyn ReadHooks,
}

/// What a read keeps beside the messages.
#[derive(Debug, Clone, Copy, Default)]
struct Keep {
    /// The mark a read cache is left with (the transcript's digest).
    cache_mark: bool,
    /// The transcript's parsed lines, for `materialize` to write back.
    records: bool,
}

impl Reader<'_> {
    /// Reads the transcript and resolves its session directory, leaving no
    /// read cache.
    pub fn load(&self) -> Result<Loaded, StoreError> {
        if let Some(loaded) = self.load_in_pieces(false, None)? {
            return Ok(loaded);
        }
        let (name, bytes) = self.read_input()?;
        let mut loaded = self.load_bytes(name, bytes, Keep::default())?;
        // Only materialize writes records back.
        loaded.transcript.records = Vec::new();
        Ok(loaded)
    }

    /// [`Reader::load`], keeping the original records: what `materialize`
    /// writes back.
    pub fn load_with_records(&self) -> Result<Loaded, StoreError> {
        let (name, bytes) = self.read_input()?;
        let keep = Keep {
            records: true,
            ..Keep::default()
        };
        self.load_bytes(name, bytes, keep)
    }

    /// Reads a transcript for a turn: on from the session's read cache when
    /// the cache is there and its prefix is unchanged, else whole. Either
    /// way the bytes are marked so the turn can leave a cache for the next
    /// one. A turn read on from the cache takes the session's lock (for
    /// [`Access::Write`]) and loads its state while it decodes the cache
    /// (see [`LockAndState`]). Read on from the cache, the long tool
    /// outputs of the prefix are left in it until a view shows them or an
    /// archive takes them (see [`CoreMessage::withheld`]).
    pub fn load_for_turn(&self, access: Access) -> Result<Loaded, StoreError> {
        let mut loaded = self.load_unconfirmed(access, SetAside::Never)?;
        if !loaded.read.confirm() {
            return self.load_whole();
        }
        Ok(loaded)
    }

    /// [`Reader::load_for_turn`], for a turn that projects before it
    /// writes or shows anything: read on from the cache, the prefix's
    /// digest is still being taken, and the turn asks [`HowRead::confirm`]
    /// once it has projected (see [`PrefixCheck`]).
    pub fn load_unconfirmed(&self, access: Access, aside: SetAside) -> Result<Loaded, StoreError> {
        // A read cache holds the conversation read without a leaf named.
        if self.path.as_os_str() != "-"
            && self.options.leaf.is_none()
            && let Some(loaded) = self.load_warm(access)?
        {
            return Ok(loaded);
        }
        let aside =
            (aside == SetAside::WhenWriting && access == Access::Write).then(|| self.state_base());
        self.load_whole_in(aside.as_deref())
    }

    /// Reads a transcript for a turn whole, its bytes marked for the read
    /// cache the turn leaves.
    pub fn load_whole(&self) -> Result<Loaded, StoreError> {
        self.load_whole_in(None)
    }

    /// [`Reader::load_whole`], setting a long transcript's long outputs
    /// aside in a file in `aside` when it names a directory.
    fn load_whole_in(&self, aside: Option<&Path>) -> Result<Loaded, StoreError> {
        if let Some(loaded) = self.load_in_pieces(true, aside)? {
            return Ok(loaded);
        }
        let (name, bytes) = self.read_input()?;
        let keep = Keep {
            cache_mark: true,
            ..Keep::default()
        };
        let mut loaded = self.load_bytes(name, bytes, keep)?;
        loaded.transcript.records = Vec::new();
        Ok(loaded)
    }

    /// The transcript's name for diagnostics and its bytes, from the file
    /// or stdin.
    fn read_input(&self) -> Result<(String, Vec<u8>), StoreError> {
        if self.path.as_os_str() != "-" {
            return Ok((self.path.display().to_string(), read_file(self.path)?));
        }
        let mut bytes = Vec::new();
        io::stdin()
            .read_to_end(&mut bytes)
            .map_err(|source| StoreError::TranscriptIo {
                path: "<stdin>".into(),
                error: source,
            })?;
        Ok(("<stdin>".to_string(), bytes))
    }

    /// Reads a transcript's bytes, keeping what `keep` says.
    fn load_bytes(
        &self,
        name: String,
        mut bytes: Vec<u8>,
        keep: Keep,
    ) -> Result<Loaded, StoreError> {
        let (mark, keep_records) = (keep.cache_mark, keep.records);
        let options = self.options;
        let bad = options.bad_lines;
        let held = formats::hold_back_unfinished(&name, &mut bytes, TextFrom::LogStart, 1);
        let digest = (mark && self.path.as_os_str() != "-" && options.leaf.is_none())
            .then(|| transcript_digest(&bytes));
        let (text, decoded) = formats::decode(&name, bytes, bad)?;
        let format = match options.format {
            Some(f) => f,
            None => formats::detect(&name, &text)?,
        };
        // What the read cache needs of the text is taken before the read,
        // which drops the text as soon as its lines are parsed.
        let mark = digest
            .filter(|_| {
                decoded.is_empty() && text.ends_with('\n') && formats::resumable(format, &text)
            })
            .map(|d| (text.len() as u64, formats::newlines(&text) as u64, d));
        let done = self.hooks.reading(&name, text.len());
        let leaf = options.leaf.as_deref();
        let transcript = formats::read_owned_at_leaf(&name, text, format, bad, keep_records, leaf);
        done();
        self.hooks.let_go();
        let mut transcript = transcript?;
        transcript.warnings.extend(decoded);
        let read = HowRead {
            mark,
            ..HowRead::default()
        };
        let mut loaded = self.locate(&name, transcript, read)?;
        loaded.held = held;
        Ok(loaded)
    }

    /// The transcript with the session it belongs to: its directory, the
    /// state dir all sessions live under, and the ancestors to inherit
    /// from.
    fn locate(
        &self,
        name: &str,
        transcript: Transcript,
        read: HowRead,
    ) -> Result<Loaded, StoreError> {
        let options = self.options;
        // Records that are all skipped are a transcript read as the wrong
        // format, not an empty conversation. (Read on from the cache, the
        // transcript holds only what was appended.)
        if !read.warm && transcript.messages.is_empty() && !transcript.warnings.is_empty() {
            return Err(StoreError::NoMessages {
                name: name.to_string(),
                format: transcript.format.name(),
                warnings: transcript.warnings.len(),
                format_named: options.format.is_some(),
            });
        }
        if options.leaf.is_some() && transcript.format != Format::ClaudeCode {
            return Err(StoreError::LeafNotClaudeCode {
                name: name.to_string(),
                format: transcript.format.name(),
            });
        }
        let session_id = (options.session.clone())
            .or_else(|| transcript.session_id.clone())
            .or_else(|| self.file_stem())
            .ok_or_else(|| StoreError::NoSessionId {
                name: name.to_string(),
            })?;
        if session_id.is_empty()
            || session_id.contains(['/', '\\'])
            || session_id == "."
            || session_id == ".."
        {
            return Err(StoreError::BadSessionId { id: session_id });
        }
        let parent = transcript.parent_session.as_deref();
        let (session, base) = self.session_dir(&session_id, parent);
        let mut parents = options.parents.clone();
        parents.extend(
            (transcript.parent_session.iter())
                .filter(|p| **p != session_id)
                .cloned(),
        );
        Ok(Loaded {
            path: self.path.to_path_buf(),
            transcript,
            session,
            base,
            parents,
            read,
            ahead: None,
            held: None,
        })
    }

    /// The transcript file's name without its extension: the session id
    /// when neither the options nor the transcript name one.
    fn file_stem(&self) -> Option<String> {
        (self.path.file_stem()).map(|s| s.to_string_lossy().into_owned())
    }

    /// The directory the sessions of the transcript are kept in.
    fn state_base(&self) -> PathBuf {
        match &self.options.state_dir {
            Some(d) => d.clone(),
            None => (self.path.parent())
                .map(Path::to_path_buf)
                .unwrap_or_default()
                .join(".noa"),
        }
    }

    /// A session's directory and the state dir above it. A subagent's
    /// state and archives live under the session that spawned it.
    fn session_dir(&self, session_id: &str, parent: Option<&str>) -> (SessionDir, PathBuf) {
        let base = self.state_base();
        let session = match (&self.options.session, parent) {
            (None, Some(parent)) if parent != session_id => {
                SessionDir::subagent(&base, parent, session_id)
            }
            _ => SessionDir::new(&base, session_id),
        };
        (session, base)
    }
}

/// Whether a long transcript read whole for a turn has its long tool
/// outputs set aside on disk as it is read (see [`super::set_aside`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SetAside {
    /// When the turn writes, and so can fill them in.
    WhenWriting,
    /// Never: the command needs every word in memory.
    Never,
}

/// A transcript file's bytes. What a user can get wrong — a path that does
/// not exist, a directory, a file they may not read — is bad input, not an
/// I/O failure.
fn read_file(path: &Path) -> Result<Vec<u8>, StoreError> {
    let name = path.display().to_string();
    let not = |why: &str, help: &str| {
        StoreError::Transcript(ReadError::NotATranscript {
            name: name.clone(),
            why: why.into(),
            help: help.into(),
        })
    };
    if path.is_dir() {
        return Err(not(
            "a directory, not a transcript",
            "name the session's JSONL log inside it",
        ));
    }
    fs::read(path).map_err(|source| match source.kind() {
        io::ErrorKind::NotFound => not("no such file", "check the path"),
        io::ErrorKind::PermissionDenied => not(
            "not readable (permission denied)",
            "run noa as a user who may read it",
        ),
        _ => StoreError::TranscriptIo {
            path: path.to_path_buf(),
            error: source,
        },
    })
}
