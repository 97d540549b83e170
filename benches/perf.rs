//! Performance of the per-turn commands through one session's life, against
//! the streaming floor: each line of the file read, parsed into a
//! serde_json value and written back through a buffer, the least a tool
//! that reads and re-emits the transcript does.
//!
//! `cargo bench --bench perf` generates chat and Claude Code sessions of
//! about 1K, 10K and 99K messages as noa counts them, one per content block
//! (Claude Code writes one block per record), and three sessions most of
//! whose messages are long tool outputs: a chat session of 44K messages
//! (72 MB), the same in CJK words (about 100 MB), and a Claude Code
//! session of 44K whose outputs are file reads, each line numbered before
//! an arrow (U+2192) as Claude Code's Read writes them; into a
//! temp dir, and walks each
//! through the turns an agent pays for, timing the release binary. The
//! largest stays within the refs m00001–m99999, so that every message of
//! its history can be compressed; past them a message has no ref and stays
//! in view. The turns:
//!
//! - first turn: `noa project` with no state yet;
//! - next turn, unchanged: `noa project` again on the same file;
//! - next turn, appended: one more exchange (user message, assistant reply);
//! - apply: one Compress call, one entry per compressible range that
//!   `noa ranges --json` lists but the newest two (which stay in view),
//!   the oldest 50 of them (the most a call may ask for), appended as the
//!   model would write it, then `noa apply`; its panel is appended as the
//!   call's result, and the rest of the ranges go the same way, 50 a call,
//!   untimed;
//! - next turn, compressed: `noa project` with most history in blocks;
//! - next turn, compressed + appended: one more exchange after that.
//!
//! The floor is this bench's own binary, run again as a child process
//! (through a link named `noa-floor`, so that its memory is told from the
//! bench's) in the profile the bench builds noa in, with noa's allocator,
//! writing to a file as noa writes its view: timed as noa is, from spawn
//! to exit, so both pay a process's start and end. It is not a binary of
//! the package, so the product builds nothing it does not ship.
//!
//! Each row prints the file's size at that step, the command's wall time,
//! the floor on the file as it is then, their ratio, the command's
//! peak resident memory (VmHWM, sampled from /proc) in MB and against the
//! file size, and the read cache the command leaves, against the file
//! size. Every turn is the best of 3 rounds (7 for a file under 32 MB
//! or a turn under 200 ms),
//! each the floor then the turn (so a neighbour's load falls on both
//! alike), with the highest peak
//! memory seen: the first turn starts each run without state, and a turn
//! that changes the state has the session's files put back before each
//! run; apply runs once, between rounds of the floor. Under the table, a note per session says what the
//! apply did (entries, blocks made, entries refused, and where its time
//! went: reading, the engine, writing), the size of its state.json, the
//! view's size on the first turn and after compression, and the floor's
//! peak memory; last comes `noa --version` start-up, the median of 20 runs.
//!
//! `cargo bench --bench perf -- chat 10K` runs only the sessions whose name
//! holds one of the words. `NOA_BENCH_KEEP=1` keeps the temp dir (for
//! profiling) and prints its path. Figures, not assertions: timings on a
//! shared machine vary.

#![allow(clippy::disallowed_methods, clippy::disallowed_macros)]

#[path = "../tests/suite/synth.rs"]
#[allow(dead_code)]
mod synth;

use std::cell::Cell;
use std::fs;
use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// noa's allocator, so that the floor allocates its values as noa does.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const NOA: &str = env!("CARGO_BIN_EXE_noa");

/// The floor's process name, the link this bench's binary is run through
/// to be the floor (see [`floor_once`]).
const FLOOR: &str = "noa-floor";

/// The link to this bench's binary named [`FLOOR`], made once in the
/// temp dir.
static FLOOR_EXE: OnceLock<PathBuf> = OnceLock::new();

/// Repetitions of a step that leaves state as it was, and of the floor.
const REPEAT: usize = 3;

/// Rounds for a file under [`SHORT`]: a run of tens of milliseconds is
/// moved most by a neighbour's passing load (the 10K floor read 27 ms in
/// one row and 42 in the next of the same run), and seven rounds of it
/// cost less than a second.
const SHORT_REPEAT: usize = 7;
const SHORT: u64 = 32 << 20;

/// A turn this quick gets [`SHORT_REPEAT`] rounds whatever the file's size:
/// a compressed turn of the 99K sessions takes a fraction of the floor's
/// time there.
const SHORT_TURN: Duration = Duration::from_millis(200);

