//! Archive files: the markdown that keeps every original a block replaced.
//!
//! An archive is the only way back to what a summary stands for, so content
//! goes in verbatim and whole: never truncated, never re-encoded. Fences grow
//! past any run of backticks in the body so nested code blocks survive.

use std::fmt::Write;

use crate::engine::model::identity::IdMap;
use crate::engine::model::message::{ContentType, CoreMessage, Role};
use crate::engine::model::state::Block;

/// One item of an archived range, in view order.
#[derive(Debug, Clone, Copy)]
pub enum Entry<'a> {
    /// A lower-tier block absorbed by this one.
    Block(&'a Block),
    /// A message this block covers, with its ref if it has one.
    Message {
        /// The message's ref.
        reference: Option<&'a str>,
        /// The original, untruncated and untagged.
        message: &'a CoreMessage,
    },
}

/// What an archive file is rendered from.
#[derive(Debug, Clone)]
pub struct ArchiveInput<'a> {
    /// The block being archived.
    pub block: &'a Block,
    /// The session id (omitted when empty).
    pub session: &'a str,
    /// Creation time, RFC 3339 (omitted when empty).
    pub created: &'a str,
    /// The covered items in view order.
    pub entries: Vec<Entry<'a>>,
}

/// An archive to write: where it goes and what it is rendered from, but not
/// its text. It is rendered when it is written ([`ArchiveFile::render`]),
/// one file at a time, so a call or a rebuild over a long history never
/// holds its archived originals a second time, and an archive a rebuild
/// finds on disk is never rendered at all.
#[derive(Debug, Clone)]
pub struct ArchiveFile {
    /// `tier1/b1_m00002-m00005.md`.
    pub rel: String,
    /// The block, without the id lists an archive does not show.
    block: Block,
    session: String,
    created: String,
    items: Vec<Item>,
}

/// An [`Entry`] that owns what it needs: a copy of an absorbed block's
/// header and summary, or a message by id.
#[derive(Debug, Clone)]
enum Item {
    Block(Box<Block>),
    Message {
        reference: Option<String>,
        id: String,
    },
}

impl ArchiveFile {
    /// The archive `input` describes, to be written at `rel`.
    pub fn new(rel: String, input: &ArchiveInput) -> Self {
        let items = input
            .entries
            .iter()
            .map(|e| match e {
                Entry::Block(b) => Item::Block(Box::new(header(b))),
                Entry::Message { reference, message } => Item::Message {
                    reference: reference.map(str::to_string),
                    id: message.id.to_string(),
                },
            })
            .collect();
        ArchiveFile {
            rel,
            block: header(input.block),
            session: input.session.to_string(),
            created: input.created.to_string(),
            items,
        }
    }

    /// The ids of the messages it is rendered from, in its order.
    pub fn message_ids(&self) -> impl Iterator<Item = &str> {
        self.items.iter().filter_map(|i| match i {
            Item::Message { id, .. } => Some(id.as_str()),
            Item::Block(_) => None,
        })
    }

    /// The markdown, with each message's text taken from `originals`: the
    /// history the call was answered against, which holds every message the
    /// archive names (indexing panics on one it does not), each with its
    /// words: one without them ([`CoreMessage::withheld`]) panics rather
    /// than be archived empty.
    pub fn render(&self, originals: &IdMap<'_, &CoreMessage>) -> String {
        let mut out = String::new();
        self.render_into(originals, &mut out);
        out
    }

    /// [`ArchiveFile::render`] into `out`, in place of what it held: a
    /// writer of many archives renders each into the same room.
    pub fn render_into(&self, originals: &IdMap<'_, &CoreMessage>, out: &mut String) {
        let input = ArchiveInput {
            block: &self.block,
            session: &self.session,
            created: &self.created,
            entries: self
                .items
                .iter()
                .map(|i| match i {
                    Item::Block(b) => Entry::Block(b),
                    Item::Message { reference, id } => {
                        let message = originals[id.as_str()];
                        assert!(
                            message.withheld.is_none(),
                            "{id}: archived without its words"
                        );
                        Entry::Message {
                            reference: reference.as_deref(),
                            message,
                        }
                    }
                })
                .collect(),
        };
        render_into(&input, out);
    }
}

