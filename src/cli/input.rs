//! Reading the transcript and finding the session's directory.

use std::fs;
use std::io::{self, IsTerminal, Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use super::CliError;
use super::args::{FormatArg, Global};
use super::context::Access;
use crate::engine::{CompressionState, CoreMessage};
use crate::formats::{self, BadLines, Format, ReadError, Transcript};
use crate::store::set_aside::{SetApart, Setter, set_aside_from, set_aside_read};
use crate::store::{
    PrefixDigest, ReadCache, SessionDir, SessionLock, StoreError, TranscriptDigest, WarmMessages,
    transcript_digest,
};

/// A transcript read from a file or stdin, with where its session lives.
pub struct Loaded {
    /// The path it was named by (`-` for stdin): settings are looked for
    /// beside it.
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
    /// What a turn read on from the read cache found of its session while
    /// the cache was decoded, when it was asked to look.
    pub early: Option<Early>,
}

/// The session's lock and state, taken on a thread of their own while a
/// warm turn decodes the read cache: loading a long session's state takes
/// about as long as decoding its cache. The state is loaded under the lock
/// when the command writes, as [`Context::open`](super::context::Context::open)
/// would take it, so it is the state the command may change.
pub struct Early {
    /// The lock, when the command writes: taken, or why not.
    pub lock: Option<Result<SessionLock, StoreError>>,
    /// The state on disk; `None` when it was not loaded (the lock failed).
    pub state: Option<Result<Option<CompressionState>, StoreError>>,
}

/// Takes what [`Early`] holds for `session`.
fn early(session: SessionDir, access: Access) -> (SessionDir, Early) {
    let lock = (access == Access::Write).then(|| SessionLock::acquire(&session.dir));
    let state = match &lock {
        Some(Err(_)) => None,
        _ => Some(session.load()),
    };
    (session, Early { lock, state })
}

/// How a transcript was read: whole, or on from an earlier turn's read
/// cache; and what the next turn's cache needs to know of the bytes.
#[derive(Debug, Default)]
pub struct HowRead {
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
    pub raws: Vec<crate::store::Unparsed>,
    /// Whether the transcript was read on from the cache.
    pub warm: bool,
    /// Where the cache read on from ends, when what it holds still stands
    /// as written: a turn may append to it.
    pub appendable: Option<crate::store::CacheEnd>,
    /// From the cache: the cuts the last turn made, when the messages they
    /// were made of still stand as the cache holds them.
    pub cuts: Vec<(String, crate::engine::KeptCut)>,
    /// Where the words of each message handed over without them lie, by
    /// its place in the history (see
    /// [`CoreMessage::withheld`](crate::engine::CoreMessage::withheld)):
    /// messages of `prefix` the cache kept them of, or, read whole, long
    /// outputs set aside as they were read (see [`crate::store::set_aside`]).
    pub withheld: Vec<(usize, u64)>,
    /// The file those words are read from, held open: the read cache, or
    /// the file they were set aside in.
    pub words: Option<crate::store::WordsFile>,
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

/// The digest of a transcript's prefix read on from the read cache, taken on
/// a thread of its own while the turn goes on with what the cache holds:
/// it only says whether what was decoded may be used, and nothing the turn
/// does before it is asked for is written or shown. For a long compressed
/// session, loading the state and decoding the cache take both cores first,
/// and the digest then runs beside the projection; the turn's own thread
/// takes its share of the pieces left once it asks ([`PrefixDigest`]), so
/// neither core sits idle while the other digests.
#[derive(Debug)]
pub struct PrefixCheck {
    /// The prefix's digest, its pieces taken by whichever thread is free.
    digest: Arc<PrefixDigest>,
    /// The thread that started on it.
    helper: Option<std::thread::JoinHandle<()>>,
    /// The digest the prefix must have.
    expected: u64,
    /// The bytes read after the prefix, whose digest goes on from it.
    tail: Vec<u8>,
    /// Length and lines of the whole transcript read.
    length: u64,
    lines: u64,
}

impl PrefixCheck {
    /// Starts digesting the first `length` bytes of `file`, to be compared
    /// with `expected`, then `tail`, the bytes read after them.
    fn start(file: fs::File, (length, expected): (u64, u64), tail: Vec<u8>, lines: u64) -> Self {
        let digest = Arc::new(PrefixDigest::new(file, length));
        let taking = Arc::clone(&digest);
        let helper = std::thread::spawn(move || taking.help());
        PrefixCheck {
            digest,
            helper: Some(helper),
            expected,
            length: length + tail.len() as u64,
            tail,
            lines,
        }
    }

    /// The mark of the transcript read, as [`HowRead::mark`]; `None` when
    /// the prefix is not the one the cache read. This thread takes the
    /// pieces left meanwhile.
    fn finish(mut self) -> Option<(u64, u64, u64)> {
        self.digest.help();
        if let Some(helper) = self.helper.take() {
            // A helper's panic is a bug, and goes on as this thread's would.
            helper
                .join()
                .unwrap_or_else(|e| std::panic::resume_unwind(e));
        }
        let mut digest = self.digest.finish()?;
        if digest.finish() != self.expected {
            return None;
        }
        digest.update(&self.tail);
        Some((self.length, self.lines, digest.finish()))
    }
}

impl Drop for PrefixCheck {
    fn drop(&mut self) {
        self.digest.stop();
    }
}

/// Reads the transcript named on the command line and resolves its session
/// directory. Stdin needs an explicit state dir and session: noa never
/// guesses where originals are kept.
pub fn load(global: &Global, path: &Path) -> Result<Loaded, CliError> {
    if let Some(loaded) = load_in_pieces(global, path, false, None)? {
        return Ok(loaded);
    }
    let (name, bytes) = read_input(global, path)?;
    let mut loaded = load_bytes(global, path, name, bytes, Keep::default())?;
    // Only materialize writes records back.
    loaded.transcript.records = Vec::new();
    Ok(loaded)
}

/// [`load`], keeping the original records: what `materialize` writes back.
pub fn load_with_records(global: &Global, path: &Path) -> Result<Loaded, CliError> {
    let (name, bytes) = read_input(global, path)?;
    load_bytes(
        global,
        path,
        name,
        bytes,
        Keep {
            records: true,
            ..Keep::default()
        },
    )
}

/// Reads a transcript for a turn: on from the session's read cache when the
/// cache is there and its prefix is unchanged, else whole. Either way the
/// bytes are marked so the turn can leave a cache for the next one. With
/// `early`, a turn read on from the cache takes the session's lock (for
/// [`Access::Write`]) and loads its state while it decodes the cache (see
/// [`Early`]). Read on from the cache, the long tool outputs of the prefix
/// are left in it until a view shows them or an archive takes them (see
/// [`CoreMessage::withheld`](crate::engine::CoreMessage::withheld)).
pub fn load_for_turn(
    global: &Global,
    path: &Path,
    early: Option<Access>,
) -> Result<Loaded, CliError> {
    let mut loaded = load_unconfirmed(global, path, early, false)?;
    if !loaded.read.confirm() {
        return load_whole(global, path);
    }
    Ok(loaded)
}

/// [`load_for_turn`], for a turn that projects before it writes or shows
/// anything: read on from the cache, the prefix's digest is still being
/// taken, and the turn asks [`HowRead::confirm`] once it has projected (see
/// [`PrefixCheck`]).
///
/// `set_aside`: whether a long transcript read whole sets its long tool
/// outputs aside (see [`crate::store::set_aside`]), for a turn that writes and
/// can fill them in.
pub fn load_unconfirmed(
    global: &Global,
    path: &Path,
    early: Option<Access>,
    set_aside: bool,
) -> Result<Loaded, CliError> {
    // A read cache holds the conversation read without `--leaf`.
    if path.as_os_str() != "-"
        && global.leaf.is_none()
        && let Some(loaded) = load_warm(global, path, early)?
    {
        return Ok(loaded);
    }
    let aside = (set_aside && early == Some(Access::Write)).then(|| state_base(global, path));
    load_whole_in(global, path, aside.as_deref())
}

/// Reads a transcript for a turn whole, its bytes marked for the read cache
/// the turn leaves.
pub fn load_whole(global: &Global, path: &Path) -> Result<Loaded, CliError> {
    load_whole_in(global, path, None)
}

/// [`load_whole`], setting a long transcript's long outputs aside in a file
/// in `aside` when it names a directory.
fn load_whole_in(global: &Global, path: &Path, aside: Option<&Path>) -> Result<Loaded, CliError> {
    if let Some(loaded) = load_in_pieces(global, path, true, aside)? {
        return Ok(loaded);
    }
    let (name, bytes) = read_input(global, path)?;
    let mut loaded = load_bytes(
        global,
        path,
        name,
        bytes,
        Keep {
            cache_mark: true,
            ..Keep::default()
        },
    )?;
    loaded.transcript.records = Vec::new();
    Ok(loaded)
}

/// The transcript's name for diagnostics and its bytes, from the file or stdin.
fn read_input(global: &Global, path: &Path) -> Result<(String, Vec<u8>), CliError> {
    if path.as_os_str() != "-" {
        return Ok((path.display().to_string(), read_file(path)?));
    }
    if global.state_dir.is_none() || global.session.is_none() {
        return Err(CliError::Usage(
            "reading a transcript from stdin needs --state-dir (or NOA_STATE_DIR) and --session: noa will not guess where to keep a session's state".into(),
        ));
    }
    let mut bytes = Vec::new();
    io::stdin()
        .read_to_end(&mut bytes)
        .map_err(|source| CliError::Io {
            path: "<stdin>".into(),
            error: source,
        })?;
    Ok(("<stdin>".to_string(), bytes))
}

/// Hands the pages of what reading let go (the transcript's text above all)
/// back to the system. The allocator keeps freed pages for later use (for a
/// second, longer than a turn), and what a turn builds next is small
/// allocations that do not reuse them: kept, they would only raise its
/// peak. It is called too as each piece of a Claude Code log is let go
/// while the rest is built (up to 4 MB each, kept beside the messages
/// otherwise), with [`hand_back_at_once`] after it.
fn hand_back_freed_memory() {
    // SAFETY: takes no pointers; it only walks the allocator's own pages.
    unsafe { libmimalloc_sys::mi_collect(true) }
}

/// From here on, what the process frees goes back to the system at once
/// rather than a second later. For a first turn's one projection of a
/// whole history, which cuts thousands of outputs and builds a view of
/// what is left: what it frees is seldom needed again, so handing it back
/// at once lowers the peak for a few system calls. Not for a rebuild or a
/// warm turn, which free and allocate again call after call: each page
/// handed back would be faulted in again.
pub(super) fn hand_back_at_once() {
    // SAFETY: takes no pointers; it only sets one of the allocator's
    // options.
    unsafe { libmimalloc_sys::mi_option_set(PURGE_DELAY, 0) }
}

/// Turns transparent huge pages off for this process.
///
/// The binary calls this as it is loaded, before the runtime's first
/// allocation reserves the allocator's arena and touches it. The allocator
/// marks its arena for huge pages, so that touch would cost every process
/// two of them, 4 MB to zero, and a wait where the machine's free memory
/// has gone back to its host.
///
/// No turn turns them back on, not even a warm turn of a long compressed
/// session, which decodes tens of megabytes of small structures into fresh
/// memory: where the machine's free memory goes back to its host, a fault
/// on a 2 MB page waits for it to be backed, which stalls a turn now and
/// then for far longer than the smaller pages save, and the turn peaks
/// higher.
pub fn huge_pages_off() {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_THP_DISABLE takes plain integers and changes only how
    // the kernel backs this process's memory; a kernel without it refuses
    // the call, which leaves things as they were.
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1 as libc::c_ulong, 0, 0, 0);
    }
}

