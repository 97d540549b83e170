//! Where in a line of JSON a tool output's string lies.
//!
//! A long tool output is most of a transcript's bytes, and almost always
//! one JSON string in its line (a chat tool message's `content`, a
//! `tool_result`'s). Knowing where that string starts, the read cache can
//! point at it rather than copy it: the transcript holds the words already,
//! and its prefix is proved unchanged every turn. The walk here only steps
//! over the JSON around the path, a string at a time.

use std::num::NonZeroU64;

use serde_json::Value;

use super::{HostMessage, Slot};
use crate::engine::ContentType;

/// Where the words of each tool output of `message` lie in `line`, when
/// they are one string: by the slot of the block they make, the place of
/// the string's opening quote in the line. `within` is the path from the
/// line to the message (a Claude Code record's `message`; none for a chat
/// or Anthropic log, whose line is the message). Found before the message
/// is built, which moves the strings out of `message`.
pub(crate) fn output_spans(message: &Value, line: &str, within: &[Step]) -> Vec<(Slot, usize)> {
    let line = line.as_bytes();
    let at = |tail: &[Step]| string_at(line, &[within, tail].concat());
    let is_text = |v: Option<&Value>| v.and_then(Value::as_str).is_some_and(|s| !s.is_empty());
    match message.get("content") {
        // A chat tool message's output.
        Some(content)
            if is_text(Some(content))
                && message.get("role").and_then(Value::as_str) == Some("tool") =>
        {
            at(&[Step::Key("content")])
                .map(|a| (Slot::Content, a))
                .into_iter()
                .collect()
        }
        Some(Value::Array(items)) => (items.iter().enumerate())
            .filter(|(_, item)| {
                item.get("type").and_then(Value::as_str) == Some("tool_result")
                    && is_text(item.get("content"))
            })
            .filter_map(|(k, _)| {
                let path = [Step::Key("content"), Step::Index(k), Step::Key("content")];
                at(&path).map(|a| (Slot::Part(k), a))
            })
            .collect(),
        _ => Vec::new(),
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

/// One step of a path into a JSON value: a key of an object, or a place
/// in a list.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Step<'p> {
    Key(&'p str),
    Index(usize),
}

/// Where the JSON string that `path` leads to in `line` starts (its
/// opening quote), as serde_json reads the line: of keys that appear twice
/// in one object, the last. `None` when the path leads elsewhere or to
/// something other than a string, or the line is not well-formed where the
/// walk passes.
pub(crate) fn string_at(line: &[u8], path: &[Step]) -> Option<usize> {
    let mut at = skip_space(line, 0);
    for step in path {
        at = match *step {
            Step::Key(key) => member(line, at, key)?,
            Step::Index(i) => element(line, at, i)?,
        };
    }
    (line.get(at) == Some(&b'"')).then_some(at)
}

/// Where the byte after the JSON string starting at `at` (its opening
/// quote) is: `None` when it does not end in `bytes`.
pub fn string_end(bytes: &[u8], at: usize) -> Option<usize> {
    let mut i = at + 1;
    loop {
        i += memchr::memchr2(b'"', b'\\', bytes.get(i..)?)?;
        match bytes[i] {
            b'"' => return Some(i + 1),
            // An escape: the byte after it is never the string's end.
            _ => i += 2,
        }
    }
}

/// The value of the last `key` of the object at `at`.
fn member(line: &[u8], at: usize, key: &str) -> Option<usize> {
    if line.get(at) != Some(&b'{') {
        return None;
    }
    let mut found = None;
    let mut i = skip_space(line, at + 1);
    if line.get(i) == Some(&b'}') {
        return None;
    }
    loop {
        let end = string_end(line, i)?;
        let name = &line[i + 1..end - 1];
        i = skip_space(line, end);
        (line.get(i) == Some(&b':')).then_some(())?;
        i = skip_space(line, i + 1);
        if is_key(name, key) {
            found = Some(i);
        }
        i = skip_space(line, skip_value(line, i)?);
        match line.get(i)? {
            b',' => i = skip_space(line, i + 1),
            b'}' => return found,
            _ => return None,
        }
    }
}

/// The `n`th value of the list at `at`.
fn element(line: &[u8], at: usize, n: usize) -> Option<usize> {
    if line.get(at) != Some(&b'[') {
        return None;
    }
    let mut i = skip_space(line, at + 1);
    for _ in 0..n {
        i = skip_space(line, skip_value(line, i)?);
        (line.get(i) == Some(&b',')).then_some(())?;
        i = skip_space(line, i + 1);
    }
    (line.get(i).is_some_and(|&b| b != b']')).then_some(i)
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
    use serde_json::{Value, json};

    /// The string `path` leads to, read by serde_json.
    fn by_serde<'v>(v: &'v Value, path: &[Step]) -> Option<&'v str> {
        let mut v = v;
        for step in path {
            v = match *step {
                Step::Key(k) => v.as_object()?.get(k)?,
                Step::Index(i) => v.as_array()?.get(i)?,
            };
        }
        v.as_str()
    }

    /// The string at `at` in `line`, decoded.
    fn decoded(line: &str, at: usize) -> String {
        let end = string_end(line.as_bytes(), at).unwrap();
        serde_json::from_str(&line[at..end]).unwrap()
    }

    #[test]
    fn finds_a_chat_tool_output_and_a_claude_code_tool_result() {
        let chat = r#"{"role":"tool","tool_call_id":"c1","content":"line 1\nline \"2\"\n"}"#;
        let at = string_at(chat.as_bytes(), &[Step::Key("content")]).unwrap();
        assert_eq!(decoded(chat, at), "line 1\nline \"2\"\n");
        let cc = r#"{"type":"user","message":{"role":"user","content":[{"type":"text","text":"x"},{"tool_use_id":"t","type":"tool_result","content":"     1→fn main() {}"}]},"uuid":"u"}"#;
        let path = [
            Step::Key("message"),
            Step::Key("content"),
            Step::Index(1),
            Step::Key("content"),
        ];
        let at = string_at(cc.as_bytes(), &path).unwrap();
        assert_eq!(decoded(cc, at), "     1→fn main() {}");
    }

    #[test]
    fn the_last_of_a_key_given_twice_wins_as_serde_json_reads_it() {
        let line = r#"{"content":"first","con\u0074ent":"second","other":{"content":"x"}}"#;
        let v: Value = serde_json::from_str(line).unwrap();
        let at = string_at(line.as_bytes(), &[Step::Key("content")]).unwrap();
        assert_eq!(
            decoded(line, at),
            by_serde(&v, &[Step::Key("content")]).unwrap()
        );
        assert_eq!(decoded(line, at), "second");
    }

    #[test]
    fn a_path_to_no_string_finds_nothing() {
        let line = r#"{"content":[{"text":"a"}],"n":12,"t":true}"#;
        for path in [
            &[Step::Key("content")][..],
            &[Step::Key("n")],
            &[Step::Key("missing")],
            &[Step::Key("content"), Step::Index(1)],
            &[Step::Index(0)],
        ] {
            assert_eq!(string_at(line.as_bytes(), path), None, "{path:?}");
        }
        assert_eq!(
            string_at(br#"{"content":"unterminated"#, &[Step::Key("content")]),
            None
        );
    }

    /// Every tool output a real log's reader notes as one string of the
    /// file, read in pieces as a first turn reads it (and a Claude Code log
    /// on the threads a long one is read on), is that string there.
    #[test]
    fn every_output_noted_in_a_real_log_is_its_string_there() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/real");
        let mut noted = 0;
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
                let t = r.finish(&|| {}).unwrap();
                for m in &t.messages {
                    for (b, c) in m.blocks.iter().zip(&m.cores) {
                        let Some(at) = b.words_at else { continue };
                        let at = at.get() as usize;
                        let end = string_end(text.as_bytes(), at).unwrap();
                        let words: String = serde_json::from_str(&text[at..end]).unwrap();
                        assert_eq!(words, c.text, "{name}: byte {at}");
                        noted += 1;
                    }
                }
            }
        }
        assert!(noted > 50, "{noted} outputs noted");
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
        leaf.prop_recursive(4, 40, 5, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                prop::collection::vec(("[a-c]{1,2}", inner), 0..5)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// Wherever a path of keys and places leads in any object, the walk
        /// finds the string serde_json finds there, and none where it finds
        /// none, whether the line is written compact or spaced out.
        #[test]
        fn the_walk_finds_what_serde_json_reads(
            v in any_json(),
            path in prop::collection::vec(prop_oneof![
                "[a-c]{1,2}".prop_map(|k| (Some(k), 0usize)),
                (0usize..4).prop_map(|i| (None, i)),
            ], 1..4),
            pretty in any::<bool>(),
        ) {
            let v = json!({"a": v});
            let steps: Vec<Step> = std::iter::once(Step::Key("a"))
                .chain(path.iter().map(|(k, i)| match k {
                    Some(k) => Step::Key(k),
                    None => Step::Index(*i),
                }))
                .collect();
            let line = match pretty {
                true => serde_json::to_string_pretty(&v).unwrap(),
                false => serde_json::to_string(&v).unwrap(),
            };
            let found = string_at(line.as_bytes(), &steps).map(|at| decoded(&line, at));
            prop_assert_eq!(found.as_deref(), by_serde(&v, &steps));
        }
    }
}
