//! Command-line arguments. The doc comments here are the `--help` text.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Exit codes, listed under `noa --help` and in the man page: a heading
/// line, then one `CODE  meaning` line each.
pub const EXIT_STATUS: &str = "\
Exit status:
  0  done (also when stdout is closed early, as by `| head`)
  1  apply: the Compress call was rejected (the panel says why); rebuild --check: states differ
  2  bad input or usage; nothing was written
  3  I/O or internal failure; nothing was half-written";

/// Where `noa completions` output goes, shown under `noa completions --help`
/// and in the man page: a heading line, then one command a line.
pub const INSTALL: &str = "\
To install:
  noa completions bash > ~/.local/share/bash-completion/completions/noa
  noa completions zsh > \"${fpath[1]}/_noa\"
  noa completions fish > ~/.config/fish/completions/noa.fish
  noa completions man > ~/.local/share/man/man1/noa.1";

/// Model-driven context compression for LLM-agent transcripts.
///
/// noa reads an agent's JSONL transcript, gives every message a stable ref,
/// and writes the view to send to the model. It never calls a model itself.
/// Each session keeps its state.json and archives in a folder of its own
/// under --state-dir.
#[derive(Debug, Parser)]
#[command(
    name = "noa",
    version,
    propagate_version = true,
    max_term_width = 100,
    after_help = EXIT_STATUS
)]
pub struct Cli {
    /// Options every command takes.
    #[command(flatten)]
    pub global: Global,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Options every command takes.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Global options")]
pub struct Global {
    /// Where sessions live, one folder each: DIR/SESSION/state.json [default: .noa beside the transcript]
    #[arg(long, global = true, env = "NOA_STATE_DIR", value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Session id, the state's folder name [default: the transcript's own id, else its file stem]
    #[arg(long, global = true, value_name = "ID")]
    pub session: Option<String>,
    /// The transcript's format, when detection guesses wrong
    #[arg(long, global = true, value_enum, default_value_t = FormatArg::Auto)]
    pub format: FormatArg,
    /// The model's context window in tokens (200000, 200k, 1m); a window learned by --overflow-error caps it [default: 200000]
    #[arg(long, global = true, value_name = "TOKENS", value_parser = window)]
    pub limit: Option<usize>,
    /// Engine settings file [default: noa.toml or .noa/config.toml beside the transcript]
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Never compress this tool's calls and results (`Name`, or `prefix*`); repeatable
    #[arg(long, global = true, value_name = "TOOL")]
    pub protect: Vec<String>,
    /// Leave dead tool outputs (reads of files changed since, outputs given again) for the model
    #[arg(long, global = true)]
    pub no_reclaim: bool,
    /// Keep the last N messages out of compression [default: 5]
    #[arg(long, global = true, value_name = "N")]
    pub preserve_messages: Option<usize>,
    /// Keep the last N tokens out of compression (5000, 5k) [default: 5000 on a window of 128K
    /// and up, a proportional share below]
    #[arg(long, global = true, value_name = "N", value_parser = tokens)]
    pub preserve_tokens: Option<usize>,
    /// Room to keep free for the model's reply, in tokens (8192, 8k) [default: min(8192, window / 8)]
    #[arg(long, global = true, value_name = "TOKENS", value_parser = tokens)]
    pub reserve_output: Option<usize>,
    /// How to count tokens: the quick estimate, or an exact BPE count [default: estimate]
    #[arg(long, global = true, value_enum, value_name = "COUNTER")]
    pub tokenizer: Option<TokenizerArg>,
    /// Treat lines that are not valid JSON as warnings instead of errors
    #[arg(long, global = true)]
    pub skip_bad_lines: bool,
    /// Claude Code: read the conversation that ends at this record, not the newest (project -v names the one read)
    #[arg(long, global = true, value_name = "UUID")]
    pub leaf: Option<String>,
    /// A session to start from (its refs and blocks) when this one has no state yet; repeatable, nearest first
    #[arg(long, global = true, value_name = "SESSION")]
    pub parent: Vec<String>,
    /// Print nothing on stderr but errors (no report, no warnings)
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    /// List every warning instead of a count; project also says why it nudged or not
    #[arg(short, long, global = true)]
    pub verbose: bool,
    /// Which progress bars a terminal shows: not an option, but set for
    /// each transcript of a batch, whose own bar is the one shown.
    #[arg(skip)]
    pub bars: Bars,
}

/// Which progress bars a terminal shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Bars {
    /// Each command's own: a long replay's, a large read's.
    #[default]
    Own,
    /// Only a batch's, of the transcripts done.
    BatchOnly,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Write this turn's view: the transcript as the model should see it.
    ///
    /// Assigns refs to new messages, tags user text and tool results with
    /// them, leaves out tool calls and results that lost their partner, and
    /// writes one request message (or input item) per line. The same
    /// transcript and state always give the same bytes.
    Project(ProjectArgs),
    /// Apply the model's Compress call and print the panel to hand back.
    ///
    /// By default applies the last Compress call in the transcript that has no
    /// result yet; refs resolve against the view the model saw when it made
    /// the call. The originals go to markdown archives before the state is
    /// written. Prints the panel (the tool result to return to the model);
    /// exits 1 when no block was created.
    Apply(ApplyArgs),
    /// Write the transcript with its compression baked in, to go on without noa.
    ///
    /// Covered messages are replaced by their blocks' summaries (each with its
    /// archive pointer); there are no ref tags and no nudge. The output is in
    /// the transcript's own format, every kept record with all its fields.
    /// Several transcripts, or a directory, are written into -o DIR. With
    /// --new-session the copy is a new session (a fresh id, fresh record
    /// ids, usage that no longer holds left out) to resume beside the
    /// original. A line on stderr says what was written.
    Materialize(MaterializeArgs),
    /// Show what may be compressed right now, what may not, and why.
    ///
    /// Lists compressible ranges oldest first (messages, tokens, tool and text
    /// share, user messages) merged with the protected spans and the reason
    /// each is protected, then the active blocks and where the context's
    /// tokens are. Writes nothing.
    Ranges(RangesArgs),
    /// Print the resident system-prompt block, or the Compress tool definition.
    ///
    /// Both are set up once: the block goes at the end of the system prompt,
    /// the definition (--tool-schema) into the request's tools. The block
    /// reads its sections from --config, else noa.toml or .noa/config.toml
    /// in the current directory.
    Prompt(PromptArgs),
    /// Rebuild the state from the transcript alone, replaying its Compress calls.
    ///
    /// Every Compress call whose recorded result shows a block is applied
    /// again against the view as it was at that point of the log, with the
    /// summaries from the recorded arguments; archives already on disk are
    /// adopted unchanged. Refuses to replace an existing state.json without
    /// --force; --check compares instead of writing. Several transcripts, or
    /// a directory, give one result each (JSON lines with --json), and the
    /// most severe exit code any gave.
    Rebuild(RebuildArgs),
    /// Show a session's blocks, stats, context breakdown and tier tree.
    ///
    /// Reads the transcript and the session's state.json and writes nothing
    /// but the --svg file. Without a transcript, --session (and --state-dir)
    /// name the session; --block prints one block's archive. With --json,
    /// several transcripts, or a directory, give one JSON line each.
    Inspect(InspectArgs),
    /// Print a shell completion script, or the man page.
    ///
    /// Generated from this same command line; the project keeps copies in
    /// completions/.
    #[command(after_long_help = INSTALL)]
    Completions(CompletionsArgs),
}

