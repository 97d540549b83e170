//! Ref tags: how the model sees a message's address.
//!
//! A tag goes at the END of a body. A leading tag would sit inside whatever the
//! body starts with, and models echo openings far more often than endings. The
//! token figure in a tag is frozen at first render: a tag whose bytes change
//! would invalidate the provider's prefix cache from that message on.

/// The tag for one message: `<noa-ref id="m00042" tokens="1.2K"/>`, with
/// `src="Tool"` for tool results.
///
/// Put together piece by piece: every message in view is tagged every turn.
pub fn render(reference: &str, tokens: usize, source: Option<&str>) -> String {
    let figure = super::tokens::format(tokens);
    let src = source.map_or(0, |s| s.len() + 7);
    let mut tag = String::with_capacity(26 + reference.len() + figure.len() + src);
    for piece in [r#"<noa-ref id=""#, reference, r#"" tokens=""#, &figure] {
        tag.push_str(piece);
    }
    if let Some(src) = source {
        for piece in [r#"" src=""#, src] {
            tag.push_str(piece);
        }
    }
    tag.push_str(r#""/>"#);
    tag
}

/// Appends a tag to a body on its own line (the tag alone for an empty body),
/// in place: every taggable message in a view is tagged, and a tool output
/// can be long.
pub fn append(body: &mut String, tag: &str) {
    let line = separator(body.len());
    // Grown by exactly the tag: left to itself a String doubles, and a
    // view's copies of long outputs would hold twice their size.
    body.reserve_exact(line.len() + tag.len());
    body.push_str(line);
    body.push_str(tag);
}

/// What [`append`] adds to a body of `len` bytes: all it needs to know of
/// the body, whose words may not be read yet.
pub fn suffix(len: usize, tag: &str) -> String {
    [separator(len), tag].concat()
}

/// The tag a [`suffix`] adds: the suffix less the line break before it.
pub fn of_suffix(suffix: &str) -> &str {
    suffix.strip_prefix(separator(1)).unwrap_or(suffix)
}

/// What goes between a body of `len` bytes and its tag: a line break,
/// unless the tag is the whole body.
fn separator(len: usize) -> &'static str {
    if len == 0 { "" } else { "\n" }
}

/// Removes one ref tag from either end of a body, with the newline that
/// joined it. A body that a host echoed back with its tag must hash like the
/// untagged original, or its identity (and so its ref) would drift.
pub fn strip(body: &str) -> &str {
    split_trailing(body)
        .or_else(|| split_leading(body))
        .map_or(body, |(rest, _)| rest)
}

/// Splits `body` into (rest, tag) when it ends with a tag.
fn split_trailing(body: &str) -> Option<(&str, &str)> {
    let trimmed = body.trim_end();
    if !trimmed.ends_with("/>") {
        return None;
    }
    let start = trimmed.rfind("<noa-ref ")?;
    let tag = &trimmed[start..];
    if !is_tag(tag) {
        return None;
    }
    let rest = &trimmed[..start];
    Some((rest.strip_suffix('\n').unwrap_or(rest), tag))
}

/// Splits `body` into (rest, tag) when it starts with a tag.
fn split_leading(body: &str) -> Option<(&str, &str)> {
    let trimmed = body.trim_start();
    if !trimmed.starts_with("<noa-ref ") {
        return None;
    }
    let end = trimmed.find("/>")? + 2;
    let tag = &trimmed[..end];
    if !is_tag(tag) {
        return None;
    }
    let rest = &trimmed[end..];
    Some((rest.strip_prefix('\n').unwrap_or(rest), tag))
}

/// Whether `s` is exactly one tag: `<noa-ref` attributes `/>`, no nesting.
fn is_tag(s: &str) -> bool {
    let Some(inner) = s
        .strip_prefix("<noa-ref ")
        .and_then(|r| r.strip_suffix("/>"))
    else {
        return false;
    };
    inner.contains("id=\"") && !inner.contains(['<', '>', '\n'])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_suffix_gives_back_its_tag() {
        let tag = render("m00042", 1200, Some("Bash"));
        for len in [0, 1, 4000] {
            assert_eq!(of_suffix(&suffix(len, &tag)), tag);
        }
    }

    #[test]
    fn renders_user_and_tool_tags() {
        assert_eq!(
            render("m00042", 1200, None),
            r#"<noa-ref id="m00042" tokens="1.2K"/>"#
        );
        assert_eq!(
            render("m00175", 8400, Some("Read")),
            r#"<noa-ref id="m00175" tokens="8.4K" src="Read"/>"#
        );
    }

    fn appended(body: &str, tag: &str) -> String {
        let mut body = body.to_string();
        append(&mut body, tag);
        body
    }

    #[test]
    fn appends_on_its_own_line() {
        let tag = render("m00001", 3, None);
        assert_eq!(appended("hello", &tag), format!("hello\n{tag}"));
        assert_eq!(appended("", &tag), tag);
    }

    #[test]
    fn strips_at_either_end() {
        let tag = render("m00007", 12, Some("Bash"));
        assert_eq!(strip(&appended("body", &tag)), "body");
        assert_eq!(strip(&format!("{tag}\nbody")), "body");
        assert_eq!(strip(&tag), "");
        assert_eq!(strip("no tag here"), "no tag here");
    }

    #[test]
    fn leaves_lookalikes_alone() {
        let text = "see <noa-ref id=\"m1\"> in the docs";
        assert_eq!(strip(text), text);
        let multi = "x\n<noa-ref id=\"m1\"\nbroken/>";
        assert_eq!(strip(multi), multi);
    }

    #[test]
    fn strips_only_one_tag() {
        let a = render("m00001", 1, None);
        let b = render("m00002", 1, None);
        let body = format!("text\n{a}\n{b}");
        assert_eq!(strip(&body), format!("text\n{a}"));
    }
}
