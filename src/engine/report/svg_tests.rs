use crate::engine::model::identity::IdSet;

use super::*;
use crate::engine::compress::panel::{self, Ledger, PanelInput, reclaimed_by_call, summary_tokens};
use crate::engine::model::message::{CoreMessage, Role};
use crate::engine::model::state::CompressionState;
use crate::engine::model::summary::render_summary;
use crate::engine::report::map::tests::{fixture, seg, with_refs};
use crate::engine::report::map::{history_segments, reclaimed_by_block, view_segments};
use crate::engine::test_support::block;
use crate::engine::test_support::pruned as prune;

/// What the segments are sized by in these tests: the estimator alone.
fn estimate(m: &CoreMessage) -> usize {
    tokens::estimate(&m.text)
}

/// Figures of a request of `request` tokens, `host` of them the host's,
/// against a window of `window`.
fn figures(request: usize, host: usize, window: usize) -> Figures {
    Figures {
        window,
        budget: window,
        request,
        before_cuts: request,
        source: crate::engine::pressure::gauge::Source::Estimate,
        ratio: 1.0,
        breakdown: crate::engine::pressure::ranges::Breakdown {
            host,
            ..Default::default()
        },
    }
}

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
    let zone: IdSet<'_> = ["u2", "a3"].into_iter().collect();
    let h = history_segments(&history, &view, &st, &zone, &estimate);
    let v = view_segments(&view, &st, &zone, &estimate);
    let reclaimed = reclaimed_by_block(&history, &view, &st.blocks, &|m| tokens::estimate(&m.text));
    svg(&SvgInput {
        session: "s<1>",
        history: &h,
        view: &v,
        figures: &figures(40, 0, 100),
        compactions: &[],
        blocks: &st.blocks,
        reclaimed: &reclaimed,
        bill: None,
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

/// A session whose first block covers the first user message (the task):
/// the task, an answer, a tool exchange, then a visible tail.
fn task_covered() -> (Vec<CoreMessage>, CompressionState) {
    let history = vec![
        CoreMessage::text("u1", Role::User, "the task, in detail. ".repeat(300)),
        CoreMessage::text("a1", Role::Assistant, "looking into it. ".repeat(100)),
        CoreMessage::tool_call("c1", "t1", "Read", r#"{"file_path":"lib/a.ex"}"#),
        CoreMessage::tool_result("r1", "t1", "Read", "defmodule A do end\n".repeat(400)),
        CoreMessage::text("u2", Role::User, "next"),
        CoreMessage::text("a2", Role::Assistant, "done"),
    ];
    let mut st = with_refs(&history);
    let mut b1 = block("b1", 1, &["u1", "a1", "c1", "r1"]);
    (b1.start_ref, b1.end_ref) = ("m00001".into(), "m00004".into());
    st.blocks.push(b1);
    (history, st)
}

#[test]
fn reclaimed_leaves_out_the_pinned_task_and_is_one_figure_everywhere() {
    let (history, mut st) = task_covered();
    // A counter that is not the estimate: every surface must use the one given.
    let count = |t: &str| t.chars().count();
    let counter = |m: &CoreMessage| count(&m.text);
    let view = prune(&history, &st);
    assert!(
        view.iter().any(|m| m.id == "u1"),
        "prune keeps the task visible"
    );
    let b1 = st.blocks[0].clone();
    let taken: usize = ["a1", "c1", "r1"]
        .iter()
        .map(|id| count(&history.iter().find(|m| m.id == *id).unwrap().text))
        .sum();
    let summary = count(&render_summary(&b1).text);
    assert!(summary > count(crate::engine::model::summary::SUMMARY_HEADER) + b1.summary.len());
    let expected = taken - summary;
    let r = Ledger::new(&st.blocks, &history, &view, &counter).reclaimed(&b1);
    assert_eq!(
        (r.taken, r.summary, r.tokens),
        (taken, summary, expected),
        "the task is not counted"
    );
    assert_eq!(summary_tokens(&b1, &counter), summary);

    // The panel, the map and the SVG label report the same figure.
    let call = reclaimed_by_call([&b1], &st.blocks, &history, &view, &counter);
    assert_eq!(call, r);
    let text = panel::render(
        &PanelInput {
            before: 20_000,
            after: 20_000,
            blocks: vec![(&b1, false)],
            ..PanelInput::default()
        },
        call,
    );
    let figure = tokens::format(expected);
    assert!(
        text.starts_with(&format!(
            "▣ noa | context 20K → 20K tokens · ~{figure} reclaimed"
        )),
        "{text}"
    );
    let by_block = reclaimed_by_block(&history, &view, &st.blocks, &counter);
    assert_eq!(by_block["b1"], r);
    let segs = history_segments(&history, &view, &st, &IdSet::default(), &estimate);
    let covered = segs.iter().find(|s| s.block == "b1").unwrap();
    assert_eq!(
        block_label(covered, 3, &by_block, 1000.0).as_deref(),
        Some(format!("b1 · T1 · 3 msgs · {figure} reclaimed").as_str())
    );
    let drawn = svg(&SvgInput {
        session: "s",
        history: &segs,
        view: &view_segments(&view, &st, &IdSet::default(), &estimate),
        figures: &figures(100, 0, 1000),
        compactions: &[],
        blocks: &st.blocks,
        reclaimed: &by_block,
        bill: None,
    });
    assert!(
        drawn.contains(&format!(">b1 · T1 · 3 msgs · {figure} reclaimed</text>")),
        "{drawn}"
    );

    // Folded into a tier-2 block, b1 keeps its figure; b2 reclaims b1's
    // summary less its own, floored at 0.
    st.blocks[0].active = false;
    let mut b2 = block("b2", 2, &["u1", "a1", "c1", "r1"]);
    b2.direct_message_ids.clear();
    b2.direct_block_ids = vec!["b1".into()];
    st.blocks.push(b2.clone());
    let view = prune(&history, &st);
    let by_block = reclaimed_by_block(&history, &view, &st.blocks, &counter);
    assert_eq!(by_block["b1"], r);
    let own = count(&render_summary(&b2).text);
    assert_eq!(
        by_block["b2"],
        panel::Reclaimed {
            taken: summary,
            summary: own,
            tokens: summary.saturating_sub(own),
        }
    );
}

/// The view's bar ends at the figure it is labelled with: where the
/// provider counts more than the messages come to, the host's share is
/// drawn first; where it counts less, the messages are drawn smaller.
#[test]
fn the_bar_is_drawn_to_its_label_host_share_included() {
    let (history, view, st) = fixture();
    let zone = IdSet::default();
    let (h, v) = (
        history_segments(&history, &view, &st, &zone, &estimate),
        view_segments(&view, &st, &zone, &estimate),
    );
    let messages: usize = v.iter().map(|s| s.tokens).sum();
    let reclaimed = BTreeMap::new();
    let drawn = |sent: usize| {
        svg(&SvgInput {
            session: "s",
            history: &h,
            view: &v,
            figures: &figures(sent, sent.saturating_sub(messages), 1000),
            compactions: &[],
            blocks: &st.blocks,
            reclaimed: &reclaimed,
            bill: None,
        })
    };
    // The end of the bar: the right edge of its last rect in the view row.
    let end = |s: &str| -> f64 {
        let row = &s[s.rfind("fill=\"#f4f4f4\"").unwrap()..];
        let row = &row[..row.find("<text").unwrap()];
        row.split("<rect x=\"")
            .skip(1)
            .map(|r| {
                let x: f64 = r.split('"').next().unwrap().parse().unwrap();
                let w: f64 = r
                    .split("width=\"")
                    .nth(1)
                    .unwrap()
                    .split('"')
                    .next()
                    .unwrap()
                    .parse()
                    .unwrap();
                x + w
            })
            .fold(0.0, f64::max)
    };
    let x_of = |t: usize| MARGIN + t as f64 / 1000.0 * INNER;
    let with_host = drawn(messages + 300);
    assert!(
        with_host.contains("the host's prompt and tools · 300 tokens"),
        "{with_host}"
    );
    assert!((end(&with_host) - x_of(messages + 300)).abs() < 0.5);
    let smaller = drawn(messages / 2);
    assert!(!smaller.contains("the host's prompt and tools ·"));
    assert!((end(&smaller) - x_of(messages / 2)).abs() < 0.5);
}
