//! Reading a transcript on from the read cache the last turn left: only
//! what was appended is parsed, and the prefix the cache read is proved
//! unchanged by its digest, taken meanwhile.

use std::fs;
use std::io::{self, Read, Seek};
use std::sync::Arc;
use std::sync::mpsc::{self, SyncSender};
use std::thread::JoinHandle;

use super::{Access, HowRead, Loaded, LockAndState, Reader};
use crate::formats::{self, TextFrom};
use crate::store::{
    CacheHead, PrefixDigest, ReadCache, SessionDir, SessionLock, StoreError, WarmMessages,
};

/// How much of a log's start is looked at to find its session before
/// reading on from a cache.
const HEAD: usize = 256 << 10;

/// Takes what [`LockAndState`] holds for `session`.
fn lock_and_state(session: SessionDir, access: Access) -> (SessionDir, LockAndState) {
    let lock = (access == Access::Write).then(|| SessionLock::acquire(&session.dir));
    let state = match &lock {
        Some(Err(_)) => None,
        _ => Some(session.load()),
    };
    (session, LockAndState { lock, state })
}

/// The digest of a transcript's prefix read on from the read cache: it
/// only says whether what was decoded may be used, and nothing the turn
/// does before it is asked for is written or shown. It is started as soon
/// as the cache's trailer says what it must be, and taken by the thread that
/// loaded the state once that is done: for a long compressed session the
/// state is loaded sooner than the cache is decoded, and the digest then
/// runs beside the rest of the decoding and the projection, where a thread
/// of its own would take a core from both. The turn's own thread takes its
/// share of the pieces left once it asks ([`PrefixDigest`]).
#[derive(Debug)]
pub(in crate::store) struct PrefixCheck {
    /// The prefix's digest, its pieces taken by whichever thread is free.
    digest: Arc<PrefixDigest>,
    /// The thread that helps take it, once it has loaded the state.
    helper: Option<JoinHandle<()>>,
    /// The digest the prefix must have.
    expected: u64,
    /// The bytes read after the prefix, whose digest goes on from it.
    tail: Vec<u8>,
    /// Length and lines of the whole transcript read.
    length: u64,
    lines: u64,
}

/// The prefix a read cache read: its length and the digest it must have.
struct Prefix {
    length: u64,
    digest: u64,
}

impl PrefixCheck {
    /// The digest of the first `prefix.length` bytes of `file`, then of
    /// `tail`, the bytes read after them, handed to `helper` to take.
    fn start(
        file: fs::File,
        prefix: Prefix,
        tail: Vec<u8>,
        lines: u64,
        helper: SyncSender<Arc<PrefixDigest>>,
    ) -> Self {
        let digest = Arc::new(PrefixDigest::new(file, prefix.length));
        // A helper gone leaves the pieces to this thread.
        let _ = helper.try_send(Arc::clone(&digest));
        PrefixCheck {
            digest,
            helper: None,
            expected: prefix.digest,
            length: prefix.length + tail.len() as u64,
            tail,
            lines,
        }
    }

    /// The mark of the transcript read, as [`HowRead::mark`]; `None` when
    /// the prefix is not the one the cache read. This thread takes the
    /// pieces left meanwhile.
    pub(super) fn finish(mut self) -> Option<(u64, u64, u64)> {
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

impl Reader<'_> {
    /// Reads on from the session's read cache: `None` (read it whole) when
    /// there is no usable cache or no state beside it. The session is found
    /// from the log's first lines, and checked against the one the whole
    /// log names once read. The prefix is only streamed through its digest,
    /// which is left running ([`HowRead::check`]); what is kept in memory is
    /// what was appended.
    pub(super) fn load_warm(&self, access: Access) -> Result<Option<Loaded>, StoreError> {
        // Whatever goes wrong reading here, the whole read says it properly.
        let Ok(mut file) = fs::File::open(self.path).and_then(|f| {
            f.metadata()?
                .is_file()
                .then_some(f)
                .ok_or(io::ErrorKind::InvalidInput.into())
        }) else {
            return Ok(None);
        };
        let Some(session) = self.peek_session(&mut file) else {
            return Ok(None);
        };
        if !session.state_path().exists() {
            return Ok(None);
        }
        self.hooks.reading_on();
        // The state is loaded on a thread of its own while the cache is
        // decoded, which then helps take the prefix's digest.
        let (send_state, state) = mpsc::sync_channel(1);
        let (send_digest, digest) = mpsc::sync_channel::<Arc<PrefixDigest>>(1);
        let loading = {
            let session = session.clone();
            std::thread::spawn(move || {
                // A receiver gone is a read that no longer waits.
                if send_state.send(lock_and_state(session, access)).is_ok()
                    && let Ok(digest) = digest.recv()
                {
                    digest.help();
                }
            })
        };
        let read = self.read_on_from_cache(file, &session, send_digest);
        // Taken whatever came of reading on: the lock it holds is the
        // command's to keep or let go.
        let Ok(taken) = state.recv() else {
            // It sends unless it panicked, a bug, which goes on as this
            // thread's would.
            let panic = loading
                .join()
                .expect_err("the state was sent or the thread panicked");
            std::panic::resume_unwind(panic)
        };
        let Some(mut loaded) = read? else {
            return Ok(None);
        };
        // The same directory (`read_on` checks it), and the handle that
        // loaded its state remembers the logs the save appends to.
        (loaded.session, loaded.ahead) = (taken.0, Some(taken.1));
        if let Some(check) = &mut loaded.read.check {
            check.helper = Some(loading);
        }
        Ok(Some(loaded))
    }

    /// The session the first lines of the log at `file` name, as the whole
    /// log would be located; `None` when they do not say.
    fn peek_session(&self, file: &mut fs::File) -> Option<SessionDir> {
        let name = self.path.display().to_string();
        let mut head = Vec::with_capacity(HEAD);
        file.take(HEAD as u64).read_to_end(&mut head).ok()?;
        let head = &head[..head.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1)];
        let head = head.strip_prefix("\u{FEFF}".as_bytes()).unwrap_or(head);
        let head = std::str::from_utf8(head).ok()?;
        let (_, named, parent) = formats::peek_session(&name, head, self.options.format)?;
        let session_id = (self.options.session.clone())
            .or(named)
            .or_else(|| self.file_stem())?;
        Some(self.session_dir(&session_id, parent.as_deref()).0)
    }

