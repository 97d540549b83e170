use std::collections::HashSet;

use super::*;
use crate::engine::map::tests::{fixture, seg};
use crate::engine::map::{history_segments, view_segments};

/// A tag-stack check: every element opened is closed in order, and
/// attribute values are quoted.
fn well_formed(svg: &str) -> Result<(), String> {
    let body = svg
        .strip_prefix(r##"<?xml version="1.0" encoding="UTF-8"?>"##)
        .ok_or("no XML declaration")?;
    let mut stack: Vec<String> = Vec::new();
    let mut rest = body;
    let mut roots = 0;
    while let Some(open) = rest.find('<') {
        let text = &rest[..open];
        if text.contains('>') || (text.contains('&') && !entities_ok(text)) {
            return Err(format!("bad text {text:?}"));
        }
        if stack.is_empty() && !text.trim().is_empty() {
            return Err(format!("text outside the root: {text:?}"));
        }
        let close = rest[open..].find('>').ok_or("unclosed tag")? + open;
        let tag = &rest[open + 1..close];
        rest = &rest[close + 1..];
        if let Some(name) = tag.strip_prefix('/') {
            let top = stack.pop().ok_or(format!("stray </{name}>"))?;
            if top != name {
                return Err(format!("</{name}> closes <{top}>"));
            }
            continue;
        }
        let self_closing = tag.ends_with('/');
        let tag = tag.trim_end_matches('/');
        let name = tag.split_whitespace().next().ok_or("empty tag")?;
        if tag.matches('"').count() % 2 != 0 {
            return Err(format!("unbalanced quotes in <{tag}>"));
        }
        if stack.is_empty() {
            roots += 1;
        }
        if !self_closing {
            stack.push(name.to_string());
        }
    }
    if !stack.is_empty() || roots != 1 {
        return Err(format!("open at end: {stack:?}, {roots} roots"));
    }
    Ok(())
}

fn entities_ok(text: &str) -> bool {
    text.split('&').skip(1).all(|s| {
        ["amp;", "lt;", "gt;", "quot;", "apos;"]
            .iter()
            .any(|e| s.starts_with(e))
    })
}

fn sample_svg() -> String {
    let (history, view, mut st) = fixture();
    st.blocks[0].topic = "reading <config> & \"setup\"".into();
    let zone: HashSet<&str> = ["u2", "a3"].into();
    let h = history_segments(&history, &view, &st, &zone);
    let v = view_segments(&view, &st, &zone);
    svg(&SvgInput {
        session: "s<1>",
        history: &h,
        view: &v,
        measured: 40,
        limit: 100,
        blocks: &st.blocks,
    })
}

#[test]
fn svg_is_well_formed_with_legend_and_window_line() {
    let s = sample_svg();
    well_formed(&s).unwrap_or_else(|e| panic!("{e}\n{s}"));
    assert!(s.contains("class=\"window-limit\""), "{s}");
    for (_, label) in LEGEND {
        assert!(
            s.contains(&format!(">{label}</text>")),
            "legend lacks {label}"
        );
    }
    assert!(s.contains("noa context map · s&lt;1&gt;"));
    assert!(s.contains("reading &lt;config&gt; &amp; &quot;setup&quot;"));
    assert!(!s.contains("<script") && !s.contains("href"));
}

#[test]
fn the_checker_catches_broken_markup() {
    assert!(well_formed("<?xml version=\"1.0\" encoding=\"UTF-8\"?><svg><g></svg>").is_err());
    assert!(well_formed("<?xml version=\"1.0\" encoding=\"UTF-8\"?><svg>a & b</svg>").is_err());
    assert!(well_formed("<?xml version=\"1.0\" encoding=\"UTF-8\"?><svg><g/></svg>").is_ok());
}

#[test]
fn covered_spans_are_labelled_with_their_block() {
    let s = sample_svg();
    assert!(s.contains(">b1 · T1 · 3 msgs"), "{s}");
}

#[test]
fn segments_are_as_wide_as_their_tokens() {
    let segs = [seg(Class::User, 100), seg(Class::Tool, 300)];
    let rows = lay_out(&segs, 1);
    let w: Vec<f64> = rows[0].iter().map(|p| p.x1 - p.x0).collect();
    assert!((w[1] / w[0] - 3.0).abs() < 1e-9, "{w:?}");
    assert!((w[0] + w[1] - INNER).abs() < 1e-9);
    // Wrapped on two rows, the tool output crosses into the second.
    let rows = lay_out(&segs, 2);
    assert_eq!(rows[0].len(), 2);
    assert_eq!(rows[1].len(), 1);
    assert!((rows[1][0].x1 - (MARGIN + INNER)).abs() < 1e-9);
}
