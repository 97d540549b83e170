//! What the recommendation reports: compressible and protected spans, the
//! active block map, and where the context's tokens went.

use serde::Serialize;

/// A run of messages that may be compressed, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RangeInfo {
    /// First ref of the run.
    pub start_ref: String,
    /// Last ref of the run.
    pub end_ref: String,
    /// Messages in it.
    pub count: usize,
    /// Estimated tokens.
    pub tokens: usize,
    /// Characters (the size gate counts these).
    pub chars: usize,
    /// Share of its tokens in tool calls and results, 0–100.
    pub tool_pct: u32,
    /// User messages in it.
    pub user_messages: usize,
    /// It holds the first user message (the task and its constraints): a
    /// summary of it must carry those, and the message itself stays in view.
    pub holds_task: bool,
}

/// Why a span may not be compressed now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProtectReason {
    /// Among the most recent messages, which the current step still uses.
    Recent,
    /// The most recent user message.
    LastUserMessage,
}

/// A run of protected messages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProtectedRange {
    /// First ref of the run.
    pub start_ref: String,
    /// Last ref of the run.
    pub end_ref: String,
    /// Messages in it.
    pub count: usize,
    /// Estimated tokens.
    pub tokens: usize,
    /// Tools whose calls or results are in it, in first-seen order.
    pub tools: Vec<String>,
    /// Why it is protected.
    pub reason: ProtectReason,
}

/// An active block as the block map shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BlockSpan {
    /// `bN`.
    pub block_id: String,
    /// Its tier.
    pub tier: u8,
    /// First ref it covers.
    pub start_ref: String,
    /// Last ref it covers.
    pub end_ref: String,
}

/// Tokens of the request by kind, on the provider's scale: together they
/// are the request as sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Breakdown {
    /// What the host sends beside the messages (its system prompt and tool
    /// definitions): the provider's figure less what the messages come to.
    pub host: usize,
    /// System and developer instructions in the transcript.
    pub system: usize,
    /// Tool calls and results.
    pub tool: usize,
    /// Rendered block summaries.
    pub summaries: usize,
    /// Text that is mostly fenced code.
    pub code: usize,
    /// Everything else: prose, reasoning.
    pub text: usize,
    /// The nudge this turn appended.
    pub nudge: usize,
}

impl Breakdown {
    /// Every part together.
    pub fn total(&self) -> usize {
        self.host + self.messages()
    }

    /// What the messages come to: every part but the host's.
    pub fn messages(&self) -> usize {
        self.system + self.tool + self.summaries + self.code + self.text + self.nudge
    }

    /// Each part through `scale` (estimated tokens to the provider's).
    pub fn scaled(self, scale: impl Fn(usize) -> usize) -> Breakdown {
        Breakdown {
            host: self.host,
            system: scale(self.system),
            tool: scale(self.tool),
            summaries: scale(self.summaries),
            code: scale(self.code),
            text: scale(self.text),
            nudge: scale(self.nudge),
        }
    }
}
