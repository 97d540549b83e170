//! A host that compacts the way Claude Code does, run on the very session
//! noa's loop ran: no nudges and no model help. When a request passes
//! [`COMPACT_AT`] of the window, everything but the newest [`KEPT_TURNS`]
//! turns becomes one summary of [`SUMMARY_CHARS`] characters, sent as a
//! user message after the system prompt, and the loop goes on from there.
//! The compaction is itself a request: the context with the turn that
//! crossed the line, and an instruction to summarise it (its prefix is the
//! request before, read from the cache); then the compacted request goes
//! out. Both are billed; [`Tally::summarising`] says what the first came to,
//! so the host's bill can be read without it too.

use serde_json::{Value, json};

use crate::agent_loop::common_prefix;

/// The share of the window a request may reach before the host compacts.
pub const COMPACT_AT: f64 = 0.835;
/// Turns kept word for word after a compaction.
pub const KEPT_TURNS: usize = 4;
/// The length of the summary standing for everything older.
pub const SUMMARY_CHARS: usize = 2_000;
/// The length of the instruction that asks for the summary (Claude Code's
/// is longer; a shorter one only flatters the host).
pub const INSTRUCTION_CHARS: usize = 1_000;

/// What a run of the host measured, in the bytes of its requests.
#[derive(Debug, Default)]
pub struct Tally {
    pub turns: usize,
    pub bytes_sent: usize,
    pub bytes_reused: usize,
    /// Bytes the turns appended (the same session as noa's loop).
    pub bytes_new: usize,
    /// For each request, the least of its length and the one before's.
    pub bytes_reusable: usize,
    pub compactions: usize,
    /// The summarising requests' share: bytes sent and reused.
    pub summarising: (usize, usize),
    /// The largest request, as a share of the window, in percent.
    pub peak_pct: usize,
}

/// The summary of the `n`-th compaction: its length is what matters.
fn summary(n: usize) -> Value {
    let mut text = format!(
        "This session is being continued from a previous conversation (compaction {n}). \
         Summary: "
    );
    let filler = "The task, the files read and edited, the decisions made and why, the errors \
                  met and how they were fixed, and the next step. ";
    while text.len() < SUMMARY_CHARS {
        text.push_str(filler);
    }
    text.truncate(SUMMARY_CHARS);
    json!({"role": "user", "content": text})
}

/// The instruction appended to the context to have it summarised.
fn instruction() -> Value {
    let mut text = String::from(
        "Your task is to write a detailed summary of the conversation so far, to continue          the work from it: ",
    );
    let filler = "the user's requests, the files and code involved, errors and fixes,                   what is done and what is pending. ";
    while text.len() < INSTRUCTION_CHARS {
        text.push_str(filler);
    }
    text.truncate(INSTRUCTION_CHARS);
    json!({"role": "user", "content": text})
}

/// The request for `messages`: one JSON line each, as a view is written.
fn render(messages: &[Value]) -> String {
    messages.iter().map(|m| format!("{m}\n")).collect()
}

/// Runs the host over `opening` (the system prompt and the task) and
/// `turns` (each turn's messages) at `limit` tokens, `count` giving a
/// request's size in tokens on the scale noa's loop decided on.
pub fn run(
    opening: &[Value],
    turns: &[Vec<Value>],
    limit: usize,
    count: &mut dyn FnMut(&str) -> usize,
) -> Tally {
    let system: Vec<Value> = opening
        .iter()
        .filter(|m| m["role"] == "system")
        .cloned()
        .collect();
    let mut context: Vec<Value> = opening.to_vec();
    // Where each turn still in the context begins.
    let mut starts: Vec<usize> = Vec::new();
    let mut previous = String::new();
    let mut t = Tally::default();
    for turn in turns {
        starts.push(context.len());
        context.extend(turn.iter().cloned());
        t.bytes_new += render(turn).len();
        let mut raw = render(&context);
        let mut tokens = count(&raw);
        if tokens as f64 > limit as f64 * COMPACT_AT && starts.len() > KEPT_TURNS {
            t.compactions += 1;
            let asking = raw.clone() + &render(&[instruction()]);
            let reused = common_prefix(&previous, &asking);
            t.bytes_sent += asking.len();
            t.bytes_reused += reused;
            t.bytes_reusable += previous.len().min(asking.len());
            t.summarising.0 += asking.len();
            t.summarising.1 += reused;
            previous = asking;
            let from = starts[starts.len() - KEPT_TURNS];
            let mut next = system.clone();
            next.push(summary(t.compactions));
            let shift = next.len();
            next.extend(context.drain(from..));
            context = next;
            starts = (starts[starts.len() - KEPT_TURNS..].iter())
                .map(|s| s - from + shift)
                .collect();
            raw = render(&context);
            tokens = count(&raw);
        }
        t.turns += 1;
        t.peak_pct = t.peak_pct.max(tokens * 100 / limit);
        t.bytes_sent += raw.len();
        t.bytes_reused += common_prefix(&previous, &raw);
        t.bytes_reusable += previous.len().min(raw.len());
        previous = raw;
    }
    t
}
