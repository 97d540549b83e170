//! What every command on a transcript starts from, set up one way: the
//! session opened (see [`Session`]) and the settings resolved beside it.
//!
//! What is left here is what only the command line knows: the settings that
//! make the engine's config, the state a lost one is rebuilt to (with a
//! progress bar and a line on stderr), and what is said of a state the
//! transcript does not match. Commands project through
//! [`Context::project`], so each one sees the view the host sees.

use std::io::{IsTerminal, Write};
use std::path::Path;

use indicatif::{ProgressBar, ProgressStyle};

use super::args::{Bars, FormatArg, Global};
use super::hooks::CliHooks;
use super::settings::{self, Settings};
use super::{CliError, clock};
use crate::engine::{
    self, CompressionState, Config, CoreMessage, IdMap, Projection, RebuildInput, Rebuilt,
    Tokenizer, TurnInput, block_count, recorded_calls,
};
use crate::formats::{BadLines, Format};
use crate::store::{Purpose, Session, SessionOptions};

/// One command's session and settings.
pub struct Context<'g> {
    /// The global flags.
    pub global: &'g Global,
    /// Defaults, config file and flags, resolved.
    pub settings: Settings,
    /// The transcript read, and the session it belongs to.
    pub session: Session,
}

/// What one projection asks beyond the defaults.
#[derive(Debug, Clone, Copy, Default)]
pub struct Turn {
    /// The host's own figure for the request, if it gave one.
    pub input_tokens: Option<usize>,
    /// Nudge now whatever the pressure.
    pub force_nudge: bool,
}

impl<'g> Context<'g> {
    /// Reads the transcript at `path` for `purpose` and opens its session,
    /// with the settings found beside it. Stdin needs an explicit state dir
    /// and session: noa never guesses where originals are kept.
    pub fn open(global: &'g Global, path: &Path, purpose: Purpose) -> Result<Self, CliError> {
        if path.as_os_str() == "-" && (global.state_dir.is_none() || global.session.is_none()) {
            return Err(CliError::Usage(
                "reading a transcript from stdin needs --state-dir (or NOA_STATE_DIR) and --session: noa will not guess where to keep a session's state".into(),
            ));
        }
        let hooks = Box::new(CliHooks {
            quiet: global.quiet || global.bars == Bars::BatchOnly,
        });
        let session = Session::open(path, options(global), purpose, hooks)?;
        let settings = settings::load(global, Some(session.path()))?;
        Ok(Context {
            global,
            settings,
            session,
        })
    }

    /// The config the engine decides on for `state`'s host.
    pub fn config(&self, state: &CompressionState) -> Config {
        let format = self.session.transcript().format;
        self.settings.for_host(&state.host, Some(format))
    }

    /// Whether a command with `state` decides as it would with the words
    /// the read cache kept back ([`CoreMessage::withheld`]): when its
    /// figures are the estimate's.
    pub fn decides_unread(&self, state: &CompressionState) -> bool {
        self.config(state).tokenizer == Tokenizer::Estimate
    }

    /// Reads the words the reclaim scan needs that the read cache kept
    /// back (see [`engine::words_needed`]), so what a call or a rebuild
    /// finds dead is what a read of the whole transcript finds. Words that
    /// cannot be read are left: the scan then finds less, never more.
    pub fn read_reclaim_words(&mut self, config: &Config) {
        if config.reclaim {
            let places = engine::words_needed(self.session.history(), &config.file_tools);
            self.session.read_words_at(&places);
        }
    }

    /// One turn's projection of the whole transcript onto `state`.
    pub fn project(&self, state: &mut CompressionState, turn: Turn) -> Projection {
        let config = self.config(state);
        let session = &self.session;
        let p = engine::project(
            state,
            &TurnInput {
                history: session.history(),
                config: &config,
                input_tokens: turn.input_tokens,
                recorded: &session.transcript().recorded(),
                sections: &self.settings.sections,
                force_nudge: turn.force_nudge,
                for_call: false,
                cuts: &session.kept_cuts(),
            },
        );
        session.note_compactions(state);
        p
    }

    /// The state the command works on: the session's own (or a parent's),
    /// or, when it was lost, the one the transcript's records rebuild —
    /// saved with its archives when the command writes.
    pub fn state(&self) -> Result<CompressionState, CliError> {
        if let Some(state) = self.session.saved_state()? {
            self.report_unknown_calls(&state);
            return Ok(state);
        }
        let base = self.session.base_state()?;
        // A ledger inherited from a parent already holds what the shared
        // part of the log made.
        if !base.blocks.is_empty() {
            return Ok(base);
        }
        Ok(self.recover()?.unwrap_or(base))
    }

