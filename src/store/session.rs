//! One session opened for a command: its transcript read, its directory
//! found and locked when the command writes, its state loaded, and what
//! the read cache and the words set aside hold for it.

use std::cell::Cell;
use std::collections::HashSet;
use std::path::Path;

use super::read::{
    Access, HowRead, Loaded, LockAndState, ReadHooks, Reader, SessionOptions, SetAside,
};
use super::{SessionDir, SessionLock, StoreError};
use crate::engine::{
    COMPRESS_TOOL, CompressionState, ContentType, CoreMessage, IdMap, KeptCut, lineage,
};
use crate::formats::Transcript;

/// How a command reads its transcript, which sets what it can leave for
/// the next turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// A look at the session that leaves no read cache: read whole (in
    /// pieces where the format allows), the records let go.
    Look,
    /// Read whole with the transcript's records kept, to write them back.
    Records,
    /// A turn's projection: read on from the read cache when it serves,
    /// its prefix confirmed once the turn has projected
    /// ([`Session::confirm_prefix`]); read whole, a long transcript's long
    /// outputs are set aside when the turn writes. Read on from the cache,
    /// the lock is taken while the cache is decoded when the turn writes.
    Turn(Access),
    /// A Compress call's answer: read on from the read cache when it
    /// serves, its prefix confirmed before the session opens. The lock is
    /// taken while the cache is decoded; the command says it writes
    /// ([`Session::lock`]) once it has found its call.
    Call,
}

/// One command's session: the transcript as the engine reads it, the
/// session's directory and lock, its state, and what the read cache and
/// the words set aside hold. A command opens one, hands its history and
/// state to the engine, and saves what the engine gave back through it.
pub struct Session {
    /// The transcript and where its session lives.
    loaded: Loaded,
    /// The transcript as the engine reads it.
    history: Vec<CoreMessage>,
    access: Access,
    lock: Option<SessionLock>,
    /// The state loaded while the transcript was read (see
    /// [`LockAndState`]), for [`Session::saved_state`] to take once.
    early_state: Cell<Option<Result<Option<CompressionState>, StoreError>>>,
    /// What the session was opened with, to read the transcript again.
    options: SessionOptions,
    hooks: Box<dyn ReadHooks>,
}

impl Session {
    /// Reads the transcript at `path` (`-` for stdin) for `purpose` and
    /// finds its session. The session's files are left as they are (a
    /// turn that writes may set long outputs aside in the state dir as it
    /// reads), and no lock is held but the one a read on from the cache
    /// took for [`Purpose::Turn`] or [`Purpose::Call`]: a command says it
    /// writes with [`Session::lock`].
    pub fn open(
        path: &Path,
        options: SessionOptions,
        purpose: Purpose,
        hooks: Box<dyn ReadHooks>,
    ) -> Result<Session, StoreError> {
        let reader = Reader {
            path,
            options: &options,
            hooks: &*hooks,
        };
        let mut loaded = match purpose {
            Purpose::Look => reader.load(),
            Purpose::Records => reader.load_with_records(),
            Purpose::Turn(access) => reader.load_unconfirmed(access, SetAside::WhenWriting),
            Purpose::Call => reader.load_for_turn(Access::Write),
        }?;
        let history = history_of(&mut loaded);
        let ahead = loaded.ahead.take();
        let mut session = Session {
            loaded,
            history,
            access: Access::Read,
            lock: None,
            early_state: Cell::new(None),
            options,
            hooks,
        };
        if let Some(LockAndState { lock, state }) = ahead {
            // Held from here on, by a command that says it writes once it
            // has checked its input; one that could not be taken is tried
            // again then.
            session.lock = lock.and_then(Result::ok);
            // Loaded under the lock, or, for a reading command, as it
            // would have loaded it.
            session.early_state.set(state);
        }
        Ok(session)
    }

    /// Turns a reading command into a writing one: makes the session
    /// directory and takes its lock (a command that checks its input first
    /// touches nothing until it is sure).
    pub fn lock(&mut self) -> Result<(), StoreError> {
        if self.lock.is_none() {
            self.loaded.session.create()?;
            self.lock = Some(SessionLock::acquire(&self.loaded.session.dir)?);
        }
        self.access = Access::Write;
        Ok(())
    }