    /// The transcript at `file` read on from `session`'s read cache, the
    /// digest of its prefix started and handed to `helper`; `None` when the
    /// cache does not serve.
    fn read_on_from_cache(
        &self,
        mut file: fs::File,
        session: &SessionDir,
        helper: SyncSender<Arc<PrefixDigest>>,
    ) -> Result<Option<Loaded>, StoreError> {
        let name = self.path.display().to_string();
        // Words the cache left in the transcript are read from the very
        // file whose prefix is digested.
        let Ok(transcript) = file.try_clone() else {
            return Ok(None);
        };
        let mut started = None;
        let cache = session.load_read_cache(|head| {
            self.options
                .format
                .is_none_or(|f| f == head.format)
                .then_some(())?;
            let (tail, held, lines) = Self::read_tail(&name, &mut file, head)?;
            let prefix = Prefix {
                length: head.length,
                digest: head.digest,
            };
            let check = PrefixCheck::start(file, prefix, tail.clone(), lines, helper);
            started = Some((check, tail, held));
            Some(())
        });
        let (Some(cache), Some((check, tail, held))) = (cache, started) else {
            return Ok(None);
        };
        let mut loaded = match self.read_on(&name, session, cache, tail) {
            Ok(Some(loaded)) => loaded,
            Ok(None) => return Ok(None),
            // A prefix that changed may leave the bytes after it torn.
            Err(e) => return check.finish().map_or(Ok(None), |_| Err(e)),
        };
        if let Some(words) = &mut loaded.read.words {
            words.reading_transcript(name, transcript);
        }
        loaded.held = held;
        loaded.read.check = Some(check);
        Ok(Some(loaded))
    }

    /// The whole lines of the transcript at `file` after the prefix `head`
    /// names, read with the handle the prefix is digested through, so the
    /// bytes parsed are the bytes digested; with the warning for a line
    /// still being written, left for the next turn, and the lines of the
    /// transcript then read. `None` when they cannot be read on from: a
    /// line whole but for its newline leaves no cache, so is read whole.
    fn read_tail(
        name: &str,
        file: &mut fs::File,
        head: &CacheHead,
    ) -> Option<(Vec<u8>, Option<String>, u64)> {
        let mut tail = Vec::new();
        file.seek(io::SeekFrom::Start(head.length)).ok()?;
        file.read_to_end(&mut tail).ok()?;
        let first_line = head.lines as usize + 1;
        let held = formats::hold_back_unfinished(name, &mut tail, TextFrom::MidLog, first_line);
        if !tail.is_empty() && !tail.ends_with(b"\n") {
            return None;
        }
        let lines = head.lines + formats::newlines(&tail) as u64;
        Some((tail, held, lines))
    }

    /// The transcript read on from `cache` past its prefix, with `tail` the
    /// whole lines after it. The bytes read are marked once the prefix is
    /// confirmed ([`HowRead::confirm`]).
    fn read_on(
        &self,
        name: &str,
        session: &SessionDir,
        cache: ReadCache<WarmMessages>,
        tail: Vec<u8>,
    ) -> Result<Option<Loaded>, StoreError> {
        let bad = self.options.bad_lines;
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
        let Some(read_on) =
            formats::read_after(name, appended, warm.transcript, &warm.history, bad)
        else {
            return Ok(None);
        };
        let read_on = read_on?;
        // What the cache holds stands as written unless the new lines
        // changed one of its messages.
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
        let loaded = self.locate(name, read_on.transcript, read)?;
        Ok((loaded.session.dir == session.dir).then_some(loaded))
    }
}
