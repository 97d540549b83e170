//! No sequence of Compress calls ever yields a view a provider would refuse.

use noa::engine::CompressRange;
use noa::engine::CompressionState;
use noa::engine::Config;
use noa::engine::CoreMessage;
use noa::engine::IdMap;
use noa::engine::Sections;
use noa::engine::{ApplyInput, apply};
use noa::engine::{TurnInput, project};
use noa::formats::{BadLines, Format, Transcript, ViewFormat, read, reassemble};
use proptest::prelude::*;

use crate::providers::{check_anthropic, check_chat};
use crate::synth::{Rng, anthropic_session, chat_session, jsonl};

const SUMMARY: &str = "Explored the parser and cache modules, fixed the range error in src/index.rs:40; decided to keep the schema because clients depend on it. Open: retry limit.";

/// What a model can name as a range end in a view: message refs and the
/// block ids of summaries.
fn range_ends(view: &[CoreMessage], state: &CompressionState) -> Vec<String> {
    view.iter()
        .filter_map(|m| match state.message_refs.usable(&m.id) {
            Some(r) => Some(r.to_string()),
            None => m.id.strip_prefix("noa_summary_").map(str::to_string),
        })
        .collect()
}

/// Runs `calls` random Compress calls against a session, checking every view.
fn drive(t: &Transcript, format: ViewFormat, seed: u64, calls: usize) -> Result<usize, String> {
    let history = t.cores();
    let originals: IdMap<'_, &CoreMessage> = history.iter().map(|m| (m.id.as_str(), m)).collect();
    let config = Config {
        preserve_recent_messages: 3,
        preserve_recent_tokens: Some(500),
        ..Config::default()
    };
    let mut state = CompressionState::new("p");
    let mut rng = Rng::new(seed);
    let mut made = 0;
    for call in 0..=calls {
        let seen = project(
            &mut state,
            &TurnInput {
                history: &history,
                config: &config,
                input_tokens: None,
                recorded: &[],
                sections: &Sections::default(),
                force_nudge: false,
                for_call: false,
                cuts: &IdMap::default(),
            },
        );
        let (view, _) = reassemble(t, &seen.view, format);
        match format {
            ViewFormat::Chat => check_chat(&view),
            _ => check_anthropic(&view),
        }
        .map_err(|e| format!("after {call} call(s), {made} block(s): {e}"))?;
        if call == calls {
            break;
        }
        let ends = range_ends(&seen.view, &state);
        if ends.len() < 2 {
            break;
        }
        let n = 1 + rng.below(2) as usize;
        let ranges: Vec<CompressRange> = (0..n)
            .map(|_| {
                let a = rng.below(ends.len() as u64) as usize;
                let b = (a + rng.below(12) as usize).min(ends.len() - 1);
                CompressRange {
                    start: ends[a].clone(),
                    end: ends[b].clone(),
                    summary: SUMMARY.into(),
                    topic: String::new(),
                    summary_max_chars: None,
                }
            })
            .collect();
        let out = apply(&ApplyInput {
            ranges: &ranges,
            view: &seen.view,
            originals: &originals,
            state: &state,
            config: &config,
            call_id: "",
            archive_root: "/a",
            created: "",
            now: 0,
            replay: false,
            index: None,
        });
        if !out.created.is_empty() {
            made += out.created.len();
            out.commit(&mut state);
        }
    }
    Ok(made)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    #[test]
    fn chat_views_stay_valid(seed in any::<u64>(), turns in 10usize..60, calls in 1usize..8) {
        let t = read("p", &jsonl(&chat_session(seed, turns)), Some(Format::Chat), BadLines::Fail).unwrap();
        if let Err(e) = drive(&t, ViewFormat::Chat, seed, calls) {
            prop_assert!(false, "{e}");
        }
    }

    #[test]
    fn anthropic_views_keep_pairs_and_thinking(seed in any::<u64>(), turns in 10usize..60, calls in 1usize..8) {
        let text: String = anthropic_session(seed, turns).iter().map(|m| format!("{m}\n")).collect();
        let t = read("p", &text, Some(Format::Anthropic), BadLines::Fail).unwrap();
        if let Err(e) = drive(&t, ViewFormat::Anthropic, seed, calls) {
            prop_assert!(false, "{e}");
        }
    }
}

#[test]
fn the_driver_does_compress() {
    let t = read(
        "p",
        &jsonl(&chat_session(11, 50)),
        Some(Format::Chat),
        BadLines::Fail,
    )
    .unwrap();
    let made: usize = (0..8)
        .map(|s| drive(&t, ViewFormat::Chat, s, 6).unwrap())
        .sum();
    assert!(
        made > 5,
        "the random calls should create blocks, made {made}"
    );
}

