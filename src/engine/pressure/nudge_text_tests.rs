use super::*;
use crate::engine::compress::reclaim::Dead;
use crate::engine::pressure::prompt::tests::{has_concrete_block, has_concrete_ref};
use crate::engine::test_support::block;

fn range(
    start: &str,
    end: &str,
    count: usize,
    tokens: usize,
    tool: u32,
    users: usize,
) -> RangeInfo {
    RangeInfo {
        start_ref: start.into(),
        end_ref: end.into(),
        count,
        tokens,
        chars: tokens * 4,
        tool_pct: tool,
        user_messages: users,
        holds_task: false,
    }
}

fn protect(start: &str, end: &str, count: usize, tokens: usize, tools: &[&str]) -> ProtectedRange {
    ProtectedRange {
        start_ref: start.into(),
        end_ref: end.into(),
        count,
        tokens,
        tools: tools.iter().map(|t| t.to_string()).collect(),
        reason: ProtectReason::Recent,
    }
}

fn span(id: &str, tier: u8, start: &str, end: &str) -> BlockSpan {
    BlockSpan {
        block_id: id.into(),
        tier,
        start_ref: start.into(),
        end_ref: end.into(),
    }
}

fn target(
    id: &str,
    tier: u8,
    topic: &str,
    summary_chars: usize,
    msgs: usize,
    tokens: usize,
) -> Block {
    let ids: Vec<String> = (1..=msgs).map(|i| format!("m{i:05}")).collect();
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let mut b = block(id, tier, &refs);
    b.topic = topic.into();
    b.summary = "x".repeat(summary_chars);
    b.compressed_tokens = tokens;
    b
}

/// The conformance sample: two compressible ranges, one protected range, one
/// active block, a breakdown and growth; tier nudges add two targets.
struct Sample {
    ranges: Vec<RangeInfo>,
    protected: Vec<ProtectedRange>,
    blocks: Vec<BlockSpan>,
    targets: Vec<Block>,
}

fn sample() -> Sample {
    Sample {
        ranges: vec![
            range("m00012", "m00045", 34, 12_300, 84, 2),
            range("m00051", "m00080", 28, 8_100, 61, 0),
        ],
        protected: vec![protect("m00090", "m00095", 6, 9_700, &["Read", "Bash"])],
        blocks: vec![span("b3", 1, "m00001", "m00011")],
        targets: vec![
            target("b3", 1, "JWT 认证方案", 1200, 34, 12_400),
            target("b7", 1, "", 900, 28, 9_100),
        ],
    }
}

impl Sample {
    fn input(&self, tier: u8, emergency: bool) -> NudgeInput<'_> {
        NudgeInput {
            tier,
            emergency,
            ranges: &self.ranges,
            protected: &self.protected,
            blocks: &self.blocks,
            breakdown: Breakdown {
                tool: 61_400,
                text: 9_300,
                summaries: 12_100,
                ..Breakdown::default()
            },
            growth: 24_100,
            truncated: 0,
            targets: if tier >= 2 {
                self.targets.iter().collect()
            } else {
                Vec::new()
            },
            reclaim: if tier <= 1 { 14_200 } else { 0 },
            dead: Dead::default(),
        }
    }
}

#[test]
fn a_nudge_counts_the_stale_reads_its_compression_reclaims_too() {
    let sample = sample();
    let plain = render(&sample.input(1, false), &Sections::default());
    assert!(!plain.contains("stale read"), "{plain}");
    let dead = Dead {
        outputs: 3,
        tokens: 8_000,
    };
    let with = render(
        &NudgeInput {
            dead,
            ..sample.input(1, false)
        },
        &Sections::default(),
    );
    assert!(
        with.contains("noa also replaces 3 dead tool output(s) (reads of files changed since, outputs repeated word for word; ~8.0K tokens)"),
        "{with}"
    );
}

fn text(tier: u8, emergency: bool) -> String {
    render(&sample().input(tier, emergency), &Sections::default())
}

