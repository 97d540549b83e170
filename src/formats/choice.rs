//! Which branch of a Claude Code log is the conversation.
//!
//! A log is a tree of records. The host goes on with one branch of it when
//! it resumes the session, and so does noa: the branch that ends at the
//! newest message of the conversation. A local command (`/export`,
//! `/model`) is the host's own business: it writes the command, its output
//! and a caveat before them into the log, and tells the model not to answer
//! them. Those records do not make a branch the current one: on logs from
//! mid-2025 they hang off the session's first record, and following the
//! parent links from the log's last record would read a conversation of
//! one message.
//!
//! Most logs are one branch with its side branches (parallel tool
//! results), read from the last record as before, at no extra cost. Only
//! when some record is left off that branch are the others looked at: each
//! is as new as the newest message of the conversation on it. A rewound
//! branch (one that ended before the chosen one left it) is passed over
//! quietly; one that grew beside the chosen one is warned of, naming its
//! last record, which `--leaf` can choose instead.

use std::cmp::Ordering;

use super::{Line, ReadError, Turn, choose_branch, parent_links};
use crate::engine::{IdMap, IdSet};
use crate::formats::BranchChoice;

/// The branch chosen: its turns, the turn it ends at, how it was chosen,
/// and the warning, when another branch grew beside it.
pub(super) struct Choice {
    pub(super) chosen: Vec<bool>,
    pub(super) leaf: Option<usize>,
    pub(super) about: BranchChoice,
    pub(super) warning: Option<(usize, String)>,
}

/// Chooses the conversation among `turns` (the conversation records since
/// the last compaction), or the branch ending at the record `asked` names.
pub(super) fn choose(
    name: &str,
    turns: &[Turn],
    lines: &[&Line],
    boundaries: &IdSet<'_>,
    asked: Option<&str>,
) -> Result<Choice, ReadError> {
    let Some(last) = turns.len().checked_sub(1) else {
        return Ok(Choice {
            chosen: Vec::new(),
            leaf: None,
            about: BranchChoice::default(),
            warning: None,
        });
    };
    if let Some(uuid) = asked {
        let leaf = asked_turn(name, uuid, turns, lines, boundaries)?;
        let chosen = choose_branch(turns, lines, boundaries, leaf);
        let about = BranchChoice {
            line: turns[leaf].line,
            asked: true,
            seen: any_seen(turns, &chosen),
            ..BranchChoice::default()
        };
        return Ok(Choice {
            chosen,
            leaf: Some(leaf),
            about,
            warning: None,
        });
    }
    let chosen = choose_branch(turns, lines, boundaries, last);
    if chosen.iter().all(|&c| c) {
        let about = BranchChoice {
            line: turns[last].line,
            last: true,
            seen: any_seen(turns, &chosen),
            ..BranchChoice::default()
        };
        return Ok(Choice {
            chosen,
            leaf: Some(last),
            about,
            warning: None,
        });
    }
    Ok(among_branches(name, turns, lines, boundaries, chosen))
}

/// Whether any chosen turn is a message of the conversation.
fn any_seen(turns: &[Turn], chosen: &[bool]) -> bool {
    turns.iter().zip(chosen).any(|(t, &c)| c && t.seen())
}

/// The turn `--leaf` names: the record with that uuid, or the nearest
/// conversation record its parent links lead back to.
fn asked_turn(
    name: &str,
    uuid: &str,
    turns: &[Turn],
    lines: &[&Line],
    boundaries: &IdSet<'_>,
) -> Result<usize, ReadError> {
    let links = Links::new(turns, lines, boundaries);
    let found = match links.position.get(uuid) {
        Some(&at) => Some(at),
        None if links.parents.contains_key(uuid) => match links.above(Some(uuid)) {
            Above::Turn(at) => Some(at),
            Above::Boundary | Above::Nothing => None,
        },
        None => None,
    };
    found.ok_or_else(|| ReadError::Shape {
        name: name.to_string(),
        why: format!(
            "--leaf {uuid}: no conversation record since the log's last compaction is, or leads \
             to, a record with that uuid (`project -v` names the branch read)"
        ),
    })
}

