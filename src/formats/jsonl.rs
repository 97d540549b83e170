//! Line-by-line JSON reading with exact positions for errors.

use serde_json::Value;

use super::{BadLines, ReadError};

/// The lines of a log, as [`str::lines`] gives them (a `\r` before a
/// newline dropped, no empty line after the last newline), each newline
/// found with memchr's SIMD search: a transcript's lines run to kilobytes,
/// and on the short lines of noa's own logs it costs no more than a byte
/// loop.
pub fn lines(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let line = match memchr::memchr(b'\n', rest.as_bytes()) {
            Some(at) => {
                let line = &rest[..at];
                rest = &rest[at + 1..];
                line.strip_suffix('\r').unwrap_or(line)
            }
            None => std::mem::take(&mut rest),
        };
        Some(line)
    })
}

/// How many lines end in `text`, counted at memory speed.
pub fn newlines(text: impl AsRef<[u8]>) -> usize {
    memchr::memchr_iter(b'\n', text.as_ref()).count()
}

/// Makes the bytes real hosts write readable as JSON, in place and without
/// moving a byte, so every place in the text stays its place in the file:
/// a leading byte-order mark becomes three spaces, and an escaped UTF-16
/// surrogate with no partner (`\ud800` alone: JavaScript's `JSON.stringify`
/// writes one for an emoji cut in half, and serde_json refuses it) becomes
/// `\ufffd`, the replacement character. Returns the 1-based lines where a
/// surrogate was replaced.
pub fn repair(text: &mut String) -> Vec<usize> {
    if text.starts_with('\u{FEFF}') {
        text.replace_range(..'\u{FEFF}'.len_utf8(), "   ");
    }
    let lone = lone_surrogates(text.as_bytes());
    let mut lines = Vec::new();
    let (mut counted, mut line) = (0, 1);
    for at in lone {
        text.replace_range(at..at + 6, "\\ufffd");
        line += newlines(&text.as_bytes()[counted..at]);
        counted = at;
        if lines.last() != Some(&line) {
            lines.push(line);
        }
    }
    lines
}

/// Where each `\uXXXX` escape of a surrogate with no partner starts.
fn lone_surrogates(bytes: &[u8]) -> Vec<usize> {
    let hex = |at: usize| -> Option<u16> {
        let digits = bytes.get(at..at + 4)?;
        u16::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()
    };
    // The code unit of an escape at `at` (a backslash that is not itself
    // escaped, then `u` and four hex digits).
    let unit = |at: usize| -> Option<u16> {
        if bytes.get(at + 1) != Some(&b'u') {
            return None;
        }
        let backslashes = bytes[..=at]
            .iter()
            .rev()
            .take_while(|&&b| b == b'\\')
            .count();
        (backslashes % 2 == 1).then(|| hex(at + 2)).flatten()
    };
    let is_high = |u: u16| (0xD800..0xDC00).contains(&u);
    let is_low = |u: u16| (0xDC00..0xE000).contains(&u);
    let mut lone = Vec::new();
    let mut from = 0;
    while let Some(found) = memchr::memmem::find(&bytes[from..], b"\\u") {
        let at = from + found;
        from = at + 2;
        let Some(u) = unit(at) else { continue };
        if is_high(u) && unit(at + 6).is_some_and(is_low) {
            from = at + 12;
        } else if is_high(u) || is_low(u) {
            lone.push(at);
            from = at + 6;
        }
    }
    lone
}

/// Where a text looked at for an unfinished last line starts (see
/// [`hold_back_unfinished`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextFrom {
    /// At the log's first byte: its first line tells a JSONL log from a
    /// JSON document spread over lines, whose last line (a lone `]`, say)
    /// is not JSON on its own.
    LogStart,
    /// Further on in a log already known to be one record a line: the
    /// lines appended after a prefix, or a later piece of a log read in
    /// pieces.
    MidLog,
}

