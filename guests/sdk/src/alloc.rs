//! A global allocator for guests whose calls make and drop many small values: decoded
//! strings and lists, the vectors a handler returns.
//!
//! The standard library's allocator on `wasm32` (dlmalloc) spends about a hundred
//! instructions on each small allocation and each free, binning and coalescing chunks.
//! A server that decodes a request's head into strings, answers and drops them pays that a
//! dozen times per call, more than the call's crossings cost. [`Pools`] keeps a free list
//! per size class (16 B to 2 KiB, powers of two): an allocation pops a block of its class
//! and a free pushes it back, a few instructions each. Blocks are carved from 64 KiB
//! regions taken from the standard allocator, which also serves every larger request.
//!
//! A freed small block stays in its class for later allocations of that class (it is never
//! coalesced or given back), so a domain's memory holds its peak use of each class.
//!
//! Opt in from a guest crate:
//!
//! ```ignore
//! #[global_allocator]
//! static ALLOC: lrpc_sdk::alloc::Pools = lrpc_sdk::alloc::Pools::new();
//! ```

use core::alloc::{GlobalAlloc, Layout};
use core::cell::UnsafeCell;
use core::ptr;
use core::sync::atomic::{AtomicBool, Ordering};
use std::alloc::System;

/// Size classes: 16 << k bytes for k in `0..CLASSES`.
const CLASSES: usize = 8;
/// The smallest class.
const MIN: usize = 16;
/// The largest class; larger requests go to the standard allocator.
pub const MAX_SMALL: usize = MIN << (CLASSES - 1);
/// Blocks are carved from regions of this size.
const REGION: Layout = match Layout::from_size_align(64 * 1024, MIN) {
    Ok(l) => l,
    Err(_) => panic!("the region's layout"),
};

/// The size-class allocator (see the module docs).
pub struct Pools {
    /// Held while the state is used. A guest on `wasm32` without threads never finds it
    /// taken (its atomics are plain loads and stores there); it makes the allocator sound
    /// where threads exist (the SDK's native tests).
    busy: AtomicBool,
    state: UnsafeCell<State>,
}

struct State {
    /// The first free block of each class; each free block holds the address of the next.
    free: [*mut u8; CLASSES],
    /// The unused rest of the current region: `next..end`.
    next: usize,
    end: usize,
}

// SAFETY: `state` is only touched while `busy` is held (`Pools::with`), so no two threads
// use it at once.
unsafe impl Sync for Pools {}

impl Default for Pools {
    fn default() -> Self {
        Pools::new()
    }
}

impl Pools {
    /// An allocator with empty pools.
    pub const fn new() -> Pools {
        Pools {
            busy: AtomicBool::new(false),
            state: UnsafeCell::new(State {
                free: [ptr::null_mut(); CLASSES],
                next: 0,
                end: 0,
            }),
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        while self
            .busy
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            core::hint::spin_loop();
        }
        // SAFETY: `busy` is held until the end of this function: this is the only
        // reference to the state.
        let r = f(unsafe { &mut *self.state.get() });
        self.busy.store(false, Ordering::Release);
        r
    }
}

/// The class of a request the pools serve, or `None` for the standard allocator.
#[inline]
fn class(layout: Layout) -> Option<usize> {
    let size = layout.size();
    if size > MAX_SMALL || layout.align() > MIN {
        return None;
    }
    // 16 → 0, 17..=32 → 1, …, 1025..=2048 → 7.
    let bits = usize::BITS - (size.max(MIN) - 1).leading_zeros();
    Some(bits as usize - MIN.trailing_zeros() as usize)
}

impl State {
    /// A block of class `c`: a freed one, else carved from the region (a new region when
    /// the current one is used up); null when the standard allocator has no more memory.
    #[inline]
    fn take(&mut self, c: usize) -> *mut u8 {
        let head = self.free[c];
        if !head.is_null() {
            // SAFETY: `head` is a free block of this class: its first word, written by
            // `give`, holds the next free block (blocks are at least 16 bytes and
            // 16-aligned).
            self.free[c] = unsafe { head.cast::<*mut u8>().read() };
            return head;
        }
        let size = MIN << c;
        if self.end - self.next < size {
            // The rest of the old region (less than one block of this class) is left.
            // SAFETY: the layout has a nonzero size.
            let region = unsafe { System.alloc(REGION) };
            if region.is_null() {
                return region;
            }
            self.next = region as usize;
            self.end = self.next + REGION.size();
        }
        let block = self.next as *mut u8;
        self.next += size;
        block
    }

    /// Puts back a block of class `c`.
    #[inline]
    fn give(&mut self, c: usize, block: *mut u8) {
        // SAFETY: the block is a block of class `c` the caller no longer uses: at least 16
        // bytes, 16-aligned, ours to write.
        unsafe { block.cast::<*mut u8>().write(self.free[c]) };
        self.free[c] = block;
    }
}

