//! Reading on from a prefix gives what reading the whole log gives, at
//! every line a log can be cut at, on the real logs in `testdata/` and on
//! generated ones; and on a linear log it does read on rather than give up.

use std::path::Path;

use super::*;

/// What a read says, every field the view, the state or the report uses.
fn summary(t: &Transcript) -> String {
    let mut out = format!(
        "{:?} {:?} {:?}\n{:?}\n{:?}\n",
        t.format, t.session_id, t.parent_session, t.warnings, t.resume
    );
    for m in &t.messages {
        out.push_str(&format!("{} {:?} {}\n", m.line, m.prompt_tokens, m.raw));
        assert_eq!(m.blocks.len(), m.cores.len());
        for (b, core) in m.blocks.iter().zip(&m.cores) {
            assert_eq!(
                (&b.id, b.kind, b.opaque),
                (&core.id, core.content_type, core.opaque)
            );
            out.push_str(&format!("  {:?} {:?} {}\n", core, b.source, b.raw));
        }
    }
    out
}

/// Fails on the first line where two summaries differ, showing only it.
fn same(got: &str, want: &str, what: &str) {
    if let Some((g, w)) = got.lines().zip(want.lines()).find(|(g, w)| g != w) {
        panic!("{what}:\n read on: {}\n whole:   {}", cut(g), cut(w));
    }
    assert_eq!(got.lines().count(), want.lines().count(), "{what}");
}

fn cut(s: &str) -> &str {
    &s[..s.floor_char_boundary(400)]
}

/// Cuts `text` after every `stride`-th line and reads the rest on from the
/// prefix: whenever that is possible it must equal the whole read. Returns
/// how many cuts read on.
fn cuts(name: &str, text: &str, stride: usize) -> usize {
    let whole = read(name, text, None, BadLines::Fail).unwrap();
    let ends: Vec<usize> = text.match_indices('\n').map(|(i, _)| i + 1).collect();
    let mut resumed = 0;
    for (k, &cut) in ends.iter().enumerate().step_by(stride) {
        let Ok(prefix) = read(name, &text[..cut], Some(whole.format), BadLines::Fail) else {
            continue;
        };
        if !resumable(prefix.format, &text[..cut]) {
            continue;
        }
        let sizes: Vec<Option<usize>> = prefix.messages.iter().map(|m| m.prompt_tokens).collect();
        let earlier = prefix.cores();
        let appended = Appended {
            text: &text[cut..],
            at: cut as u64,
            first_line: k + 2,
        };
        let Some(after) = read_after(name, appended, prefix, &earlier, BadLines::Fail) else {
            continue;
        };
        let after = after.unwrap();
        // It says so exactly when the new lines changed a prefix message.
        let now = after.transcript.messages.iter().map(|m| m.prompt_tokens);
        let changed = !now.take(sizes.len()).eq(sizes.iter().copied());
        assert_eq!(
            after.prefix_changed,
            changed,
            "{name}: cut after line {}",
            k + 1
        );
        let after = after.transcript;
        same(
            &summary(&after),
            &summary(&whole),
            &format!("{name}: cut after line {}", k + 1),
        );
        resumed += 1;
    }
    resumed
}

fn testdata(rel: &str) -> (String, String) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata/real")
        .join(rel);
    (rel.to_string(), std::fs::read_to_string(path).unwrap())
}

#[test]
fn real_claude_code_logs_read_on_as_they_read_whole() {
    for (rel, stride, at_least) in [
        ("claude-code/short.jsonl", 1, 5),
        ("claude-code/tool-heavy.jsonl", 1, 20),
        ("claude-code/spawns-subagents.jsonl", 1, 50),
        ("claude-code/long-session-with-compaction.jsonl", 7, 80),
        ("claude-code-edge/edge-cases.jsonl", 1, 1),
        ("claude-code-edge/representative-messages.jsonl", 1, 8),
    ] {
        let (name, text) = testdata(rel);
        let resumed = cuts(&name, &text, stride);
        assert!(resumed >= at_least, "{rel}: read on at only {resumed} cuts");
    }
}