/// Cuts off a log's last line when its host is still writing it: no
/// newline ends it and it is not JSON yet. A host appends while noa
/// reads, so such a line is not a bad one: the read leaves it for the next
/// turn, which finds it finished. `bytes` start on line `first_line` of
/// the file named `name`; the warning saying what was left is returned.
/// A last line that parses stays, newline or not, and a bad line anywhere
/// else is the readers' to report.
pub fn hold_back_unfinished(
    name: &str,
    bytes: &mut Vec<u8>,
    from: TextFrom,
    first_line: usize,
) -> Option<String> {
    let at = unfinished_at(bytes, from)?;
    let line = first_line + newlines(&bytes[..at]);
    bytes.truncate(at);
    Some(format!(
        "{name}:{line}: the last line is unfinished (no newline, not JSON yet): \
         left for the next read, as the host may still be writing it"
    ))
}

/// Where the unfinished last line of `bytes` starts (see
/// [`hold_back_unfinished`]).
fn unfinished_at(bytes: &[u8], from: TextFrom) -> Option<usize> {
    if bytes.last().is_none_or(|&b| b == b'\n') {
        return None;
    }
    let at = memchr::memrchr(b'\n', bytes).map_or(0, |i| i + 1);
    let last = &bytes[at..];
    if last.trim_ascii().is_empty() || parses(last) {
        return None;
    }
    if from == TextFrom::LogStart && at > 0 {
        let first = &bytes[..memchr::memchr(b'\n', bytes).unwrap_or(at)];
        let first = first.strip_prefix("\u{FEFF}".as_bytes()).unwrap_or(first);
        // A document opens with `[`, or with an object not closed on its
        // first line; a JSONL record is whole on its own line.
        let document = first.trim_ascii_start().starts_with(b"[")
            || serde_json::from_slice::<serde::de::IgnoredAny>(first).is_err_and(|e| e.is_eof());
        if document {
            return None;
        }
    }
    Some(at)
}

/// Whether `line` is JSON as the readers take it: UTF-8, its lone
/// surrogate escapes repaired.
fn parses(line: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(line) else {
        return false;
    };
    let mut text = text.to_string();
    repair(&mut text);
    serde_json::from_str::<serde::de::IgnoredAny>(&text).is_ok()
}

/// One parsed line.
pub(crate) struct Record {
    /// 1-based line number.
    pub line: usize,
    /// The parsed value.
    pub value: Value,
}

/// Parses every non-blank line as JSON. A bad line stops the read with its
/// position, or with [`BadLines::Skip`] becomes a warning.
pub(crate) fn records(
    name: &str,
    text: &str,
    expected: &str,
    bad: BadLines,
    warnings: &mut Vec<String>,
) -> Result<Vec<Record>, ReadError> {
    records_from(name, text, 1, expected, bad, &mut |_, w| warnings.push(w))
}

/// [`records`] of a text that starts on line `first_line` of the file (the
/// lines appended after a prefix read on an earlier turn), each warning
/// handed to `warn` with its line.
pub(crate) fn records_from(
    name: &str,
    text: &str,
    first_line: usize,
    expected: &str,
    bad: BadLines,
    warn: &mut dyn FnMut(usize, String),
) -> Result<Vec<Record>, ReadError> {
    lines_from(name, text, first_line, expected, bad, warn, |line, text| {
        serde_json::from_str(text).map(|value| Record { line, value })
    })
}

/// [`records_from`] of a text that starts at `at` in the transcript: each
/// record with where its line starts there, and what `note` finds in the
/// line beside its JSON (where its tool outputs' strings lie, say).
pub(crate) fn records_at<T>(
    name: &str,
    (text, at): (&str, u64),
    first_line: usize,
    expected: &str,
    bad: BadLines,
    warn: &mut dyn FnMut(usize, String),
    mut note: impl FnMut(&Value, &str) -> T,
) -> Result<Vec<(Record, u64, T)>, ReadError> {
    lines_from(name, text, first_line, expected, bad, warn, |line, l| {
        let value: Value = serde_json::from_str(l)?;
        let noted = note(&value, l);
        Ok((
            Record { line, value },
            at + offset_in(text, l) as u64,
            noted,
        ))
    })
}

