//! Cache economics of the agent loop: what the requests of a session cost
//! with noa, and with a host that compacts as Claude Code does, on the very
//! same session, at windows from 30K to 128K.
//!
//! `cargo bench --bench agent_loop` drives the release binary through the
//! scripted loops the integration tests use (a generated chat session in
//! `tests/suite/agent_loop.rs`, the read-heavy and edit-reread shapes in
//! `tests/suite/shapes.rs`): each turn appends the model's messages, runs
//! `noa project`, and when the view ends in a nudge the scripted model
//! compresses the ranges it lists and `noa apply` runs. Then the same turns
//! go through the host of `agent_loop/host.rs`. Each row prints, for both:
//!
//! - bill / request: (bytes the cache did not serve × 1.25 + bytes it served
//!   × 0.1) over the turns, the cache serving the prefix a request shares
//!   with the one before (Anthropic's weights): reuse bought by sending more
//!   can cost more;
//! - cache reuse: bytes served over bytes sent;
//! - reuse bound: 1 − the bytes the turns appended over bytes sent, what no
//!   placement of the changes can beat;
//! - efficiency: bytes served over what any placement could have had served,
//!   the lesser of each request's length and the one before's;
//! - compressions: Compress calls (blocks they made, rejections), or the
//!   host's compactions (and its bill without their summarising requests);
//! - peak: the largest request, as a share of the window;
//! - for noa, the Compress overhead (bytes of Compress calls and panels over
//!   bytes sent; the largest share of one view, and of the window) and
//!   `noa rebuild --check` on the run's transcript (its time, and whether it
//!   rebuilds the live state).
//!
//! Figures, not assertions; the floors are asserted by the tests.

#![allow(clippy::disallowed_methods, clippy::disallowed_macros)]

#[path = "../tests/suite/agent_loop.rs"]
#[allow(dead_code)]
mod agent_loop;
#[path = "../tests/suite/common/mod.rs"]
#[allow(dead_code)]
mod common;
#[path = "agent_loop/host.rs"]
mod host;
#[path = "../tests/suite/providers.rs"]
#[allow(dead_code, unused_imports)]
mod providers;
#[path = "../tests/suite/shapes.rs"]
#[allow(dead_code)]
mod shapes;
#[path = "../tests/suite/synth.rs"]
#[allow(dead_code)]
mod synth;

use std::path::Path;
use std::time::Instant;

use serde_json::Value;

/// What one strategy's run measured, in the bytes of its requests.
struct Bytes {
    turns: usize,
    sent: usize,
    reused: usize,
    new: usize,
    reusable: usize,
}

impl Bytes {
    /// The average request's bill in bytes at the uncached price: what the
    /// cache served at a tenth, the rest written to the cache at 1.25×.
    fn bill(&self) -> f64 {
        ((self.sent - self.reused) as f64 * 1.25 + self.reused as f64 * 0.1)
            / self.turns.max(1) as f64
    }

    /// Cache reuse: bytes of each request that were a prefix of the one
    /// before, over all bytes sent.
    fn reuse(&self) -> f64 {
        self.reused as f64 / self.sent.max(1) as f64
    }

    /// The reuse bound: what each turn appends is new to any cache, so reuse
    /// can never pass 1 − new bytes ÷ bytes sent.
    fn bound(&self) -> f64 {
        1.0 - self.new as f64 / self.sent.max(1) as f64
    }

    /// Efficiency: bytes reused over the bytes any placement of the changes
    /// could have reused, the least of each request's length and the one
    /// before's (a cache holds no more than the request before, and serves
    /// no more than the request itself).
    fn efficiency(&self) -> f64 {
        self.reused as f64 / self.reusable.max(1) as f64
    }
}

/// One strategy's line of a row.
struct Line {
    strategy: &'static str,
    turns: usize,
    bytes: Bytes,
    /// Compress calls (with the blocks they made), or compactions.
    compressions: String,
    peak_pct: usize,
    /// Compress overhead and rebuild, for noa; a dash for the host.
    overhead: String,
    rebuild: String,
}

fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

