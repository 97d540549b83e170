//! Integration tests: the `noa` binary on real transcripts, and every view
//! checked against its provider's request rules. One test binary, so the
//! suite links once; its files live in `tests/suite/`.

#![allow(clippy::disallowed_methods, clippy::disallowed_macros)]

#[path = "suite"]
mod suite {
    pub mod agent_loop;
    pub mod bill;
    pub mod cli_docs;
    pub mod common;
    pub mod compress;
    pub mod compress_properties;
    pub mod crash;
    pub mod example_loop;
    pub mod figures;
    pub mod hostile;
    pub mod inspect;
    pub mod long_session;
    pub mod materialize;
    pub mod output;
    pub mod placement;
    pub mod pressure;
    pub mod project;
    pub mod properties;
    pub mod provider_figures;
    pub mod providers;
    pub mod read_cache;
    pub mod rebuild;
    pub mod reclaim;
    pub mod refs_stability;
    pub mod shapes;
    pub mod snapshots;
    pub mod synth;
}

// The suite's files name their shared helpers from the crate root.
use suite::{agent_loop, common, compress, providers, rebuild, synth};
