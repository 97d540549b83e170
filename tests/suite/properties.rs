//! Invariants over generated sessions, checked in-process.

use std::collections::BTreeMap;

use noa::engine::CompressionState;
use noa::engine::Config;
use noa::engine::IdMap;
use noa::engine::KeptCut;
use noa::engine::Sections;
use noa::engine::{TurnInput, project};
use noa::formats::{BadLines, Format, ViewFormat, read, reassemble};
use proptest::prelude::*;
use serde_json::Value;

use crate::providers::check_chat;
use crate::synth::{chat_session, jsonl};

fn view(text: &str, state: &mut CompressionState) -> Vec<Value> {
    let t = read("gen", text, Some(Format::Chat), BadLines::Fail).unwrap();
    let p = project(
        state,
        &TurnInput {
            history: &t.cores(),
            config: &Config::default(),
            input_tokens: None,
            recorded: &[],
            sections: &Sections::default(),
            force_nudge: false,
            for_call: false,
            cuts: &IdMap::default(),
        },
    );
    reassemble(&t, &p.view, ViewFormat::Chat).0
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Refs are never reassigned as a session grows, the projection is pure,
    /// and every view is a valid Chat Completions request.
    #[test]
    fn growth_keeps_refs_and_views_valid(seed in any::<u64>(), turns in 1usize..40, cuts in prop::collection::vec(0.0f64..1.0, 1..4)) {
        let session = chat_session(seed, turns);
        let mut points: Vec<usize> = cuts.iter().map(|c| 1 + (c * (session.len() - 1) as f64) as usize).collect();
        points.sort();
        points.push(session.len());
        let mut state = CompressionState::new("p");
        let mut seen: BTreeMap<String, String> = BTreeMap::new();
        for n in points {
            let text = jsonl(&session[..n]);
            let before = state.clone();
            let v = view(&text, &mut state);
            if let Err(e) = check_chat(&v) {
                prop_assert!(false, "invalid view at {n} messages: {e}");
            }
            let mut again = before;
            prop_assert_eq!(&view(&text, &mut again), &v);
            prop_assert_eq!(&again, &state);
            for (id, r) in &seen {
                prop_assert_eq!(state.message_refs.get(id), Some(r.as_str()));
            }
            seen = state
                .message_refs
                .by_id()
                .map(|(id, r)| (id.to_string(), r.to_string()))
                .collect();
        }
    }

    /// A turn that takes back the cuts the turn before it made gives the
    /// view, the figures and the state that a turn making them again gives,
    /// however the session grows and whatever the window (most of these
    /// sessions outgrow theirs and cut outputs turn after turn; that a cut
    /// is taken back at all, the engine's own test shows).
    #[test]
    fn cuts_taken_back_change_no_turn(seed in any::<u64>(), turns in 4usize..40, window in 6_000usize..24_000) {
        let session = chat_session(seed, turns);
        let cfg = Config::for_window(window);
        let sections = Sections::default();
        let (mut taking, mut making) = (CompressionState::new("p"), CompressionState::new("p"));
        let mut cuts: Vec<(String, KeptCut)> = Vec::new();
        for n in (1..session.len()).step_by(3).chain([session.len()]) {
            let t = read("gen", &jsonl(&session[..n]), Some(Format::Chat), BadLines::Fail).unwrap();
            let history = t.cores();
            let turn = |cuts| TurnInput {
                history: &history,
                config: &cfg,
                input_tokens: None,
                recorded: &[],
                sections: &sections,
                force_nudge: false,
                for_call: false,
                cuts,
            };
            let kept: IdMap<'_, KeptCut> = cuts.iter().map(|(id, c)| (id.as_str(), *c)).collect();
            let a = project(&mut taking, &turn(&kept));
            let b = project(&mut making, &turn(&IdMap::default()));
            let words = |v: &[noa::engine::CoreMessage]| -> Vec<(String, String)> {
                v.iter().map(|m| (m.id.to_string(), m.text.clone())).collect()
            };
            prop_assert_eq!(words(&a.view), words(&b.view), "at {} messages", n);
            prop_assert_eq!((a.figures.request, a.figures.before_cuts), (b.figures.request, b.figures.before_cuts));
            prop_assert_eq!(&a.cuts, &b.cuts);
            prop_assert_eq!(&taking, &making);
            cuts = a.cuts;
        }
    }
}
