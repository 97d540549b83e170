//! The session shapes real coding agents produce, each driven through the
//! binary by a scripted loop (as in agent_loop.rs) against a simulated
//! provider: read-heavy, prose-only, periodic huge dumps, edit-heavy,
//! parallel tool calls, and a model that ignores every nudge.
//!
//! The simulated provider counts a request as `ceil(chars of the view's JSON
//! lines / 3.3) + 1500` (the host's system prompt and tool definitions, which
//! are not in the transcript) and hands that figure back as `--input-tokens`
//! on the next turn, as a host would. Each shape runs 120 turns at a 16K
//! window and 130 turns at 40K, and holds noa to its promises: every view is
//! a valid request, no request goes over the window, a model that answers
//! nudges is asked (with ranges) before the request passes 90% of the window,
//! and the ranges a nudge lists apply. A broken promise fails the test only
//! after both windows ran and printed their stats; `NOA_SHAPES_TRACE=1`
//! prints every turn's figures, the nudge decision and every panel.
//!
//! read_heavy, periodic_dump and ignores_nudges open each turn with a short
//! user message; edit_heavy and parallel are autonomous runs (the task is the
//! only user message); prose_only has no tools at all.

use std::fmt;
use std::fs;
use std::path::Path;

use serde_json::{Value, json};

use crate::agent_loop::{apply_call, compress_bytes, ranges_from_nudge};
use crate::common::{TempDir, noa};
use crate::providers::check_chat;
use crate::synth::Rng;

/// Tokens the host adds to every request beyond the view: system prompt and
/// tool definitions.
const HOST_TOKENS: usize = 1_500;
/// The runs every shape makes: (window, turns).
const RUNS: [(usize, usize); 2] = [(16_000, 120), (40_000, 130)];
/// The horizons loops are compared over (see [`ShapeStats::over_horizons`]):
/// the last this many turns, at least a full cycle of compressions at 40K.
const HORIZONS: usize = 30;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shape {
    ReadHeavy,
    ProseOnly,
    PeriodicDump,
    EditHeavy,
    /// Read a file, Edit it, Read it again (as Claude Code does to check an
    /// edit landed), then a line of prose: the first read is stale at once.
    EditReread,
    Parallel,
    IgnoresNudges,
    /// Edit-reread with the tests run again, unchanged: the shape whose
    /// outputs go stale or repeat (see `turn::reclaim`).
    Rework,
}

impl Shape {
    fn name(self) -> &'static str {
        match self {
            Shape::ReadHeavy => "read_heavy",
            Shape::ProseOnly => "prose_only",
            Shape::PeriodicDump => "periodic_dump",
            Shape::EditHeavy => "edit_heavy",
            Shape::EditReread => "edit_reread",
            Shape::Parallel => "parallel",
            Shape::IgnoresNudges => "ignores_nudges",
            Shape::Rework => "rework",
        }
    }

    fn answers_nudges(self) -> bool {
        self != Shape::IgnoresNudges
    }
}

/// The simulated provider's input-token count for a request whose messages
/// are the view's JSON lines.
pub(crate) fn provider_count(raw_view: &str) -> usize {
    let chars: usize = raw_view.lines().map(|l| l.chars().count()).sum();
    (chars * 10).div_ceil(33) + HOST_TOKENS
}

// ---------------------------------------------------------------------------
// Content: deterministic, realistic-looking code, logs, search output, prose.

const IDENTS: [&str; 32] = [
    "retry", "backoff", "deadline", "client", "request", "response", "cache", "entry", "shard",
    "index", "buffer", "parser", "token", "config", "session", "handle", "worker", "queue",
    "limit", "offset", "cursor", "header", "payload", "checksum", "span", "frame", "batch",
    "store", "lease", "epoch", "attempt", "budget",
];
const TYPES: [&str; 18] = [
    "Client",
    "Request",
    "Backoff",
    "CacheEntry",
    "Shard",
    "Index",
    "Buffer",
    "Parser",
    "Token",
    "Config",
    "Session",
    "Worker",
    "Queue",
    "Frame",
    "Batch",
    "Store",
    "Lease",
    "RetryPolicy",
];
const DIRS: [&str; 8] = [
    "src/net",
    "src/cache",
    "src/index",
    "src/parser",
    "src/store",
    "src/cli",
    "src/worker",
    "tests",
];
const PY_DIRS: [&str; 3] = ["scripts", "tools/bench", "python/noa_client"];

const RUST_HEADER: [&str; 6] = [
    "use std::collections::HashMap;",
    "use std::time::{Duration, Instant};",
    "use crate::{i}::{T};",
    "use super::{i}::{T};",
    "use crate::error::{Error, Result};",
    "use tracing::{debug, warn};",
];
const RUST_DOC: [&str; 6] = [
    "/// Returns the {i} for the given {i}, or None when it has expired.",
    "/// Flushes pending {i} entries to the {i} and resets the {i}.",
    "/// The next {i} after `{i}`, capped at the configured {i}.",
    "/// Splits the {i} into frames no longer than `{i}` bytes.",
    "/// Renews the {i} before its {i} runs out.",
    "// SAFETY: the {i} lock is held by the caller.",
];
const RUST_SIG: [&str; 5] = [
    "pub fn {i}_{i}(&mut self, {i}: {T}) -> Result<{T}, Error> {",
    "fn {i}(&self, {i}: usize) -> Option<&{T}> {",
    "pub(crate) fn {i}_{i}(&self) -> usize {",
    "pub async fn {i}(&self, {i}: &{T}, {i}: Duration) -> Result<()> {",
    "fn {i}_{i}({i}: &mut Vec<{T}>, {i}: u64) -> bool {",
];
const RUST_STMT: [&str; 12] = [
    "let {i} = self.{i}.{i}({i});",
    "let mut {i} = Vec::with_capacity({n});",
    "self.{i} = {i}.{i}().unwrap_or({n});",
    "{i}.push({T}::new({i}, {i}));",
    "debug!({i} = ?{i}, \"{i} {i}\");",
    "let {i} = {i}.saturating_sub(self.{i});",
    "self.{i}.insert({i}.id(), {i}.clone());",
    "let {i} = Duration::from_millis({n});",
    "{i} += {i}.len();",
    "let {i} = {T}::from_{i}(&{i})?;",
    "warn!(\"{i} over {i}: {} > {}\", {i}, self.{i});",
    "let {i} = self.{i}.get(&{i}).copied().unwrap_or_default();",
];
const RUST_OPEN: [&str; 5] = [
    "if {i} > self.{i} {",
    "for {i} in self.{i}.iter_mut() {",
    "while let Some({i}) = {i}.pop_front() {",
    "if let Some({i}) = self.{i}.get_mut(&{i}) {",
    "if {i}.is_empty() || {i} >= {n} {",
];
const RUST_END: [&str; 4] = ["Ok({i})", "{i}.len()", "Some(&self.{i})", "true"];