#[test]
fn real_codex_rollouts_read_on_as_they_read_whole() {
    for (rel, stride, at_least) in [
        ("codex/rollout-plain.jsonl", 3, 200),
        ("codex/rollout-with-remote-compaction.jsonl", 13, 60),
    ] {
        let (name, text) = testdata(rel);
        let resumed = cuts(&name, &text, stride);
        assert!(resumed >= at_least, "{rel}: read on at only {resumed} cuts");
    }
}

#[test]
fn chat_and_anthropic_logs_read_on_at_every_line() {
    let chat: String = (0..40)
        .flat_map(|i| {
            [
                format!(r#"{{"role":"user","content":"step {}"}}"#, i % 7),
                format!(
                    r#"{{"role":"assistant","content":null,"tool_calls":[{{"id":"c{i}","type":"function","function":{{"name":"Read","arguments":"{{}}"}}}}]}}"#
                ),
                format!(r#"{{"role":"tool","tool_call_id":"c{i}","content":"same output"}}"#),
            ]
        })
        .map(|l| l + "\n")
        .collect();
    assert_eq!(cuts("chat.jsonl", &chat, 1), 120);
    let anthropic: String = (0..40)
        .flat_map(|i| {
            [
                format!(r#"{{"role":"user","content":"step {}"}}"#, i % 5),
                format!(
                    r#"{{"role":"assistant","content":[{{"type":"tool_use","id":"t{i}","name":"Grep","input":{{}}}}]}}"#
                ),
                format!(
                    r#"{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"t{i}","content":"x"}}]}}"#
                ),
            ]
        })
        .map(|l| l + "\n")
        .collect();
    assert_eq!(cuts("anthropic.jsonl", &anthropic, 1), 120);
}

#[test]
fn a_rewind_into_the_prefix_is_read_whole() {
    let line = |uuid: &str, parent: &str, kind: &str, text: &str| {
        let parent = if parent.is_empty() {
            "null".to_string()
        } else {
            format!("\"{parent}\"")
        };
        format!(
            r#"{{"type":"{kind}","uuid":"{uuid}","parentUuid":{parent},"sessionId":"s","message":{{"role":"{kind}","content":"{text}"}}}}"#
        ) + "\n"
    };
    let prefix = [
        line("a", "", "user", "first prompt"),
        line("b", "a", "assistant", "first answer"),
        line("c", "b", "user", "second prompt"),
        line("d", "c", "assistant", "second answer"),
    ]
    .concat();
    // The user rewinds to the first answer and asks something else.
    let rewind = line("e", "b", "user", "another second prompt");
    let p = read("s.jsonl", &prefix, None, BadLines::Fail).unwrap();
    let earlier = p.cores();
    assert!(
        read_after(
            "s.jsonl",
            at_line_5(&rewind),
            p.clone(),
            &earlier,
            BadLines::Fail
        )
        .is_none()
    );
    // Going on from the last answer reads on.
    let on = line("e", "d", "user", "third prompt");
    let after = read_after("s.jsonl", at_line_5(&on), p, &earlier, BadLines::Fail)
        .unwrap()
        .unwrap()
        .transcript;
    let whole = read("s.jsonl", &(prefix + &on), None, BadLines::Fail).unwrap();
    same(&summary(&after), &summary(&whole), "going on");
}

#[test]
fn a_log_built_a_line_at_a_time_reads_as_one_read_with_its_records() {
    let chat = [
        r#"{"role":"system","content":"be brief"}"#,
        r#"{"role":"user","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"x"}}]}"#,
        "{not json",
        r#"{"kind":"note"}"#,
        r#"{"role":"assistant","content":null,"reasoning_content":"hm","tool_calls":[{"id":"c1","type":"function","function":{"name":"Read","arguments":"{}"}},{"id":"c2","type":"function","function":{"name":"Grep","arguments":""}}]}"#,
        "",
        r#"{"role":"tool","tool_call_id":"c1","content":"out"}"#,
        r#"{"role":"tool","tool_call_id":"c2","content":[{"type":"text","text":"a"}]}"#,
        r#"{"role":"narrator","content":"?"}"#,
    ];
    let anthropic = [
        r#"{"role":"user","content":"go"}"#,
        r#"{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"s"},{"type":"tool_use","id":"t1","name":"Bash","input":{"cmd":"ls"}}]}"#,
        "[1,",
        r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"x","is_error":true}]}"#,
        r#"{"role":"system","content":"no"}"#,
    ];
    for (name, lines) in [
        ("chat.jsonl", &chat[..]),
        ("anthropic.jsonl", &anthropic[..]),
    ] {
        let text = lines.join("\n") + "\n";
        let format = detect(name, &text).unwrap();
        let with_records = read(name, &text, Some(format), BadLines::Skip).unwrap();
        let built = read_owned(name, text.clone(), format, BadLines::Skip, false).unwrap();
        assert!(built.records.is_empty());
        assert!(built.warnings.len() >= 2, "{:?}", built.warnings);
        same(&summary(&built), &summary(&with_records), name);
        // A bad line stops both reads with the same error.
        let whole = read(name, &text, Some(format), BadLines::Fail).unwrap_err();
        let lines = read_owned(name, text, format, BadLines::Fail, false).unwrap_err();
        assert_eq!(lines.to_string(), whole.to_string(), "{name}");
    }
}