    /// Whether the command writes the session (it took the lock).
    pub fn writes(&self) -> bool {
        self.access == Access::Write
    }

    /// The path the transcript was named by (`-` for stdin).
    pub fn path(&self) -> &Path {
        &self.loaded.path
    }

    /// The transcript.
    pub fn transcript(&self) -> &Transcript {
        &self.loaded.transcript
    }

    /// What the read warns of: what the transcript's reader skipped or
    /// repaired, and an unfinished last line left for the next read.
    pub fn warnings(&self) -> Vec<String> {
        let loaded = &self.loaded;
        (loaded.transcript.warnings.iter())
            .chain(&loaded.held)
            .cloned()
            .collect()
    }

    /// The transcript's flat history, as the engine reads it.
    pub fn history(&self) -> &[CoreMessage] {
        &self.history
    }

    /// The session's directory.
    pub fn dir(&self) -> &SessionDir {
        &self.loaded.session
    }

    /// The session directory as an absolute path, for archive pointers the
    /// model can open from anywhere.
    pub fn root(&self) -> String {
        let dir = &self.dir().dir;
        std::fs::canonicalize(dir)
            .unwrap_or_else(|_| dir.clone())
            .to_string_lossy()
            .into_owned()
    }

    /// Whether the transcript's prefix is the one the read cache read,
    /// waiting for its digest if it is still being taken; true for a
    /// transcript read whole.
    pub fn confirm_prefix(&mut self) -> bool {
        self.loaded.read.confirm()
    }

    /// Whether the transcript was read on from the session's read cache.
    pub fn warm(&self) -> bool {
        self.loaded.read.warm
    }

    /// Whether the transcript was read whole with its long outputs set
    /// aside (see [`super::set_aside`]): they are filled in as a warm
    /// turn's are.
    pub fn set_aside(&self) -> bool {
        !self.warm() && !self.loaded.read.withheld.is_empty()
    }

