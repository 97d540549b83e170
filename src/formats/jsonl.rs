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
