use super::*;
use proptest::prelude::*;
use serde_json::json;

fn range(start: &str, end: &str, summary: &str) -> CompressRange {
    CompressRange {
        start: start.to_owned(),
        end: end.to_owned(),
        summary: summary.to_owned(),
        topic: String::new(),
        summary_max_chars: None,
    }
}

/// Asserts a successful parse with exactly these (start, end, summary) triples.
fn assert_ranges(parsed: &ParsedArgs, expected: &[(&str, &str, &str)]) {
    assert!(parsed.ok, "not ok: {parsed:#?}");
    let got: Vec<(&str, &str, &str)> = parsed
        .ranges
        .iter()
        .map(|r| (r.start.as_str(), r.end.as_str(), r.summary.as_str()))
        .collect();
    assert_eq!(got, expected, "{parsed:#?}");
}

const ONE: &str =
    r#"{"content":[{"startId":"m00003","endId":"m00009","summary":"read the config loader"}]}"#;

// ---- conformance: section 5 ----

#[test]
fn well_formed_call_parses_every_field() {
    let p = parse_compress_args(
        r#"{"content":[{"startId":"m00012","endId":"m00045","summary":"did the thing","topic":"auth"}]}"#,
    );
    assert!(p.ok);
    assert_eq!(p.kind, ParseKind::Ok);
    assert_eq!(
        p.ranges,
        vec![CompressRange {
            topic: "auth".into(),
            ..range("m00012", "m00045", "did the thing")
        }]
    );
    assert!(!p.repaired());
    assert_eq!(p.invalid_items, 0);
}

#[test]
fn blank_and_null_inputs_are_empty() {
    for raw in ["", "   ", "null", " \n null \t", "\"\"", "```json\n```"] {
        let p = parse_compress_args(raw);
        assert_eq!(p.kind, ParseKind::EmptyInput, "{raw:?}");
        assert!(!p.ok);
        assert!(p.ranges.is_empty());
    }
}

