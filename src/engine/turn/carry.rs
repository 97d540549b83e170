//! What one projection of a growing history leaves for the next.
//!
//! A rebuild projects the history up to each recorded Compress call, and
//! each call's history is the one before it with messages appended, over
//! blocks the calls in between made or folded. Projected afresh, every call
//! looked every message's ref up, found every block's messages and pruned
//! the whole history again, so a rebuild grew with the square of its length.
//! A [`Carry`] keeps, by place in the history, what those walks found: the
//! refs held, the blocks standing for each message, what is shown anyway
//! and what is taken out. A projection then redoes only what changed since
//! the last: the new messages, the messages of blocks made, folded or
//! brought in since, and the exchanges and Compress pairs around them. The
//! spent Compress exchanges are placed without being walked, and the growth
//! between the transcript's recorded prompt sizes is summed on from the last
//! call. A carried projection gives what a projection afresh gives over the
//! same history and state (a property test holds the two together).
//!
//! Places rather than ids: a carry is made only for a history whose ids are
//! all there and all different, as a transcript's are.

use std::collections::{BTreeSet, HashMap, HashSet};

use crate::engine::model::config::Config;
use crate::engine::model::exchange;
use crate::engine::model::identity::IdMap;
use crate::engine::model::message::{COMPRESS_TOOL, ContentType, CoreMessage, Role};
use crate::engine::model::name::Name;
use crate::engine::model::refs::{self, Held};
use crate::engine::model::state::{Block, CompressionState};
use crate::engine::model::summary::SUMMARY_ROLE;
use crate::engine::pressure::gauge::{self, Recorded};
use crate::engine::turn::hide;
use crate::engine::turn::prune::block_number;

/// What the projections of a history's prefixes found so far (see the
/// module's documentation).
#[derive(Debug)]
pub struct Carry<'h> {
    /// The whole history the prefixes are cut from.
    history: &'h [CoreMessage],
    /// The prompt sizes the transcript records, and the config they are
    /// weighed under: the same for every prefix.
    recorded: &'h [Recorded],
    config: &'h Config,
    /// Each message's place, by id.
    place: IdMap<'h, u32>,
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
    cover: Vec<Vec<u32>>,
    /// For each place seen, whether an active block stands for it.
    covered: Vec<bool>,
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
    /// The places seen and not taken out, in order, and counted.
    kept: BTreeSet<u32>,
    ranks: Fenwick,
    /// Whether every Compress message names its call: the exchanges that
    /// leave the view as spent are then told apart by call (see
    /// [`Carry::plan`]).
    calls_named: bool,
    /// The Compress calls kept, by place.
    calls_kept: BTreeSet<u32>,
    /// The places kept that are not half of a Compress exchange whose call
    /// is kept: what stays in view whichever calls are spent.
    plain: BTreeSet<u32>,
    /// For each block, the places it stands for that are taken out.
    taken: Vec<BTreeSet<u32>>,
    /// The active blocks that take out a place: those whose summaries the
    /// view shows.
    anchored: BTreeSet<u32>,
    /// The growth the transcript's recorded figures show within the
    /// history seen (see [`Carry::sum_recorded`]).
    growth: Option<Growth>,
}

/// Provider and estimated growth summed over the first pairs of the
/// carry's recorded figures.
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

/// Counts of kept places, summed over any first stretch.
#[derive(Debug)]
struct Fenwick(Vec<i32>);

impl Fenwick {
    fn new(n: usize) -> Fenwick {
        Fenwick(vec![0; n + 1])
    }

    fn add(&mut self, at: usize, d: i32) {
        let mut i = at + 1;
        while i < self.0.len() {
            self.0[i] += d;
            i += i & i.wrapping_neg();
        }
    }

