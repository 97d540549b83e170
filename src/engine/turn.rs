//! One turn's projection: the history in, the view to send out.
//!
//! Order matters and is fixed: refs are assigned over the whole history
//! first (so every message has its address before anything is hidden), then
//! blocks are synced to the history, covered messages give way to summaries,
//! spent Compress exchanges are hidden, the view is trimmed to what the
//! provider accepts, and tags are rendered with their token figures frozen
//! in the state.

use super::config::Config;
use super::message::{ContentType, CoreMessage, Role};
use super::protect::is_tool_protected;
use super::refs::{self, BLOCKED};
use super::state::CompressionState;
use super::{hide, prune, sync, tag, tokens, view};

/// The outcome of one projection.
#[derive(Debug, Clone)]
pub struct Projection {
    /// The messages to send, tags rendered into their text.
    pub view: Vec<CoreMessage>,
    /// Refs handed out this turn.
    pub new_refs: usize,
    /// Estimated tokens of the view.
    pub tokens: usize,
    /// History messages that were left out of the view as unpaired.
    pub dropped_unpaired: usize,
}

/// Projects `history` into a view, updating refs, block activity and token
/// snapshots in `state`.
pub fn project(state: &mut CompressionState, history: &[CoreMessage], cfg: &Config) -> Projection {
    let next = refs::highest_used(&state.message_refs) + 1;
    let new_refs = refs::assign(&mut state.message_refs, history, next, |m| {
        m.role == Role::System || is_tool_protected(&m.tool_name, &cfg.protected_tools)
    });
    sync::sync_blocks(state, history);
    let pruned = prune::prune(history.to_vec(), state);
    let shown = hide::hide_compress_calls(pruned, state);
    let before_pairing = shown.len();
    let paired = view::drop_unpaired(shown);
    let dropped_unpaired = before_pairing - paired.len();
    let view: Vec<CoreMessage> = paired.into_iter().map(|m| render_tag(state, m)).collect();
    let tokens = view.iter().map(|m| tokens::estimate(&m.text)).sum();
    Projection {
        view,
        new_refs,
        tokens,
        dropped_unpaired,
    }
}

/// The view without what only a live session needs: no tags, no
/// truncation, no nudge. What `materialize` writes, so a session can go on
/// without noa. Works on a copy of the state.
pub fn baked(state: &CompressionState, history: &[CoreMessage], cfg: &Config) -> Vec<CoreMessage> {
    let mut state = state.clone();
    let next = refs::highest_used(&state.message_refs) + 1;
    refs::assign(&mut state.message_refs, history, next, |m| {
        m.role == Role::System || is_tool_protected(&m.tool_name, &cfg.protected_tools)
    });
    sync::sync_blocks(&mut state, history);
    let pruned = prune::prune(history.to_vec(), &state);
    view::drop_unpaired(hide::hide_compress_calls(pruned, &state))
}

/// Appends the ref tag to a taggable message that has a ref, freezing its
/// token figure the first time it is shown.
fn render_tag(state: &mut CompressionState, mut m: CoreMessage) -> CoreMessage {
    if !m.is_taggable() {
        return m;
    }
    let Some(r) = state
        .message_refs
        .by_raw
        .get(&m.id)
        .filter(|r| *r != BLOCKED)
    else {
        return m;
    };
    let figure = *state
        .token_snapshot
        .entry(r.clone())
        .or_insert_with(|| tokens::estimate(&m.text));
    let source = match (m.content_type, m.tool_name.is_empty()) {
        (ContentType::ToolResult, true) => Some("tool"),
        (ContentType::ToolResult, false) => Some(m.tool_name.as_str()),
        _ => None,
    };
    let t = tag::render(r, figure, source);
    m.text = tag::append(&m.text, &t);
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::message::Role;

    #[test]
    fn assigns_refs_and_tags_user_text() {
        let mut st = CompressionState::new("s");
        let h = vec![
            CoreMessage::text("a", Role::User, "the task"),
            CoreMessage::text("b", Role::Assistant, "reply"),
        ];
        let p = project(&mut st, &h, &Config::default());
        assert_eq!(st.message_refs.by_raw["a"], "m00001");
        assert_eq!(st.message_refs.by_raw["b"], "m00002");
        assert_eq!(
            p.view[0].text,
            "the task\n<noa-ref id=\"m00001\" tokens=\"2\"/>"
        );
        assert_eq!(p.view[1].text, "reply");
        assert_eq!(p.new_refs, 2);
    }

    #[test]
    fn tool_results_name_their_source_and_compress_is_blocked() {
        let mut st = CompressionState::new("s");
        let h = vec![
            CoreMessage::text("u", Role::User, "go"),
            CoreMessage::tool_call("c", "t1", "Read", "{}"),
            CoreMessage::tool_result("r", "t1", "Read", "file body"),
            CoreMessage::tool_call("cc", "t2", "Compress", "{}"),
            CoreMessage::tool_result("cr", "t2", "Compress", "panel"),
        ];
        let p = project(&mut st, &h, &Config::default());
        assert!(p.view[2].text.ends_with("src=\"Read\"/>"));
        assert_eq!(st.message_refs.by_raw["cc"], BLOCKED);
        assert_eq!(st.message_refs.by_raw["cr"], BLOCKED);
        assert_eq!(p.view[4].text, "panel");
    }

    #[test]
    fn token_figures_are_frozen_at_first_render() {
        let mut st = CompressionState::new("s");
        let h = vec![CoreMessage::text("a", Role::User, "x".repeat(4000))];
        let first = project(&mut st, &h, &Config::default()).view[0]
            .text
            .clone();
        st.token_snapshot.insert("m00001".into(), 1000);
        let again = project(&mut st, &h, &Config::default()).view[0]
            .text
            .clone();
        assert_eq!(first, again);
        assert!(first.ends_with("tokens=\"1.0K\"/>"));
    }
}