/// Where `part`, a slice of `text`, starts in it.
pub(crate) fn offset_in(text: &str, part: &str) -> usize {
    part.as_ptr() as usize - text.as_ptr() as usize
}

/// Every non-blank line of `text` (which starts on line `first_line`)
/// read by `parse`, given the line's number and text. A line `parse`
/// rejects stops the read with its position, or with [`BadLines::Skip`]
/// becomes a warning handed to `warn`.
pub(crate) fn lines_from<'t, T>(
    name: &str,
    text: &'t str,
    first_line: usize,
    expected: &str,
    bad: BadLines,
    warn: &mut dyn FnMut(usize, String),
    mut parse: impl FnMut(usize, &'t str) -> serde_json::Result<T>,
) -> Result<Vec<T>, ReadError> {
    let mut out = Vec::new();
    let unterminated_last = !text.is_empty() && !text.ends_with('\n');
    for (i, line) in lines(text).enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match parse(first_line + i, line) {
            Ok(value) => out.push(value),
            Err(err) => {
                // Only the last line can end where the text does.
                let end = offset_in(text, line) + line.len();
                let is_last = unterminated_last && end == text.len();
                let e = ReadError::syntax(name, first_line + i, line, &err, expected, is_last);
                match bad {
                    BadLines::Fail => return Err(e),
                    BadLines::Skip => warn(first_line + i, format!("skipped bad line: {e}")),
                }
            }
        }
    }
    Ok(out)
}

/// Whether a message list is one JSON document (an array, or an object with
/// a `messages` array) rather than JSONL: a document cannot be read on from
/// where an earlier read stopped.
pub(crate) fn is_document(text: &str) -> bool {
    let trimmed = text.trim_start();
    trimmed.starts_with('[')
        || (trimmed.starts_with('{')
            && serde_json::from_str::<Value>(text).is_ok_and(|doc| {
                doc.get("messages").is_some_and(Value::is_array) && doc.get("role").is_none()
            }))
}

/// Reads a message list that may be JSONL (one message a line), a single JSON
/// array, or an object with a `messages` array (a request body or a saved
/// conversation). Returns the messages with the line each starts on.
pub(crate) fn message_list(
    name: &str,
    text: &str,
    expected: &str,
    bad: BadLines,
    warnings: &mut Vec<String>,
) -> Result<Vec<Record>, ReadError> {
    let trimmed = text.trim_start();
    if trimmed.starts_with('[') {
        let doc: Value =
            serde_json::from_str(text).map_err(|e| document_error(name, text, &e, expected))?;
        return Ok(spread(doc, 1));
    }
    if trimmed.starts_with('{')
        && let Ok(doc @ Value::Object(_)) = serde_json::from_str::<Value>(text)
        && doc.get("messages").is_some_and(Value::is_array)
        && doc.get("role").is_none()
    {
        return Ok(spread(doc["messages"].clone(), 1));
    }
    records(name, text, expected, bad, warnings)
}

fn spread(doc: Value, line: usize) -> Vec<Record> {
    match doc {
        Value::Array(items) => items
            .into_iter()
            .map(|value| Record { line, value })
            .collect(),
        other => vec![Record { line, value: other }],
    }
}

