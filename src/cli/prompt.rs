//! `noa prompt`: the resident system block, or the Compress tool definition.

use std::io::Write;

use super::args::{Global, PromptArgs, ViewArg};
use super::{CliError, Exit, settings};
use crate::engine::{SchemaFlavour, compress_tool, system_prompt};

/// Runs `noa prompt`.
pub fn run(global: &Global, args: &PromptArgs) -> Result<Exit, CliError> {
    let text = if args.tool_schema {
        let flavour = match args.flavour {
            ViewArg::Chat => SchemaFlavour::Chat,
            ViewArg::Anthropic => SchemaFlavour::Anthropic,
            ViewArg::Responses => SchemaFlavour::Responses,
        };
        serde_json::to_string_pretty(&compress_tool(flavour))
            .expect("a JSON value always serializes")
    } else {
        let here = std::path::Path::new("noa.toml");
        system_prompt(&settings::load(global, Some(here))?.sections)
    };
    writeln!(std::io::stdout().lock(), "{text}").map_err(|source| CliError::Io {
        path: "<stdout>".into(),
        error: source,
    })?;
    Ok(Exit::Success)
}
