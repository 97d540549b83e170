//! The flat message every transcript format projects into.

use serde::{Deserialize, Serialize};

/// Who produced a message, as the engine sees it.
///
/// `System` carries instructions (system or developer prompts): they get no
/// ref and are never offered for compression, so a summary can never swallow
/// the rules the agent runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// System or developer instructions.
    System,
    /// The user, or anything the host injects on the user's side.
    User,
    /// The model.
    Assistant,
    /// A tool's answer to a call.
    Tool,
}

impl Role {
    /// The lowercase name used in ids and archives.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// What one content block holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ContentType {
    /// Plain text.
    Text,
    /// A tool call made by the model.
    ToolCall,
    /// The result answering a tool call.
    ToolResult,
    /// Model reasoning (thinking); carried verbatim, never tagged.
    Reasoning,
}

impl ContentType {
    /// The kebab-case name used in ids and archives.
    pub fn as_str(self) -> &'static str {
        match self {
            ContentType::Text => "text",
            ContentType::ToolCall => "tool-call",
            ContentType::ToolResult => "tool-result",
            ContentType::Reasoning => "reasoning",
        }
    }
}

/// One content block of one host message, flattened.
///
/// A host message with three blocks (say thinking, text, tool call) becomes
/// three `CoreMessage`s. `id` is the stable identity the ref map is keyed by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoreMessage {
    /// Stable identity (`h_…` content hash, or a synthetic id such as `noa_nudge`).
    pub id: String,
    /// Who produced it.
    pub role: Role,
    /// What kind of block it is.
    pub content_type: ContentType,
    /// The block's text: prose, tool arguments, tool output or reasoning.
    pub text: String,
    /// Tool name for calls and results; empty otherwise.
    pub tool_name: String,
    /// Call id pairing a call with its result; empty otherwise.
    pub tool_call_id: String,
    /// True for blocks whose payload is not text a tag can be appended to
    /// (images, opaque provider items). Their `text` is a short stand-in used
    /// only for size estimates.
    pub opaque: bool,
}

impl CoreMessage {
    /// A text block with the given identity.
    pub fn text(id: impl Into<String>, role: Role, text: impl Into<String>) -> Self {
        CoreMessage {
            id: id.into(),
            role,
            content_type: ContentType::Text,
            text: text.into(),
            tool_name: String::new(),
            tool_call_id: String::new(),
            opaque: false,
        }
    }

    /// A tool call block.
    pub fn tool_call(
        id: impl Into<String>,
        call_id: impl Into<String>,
        tool: impl Into<String>,
        args: impl Into<String>,
    ) -> Self {
        CoreMessage {
            id: id.into(),
            role: Role::Assistant,
            content_type: ContentType::ToolCall,
            text: args.into(),
            tool_name: tool.into(),
            tool_call_id: call_id.into(),
            opaque: false,
        }
    }

    /// A tool result block.
    pub fn tool_result(
        id: impl Into<String>,
        call_id: impl Into<String>,
        tool: impl Into<String>,
        output: impl Into<String>,
    ) -> Self {
        CoreMessage {
            id: id.into(),
            role: Role::Tool,
            content_type: ContentType::ToolResult,
            text: output.into(),
            tool_name: tool.into(),
            tool_call_id: call_id.into(),
            opaque: false,
        }
    }

    /// A reasoning block.
    pub fn reasoning(id: impl Into<String>, text: impl Into<String>) -> Self {
        CoreMessage {
            id: id.into(),
            role: Role::Assistant,
            content_type: ContentType::Reasoning,
            text: text.into(),
            tool_name: String::new(),
            tool_call_id: String::new(),
            opaque: false,
        }
    }

    /// Whether a ref tag is appended to this block when it is rendered:
    /// user text and tool results, never model output or instructions.
    pub fn is_taggable(&self) -> bool {
        !self.opaque
            && matches!(
                (self.role, self.content_type),
                (Role::User, ContentType::Text) | (_, ContentType::ToolResult)
            )
    }
}
