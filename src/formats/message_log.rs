//! Logs of one request message per record: chat and Anthropic messages,
//! as JSONL, one JSON array or a `{"messages": [...]}` document.

use std::sync::mpsc;

use serde_json::Value;

use super::anthropic::ToolNames;
use super::{Appended, BadLines, Format, HostMessage, ReadError, Slot, Transcript, jsonl, span};

/// How one format of such a log reads.
pub(crate) struct MessageLog {
    /// The format it is.
    pub format: Format,
    /// What a line should be, for syntax errors.
    pub expected: &'static str,
    /// The warning for a record that is no message of the format.
    pub skipped: &'static str,
    /// A record as a host message: the record, its line, its index among
    /// the kept records, and the tool names of the calls before it. The
    /// record's words may be moved into the message.
    pub message: fn(&mut Value, usize, usize, &mut ToolNames) -> Option<HostMessage>,
}

impl MessageLog {
    /// The log's messages as records, with the warnings reading them gave.
    pub(crate) fn parse(
        &self,
        name: &str,
        text: &str,
        bad: BadLines,
    ) -> Result<(Vec<jsonl::Record>, Vec<String>), ReadError> {
        let mut warnings = Vec::new();
        let records = jsonl::message_list(name, text, self.expected, bad, &mut warnings)?;
        Ok((records, warnings))
    }

    /// The messages of a JSONL log, each built as soon as its line is
    /// parsed: see [`LineBuilder`].
    pub(crate) fn read_lines(
        &self,
        name: &str,
        text: &str,
        bad: BadLines,
    ) -> Result<Transcript, ReadError> {
        let mut built = LineBuilder::new(self);
        built.read(name, text, 1, bad)?;
        Ok(built.finish())
    }

    fn skipped_warning(&self, name: &str, line: usize) -> String {
        format!("{name}:{line}: {}; skipped", self.skipped)
    }

    /// A transcript of this format.
    fn transcript(
        &self,
        messages: Vec<HostMessage>,
        records: Vec<Value>,
        warnings: Vec<String>,
    ) -> Transcript {
        Transcript {
            format: self.format,
            session_id: None,
            parent_session: None,
            messages,
            warnings,
            records,
            preamble: Vec::new(),
            resume: Default::default(),
            compactions: Vec::new(),
        }
    }

    /// Reads the lines `appended` after a prefix an earlier turn read;
    /// `tools` names the prefix's calls so a result here can say which tool
    /// made it.
    pub(crate) fn read_after(
        &self,
        name: &str,
        appended: Appended,
        bad: BadLines,
        tools: ToolNames,
    ) -> Result<Transcript, ReadError> {
        let Appended {
            text,
            at,
            first_line,
        } = appended;
        let mut warnings = Vec::new();
        let read = jsonl::records_at(
            name,
            (text, at),
            first_line,
            self.expected,
            bad,
            &mut |_, w| warnings.push(w),
            |v, l| span::output_spans(v, l, None),
        )?;
        let mut records = Vec::with_capacity(read.len());
        let mut spans = Vec::with_capacity(read.len());
        for (r, line_at, s) in read {
            spans.push((r.line, line_at, s));
            records.push(r);
        }
        let mut t = self.messages_of(name, records, tools, (warnings, true));
        // A record makes one message or none, in order: its line names it.
        let mut messages = t.messages.iter_mut().peekable();
        for (line, line_at, spans) in spans {
            if let Some(m) = messages.next_if(|m| m.line == line) {
                span::note_spans(m, &spans, line_at);
            }
        }
        Ok(t)
    }

    /// The transcript of a log's records; `tools` names the calls of what
    /// came before them. Without `keep_records` each record is let go once
    /// its message is built (see [`super::read_owned`]).
    pub(crate) fn messages_of(
        &self,
        name: &str,
        records: Vec<jsonl::Record>,
        mut tools: ToolNames,
        (mut warnings, keep_records): (Vec<String>, bool),
    ) -> Transcript {
        let mut messages = Vec::new();
        let mut originals = Vec::new();
        for mut r in records {
            // A record kept as read gives its message a copy.
            let mut copy;
            let value = match keep_records {
                true => {
                    copy = r.value.clone();
                    &mut copy
                }
                false => &mut r.value,
            };
            match (self.message)(value, r.line, messages.len(), &mut tools) {
                Some(m) => {
                    messages.push(m);
                    if keep_records {
                        originals.push(r.value);
                    }
                }
                None => warnings.push(self.skipped_warning(name, r.line)),
            }
        }
        self.transcript(messages, originals, warnings)
    }
}

