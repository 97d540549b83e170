//! The binary's allocator: mimalloc, with large blocks the kernel's while
//! a turn works on what it read on from the read cache.
//!
//! mimalloc keeps what a process frees for the process to use again, for
//! longer than a turn lasts. A warm turn frees large blocks as it goes (the
//! logs' text once parsed, a view of the whole history once fitted, a list
//! grown past its room), and what later allocations do not reuse of them
//! stays in its memory to the end; a list that grows is copied whole into
//! one twice its size, both held at once. So, from the moment a read on
//! from the read cache begins ([`map_large`], at the store's
//! `ReadHooks::reading_on`), a block of 64 KiB or more (`LARGE`) is mapped
//! from the kernel on its own, grown in place (`mremap`) and unmapped the
//! moment it is freed: a few dozen system calls a turn, for megabytes less
//! at its peak (figures in docs/benchmarks.md).
//!
//! Not once a transcript is read whole (`ReadHooks::reading`): the read
//! frees and takes again blocks of one size piece after piece, and so do a
//! rebuild's turns one after another, which mimalloc serves from pages the
//! process already holds, where each new mapping would be zeroed and
//! faulted in afresh. Nor after such a read: the turn that follows hands
//! what it frees back at once already, and mapping its blocks too raises
//! its peak.

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};

use mimalloc::MiMalloc;

/// The smallest block the kernel maps.
const LARGE: usize = 64 << 10;

/// The kernel's pages, which a mapping is aligned to.
const PAGE: usize = 4096;

/// Whether large blocks are mapped from the kernel. Freeing tells the two
/// kinds apart by address, so it may change at any time.
static MAP_LARGE: AtomicBool = AtomicBool::new(false);

/// Whether large blocks allocated from here on are mapped from the kernel.
pub fn map_large(on: bool) {
    MAP_LARGE.store(on, Ordering::Relaxed);
}

/// mimalloc, with large blocks the kernel's (see the module docs).
pub struct Allocator;

/// Whether a block of `layout` is to be mapped: large, aligned no more
/// than a page is, and asked for.
fn maps(layout: Layout) -> bool {
    layout.size() >= LARGE && layout.align() <= PAGE && MAP_LARGE.load(Ordering::Relaxed)
}

/// Whether `block` of `size` bytes was mapped here: one of [`LARGE`] bytes
/// or more that mimalloc does not hold.
fn mapped(block: *mut u8, size: usize) -> bool {
    // SAFETY: only looks `block` up in mimalloc's map of its own pages.
    size >= LARGE && !unsafe { libmimalloc_sys::mi_is_in_heap_region(block as *const c_void) }
}

/// A new mapping of `size` bytes, zeroed; null when the kernel refuses it.
fn map(size: usize) -> *mut u8 {
    // SAFETY: a new private mapping; it touches no memory of the process.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    match p {
        libc::MAP_FAILED => std::ptr::null_mut(),
        p => p.cast(),
    }
}

