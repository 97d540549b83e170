//! What walking the history under the blocks found, by place: the refs
//! held, the blocks standing for each message, what is shown anyway (the
//! task, the reasoning of an exchange whose action stays, a Compress pair
//! half covered), what is taken out, and how many messages are kept before
//! each place.
//!
//! Every projection reads the history through a [`HistoryIndex`]. A turn's
//! index starts from nothing and walks the whole history once. A rebuild
//! projects the history up to each recorded Compress call, each call's
//! history the one before it with messages appended, over blocks the calls
//! in between made or folded: its one index goes on from call to call and
//! redoes only what changed since the last, the new messages, the messages
//! of blocks made, folded or brought in since, and the exchanges and
//! Compress pairs around them, so a rebuild grows with its length, not its
//! square. The spent Compress exchanges are placed without being walked,
//! and the growth between the transcript's recorded prompt sizes is summed
//! on from the last call. An index walked on gives what one walked afresh
//! gives over the same history and state (a property test holds the two
//! together).

use std::collections::{BTreeSet, HashMap, HashSet};

use crate::engine::model::config::Config;
use crate::engine::model::exchange;
use crate::engine::model::identity::{IdMap, Places};
use crate::engine::model::message::{COMPRESS_TOOL, ContentType, CoreMessage, Role};
use crate::engine::model::name::Name;
use crate::engine::model::refs::{self, Assigned, Held};
use crate::engine::model::state::{Block, CompressionState};
use crate::engine::model::summary::SUMMARY_ROLE;
use crate::engine::pressure::gauge::{self, Recorded};
use crate::engine::turn::hide;
use crate::engine::turn::prune::block_number;

/// What the projections of a history's prefixes found so far (see the
/// module's documentation).
#[derive(Debug)]
pub struct HistoryIndex<'h> {
    /// The whole history the prefixes are cut from.
    history: &'h [CoreMessage],
    /// The prompt sizes the transcript records, and the config they are
    /// weighed under: the same for every prefix.
    recorded: &'h [Recorded],
    config: &'h Config,
    /// Each message's place, by id.
    place: PlaceIndex,
    /// How much of the history the last projection saw.
    len: usize,
    /// The usable refs the messages seen hold.
    held: Held,
    /// Messages seen that got no ref (the ref space was spent).
    unnumbered: usize,
    /// How many messages the ref map knew when the last projection was
    /// done with it.
    refs_left: usize,
    /// Whether the token figures of refs no history message holds were
    /// dropped, as a projection does: once is enough, since the refs held
    /// only grow and a projection freezes figures only for refs held.
    retained: bool,
    /// The state's blocks as seen, in its order.
    blocks: Vec<Seen>,
    /// The last block seen, in outline: a block of the same id made again
    /// over other messages is another block.
    last: Option<Outline>,
    /// Block ids another block folds.
    named: HashSet<String>,
    /// Block places by id.
    block_at: HashMap<String, u32>,
    /// Block places by the Compress call that made them.
    by_call: HashMap<String, Vec<u32>>,
    /// For each place, the blocks standing for its message.
    cover: Cover,
    /// For each place seen, whether an active block stands for it.
    covered: Vec<bool>,
    /// How many places are covered: with none (a session not compressed
    /// yet), no message is looked up to tell.
    covered_count: usize,
    /// For each place seen, its exchange (see [`exchange::spans`]).
    spans: Vec<(u32, u32)>,
    /// The first user message seen: always shown.
    task: Option<usize>,
    /// Compress exchanges by call id.
    pairs: IdMap<'h, Pair>,
    /// For each place seen, whether its exchange shows it (reasoning of an
    /// exchange whose action stays in view).
    span_shows: Vec<bool>,
    /// For each place seen, how many reasons show it although covered.
    shows: Vec<u32>,
    /// For each place seen, whether a block takes it out of the view.
    hidden: Vec<bool>,
    /// The places seen and not taken out, counted.
    ranks: Ranks,
    /// Whether every Compress message names its call: the exchanges that
    /// leave the view as spent are then told apart by call (see
    /// [`HistoryIndex::plan`]).
    calls_named: bool,
    /// The Compress calls kept, by place.
    calls_kept: BTreeSet<u32>,
    /// The places kept that are not half of a Compress exchange whose call
    /// is kept: what stays in view whichever calls are spent.
    plain: Bits,
    /// For each block, the places it stands for that are taken out, in order.
    taken: Vec<Vec<u32>>,
    /// The active blocks that take out a place: those whose summaries the
    /// view shows.
    anchored: BTreeSet<u32>,
    /// The growth the transcript's recorded figures show within the
    /// history seen (see [`HistoryIndex::sum_recorded`]).
    growth: Option<Growth>,
}

