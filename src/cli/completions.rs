//! `noa completions`: shell completion scripts and the man page, generated
//! from the same command-line definition as `--help`.

use std::io::{self, Write};

use clap::CommandFactory;
use clap_complete::Shell;
use clap_mangen::Man;
use clap_mangen::roff::{Roff, bold, roman};

use super::args::{Cli, CompletionsArgs, EXIT_STATUS, ShellArg};
use super::output::emit;
use super::{CliError, Exit};

/// Runs `noa completions`.
pub fn run(args: &CompletionsArgs) -> Result<Exit, CliError> {
    emit(None, &render(args.shell))?;
    Ok(Exit::Success)
}

/// The completion script for a shell, or the man page. Rendered into memory
/// first: the generators panic on a failed write, and stdout may be a closed
/// pipe.
pub fn render(shell: ShellArg) -> Vec<u8> {
    let mut cmd = Cli::command();
    let mut out = Vec::new();
    let shell = match shell {
        ShellArg::Bash => Shell::Bash,
        ShellArg::Zsh => Shell::Zsh,
        ShellArg::Fish => Shell::Fish,
        ShellArg::Man => {
            man(cmd, &mut out).expect("writing to memory cannot fail");
            return out;
        }
    };
    clap_complete::generate(shell, &mut cmd, "noa", &mut out);
    out
}

/// One page for the whole tool: the top-level sections, then every command
/// with its synopsis, description and own options (the global ones are
/// listed once, at the top), then the exit status.
fn man(cmd: clap::Command, w: &mut Vec<u8>) -> io::Result<()> {
    let mut cmd = cmd
        .disable_help_subcommand(true)
        .subcommand_value_name("COMMAND");
    cmd.build();
    let page = Man::new(cmd.clone());
    let pieces = Pieces {
        preamble: Roff::new().render(),
    };
    page.render_title(w)?;
    pieces.write(w, &|w| page.render_name_section(w), Headings::Keep)?;
    pieces.write(w, &|w| page.render_synopsis_section(w), Headings::Keep)?;
    pieces.write(w, &|w| page.render_description_section(w), Headings::Keep)?;
    pieces.write(w, &|w| page.render_options_section(w), Headings::Keep)?;

    let mut roff = Roff::new();
    roff.control("SH", ["COMMANDS"]);
    w.write_all(roff.to_roff().as_bytes())?;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        man_command(sub, &pieces, w)?;
    }
    w.write_all(exit_status().to_roff().as_bytes())?;
    pieces.write(w, &|w| page.render_version_section(w), Headings::Keep)?;
    Ok(())
}

/// Whether a piece of the page keeps its section headings: a command's
/// pieces go under the one COMMANDS section, without their own.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Headings {
    Keep,
    Drop,
}

/// Renders pieces of the page, cutting the preamble every rendered piece
/// opens with: the page keeps only the first.
struct Pieces {
    preamble: String,
}

impl Pieces {
    fn write(
        &self,
        w: &mut Vec<u8>,
        render: &dyn Fn(&mut dyn Write) -> io::Result<()>,
        headings: Headings,
    ) -> io::Result<()> {
        let mut buf = Vec::new();
        render(&mut buf)?;
        let text = String::from_utf8(buf).expect("roff output is UTF-8");
        let text = text.strip_prefix(&self.preamble).unwrap_or(&text);
        let kept: String = text
            .lines()
            .filter(|l| headings == Headings::Keep || !l.starts_with(".SH "))
            .flat_map(|l| [l, "\n"])
            .collect();
        w.write_all(kept.as_bytes())
    }
}

/// One command's part of the COMMANDS section: its synopsis, description
/// and own options (the global ones are listed at the top), and the
/// examples after them, one a line as in --help.
fn man_command(sub: &clap::Command, pieces: &Pieces, w: &mut Vec<u8>) -> io::Result<()> {
    let sub = sub.clone().mut_args(|a| {
        let shared = a.is_global_set() || matches!(a.get_id().as_str(), "help" | "version");
        if shared { a.hide(true) } else { a }
    });
    let name = sub.get_bin_name().unwrap_or(sub.get_name()).to_owned();
    let after = sub.get_after_long_help().map(|a| a.to_string());
    let sub = Man::new(sub);
    let mut roff = Roff::new();
    roff.control("SS", [name.as_str()]);
    w.write_all(roff.to_roff().as_bytes())?;
    pieces.write(w, &|w| sub.render_synopsis_section(w), Headings::Drop)?;
    roff = Roff::new();
    roff.control("PP", []);
    w.write_all(roff.to_roff().as_bytes())?;
    pieces.write(w, &|w| sub.render_description_section(w), Headings::Drop)?;
    pieces.write(w, &|w| sub.render_options_section(w), Headings::Drop)?;
    if let Some(after) = after {
        // One command a line, as in --help: no filling.
        let mut roff = Roff::new();
        roff.control("PP", []).control("nf", []);
        for line in after.lines() {
            roff.text([roman(line)]);
        }
        roff.control("fi", []);
        w.write_all(roff.to_roff().as_bytes())?;
    }
    Ok(())
}

/// The EXIT STATUS section, from the exit codes' table.
fn exit_status() -> Roff {
    let mut roff = Roff::new();
    roff.control("SH", ["EXIT STATUS"]);
    for line in EXIT_STATUS.lines().skip(1) {
        let (code, meaning) = line.trim().split_once(' ').unwrap_or((line.trim(), ""));
        roff.control("TP", []);
        roff.text([bold(code)]);
        roff.text([roman(meaning.trim())]);
    }
    roff
}
