//! A session's bill, from the usage its transcript records: what every
//! request cost, and what each compression cost and saved.
//!
//! A provider bills a request's prompt in three parts: tokens read from the
//! prompt cache (cheap), tokens written to it (dear), and fresh input. A
//! compression changes the prompt from the block's first message on, so
//! the next request writes that part to the cache again; from then on every
//! request is shorter by what the block took out, tokens that would
//! otherwise have been read from the cache. It pays for itself once those
//! reads add up to the extra writing.

use serde::{Deserialize, Serialize};

use crate::engine::model::state::Block;
use crate::engine::model::tokens;

/// One response's usage, as the provider recorded it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ResponseUsage {
    /// The transcript line it was recorded on.
    pub line: usize,
    /// Prompt tokens neither read from nor written to the cache.
    pub fresh: u64,
    /// Prompt tokens written to the cache.
    pub cache_write: u64,
    /// Prompt tokens read from the cache.
    pub cache_read: u64,
    /// Tokens the model wrote.
    pub output: u64,
    /// Of those, reasoning (where the provider says).
    pub reasoning: u64,
}

impl ResponseUsage {
    /// The whole prompt.
    pub fn prompt(&self) -> u64 {
        self.fresh + self.cache_write + self.cache_read
    }

    /// The prompt tokens not read from the cache.
    fn uncached(&self) -> u64 {
        self.fresh + self.cache_write
    }
}

/// A Compress call, by its id and the line it was made on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallAt {
    /// The call's id.
    pub id: String,
    /// The transcript line it was made on.
    pub line: usize,
    /// The line its result was given on, if it was: the requests after it
    /// are those the compression changed.
    pub answered: Option<usize>,
}

impl From<(String, usize)> for CallAt {
    fn from((id, line): (String, usize)) -> CallAt {
        CallAt {
            id,
            line,
            answered: None,
        }
    }
}

/// What a transcript records of its bill: each response once, in order,
/// and where the Compress calls were made.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UsageLog {
    /// Each response's usage, in order.
    pub responses: Vec<ResponseUsage>,
    /// The Compress calls, in order.
    pub calls: Vec<CallAt>,
}

/// What a token costs, against a fresh input token: Anthropic bills a cache
/// write at 1.25 and a read at 0.1; OpenAI writes for nothing extra and
/// reads at the model's discount (0.1 for the GPT-5 models Codex runs).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Weights {
    /// A token written to the cache (or, where writing costs nothing
    /// extra, any token not read from it).
    pub cache_write: f64,
    /// A token read from the cache.
    pub cache_read: f64,
}

impl Weights {
    /// Anthropic's: writes at 1.25, reads at 0.1.
    pub const ANTHROPIC: Weights = Weights {
        cache_write: 1.25,
        cache_read: 0.1,
    };
    /// OpenAI's: no charge for writing, reads at 0.1.
    pub const OPENAI: Weights = Weights {
        cache_write: 1.0,
        cache_read: 0.1,
    };
}

/// What a compression is expected to cost and save, before any request
/// records it (`inspect` measures it after): the next request writes
/// `rewrite` tokens to the provider's cache again, each later one is
/// `removed` tokens shorter (tokens it would have read from the cache), and
/// those reads saved cover the extra writing after `pays_back_after`
/// requests (`None` when it takes nothing out). `apply --json` reports it
/// and the panel says it in a line, from this one computation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Expected {
    /// Tokens the next request writes to the cache again.
    pub rewrite: usize,
    /// Tokens each later request is shorter by.
    pub removed: usize,
    /// Requests after which the reads saved cover the extra writing.
    pub pays_back_after: Option<usize>,
}

impl Expected {
    /// The figures for a compression that rewrites `rewrite` tokens and
    /// takes `removed` out of every later request, at the provider's
    /// `weights`: the rewrite costs what a write costs over a read, each
    /// later request saves what reading `removed` would have cost.
    pub fn of(rewrite: usize, removed: usize, weights: Weights) -> Expected {
        let extra = rewrite as f64 * (weights.cache_write - weights.cache_read);
        let saved = removed as f64 * weights.cache_read;
        Expected {
            rewrite,
            removed,
            pays_back_after: (saved > 0.0).then(|| (extra / saved).ceil() as usize),
        }
    }

    /// The panel's line: what the model reads of the bill right after it
    /// compressed, so it can tell a compression that pays from one that
    /// does not.
    pub fn line(&self) -> String {
        let back = match self.pays_back_after {
            Some(n) => format!("pays back after {n} request(s)"),
            None => "takes nothing out, so it does not pay back".to_string(),
        };
        format!(
            "bill: the next request writes ~{} to the cache again, each later one is ~{} shorter; {back}",
            tokens::format(self.rewrite),
            tokens::format(self.removed)
        )
    }
}

