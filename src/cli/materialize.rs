//! `noa materialize`: the compression baked into a plain transcript.

use super::args::{Global, MaterializeArgs};
use super::input::{emit, load, session_state, warn};
use super::{CliError, Exit};
use crate::engine::baked;
use crate::formats;

/// Runs `noa materialize`. Reads the state but writes none.
pub fn run(global: &Global, args: &MaterializeArgs) -> Result<Exit, CliError> {
    let loaded = load(global, &args.transcript)?;
    let t = &loaded.transcript;
    let state = session_state(&loaded)?;
    let settings = super::settings::load(global, Some(&args.transcript))?;
    let view = baked(&state, &t.cores(), &settings.config);
    let mut bytes = Vec::new();
    for record in formats::materialize(t, &view) {
        serde_json::to_writer(&mut bytes, &record).expect("a JSON value always serializes");
        bytes.push(b'\n');
    }
    emit(args.output.as_ref(), &bytes)?;
    warn(global, &t.warnings);
    Ok(Exit::Success)
}
