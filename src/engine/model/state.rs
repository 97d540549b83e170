//! The persisted compression state: the ledger of refs and blocks.
//!
//! Field names and layout follow state.json version 1, so a state written by
//! one noa can be read by the next. Maps are ordered so the serialized file is
//! the same bytes for the same state.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::name::Name;
pub use super::ref_map::{MessageRefs, RefName};

/// The state.json format version this build reads and writes.
pub const STATE_VERSION: u32 = 5;

/// Everything noa remembers about one session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CompressionState {
    /// Format version; see [`STATE_VERSION`].
    pub version: u32,
    /// The session this state belongs to.
    #[serde(default)]
    pub session_id: String,
    /// The number the next block id gets (`b{next_block_id}`).
    #[serde(default = "one")]
    pub next_block_id: u64,
    /// Every block ever created, in creation order.
    #[serde(default)]
    pub blocks: Vec<Block>,
    /// The ref map.
    #[serde(default)]
    pub message_refs: MessageRefs,
    /// Token figure frozen into each ref's tag at first render.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub token_snapshot: BTreeMap<Name, usize>,
    /// Nudge pacing.
    #[serde(default)]
    pub nudge: NudgeState,
    /// Running totals.
    #[serde(default)]
    pub stats: Stats,
    /// The session whose ledger this one was derived from, if any.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub derived_from: String,
    /// What the host loop remembers between processes.
    #[serde(default)]
    pub host: HostState,
}

/// Why a tool output (or a failed call's input) was reclaimed without the
/// model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Reclaim {
    /// A read of `path` that the call `by` changed later.
    Stale {
        /// The file, as the calls name it.
        path: String,
        /// The id of the call that changed it.
        by: Name,
    },
    /// An output that the same call, made again, gave word for word: the
    /// later one, `by`, shows it.
    Repeat {
        /// The id of the later output.
        by: Name,
    },
    /// The long input of a call that failed: its result, `by`, says so.
    Spent {
        /// The id of the failed call's result.
        by: Name,
    },
}

/// A tool output reclaimed without the model: shown as one line from the
/// call it was reclaimed at on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReclaimedOutput {
    /// Why.
    #[serde(flatten)]
    pub why: Reclaim,
    /// The history length of the Compress call it was reclaimed with.
    pub at: usize,
    /// Where its original is archived.
    pub archive: String,
}

fn one() -> u64 {
    1
}

impl CompressionState {
    /// A fresh state for a session.
    pub fn new(session_id: impl Into<String>) -> Self {
        CompressionState {
            version: STATE_VERSION,
            session_id: session_id.into(),
            next_block_id: 1,
            blocks: Vec::new(),
            message_refs: MessageRefs::default(),
            token_snapshot: BTreeMap::new(),
            nudge: NudgeState::default(),
            stats: Stats::default(),
            derived_from: String::new(),
            host: HostState::default(),
        }
    }
}

/// One compression: a range of messages (and maybe older blocks) replaced by
/// a summary the model wrote.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Block {
    /// `bN`.
    pub block_id: String,
    /// 1 for a summary of messages; 2 and 3 for summaries of summaries.
    pub tier: u8,
    /// Short label the model gave the range.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub topic: String,
    /// The summary shown in place of the range.
    pub summary: String,
    /// Messages this block itself took out of the view.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub direct_message_ids: Vec<Name>,
    /// Every message this block stands for, including those of absorbed blocks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub effective_message_ids: Vec<Name>,
    /// Blocks this block absorbed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub direct_block_ids: Vec<Name>,
    /// Absolute path of the archive holding the originals.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub archive_path: String,
    /// The archive path relative to the session dir, with forward slashes.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub archive_rel: String,
    /// Tokens of what the block replaced.
    #[serde(default)]
    pub compressed_tokens: usize,
    /// First ref the block covers.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub start_ref: String,
    /// Last ref the block covers.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub end_ref: String,
    /// Unix seconds when it was created.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub created_at: i64,
    /// Whether its summary is in the view.
    pub active: bool,
    /// The tool-call id of the Compress call that made it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub compress_call_id: String,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

fn is_zero_u8(n: &u8) -> bool {
    *n == 0
}

/// Nudge pacing stamps, in tokens.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NudgeState {
    /// Token count the cadence is measured from.
    #[serde(default)]
    pub last_per_message_nudge_tokens: usize,
    /// Token count when a nudge was last shown.
    #[serde(default)]
    pub last_nudge_shown_tokens: usize,
    /// Token count when each tier's nudge was last shown.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub last_shown_by_tier: BTreeMap<String, usize>,
    /// Token count of the last turn's view, before its nudge: what the next
    /// turn's growth is measured from.
    #[serde(default, skip_serializing_if = "is_zero_usize")]
    pub last_turn_tokens: usize,
    /// The largest growth of one turn seen lately, fading by an eighth a
    /// turn: how much room the next turn may need.
    #[serde(default, skip_serializing_if = "is_zero_usize")]
    pub step_tokens: usize,
}

fn is_zero_usize(n: &usize) -> bool {
    *n == 0
}

/// Running totals for reports.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Stats {
    /// Tokens taken out of the view by compression, all blocks together.
    #[serde(default)]
    pub tokens_compressed: usize,
    /// Successful compressions.
    #[serde(default)]
    pub compression_count: usize,
}

/// A compaction the host made itself (Claude Code's `compact_boundary`,
/// Codex's `compacted`): what the transcript says it replaced. The records
/// before it are not the conversation any more, so noa never sees them;
/// this is how a person learns they were there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostCompaction {
    /// Its line in the transcript.
    pub line: usize,
    /// Records between it and the compaction before it (or the start),
    /// none of which the model sees any more.
    pub records: usize,
    /// The prompt size the host recorded just before it, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_before: Option<usize>,
    /// What set it off (`auto`, `manual`), when the host says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger: Option<String>,
    /// The ref of the message that carries its summary, for the last one
    /// (the summary of an earlier one was compacted away too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary_ref: Option<String>,
}

