use super::*;

/// Whether `s` holds `m` followed by five digits anywhere: something that
/// looks like a live ref.
pub(crate) fn has_concrete_ref(s: &str) -> bool {
    let b = s.as_bytes();
    b.windows(6)
        .any(|w| w[0] == b'm' && w[1..].iter().all(u8::is_ascii_digit))
}

/// Whether `s` holds a block id such as `b12` as a word of its own.
pub(crate) fn has_concrete_block(s: &str) -> bool {
    let b = s.as_bytes();
    (0..b.len().saturating_sub(1)).any(|i| {
        b[i] == b'b'
            && b[i + 1].is_ascii_digit()
            && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_'))
    })
}

fn all_flavours() -> [SchemaFlavour; 3] {
    [
        SchemaFlavour::Chat,
        SchemaFlavour::Anthropic,
        SchemaFlavour::Responses,
    ]
}

#[test]
fn pattern_helpers_work() {
    assert!(has_concrete_ref("see m00420 here"));
    assert!(!has_concrete_ref("see mNNNNN or <ref> or m0042"));
    assert!(has_concrete_block("startId: \"b3\""));
    assert!(has_concrete_block("b12(T1)"));
    assert!(!has_concrete_block("bN, sub2, tab3, x_b4, kb"));
}

#[test]
fn system_prompt_explains_tags_summaries_and_archive() {
    let p = system_prompt(&Sections::default());
    assert!(p.starts_with("noa context management\n\n"));
    assert!(p.contains("<noa-ref id=\"mNNNNN\""));
    assert!(p.contains("src=\"<tool name>\""));
    assert!(p.contains("Never write one yourself"));
    assert!(p.contains("`[Compressed conversation section]`"));
    assert!(p.contains("<noa-archive block=\"bN\" tier=\"N\" range=\"<first ref>-<last ref>\""));
    assert!(p.contains("REF TAGS"));
    assert!(p.contains("SUMMARIES IN CONTEXT"));
    assert!(p.contains("THE ARCHIVE"));
    assert!(p.contains("file-reading tool"));
    assert!(!p.contains("\n\n\n"));
    assert!(!p.ends_with('\n'));
}

#[test]
fn system_prompt_holds_no_rules_for_writing_or_timing() {
    let p = system_prompt(&Sections::default());
    for absent in [
        "WRITING THE SUMMARY",
        "COPY EXACTLY",
        "LEAVE OUT",
        "ORDER OF IMPORTANCE",
        "GOOD TIMES TO COMPRESS",
        "DO NOT COMPRESS",
        "USING COMPRESS",
        "TIER 2",
        "TIER 3",
        "DISTILL",
        "SIZE:",
    ] {
        assert!(!p.contains(absent), "system prompt holds {absent:?}");
    }
    // Nor any paragraph of the rule texts.
    for rules in [how_to_compress_rules(), tier2_rules(), tier3_rules()] {
        for para in rules.split("\n\n") {
            assert!(!p.contains(para));
        }
    }
}

#[test]
fn system_prompt_overrides_replace_and_remove() {
    let custom = Sections {
        system_intro: Some("HOST INTRO".into()),
        archive: Some("Use view_file to read archives.".into()),
        ..Sections::default()
    };
    let p = system_prompt(&custom);
    assert!(p.starts_with("noa context management\n\nHOST INTRO\n\nREF TAGS"));
    assert!(p.ends_with("Use view_file to read archives."));
    assert!(!p.contains("This conversation runs under noa"));
    assert!(!p.contains("THE ARCHIVE"));

    let removed = Sections {
        system_intro: Some(String::new()),
        archive: Some(String::new()),
        ..Sections::default()
    };
    let p = system_prompt(&removed);
    assert!(p.starts_with("noa context management\n\nREF TAGS"));
    assert!(!p.contains("THE ARCHIVE"));
    assert!(!p.contains("\n\n\n"));
    assert!(!p.ends_with('\n'));
}

