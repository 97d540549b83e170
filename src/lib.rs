//! noa: model-driven context compression for LLM-agent transcripts.
//!
//! A transcript is read by a [`formats`] adapter into flat
//! [`engine::CoreMessage`]s; the pure [`engine`] — five parts (model, turn,
//! pressure, compress, report) behind one front door — assigns every message
//! a stable ref and decides what the model sees, saying of each block what
//! it did to it; the [`store`] keeps the session's state and archives on
//! disk; and the format adapter writes the view back out as the provider
//! request it is, replaying those edits on the original JSON. The `cli` module
//! (the default `cli` feature) wires these together as the `noa` command;
//! without it (`default-features = false`) the library builds none of the
//! command line's crates. noa never calls a model: the model writes
//! the summaries, noa keeps the books.
#![warn(missing_docs)]
#![allow(clippy::disallowed_methods, clippy::disallowed_macros)]
// Read errors carry the offending line for display; they are built once, on
// the way out, so their size costs nothing on the paths that matter.
#![allow(clippy::result_large_err)]

#[cfg(feature = "cli")]
pub mod cli;
pub mod engine;
pub mod formats;
pub mod store;
