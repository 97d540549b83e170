//! The engine's settings for one run: defaults, then a config file, then flags.

use std::fs;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::CliError;
use super::args::{Global, MIN_WINDOW, TokenizerArg};
use crate::engine::Config;
use crate::engine::CoreMessage;
use crate::engine::FileTools;
use crate::engine::Prices;
use crate::engine::Sections;
use crate::engine::Tokenizer;
use crate::engine::{GivenWindow, HostState, WindowFrom};
use crate::formats::Format;

/// A config file: `[engine]` holds every engine knob, `[prompt]` the surface
/// sections of the prompt and nudge texts a host may reword, `[bill]` the
/// prices per million tokens `inspect` turns a bill into money with,
/// `[reclaim]` the host's own tools that read or change a file.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct FileConfig {
    engine: Config,
    prompt: Sections,
    bill: Option<Prices>,
    reclaim: FileTools,
}

/// Resolved settings, and what looked doubtful in them.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// Engine settings.
    pub config: Config,
    /// Prompt and nudge overrides.
    pub sections: Sections,
    /// The config file read, if any.
    pub file: Option<PathBuf>,
    /// Doubtful values, each named.
    pub warnings: Vec<String>,
    /// Where this run was given its window, if it was: else the window
    /// the session's last turn was given stands, then the default.
    pub given: Option<WindowFrom>,
    /// Prices per million tokens, if the config file gives them.
    pub prices: Option<Prices>,
}

impl Settings {
    /// The window in force: the one this run was given, else the one the
    /// session's last turn was given, else the default; or the one the
    /// provider taught us when smaller.
    pub fn window(&self, host: &HostState) -> usize {
        let configured = self.window_given_or_kept(host);
        match host.learned_window.filter(|w| *w > 0) {
            Some(w) => configured.min(w),
            None => configured,
        }
    }

    /// The window this run was given, for the session to keep.
    pub fn given_window(&self) -> Option<GivenWindow> {
        self.given.map(|from| GivenWindow {
            tokens: self.config.context_limit,
            from,
        })
    }

    /// Where the window in force comes from, in words (`window_from` in
    /// the JSON reports).
    pub fn window_source(&self, host: &HostState) -> &'static str {
        self.window_origin(host).0
    }

    /// [`Settings::window_source`] as a sentence says it after "the 16K
    /// window": "from --limit", "by default".
    pub fn window_said(&self, host: &HostState) -> &'static str {
        self.window_origin(host).1
    }

    /// Where the window in force comes from: its name, and its words after
    /// the window.
    fn window_origin(&self, host: &HostState) -> (&'static str, &'static str) {
        let learned = host
            .learned_window
            .is_some_and(|w| w > 0 && w < self.window_given_or_kept(host));
        let learned_from = "learned from the provider's overflow error";
        match (learned, self.given, host.window.map(|w| w.from)) {
            (true, _, _) => (learned_from, learned_from),
            (_, Some(WindowFrom::Flag), _) => ("--limit", "from --limit"),
            (_, Some(WindowFrom::Config), _) => ("the config file", "from the config file"),
            (_, None, Some(WindowFrom::Flag)) => {
                ("--limit of the last turn", "from --limit of the last turn")
            }
            (_, None, Some(WindowFrom::Config)) => (
                "the config file of the last turn",
                "from the config file of the last turn",
            ),
            (_, None, None) => ("the default", "by default"),
        }
    }

    /// Refuses a window given this run (`--limit`, or the config file's
    /// `context_limit`) that cannot hold what no compression frees in
    /// `history`: the task, the recent zone and the reply's room. Such a
    /// window only ever runs over, so the run stops before anything is
    /// written and says the smallest window that would do.
    pub fn check_floor(&self, history: &[CoreMessage]) -> Result<(), CliError> {
        let Some(from) = self.given else {
            return Ok(());
        };
        let floor = self.config.floor(history);
        if floor.holds() && floor.window >= MIN_WINDOW {
            return Ok(());
        }
        let smallest = self.config.smallest_window(floor.task).max(MIN_WINDOW);
        let named = match from {
            WindowFrom::Flag => "--limit",
            WindowFrom::Config => "the config file's context_limit",
        };
        Err(CliError::Usage(format!(
            "a window of {} tokens ({named}) cannot hold what compression never frees: the task \
             ({} tokens), the recent zone ({}) and the room for the reply ({}); the smallest \
             window that could work is {smallest} tokens",
            floor.window, floor.task, floor.zone, floor.reserve,
        )))
    }

    fn window_given_or_kept(&self, host: &HostState) -> usize {
        match (self.given, host.window) {
            (None, Some(w)) => w.tokens,
            _ => self.config.context_limit,
        }
    }

    /// The config the engine decides on: the window in force, less the
    /// room kept for the reply, and the host's request overhead for the
    /// transcript's format unless the config names one.
    pub fn for_host(&self, host: &HostState, format: Option<Format>) -> Config {
        Config {
            context_limit: self.window(host),
            request_overhead: self
                .config
                .request_overhead
                .or(format.map(Format::host_overhead)),
            ..self.config.clone()
        }
        .budgeted()
    }
}

