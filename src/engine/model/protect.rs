//! Which tools are never compressed, and which do not hold the recent zone.

use super::message::COMPRESS_TOOL;

/// Tools whose output is cheap to obtain again, so recent calls to them do not
/// keep a range out of compression.
pub const NEVER_PRESERVE_RECENT: [&str; 5] = ["Read", "Grep", "Glob", "Bash", "LS"];

/// Matches a tool name against a pattern, ignoring case; a trailing `*`
/// matches any suffix (`mcp__*`). Empty patterns and names never match.
pub fn matches_pattern(pattern: &str, tool: &str) -> bool {
    if pattern.is_empty() || tool.is_empty() {
        return false;
    }
    // Asked for every message of every view: ASCII names, the usual ones,
    // are compared in place rather than lowercased into new strings.
    if pattern.is_ascii() && tool.is_ascii() {
        return match pattern.strip_suffix('*') {
            Some(prefix) => tool
                .get(..prefix.len())
                .is_some_and(|head| head.eq_ignore_ascii_case(prefix)),
            None => pattern.eq_ignore_ascii_case(tool),
        };
    }
    let (pattern, tool) = (pattern.to_lowercase(), tool.to_lowercase());
    match pattern.strip_suffix('*') {
        Some(prefix) => tool.starts_with(prefix),
        None => pattern == tool,
    }
}

/// Whether a tool is hard-protected: Compress, or a configured pattern.
pub fn is_tool_protected(tool: &str, patterns: &[String]) -> bool {
    matches_pattern(COMPRESS_TOOL, tool) || patterns.iter().any(|p| matches_pattern(p, tool))
}

/// Whether recent calls to this tool leave the protected zone free.
pub fn never_preserve_recent(tool: &str) -> bool {
    NEVER_PRESERVE_RECENT
        .iter()
        .any(|t| matches_pattern(t, tool))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns() {
        let cases = [
            ("Read", "Read", true),
            ("read", "Read", true),
            ("mcp__*", "mcp__github__list", true),
            ("mcp__*", "Read", false),
            ("Read", "ReadFile", false),
            ("", "Read", false),
            ("Read", "", false),
        ];
        for (p, t, want) in cases {
            assert_eq!(matches_pattern(p, t), want, "{p:?} {t:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn ascii_names_match_as_lowercased(pattern in "[a-cA-C_]{0,4}\\*?", tool in "[a-cA-C_]{0,5}") {
            let lowered = pattern.to_lowercase();
            let tool_lowered = tool.to_lowercase();
            let want = !pattern.is_empty() && !tool.is_empty() && match lowered.strip_suffix('*') {
                Some(prefix) => tool_lowered.starts_with(prefix),
                None => lowered == tool_lowered,
            };
            proptest::prop_assert_eq!(matches_pattern(&pattern, &tool), want);
        }
    }

    #[test]
    fn protection() {
        assert!(is_tool_protected("Compress", &[]));
        assert!(!is_tool_protected("Read", &[]));
        assert!(is_tool_protected("Read", &["Read".into()]));
    }

    #[test]
    fn re_obtainable_tools() {
        for t in ["Read", "Grep", "Glob", "Bash", "LS", "read", "bash"] {
            assert!(never_preserve_recent(t), "{t}");
        }
        for t in ["Write", "Edit", "Compress", ""] {
            assert!(!never_preserve_recent(t), "{t}");
        }
    }
}