/// The most ranges one Compress call may ask for.
const MAX_RANGES: usize = 50;

/// The summary of every entry in the bench's Compress call: a model's
/// length, above the minimum apply accepts.
const SUMMARY: &str = "Investigated the parser, cache and index modules: fixed the range error in src/index.rs:40-58 \
    (off-by-one in the retry limit), kept the schema unchanged because clients depend on it; tests pass. \
    Open: buffer sizing in src/cache.rs.";

/// One measured run of a command.
struct Run {
    time: Duration,
    /// Peak resident memory, KiB.
    peak_kb: u64,
}

/// The peak resident memory (KiB) a process has reached so far, once it
/// runs as `name`, if it is still there to ask.
fn vm_hwm(pid: u32, name: &str) -> Option<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    // Until the child has become `name` it is a copy of this process, whose
    // memory is not the command's.
    let running = status.lines().find_map(|l| l.strip_prefix("Name:"))?;
    if running.trim() != name {
        return None;
    }
    let kb = status.lines().find_map(|l| l.strip_prefix("VmHWM:"))?;
    kb.trim().trim_end_matches("kB").trim().parse().ok()
}

/// Runs a command to success, stdout to `out` and stderr beside it (both
/// shown if it fails), sampling its peak memory from /proc while it runs
/// as the process `name`.
fn measure(cmd: &mut Command, out: &Path, name: &str) -> Run {
    let err = out.with_extension("err");
    let start = Instant::now();
    let mut child = cmd
        .stdout(fs::File::create(out).unwrap())
        .stderr(fs::File::create(&err).unwrap())
        .spawn()
        .expect("spawn");
    let mut peak_kb = 0;
    loop {
        peak_kb = peak_kb.max(vm_hwm(child.id(), name).unwrap_or(0));
        if let Some(status) = child.try_wait().expect("wait") {
            let time = start.elapsed();
            assert!(
                status.success(),
                "{cmd:?} failed ({status}):\n{}\n{}",
                fs::read_to_string(out).unwrap_or_default(),
                fs::read_to_string(&err).unwrap_or_default()
            );
            return Run { time, peak_kb };
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

impl Run {
    /// None yet: the fastest and the highest of runs start here.
    fn none() -> Run {
        Run {
            time: Duration::MAX,
            peak_kb: 0,
        }
    }

    /// Takes in `r`: the fastest time and the highest peak of the two.
    fn keep_best(&mut self, r: Run) {
        self.time = self.time.min(r.time);
        self.peak_kb = self.peak_kb.max(r.peak_kb);
    }
}

/// A turn timed beside the floor.
struct Paired {
    turn: Run,
    floor: Run,
}

/// [`rounds`] of the floor on the file at `path` (as it is before
/// the first) and then `run`: the fastest of each, with the highest peak
/// memory seen. A neighbour's load on a shared machine comes and goes
/// within seconds, so taken round by round it falls on both alike, where
/// a floor timed after the turn's runs moved by half between rows.
fn paired(path: &Path, mut run: impl FnMut() -> Run) -> Paired {
    let (mut best, mut floor) = (Run::none(), Run::none());
    let (mut rounds, mut done) = (rounds(path), 0);
    while done < rounds {
        floor.keep_best(floor_once(path));
        let r = run();
        let time = r.time;
        best.keep_best(r);
        done += 1;
        // A turn of tens of milliseconds on a long file is moved by a
        // passing load as a short file's turns are: it gets their rounds.
        if time < SHORT_TURN {
            rounds = rounds.max(SHORT_REPEAT);
        }
    }
    Paired { turn: best, floor }
}

/// How many rounds a turn on the file at `path` is timed in.
fn rounds(path: &Path) -> usize {
    match fs::metadata(path).unwrap().len() < SHORT {
        true => SHORT_REPEAT,
        false => REPEAT,
    }
}

/// The floor, once, on the file at `path`: this bench's binary run as
/// [`FLOOR`], writing beside the file, timed and sampled as noa is. Its
/// output goes to a new file each time, as noa's view does: cutting short
/// the last run's, whose pages the kernel may be writing back by then,
/// waits for that, which is no part of reading the transcript.
fn floor_once(path: &Path) -> Run {
    let exe = FLOOR_EXE.get().expect("the floor's link is made first");
    let out = path.with_file_name("floor.jsonl");
    let _ = fs::remove_file(&out);
    measure(
        Command::new(exe).arg("--floor").arg(path).arg(&out),
        &path.with_file_name("floor.txt"),
        FLOOR,
    )
}

/// The floor's work, in its own process: every line of `input` read
/// through a buffer, parsed into a serde_json value and written to
/// `output` through a buffer; no more than a line held at once.
fn floor(input: &Path, output: &Path) -> io::Result<()> {
    let mut lines = BufReader::new(fs::File::open(input)?);
    let mut out = BufWriter::new(fs::File::create(output)?);
    let mut line = String::new();
    loop {
        line.clear();
        if lines.read_line(&mut line)? == 0 {
            return out.flush();
        }
        if line.trim().is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(&line)?;
        serde_json::to_writer(&mut out, &v)?;
        out.write_all(b"\n")?;
    }
}

/// A generated session: the agent that writes it, and the shape of its
/// messages.
#[derive(Clone, Copy, PartialEq)]
struct Kind {
    host: Host,
    outputs: Outputs,
}

/// The log a session is written as.
#[derive(Clone, Copy, PartialEq)]
enum Host {
    /// Chat messages, one a line.
    Chat,
    /// Claude Code records, one content block each.
    ClaudeCode,
}

/// The shape of a session's messages.
#[derive(Clone, Copy, PartialEq)]
enum Outputs {
    /// Generated sessions of every kind of message (see `synth`).
    Mixed,
    /// Fewer messages, most of them long tool outputs (1 to 8 KB), the
    /// shape of a Read- and test-heavy agent, in words of a script.
    Long(Script),
}

/// The words of long outputs.
#[derive(Clone, Copy, PartialEq)]
enum Script {
    Ascii,
    /// Chinese words, a token a character by the estimate, three bytes
    /// each in UTF-8.
    Cjk,
}

impl Script {
    /// One line of words, joined as the script writes them: ten ASCII
    /// words, or fourteen CJK ones (the file then about 100 MB, the size
    /// of the CJK session issue 59 measured).
    fn line(self, rng: &mut synth::Rng) -> String {
        let words = match self {
            Script::Ascii => [
                "parser", "cache", "range", "index", "buffer", "schema", "retry", "limit",
            ],
            Script::Cjk => [
                "解析器",
                "缓存",
                "范围",
                "索引",
                "缓冲区",
                "模式",
                "重试",
                "限制",
            ],
        };
        let count = match self {
            Script::Ascii => 10,
            Script::Cjk => 14,
        };
        let text = (0..count).map(|_| words[rng.below(8) as usize]);
        match self {
            Script::Ascii => text.collect::<Vec<_>>().join(" "),
            Script::Cjk => text.chain(["。"]).collect(),
        }
    }
}

/// A chat session of `turns` tool calls whose outputs are long: lines of
/// words in `script`, 1 to 8 KB each (more in CJK), a user message every
/// twenty calls. The lines are numbered for chat; Claude Code numbers
/// them as it writes them ([`numbered`]).
fn long_outputs(seed: u64, turns: usize, script: Script, host: Host) -> Vec<Value> {
    let mut rng = synth::Rng::new(seed);
    let line = |n: usize, rng: &mut synth::Rng| match host {
        Host::Chat => format!("{n:>5}  {}", script.line(rng)),
        Host::ClaudeCode => script.line(rng),
    };
    let mut out = vec![
        json!({"role": "system", "content": "You are a coding agent."}),
        json!({"role": "user", "content": format!("Task {seed}: read the modules and fix the retry limit.")}),
    ];
    for t in 0..turns {
        let id = format!("call_{seed}_{t}");
        out.push(
            json!({"role": "assistant", "content": format!("Reading module {t}."),
            "tool_calls": [{"id": id, "type": "function", "function": {"name": "Read",
            "arguments": format!("{{\"path\":\"src/module_{t}.rs\"}}")}}]}),
        );
        let lines = 16 + rng.below(102) as usize;
        let text: Vec<String> = (1..=lines).map(|n| line(n, &mut rng)).collect();
        out.push(json!({"role": "tool", "tool_call_id": id, "content": text.join("\n")}));
        if t % 20 == 19 {
            out.push(json!({"role": "user", "content": format!("Go on with module {}.", t + 1)}));
        }
    }
    out
}

/// How many messages noa makes of one host message: one per content
/// block, reasoning and tool call.
fn blocks(m: &Value) -> usize {
    let content = match &m["content"] {
        Value::Array(parts) => parts.len(),
        Value::String(s) => usize::from(!s.is_empty()),
        _ => 0,
    };
    let reasoning = usize::from(m["reasoning_content"].is_string());
    let calls = m["tool_calls"].as_array().map_or(0, Vec::len);
    content + reasoning + calls
}

/// An output of several lines as Claude Code records a file read: each
/// line after its number, right-aligned, and an arrow (U+2192). Most of a
/// real session's long outputs are such reads, so most of their bytes are
/// in outputs that are not all ASCII (in the bundled real Claude Code
/// logs with more than a handful of outputs, 79-94% of the bytes of tool
/// outputs of 128 bytes or more).
fn numbered(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 4);
    for (i, line) in text.lines().enumerate() {
        out.push_str(&format!("{:>6}\u{2192}{line}\n", i + 1));
    }
    out
}

/// A generated transcript, written the way its agent writes it: chat
/// messages one per line, or Claude Code records (one content block each,
/// chained by parentUuid, outputs of several lines [`numbered`]).
struct Transcript {
    kind: Kind,
    path: PathBuf,
    out: BufWriter<fs::File>,
    /// Lines written, which numbers the Claude Code uuids.
    lines: usize,
    /// Messages written as noa counts them (one per content block, what a
    /// ref numbers).
    messages: usize,
    /// The last record's uuid (Claude Code), the next one's parent.
    parent: Value,
}

impl Transcript {
    /// A session of about `messages` messages as noa counts them (one per
    /// content block): generated sessions of 200 turns, one after another,
    /// cut at the first turn boundary (before an assistant message, so no
    /// tool call is left without its result) once there are enough.
    fn generate(kind: Kind, path: PathBuf, messages: usize) -> Transcript {
        let out = BufWriter::new(fs::File::create(&path).unwrap());
        let mut t = Transcript {
            kind,
            path,
            out,
            lines: 0,
            messages: 0,
            parent: Value::Null,
        };
        for seed in 1.. {
            let session = match kind.outputs {
                Outputs::Mixed => synth::chat_session(seed, 200),
                Outputs::Long(script) => long_outputs(seed, 200, script, kind.host),
            };
            let session = match kind.host {
                Host::Chat => session,
                Host::ClaudeCode => synth::anthropic_of(seed, session),
            };
            for m in session {
                if t.messages >= messages && m["role"] == "assistant" {
                    t.out.flush().unwrap();
                    return t;
                }
                t.message(seed, m);
            }
        }
        unreachable!("sessions never run out")
    }

    /// One generated message: as it is in chat; in Claude Code each content
    /// block its own record, the blocks of one message sharing its id.
    fn message(&mut self, seed: u64, m: Value) {
        if self.kind.host != Host::ClaudeCode {
            return self.write(m);
        }
        let id = format!("msg_{seed}_{}", self.lines);
        let blocks = match &m["content"] {
            Value::Array(b) => b.clone(),
            other => vec![json!({"type": "text", "text": other})],
        };
        for mut b in blocks {
            if let Some(text) = b["content"].as_str().filter(|t| t.lines().nth(1).is_some()) {
                b["content"] = json!(numbered(text));
            }
            self.write(json!({"id": id, "role": m["role"], "content": [b]}));
        }
    }

    /// Writes one message: as it is in chat, inside a record in Claude Code.
    fn write(&mut self, message: Value) {
        self.lines += 1;
        self.messages += blocks(&message);
        let line = match self.kind.host {
            Host::Chat => message,
            Host::ClaudeCode => {
                let uuid = json!(format!("00000000-0000-4000-8000-{:012}", self.lines));
                let parent = std::mem::replace(&mut self.parent, uuid.clone());
                json!({"parentUuid": parent, "isSidechain": false, "type": message["role"], "sessionId": "bench",
                    "uuid": uuid, "timestamp": "2026-11-29T00:00:00Z", "message": message})
            }
        };
        writeln!(self.out, "{line}").unwrap();
    }

    /// A text message in the session's shape (Claude Code holds blocks).
    fn text(&self, role: &str, text: &str) -> Value {
        match self.kind.host {
            Host::Chat => json!({"role": role, "content": text}),
            Host::ClaudeCode => json!({"id": format!("msg_x{}", self.lines), "role": role,
                "content": [{"type": "text", "text": text}]}),
        }
    }

    /// One more small exchange: a question and the assistant's answer. The
    /// question is numbered, so no two exchanges are the same message.
    fn exchange(&mut self) {
        let n = self.lines;
        self.write(self.text(
            "user",
            &format!("Also check the retry limit in the parser ({n})."),
        ));
        self.write(self.text(
            "assistant",
            "Checked: the retry limit is clamped and the parser tests pass.",
        ));
        self.out.flush().unwrap();
    }

    /// The model's Compress call with arguments `args`.
    fn compress_call(&mut self, id: &str, args: &Value) {
        self.write(match self.kind.host {
            Host::Chat => json!({"role": "assistant", "content": null, "tool_calls": [{"id": id, "type": "function",
                "function": {"name": "Compress", "arguments": args.to_string()}}]}),
            Host::ClaudeCode => json!({"id": format!("msg_{id}"), "role": "assistant",
                "content": [{"type": "tool_use", "id": id, "name": "Compress", "input": args}]}),
        });
        self.out.flush().unwrap();
    }

    /// The call's result: the panel `noa apply` printed.
    fn tool_result(&mut self, id: &str, panel: &str) {
        self.write(match self.kind.host {
            Host::Chat => json!({"role": "tool", "tool_call_id": id, "content": panel}),
            Host::ClaudeCode => json!({"role": "user",
                "content": [{"type": "tool_result", "tool_use_id": id, "content": panel}]}),
        });
        self.out.flush().unwrap();
    }
}

/// One session's working folder: transcript, state dir, the view and the
/// output of the last command.
struct Bench {
    name: String,
    dir: PathBuf,
    transcript: Transcript,
    /// The floor's highest peak memory in the session's rounds, KiB.
    floor_peak_kb: Cell<u64>,
}

impl Bench {
    fn state_dir(&self) -> PathBuf {
        self.dir.join("st")
    }
    fn view(&self) -> PathBuf {
        self.dir.join("view.jsonl")
    }
    fn stdout(&self) -> PathBuf {
        self.dir.join("out.txt")
    }

    /// `noa SUBCOMMAND TRANSCRIPT --state-dir DIR ARGS`, measured.
    fn noa(&self, subcommand: &str, args: &[&str]) -> Run {
        measure(
            Command::new(NOA)
                .arg(subcommand)
                .arg(&self.transcript.path)
                .arg("--state-dir")
                .arg(self.state_dir())
                .args(args),
            &self.stdout(),
            "noa",
        )
    }

    /// The turn's view, written to a file (as an agent's wrapper would).
    fn project(&self) -> Run {
        self.noa("project", &["-q", "-o", self.view().to_str().unwrap()])
    }

    /// A turn that changes the state, run as often as an unchanged one: the
    /// session's files (not its archives, which a turn never touches) are
    /// put back before each run, so every run is the same turn, and synced
    /// before it starts, as a real turn finds them: the turn's own fsyncs
    /// then write what it changed, not the files put back.
    fn project_again(&self) -> Paired {
        let files: Vec<(PathBuf, Vec<u8>)> = fs::read_dir(self.state_dir())
            .unwrap()
            .flat_map(|session| fs::read_dir(session.unwrap().path()).unwrap())
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_file())
            .map(|p| {
                let bytes = fs::read(&p).unwrap();
                (p, bytes)
            })
            .collect();
        paired(&self.transcript.path, || {
            for (p, bytes) in &files {
                fs::write(p, bytes).unwrap();
                fs::File::open(p).unwrap().sync_all().unwrap();
            }
            self.project()
        })
    }

    /// Prints a row for `turn`: its run against the floor's on the file as
    /// it is now, and the read cache it left.
    fn row(&self, turn: &str, Paired { turn: run, floor }: Paired) {
        let size = fs::metadata(&self.transcript.path).unwrap().len();
        self.floor_peak_kb
            .set(self.floor_peak_kb.get().max(floor.peak_kb));
        println!(
            "| {} | {turn} | {} | {} | {} | {:.2}× | {:.0} MB ({:.1}×) | {} ({:.2}×) |",
            self.name,
            mb(size),
            ms(run.time),
            ms(floor.time),
            run.time.as_secs_f64() / floor.time.as_secs_f64(),
            // In MB as the size is (VmHWM is in KiB), so the ratio reads
            // off the two columns.
            run.peak_kb as f64 * 1024.0 / 1e6,
            run.peak_kb as f64 * 1024.0 / size as f64,
            mb(self.read_cache_size()),
            self.read_cache_size() as f64 / size as f64
        );
    }

    /// The Compress calls a model would send to fold most of the history:
    /// one entry per compressible range `noa ranges` lists, but for the
    /// newest two (or one, when only two are listed), which stay in view;
    /// oldest first, at most [`MAX_RANGES`] entries a call.
    fn compress_calls(&self) -> Vec<Value> {
        self.noa("ranges", &["--json"]);
        let report: Value =
            serde_json::from_str(&fs::read_to_string(self.stdout()).unwrap()).unwrap();
        let ranges = report["ranges"].as_array().expect("ranges listed");
        let keep = ranges.len().saturating_sub(1).min(2);
        let content: Vec<Value> = ranges[..ranges.len() - keep]
            .iter()
            .map(|r| json!({"startId": r["start_ref"], "endId": r["end_ref"], "summary": SUMMARY}))
            .collect();
        assert!(
            !content.is_empty(),
            "{}: nothing to compress: {report}",
            self.name
        );
        (content.chunks(MAX_RANGES))
            .map(|entries| json!({"topic": "the work so far", "content": entries}))
            .collect()
    }

    /// The Compress call appended and applied; then its panel appended as
    /// the result, so the next turn is the one after the call. Returns what
    /// the panel reports (blocks made and entries refused), since a
    /// partial success still exits 0.
    fn apply(&mut self) -> String {
        let calls = self.compress_calls();
        let args = &calls[0];
        self.transcript.compress_call("cmp_bench", args);
        // Run once, as it changes the state: the floor beside it is the
        // fastest of the rounds just before and after.
        let mut floor = floor_once(&self.transcript.path);
        let run = self.noa("apply", &["-v"]);
        for _ in 1..rounds(&self.transcript.path) {
            floor.keep_best(floor_once(&self.transcript.path));
        }
        self.row("apply", Paired { turn: run, floor });
        let panel = fs::read_to_string(self.stdout()).unwrap();
        // `-v` says where the time went: reading, the engine, writing.
        let phases = fs::read_to_string(self.stdout().with_extension("err"))
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("noa: apply: ").map(str::to_string))
            .unwrap_or_default();
        self.transcript.tool_result("cmp_bench", panel.trim_end());
        // The rest of the ranges, a call at a time, as a model would go on.
        let later = self.apply_later(&calls[1..]);
        let count = |prefix: &str| panel.lines().filter(|l| l.starts_with(prefix)).count();
        format!(
            "{} ranges → {} blocks, {} errors ({phases}){later}",
            args["content"].as_array().unwrap().len(),
            count("  b"),
            count("  error:")
        )
    }

    /// Applies `calls` one after another, each answered in the transcript
    /// before the next; says how many there were.
    fn apply_later(&mut self, calls: &[Value]) -> String {
        for (n, args) in calls.iter().enumerate() {
            let id = format!("cmp_bench_{}", n + 1);
            self.transcript.compress_call(&id, args);
            self.noa("apply", &[]);
            let panel = fs::read_to_string(self.stdout()).unwrap();
            self.transcript.tool_result(&id, panel.trim_end());
        }
        match calls.len() {
            0 => String::new(),
            n => format!("; then {n} more call(s) of at most {MAX_RANGES} ranges"),
        }
    }

    /// The size of the session's state.json (one session folder under the
    /// state dir).
    fn state_size(&self) -> u64 {
        self.session_file_size("state.json")
    }

    /// The size of the read cache the last turn left.
    fn read_cache_size(&self) -> u64 {
        self.session_file_size("read-cache.bin")
    }

    /// The size of the session's file `name`, 0 when there is none.
    fn session_file_size(&self, name: &str) -> u64 {
        fs::read_dir(self.state_dir())
            .unwrap()
            .filter_map(|e| fs::metadata(e.unwrap().path().join(name)).ok())
            .map(|m| m.len())
            .sum()
    }

    fn view_size(&self) -> u64 {
        fs::metadata(self.view()).unwrap().len()
    }
}