/// `text` read by a [`PieceReader`] in pieces that end at `ends`, as a
/// short log is read and as a long one is (a Claude Code log's pieces
/// read lean on a thread of their own, held or let go and read again): all
/// three read alike.
fn in_pieces(
    name: &str,
    text: &str,
    ends: &[usize],
    bad: BadLines,
) -> Result<Transcript, ReadError> {
    let one = in_pieces_on(name, text, ends, bad, Threads::One);
    for threads in [Threads::Two, Threads::TwoReadAgain] {
        let two = in_pieces_on(name, text, ends, bad, threads);
        match (&one, &two) {
            (Ok(one), Ok(two)) => same(&summary(two), &summary(one), &format!("{threads:?}")),
            (Err(one), Err(two)) => assert_eq!(two.to_string(), one.to_string()),
            _ => panic!(
                "{:?} on one thread, {:?} on two ({threads:?})",
                one.as_ref().err(),
                two.as_ref().err()
            ),
        }
    }
    one
}

/// How a [`PieceReader`] reads in [`in_pieces_on`].
#[derive(Debug, Clone, Copy, PartialEq)]
enum Threads {
    One,
    Two,
    /// On two threads, each piece let go once read lean and read again.
    TwoReadAgain,
}

/// A log's text, read again as the store reads the transcript again.
struct Again(String);

impl ReadAgain for Again {
    fn read_again(&self, at: u64, len: usize, into: &mut String) -> bool {
        let at = at as usize;
        let Some(text) = self.0.get(at..at + len) else {
            return false;
        };
        into.clear();
        into.push_str(text);
        true
    }
}

fn in_pieces_on(
    name: &str,
    text: &str,
    ends: &[usize],
    bad: BadLines,
    threads: Threads,
) -> Result<Transcript, ReadError> {
    let first = ends.first().map_or(text.len(), |&e| e);
    let whole = first == text.len();
    // A head too short to detect the format from is told it.
    let format = (!whole).then(|| detect(name, text).unwrap());
    let mut reader =
        read_in_pieces(format, name, &text[..first], whole, bad).expect("read in pieces");
    if threads != Threads::One {
        reader.on_two_threads();
    }
    if threads == Threads::TwoReadAgain {
        reader.read_again(Box::new(Again(text.to_string())));
    }
    let mut at = 0;
    for &end in ends.iter().chain([&text.len()]) {
        reader.read(text[at..end].to_string())?;
        at = end;
    }
    reader.finish(&|| {}, &|_| {})
}

