//! The CLI's global allocator: a bump arena in front of the system allocator.
//!
//! A `sprout` process lives for one command, and `run`/`create` make ~2,000 small allocations
//! (clap's command tree, the parsed config, the seccomp key, two state writes), of which almost
//! none outlive the command. With musl's allocator they cost more than the rest of parsing the
//! config (docs/performance.md); a bump pointer costs next to nothing.
//!
//! - The arena is a zero-filled static (`.bss`): no syscall to set it up, and a page becomes
//!   resident only once an allocation reaches it.
//! - Freeing or growing the most recent allocation happens in place (a `String` or `Vec` being
//!   built); any other free is dropped.
//! - Once the arena is full, allocations go to the system allocator, so a long-running command
//!   (`events`, a foreground `run` relaying a terminal) stays bounded by the arena's size.
//! - Thread-safe (one atomic offset), and fork/clone-safe: a child gets a copy of the arena and
//!   of the offset, as it does of a malloc heap.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Under 2 MiB, so that the arena never holds an aligned 2 MiB extent: with transparent huge
/// pages set to `always`, the first touch of such an extent could make 2 MiB resident at once.
const SIZE: usize = (3 << 20) / 2;

#[repr(C, align(4096))]
struct Space(UnsafeCell<[u8; SIZE]>);

// SAFETY: the buffer is only ever reached through raw pointers to the ranges that the one
// Arena (see `Arena::new`) hands out, which its atomic offset keeps disjoint; no reference to
// the whole array is made, so threads never share a byte.
unsafe impl Sync for Space {}

static SPACE: Space = Space(UnsafeCell::new([0; SIZE]));

pub struct Arena {
    used: AtomicUsize,
}

impl Arena {
    /// An allocator over the one static space.
    ///
    /// # Safety
    ///
    /// At most one `Arena` may hand out blocks that are written to: the offset lives in the
    /// `Arena` and the space is shared, so two would hand out overlapping blocks. The CLI's
    /// `#[global_allocator]` is that one; the unit tests make their own, and only one test
    /// writes into its blocks.
    pub const unsafe fn new() -> Self {
        Arena {
            used: AtomicUsize::new(0),
        }
    }

    /// The space's address. `as usize` exposes its provenance, which the `as *mut u8` casts
    /// in `bump` pick up again (exposed-provenance rules), so the blocks may be written.
    fn base() -> usize {
        SPACE.0.get() as usize
    }

    fn owns(p: *mut u8) -> bool {
        let a = p as usize;
        a >= Self::base() && a < Self::base() + SIZE
    }

    /// A block for `layout` after the current end, or None if the arena is full.
    fn bump(&self, layout: Layout) -> Option<*mut u8> {
        let base = Self::base();
        let mut cur = self.used.load(Ordering::Relaxed);
        loop {
            let start = (base + cur).checked_next_multiple_of(layout.align())? - base;
            let end = start.checked_add(layout.size())?;
            if end > SIZE {
                return None;
            }
            match self
                .used
                .compare_exchange_weak(cur, end, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return Some((base + start) as *mut u8),
                Err(now) => cur = now,
            }
        }
    }
}

