//! The window allocator: the one bookkeeping of window space in a linear memory, used for a
//! domain replica's memory (A-stacks, out-of-band segments, channels, mixed pairs) and for
//! a direct-linked server copy's memory alike.
//!
//! Window space is made of pages the host itself grew, never the guest's allocator's. A
//! request is served from a freed range when one fits; otherwise the memory grows by whole
//! wasm pages and the part the request does not use is kept for later ones. Freed ranges
//! are coalesced with their neighbours, so bind/unbind cycles reuse the same pages.

use super::map::{PAGE, WASM_PAGE};

/// Host-grown pages of one memory that hold windows, managed page by page.
#[derive(Default, Debug)]
pub(crate) struct WindowAlloc {
    /// Free page-aligned ranges `(offset, len)`.
    free: Vec<(usize, usize)>,
    /// End of the highest host-grown range; the memory is at least this large.
    high: usize,
    /// Every range the host grew for windows, in order, neighbours merged (windows and
    /// free window space both lie inside them; the rest of the memory is the guest's).
    grown: Vec<(usize, usize)>,
}

impl WindowAlloc {
    /// End of the highest host-grown range: every window lies below it.
    pub(crate) fn high(&self) -> usize {
        self.high
    }

    /// Takes `len` bytes (a page multiple) of window space: a free range that fits, or new
    /// pages from `grow(wasm_pages)`, which grows the memory and returns the byte offset of
    /// the first new page.
    pub(crate) fn take<E>(
        &mut self,
        len: usize,
        grow: impl FnOnce(usize) -> Result<usize, E>,
    ) -> Result<usize, E> {
        debug_assert!(len.is_multiple_of(PAGE));
        if let Some(i) = self.free.iter().position(|&(_, l)| l >= len) {
            let (off, l) = self.free[i];
            if l == len {
                self.free.swap_remove(i);
            } else {
                self.free[i] = (off + len, l - len);
            }
            return Ok(off);
        }
        let pages = len.div_ceil(WASM_PAGE);
        let off = grow(pages)?;
        let grown = pages * WASM_PAGE;
        if grown > len {
            self.free.push((off + len, grown - len));
        }
        self.high = self.high.max(off + grown);
        match self.grown.last_mut() {
            Some((o, l)) if *o + *l == off => *l += grown,
            _ => self.grown.push((off, grown)),
        }
        Ok(off)
    }

    /// The parts of `[0, size)` the host did not grow for windows: the guest's own memory,
    /// as page-aligned `(offset, len)` ranges in order.
    pub(crate) fn guest_ranges(&self, size: usize) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        let mut at = 0;
        for &(o, l) in &self.grown {
            let o = o.min(size);
            if o > at {
                out.push((at, o - at));
            }
            at = at.max(o.saturating_add(l).min(size));
        }
        if size > at {
            out.push((at, size - at));
        }
        out
    }

    /// Returns a window range to the free list (its pages must already be unmapped).
    pub(crate) fn give_back(&mut self, off: usize, len: usize) {
        self.free.push((off, len));
        // Coalesce neighbours so repeated bind/unbind cycles reuse the same pages.
        self.free.sort_unstable();
        let mut merged: Vec<(usize, usize)> = Vec::with_capacity(self.free.len());
        for &(o, l) in &self.free {
            match merged.last_mut() {
                Some((mo, ml)) if *mo + *ml == o => *ml += l,
                _ => merged.push((o, l)),
            }
        }
        self.free = merged;
    }
}

/// The byte offset of the first of the pages a `Memory::grow` returned as the old size in
/// wasm pages, or `None` when it does not fit in the address space.
pub(crate) fn grown_offset(old_pages: u64) -> Option<usize> {
    usize::try_from(old_pages)
        .ok()
        .and_then(|p| p.checked_mul(WASM_PAGE))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_guest_ranges_are_what_the_host_did_not_grow() {
        let mut w = WindowAlloc::default();
        let mut size = 2 * WASM_PAGE;
        let mut grow = |pages: usize| -> Result<usize, ()> {
            let off = size;
            size += pages * WASM_PAGE;
            Ok(off)
        };
        w.take(PAGE, &mut grow).unwrap();
        w.take(WASM_PAGE, &mut grow).unwrap();
        // The guest grows its memory by one page; the host grows again after it.
        let mut size2 = 5 * WASM_PAGE;
        w.take(2 * WASM_PAGE, |pages| -> Result<usize, ()> {
            let off = size2;
            size2 += pages * WASM_PAGE;
            Ok(off)
        })
        .unwrap();
        assert_eq!(
            w.guest_ranges(size2 + WASM_PAGE),
            vec![
                (0, 2 * WASM_PAGE),
                (4 * WASM_PAGE, WASM_PAGE),
                (7 * WASM_PAGE, WASM_PAGE)
            ]
        );
        assert_eq!(w.guest_ranges(WASM_PAGE), vec![(0, WASM_PAGE)]);
    }

    /// A memory of `size` bytes that grows by whole wasm pages.
    fn grower(size: &mut usize) -> impl FnMut(usize) -> Result<usize, ()> + '_ {
        move |pages| {
            let off = *size;
            *size += pages * WASM_PAGE;
            Ok(off)
        }
    }

    #[test]
    fn windows_grow_by_wasm_pages_and_reuse_what_was_given_back() {
        let mut size = 3 * WASM_PAGE;
        let mut a = WindowAlloc::default();
        let x = a.take(PAGE, grower(&mut size)).unwrap();
        assert_eq!(x, 3 * WASM_PAGE, "new pages start at the old end");
        // The rest of the grown wasm page serves the next request without growing.
        let y = a.take(2 * PAGE, |_| Err::<usize, ()>(())).unwrap();
        assert_eq!(y, x + PAGE);
        assert_eq!(a.high(), 4 * WASM_PAGE);
        a.give_back(x, PAGE);
        a.give_back(y, 2 * PAGE);
        // Coalesced: a request as large as both fits where they were.
        let z = a.take(3 * PAGE, |_| Err::<usize, ()>(())).unwrap();
        assert_eq!(z, x);
        // Larger than anything free: grows, and a refused growth is the caller's error.
        assert_eq!(
            a.take(WASM_PAGE, |_| Err::<usize, &str>("full")),
            Err("full")
        );
        assert_eq!(a.high(), 4 * WASM_PAGE);
    }
}
