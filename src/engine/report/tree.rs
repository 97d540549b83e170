//! The tier tree: which blocks absorbed which, for `noa inspect`.

use crate::engine::model::identity::{IdMap, IdSet};

use serde::Serialize;

use crate::engine::model::name::Name;
use crate::engine::model::refs::ref_to_index;
use crate::engine::model::state::Block;

/// One block in the tier tree, with the blocks it absorbed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TreeNode {
    /// `bN`.
    pub id: String,
    /// Its tier.
    pub tier: u8,
    /// First ref it covers.
    pub start_ref: String,
    /// Last ref it covers.
    pub end_ref: String,
    /// Its topic.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub topic: String,
    /// Whether its summary is in the view.
    pub active: bool,
    /// The blocks it absorbed, oldest first.
    pub children: Vec<TreeNode>,
}

fn start_index(b: &Block) -> u32 {
    ref_to_index(&b.start_ref).unwrap_or(u32::MAX)
}

/// Which blocks absorbed which: the roots are the blocks nothing absorbed,
/// oldest first, each with the blocks it absorbed (from `direct_block_ids`)
/// beneath it. Every block is listed exactly once, even in a state whose
/// blocks name each other.
pub fn tier_tree(blocks: &[Block]) -> Vec<TreeNode> {
    let by_id: IdMap<'_, &Block> = blocks.iter().map(|b| (b.block_id.as_str(), b)).collect();
    let absorbed: IdSet<'_> = blocks
        .iter()
        .flat_map(|b| b.direct_block_ids.iter().map(Name::as_str))
        .filter(|id| by_id.contains_key(id))
        .collect();
    let mut roots: Vec<&Block> = blocks
        .iter()
        .filter(|b| !absorbed.contains(b.block_id.as_str()))
        .collect();
    roots.sort_by_key(|b| start_index(b));
    let mut seen: IdSet<'_> = IdSet::default();
    let mut out: Vec<TreeNode> = roots
        .into_iter()
        .filter_map(|b| node(b, &by_id, &mut seen))
        .collect();
    // Blocks that absorb each other (a state no noa writes) are still shown.
    for b in blocks {
        out.extend(node(b, &by_id, &mut seen));
    }
    out
}

fn node<'a>(b: &'a Block, by_id: &IdMap<'_, &'a Block>, seen: &mut IdSet<'a>) -> Option<TreeNode> {
    if !seen.insert(b.block_id.as_str()) {
        return None;
    }
    let mut kids: Vec<&Block> = b
        .direct_block_ids
        .iter()
        .filter_map(|id| by_id.get(id.as_str()).copied())
        .collect();
    kids.sort_by_key(|k| start_index(k));
    let children = kids
        .into_iter()
        .filter_map(|k| node(k, by_id, seen))
        .collect();
    Some(TreeNode {
        id: b.block_id.clone(),
        tier: b.tier,
        start_ref: b.start_ref.clone(),
        end_ref: b.end_ref.clone(),
        topic: b.topic.clone(),
        active: b.active,
        children,
    })
}

/// The tier tree drawn with box characters, one block a line:
/// `b4 (T2) m00002–m00065  topic`, absorbed blocks indented beneath.
/// A root whose summary is not in the view says so.
pub fn format_tree(roots: &[TreeNode]) -> String {
    let mut lines = Vec::new();
    for r in roots {
        let inactive = if r.active { "" } else { " · inactive" };
        lines.push(format!("{}{inactive}", tree_label(r)));
        tree_children(&r.children, "", &mut lines);
    }
    lines.join("\n")
}

fn tree_label(n: &TreeNode) -> String {
    let mut s = format!("{} (T{}) {}–{}", n.id, n.tier, n.start_ref, n.end_ref);
    if !n.topic.trim().is_empty() {
        s.push_str("  ");
        s.push_str(n.topic.trim());
    }
    s
}

fn tree_children(kids: &[TreeNode], prefix: &str, lines: &mut Vec<String>) {
    for (i, k) in kids.iter().enumerate() {
        let last = i + 1 == kids.len();
        let (branch, more) = if last {
            ("└── ", "    ")
        } else {
            ("├── ", "│   ")
        };
        lines.push(format!("{prefix}{branch}{}", tree_label(k)));
        tree_children(&k.children, &format!("{prefix}{more}"), lines);
    }
}