    /// The session's state as saved, for a command that read the transcript
    /// again after starting on it (what [`Context::state`] would give,
    /// without its warnings a second time).
    pub fn reload_state(&self) -> Result<CompressionState, CliError> {
        match self.session.dir().load()? {
            Some(saved) => Ok(saved),
            None => self.state(),
        }
    }

    /// [`Context::state`], for a turn whose transcript's prefix may not be
    /// confirmed yet: the turn projects meanwhile on the state loaded as
    /// the cache was read when nothing need be said of it (see
    /// [`Session::unconfirmed_state`]).
    pub fn turn_state(&mut self) -> Result<CompressionState, CliError> {
        match self.session.unconfirmed_state()? {
            Some(state) => Ok(state),
            None => self.state(),
        }
    }

    /// Replays the transcript's Compress calls onto the session's base,
    /// with a progress bar on long logs.
    /// `originals` is [`Session::originals`], which the archives are then
    /// rendered from.
    pub fn rebuild(&self, originals: &IdMap<'_, &CoreMessage>) -> Result<Rebuilt, CliError> {
        let base = self.session.base_state()?;
        let root = self.session.root();
        let now = clock::now();
        let created = clock::rfc3339(now);
        let history = self.session.history();
        let calls = history.iter().filter(|m| m.is_compress_call()).count();
        let bar = progress(self.global, calls as u64);
        let rebuilt = engine::rebuild(&RebuildInput {
            history,
            originals,
            base: &base,
            config: &self.config(&base),
            recorded: &self.session.transcript().recorded(),
            archive_root: &root,
            now,
            created: &created,
            on_step: &|n| bar.set_position(n as u64 + 1),
            weights: self.session.transcript().format.weights(),
        });
        bar.finish_and_clear();
        Ok(rebuilt)
    }

    /// The state a session lost, from the transcript's records: when there
    /// is no state.json but the transcript records Compress calls that made
    /// blocks. One line on stderr says so. `None` when there is nothing to
    /// rebuild.
    fn recover(&self) -> Result<Option<CompressionState>, CliError> {
        let session = &self.session;
        let calls = recorded_calls(session.history());
        if !calls
            .iter()
            .any(|c| c.panel.as_deref().is_some_and(|p| block_count(p) > 0))
        {
            return Ok(None);
        }
        let originals = session.originals();
        let rebuilt = self.rebuild(&originals)?;
        let write = session.writes();
        if write {
            session.dir().commit_rebuilt(
                &rebuilt.archives,
                (&originals, &session.left_words()),
                &rebuilt.state,
            )?;
        }
        if !self.global.quiet {
            let _ = writeln!(
                std::io::stderr(),
                "noa: {} had no state: rebuilt it from the {} Compress call(s) the transcript records ({} block(s)){}",
                session.dir().dir.display(),
                calls.len(),
                rebuilt.state.blocks.len(),
                if write { "" } else { "; not saved" },
            );
        }
        Ok(Some(rebuilt.state))
    }

    /// Says so when the transcript records Compress calls that made blocks
    /// the state knows nothing of: the state is not the one this log built.
    fn report_unknown_calls(&self, state: &CompressionState) {
        if self.global.quiet {
            return;
        }
        let unknown = self.session.unknown_calls(state);
        if let Some(first) = unknown.first() {
            let _ = writeln!(
                std::io::stderr(),
                "noa: warning: {} does not know {} Compress call(s) the transcript records as applied ({first}{}); `noa rebuild --check` lists the differences",
                self.session.dir().state_path().display(),
                unknown.len(),
                if unknown.len() > 1 { ", …" } else { "" },
            );
        }
    }
}

/// What the global flags say of where the session lives and how its
/// transcript is read.
fn options(global: &Global) -> SessionOptions {
    SessionOptions {
        state_dir: global.state_dir.clone(),
        session: global.session.clone(),
        parents: global.parent.clone(),
        format: format(global.format),
        leaf: global.leaf.clone(),
        bad_lines: if global.skip_bad_lines {
            BadLines::Skip
        } else {
            BadLines::Fail
        },
    }
}

fn format(arg: FormatArg) -> Option<Format> {
    match arg {
        FormatArg::Auto => None,
        FormatArg::Chat => Some(Format::Chat),
        FormatArg::Anthropic => Some(Format::Anthropic),
        FormatArg::ClaudeCode => Some(Format::ClaudeCode),
        FormatArg::Codex => Some(Format::Codex),
    }
}

fn progress(global: &Global, len: u64) -> ProgressBar {
    if global.quiet
        || global.bars == Bars::BatchOnly
        || len < 20
        || !std::io::stderr().is_terminal()
    {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    if let Ok(style) = ProgressStyle::with_template("replaying {bar:30} {pos}/{len} Compress calls")
    {
        bar.set_style(style);
    }
    bar
}