/// mimalloc's `mi_option_purge_delay` (milliseconds a freed page is kept
/// before it goes back; 0 for at once), by its place in the option list of
/// the mimalloc the locked libmimalloc-sys builds, which names no constant
/// for it.
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// What a read keeps beside the messages.
#[derive(Debug, Clone, Copy, Default)]
struct Keep {
    /// The mark a read cache is left with (the transcript's digest).
    cache_mark: bool,
    /// The transcript's parsed lines, for `materialize` to write back.
    records: bool,
}

/// Reads a transcript's bytes, keeping what `keep` says.
fn load_bytes(
    global: &Global,
    path: &Path,
    name: String,
    bytes: Vec<u8>,
    keep: Keep,
) -> Result<Loaded, CliError> {
    let (mark, keep_records) = (keep.cache_mark, keep.records);
    let bad = bad_lines(global);
    let digest = (mark && path.as_os_str() != "-" && global.leaf.is_none())
        .then(|| transcript_digest(&bytes));
    let (text, decoded) = formats::decode(&name, bytes, bad)?;
    let format = match format(global.format) {
        Some(f) => f,
        None => formats::detect(&name, &text)?,
    };
    // What the read cache needs of the text is taken before the read, which
    // drops the text as soon as its lines are parsed.
    let mark = digest
        .filter(|_| decoded.is_empty() && text.ends_with('\n') && formats::resumable(format, &text))
        .map(|d| (text.len() as u64, formats::newlines(&text) as u64, d));
    let spinner = reading_spinner(global, &name, text.len());
    let leaf = global.leaf.as_deref();
    let transcript = formats::read_owned_at_leaf(&name, text, format, bad, keep_records, leaf);
    spinner.finish_and_clear();
    hand_back_freed_memory();
    let mut transcript = transcript?;
    transcript.warnings.extend(decoded);
    let read = HowRead {
        mark,
        ..HowRead::default()
    };
    locate(global, path, &name, transcript, read)
}