#[test]
fn gentle_nudge() {
    let t = text(1, false);
    for needle in [
        "This is an efficiency nudge, not a warning",
        "compress it now, all in one call",
        "If nothing qualifies yet, carry on with your task; this note is advisory.",
        "WHY COMPRESS",
        "Context breakdown: 61K tool | 12K summaries | 9.3K text\n+24K since last nudge",
        "GOOD TIMES TO COMPRESS",
        "DO NOT COMPRESS",
        "USING COMPRESS",
        "WRITING THE SUMMARY",
        "Compressible ranges (2, oldest first):",
        "Active blocks (1): b3(T1)=m00001–m00011",
        "Free at least 14K in this call, oldest ranges first",
        "Send all the ranges you pick in a single Compress call",
    ] {
        assert!(t.contains(needle), "gentle nudge lacks {needle:?}");
    }
    assert!(t.starts_with("This is an efficiency nudge"));
    assert!(t.ends_with("`content: [{…}, {…}]`."));
    assert!(!t.contains("CONTEXT LIMIT REACHED"));
    assert!(!t.contains("TRIGGER"));
}

#[test]
fn gentle_sections_come_in_order() {
    let t = text(1, false);
    let order = [
        "This is an efficiency nudge",
        "WHY COMPRESS",
        "Context breakdown:",
        "GOOD TIMES TO COMPRESS",
        "DO NOT COMPRESS",
        "USING COMPRESS",
        "WRITING THE SUMMARY",
        "Compressible ranges",
        "Active blocks",
        "Send all the ranges",
    ];
    let positions: Vec<usize> = order.iter().map(|n| t.find(n).unwrap()).collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{positions:?}");
}

#[test]
fn emergency_nudge() {
    let t = text(1, true);
    assert!(t.starts_with("CONTEXT LIMIT REACHED — compress now"));
    assert!(t.contains("Start with tool output you have already read and used."));
    assert!(t.contains("DO NOT COMPRESS"));
    assert!(t.contains("\"startId\""));
    assert!(t.contains(
        r#"{"topic": "...", "content": [{"startId": "<ref>", "endId": "<ref>", "summary": "..."}]}"#
    ));
    assert!(t.contains("compress the oldest work first"));
    assert!(t.contains("WRITING THE SUMMARY"));
    assert!(t.contains("Compressible ranges (2, oldest first):"));
    assert!(t.contains("Active blocks (1):"));
    assert!(!t.contains("GOOD TIMES TO COMPRESS"));
    assert!(!t.contains("efficiency nudge"));
    assert!(!t.contains("Send all the ranges"));
}

#[test]
fn tier2_nudge() {
    let t = text(2, false);
    for needle in [
        "This is an efficiency nudge",
        "WHY COMPRESS",
        "Context breakdown:",
        "[TIER 2 DISTILLATION TRIGGER]",
        "Your tier-1 summaries have piled up.",
        "HOW THE TIERS FIT TOGETHER",
        "Target tier-1 blocks to distill (2):",
        "  b3  34 msgs  12K→300  \"JWT 认证方案\"",
        "  b7  28 msgs  9.1K→225",
        "USING COMPRESS",
        r#"Example: Compress({"content": [{"startId": "<oldest target bN>", "endId": "<newest target bN>", "summary": "..."}]})"#,
        "WRITING THE SUMMARY",
        "TIER 2 — DISTILLING SUMMARIES",
    ] {
        assert!(t.contains(needle), "tier-2 nudge lacks {needle:?}");
    }
    assert!(!t.contains("GOOD TIMES TO COMPRESS"));
    assert!(!t.contains("Compressible ranges"));
    assert!(!t.contains("TIER 3 — CONDENSING"));
    assert!(t.ends_with(tier2_rules()));
}

#[test]
fn tier3_nudge() {
    let mut s = sample();
    s.targets = vec![
        target("b9", 2, "auth", 400, 60, 900),
        target("b12", 2, "deploy", 300, 40, 700),
    ];
    let t = render(&s.input(3, false), &Sections::default());
    assert!(t.contains("[TIER 3 CONDENSATION TRIGGER]"));
    assert!(t.contains("Your tier-2 summaries have piled up."));
    assert!(t.contains("Target tier-2 blocks to condense (2):"));
    assert!(t.contains("TIER 3 — CONDENSING TO AN INDEX"));
    assert!(!t.contains("TIER 2 — DISTILLING"));
    assert!(t.ends_with(tier3_rules()));
}

#[test]
fn tier_emergency_nudges() {
    let t = text(2, true);
    assert!(t.contains("[EMERGENCY — TIER 2 DISTILLATION] The context is at its limit"));
    assert!(!t.contains("[TIER 2 DISTILLATION TRIGGER]"));
    assert!(
        !t.contains("efficiency nudge"),
        "an emergency is not advisory"
    );
    assert!(t.starts_with("WHY COMPRESS"));

    let t = text(3, true);
    assert!(t.contains("[EMERGENCY — TIER 3 CONDENSATION] The context is at its limit"));
}

