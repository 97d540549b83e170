//! Builders shared by the engine's unit tests.

use super::model::config::Config;
use super::model::message::{CoreMessage, Role};
use super::model::name::Name;
use super::model::state::{Block, CompressionState};
use super::turn::HistoryIndex;
use super::turn::deferred::DeferredOutputs;
use super::turn::prune::prune;

/// An active block of `tier` covering `covers`, summary "summary of <id>".
pub fn block(id: &str, tier: u8, covers: &[&str]) -> Block {
    Block {
        block_id: id.into(),
        tier,
        topic: String::new(),
        summary: format!("summary of {id}"),
        direct_message_ids: covers.iter().map(|s| Name::new(s)).collect(),
        effective_message_ids: covers.iter().map(|s| Name::new(s)).collect(),
        direct_block_ids: Vec::new(),
        archive_path: format!("/archive/tier{tier}/{id}.md"),
        archive_rel: format!("tier{tier}/{id}.md"),
        compressed_tokens: 0,
        start_ref: String::new(),
        end_ref: String::new(),
        created_at: 0,
        active: true,
        compress_call_id: String::new(),
    }
}

/// A user text message whose text is its id.
pub fn user(id: &str) -> CoreMessage {
    CoreMessage::text(id, Role::User, id)
}

/// An assistant text message.
pub fn say(id: &str) -> CoreMessage {
    CoreMessage::text(id, Role::Assistant, id)
}

/// An assistant tool call.
pub fn call(id: &str, call_id: &str, tool: &str) -> CoreMessage {
    CoreMessage::tool_call(id, call_id, tool, "{}")
}

/// A tool result.
pub fn result(id: &str, call_id: &str, tool: &str) -> CoreMessage {
    CoreMessage::tool_result(id, call_id, tool, format!("output of {id}"))
}

/// A reasoning block.
pub fn think(id: &str) -> CoreMessage {
    CoreMessage::reasoning(id, format!("reasoning {id}"))
}

/// The ids of a list of messages.
pub fn ids(v: &[CoreMessage]) -> Vec<&str> {
    v.iter().map(|m| m.id.as_str()).collect()
}

/// The view of `history` under `state`'s blocks, as a turn prunes it (on a
/// copy of the state, whose blocks are synced to the history).
pub fn pruned(history: &[CoreMessage], state: &CompressionState) -> Vec<CoreMessage> {
    let (mut state, config) = (state.clone(), Config::default());
    let mut index = HistoryIndex::new(history, &[], &config);
    index.advance(&mut state, history.len(), 1, |_| false);
    prune(&index, &state, DeferredOutputs::default()).view
}