/// How many bytes of a transcript of `size` bytes read in pieces are read
/// at a time: a sixteenth of it, from 1 to 4 MB. A piece is read while the
/// one before is parsed, and held until it is, so a few large pieces would
/// keep much of a short log in flight; a long log read in small pieces
/// pays for many more reads and hand-overs between threads.
fn piece_size(size: usize) -> usize {
    (size / 16).clamp(1 << 20, 4 << 20)
}

/// Reads a JSONL chat, Anthropic or Claude Code log a piece at a time (see
/// [`formats::read_in_pieces`]), its bytes digested as they pass when
/// `mark` asks for a read cache: the file's text and the messages built
/// from it are never all held at once. `None` when the log must be read
/// whole: stdin, a Codex rollout or a document, a
/// file that cannot be opened, a NUL byte or bytes that are not UTF-8 (the
/// whole read reports each of these with its place, or reads past them as
/// `--skip-bad-lines` asks).
fn load_in_pieces(
    global: &Global,
    path: &Path,
    mark: bool,
    aside: Option<&Path>,
) -> Result<Option<Loaded>, CliError> {
    if path.as_os_str() == "-" || path.is_dir() {
        return Ok(None);
    }
    let Ok(file) = fs::File::open(path) else {
        return Ok(None);
    };
    let name = path.display().to_string();
    let size = file.metadata().map_or(0, |m| m.len() as usize);
    let apart = Arc::new(Mutex::new(SetApart::default()));
    let aside = aside.filter(|_| size >= set_aside_from());
    // The state dir the set-aside file is made in, when the read makes it:
    // a read that fails leaves it as it found it.
    let made = aside.filter(|dir| !dir.exists());
    // Words set aside that lie in the transcript are read back from it.
    let transcript = aside.and_then(|_| file.try_clone().ok());
    let opened = Opened { file, size, mark };
    let read = read_set_aside(global, path, name, opened, (aside, apart));
    let read = read.map(|loaded| {
        loaded.map(|mut loaded| {
            if let (Some(words), Some(file)) = (&mut loaded.read.words, transcript) {
                words.reading_transcript(loaded.path.display().to_string(), file);
            }
            loaded
        })
    });
    if let Some(dir) = made
        && !matches!(read, Ok(Some(_)))
    {
        let _ = fs::remove_dir(dir);
    }
    read
}