const PY_HEADER: [&str; 4] = [
    "import logging",
    "from typing import Optional",
    "from .{i} import {T}",
    "log = logging.getLogger(__name__)",
];
const PY_SIG: [&str; 3] = [
    "def {i}_{i}({i}, {i}=None):",
    "def {i}(self, {i}, {i}={n}):",
    "async def {i}_{i}(self, {i}):",
];
const PY_DOC: [&str; 3] = [
    "\"\"\"Return the {i} for {i}, or None when it expired.\"\"\"",
    "\"\"\"Write the pending {i} entries to the {i}.\"\"\"",
    "\"\"\"Retry the {i} until the {i} runs out.\"\"\"",
];
const PY_STMT: [&str; 7] = [
    "{i} = {i}.get(\"{i}\", {n})",
    "{i}.append({T}({i}, {i}))",
    "log.debug(\"{i} %s\", {i})",
    "{i}[{i}.key] = {i}",
    "{i} += len({i})",
    "{i} = await self.{i}.{i}({i})",
    "{i} = min({i}, self.{i} * 2)",
];
const PY_OPEN: [&str; 4] = [
    "if {i} is None:",
    "for {i} in {i}:",
    "while {i} < {n}:",
    "with self.{i}_lock:",
];
const PY_END: [&str; 3] = ["return {i}", "return len({i})", "return None"];

const SENTENCES: [&str; 12] = [
    "The {i} path in {p} re-enters the {i} loop before the {i} check, so a slow {i} can hold the {i} past its budget.",
    "{T}::{i} is only called from {p}, which already holds the {i} lock.",
    "That matches the failing test: the {i} is computed from the stale {i}, not the current one.",
    "I'll read {p} next to see how {T} handles an empty {i}.",
    "The {i} is reset in {T}::{i}, so the counter never exceeds {n}.",
    "Nothing here touches the {i}; the bug must be upstream in {p}.",
    "This looks fine: {T}::{i} clamps the {i} before it is used.",
    "The test in {p} only covers the happy path, not a {i} that expires mid-{i}.",
    "So the {i} and the {i} share one lock, which explains the stall under load.",
    "Let me check the callers of {T}::{i} before changing its signature.",
    "Changing the {i} to a {T} would also fix the ordering problem in {p}.",
    "Each {i} is retried up to {n} times, and the {i} doubles every attempt.",
];
const ASKS: [&str; 7] = [
    "now look at the {i} path",
    "what about {p}?",
    "check how {T} is constructed",
    "ok, and the {i} handling?",
    "look at {p} too",
    "now the {i} side",
    "where does the {i} get reset?",
];
const QUESTIONS: [&str; 8] = [
    "Why does {T}::{i} take the {i} lock before reading the {i}?",
    "Could we move the {i} check into {p} instead?",
    "I'm seeing the {i} test fail intermittently on CI.",
    "What happens to in-flight {i} requests when the {i} is rotated?",
    "Is the {i} in {p} still needed now that {T} caches it?",
    "Walk me through how a {i} gets from the {i} to the {i}.",
    "Would it be safer to return an error than to retry?",
    "Keep the public API as it is.",
];
const SUMMARY_SENTENCES: [&str; 6] = [
    "Read {p}, {p} and {p} while tracing the {i} path: {T}::{i} computes the {i} from the stale {i} (see {p}:{n}).",
    "The {i} and the {i} share one lock in {T}, which explains the stall under load; {T}::{i} is only called from {p}.",
    "Edited {p} so {T}::{i} clamps the {i} to {n}; the tests in {p} pass.",
    "Decided to keep the public {T} API unchanged because clients depend on it.",
    "Open: the {i} handling in {p} still needs a regression test.",
    "The {n}-line log from the {i} run shows repeated {i} timeouts on shard {n}, nothing else unusual.",
];
const LOG_MESSAGES: [&str; 7] = [
    "flushed {n} entries in {d}.{d}ms shard={d} bytes={n}",
    "retrying request id={n} attempt={d} after {n}ms",
    "cache miss key={i}:{n} fallback={i}",
    "GET /api/v1/{i}/{n} 200 {n}ms",
    "compacted segment {n} ({n} -> {n} bytes)",
    "lease {n} renewed epoch={n} holder=worker-{d}",
    "connection reset by peer peer=10.0.{d}.{d}:{n}",
];

/// One session's generator: every byte follows from the seed.
struct Gen {
    rng: Rng,
    calls: usize,
    clock_ms: u64,
    reads: Vec<(String, String)>,
    /// Reads made before the current turn (the ones a re-read picks from).
    settled: usize,
    /// The last prose template used, so sentences do not repeat back to back.
    last_sentence: usize,
}

