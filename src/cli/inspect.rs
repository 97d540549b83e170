//! `noa inspect`: what a session's state holds, for a person or a script.

use super::args::{Global, InspectArgs};
use super::{CliError, Exit};

/// Runs `noa inspect`.
pub fn run(_global: &Global, _args: &InspectArgs) -> Result<Exit, CliError> {
    Err(CliError::Usage("inspect is being written".into()))
}