/// Arguments of `noa completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// What to print
    #[arg(value_enum, value_name = "SHELL")]
    pub shell: ShellArg,
}

/// `noa completions` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ShellArg {
    /// Bash completion script
    Bash,
    /// Zsh completion script (install as _noa)
    Zsh,
    /// Fish completion script
    Fish,
    /// The roff man page, noa.1
    Man,
}

/// Arguments of `noa rebuild`.
#[derive(Debug, Args)]
pub struct RebuildArgs {
    /// The transcript (JSONL), or - for stdin; several, or a directory (its *.jsonl), for one result each
    #[arg(value_name = "TRANSCRIPT", required = true)]
    pub transcripts: Vec<PathBuf>,
    /// Replace an existing state.json
    #[arg(long, conflicts_with = "check")]
    pub force: bool,
    /// Compare the rebuilt state with the one on disk; exit 1 when they differ
    #[arg(long)]
    pub check: bool,
    /// Print the report as one JSON object
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `noa inspect`.
#[derive(Debug, Args)]
pub struct InspectArgs {
    /// The transcript (JSONL), or - for stdin; without it, --session names the session. With --json, several, or a directory (its *.jsonl), for one JSON line each
    #[arg(value_name = "TRANSCRIPT")]
    pub transcripts: Vec<PathBuf>,
    /// Print one JSON object instead of tables
    #[arg(long)]
    pub json: bool,
    /// Print one block's archive, the markdown of what it replaced (b1, b2, …)
    #[arg(long, value_name = "BLOCK")]
    pub block: Option<String>,
    /// Draw the context map as an SVG file
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
}

/// Arguments of `noa ranges`.
#[derive(Debug, Args)]
pub struct RangesArgs {
    /// The transcript (JSONL), or - for stdin
    #[arg(value_name = "TRANSCRIPT")]
    pub transcript: PathBuf,
    /// Print one JSON object instead of a table
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `noa prompt`.
#[derive(Debug, Args)]
pub struct PromptArgs {
    /// Print the Compress tool definition (JSON) instead of the system block
    #[arg(long)]
    pub tool_schema: bool,
    /// Which provider's tools-array shape the definition takes
    #[arg(long = "for", value_enum, default_value_t = ViewArg::Anthropic, requires = "tool_schema", value_name = "FORMAT")]
    pub flavour: ViewArg,
}

/// Arguments of `noa materialize`.
#[derive(Debug, Args)]
pub struct MaterializeArgs {
    /// The transcript (JSONL), or - for stdin; several, or a directory (its *.jsonl), with -o DIR
    #[arg(value_name = "TRANSCRIPT", required = true)]
    pub transcripts: Vec<PathBuf>,
    /// Write the transcript here (atomically) instead of stdout; an existing directory takes each transcript under its own file name (with --new-session, the name its host gives the new session's log)
    #[arg(short, long, value_name = "OUT")]
    pub output: Option<PathBuf>,
    /// Write the copy as a new session, with an id of its own, that Claude Code or Codex can resume beside the original
    #[arg(long)]
    pub new_session: bool,
}

/// Arguments of `noa apply`.
#[derive(Debug, Args)]
pub struct ApplyArgs {
    /// The transcript (JSONL), or - for stdin
    #[arg(value_name = "TRANSCRIPT")]
    pub transcript: PathBuf,
    /// Apply the Compress call with this tool-call id [default: the last one with no result yet]
    #[arg(long, value_name = "ID", conflicts_with = "args")]
    pub call_id: Option<String>,
    /// Take the Compress arguments from a file (or - for stdin) instead of the transcript
    #[arg(long, value_name = "FILE")]
    pub args: Option<PathBuf>,
    /// Print the panel and structured fields as one JSON object
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `noa project`.
#[derive(Debug, Args)]
pub struct ProjectArgs {
    /// The transcript (JSONL), or - for stdin
    #[arg(value_name = "TRANSCRIPT")]
    pub transcript: PathBuf,
    /// Write the view here (atomically) instead of stdout
    #[arg(short, long, value_name = "VIEW")]
    pub output: Option<PathBuf>,
    /// Request format of the view [default: the transcript's own]
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub to: Option<ViewArg>,
    /// Print the view but write no state: no new refs are kept
    #[arg(long)]
    pub dry_run: bool,
    /// Format of the one-line report on stderr
    #[arg(long, value_enum, default_value_t = ReportArg::Text)]
    pub report: ReportArg,
    /// The provider's input-token count for the last request (21000, 21k; empty: none known yet)
    #[arg(long, value_name = "N", value_parser = token_figure)]
    pub input_tokens: Option<Figure>,
    /// Nudge the model to compress this turn, whatever the pacing says ("compact now")
    #[arg(long)]
    pub nudge: bool,
    /// The provider's error text when a request overflowed: noa learns the real window from it
    #[arg(long, value_name = "TEXT")]
    pub overflow_error: Option<String>,
}

/// A token figure a host may not have yet: `--input-tokens ""` is accepted,
/// so a loop can pass its variable before the first response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Figure(pub Option<usize>);

fn token_figure(s: &str) -> Result<Figure, String> {
    if s.trim().is_empty() {
        return Ok(Figure(None));
    }
    count(s)
        .map(|n| Figure(Some(n)))
        .map_err(|_| format!("{s:?} is not a token count (such as 21000 or 21k, or empty)"))
}

/// The smallest window noa works in. Below it a turn cannot hold what noa
/// itself must send: the emergency nudge alone is about 2,300 tokens, and
/// an eighth of the window is kept for the reply.
pub const MIN_WINDOW: usize = 4_096;

/// A context window as people write it (see [`count`]). A window below
/// [`MIN_WINDOW`] is refused.
fn window(s: &str) -> Result<usize, String> {
    let n = count(s).map_err(|_| {
        format!("{s:?} is not a window size: a number of tokens such as 200000, 200k or 1m")
    })?;
    if n < MIN_WINDOW {
        return Err(format!(
            "a window of {n} tokens cannot hold a turn and the nudge noa sends with it; give the \
             model's context window (such as 200k), at least {MIN_WINDOW}"
        ));
    }
    Ok(n)
}

/// A token count for an option that takes one (`--preserve-tokens`,
/// `--reserve-output`), written as a window is.
fn tokens(s: &str) -> Result<usize, String> {
    count(s).map_err(|_| format!("{s:?} is not a token count: a number such as 5000 or 5k"))
}

/// A number of tokens as people write it: a whole number, with `k`
/// (thousands) or `m` (millions) after it if they like, in either case, and
/// `_` or `,` between digits; `1.5m` is a fraction of the unit.
fn count(s: &str) -> Result<usize, ()> {
    let plain: String = s
        .trim()
        .chars()
        .filter(|c| !matches!(c, '_' | ','))
        .collect();
    let lower = plain.to_ascii_lowercase();
    let (digits, scale) = match lower.strip_suffix('k') {
        Some(d) => (d, 1_000),
        None => match lower.strip_suffix('m') {
            Some(d) => (d, 1_000_000),
            None => (lower.as_str(), 1),
        },
    };
    // Digits only: `parse` would take a leading `+`.
    let number = |t: &str| match t.bytes().all(|b| b.is_ascii_digit()) {
        true => t.parse::<usize>().map_err(|_| ()),
        false => Err(()),
    };
    match digits.split_once('.') {
        Some((whole, frac)) if scale > 1 && !frac.is_empty() && frac.len() <= 3 => {
            let whole = number(whole)?.checked_mul(scale).ok_or(())?;
            Ok(whole + number(frac)? * scale / 10usize.pow(frac.len() as u32))
        }
        Some(_) => Err(()),
        None => number(digits)?.checked_mul(scale).ok_or(()),
    }
}

/// `--tokenizer` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TokenizerArg {
    /// One token per four characters (one per CJK character); nothing to load
    Estimate,
    /// Exact o200k_base counts (GPT-4o, GPT-4.1, GPT-5, o-series)
    O200k,
    /// Exact cl100k_base counts (GPT-4, GPT-3.5)
    Cl100k,
}

/// `--format` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FormatArg {
    /// Detect from the first records
    Auto,
    /// OpenAI Chat Completions messages
    Chat,
    /// Anthropic Messages
    Anthropic,
    /// Claude Code session log
    ClaudeCode,
    /// Codex rollout
    Codex,
}

/// `--to` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ViewArg {
    /// OpenAI Chat Completions messages
    Chat,
    /// Anthropic Messages
    Anthropic,
    /// OpenAI Responses input items
    Responses,
}

/// `--report` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ReportArg {
    /// One line for a person
    Text,
    /// One JSON object
    Json,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_read_as_people_write_them() {
        for (text, n) in [
            ("200000", 200_000),
            ("200k", 200_000),
            ("128K", 128_000),
            ("1m", 1_000_000),
            ("1.5M", 1_500_000),
            ("200_000", 200_000),
            (" 16,384 ", 16_384),
            ("4096", 4_096),
        ] {
            assert_eq!(window(text), Ok(n), "{text}");
        }
        assert_eq!(tokens("5k"), Ok(5_000));
        assert_eq!(tokens("0"), Ok(0));
        assert_eq!(token_figure("21.5K"), Ok(Figure(Some(21_500))));
        assert_eq!(token_figure(" "), Ok(Figure(None)));
        for text in ["+5", "5kk", "99999999999999999999m", "1.5"] {
            assert!(tokens(text).is_err(), "{text}");
        }
        for text in [
            "0", "0k", "100", "4095", "", "k", "12x", "1.5", "-5", "1.2345m",
        ] {
            assert!(window(text).is_err(), "{text}");
        }
    }
}