impl Gen {
    fn new(seed: u64) -> Gen {
        Gen {
            rng: Rng::new(seed),
            calls: 0,
            clock_ms: 9 * 3_600_000,
            reads: Vec::new(),
            settled: 0,
            last_sentence: usize::MAX,
        }
    }

    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.rng.below(xs.len() as u64) as usize]
    }

    /// A number in `lo..=hi`.
    fn between(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.rng.below((hi - lo + 1) as u64) as usize
    }

    /// A source path: Rust three times in four, else Python.
    fn path(&mut self) -> String {
        if self.rng.below(4) == 0 {
            format!("{}/{}.py", self.pick(&PY_DIRS), self.pick(&IDENTS))
        } else {
            self.rust_path()
        }
    }

    fn rust_path(&mut self) -> String {
        format!("{}/{}.rs", self.pick(&DIRS), self.pick(&IDENTS))
    }

    /// Fills `{i}` (identifier), `{T}` (type), `{n}` (number below 5,000),
    /// `{d}` (below 100) and `{p}` (path) in a template, each drawn afresh.
    fn fill(&mut self, template: &str) -> String {
        let mut out = String::with_capacity(template.len() + 32);
        let mut rest = template;
        while let Some(at) = rest.find('{') {
            out.push_str(&rest[..at]);
            let slot = &rest[at..];
            let (piece, used) = match slot.get(..3) {
                Some("{i}") => (self.pick(&IDENTS).to_string(), 3),
                Some("{T}") => (self.pick(&TYPES).to_string(), 3),
                Some("{n}") => (self.rng.below(5_000).to_string(), 3),
                Some("{d}") => (self.rng.below(100).to_string(), 3),
                Some("{p}") => (self.path(), 3),
                _ => ("{".to_string(), 1),
            };
            out.push_str(&piece);
            rest = &slot[used..];
        }
        out.push_str(rest);
        out
    }

    /// Source lines (Rust or Python) of about `target` characters once
    /// numbered, from the top of a file (imports first) when `top`.
    fn code(&mut self, python: bool, top: bool, target: usize) -> Vec<String> {
        let mut lines = Vec::new();
        let mut chars = 0;
        let push = |lines: &mut Vec<String>, chars: &mut usize, s: String| {
            *chars += s.len() + 8;
            lines.push(s);
        };
        if top {
            let header: &[&str] = if python { &PY_HEADER } else { &RUST_HEADER };
            let skip = self.rng.below(header.len() as u64) as usize;
            let take = self.between(1, header.len() - 1);
            for l in header.iter().cycle().skip(skip).take(take) {
                let l = self.fill(l);
                push(&mut lines, &mut chars, l);
            }
            push(&mut lines, &mut chars, String::new());
        }
        let ind = "    ";
        let (sig, doc, stmt, open, end) = if python {
            (
                &PY_SIG[..],
                &PY_DOC[..],
                &PY_STMT[..],
                &PY_OPEN[..],
                &PY_END[..],
            )
        } else {
            (
                &RUST_SIG[..],
                &RUST_DOC[..],
                &RUST_STMT[..],
                &RUST_OPEN[..],
                &RUST_END[..],
            )
        };
        while chars < target {
            if python {
                let l = self.pick(sig);
                let l = self.fill(l);
                push(&mut lines, &mut chars, l);
                let d = self.pick(doc);
                let d = format!("{ind}{}", self.fill(d));
                push(&mut lines, &mut chars, d);
            } else {
                let d = self.pick(doc);
                let d = self.fill(d);
                push(&mut lines, &mut chars, d);
                let l = self.pick(sig);
                let l = self.fill(l);
                push(&mut lines, &mut chars, l);
            }
            let body = self.between(3, 8);
            for _ in 0..body {
                if self.rng.below(4) == 0 {
                    let o = self.pick(open);
                    let o = format!("{ind}{}", self.fill(o));
                    push(&mut lines, &mut chars, o);
                    let inner = self.between(1, 3);
                    for _ in 0..inner {
                        let s = self.pick(stmt);
                        let s = format!("{ind}{ind}{}", self.fill(s));
                        push(&mut lines, &mut chars, s);
                    }
                    if !python {
                        push(&mut lines, &mut chars, format!("{ind}}}"));
                    }
                } else {
                    let s = self.pick(stmt);
                    let s = format!("{ind}{}", self.fill(s));
                    push(&mut lines, &mut chars, s);
                }
            }
            let e = self.pick(end);
            let e = format!("{ind}{}", self.fill(e));
            push(&mut lines, &mut chars, e);
            if !python {
                push(&mut lines, &mut chars, "}".to_string());
            }
            push(&mut lines, &mut chars, String::new());
        }
        // A read stops at its line limit, wherever that falls.
        let mut total = 0;
        lines
            .into_iter()
            .take_while(|l| {
                total += l.len() + 8;
                total <= target
            })
            .collect()
    }

    /// Lines numbered as `cat -n` (and the Read tool) print them.
    fn numbered(first: usize, lines: &[String]) -> String {
        lines
            .iter()
            .enumerate()
            .map(|(k, l)| format!("{:>6}\t{l}\n", first + k))
            .collect()
    }

    /// A Read result of about `target` characters; now and then a file read
    /// on an earlier turn again, unchanged.
    fn read_output(&mut self, target: usize) -> (String, String) {
        if self.settled > 0 && self.rng.below(10) == 0 {
            let k = self.rng.below(self.settled as u64) as usize;
            return self.reads[k].clone();
        }
        let path = self.path();
        let top = self.rng.below(3) > 0;
        let lines = self.code(path.ends_with(".py"), top, target);
        let first = if top { 1 } else { 1 + 20 * self.between(2, 20) };
        let out = Gen::numbered(first, &lines);
        self.reads.push((path.clone(), out.clone()));
        (path, out)
    }

    /// A service log of about `target` characters.
    fn log(&mut self, target: usize) -> String {
        let mut out = String::with_capacity(target + 200);
        while out.len() < target {
            self.clock_ms += self.rng.below(900);
            let t = self.clock_ms;
            let level =
                ["INFO", "INFO", "INFO", "DEBUG", "WARN", "ERROR"][self.rng.below(6) as usize];
            let worker = self.rng.below(8);
            let path = self.path();
            let line = self.rng.below(900);
            let msg = self.pick(&LOG_MESSAGES);
            let msg = self.fill(msg);
            out.push_str(&format!(
                "2025-03-14T{:02}:{:02}:{:02}.{:03}Z {level:<5} worker-{worker} {path}:{line}: {msg}\n",
                t / 3_600_000 % 24,
                t / 60_000 % 60,
                t / 1000 % 60,
                t % 1000
            ));
        }
        out
    }

    fn grep_output(&mut self, target: usize) -> String {
        let mut out = String::new();
        while out.len() < target {
            let path = self.rust_path();
            let line = self.rng.below(900);
            let code = self.pick(&RUST_STMT);
            let code = self.fill(code);
            out.push_str(&format!("{path}:{line}:        {code}\n"));
        }
        out
    }

    fn glob_output(&mut self, target: usize) -> String {
        let mut out = String::new();
        while out.len() < target {
            let p = self.path();
            out.push_str(&format!("/work/app/{p}\n"));
        }
        out
    }

    fn test_output(&mut self, target: usize) -> String {
        let mut out = String::from("running tests\n");
        let mut n = 0;
        while out.len() < target {
            n += 1;
            let (m, a, b) = (self.pick(&IDENTS), self.pick(&IDENTS), self.pick(&IDENTS));
            let verdict = if self.rng.below(15) == 0 {
                "FAILED"
            } else {
                "ok"
            };
            out.push_str(&format!("test {m}::tests::{a}_{b} ... {verdict}\n"));
        }
        out.push_str(&format!(
            "\ntest result: ok. {n} passed; 0 failed; 0 ignored; finished in 1.{}s\n",
            self.rng.below(90)
        ));
        out
    }

    fn sentence(&mut self) -> String {
        let mut k = self.rng.below(SENTENCES.len() as u64) as usize;
        if k == self.last_sentence {
            k = (k + 1) % SENTENCES.len();
        }
        self.last_sentence = k;
        self.fill(SENTENCES[k])
    }

    /// An answer of `lo..=hi` words in paragraphs.
    fn answer(&mut self, lo: usize, hi: usize) -> String {
        let words = self.between(lo, hi);
        let mut out = String::new();
        let mut count = 0;
        let mut in_paragraph = 0;
        while count < words {
            let s = self.sentence();
            count += s.split_whitespace().count();
            if !out.is_empty() {
                out.push_str(if in_paragraph == 4 { "\n\n" } else { " " });
            }
            in_paragraph = if in_paragraph == 4 {
                1
            } else {
                in_paragraph + 1
            };
            out.push_str(&s);
        }
        out
    }

    fn summary(&mut self) -> String {
        let n = self.between(2, 4);
        let first = self.rng.below(SUMMARY_SENTENCES.len() as u64) as usize;
        SUMMARY_SENTENCES
            .iter()
            .cycle()
            .skip(first)
            .take(n)
            .map(|s| self.fill(s))
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn call(&mut self, name: &str, args: Value) -> (Value, String) {
        self.calls += 1;
        let id = format!("call_{}{:012x}", self.calls, self.rng.next() >> 16);
        (
            json!({"id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}}),
            id,
        )
    }

    fn result(id: &str, content: String) -> Value {
        json!({"role": "tool", "tool_call_id": id, "content": content})
    }

    fn assistant(content: Option<String>, calls: Vec<Value>) -> Value {
        json!({"role": "assistant", "content": content, "tool_calls": calls})
    }

    fn prose(&mut self) -> Value {
        json!({"role": "assistant", "content": self.sentence()})
    }

    /// The system prompt and the task.
    fn opening(&mut self) -> Vec<Value> {
        let task = format!(
            "Task: the {} in {} sometimes stalls under load and the {} tests are flaky. Find out why and fix it. Do not change the public API.",
            self.pick(&IDENTS),
            self.path(),
            self.pick(&IDENTS)
        );
        vec![
            json!({"role": "system", "content": "You are a coding agent working in /work/app. Use the tools to read, search, run and edit files; keep answers short."}),
            json!({"role": "user", "content": task}),
        ]
    }

    /// One turn of `shape`: the messages appended to the transcript.
    fn turn(&mut self, shape: Shape, turn: usize) -> Vec<Value> {
        self.settled = self.reads.len();
        match shape {
            Shape::ReadHeavy | Shape::IgnoresNudges => self.read_turn(false),
            Shape::PeriodicDump => self.read_turn(turn.is_multiple_of(5)),
            Shape::ProseOnly => self.prose_turn(),
            Shape::EditHeavy => self.edit_turn(),
            Shape::EditReread => self.edit_reread_turn(),
            Shape::Parallel => self.parallel_turn(),
            Shape::Rework => self.rework_turn(turn),
        }
    }

    /// A short ask, one line and one Read (or, with `dump`, one Bash whose
    /// output is a ~60,000-character log), then a line of prose.
    fn read_turn(&mut self, dump: bool) -> Vec<Value> {
        let ask = self.pick(&ASKS);
        let ask = self.fill(ask);
        let line = self.sentence();
        let (call, id, output) = if dump {
            let cmd = [
                "cargo test --workspace -- --nocapture 2>&1",
                "RUST_LOG=debug ./target/debug/server --replay fixtures/trace.bin 2>&1",
                "journalctl -u app --since '1 hour ago' --no-pager",
                "cat logs/worker.log",
            ][self.rng.below(4) as usize];
            let target = self.between(58_000, 62_000);
            let output = self.log(target);
            let (call, id) = self.call(
                "Bash",
                json!({"command": cmd, "description": "Collect the log of the failing run"}),
            );
            (call, id, output)
        } else {
            let target = self.between(2_300, 2_700);
            let (path, output) = self.read_output(target);
            let (call, id) = self.call("Read", json!({"file_path": format!("/work/app/{path}")}));
            (call, id, output)
        };
        vec![
            json!({"role": "user", "content": ask}),
            Gen::assistant(Some(line), vec![call]),
            Gen::result(&id, output),
            self.prose(),
        ]
    }

    /// An edit-reread turn ([`Gen::edit_reread_turn`]) and, every other
    /// turn, the tests run again with the same output as the time before.
    fn rework_turn(&mut self, turn: usize) -> Vec<Value> {
        let mut out = self.edit_reread_turn();
        if turn.is_multiple_of(2) {
            let (test, id) = self.call("Bash", json!({"command": "cargo test parser"}));
            let report: String = (1..=40)
                .map(|n| format!("test parser::case_{n} ... ok\n"))
                .collect();
            let prose = out.pop().expect("a turn ends in prose");
            out.push(Gen::assistant(None, vec![test]));
            out.push(Gen::result(&id, report));
            out.push(prose);
        }
        out
    }

    /// A question of 1–3 sentences and an answer of 150–400 words.
    fn prose_turn(&mut self) -> Vec<Value> {
        let n = self.between(1, 3);
        let question = (0..n)
            .map(|_| {
                let q = self.pick(&QUESTIONS);
                self.fill(q)
            })
            .collect::<Vec<_>>()
            .join(" ");
        vec![
            json!({"role": "user", "content": question}),
            json!({"role": "assistant", "content": self.answer(150, 400)}),
        ]
    }

    /// One or two Edit calls of 5–30 lines each, short confirmations with a
    /// 10-line snippet, then a line of prose.
    fn edit_turn(&mut self) -> Vec<Value> {
        let n = self.between(1, 2);
        let mut calls = Vec::new();
        let mut results = Vec::new();
        for _ in 0..n {
            let path = self.path();
            let py = path.ends_with(".py");
            let lines = self.between(5, 30);
            let old: Vec<String> = self
                .code(py, false, lines * 60)
                .into_iter()
                .take(lines)
                .collect();
            let mut new = old.clone();
            let changes = self.between(1, 3);
            for _ in 0..changes {
                let at = self.rng.below(new.len() as u64) as usize;
                let s = self.pick(if py { &PY_STMT[..] } else { &RUST_STMT[..] });
                let s = format!("    {}", self.fill(s));
                if self.rng.below(2) == 0 {
                    new[at] = s;
                } else {
                    new.insert(at, s);
                }
            }
            let (call, id) = self.call(
                "Edit",
                json!({"file_path": format!("/work/app/{path}"), "old_string": old.join("\n"), "new_string": new.join("\n")}),
            );
            let first = 1 + self.rng.below(400) as usize;
            let snippet: Vec<String> = new.iter().chain(old.iter()).take(10).cloned().collect();
            results.push(Gen::result(
                &id,
                format!(
                    "The file /work/app/{path} has been updated. Here's the result of running `cat -n` on a snippet of the edited file:\n{}",
                    Gen::numbered(first, &snippet)
                ),
            ));
            calls.push(call);
        }
        let line = (self.rng.below(2) == 0).then(|| self.sentence());
        let mut out = vec![Gen::assistant(line, calls)];
        out.extend(results);
        out.push(self.prose());
        out
    }

    /// A Read of a page of source, an Edit of 3–8 of its lines, and a Read
    /// of the same page again showing the change, each call in its own
    /// response as the model waits for the one before; then a line of prose.
    fn edit_reread_turn(&mut self) -> Vec<Value> {
        let path = self.path();
        let py = path.ends_with(".py");
        let target = self.between(2_000, 3_200);
        let top = self.rng.below(2) == 0;
        let lines = self.code(py, top, target);
        let first = 1 + 20 * self.between(0, 20);
        let file = format!("/work/app/{path}");
        let len = self.between(3, 8).min(lines.len());
        let at = self.rng.below((lines.len() - len + 1) as u64) as usize;
        let old = lines[at..at + len].to_vec();
        let mut new = old.clone();
        let k = self.rng.below(len as u64) as usize;
        let stmt = self.pick(if py { &PY_STMT[..] } else { &RUST_STMT[..] });
        new[k] = format!("    {}", self.fill(stmt));
        let mut after = lines.clone();
        after.splice(at..at + len, new.iter().cloned());
        let (read, read_id) = self.call("Read", json!({"file_path": file}));
        let (edit, edit_id) = self.call(
            "Edit",
            json!({"file_path": file, "old_string": old.join("\n"), "new_string": new.join("\n")}),
        );
        let (again, again_id) = self.call("Read", json!({"file_path": file}));
        let snippet = Gen::numbered(first + at, &new);
        let line = self.sentence();
        vec![
            Gen::assistant(Some(line), vec![read]),
            Gen::result(&read_id, Gen::numbered(first, &lines)),
            Gen::assistant(None, vec![edit]),
            Gen::result(
                &edit_id,
                format!(
                    "The file {file} has been updated. Here's the result of running `cat -n` on a snippet of the edited file:\n{snippet}"
                ),
            ),
            Gen::assistant(None, vec![again]),
            Gen::result(&again_id, Gen::numbered(first, &after)),
            self.prose(),
        ]
    }

    /// 3–6 parallel Read/Grep/Glob/Bash calls in one message, outputs mostly
    /// 200–2,000 characters and now and then ~10,000, then a line of prose.
    fn parallel_turn(&mut self) -> Vec<Value> {
        let n = self.between(3, 6);
        let mut calls = Vec::new();
        let mut results = Vec::new();
        for _ in 0..n {
            let size = if self.rng.below(8) == 0 {
                self.between(9_000, 11_000)
            } else {
                self.between(200, 2_000)
            };
            let (name, args, output) = match self.rng.below(4) {
                0 => {
                    let (path, out) = self.read_output(size);
                    (
                        "Read",
                        json!({"file_path": format!("/work/app/{path}")}),
                        out,
                    )
                }
                1 => {
                    let pattern = format!("fn {}|{}::new", self.pick(&IDENTS), self.pick(&TYPES));
                    let out = self.grep_output(size);
                    (
                        "Grep",
                        json!({"pattern": pattern, "path": "src", "output_mode": "content", "-n": true}),
                        out,
                    )
                }
                2 => {
                    let pattern = format!("{}/**/*.rs", self.pick(&DIRS));
                    let out = self.glob_output(size);
                    ("Glob", json!({"pattern": pattern}), out)
                }
                _ => {
                    let (cmd, out) = if self.rng.below(2) == 0 {
                        let m = self.pick(&IDENTS);
                        (format!("cargo test {m}:: 2>&1"), self.test_output(size))
                    } else {
                        ("tail -n 200 logs/worker.log".to_string(), self.log(size))
                    };
                    ("Bash", json!({"command": cmd}), out)
                }
            };
            let (call, id) = self.call(name, args);
            calls.push(call);
            results.push(Gen::result(&id, output));
        }
        let line = self.sentence();
        let mut out = vec![Gen::assistant(Some(line), calls)];
        out.extend(results);
        out.push(self.prose());
        out
    }
}

// ---------------------------------------------------------------------------
// The loop.

/// What one turn's request measured.
#[derive(Debug, Clone, Copy)]
struct TurnRecord {
    turn: usize,
    /// The simulated provider's count of the request.
    provider: usize,
    /// noa's own figure (`tokens` in the report).
    report: usize,
    nudge: bool,
    /// Ranges the model could read from the nudge.
    ranges: usize,
    truncated: usize,
}

/// What a run's requests cost, and how the cache served them.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct CacheFigures {
    /// Per request, in bytes at Anthropic's weights: a byte the cache did
    /// not serve costs 1.25 (a cache write), one it served 0.1.
    pub(crate) bill: f64,
    /// Bytes served over bytes sent, in percent.
    pub(crate) reuse: f64,
    /// Bytes served over bytes any placement of the changes could have had
    /// served (see `bytes_reusable`), in percent.
    pub(crate) efficiency: f64,
}

impl fmt::Display for CacheFigures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "bill {:.0} bytes a request, reuse {:.2}%, efficiency {:.2}%",
            self.bill, self.reuse, self.efficiency
        )
    }
}

