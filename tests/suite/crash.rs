//! Killed and failed at every write: `strace` stops a command with SIGKILL
//! (or fails the call with ENOSPC or EIO) at each invocation of each
//! system call that writes a file, renames, removes or syncs one, and after
//! each the session must be as it was before the command or as the command
//! leaves it, never between; its archives all there; and the next run of
//! the same command must succeed, leave the same state, and leave no temp
//! file behind.
//!
//! CI kills `rebuild --force`, `apply`, `project` and `materialize` on a
//! generated session at every such point. `cargo test -- --ignored
//! crash_harness` runs the whole harness: kills and both faults, on the
//! generated session and on the bundled real ones, and prints its figures
//! (see docs/reliability.md).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

use super::common::{TempDir, copy_dir, real_transcripts};
use super::compress::SUMMARY;
use super::synth::{chat_session, jsonl};

/// The system calls a kill or a fault is injected at: every one that can
/// change a file or make a change durable.
const WRITES: [&str; 13] = [
    "openat",
    "write",
    "pwrite64",
    "writev",
    "ftruncate",
    "rename",
    "renameat",
    "renameat2",
    "unlink",
    "unlinkat",
    "fsync",
    "fdatasync",
    "mkdir",
];

/// A fixed clock, so every run of a command makes the same state.
const NOW: &str = "1767225600";

/// How a command is stopped at a point.
#[derive(Clone, Copy, Debug)]
enum Stop {
    Kill,
    Fault(&'static str),
}

impl Stop {
    fn inject(self, syscall: &str, n: usize) -> String {
        match self {
            Stop::Kill => format!("inject={syscall}:signal=KILL:when={n}"),
            Stop::Fault(errno) => format!("inject={syscall}:error={errno}:when={n}"),
        }
    }
}

/// What a run of the harness saw.
#[derive(Default, Debug)]
struct Figures {
    points: usize,
    killed: usize,
    failed: usize,
    before: usize,
    after: usize,
}

/// One command on one session: where it lives, and what it is run as.
struct Case {
    dir: PathBuf,
    state: PathBuf,
    session: PathBuf,
    output: PathBuf,
    args: Vec<String>,
}

impl Case {
    fn new(dir: &Path, transcript: &Path, command: &[&str]) -> Case {
        let state = dir.join("state");
        let output = dir.join("out.jsonl");
        let mut args: Vec<String> = command.iter().map(|s| s.to_string()).collect();
        args.insert(1, transcript.display().to_string());
        args.extend(["--state-dir".into(), state.display().to_string()]);
        if command[0] == "materialize" || command[0] == "project" {
            args.extend(["-o".into(), output.display().to_string()]);
        }
        let session = session_dir(&state);
        Case {
            dir: dir.to_path_buf(),
            state,
            session,
            output,
            args,
        }
    }

    fn command(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.current_dir(&self.dir)
            .env("NO_COLOR", "1")
            .env("NOA_NOW", NOW)
            .env_remove("NOA_STATE_DIR")
            .env_remove("NOA_SET_ASIDE_FROM");
        c
    }

    fn run(&self) -> Output {
        self.command(env!("CARGO_BIN_EXE_noa"))
            .args(&self.args)
            .output()
            .unwrap()
    }

    /// The command under strace, stopped at `syscall`'s `n`th call in any
    /// one of its threads; `None` traces it whole, to count the calls.
    fn traced(&self, at: Option<(Stop, &str, usize)>, log: &Path) -> Output {
        let mut c = self.command("strace");
        c.args(["-f", "-qq", "-o"]).arg(log);
        c.arg("-e").arg(format!("trace={}", WRITES.join(",")));
        if let Some((stop, syscall, n)) = at {
            c.arg("-e").arg(stop.inject(syscall, n));
        }
        c.arg(env!("CARGO_BIN_EXE_noa")).args(&self.args);
        c.output()
            .expect("strace runs (it is part of the machine's image)")
    }

    /// The session's state as noa loads it, with the output file's bytes.
    fn snapshot(&self) -> (Value, Option<Vec<u8>>) {
        let state = match self.session.join("state.json").exists() {
            true => load(&self.session),
            false => Value::Null,
        };
        (state, fs::read(&self.output).ok())
    }