/// Provider and estimated growth summed over the first pairs of the
/// index's recorded figures.
#[derive(Debug)]
struct Growth {
    pairs: usize,
    sums: (u64, u64),
}

#[derive(Debug)]
struct Seen {
    id: String,
    /// The first place of a message it stands for (`u32::MAX` for none):
    /// a block stands in the prefixes that reach it.
    first: u32,
    /// Whether another block folds it.
    absorbed: bool,
    /// Whether it was active at the last projection.
    active: bool,
}

/// What tells a block from another of the same id: how many messages and
/// blocks it stands for, and its first and last message.
#[derive(Debug, PartialEq)]
struct Outline {
    messages: usize,
    blocks: usize,
    ends: Option<(Name, Name)>,
}

impl Outline {
    fn of(b: &Block) -> Outline {
        let ids = &b.effective_message_ids;
        Outline {
            messages: ids.len(),
            blocks: b.direct_block_ids.len(),
            ends: ids
                .first()
                .zip(ids.last())
                .map(|(a, z)| (a.clone(), z.clone())),
        }
    }
}

/// The halves of one Compress exchange.
#[derive(Debug, Default)]
struct Pair {
    places: Vec<u32>,
    /// How many of `places` it shows (all of them at the time, or none).
    showing: usize,
}

/// Counts the block `b` among those whose summaries show when it `shows`.
fn count_anchored(anchored: &mut BTreeSet<u32>, b: u32, shows: bool) {
    if shows {
        anchored.insert(b);
    } else {
        anchored.remove(&b);
    }
}

/// Each message's place in the history, by id. Messages of the same id
/// are one message as far as blocks go: a block that stands for one
/// stands for each.
#[derive(Debug)]
struct PlaceIndex {
    table: Places,
    /// The later places of an id held more than once, by its first.
    repeats: HashMap<u32, Vec<u32>>,
}

impl PlaceIndex {
    fn of(history: &[CoreMessage]) -> PlaceIndex {
        let mut table = Places::with_capacity(history.len());
        let mut repeats: HashMap<u32, Vec<u32>> = HashMap::new();
        for (i, m) in history.iter().enumerate() {
            if let Some(first) = table.find_or_add(&m.id, i, |at| history[at].id.as_str()) {
                repeats.entry(first as u32).or_default().push(i as u32);
            }
        }
        PlaceIndex { table, repeats }
    }

    /// The first place of `id` in `history` (the one indexed).
    fn first(&self, history: &[CoreMessage], id: &str) -> Option<u32> {
        let at = self.table.find(id, |at| history[at].id.as_str())?;
        Some(at as u32)
    }

    /// Every place of `id`, in order, `guess` tried first when no id is
    /// held twice.
    fn all<'s>(
        &'s self,
        history: &[CoreMessage],
        id: &str,
        guess: usize,
    ) -> impl Iterator<Item = u32> + 's {
        let first = match self.repeats.is_empty() {
            true => {
                let id_at = |at: usize| history.get(at).map(|m| m.id.as_str());
                self.table.find_near(id, guess, id_at).map(|at| at as u32)
            }
            false => self.first(history, id),
        };
        let repeats = first.and_then(|p| self.repeats.get(&p));
        first
            .into_iter()
            .chain(repeats.into_iter().flatten().copied())
    }
}

/// For each place, the blocks standing for its message, in the order the
/// blocks were taken in. Most places have one block or none: a list for
/// each was an allocation for each covered message of a long history.
#[derive(Debug)]
struct Cover {
    first: Vec<u32>,
    /// The blocks after the first, for the few places with more.
    more: HashMap<u32, Vec<u32>>,
}

impl Cover {
    const NONE: u32 = u32::MAX;

    fn new(places: usize) -> Cover {
        Cover {
            first: vec![Cover::NONE; places],
            more: HashMap::new(),
        }
    }

    /// Adds block `b` to those at `p`, unless it is the last added there.
    fn add(&mut self, p: usize, b: u32) {
        let first = &mut self.first[p];
        if *first == Cover::NONE {
            *first = b;
            return;
        }
        let more = self.more.entry(p as u32).or_default();
        if more.last().unwrap_or(first) != &b {
            more.push(b);
        }
    }