fn print(name: &str, line: &Line) {
    let b = &line.bytes;
    println!(
        "| {name} | {} | {} | {:.1} KB | {} | {} | {} | {} | {}% | {} | {} |",
        line.strategy,
        line.turns,
        b.bill() / 1000.0,
        pct(b.reuse()),
        pct(b.bound()),
        pct(b.efficiency()),
        line.compressions,
        line.peak_pct,
        line.overhead,
        line.rebuild,
    );
}

/// `noa rebuild --check` on the run in `dir` (transcript `agent.jsonl`,
/// state under `st/`): its time, and whether it rebuilds the live state.
fn rebuild(dir: &Path) -> String {
    let start = Instant::now();
    let out = common::noa(
        dir,
        &["rebuild", "agent.jsonl", "--state-dir", "st", "--check"],
    );
    let seconds = start.elapsed().as_secs_f64();
    let same = if out.status.success() {
        "same state"
    } else {
        "differs"
    };
    format!("{seconds:.2}s, {same}")
}

/// A fresh session folder; with `NOA_BENCH_CONFIG=FILE`, that config file
/// is copied in as `noa.toml`, so the loops run with its settings.
fn session_dir() -> common::TempDir {
    let dir = common::TempDir::new();
    if let Some(file) = std::env::var_os("NOA_BENCH_CONFIG") {
        std::fs::copy(&file, dir.path().join("noa.toml")).expect("NOA_BENCH_CONFIG is readable");
    }
    dir
}