#[test]
fn tier_out_of_range_is_clamped() {
    assert_eq!(text(0, false), text(1, false));
    assert_eq!(text(9, false), text(3, false));
}

#[test]
fn efficiency_note_override_replaces() {
    let s = sample();
    let custom = Sections {
        efficiency_note: Some("CUSTOM EFFICIENCY NOTE".into()),
        ..Sections::default()
    };
    let t = render(&s.input(1, false), &custom);
    assert!(t.starts_with("CUSTOM EFFICIENCY NOTE\n\nWHY COMPRESS"));
    assert!(!t.contains("This is an efficiency nudge"));
    let t = render(&s.input(2, false), &custom);
    assert!(t.starts_with("CUSTOM EFFICIENCY NOTE"));
}

#[test]
fn empty_override_removes_without_leading_blank() {
    let s = sample();
    let removed = Sections {
        efficiency_note: Some(String::new()),
        ..Sections::default()
    };
    let t = render(&s.input(1, false), &removed);
    assert!(t.starts_with("WHY COMPRESS"));
    assert!(!t.contains("This is an efficiency nudge"));
}

#[test]
fn other_surface_overrides() {
    let s = sample();
    let custom = Sections {
        philosophy: Some(String::new()),
        emergency_headline: Some("HOST ALARM".into()),
        tier2_guidance: Some("HOST T2".into()),
        tier3_guidance: Some(String::new()),
        ..Sections::default()
    };
    let gentle = render(&s.input(1, false), &custom);
    assert!(!gentle.contains("WHY COMPRESS"));
    assert!(
        !gentle.contains("\n\n\n"),
        "a removed section leaves no gap"
    );

    let emergency = render(&s.input(1, true), &custom);
    assert!(emergency.starts_with("HOST ALARM\n\n"));
    assert!(!emergency.contains("CONTEXT LIMIT REACHED"));

    let t2 = render(&s.input(2, false), &custom);
    assert!(t2.contains("[TIER 2 DISTILLATION TRIGGER]\n\nHOST T2\n\nHOW THE TIERS"));

    let t3 = render(&s.input(3, false), &custom);
    assert!(t3.contains("[TIER 3 CONDENSATION TRIGGER]\n\nHOW THE TIERS"));
    assert!(!t3.contains("Your tier-2 summaries have piled up."));
}

#[test]
fn no_text_is_blank_or_has_blank_runs() {
    for (tier, emergency) in [
        (1, false),
        (1, true),
        (2, false),
        (2, true),
        (3, false),
        (3, true),
    ] {
        let t = text(tier, emergency);
        assert!(!t.starts_with('\n') && !t.ends_with('\n'));
        assert!(!t.contains("\n\n\n"), "tier {tier} emergency {emergency}");
    }
}

/// Lines that carry real data: range rows, the block map, target rows.
fn is_data_line(line: &str) -> bool {
    let b = line.as_bytes();
    line.starts_with("Active blocks (")
        || (b.len() > 3
            && b.starts_with(b"  ")
            && matches!(b[2], b'm' | b'b')
            && b[3].is_ascii_digit())
}

#[test]
fn only_data_lines_hold_refs_and_block_ids() {
    let mut s = sample();
    s.protected.push(ProtectedRange {
        reason: ProtectReason::LastUserMessage,
        ..protect("m00200", "m00200", 1, 300, &[])
    });
    for tier in 1..=3 {
        for emergency in [false, true] {
            let mut input = s.input(tier, emergency);
            input.truncated = 2;
            let t = render(&input, &Sections::default());
            let mut data = 0;
            for line in t.lines() {
                if is_data_line(line) {
                    data += 1;
                    continue;
                }
                assert!(!has_concrete_ref(line), "tier {tier}: {line}");
                assert!(!has_concrete_block(line), "tier {tier}: {line}");
            }
            assert!(data > 0, "tier {tier} shows its data");
        }
    }
}

#[test]
fn breakdown_lines() {
    let b = Breakdown {
        tool: 61_400,
        code: 0,
        text: 9_300,
        ..Breakdown::default()
    };
    let line = format_breakdown(&b, 0);
    assert_eq!(line, "Context breakdown: 61K tool | 9.3K text");
    assert!(!line.contains("code"));

    let all = Breakdown {
        system: 2_000,
        tool: 500,
        summaries: 12_100,
        code: 3_300,
        text: 999,
        ..Breakdown::default()
    };
    assert_eq!(
        format_breakdown(&all, 0),
        "Context breakdown: 2.0K system | 500 tool | 12K summaries | 3.3K code | 999 text"
    );
}

