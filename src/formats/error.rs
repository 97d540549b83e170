//! Read errors that point at the line, the column, and what was expected.

use miette::{Diagnostic, MietteError, MietteSpanContents, SourceCode, SourceSpan, SpanContents};
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
        src: LineSource,
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
    /// Bytes that are not UTF-8 text.
    #[error("{name}:{line}:{column}: not valid UTF-8")]
    #[diagnostic(
        code(noa::bad_encoding),
        help(
            "a transcript is UTF-8 text, one JSON record a line; --skip-bad-lines replaces the bad bytes and reads on"
        )
    )]
    Encoding {
        /// File name as given.
        name: String,
        /// 1-based line of the first bad byte.
        line: usize,
        /// 1-based byte column of it.
        column: usize,
    },
    /// A long log read twice (see [`super::PieceReader::read_again`])
    /// changed between the two reads.
    #[error("{name}: changed while it was read")]
    #[diagnostic(
        code(noa::changed_while_read),
        help("something rewrote the transcript meanwhile; run the command again")
    )]
    Changed {
        /// File name as given.
        name: String,
    },
    /// What was named is not a transcript file: missing, a directory, not
    /// readable, or binary.
    #[error("{name}: {why}")]
    #[diagnostic(code(noa::not_a_transcript), help("{help}"))]
    NotATranscript {
        /// File name as given.
        name: String,
        /// What it is instead.
        why: String,
        /// What to do.
        help: String,
    },
}

impl ReadError {
    /// The file, line and column the error points at, where it has them.
    pub fn location(&self) -> (&str, Option<usize>, Option<usize>) {
        match self {
            ReadError::Syntax {
                name, line, column, ..
            }
            | ReadError::Encoding { name, line, column } => (name, Some(*line), Some(*column)),
            ReadError::UnknownFormat { name, .. }
            | ReadError::Shape { name, .. }
            | ReadError::NotATranscript { name, .. }
            | ReadError::Changed { name } => (name, None, None),
        }
    }

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
        let (shown, start, offset) = snippet(line_text, column);
        // serde's own "at line 1 column N" counts within the line; the real
        // position is in the header.
        let full = err.to_string();
        let reason = full
            .rfind(" at line ")
            .map_or(full.as_str(), |i| &full[..i]);
        let what = if last_line_unterminated && err.is_eof() {
            format!(
                "the last line is incomplete (no newline, JSON cut short: {reason}); the log may still be being written"
            )
        } else {
            format!("invalid JSON: {reason}")
        };
        ReadError::Syntax {
            name: name.to_string(),
            line,
            column,
            what,
            expected: expected.to_string(),
            src: LineSource {
                name: name.to_string(),
                text: shown,
                line,
                column: start,
            },
            at: SourceSpan::from((offset, 0)),
        }
    }
}

/// One line of a file (or a window of it), shown at its real line and column.
#[derive(Debug)]
pub struct LineSource {
    name: String,
    text: String,
    line: usize,
    column: usize,
}

impl SourceCode for LineSource {
    fn read_span<'a>(
        &'a self,
        _span: &SourceSpan,
        _before: usize,
        _after: usize,
    ) -> Result<Box<dyn SpanContents<'a> + 'a>, MietteError> {
        Ok(Box::new(MietteSpanContents::new_named(
            self.name.clone(),
            self.text.as_bytes(),
            (0, self.text.len()).into(),
            self.line - 1,
            self.column,
            1,
        )))
    }
}

/// Up to ~120 characters of the line around the column, where that window
/// starts in the line, and the column's offset in it, so a 30 KB line does
/// not flood the terminal.
fn snippet(line: &str, column: usize) -> (String, usize, usize) {
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
    (line[start..end].to_string(), start, byte - start)
}