    /// The place of the counted one `k` others come before.
    fn select(&self, k: usize) -> usize {
        let n = self.0.len() - 1;
        let (mut at, mut left) = (0, k as i32);
        let mut step = n.checked_ilog2().map_or(0, |b| 1 << b);
        while step > 0 {
            if at + step <= n && self.0[at + step] <= left {
                at += step;
                left -= self.0[at];
            }
            step >>= 1;
        }
        at
    }

    /// How many are counted before `at`.
    fn before(&self, at: usize) -> usize {
        let (mut i, mut sum) = (at, 0);
        while i > 0 {
            sum += self.0[i];
            i -= i & i.wrapping_neg();
        }
        sum as usize
    }
}

/// One entry of the view [`Carry::plan`] places.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Planned<'h> {
    /// A message of the history.
    Message(&'h CoreMessage),
    /// The summary of the block at this place in the state's blocks.
    Summary(usize),
}

/// Refs handed out by [`Carry::advance`], as [`refs::assign`] counts them.
#[derive(Debug, Clone, Copy)]
pub struct Advanced {
    /// Refs handed out to the new messages.
    pub new: usize,
    /// Messages of the prefix without a ref.
    pub unnumbered: usize,
}

impl<'h> Carry<'h> {
    /// A carry for prefixes of `history`, whose projections read the
    /// `recorded` prompt sizes under `config`; `None` when an id is missing
    /// or repeated, where only ids can tell messages apart.
    pub fn new(
        history: &'h [CoreMessage],
        recorded: &'h [Recorded],
        config: &'h Config,
    ) -> Option<Carry<'h>> {
        let mut place = IdMap::with_capacity_and_hasher(history.len(), Default::default());
        for (i, m) in history.iter().enumerate() {
            if m.id.is_empty() || place.insert(m.id.as_str(), i as u32).is_some() {
                return None;
            }
        }
        let n = history.len();
        // Figures out of order are left to the gauge, which reads them all.
        let growth = recorded.is_sorted_by_key(|r| r.at).then_some(Growth {
            pairs: 0,
            sums: (0, 0),
        });
        Some(Carry {
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
            cover: vec![Vec::new(); n],
            covered: Vec::with_capacity(n),
            spans: Vec::with_capacity(n),
            task: None,
            pairs: IdMap::default(),
            span_shows: Vec::with_capacity(n),
            shows: Vec::with_capacity(n),
            hidden: Vec::with_capacity(n),
            kept: BTreeSet::new(),
            ranks: Fenwick::new(n),
            calls_named: history
                .iter()
                .all(|m| m.tool_name != COMPRESS_TOOL || !m.tool_call_id.is_empty()),
            calls_kept: BTreeSet::new(),
            plain: BTreeSet::new(),
            taken: Vec::new(),
            anchored: BTreeSet::new(),
            growth,
        })
    }

    /// Whether this carry is for `history`.
    pub fn serves(&self, history: &[CoreMessage]) -> bool {
        std::ptr::eq(self.history.as_ptr(), history.as_ptr()) && history.len() <= self.history.len()
    }

    /// Brings the carry to the prefix of `n` messages under `state`: refs
    /// for the new messages (from `next` on, `protected` ones blocked), the
    /// blocks marked active as a projection syncs them, token figures of
    /// refs no message holds dropped, and what is covered, shown anyway
    /// and taken out brought up to date. A state whose blocks are not the
    /// ones seen before, or a shorter prefix, starts the carry over.
    pub fn advance(
        &mut self,
        state: &mut CompressionState,
        n: usize,
        next: u32,
        protected: impl Fn(&CoreMessage) -> bool,
    ) -> Advanced {
        // Blocks are only ever added; a list that lost some (the copy a
        // call was answered on, let go) starts the carry over.
        let same_blocks = self.follows(&state.blocks);
        // The refs the carry handed out are in the state (a call's view
        // keeps them), or it is another state.
        let same_refs = self.refs_left == state.message_refs.len();
        if n < self.len || !same_blocks || !same_refs {
            *self = Carry::new(self.history, self.recorded, self.config)
                .expect("the history was fit for a carry");
        }
        let (new, unnumbered) = refs::assign_more(
            &mut state.message_refs,
            &self.history[self.len..n],
            next,
            protected,
            &mut self.held,
        );
        self.unnumbered += unnumbered;
        self.refs_left = state.message_refs.len();
        if !self.retained {
            state.token_snapshot.retain(|r, _| self.held.holds(r));
            self.retained = true;
        }

        let mut dirty: Vec<u32> = Vec::new();
        let mut spans_to_check: Vec<(u32, u32)> = Vec::new();
        self.extend_to(n, &mut dirty, &mut spans_to_check);
        self.register_blocks(state, &mut dirty);
        // Active as a projection syncs them: not folded by another, and
        // standing for a message of the prefix.
        let mut flipped = Vec::new();
        for (i, (seen, b)) in self.blocks.iter_mut().zip(&mut state.blocks).enumerate() {
            let active = !seen.absorbed && (seen.first as usize) < n;
            b.active = active;
            if active != seen.active {
                seen.active = active;
                flipped.push(i);
                dirty.extend(
                    (b.effective_message_ids.iter())
                        .filter_map(|id| self.place.get(id.as_str()).copied())
                        .filter(|&p| (p as usize) < n),
                );
            }
        }
        for b in flipped {
            self.reanchor(b);
        }
        // What is covered, and which exchanges and pairs to look at again.
        let mut changed: Vec<u32> = Vec::new();
        dirty.sort_unstable();
        dirty.dedup();
        let old = self.len;
        for &p in &dirty {
            let c = self.cover[p as usize]
                .iter()
                .any(|&b| self.blocks[b as usize].active);
            if c != self.covered[p as usize] || p as usize >= old {
                self.covered[p as usize] = c;
                changed.push(p);
            }
        }
        self.len = n;
        for &p in &changed {
            spans_to_check.push(self.spans[p as usize]);
        }
        let mut recheck: Vec<u32> = changed.clone();
        self.show_reasoning(spans_to_check, &mut recheck);
        self.show_pairs(&changed, &mut recheck);
        recheck.sort_unstable();
        recheck.dedup();
        for p in recheck {
            self.mark(p as usize);
        }
        Advanced {
            new,
            unnumbered: self.unnumbered,
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
            self.kept.insert(p as u32);
            self.ranks.add(p, 1);
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
            let mut taken = BTreeSet::new();
            for id in &b.effective_message_ids {
                let Some(&p) = self.place.get(id.as_str()) else {
                    continue;
                };
                first = first.min(p);
                let list = &mut self.cover[p as usize];
                if list.last() != Some(&(i as u32)) {
                    list.push(i as u32);
                }
                if (p as usize) < self.len {
                    dirty.push(p);
                    if self.hidden[p as usize] {
                        taken.insert(p);
                    }
                }
            }
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
        if hidden {
            self.kept.remove(&(p as u32));
            self.ranks.add(p, -1);
        } else {
            self.kept.insert(p as u32);
            self.ranks.add(p, 1);
        }
        for &b in &self.cover[p] {
            let taken = &mut self.taken[b as usize];
            if hidden {
                taken.insert(p as u32);
            } else {
                taken.remove(&(p as u32));
            }
        }
        for i in 0..self.cover[p].len() {
            self.reanchor(self.cover[p][i] as usize);
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
        if self.blocks[b].active && !self.taken[b].is_empty() {
            self.anchored.insert(b as u32);
        } else {
            self.anchored.remove(&(b as u32));
        }
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
            if self.hidden[p] {
                self.plain.remove(&(p as u32));
            } else {
                self.plain.insert(p as u32);
            }
            return;
        };
        let call_kept = pair.places.iter().any(|&q| {
            self.history[q as usize].content_type == ContentType::ToolCall
                && !self.hidden[q as usize]
        });
        for &q in &pair.places {
            if self.hidden[q as usize] || call_kept {
                self.plain.remove(&q);
            } else {
                self.plain.insert(q);
            }
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

    /// The growth [`Carry::sum_recorded`] summed, if the figures were in
    /// order.
    pub fn recorded_growth(&self) -> Option<(u64, u64)> {
        self.growth.as_ref().map(|g| g.sums)
    }

    /// Whether a projection reads `recorded` under `config`: the ones this
    /// carry was made for.
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
        self.place.get(id).is_some_and(|&p| (p as usize) < at)
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

    /// Whether a block of `blocks` (those seen, see [`Carry::has_seen`])
    /// that is active as they stand stands for the message `id`.
    pub fn stood_for(&self, id: &str, blocks: &[Block]) -> bool {
        self.place.get(id).is_some_and(|&p| {
            self.cover[p as usize]
                .iter()
                .any(|&b| blocks[b as usize].active)
        })
    }

    /// The place among the blocks seen of the first with the id `id`.
    pub fn block_named(&self, id: &str) -> Option<usize> {
        self.block_at.get(id).map(|&i| i as usize)
    }

    /// The first of `blocks` (those seen, see [`Carry::has_seen`]) that is
    /// active as they stand and stands for the message `id`.
    pub fn first_over(&self, id: &str, blocks: &[Block]) -> Option<usize> {
        let p = *self.place.get(id)?;
        (self.cover[p as usize].iter())
            .map(|&b| b as usize)
            .find(|&b| blocks[b].active)
    }

    /// Whether an active block stands for the message `id`.
    pub fn covers(&self, id: &str) -> bool {
        self.place
            .get(id)
            .is_some_and(|&p| self.covered.get(p as usize).copied().unwrap_or(false))
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
        let mut shown: Vec<u32> = self.plain.iter().copied().collect();
        for call in &stay {
            let pair = &self.pairs[call];
            shown.extend(pair.places.iter().filter(|&&q| !self.hidden[q as usize]));
        }
        shown.sort_unstable();
        shown.dedup();

        // Each summary before the kept message it is placed at: the first
        // at or after its anchor (and the summary before it) that starts an
        // exchange, as the message before it, or the summary, leaves it.
        let mut summaries: Vec<(usize, u64, usize)> = (self.anchored.iter())
            .map(|&b| b as usize)
            .filter_map(|b| Some((self.anchor(b)?, block_number(&blocks[b].block_id), b)))
            .collect();
        summaries.sort_unstable();
        let total = self.kept.len();
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

    /// For each message of [`Carry::kept`], whether an assistant's turn
    /// ended among the messages taken out before it (see
    /// [`exchange::may_stand_between`]).
    pub fn turns_ended(&self) -> Vec<bool> {
        (0..self.kept.len())
            .map(|i| i > 0 && self.turn_ended_before(i))
            .collect()
    }

    /// Whether a turn ended among the messages taken out between the kept
    /// messages `i - 1` and `i`.
    fn turn_ended_before(&self, i: usize) -> bool {
        let (from, to) = (self.ranks.select(i - 1) + 1, self.ranks.select(i));
        exchange::turn_ends_in(&self.history[from..to])
    }

    /// The messages of the prefix left in view, in order.
    pub fn kept(&self) -> Vec<&'h CoreMessage> {
        self.kept
            .iter()
            .map(|&p| &self.history[p as usize])
            .collect()
    }

    /// For each block, where its summary goes: how many messages are kept
    /// before the first it takes out (`None` for a block not in view).
    pub fn anchors(&self) -> Vec<Option<usize>> {
        (0..self.blocks.len()).map(|b| self.anchor(b)).collect()
    }

    /// [`Carry::anchors`] of the block at `b`.
    fn anchor(&self, b: usize) -> Option<usize> {
        let first = *self.taken[b].first().filter(|_| self.blocks[b].active)?;
        Some(self.ranks.before(first as usize))
    }
}

#[cfg(test)]
#[path = "carry_tests.rs"]
mod tests;