    /// How the transcript was read, as reports name it: `cache` (on from
    /// the read cache) or `whole`.
    pub fn read_how(&self) -> &'static str {
        if self.warm() { "cache" } else { "whole" }
    }

    /// Reads the transcript again, whole: for a view the read cache could
    /// not serve.
    pub fn read_whole(&mut self) -> Result<(), StoreError> {
        let reader = Reader {
            path: &self.loaded.path,
            options: &self.options,
            hooks: &*self.hooks,
        };
        let mut loaded = reader.load_whole()?;
        self.history = history_of(&mut loaded);
        // The session's handle remembers the logs its state was loaded
        // from, so the save appends to them as a cold turn's would.
        if loaded.session.dir == self.loaded.session.dir {
            loaded.session = self.loaded.session.clone();
        }
        self.loaded = loaded;
        Ok(())
    }

    /// Ends a command that is done with the transcript: the session lock
    /// is released now, and the history and the transcript are left for
    /// the process's exit to reclaim whole. Freeing a long session's
    /// messages one by one costs a tenth of a turn; the command line runs
    /// one command a process, so nothing is held longer than it would be.
    pub fn finish(self) {
        drop(self.lock);
        std::mem::forget((self.loaded, self.history));
    }

    /// The state saved for the session: `None` when it has none. One
    /// loaded while the transcript was read is taken rather than loaded
    /// again. A state that belongs to another transcript is refused.
    pub fn saved_state(&self) -> Result<Option<CompressionState>, StoreError> {
        let loaded = match self.early_state.take() {
            Some(early) => early?,
            None => self.dir().load()?,
        };
        if let Some(state) = &loaded {
            self.check_belongs(state)?;
        }
        Ok(loaded)
    }

    /// The state a turn whose transcript's prefix may not be confirmed yet
    /// ([`Purpose::Turn`]) can project on meanwhile: the one loaded while
    /// the cache was read, when it belongs to the transcript and knows all
    /// its calls, so nothing need be said of it. Otherwise `None`, once the
    /// prefix is confirmed (and the transcript read whole if it changed):
    /// whatever the transcript would make the command say of the state (an
    /// error, a warning, a state rebuilt) waits for the prefix.
    pub fn unconfirmed_state(&mut self) -> Result<Option<CompressionState>, StoreError> {
        if self.loaded.read.check.is_none() {
            return Ok(None);
        }
        match self.early_state.take() {
            Some(Ok(Some(s)))
                if self.check_belongs(&s).is_ok() && self.unknown_calls(&s).is_empty() =>
            {
                return Ok(Some(s));
            }
            early => self.early_state.set(early),
        }
        if !self.confirm_prefix() {
            self.read_whole()?;
        }
        Ok(None)
    }

    /// What a state starts from: a parent's ledger for a derived session,
    /// else nothing.
    pub fn base_state(&self) -> Result<CompressionState, StoreError> {
        let loaded = &self.loaded;
        for parent in loaded.parents.iter().take(lineage::MAX_DEPTH) {
            if let Some(p) = SessionDir::new(&loaded.base, parent)
                .load()?
                .filter(|p| !p.blocks.is_empty())
            {
                return Ok(lineage::derive_child(&p, &loaded.session.session));
            }
        }
        Ok(CompressionState::new(&loaded.session.session))
    }

    /// Refuses a state that names none of this transcript's messages and
    /// another session: it belongs to a different log, and using it would
    /// hand out wrong refs.
    fn check_belongs(&self, state: &CompressionState) -> Result<(), StoreError> {
        let t = &self.loaded.transcript;
        // A state that handed out no ref (its turns saw only messages
        // that get none, such as a system prompt) names nothing to check.
        if state.message_refs.refs() == 0 || t.messages.is_empty() {
            return Ok(());
        }
        let known = (t.messages.iter())
            .flat_map(|m| &m.blocks)
            .any(|b| state.message_refs.usable(&b.id).is_some());
        // After a host compaction a log can share no message with its
        // state, but it still names its own session.
        let same_session = t.session_id.as_deref() == Some(state.session_id.as_str());
        if known || same_session {
            return Ok(());
        }
        Err(StoreError::OtherTranscript {
            path: self.dir().state_path(),
            refs: state.message_refs.refs(),
        })
    }

    /// The ids of the Compress calls the transcript records as having made
    /// blocks that `state` knows nothing of: then the state is not the one
    /// this log built.
    pub fn unknown_calls(&self, state: &CompressionState) -> Vec<&str> {
        let made_blocks: HashSet<&str> = (state.blocks.iter())
            .map(|b| b.compress_call_id.as_str())
            .collect();
        let known = |id: &str| state.host.applied.contains_key(id) || made_blocks.contains(id);
        (self.history.iter())
            .filter(|m| {
                m.content_type == ContentType::ToolResult
                    && m.tool_name == COMPRESS_TOOL
                    && crate::engine::block_count(&m.text) > 0
                    && !known(&m.tool_call_id)
            })
            .map(|m| m.tool_call_id.as_str())
            .collect()
    }

    /// Keeps the host's compactions a whole read found in `state`, the last
    /// one with the ref of the message that carries its summary (the
    /// history's first). A read on from the cache saw none of the records
    /// before, so the state keeps what it knew.
    pub fn note_compactions(&self, state: &mut CompressionState) {
        if self.warm() {
            return;
        }
        let mut found = self.transcript().compactions.clone();
        if let (Some(last), Some(first)) = (found.last_mut(), self.history.first()) {
            last.summary_ref = state.message_refs.usable(&first.id).map(str::to_string);
        }
        state.host.compactions = found;
    }

    /// The cuts the last turn made, by message id, as the read cache kept
    /// them for the messages it holds (none after a whole read).
    pub fn kept_cuts(&self) -> IdMap<'_, KeptCut> {
        (self.loaded.read.cuts.iter())
            .map(|(id, cut)| (id.as_str(), *cut))
            .collect()
    }

    /// Every history message by id: what archives are rendered from as
    /// they are written.
    pub fn originals(&self) -> IdMap<'_, &CoreMessage> {
        let mut map = IdMap::with_capacity_and_hasher(self.history.len(), Default::default());
        map.extend(self.history.iter().map(|m| (m.id.as_str(), m)));
        map
    }

    /// How the transcript was read.
    pub(super) fn read(&self) -> &HowRead {
        &self.loaded.read
    }

    /// The transcript, to fill in, beside how it was read.
    pub(super) fn transcript_and_read(&mut self) -> (&mut Transcript, &HowRead) {
        (&mut self.loaded.transcript, &self.loaded.read)
    }

    /// The history, to fill in, beside how it was read.
    pub(super) fn history_and_read(&mut self) -> (&mut [CoreMessage], &mut HowRead) {
        (&mut self.history, &mut self.loaded.read)
    }

    /// What the program does at points of a read.
    pub(super) fn hooks(&self) -> &dyn ReadHooks {
        &*self.hooks
    }
}