/// What one shape run measured.
#[derive(Debug, Default)]
pub(crate) struct ShapeStats {
    shape: &'static str,
    limit: usize,
    pub(crate) turns: usize,
    nudges: usize,
    nudges_with_ranges: usize,
    /// Compress calls made (nudges answered).
    pub(crate) calls: usize,
    pub(crate) blocks: usize,
    pub(crate) rejected: usize,
    pub(crate) peak_provider_pct: usize,
    peak_report_pct: usize,
    first_over_90: Option<usize>,
    first_over_100: Option<usize>,
    first_ranged_nudge: Option<usize>,
    /// Largest |report − provider| / provider, in percent.
    max_error_pct: f64,
    /// The same from turn 2 on, once noa has the provider's figure.
    max_error_later_pct: f64,
    turns_truncated: usize,
    pub(crate) bytes_sent: usize,
    pub(crate) bytes_reused: usize,
    /// Bytes the turns appended to the transcript (see `LoopStats`).
    pub(crate) bytes_new: usize,
    /// For each request, the least of its length and the one before's.
    pub(crate) bytes_reusable: usize,
    /// The messages of the session, as generated: the opening, then each
    /// turn's (without the Compress exchanges), so another host can run the
    /// very same session.
    pub(crate) session: Vec<Vec<Value>>,
    /// Bytes of the views taken by Compress calls and their panels.
    pub(crate) compress_bytes: usize,
    /// The largest share of one view they took, in percent.
    pub(crate) compress_peak_pct: usize,
    /// The largest share of the window they took in one view, in tenths of
    /// a percent.
    pub(crate) compress_window_permille: usize,
    /// The first view that broke the provider's rules: turn and reason.
    invalid: Option<(usize, String)>,
    /// Provider count of the worst request over the window, with its turn.
    worst_over: Option<(usize, usize)>,
    /// Provider % every 10 turns, to see the curve.
    curve: Vec<usize>,
    /// On each turn after a compression: characters of stale reads the
    /// view shows whole outside its recent end, and of all stale reads
    /// there (see [`stale_in_view`]).
    pub(crate) stale_shown: usize,
    pub(crate) stale_total: usize,
    /// Each request's bytes sent, bytes reused and bytes reusable (see
    /// `bytes_reusable`), in order.
    pub(crate) requests: Vec<(usize, usize, usize)>,
}

