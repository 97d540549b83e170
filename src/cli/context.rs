//! What every command on a transcript starts from, set up one way.
//!
//! The transcript read, the settings resolved, the session locked when the
//! command writes, and the state found: the session's own, a parent's
//! ledger for a fork or subagent, or — when the state dir was lost — the one
//! the transcript's recorded Compress calls rebuild. Commands then project
//! through [`Context::project`], so each one sees the view the host sees.

use std::cell::Cell;
use std::collections::HashSet;
use std::io::{IsTerminal, Write};

use indicatif::{ProgressBar, ProgressStyle};

use super::args::Global;
use super::input::{Loaded, check_belongs, hand_back_at_once, load_whole};
use super::settings::{self, Settings};
use super::{CliError, clock};
use crate::engine::{
    self, COMPRESS_TOOL, CompressionState, Config, ContentType, CoreMessage, IdMap, IdSet, KeptCut,
    Name, Projection, RebuildInput, Rebuilt, Tokenizer, TurnInput, block_count, lineage,
    recorded_calls,
};
use crate::formats::Transcript;
use crate::store::{CacheDraft, CacheSource, Left, LeftWords, SessionDir, SessionLock, StoreError};

/// Whether a command writes the session (and so takes its lock first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Reads only: no directory made, no lock taken, nothing saved.
    Read,
    /// Writes: the session directory is made and locked for the command.
    Write,
}

/// One command's transcript, settings and session.
pub struct Context<'g> {
    /// The global flags.
    pub global: &'g Global,
    /// The transcript and where its session lives.
    pub loaded: Loaded,
    /// Defaults, config file and flags, resolved.
    pub settings: Settings,
    /// The transcript as the engine reads it.
    pub history: Vec<CoreMessage>,
    access: Access,
    lock: Option<SessionLock>,
    /// The state loaded while the transcript was read (see
    /// [`Early`](super::input::Early)), for [`Context::state`] to take once.
    early_state: Cell<Option<Result<Option<CompressionState>, StoreError>>>,
}

/// What one projection asks beyond the defaults.
#[derive(Debug, Clone, Copy, Default)]
pub struct Turn {
    /// The host's own figure for the request, if it gave one.
    pub input_tokens: Option<usize>,
    /// Nudge now whatever the pressure.
    pub force_nudge: bool,
}

/// How a command leaves the read cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheWrite {
    /// After what it held, when it was read on from and still stands: a
    /// turn that folded no words away.
    Append,
    /// Anew, without the words the state now folds away.
    Anew,
}

impl<'g> Context<'g> {
    /// Sets up a command on a transcript already read.
    pub fn open(global: &'g Global, mut loaded: Loaded, access: Access) -> Result<Self, CliError> {
        let settings = settings::load(global, Some(&loaded.path))?;
        let history = history_of(&mut loaded);
        let early = loaded.early.take();
        let mut cx = Context {
            global,
            loaded,
            settings,
            history,
            access: Access::Read,
            lock: None,
            early_state: Cell::new(None),
        };
        if let Some(early) = early {
            match early.lock {
                // Held from here on: by a writing command, or by one that
                // says it writes once it has checked its input (`apply`).
                Some(Ok(lock)) => cx.lock = Some(lock),
                Some(Err(e)) if access == Access::Write => return Err(e.into()),
                _ => {}
            }
            // Loaded under the lock, or, for a reading command, as it would
            // have loaded it.
            cx.early_state.set(early.state);
        }
        if access == Access::Write {
            cx.lock()?;
        }
        Ok(cx)
    }

    /// Turns a reading command into a writing one: makes the session
    /// directory and takes its lock (a command that checks its input first
    /// touches nothing until it is sure).
    pub fn lock(&mut self) -> Result<(), CliError> {
        if self.lock.is_none() {
            self.loaded.session.create()?;
            self.lock = Some(SessionLock::acquire(&self.loaded.session.dir)?);
        }
        self.access = Access::Write;
        Ok(())
    }

    /// Whether the transcript's prefix is the one the read cache read (see
    /// [`HowRead::confirm`](super::input::HowRead::confirm)).
    pub fn confirm_prefix(&mut self) -> bool {
        self.loaded.read.confirm()
    }

