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
    // Every rendered piece opens with the same preamble; keep only the first.
    let preamble = Roff::new().render();
    let piece = |render: &dyn Fn(&mut dyn Write) -> io::Result<()>, headings: bool| {
        let mut buf = Vec::new();
        render(&mut buf)?;
        let text = String::from_utf8(buf).expect("roff output is UTF-8");
        let text = text.strip_prefix(&preamble).unwrap_or(&text);
        Ok::<_, io::Error>(
            text.lines()
                .filter(|l| headings || !l.starts_with(".SH "))
                .flat_map(|l| [l, "\n"])
                .collect::<String>(),
        )
    };

    page.render_title(w)?;
    w.write_all(piece(&|w| page.render_name_section(w), true)?.as_bytes())?;
    w.write_all(piece(&|w| page.render_synopsis_section(w), true)?.as_bytes())?;
    w.write_all(piece(&|w| page.render_description_section(w), true)?.as_bytes())?;
    w.write_all(piece(&|w| page.render_options_section(w), true)?.as_bytes())?;

    let mut roff = Roff::new();
    roff.control("SH", ["COMMANDS"]);
    w.write_all(roff.to_roff().as_bytes())?;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
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
        w.write_all(piece(&|w| sub.render_synopsis_section(w), false)?.as_bytes())?;
        roff = Roff::new();
        roff.control("PP", []);
        w.write_all(roff.to_roff().as_bytes())?;
        w.write_all(piece(&|w| sub.render_description_section(w), false)?.as_bytes())?;
        w.write_all(piece(&|w| sub.render_options_section(w), false)?.as_bytes())?;
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
    }

    let mut roff = Roff::new();
    roff.control("SH", ["EXIT STATUS"]);
    for line in EXIT_STATUS.lines().skip(1) {
        let (code, meaning) = line.trim().split_once(' ').unwrap_or((line.trim(), ""));
        roff.control("TP", []);
        roff.text([bold(code)]);
        roff.text([roman(meaning.trim())]);
    }
    w.write_all(roff.to_roff().as_bytes())?;
    w.write_all(piece(&|w| page.render_version_section(w), true)?.as_bytes())?;
    Ok(())
}