impl ShapeStats {
    fn record(&mut self, r: TurnRecord) {
        let limit = self.limit;
        self.turns = r.turn;
        self.peak_provider_pct = self.peak_provider_pct.max(r.provider * 100 / limit);
        self.peak_report_pct = self.peak_report_pct.max(r.report * 100 / limit);
        if r.provider * 10 > limit * 9 {
            self.first_over_90.get_or_insert(r.turn);
        }
        if r.provider > limit {
            self.first_over_100.get_or_insert(r.turn);
            if self.worst_over.is_none_or(|(_, c)| r.provider > c) {
                self.worst_over = Some((r.turn, r.provider));
            }
        }
        if r.nudge {
            self.nudges += 1;
            if r.ranges > 0 {
                self.nudges_with_ranges += 1;
                self.first_ranged_nudge.get_or_insert(r.turn);
            }
        }
        let error = r.report.abs_diff(r.provider) as f64 * 100.0 / r.provider as f64;
        self.max_error_pct = self.max_error_pct.max(error);
        if r.turn > 1 {
            self.max_error_later_pct = self.max_error_later_pct.max(error);
        }
        self.turns_truncated += usize::from(r.truncated > 0);
        if r.turn.is_multiple_of(10) {
            self.curve.push(r.provider * 100 / limit);
        }
    }