/// Where a record's parent links lead, through records that are not turns.
#[derive(Clone, Copy)]
enum Above {
    Turn(usize),
    /// A compaction's boundary: the branch's root.
    Boundary,
    /// No record, or links that run in a circle.
    Nothing,
}

/// Each turn's uuid, every record's parent link, and the compactions'
/// boundaries: what following links from a turn needs.
struct Links<'a, 'b> {
    position: IdMap<'a, usize>,
    parents: IdMap<'a, Option<&'a str>>,
    boundaries: &'b IdSet<'a>,
}

impl<'a, 'b> Links<'a, 'b> {
    fn new(turns: &[Turn<'a>], lines: &[&'a Line<'a>], boundaries: &'b IdSet<'a>) -> Self {
        // A uuid two turns share stands for the later one, as in the walk.
        let position = (turns.iter().enumerate())
            .filter_map(|(i, t)| Some((t.uuid?, i)))
            .collect();
        Links {
            position,
            parents: parent_links(lines),
            boundaries,
        }
    }

    /// Where the link `parent` leads.
    fn above(&self, mut parent: Option<&'a str>) -> Above {
        let mut steps = 0;
        while let Some(p) = parent {
            if self.boundaries.contains(p) {
                return Above::Boundary;
            }
            if let Some(&at) = self.position.get(p) {
                return Above::Turn(at);
            }
            match self.parents.get(p) {
                // More steps than records: the links run in a circle.
                Some(&up) if steps <= self.parents.len() => parent = up,
                _ => break,
            }
            steps += 1;
        }
        Above::Nothing
    }

    /// Each turn's parent turn, as [`choose_branch`] walks: through records
    /// that are not turns, to none at a compaction's boundary, and to the
    /// turn before it in the file when its links lead nowhere. What a run
    /// of records that are not turns leads to is found once for them all.
    fn up(&self, turns: &[Turn<'a>]) -> Vec<Option<usize>> {
        let mut known: IdMap<'a, Above> = IdMap::default();
        let mut up = Vec::with_capacity(turns.len());
        for (i, t) in turns.iter().enumerate() {
            let mut path = Vec::new();
            let mut parent = t.parent;
            let found = loop {
                let Some(p) = parent else {
                    break Above::Nothing;
                };
                if let Some(&a) = known.get(p) {
                    break a;
                }
                if self.boundaries.contains(p) {
                    break Above::Boundary;
                }
                if let Some(&at) = self.position.get(p) {
                    break Above::Turn(at);
                }
                let Some(&next) = self.parents.get(p) else {
                    break Above::Nothing;
                };
                // Marked before it is left: coming back to it is a circle.
                known.insert(p, Above::Nothing);
                path.push(p);
                parent = next;
            };
            for p in path {
                known.insert(p, found);
            }
            up.push(match found {
                Above::Turn(at) => Some(at),
                Above::Boundary => None,
                Above::Nothing => i.checked_sub(1),
            });
        }
        up
    }
}

/// `value(i, v)` for every turn `i`, `v` its parent turn's value (`None`
/// at a root), each parent's found before its children's; links that run
/// in a circle are cut where a walk comes back to itself.
fn down_from_roots<T: Copy + Default>(
    up: &[Option<usize>],
    value: impl Fn(usize, Option<T>) -> T,
) -> Vec<T> {
    let mut out = vec![T::default(); up.len()];
    let mut done = vec![false; up.len()];
    let mut on_path = vec![false; up.len()];
    let mut path = Vec::new();
    for start in 0..up.len() {
        let mut i = start;
        let mut above = loop {
            if done[i] {
                break Some(out[i]);
            }
            if on_path[i] {
                break None;
            }
            on_path[i] = true;
            path.push(i);
            match up[i] {
                Some(p) => i = p,
                None => break None,
            }
        };
        while let Some(j) = path.pop() {
            out[j] = value(j, above);
            done[j] = true;
            on_path[j] = false;
            above = Some(out[j]);
        }
    }
    out
}

/// Which of two turns' times is later, by their `timestamp`s: a turn
/// without one is older than any with one. Times are read as Claude Code
/// writes them (UTC, `2025-06-14T11:00:00.123Z`), fractions of any length.
fn later(a: Option<&str>, b: Option<&str>) -> Ordering {
    match (a, b) {
        (Some(a), Some(b)) => {
            let (wa, fa) = time_parts(a);
            let (wb, fb) = time_parts(b);
            wa.cmp(wb).then_with(|| {
                let digits = |f: &str, k: usize| f.as_bytes().get(k).copied().unwrap_or(b'0');
                (0..fa.len().max(fb.len()))
                    .map(|k| digits(fa, k).cmp(&digits(fb, k)))
                    .find(|o| o.is_ne())
                    .unwrap_or(Ordering::Equal)
            })
        }
        (a, b) => a.is_some().cmp(&b.is_some()),
    }
}

/// A time's whole seconds and the digits of its fraction.
fn time_parts(t: &str) -> (&str, &str) {
    let t = t.trim_end_matches('Z');
    match t.split_once('.') {
        Some((whole, rest)) => {
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            (whole, &rest[..digits])
        }
        None => (t, ""),
    }
}

/// Which of two turns is newer, by time and then by place in the file.
fn newer_turn(turns: &[Turn], a: usize, b: usize) -> Ordering {
    later(turns[a].timestamp(), turns[b].timestamp()).then(a.cmp(&b))
}

/// What is known of each turn's branch, from its root down to it.
#[derive(Clone, Copy, Default)]
struct Reach {
    /// Records from the root.
    depth: usize,
    /// Its newest message of the conversation.
    newest_seen: Option<usize>,
}

/// How far each turn is from its root, and the newest message of the
/// conversation on the way to it.
fn reach_of(turns: &[Turn], up: &[Option<usize>]) -> Vec<Reach> {
    down_from_roots(up, |i, above: Option<Reach>| {
        let above = above.unwrap_or_default();
        let own = turns[i].seen().then_some(i);
        Reach {
            depth: above.depth + 1,
            newest_seen: match (own, above.newest_seen) {
                (Some(a), Some(b)) => Some(match newer_turn(turns, a, b) {
                    Ordering::Less => b,
                    _ => a,
                }),
                (a, b) => a.or(b),
            },
        }
    })
}

/// Whether each turn is another's parent.
fn has_child(up: &[Option<usize>]) -> Vec<bool> {
    let mut has_child = vec![false; up.len()];
    for (i, u) in up.iter().enumerate() {
        if let Some(p) = *u
            && p != i
        {
            has_child[p] = true;
        }
    }
    has_child
}

/// The leaves the chosen branch leaves off, by what became of them.
struct LeavesOff {
    /// Leaves of branches the model saw, passed by.
    seen: usize,
    /// Leaves of branches it never saw.
    unseen: usize,
    /// Seen branches that grew beside the chosen one.
    live: Vec<usize>,
}

impl LeavesOff {
    fn sort(passed: &Passed, off: impl Iterator<Item = usize>) -> LeavesOff {
        let mut leaves = LeavesOff {
            seen: 0,
            unseen: 0,
            live: Vec::new(),
        };
        for other in off {
            if !passed.seen_off[other] {
                leaves.unseen += 1;
                continue;
            }
            leaves.seen += 1;
            if passed.grew_beside(other) {
                leaves.live.push(other);
            }
        }
        leaves
    }
}

/// Chooses among the branches when the one from the last turn leaves some
/// turns off (`from_last`): the branch whose newest message of the
/// conversation is newest; on a tie the one from the last turn, then the
/// later leaf.
fn among_branches(
    name: &str,
    turns: &[Turn],
    lines: &[&Line],
    boundaries: &IdSet<'_>,
    from_last: Vec<bool>,
) -> Choice {
    let last = turns.len() - 1;
    let up = Links::new(turns, lines, boundaries).up(turns);
    let reach = reach_of(turns, &up);
    let has_child = has_child(&up);
    // The last turn's branch, and the leaves it leaves off.
    let mut leaves = vec![last];
    leaves.extend((0..turns.len()).filter(|&i| !from_last[i] && !has_child[i] && i != last));
    let by_rank = |&a: &usize, &b: &usize| {
        let seen = match (reach[a].newest_seen, reach[b].newest_seen) {
            (Some(x), Some(y)) => newer_turn(turns, x, y),
            (x, y) => x.is_some().cmp(&y.is_some()),
        };
        seen.then((a == last).cmp(&(b == last))).then(a.cmp(&b))
    };
    let leaf = leaves.iter().copied().max_by(by_rank).unwrap_or(last);
    let chosen = match leaf == last {
        true => from_last,
        false => choose_branch(turns, lines, boundaries, leaf),
    };
    let passed = Passed::new(turns, &up, &chosen, leaf);
    let off = LeavesOff::sort(&passed, leaves.iter().copied().filter(|&l| !chosen[l]));
    let live = off.live;
    let warning = live
        .iter()
        .copied()
        .max_by(by_rank)
        .map(|other| live_warning(name, &turns[other], reach[other].depth, live.len() - 1));
    let about = BranchChoice {
        line: turns[leaf].line,
        asked: false,
        last: leaf == last,
        seen: any_seen(turns, &chosen),
        passed_seen: off.seen,
        passed_unseen: off.unseen,
    };
    Choice {
        chosen,
        leaf: Some(leaf),
        about,
        warning,
    }
}

/// What telling the branches passed over apart needs.
struct Passed {
    /// Whether a turn's branch, from it up to the chosen turns, holds a
    /// message of the conversation.
    seen_off: Vec<bool>,
    /// The turn where a turn's branch meets the chosen branch's own chain
    /// (not its side branches), if it does.
    meets: Vec<Option<usize>>,
    /// For each turn on the chosen chain, the first place in the file of
    /// the turns below it on that chain; `usize::MAX` elsewhere and at the
    /// leaf.
    below: Vec<usize>,
    /// The first place in the file of any turn on the chosen chain.
    first: usize,
}

impl Passed {
    fn new(turns: &[Turn], up: &[Option<usize>], chosen: &[bool], leaf: usize) -> Self {
        let mut below = vec![usize::MAX; turns.len()];
        let mut on_chain = vec![false; turns.len()];
        let (mut at, mut first) = (Some(leaf), usize::MAX);
        while let Some(i) = at.filter(|&i| !on_chain[i]) {
            on_chain[i] = true;
            below[i] = first;
            first = first.min(i);
            at = up[i];
        }
        let seen_off = down_from_roots(up, |i, above: Option<bool>| {
            !chosen[i] && (turns[i].seen() || above.unwrap_or(false))
        });
        let meets = down_from_roots(up, |i, above: Option<Option<usize>>| match on_chain[i] {
            true => Some(i),
            false => above.flatten(),
        });
        Passed {
            seen_off,
            meets,
            below,
            first,
        }
    }

    /// Whether the branch ending at `other` grew beside the chosen one
    /// rather than being rewound: its leaf comes later in the file than a
    /// turn of the chosen chain it does not share.
    fn grew_beside(&self, other: usize) -> bool {
        let after = match self.meets[other] {
            Some(fork) => self.below[fork],
            None => self.first,
        };
        other > after
    }
}

/// The warning for a branch that grew beside the one read: its last
/// record, its length, and how to read it instead.
fn live_warning(name: &str, leaf: &Turn, depth: usize, more: usize) -> (usize, String) {
    let line = leaf.line;
    let (record, instead) = match leaf.uuid {
        Some(u) => (
            format!("record {u}"),
            format!("; `--leaf {u}` reads it instead"),
        ),
        None => ("a record without a uuid".to_string(), String::new()),
    };
    let more = match more {
        0 => String::new(),
        n => format!(" ({n} more such branch(es) besides)"),
    };
    (
        line,
        format!(
            "{name}:{line}: another branch grew beside the conversation read{more}: it ends here, \
             at {record}, {depth} records long; the newest was read{instead}"
        ),
    )
}

#[cfg(test)]
#[path = "choice_tests.rs"]
mod tests;
