//! Thousands of turns in-process: the view never outgrows the window and
//! never breaks pairing, with the "model" compressing whenever nudged.

use std::collections::HashMap;

use noa::engine::CompressRange;
use noa::engine::CompressionState;
use noa::engine::Config;
use noa::engine::IdMap;
use noa::engine::NUDGE_ID;
use noa::engine::Sections;
use noa::engine::drop_unpaired;
use noa::engine::{ApplyInput, apply};
use noa::engine::{CoreMessage, Role};
use noa::engine::{TurnInput, project};
use noa::formats::{BadLines, Format, read};

use crate::agent_loop::ranges_from_nudge;
use crate::synth::{chat_session, jsonl};

#[test]
fn two_thousand_turns_stay_inside_a_40k_window() {
    let limit = 40_000;
    let t = read(
        "long",
        &jsonl(&chat_session(42, 2000)),
        Some(Format::Chat),
        BadLines::Fail,
    )
    .unwrap();
    let config = Config::for_window(limit);
    let sections = Sections::default();
    let mut state = CompressionState::new("long");
    let mut history: Vec<CoreMessage> = Vec::new();
    let mut originals: HashMap<String, CoreMessage> = HashMap::new();
    let (mut turns, mut blocks, mut peak) = (0, 0, 0);
    for (i, m) in t.messages.iter().enumerate() {
        for core in &m.cores {
            originals.insert(core.id.to_string(), core.clone());
            history.push(core.clone());
        }
        let ends_turn = t
            .messages
            .get(i + 1)
            .is_none_or(|n| n.raw.value()["role"] == "assistant");
        if !ends_turn {
            continue;
        }
        turns += 1;
        let p = project(
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
        peak = peak.max(p.figures.request);
        assert!(
            p.figures.request <= limit,
            "turn {turns}: {} tokens (measured {}, truncated {:?}, decision {:?}, blocks {}, failures {}, pending {:?})",
            p.figures.request,
            p.figures.before_cuts,
            p.truncation,
            p.decision,
            state.blocks.iter().filter(|b| b.active).count(),
            state.host.consecutive_failures,
            p.recommendation.pending
        );
        let body: Vec<CoreMessage> = p
            .view
            .iter()
            .filter(|m| m.id != NUDGE_ID)
            .cloned()
            .collect();
        assert_eq!(
            drop_unpaired(body.clone()),
            body,
            "turn {turns}: unpaired view"
        );
        let Some(nudge) = p.view.last().filter(|m| m.id == NUDGE_ID) else {
            continue;
        };
        let ranges: Vec<CompressRange> = ranges_from_nudge(&nudge.text)
            .into_iter()
            .map(|(start, end)| CompressRange { start, end, summary: "Summary of finished work: files touched, decisions and their reasons, errors seen, what remains open.".into(), topic: String::new(), summary_max_chars: None })
            .collect();
        let by_id: IdMap<'_, &CoreMessage> =
            originals.iter().map(|(k, v)| (k.as_str(), v)).collect();
        let call_id = format!("cmp{turns}");
        let out = apply(&ApplyInput {
            ranges: &ranges,
            view: &p.view,
            originals: &by_id,
            state: &state,
            config: &config,
            call_id: &call_id,
            archive_root: "/a",
            created: "",
            now: 0,
            replay: false,
            index: None,
        });
        blocks += out.created.len();
        if !out.created.is_empty() {
            out.commit(&mut state);
        }
        let call = CoreMessage::tool_call(format!("c-{call_id}"), &call_id, "Compress", "{}");
        let result = CoreMessage {
            role: Role::Tool,
            ..CoreMessage::tool_result(format!("r-{call_id}"), &call_id, "Compress", "▣ noa")
        };
        originals.insert(call.id.to_string(), call.clone());
        originals.insert(result.id.to_string(), result.clone());
        history.extend([call, result]);
    }
    assert!(turns >= 2000, "{turns}");
    assert!(blocks > 20, "{blocks} blocks");
    assert!(peak <= limit, "peak {peak}");
}