    /// Whether the transcript was read on from the session's read cache.
    pub fn warm(&self) -> bool {
        self.loaded.read.warm
    }

    /// Whether the transcript was read whole with its long outputs set
    /// aside (see [`crate::store::set_aside`]): they are filled in as a warm
    /// turn's are.
    pub fn set_aside(&self) -> bool {
        !self.warm() && !self.loaded.read.withheld.is_empty()
    }

    /// How the transcript was read, as reports name it: `cache` (on from
    /// the read cache) or `whole`.
    pub fn read_how(&self) -> &'static str {
        if self.warm() { "cache" } else { "whole" }
    }

    /// The session's state as saved, for a command that read the transcript
    /// again after starting on it (what [`Context::state`] would give, without
    /// its warnings a second time).
    pub fn reload_state(&self) -> Result<CompressionState, CliError> {
        match self.session().load()? {
            Some(saved) => Ok(saved),
            None => self.state(),
        }
    }

    /// Whether a message whose words the read cache left out is not among
    /// those a projection hid (its [`Projection::hidden`]): then the view
    /// may show it, and the turn must read the transcript whole. Checked by
    /// place, after projecting: a compressed session's folded messages are
    /// most of it.
    pub fn unhides_elided(&self, hidden: &[bool]) -> bool {
        let elided = &self.loaded.read.elided;
        (elided.iter().enumerate()).any(|(i, &e)| e && !hidden.get(i).copied().unwrap_or(false))
    }

    /// Whether every message whose words the read cache left out is still
    /// folded into an active block of `state`: with fewer blocks (an older
    /// state) they may be shown again, and a call must be answered from
    /// the transcript read whole.
    pub fn cache_serves(&self, state: &CompressionState) -> bool {
        let mut elided = self.elided_ids().peekable();
        if elided.peek().is_none() {
            return true;
        }
        let folded: IdSet<'_> = (state.blocks.iter().filter(|b| b.active))
            .flat_map(|b| &b.effective_message_ids)
            .map(Name::as_str)
            .collect();
        elided.all(|id| folded.contains(id))
    }

    /// The ids of the history's messages whose words the read cache left
    /// out, in history order.
    pub fn elided_ids(&self) -> impl Iterator<Item = &str> {
        (self.history.iter().zip(&self.loaded.read.elided))
            .filter(|&(_, &e)| e)
            .map(|(m, _)| m.id.as_str())
    }

    /// Makes the transcript ready to write `view` from: the JSON the read
    /// cache kept for the messages it shows is parsed. False when it does
    /// not parse, and the transcript must be read whole.
    pub fn fill_view(&mut self, view: &[CoreMessage]) -> bool {
        let shown: HashSet<&str> = view.iter().map(|m| m.id.as_str()).collect();
        crate::store::fill_shown(&mut self.loaded.transcript, &self.loaded.read.raws, &shown)
    }

    /// Fills in the tool results of `p`'s view whose words the read cache
    /// kept back ([`Projection::unfilled`]), read from the cache now. False
    /// when they cannot be read, and the transcript must be read whole.
    pub fn fill_unfilled(&self, p: &mut Projection) -> bool {
        if p.unfilled.is_empty() {
            return true;
        }
        let wanted: Option<Vec<(&str, usize)>> = (p.unfilled.iter())
            .map(|u| Some((p.view.get(u.at)?.id.as_str(), u.len)))
            .collect();
        let Some(Ok(words)) = wanted.map(|w| self.left_words().words(&w)) else {
            return false;
        };
        for (u, words) in p.unfilled.iter().zip(words) {
            u.fill(&mut p.view[u.at], &words);
        }
        true
    }

    /// Whether a command with `state` decides as it would with the words
    /// the read cache kept back ([`CoreMessage::withheld`]): when its
    /// figures are the estimate's.
    pub fn decides_unread(&self, state: &CompressionState) -> bool {
        self.config(state).tokenizer == Tokenizer::Estimate
    }

    /// Whether a turn with `state` leaves the read cache by appending to
    /// it: a cache written anew needs every word it keeps.
    pub fn appends_cache(&self, state: &CompressionState) -> bool {
        let tokenizer = self.config(state).tokenizer;
        (self.loaded.read.appendable.as_ref()).is_some_and(|end| end.tokenizer == tokenizer)
    }

    /// Where the words of the history's messages handed over without them
    /// lie, by place: what a read cache written anew copies them from.
    fn left(&self) -> Option<Left<'_>> {
        let read = &self.loaded.read;
        (read.words.as_ref()).map(|file| Left {
            at: &read.withheld,
            file,
        })
    }

    /// Where the words the read cache kept back lie in it, by message id:
    /// what archives of those messages are rendered from.
    pub fn left_words(&self) -> LeftWords<'_> {
        let (history, read) = (&self.history, &self.loaded.read);
        let Some(words) = &read.words else {
            return LeftWords::default();
        };
        let at = (read.withheld.iter())
            .map(|&(i, at)| (history[i].id.as_str(), at))
            .collect();
        words.left(at)
    }

    /// Reads into the history every word the read cache kept back. False
    /// when they cannot be read, and the transcript must be read whole.
    pub fn read_withheld(&mut self) -> bool {
        self.read_withheld_of(|_| true)
    }

    /// Reads into the history the words the read cache kept back of the
    /// messages a cache written after `hidden` keeps, as
    /// [`Context::save_read_cache`] chooses them for a view that shows
    /// none. False when they cannot be read.
    pub fn read_kept_withheld(&mut self, hidden: &[bool]) -> bool {
        let (read, none) = (&self.loaded.read, HashSet::new());
        let kept: Vec<usize> = (read.withheld.iter().map(|&(i, _)| i))
            .filter(|&i| keeps(&read.elided, hidden, &none, i, &self.history[i]))
            .collect();
        // In the history's order, as the list they come from.
        self.read_withheld_of(|i| kept.binary_search(&i).is_ok())
    }

    /// Reads the words kept back of the history's messages `which` takes.
    fn read_withheld_of(&mut self, which: impl Fn(usize) -> bool) -> bool {
        let (taken, left): (Vec<_>, Vec<_>) = std::mem::take(&mut self.loaded.read.withheld)
            .into_iter()
            .partition(|&(i, _)| which(i));
        self.loaded.read.withheld = left;
        if taken.is_empty() {
            return true;
        }
        let spans: Vec<(u64, usize)> = (taken.iter())
            .map(|&(i, at)| (at, self.history[i].text_len()))
            .collect();
        let read = self.loaded.read.words.as_ref().map(|w| w.read(&spans));
        let Some(Ok(words)) = read else {
            return false;
        };
        for (&(i, _), words) in taken.iter().zip(words) {
            let m = &mut self.history[i];
            m.text = words;
            m.withheld = None;
        }
        true
    }

    /// Reads the transcript again, whole: for a view the read cache could
    /// not serve.
    pub fn read_whole(&mut self) -> Result<(), CliError> {
        let mut loaded = load_whole(self.global, &self.loaded.path)?;
        self.history = history_of(&mut loaded);
        // The session's handle remembers the logs its state was loaded
        // from, so the save appends to them as a cold turn's would.
        if loaded.session.dir == self.loaded.session.dir {
            loaded.session = self.loaded.session.clone();
        }
        self.loaded = loaded;
        Ok(())
    }

    /// Leaves a read cache for the next turn, keeping the words of what
    /// `view` shows and of every history message `hidden` does not mark
    /// (by position; those past its end are not hidden): what no block
    /// covers in `state`, and what pruning leaves in view (the task,
    /// reasoning of a visible action: the last resort may have left them
    /// out of this view only). Compress exchanges keep theirs for the
    /// host's books.
    /// Nothing when the command writes nothing or the transcript cannot be
    /// read on from a prefix.
    pub fn save_read_cache(
        &self,
        state: &CompressionState,
        hidden: &[bool],
        view: &[CoreMessage],
        cuts: &[(String, KeptCut)],
        how: CacheWrite,
    ) -> Result<(), CliError> {
        let Some(mark) = self
            .loaded
            .read
            .mark
            .filter(|_| self.access == Access::Write)
        else {
            return Ok(());
        };
        let shown: HashSet<&str> = view.iter().map(|m| m.id.as_str()).collect();
        let elided = &self.loaded.read.elided;
        let keep = |i: usize, m: &CoreMessage| keeps(elided, hidden, &shown, i, m);
        let source = CacheSource {
            transcript: self.transcript(),
            history: &self.history,
            tokenizer: self.config(state).tokenizer,
            mark,
            keep: &keep,
            unparsed: &self.loaded.read.raws,
            cuts,
            left: self.left(),
        };
        match (how, &self.loaded.read.appendable) {
            (CacheWrite::Append, Some(end)) => {
                Ok(self.session().append_read_cache(&source, end)?)
            }
            _ => Ok(self.session().save_read_cache(&source)?),
        }
    }

    /// Projects a turn that can hide nothing, writing the read cache's
    /// messages on a thread of their own meanwhile: a transcript read whole
    /// with no block in the state (a first turn) keeps every word in the
    /// cache, so what the cache holds does not wait for the projection.
    /// `None` for a turn that must project first ([`Context::project`]
    /// and then [`Context::save_read_cache`]); else the projection and the
    /// cache's draft, for [`Context::finish_read_cache`].
    pub fn project_drafting(
        &self,
        state: &mut CompressionState,
        turn: Turn,
    ) -> Option<(Projection, Result<CacheDraft, StoreError>)> {
        let mark = self.loaded.read.mark.filter(|_| {
            self.access == Access::Write
                && !self.warm()
                && state.blocks.is_empty()
                && self.loaded.read.elided.is_empty()
        })?;
        let tokenizer = self.config(state).tokenizer;
        let (transcript, history) = (&self.loaded.transcript, &self.history[..]);
        let dir = self.loaded.session.dir.as_path();
        let left = self.left();
        hand_back_at_once();
        Some(std::thread::scope(|s| {
            let drafting = s.spawn(move || {
                every_word(transcript, history, (tokenizer, mark), &[], left).draft(dir)
            });
            let p = self.project(state, turn);
            let draft = drafting
                .join()
                .unwrap_or_else(|e| std::panic::resume_unwind(e));
            (p, draft)
        }))
    }

    /// Puts the cache [`Context::project_drafting`] drafted in place, with
    /// the turn's `cuts` in its trailer.
    pub fn finish_read_cache(
        &self,
        draft: Result<CacheDraft, StoreError>,
        state: &CompressionState,
        cuts: &[(String, KeptCut)],
    ) -> Result<(), CliError> {
        let mark = self.loaded.read.mark.unwrap_or_default();
        let tokenizer = self.config(state).tokenizer;
        let left = self.left();
        let source = every_word(
            self.transcript(),
            &self.history,
            (tokenizer, mark),
            cuts,
            left,
        );
        Ok(source.finish_draft(draft?)?)
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

    /// The transcript.
    pub fn transcript(&self) -> &Transcript {
        &self.loaded.transcript
    }

    /// The session's directory.
    pub fn session(&self) -> &SessionDir {
        &self.loaded.session
    }

    /// The config the engine decides on for `state`'s host.
    pub fn config(&self, state: &CompressionState) -> Config {
        self.settings
            .for_host(&state.host, Some(self.transcript().format))
    }

    /// One turn's projection of the whole transcript onto `state`.
    pub fn project(&self, state: &mut CompressionState, turn: Turn) -> Projection {
        let config = self.config(state);
        let p = engine::project(
            state,
            &TurnInput {
                history: &self.history,
                config: &config,
                input_tokens: turn.input_tokens,
                recorded: &self.transcript().recorded(),
                sections: &self.settings.sections,
                force_nudge: turn.force_nudge,
                for_call: false,
                cuts: &self.kept_cuts(),
            },
        );
        self.note_compactions(state);
        p
    }

    /// Keeps the host's compactions a whole read found in `state`, the last
    /// one with the ref of the message that carries its summary (the
    /// history's first). A read on from the cache saw none of the records
    /// before, so the state keeps what it knew.
    fn note_compactions(&self, state: &mut CompressionState) {
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
        self.loaded
            .read
            .cuts
            .iter()
            .map(|(id, cut)| (id.as_str(), *cut))
            .collect()
    }

    /// The state the command works on: the session's own (or a parent's),
    /// or, when it was lost, the one the transcript's records rebuild —
    /// saved with its archives when the command writes.
    pub fn state(&self) -> Result<CompressionState, CliError> {
        let session = self.session();
        let loaded = match self.early_state.take() {
            Some(early) => early?,
            None => session.load()?,
        };
        if let Some(state) = loaded {
            check_belongs(&self.loaded, &state)?;
            self.report_unknown_calls(&state);
            return Ok(state);
        }
        let base = self.base_state()?;
        // A ledger inherited from a parent already holds what the shared
        // part of the log made.
        if !base.blocks.is_empty() {
            return Ok(base);
        }
        Ok(self.recover()?.unwrap_or(base))
    }

    /// What a state starts from: a parent's ledger for a derived session,
    /// else nothing.
    pub fn base_state(&self) -> Result<CompressionState, CliError> {
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

    /// Replays the transcript's Compress calls onto the session's base,
    /// with a progress bar on long logs.
    /// `originals` is [`Context::originals`], which the archives are then
    /// rendered from.
    pub fn rebuild(&self, originals: &IdMap<'_, &CoreMessage>) -> Result<Rebuilt, CliError> {
        let base = self.base_state()?;
        let root = self.session_root();
        let now = clock::now();
        let created = clock::rfc3339(now);
        let calls = self.history.iter().filter(|m| m.is_compress_call()).count();
        let bar = progress(self.global, calls as u64);
        let rebuilt = engine::rebuild(&RebuildInput {
            history: &self.history,
            originals,
            base: &base,
            config: &self.config(&base),
            recorded: &self.transcript().recorded(),
            archive_root: &root,
            now,
            created: &created,
            on_step: &|n| bar.set_position(n as u64 + 1),
        });
        bar.finish_and_clear();
        Ok(rebuilt)
    }

    /// The session directory as an absolute path, for archive pointers the
    /// model can open from anywhere.
    pub fn session_root(&self) -> String {
        let dir = &self.session().dir;
        std::fs::canonicalize(dir)
            .unwrap_or_else(|_| dir.clone())
            .to_string_lossy()
            .into_owned()
    }

    /// Every history message by id: what archives are rendered from as
    /// they are written.
    pub fn originals(&self) -> IdMap<'_, &CoreMessage> {
        let mut map = IdMap::with_capacity_and_hasher(self.history.len(), Default::default());
        map.extend(self.history.iter().map(|m| (m.id.as_str(), m)));
        map
    }

    /// [`Context::state`], for a turn whose transcript's prefix may not be
    /// confirmed yet ([`PrefixCheck`](super::input::PrefixCheck)): the turn
    /// projects meanwhile on a state that belongs to the transcript and
    /// knows all its calls, but whatever the transcript would make it say of
    /// the state (an error, a warning, a state rebuilt) waits for the
    /// prefix, and a prefix that changed is read whole first.
    pub fn turn_state(&mut self) -> Result<CompressionState, CliError> {
        if self.loaded.read.check.is_some() {
            match self.early_state.take() {
                // What `state` would check, and nothing it would say.
                Some(Ok(Some(s)))
                    if check_belongs(&self.loaded, &s).is_ok()
                        && self.unknown_calls(&s).is_empty() =>
                {
                    return Ok(s);
                }
                early => self.early_state.set(early),
            }
            if !self.confirm_prefix() {
                self.read_whole()?;
            }
        }
        self.state()
    }

    /// The state a session lost, from the transcript's records: when there
    /// is no state.json but the transcript records Compress calls that made
    /// blocks. One line on stderr says so. `None` when there is nothing to
    /// rebuild.
    fn recover(&self) -> Result<Option<CompressionState>, CliError> {
        let calls = recorded_calls(&self.history);
        if !calls
            .iter()
            .any(|c| c.panel.as_deref().is_some_and(|p| block_count(p) > 0))
        {
            return Ok(None);
        }
        let originals = self.originals();
        let rebuilt = self.rebuild(&originals)?;
        let write = self.access == Access::Write;
        if write {
            self.session().commit_rebuilt(
                &rebuilt.archives,
                (&originals, &self.left_words()),
                &rebuilt.state,
            )?;
        }
        if !self.global.quiet {
            let _ = writeln!(
                std::io::stderr(),
                "noa: {} had no state: rebuilt it from the {} Compress call(s) the transcript records ({} block(s)){}",
                self.session().dir.display(),
                calls.len(),
                rebuilt.state.blocks.len(),
                if write { "" } else { "; not saved" },
            );
        }
        Ok(Some(rebuilt.state))
    }

    /// Says so when the transcript records Compress calls that made blocks
    /// the state knows nothing of: the state is not the one this log built.
    fn report_unknown_calls(&self, state: &CompressionState) {
        if self.global.quiet {
            return;
        }
        let unknown = self.unknown_calls(state);
        if let Some(first) = unknown.first() {
            let _ = writeln!(
                std::io::stderr(),
                "noa: warning: {} does not know {} Compress call(s) the transcript records as applied ({first}{}); `noa rebuild --check` lists the differences",
                self.session().state_path().display(),
                unknown.len(),
                if unknown.len() > 1 { ", …" } else { "" },
            );
        }
    }

    /// The ids of the Compress calls the transcript records as having made
    /// blocks that `state` knows nothing of.
    fn unknown_calls(&self, state: &CompressionState) -> Vec<&str> {
        let made_blocks: HashSet<&str> = state
            .blocks
            .iter()
            .map(|b| b.compress_call_id.as_str())
            .collect();
        let known = |id: &str| state.host.applied.contains_key(id) || made_blocks.contains(id);
        self.history
            .iter()
            .filter(|m| {
                m.content_type == ContentType::ToolResult
                    && m.tool_name == COMPRESS_TOOL
                    && block_count(&m.text) > 0
                    && !known(&m.tool_call_id)
            })
            .map(|m| m.tool_call_id.as_str())
            .collect()
    }
}