// Not inlined: with LTO, inlining them into every allocation site grew .text by 476 KB.
// SAFETY: `alloc` returns either a block from `bump` (start aligned to layout.align(),
// layout.size() bytes inside the space, disjoint from every other live block because the
// compare-exchange on `used` reserves [start, end) for this caller alone) or the system
// allocator's block. A pointer outside the space goes back to the system allocator with the
// caller's layout. `used` only moves back over a block being freed or resized while it is the
// last one (compare-exchange on that block's end), so no live block is handed out twice.
unsafe impl GlobalAlloc for Arena {
    #[inline(never)]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match self.bump(layout) {
            Some(p) => p,
            // SAFETY: the caller's layout (non-zero size, by alloc's contract) as it came.
            None => unsafe { System.alloc(layout) },
        }
    }

    #[inline(never)]
    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        if !Self::owns(p) {
            // SAFETY: not in the space, so `p` came from System.alloc/realloc through this
            // allocator, with this layout (dealloc's contract).
            return unsafe { System.dealloc(p, layout) };
        }
        // The last allocation: give its space back (a failed exchange means it was not the last).
        let start = p as usize - Self::base();
        let _ = self.used.compare_exchange(
            start + layout.size(),
            start,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }

    #[inline(never)]
    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if !Self::owns(p) {
            // SAFETY: as in dealloc, `p` is the system allocator's, with `layout`; new_size is
            // valid by realloc's contract.
            return unsafe { System.realloc(p, layout, new_size) };
        }
        let start = p as usize - Self::base();
        if start + new_size <= SIZE
            && self
                .used
                .compare_exchange(
                    start + layout.size(),
                    start + new_size,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
        {
            return p;
        }
        if new_size <= layout.size() {
            // Shrinking an older block: it stays where it is.
            return p;
        }
        // SAFETY: realloc's contract: new_size is non-zero and, rounded up to layout.align()
        // (a valid alignment, from a Layout), does not overflow isize.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: a valid, non-zero-sized layout.
        let q = unsafe { self.alloc(new_layout) };
        if !q.is_null() {
            // SAFETY: `p` is the caller's live block of layout.size() bytes; `q` is a fresh block
            // of new_size > layout.size() bytes, disjoint from `p`. After the copy `p` is freed
            // with the layout it was allocated with, and the caller uses only `q` from now on.
            unsafe {
                std::ptr::copy_nonoverlapping(p, q, layout.size());
                self.dealloc(p, layout);
            }
        }
        q
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The tests use their own Arena values over the one static space, so their blocks may
    // overlap: they check offsets and ownership, and only one test writes into the space.

    #[test]
    fn bump_aligns_and_reports_ownership() {
        // SAFETY: nothing is written into this arena's blocks (see above).
        let a = unsafe { Arena::new() };
        let p = a.bump(Layout::from_size_align(3, 1).unwrap()).unwrap();
        let q = a.bump(Layout::from_size_align(8, 64).unwrap()).unwrap();
        assert!(Arena::owns(p) && Arena::owns(q));
        assert_eq!(q as usize % 64, 0);
        assert!(q as usize >= p as usize + 3);
        // The test binary's allocator is the system's: a heap pointer is not the arena's.
        let on_heap = Box::into_raw(Box::new(0u64));
        assert!(!Arena::owns(on_heap.cast::<u8>()));
        // SAFETY: `on_heap` came from Box::into_raw above and is freed once, here.
        unsafe { drop(Box::from_raw(on_heap)) };
    }

    #[test]
    fn last_allocation_is_freed_and_grown_in_place() {
        // SAFETY: nothing is written into this arena's blocks (see above).
        let a = unsafe { Arena::new() };
        let l = Layout::from_size_align(16, 8).unwrap();
        // SAFETY: `l` has a non-zero size; `p`, then `r`, is this arena's block, resized and
        // freed with the layout it has at that point; no byte is read or written.
        unsafe {
            let p = a.alloc(l);
            let before = a.used.load(Ordering::Relaxed);
            let r = a.realloc(p, l, 100);
            assert_eq!(r, p, "the last block grows in place");
            assert_eq!(a.used.load(Ordering::Relaxed), before + 84);
            a.dealloc(r, Layout::from_size_align(100, 8).unwrap());
            assert_eq!(a.used.load(Ordering::Relaxed), before - 16);
        }
    }

    #[test]
    fn a_full_arena_falls_back_to_the_system_allocator() {
        // SAFETY: this arena hands out no block of the space (it is full from the start).
        let a = unsafe { Arena::new() };
        a.used.store(SIZE - 8, Ordering::Relaxed);
        let l = Layout::from_size_align(64, 8).unwrap();
        // SAFETY: `p` is the system allocator's 64-byte block (checked non-null before the
        // write), written within its 64 bytes and freed once with its layout.
        unsafe {
            let p = a.alloc(l);
            assert!(!p.is_null() && !Arena::owns(p));
            p.write_bytes(7, 64);
            a.dealloc(p, l);
        }
        assert_eq!(a.used.load(Ordering::Relaxed), SIZE - 8);
    }

    #[test]
    fn an_older_block_moves_when_it_grows() {
        // SAFETY: the one test that writes into its arena's blocks (see above).
        let a = unsafe { Arena::new() };
        let l = Layout::from_size_align(8, 8).unwrap();
        // SAFETY: `p` is this arena's 8-byte block, written within its 8 bytes; `r` is the
        // 32-byte block realloc moved it to, whose first 8 bytes realloc copied from `p`.
        unsafe {
            let p = a.alloc(l);
            p.write_bytes(0x5a, 8);
            let _q = a.alloc(l);
            let r = a.realloc(p, l, 32);
            assert_ne!(r, p);
            assert_eq!(std::slice::from_raw_parts(r, 8), &[0x5a; 8]);
        }
    }
}