    /// The blocks at `p`, in order.
    fn of(&self, p: usize) -> impl Iterator<Item = u32> + '_ {
        let first = Some(self.first[p]).filter(|&b| b != Cover::NONE);
        let more = first.and_then(|_| self.more.get(&(p as u32)));
        first.into_iter().chain(more.into_iter().flatten().copied())
    }
}

/// A set of places, a bit each: a long history's places are most of them
/// in one set or another, and a tree of them cost a first turn more than
/// the rest of its pruning.
#[derive(Debug, Default)]
struct Bits(Vec<u64>);

impl Bits {
    fn set(&mut self, at: usize, on: bool) {
        let (word, bit) = (at / 64, 1u64 << (at % 64));
        if word >= self.0.len() {
            if !on {
                return;
            }
            self.0.resize(word + 1, 0);
        }
        match on {
            true => self.0[word] |= bit,
            false => self.0[word] &= !bit,
        }
    }

    /// The places in the set, in order.
    fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().enumerate().flat_map(|(w, &word)| {
            let mut left = word;
            std::iter::from_fn(move || {
                (left != 0).then(|| {
                    let bit = left.trailing_zeros();
                    left &= left - 1;
                    (w * 64) as u32 + bit
                })
            })
        })
    }
}

/// The places kept, counted: how many come before a place, and which
/// comes after so many. The counts before each word of the set are worked
/// out again once a projection has settled what it keeps ([`Ranks::count`]):
/// a word at a time, sixty-four places are counted in one instruction.
#[derive(Debug, Default)]
struct Ranks {
    kept: Bits,
    /// For each word of `kept`, how many places are kept before it.
    before_word: Vec<u32>,
}

impl Ranks {
    fn set(&mut self, at: usize, kept: bool) {
        self.kept.set(at, kept);
    }

    /// Counts again what comes before each word.
    fn count(&mut self) {
        self.before_word.clear();
        let mut sum = 0;
        for word in &self.kept.0 {
            self.before_word.push(sum);
            sum += word.count_ones();
        }
    }

    /// How many places before `at` are kept.
    fn before(&self, at: usize) -> usize {
        let (word, bit) = (at / 64, at % 64);
        match self.kept.0.get(word) {
            Some(w) => (self.before_word[word] + (w & ((1u64 << bit) - 1)).count_ones()) as usize,
            None => self.before_word.last().map_or(0, |&b| {
                let last = self.kept.0.last().copied().unwrap_or(0);
                (b + last.count_ones()) as usize
            }),
        }
    }

    /// The place of the kept one that `k` others come before.
    fn select(&self, k: usize) -> usize {
        let k = k as u32;
        let word = self
            .before_word
            .partition_point(|&b| b <= k)
            .saturating_sub(1);
        let Some(&w) = self.kept.0.get(word) else {
            return 0;
        };
        let mut left = k - self.before_word[word];
        let mut bits = w;
        while bits != 0 {
            let bit = bits.trailing_zeros() as usize;
            if left == 0 {
                return word * 64 + bit;
            }
            left -= 1;
            bits &= bits - 1;
        }
        (word + 1) * 64
    }
}

/// One entry of the view [`HistoryIndex::plan`] places.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Planned<'h> {
    /// A message of the history.
    Message(&'h CoreMessage),
    /// The summary of the block at this place in the state's blocks.
    Summary(usize),
}

