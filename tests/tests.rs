//! Integration tests: the `noa` binary on real transcripts, and every view
//! checked against its provider's request rules. One test binary, so the
//! suite links once.

#![allow(clippy::disallowed_methods, clippy::disallowed_macros)]
#[path = "suite/agent_loop.rs"]
mod agent_loop;
#[path = "suite/cli_docs.rs"]
mod cli_docs;
#[path = "suite/common/mod.rs"]
mod common;
#[path = "suite/compress.rs"]
mod compress;
#[path = "suite/compress_properties.rs"]
mod compress_properties;
#[path = "suite/example_loop.rs"]
mod example_loop;
#[path = "suite/inspect.rs"]
mod inspect;
#[path = "suite/long_session.rs"]
mod long_session;
#[path = "suite/output.rs"]
mod output;
#[path = "suite/pressure.rs"]
mod pressure;
#[path = "suite/project.rs"]
mod project;
#[path = "suite/properties.rs"]
mod properties;
#[path = "suite/provider_figures.rs"]
mod provider_figures;
#[path = "suite/providers.rs"]
mod providers;
#[path = "suite/rebuild.rs"]
mod rebuild;
#[path = "suite/refs_stability.rs"]
mod refs_stability;
#[path = "suite/shapes.rs"]
mod shapes;
#[path = "suite/synth.rs"]
mod synth;
