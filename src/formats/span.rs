//! Where in a line of JSON a tool output's string lies.
//!
//! A long tool output is most of a transcript's bytes, and almost always
//! one JSON string in its line (a chat tool message's `content`, a
//! `tool_result`'s, a Codex output item's `output`). Knowing where that
//! string starts, the read cache can point at it rather than copy it: the
//! transcript holds the words already, and its prefix is proved unchanged
//! every turn. The line, which serde_json
//! has already read whole, is walked once more: its structure a byte at a
//! time, its strings (most of its bytes) at memory speed.

use std::num::NonZeroU64;

use serde_json::Value;

use super::{HostMessage, Slot};
use crate::engine::ContentType;

/// Where the words of each tool output of `message` lie in `line`, when
/// they are one string: by the slot of the block they make, the place of
/// the string's opening quote in the line. `within` names the key of the
/// line's object that holds the message (a Claude Code record's `message`,
/// which its reader refuses twice, so the first is the one); none for a
/// chat or Anthropic log, whose line is the message. Found before the
/// message is built, which moves the strings out of `message`.
pub(crate) fn output_spans(
    message: &Value,
    line: &str,
    within: Option<&str>,
) -> Vec<(Slot, usize)> {
    let is_text = |v: Option<&Value>| v.and_then(Value::as_str).is_some_and(|s| !s.is_empty());
    // A block whose output is one string.
    let is_result = |item: &Value| {
        item.get("type").and_then(Value::as_str) == Some("tool_result")
            && is_text(item.get("content"))
    };
    let tool = message.get("role").and_then(Value::as_str) == Some("tool");
    let results = match message.get("content") {
        Some(Value::Array(items)) => items.iter().any(is_result),
        content => tool && is_text(content),
    };
    if !results {
        return Vec::new();
    }
    let line = line.as_bytes();
    let at = match within {
        Some(key) => first_member(line, skip_space(line, 0), key),
        None => Some(skip_space(line, 0)),
    };
    let Some(Contents { whole, parts }) = at.and_then(|at| contents(line, at)) else {
        return Vec::new();
    };
    match message.get("content") {
        Some(Value::Array(items)) => (parts.into_iter())
            .filter(|&(k, _)| items.get(k).is_some_and(is_result))
            .map(|(k, at)| (Slot::Part(k), at))
            .collect(),
        _ => whole.map(|at| (Slot::Content, at)).into_iter().collect(),
    }
}

/// Where the output of a Codex rollout line's tool output item lies in
/// `line`, when it is one string: the `output` of its `payload`, of each
/// the last, as serde_json reads them.
pub(crate) fn payload_output(record: &Value, line: &str) -> Option<usize> {
    let payload = record.get("payload")?;
    let kind = payload.get("type").and_then(Value::as_str);
    let output = matches!(
        kind,
        Some("function_call_output" | "custom_tool_call_output" | "local_shell_call_output")
    );
    let text = payload.get("output").and_then(Value::as_str);
    if record.get("type").and_then(Value::as_str) != Some("response_item")
        || !output
        || text.is_none_or(str::is_empty)
    {
        return None;
    }
    let line = line.as_bytes();
    let mut found = None;
    for_each_member(line, skip_space(line, 0), |key, v| {
        if !is_key(key, "payload") {
            return skip_value(line, v);
        }
        let (output, end) = string_member(line, v, "output")?;
        found = output;
        Some(end)
    })?;
    found
}

/// The strings a message's `content` holds, as serde_json reads them: the
/// content itself when it is a string, else the `content` string of each
/// object of the list, by place. Of keys that appear twice in one object,
/// the last.
#[derive(Default)]
struct Contents {
    whole: Option<usize>,
    parts: Vec<(usize, usize)>,
}

