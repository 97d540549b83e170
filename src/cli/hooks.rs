//! What the command line does at the store's hook points as it reads a
//! transcript: a spinner for a person watching a long read, and the
//! allocator's tuning, which only the binary that chose mimalloc can do.

use std::io::{self, IsTerminal};

use crate::store::ReadHooks;

/// The command line's answers to the store's [`ReadHooks`].
pub struct CliHooks {
    /// Whether no spinner is shown: with `-q`, which shows nothing but
    /// errors, and for a transcript of a batch, whose own bar is shown.
    pub quiet: bool,
}

impl ReadHooks for CliHooks {
    /// A spinner on stderr while a large transcript is read (TTY only, not
    /// with -q). Large blocks are mimalloc's from here (see `alloc`).
    fn reading(&self, name: &str, bytes: usize) -> Box<dyn FnOnce()> {
        const LARGE: usize = 32 << 20;
        #[cfg(target_os = "linux")]
        super::alloc::map_large(false);
        if self.quiet || bytes < LARGE || !io::stderr().is_terminal() {
            return Box::new(|| {});
        }
        let bar = indicatif::ProgressBar::new_spinner();
        bar.set_message(format!("reading {name} ({} MB)", bytes >> 20));
        bar.enable_steady_tick(std::time::Duration::from_millis(120));
        Box::new(move || bar.finish_and_clear())
    }

    /// Large blocks are mapped on their own from here (see `alloc`).
    fn reading_on(&self) {
        #[cfg(target_os = "linux")]
        super::alloc::map_large(true);
    }

    fn let_go(&self) {
        hand_back_freed_memory();
    }

    fn freeing_for_good(&self) {
        hand_back_at_once();
    }
}

/// Hands the pages of what reading let go (the transcript's text above all)
/// back to the system. The allocator keeps freed pages for later use (for a
/// second, longer than a turn), and what a turn builds next is small
/// allocations that do not reuse them: kept, they would only raise its
/// peak. It is called too as each piece of a Claude Code log is let go
/// while the rest is built (up to 4 MB each, kept beside the messages
/// otherwise), and once more after the read, when the log's long outputs
/// have been set aside (most of its words), with [`hand_back_at_once`]
/// after it.
fn hand_back_freed_memory() {
    // SAFETY: takes no pointers; it only walks the allocator's own pages.
    unsafe { libmimalloc_sys::mi_collect(true) }
}

/// From here on, what the process frees goes back to the system at once
/// rather than a second later. For a first turn's one projection of a
/// whole history, which cuts thousands of outputs and builds a view of
/// what is left: what it frees is seldom needed again, so handing it back
/// at once lowers the peak for a few system calls. Not for a rebuild or a
/// warm turn, which free and allocate again call after call: each page
/// handed back would be faulted in again.
fn hand_back_at_once() {
    // SAFETY: takes no pointers; it only sets one of the allocator's
    // options.
    unsafe { libmimalloc_sys::mi_option_set(PURGE_DELAY, 0) }
}

/// Turns transparent huge pages off for this process.
///
/// The binary calls this as it is loaded, before the runtime's first
/// allocation reserves the allocator's arena and touches it. The allocator
/// marks its arena for huge pages, so that touch would cost every process
/// two of them, 4 MB to zero, and a wait where the machine's free memory
/// has gone back to its host.
///
/// No turn turns them back on, not even a warm turn of a long compressed
/// session, which decodes tens of megabytes of small structures into fresh
/// memory: where the machine's free memory goes back to its host, a fault
/// on a 2 MB page waits for it to be backed, which stalls a turn now and
/// then for far longer than the smaller pages save, and the turn peaks
/// higher.
pub fn huge_pages_off() {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_THP_DISABLE takes plain integers and changes only how
    // the kernel backs this process's memory; a kernel without it refuses
    // the call, which leaves things as they were.
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1 as libc::c_ulong, 0, 0, 0);
    }
}

/// mimalloc's `mi_option_purge_delay` (milliseconds a freed page is kept
/// before it goes back; 0 for at once), by its place in the option list of
/// the mimalloc the locked libmimalloc-sys builds, which names no constant
/// for it.
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
