//! The `noa` binary: everything lives in the library.
#![allow(clippy::disallowed_methods, clippy::disallowed_macros)]

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    noa::cli::main()
}
