//! Resolving the ends of a requested range against the view the model saw.

use std::cell::OnceCell;

use crate::engine::model::identity::{IdMap, IdSet};
use crate::engine::turn::HistoryIndex;

use crate::engine::model::message::CoreMessage;
use crate::engine::model::name::Name;
use crate::engine::model::refs::{Boundary, parse_boundary};
use crate::engine::model::state::{Block, CompressionState};
use crate::engine::model::summary::{block_of_summary, summary_id};

/// Why an end did not resolve; each kind gets its own corrective text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unresolved {
    /// Not a ref or block id at all.
    Invalid(String),
    /// A ref or block this session never had.
    Unknown(String),
    /// Known, but already compressed or otherwise out of the view.
    Consumed(String),
}

impl Unresolved {
    /// The text shown to the model.
    pub fn message(&self) -> &str {
        match self {
            Unresolved::Invalid(m) | Unresolved::Unknown(m) | Unresolved::Consumed(m) => m,
        }
    }
}

/// A range resolved to view indices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// First index, inclusive.
    pub start: usize,
    /// Last index, inclusive.
    pub end: usize,
    /// Whether either end named a block.
    pub names_block: bool,
    /// Notes about ends that were moved.
    pub warnings: Vec<String>,
}

/// The view and the state a call's ranges resolve against, indexed once,
/// so each end and each message a call looks at costs a hash lookup rather
/// than a scan of the view or of the blocks: a call stays linear however
/// many ranges it holds and however many blocks the session has made.
pub struct Resolver<'a> {
    state: &'a CompressionState,
    /// Each view message's index by id (the first, should an id repeat).
    position: IdMap<'a, usize>,
    /// Each block by id (the first, should an id repeat), gathered the
    /// first time one is looked up, unless a rebuild's index knows them.
    blocks: OnceCell<IdMap<'a, &'a Block>>,
    /// A rebuild's index that has seen the state's blocks.
    index: Option<&'a HistoryIndex<'a>>,
    /// The view's messages an active block stands for: what a call asks of
    /// the messages it takes, which are all in view.
    covered: IdSet<'a>,
    /// For each message an active block stands for, that block (see
    /// [`owners`]): asked only for an end the view does not show, so built
    /// the first time one is, not for every call over a long session.
    message_owner: OnceCell<IdMap<'a, &'a Block>>,
    /// The same for each block an active block absorbed.
    block_owner: OnceCell<IdMap<'a, &'a Block>>,
}

impl<'a> Resolver<'a> {
    /// Indexes `view` and `state`. A rebuild's `index`, when it has seen
    /// the state's blocks, tells which messages of the view they stand for,
    /// where otherwise every message of the active blocks is looked for in
    /// the view.
    pub fn new(
        view: &'a [CoreMessage],
        state: &'a CompressionState,
        index: Option<&'a HistoryIndex<'a>>,
    ) -> Self {
        let mut position = IdMap::with_capacity_and_hasher(view.len(), Default::default());
        for (i, m) in view.iter().enumerate() {
            position.entry(m.id.as_str()).or_insert(i);
        }
        let index = index.filter(|c| c.has_seen(&state.blocks));
        let covered = match index {
            Some(c) => view
                .iter()
                .filter(|m| c.stood_for(&m.id, &state.blocks))
                .map(|m| m.id.as_str())
                .collect(),
            None => state
                .blocks
                .iter()
                .filter(|b| b.active)
                .flat_map(|b| &b.effective_message_ids)
                .filter_map(|id| position.get_key_value(id.as_str()).map(|(k, _)| *k))
                .collect(),
        };
        Resolver {
            state,
            position,
            blocks: OnceCell::new(),
            index,
            covered,
            message_owner: OnceCell::new(),
            block_owner: OnceCell::new(),
        }
    }

    /// Resolves `start`..`end` (refs or block ids) to view indices. Reversed
    /// ends are swapped: the model meant a span, whichever way round it
    /// wrote it.
    pub fn resolve(&self, start: &str, end: &str) -> Result<Resolved, Unresolved> {
        let mut warnings = Vec::new();
        let (a, a_block) = self.resolve_end(start, &mut warnings)?;
        let (b, b_block) = self.resolve_end(end, &mut warnings)?;
        Ok(Resolved {
            start: a.min(b),
            end: a.max(b),
            names_block: a_block || b_block,
            warnings,
        })
    }