    fn restore(&self, pristine: &Path) {
        copy_dir(pristine, &self.state);
        let _ = fs::remove_file(&self.output);
    }
}

/// The one session directory under a state dir.
fn session_dir(state: &Path) -> PathBuf {
    match fs::read_dir(state) {
        Ok(mut entries) => entries
            .next()
            .map(|e| e.unwrap().path())
            .unwrap_or_default(),
        Err(_) => PathBuf::new(),
    }
}

/// The state in `session` as noa loads it, as JSON; panics with what is
/// wrong when it cannot be loaded.
fn load(session: &Path) -> Value {
    let name = session.file_name().unwrap().to_str().unwrap();
    let state = noa::store::SessionDir::new(session.parent().unwrap(), name)
        .load()
        .unwrap_or_else(|e| panic!("the session does not load: {e}"))
        .expect("a state");
    serde_json::to_value(state).unwrap()
}

/// How often each of [`WRITES`] is called, in the thread that calls it most.
fn counts(trace: &str) -> BTreeMap<String, usize> {
    let mut per: BTreeMap<(String, String), usize> = BTreeMap::new();
    for line in trace.lines() {
        let mut parts = line.splitn(2, ' ');
        let (Some(pid), Some(rest)) = (parts.next(), parts.next()) else {
            continue;
        };
        let rest = rest.trim_start();
        let Some(name) = rest.split('(').next() else {
            continue;
        };
        if WRITES.contains(&name) {
            *per.entry((name.to_string(), pid.to_string())).or_default() += 1;
        }
    }
    let mut out: BTreeMap<String, usize> = BTreeMap::new();
    for ((name, _), n) in per {
        let most = out.entry(name).or_default();
        *most = (*most).max(n);
    }
    out
}

/// Temp files left in the session directory or its folders.
fn temps(session: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![session.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else if e.file_name().to_string_lossy().ends_with(".tmp") {
                out.push(e.path());
            }
        }
    }
    out
}

/// Every archive the state names is on disk.
fn archives_present(state: &Value, place: &str) {
    for b in state["blocks"].as_array().into_iter().flatten() {
        let path = b["archivePath"].as_str().unwrap_or_default();
        if !path.is_empty() {
            assert!(Path::new(path).exists(), "{place}: archive {path} is lost");
        }
    }
}

/// Runs `case` stopped by `stop` at every point, from `pristine` each time,
/// checking each as the module says.
fn every_point(case: &Case, pristine: &Path, stop: Stop) -> Figures {
    case.restore(pristine);
    let before = case.snapshot();
    let clean = case.run();
    let code = clean.status.code();
    assert!(
        matches!(code, Some(0 | 1)),
        "{:?}: {}",
        case.args,
        String::from_utf8_lossy(&clean.stderr)
    );
    let after = case.snapshot();
    case.restore(pristine);
    let log = case.dir.join("trace.txt");
    case.traced(None, &log);
    let counts = counts(&fs::read_to_string(&log).unwrap());
    let mut f = Figures::default();
    for (syscall, &n) in &counts {
        for k in 1..=n {
            case.restore(pristine);
            let out = case.traced(Some((stop, syscall, k)), &log);
            let place = format!("{:?} {stop:?} at {syscall} #{k}", case.args);
            f.points += 1;
            match out.status.code() {
                None => f.killed += 1,
                Some(c) if Some(c) != code => f.failed += 1,
                Some(_) => {}
            }
            let now = case.snapshot();
            if now.0 == before.0 {
                f.before += 1;
            } else if now.0 == after.0 {
                f.after += 1;
            } else {
                panic!("{place}: the state is neither before nor after the command");
            }
            archives_present(&now.0, &place);
            if let Some(out) = &now.1 {
                assert!(
                    Some(out) == after.1.as_ref() || Some(out) == before.1.as_ref(),
                    "{place}: a partial output file"
                );
            }
            let again = case.run();
            assert_eq!(
                again.status.code(),
                code,
                "{place}: the next run: {}",
                String::from_utf8_lossy(&again.stderr)
            );
            assert!(
                case.snapshot() == after,
                "{place}: the next run left another state"
            );
            assert_eq!(temps(&case.session), Vec::<PathBuf>::new(), "{place}");
        }
    }
    f
}