/// The flat history of a loaded transcript: the cache's prefix (with the
/// words it kept) and the texts of what was read now.
fn history_of(loaded: &mut Loaded) -> Vec<CoreMessage> {
    let mut history = std::mem::take(&mut loaded.read.prefix);
    // The cached messages' cores are in the prefix; those read on have theirs.
    let read = loaded.transcript.take_cores();
    // A kept cut stands for the cached message it was made of: none is
    // taken back for an id a message read on also has.
    if !loaded.read.cuts.is_empty() && !read.is_empty() {
        let new: HashSet<&str> = read.iter().map(|m| m.id.as_str()).collect();
        (loaded.read.cuts).retain(|(id, _)| !new.contains(id.as_str()));
    }
    // A first turn has no prefix: the cores read are the history as they
    // stand, not copied into another list.
    if history.is_empty() {
        return read;
    }
    history.extend(read);
    history
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::ErrorKind;

    /// A folder of its own under the temp dir, named `name` and this
    /// process's id, holding `talk.jsonl`: a greeting and its answer.
    fn two_line_talk(name: &str) -> (std::path::PathBuf, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("talk.jsonl");
        let log = concat!(
            r#"{"role":"user","content":"hello"}"#,
            "\n",
            r#"{"role":"assistant","content":"hi"}"#,
            "\n"
        );
        std::fs::write(&path, log).unwrap();
        (dir, path)
    }

    /// A program without the command line opens a session with plain
    /// options and no hooks: the transcript read, its session found beside
    /// it, the lock taken and the state saved and found again.
    #[test]
    fn a_session_opens_without_the_command_line() {
        struct Silent;
        impl ReadHooks for Silent {}
        let (dir, path) = two_line_talk("noa-session");
        let open =
            |purpose| Session::open(&path, SessionOptions::default(), purpose, Box::new(Silent));

        let mut session = open(Purpose::Look).unwrap();
        assert_eq!(session.history().len(), 2);
        assert_eq!(session.read_how(), "whole");
        assert_eq!(session.dir().dir, dir.join(".noa").join("talk"));
        assert!(session.saved_state().unwrap().is_none());
        session.lock().unwrap();
        assert!(session.writes());
        let state = session.base_state().unwrap();
        session.dir().save(&state).unwrap();
        session.finish();

        let session = open(Purpose::Turn(Access::Read)).unwrap();
        assert!(session.saved_state().unwrap().is_some());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The program hears which read a turn makes: a read whole on the
    /// first ([`ReadHooks::reading`]), a read on from the read cache on the
    /// next ([`ReadHooks::reading_on`]). The command line maps a turn's
    /// large blocks on their own in the second only.
    #[test]
    fn the_hooks_hear_a_read_whole_then_a_read_on_from_the_cache() {
        use std::sync::{Arc, Mutex};

        use crate::store::{CacheWrite, Projected};
        struct Heard(Arc<Mutex<Vec<&'static str>>>);
        impl ReadHooks for Heard {
            fn reading(&self, _: &str, _: usize) -> Box<dyn FnOnce()> {
                self.0.lock().unwrap().push("whole");
                Box::new(|| {})
            }
            fn reading_on(&self) {
                self.0.lock().unwrap().push("on");
            }
        }
        let (dir, path) = two_line_talk("noa-hooks");
        let heard = Arc::new(Mutex::new(Vec::new()));
        let open = || {
            let hooks = Box::new(Heard(Arc::clone(&heard)));
            let purpose = Purpose::Turn(Access::Write);
            Session::open(&path, SessionOptions::default(), purpose, hooks).unwrap()
        };

        let mut session = open();
        assert_eq!(session.read_how(), "whole");
        session.lock().unwrap();
        session.dir().save(&session.base_state().unwrap()).unwrap();
        let view = session.history().to_vec();
        let projected = Projected {
            hidden: &[false, false],
            view: &view,
            cuts: &[],
        };
        (session.save_read_cache(
            crate::engine::Tokenizer::Estimate,
            projected,
            CacheWrite::Anew,
        ))
        .unwrap();
        session.finish();
        assert_eq!(*heard.lock().unwrap(), ["whole"]);

        let session = open();
        assert_eq!(session.read_how(), "cache");
        assert_eq!(*heard.lock().unwrap(), ["whole", "on"]);
        session.finish();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A long Claude Code log whose pieces are let go once read lean, and
    /// read again to be built, is read whole as it is now when it changed
    /// in between: not built from a choice made of the text it was.
    #[test]
    fn a_log_rewritten_while_it_is_read_is_read_whole_as_it_is_now() {
        use std::sync::atomic::{AtomicBool, Ordering};
        struct Rewrite {
            path: std::path::PathBuf,
            done: AtomicBool,
        }
        impl ReadHooks for Rewrite {
            // First called once the pieces are read lean, before any is
            // read again.
            fn let_go(&self) {
                if !self.done.swap(true, Ordering::Relaxed) {
                    let text = std::fs::read_to_string(&self.path).unwrap();
                    let longer = text.replacen("turn 1500 ", "turn 1500, said again ", 1);
                    std::fs::write(&self.path, longer).unwrap();
                }
            }
        }
        let dir = std::env::temp_dir().join(format!("noa-rewritten-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("talk.jsonl");
        let words = "word ".repeat(300);
        let mut log = String::new();
        for i in 1..=3000 {
            let parent = (i > 1).then(|| format!("a{}", i - 1));
            let user = serde_json::json!({"type": "user", "uuid": format!("u{i}"),
                "parentUuid": parent, "sessionId": "s",
                "message": {"role": "user", "content": format!("turn {i} {words}")}});
            let answer = serde_json::json!({"type": "assistant", "uuid": format!("a{i}"),
                "parentUuid": format!("u{i}"), "sessionId": "s",
                "message": {"id": format!("m{i}"), "role": "assistant",
                    "content": [{"type": "text", "text": format!("done {i}")}]}});
            log.push_str(&format!("{user}\n{answer}\n"));
        }
        assert!(
            log.len() > 4 << 20,
            "long enough to be read lean on a thread"
        );
        std::fs::write(&path, &log).unwrap();
        let hooks = Rewrite {
            path: path.clone(),
            done: AtomicBool::new(false),
        };
        let session = Session::open(
            &path,
            SessionOptions::default(),
            Purpose::Look,
            Box::new(hooks),
        )
        .unwrap();
        assert!(
            std::fs::read_to_string(&path)
                .unwrap()
                .contains("said again")
        );
        let history = session.history();
        assert_eq!(history.len(), 6000);
        assert!(history[2998].text.starts_with("turn 1500, said again "));
        assert_eq!(history[5999].text, "done 3000");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// What the options get wrong is bad input, said before anything is
    /// written.
    #[test]
    fn a_session_id_that_is_not_a_directory_name_is_refused() {
        let dir = std::env::temp_dir().join(format!("noa-session-id-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("talk.jsonl");
        std::fs::write(&path, "{\"role\":\"user\",\"content\":\"hello\"}\n").unwrap();
        let options = SessionOptions {
            session: Some("../elsewhere".into()),
            ..SessionOptions::default()
        };
        struct Silent;
        impl ReadHooks for Silent {}
        let Err(e) = Session::open(&path, options, Purpose::Look, Box::new(Silent)) else {
            panic!("a path for a session id was taken");
        };
        assert_eq!(e.kind(), ErrorKind::BadInput);
        assert!(e.to_string().contains("cannot be a session id"));
        assert!(!dir.join(".noa").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
