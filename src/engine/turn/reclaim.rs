//! Tool outputs that are dead without asking the model: a read of a file
//! that a later call changed (stale: it no longer describes the code).
//!
//! They are reclaimed when a compression is applied, the moment the prompt
//! changes anyway, so the provider's cache is broken once, not twice; from
//! then on the view shows one line in place of each, naming why, the ref of
//! the message that made it dead, and the archive that keeps the original.
//! Which outputs were reclaimed, and at which call, follows from the
//! transcript alone, so a rebuild finds the same.
//!
//! Only Claude Code's own file tools are recognised (`Read`; `Edit`,
//! `MultiEdit`, `Write`, `NotebookEdit`): a false "stale" would hide what
//! the model still needs, so a tool whose effect is not known for certain
//! is left alone, and so is a change whose result reads as an error.

use std::collections::HashMap;

use serde_json::Value;

use crate::engine::model::message::{ContentType, CoreMessage};
use crate::engine::model::name::Name;
use crate::engine::model::quote::quote_markers;
use crate::engine::model::state::{Reclaim, ReclaimedOutput};

/// Outputs shorter than this are left: the line standing for one would
/// save little or nothing.
pub const MIN_CHARS: usize = 1_000;

/// What a call does to a file.
#[derive(Debug, Clone)]
enum Effect {
    Reads(String),
    Changes(String),
}

/// A call seen: its message's place, and what it does to a file, if known.
#[derive(Debug, Clone)]
struct Call {
    place: usize,
    effect: Option<Effect>,
}

/// What a walk of a history found so far; a rebuild walks on from call to
/// call.
#[derive(Debug, Default)]
pub struct Scan {
    len: usize,
    calls: HashMap<String, Call>,
    /// Reads of each file not changed since, by the result's place.
    reads: HashMap<String, Vec<usize>>,
    /// The dead outputs found, by place, in the order found.
    found: Vec<(usize, Reclaim)>,
}

impl Scan {
    /// Walks on to the first `n` messages of `history` (from the start when
    /// `history` is shorter than what was walked).
    pub fn extend_to(&mut self, history: &[CoreMessage], n: usize) {
        if n < self.len {
            *self = Scan::default();
        }
        for p in self.len..n {
            self.take(history, p);
        }
        self.len = n;
    }

    /// The dead outputs found among the first `n` messages, by place.
    pub fn found(&self) -> &[(usize, Reclaim)] {
        &self.found
    }

    fn take(&mut self, history: &[CoreMessage], p: usize) {
        let m = &history[p];
        match m.content_type {
            ContentType::ToolCall if !m.tool_call_id.is_empty() => {
                let call = Call {
                    place: p,
                    effect: effect(m),
                };
                self.calls.insert(m.tool_call_id.to_string(), call);
            }
            ContentType::ToolResult => self.result(history, p),
            _ => {}
        }
    }

    fn result(&mut self, history: &[CoreMessage], p: usize) {
        let m = &history[p];
        let Some(call) = self.calls.get(m.tool_call_id.as_str()).cloned() else {
            return;
        };
        if failed(m) {
            return;
        }
        match &call.effect {
            Some(Effect::Reads(path)) if long(m) => {
                self.reads.entry(path.clone()).or_default().push(p);
            }
            Some(Effect::Changes(path)) => {
                let by = history[call.place].id.clone();
                for read in self.reads.remove(path).unwrap_or_default() {
                    let why = Reclaim::Stale {
                        path: path.clone(),
                        by: by.clone(),
                    };
                    self.found.push((read, why));
                }
            }
            _ => {}
        }
    }
}

/// Whether `m`, a tool result, is long enough to be worth a line: by its
/// length in bytes, read or not, so a turn read on from the cache and a
/// rebuild read whole find the same.
fn long(m: &CoreMessage) -> bool {
    m.withheld.map_or(m.text.len(), |n| n.get() as usize) >= MIN_CHARS
}

