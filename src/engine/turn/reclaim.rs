//! Tool outputs that are dead without asking the model: a read of a file
//! that a later call changed (stale: it no longer describes the code), an
//! output the same call gave again word for word (a repeat: the later one
//! shows it), and the long input of a call that failed (spent: the model
//! has its error and went on).
//!
//! They are reclaimed when a compression is applied, the moment the prompt
//! changes anyway, so the provider's cache is broken once, not twice; from
//! then on the view shows one line in place of each, naming why, the ref of
//! the message that made it dead, and the archive that keeps the original.
//! Which outputs were reclaimed, and at which call, follows from the
//! transcript alone, so a rebuild finds the same.
//!
//! Which calls read or change a file is told by
//! [`file_effect`](super::file_effect): a false "stale" would hide what
//! the model still needs, so a tool whose effect is not known for certain
//! is left alone, and so is a change whose result reads as an error.

use std::collections::{HashMap, HashSet};
use std::hash::BuildHasher;

use crate::engine::model::config::FileTools;
use crate::engine::model::identity::IdHash;
use crate::engine::model::message::COMPRESS_TOOL;
use crate::engine::model::message::{ContentType, CoreMessage};
use crate::engine::model::name::Name;
use crate::engine::model::quote::quote_markers;
use crate::engine::model::state::{Reclaim, ReclaimedOutput};

use super::file_effect::{Effect, effect};

/// Outputs shorter than this are left: the line standing for one would
/// save little or nothing.
pub const MIN_CHARS: usize = 1_000;

/// What a walk of a history found so far; a rebuild walks on from call to
/// call.
///
/// Some of what it finds hangs on words a warm turn may not hold (a long
/// output kept in the read cache): whether two outputs are the same, and
/// whether a change failed. It then finds nothing there, and names those
/// places ([`Scan::needs_words`]) for the caller to read and walk again:
/// what is found must not depend on which words were read.
#[derive(Debug, Default)]
pub struct Scan {
    len: usize,
    tools: FileTools,
    /// The place of each call seen, by call id: what it does to a file is
    /// read from it when a result names it, so the table stays small.
    calls: HashMap<Name, usize, IdHash>,
    /// Reads of each file not changed since, by the result's place.
    reads: HashMap<String, Vec<usize>>,
    /// The last long output of each call (tool and a hash of its
    /// arguments), by the places of the call and the output.
    last_output: HashMap<(Name, u64), (usize, usize)>,
    /// The dead outputs found, by place, in the order found.
    found: Vec<(usize, Reclaim)>,
    dead: HashSet<usize>,
    needs_words: Vec<usize>,
    /// Whether a result named a call the walk had not seen.
    missed_call: bool,
}

impl Scan {
    /// A scan that knows the host's own file tools besides noa's.
    pub fn new(tools: &FileTools) -> Scan {
        Scan {
            tools: tools.clone(),
            ..Scan::default()
        }
    }

    /// Walks on to the first `n` messages of `history` (from the start when
    /// `history` is shorter than what was walked).
    pub fn extend_to(&mut self, history: &[CoreMessage], n: usize) {
        if n < self.len {
            *self = Scan::new(&self.tools);
        }
        for p in self.len..n {
            self.take(history, p);
        }
        self.len = n;
    }

    /// A walk of the whole of `history`.
    pub fn whole(tools: &FileTools, history: &[CoreMessage]) -> Scan {
        let mut scan = Scan::new(tools);
        scan.extend_to(history, history.len());
        scan
    }

    /// A walk of `history` from place `start` to its end, which finds at
    /// and after `start` what a walk from the first message finds there:
    /// what makes an output dead comes after it, and so do the calls of
    /// its result and of the change that made it stale, unless a call
    /// before `start` has its result after it. A result whose call the
    /// walk did not see makes it `None`, for the caller to walk it all.
    pub fn from_place(tools: &FileTools, history: &[CoreMessage], start: usize) -> Option<Scan> {
        let mut scan = Scan::new(tools);
        scan.len = start.min(history.len());
        scan.extend_to(history, history.len());
        (!scan.missed_call).then_some(scan)
    }

    /// The dead outputs found among the first `n` messages, by place.
    pub fn found(&self) -> &[(usize, Reclaim)] {
        &self.found
    }

    /// The places whose words, not held, kept the scan from telling
    /// whether an output is dead.
    pub fn needs_words(&self) -> &[usize] {
        &self.needs_words
    }

    fn take(&mut self, history: &[CoreMessage], p: usize) {
        let m = &history[p];
        match m.content_type {
            ContentType::ToolCall if !m.tool_call_id.is_empty() => {
                self.calls.insert(m.tool_call_id.clone(), p);
            }
            ContentType::ToolResult => self.result(history, p),
            _ => {}
        }
    }