/// Prices per million tokens (`[bill]` in `noa.toml`), in the user's
/// currency: with them the bill is money, without them tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Prices {
    /// Fresh input.
    pub input: f64,
    /// Input written to the cache.
    pub cache_write: f64,
    /// Input read from the cache.
    pub cache_read: f64,
    /// Output, reasoning included.
    pub output: f64,
}

/// Totals over a session's requests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Totals {
    /// Requests recorded.
    pub requests: usize,
    /// Their prompts' fresh tokens.
    pub fresh: u64,
    /// Their prompts' tokens written to the cache.
    pub cache_write: u64,
    /// Their prompts' tokens read from the cache.
    pub cache_read: u64,
    /// Tokens the model wrote.
    pub output: u64,
    /// Of those, reasoning.
    pub reasoning: u64,
    /// The prompt tokens weighed by what each kind costs, in fresh input
    /// tokens: what the prompt side of the bill comes to.
    pub weighted: u64,
    /// The share of prompt tokens read from the cache.
    pub reused: f64,
    /// The bill in money, when prices were given.
    pub cost: Option<f64>,
}

/// What one compression did to the bill.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BlockBill {
    /// The block's id.
    pub block: String,
    /// The line of the Compress call that made it.
    pub call_line: usize,
    /// Prompt tokens the first request after the call did not read from
    /// the cache (measured).
    pub rewrote: u64,
    /// Of those, what a request wrote anyway before the call (the median
    /// of the last five; measured): the rest is the compression's doing.
    pub usual: u64,
    /// Tokens it takes out of each later request: what `inspect` says it
    /// reclaimed (estimated, on the provider's scale).
    pub removed: u64,
    /// Requests recorded after the call.
    pub requests_since: usize,
    /// After how many of them what it saved covered its extra writing:
    /// `None` while it has not yet.
    pub paid_back_after: Option<usize>,
}

/// A session's bill (see the module's documentation).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Bill {
    /// What each kind of prompt token was weighed at.
    pub weights: Weights,
    /// Totals over every request.
    pub totals: Totals,
    /// Each request, in order.
    pub requests: Vec<ResponseUsage>,
    /// What each compression whose call the transcript records did.
    pub blocks: Vec<BlockBill>,
}

impl Bill {
    /// The bill of `log`, weighed by `weights`, in money if `prices` are
    /// given; `blocks` are the session's, and `removed` tells what each
    /// took out of a request.
    pub fn of(
        log: &UsageLog,
        blocks: &[Block],
        weights: Weights,
        prices: Option<Prices>,
        removed: &dyn Fn(&Block) -> u64,
    ) -> Bill {
        let blocks = blocks
            .iter()
            .filter_map(|b| block_bill(b, log, weights, removed(b)))
            .collect();
        Bill {
            weights,
            totals: totals(&log.responses, weights, prices),
            requests: log.responses.clone(),
            blocks,
        }
    }
}

impl Totals {
    /// The totals in one line, as the map names them.
    pub fn describe(&self) -> String {
        let prompt = self.fresh + self.cache_write + self.cache_read;
        format!(
            "{} requests recorded, prompts of {} tokens, {:.0}% read from the cache, weighing {} \
             fresh-input tokens; {} output tokens",
            self.requests,
            format_total(prompt),
            self.reused * 100.0,
            format_total(self.weighted),
            format_total(self.output),
        )
    }
}

/// A bill's token count: millions past a million, as tags show the rest.
pub fn format_total(n: u64) -> String {
    match n {
        0..1_000_000 => tokens::format(n as usize),
        _ => format!("{:.1}M", n as f64 / 1e6),
    }
}

fn totals(responses: &[ResponseUsage], w: Weights, prices: Option<Prices>) -> Totals {
    let mut t = Totals {
        requests: responses.len(),
        ..Totals::default()
    };
    for r in responses {
        t.fresh += r.fresh;
        t.cache_write += r.cache_write;
        t.cache_read += r.cache_read;
        t.output += r.output;
        t.reasoning += r.reasoning;
    }
    let weighted =
        t.fresh as f64 + t.cache_write as f64 * w.cache_write + t.cache_read as f64 * w.cache_read;
    t.weighted = weighted.round() as u64;
    let prompt = t.fresh + t.cache_write + t.cache_read;
    t.reused = match prompt {
        0 => 0.0,
        _ => t.cache_read as f64 / prompt as f64,
    };
    t.cost = prices.map(|p| {
        (t.fresh as f64 * p.input
            + t.cache_write as f64 * p.cache_write
            + t.cache_read as f64 * p.cache_read
            + t.output as f64 * p.output)
            / 1e6
    });
    t
}

