//! What a session's read cache left out of the history, filled in when a
//! view or an archive needs it, and the cache a command leaves for the
//! next turn.

use std::collections::HashSet;
use std::path::Path;

use super::session::Session;
use super::{CacheDraft, CacheSource, Left, LeftWords, ReadHooks, StoreError, fill_shown};
use crate::engine::{
    COMPRESS_TOOL, CompressionState, CoreMessage, IdSet, KeptCut, Name, Projection, Tokenizer,
};
use crate::formats::Transcript;

/// How a command leaves the read cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheWrite {
    /// After what it held, when it was read on from and still stands: a
    /// turn that folded no words away.
    Append,
    /// Anew, without the words the state now folds away.
    Anew,
}

/// What a projection made of the history, which the read cache a command
/// leaves keeps words by.
#[derive(Debug, Clone, Copy)]
pub struct Projected<'a> {
    /// By the history's place, the messages a block hid (those past its
    /// end are not hidden).
    pub hidden: &'a [bool],
    /// The view: its messages keep their words.
    pub view: &'a [CoreMessage],
    /// The cuts the turn made, by message id, for the next turn to keep.
    pub cuts: &'a [(String, KeptCut)],
}

/// A transcript read whole, with what a read cache that keeps its every
/// word is written from: what a turn that can hide nothing leaves (see
/// [`Session::drafting`]).
#[derive(Clone, Copy)]
struct EveryWord<'a> {
    transcript: &'a Transcript,
    history: &'a [CoreMessage],
    tokenizer: Tokenizer,
    /// As [`CacheSource::mark`].
    mark: (u64, u64, u64),
    left: Option<Left<'a>>,
}

impl<'a> EveryWord<'a> {
    /// The cache's source, with the turn's `cuts` in its trailer.
    fn source(self, cuts: &'a [(String, KeptCut)]) -> CacheSource<'a> {
        fn keep(_: usize, _: &CoreMessage) -> bool {
            true
        }
        CacheSource {
            transcript: self.transcript,
            history: self.history,
            tokenizer: self.tokenizer,
            mark: self.mark,
            keep: &keep,
            unparsed: &[],
            cuts,
            left: self.left,
        }
    }
}

/// A read cache about to be drafted on a thread of its own while a turn
/// projects (see [`Session::drafting`]).
pub struct Drafting<'a> {
    words: EveryWord<'a>,
    /// The session directory the draft is written in.
    dir: &'a Path,
    hooks: &'a dyn ReadHooks,
}

impl Drafting<'_> {
    /// Runs `project` on this thread while the cache is drafted on
    /// another; gives what it returned and the draft, for
    /// [`Session::finish_read_cache`].
    pub fn beside<P>(self, project: impl FnOnce() -> P) -> (P, Result<CacheDraft, StoreError>) {
        let Drafting { words, dir, hooks } = self;
        hooks.freeing_for_good();
        std::thread::scope(|s| {
            let drafting = s.spawn(move || words.source(&[]).draft(dir));
            let p = project();
            let draft = drafting
                .join()
                .unwrap_or_else(|e| std::panic::resume_unwind(e));
            (p, draft)
        })
    }
}

impl Session {
    /// Whether a message whose words the read cache left out is not among
    /// those a projection hid (its [`Projection::hidden`]): then the view
    /// may show it, and the turn must read the transcript whole. Checked by
    /// place, after projecting: a compressed session's folded messages are
    /// most of it.
    pub fn unhides_elided(&self, hidden: &[bool]) -> bool {
        let elided = &self.read().elided;
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
        (self.history().iter().zip(&self.read().elided))
            .filter(|&(_, &e)| e)
            .map(|(m, _)| m.id.as_str())
    }

    /// Makes the transcript ready to write `view` from: the JSON the read
    /// cache kept for the messages it shows is parsed. False when it does
    /// not parse, and the transcript must be read whole.
    pub fn fill_view(&mut self, view: &[CoreMessage]) -> bool {
        let shown: HashSet<&str> = view.iter().map(|m| m.id.as_str()).collect();
        let (transcript, read) = self.transcript_and_read();
        fill_shown(transcript, &read.raws, &shown)
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

    /// Whether a turn counting with `tokenizer` leaves the read cache by
    /// appending to it: a cache written anew needs every word it keeps.
    pub fn appends_cache(&self, tokenizer: Tokenizer) -> bool {
        (self.read().appendable.as_ref()).is_some_and(|end| end.tokenizer == tokenizer)
    }

    /// Where the words of the history's messages handed over without them
    /// lie, by place: what a read cache written anew copies them from.
    fn left(&self) -> Option<Left<'_>> {
        let read = self.read();
        (read.words.as_ref()).map(|file| Left {
            at: &read.withheld,
            file,
        })
    }