/// Reads `--config FILE`, else `noa.toml` or `.noa/config.toml` beside the
/// transcript, then applies the flags, which win.
pub fn load(global: &Global, transcript: Option<&Path>) -> Result<Settings, CliError> {
    let file = match &global.config {
        Some(f) => Some(f.clone()),
        None => transcript.and_then(Path::parent).and_then(|dir| {
            [dir.join("noa.toml"), dir.join(".noa").join("config.toml")]
                .into_iter()
                .find(|p| p.is_file())
        }),
    };
    let (parsed, file_window) = match &file {
        Some(path) => {
            let text = fs::read_to_string(path).map_err(|source| CliError::Io {
                path: path.clone(),
                error: source,
            })?;
            let parsed = toml::from_str::<FileConfig>(&text).map_err(|e| {
                CliError::Usage(format!("{}: {}", path.display(), e.to_string().trim_end()))
            })?;
            (parsed, names_window(&text))
        }
        None => (FileConfig::default(), false),
    };
    let given = match (global.limit, file_window) {
        (Some(_), _) => Some(WindowFrom::Flag),
        (None, true) => Some(WindowFrom::Config),
        (None, false) => None,
    };
    let mut config = parsed.engine;
    config.file_tools = parsed.reclaim;
    with_flags(&mut config, global);
    let warnings = config.validate();
    Ok(Settings {
        config,
        sections: parsed.prompt,
        file,
        warnings,
        given,
        prices: parsed.bill,
    })
}

/// The engine settings the flags give, over the file's: flags win.
fn with_flags(config: &mut Config, global: &Global) {
    if let Some(limit) = global.limit {
        config.context_limit = limit;
    }
    if let Some(n) = global.preserve_messages {
        config.preserve_recent_messages = n;
    }
    if let Some(n) = global.preserve_tokens {
        config.preserve_recent_tokens = Some(n);
    }
    if let Some(n) = global.reserve_output {
        config.reserve_output = Some(n);
    }
    if let Some(t) = global.tokenizer {
        config.tokenizer = match t {
            TokenizerArg::Estimate => Tokenizer::Estimate,
            TokenizerArg::O200k => Tokenizer::O200k,
            TokenizerArg::Cl100k => Tokenizer::Cl100k,
        };
    }
    config
        .protected_tools
        .extend(global.protect.iter().cloned());
    if global.no_reclaim {
        config.reclaim = false;
    }
}

/// Whether a config file's text sets `engine.context_limit` (its default
/// is not a window anyone gave).
fn names_window(text: &str) -> bool {
    text.parse::<toml::Table>().is_ok_and(|t| {
        t.get("engine")
            .and_then(|e| e.get("context_limit"))
            .is_some()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_sets_engine_knobs_and_prompt_sections() {
        let f: FileConfig = toml::from_str(
            "[engine]\ncontext_limit = 40000\nprotected_tools = [\"Write\", \"mcp__*\"]\n[engine.tiers]\nmax_tier = 2\n[prompt]\nefficiency_note = \"Keep it lean, please.\"\n",
        )
        .unwrap();
        assert_eq!(f.engine.context_limit, 40_000);
        assert_eq!(f.engine.tiers.max_tier, 2);
        assert_eq!(
            f.engine.tiers.tier2_trigger, 5,
            "unset knobs keep their defaults"
        );
        assert_eq!(f.engine.protected_tools, ["Write", "mcp__*"]);
        assert_eq!(
            f.prompt.efficiency_note.as_deref(),
            Some("Keep it lean, please.")
        );
    }

    #[test]
    fn unknown_keys_are_refused() {
        assert!(toml::from_str::<FileConfig>("[engine]\ncontext_limt = 1\n").is_err());
        assert!(toml::from_str::<FileConfig>("[prompt]\nhow_to_compress = \"\"\n").is_err());
    }
}