/// A syntax error in a whole-document read, placed at its line and column.
fn document_error(name: &str, text: &str, err: &serde_json::Error, expected: &str) -> ReadError {
    let line_no = err.line().max(1);
    let line = text.lines().nth(line_no - 1).unwrap_or("");
    ReadError::syntax(
        name,
        line_no,
        line,
        err,
        expected,
        !text.ends_with('\n') && err.is_eof(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_byte_order_mark_and_lone_surrogates_are_repaired_in_place() {
        let cases = [
            ("\u{FEFF}{\"a\":1}\n", "   {\"a\":1}\n", vec![]),
            (
                r#"{"a":"bad \ud800 x"}"#,
                r#"{"a":"bad \ufffd x"}"#,
                vec![1],
            ),
            // A pair stays; an escaped backslash before `u` is no escape.
            (
                r#"{"a":"\ud83d\ude00 \\ud800"}"#,
                r#"{"a":"\ud83d\ude00 \\ud800"}"#,
                vec![],
            ),
            (
                "{}\n{\"a\":\"\\uDE00 \\\\\\udbff\\u0041\"}\n{\"b\":\"\\ud800\"}",
                "{}\n{\"a\":\"\\ufffd \\\\\\ufffd\\u0041\"}\n{\"b\":\"\\ufffd\"}",
                vec![2, 3],
            ),
            // A high one at the very end, and a cut-off escape.
            (r#"{"a":"\udbff"#, r#"{"a":"\ufffd"#, vec![1]),
            (r#"{"a":"\ud8"#, r#"{"a":"\ud8"#, vec![]),
        ];
        for (input, want, lines) in cases {
            let mut text = input.to_string();
            assert_eq!(repair(&mut text), lines, "{input}");
            assert_eq!(text, want);
            assert_eq!(text.len(), input.len());
        }
        let mut text = r#"{"a":"x \ud800 \udc00 y \ud83d\ude00"}"#.to_string();
        repair(&mut text);
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["a"], "x \u{FFFD} \u{FFFD} y \u{1F600}");
    }

    #[test]
    fn only_an_unfinished_last_line_is_held_back() {
        let held = |text: &str, from| {
            let mut bytes = text.as_bytes().to_vec();
            let warning = hold_back_unfinished("t", &mut bytes, from, 1);
            (String::from_utf8(bytes).unwrap(), warning.is_some())
        };
        let log = TextFrom::LogStart;
        // Cut mid-record, mid-number and mid-escape: held back.
        for cut in [r#"{"a":"half"#, r#"{"a":1."#, r#"{"a":"\u00"#] {
            let text = format!("{{\"a\":1}}\n{cut}");
            assert_eq!(held(&text, log), ("{\"a\":1}\n".to_string(), true), "{cut}");
        }
        assert_eq!(held(r#"{"a":"#, log), (String::new(), true));
        assert_eq!(held(r#"{"a":"#, TextFrom::MidLog), (String::new(), true));
        // Whole lines, a whole last line without its newline, blank space
        // after the last newline, a lone surrogate the readers repair, and
        // a document spread over lines all stay as they are.
        for text in [
            "{\"a\":1}\n",
            "{\"a\":1}\n{\"b\":2}",
            "{\"a\":1}\n  ",
            "{\"a\":1}\n{\"b\":\"\\ud800\"}",
            "[\n{\"a\":1}\n]",
            "{\"messages\": [\n{\"a\":1}\n]}",
            "\u{FEFF}{\"messages\": [\n{\"a\":1}\n]}",
            "",
        ] {
            assert_eq!(held(text, log), (text.to_string(), false), "{text:?}");
        }
        // The warning names the line held back.
        let mut bytes = b"{}\n{}\n{".to_vec();
        let warning = hold_back_unfinished("t", &mut bytes, TextFrom::MidLog, 10).unwrap();
        assert!(
            warning.starts_with("t:12: the last line is unfinished"),
            "{warning}"
        );
    }

    #[test]
    fn lines_split_as_str_lines_does() {
        let long = format!("{}\r\n{}", "x".repeat(5_000), "y".repeat(70));
        for text in [
            "",
            "\n",
            "a",
            "a\n",
            "a\nb",
            "a\r\nb\r\n",
            "a\r",
            "\n\nb\n",
            &long,
        ] {
            let ours: Vec<&str> = lines(text).collect();
            assert_eq!(ours, text.lines().collect::<Vec<_>>(), "{text:?}");
        }
    }
}