/// A block without its id lists: all an archive shows of it.
fn header(b: &Block) -> Block {
    Block {
        block_id: b.block_id.clone(),
        tier: b.tier,
        topic: b.topic.clone(),
        summary: b.summary.clone(),
        archive_path: b.archive_path.clone(),
        archive_rel: b.archive_rel.clone(),
        compressed_tokens: b.compressed_tokens,
        start_ref: b.start_ref.clone(),
        end_ref: b.end_ref.clone(),
        ..Block::default()
    }
}

/// `tier1/b1_m00002-m00005.md`: under its tier's folder, named by block id
/// (unique) and span (findable by eye).
pub fn rel_path(tier: u8, block_id: &str, start: &str, end: &str) -> String {
    format!("tier{tier}/{block_id}_{start}-{end}.md")
}

/// Renders the archive markdown into `out`, in place of what it held.
fn render_into(input: &ArchiveInput, out: &mut String) {
    let b = input.block;
    let absorbed = input
        .entries
        .iter()
        .filter(|e| matches!(e, Entry::Block(_)))
        .count();
    // Sized for the originals up front: an archive of a long range is
    // mostly their text, which would otherwise be copied at every doubling.
    let body: usize = input
        .entries
        .iter()
        .map(|e| match e {
            Entry::Block(c) => c.summary.len(),
            Entry::Message { message, .. } => message.text.len(),
        })
        .sum();
    out.clear();
    out.reserve(body + 200 * (input.entries.len() + 4));
    front_matter(out, input, absorbed);
    out.push_str("---\n\n");
    let _ = writeln!(
        out,
        "# Archive {} · Tier {} · {}–{}\n",
        b.block_id, b.tier, b.start_ref, b.end_ref
    );
    if !b.summary.trim().is_empty() {
        out.push_str("**Summary** (what stands in for this range in the context):\n\n");
        for line in b.summary.trim().lines() {
            let _ = writeln!(out, "> {line}");
        }
        out.push('\n');
    }
    out.push_str("---\n");
    let heading = if absorbed > 0 { "###" } else { "##" };
    for e in &input.entries {
        out.push('\n');
        match e {
            Entry::Block(c) => block_entry(out, c),
            Entry::Message { reference, message } => {
                message_entry(out, heading, *reference, message)
            }
        }
    }
}

/// The archive's front matter, up to its closing line: the block, where
/// and when it was made, its range and what it took in.
fn front_matter(out: &mut String, input: &ArchiveInput, absorbed: usize) {
    let b = input.block;
    let loose = input.entries.len() - absorbed;
    out.push_str("---\n");
    let _ = writeln!(out, "block: {}", b.block_id);
    let _ = writeln!(out, "tier: {}", b.tier);
    if !input.session.is_empty() {
        let _ = writeln!(out, "session: {}", input.session);
    }
    if !input.created.is_empty() {
        let _ = writeln!(out, "created: {}", input.created);
    }
    let _ = writeln!(out, "range: {}-{}", b.start_ref, b.end_ref);
    if absorbed > 0 {
        let ids: Vec<&str> = input
            .entries
            .iter()
            .filter_map(|e| match e {
                Entry::Block(c) => Some(c.block_id.as_str()),
                Entry::Message { .. } => None,
            })
            .collect();
        let _ = writeln!(out, "consumed_blocks: [{}]", ids.join(", "));
        let _ = writeln!(out, "loose_messages: {loose}");
    } else {
        let _ = writeln!(out, "message_count: {loose}");
    }
    let _ = writeln!(out, "original_tokens: {}", b.compressed_tokens);
    if !b.topic.trim().is_empty() {
        let _ = writeln!(out, "topic: {}", b.topic.trim());
    }
}

