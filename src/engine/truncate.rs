//! Emergency truncation: the mechanical backstop when the model has not
//! compressed in time.
//!
//! Only the view changes; the transcript and the archives keep every output
//! whole. The largest old tool results are cut first, keeping their head and
//! their tail (where errors and summaries usually are), until the view is back
//! under the target. A result cut once stays cut on later turns, so its bytes
//! do not flip back and forth in the provider's prefix cache.

use std::collections::BTreeSet;

use super::config::Config;
use super::message::{ContentType, CoreMessage};
use super::tokens;

/// What identifies a truncated result; detection is a substring test.
pub const MARKER: &str = "[truncated for context space";
/// Results smaller than this many tokens are left alone while larger ones can
/// be cut.
pub const MIN_TOKENS: usize = 1_000;
/// Characters kept at each end of a cut result.
pub const KEEP_CHARS: usize = 2_000;
/// When cutting the large results is not enough, results down to this many
/// tokens are cut too, keeping less of each end.
pub const LAST_RESORT_MIN_TOKENS: usize = 250;
/// Characters kept at each end in that last pass.
pub const LAST_RESORT_KEEP_CHARS: usize = 400;

/// What truncation did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Truncation {
    /// Results cut this turn (newly or again).
    pub count: usize,
    /// Tokens taken out of the view.
    pub saved: usize,
}

/// Cuts results in `view` (before the last `preserve_recent_messages`) so
/// that `tokens` falls under 90% of the truncation threshold. Ids in `sticky`
/// (cut on an earlier turn) are cut again regardless; ids cut now are added.
pub fn truncate(
    view: &mut [CoreMessage],
    tokens_now: usize,
    cfg: &Config,
    sticky: &mut BTreeSet<String>,
) -> Truncation {
    let mut done = Truncation::default();
    let protected_from = view.len().saturating_sub(cfg.preserve_recent_messages);
    for m in view.iter_mut().filter(|m| sticky.contains(&m.id)) {
        if let Some(saved) = cut(m, KEEP_CHARS).or_else(|| cut(m, LAST_RESORT_KEEP_CHARS)) {
            done.count += 1;
            done.saved += saved;
        }
    }
    let threshold = (cfg.context_limit as f64 * cfg.truncate.threshold) as usize;
    if tokens_now.saturating_sub(done.saved) < threshold {
        return done;
    }
    let target = (threshold as f64 * 0.9) as usize;
    for (min_tokens, keep) in [
        (MIN_TOKENS, KEEP_CHARS),
        (LAST_RESORT_MIN_TOKENS, LAST_RESORT_KEEP_CHARS),
    ] {
        let mut candidates: Vec<(usize, usize)> = view[..protected_from]
            .iter()
            .enumerate()
            .filter(|(_, m)| m.content_type == ContentType::ToolResult && !m.text.contains(MARKER))
            .map(|(i, m)| (i, tokens::estimate(&m.text)))
            .filter(|&(_, t)| t >= min_tokens)
            .collect();
        candidates.sort_by_key(|&(i, t)| (std::cmp::Reverse(t), i));
        for (i, _) in candidates {
            if tokens_now.saturating_sub(done.saved) <= target {
                return done;
            }
            if let Some(saved) = cut(&mut view[i], keep) {
                sticky.insert(view[i].id.clone());
                done.count += 1;
                done.saved += saved;
            }
        }
    }
    done
}

