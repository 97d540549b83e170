//! One turn projected on a state as a host runs it with no figure of its
//! own: what every target that projects shares.

use noa::engine::{
    CompressionState, Config, CoreMessage, IdMap, Projection, Recorded, Sections, TurnInput,
    project,
};

/// `history` projected on `state` with `config` and the default prompt.
pub fn turn(
    state: &mut CompressionState,
    history: &[CoreMessage],
    recorded: &[Recorded],
    config: &Config,
) -> Projection {
    project(
        state,
        &TurnInput {
            history,
            config,
            input_tokens: None,
            recorded,
            sections: &Sections::default(),
            force_nudge: false,
            for_call: false,
            cuts: &IdMap::default(),
        },
    )
}
