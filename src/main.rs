//! The `noa` binary: everything lives in the library.

fn main() -> std::process::ExitCode {
    noa::cli::main()
}