    fn resolve_end(
        &self,
        end: &str,
        warnings: &mut Vec<String>,
    ) -> Result<(usize, bool), Unresolved> {
        match parse_boundary(end) {
            None => Err(Unresolved::Invalid(format!(
                "\"{}\" is neither a message ref (m followed by digits) nor a block id (b followed by digits)",
                end.trim()
            ))),
            Some(Boundary::Message(r)) => self.end_at_message(&r, warnings),
            Some(Boundary::Block(id)) => self.end_at_block(&id, warnings),
        }
    }

    /// [`Self::resolve_end`] of a message ref `r`: where it stands in the
    /// view, or where the shown block that covers it does.
    fn end_at_message(
        &self,
        r: &str,
        warnings: &mut Vec<String>,
    ) -> Result<(usize, bool), Unresolved> {
        let Some(raw) = self.state.message_refs.id_of(r) else {
            return Err(Unresolved::Unknown(format!(
                "{r} does not exist in this session"
            )));
        };
        if let Some(i) = self.position(raw) {
            return Ok((i, false));
        }
        let owners = self
            .message_owner
            .get_or_init(|| owners(self.state, |b| &b.effective_message_ids));
        let missing = || format!("{r} is not in the current view (already compressed or hidden)");
        self.snap_to_owner(owners, raw, (r, "covers"), missing, warnings)
    }

    /// [`Self::resolve_end`] of a block id: where its summary stands in the
    /// view, or where the shown block that absorbed it does.
    fn end_at_block(
        &self,
        id: &str,
        warnings: &mut Vec<String>,
    ) -> Result<(usize, bool), Unresolved> {
        let Some(block) = self.block(id) else {
            return Err(Unresolved::Unknown(format!(
                "block {id} does not exist in this session"
            )));
        };
        if let Some(i) = self.position(&summary_id(id)) {
            return Ok((i, true));
        }
        if block.active {
            return Err(Unresolved::Consumed(format!(
                "block {id} is active but its summary is not in the view"
            )));
        }
        let owners = self
            .block_owner
            .get_or_init(|| owners(self.state, |b| &b.direct_block_ids));
        let missing = || format!("block {id} was already absorbed into a higher tier");
        self.snap_to_owner(owners, id, (id, "absorbed"), missing, warnings)
    }

    /// The view index of the message with `id`.
    fn position(&self, id: &str) -> Option<usize> {
        self.position.get(id).copied()
    }

    /// An end at `id`, which the view no longer shows, snapped to the shown
    /// block among `owners` that holds it, as `warnings` then say (`name`
    /// as the call wrote it, and how the block holds it); `missing` says
    /// why when no such block is shown.
    fn snap_to_owner(
        &self,
        owners: &IdMap<'a, &'a Block>,
        id: &str,
        (name, holds): (&str, &str),
        missing: impl FnOnce() -> String,
        warnings: &mut Vec<String>,
    ) -> Result<(usize, bool), Unresolved> {
        let shown = owners
            .get(id)
            .and_then(|&o| Some((o, self.position(&summary_id(&o.block_id))?)));
        let (o, i) = shown.ok_or_else(|| Unresolved::Consumed(missing()))?;
        warnings.push(format!(
            "Snapped {name} to block {}, which {holds} it.",
            o.block_id
        ));
        Ok((i, true))
    }

    /// The block with this id.
    fn block(&self, id: &str) -> Option<&'a Block> {
        let blocks = &self.state.blocks;
        if let Some(c) = self.index {
            return c.block_named(id).map(|i| &blocks[i]);
        }
        let by_id = self.blocks.get_or_init(|| {
            let mut by_id = IdMap::with_capacity_and_hasher(blocks.len(), Default::default());
            for b in blocks {
                by_id.entry(b.block_id.as_str()).or_insert(b);
            }
            by_id
        });
        by_id.get(id).copied()
    }

    /// The block a view message stands for, if it is a rendered summary.
    pub fn summary_block(&self, m: &CoreMessage) -> Option<&'a Block> {
        self.block(block_of_summary(&m.id)?)
    }

    /// Whether an active block stands for the view's message with `id`.
    pub fn covered(&self, id: &str) -> bool {
        self.covered.contains(id)
    }
}