/// A JSONL log's messages, each built as soon as its line is parsed and
/// the line's JSON let go: the JSON of all the lines, which takes more
/// memory than the text it was parsed from, is never held at once. The log
/// may come in pieces, each ending where a line does. It reads as
/// [`MessageLog::parse`] and [`MessageLog::messages_of`] do without the
/// records, warnings in the same order: bad lines first, then skipped
/// records.
pub(crate) struct LineBuilder<'a> {
    log: &'a MessageLog,
    messages: Vec<HostMessage>,
    /// Messages built and handed over already (see
    /// [`LineBuilder::build_piece`]): the index of the next goes on from
    /// them.
    handed_over: usize,
    tools: ToolNames<'static>,
    warnings: Vec<String>,
    skipped: Vec<String>,
}

impl<'a> LineBuilder<'a> {
    pub(crate) fn new(log: &'a MessageLog) -> LineBuilder<'a> {
        LineBuilder {
            log,
            messages: Vec::new(),
            handed_over: 0,
            tools: ToolNames::default(),
            warnings: Vec::new(),
            skipped: Vec::new(),
        }
    }

    /// Builds the messages of `text`, which starts on line `first_line`.
    pub(crate) fn read(
        &mut self,
        name: &str,
        text: &str,
        first_line: usize,
        bad: BadLines,
    ) -> Result<(), ReadError> {
        // Bad lines warn here; what is skipped warns after them (`finish`).
        let mut bad_lines = Vec::new();
        let expected = self.log.expected;
        let read = jsonl::lines_from(
            name,
            text,
            first_line,
            expected,
            bad,
            &mut |_, w| bad_lines.push(w),
            |line, text| {
                self.add(name, line, serde_json::from_str(text)?);
                Ok(())
            },
        );
        self.warnings.append(&mut bad_lines);
        read.map(drop)
    }

    /// Builds the messages of a piece [`parse_piece`] parsed, and hands
    /// them over with the piece's warnings; the records' indexes go on
    /// from the pieces before.
    fn build_piece(&mut self, name: &str, (values, bad_lines): ParsedPiece) -> BuiltPiece {
        for (jsonl::Record { line, value }, line_at, spans) in values {
            if let Some(m) = self.add(name, line, value) {
                span::note_spans(m, &spans, line_at);
            }
        }
        self.handed_over += self.messages.len();
        BuiltPiece {
            messages: std::mem::take(&mut self.messages),
            warnings: bad_lines,
            skipped: std::mem::take(&mut self.skipped),
        }
    }

    /// Builds the message of the record on `line`, or warns it was skipped.
    fn add(&mut self, name: &str, line: usize, mut value: Value) -> Option<&mut HostMessage> {
        let record = self.handed_over + self.messages.len();
        match (self.log.message)(&mut value, line, record, &mut self.tools) {
            Some(m) => {
                self.messages.push(m);
                self.messages.last_mut()
            }
            None => {
                self.skipped.push(self.log.skipped_warning(name, line));
                None
            }
        }
    }

    /// The transcript of every piece read.
    pub(crate) fn finish(mut self) -> Transcript {
        self.warnings.append(&mut self.skipped);
        self.log
            .transcript(self.messages, Vec::new(), self.warnings)
    }
}

/// A piece's lines as JSON, each with where the line starts in the
/// transcript and where its tool outputs' strings lie in it
/// ([`span::output_spans`]), and the warnings for the bad lines skipped.
type ParsedPiece = (Vec<(jsonl::Record, u64, Vec<(Slot, usize)>)>, Vec<String>);

/// The lines of `text`, which starts on line `first_line` and at `at` in
/// the transcript, parsed as [`LineBuilder::read`] parses them.
fn parse_piece(
    name: &str,
    text: (&str, u64),
    first_line: usize,
    expected: &str,
    bad: BadLines,
) -> Result<ParsedPiece, ReadError> {
    let mut bad_lines = Vec::new();
    let mut warn = |_, w| bad_lines.push(w);
    let values = jsonl::records_at(name, text, first_line, expected, bad, &mut warn, |v, l| {
        span::output_spans(v, l, None)
    })?;
    Ok((values, bad_lines))
}

/// A chat or Anthropic log read in pieces, each piece parsed and its
/// messages built on a thread of its own while the reading thread reads
/// the next: the reading thread, which also checks, digests and sets aside
/// what it reads, had been the one a first turn waited for when it built
/// the messages too. The lines are built in order on that one thread, as
/// a call's tool name must be known to the results after it. One built
/// piece waits at most.
pub(crate) struct PipedBuilder {
    /// What the pieces taken so far gave: their messages and warnings.
    gathered: LineBuilder<'static>,
    to_build: Option<mpsc::SyncSender<(String, usize, u64)>>,
    built: mpsc::Receiver<Result<BuiltPiece, ReadError>>,
    /// Pieces handed to the builder and not taken back yet.
    waiting: usize,
}

/// The messages of a piece, with the warnings for its bad lines and for
/// the records it skipped.
struct BuiltPiece {
    messages: Vec<HostMessage>,
    warnings: Vec<String>,
    skipped: Vec<String>,
}

impl PipedBuilder {
    pub(crate) fn new(log: &'static MessageLog, name: &str, bad: BadLines) -> PipedBuilder {
        let (to_build, pieces) = mpsc::sync_channel::<(String, usize, u64)>(1);
        let (done, built) = mpsc::sync_channel(1);
        let at = name.to_string();
        // Detached: it ends when the pieces stop coming, and a reader
        // dropped on an error lets it go.
        std::thread::spawn(move || {
            let mut builder = LineBuilder::new(log);
            for (piece, first_line, piece_at) in pieces {
                let parsed = parse_piece(&at, (&piece, piece_at), first_line, log.expected, bad);
                drop(piece);
                let built = parsed.map(|parsed| builder.build_piece(&at, parsed));
                let stop = built.is_err();
                if done.send(built).is_err() || stop {
                    break;
                }
            }
        });
        PipedBuilder {
            gathered: LineBuilder::new(log),
            to_build: Some(to_build),
            built,
            waiting: 0,
        }
    }