/// A Claude Code log whose pieces are read again reads as it did, or not
/// at all when one of them changed in between: not from the text it has
/// now, which the first read did not choose its records from.
#[test]
fn a_claude_code_log_that_changed_before_it_was_read_again_is_not_read() {
    let (name, text) = testdata("claude-code/tool-heavy.jsonl");
    let ends: Vec<usize> = text
        .match_indices('\n')
        .map(|(i, _)| i + 1)
        .step_by(7)
        .collect();
    let last = *ends.last().unwrap();
    let changed = format!("{}x{}", &text[..last], &text[last + 1..]);
    let grown = format!("{text}{}", &text[..last]);
    for (again, read) in [(&changed, false), (&grown, true)] {
        let mut reader = read_in_pieces(None, &name, &text, true, BadLines::Fail).unwrap();
        reader.on_two_threads();
        reader.read_again(Box::new(Again(again.clone())));
        let mut at = 0;
        for &end in ends.iter().chain([&text.len()]) {
            reader.read(text[at..end].to_string()).unwrap();
            at = end;
        }
        match reader.finish(&|| {}, &|_| {}) {
            Ok(t) if read => {
                let held = in_pieces_on(&name, &text, &ends, BadLines::Fail, Threads::Two);
                same(&summary(&t), &summary(&held.unwrap()), "grown after");
            }
            Err(ReadError::Changed { name: changed }) if !read => assert_eq!(changed, name),
            other => panic!("read {read}: {:?}", other.map(|t| t.messages.len())),
        }
    }
}

