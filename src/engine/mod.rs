//! The pure engine: everything that decides, nothing that touches the world.
//!
//! No file I/O, no clock, no environment, no printing. Callers hand in the
//! transcript as flat [`CoreMessage`]s and the persisted [`state::CompressionState`];
//! the engine hands back a view and an updated state. The store and the CLI do
//! the reading and writing.
#![deny(clippy::disallowed_methods, clippy::disallowed_macros)]

pub mod apply;
pub mod archive;
pub mod boundary;
pub mod config;
pub mod exchange;
pub mod gauge;
pub mod hide;
pub mod host;
pub mod identity;
pub mod lineage;
pub mod map;
pub mod message;
pub mod nudge;
pub mod nudge_text;
pub mod panel;
pub mod parse_args;
pub mod prompt;
pub mod protect;
pub mod prune;
pub mod ranges;
pub mod rebuild;
pub mod recommend;
pub mod refs;
pub mod state;
pub mod svg;
pub mod sync;
pub mod tag;
#[cfg(test)]
mod test_support;
pub mod tokenizer;
pub mod tokens;
pub mod tree;
pub mod truncate;
pub mod turn;
pub mod view;
pub mod zone;

pub use message::{ContentType, CoreMessage, Role};
