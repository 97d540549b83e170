//! The `noa` binary: everything lives in the library.
#![allow(clippy::disallowed_methods, clippy::disallowed_macros)]

fn main() -> std::process::ExitCode {
    noa::cli::main()
}