#[test]
fn object_without_content_is_missing_content() {
    let p = parse_compress_args(r#"{"topic":"auth"}"#);
    assert_eq!(p.kind, ParseKind::MissingContent);
    assert!(!p.ok);
    assert_eq!(p.topic, "auth");
    assert_eq!(
        parse_compress_args(r#"{"content":null}"#).kind,
        ParseKind::MissingContent
    );
}

#[test]
fn markdown_fence_is_stripped() {
    for raw in [
        format!("```json\n{ONE}\n```"),
        format!("```\n{ONE}\n```"),
        format!("```JSON {ONE}```"),
    ] {
        let p = parse_compress_args(&raw);
        assert_ranges(&p, &[("m00003", "m00009", "read the config loader")]);
        assert_eq!(p.kind, ParseKind::Ok);
        assert_eq!(p.repairs, vec![REPAIR_FENCE], "{raw}");
    }
}

#[test]
fn trailing_commas_are_tolerated() {
    let p = parse_compress_args(r#"{"content":[{"startId":"m1","endId":"m2","summary":"s",},],}"#);
    assert_ranges(&p, &[("m1", "m2", "s")]);
    assert_eq!(p.kind, ParseKind::Ok);
    assert_eq!(p.repairs, vec![REPAIR_TRAILING_COMMAS]);
}

#[test]
fn raw_newline_inside_a_summary_is_escaped() {
    let p = parse_compress_args(
        "{\"content\":[{\"startId\":\"m1\",\"endId\":\"m2\",\"summary\":\"first line\nsecond line\"}]}",
    );
    assert_ranges(&p, &[("m1", "m2", "first line\nsecond line")]);
    assert_eq!(p.repairs, vec![REPAIR_NEWLINES]);
}

#[test]
fn stringified_content_is_parsed() {
    let p = parse_compress_args(
        r#"{"content":"[{\"startId\":\"m1\",\"endId\":\"m2\",\"summary\":\"s\"}]"}"#,
    );
    assert_ranges(&p, &[("m1", "m2", "s")]);
    assert_eq!(p.kind, ParseKind::Ok);
    assert_eq!(p.repairs, vec![REPAIR_STRINGIFIED]);
}

#[test]
fn doubly_stringified_object_is_unwrapped() {
    let once = serde_json::to_string(&Value::String(ONE.to_owned())).unwrap();
    let p = parse_compress_args(&once);
    assert_ranges(&p, &[("m00003", "m00009", "read the config loader")]);
    assert_eq!(p.repairs, vec![REPAIR_UNWRAPPED]);

    let twice = serde_json::to_string(&Value::String(once)).unwrap();
    let p = parse_compress_args(&twice);
    assert_ranges(&p, &[("m00003", "m00009", "read the config loader")]);
    assert_eq!(p.repairs, vec![REPAIR_UNWRAPPED]);
}

#[test]
fn stringified_content_missing_its_last_brace_is_tail_repaired() {
    let p = parse_compress_args(
        r#"{"content":"[{\"startId\":\"m1\",\"endId\":\"m2\",\"summary\":\"s\"]"}"#,
    );
    assert_ranges(&p, &[("m1", "m2", "s")]);
    assert_eq!(p.kind, ParseKind::Ok);
    assert_eq!(p.repairs, vec![REPAIR_STRINGIFIED, REPAIR_TAIL]);
}

#[test]
fn truncated_call_keeps_its_complete_entries() {
    let p = parse_compress_args(
        r#"{"content":[{"startId":"m1","endId":"m2","summary":"first"},{"startId":"m3","endId":"m4","summary":"seco"#,
    );
    assert_ranges(&p, &[("m1", "m2", "first")]);
    assert_eq!(p.kind, ParseKind::Truncated);
    assert!(p.repairs.contains(&REPAIR_SALVAGED));
    assert_eq!(p.invalid_reasons, vec!["entry 2: cut off before its end"]);
}

#[test]
fn ref_aliases_are_accepted() {
    let p = parse_compress_args(r#"{"content":[{"startRef":"m5","endRef":"m8","summary":"s"}]}"#);
    assert_ranges(&p, &[("m5", "m8", "s")]);
    let p = parse_compress_args(r#"{"content":[{"messageId":"m7","summary":"one message"}]}"#);
    assert_ranges(&p, &[("m7", "m7", "one message")]);
    // An explicit end wins over messageId for that end.
    let p = parse_compress_args(r#"{"content":[{"messageId":"m7","endId":"m9","summary":"s"}]}"#);
    assert_ranges(&p, &[("m7", "m9", "s")]);
}

#[test]
fn entries_inherit_top_level_topic_and_ceiling() {
    let p = parse_compress_args(
        r#"{"topic":"shared","summaryMaxChars":30000,"content":[
            {"startId":"m1","endId":"m2","summary":"a"},
            {"startId":"m3","endId":"m4","summary":"b","topic":"own","summaryMaxChars":1000}]}"#,
    );
    assert_eq!(p.kind, ParseKind::Ok);
    assert_eq!(p.topic, "shared");
    assert_eq!(
        (p.ranges[0].topic.as_str(), p.ranges[0].summary_max_chars),
        ("shared", Some(30000))
    );
    assert_eq!(
        (p.ranges[1].topic.as_str(), p.ranges[1].summary_max_chars),
        ("own", Some(1000))
    );
}

#[test]
fn invalid_entries_are_counted_with_reasons() {
    let p = parse_compress_args(
        r#"{"content":[{"startId":"m1","endId":"m2","summary":"good"},{"startId":"m3"},{"summary":"no refs"}]}"#,
    );
    assert_ranges(&p, &[("m1", "m2", "good")]);
    assert_eq!(p.kind, ParseKind::Ok);
    assert_eq!(p.invalid_items, 2);
    assert_eq!(
        p.invalid_reasons,
        vec![
            "entry 2: missing endId, missing summary",
            "entry 3: missing startId, missing endId"
        ]
    );
}

#[test]
fn no_valid_entry_is_not_ok() {
    let p = parse_compress_args(r#"{"content":[{"startId":"m1"}]}"#);
    assert_eq!(p.kind, ParseKind::NoValidRanges);
    assert!(!p.ok);
    assert!(p.ranges.is_empty());
    assert_eq!(p.invalid_items, 1);
    let p = parse_compress_args(r#"{"content":[]}"#);
    assert_eq!(
        (p.kind, p.ok, p.invalid_items),
        (ParseKind::NoValidRanges, false, 0)
    );
}

#[test]
fn plain_prose_is_malformed() {
    let p = parse_compress_args("this is just a sentence");
    assert_eq!(p.kind, ParseKind::MalformedJson);
    assert!(!p.ok);
    assert!(p.ranges.is_empty());
}

#[test]
fn raw_prefix_is_bounded_in_chars() {
    let p = parse_compress_args(&"y".repeat(5000));
    assert_eq!(p.raw_prefix.chars().count(), 800);
    assert_eq!(p.raw_len, 5000);
    assert_eq!(p.kind, ParseKind::MalformedJson);

    let p = parse_compress_args(&"ü".repeat(1000));
    assert_eq!(p.raw_prefix, "ü".repeat(800));
    assert_eq!(p.raw_len, 1000);
}

#[test]
fn strip_trailing_commas_leaves_string_literals_alone() {
    let out = strip_trailing_commas(r#"{"k":"v, ]","list":[3,4,], "n":{"a":1 , } }"#);
    assert_eq!(out, r#"{"k":"v, ]","list":[3,4], "n":{"a":1  } }"#);
    let escaped_quote = r#"{"k":"say \",}\" twice"}"#;
    assert_eq!(strip_trailing_commas(escaped_quote), escaped_quote);
}

#[test]
fn escape_raw_newlines_keeps_structural_newlines() {
    let out = escape_raw_newlines("{\n  \"note\": \"two\nlines\"\n}");
    assert_eq!(out.matches('\n').count(), 2);
    assert_eq!(out, "{\n  \"note\": \"two\\nlines\"\n}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["note"], "two\nlines");
}

#[test]
fn repair_tail_refuses_valid_json() {
    assert_eq!(
        repair_tail(r#"[{"startId":"m1","endId":"m2","summary":"s"}]"#),
        None
    );
    assert_eq!(
        repair_tail(r#"[{"startId":"m1","endId":"m2","summary":"s"]"#).as_deref(),
        Some(r#"[{"startId":"m1","endId":"m2","summary":"s"}]"#)
    );
}

// ---- our own cases ----

#[test]
fn kind_names_are_stable() {
    let all = [
        (ParseKind::Ok, "ok"),
        (ParseKind::EmptyInput, "empty-input"),
        (ParseKind::NotObject, "not-object"),
        (ParseKind::MissingContent, "missing-content"),
        (ParseKind::ContentNotArray, "content-not-array"),
        (ParseKind::NoValidRanges, "no-valid-ranges"),
        (ParseKind::Truncated, "truncated"),
        (ParseKind::MalformedJson, "malformed-json"),
    ];
    for (kind, name) in all {
        assert_eq!(kind.as_str(), name);
        assert_eq!(kind.to_string(), name);
    }
}

#[test]
fn non_object_top_levels_are_not_objects() {
    for raw in [
        "[1,2]",
        "42",
        "true",
        r#"[{"startId":"m1","endId":"m2","summary":"s"}]"#,
        "\"m00012\"",
    ] {
        let p = parse_compress_args(raw);
        assert_eq!(p.kind, ParseKind::NotObject, "{raw}");
        assert!(!p.ok);
    }
}

#[test]
fn content_of_the_wrong_shape_is_reported() {
    for raw in [
        r#"{"content":{"startId":"m1","endId":"m2","summary":"s"}}"#,
        r#"{"content":7}"#,
        r#"{"content":"compress the early part please"}"#,
        r#"{"content":"{\"startId\":\"m1\"}"}"#,
    ] {
        let p = parse_compress_args(raw);
        assert_eq!(p.kind, ParseKind::ContentNotArray, "{raw}");
        assert!(!p.ok);
    }
}

#[test]
fn fields_are_trimmed_and_numeric_strings_accepted() {
    let p = parse_compress_args(
        r#"{"topic":"  setup ","content":[{"startId":" m1 ","endId":"m2\n","summary":"  kept  ","summaryMaxChars":" 4000 "}]}"#,
    );
    assert_eq!(
        p.ranges,
        vec![CompressRange {
            topic: "setup".into(),
            summary_max_chars: Some(4000),
            ..range("m1", "m2", "kept")
        }]
    );
    // A blank summary is as good as none.
    let p = parse_compress_args(r#"{"content":[{"startId":"m1","endId":"m2","summary":"   "}]}"#);
    assert_eq!(p.invalid_reasons, vec!["entry 1: missing summary"]);
    // An entry that is not an object is named.
    let p =
        parse_compress_args(r#"{"content":["m1-m2",{"startId":"m3","endId":"m4","summary":"s"}]}"#);
    assert_eq!(p.invalid_reasons, vec!["entry 1: not an object"]);
    assert_ranges(&p, &[("m3", "m4", "s")]);
}

#[test]
fn non_ascii_summaries_survive_every_path() {
    let summary = "Получили токен; 認証フローを修正 — café ✅ 🦀";
    let obj =
        json!({"content": [{"startId": "m1", "endId": "m2", "summary": summary}]}).to_string();
    assert_ranges(&parse_compress_args(&obj), &[("m1", "m2", summary)]);
    let fenced = format!("```json\n{obj}\n```");
    assert_ranges(&parse_compress_args(&fenced), &[("m1", "m2", summary)]);
    // Cut right after a complete multibyte entry.
    let cut = format!(
        r#"{{"content":[{{"startId":"m1","endId":"m2","summary":"{summary}"}},{{"startId":"m3","summary":"🦀"#
    );
    let p = parse_compress_args(&cut);
    assert_eq!(p.kind, ParseKind::Truncated);
    assert_ranges(&p, &[("m1", "m2", summary)]);
}

#[test]
fn fences_inside_a_summary_are_not_treated_as_the_wrapper() {
    let summary = "Ran:\n```bash\ncargo test\n```\nand fixed ```inline``` quoting";
    let obj =
        json!({"content": [{"startId": "m4", "endId": "m6", "summary": summary}]}).to_string();
    assert_ranges(&parse_compress_args(&obj), &[("m4", "m6", summary)]);
    let fenced = format!("```json\n{obj}\n```");
    let p = parse_compress_args(&fenced);
    assert_ranges(&p, &[("m4", "m6", summary)]);
    assert_eq!(p.repairs, vec![REPAIR_FENCE]);
}

#[test]
fn brackets_inside_a_summary_do_not_confuse_repairs() {
    let summary = "the parser choked on \"]}\" and on ,] in the input";
    let obj =
        json!({"content": [{"startId": "m1", "endId": "m2", "summary": summary}]}).to_string();
    assert_ranges(&parse_compress_args(&obj), &[("m1", "m2", summary)]);
    // Same text, but the call is cut off in the second entry.
    let cut = format!(
        "{}{}",
        &obj[..obj.len() - 2],
        r#",{"startId":"m3","endId":"m4","summary":"half"#
    );
    let p = parse_compress_args(&cut);
    assert_eq!(p.kind, ParseKind::Truncated);
    assert_ranges(&p, &[("m1", "m2", summary)]);
    // And with the closing brace of the entry dropped.
    let broken = obj.replacen("\"}]}", "\"]}", 1);
    let p = parse_compress_args(&broken);
    assert_ranges(&p, &[("m1", "m2", summary)]);
    assert_eq!(p.repairs, vec![REPAIR_TAIL]);
}

#[test]
fn prose_around_the_object_is_skipped() {
    let p = parse_compress_args(&format!("Here are the ranges: {ONE}"));
    assert_ranges(&p, &[("m00003", "m00009", "read the config loader")]);
    assert_eq!(p.repairs, vec![REPAIR_LEADING_TEXT]);

    let p = parse_compress_args(&format!("Sure.\n```json\n{ONE}\n```\nLet me know."));
    assert_ranges(&p, &[("m00003", "m00009", "read the config loader")]);
    assert_eq!(p.repairs, vec![REPAIR_LEADING_TEXT, REPAIR_TRAILING_TEXT]);
}

#[test]
fn several_repairs_combine_in_a_stable_order() {
    let raw = "```json\n{\"content\":[{\"startId\":\"m1\",\"endId\":\"m2\",\"summary\":\"a\nb\",},],}\n```";
    let p = parse_compress_args(raw);
    assert_ranges(&p, &[("m1", "m2", "a\nb")]);
    assert_eq!(
        p.repairs,
        vec![REPAIR_FENCE, REPAIR_TRAILING_COMMAS, REPAIR_NEWLINES]
    );
    assert!(p.repaired());
}

#[test]
fn unstringified_content_missing_a_brace_is_tail_repaired() {
    let p = parse_compress_args(r#"{"content":[{"startId":"m1","endId":"m2","summary":"s"]}"#);
    assert_ranges(&p, &[("m1", "m2", "s")]);
    assert_eq!(p.kind, ParseKind::Ok);
    assert_eq!(p.repairs, vec![REPAIR_TAIL]);
}

#[test]
fn truncation_keeps_fields_written_before_content() {
    let p = parse_compress_args(
        r#"{"topic":"db","summaryMaxChars":"9000","content":[{"startId":"m1","endId":"m2","summary":"x"},{"st"#,
    );
    assert_eq!(p.kind, ParseKind::Truncated);
    assert_eq!(p.topic, "db");
    assert_eq!(p.ranges[0].topic, "db");
    assert_eq!(p.ranges[0].summary_max_chars, Some(9000));
}

#[test]
fn truncation_with_no_complete_entry_is_truncated_not_ok() {
    let p = parse_compress_args(r#"{"content":[{"startId":"m1","endId":"m2","summ"#);
    assert_eq!((p.kind, p.ok), (ParseKind::Truncated, false));
    assert_eq!(p.invalid_reasons, vec!["entry 1: cut off before its end"]);
    // Cut between entries: nothing is lost, nothing reported.
    let p = parse_compress_args(r#"{"content":[{"startId":"m1","endId":"m2","summary":"s"},"#);
    assert_ranges(&p, &[("m1", "m2", "s")]);
    assert_eq!((p.kind, p.invalid_items), (ParseKind::Truncated, 0));
}

#[test]
fn truncated_stringified_content_is_salvaged() {
    let p = parse_compress_args(
        r#"{"content":"[{\"startId\":\"m1\",\"endId\":\"m2\",\"summary\":\"ok\"},{\"startId\":\"m3\",\"summary\":\"cu"#,
    );
    assert_ranges(&p, &[("m1", "m2", "ok")]);
    assert_eq!(p.kind, ParseKind::Truncated);
    assert_eq!(p.repairs, vec![REPAIR_STRINGIFIED, REPAIR_SALVAGED]);
}

#[test]
fn truncated_double_stringified_object_is_salvaged() {
    let whole = serde_json::to_string(&Value::String(
        r#"{"content":[{"startId":"m1","endId":"m2","summary":"a\\b"},{"startId":"m3","endId":"m4","summary":"lost"}]}"#
            .to_owned(),
    ))
    .unwrap();
    // Cut inside the escape sequence of the second entry.
    let cut = &whole[..whole.find("lost").unwrap() - 1];
    let p = parse_compress_args(cut);
    assert_eq!(p.kind, ParseKind::Truncated);
    assert_ranges(&p, &[("m1", "m2", "a\\b")]);
}

#[test]
fn crlf_inside_strings_is_escaped() {
    let p = parse_compress_args(
        "{\r\n\"content\":[{\"startId\":\"m1\",\"endId\":\"m2\",\"summary\":\"a\r\nb\tc\"}]\r\n}",
    );
    assert_ranges(&p, &[("m1", "m2", "a\r\nb\tc")]);
}

#[test]
fn numeric_ids_are_kept_as_text_for_the_resolver() {
    let p = parse_compress_args(r#"{"content":[{"startId":12,"endId":"m14","summary":"s"}]}"#);
    assert_ranges(&p, &[("12", "m14", "s")]);
}

// ---- properties ----

fn arb_entry() -> impl Strategy<Value = (String, String, String, Option<String>)> {
    (
        "m[0-9]{1,5}",
        "m[0-9]{1,5}",
        any::<String>(),
        proptest::option::of(any::<String>()),
    )
}

proptest! {
    #[test]
    fn never_panics_on_any_input(raw in any::<String>()) {
        let p = parse_compress_args(&raw);
        prop_assert_eq!(p.ok, !p.ranges.is_empty());
        prop_assert_eq!(p.raw_len, raw.chars().count());
    }

    #[test]
    fn never_panics_on_json_like_input(raw in r#"[{}\[\]",:\\ \nmsa-z0-9`]{0,80}"#) {
        let p = parse_compress_args(&raw);
        prop_assert_eq!(p.ok, !p.ranges.is_empty());
    }

    #[test]
    fn well_formed_calls_round_trip(
        entries in proptest::collection::vec(arb_entry(), 1..4),
        top_topic in "[a-z ]{0,12}",
        wrapping in 0..5usize,
    ) {
        let content: Vec<Value> = entries
            .iter()
            .map(|(s, e, summary, topic)| {
                let mut obj = json!({"startId": s, "endId": e, "summary": summary});
                if let Some(t) = topic {
                    obj["topic"] = json!(t);
                }
                obj
            })
            .collect();
        let call = json!({"topic": top_topic, "content": content});
        let compact = call.to_string();
        let raw = match wrapping {
            0 => compact,
            1 => serde_json::to_string_pretty(&call).unwrap(),
            2 => format!("```json\n{compact}\n```"),
            3 => serde_json::to_string(&Value::String(compact)).unwrap(),
            _ => format!("Here you go: {compact}"),
        };
        let p = parse_compress_args(&raw);
        let expected: Vec<CompressRange> = entries
            .iter()
            .filter(|(_, _, summary, _)| !summary.trim().is_empty())
            .map(|(s, e, summary, topic)| CompressRange {
                topic: topic
                    .as_deref()
                    .map(str::trim)
                    .filter(|t| !t.is_empty())
                    .unwrap_or(top_topic.trim())
                    .to_owned(),
                ..range(s, e, summary.trim())
            })
            .collect();
        prop_assert_eq!(&p.ranges, &expected);
        prop_assert_eq!(p.invalid_items, entries.len() - expected.len());
        prop_assert_eq!(p.ok, !expected.is_empty());
    }
}
