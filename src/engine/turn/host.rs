//! What an agent loop remembers between turns: failed attempts, suppression,
//! the window the provider named.
//!
//! A model that is nudged and does not compress, or whose calls keep failing,
//! should not be nagged every turn: after a few failures in a row nudging
//! pauses until the context has grown a cadence step, or until it reaches the
//! emergency band, where the model must be asked whatever happened before.

use crate::engine::model::config::Config;
use crate::engine::model::message::{ContentType, CoreMessage, Role};
use crate::engine::model::state::HostState;
use crate::engine::pressure::nudge::cadence;

/// Updates the failure counter from what happened since the last view:
/// a real user turn clears it; a nudge answered without any Compress call
/// counts as a failure. (Failed Compress calls are counted by `apply`.)
pub fn observe(host: &mut HostState, history: &[CoreMessage]) {
    let new = history
        .get(host.history_len.min(history.len())..)
        .unwrap_or(&[]);
    let user_spoke = new
        .iter()
        .any(|m| m.role == Role::User && m.content_type == ContentType::Text && !m.opaque);
    if user_spoke {
        host.consecutive_failures = 0;
        host.suppressed_at_tokens = 0;
        return;
    }
    let answered = new.iter().any(|m| m.role == Role::Assistant);
    let compressed = new.iter().any(|m| m.is_compress_call());
    if host.nudged && answered && !compressed {
        host.consecutive_failures += 1;
    }
}

/// Whether nudging is suppressed at `tokens`; updates the suppression point.
/// Suppression starts after `max_compress_attempts` failures in a row and
/// lifts when the context grows a cadence step past that point or enters the
/// emergency band.
pub fn suppressed(host: &mut HostState, tokens: usize, cfg: &Config) -> bool {
    if host.consecutive_failures < cfg.max_compress_attempts.max(1) {
        host.suppressed_at_tokens = 0;
        return false;
    }
    if host.suppressed_at_tokens == 0 {
        host.suppressed_at_tokens = tokens.max(1);
    }
    let emergency = tokens as f64 >= cfg.context_limit as f64 * cfg.nudge.emergency_threshold_pct;
    if emergency || tokens >= host.suppressed_at_tokens + cadence(cfg) {
        host.consecutive_failures = 0;
        host.suppressed_at_tokens = 0;
        return false;
    }
    true
}

/// Reads a context window out of a provider's overflow error, if it names
/// one: "maximum context length is 128000 tokens", "prompt is too long:
/// 215000 tokens > 200000 maximum", "… > 200000", "context window of 32768".
pub fn window_from_error(text: &str) -> Option<usize> {
    let lower = text.to_lowercase();
    let number_after = |key: &str| -> Option<usize> {
        let at = lower.find(key)? + key.len();
        let digits: String = lower[at..]
            .chars()
            .skip_while(|c| !c.is_ascii_digit())
            .take_while(|c| c.is_ascii_digit() || *c == ',' || *c == '_')
            .filter(char::is_ascii_digit)
            .collect();
        digits.parse().ok()
    };
    for key in [
        "maximum context length is",
        "context window of",
        "context length of",
        "context_length_exceeded",
        "limit of",
    ] {
        if let Some(n) = number_after(key).filter(|n| *n >= 1_000) {
            return Some(n);
        }
    }
    // "X tokens > Y maximum" / "… + 16000 > 200000": the figure after the last '>'.
    let at = lower.rfind('>')?;
    let digits: String = lower[at + 1..]
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits.parse().ok().filter(|n: &usize| *n >= 1_000)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::model::message::COMPRESS_TOOL;
    use crate::engine::model::name::Name;

    fn msgs(roles: &[(&str, Role, ContentType, &str)]) -> Vec<CoreMessage> {
        roles
            .iter()
            .map(|(id, role, ct, tool)| CoreMessage {
                id: Name::new(id),
                role: *role,
                content_type: *ct,
                text: String::new(),
                tool_name: Name::new(tool),
                tool_call_id: Name::default(),
                opaque: false,
                edit: Default::default(),
                counted: Default::default(),
                withheld: None,
                ends: None,
            })
            .collect()
    }

    #[test]
    fn an_unanswered_nudge_is_a_failure_and_the_user_clears_it() {
        let h = msgs(&[
            ("u", Role::User, ContentType::Text, ""),
            ("a", Role::Assistant, ContentType::Text, ""),
        ]);
        let mut host = HostState {
            nudged: true,
            history_len: 1,
            ..HostState::default()
        };
        observe(&mut host, &h);
        assert_eq!(host.consecutive_failures, 1);
        let mut h2 = h.clone();
        h2.extend(msgs(&[("u2", Role::User, ContentType::Text, "")]));
        host.history_len = 2;
        observe(&mut host, &h2);
        assert_eq!(host.consecutive_failures, 0);
    }

    #[test]
    fn a_compress_call_is_not_a_failure() {
        let h = msgs(&[
            ("u", Role::User, ContentType::Text, ""),
            ("c", Role::Assistant, ContentType::ToolCall, COMPRESS_TOOL),
            ("r", Role::Tool, ContentType::ToolResult, COMPRESS_TOOL),
        ]);
        let mut host = HostState {
            nudged: true,
            history_len: 1,
            ..HostState::default()
        };
        observe(&mut host, &h);
        assert_eq!(host.consecutive_failures, 0);
    }

    #[test]
    fn suppression_starts_and_lifts() {
        let cfg = Config::default();
        let mut host = HostState {
            consecutive_failures: 3,
            ..HostState::default()
        };
        assert!(suppressed(&mut host, 100_000, &cfg));
        assert_eq!(host.suppressed_at_tokens, 100_000);
        assert!(suppressed(&mut host, 110_000, &cfg));
        assert!(
            !suppressed(&mut host, 100_000 + cadence(&cfg), &cfg),
            "growth lifts it"
        );
        let mut host = HostState {
            consecutive_failures: 3,
            suppressed_at_tokens: 180_000,
            ..HostState::default()
        };
        assert!(
            !suppressed(&mut host, 191_000, &cfg),
            "the emergency band lifts it"
        );
    }

    #[test]
    fn windows_from_overflow_errors() {
        let cases = [
            (
                "This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens.",
                Some(128_000),
            ),
            (
                "prompt is too long: 215000 tokens > 200000 maximum",
                Some(200_000),
            ),
            (
                "input length and `max_tokens` exceed context limit: 190000 + 16000 > 200000",
                Some(200_000),
            ),
            (
                "the request exceeds the model's context window of 32,768 tokens",
                Some(32_768),
            ),
            ("rate limited", None),
        ];
        for (text, want) in cases {
            assert_eq!(window_from_error(text), want, "{text}");
        }
    }
}