impl HostCompaction {
    /// One line for a person, the same in `project -v`, `inspect` and the
    /// SVG.
    pub fn describe(&self) -> String {
        let trigger = match self.trigger.as_deref() {
            Some(t) => format!(" ({t})"),
            None => String::new(),
        };
        let tokens = match self.tokens_before {
            Some(n) => format!(", {} tokens recorded before it", super::tokens::format(n)),
            None => String::new(),
        };
        let summary = match &self.summary_ref {
            Some(r) => format!("; its summary is {r}"),
            None => String::new(),
        };
        format!(
            "the host compacted the conversation at line {}{trigger}: the {} record(s) before it are not sent{tokens}{summary}",
            self.line, self.records
        )
    }
}

/// A window a turn was given, and where it was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GivenWindow {
    /// Tokens.
    pub tokens: usize,
    /// Where it came from.
    pub from: WindowFrom,
}

/// Where a window was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WindowFrom {
    /// `--limit`.
    Flag,
    /// `context_limit` in the config file.
    Config,
}

/// What an agent loop needs remembered between two `noa` processes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HostState {
    /// Compress attempts that failed in a row.
    #[serde(default)]
    pub consecutive_failures: u32,
    /// Token count at which nudging was suppressed; 0 when it is not.
    #[serde(default)]
    pub suppressed_at_tokens: usize,
    /// Range sets that failed, with how often, so a repeat can be refused.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub dead_ranges: BTreeMap<String, u32>,
    /// The context window the provider reported when it refused a request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub learned_window: Option<usize>,
    /// The host's own compactions, as the transcript last read whole told
    /// of them (a turn read on from the cache does not see the records).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compactions: Vec<HostCompaction>,
    /// The window the last turn was given (by a flag or a config file),
    /// kept for the commands after it that are not: `inspect` and `ranges`
    /// on a session a loop runs at 16K speak of 16K, not of the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<GivenWindow>,
    /// Estimated tokens of the last view noa produced, as sent (nudge included).
    #[serde(default)]
    pub last_view_tokens: usize,
    /// History blocks when that view was produced, to tell what is new.
    #[serde(default)]
    pub history_len: usize,
    /// Whether that view carried a nudge.
    #[serde(default)]
    pub nudged: bool,
    /// The tier that nudge asked for.
    #[serde(default, skip_serializing_if = "is_zero_u8")]
    pub nudge_tier: u8,
    /// Whether it was an emergency nudge.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub nudge_emergency: bool,
    /// The growth since the nudge before that the nudge told of: the same
    /// turn projected again tells it again, though that nudge is now the
    /// last one shown.
    #[serde(default, skip_serializing_if = "is_zero_usize")]
    pub nudge_growth: usize,
    /// The room that turn kept for its nudge when it cut and left out to
    /// fit: the same turn again keeps the same, and so the same view.
    #[serde(default, skip_serializing_if = "is_zero_usize")]
    pub nudge_reserve: usize,
    /// Why that turn nudged, as its decision said: the same turn again
    /// says the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nudge_reason: Option<String>,
    /// Tool outputs reclaimed without the model (see `turn::reclaim`), by
    /// the result's id.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub reclaimed: BTreeMap<Name, ReclaimedOutput>,
    /// Every Compress call applied, by call id, with what `apply` answered:
    /// a host that retries a call gets the same answer, and nothing changes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub applied: BTreeMap<String, AppliedCall>,
    /// What the host's own token figures taught.
    #[serde(default, skip_serializing_if = "Calibration::is_empty")]
    pub calibration: Calibration,
    /// Tool results cut by emergency truncation; they stay cut. Kept in a
    /// log of their own beside state.json, never in it (older state.json
    /// files held them, and still read).
    #[serde(default, skip_serializing)]
    pub truncated: std::collections::BTreeSet<Name>,
    /// For each cut: the history length when it was made, so a provider
    /// figure recorded before it is known to count the output whole. Kept
    /// beside state.json as `truncated` is.
    #[serde(default, skip_serializing)]
    pub truncated_at: BTreeMap<Name, usize>,
}

impl HostState {
    /// Every cut with the history length it was made at, when known. Both
    /// lists are in id order, so they are walked side by side: a long
    /// session has tens of thousands of cuts, each otherwise looked up.
    pub fn cuts(&self) -> impl Iterator<Item = (&Name, Option<usize>)> {
        let mut at = self.truncated_at.iter().peekable();
        self.truncated.iter().map(move |id| {
            while at.next_if(|&(a, _)| a < id).is_some() {}
            (id, at.next_if(|&(a, _)| a == id).map(|(_, &n)| n))
        })
    }
}

/// What the provider's figures for past requests taught about this host's
/// requests (see the gauge).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Calibration {
    /// Tokens the provider counts beyond the corrected estimate of the
    /// messages: the host's system prompt and tools, mostly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<i64>,
    /// Growth of the provider's figures between reports…
    #[serde(default)]
    pub provider_growth: u64,
    /// …against the growth of noa's estimates of the same requests.
    #[serde(default)]
    pub estimate_growth: u64,
    /// The last figure learned from, and the estimate of the request it counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<(usize, usize)>,
}

impl Calibration {
    fn is_empty(&self) -> bool {
        *self == Calibration::default()
    }
}

/// What `apply` answered for one Compress call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AppliedCall {
    /// No block was made: the host returns the panel as an error result.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rejected: bool,
    /// The panel, as printed.
    pub panel: String,
}