// SAFETY: a small block is handed out to one owner at a time (taken from its class's free
// list or a region's unused part, given back only by `dealloc`), is `16 << class` bytes
// (at least the layout's size) and 16-aligned (regions are, and every class's size is a
// multiple of 16), which covers every alignment `class` accepts; the rest is the standard
// allocator's.
unsafe impl GlobalAlloc for Pools {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match class(layout) {
            Some(c) => self.with(|s| s.take(c)),
            // SAFETY: the caller's contract, passed on.
            None => unsafe { System.alloc(layout) },
        }
    }

    #[inline]
    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        match class(layout) {
            // The same layout as at allocation: the same class.
            Some(c) => self.with(|s| s.give(c, block)),
            // SAFETY: the block came from `System.alloc` with this layout.
            None => unsafe { System.dealloc(block, layout) },
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        match class(layout) {
            Some(c) => {
                let block = self.with(|s| s.take(c));
                if !block.is_null() {
                    // SAFETY: the block has room for `layout.size()` bytes.
                    unsafe { block.write_bytes(0, layout.size()) };
                }
                block
            }
            // SAFETY: the caller's contract, passed on.
            None => unsafe { System.alloc_zeroed(layout) },
        }
    }

    #[inline]
    unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract: `new_size` does not overflow at this alignment.
        let new = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        match (class(layout), class(new)) {
            // Still fits the block it has.
            (Some(a), Some(b)) if a == b => block,
            // SAFETY: a block of the standard allocator stays one.
            (None, None) => unsafe { System.realloc(block, layout, new_size) },
            _ => {
                // SAFETY: `new` has a nonzero size (the caller's contract).
                let moved = unsafe { self.alloc(new) };
                if !moved.is_null() {
                    // SAFETY: both blocks are live, distinct and at least this long.
                    unsafe {
                        ptr::copy_nonoverlapping(block, moved, layout.size().min(new_size));
                        self.dealloc(block, layout);
                    }
                }
                moved
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(size: usize, align: usize) -> Layout {
        Layout::from_size_align(size, align).unwrap()
    }

    #[test]
    fn classes_are_the_next_power_of_two_from_16() {
        assert_eq!(class(layout(1, 1)), Some(0));
        assert_eq!(class(layout(16, 8)), Some(0));
        assert_eq!(class(layout(17, 1)), Some(1));
        assert_eq!(class(layout(32, 16)), Some(1));
        assert_eq!(class(layout(1024, 4)), Some(6));
        assert_eq!(class(layout(2048, 1)), Some(7));
        assert_eq!(class(layout(2049, 1)), None);
        assert_eq!(class(layout(8, 32)), None);
    }

    #[test]
    fn freed_blocks_are_reused_in_their_class_and_never_overlap_live_ones() {
        let pools = Pools::new();
        // SAFETY: every block is used within its layout and freed once with it.
        unsafe {
            let mut live = Vec::new();
            for k in 0..2000usize {
                let size = 1 + (k * 37) % 3000;
                let l = layout(size, 8);
                let p = pools.alloc(l);
                assert!(!p.is_null());
                assert_eq!(p as usize % 8, 0);
                p.write_bytes((k % 251) as u8, size);
                live.push((p, l, (k % 251) as u8));
                if k % 3 == 0 {
                    let (p, l, v) = live.swap_remove(k % live.len());
                    assert!(
                        (0..l.size()).all(|i| *p.add(i) == v),
                        "a block was overwritten"
                    );
                    pools.dealloc(p, l);
                }
            }
            for (p, l, v) in live.drain(..) {
                assert!(
                    (0..l.size()).all(|i| *p.add(i) == v),
                    "a block was overwritten"
                );
                pools.dealloc(p, l);
            }
            // A freed block of a class comes back for the next request of that class.
            let l = layout(100, 4);
            let a = pools.alloc(l);
            pools.dealloc(a, l);
            assert_eq!(pools.alloc(layout(128, 8)), a);
        }
    }

    #[test]
    fn realloc_keeps_the_bytes_across_classes_and_into_the_standard_allocator() {
        let pools = Pools::new();
        // SAFETY: each block is used within its current size and freed once.
        unsafe {
            let l = layout(10, 1);
            let p = pools.alloc(l);
            p.copy_from_nonoverlapping(b"0123456789".as_ptr(), 10);
            let same = pools.realloc(p, l, 16);
            assert_eq!(same, p, "16 bytes fit the block already");
            let q = pools.realloc(same, layout(16, 1), 5000);
            assert_eq!(core::slice::from_raw_parts(q, 10), b"0123456789");
            let r = pools.realloc(q, layout(5000, 1), 40);
            assert_eq!(core::slice::from_raw_parts(r, 10), b"0123456789");
            let z = pools.alloc_zeroed(layout(40, 1));
            assert!(core::slice::from_raw_parts(z, 40).iter().all(|&b| b == 0));
            pools.dealloc(r, layout(40, 1));
            pools.dealloc(z, layout(40, 1));
        }
    }
}