    fn reuse_pct(&self) -> usize {
        self.bytes_reused * 100 / self.bytes_sent.max(1)
    }

    /// What the first `n` requests cost and how the cache served them.
    fn figures_to(&self, n: usize) -> CacheFigures {
        let sum = |f: fn(&(usize, usize, usize)) -> usize| -> f64 {
            self.requests[..n].iter().map(f).sum::<usize>() as f64
        };
        let (sent, reused, reusable) = (sum(|r| r.0), sum(|r| r.1), sum(|r| r.2));
        CacheFigures {
            bill: ((sent - reused) * 1.25 + reused * 0.1) / n as f64,
            reuse: reused * 100.0 / sent,
            efficiency: reused * 100.0 / reusable.max(1.0),
        }
    }

    /// [`figures_to`](Self::figures_to) averaged over every horizon of the
    /// last [`HORIZONS`] turns. A compression is paid for at once and earned
    /// back over the turns after it, so a run stopped at one turn is charged
    /// for where it stands in its cycle: two runs whose compressions fall a
    /// turn apart differ at any single horizon by up to a whole compression,
    /// either way.
    pub(crate) fn over_horizons(&self) -> CacheFigures {
        let last = self.requests.len();
        let horizons = last.saturating_sub(HORIZONS).max(1)..=last;
        let count = horizons.clone().count() as f64;
        let mut mean = CacheFigures::default();
        for f in horizons.map(|n| self.figures_to(n)) {
            mean.bill += f.bill / count;
            mean.reuse += f.reuse / count;
            mean.efficiency += f.efficiency / count;
        }
        mean
    }

    /// The product's promises this run broke, one line each.
    fn broken_promises(&self, shape: Shape, turns: usize) -> Vec<String> {
        let mut out = Vec::new();
        if let Some((turn, e)) = &self.invalid {
            out.push(format!(
                "turn {turn}: the view is not a valid chat request: {e}"
            ));
        } else if self.turns != turns {
            out.push(format!("ran {} of {turns} turns", self.turns));
        }
        if let (Some(first), Some((worst_turn, worst))) = (self.first_over_100, self.worst_over) {
            out.push(format!(
                "turn {first}: the request went over the {} window (worst: {worst} tokens at turn {worst_turn}, {}%)",
                self.limit, self.peak_provider_pct
            ));
        }
        if shape.answers_nudges() {
            if let Some(t90) = self.first_over_90 {
                match self.first_ranged_nudge {
                    Some(n) if n < t90 => {}
                    first => out.push(format!(
                        "turn {t90}: the request passed 90% of the window with no nudge carrying ranges before it (first such nudge: {first:?}; nudges {}, with ranges {})",
                        self.nudges, self.nudges_with_ranges
                    )),
                }
            }
            if self.rejected * 10 > self.calls {
                out.push(format!(
                    "{} of {} Compress calls rejected (over 10%)",
                    self.rejected, self.calls
                ));
            }
        } else if self.nudges == 0 {
            out.push("no nudge was ever shown".to_string());
        }
        out
    }
}

impl fmt::Display for ShapeStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let turn = |t: Option<usize>| t.map_or("-".to_string(), |t| t.to_string());
        write!(
            f,
            "{} @ {}K: turns {} · nudges {} (with ranges {}, first at {}) · calls {} · blocks {} · rejected {} · peak provider {}% · peak report {}% · first >90% {} · first >100% {} · figure error max {:.1}% (from turn 2: {:.1}%) · turns truncated {} · prefix reuse {}%{}\n  provider % every 10 turns: {:?}",
            self.shape,
            self.limit / 1000,
            self.turns,
            self.nudges,
            self.nudges_with_ranges,
            turn(self.first_ranged_nudge),
            self.calls,
            self.blocks,
            self.rejected,
            self.peak_provider_pct,
            self.peak_report_pct,
            turn(self.first_over_90),
            turn(self.first_over_100),
            self.max_error_pct,
            self.max_error_later_pct,
            self.turns_truncated,
            self.reuse_pct(),
            self.invalid
                .as_ref()
                .map_or(String::new(), |(t, e)| format!(
                    " · INVALID at turn {t}: {e}"
                )),
            self.curve,
        )
    }
}

fn project(
    dir: &Path,
    transcript: &Path,
    limit: usize,
    input_tokens: Option<usize>,
) -> (String, Value) {
    let limit = limit.to_string();
    let n = input_tokens.map(|n| n.to_string());
    let mut args = vec![
        "project",
        transcript.to_str().unwrap(),
        "--state-dir",
        "st",
        "--limit",
        &limit,
        "--report",
        "json",
    ];
    if let Some(n) = &n {
        args.extend(["--input-tokens", n.as_str()]);
    }
    let out = noa(dir, &args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "noa project failed: {stderr}");
    let line = stderr.lines().last().unwrap_or("");
    let report = serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("the report is not JSON ({e}): {stderr}"));
    (String::from_utf8(out.stdout).unwrap(), report)
}

fn common_prefix(a: &str, b: &str) -> usize {
    a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count()
}

fn push(text: &mut String, m: &Value) {
    text.push_str(&m.to_string());
    text.push('\n');
}

/// Runs `turns` turns of `shape` at `limit` through the binary.
pub(crate) fn run(shape: Shape, seed: u64, turns: usize, limit: usize) -> ShapeStats {
    let dir = TempDir::new();
    run_in(&dir, shape, seed, turns, limit)
}

