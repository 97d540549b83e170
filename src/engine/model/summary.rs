//! Block summaries as the view shows them: the message that stands in for a
//! block's range, its id, and the pointer to the archive of its originals.

use super::message::{ContentType, CoreMessage, Role};
use super::quote::quote_markers;
use super::state::Block;

/// Id prefix of a rendered block summary in a view.
pub const SUMMARY_ID_PREFIX: &str = "noa_summary_";

/// The first line of every rendered summary.
pub const SUMMARY_HEADER: &str = "[Compressed conversation section]";

/// The view id of a block's summary: `noa_summary_b5`.
pub fn summary_id(block_id: &str) -> String {
    format!("{SUMMARY_ID_PREFIX}{block_id}")
}

/// The block id a summary id names, if it is one.
pub fn block_of_summary(id: &str) -> Option<&str> {
    id.strip_prefix(SUMMARY_ID_PREFIX)
}

/// The pointer from a summary to the file holding its originals. It carries
/// no ref-like attribute, so it can never be mistaken for a message address.
pub fn archive_tag(b: &Block) -> String {
    format!(
        r#"<noa-archive block="{}" tier="{}" range="{}-{}" path="{}"/>"#,
        b.block_id, b.tier, b.start_ref, b.end_ref, b.archive_path
    )
}

/// The role a summary stands in the view with.
pub const SUMMARY_ROLE: Role = Role::User;

/// A block's summary as the user-side message that stands in for its range.
///
/// The topic and summary are the model's words: a look-alike of noa's
/// markers in them is quoted (see [`quote_markers`]).
pub fn render_summary(b: &Block) -> CoreMessage {
    let mut text = SUMMARY_HEADER.to_string();
    if !b.topic.trim().is_empty() {
        text.push_str(" — ");
        text.push_str(&quote_markers(b.topic.trim()));
    }
    if !b.summary.trim().is_empty() {
        text.push('\n');
        text.push_str(&quote_markers(b.summary.trim()));
    }
    text.push_str("\n\n");
    text.push_str(&archive_tag(b));
    CoreMessage::text(summary_id(&b.block_id), SUMMARY_ROLE, text)
}

/// Whether a message is a summary noa rendered (not a host message that
/// happens to look like one).
pub fn is_rendered_summary(m: &CoreMessage) -> bool {
    m.id.starts_with(SUMMARY_ID_PREFIX)
        && m.role == Role::User
        && m.content_type == ContentType::Text
        && m.text.starts_with(SUMMARY_HEADER)
}
