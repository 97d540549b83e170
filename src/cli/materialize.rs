//! `noa materialize`: the compression written into a plain transcript.

use super::args::{Global, MaterializeArgs};
use super::context::Context;
use super::output::{check_output, emit, warn};
use super::{CliError, Exit};
use crate::engine::resumable_view;
use crate::formats;
use crate::store::Purpose;

/// Runs `noa materialize`. Reads the state (rebuilding a lost one in
/// memory) but writes none.
pub fn run(global: &Global, args: &MaterializeArgs) -> Result<Exit, CliError> {
    check_output(args.output.as_ref())?;
    let cx = Context::open(global, &args.transcript, Purpose::Records)?;
    let t = cx.session.transcript();
    let state = cx.state()?;
    let view = resumable_view(&state, cx.session.history(), &cx.config(&state));
    let mut bytes = Vec::new();
    for record in formats::materialize(t, &view) {
        serde_json::to_writer(&mut bytes, &record).expect("a JSON value always serializes");
        bytes.push(b'\n');
    }
    emit(args.output.as_ref(), &bytes)?;
    warn(global, &cx.session.warnings());
    Ok(Exit::Success)
}