/// The loop in `dir` (transcript `agent.jsonl`, state under `st/`).
pub(crate) fn run_in(
    dir: &TempDir,
    shape: Shape,
    seed: u64,
    turns: usize,
    limit: usize,
) -> ShapeStats {
    let path = dir.path().join("agent.jsonl");
    let mut g = Gen::new(seed);
    let mut text = String::new();
    let opening = g.opening();
    for m in &opening {
        push(&mut text, m);
    }
    let mut stats = ShapeStats {
        shape: shape.name(),
        limit,
        session: vec![opening],
        ..ShapeStats::default()
    };
    // NOA_SHAPES_TRACE=1 prints every turn's figures and every panel.
    let trace = std::env::var_os("NOA_SHAPES_TRACE").is_some();
    let mut previous = String::new();
    let mut last_request: Option<usize> = None;
    for turn in 1..=turns {
        let messages = g.turn(shape, turn);
        for m in &messages {
            let before = text.len();
            push(&mut text, m);
            stats.bytes_new += text.len() - before;
        }
        stats.session.push(messages);
        fs::write(&path, &text).unwrap();
        let (raw, report) = project(dir.path(), &path, limit, last_request);
        let view: Vec<Value> = raw
            .lines()
            .map(|l| {
                serde_json::from_str(l)
                    .unwrap_or_else(|e| panic!("turn {turn}: view line is not JSON ({e}): {l}"))
            })
            .collect();
        if let Err(e) = check_chat(&view) {
            stats.turns = turn;
            stats.invalid = Some((turn, e));
            break;
        }

        let provider = provider_count(&raw);
        last_request = Some(provider);
        stats.bytes_sent += raw.len();
        let reused = common_prefix(&previous, &raw);
        stats.bytes_reused += reused;
        stats.bytes_reusable += previous.len().min(raw.len());
        let overhead = compress_bytes(&raw);
        stats.compress_bytes += overhead;
        stats.compress_peak_pct = stats
            .compress_peak_pct
            .max(overhead * 100 / raw.len().max(1));
        stats.compress_window_permille = stats
            .compress_window_permille
            .max(overhead * provider / raw.len().max(1) * 1000 / limit);
        let nudge = !report["nudge"].is_null();
        stats
            .requests
            .push((raw.len(), reused, previous.len().min(raw.len())));
        let ranges = if nudge {
            let text = view
                .last()
                .and_then(|m| m["content"].as_str())
                .unwrap_or("");
            ranges_from_nudge(text)
        } else {
            Vec::new()
        };
        stats.record(TurnRecord {
            turn,
            provider,
            report: report["request"]
                .as_u64()
                .unwrap_or_else(|| panic!("turn {turn}: report without tokens: {report}"))
                as usize,
            nudge,
            ranges: ranges.len(),
            truncated: report["truncated"].as_u64().unwrap_or(0) as usize,
        });
        previous = raw;
        if trace {
            eprintln!(
                "  {} @ {}K turn {turn}: provider {provider} · reused {reused} of {} · report {} · nudge {:?} · ranges {ranges:?} · truncated {} · {}",
                shape.name(),
                limit / 1000,
                previous.len(),
                report["request"],
                report["nudge"]["tier"],
                report["truncated"],
                report["reason"]
            );
        }
        if !nudge || !shape.answers_nudges() {
            continue;
        }
        // The model answers the nudge with exactly the ranges it lists.
        stats.calls += 1;
        let content: Vec<Value> = ranges
            .iter()
            .map(|(a, b)| json!({"startId": a, "endId": b, "summary": g.summary()}))
            .collect();
        let args = json!({"topic": format!("work before turn {turn}"), "content": content});
        let (call, id) = g.call("Compress", args);
        push(&mut text, &Gen::assistant(None, vec![call]));
        fs::write(&path, &text).unwrap();
        let (code, panel) = apply_call(dir.path(), &path, limit);
        match code {
            Some(0) => stats.blocks += panel.matches("(T").count(),
            Some(1) => stats.rejected += 1,
            other => panic!(
                "{} @ {limit}, turn {turn}: apply failed ({other:?}): {panel}",
                shape.name()
            ),
        }
        if trace {
            eprintln!("  apply → {code:?}: {panel}");
        }
        push(&mut text, &Gen::result(&id, panel));
        fs::write(&path, &text).unwrap();
        let (shown, total) = stale_after_call(dir.path(), &text, limit);
        stats.stale_shown += shown;
        stats.stale_total += total;
    }
    stats
}