/// Whether a tool result reads as a failure: Claude Code wraps a refused
/// call's answer in `<tool_use_error>`.
fn failed(m: &CoreMessage) -> bool {
    m.withheld.is_none() && m.text.trim_start().starts_with("<tool_use_error>")
}

/// What the call `m` does to a file, when its tool is one whose effect is
/// known.
fn effect(m: &CoreMessage) -> Option<Effect> {
    let (key, reads) = match m.tool_name.as_str() {
        "Read" => ("file_path", true),
        "Edit" | "MultiEdit" | "Write" => ("file_path", false),
        "NotebookEdit" => ("notebook_path", false),
        _ => return None,
    };
    let args: Value = serde_json::from_str(&m.text).ok()?;
    let path = args.get(key)?.as_str()?.to_string();
    Some(match reads {
        true => Effect::Reads(path),
        false => Effect::Changes(path),
    })
}

/// The line a reclaimed output is shown as, naming by ref (`by_ref`) the
/// message that made it dead.
pub fn line(r: &ReclaimedOutput, by_ref: &str) -> String {
    match &r.why {
        Reclaim::Stale { path, .. } => format!(
            "[noa: stale read: {} was changed after it, by {by_ref}; the output as it was is in {}]",
            quote_markers(path),
            r.archive
        ),
    }
}

/// The reason in words, for an archive's topic and the reports.
pub fn reason(why: &Reclaim) -> String {
    match why {
        Reclaim::Stale { path, .. } => format!("stale read of {path}"),
    }
}

/// The id of the message that made an output dead.
pub fn made_dead_by(why: &Reclaim) -> &Name {
    match why {
        Reclaim::Stale { by, .. } => by,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::model::message::Role;

    fn call(id: &str, call_id: &str, tool: &str, args: &str) -> CoreMessage {
        CoreMessage::tool_call(id, call_id, tool, args)
    }

    fn result(id: &str, call_id: &str, tool: &str, text: &str) -> CoreMessage {
        CoreMessage::tool_result(id, call_id, tool, text)
    }

    fn found(history: &[CoreMessage]) -> Vec<(usize, Reclaim)> {
        let mut scan = Scan::default();
        scan.extend_to(history, history.len());
        scan.found().to_vec()
    }

    #[test]
    fn a_read_changed_later_is_stale_and_a_failed_change_changes_nothing() {
        let body = "fn main() {}\n".repeat(100);
        let h = vec![
            CoreMessage::text("u", Role::User, "fix it"),
            call("c1", "r1", "Read", r#"{"file_path": "src/a.rs"}"#),
            result("o1", "r1", "Read", &body),
            call(
                "c2",
                "e1",
                "Edit",
                r#"{"file_path": "src/a.rs", "old_string": "x"}"#,
            ),
            result(
                "o2",
                "e1",
                "Edit",
                "<tool_use_error>String not found</tool_use_error>",
            ),
            call("c3", "r2", "Read", r#"{"file_path": "src/b.rs"}"#),
            result("o3", "r2", "Read", &body),
        ];
        assert!(
            found(&h).is_empty(),
            "a failed edit leaves the read as it was"
        );
        let mut h = h;
        h.push(call("c4", "e2", "Edit", r#"{"file_path": "src/a.rs"}"#));
        h.push(result(
            "o4",
            "e2",
            "Edit",
            "The file src/a.rs has been updated.",
        ));
        let stale = Reclaim::Stale {
            path: "src/a.rs".into(),
            by: "c4".into(),
        };
        assert_eq!(found(&h), [(2, stale)]);
    }

    #[test]
    fn short_outputs_and_unknown_tools_are_left() {
        let h = vec![
            call("c1", "r1", "Read", r#"{"file_path": "a"}"#),
            result("o1", "r1", "Read", "short"),
            call("c2", "x1", "mcp__fs_read", r#"{"path": "a"}"#),
            result("o2", "x1", "mcp__fs_read", &"x".repeat(2_000)),
            call("c3", "e1", "Write", r#"{"file_path": "a"}"#),
            result("o3", "e1", "Write", "ok"),
        ];
        assert!(found(&h).is_empty());
    }
}