// SAFETY: every block is mimalloc's or a mapping of its own, and each is
// freed and resized by whichever made it, told apart by `mapped`.
unsafe impl GlobalAlloc for Allocator {
    // A mapping the kernel refuses (a process may hold only so many) is
    // left to mimalloc.
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match maps(layout).then(|| map(layout.size())) {
            Some(p) if !p.is_null() => p,
            // SAFETY: the caller's promises, passed on.
            _ => unsafe { MiMalloc.alloc(layout) },
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // A new mapping is zeroed.
        match maps(layout).then(|| map(layout.size())) {
            Some(p) if !p.is_null() => p,
            // SAFETY: the caller's promises, passed on.
            _ => unsafe { MiMalloc.alloc_zeroed(layout) },
        }
    }

    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        match mapped(block, layout.size()) {
            // SAFETY: the whole of a mapping made by `map`.
            true => unsafe {
                libc::munmap(block.cast(), layout.size());
            },
            // SAFETY: the caller's promises, passed on.
            false => unsafe { MiMalloc.dealloc(block, layout) },
        }
    }

    unsafe fn realloc(&self, block: *mut u8, layout: Layout, size: usize) -> *mut u8 {
        // SAFETY: the caller promises `size`, with the old alignment, is a
        // valid layout.
        let new = unsafe { Layout::from_size_align_unchecked(size, layout.align()) };
        match (mapped(block, layout.size()), maps(new)) {
            (true, true) => {
                // SAFETY: the whole of a mapping made by `map`; on failure
                // it is left as it was.
                let p = unsafe {
                    libc::mremap(block.cast(), layout.size(), size, libc::MREMAP_MAYMOVE)
                };
                match p {
                    libc::MAP_FAILED => std::ptr::null_mut(),
                    p => p.cast(),
                }
            }
            // SAFETY: the caller's promises, passed on.
            (false, false) => unsafe { MiMalloc.realloc(block, layout, size) },
            // From one kind to the other: copied.
            _ => {
                // SAFETY: the caller's promises, passed on; the copy is of
                // the bytes both blocks hold.
                unsafe {
                    let p = self.alloc(new);
                    if !p.is_null() {
                        std::ptr::copy_nonoverlapping(block, p, layout.size().min(size));
                        self.dealloc(block, layout);
                    }
                    p
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Held by each test while it switches mapping, so that what one
    /// asserts of which blocks are mapped holds whatever the other does.
    static SWITCH: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// A block as a test holds it: where, its layout, and the byte it was
    /// filled with.
    struct Held(*mut u8, Layout, u8);

    fn fill(p: *mut u8, from: usize, to: usize, byte: u8) {
        // SAFETY: the caller's block holds `to` bytes.
        unsafe { std::ptr::write_bytes(p.add(from), byte, to - from) }
    }

    fn holds(p: *mut u8, len: usize, byte: u8) -> bool {
        // SAFETY: the caller's block holds `len` bytes.
        unsafe { std::slice::from_raw_parts(p, len) }
            .iter()
            .all(|&b| b == byte)
    }

    #[test]
    fn large_blocks_are_mapped_only_when_asked_and_each_kind_is_freed_by_its_maker() {
        let _switch = SWITCH
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let large = Layout::from_size_align(LARGE, 8).unwrap();
        let small = Layout::from_size_align(LARGE - 1, 8).unwrap();
        let aligned = Layout::from_size_align(LARGE, 2 * PAGE).unwrap();
        map_large(true);
        // SAFETY: each block is used within its layout and freed once.
        unsafe {
            let [l, s, a] = [large, small, aligned].map(|lay| Allocator.alloc(lay));
            assert!(mapped(l, LARGE));
            assert!(!mapped(s, LARGE - 1) && !mapped(a, LARGE));
            assert_eq!(a as usize % (2 * PAGE), 0);
            // A mapped block grows in place or moves with its bytes.
            fill(l, 0, LARGE, 7);
            let l = Allocator.realloc(l, large, 4 * LARGE);
            assert!(mapped(l, 4 * LARGE) && holds(l, LARGE, 7));
            // Shrunk below the size mapped, it goes to mimalloc.
            let l2 = Layout::from_size_align(4 * LARGE, 8).unwrap();
            let l = Allocator.realloc(l, l2, 100);
            assert!(holds(l, 100, 7));
            Allocator.dealloc(l, Layout::from_size_align(100, 8).unwrap());
            // One mapped and then freed after mapping stops is unmapped.
            let z = Allocator.alloc_zeroed(large);
            assert!(mapped(z, LARGE) && holds(z, LARGE, 0));
            map_large(false);
            let m = Allocator.alloc(large);
            assert!(!mapped(m, LARGE));
            Allocator.dealloc(z, large);
            Allocator.dealloc(m, large);
            Allocator.dealloc(s, small);
            Allocator.dealloc(a, aligned);
        }
    }

    proptest! {
        /// Blocks of sizes about [`LARGE`], grown, shrunk and freed in any
        /// order, keep their bytes, whichever kind each is made and moved to.
        #[test]
        fn blocks_keep_their_bytes_through_any_resizing(
            steps in prop::collection::vec((0usize..4 * LARGE, any::<u8>(), 0usize..8), 1..60),
        ) {
            let _switch = SWITCH.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let mut held: Vec<Held> = Vec::new();
            for (size, byte, pick) in steps {
                let size = size.max(1);
                // SAFETY: each block is used within its layout, and
                // freed once, with the layout it was made with.
                unsafe {
                    match pick {
                        0..=3 => {
                            let layout = Layout::from_size_align(size, 8).unwrap();
                            let p = match pick {
                                0 => Allocator.alloc_zeroed(layout),
                                _ => Allocator.alloc(layout),
                            };
                            prop_assert!(!p.is_null());
                            prop_assert!(pick != 0 || holds(p, size, 0));
                            fill(p, 0, size, byte);
                            held.push(Held(p, layout, byte));
                        }
                        4..=5 if !held.is_empty() => {
                            let Held(p, layout, b) = held.swap_remove(byte as usize % held.len());
                            let q = Allocator.realloc(p, layout, size);
                            prop_assert!(!q.is_null());
                            prop_assert!(holds(q, layout.size().min(size), b));
                            let grown = Layout::from_size_align(size, 8).unwrap();
                            fill(q, 0, size, b);
                            held.push(Held(q, grown, b));
                        }
                        7 => map_large(byte % 2 == 0),
                        _ if !held.is_empty() => {
                            let Held(p, layout, b) = held.swap_remove(byte as usize % held.len());
                            prop_assert!(holds(p, layout.size(), b));
                            Allocator.dealloc(p, layout);
                        }
                        _ => {}
                    }
                }
            }
            for Held(p, layout, b) in held {
                prop_assert!(holds(p, layout.size(), b));
                // SAFETY: as above.
                unsafe { Allocator.dealloc(p, layout) };
            }
            map_large(false);
        }
    }
}