fn block_entry(out: &mut String, c: &Block) {
    let _ = writeln!(
        out,
        "## {} · Tier {} · {}–{}\n",
        c.block_id, c.tier, c.start_ref, c.end_ref
    );
    if !c.topic.trim().is_empty() {
        let _ = writeln!(out, "**{}**\n", c.topic.trim());
    }
    let _ = writeln!(out, "{}\n", c.summary.trim());
    if !c.archive_rel.is_empty() {
        let _ = writeln!(out, "> Child archive: [`{0}`](../{0})", c.archive_rel);
    }
    if !c.archive_path.is_empty() {
        let _ = writeln!(out, "> Absolute path: `{}`", c.archive_path);
    }
}

fn message_entry(out: &mut String, heading: &str, reference: Option<&str>, m: &CoreMessage) {
    let r = reference.unwrap_or("(unaddressed)");
    let (title, lang) = match (m.role, m.content_type) {
        (_, ContentType::ToolCall) => (
            format!("{r} · assistant · tool_use · {}", m.tool_name),
            "json",
        ),
        (_, ContentType::ToolResult) => {
            let tool = if m.tool_name.is_empty() {
                "tool"
            } else {
                m.tool_name.as_str()
            };
            (format!("{r} · tool_result · {tool}"), "")
        }
        (role, ContentType::Reasoning) => (format!("{r} · {} · thinking", role.as_str()), ""),
        (Role::System, _) => (format!("{r} · system"), ""),
        (role, ContentType::Text) => (format!("{r} · {}", role.as_str()), ""),
    };
    let _ = writeln!(out, "{heading} {title}\n");
    let fence = fence_for(&m.text);
    let _ = writeln!(out, "{fence}{lang}\n{}\n{fence}", m.text);
}

