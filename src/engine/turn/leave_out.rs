//! The last resort of a view that no cut can bring under the window: its
//! oldest exchanges are left out first, and only the outputs of what stays
//! are cut. A first turn of a long session that never compressed shows a
//! few hundred of its messages; cutting the outputs of all of them first
//! cost the turn its time, and told the model of cuts it never saw.

use std::collections::BTreeSet;

use crate::engine::model::config::Config;
use crate::engine::model::exchange;
use crate::engine::model::message::{ContentType, CoreMessage};
use crate::engine::model::name::Name;

use super::deferred::DeferredOutputs;
use super::truncate::{self, LAST_RESORT_MIN_TOKENS, PASSES, Truncation};

/// Whether no cut can bring `view` down far enough: the messages no cut
/// shortens (all but tool results of [`LAST_RESORT_MIN_TOKENS`] and more)
/// are, by their own estimate, what `beyond` calls too much.
pub fn beyond_cutting(view: &[CoreMessage], cfg: &Config, beyond: impl Fn(usize) -> bool) -> bool {
    let mut uncut = 0;
    for m in view {
        let tokens = cfg.tokens(m);
        if m.content_type != ContentType::ToolResult || tokens < LAST_RESORT_MIN_TOKENS {
            uncut += tokens;
            if beyond(uncut) {
                return true;
            }
        }
    }
    false
}

/// What [`leave_out_first`] decided.
#[derive(Debug, Default)]
pub struct LeftOut {
    /// The outputs it cut, all of them in what stays.
    pub cut: Truncation,
    /// By place in the view, whether the message goes.
    pub gone: Vec<bool>,
    /// The estimate of what stays, cut.
    pub left: usize,
}

/// Chooses the oldest exchanges of `view` to leave out until what stays,
/// its outputs cut, is down to `target`, and cuts those outputs and no
/// others. Each is cut as the passes of [`truncate::cut_largest`] cut every
/// output when they cannot reach their target, and joins the session's
/// cuts, `sticky`. The exchanges go as [`truncate::omit`] takes them: the
/// task and what comes before it, block summaries and the last exchange
/// stay, and a call goes or stays with its results. They are still in the
/// view, uncut, for what the turn tells of the whole history; the turn
/// drops them before the view goes out.
pub fn leave_out_first(
    view: &mut [CoreMessage],
    (target, cfg): (usize, &Config),
    (sticky, deferred): (&mut BTreeSet<Name>, &mut DeferredOutputs),
) -> LeftOut {
    let spans = exchange::spans(view);
    let units = truncate::exchanges_that_may_go(view, &spans);
    let mut gone = vec![false; view.len()];
    for &(start, end) in &units {
        gone[start..=end].fill(true);
    }
    let mut cuts = Cuts::new(view.len());
    let mut left: usize = (0..view.len())
        .filter(|&i| !gone[i])
        .map(|i| cuts.size(view, i, (cfg, sticky, deferred)))
        .sum();
    // The newest exchanges that may go stay while they fit; the first that
    // does not goes, with every one before it.
    for &(start, end) in units.iter().rev() {
        let size: usize = (start..=end)
            .map(|i| cuts.size(view, i, (cfg, sticky, deferred)))
            .sum();
        if left + size > target {
            break;
        }
        left += size;
        gone[start..=end].fill(false);
    }
    truncate::keep_pairs_together(view, &spans, &mut gone);
    let mut out = LeftOut::default();
    for (i, &g) in gone.iter().enumerate() {
        match g {
            true => cuts.undo(&view[i], i, sticky),
            false => {
                out.left += cuts.size(view, i, (cfg, sticky, deferred));
                if let Some(saved) = cuts.saved(i) {
                    out.cut.count += 1;
                    out.cut.saved += saved;
                }
            }
        }
    }
    out.gone = gone;
    out
}

/// What [`leave_out_first`] has cut so far, by place in the view.
struct Cuts {
    /// For each place sized: its estimate once cut, what the cut saved,
    /// and whether the cut put its id among the session's cuts.
    sized: Vec<Option<CutSize>>,
}

/// A message of the view as [`Cuts`] sized it.
#[derive(Clone, Copy)]
struct CutSize {
    size: usize,
    cut: Option<(usize, bool)>,
}

impl Cuts {
    fn new(n: usize) -> Cuts {
        Cuts {
            sized: vec![None; n],
        }
    }

    /// The estimate of the message at `i` once cut, cutting it the first
    /// time it is asked for.
    fn size(
        &mut self,
        view: &mut [CoreMessage],
        i: usize,
        (cfg, sticky, deferred): (&Config, &mut BTreeSet<Name>, &mut DeferredOutputs),
    ) -> usize {
        if let Some(s) = self.sized[i] {
            return s.size;
        }
        let m = &mut view[i];
        let cut =
            cut_all_the_way(m, cfg, deferred).map(|saved| (saved, sticky.insert(m.id.clone())));
        let s = CutSize {
            size: cfg.tokens(m),
            cut,
        };
        self.sized[i] = Some(s);
        s.size
    }

