//! `noa apply`: a Compress call becomes blocks, archives, and a panel.

use std::fs;
use std::io::{Read, Write};

use serde::Serialize;

use super::args::{ApplyArgs, Global};
use super::clock;
use super::context::Context;
use super::output::warn;
use super::{CliError, Exit};
use crate::engine::Expected;
use crate::engine::{
    self, Answer, COMPRESS_TOOL, CallInput, CompressionState, ContentType, CoreMessage, IdMap,
    IdSet, Name, Reclaimed,
};
use crate::store::{CacheWrite, LeftWords, Projected, Purpose};

/// Runs `noa apply`.
pub fn run(global: &Global, args: &ApplyArgs) -> Result<Exit, CliError> {
    if args.transcript.as_os_str() == "-"
        && args.args.as_ref().is_some_and(|a| a.as_os_str() == "-")
    {
        return Err(CliError::Usage(
            "the transcript and --args cannot both come from stdin; put one of them in a file"
                .into(),
        ));
    }
    let mut watch = clock::Stopwatch::start();
    // Read on from the read cache the last turn left, when it serves: a
    // call names messages that turn's view showed, and the cache kept their
    // words. The session's lock and state are taken while the cache is
    // decoded; the command says it writes once it has found its call.
    let mut cx = Context::open(global, &args.transcript, Purpose::Call)?;
    // A call that is not there is a usage error before anything is touched.
    let mut call = find_call(cx.session.history(), args)?;
    cx.session.lock()?;
    let state = cx.state()?;
    // Long outputs' words the cache kept back are read only for the
    // archives that need them, unless another counter counts them.
    if cx.session.warm()
        && (!cx.session.cache_serves(&state)
            || !cx.decides_unread(&state) && !cx.session.read_withheld())
    {
        cx.session.read_whole()?;
        call = find_call(cx.session.history(), args)?;
    }
    if let Some(done) = engine::answered_before(&state, &call.id) {
        // A retry of a call already applied: the same answer, nothing changed.
        let report = Retried {
            panel: &done.panel,
            call_id: &call.id,
            applied_before: true,
        };
        print_outcome(args.json, &done.panel, &report)?;
        warn(global, &cx.session.warnings());
        return Ok(exit(done.rejected));
    }
    let read = watch.lap();
    let now = clock::now();
    let when = When {
        now,
        created: clock::rfc3339(now),
        root: cx.session.root(),
    };
    let call_id = call.id.clone();
    let committed = answer_and_commit(&mut cx, args, state, call, &when, &mut watch)?;
    let answer = committed.answer;
    let cache_warning = save_cache(&mut cx, &answer);
    if global.verbose {
        let archives = &answer.outcome.archives;
        let _ = writeln!(
            std::io::stderr(),
            "noa: apply: read {} ({}) · engine {} · wrote {} archive(s) ({:.1} MB), the state and the read cache in {}",
            clock::ms(read),
            cx.session.read_how(),
            clock::ms(committed.engine),
            archives.len(),
            committed.bytes as f64 / 1e6,
            clock::ms(watch.lap())
        );
    }
    print_outcome(args.json, &answer.panel, &applied(&answer, &call_id, &cx))?;
    let mut warnings = cx.session.warnings();
    warnings.extend(cache_warning);
    warn(global, &warnings);
    Ok(exit(answer.rejected()))
}

/// Exit 1 for a call that made no block, else 0.
fn exit(rejected: bool) -> Exit {
    if rejected {
        Exit::Rejected
    } else {
        Exit::Success
    }
}

/// When the call is answered, and where its archives go.
struct When {
    now: i64,
    /// `now` as an archive's header writes it.
    created: String,
    /// The state dir the archives' paths are written from.
    root: String,
}

/// A call answered and committed.
struct Committed {
    answer: Answer,
    /// How long the engine took, the first time.
    engine: std::time::Duration,
    /// The archives' bytes.
    bytes: usize,
}