/// Cuts one result to `keep` characters at each end; `None` when it is too
/// short for that to save anything.
fn cut(m: &mut CoreMessage, keep: usize) -> Option<usize> {
    if tokens::chars(&m.text) <= 2 * keep + 200 || m.text.contains(MARKER) {
        return None;
    }
    let text = &m.text;
    // Byte offsets of the head's end and the tail's start, counted in characters.
    let head_end = text.char_indices().nth(keep).map_or(text.len(), |(i, _)| i);
    let tail_start = text
        .char_indices()
        .rev()
        .nth(keep - 1)
        .map_or(0, |(i, _)| i);
    let before = tokens::estimate(text);
    let cut_tokens = tokens::estimate(&text[head_end..tail_start]);
    m.text = format!(
        "{}\n\n...{MARKER} — about {cut_tokens} tokens cut from the middle of ~{before}; the transcript keeps the full output]...\n\n{}",
        &text[..head_end],
        &text[tail_start..]
    );
    Some(before.saturating_sub(tokens::estimate(&m.text)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::message::Role;

    fn result(id: &str, chars: usize) -> CoreMessage {
        CoreMessage::tool_result(id, id, "Bash", "x".repeat(chars))
    }
    fn tail(view: &mut Vec<CoreMessage>) {
        for i in 0..5 {
            view.push(CoreMessage::text(
                format!("recent{i}"),
                Role::User,
                "recent",
            ));
        }
    }

    #[test]
    fn nothing_below_the_threshold() {
        let mut v = vec![result("a", 100_000)];
        assert_eq!(
            truncate(&mut v, 100_000, &Config::default(), &mut BTreeSet::new()).count,
            0
        );
    }

    #[test]
    fn the_largest_goes_first() {
        let mut v = vec![
            result("small", 20_000),
            result("huge", 200_000),
            result("medium", 40_000),
        ];
        tail(&mut v);
        let mut sticky = BTreeSet::new();
        let t = truncate(&mut v, 195_000, &Config::default(), &mut sticky);
        assert_eq!(t.count, 1);
        assert!(v[1].text.contains(MARKER));
        assert!(!v[0].text.contains(MARKER) && !v[2].text.contains(MARKER));
        assert!(t.saved > 0);
        assert!(sticky.contains("huge"));
    }

    #[test]
    fn head_and_tail_survive() {
        let body = format!(
            "{}{}{}",
            "H".repeat(3000),
            "M".repeat(100_000),
            "T".repeat(3000)
        );
        let mut v = vec![CoreMessage::tool_result("r", "r", "Bash", body)];
        tail(&mut v);
        truncate(&mut v, 195_000, &Config::default(), &mut BTreeSet::new());
        assert!(v[0].text.starts_with(&"H".repeat(2000)));
        assert!(v[0].text.ends_with(&"T".repeat(2000)));
        assert!(v[0].text.contains("tokens cut from the middle"));
    }

    #[test]
    fn nothing_to_cut() {
        let cfg = Config::default();
        let mut marked = vec![CoreMessage::tool_result(
            "m",
            "m",
            "Bash",
            format!("{MARKER}]{}", "x".repeat(100_000)),
        )];
        tail(&mut marked);
        assert_eq!(
            truncate(&mut marked, 195_000, &cfg, &mut BTreeSet::new()).count,
            0
        );
        let mut recent: Vec<CoreMessage> =
            (0..5).map(|i| result(&format!("r{i}"), 100_000)).collect();
        assert_eq!(
            truncate(&mut recent, 195_000, &cfg, &mut BTreeSet::new()).count,
            0
        );
        let mut user = vec![CoreMessage::text("u", Role::User, "x".repeat(200_000))];
        tail(&mut user);
        assert_eq!(
            truncate(&mut user, 195_000, &cfg, &mut BTreeSet::new()).count,
            0
        );
        let mut small = vec![result("s", 800)];
        tail(&mut small);
        assert_eq!(
            truncate(&mut small, 195_000, &cfg, &mut BTreeSet::new()).count,
            0
        );
    }

    #[test]
    fn zero_preserve() {
        let cfg = Config {
            preserve_recent_messages: 0,
            ..Config::default()
        };
        let mut v = vec![result("a", 200_000)];
        assert_eq!(
            truncate(&mut v, 195_000, &cfg, &mut BTreeSet::new()).count,
            1
        );
    }

    #[test]
    fn a_cut_result_stays_cut() {
        let mut v = vec![result("a", 200_000)];
        tail(&mut v);
        let mut sticky = BTreeSet::from(["a".to_string()]);
        let t = truncate(&mut v, 10_000, &Config::default(), &mut sticky);
        assert_eq!(t.count, 1);
        assert!(v[0].text.contains(MARKER));
    }
}
