//! Cache economics of the agent loop: how much of every request the
//! provider's prompt cache can serve, at windows from 30K to 128K.
//!
//! `cargo bench --bench agent_loop` drives the release binary through the
//! scripted loops the integration tests use (a generated chat session in
//! `tests/suite/agent_loop.rs`, the read-heavy shape in
//! `tests/suite/shapes.rs`): each turn appends the model's messages, runs
//! `noa project`, and when the view ends in a nudge the scripted model
//! compresses the ranges it lists and `noa apply` runs. It prints one row per
//! run:
//!
//! - cache reuse: bytes of each view that are a prefix of the view before,
//!   over all bytes sent;
//! - compressions: Compress calls made (blocks they created), and rejections;
//! - billed: what the requests cost on average, in bytes at the uncached
//!   price, at Anthropic's rates (a cache write 1.25×, a cache read 0.1×):
//!   a higher reuse bought by sending more can cost more;
//! - peak: the largest request, as a share of the window;
//! - Compress overhead: bytes of the views taken by Compress calls and their
//!   panels, over all bytes sent; then the largest share of one view they
//!   took, and the largest share of the window;
//! - rebuild: how long `noa rebuild --check` takes to replay the run's
//!   Compress calls from its transcript alone (what a host that lost its
//!   state dir pays once), and whether the state it rebuilds is the live one.
//!
//! Figures, not assertions; the floors are asserted by the tests.

#![allow(clippy::disallowed_methods, clippy::disallowed_macros)]

#[path = "../tests/suite/agent_loop.rs"]
#[allow(dead_code)]
mod agent_loop;
#[path = "../tests/suite/common/mod.rs"]
#[allow(dead_code)]
mod common;
#[path = "../tests/suite/providers.rs"]
#[allow(dead_code, unused_imports)]
mod providers;
#[path = "../tests/suite/shapes.rs"]
#[allow(dead_code)]
mod shapes;
#[path = "../tests/suite/synth.rs"]
#[allow(dead_code)]
mod synth;

use std::time::Instant;

/// One row of the table.
struct Row {
    name: String,
    turns: usize,
    reuse_permille: usize,
    billed_bytes: usize,
    calls: usize,
    blocks: usize,
    rejected: usize,
    peak_pct: usize,
    overhead_permille: usize,
    overhead_peak_pct: usize,
    overhead_window_permille: usize,
    rebuild: String,
    seconds: f64,
}

fn print(row: &Row) {
    println!(
        "| {} | {} | {}.{}% | {:.1} KB | {} ({} blocks) | {} | {}% | {}.{}% (max {}% of a view, {}.{}% of the window) | {} | {:.0}s |",
        row.name,
        row.turns,
        row.reuse_permille / 10,
        row.reuse_permille % 10,
        row.billed_bytes as f64 / 1000.0,
        row.calls,
        row.blocks,
        row.rejected,
        row.peak_pct,
        row.overhead_permille / 10,
        row.overhead_permille % 10,
        row.overhead_peak_pct,
        row.overhead_window_permille / 10,
        row.overhead_window_permille % 10,
        row.rebuild,
        row.seconds
    );
}

/// `noa rebuild --check` on the run in `dir` (transcript `agent.jsonl`,
/// state under `st/`): its time, and whether it rebuilds the live state.
fn rebuild(dir: &std::path::Path) -> String {
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

/// The average request's cost in bytes at the uncached price: what the
/// cache served at a tenth, the rest written to the cache at 1.25×.
fn billed(sent: usize, reused: usize, turns: usize) -> usize {
    ((sent - reused) * 125 + reused * 10) / 100 / turns.max(1)
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
        "| window / shape | turns | cache reuse | billed / request | compressions | rejected | peak | Compress overhead | rebuild | time |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for (limit, turns) in [(30_000, 120), (40_000, 160), (60_000, 300), (128_000, 400)] {
        let name = format!("chat {}K", limit / 1000);
        if !wanted(&name) {
            continue;
        }
        let start = Instant::now();
        let dir = session_dir();
        let s = agent_loop::run_loop_in(dir.path(), seed, turns, limit, &[]);
        print(&Row {
            name,
            turns: s.turns,
            reuse_permille: s.reuse_permille(),
            billed_bytes: billed(s.bytes_sent, s.bytes_reused, s.turns),
            calls: s.nudges,
            blocks: s.blocks,
            rejected: s.rejected,
            peak_pct: s.peak_pct,
            overhead_permille: s.compress_bytes * 1000 / s.bytes_sent.max(1),
            overhead_peak_pct: s.compress_peak_pct,
            overhead_window_permille: s.compress_window_permille,
            seconds: start.elapsed().as_secs_f64(),
            rebuild: rebuild(dir.path()),
        });
    }
    for (limit, turns) in [(30_000, 160), (40_000, 200), (128_000, 400)] {
        let name = format!("read-heavy {}K", limit / 1000);
        if !wanted(&name) {
            continue;
        }
        let start = Instant::now();
        let dir = session_dir();
        let s = shapes::run_in(&dir, shapes::Shape::ReadHeavy, seed + 10, turns, limit);
        print(&Row {
            name,
            turns: s.turns,
            reuse_permille: s.bytes_reused * 1000 / s.bytes_sent.max(1),
            billed_bytes: billed(s.bytes_sent, s.bytes_reused, s.turns),
            calls: s.calls,
            blocks: s.blocks,
            rejected: s.rejected,
            peak_pct: s.peak_provider_pct,
            overhead_permille: s.compress_bytes * 1000 / s.bytes_sent.max(1),
            overhead_peak_pct: s.compress_peak_pct,
            overhead_window_permille: s.compress_window_permille,
            seconds: start.elapsed().as_secs_f64(),
            rebuild: rebuild(dir.path()),
        });
    }
}