#[test]
fn a_log_read_in_pieces_reads_as_it_reads_whole() {
    // Call ids come round again under other tools' names, and some results
    // answer a call many lines (pieces) before them: each is named from the
    // last call of its id before it, wherever the pieces end.
    let lines: Vec<String> = (0..120)
        .map(|i| match i % 6 {
            0 if i % 12 == 0 && i > 0 => format!(
                r#"{{"role":"tool","tool_call_id":"c{}","content":"late"}}"#,
                (i - 11) % 24
            ),
            0 => format!(r#"{{"role":"user","content":"step {}"}}"#, i % 7),
            1 => format!(
                r#"{{"role":"assistant","content":null,"tool_calls":[{{"id":"c{}","type":"function","function":{{"name":"Tool{i}","arguments":"{{}}"}}}}]}}"#,
                i % 24
            ),
            2 => format!(
                r#"{{"role":"tool","tool_call_id":"c{}","content":"output"}}"#,
                (i - 1) % 24
            ),
            3 => r#"{"kind":"note"}"#.to_string(),
            4 => String::new(),
            _ => "{broken".to_string(),
        })
        .collect();
    for (sep, end) in [("\n", "\n"), ("\r\n", "\r\n"), ("\n", "")] {
        let text = lines.join(sep) + end;
        let whole =
            read_owned("c.jsonl", text.clone(), Format::Chat, BadLines::Skip, false).unwrap();
        let ends: Vec<usize> = text.match_indices('\n').map(|(i, _)| i + 1).collect();
        // The first piece holds enough records to detect the format from.
        for step in [70, 1, 2, 7] {
            let cut: Vec<usize> = ends.iter().copied().skip(69).step_by(step).collect();
            let read = in_pieces("c.jsonl", &text, &cut, BadLines::Skip).unwrap();
            same(
                &summary(&read),
                &summary(&whole),
                &format!("pieces of {step} lines"),
            );
            // A bad line stops it with the error a whole read gives.
            let want = read_owned("c.jsonl", text.clone(), Format::Chat, BadLines::Fail, false);
            let got = in_pieces("c.jsonl", &text, &cut, BadLines::Fail);
            assert_eq!(got.unwrap_err().to_string(), want.unwrap_err().to_string());
        }
    }
}

#[test]
fn only_a_log_of_one_object_a_line_is_read_in_pieces() {
    let line = r#"{"role":"user","content":"hi"}"#;
    let many = format!("{line}\n").repeat(60);
    assert!(read_in_pieces(None, "c.jsonl", &many, false, BadLines::Fail).is_some());
    // Too few records to tell the format from, unless that is the whole log.
    let few = format!("{line}\n").repeat(10);
    assert!(read_in_pieces(None, "c.jsonl", &few, false, BadLines::Fail).is_none());
    assert!(read_in_pieces(None, "c.jsonl", &few, true, BadLines::Fail).is_some());
    assert!(read_in_pieces(Some(Format::Chat), "c.jsonl", &few, false, BadLines::Fail).is_some());
    for whole_only in [
        format!("[{line},\n{line}]\n"),
        format!("{{\"messages\": [{line}]}}\n"),
        format!("{{\n  \"role\": \"user\",\n  \"content\": \"hi\"\n}}\n{many}"),
    ] {
        assert!(read_in_pieces(None, "x.jsonl", &whole_only, true, BadLines::Fail).is_none());
    }
    for rel in ["claude-code/short.jsonl", "codex/rollout-plain.jsonl"] {
        let text = testdata(rel).1;
        assert!(read_in_pieces(None, rel, &text, true, BadLines::Fail).is_some());
    }
}

#[test]
fn real_logs_read_in_pieces_read_as_they_read_whole() {
    for (rel, steps) in [
        ("codex/rollout-plain.jsonl", &[1, 3, 50][..]),
        ("codex/rollout-with-remote-compaction.jsonl", &[2, 13, 300]),
        ("claude-code/short.jsonl", &[1, 2, 5]),
        ("claude-code/tool-heavy.jsonl", &[1, 3, 17]),
        ("claude-code/spawns-subagents.jsonl", &[1, 7, 40]),
        ("claude-code/long-session-with-compaction.jsonl", &[9, 200]),
        ("claude-code-edge/edge-cases.jsonl", &[1, 2]),
        ("claude-code-edge/representative-messages.jsonl", &[1, 3]),
    ] {
        let (name, text) = testdata(rel);
        let format = detect(&name, &text).unwrap();
        let whole = read_owned(&name, text.clone(), format, BadLines::Fail, false);
        let whole = summary(&whole.unwrap());
        let ends: Vec<usize> = text.match_indices('\n').map(|(i, _)| i + 1).collect();
        for &step in steps {
            let cut: Vec<usize> = ends.iter().copied().step_by(step).collect();
            let read = in_pieces(&name, &text, &cut, BadLines::Fail).unwrap();
            same(
                &summary(&read),
                &whole,
                &format!("{rel} in pieces of {step} lines"),
            );
        }
    }
    // A line no record can be made of stops it where a whole read stops,
    // or is skipped as a whole read skips it.
    for (rel, format) in [
        ("claude-code/tool-heavy.jsonl", Format::ClaudeCode),
        ("codex/rollout-plain.jsonl", Format::Codex),
    ] {
        let (name, text) = testdata(rel);
        let mut lines: Vec<&str> = text.lines().collect();
        lines[30] = "{\"type\": \"user\", oops}";
        let text = lines.join("\n") + "\n";
        let ends: Vec<usize> = text.match_indices('\n').map(|(i, _)| i + 1).collect();
        let cut: Vec<usize> = ends.iter().copied().step_by(4).collect();
        for bad in [BadLines::Fail, BadLines::Skip] {
            let whole = read_owned(&name, text.clone(), format, bad, false);
            let read = in_pieces(&name, &text, &cut, bad);
            match (read, whole) {
                (Ok(read), Ok(whole)) => same(&summary(&read), &summary(&whole), rel),
                (Err(read), Err(whole)) => assert_eq!(read.to_string(), whole.to_string()),
                (read, whole) => panic!("{:?} against {:?}", read.err(), whole.err()),
            }
        }
    }
}

/// A Claude Code log held in pieces is built on two threads, the later
/// pieces' records parsed without the earlier ones: a record only a whole
/// parse rejects (an unpaired surrogate escape), early, late or both,
/// stops it or is skipped as a whole read does, and the results of the
/// later half are named from calls made in the earlier.
#[test]
fn a_claude_code_log_built_on_two_threads_reads_as_it_reads_whole() {
    let (name, text) = testdata("claude-code/tool-heavy.jsonl");
    let spoil = |at: &[usize]| -> String {
        let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
        for &i in at {
            lines[i - 1] = lines[i - 1].replacen(r#""text":""#, r#""text":"\ud800 "#, 1);
        }
        lines.join("\n") + "\n"
    };
    for at in [&[][..], &[12], &[27], &[39], &[12, 27]] {
        let text = spoil(at);
        let ends: Vec<usize> = text.match_indices('\n').map(|(i, _)| i + 1).collect();
        for step in [1, 2, 3] {
            let cut: Vec<usize> = ends.iter().copied().step_by(step).collect();
            for bad in [BadLines::Fail, BadLines::Skip] {
                let whole = read_owned(&name, text.clone(), Format::ClaudeCode, bad, false);
                let read = in_pieces(&name, &text, &cut, bad);
                let what = format!("bad lines {at:?}, pieces of {step} lines, {bad:?}");
                let spoilt = bad == BadLines::Fail && !at.is_empty();
                assert_eq!(whole.is_err(), spoilt, "{what}");
                match (read, whole) {
                    (Ok(read), Ok(whole)) => same(&summary(&read), &summary(&whole), &what),
                    (Err(read), Err(whole)) => {
                        assert_eq!(read.to_string(), whole.to_string(), "{what}")
                    }
                    (read, whole) => panic!("{what}: {:?} against {:?}", read.err(), whole.err()),
                }
            }
        }
    }
}

/// `text` appended at the start of a transcript's fifth line.
fn at_line_5(text: &str) -> Appended<'_> {
    Appended {
        text,
        at: 0,
        first_line: 5,
    }
}

/// The hand-made layouts of a log with several branches (see
/// `branch_tests`) read on from every line, and in pieces, read as they
/// read whole; a prefix whose branch does not end at its last record is
/// read whole again.
#[test]
fn logs_of_several_branches_read_on_as_they_read_whole() {
    for (what, records) in super::branch_tests::layouts() {
        let text = records.concat();
        let name = format!("{what}.jsonl");
        cuts(&name, &text, 1);
        let whole = read_owned(
            &name,
            text.clone(),
            Format::ClaudeCode,
            BadLines::Fail,
            false,
        );
        let whole = summary(&whole.unwrap());
        let ends: Vec<usize> = text.match_indices('\n').map(|(i, _)| i + 1).collect();
        for step in [1, 2, 3] {
            let cut: Vec<usize> = ends.iter().copied().step_by(step).collect();
            let read = in_pieces(&name, &text, &cut, BadLines::Fail).unwrap();
            same(
                &summary(&read),
                &whole,
                &format!("{what} in pieces of {step}"),
            );
        }
    }
    // Local commands' records, hung off the first record, come after
    // the answer: what follows is read whole, and reads as it does whole.
    let log = super::branch_tests::local_commands_off_the_root().concat();
    let cut = log.match_indices('\n').nth(4).map(|(i, _)| i + 1).unwrap();
    let prefix = read("l.jsonl", &log[..cut], None, BadLines::Fail).unwrap();
    assert!(prefix.resume.branch.last);
    let rest = Appended {
        text: &log[cut..],
        at: cut as u64,
        first_line: 6,
    };
    let earlier = prefix.cores();
    assert!(read_after("l.jsonl", rest, prefix, &earlier, BadLines::Fail).is_none());
}

/// A Codex rollout forked from another starts with its own `session_meta`
/// and then the other's lines, its `session_meta` among them; one resumed
/// by an older Codex may hold a second one later. Codex rebuilds the
/// history from every `response_item` in order, whatever `session_meta`
/// lines fall between them, and so does noa, under the first id; read on
/// from any line it reads as it does whole.
#[test]
fn a_rollout_with_a_second_session_meta_is_one_conversation() {
    let line = |kind: &str, payload: serde_json::Value| {
        serde_json::json!({"timestamp": "2026-02-23T11:54:52.352Z", "type": kind, "payload": payload})
            .to_string()
            + "\n"
    };
    let message = |role: &str, kind: &str, text: &str| {
        line(
            "response_item",
            serde_json::json!({"type": "message", "role": role, "content": [{"type": kind, "text": text}]}),
        )
    };
    let text = [
        line("session_meta", serde_json::json!({"id": "fork"})),
        line("session_meta", serde_json::json!({"id": "parent"})),
        message("user", "input_text", "first"),
        message("assistant", "output_text", "one"),
        line("session_meta", serde_json::json!({"id": "parent"})),
        message("user", "input_text", "second"),
        message("assistant", "output_text", "two"),
    ]
    .concat();
    let t = read("r.jsonl", &text, Some(Format::Codex), BadLines::Fail).unwrap();
    assert_eq!(t.session_id.as_deref(), Some("fork"));
    let texts: Vec<String> = t.cores().into_iter().map(|c| c.text).collect();
    assert_eq!(texts, ["first", "one", "second", "two"]);
    assert!(t.warnings.is_empty(), "{:?}", t.warnings);
    assert!(cuts("r.jsonl", &text, 1) >= 5);
}