/// The six turns of one session, a row each; returns the note printed
/// under the table (what apply did, state and view sizes).
fn run_session(root: &Path, name: &str, kind: Kind, messages: usize) -> String {
    let dir = root.join(name.replace(' ', "-"));
    fs::create_dir_all(&dir).unwrap();
    let transcript = Transcript::generate(kind, dir.join("transcript.jsonl"), messages);
    let generated = format!(
        "{} messages in {} lines",
        transcript.messages, transcript.lines
    );
    let mut b = Bench {
        name: name.to_string(),
        dir,
        transcript,
        floor_peak_kb: Cell::new(0),
    };
    let path = b.transcript.path.clone();
    b.row(
        "first turn",
        paired(&path, || {
            let _ = fs::remove_dir_all(b.state_dir());
            b.project()
        }),
    );
    let full_view = b.view_size();
    b.row("next turn, unchanged", paired(&path, || b.project()));
    b.transcript.exchange();
    b.row("next turn, appended", b.project_again());
    let applied = b.apply();
    b.row("next turn, compressed", paired(&path, || b.project()));
    let compressed_view = b.view_size();
    b.transcript.exchange();
    b.row("next turn, compressed + appended", b.project_again());
    format!(
        "{name} ({generated}): apply {applied}; state.json {} KB; view {} before compression, {} after; floor peak {:.0} MB",
        b.state_size() / 1024,
        mb(full_view),
        mb(compressed_view),
        b.floor_peak_kb.get() as f64 * 1024.0 / 1e6
    )
}