#[test]
fn growth_line() {
    let b = Breakdown {
        tool: 1_000,
        ..Breakdown::default()
    };
    assert_eq!(
        format_breakdown(&b, 24_100),
        "Context breakdown: 1.0K tool\n+24K since last nudge"
    );
    assert_eq!(format_breakdown(&b, 0), "Context breakdown: 1.0K tool");
    assert_eq!(format_breakdown(&Breakdown::default(), 0), "");
}

#[test]
fn range_lines() {
    let s = sample();
    let t = format_ranges(&s.ranges[..1], &s.protected);
    assert_eq!(
        t,
        "Compressible ranges (1, oldest first):\n\
         \x20 m00012–m00045  34 msgs  12K [tool 84% | text 16%] · 2 user msgs\n\
         Not compressible now:\n\
         \x20 m00090–m00095  6 msgs  9.7K [PROTECTED: recent, the current step still uses them (Read, Bash)]"
    );
}

#[test]
fn range_line_user_counts() {
    let one = format_ranges(&[range("m00001", "m00009", 9, 4_000, 50, 1)], &[]);
    assert!(one.ends_with("  m00001–m00009  9 msgs  4.0K [tool 50% | text 50%] · 1 user msg"));
    let none = format_ranges(&[range("m00001", "m00009", 9, 4_000, 100, 0)], &[]);
    assert!(none.ends_with("  m00001–m00009  9 msgs  4.0K [tool 100% | text 0%]"));
    assert!(none.starts_with("Compressible ranges (1, oldest first):\n"));
}

#[test]
fn protected_lines_say_why_in_words() {
    let open = [range("m00001", "m00009", 9, 4_000, 50, 0)];
    let recent = protect("m00020", "m00030", 11, 5_000, &[]);
    let last_user = ProtectedRange {
        reason: ProtectReason::LastUserMessage,
        ..protect("m00040", "m00040", 1, 200, &[])
    };
    let t = format_ranges(&open, &[recent, last_user]);
    assert!(t.contains(
        "\n  m00020–m00030  11 msgs  5.0K [PROTECTED: recent, the current step still uses them]"
    ));
    assert!(t.contains("\n  m00040–m00040  1 msgs  200 [PROTECTED: the latest user message]"));
    assert!(t.starts_with("Compressible ranges (1, oldest first):"));
}

/// `apply` stops a block at the first message that must stay visible, so
/// a range offered across a protected span would be cut short: protected
/// spans are listed apart, touching or not.
#[test]
fn protected_spans_are_never_joined_to_a_range() {
    let t = format_ranges(
        &[
            range("m00001", "m00010", 10, 5_000, 50, 0),
            range("m00012", "m00020", 9, 4_000, 50, 0),
        ],
        &[ProtectedRange {
            reason: ProtectReason::LastUserMessage,
            ..protect("m00011", "m00011", 1, 100, &[])
        }],
    );
    let lines: Vec<&str> = t.lines().collect();
    assert_eq!(
        lines,
        [
            "Compressible ranges (2, oldest first):",
            "  m00001–m00010  10 msgs  5.0K [tool 50% | text 50%]",
            "  m00012–m00020  9 msgs  4.0K [tool 50% | text 50%]",
            "Not compressible now:",
            "  m00011–m00011  1 msgs  100 [PROTECTED: the latest user message]",
        ]
    );
}

#[test]
fn empty_ranges() {
    let t = format_ranges(&[], &[]);
    assert_eq!(
        t,
        "[No compressible ranges found — compress any content you have already used.]"
    );
    let t = format_ranges(&[], &[protect("m00001", "m00005", 5, 900, &["Read"])]);
    assert!(t.starts_with("[No compressible ranges found"));
}

#[test]
fn block_map_folds_older_blocks() {
    let spans: Vec<BlockSpan> = (0..12)
        .map(|i| {
            span(
                &format!("b{}", i + 1),
                1,
                &format!("m{:05}", i * 10 + 1),
                &format!("m{:05}", i * 10 + 9),
            )
        })
        .collect();
    let t = format_block_map(&spans);
    assert!(t.starts_with("Active blocks (12): …+4 older · b5(T1)=m00041–m00049 · "));
    assert!(t.ends_with("b12(T1)=m00111–m00119"));
    assert_eq!(t.matches('=').count(), 8);
    assert!(!t.contains("b4("));

    let eight = format_block_map(&spans[..8]);
    assert!(eight.starts_with("Active blocks (8): b1(T1)="));
    assert!(!eight.contains("older"));
}

