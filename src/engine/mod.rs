//! The pure engine: everything that decides, nothing that touches the world.
//!
//! No file I/O, no clock, no environment, no printing. Callers hand in the
//! transcript as flat [`CoreMessage`]s and the persisted [`CompressionState`];
//! the engine hands back a view and an updated state. The store and the CLI do
//! the reading and writing.
//!
//! The engine is five parts, and this module is their one front door: the
//! rest of the crate (and the library's users) reach the engine through the
//! names below, never through a part.
//!
//! - `model`: the data everything else speaks — messages and their edits,
//!   identity, refs and tags, token counts, the persisted state, the config.
//! - `turn`: one turn's pipeline — sync which blocks are live, prune what
//!   they cover, hide spent Compress exchanges, keep tool calls paired,
//!   truncate, and the host's bookkeeping between turns.
//! - `pressure`: how full the request is and what to do about it — the
//!   gauge, the recent zone, the recommendation, the nudge and the texts the
//!   model reads.
//! - `compress`: one Compress call — its arguments, its range ends, the
//!   blocks and archives it makes, the panel it answers with, the host's
//!   policy on repeats, and the rebuild that replays a log's calls.
//! - `report`: pictures for a person — the context map, its SVG, the tier
//!   tree.
#![deny(clippy::disallowed_methods, clippy::disallowed_macros)]

mod compress;
mod model;
mod pressure;
mod report;
#[cfg(test)]
mod test_support;
mod turn;

pub use model::config::{Config, FileTools, Floor};
pub use model::identity::{ClusterCounter, IdHash, IdMap, IdSet, base_of, derive_id};
pub use model::lineage;
pub use model::marker::marked;
pub use model::message::COMPRESS_TOOL;
pub use model::message::{ContentType, CoreMessage, Counted, Edit, Facts, Role};
pub use model::name::Name;
pub use model::quote;
pub use model::refs::{BLOCKED, MAX_REF, NUDGE_ID};
pub use model::state::{
    AppliedCall, Block, CompressionState, GivenWindow, HostCompaction, HostState, MessageRefs,
    NudgeState, Reclaim, ReclaimedOutput, RefName, STATE_VERSION, Stats, WindowFrom,
};
pub use model::tokenizer::Tokenizer;
pub use model::tokens;

pub use turn::host::window_from_error;
pub use turn::truncate::{Cut, KeptCut};
pub use turn::view::drop_unpaired;
pub use turn::{
    Figures, Projection, TurnInput, Unfilled, may_withhold, may_withhold_knowing,
    may_withhold_once_read, project, resumable_view,
};

pub use pressure::gauge::{Gauge, Recorded};
pub use pressure::nudge_text::{format_block_map, format_breakdown, format_ranges};
pub use pressure::offer::{
    CompressArgs, CompressEntry, NudgeKind, Offer, OfferInput, OfferedBlock, offer,
};
pub use pressure::prompt::{SchemaFlavour, Sections, compress_tool, system_prompt};
pub use pressure::ranges::{BlockSpan, Breakdown, ProtectedRange, RangeInfo};
pub use pressure::zone::protected_ids;

pub use compress::apply::{ApplyInput, ApplyOutcome, NO_RANGES, apply};
pub use compress::archive::{ArchiveFile, ArchiveInput, Entry as ArchiveEntry};
pub use compress::call::{
    Answer, CallInput, MAX_ARGS_BYTES, MAX_RANGES, answer as answer_call, answered_before,
};
pub use compress::panel;
pub use compress::panel::{Reclaimed, block_count, summary_tokens};
pub use compress::parse_args::{
    CompressRange, ParseKind, ParsedArgs, RAW_PREFIX_CHARS, parse_compress_args,
};
pub use compress::rebuild::{
    RebuildInput, Rebuilt, ReplayOutcome, differences, rebuild, recorded_calls,
};
pub use compress::reclaim::{Dead, Offered, dead_in_view};
pub use turn::reclaim::words_needed;

pub use report::bill::{
    Bill, BlockBill, CallAt, Expected, Prices, ResponseUsage, Totals, UsageLog, Weights,
    format_total,
};
pub use report::map::{Run, STRIP_LEGEND, Segment};
pub use report::svg::SvgInput;
pub use report::{map, svg, tree};