/// For each id the active blocks list in `ids`, the block that owns it: the
/// highest tier, and among equals the last in the state.
fn owners<'a>(
    state: &'a CompressionState,
    ids: impl Fn(&'a Block) -> &'a [Name],
) -> IdMap<'a, &'a Block> {
    let active = || state.blocks.iter().filter(|b| b.active);
    // Sized up front: the active blocks cover most of a long session.
    let mut out: IdMap<'_, &Block> =
        IdMap::with_capacity_and_hasher(active().map(|b| ids(b).len()).sum(), Default::default());
    for b in active() {
        for id in ids(b) {
            let owner = out.entry(id.as_str()).or_insert(b);
            if owner.tier <= b.tier {
                *owner = b;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::model::summary::render_summary;
    use crate::engine::test_support::{block, user};

    fn state_with_refs(ids: &[&str]) -> CompressionState {
        let mut st = CompressionState::new("s");
        for (i, id) in ids.iter().enumerate() {
            let r = format!("m{:05}", i + 1);
            st.message_refs.insert(id, &r);
        }
        st
    }

    #[test]
    fn message_range_and_reversed_ends() {
        let v = [user("a"), user("b"), user("c")];
        let st = state_with_refs(&["a", "b", "c"]);
        let r = Resolver::new(&v, &st, None)
            .resolve("m00001", "m00002")
            .unwrap();
        assert_eq!((r.start, r.end, r.names_block), (0, 1, false));
        let r = Resolver::new(&v, &st, None)
            .resolve("m00002", "m1")
            .unwrap();
        assert_eq!((r.start, r.end), (0, 1));
    }

    #[test]
    fn unknown_refs_and_blocks() {
        let v = [user("a")];
        let st = state_with_refs(&["a"]);
        let e = Resolver::new(&v, &st, None)
            .resolve("m00001", "m09999")
            .unwrap_err();
        assert_eq!(
            e,
            Unresolved::Unknown("m09999 does not exist in this session".into())
        );
        let e = Resolver::new(&v, &st, None)
            .resolve("b99", "b99")
            .unwrap_err();
        assert!(matches!(e, Unresolved::Unknown(m) if m.contains("block b99 does not exist")));
    }

    #[test]
    fn invalid_ends() {
        let v = [user("a")];
        let st = state_with_refs(&["a"]);
        for bad in ["", "nonsense", "m0"] {
            let e = Resolver::new(&v, &st, None)
                .resolve(bad, "m00001")
                .unwrap_err();
            assert!(
                matches!(&e, Unresolved::Invalid(m) if m.starts_with(&format!("\"{bad}\""))),
                "{e:?}"
            );
        }
    }

    #[test]
    fn a_covered_ref_without_a_visible_owner_is_consumed() {
        let v = [user("visible")];
        let mut st = state_with_refs(&["visible", "hidden"]);
        st.blocks = vec![block("b1", 1, &["hidden"])];
        let e = Resolver::new(&v, &st, None)
            .resolve("m00001", "m00002")
            .unwrap_err();
        assert!(matches!(e, Unresolved::Consumed(_)));
    }

    #[test]
    fn block_ranges() {
        let mut st = state_with_refs(&["loose"]);
        st.blocks = vec![block("b1", 1, &["gone1"]), block("b2", 1, &["gone2"])];
        let v = [
            render_summary(&st.blocks[0]),
            user("loose"),
            render_summary(&st.blocks[1]),
        ];
        let r = Resolver::new(&v, &st, None).resolve("b1", "b2").unwrap();
        assert_eq!((r.start, r.end, r.names_block), (0, 2, true));
        let r = Resolver::new(&v, &st, None)
            .resolve("b1", "m00001")
            .unwrap();
        assert!(r.names_block);
    }

    #[test]
    fn an_absorbed_ref_snaps_to_its_owner() {
        let mut st = state_with_refs(&["first", "absorbed"]);
        let mut b1 = block("b1", 1, &["absorbed"]);
        b1.active = false;
        let mut b2 = block("b2", 2, &["absorbed"]);
        b2.direct_block_ids = vec!["b1".into()];
        st.blocks = vec![b1, b2];
        let v = [user("first"), render_summary(&st.blocks[1])];
        let r = Resolver::new(&v, &st, None)
            .resolve("m00001", "m00002")
            .unwrap();
        assert_eq!(r.end, 1);
        assert_eq!(r.warnings.len(), 1);
        assert!(r.warnings[0].contains("b2"));
        let r = Resolver::new(&v, &st, None).resolve("b1", "b1").unwrap();
        assert_eq!((r.start, r.end), (1, 1));
    }
}
