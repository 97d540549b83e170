//! What people read: `--help`, the checked-in completion scripts and man
//! page, and a quiet exit when the reader of stdout goes away.

use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Command, Output, Stdio};

use clap::CommandFactory;

use crate::common::{TempDir, golden};

/// Runs `noa` with a fixed environment, so help text does not depend on the
/// terminal or on a NOA_STATE_DIR the developer has set.
fn noa(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_noa"))
        .args(args)
        .env("NO_COLOR", "1")
        .env("COLUMNS", "100")
        .env_remove("NOA_STATE_DIR")
        .output()
        .unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// The commands the README documents; the definition may add more.
const DOCUMENTED: [&str; 8] = [
    "project",
    "apply",
    "materialize",
    "ranges",
    "prompt",
    "rebuild",
    "inspect",
    "completions",
];

/// Every command in the clap definition, `help` excepted.
fn commands() -> Vec<String> {
    let names: Vec<String> = noa::cli::Cli::command()
        .get_subcommands()
        .map(|c| c.get_name().to_owned())
        .collect();
    for c in DOCUMENTED {
        assert!(names.iter().any(|n| n == c), "`{c}` is no longer a command");
    }
    names
}

#[test]
fn completions_and_man_page_are_current() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (what, file) in [
        ("bash", "completions/noa.bash"),
        ("zsh", "completions/_noa"),
        ("fish", "completions/noa.fish"),
        ("man", "completions/noa.1"),
    ] {
        let regenerate = format!("cargo run -- completions {what} > {file}");
        let out = noa(&["completions", what]);
        assert!(out.status.success(), "noa completions {what} failed");
        assert!(
            out.stderr.is_empty(),
            "noa completions {what} wrote to stderr"
        );
        let generated = stdout(&out);
        assert!(
            !generated.is_empty(),
            "noa completions {what} printed nothing"
        );
        let path = root.join(file);
        if std::env::var_os("NOA_BLESS").is_some() {
            fs::write(&path, &generated).unwrap();
        }
        let checked_in = fs::read_to_string(&path)
            .unwrap_or_else(|_| panic!("{file} is missing; create it with `{regenerate}`"));
        if checked_in != generated {
            let (n, old, new) = checked_in
                .lines()
                .chain(std::iter::repeat("<end of file>"))
                .zip(generated.lines().chain(std::iter::repeat("<end of file>")))
                .enumerate()
                .find(|(_, (a, b))| a != b)
                .map(|(i, (a, b))| (i + 1, a, b))
                .unwrap_or((0, "", ""));
            panic!(
                "{file} is stale (the command line changed); regenerate it with\n  \
                 {regenerate}\n(or NOA_BLESS=1 cargo test --test tests cli_docs)\n\
                 first difference, line {n}:\n  checked in: {old}\n  generated:  {new}"
            );
        }
    }
}

#[test]
fn help_lists_every_command_and_each_has_help() {
    let out = noa(&["--help"]);
    assert!(out.status.success());
    let help = stdout(&out);
    let listed: Vec<&str> = help
        .lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    for c in commands() {
        assert!(
            listed.contains(&c.as_str()),
            "`noa --help` does not list {c}:\n{help}"
        );
        for flag in ["--help", "-h"] {
            let out = noa(&[&c, flag]);
            let text = stdout(&out);
            assert!(out.status.success(), "`noa {c} {flag}` failed");
            assert!(
                text.lines()
                    .any(|l| l.starts_with(&format!("Usage: noa {c}"))),
                "`noa {c} {flag}` has no usage line:\n{text}"
            );
            let summary = text.lines().next().unwrap_or_default();
            assert!(
                !summary.is_empty(),
                "`noa {c} {flag}` opens with no summary"
            );
        }
    }
}

#[test]
fn help_golden() {
    let out = noa(&["--help"]);
    assert!(out.status.success());
    golden("help.txt", &stdout(&out));
}

/// `noa project big.jsonl | head -1`: the reader goes away after one line,
/// the next write fails with a broken pipe, and noa exits 0 without a word.
#[test]
fn closed_stdout_exits_zero_quietly() {
    let dir = TempDir::new();
    // About 2 MB of view, far more than a pipe holds (64 KB on Linux), so noa
    // is still writing when the pipe closes.
    let transcript = dir.path().join("big.jsonl");
    let filler = "lorem ipsum dolor sit amet ".repeat(200);
    let mut text = String::new();
    for i in 0..200 {
        for role in ["user", "assistant"] {
            let line = serde_json::json!({"role": role, "content": format!("{role} {i} {filler}")});
            text.push_str(&line.to_string());
            text.push('\n');
        }
    }
    fs::write(&transcript, text).unwrap();

    let mut child = Command::new(env!("CARGO_BIN_EXE_noa"))
        .args([
            "project",
            transcript.to_str().unwrap(),
            "--limit",
            "100000000",
        ])
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .env("NO_COLOR", "1")
        .env_remove("NOA_STATE_DIR")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    // The reader is dropped here: the pipe is closed.
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let status = child.wait().unwrap();

    assert!(
        first.starts_with("{\"role\":\"user\""),
        "first line: {first:.80}"
    );
    // Without -q a finished run prints its report on stderr; nothing there
    // means the write did hit the closed pipe, and noa said nothing about it.
    assert_eq!(stderr, "", "noa complained about the closed pipe");
    assert!(status.success(), "exit status {status} on a closed pipe");
}
