//! The soft protected zone: the recent tail the current step is still using.
//!
//! Unlike protected tools (never compressed), the zone slides: a message in
//! it now becomes compressible as the conversation moves on.

use std::collections::HashSet;

use super::config::Config;
use super::exchange;
use super::message::{ContentType, CoreMessage, Role};
use super::protect::never_preserve_recent;
use super::state::CompressionState;
use super::tokens;

/// Ids of the view messages in the protected zone: the last
/// `preserve_recent_messages` visible messages, as many more as it takes to
/// reach `preserve_recent_tokens`, and the most recent user message, each
/// with the rest of its tool exchange. Outputs of cheap, re-runnable tools
/// (Read, Bash, …) do not count towards the zone's size.
pub fn protected_ids<'a>(
    view: &'a [CoreMessage],
    state: &CompressionState,
    cfg: &Config,
) -> HashSet<&'a str> {
    let eligible: Vec<&CoreMessage> = view
        .iter()
        .filter(|m| {
            state.message_refs.usable(&m.id).is_some()
                && !(matches!(
                    m.content_type,
                    ContentType::ToolCall | ContentType::ToolResult
                ) && never_preserve_recent(&m.tool_name))
        })
        .collect();
    let mut out: HashSet<&str> = HashSet::new();
    let mut spent = 0;
    for (n, m) in eligible.iter().rev().enumerate() {
        if n >= cfg.preserve_recent_messages && spent >= cfg.preserve_recent_tokens {
            break;
        }
        spent += tokens::estimate(&m.text);
        out.insert(m.id.as_str());
    }
    if let Some(last_user) = view.iter().rev().find(|m| {
        m.role == Role::User
            && m.content_type == ContentType::Text
            && state.message_refs.usable(&m.id).is_some()
    }) {
        out.insert(last_user.id.as_str());
    }
    // A response is protected whole: the zone never splits a tool exchange,
    // so what it offers is what `apply` will take.
    let spans = exchange::spans(view);
    let touched: HashSet<(usize, usize)> = view
        .iter()
        .enumerate()
        .filter(|(_, m)| out.contains(m.id.as_str()))
        .map(|(i, _)| spans[i])
        .collect();
    for (i, m) in view.iter().enumerate() {
        if touched.contains(&spans[i]) && state.message_refs.usable(&m.id).is_some() {
            out.insert(m.id.as_str());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::test_support::{call, result, say, user};

    fn refs(st: &mut CompressionState, view: &[CoreMessage]) {
        for (i, m) in view.iter().enumerate() {
            let r = format!("m{:05}", i + 1);
            st.message_refs.by_raw.insert(m.id.clone(), r.clone());
            st.message_refs.by_ref.insert(r, m.id.clone());
        }
    }

    #[test]
    fn last_messages_and_last_user() {
        let view: Vec<CoreMessage> = (0..10)
            .map(|i| {
                if i == 2 {
                    user(&format!("u{i}"))
                } else {
                    say(&format!("a{i}"))
                }
            })
            .collect();
        let mut st = CompressionState::new("s");
        refs(&mut st, &view);
        let cfg = Config {
            preserve_recent_tokens: 0,
            ..Config::default()
        };
        let z = protected_ids(&view, &st, &cfg);
        let mut got: Vec<&str> = z.into_iter().collect();
        got.sort();
        assert_eq!(got, ["a5", "a6", "a7", "a8", "a9", "u2"]);
    }

    #[test]
    fn the_token_floor_reaches_further_back() {
        let mut view: Vec<CoreMessage> = (0..8).map(|i| say(&format!("a{i}"))).collect();
        view[1].text = "x".repeat(40_000);
        let mut st = CompressionState::new("s");
        refs(&mut st, &view);
        let z = protected_ids(&view, &st, &Config::default());
        assert!(z.contains("a1"), "{z:?}");
        assert!(!z.contains("a0"));
    }

    #[test]
    fn a_protected_message_protects_its_exchange() {
        let view = vec![
            user("u"),
            say("text"),
            call("c", "t", "Edit"),
            result("r", "t", "Edit"),
            user("old"),
            say("a"),
        ];
        let mut st = CompressionState::new("s");
        refs(&mut st, &view);
        let cfg = Config {
            preserve_recent_messages: 3,
            preserve_recent_tokens: 0,
            ..Config::default()
        };
        let z = protected_ids(&view, &st, &cfg);
        assert!(
            z.contains("r") && z.contains("c") && z.contains("text"),
            "{z:?}"
        );
        assert!(!z.contains("u"));
    }

    #[test]
    fn re_runnable_tools_hold_no_place() {
        let view = vec![
            user("old"),
            call("c", "t", "Read"),
            result("r", "t", "Read"),
            say("a"),
        ];
        let mut st = CompressionState::new("s");
        refs(&mut st, &view);
        let z = protected_ids(
            &view,
            &st,
            &Config {
                preserve_recent_messages: 2,
                preserve_recent_tokens: 0,
                ..Config::default()
            },
        );
        assert!(z.contains("old") && z.contains("a"));
        assert!(!z.contains("c") && !z.contains("r"));
    }
}