/// A live run: random Compress calls made turn by turn, each recorded in the
/// log with its panel as a host would; returns the log and the live state.
fn live_run(seed: u64, turns: usize) -> (Vec<CoreMessage>, CompressionState) {
    use noa::engine::CallInput;
    use noa::engine::derive_id;
    use noa::engine::{ContentType, Role};
    let t = read(
        "p",
        &jsonl(&chat_session(seed, turns)),
        Some(Format::Chat),
        BadLines::Fail,
    )
    .unwrap();
    let config = Config {
        preserve_recent_messages: 3,
        preserve_recent_tokens: Some(500),
        ..Config::default()
    };
    let sections = Sections::default();
    let mut rng = Rng::new(seed ^ 0x5eed);
    let mut state = CompressionState::new("p");
    let mut history: Vec<CoreMessage> = Vec::new();
    for (i, m) in t.messages.iter().enumerate() {
        history.extend(m.cores.iter().cloned());
        // A request ends with the user's or a tool's message; a Compress call
        // is the model's next response.
        let turn_ends = t
            .messages
            .get(i + 1)
            .is_none_or(|n| n.raw.value()["role"] == "assistant");
        let awaits_model = history.last().is_some_and(|m| m.role != Role::Assistant);
        if !turn_ends || !awaits_model || rng.below(3) != 0 {
            continue;
        }
        let mut scratch = state.clone();
        let seen = project(
            &mut scratch,
            &TurnInput {
                history: &history,
                config: &config,
                input_tokens: None,
                recorded: &[],
                sections: &sections,
                force_nudge: false,
                for_call: false,
                cuts: &IdMap::default(),
            },
        );
        state.message_refs = scratch.message_refs;
        let ends = range_ends(&seen.view, &state);
        if ends.len() < 2 {
            continue;
        }
        let content: Vec<serde_json::Value> = (0..1 + rng.below(2))
            .map(|_| {
                let a = rng.below(ends.len() as u64) as usize;
                let b = (a + rng.below(12) as usize).min(ends.len() - 1);
                serde_json::json!({"startId": ends[a], "endId": ends[b], "summary": SUMMARY})
            })
            .collect();
        let args = serde_json::json!({"content": content}).to_string();
        let call_id = format!("call_{seed}_{i}");
        // Answered as `noa apply` answers it: the host's policy included.
        let originals: IdMap<'_, &CoreMessage> =
            history.iter().map(|m| (m.id.as_str(), m)).collect();
        let answer = noa::engine::answer_call(
            std::mem::replace(&mut state, CompressionState::new("")),
            &CallInput {
                args: &args,
                call_id: &call_id,
                history: &history,
                originals: &originals,
                cut: history.len(),
                config: &config,
                recorded: &[],
                sections: &sections,
                archive_root: "/a",
                created: "",
                now: 0,
                cuts: &IdMap::default(),
                index: None,
                scan: None,
                weights: noa::engine::Weights::ANTHROPIC,
            },
        );
        let panel = answer.panel;
        state = answer.state;
        let call = CoreMessage::tool_call(
            derive_id(
                Role::Assistant,
                ContentType::ToolCall,
                &args,
                &call_id,
                "Compress",
            ),
            &call_id,
            "Compress",
            args,
        );
        let result = CoreMessage::tool_result(
            derive_id(
                Role::Tool,
                ContentType::ToolResult,
                &panel,
                &call_id,
                "Compress",
            ),
            &call_id,
            "Compress",
            panel,
        );
        history.extend([call, result]);
    }
    project(
        &mut state,
        &TurnInput {
            history: &history,
            config: &config,
            input_tokens: None,
            recorded: &[],
            sections: &sections,
            force_nudge: false,
            for_call: false,
            cuts: &IdMap::default(),
        },
    );
    (history, state)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Rebuilding from the log alone gives back the live state's blocks and refs.
    #[test]
    fn rebuild_reproduces_the_live_state(seed in any::<u64>(), turns in 10usize..50) {
        use noa::engine::{RebuildInput, differences, rebuild};
        let (history, live) = live_run(seed, turns);
        let config = Config { preserve_recent_messages: 3, preserve_recent_tokens: Some(500), ..Config::default() };
        let originals: IdMap<'_, &CoreMessage> =
            history.iter().map(|m| (m.id.as_str(), m)).collect();
        let rebuilt = rebuild(&RebuildInput { history: &history, originals: &originals, recorded: &[], base: &CompressionState::new("p"), config: &config, archive_root: "/a", now: 0, created: "", on_step: &|_| {}, weights: noa::engine::Weights::ANTHROPIC });
        let diffs = differences(&live, &rebuilt.state);
        prop_assert!(diffs.is_empty(), "{} block(s) live: {diffs:?}", live.blocks.len());
    }
}
