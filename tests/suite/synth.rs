//! Synthetic agent sessions for tests: deterministic from a seed, shaped like
//! a real tool loop (a task, thinking, parallel tool calls, large and small
//! outputs, repeated identical outputs, follow-up questions).

use serde_json::{Value, json};

/// A small deterministic generator (xorshift), so a failing case replays.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

const TOOLS: [&str; 5] = ["Read", "Bash", "Grep", "Edit", "Write"];
const WORDS: [&str; 12] = [
    "parser", "token", "cache", "range", "error", "fixture", "module", "index", "buffer", "schema",
    "retry", "limit",
];

fn prose(rng: &mut Rng, words: u64) -> String {
    (0..words.max(1))
        .map(|_| WORDS[rng.below(WORDS.len() as u64) as usize])
        .collect::<Vec<_>>()
        .join(" ")
}

/// A chat-format session of `turns` assistant turns, one message per entry.
pub fn chat_session(seed: u64, turns: usize) -> Vec<Value> {
    let mut rng = Rng::new(seed);
    let mut out = vec![
        json!({"role": "system", "content": "You are a coding agent. Keep answers short."}),
        json!({"role": "user", "content": format!("Task: fix the {} in the {}. Do not touch the public API.", prose(&mut rng, 2), prose(&mut rng, 1))}),
    ];
    let mut call = 0;
    for turn in 0..turns {
        let calls = [0, 1, 1, 1, 2, 3][rng.below(6) as usize];
        let mut msg = json!({"role": "assistant", "content": if calls == 0 || rng.below(2) == 0 { json!(prose(&mut rng, 12)) } else { Value::Null }});
        if rng.below(3) == 0 {
            msg["reasoning_content"] = json!(prose(&mut rng, 20));
        }
        let mut ids = Vec::new();
        if calls > 0 {
            let list: Vec<Value> = (0..calls)
                .map(|_| {
                    call += 1;
                    let id = format!("call_{seed}_{call}");
                    let tool = TOOLS[rng.below(TOOLS.len() as u64) as usize];
                    ids.push(id.clone());
                    json!({"id": id, "type": "function", "function": {"name": tool, "arguments": json!({"path": format!("src/{}.rs", prose(&mut rng, 1))}).to_string()}})
                })
                .collect();
            msg["tool_calls"] = Value::Array(list);
        }
        out.push(msg);
        for id in ids {
            let body = match rng.below(10) {
                0 => "ok".to_string(),
                1..=6 => {
                    let words = 40 + rng.below(400);
                    prose(&mut rng, words)
                }
                _ => {
                    let lines = 50 + rng.below(300) as usize;
                    format!("{}\n", prose(&mut rng, 8)).repeat(lines)
                }
            };
            out.push(json!({"role": "tool", "tool_call_id": id, "content": body}));
        }
        if turn % 7 == 6 {
            out.push(json!({"role": "user", "content": format!("Now look at the {} too.", prose(&mut rng, 2))}));
        }
    }
    out
}

/// JSONL text of a message list.
pub fn jsonl(messages: &[Value]) -> String {
    messages.iter().map(|m| format!("{m}\n")).collect()
}

/// The same session as Anthropic messages: reasoning becomes signed
/// thinking, tool calls `tool_use` blocks, and consecutive tool answers one
/// user message of `tool_result` blocks.
pub fn anthropic_session(seed: u64, turns: usize) -> Vec<Value> {
    anthropic_of(seed, chat_session(seed, turns))
}

/// The chat messages `chat` as Anthropic messages: the system prompt
/// dropped, reasoning, text and calls as blocks, results in user messages.
pub fn anthropic_of(seed: u64, chat: Vec<Value>) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    for (i, m) in chat.into_iter().enumerate() {
        match m["role"].as_str().unwrap() {
            "system" => {}
            "user" => out.push(json!({"role": "user", "content": m["content"]})),
            "assistant" => {
                let mut blocks = Vec::new();
                if let Some(r) = m["reasoning_content"].as_str() {
                    blocks.push(json!({"type": "thinking", "thinking": r, "signature": format!("sig{seed}x{i}")}));
                }
                if let Some(t) = m["content"].as_str() {
                    blocks.push(json!({"type": "text", "text": t}));
                }
                for c in m["tool_calls"].as_array().into_iter().flatten() {
                    let input: Value =
                        serde_json::from_str(c["function"]["arguments"].as_str().unwrap()).unwrap();
                    blocks.push(json!({"type": "tool_use", "id": c["id"], "name": c["function"]["name"], "input": input}));
                }
                out.push(json!({"role": "assistant", "content": blocks}));
            }
            "tool" => {
                let block = json!({"type": "tool_result", "tool_use_id": m["tool_call_id"], "content": m["content"]});
                match out.last_mut() {
                    Some(prev) if prev["role"] == "user" && prev["content"].is_array() => {
                        prev["content"].as_array_mut().unwrap().push(block)
                    }
                    _ => out.push(json!({"role": "user", "content": [block]})),
                }
            }
            other => panic!("unexpected role {other}"),
        }
    }
    out
}