/// [`Contents`] of the message object at `at`, in one pass over it.
fn contents(line: &[u8], at: usize) -> Option<Contents> {
    let mut found = Contents::default();
    for_each_member(line, at, |key, v| {
        if !is_key(key, "content") {
            return skip_value(line, v);
        }
        found = Contents::default();
        match line.get(v)? {
            b'"' => {
                found.whole = Some(v);
                string_end(line, v)
            }
            b'[' => for_each_element(line, v, |k, item| {
                let (part, end) = string_member(line, item, "content")?;
                found.parts.extend(part.map(|p| (k, p)));
                Some(end)
            }),
            _ => skip_value(line, v),
        }
    })?;
    Some(found)
}

/// Where the string the last `key` of the object at `at` holds starts,
/// when it is a string, and where that value (object or not) ends.
fn string_member(line: &[u8], at: usize, key: &str) -> Option<(Option<usize>, usize)> {
    if line.get(at) != Some(&b'{') {
        return Some((None, skip_value(line, at)?));
    }
    let mut found = None;
    let end = for_each_member(line, at, |name, v| {
        if is_key(name, key) {
            found = (line.get(v) == Some(&b'"')).then_some(v);
        }
        skip_value(line, v)
    })?;
    Some((found, end))
}

/// Where the value of the first `key` of the object at `at` starts.
fn first_member(line: &[u8], at: usize, key: &str) -> Option<usize> {
    let mut found = None;
    for_each_member(line, at, |name, v| {
        if is_key(name, key) {
            found = Some(v);
            // Nothing after it matters: the walk stops here.
            return None;
        }
        skip_value(line, v)
    });
    found
}

/// Calls `each` with the key (as written between its quotes) and the
/// place of the value of every member of the object at `at`, in order;
/// `each` returns where the value ends. Where the object ends; `None` when
/// it is not well-formed where the walk passes, or `each` stops it.
fn for_each_member(
    line: &[u8],
    at: usize,
    mut each: impl FnMut(&[u8], usize) -> Option<usize>,
) -> Option<usize> {
    (line.get(at) == Some(&b'{')).then_some(())?;
    let mut i = skip_space(line, at + 1);
    if line.get(i) == Some(&b'}') {
        return Some(i + 1);
    }
    loop {
        let end = string_end(line, i)?;
        let name = &line[i + 1..end - 1];
        i = skip_space(line, end);
        (line.get(i) == Some(&b':')).then_some(())?;
        i = skip_space(line, each(name, skip_space(line, i + 1))?);
        match line.get(i)? {
            b',' => i = skip_space(line, i + 1),
            b'}' => return Some(i + 1),
            _ => return None,
        }
    }
}

/// Calls `each` with the place and start of every value of the list at
/// `at`, in order; `each` returns where the value ends. Where the list
/// ends.
fn for_each_element(
    line: &[u8],
    at: usize,
    mut each: impl FnMut(usize, usize) -> Option<usize>,
) -> Option<usize> {
    (line.get(at) == Some(&b'[')).then_some(())?;
    let mut i = skip_space(line, at + 1);
    if line.get(i) == Some(&b']') {
        return Some(i + 1);
    }
    let mut k = 0;
    loop {
        i = skip_space(line, each(k, i)?);
        match line.get(i)? {
            b',' => i = skip_space(line, i + 1),
            b']' => return Some(i + 1),
            _ => return None,
        }
        k += 1;
    }
}

/// Gives the tool results of `m`, built from a line whose first byte lies
/// at `line_at` in the transcript, the places [`output_spans`] found.
pub(crate) fn note_spans(m: &mut HostMessage, spans: &[(Slot, usize)], line_at: u64) {
    for &(slot, at) in spans {
        let block = (m.blocks.iter_mut())
            .find(|b| b.kind == ContentType::ToolResult && b.source.slot == slot);
        if let Some(b) = block {
            b.words_at = NonZeroU64::new(line_at + at as u64);
        }
    }
}

/// Where the byte after the JSON string starting at `at` (its opening
/// quote) is: `None` when it does not end in `bytes`.
pub fn string_end(bytes: &[u8], at: usize) -> Option<usize> {
    let mut i = at + 1;
    loop {
        // Quotes are rarer than backslashes in long text (one escapes
        // every newline): each quote found is the end unless an odd run of
        // backslashes comes right before it.
        i += memchr::memchr(b'"', bytes.get(i..)?)?;
        let run = (bytes[..i].iter().rev())
            .take_while(|&&b| b == b'\\')
            .count();
        if run % 2 == 0 {
            return Some(i + 1);
        }
        i += 1;
    }
}