/// Whether a read cache written after a projection keeps the words of
/// the history's `i`th message `m`: not left out already (`elided`), and
/// not hidden by a block (`hidden`, by place; those past its end are not)
/// unless the view shows it (`shown`) or it is of a Compress exchange,
/// whose words the host's books read.
fn keeps(
    elided: &[bool],
    hidden: &[bool],
    shown: &HashSet<&str>,
    i: usize,
    m: &CoreMessage,
) -> bool {
    !elided.get(i).copied().unwrap_or(false)
        && (!hidden.get(i).copied().unwrap_or(false)
            || shown.contains(m.id.as_str())
            || m.tool_name == COMPRESS_TOOL)
}

/// A read cache of a transcript read whole that keeps every word: what a
/// turn that can hide nothing leaves (see [`Context::project_drafting`]).
fn every_word<'a>(
    transcript: &'a Transcript,
    history: &'a [CoreMessage],
    (tokenizer, mark): (Tokenizer, (u64, u64, u64)),
    cuts: &'a [(String, KeptCut)],
    left: Option<Left<'a>>,
) -> CacheSource<'a> {
    fn keep(_: usize, _: &CoreMessage) -> bool {
        true
    }
    CacheSource {
        transcript,
        history,
        tokenizer,
        mark,
        keep: &keep,
        unparsed: &[],
        cuts,
        left,
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
        loaded
            .read
            .cuts
            .retain(|(id, _)| !new.contains(id.as_str()));
    }
    // A first turn has no prefix: the cores read are the history as they
    // stand, not copied into another list.
    if history.is_empty() {
        return read;
    }
    history.extend(read);
    history
}

fn progress(global: &Global, len: u64) -> ProgressBar {
    if global.quiet || len < 20 || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    if let Ok(style) = ProgressStyle::with_template("replaying {bar:30} {pos}/{len} Compress calls")
    {
        bar.set_style(style);
    }
    bar
}