/// noa's own count of a chat request (`project --dry-run` at a window it
/// never nears, so nothing is cut or nudged): the scale noa's chat loop
/// decides on, so both strategies meet the same window.
fn noa_count(dir: &Path, raw: &str) -> usize {
    std::fs::write(dir.join("host.jsonl"), raw).expect("writable");
    let out = common::noa(
        dir,
        &[
            "project",
            "host.jsonl",
            "--state-dir",
            "host-st",
            "--limit",
            "10000000",
            "--dry-run",
            "--report",
            "json",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let report: Value = serde_json::from_str(stderr.lines().last().unwrap_or(""))
        .unwrap_or_else(|e| panic!("no report ({e}): {stderr}"));
    report["request"].as_u64().expect("a request figure") as usize
}

/// The chat session of the loop, cut as the loop feeds it: the system
/// prompt and task, then one assistant turn (with its tool results and any
/// user follow-up) at a time.
fn chat_turns(seed: u64, turns: usize) -> (Vec<Value>, Vec<Vec<Value>>) {
    let session = synth::chat_session(seed, turns);
    let mut out = Vec::new();
    let mut next = 2;
    while next < session.len() {
        let start = next;
        next += 1;
        while next < session.len() && session[next]["role"] != "assistant" {
            next += 1;
        }
        out.push(session[start..next].to_vec());
    }
    (session[..2].to_vec(), out)
}

/// The host's line for a run over `opening` and `turns`.
fn host_line(
    opening: &[Value],
    turns: &[Vec<Value>],
    limit: usize,
    count: &mut dyn FnMut(&str) -> usize,
) -> Line {
    let h = host::run(opening, turns, limit, count);
    Line {
        strategy: "CC-style",
        turns: h.turns,
        bytes: Bytes {
            turns: h.turns,
            sent: h.bytes_sent,
            reused: h.bytes_reused,
            new: h.bytes_new,
            reusable: h.bytes_reusable,
        },
        compressions: format!(
            "{} ({:.1} KB without the summarising requests)",
            h.compactions,
            Bytes {
                turns: h.turns,
                sent: h.bytes_sent - h.summarising.0,
                reused: h.bytes_reused - h.summarising.1,
                new: 0,
                reusable: 0,
            }
            .bill()
                / 1000.0
        ),
        peak_pct: h.peak_pct,
        overhead: "–".into(),
        rebuild: "–".into(),
    }
}

/// Compress overhead: its share of all bytes sent, then the largest of one
/// view and of the window.
fn overhead(bytes: usize, sent: usize, peak_pct: usize, window_permille: usize) -> String {
    format!(
        "{:.1}% (max {peak_pct}% of a view, {}.{}% of the window)",
        bytes as f64 * 100.0 / sent.max(1) as f64,
        window_permille / 10,
        window_permille % 10
    )
}

fn chat_row(name: &str, seed: u64, turns: usize, limit: usize) {
    let dir = session_dir();
    let s = agent_loop::run_loop_in(dir.path(), seed, turns, limit, &[]);
    print(
        name,
        &Line {
            strategy: "noa",
            turns: s.turns,
            bytes: Bytes {
                turns: s.turns,
                sent: s.bytes_sent,
                reused: s.bytes_reused,
                new: s.bytes_new,
                reusable: s.bytes_reusable,
            },
            compressions: format!(
                "{} ({} blocks, {} rejected)",
                s.nudges, s.blocks, s.rejected
            ),
            peak_pct: s.peak_pct,
            overhead: overhead(
                s.compress_bytes,
                s.bytes_sent,
                s.compress_peak_pct,
                s.compress_window_permille,
            ),
            rebuild: rebuild(dir.path()),
        },
    );
    if !with_host() {
        return;
    }
    let (opening, steps) = chat_turns(seed, turns);
    let host_dir = common::TempDir::new();
    let mut count = |raw: &str| noa_count(host_dir.path(), raw);
    print(name, &host_line(&opening, &steps, limit, &mut count));
}

fn shape_row(name: &str, shape: shapes::Shape, seed: u64, turns: usize, limit: usize) {
    let dir = session_dir();
    let s = shapes::run_in(&dir, shape, seed, turns, limit);
    print(
        name,
        &Line {
            strategy: "noa",
            turns: s.turns,
            bytes: Bytes {
                turns: s.turns,
                sent: s.bytes_sent,
                reused: s.bytes_reused,
                new: s.bytes_new,
                reusable: s.bytes_reusable,
            },
            compressions: format!("{} ({} blocks, {} rejected)", s.calls, s.blocks, s.rejected),
            peak_pct: s.peak_provider_pct,
            overhead: overhead(
                s.compress_bytes,
                s.bytes_sent,
                s.compress_peak_pct,
                s.compress_window_permille,
            ),
            rebuild: rebuild(dir.path()),
        },
    );
    if !with_host() {
        return;
    }
    // The simulated provider's count, which noa's loop was handed back.
    let mut count = |raw: &str| shapes::provider_count(raw);
    let (opening, steps) = s.session.split_first().expect("an opening");
    print(name, &host_line(opening, steps, limit, &mut count));
}

/// `NOA_BENCH_HOST=0` leaves the host's lines out (they do not depend on
/// noa's settings), to try configs faster.
fn with_host() -> bool {
    std::env::var("NOA_BENCH_HOST").map_or(true, |v| v != "0")
}

fn main() {
    // `cargo test --all-targets` also runs this target, without `--bench`:
    // the loops are only for `cargo bench`.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    // `cargo bench --bench agent_loop -- 40K` runs only the rows whose name
    // holds one of the words given.
    let only: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    // `NOA_BENCH_SEED=N` generates other sessions of the same shapes.
    let seed: u64 = std::env::var("NOA_BENCH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let wanted = |name: &str| only.is_empty() || only.iter().any(|w| name.contains(w.as_str()));
    println!(
        "| window / shape | strategy | turns | bill / request | cache reuse | reuse bound | efficiency | compressions | peak | Compress overhead | rebuild |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    let chat = [
        (30_000, 120),
        (40_000, 160),
        (60_000, 300),
        (80_000, 360),
        (128_000, 400),
    ];
    for (limit, turns) in chat {
        let name = format!("chat {}K", limit / 1000);
        if wanted(&name) {
            chat_row(&name, seed, turns, limit);
        }
    }
    let shaped = [
        (shapes::Shape::ReadHeavy, "read-heavy", 10, 30_000, 160),
        (shapes::Shape::ReadHeavy, "read-heavy", 10, 40_000, 200),
        (shapes::Shape::ReadHeavy, "read-heavy", 10, 128_000, 400),
        (shapes::Shape::EditReread, "edit-reread", 20, 30_000, 160),
        (shapes::Shape::EditReread, "edit-reread", 20, 40_000, 200),
        (shapes::Shape::EditReread, "edit-reread", 20, 128_000, 400),
    ];
    for (shape, label, offset, limit, turns) in shaped {
        let name = format!("{label} {}K", limit / 1000);
        if wanted(&name) {
            shape_row(&name, shape, seed + offset, turns, limit);
        }
    }
}
