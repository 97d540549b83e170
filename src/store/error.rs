//! What the store can fail with, and which sort of failure each is.

use std::io;
use std::path::{Path, PathBuf};

use miette::Diagnostic;
use thiserror::Error;

use crate::formats::ReadError;

/// Why the store could not do what was asked.
#[derive(Debug, Error, Diagnostic)]
pub enum StoreError {
    /// state.json is not valid JSON or not a state.
    #[error("{path}: state file is corrupt at line {line}, column {column}: {what}")]
    #[diagnostic(
        code(noa::corrupt_state),
        help(
            "noa left the file as it is. Move it aside and run `noa rebuild TRANSCRIPT` to recover the state from the transcript"
        )
    )]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What serde found.
        what: String,
    },
    /// refs.log does not hold the refs state.json stands on.
    #[error("{path}: the ref log is {what}")]
    #[diagnostic(
        code(noa::corrupt_refs),
        help(
            "noa left the files as they are. Move state.json and refs.log aside and run `noa rebuild TRANSCRIPT` to recover the state from the transcript"
        )
    )]
    RefsLog {
        /// The log.
        path: PathBuf,
        /// What is wrong with it.
        what: String,
    },
    /// blocks.jsonl does not hold the blocks state.json stands on.
    #[error("{path}: the blocks log is {what}")]
    #[diagnostic(
        code(noa::corrupt_blocks),
        help(
            "noa left the files as they are. Move state.json aside and run `noa rebuild TRANSCRIPT` to recover the state from the transcript"
        )
    )]
    Blocks {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        what: String,
    },
    /// A log of token figures or truncations does not hold what state.json
    /// stands on.
    #[error("{path}: the log is {what}")]
    #[diagnostic(
        code(noa::corrupt_log),
        help(
            "noa left the files as they are. Move state.json aside and run `noa rebuild TRANSCRIPT` to recover the state from the transcript"
        )
    )]
    Log {
        /// The log.
        path: PathBuf,
        /// What is wrong with it.
        what: String,
    },
    /// state.json was written by a newer noa.
    #[error("{path}: state file version {found}, this noa reads version {supported}")]
    #[diagnostic(
        code(noa::state_version),
        help("use the noa that wrote it, or move it aside and run `noa rebuild TRANSCRIPT`")
    )]
    Version {
        /// The file.
        path: PathBuf,
        /// Version in the file.
        found: u64,
        /// Version this build reads.
        supported: u32,
    },
    /// Another process holds the session.
    #[error("{path}: another noa process is working on this session")]
    #[diagnostic(
        code(noa::locked),
        help("wait for it to finish; the lock is released when that process exits")
    )]
    Locked {
        /// The lock file.
        path: PathBuf,
    },
    /// A symbolic link where noa would write, inside the session directory.
    #[error(
        "{path} is a symbolic link inside the state directory; noa opens no file through a link"
    )]
    #[diagnostic(
        code(noa::link_in_state_dir),
        help("remove the link, or point --state-dir at a directory of noa's own")
    )]
    Link {
        /// The link.
        path: PathBuf,
    },
    /// A file name that would leave the session directory.
    #[error("{path}: not a path inside the session directory")]
    #[diagnostic(code(noa::bad_state_path))]
    Outside {
        /// The path asked for.
        path: PathBuf,
    },
    /// Reading or writing failed.
    #[error("{path}: {error}")]
    #[diagnostic(code(noa::io))]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause, said in the message (not a source, which would say
        /// it a second time).
        error: io::Error,
    },
    /// The transcript is not one noa can read.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Transcript(#[from] ReadError),
    /// The transcript's file, or stdin, could not be read.
    #[error("{path}: {error}")]
    #[diagnostic(code(noa::io))]
    TranscriptIo {
        /// The file (`<stdin>` for stdin).
        path: PathBuf,
        /// The cause, said in the message.
        error: io::Error,
    },
    /// None of the transcript's records is a message of the format it was
    /// read as: most likely a transcript read as the wrong format.
    #[error(
        "{name}: none of its records is a {format} message ({warnings} warning(s) as it was read); {}",
        if *format_named {
            "leave --format out to detect its format, or name the one it is in"
        } else {
            "if it is in another format, name that with --format"
        }
    )]
    #[diagnostic(code(noa::usage))]
    NoMessages {
        /// The transcript's name.
        name: String,
        /// The format it was read as.
        format: &'static str,
        /// How many warnings reading it gave.
        warnings: usize,
        /// Whether the format was named rather than detected.
        format_named: bool,
    },
    /// A leaf was named for a transcript that holds one conversation.
    #[error(
        "{name}: --leaf names the last record of a Claude Code conversation; a {format} transcript holds one conversation, read whole"
    )]
    #[diagnostic(code(noa::usage))]
    LeafNotClaudeCode {
        /// The transcript's name.
        name: String,
        /// The format it was read as.
        format: &'static str,
    },
    /// Neither the options nor the transcript name the session.
    #[error("{name}: cannot derive a session id; pass --session")]
    #[diagnostic(code(noa::usage))]
    NoSessionId {
        /// The transcript's name.
        name: String,
    },
    /// A session id that is not a plain directory name.
    #[error("{id:?} cannot be a session id: it must be a plain directory name")]
    #[diagnostic(code(noa::usage))]
    BadSessionId {
        /// The id.
        id: String,
    },
    /// The state names none of the transcript's messages and another
    /// session: it belongs to another log, and using it would hand out
    /// wrong refs.
    #[error(
        "{path}: this state belongs to a different transcript: none of its {refs} refs name a message of this one. Pass the right --session, or run `noa rebuild` for this transcript into its own state dir"
    )]
    #[diagnostic(code(noa::usage))]
    OtherTranscript {
        /// The state file.
        path: PathBuf,
        /// How many refs it holds.
        refs: usize,
    },
}

/// What sort of failure a [`StoreError`] is, for a caller that must answer
/// each sort differently (the command line's exit code).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The session's files are not what noa writes (damaged, from a newer
    /// noa, a link, a path outside), or the transcript is not one it can
    /// read or does not fit the options: the user must act on them.
    BadInput,
    /// Reading or writing failed, or another process holds the session:
    /// the files may be sound.
    Failure,
}

impl StoreError {
    /// The sort of failure this is. The match names every variant, with no
    /// catch-all, so a new one cannot fall into a sort by default.
    pub fn kind(&self) -> ErrorKind {
        match self {
            StoreError::Corrupt { .. }
            | StoreError::RefsLog { .. }
            | StoreError::Blocks { .. }
            | StoreError::Log { .. }
            | StoreError::Version { .. }
            | StoreError::Link { .. }
            | StoreError::Outside { .. }
            | StoreError::Transcript(_)
            | StoreError::NoMessages { .. }
            | StoreError::LeafNotClaudeCode { .. }
            | StoreError::NoSessionId { .. }
            | StoreError::BadSessionId { .. }
            | StoreError::OtherTranscript { .. } => ErrorKind::BadInput,
            StoreError::Locked { .. } | StoreError::Io { .. } | StoreError::TranscriptIo { .. } => {
                ErrorKind::Failure
            }
        }
    }

    /// A failure to read or write `path`; a link refused where a file was
    /// opened is said as such.
    pub(crate) fn io(path: &Path, source: io::Error) -> StoreError {
        if super::files::is_link(&source) {
            return StoreError::Link {
                path: path.to_path_buf(),
            };
        }
        StoreError::Io {
            path: path.to_path_buf(),
            error: source,
        }
    }
}