/// Whether a key's bytes, as written between its quotes, say `key`: an
/// escaped one is read as JSON would read it.
fn is_key(name: &[u8], key: &str) -> bool {
    if !name.contains(&b'\\') {
        return name == key.as_bytes();
    }
    let quoted = [b"\"", name, b"\""].concat();
    serde_json::from_slice::<String>(&quoted).is_ok_and(|k| k == key)
}

/// Where the value starting at `at` ends.
fn skip_value(line: &[u8], at: usize) -> Option<usize> {
    match line.get(at)? {
        b'"' => string_end(line, at),
        b'{' | b'[' => {
            // Only the structure is walked a byte at a time: strings, most
            // of the bytes, are passed at memory speed.
            let mut depth = 0usize;
            let mut i = at;
            while let Some(&b) = line.get(i) {
                match b {
                    b'"' => {
                        i = string_end(line, i)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
            None
        }
        _ => {
            let rest = line.get(at..)?;
            let len = rest
                .iter()
                .position(|b| matches!(b, b',' | b'}' | b']') || b.is_ascii_whitespace())
                .unwrap_or(rest.len());
            (len > 0).then_some(at + len)
        }
    }
}

fn skip_space(line: &[u8], mut i: usize) -> usize {
    while line.get(i).is_some_and(u8::is_ascii_whitespace) {
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    /// The outputs `line` (holding its message at `within`) has, decoded.
    fn found(line: &str, within: Option<&str>) -> Vec<(Slot, String)> {
        let v: Value = serde_json::from_str(line).unwrap();
        let message = within.map_or(&v, |k| &v[k]);
        (output_spans(message, line, within).into_iter())
            .map(|(slot, at)| {
                let end = string_end(line.as_bytes(), at).unwrap();
                (slot, serde_json::from_str(&line[at..end]).unwrap())
            })
            .collect()
    }

    /// The outputs serde_json reads in `message`: a tool message's string
    /// content, or the string `content` of each `tool_result` of a list.
    fn by_serde(message: &Value) -> Vec<(Slot, String)> {
        let text = |v: &Value| v.as_str().filter(|s| !s.is_empty()).map(str::to_string);
        match &message["content"] {
            Value::Array(items) => (items.iter().enumerate())
                .filter(|(_, item)| item["type"] == "tool_result")
                .filter_map(|(k, item)| Some((Slot::Part(k), text(&item["content"])?)))
                .collect(),
            content if message["role"] == "tool" => text(content)
                .map(|t| (Slot::Content, t))
                .into_iter()
                .collect(),
            _ => Vec::new(),
        }
    }

    fn one(slot: Slot, text: &str) -> Vec<(Slot, String)> {
        vec![(slot, text.to_string())]
    }

    #[test]
    fn finds_a_chat_tool_output_and_a_claude_code_tool_result() {
        let chat = r#"{"role":"tool","tool_call_id":"c1","content":"line 1\nline \"2\"\n"}"#;
        assert_eq!(
            found(chat, None),
            one(Slot::Content, "line 1\nline \"2\"\n")
        );
        let cc = r#"{"type":"user","message":{"role":"user","content":[{"type":"text","text":"x"},{"tool_use_id":"t","type":"tool_result","content":"     1→fn main() {}"}]},"uuid":"u","toolUseResult":{"content":"     1→fn main() {}"}}"#;
        assert_eq!(
            found(cc, Some("message")),
            one(Slot::Part(1), "     1→fn main() {}")
        );
    }

    #[test]
    fn the_last_of_a_key_given_twice_wins_as_serde_json_reads_it() {
        let line =
            r#"{"role":"tool","content":"first","con\u0074ent":"second","other":{"content":"x"}}"#;
        let v: Value = serde_json::from_str(line).unwrap();
        assert_eq!(found(line, None), by_serde(&v));
        assert_eq!(found(line, None), one(Slot::Content, "second"));
        let twice = r#"{"role":"user","content":[{"type":"tool_result","content":"a"}],"content":[{"type":"text"},{"type":"tool_result","content":"b","content":"c"}]}"#;
        let v: Value = serde_json::from_str(twice).unwrap();
        assert_eq!(found(twice, None), one(Slot::Part(1), "c"));
        assert_eq!(found(twice, None), by_serde(&v));
    }

    #[test]
    fn a_codex_output_is_found_where_serde_json_reads_it() {
        let at = |line: &str| {
            let v: Value = serde_json::from_str(line).unwrap();
            payload_output(&v, line).map(|at| {
                let end = string_end(line.as_bytes(), at).unwrap();
                serde_json::from_str::<String>(&line[at..end]).unwrap()
            })
        };
        let line = r#"{"timestamp":"t","type":"response_item","payload":{"type":"function_call_output","call_id":"c","output":"exit 0\nok \"done\""}}"#;
        assert_eq!(at(line).as_deref(), Some("exit 0\nok \"done\""));
        // Of a payload given twice, and an output given twice, the last.
        let twice = r#"{"type":"response_item","payload":{"type":"function_call_output","output":"a"},"payload":{"output":"b","type":"custom_tool_call_output","output":"c"}}"#;
        assert_eq!(at(twice).as_deref(), Some("c"));
        for line in [
            r#"{"type":"event_msg","payload":{"type":"function_call_output","output":"x"}}"#,
            r#"{"type":"response_item","payload":{"type":"message","output":"x"}}"#,
            r#"{"type":"response_item","payload":{"type":"function_call_output","output":{"text":"x"}}}"#,
            r#"{"type":"response_item","payload":{"type":"function_call_output","output":""}}"#,
        ] {
            assert_eq!(at(line), None, "{line}");
        }
    }

    #[test]
    fn outputs_that_are_not_one_string_are_not_found() {
        for line in [
            r#"{"role":"tool","content":[{"type":"text","text":"in parts"}]}"#,
            r#"{"role":"user","content":"not a tool's"}"#,
            r#"{"role":"user","content":[{"type":"tool_result","content":[{"type":"text","text":"x"}]}]}"#,
            r#"{"role":"tool","content":""}"#,
        ] {
            assert_eq!(found(line, None), [], "{line}");
        }
        let unterminated = r#"{"role":"tool","content":"never ends"#;
        let v = json!({"role": "tool", "content": "never ends"});
        assert_eq!(output_spans(&v, unterminated, None), []);
    }

    /// A line that makes no message (an Anthropic record of another role)
    /// gives its outputs' places to none: not to the message before it.
    #[test]
    fn a_record_skipped_notes_nothing_on_the_message_before() {
        let lines = [
            json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": "the first output"}]}),
            json!({"role": "note", "content": [{"type": "tool_result", "tool_use_id": "b", "content": "other words"}]}),
        ];
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        let anthropic = Some(crate::formats::Format::Anthropic);
        let bad = crate::formats::BadLines::Fail;
        let mut r = crate::formats::read_in_pieces(anthropic, "t", &text, true, bad).unwrap();
        r.read(text.clone()).unwrap();
        let t = r.finish(&|| {}, &|_| {}).unwrap();
        assert_eq!(t.messages.len(), 1);
        let at = t.messages[0].blocks[0].words_at.unwrap().get() as usize;
        let end = string_end(text.as_bytes(), at).unwrap();
        assert_eq!(
            serde_json::from_str::<String>(&text[at..end]).unwrap(),
            "the first output"
        );
    }

    /// Every tool output a real log's reader notes as one string of the
    /// file, read in pieces as a first turn reads it (and a Claude Code log
    /// on the threads a long one is read on), is that string there.
    #[test]
    fn every_output_noted_in_a_real_log_is_its_string_there() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/real");
        // Claude Code's outputs, and Codex's (all short in these logs).
        let mut noted = [0, 0];
        let dirs = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path());
        for sub in dirs.filter(|p| p.is_dir()) {
            for file in std::fs::read_dir(sub).unwrap() {
                let path = file.unwrap().path();
                if path.extension().is_none_or(|e| e != "jsonl") {
                    continue;
                }
                let text = std::fs::read_to_string(&path).unwrap();
                let name = path.display().to_string();
                let bad = crate::formats::BadLines::Skip;
                let Some(mut r) = crate::formats::read_in_pieces(None, &name, &text, true, bad)
                else {
                    continue;
                };
                r.on_two_threads();
                // Three pieces, each ending where a line does.
                let mut start = 0;
                for k in 1..=3 {
                    let end = match text[..text.len() * k / 3].rfind('\n') {
                        Some(at) if k < 3 && at + 1 > start => at + 1,
                        _ if k < 3 => continue,
                        _ => text.len(),
                    };
                    r.read(text[start..end].to_string()).unwrap();
                    start = end;
                }
                let t = r.finish(&|| {}, &|_| {}).unwrap();
                for m in &t.messages {
                    for (b, c) in m.blocks.iter().zip(&m.cores) {
                        let Some(at) = b.words_at else { continue };
                        let at = at.get() as usize;
                        let end = string_end(text.as_bytes(), at).unwrap();
                        let words: String = serde_json::from_str(&text[at..end]).unwrap();
                        assert_eq!(words, c.text, "{name}: byte {at}");
                        noted[usize::from(name.contains("codex"))] += 1;
                    }
                }
            }
        }
        assert!(noted[0] > 50 && noted[1] > 200, "{noted:?} outputs noted");
    }

    /// Any JSON value: strings with escapes, quotes, brackets and braces
    /// inside them, nested lists and objects.
    fn any_json() -> impl Strategy<Value = Value> {
        let text = "[a-c\"\\\\{}\\[\\]:, \n→é]{0,12}";
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i32>().prop_map(Value::from),
            text.prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 24, 4, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec(("[a-c]{1,2}|content|type", inner), 0..4)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    /// A message of any shape: a role, and content that is a string, or a
    /// list of blocks some of which are tool results (their content any
    /// value), among other members of any value.
    fn any_message() -> impl Strategy<Value = Value> {
        let block = (any::<bool>(), any_json(), any_json()).prop_map(|(result, content, other)| {
            let kind = if result { "tool_result" } else { "text" };
            json!({"type": kind, "x": other, "content": content})
        });
        let content = prop_oneof![
            "[a-c\"\\\\\n]{0,12}".prop_map(Value::from),
            prop::collection::vec(block, 0..4).prop_map(Value::Array),
            any_json(),
        ];
        (prop_oneof![Just("tool"), Just("user")], content, any_json()).prop_map(
            |(role, content, other)| json!({"a": other, "role": role, "content": content}),
        )
    }

    proptest! {
        /// Any string, however its quotes and backslashes fall, ends where
        /// serde_json wrote its closing quote, whatever follows it; cut
        /// short of that quote, it does not end.
        #[test]
        fn a_string_ends_at_its_closing_quote(
            text in "[a\"\\\\\n\u{e9}]{0,24}",
            after in "[\"\\\\,}a ]{0,4}",
        ) {
            let written = serde_json::to_string(&text).unwrap();
            let bytes = [written.as_bytes(), after.as_bytes()].concat();
            prop_assert_eq!(string_end(&bytes, 0), Some(written.len()));
            prop_assert_eq!(string_end(&bytes[..written.len() - 1], 0), None);
        }

        /// In any message, laid out compact or spaced, on its own or inside
        /// a record, the walk finds the outputs serde_json reads there, each
        /// where its string starts.
        #[test]
        fn the_walk_finds_what_serde_json_reads(
            message in any_message(),
            around in any_json(),
            (pretty, within) in (any::<bool>(), any::<bool>()),
        ) {
            let record = json!({"b": around, "message": message, "z": 1});
            let v = if within { &record } else { &message };
            let line = match pretty {
                true => serde_json::to_string_pretty(v).unwrap(),
                false => serde_json::to_string(v).unwrap(),
            };
            let key = within.then_some("message");
            prop_assert_eq!(found(&line, key), by_serde(&message));
        }
    }
}