    fn result(&mut self, history: &[CoreMessage], p: usize) {
        let m = &history[p];
        let Some(&call) = self.calls.get(m.tool_call_id.as_str()) else {
            self.missed_call |= !m.tool_call_id.is_empty();
            return;
        };
        if long(m) {
            self.repeat(history, call, p);
        }
        self.spent(history, call, p);
        match effect(&history[call], &self.tools) {
            Some(Effect::Reads(path)) if long(m) => {
                self.reads.entry(path).or_default().push(p);
            }
            Some(Effect::Changes(paths)) => {
                if !paths.iter().any(|path| self.reads.contains_key(path)) {
                    return;
                }
                if m.withheld.is_some() {
                    // Whether it failed is in words not held.
                    self.needs_words.push(p);
                    return;
                }
                if failed(&m.text) {
                    return;
                }
                let by = history[call].id.clone();
                for path in paths {
                    for read in self.reads.remove(&path).unwrap_or_default() {
                        let why = Reclaim::Stale {
                            path: path.clone(),
                            by: by.clone(),
                        };
                        self.mark(read, why);
                    }
                }
            }
            _ => {}
        }
    }

    /// Marks the last output of the call at `call` dead when the output at
    /// `p`, of the same tool and arguments, says the same.
    fn repeat(&mut self, history: &[CoreMessage], call: usize, p: usize) {
        let c = &history[call];
        let key = (
            c.tool_name.clone(),
            IdHash::default().hash_one(c.text.as_str()),
        );
        let Some((before_call, before)) = self.last_output.insert(key, (call, p)) else {
            return;
        };
        let (old, new) = (&history[before], &history[p]);
        if history[before_call].text != c.text || old.text_len() != new.text_len() {
            return;
        }
        if old.withheld.is_some() || new.withheld.is_some() {
            self.needs_words.extend([before, p]);
        } else if old.text == new.text {
            let why = Reclaim::Repeat { by: new.id.clone() };
            self.mark(before, why);
        }
    }

    /// Marks the input of the call at `call` spent when it is long and its
    /// result, at `p`, says the call failed.
    fn spent(&mut self, history: &[CoreMessage], call: usize, p: usize) {
        let (c, m) = (&history[call], &history[p]);
        if c.text.len() < MIN_CHARS || c.tool_name == COMPRESS_TOOL || c.opaque {
            return;
        }
        if m.withheld.is_some() {
            self.needs_words.push(p);
        } else if failed(&m.text) {
            let why = Reclaim::Spent { by: m.id.clone() };
            self.mark(call, why);
        }
    }

    fn mark(&mut self, place: usize, why: Reclaim) {
        if self.dead.insert(place) {
            self.found.push((place, why));
        }
    }
}

/// Whether `m`, a tool result, is long enough to be worth a line: by its
/// length in bytes, read or not, so a turn read on from the cache and a
/// rebuild read whole find the same.
fn long(m: &CoreMessage) -> bool {
    m.text_len() >= MIN_CHARS
}

/// Whether a change's result reads as a failure: Claude Code wraps a
/// refused call's answer in `<tool_use_error>`; Codex's patch tool says
/// `Success.` when it applied, and a shell reports its exit code.
fn failed(text: &str) -> bool {
    let t = text.trim_start();
    let lower = t.get(..16).unwrap_or(t).to_ascii_lowercase();
    t.starts_with("<tool_use_error>")
        || lower.starts_with("error")
        || lower.starts_with("failed")
        || t.contains("verification failed")
        || (t.contains("Process exited with code ") && !t.contains("Process exited with code 0\n"))
        || (t.contains("\"exit_code\":") && !t.contains("\"exit_code\":0"))
}

/// The places of `history` whose words the reclaim scan needs and a warm
/// turn may not hold: what a caller reads before reclaiming, so that what
/// is found is what a read of the whole transcript finds.
pub fn words_needed(history: &[CoreMessage], tools: &FileTools) -> Vec<usize> {
    let mut places = Scan::whole(tools, history).needs_words;
    places.retain(|&p| history[p].withheld.is_some());
    places.sort_unstable();
    places.dedup();
    places
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
        Reclaim::Repeat { .. } => format!(
            "[noa: repeat: the same call gave this output again, word for word, in {by_ref}; this copy is in {}]",
            r.archive
        ),
        Reclaim::Spent { .. } => format!(
            "[noa: spent input: this call failed, as {by_ref} says; its arguments as they were are in {}]",
            r.archive
        ),
    }
}

/// A spent call's arguments as the view sends them: each long string in
/// them gives way to `line`, the rest kept, so the call stays one the
/// provider accepts; arguments that are not a JSON object (a custom tool's
/// raw input) become `line`.
pub fn spent_arguments(args: &str, line: &str) -> String {
    let Ok(serde_json::Value::Object(mut fields)) = serde_json::from_str(args) else {
        return line.to_string();
    };
    for value in fields.values_mut() {
        if value.as_str().is_some_and(|s| s.len() > SPENT_KEEP)
            || !value.is_string() && value.to_string().len() > SPENT_KEEP
        {
            *value = serde_json::Value::String(line.to_string());
        }
    }
    serde_json::Value::Object(fields).to_string()
}

/// The longest argument a spent call keeps as it was.
const SPENT_KEEP: usize = 200;

/// The reason in words, for an archive's topic and the reports.
pub fn reason(why: &Reclaim) -> String {
    match why {
        Reclaim::Stale { path, .. } => format!("stale read of {path}"),
        Reclaim::Repeat { .. } => "repeated output".to_string(),
        Reclaim::Spent { .. } => "input of a failed call".to_string(),
    }
}