#[test]
fn sections_deserialize_from_config() {
    let s: Sections = serde_json::from_str(
        r#"{"efficiency_note": "custom", "philosophy": "", "tier3_guidance": "t3"}"#,
    )
    .unwrap();
    assert_eq!(s.efficiency_note.as_deref(), Some("custom"));
    assert_eq!(s.philosophy.as_deref(), Some(""));
    assert_eq!(s.tier3_guidance.as_deref(), Some("t3"));
    assert_eq!(s.system_intro, None);
    assert_eq!(s.emergency_headline, None);

    let empty: Sections = serde_json::from_str("{}").unwrap();
    assert_eq!(empty, Sections::default());

    let err = serde_json::from_str::<Sections>(r#"{"how_to_compress": "weaker"}"#);
    assert!(err.is_err(), "the compression rules are not overridable");
}

#[test]
fn description_holds_the_brake() {
    let d = COMPRESS_TOOL_DESCRIPTION;
    assert!(d.contains("Do not call Compress on your own initiative"));
    assert!(d.contains("wait until the context manager asks you to"));
    assert!(d.contains("follow the rules it gives"));
    assert!(d.contains("archive"));
}

#[test]
fn parameters_schema_shape() {
    let p = compress_parameters();
    assert_eq!(p["type"], "object");
    assert_eq!(p["required"], json!(["content"]));
    assert_eq!(p["properties"]["topic"]["type"], "string");
    assert_eq!(p["properties"]["summaryMaxChars"]["type"], "number");
    let content = &p["properties"]["content"];
    assert!(
        content.get("type").is_none(),
        "content must not declare a type: stringified arrays would be refused"
    );
    assert!(content.get("description").is_some());
    let items = &content["items"];
    assert_eq!(items["type"], "object");
    assert_eq!(items["required"], json!(["startId", "endId", "summary"]));
    for field in ["topic", "startId", "endId", "summary"] {
        assert_eq!(items["properties"][field]["type"], "string", "{field}");
    }
}

#[test]
fn each_flavour_has_its_provider_shape() {
    let chat = compress_tool(SchemaFlavour::Chat);
    assert_eq!(chat["type"], "function");
    assert_eq!(chat["function"]["name"], "Compress");
    assert_eq!(chat["function"]["description"], COMPRESS_TOOL_DESCRIPTION);
    assert_eq!(chat["function"]["parameters"], compress_parameters());
    assert_eq!(chat.as_object().unwrap().len(), 2);

    let anthropic = compress_tool(SchemaFlavour::Anthropic);
    assert_eq!(anthropic["name"], "Compress");
    assert_eq!(anthropic["description"], COMPRESS_TOOL_DESCRIPTION);
    assert_eq!(anthropic["input_schema"], compress_parameters());
    assert!(anthropic.get("type").is_none());
    assert_eq!(anthropic.as_object().unwrap().len(), 3);

    let responses = compress_tool(SchemaFlavour::Responses);
    assert_eq!(responses["type"], "function");
    assert_eq!(responses["name"], "Compress");
    assert_eq!(responses["description"], COMPRESS_TOOL_DESCRIPTION);
    assert_eq!(responses["parameters"], compress_parameters());
    assert_eq!(responses.as_object().unwrap().len(), 4);
}

#[test]
fn every_flavour_round_trips_as_json_without_content_type() {
    for flavour in all_flavours() {
        let text = serde_json::to_string_pretty(&compress_tool(flavour)).unwrap();
        let back: Value = serde_json::from_str(&text).unwrap();
        let params = back
            .get("parameters")
            .or_else(|| back.get("input_schema"))
            .or_else(|| back.pointer("/function/parameters"))
            .unwrap();
        let content = &params["properties"]["content"];
        assert!(content.get("type").is_none(), "{flavour:?}");
        assert!(content.get("items").is_some(), "{flavour:?}");
        assert_eq!(params["required"], json!(["content"]), "{flavour:?}");
    }
}

#[test]
fn flavour_names_parse() {
    assert_eq!("chat".parse::<SchemaFlavour>(), Ok(SchemaFlavour::Chat));
    assert_eq!(
        "anthropic".parse::<SchemaFlavour>(),
        Ok(SchemaFlavour::Anthropic)
    );
    assert_eq!(
        "responses".parse::<SchemaFlavour>(),
        Ok(SchemaFlavour::Responses)
    );
    let err = "openai".parse::<SchemaFlavour>().unwrap_err();
    assert!(err.contains("openai") && err.contains("chat"));
}

#[test]
fn no_text_holds_a_concrete_ref_or_block_id() {
    let mut texts = vec![
        ("system", system_prompt(&Sections::default())),
        ("description", COMPRESS_TOOL_DESCRIPTION.to_string()),
        ("how-to", how_to_compress_rules().to_string()),
        ("tier2", tier2_rules().to_string()),
        ("tier3", tier3_rules().to_string()),
    ];
    for flavour in all_flavours() {
        texts.push(("schema", compress_tool(flavour).to_string()));
    }
    for (name, text) in texts {
        assert!(!has_concrete_ref(&text), "{name} holds a concrete ref");
        assert!(
            !has_concrete_block(&text),
            "{name} holds a concrete block id"
        );
    }
}

#[test]
fn how_to_rules_cover_what_to_keep_drop_and_rank() {
    let r = how_to_compress_rules();
    for needle in [
        "WRITING THE SUMMARY",
        "AS OF THIS SUMMARY",
        "\\uXXXX",
        "COPY EXACTLY",
        "with line numbers",
        "Signatures of functions",
        "Error messages and stack traces",
        "figures and the cause",
        "Decisions together with their reasons",
        "Constraints you discovered",
        "Exact values",
        "User said (<ref>)",
        "paraphrase",
        "overall goal",
        "Why each significant step",
        "Open questions",
        "Refs of the key messages",
        "LEAVE OUT",
        "Dead ends",
        "`git status`",
        "what it CONTAINS",
        "ORDER OF IMPORTANCE",
        "1. The user's goal",
        "5. Lessons",
        "Do not imitate the style",
        "THE ARCHIVE KEEPS THE ORIGINALS",
        "THAT something happened",
    ] {
        assert!(r.contains(needle), "how-to lacks {needle:?}");
    }
}

#[test]
fn tier_rules_cover_distillation_and_condensation() {
    let t2 = tier2_rules();
    for needle in [
        "TIER 2 — DISTILLING SUMMARIES",
        "KEEP",
        "LEAVE OUT",
        "AS OF THIS SUMMARY",
        "[OBSOLETE:",
        "`Source: bN+bM+… (<tokens before>→<tokens after> tok, <ratio>x). [original topic]`",
        "Three to five bullets",
        "merge them",
        "SIZE: 50–150 tokens",
        "[nothing to carry forward]",
    ] {
        assert!(t2.contains(needle), "tier 2 lacks {needle:?}");
    }
    let t3 = tier3_rules();
    for needle in [
        "TIER 3 — CONDENSING TO AN INDEX",
        "ORDER OF IMPORTANCE",
        "1. What shipped",
        "2. Open work",
        "One to three facts",
        "EXAMPLES:",
        "[N blocks obsolete]",
        "SIZE: 30–60 tokens",
        "N × 40",
    ] {
        assert!(t3.contains(needle), "tier 3 lacks {needle:?}");
    }
}
