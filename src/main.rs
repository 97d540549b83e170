//! The `noa` binary: everything lives in the library.
#![allow(clippy::disallowed_methods, clippy::disallowed_macros)]

#[cfg(target_os = "linux")]
#[global_allocator]
static ALLOCATOR: noa::cli::alloc::Allocator = noa::cli::alloc::Allocator;

#[cfg(not(target_os = "linux"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Turns transparent huge pages off as the program is loaded, before the
/// runtime's first allocation: that allocation reserves the allocator's
/// arena and touches its first pages, which would otherwise come as two
/// huge pages of 2 MB to zero. See [`noa::cli::huge_pages_off`].
#[cfg(target_os = "linux")]
#[used]
#[unsafe(link_section = ".init_array")]
static HUGE_PAGES_OFF: extern "C" fn() = {
    extern "C" fn off() {
        noa::cli::huge_pages_off();
    }
    off
};

fn main() -> std::process::ExitCode {
    noa::cli::main()
}