fn append(path: &Path, v: &Value) {
    let mut text = fs::read_to_string(path).unwrap();
    text.push_str(&format!("{v}\n"));
    fs::write(path, text).unwrap();
}

/// A generated chat session with a block, and a second Compress call
/// pending; the state dir beside it, kept as `pristine`.
fn generated(dir: &Path) -> PathBuf {
    let transcript = dir.join("chat.jsonl");
    fs::write(&transcript, jsonl(&chat_session(21, 40))).unwrap();
    let noa = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_noa"))
            .args(args)
            .arg("--state-dir")
            .arg(dir.join("state"))
            .current_dir(dir)
            .env("NOA_NOW", NOW)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let path = transcript.to_str().unwrap();
    noa(&["project", path]);
    let call = |id: &str, start: &str, end: &str| {
        let args = json!({"content": [{"startId": start, "endId": end, "summary": SUMMARY}]});
        json!({"role": "assistant", "content": null, "tool_calls": [{"id": id, "type": "function", "function": {"name": "Compress", "arguments": args.to_string()}}]})
    };
    append(&transcript, &call("call_1", "m00002", "m00020"));
    let panel = noa(&["apply", path]);
    append(
        &transcript,
        &json!({"role": "tool", "tool_call_id": "call_1", "content": panel.trim_end()}),
    );
    noa(&["project", path]);
    append(&transcript, &call("call_2", "m00021", "m00040"));
    copy_dir(&dir.join("state"), &dir.join("pristine"));
    transcript
}

const COMMANDS: [&[&str]; 4] = [
    &["rebuild", "--force"],
    &["apply"],
    &["project"],
    &["materialize"],
];

#[test]
fn a_command_killed_at_any_write_leaves_the_session_before_or_after_it() {
    let dir = TempDir::new();
    let transcript = generated(dir.path());
    let mut total = Figures::default();
    for command in COMMANDS {
        let case = Case::new(dir.path(), &transcript, command);
        let f = every_point(&case, &dir.path().join("pristine"), Stop::Kill);
        assert!(f.killed > 10, "{command:?}: {f:?}");
        total.points += f.points;
        total.killed += f.killed;
    }
    assert!(total.points >= 100, "{total:?}");
}

/// The whole harness: every command, killed and failed with ENOSPC and
/// EIO at every point, on the generated session and on each bundled real
/// one (projected once, then a turn of it projected again and rebuilt).
#[test]
#[ignore = "minutes: run with --ignored to take the figures"]
fn crash_harness() {
    let stops = [Stop::Kill, Stop::Fault("ENOSPC"), Stop::Fault("EIO")];
    let mut sessions: Vec<(String, TempDir, PathBuf)> = Vec::new();
    let dir = TempDir::new();
    let transcript = generated(dir.path());
    sessions.push(("generated chat".into(), dir, transcript));
    for (real, _) in real_transcripts() {
        let dir = TempDir::new();
        let transcript = dir.path().join(real.file_name().unwrap());
        fs::copy(&real, &transcript).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_noa"))
            .args(["project", transcript.to_str().unwrap(), "--state-dir"])
            .arg(dir.path().join("state"))
            .env("NOA_NOW", NOW)
            .output()
            .unwrap();
        assert!(out.status.success());
        copy_dir(&dir.path().join("state"), &dir.path().join("pristine"));
        sessions.push((real.display().to_string(), dir, transcript));
    }
    let mut rows = Vec::new();
    for (name, dir, transcript) in &sessions {
        for command in COMMANDS {
            if command[0] == "apply" && !name.starts_with("generated") {
                continue;
            }
            for stop in stops {
                let case = Case::new(dir.path(), transcript, command);
                let f = every_point(&case, &dir.path().join("pristine"), stop);
                rows.push(format!(
                    "{name} | {} | {stop:?} | {} | {} | {} | {} | {}",
                    command.join(" "),
                    f.points,
                    f.killed,
                    f.failed,
                    f.before,
                    f.after
                ));
            }
        }
    }
    println!("session | command | stop | points | killed | failed | before | after");
    for r in rows {
        println!("{r}");
    }
}