/// How many requests before the call the usual writing is taken from.
const USUAL_OF: usize = 5;

fn block_bill(b: &Block, log: &UsageLog, w: Weights, removed: u64) -> Option<BlockBill> {
    let call = log.calls.iter().find(|c| c.id == b.compress_call_id)?;
    let answered = call.answered.unwrap_or(call.line);
    let split = log.responses.partition_point(|r| r.line <= answered);
    let (before, after) = log.responses.split_at(split);
    let mut usual: Vec<u64> = (before.iter().rev().take(USUAL_OF))
        .map(ResponseUsage::uncached)
        .collect();
    usual.sort_unstable();
    let usual = usual.get(usual.len() / 2).copied().unwrap_or(0);
    let rewrote = after.first().map_or(0, ResponseUsage::uncached);
    let extra = rewrote.saturating_sub(usual) as f64 * (w.cache_write - w.cache_read).max(0.0);
    let saved = removed as f64 * w.cache_read;
    let paid_back_after = match extra <= 0.0 {
        true => Some(0),
        false if saved <= 0.0 => None,
        false => Some((extra / saved).ceil() as usize).filter(|&n| n <= after.len()),
    };
    Some(BlockBill {
        block: b.block_id.clone(),
        call_line: call.line,
        rewrote,
        usual,
        removed,
        requests_since: after.len(),
        paid_back_after: paid_back_after.filter(|_| !after.is_empty()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::test_support::block;

    fn response(line: usize, fresh: u64, write: u64, read: u64) -> ResponseUsage {
        ResponseUsage {
            line,
            fresh,
            cache_write: write,
            cache_read: read,
            output: 10,
            reasoning: 0,
        }
    }

    #[test]
    fn totals_weigh_each_kind_of_prompt_token() {
        let log = UsageLog {
            responses: vec![response(1, 100, 1_000, 0), response(2, 10, 200, 1_000)],
            calls: Vec::new(),
        };
        let prices = Prices {
            input: 3.0,
            cache_write: 3.75,
            cache_read: 0.3,
            output: 15.0,
        };
        let bill = Bill::of(&log, &[], Weights::ANTHROPIC, Some(prices), &|_| 0);
        let t = bill.totals;
        assert_eq!(
            (t.requests, t.fresh, t.cache_write, t.cache_read, t.output),
            (2, 110, 1_200, 1_000, 20)
        );
        // 110 + 1,200 × 1.25 + 1,000 × 0.1
        assert_eq!(t.weighted, 1_710);
        assert!((t.reused - 1_000.0 / 2_310.0).abs() < 1e-9);
        let cost = (110.0 * 3.0 + 1_200.0 * 3.75 + 1_000.0 * 0.3 + 20.0 * 15.0) / 1e6;
        assert!((t.cost.unwrap() - cost).abs() < 1e-12);
    }

    #[test]
    fn a_compression_pays_back_once_its_savings_cover_the_rewrite() {
        let mut b = block("b1", 1, &["m1"]);
        b.compress_call_id = "c1".into();
        // Before the call each request wrote 500; the one after wrote
        // 10,500: 10,000 more, at 1.15 over a read, is 11,500 to pay back;
        // each later request reads 20,000 fewer, 2,000 saved a request.
        let mut responses: Vec<ResponseUsage> =
            (1..=5).map(|l| response(l, 0, 500, 50_000)).collect();
        responses.push(response(7, 0, 10_500, 30_000));
        responses.extend((8..=12).map(|l| response(l, 0, 500, 30_000)));
        let log = UsageLog {
            responses,
            calls: vec![("c1".to_string(), 6).into()],
        };
        let bill = Bill::of(&log, &[b.clone()], Weights::ANTHROPIC, None, &|_| 20_000);
        let got = &bill.blocks[0];
        assert_eq!((got.rewrote, got.usual, got.removed), (10_500, 500, 20_000));
        assert_eq!((got.requests_since, got.paid_back_after), (6, Some(6)));
        let short = UsageLog {
            responses: log.responses[..9].to_vec(),
            calls: log.calls.clone(),
        };
        let bill = Bill::of(&short, &[b], Weights::ANTHROPIC, None, &|_| 20_000);
        assert_eq!(bill.blocks[0].paid_back_after, None, "not yet");
    }
}
