//! A global allocator that counts the bytes a piece of code asks for, so that a target can
//! check that decoding untrusted bytes allocates in proportion to the bytes, never to a length
//! or count they announce.
//!
//! A target that checks allocation installs it:
//!
//! ```ignore
//! #[global_allocator]
//! static ALLOC: lrpc_fuzz::alloc::Counting = lrpc_fuzz::alloc::Counting;
//! ```
//!
//! Without it (other targets, unit tests) [`counted`] reports 0 and such checks pass
//! trivially.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

thread_local! {
    /// Bytes this thread asked for while [`counted`] runs (`None` outside it).
    static ASKED: Cell<Option<usize>> = const { Cell::new(None) };
}

fn note(n: usize) {
    // `try_with`: the thread's locals may be gone while it exits.
    let _ = ASKED.try_with(|a| {
        if let Some(v) = a.get() {
            a.set(Some(v.saturating_add(n)));
        }
    });
}

/// The system allocator, counting what the thread running [`counted`] asks for.
pub struct Counting;

// SAFETY: every call is passed to `System` unchanged, which upholds `GlobalAlloc`'s
// contract; the bookkeeping touches only a `const`-initialized thread local (no allocation,
// no reentrancy).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: the caller's contract for `alloc` is the one `System::alloc` needs.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` (every allocation goes there) with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: as for `dealloc`; `new_size` is the caller's, checked by its contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Runs `f` and returns its value and the bytes this thread asked the allocator for
/// meanwhile (a reallocation counts its new size): 0 unless [`Counting`] is the global
/// allocator.
pub fn counted<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let outer = ASKED.with(|a| a.replace(Some(0)));
    let v = f();
    let asked = ASKED.with(|a| a.replace(outer)).unwrap_or(0);
    if let Some(o) = outer {
        ASKED.with(|a| a.set(Some(o.saturating_add(asked))));
    }
    (v, asked)
}