#[test]
fn block_map_shows_tier() {
    assert_eq!(
        format_block_map(&[span("b3", 2, "m00001", "m00009")]),
        "Active blocks (1): b3(T2)=m00001–m00009"
    );
}

#[test]
fn block_map_empty() {
    assert_eq!(format_block_map(&[]), "");
    let mut s = sample();
    s.blocks.clear();
    let t = render(&s.input(1, false), &Sections::default());
    assert!(!t.contains("Active blocks"));
    assert!(!t.contains("\n\n\n"));
}

#[test]
fn tier_targets() {
    let t = format_targets(2, &[&target("b3", 1, "JWT", 1200, 34, 12_400)]);
    assert_eq!(
        t,
        "Target tier-1 blocks to distill (1):\n  b3  34 msgs  12K→300  \"JWT\""
    );
    let untitled = format_targets(3, &[&target("b9", 2, "", 40, 3, 999)]);
    assert_eq!(
        untitled,
        "Target tier-2 blocks to condense (1):\n  b9  3 msgs  999→10"
    );
}

#[test]
fn tier_targets_empty() {
    let t = format_targets(2, &[]);
    assert!(t.contains("none"));
    assert_eq!(t, "Target blocks: none — no active tier-1 blocks to fold.");
    assert_eq!(
        format_targets(3, &[]),
        "Target blocks: none — no active tier-2 blocks to fold."
    );
}

#[test]
fn truncation_notice_texts() {
    assert_eq!(truncation_notice(0), "");
    let one = truncation_notice(1);
    assert!(one.starts_with("1 tool result in this context was cut short mechanically"));
    assert!(one.contains("\"[truncated for context space\""));
    assert!(one.contains("Do not run that tool again"));
    let three = truncation_notice(3);
    assert!(three.starts_with("3 tool results in this context were cut short mechanically"));
    assert!(three.contains("Do not run those tools again just to see the rest"));
    assert!(three.contains("archive"));
}

#[test]
fn truncation_notice_placement() {
    let s = sample();
    let mut input = s.input(1, true);
    input.truncated = 2;
    let t = render(&input, &Sections::default());
    let headline = t.find("CONTEXT LIMIT REACHED").unwrap();
    let notice = t.find("2 tool results").unwrap();
    let philosophy = t.find("WHY COMPRESS").unwrap();
    assert!(headline < notice && notice < philosophy);

    let mut input = s.input(2, false);
    input.truncated = 1;
    let t = render(&input, &Sections::default());
    assert!(t.starts_with("1 tool result in this context"));

    assert!(!text(1, true).contains("cut short mechanically"));
}

#[test]
fn rough_size_counts_the_rendered_text() {
    let s = sample();
    for tier in 1..=3 {
        let input = s.input(tier, false);
        let size = rough_size(&input);
        assert_eq!(
            size,
            tokens::estimate(&render(&input, &Sections::default()))
        );
        assert!(size > 500, "tier {tier}: {size}");
    }
    let more = Sample {
        ranges: (0..20)
            .map(|i| {
                range(
                    &format!("m{:05}", i * 10 + 1),
                    &format!("m{:05}", i * 10 + 5),
                    5,
                    900,
                    50,
                    0,
                )
            })
            .collect(),
        ..sample()
    };
    assert!(rough_size(&more.input(1, false)) > rough_size(&s.input(1, false)));
}

#[test]
fn conformance_sample_lines() {
    let t = text(1, false);
    assert!(t.contains("\n  m00012–m00045  34 msgs  12K [tool 84% | text 16%] · 2 user msgs\n"));
    assert!(t.contains("\n  m00051–m00080  28 msgs  8.1K [tool 61% | text 39%]\n"));
    assert!(t.contains(
        "\nNot compressible now:\n  m00090–m00095  6 msgs  9.7K [PROTECTED: recent, the current step still uses them (Read, Bash)]\n"
    ));
}

#[test]
fn a_nudge_never_asks_for_more_than_it_offers() {
    assert!(reclaim_line(14_200, 20_000).starts_with("Free at least 14K in this call"));
    let short = reclaim_line(28_000, 21_000);
    assert!(short.starts_with("Compress every range listed in this call, about 21K in all"));
    assert!(short.contains("less than the 28K"), "{short}");
    assert!(!short.contains("Free at least"));
    assert_eq!(reclaim_line(0, 5_000), "");
}