/// Three backticks, or one more than the longest run of backticks in `body`.
/// Jumps from backtick to backtick (a memchr search), since an archive
/// passes every original it holds through here and most hold few.
pub fn fence_for(body: &str) -> String {
    let mut longest = 0;
    let mut rest = body;
    while let Some(at) = rest.find('`') {
        let run = rest[at..].bytes().take_while(|&b| b == b'`').count();
        longest = longest.max(run);
        rest = &rest[at + run..];
    }
    "`".repeat((longest + 1).max(3))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::test_support::block;

    fn render(input: &ArchiveInput) -> String {
        let mut out = String::new();
        render_into(input, &mut out);
        out
    }

    fn archived(b: &Block, entries: Vec<Entry>) -> String {
        render(&ArchiveInput {
            block: b,
            session: "sess",
            created: "2026-09-14T10:00:00+08:00",
            entries,
        })
    }

    #[test]
    fn front_matter_and_heading() {
        let mut b = block("b1", 1, &["a"]);
        b.topic = "JWT 认证方案".into();
        b.start_ref = "m00002".into();
        b.end_ref = "m00005".into();
        b.compressed_tokens = 1234;
        let m = CoreMessage::text("a", Role::User, "hello");
        let text = archived(
            &b,
            vec![Entry::Message {
                reference: Some("m00002"),
                message: &m,
            }],
        );
        for want in [
            "block: b1",
            "tier: 1",
            "session: sess",
            "range: m00002-m00005",
            "message_count: 1",
            "original_tokens: 1234",
            "topic: JWT 认证方案",
        ] {
            assert!(text.contains(want), "missing {want:?} in\n{text}");
        }
        assert!(text.contains("# Archive b1 · Tier 1 · m00002–m00005"));
        assert!(text.contains("> summary of b1"));
        assert!(text.contains("## m00002 · user\n\n```\nhello\n```"));
    }

    #[test]
    fn nested_fences_survive() {
        let body = "```go\npackage main\n```\nand more ```inline``` text";
        let m = CoreMessage::tool_result("r", "t", "Bash", body);
        let text = archived(
            &block("b1", 1, &["r"]),
            vec![Entry::Message {
                reference: Some("m00001"),
                message: &m,
            }],
        );
        assert!(text.contains(body));
        assert!(text.contains("````\n```go"));
        assert!(text.contains("m00001 · tool_result · Bash"));
    }

    #[test]
    fn originals_are_whole() {
        let big = "unique-content ".repeat(500);
        let m = CoreMessage::text("a", Role::User, big.clone());
        let text = archived(
            &block("b1", 1, &["a"]),
            vec![Entry::Message {
                reference: Some("m00002"),
                message: &m,
            }],
        );
        assert_eq!(text.matches("unique-content").count(), 500);
        let cjk = "错误：认证失败 🔐 at auth/jwt.go:42\n".to_string() + &"日志行内容。".repeat(900);
        let m = CoreMessage::text("c", Role::User, cjk.clone());
        assert!(
            archived(
                &block("b1", 1, &["c"]),
                vec![Entry::Message {
                    reference: None,
                    message: &m
                }]
            )
            .contains(&cjk)
        );
    }

    #[test]
    fn absorbed_blocks_and_loose_messages() {
        let mut child = block("b1", 1, &["x"]);
        child.topic = "auth".into();
        let mut b = block("b5", 2, &["x", "y"]);
        b.direct_block_ids = vec!["b1".into()];
        let call = CoreMessage::tool_call("y", "t1", "Read", "{\"path\":\"a.rs\"}");
        let think = CoreMessage::reasoning("k", "hmm");
        let text = archived(
            &b,
            vec![
                Entry::Block(&child),
                Entry::Message {
                    reference: Some("m00009"),
                    message: &call,
                },
                Entry::Message {
                    reference: None,
                    message: &think,
                },
            ],
        );
        assert!(text.contains("consumed_blocks: [b1]"));
        assert!(text.contains("loose_messages: 2"));
        assert!(text.contains("## b1 · Tier 1 ·"));
        assert!(text.contains("**auth**"));
        assert!(text.contains("> Child archive: [`tier1/b1.md`](../tier1/b1.md)"));
        assert!(text.contains(
            "### m00009 · assistant · tool_use · Read\n\n```json\n{\"path\":\"a.rs\"}\n```"
        ));
        assert!(text.contains("### (unaddressed) · assistant · thinking"));
    }

    #[test]
    fn an_archive_file_renders_what_its_input_would() {
        let mut child = block("b1", 1, &["x"]);
        child.topic = "auth".into();
        child.archive_path = "/s/tier1/b1.md".into();
        let mut b = block("b5", 2, &["x", "y"]);
        b.direct_block_ids = vec!["b1".into()];
        b.topic = "consolidated".into();
        b.start_ref = "m00002".into();
        b.end_ref = "m00009".into();
        b.compressed_tokens = 4321;
        b.archive_path = "/s/tier2/b5.md".into();
        b.created_at = 1_789_000_000;
        let call = CoreMessage::tool_call("y", "t1", "Read", "{\"path\":\"a.rs\"}");
        let input = ArchiveInput {
            block: &b,
            session: "sess",
            created: "2026-09-14T10:00:00+08:00",
            entries: vec![
                Entry::Block(&child),
                Entry::Message {
                    reference: Some("m00009"),
                    message: &call,
                },
            ],
        };
        let originals: IdMap<'_, &CoreMessage> = [("y", &call)].into_iter().collect();
        assert_eq!(
            ArchiveFile::new("tier2/b5.md".into(), &input).render(&originals),
            render(&input)
        );
    }

    #[test]
    fn file_names() {
        assert_eq!(
            rel_path(1, "b1", "m00002", "m00005"),
            "tier1/b1_m00002-m00005.md"
        );
        assert_eq!(fence_for("plain"), "```");
        assert_eq!(fence_for("a ```` b"), "`````");
    }

    proptest::proptest! {
        #[test]
        fn the_fence_outruns_every_run_of_backticks(body in "[`a é]{0,40}") {
            let longest = body.split(|c| c != '`').map(str::len).max().unwrap_or(0);
            proptest::prop_assert_eq!(fence_for(&body).len(), (longest + 1).max(3));
        }
    }
}