    /// What the cut of the message at `i` saved; `None` when it was not
    /// cut.
    fn saved(&self, i: usize) -> Option<usize> {
        self.sized[i].and_then(|s| s.cut).map(|(saved, _)| saved)
    }

    /// Takes the cut of `m`, at `i`, out of the session's cuts: it goes.
    fn undo(&mut self, m: &CoreMessage, i: usize, sticky: &mut BTreeSet<Name>) {
        if let Some(CutSize {
            cut: Some((_, true)),
            ..
        }) = self.sized[i]
        {
            sticky.remove(m.id.as_str());
        }
    }
}

/// Cuts `m` as the [`PASSES`] of [`truncate::cut_largest`] cut an output
/// when they cannot reach their target: by the first pass it is large
/// enough for whose cut saves something; never one cut already. What it
/// saved; `None` when it was not cut.
fn cut_all_the_way(
    m: &mut CoreMessage,
    cfg: &Config,
    deferred: &mut DeferredOutputs,
) -> Option<usize> {
    if m.content_type != ContentType::ToolResult {
        return None;
    }
    let tokens = cfg.tokens(m);
    let at = deferred.place(m);
    if tokens < LAST_RESORT_MIN_TOKENS || deferred.cut_made_at(at) || deferred.marked_at(at, m) {
        return None;
    }
    (PASSES.into_iter())
        .filter(|&(min_tokens, _)| tokens >= min_tokens)
        .find_map(|(_, keep)| truncate::cut_either((&mut *m, at), keep, cfg, deferred))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::engine::model::message::{Edit, Role};

    fn note(gone: &[&CoreMessage]) -> CoreMessage {
        CoreMessage::text("note", Role::User, format!("{} left out", gone.len()))
    }

    /// A session of `outputs` exchanges after its task: each a call, its
    /// output of so many words, and the model's words on it; an output
    /// `apart` from its call has a message between them, as a Codex
    /// rollout can.
    fn view(outputs: &[(usize, usize, bool)]) -> Vec<CoreMessage> {
        let mut v = vec![CoreMessage::text("task", Role::User, "the task")];
        for (i, &(output, said, apart)) in outputs.iter().enumerate() {
            let call = format!("k{i}");
            v.push(CoreMessage::tool_call(format!("c{i}"), &call, "Read", "{}"));
            if apart {
                v.push(CoreMessage::text(
                    format!("u{i}"),
                    Role::User,
                    "go on ".repeat(said),
                ));
            }
            let words = "lorem ipsum dolor sit amet ".repeat(output);
            v.push(CoreMessage::tool_result(
                format!("r{i}"),
                &call,
                "Read",
                words,
            ));
            v.push(CoreMessage::text(
                format!("a{i}"),
                Role::Assistant,
                "noted ".repeat(said),
            ));
        }
        v
    }

    fn shown(v: &[CoreMessage]) -> Vec<(&str, &str)> {
        v.iter().map(|m| (m.id.as_str(), m.text.as_str())).collect()
    }

    proptest! {
        /// Leaving out first keeps what cutting every output and then
        /// leaving out kept, word for word; but only what stays is cut, and
        /// only what stays joins the session's cuts.
        #[test]
        fn leaving_out_first_keeps_what_cutting_first_kept(
            outputs in prop::collection::vec(
                (0usize..2_000, 0usize..400, prop::bool::weighted(0.2)),
                4..40,
            ),
            share in 5usize..60,
        ) {
            let cfg = Config::default();
            let before = view(&outputs);
            let estimate: usize = before.iter().map(|m| cfg.tokens(m)).sum();
            let uncut: usize = (before.iter())
                .filter(|m| {
                    m.content_type != ContentType::ToolResult
                        || cfg.tokens(m) < LAST_RESORT_MIN_TOKENS
                })
                .map(|m| cfg.tokens(m))
                .sum();
            let target = uncut * share / 100;
            prop_assume!(beyond_cutting(&before, &cfg, |n| n > target));

            let mut old = before.clone();
            let mut old_sticky = BTreeSet::new();
            let cut = truncate::cut_largest(
                &mut old,
                estimate,
                target,
                &cfg,
                &mut old_sticky,
                &mut DeferredOutputs::default(),
            );
            truncate::omit(&mut old, estimate - cut.saved, target, &cfg, note);

            let mut new = before.clone();
            let mut new_sticky = BTreeSet::new();
            let out = leave_out_first(
                &mut new,
                (target, &cfg),
                (&mut new_sticky, &mut DeferredOutputs::default()),
            );
            let omitted = truncate::drop_gone(&mut new, out.gone, note);

            prop_assert!(omitted > 0);
            prop_assert_eq!(shown(&new), shown(&old));
            let cut_shown: BTreeSet<Name> = (new.iter())
                .filter(|m| matches!(m.edit, Edit::Truncated(_)))
                .map(|m| m.id.clone())
                .collect();
            prop_assert_eq!(&new_sticky, &cut_shown);
            prop_assert!(new_sticky.is_subset(&old_sticky));
            prop_assert_eq!(out.cut.count, cut_shown.len());
            let left: usize = (new.iter()).filter(|m| m.id != "note").map(|m| cfg.tokens(m)).sum();
            prop_assert_eq!(out.left, left);
        }
    }
}