    /// Hands `piece` (starting on line `first_line`, at `at` in the
    /// transcript) to the builder, and takes the pieces before it as they
    /// come built.
    pub(crate) fn read(
        &mut self,
        piece: String,
        (first_line, at): (usize, u64),
    ) -> Result<(), ReadError> {
        match &self.to_build {
            Some(to) if to.send((piece, first_line, at)).is_ok() => self.waiting += 1,
            // The builder stopped at a bad line: the pieces it built before,
            // then why.
            _ => {
                self.to_build = None;
                while self.waiting > 0 {
                    self.take_next()?;
                }
            }
        }
        while self.waiting > 1 {
            self.take_next()?;
        }
        Ok(())
    }

    fn take_next(&mut self) -> Result<(), ReadError> {
        let Ok(built) = self.built.recv() else {
            panic!("the builder of a log's pieces ended without saying why");
        };
        self.waiting -= 1;
        let mut built = built?;
        let gathered = &mut self.gathered;
        gathered.messages.append(&mut built.messages);
        gathered.warnings.append(&mut built.warnings);
        gathered.skipped.append(&mut built.skipped);
        Ok(())
    }

    /// The messages built so far.
    pub(crate) fn built_messages(&mut self) -> &mut [HostMessage] {
        &mut self.gathered.messages
    }

    /// The transcript of every piece read, once the last is built.
    pub(crate) fn finish(mut self) -> Result<Transcript, ReadError> {
        self.to_build = None;
        while self.waiting > 0 {
            self.take_next()?;
        }
        Ok(self.gathered.finish())
    }
}
