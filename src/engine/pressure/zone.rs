//! The soft protected zone: the recent tail the current step is still using.
//!
//! Unlike protected tools (never compressed), the zone slides: a message in
//! it now becomes compressible as the conversation moves on. It is bounded
//! by what it holds, so a history of large tool outputs cannot pull the
//! whole session into it.

use crate::engine::model::identity::IdSet;

use crate::engine::model::config::Config;
use crate::engine::model::exchange;
use crate::engine::model::message::{ContentType, CoreMessage, Role};
use crate::engine::model::protect::never_preserve_recent;
use crate::engine::model::state::CompressionState;

/// Ids of the view messages in the protected zone.
///
/// The zone is a cap, not a sprawl: the most recent whole exchanges (a
/// response with its tool results goes in or out as one), taken newest
/// first while fewer than `preserve_recent_messages` addressable messages
/// or [`Config::recent_zone_tokens`] tokens are in, counting everything they hold,
/// tool output included, and never past `recent_zone_share` of the window
/// (the newest exchange always counts, whatever its size). Exchanges made
/// only of cheap, re-runnable tools (Read, Bash, …) take their place in
/// that count but stay compressible. The most recent user message is
/// protected too, wherever it is.
pub fn protected_ids<'a>(
    view: &'a [CoreMessage],
    state: &CompressionState,
    cfg: &Config,
) -> IdSet<'a> {
    let spans = exchange::spans(view);
    let cap = (cfg.context_limit as f64 * cfg.recent_zone_share) as usize;
    let addressable = |m: &CoreMessage| state.message_refs.usable(&m.id).is_some();
    let mut out: IdSet<'_> = IdSet::default();
    let (mut messages, mut spent) = (0, 0);
    let mut end = view.len();
    let floor = cfg.recent_zone_tokens();
    while end > 0 {
        if messages >= cfg.preserve_recent_messages && spent >= floor {
            break;
        }
        let start = spans[end - 1].0;
        let unit = &view[start..end];
        let tokens: usize = unit.iter().map(|m| cfg.tokens(m)).sum();
        if spent > 0 && spent + tokens > cap {
            break;
        }
        spent += tokens;
        messages += unit.iter().filter(|m| addressable(m)).count();
        if !re_runnable_only(unit) {
            out.extend(
                unit.iter()
                    .filter(|m| addressable(m))
                    .map(|m| m.id.as_str()),
            );
        }
        end = start;
    }
    if let Some(last_user) = view
        .iter()
        .rev()
        .find(|m| m.role == Role::User && m.content_type == ContentType::Text && addressable(m))
    {
        out.insert(last_user.id.as_str());
    }
    out
}

/// Whether an exchange is nothing but calls to re-runnable tools and their
/// results (with the prose and reasoning of that response).
fn re_runnable_only(unit: &[CoreMessage]) -> bool {
    let mut tools = unit.iter().filter(|m| {
        matches!(
            m.content_type,
            ContentType::ToolCall | ContentType::ToolResult
        )
    });
    tools.clone().next().is_some() && tools.all(|m| never_preserve_recent(&m.tool_name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::test_support::{call, result, say, user};

    fn refs(st: &mut CompressionState, view: &[CoreMessage]) {
        for (i, m) in view.iter().enumerate() {
            let r = format!("m{:05}", i + 1);
            st.message_refs.insert(&m.id, &r);
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
            preserve_recent_tokens: Some(0),
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
            preserve_recent_tokens: Some(0),
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
                preserve_recent_tokens: Some(0),
                ..Config::default()
            },
        );
        assert!(z.contains("old") && z.contains("a"));
        assert!(!z.contains("c") && !z.contains("r"));
    }

    /// The read-heavy shape coding agents produce: a short question, one
    /// line of prose, a Read of a page of source, one line of prose.
    fn read_heavy(turns: usize) -> Vec<CoreMessage> {
        let mut view = Vec::new();
        for t in 0..turns {
            view.push(user(&format!("q{t}")));
            view.push(say(&format!("p{t}")));
            view.push(call(&format!("c{t}"), &format!("t{t}"), "Read"));
            let mut r = result(&format!("r{t}"), &format!("t{t}"), "Read");
            r.text = "fn main() { let x = 1; }\n".repeat(100);
            view.push(r);
            view.push(say(&format!("s{t}")));
        }
        view
    }

    #[test]
    fn re_runnable_output_counts_towards_the_zone() {
        let view = read_heavy(60);
        let mut st = CompressionState::new("s");
        refs(&mut st, &view);
        let cfg = Config::for_window(40_000);
        let z = protected_ids(&view, &st, &cfg);
        // The zone's tokens (1,562 at this window) are a few turns' worth
        // of reads, not the whole history.
        assert!(z.len() < 20, "{} protected: {z:?}", z.len());
        assert!(z.contains("q59") && z.contains("s59"));
        assert!(!z.contains("q40") && !z.contains("s40"));
        assert!(!z.contains("r59"), "the Read itself stays compressible");
    }

    #[test]
    fn the_zone_never_holds_more_than_its_share_of_the_window() {
        let mut view = vec![user("task")];
        for i in 0..6 {
            let mut m = say(&format!("a{i}"));
            m.text = "x".repeat(8_000);
            view.push(m);
        }
        let mut st = CompressionState::new("s");
        refs(&mut st, &view);
        // A 16K window: a quarter is 4,000 tokens, two of these messages.
        let z = protected_ids(&view, &st, &Config::for_window(16_000));
        let mut got: Vec<&str> = z.into_iter().collect();
        got.sort();
        assert_eq!(got, ["a4", "a5", "task"]);
    }

    #[test]
    fn the_newest_exchange_is_protected_whatever_its_size() {
        let mut view = vec![user("task"), call("c", "t", "Edit")];
        let mut r = result("r", "t", "Edit");
        r.text = "x".repeat(100_000);
        view.push(r);
        let mut st = CompressionState::new("s");
        refs(&mut st, &view);
        let z = protected_ids(&view, &st, &Config::for_window(16_000));
        assert!(z.contains("c") && z.contains("r"));
    }
}