/// [`load_in_pieces`] of the opened `file`, setting its long outputs aside
/// in `aside` when it names a directory.
fn read_set_aside(
    global: &Global,
    path: &Path,
    name: String,
    opened: Opened,
    (aside, apart): (Option<&Path>, Arc<Mutex<SetApart>>),
) -> Result<Option<Loaded>, CliError> {
    // A Claude Code log's messages are built by `finish`, once every piece
    // is in: the spinner stays until then.
    let spinner = reading_spinner(global, &name, opened.size);
    let setting = aside.map(|dir| (dir, Arc::clone(&apart)));
    let read = read_pieces(global, opened, &name, setting)
        .map(|pieces| pieces.map(|p| (p.reader.finish(&hand_back_freed_memory), p.mark)));
    spinner.finish_and_clear();
    let read = read.map_err(|e| match e {
        PieceError::Read(e) => CliError::Read(e),
        PieceError::Io(source) => CliError::Io {
            path: path.to_path_buf(),
            error: source,
        },
    })?;
    let Some((transcript, mark)) = read else {
        return Ok(None);
    };
    hand_back_freed_memory();
    let mut transcript = transcript?;
    let mut apart = std::mem::take(&mut *apart.lock().unwrap_or_else(PoisonError::into_inner));
    // A log whose words could not be set aside as it was built has them
    // set aside now.
    if let Some(dir) = aside
        && apart.words.is_none()
        && matches!(transcript.format, Format::ClaudeCode | Format::Codex)
    {
        apart = set_aside_read(&mut transcript.messages, dir).unwrap_or_default();
    }
    let read = HowRead {
        mark,
        withheld: apart.at,
        words: apart.words,
        ..HowRead::default()
    };
    locate(global, path, &name, transcript, read).map(Some)
}