impl<'h> HistoryIndex<'h> {
    /// An index for prefixes of `history`, whose projections read the
    /// `recorded` prompt sizes under `config`.
    pub fn new(
        history: &'h [CoreMessage],
        recorded: &'h [Recorded],
        config: &'h Config,
    ) -> HistoryIndex<'h> {
        let place = PlaceIndex::of(history);
        let n = history.len();
        // Figures out of order are left to the gauge, which reads them all.
        let growth = recorded.is_sorted_by_key(|r| r.at).then_some(Growth {
            pairs: 0,
            sums: (0, 0),
        });
        HistoryIndex {
            history,
            recorded,
            config,
            place,
            len: 0,
            held: Held::default(),
            unnumbered: 0,
            refs_left: 0,
            retained: false,
            blocks: Vec::new(),
            last: None,
            named: HashSet::new(),
            block_at: HashMap::new(),
            by_call: HashMap::new(),
            cover: Cover::new(n),
            covered: Vec::with_capacity(n),
            covered_count: 0,
            spans: Vec::with_capacity(n),
            task: None,
            pairs: IdMap::default(),
            span_shows: Vec::with_capacity(n),
            shows: Vec::with_capacity(n),
            hidden: Vec::with_capacity(n),
            ranks: Ranks::default(),
            calls_named: history
                .iter()
                .all(|m| m.tool_name != COMPRESS_TOOL || !m.tool_call_id.is_empty()),
            calls_kept: BTreeSet::new(),
            plain: Bits::default(),
            taken: Vec::new(),
            anchored: BTreeSet::new(),
            growth,
        }
    }

    /// Whether `history` is a prefix of the one this index was made for,
    /// as its last message tells.
    pub fn serves(&self, history: &[CoreMessage]) -> bool {
        let last = |h: &[CoreMessage]| h.last().map(|m| m.id.clone());
        history.len() <= self.history.len() && last(history) == last(&self.history[..history.len()])
    }

    /// Brings the index to the prefix of `n` messages under `state`: refs
    /// for the new messages (from `next` on, `protected` ones blocked), the
    /// blocks marked active as a projection syncs them, token figures of
    /// refs no message holds dropped, and what is covered, shown anyway
    /// and taken out brought up to date. A state whose blocks are not the
    /// ones seen before, or a shorter prefix, starts the index over.
    pub fn advance(
        &mut self,
        state: &mut CompressionState,
        n: usize,
        next: u32,
        protected: impl Fn(&CoreMessage) -> bool,
    ) -> Assigned {
        // Blocks are only ever added; a list that lost some (the copy a
        // call was answered on, let go) starts the index over.
        let same_blocks = self.follows(&state.blocks);
        // The refs the index handed out are in the state (a call's view
        // keeps them), or it is another state.
        let same_refs = self.refs_left == state.message_refs.len();
        // An index not advanced yet has nothing to start over (`retained`
        // is set by the first advance): a turn's one projection would
        // otherwise index every id twice.
        let started = self.retained;
        if started && (n < self.len || !same_blocks || !same_refs) {
            *self = HistoryIndex::new(self.history, self.recorded, self.config);
        }
        let assigned = refs::assign(
            &mut state.message_refs,
            &self.history[self.len..n],
            next,
            protected,
            &mut self.held,
        );
        self.unnumbered += assigned.unnumbered;
        self.refs_left = state.message_refs.len();
        if !self.retained {
            state.token_snapshot.retain(|r, _| self.held.holds(r));
            self.retained = true;
        }

        let mut dirty: Vec<u32> = Vec::new();
        let mut spans_to_check: Vec<(u32, u32)> = Vec::new();
        self.extend_to(n, &mut dirty, &mut spans_to_check);
        self.register_blocks(state, &mut dirty);
        self.sync_active(state, n, &mut dirty);
        let old = self.len;
        let changed = self.settle_covered(dirty);
        self.len = n;
        // The exchanges of the places taken in are there already.
        for &p in changed.iter().take_while(|&&p| (p as usize) < old) {
            spans_to_check.push(self.spans[p as usize]);
        }
        self.settle_shown(changed, spans_to_check);
        self.ranks.count();
        // Refs handed out to the new messages, and messages of the prefix
        // without one.
        Assigned {
            new: assigned.new,
            unnumbered: self.unnumbered,
        }
    }

    /// Marks each block active as a projection syncs them: not folded by
    /// another, and standing for a message of the prefix of `n`. The
    /// places seen before of those that changed are `dirty`.
    fn sync_active(&mut self, state: &mut CompressionState, n: usize, dirty: &mut Vec<u32>) {
        let mut flipped = Vec::new();
        for (i, (seen, b)) in self.blocks.iter_mut().zip(&mut state.blocks).enumerate() {
            let active = !seen.absorbed && (seen.first as usize) < n;
            b.active = active;
            if active != seen.active {
                seen.active = active;
                flipped.push(i);
                // The places this advance takes in are looked at anyway.
                if self.len > 0 {
                    for id in &b.effective_message_ids {
                        let places = self.place.all(self.history, id, 0);
                        dirty.extend(places.filter(|&p| (p as usize) < self.len));
                    }
                }
            }
        }
        for b in flipped {
            self.reanchor(b);
        }
    }

    /// Settles whether each `dirty` place is covered; gives, in order, the
    /// places whose covering changed and the places taken in.
    fn settle_covered(&mut self, mut dirty: Vec<u32>) -> Vec<u32> {
        let mut changed: Vec<u32> = Vec::new();
        dirty.sort_unstable();
        dirty.dedup();
        for &p in &dirty {
            let c = (self.cover.of(p as usize)).any(|b| self.blocks[b as usize].active);
            let was = self.covered[p as usize];
            if c != was || p as usize >= self.len {
                self.covered[p as usize] = c;
                self.covered_count = self.covered_count + usize::from(c) - usize::from(was);
                changed.push(p);
            }
        }
        changed
    }

    /// Settles what is taken out: the `changed` places, and those whose
    /// showing changed with them (reasoning in the exchanges `spans`,
    /// halves of Compress exchanges).
    fn settle_shown(&mut self, changed: Vec<u32>, spans: Vec<(u32, u32)>) {
        let mut more: Vec<u32> = Vec::new();
        self.show_reasoning(spans, &mut more);
        self.show_pairs(&changed, &mut more);
        // The places to settle, in order: those changed (in order already)
        // and those whose showing changed, merged.
        more.sort_unstable();
        more.dedup();
        let mut more = more.into_iter().peekable();
        for p in changed {
            while let Some(q) = more.next_if(|&q| q < p) {
                self.mark(q as usize);
            }
            more.next_if_eq(&p);
            self.mark(p as usize);
        }
        for q in more {
            self.mark(q as usize);
        }
    }

    /// Takes in the messages from `self.len` to `n`: kept until shown
    /// otherwise, their exchanges found again from the start of the run
    /// the last one seen ended in.
    fn extend_to(&mut self, n: usize, dirty: &mut Vec<u32>, spans: &mut Vec<(u32, u32)>) {
        let old = self.len;
        if n == old {
            return;
        }
        for p in old..n {
            let m = &self.history[p];
            self.covered.push(false);
            self.span_shows.push(false);
            self.shows.push(0);
            self.hidden.push(false);
            self.spans.push((p as u32, p as u32));
            self.ranks.set(p, true);
            dirty.push(p as u32);
            if m.tool_name == COMPRESS_TOOL && !m.tool_call_id.is_empty() {
                self.pairs
                    .entry(m.tool_call_id.as_str())
                    .or_default()
                    .places
                    .push(p as u32);
            }
            if self.task.is_none() && m.is_user_text() {
                self.task = Some(p);
                self.shows[p] += 1;
            }
            if m.is_compress_call() {
                self.calls_kept.insert(p as u32);
            }
        }
        for p in old..n {
            self.settle_plain(p);
        }
        // Exchanges are found left to right, each from the start of an
        // assistant run: the last one seen may go on into the new messages.
        let mut start = match old {
            0 => 0,
            _ => self.spans[old - 1].0 as usize,
        };
        while start > 0
            && self.history[start].role == Role::Assistant
            && self.history[start - 1].role == Role::Assistant
        {
            start -= 1;
        }
        for (i, (s, e)) in exchange::spans(&self.history[start..n])
            .into_iter()
            .enumerate()
        {
            self.spans[start + i] = ((start + s) as u32, (start + e) as u32);
        }
        let mut p = start;
        while p < n {
            let span = self.spans[p];
            spans.push(span);
            p = span.1 as usize + 1;
        }
    }

    /// Takes in the blocks the state holds beyond those seen: the places
    /// they stand for, and the blocks they fold.
    fn register_blocks(&mut self, state: &CompressionState, dirty: &mut Vec<u32>) {
        for (i, b) in state.blocks.iter().enumerate().skip(self.blocks.len()) {
            let mut first = u32::MAX;
            let mut taken = Vec::new();
            // A block's messages are most often in the history's order.
            let mut guess = 0;
            for id in &b.effective_message_ids {
                for p in self.place.all(self.history, id, guess) {
                    guess = p as usize + 1;
                    first = first.min(p);
                    self.cover.add(p as usize, i as u32);
                    if (p as usize) < self.len {
                        dirty.push(p);
                        if self.hidden[p as usize] {
                            taken.push(p);
                        }
                    }
                }
            }
            taken.sort_unstable();
            taken.dedup();
            self.taken.push(taken);
            for folded in &b.direct_block_ids {
                if self.named.insert(folded.to_string())
                    && let Some(&at) = self.block_at.get(folded.as_str())
                {
                    self.blocks[at as usize].absorbed = true;
                }
            }
            self.block_at.entry(b.block_id.clone()).or_insert(i as u32);
            if !b.compress_call_id.is_empty() {
                (self.by_call.entry(b.compress_call_id.clone()))
                    .or_default()
                    .push(i as u32);
            }
            self.blocks.push(Seen {
                id: b.block_id.clone(),
                first,
                absorbed: self.named.contains(&b.block_id),
                active: false,
            });
            self.last = Some(Outline::of(b));
        }
    }

    /// Looks at the exchanges `spans` again: the reasoning of one whose
    /// text or tool call stays in view is shown. Places whose showing
    /// changed go to `recheck`.
    fn show_reasoning(&mut self, mut spans: Vec<(u32, u32)>, recheck: &mut Vec<u32>) {
        spans.sort_unstable();
        spans.dedup();
        for (s, e) in spans {
            // An exchange found again since may have grown: the latest
            // stands.
            if self.spans[s as usize] != (s, e) {
                continue;
            }
            let (s, e) = (s as usize, e as usize);
            let acts_visible = (s..=e).any(|j| {
                let m = &self.history[j];
                m.role == Role::Assistant
                    && matches!(m.content_type, ContentType::Text | ContentType::ToolCall)
                    && !self.covered[j]
            });
            for r in s..=e {
                if self.history[r].content_type != ContentType::Reasoning {
                    continue;
                }
                if self.span_shows[r] != acts_visible {
                    self.span_shows[r] = acts_visible;
                    if acts_visible {
                        self.shows[r] += 1;
                    } else {
                        self.shows[r] -= 1;
                    }
                    recheck.push(r as u32);
                }
            }
        }
    }

    /// Looks again at the Compress exchanges with a half in `changed`, or
    /// new halves: both halves are shown when only one is covered.
    fn show_pairs(&mut self, changed: &[u32], recheck: &mut Vec<u32>) {
        let mut calls: Vec<&'h str> = changed
            .iter()
            .map(|&p| &self.history[p as usize])
            .filter(|m| m.tool_name == COMPRESS_TOOL && !m.tool_call_id.is_empty())
            .map(|m| m.tool_call_id.as_str())
            .collect();
        calls.sort_unstable();
        calls.dedup();
        for call in calls {
            let pair = self.pairs.get_mut(call).expect("every half seen is paired");
            let covered = pair
                .places
                .iter()
                .filter(|&&p| self.covered[p as usize])
                .count();
            let has_call = pair
                .places
                .iter()
                .any(|&p| self.history[p as usize].content_type == ContentType::ToolCall);
            let show = has_call && covered > 0 && covered < pair.places.len();
            let want = if show { pair.places.len() } else { 0 };
            if pair.showing == want {
                continue;
            }
            for &p in &pair.places[..pair.showing] {
                self.shows[p as usize] -= 1;
                recheck.push(p);
            }
            for &p in &pair.places[..want] {
                self.shows[p as usize] += 1;
                recheck.push(p);
            }
            pair.showing = want;
        }
    }

    /// Settles whether the message at `p` is taken out.
    fn mark(&mut self, p: usize) {
        let hidden = self.covered[p] && self.shows[p] == 0;
        if hidden == self.hidden[p] {
            return;
        }
        self.hidden[p] = hidden;
        self.ranks.set(p, !hidden);
        for b in self.cover.of(p) {
            let taken = &mut self.taken[b as usize];
            let p = p as u32;
            // A walk from the start takes places out in order: each goes
            // last.
            if hidden && taken.last().is_none_or(|&q| q < p) {
                taken.push(p);
            } else {
                let at = taken.partition_point(|&q| q < p);
                if hidden && taken.get(at) != Some(&p) {
                    taken.insert(at, p);
                } else if !hidden && taken.get(at) == Some(&p) {
                    taken.remove(at);
                }
            }
            // Whether the block's summary shows changes only when the
            // first place is taken out or the last one put back.
            if taken.len() == usize::from(hidden) {
                let shows = self.blocks[b as usize].active && !taken.is_empty();
                count_anchored(&mut self.anchored, b, shows);
            }
        }
        if self.history[p].is_compress_call() {
            if hidden {
                self.calls_kept.remove(&(p as u32));
            } else {
                self.calls_kept.insert(p as u32);
            }
        }
        self.settle_plain(p);
    }

    /// Counts the block at `b` among those whose summaries show, or not.
    fn reanchor(&mut self, b: usize) {
        let shows = self.blocks[b].active && !self.taken[b].is_empty();
        count_anchored(&mut self.anchored, b as u32, shows);
    }

    /// Puts the message at `p` among the plain places or takes it out, and
    /// so the other halves of its Compress exchange, whose call may have
    /// come or gone.
    fn settle_plain(&mut self, p: usize) {
        let m = &self.history[p];
        let Some(pair) = (m.tool_name == COMPRESS_TOOL)
            .then(|| self.pairs.get(m.tool_call_id.as_str()))
            .flatten()
        else {
            self.plain.set(p, !self.hidden[p]);
            return;
        };
        let call_kept = pair.places.iter().any(|&q| {
            self.history[q as usize].content_type == ContentType::ToolCall
                && !self.hidden[q as usize]
        });
        for &q in &pair.places {
            self.plain
                .set(q as usize, !self.hidden[q as usize] && !call_kept);
        }
    }

    /// Sums the growth of the recorded figures over the pairs within the
    /// history seen, going on from the pairs summed before: figures in
    /// history order have those within a longer history after them.
    pub fn sum_recorded(&mut self) {
        let Some(g) = &mut self.growth else {
            return;
        };
        let seen = &self.history[..self.len];
        for pair in self.recorded.windows(2).skip(g.pairs) {
            if pair[1].at > seen.len() {
                break;
            }
            g.pairs += 1;
            if let Some((p, e)) = gauge::growth((pair[0], pair[1]), seen, self.config) {
                g.sums = (g.sums.0 + p, g.sums.1 + e);
            }
        }
    }

    /// The growth [`HistoryIndex::sum_recorded`] summed, if the figures were in
    /// order.
    pub fn recorded_growth(&self) -> Option<(u64, u64)> {
        self.growth.as_ref().map(|g| g.sums)
    }

    /// Whether a projection reads `recorded` under `config`: the ones this
    /// index was made for.
    pub fn reads(&self, recorded: &[Recorded], config: &Config) -> bool {
        self.recorded == recorded && self.config == config
    }

    /// Whether a Compress call with the id `call` comes before place `at`.
    pub fn called_before(&self, call: &str, at: usize) -> bool {
        self.pairs.get(call).is_some_and(|pair| {
            (pair.places.iter())
                .any(|&q| (q as usize) < at && self.history[q as usize].is_compress_call())
        })
    }

    /// Whether the message `id` comes before place `at`.
    pub fn placed_before(&self, id: &str, at: usize) -> bool {
        (self.place.first(self.history, id)).is_some_and(|p| (p as usize) < at)
    }

    /// The message `id`, if it comes before place `at`.
    pub fn message_before(&self, id: &str, at: usize) -> Option<&'h CoreMessage> {
        let p = self.place.first(self.history, id)? as usize;
        (p < at).then(|| &self.history[p])
    }

    /// Whether `blocks` are the blocks seen, and perhaps more after them.
    /// Blocks are only ever added to a state, so the last one seen tells:
    /// a list that lost blocks and made others in their place has another
    /// block there.
    fn follows(&self, blocks: &[Block]) -> bool {
        self.blocks.len() <= blocks.len()
            && (self.blocks.len().checked_sub(1)).is_none_or(|last| {
                self.blocks[last].id == blocks[last].block_id
                    && self.last == Some(Outline::of(&blocks[last]))
            })
    }

    /// Whether `blocks` are the blocks the last projection saw.
    pub fn has_seen(&self, blocks: &[Block]) -> bool {
        self.blocks.len() == blocks.len() && self.follows(blocks)
    }

    /// Whether a block of `blocks` (those seen, see [`HistoryIndex::has_seen`])
    /// that is active as they stand stands for the message `id`.
    pub fn stood_for(&self, id: &str, blocks: &[Block]) -> bool {
        self.place
            .first(self.history, id)
            .is_some_and(|p| (self.cover.of(p as usize)).any(|b| blocks[b as usize].active))
    }

    /// The place among the blocks seen of the first with the id `id`.
    pub fn block_named(&self, id: &str) -> Option<usize> {
        self.block_at.get(id).map(|&i| i as usize)
    }

    /// The first of `blocks` (those seen, see [`HistoryIndex::has_seen`]) that is
    /// active as they stand and stands for the message `id`.
    pub fn first_over(&self, id: &str, blocks: &[Block]) -> Option<usize> {
        let p = self.place.first(self.history, id)?;
        (self.cover.of(p as usize))
            .map(|b| b as usize)
            .find(|&b| blocks[b].active)
    }

    /// Whether an active block stands for the message `id`.
    pub fn covers(&self, id: &str) -> bool {
        self.covered_count > 0
            && (self.place.first(self.history, id))
                .is_some_and(|p| self.covered.get(p as usize).copied().unwrap_or(false))
    }

    /// The view as [`prune_marked`](super::prune::prune_marked) places it,
    /// with the synced `blocks`: the messages kept and not spent, and each
    /// block's summary, in order. Spent Compress exchanges are not walked:
    /// of the calls kept, those from the end back to the latest that made
    /// an active block tell which stay (it, and the latest failures after
    /// it), and a summary goes where the messages before it, spent or not,
    /// put it. `None` when a Compress message names no call: the view is
    /// then placed from every message kept.
    pub fn plan(&self, blocks: &[Block]) -> Option<Vec<Planned<'h>>> {
        if !self.calls_named {
            return None;
        }
        // The calls whose exchanges stay in view, as `hide::spent_calls`
        // keeps them.
        let stay = hide::staying(
            (self.calls_kept.iter().rev()).map(|&p| self.history[p as usize].tool_call_id.as_str()),
            |call| {
                (self.by_call.get(call)).map(|made| made.iter().any(|&b| blocks[b as usize].active))
            },
        );
        let mut shown: Vec<u32> = self.plain.iter().collect();
        for call in &stay {
            let pair = &self.pairs[call];
            shown.extend(pair.places.iter().filter(|&&q| !self.hidden[q as usize]));
        }
        shown.sort_unstable();
        shown.dedup();

        let slots = self.summary_slots(blocks);
        let mut out = Vec::with_capacity(shown.len() + slots.len());
        let mut slots = slots.into_iter().peekable();
        for p in shown {
            let rank = self.ranks.before(p as usize);
            while let Some((_, b)) = slots.next_if(|&(i, _)| i <= rank) {
                out.push(Planned::Summary(b));
            }
            out.push(Planned::Message(&self.history[p as usize]));
        }
        out.extend(slots.map(|(_, b)| Planned::Summary(b)));
        Some(out)
    }

    /// Where each anchored block's summary goes among the kept messages,
    /// by rank, in order: (rank, block).
    fn summary_slots(&self, blocks: &[Block]) -> Vec<(usize, usize)> {
        // Each summary before the kept message it is placed at: the first
        // at or after its anchor (and the summary before it) that starts an
        // exchange, as the message before it, or the summary, leaves it.
        let mut summaries: Vec<(usize, u64, usize)> = (self.anchored.iter())
            .map(|&b| b as usize)
            .filter_map(|b| Some((self.anchor(b)?, block_number(&blocks[b].block_id), b)))
            .collect();
        summaries.sort_unstable();
        let total = self.ranks.before(self.len);
        let at = |i: usize| &self.history[self.ranks.select(i)];
        let mut slots: Vec<(usize, usize)> = Vec::with_capacity(summaries.len());
        let mut previous: Option<usize> = None;
        for (anchor, _, b) in summaries {
            let mut i = anchor.max(previous.unwrap_or(0));
            while i < total {
                let last = match i {
                    _ if previous == Some(i) => Some(SUMMARY_ROLE),
                    0 => None,
                    _ => Some(at(i - 1).role),
                };
                let ended = previous != Some(i) && i > 0 && self.turn_ended_before(i);
                if exchange::may_stand_between(last, at(i), ended) {
                    break;
                }
                i += 1;
            }
            let i = i.min(total);
            slots.push((i, b));
            previous = Some(i);
        }
        slots
    }

    /// For each message of [`HistoryIndex::kept`], whether an assistant's turn
    /// ended among the messages taken out before it (see
    /// [`exchange::may_stand_between`]).
    pub fn turns_ended(&self) -> Vec<bool> {
        (0..self.ranks.before(self.len))
            .map(|i| i > 0 && self.turn_ended_before(i))
            .collect()
    }

    /// Whether a turn ended among the messages taken out between the kept
    /// messages `i - 1` and `i`.
    fn turn_ended_before(&self, i: usize) -> bool {
        let (from, to) = (self.ranks.select(i - 1) + 1, self.ranks.select(i));
        exchange::turn_ends_in(&self.history[from..to])
    }

    /// For each message seen, whether a block takes it out of the view.
    pub fn hidden(&self) -> &[bool] {
        &self.hidden
    }

    /// The messages of the prefix left in view, in order.
    pub fn kept(&self) -> Vec<&'h CoreMessage> {
        (self.history[..self.len].iter().zip(&self.hidden))
            .filter(|(_, hidden)| !**hidden)
            .map(|(m, _)| m)
            .collect()
    }

    /// For each block, where its summary goes: how many messages are kept
    /// before the first it takes out (`None` for a block not in view).
    pub fn anchors(&self) -> Vec<Option<usize>> {
        (0..self.blocks.len()).map(|b| self.anchor(b)).collect()
    }

    /// [`HistoryIndex::anchors`] of the block at `b`.
    fn anchor(&self, b: usize) -> Option<usize> {
        let first = *self.taken[b].first().filter(|_| self.blocks[b].active)?;
        Some(self.ranks.before(first as usize))
    }
}

#[cfg(test)]
#[path = "history_index_tests.rs"]
mod tests;
