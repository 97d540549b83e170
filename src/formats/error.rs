//! Read errors that point at the line, the column, and what was expected.

use miette::{Diagnostic, NamedSource, SourceSpan};
use thiserror::Error;

/// Why a transcript could not be read.
#[derive(Debug, Error, Diagnostic)]
pub enum ReadError {
    /// A line (or the whole document) is not valid JSON.
    #[error("{name}:{line}:{column}: {what}")]
    #[diagnostic(code(noa::bad_json), help("{expected}"))]
    Syntax {
        /// File name as given.
        name: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What serde found.
        what: String,
        /// What a line of this format should be.
        expected: String,
        /// The offending line, for display.
        #[source_code]
        src: NamedSource<String>,
        /// Where in that line.
        #[label("here")]
        at: SourceSpan,
    },
    /// Nothing tells which format the file is in.
    #[error("{name}: cannot tell the transcript format ({why})")]
    #[diagnostic(
        code(noa::unknown_format),
        help("tried chat, anthropic, claude-code and codex; name one with --format")
    )]
    UnknownFormat {
        /// File name as given.
        name: String,
        /// What was seen.
        why: String,
    },
    /// The document parsed but is not shaped like the format.
    #[error("{name}: {why}")]
    #[diagnostic(code(noa::bad_shape))]
    Shape {
        /// File name as given.
        name: String,
        /// What is wrong.
        why: String,
    },
}

impl ReadError {
    /// A syntax error at `line` (1-based) of the file, whose text is `line_text`.
    pub(crate) fn syntax(
        name: &str,
        line: usize,
        line_text: &str,
        err: &serde_json::Error,
        expected: &str,
        last_line_unterminated: bool,
    ) -> ReadError {
        let column = err.column().max(1);
        let (shown, offset) = snippet(line_text, column);
        let what = if last_line_unterminated && err.is_eof() {
            format!("the last line is incomplete (no newline, JSON cut short: {err}); the log may still be being written")
        } else {
            format!("invalid JSON: {err}")
        };
        ReadError::Syntax {
            name: name.to_string(),
            line,
            column,
            what,
            expected: expected.to_string(),
            src: NamedSource::new(format!("{name}:{line}"), shown.clone()),
            at: SourceSpan::from((offset, 0)),
        }
    }
}

/// Up to ~120 characters of the line around the column, and the column's
/// offset in it, so a 30 KB line does not flood the terminal.
fn snippet(line: &str, column: usize) -> (String, usize) {
    const RADIUS: usize = 60;
    let byte = column.saturating_sub(1).min(line.len());
    let mut start = byte.saturating_sub(RADIUS);
    while !line.is_char_boundary(start) {
        start -= 1;
    }
    let mut end = (byte + RADIUS).min(line.len());
    while !line.is_char_boundary(end) {
        end += 1;
    }
    (line[start..end].to_string(), byte - start)
}