/// Answers `call` against `state` and commits the answer: archives, then
/// the state. Read on from the cache, a block over a message whose words the
/// cache left out, or words kept back that cannot be read back, send the
/// call to be answered again on the transcript read whole. `watch` times
/// the engine.
fn answer_and_commit(
    cx: &mut Context,
    args: &ApplyArgs,
    state: CompressionState,
    call: Call,
    when: &When,
    watch: &mut clock::Stopwatch,
) -> Result<Committed, CliError> {
    // The call answered again on the transcript read whole.
    let answer_whole = |cx: &mut Context| -> Result<Answer, CliError> {
        cx.session.read_whole()?;
        let state = cx.reload_state()?;
        cx.read_reclaim_words(&cx.config(&state));
        let originals = cx.session.originals();
        Ok(answer_on(
            cx,
            &originals,
            state,
            &find_call(cx.session.history(), args)?,
            when,
        ))
    };
    // The history by id: what the call is answered against and its
    // archives are rendered from.
    cx.read_reclaim_words(&cx.config(&state));
    let originals = cx.session.originals();
    let mut answer = answer_on(cx, &originals, state, &call, when);
    let originals = if cx.session.warm() && archives_elided(cx, &answer) {
        // A block over a message whose words the cache left out would
        // archive nothing of it.
        answer = answer_whole(cx)?;
        cx.session.originals()
    } else {
        originals
    };
    let engine = watch.lap();
    let left = cx.session.left_words();
    let committed =
        (cx.session.dir()).commit(&answer.outcome.archives, (&originals, &left), &answer.state);
    drop((left, originals));
    let bytes = match committed {
        // Words the cache kept back that cannot be read back from it (a
        // damaged word fails its digest): nothing was written.
        Err(e) if cx.session.warm() && e.in_read_cache() => {
            answer = answer_whole(cx)?;
            let (originals, none) = (cx.session.originals(), LeftWords::default());
            (cx.session.dir()).commit(
                &answer.outcome.archives,
                (&originals, &none),
                &answer.state,
            )?
        }
        committed => committed?,
    };
    Ok(Committed {
        answer,
        engine,
        bytes,
    })
}

/// The engine's answer to `call` on `state`, over the history `cx` read.
fn answer_on(
    cx: &Context,
    originals: &IdMap<'_, &CoreMessage>,
    state: CompressionState,
    call: &Call,
    when: &When,
) -> Answer {
    let config = cx.config(&state);
    engine::answer_call(
        state,
        &CallInput {
            args: &call.args,
            call_id: &call.id,
            history: cx.session.history(),
            originals,
            cut: call.cut,
            config: &config,
            recorded: &cx.session.transcript().recorded(),
            sections: &cx.settings.sections,
            archive_root: &when.root,
            created: &when.created,
            now: when.now,
            cuts: &cx.session.kept_cuts(),
            index: None,
            scan: None,
            weights: cx.session.transcript().format.weights(),
        },
    )
}

/// Leaves the read cache without the words the new blocks fold away, so
/// the next turn reads on from a small one. Of the words it keeps that it
/// kept back, it writes where they lie, as a first turn does; only a cache
/// another counter counts with reads them first, to count them. It only
/// saves work: a cache that cannot be written leaves the last turn's, which
/// the next turn checks. Returns the warning to give when it was not saved.
fn save_cache(cx: &mut Context, answer: &Answer) -> Option<String> {
    if answer.hidden.is_empty() {
        return None;
    }
    let projected = Projected {
        hidden: &answer.hidden,
        view: &[],
        cuts: &answer.cuts,
    };
    let tokenizer = cx.config(&answer.state).tokenizer;
    let writes_places = cx.decides_unread(&answer.state);
    let error = match writes_places || cx.session.read_kept_withheld(&answer.hidden) {
        true => (cx.session)
            .save_read_cache(tokenizer, projected, CacheWrite::Anew)
            .err()
            .map(|e| e.to_string()),
        false => Some("the words it keeps could not be read back from it".into()),
    };
    error.map(|e| format!("the read cache was not saved: {e}"))
}

/// `apply --json` of `answer`.
fn applied<'a>(answer: &'a Answer, call_id: &'a str, cx: &Context) -> Applied<'a> {
    let (outcome, parsed) = (&answer.outcome, &answer.parsed);
    let created = (outcome.created.iter())
        .map(|(b, _)| Created {
            id: &b.block_id,
            tier: b.tier,
            start: &b.start_ref,
            end: &b.end_ref,
            archive: &b.archive_path,
        })
        .collect();
    Applied {
        panel: &answer.panel,
        call_id,
        created,
        errors: &outcome.errors,
        warnings: &outcome.warnings,
        parse: parsed.kind.as_str(),
        repairs: &parsed.repairs,
        context_before: answer.context_before,
        context_after: answer.context_after,
        reclaimed: answer.reclaimed,
        expected: answer.expected,
        read: cx.session.read_how(),
    }
}

