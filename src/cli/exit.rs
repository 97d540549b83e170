//! Exit codes, decided in one place.

use std::process::ExitCode;

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Done.
    Success = 0,
    /// The model's Compress call was rejected (the panel is still printed).
    Rejected = 1,
    /// Bad input or usage; nothing was written.
    BadInput = 2,
    /// I/O or internal failure; nothing was half-written.
    Failure = 3,
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> ExitCode {
        ExitCode::from(e as u8)
    }
}