/// The id of the message that made an output dead.
pub fn made_dead_by(why: &Reclaim) -> &Name {
    match why {
        Reclaim::Stale { by, .. } | Reclaim::Repeat { by } | Reclaim::Spent { by } => by,
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
        let scan = Scan::whole(&FileTools::default(), history);
        assert!(scan.needs_words().is_empty());
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

    #[test]
    fn a_repeat_points_to_the_later_output_and_asks_for_words_it_lacks() {
        let body = "test a ... ok\n".repeat(100);
        let mut h = vec![
            call("c1", "k1", "Bash", r#"{"command": "cargo test"}"#),
            result("o1", "k1", "Bash", &body),
            call("c2", "k2", "Bash", r#"{"command": "cargo test --release"}"#),
            result("o2", "k2", "Bash", &body),
            call("c3", "k3", "Bash", r#"{"command": "cargo test"}"#),
            result("o3", "k3", "Bash", &body),
        ];
        let repeat = Reclaim::Repeat { by: "o3".into() };
        assert_eq!(found(&h), [(1, repeat)], "other arguments are another call");
        h[5].let_go();
        let scan = Scan::whole(&FileTools::default(), &h);
        assert!(scan.found().is_empty(), "not without the words");
        assert_eq!(words_needed(&h, &FileTools::default()), [5]);
        assert_eq!(scan.needs_words(), [1, 5]);
    }

    /// A history of calls made one or two at a time (two: both calls, then
    /// both results, in either order) from `ops`: reads and edits of two
    /// files, edits that fail, and two commands whose long output repeats.
    fn calls(ops: &[(u8, bool)]) -> Vec<CoreMessage> {
        let body = "line\n".repeat(300);
        let pair = |n: usize, op: u8| -> (CoreMessage, CoreMessage) {
            let (id, out) = (format!("k{n}"), format!("o{n}"));
            let (tool, args, text) = match op % 6 {
                0 => ("Read", r#"{"file_path": "a"}"#, body.as_str()),
                1 => ("Read", r#"{"file_path": "b"}"#, body.as_str()),
                2 => ("Edit", r#"{"file_path": "a"}"#, "updated"),
                3 => ("Edit", r#"{"file_path": "b"}"#, "error: not found"),
                4 => ("Bash", r#"{"command": "make"}"#, body.as_str()),
                _ => ("Bash", r#"{"command": "ls"}"#, body.as_str()),
            };
            (
                call(&format!("c{n}"), &id, tool, args),
                result(&out, &id, tool, text),
            )
        };
        let mut h = Vec::new();
        let mut n = 0;
        for (i, &(op, two)) in ops.iter().enumerate() {
            let (c1, r1) = pair(n, op);
            n += 1;
            if !two {
                h.extend([c1, r1]);
                continue;
            }
            let (c2, r2) = pair(n, op / 6 + i as u8);
            n += 1;
            match op % 2 {
                0 => h.extend([c1, c2, r1, r2]),
                _ => h.extend([c1, c2, r2, r1]),
            }
        }
        h
    }

    proptest::proptest! {
        /// A walk from any place finds there and after what a walk from the
        /// start finds, or declines; and it declines only where a call
        /// before the place has its result after it.
        #[test]
        fn a_walk_from_a_place_finds_what_a_whole_walk_finds_there(
            ops in proptest::collection::vec((proptest::prelude::any::<u8>(), proptest::prelude::any::<bool>()), 1..24),
        ) {
            let h = calls(&ops);
            let whole = found(&h);
            for start in 0..=h.len() {
                let open = (start..h.len()).any(|p| {
                    h[p].content_type == ContentType::ToolResult
                        && !h[start..p].iter().any(|c| c.tool_call_id == h[p].tool_call_id)
                });
                let Some(scan) = Scan::from_place(&FileTools::default(), &h, start) else {
                    proptest::prop_assert!(open, "declined at {}", start);
                    continue;
                };
                let after: Vec<_> = whole.iter().filter(|(p, _)| *p >= start).cloned().collect();
                proptest::prop_assert_eq!(scan.found(), &after[..], "from {}", start);
            }
        }
    }

    #[test]
    fn a_failed_call_spends_its_long_input_and_keeps_the_rest() {
        let content = "x".repeat(2_000);
        let args = serde_json::json!({"file_path": "a.rs", "content": content}).to_string();
        let h = vec![
            call("c1", "w1", "Write", &args),
            result(
                "o1",
                "w1",
                "Write",
                "<tool_use_error>File has not been read yet.</tool_use_error>",
            ),
        ];
        assert_eq!(found(&h), [(0, Reclaim::Spent { by: "o1".into() })]);
        let shown = spent_arguments(&args, "[noa: spent]");
        assert_eq!(shown, r#"{"file_path":"a.rs","content":"[noa: spent]"}"#);
        assert_eq!(
            spent_arguments("*** Begin Patch", "[noa: spent]"),
            "[noa: spent]"
        );
    }
}