/// `apply --json` for a call applied now.
#[derive(Serialize)]
struct Applied<'a> {
    panel: &'a str,
    call_id: &'a str,
    created: Vec<Created<'a>>,
    errors: &'a [String],
    warnings: &'a [String],
    parse: &'static str,
    repairs: &'a [&'static str],
    /// The context before and after the call (see the panel).
    context_before: usize,
    context_after: usize,
    reclaimed: Reclaimed,
    /// What the call is expected to do to the bill.
    expected: Option<Expected>,
    read: &'static str,
}

/// A block the call made.
#[derive(Serialize)]
struct Created<'a> {
    id: &'a str,
    tier: u8,
    start: &'a str,
    end: &'a str,
    archive: &'a str,
}

/// `apply --json` for a call applied before: its answer again.
#[derive(Serialize)]
struct Retried<'a> {
    panel: &'a str,
    call_id: &'a str,
    applied_before: bool,
}

/// The call to answer.
struct Call {
    /// Its raw arguments.
    args: String,
    /// Its id; empty for arguments given with `--args`.
    id: String,
    /// How much of the history the model had seen when it made it.
    cut: usize,
}

/// Whether a block of `answer` covers a message whose words the read cache
/// left out (an archive must hold every original whole).
fn archives_elided(cx: &Context, answer: &Answer) -> bool {
    let mut elided = cx.session.elided_ids().peekable();
    if elided.peek().is_none() {
        return false;
    }
    let taken: IdSet<'_> = (answer.outcome.created.iter())
        .flat_map(|(b, _)| &b.direct_message_ids)
        .map(Name::as_str)
        .collect();
    elided.any(|id| taken.contains(id))
}

/// Prints the panel, or with `--json` the report object that holds it.
fn print_outcome(json: bool, panel: &str, report: &impl Serialize) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    let printed = if json {
        let report = serde_json::to_string(report).expect("a report always serializes");
        writeln!(out, "{report}")
    } else {
        writeln!(out, "{panel}")
    };
    printed.map_err(|source| CliError::Io {
        path: "<stdout>".into(),
        error: source,
    })
}

/// The raw arguments, the call id, and how much of the history the model
/// had seen when it made the call (everything before the call's message).
fn find_call(history: &[CoreMessage], args: &ApplyArgs) -> Result<Call, CliError> {
    if let Some(path) = &args.args {
        let mut raw = String::new();
        if path.as_os_str() == "-" {
            std::io::stdin()
                .read_to_string(&mut raw)
                .map_err(|source| CliError::Io {
                    path: "<stdin>".into(),
                    error: source,
                })?;
        } else {
            raw = fs::read_to_string(path).map_err(|source| CliError::Io {
                path: path.clone(),
                error: source,
            })?;
        }
        return Ok(Call {
            args: raw,
            id: String::new(),
            cut: history.len(),
        });
    }
    let answered: std::collections::HashSet<&str> = history
        .iter()
        .filter(|m| m.content_type == ContentType::ToolResult)
        .map(|m| m.tool_call_id.as_str())
        .collect();
    let position = history.iter().rposition(|m| {
        m.content_type == ContentType::ToolCall
            && m.tool_name == COMPRESS_TOOL
            && match &args.call_id {
                Some(id) => m.tool_call_id == *id,
                None => !answered.contains(m.tool_call_id.as_str()),
            }
    });
    let Some(i) = position else {
        return Err(CliError::Usage(match &args.call_id {
            Some(id) => format!("no Compress call with id {id:?} in the transcript"),
            None => "no Compress call without a result in the transcript; name one with --call-id or pass --args".into(),
        }));
    };
    // The model saw everything before the call (see `RecordedCall::cut`).
    Ok(Call {
        args: history[i].text.clone(),
        id: history[i].tool_call_id.to_string(),
        cut: i,
    })
}