    /// Where the words the read cache kept back lie in it, by message id:
    /// what archives of those messages are rendered from.
    pub fn left_words(&self) -> LeftWords<'_> {
        let (history, read) = (self.history(), self.read());
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
    /// [`Session::save_read_cache`] chooses them for a view that shows
    /// none. False when they cannot be read.
    pub fn read_kept_withheld(&mut self, hidden: &[bool]) -> bool {
        let (read, none) = (self.read(), HashSet::new());
        let history = self.history();
        let kept: Vec<usize> = (read.withheld.iter().map(|&(i, _)| i))
            .filter(|&i| keeps(&read.elided, hidden, &none, i, &history[i]))
            .collect();
        // In the history's order, as the list they come from.
        self.read_withheld_of(|i| kept.binary_search(&i).is_ok())
    }

    /// Reads into the history the words the read cache kept back of the
    /// messages at `places` (sorted). False when they cannot be read.
    pub fn read_words_at(&mut self, places: &[usize]) -> bool {
        self.read_withheld_of(|i| places.binary_search(&i).is_ok())
    }

    /// Reads the words kept back of the history's messages `which` takes.
    fn read_withheld_of(&mut self, which: impl Fn(usize) -> bool) -> bool {
        let (history, read) = self.history_and_read();
        let (taken, left): (Vec<_>, Vec<_>) = std::mem::take(&mut read.withheld)
            .into_iter()
            .partition(|&(i, _)| which(i));
        read.withheld = left;
        if taken.is_empty() {
            return true;
        }
        let spans: Vec<(u64, usize)> = (taken.iter())
            .map(|&(i, at)| (at, history[i].text_len()))
            .collect();
        let words = read.words.as_ref().map(|w| w.read(&spans));
        let Some(Ok(words)) = words else {
            return false;
        };
        for (&(i, _), words) in taken.iter().zip(words) {
            history[i].hold(words);
        }
        true
    }

    /// Leaves a read cache for the next turn, counted with `tokenizer`,
    /// keeping the words of what the view `projected` shows and of every
    /// history message it does not hide: what no block covers, and what
    /// pruning leaves in view (the task, reasoning of a visible action:
    /// the last resort may have left them out of this view only). Compress
    /// exchanges keep theirs for the host's books.
    /// Nothing when the command writes nothing or the transcript cannot be
    /// read on from a prefix.
    pub fn save_read_cache(
        &self,
        tokenizer: Tokenizer,
        projected: Projected,
        how: CacheWrite,
    ) -> Result<(), StoreError> {
        let read = self.read();
        let Some(mark) = read.mark.filter(|_| self.writes()) else {
            return Ok(());
        };
        let shown: HashSet<&str> = projected.view.iter().map(|m| m.id.as_str()).collect();
        let elided = &read.elided;
        let keep = |i: usize, m: &CoreMessage| keeps(elided, projected.hidden, &shown, i, m);
        let source = CacheSource {
            transcript: self.transcript(),
            history: self.history(),
            tokenizer,
            mark,
            keep: &keep,
            unparsed: &read.raws,
            cuts: projected.cuts,
            left: self.left(),
        };
        match (how, &read.appendable) {
            (CacheWrite::Append, Some(end)) => self.dir().append_read_cache(&source, end),
            _ => self.dir().save_read_cache(&source),
        }
    }

    /// A read cache drafted while a turn that can hide nothing projects: a
    /// transcript read whole with no block in `state` (a first turn) keeps
    /// every word in the cache, so what the cache holds does not wait for
    /// the projection. `None` for a turn that must project first and then
    /// [`Session::save_read_cache`].
    pub fn drafting(&self, state: &CompressionState, tokenizer: Tokenizer) -> Option<Drafting<'_>> {
        let read = self.read();
        let mark = read.mark.filter(|_| {
            self.writes() && !self.warm() && state.blocks.is_empty() && read.elided.is_empty()
        })?;
        Some(Drafting {
            words: self.every_word(tokenizer, mark),
            dir: self.dir().dir.as_path(),
            hooks: self.hooks(),
        })
    }

    /// Puts the cache [`Drafting::beside`] drafted in place, with the
    /// turn's `cuts` in its trailer.
    pub fn finish_read_cache(
        &self,
        draft: Result<CacheDraft, StoreError>,
        tokenizer: Tokenizer,
        cuts: &[(String, KeptCut)],
    ) -> Result<(), StoreError> {
        let mark = self.read().mark.unwrap_or_default();
        (self.every_word(tokenizer, mark).source(cuts)).finish_draft(draft?)
    }

    /// What a cache that keeps every word of the transcript read whole is
    /// written from.
    fn every_word(&self, tokenizer: Tokenizer, mark: (u64, u64, u64)) -> EveryWord<'_> {
        EveryWord {
            transcript: self.transcript(),
            history: self.history(),
            tokenizer,
            mark,
            left: self.left(),
        }
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