/// Runs `shape` at both windows, prints the stats, then asserts the promises.
fn check_shape(shape: Shape, seed: u64) {
    let mut broken = Vec::new();
    for (limit, turns) in RUNS {
        let s = run(shape, seed, turns, limit);
        eprintln!("{s}");
        broken.extend(
            s.broken_promises(shape, turns)
                .into_iter()
                .map(|b| format!("{} @ {}K: {b}", shape.name(), limit / 1000)),
        );
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

#[test]
fn read_heavy() {
    check_shape(Shape::ReadHeavy, 11);
}

#[test]
fn prose_only() {
    check_shape(Shape::ProseOnly, 12);
}

#[test]
fn periodic_dump() {
    check_shape(Shape::PeriodicDump, 13);
}

#[test]
fn edit_heavy() {
    check_shape(Shape::EditHeavy, 14);
}

#[test]
fn edit_reread() {
    check_shape(Shape::EditReread, 17);
}

#[test]
fn parallel() {
    check_shape(Shape::Parallel, 15);
}

#[test]
fn ignores_nudges() {
    check_shape(Shape::IgnoresNudges, 16);
}

/// Under pressure at a small window (cuts on most turns, tier-2 and tier-3
/// consolidations), a lost state comes back from the transcript alone, with
/// no window given: every block field, every archive and the next view as
/// the live run left them.
#[test]
fn a_pressured_loop_rebuilds_exactly_without_its_window() {
    use crate::rebuild::{archives, blocks};
    let dir = TempDir::new();
    let stats = run_in(&dir, Shape::Parallel, 7, 120, 16_000);
    eprintln!("{stats}");
    assert!(stats.turns_truncated > 0 && stats.blocks > 10, "{stats}");
    // The host's next turn: the last call's answer gets seen.
    let next = [
        "project",
        "agent.jsonl",
        "--state-dir",
        "st",
        "--limit",
        "16000",
    ];
    assert!(noa(dir.path(), &next).status.success());
    let session = dir.path().join("st/agent");
    let state_path = session.join("state.json");
    let live = super::common::state_json(&state_path);
    let live_refs = super::common::refs_of(&state_path);
    let before = archives(&session);
    let view_of = || {
        let args = [
            "project",
            "agent.jsonl",
            "--state-dir",
            "st",
            "--limit",
            "16000",
            "--dry-run",
        ];
        String::from_utf8(noa(dir.path(), &args).stdout).unwrap()
    };
    let live_view = view_of();
    fs::remove_file(&state_path).unwrap();
    let lost_view = view_of();
    let out = noa(dir.path(), &["rebuild", "agent.jsonl", "--state-dir", "st"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rebuilt = super::common::state_json(&state_path);
    assert_eq!(blocks(&rebuilt), blocks(&live));
    assert_eq!(super::common::refs_of(&state_path), live_refs);
    assert_eq!(archives(&session), before);
    let same = live_view
        .lines()
        .zip(lost_view.lines())
        .take_while(|(a, b)| a == b)
        .count();
    eprintln!(
        "view without state.json: {same} of {} lines the same",
        live_view.lines().count()
    );
    assert_eq!(lost_view, live_view, "the view the state would have given");
}

/// Of the stale reads in the view right after a compression, outside the
/// recent zone as `noa ranges` gives it, the characters still shown
/// (whole, or what a cut left), and all of theirs. A stale read is found
/// here from the transcript `text` alone: a `Read` result of 1,000
/// characters or more whose file a later `Edit` changed.
fn stale_after_call(dir: &Path, text: &str, limit: usize) -> (usize, usize) {
    let limit = limit.to_string();
    let args = ["--state-dir", "st", "--limit", limit.as_str()];
    let ranges = noa(
        dir,
        &[&["ranges", "agent.jsonl", "--json"], &args[..]].concat(),
    );
    let ranges: Value = serde_json::from_slice(&ranges.stdout).unwrap();
    let zone = (ranges["protected"].as_array().into_iter().flatten())
        .filter(|r| r["reason"] == "recent")
        .filter_map(|r| r["start_ref"].as_str())
        .min()
        .unwrap_or("m99999")
        .to_string();
    let out = noa(
        dir,
        &[&["project", "agent.jsonl", "--dry-run"], &args[..]].concat(),
    );
    let view: Vec<Value> = (String::from_utf8(out.stdout).unwrap().lines())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut calls = std::collections::HashMap::new();
    let mut pending: std::collections::HashMap<String, Vec<String>> = Default::default();
    let mut stale = std::collections::HashMap::new();
    for m in text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
    {
        for c in m["tool_calls"].as_array().into_iter().flatten() {
            let args: Value =
                serde_json::from_str(c["function"]["arguments"].as_str().unwrap_or(""))
                    .unwrap_or_default();
            let path = args["file_path"].as_str().unwrap_or("").to_string();
            calls.insert(
                c["id"].as_str().unwrap_or("").to_string(),
                (c["function"]["name"].clone(), path),
            );
        }
        let Some(id) = m["tool_call_id"].as_str() else {
            continue;
        };
        let output = m["content"].as_str().unwrap_or("");
        match calls.get(id) {
            Some((name, path)) if name == "Read" && output.len() >= 1_000 => {
                pending
                    .entry(path.clone())
                    .or_default()
                    .push(id.to_string());
            }
            Some((name, path)) if name == "Edit" => {
                for read in pending.remove(path).unwrap_or_default() {
                    stale.insert(read, output.len());
                }
            }
            _ => {}
        }
    }
    let stale: std::collections::HashMap<String, usize> = stale
        .into_keys()
        .map(|id| {
            let original = text
                .lines()
                .find(|l| l.contains(&format!("\"tool_call_id\":\"{id}\"")))
                .map_or(0, |l| {
                    serde_json::from_str::<Value>(l)
                        .map_or(0, |v| v["content"].as_str().unwrap_or("").len())
                });
            (id, original)
        })
        .collect();
    let (mut shown, mut total) = (0, 0);
    for m in &view {
        let Some(&original) = m["tool_call_id"].as_str().and_then(|id| stale.get(id)) else {
            continue;
        };
        let content = m["content"].as_str().unwrap_or("");
        let reference = content
            .rsplit("<noa-ref id=\"")
            .next()
            .unwrap_or("")
            .get(..6)
            .unwrap_or("");
        if reference >= zone.as_str() {
            continue;
        }
        total += original;
        if !content.starts_with("[noa: ") {
            shown += content.len().min(original);
        }
    }
    (shown, total)
}

/// Loops that read, edit and read again (and read-heavy ones, whose re-reads
/// repeat), with and without reclaiming dead outputs: reclaiming must not
/// bring more nudges or Compress calls, nor a higher bill, a lower reuse or
/// a lower efficiency over the last turns' horizons; it must leave at most a tenth of
/// the stale reads' characters in view outside the recent zone after a
/// compression (without it, the edit loops leave 40% and all), keep every
/// view valid and rebuild exactly.
#[test]
fn reclaiming_dead_outputs_in_loops() {
    let mut stale_left_without = 0;
    for (shape, seed) in [(Shape::Rework, 21), (Shape::ReadHeavy, 11)] {
        for (limit, turns) in RUNS {
            let run = |reclaim| reclaim_run((shape, seed), limit, turns, reclaim);
            let (off, on) = (run(false), run(true));
            assert!(
                on.nudges <= off.nudges && on.calls <= off.calls,
                "{off}\n{on}"
            );
            let (before, after) = (off.over_horizons(), on.over_horizons());
            eprintln!(
                "{} @ {}K over the last {HORIZONS} horizons: {before} → {after}",
                shape.name(),
                limit / 1000
            );
            assert!(
                after.bill <= before.bill
                    && after.reuse >= before.reuse
                    && after.efficiency >= before.efficiency,
                "{before} → {after}\n{off}\n{on}"
            );
            assert!(on.stale_shown * 10 <= on.stale_total, "{on}");
            if shape == Shape::Rework {
                stale_left_without += off.stale_shown;
            }
        }
    }
    assert!(stale_left_without > 0, "no stale read left to measure");
}

/// One loop of `shape` with reclaiming `reclaim`, checked: every view valid,
/// the transcript rebuilds to the live state, and every reclaimed original
/// whole in its archive.
fn reclaim_run(
    (shape, seed): (Shape, u64),
    limit: usize,
    turns: usize,
    reclaim: bool,
) -> ShapeStats {
    let dir = TempDir::new();
    let config = format!("[engine]\nreclaim = {reclaim}\n");
    fs::write(dir.path().join("noa.toml"), config).unwrap();
    let s = run_in(&dir, shape, seed, turns, limit);
    eprintln!(
        "reclaim = {reclaim}: {s}\n  stale reads shown after a compression: {} of {} characters · {} of {} bytes reused",
        s.stale_shown, s.stale_total, s.bytes_reused, s.bytes_sent
    );
    assert!(s.invalid.is_none(), "{s}");
    let check = ["rebuild", "agent.jsonl", "--state-dir", "st", "--check"];
    let out = noa(dir.path(), &check);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let state = crate::common::state_json(&dir.path().join("st/agent/state.json"));
    for (id, r) in state["host"]["reclaimed"].as_object().into_iter().flatten() {
        let archive = fs::read_to_string(r["archive"].as_str().unwrap()).unwrap();
        assert!(archive.contains("topic: ") && archive.len() > 1_000, "{id}");
    }
    s
}