enum PieceError {
    Read(ReadError),
    Io(io::Error),
}

/// A file read in pieces.
struct Pieces {
    reader: formats::PieceReader,
    /// As [`HowRead::mark`].
    mark: Option<(u64, u64, u64)>,
}

/// A transcript opened for a read in pieces.
struct Opened {
    file: fs::File,
    /// Its size in bytes.
    size: usize,
    /// Whether the read leaves a mark for a read cache (its digest).
    mark: bool,
}

/// The pieces of the `opened` file read into a [`formats::PieceReader`],
/// its bytes digested if it asks for a read cache; `None` when it must be
/// read whole.
fn read_pieces(
    global: &Global,
    opened: Opened,
    name: &str,
    mut aside: Option<(&Path, Arc<Mutex<SetApart>>)>,
) -> Result<Option<Pieces>, PieceError> {
    let Opened {
        mut file,
        size,
        mark,
    } = opened;
    // A conversation `--leaf` chose is not the one a turn without it reads
    // on from: it leaves no read cache.
    let mark = mark && global.leaf.is_none();
    let mut reader = None;
    let mut failed = None;
    let mut buf = Vec::new();
    let (mut digest, mut length, mut last) = (TranscriptDigest::default(), 0, None);
    let piece_size = piece_size(size);
    loop {
        // Room for the next piece and no more: a Claude Code log's pieces
        // are held as read.
        let left = size.saturating_sub(length as usize);
        buf.reserve_exact(piece_size.min(left) + 1);
        prefault(&mut buf);
        let read = (&mut file)
            .take(piece_size as u64)
            .read_to_end(&mut buf)
            .map_err(PieceError::Io)?;
        let whole = read < piece_size;
        // A piece ends where a line does; a line longer than what is held
        // is read on until it ends.
        let end = match memchr::memrchr(b'\n', &buf) {
            _ if whole => buf.len(),
            Some(at) => at + 1,
            None => continue,
        };
        let rest = buf.split_off(end);
        let piece = std::mem::replace(&mut buf, rest);
        if memchr::memchr(0, &piece).is_some() {
            return Ok(None);
        }
        if mark {
            digest.update(&piece);
        }
        length += end as u64;
        last = piece.last().copied().or(last);
        let Ok(mut text) = String::from_utf8(piece) else {
            return Ok(None);
        };
        // A lone surrogate is read whole, which warns of it and leaves no
        // read cache of text that is not the file's; a byte-order mark is
        // only blanked.
        if formats::repaired(name, &mut text).is_some() {
            return Ok(None);
        }
        let r = match &mut reader {
            Some(r) => r,
            None => {
                let bad = bad_lines(global);
                match formats::read_in_pieces(format(global.format), name, &text, whole, bad) {
                    Some(mut r) => {
                        if let Some(leaf) = &global.leaf {
                            r.choose_leaf(leaf);
                        }
                        let setter = (aside.take())
                            .filter(|_| r.may_set_aside())
                            .and_then(|(dir, a)| Setter::new(dir, a));
                        if let Some(setter) = setter {
                            r.set_aside(Box::new(setter));
                        }
                        reader.insert(r)
                    }
                    None => return Ok(None),
                }
            }
        };
        // After a bad line the rest is only looked through for a NUL byte
        // or bytes that are not UTF-8: a whole read reports those first.
        if failed.is_none()
            && let Err(e) = r.read(text)
        {
            failed = Some(e);
        }
        if whole {
            break;
        }
    }
    if let Some(e) = failed {
        return Err(PieceError::Read(e));
    }
    let Some(reader) = reader else {
        return Ok(None);
    };
    // A cache is left only of whole lines, as a whole read leaves one.
    let mark =
        (mark && last == Some(b'\n')).then(|| (length, reader.lines() as u64, digest.finish()));
    Ok(Some(Pieces { reader, mark }))
}

