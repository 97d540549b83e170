//! Performance of the per-turn commands on synthetic sessions, against a
//! bare serde_json parse + serialize of the same lines.
//!
//! `cargo bench --bench perf` builds the release binary, generates sessions
//! into a temp dir, and prints a table: wall time of each command, the
//! baseline, their ratio, and the command's peak memory against the file
//! size. Figures, not assertions: timings on a shared machine vary.

#![allow(clippy::disallowed_methods, clippy::disallowed_macros)]

#[path = "../tests/suite/synth.rs"]
#[allow(dead_code)]
mod synth;

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

fn noa_bin() -> PathBuf {
    let status = Command::new(env!("CARGO"))
        .args(["build", "--release", "--quiet"])
        .status()
        .expect("cargo build");
    assert!(status.success());
    Path::new(env!("CARGO_MANIFEST_DIR")).join("target/release/noa")
}

/// Runs a command, returning wall time and peak resident memory (KiB),
/// sampled from /proc while it runs.
fn measure(cmd: &mut Command) -> (Duration, u64) {
    let start = Instant::now();
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let status_path = format!("/proc/{}/status", child.id());
    let mut peak = 0;
    loop {
        if let Ok(s) = fs::read_to_string(&status_path)
            && let Some(kb) = s
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<u64>().ok())
        {
            peak = peak.max(kb);
        }
        if let Some(status) = child.try_wait().expect("wait") {
            assert!(status.success(), "{cmd:?} failed");
            return (start.elapsed(), peak);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The baseline: every line parsed into a serde_json value and written back.
fn baseline(path: &Path) -> Duration {
    let start = Instant::now();
    let text = fs::read_to_string(path).unwrap();
    let mut out = Vec::with_capacity(text.len());
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).unwrap();
        serde_json::to_writer(&mut out, &v).unwrap();
        out.push(b'\n');
    }
    std::hint::black_box(out);
    start.elapsed()
}

/// A chat session of about `messages` messages.
fn chat(path: &Path, messages: usize) {
    let mut f = fs::File::create(path).unwrap();
    let mut n = 0;
    let mut seed = 1;
    while n < messages {
        for m in synth::chat_session(seed, 200) {
            writeln!(f, "{m}").unwrap();
            n += 1;
        }
        seed += 1;
    }
}

/// The same session as Claude Code records, one content block per line.
fn claude_code(path: &Path, messages: usize) {
    let mut f = fs::File::create(path).unwrap();
    let (mut n, mut seed, mut parent) = (0usize, 1u64, Value::Null);
    while n < messages {
        for m in synth::anthropic_session(seed, 200) {
            let role = m["role"].as_str().unwrap().to_string();
            let blocks = match &m["content"] {
                Value::Array(b) => b.clone(),
                other => vec![json!({"type": "text", "text": other})],
            };
            let id = format!("msg_{seed}_{n}");
            for b in blocks {
                n += 1;
                let uuid = format!("00000000-0000-4000-8000-{n:012}");
                let rec = json!({"parentUuid": parent, "isSidechain": false, "type": role, "sessionId": "bench", "uuid": uuid,
                    "timestamp": "2026-11-29T00:00:00Z", "message": {"id": id, "role": role, "content": [b]}});
                writeln!(f, "{rec}").unwrap();
                parent = json!(uuid);
            }
        }
        seed += 1;
    }
}

fn row(name: &str, file: &Path, cmd_time: Duration, base: Duration, peak_kb: u64) {
    let size = fs::metadata(file).unwrap().len();
    println!(
        "| {name} | {:.1} MB | {:.0} ms | {:.0} ms | {:.2}× | {:.0} MB ({:.1}× file) |",
        size as f64 / 1e6,
        cmd_time.as_secs_f64() * 1e3,
        base.as_secs_f64() * 1e3,
        cmd_time.as_secs_f64() / base.as_secs_f64(),
        peak_kb as f64 / 1024.0,
        peak_kb as f64 * 1024.0 / size as f64
    );
}

fn main() {
    // `cargo test --all-targets` also runs this target, without `--bench`:
    // the measurements are only for `cargo bench`.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let noa = noa_bin();
    let dir = std::env::temp_dir().join(format!("noa-bench-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let project = |file: &Path| {
        measure(
            Command::new(&noa)
                .args(["project", file.to_str().unwrap(), "--state-dir"])
                .arg(dir.join("st"))
                .args(["-q", "-o"])
                .arg(dir.join("view.jsonl")),
        )
    };
    println!("| session | size | `noa project` | baseline | ratio | peak memory |");
    println!("|---|---|---|---|---|---|");
    for (name, messages, kind) in [
        ("chat 1K", 1_000, "chat"),
        ("chat 10K", 10_000, "chat"),
        ("chat 40K", 40_000, "chat"),
        ("claude-code 100K", 100_000, "cc"),
    ] {
        let file = dir.join(format!("{}.jsonl", name.replace(' ', "-")));
        if kind == "chat" {
            chat(&file, messages)
        } else {
            claude_code(&file, messages)
        }
        let _ = fs::remove_dir_all(dir.join("st"));
        let (first, peak) = project(&file);
        let (again, _) = project(&file);
        let base = baseline(&file);
        row(&format!("{name} (first turn)"), &file, first, base, peak);
        row(&format!("{name} (next turn)"), &file, again, base, peak);
    }
    let (startup, _) = measure(Command::new(&noa).arg("--version"));
    println!("\n`noa --version`: {:.1} ms", startup.as_secs_f64() * 1e3);
    let _ = fs::remove_dir_all(&dir);
}