fn mb(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / 1e6)
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1e3)
}

/// `noa --version`: the start-up every command pays, median of 20 runs.
/// Timed without `measure`, whose polling would round it up.
fn startup() -> Duration {
    let once = || {
        let start = Instant::now();
        let status = Command::new(NOA)
            .arg("--version")
            .stdout(Stdio::null())
            .status()
            .expect("spawn");
        assert!(status.success());
        start.elapsed()
    };
    let mut times: Vec<Duration> = (0..20).map(|_| once()).collect();
    times.sort();
    times[times.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    // Run as the floor (see [`floor_once`]).
    if let [_, flag, input, output] = &args[..]
        && flag == "--floor"
    {
        return floor(Path::new(input), Path::new(output)).expect("the floor reads its file");
    }
    // `cargo test --all-targets` also runs this target, without `--bench`:
    // the measurements are only for `cargo bench`.
    if !args.iter().any(|a| a == "--bench") {
        return;
    }
    // `cargo bench --bench perf -- chat 10K` runs only the sessions whose
    // name holds one of the words given.
    let only: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let wanted = |name: &str| only.is_empty() || only.iter().any(|w| name.contains(w.as_str()));
    let root = std::env::temp_dir().join(format!("noa-bench-{}", std::process::id()));
    fs::create_dir_all(&root).unwrap();
    let link = root.join(FLOOR);
    std::os::unix::fs::symlink(std::env::current_exe().unwrap(), &link).unwrap();
    FLOOR_EXE.set(link).unwrap();
    println!(
        "| session | turn | size | time | floor | ratio | peak memory (× file) | read cache (× file) |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let mut notes = Vec::new();
    for (host, label) in [(Host::Chat, "chat"), (Host::ClaudeCode, "claude-code")] {
        for (messages, size) in [(1_000, "1K"), (10_000, "10K"), (99_000, "99K")] {
            let name = format!("{label} {size}");
            let kind = Kind {
                host,
                outputs: Outputs::Mixed,
            };
            if wanted(&name) {
                notes.push(run_session(&root, &name, kind, messages));
            }
        }
    }
    // Long outputs, not many short messages: 72 MB in ASCII, about 100 in
    // CJK, and Claude Code's numbered reads.
    for (name, host, script) in [
        ("chat long outputs 44K", Host::Chat, Script::Ascii),
        ("chat long CJK outputs 44K", Host::Chat, Script::Cjk),
        (
            "claude-code long reads 44K",
            Host::ClaudeCode,
            Script::Ascii,
        ),
    ] {
        let kind = Kind {
            host,
            outputs: Outputs::Long(script),
        };
        if wanted(name) {
            notes.push(run_session(&root, name, kind, 44_000));
        }
    }
    println!();
    for note in notes {
        println!("{note}");
    }
    println!(
        "`noa --version` start-up: {:.1} ms (median of 20)",
        startup().as_secs_f64() * 1e3
    );
    if std::env::var_os("NOA_BENCH_KEEP").is_some() {
        println!("kept {}", root.display());
    } else {
        let _ = fs::remove_dir_all(&root);
    }
}