/// Has the kernel back the spare room of `buf` with pages in one call,
/// where `read` filling it would take a page fault at each of its 4 KB
/// pages (a thousand a piece, and faults are dear on a virtual machine).
/// It costs no memory, since every page is filled anyway.
fn prefault(buf: &mut Vec<u8>) {
    #[cfg(target_os = "linux")]
    {
        const PAGE: usize = 4096;
        let spare = buf.spare_capacity_mut();
        let start = (spare.as_ptr() as usize).next_multiple_of(PAGE);
        let end = (spare.as_ptr() as usize + spare.len()) & !(PAGE - 1);
        if end > start {
            // SAFETY: the range lies within `buf`'s own allocation, and the
            // advice only brings its pages in (zeroed where none was
            // there): no byte anyone reads changes. A kernel without it
            // (before 5.14) refuses, which leaves the faults as they were.
            unsafe {
                libc::madvise(
                    start as *mut libc::c_void,
                    end - start,
                    libc::MADV_POPULATE_WRITE,
                );
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = buf;
}

/// Reads on from the session's read cache: `None` (read it whole) when
/// there is no usable cache or no state beside it. The session is found
/// from the log's first lines, and checked against the one the whole log
/// names once read. The prefix is only streamed through its digest, which
/// is left running ([`HowRead::check`]); what is kept in memory is what was
/// appended.
fn load_warm(
    global: &Global,
    path: &Path,
    access: Option<Access>,
) -> Result<Option<Loaded>, CliError> {
    // Whatever goes wrong reading here, the whole read says it properly.
    let name = path.display().to_string();
    let Ok(mut file) = fs::File::open(path).and_then(|f| {
        f.metadata()?
            .is_file()
            .then_some(f)
            .ok_or(io::ErrorKind::InvalidInput.into())
    }) else {
        return Ok(None);
    };
    let mut head = Vec::with_capacity(HEAD);
    if (&mut file)
        .take(HEAD as u64)
        .read_to_end(&mut head)
        .is_err()
    {
        return Ok(None);
    }
    let head = &head[..head.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1)];
    let head = head.strip_prefix("\u{FEFF}".as_bytes()).unwrap_or(head);
    let Some((_, named, parent)) = std::str::from_utf8(head)
        .ok()
        .and_then(|head| formats::peek_session(&name, head, format(global.format)))
    else {
        return Ok(None);
    };
    let Some(session_id) = global
        .session
        .clone()
        .or(named)
        .or_else(|| path.file_stem().map(|s| s.to_string_lossy().into_owned()))
    else {
        return Ok(None);
    };
    let (session, _) = session_dir(global, path, &session_id, parent.as_deref());
    if !session.state_path().exists() {
        return Ok(None);
    }
    std::thread::scope(|s| {
        let taking = access.map(|a| {
            let session = session.clone();
            s.spawn(move || early(session, a))
        });
        let Some(cache) = session
            .load_read_cache()
            .filter(|c| format(global.format).is_none_or(|f| f == c.format))
        else {
            return Ok(None);
        };
        // What was appended is read before the prefix is digested, with the
        // same handle: the bytes parsed are the bytes digested.
        let mut tail = Vec::new();
        if file.seek(io::SeekFrom::Start(cache.length)).is_err()
            || file.read_to_end(&mut tail).is_err()
            || !tail.is_empty() && !tail.ends_with(b"\n")
        {
            return Ok(None);
        }
        let lines = cache.lines + formats::newlines(&tail) as u64;
        let prefix = (cache.length, cache.digest);
        // Words the cache left in the transcript are read from the very
        // file whose prefix is digested.
        let Ok(transcript) = file.try_clone() else {
            return Ok(None);
        };
        let check = PrefixCheck::start(file, prefix, tail.clone(), lines);
        let mut loaded = match read_on(global, path, &name, &session, cache, tail) {
            Ok(Some(loaded)) => loaded,
            Ok(None) => return Ok(None),
            // A prefix that changed may leave the bytes after it torn.
            Err(e) => return check.finish().map_or(Ok(None), |_| Err(e)),
        };
        if let Some(words) = &mut loaded.read.words {
            words.reading_transcript(name.clone(), transcript);
        }
        loaded.read.check = Some(check);
        // The same directory (read_on checks it), and the handle that
        // loaded its state remembers the logs the save appends to.
        let taken = taking.map(|t| t.join().unwrap_or_else(|e| std::panic::resume_unwind(e)));
        if let Some((session, early)) = taken {
            loaded.session = session;
            loaded.early = Some(early);
        }
        Ok(Some(loaded))
    })
}

/// The transcript read on from `cache` past its prefix, with `tail` the
/// whole lines after it. The bytes read are marked once the prefix is
/// confirmed ([`HowRead::confirm`]).
fn read_on(
    global: &Global,
    path: &Path,
    name: &str,
    session: &SessionDir,
    cache: ReadCache<WarmMessages>,
    tail: Vec<u8>,
) -> Result<Option<Loaded>, CliError> {
    let bad = bad_lines(global);
    let (tail, decoded) = formats::decode(name, tail, bad)?;
    if !decoded.is_empty() {
        return Ok(None);
    }
    let (first_line, at) = (cache.lines as usize + 1, cache.length);
    let end = cache.end.clone();
    let warm = cache.into_transcript();
    let appended = formats::Appended {
        text: &tail,
        at,
        first_line,
    };
    let Some(read_on) = formats::read_after(name, appended, warm.transcript, &warm.history, bad)
    else {
        return Ok(None);
    };
    let read_on = read_on?;
    // What the cache holds stands as written unless the new lines changed
    // one of its messages.
    let appendable = (!read_on.prefix_changed).then_some(end);
    let cuts = if read_on.prefix_changed {
        Vec::new()
    } else {
        warm.cuts
    };
    let read = HowRead {
        prefix: warm.history,
        elided: warm.elided,
        raws: warm.raws,
        warm: true,
        appendable,
        cuts,
        withheld: warm.withheld,
        words: warm.words,
        ..HowRead::default()
    };
    let loaded = locate(global, path, name, read_on.transcript, read)?;
    Ok((loaded.session.dir == session.dir).then_some(loaded))
}

/// How much of a log's start is looked at to find its session before
/// reading on from a cache.
const HEAD: usize = 256 << 10;

fn bad_lines(global: &Global) -> BadLines {
    if global.skip_bad_lines {
        BadLines::Skip
    } else {
        BadLines::Fail
    }
}

/// The transcript with the session it belongs to: its directory, the state
/// dir all sessions live under, and the ancestors to inherit from.
fn locate(
    global: &Global,
    path: &Path,
    name: &str,
    transcript: Transcript,
    read: HowRead,
) -> Result<Loaded, CliError> {
    // Records that are all skipped are a transcript read as the wrong
    // format, not an empty conversation. (Read on from the cache, the
    // transcript holds only what was appended.)
    if !read.warm && transcript.messages.is_empty() && !transcript.warnings.is_empty() {
        let how = match global.format {
            FormatArg::Auto => "if it is in another format, name that with --format",
            _ => "leave --format out to detect its format, or name the one it is in",
        };
        return Err(CliError::Usage(format!(
            "{name}: none of its records is a {} message ({} warning(s) as it was read); {how}",
            transcript.format.name(),
            transcript.warnings.len()
        )));
    }
    if global.leaf.is_some() && transcript.format != Format::ClaudeCode {
        return Err(CliError::Usage(format!(
            "{name}: --leaf names the last record of a Claude Code conversation; a {} transcript \
             holds one conversation, read whole",
            transcript.format.name()
        )));
    }
    let session_id = global
        .session
        .clone()
        .or_else(|| transcript.session_id.clone())
        .or_else(|| path.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .ok_or_else(|| {
            CliError::Usage(format!(
                "{name}: cannot derive a session id; pass --session"
            ))
        })?;
    if session_id.is_empty()
        || session_id.contains(['/', '\\'])
        || session_id == "."
        || session_id == ".."
    {
        return Err(CliError::Usage(format!(
            "{session_id:?} cannot be a session id: it must be a plain directory name"
        )));
    }
    let (session, base) = session_dir(
        global,
        path,
        &session_id,
        transcript.parent_session.as_deref(),
    );
    let mut parents = global.parent.clone();
    parents.extend(
        transcript
            .parent_session
            .iter()
            .filter(|p| **p != session_id)
            .cloned(),
    );
    Ok(Loaded {
        path: path.to_path_buf(),
        transcript,
        session,
        base,
        parents,
        read,
        early: None,
    })
}

/// The directory the sessions of the transcript at `path` are kept in.
fn state_base(global: &Global, path: &Path) -> PathBuf {
    match &global.state_dir {
        Some(d) => d.clone(),
        None => path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default()
            .join(".noa"),
    }
}

/// A session's directory and the state dir above it. A subagent's state and
/// archives live under the session that spawned it.
fn session_dir(
    global: &Global,
    path: &Path,
    session_id: &str,
    parent: Option<&str>,
) -> (SessionDir, PathBuf) {
    let base = state_base(global, path);
    let session = match (&global.session, parent) {
        (None, Some(parent)) if parent != session_id => {
            SessionDir::subagent(&base, parent, session_id)
        }
        _ => SessionDir::new(&base, session_id),
    };
    (session, base)
}

/// A transcript file's bytes. What a user can get wrong — a path that does
/// not exist, a directory, a file they may not read — is bad input (exit 2),
/// not an I/O failure.
fn read_file(path: &Path) -> Result<Vec<u8>, CliError> {
    let name = path.display().to_string();
    let not = |why: &str, help: &str| {
        CliError::Read(ReadError::NotATranscript {
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
        _ => CliError::Io {
            path: path.to_path_buf(),
            error: source,
        },
    })
}

/// Refuses a state that names none of this transcript's messages and another
/// session: it belongs to a different log, and using it would hand out
/// wrong refs.
pub fn check_belongs(loaded: &Loaded, state: &CompressionState) -> Result<(), CliError> {
    let t = &loaded.transcript;
    if state.message_refs.is_empty() || t.messages.is_empty() {
        return Ok(());
    }
    let known = t
        .messages
        .iter()
        .flat_map(|m| &m.blocks)
        .any(|b| state.message_refs.usable(&b.id).is_some());
    // After a host compaction a log can share no message with its state,
    // but it still names its own session.
    let same_session = t.session_id.as_deref() == Some(state.session_id.as_str());
    if known || same_session {
        return Ok(());
    }
    Err(CliError::Usage(format!(
        "{}: this state belongs to a different transcript: none of its {} refs name a message of this one. Pass the right --session, or run `noa rebuild` for this transcript into its own state dir",
        session_path(loaded),
        state.message_refs.refs()
    )))
}

fn session_path(loaded: &Loaded) -> String {
    loaded.session.state_path().display().to_string()
}

/// A spinner on stderr while a large transcript is read (TTY only, not with -q).
fn reading_spinner(global: &Global, name: &str, bytes: usize) -> indicatif::ProgressBar {
    const LARGE: usize = 32 << 20;
    if global.quiet || bytes < LARGE || !io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new_spinner();
    bar.set_message(format!("reading {name} ({} MB)", bytes >> 20));
    bar.enable_steady_tick(std::time::Duration::from_millis(120));
    bar
}

fn format(arg: FormatArg) -> Option<Format> {
    match arg {
        FormatArg::Auto => None,
        FormatArg::Chat => Some(Format::Chat),
        FormatArg::Anthropic => Some(Format::Anthropic),
        FormatArg::ClaudeCode => Some(Format::ClaudeCode),
        FormatArg::Codex => Some(Format::Codex),
    }
}

/// Prints warnings on stderr: every one with `-v`, a count otherwise.
pub fn warn(global: &Global, warnings: &[String]) {
    if global.quiet || warnings.is_empty() {
        return;
    }
    let mut err = io::stderr().lock();
    if global.verbose || warnings.len() <= 3 {
        for w in warnings {
            let _ = writeln!(err, "warning: {w}");
        }
    } else {
        let _ = writeln!(err, "warning: {}", warnings[0]);
        let _ = writeln!(
            err,
            "warning: … and {} more (-v lists them)",
            warnings.len() - 1
        );
    }
}

/// Writes bytes to the output the user named (atomically when it is a
/// regular file, straight through when it is a device or FIFO: see
/// [`crate::store::write_output`]), or to stdout.
/// Refuses an `-o` path whose folder does not exist, before anything is
/// read or written: found only at the end, it would fail after the state
/// was saved.
pub fn check_output(output: Option<&PathBuf>) -> Result<(), CliError> {
    let Some(path) = output else {
        return Ok(());
    };
    let folder = path.parent().filter(|p| !p.as_os_str().is_empty());
    match folder {
        Some(f) if !f.is_dir() => Err(CliError::Usage(format!(
            "-o {}: the folder {} does not exist; make it first, or name a file in a folder that does",
            path.display(),
            f.display()
        ))),
        _ => Ok(()),
    }
}

pub fn emit(output: Option<&PathBuf>, bytes: &[u8]) -> Result<(), CliError> {
    match output {
        Some(p) => crate::store::write_output(p, bytes).map_err(|source| CliError::Io {
            path: p.clone(),
            error: source,
        }),
        None => {
            let mut out = io::stdout().lock();
            out.write_all(bytes)
                .and_then(|_| out.flush())
                .map_err(|source| CliError::Io {
                    path: "<stdout>".into(),
                    error: source,
                })
        }
    }
}
