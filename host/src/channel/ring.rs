//! The layout of a channel's segment (defined once, in `lrpc_abi::chan`, for the kernel and
//! guest clients alike; the A-stacks start on the page after the rings) and the host's word
//! and byte accesses to it.
//!
//! This module is the channel's only `unsafe`: every access is bounds checked against the
//! segment's length first, so no value read from the segment can make the host touch memory
//! outside the channel.
#![allow(
    unsafe_code,
    reason = "raw word and byte accesses to pages shared with a guest; every block is argued"
)]

use std::sync::atomic::{AtomicU32, Ordering};

use lrpc_abi::chan::{ENTRY, RINGS};
pub(crate) use lrpc_abi::chan::{MAGIC, MAX_SLOTS, REP_HEAD, REP_TAIL, REQ_HEAD, REQ_TAIL};

/// Where each part of a channel with `slots` slots of `size`-byte A-stacks lies.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Layout {
    pub slots: u32,
    pub size: u32,
    pub astacks: usize,
    pub len: usize,
}

impl Layout {
    /// The layout, or `None` when the sizes overflow.
    pub(crate) fn new(slots: u32, size: u32) -> Option<Layout> {
        let rings = RINGS.checked_add(2 * ENTRY * slots as usize)?;
        let astacks = crate::astack::page_round(rings)?;
        let bytes = (size as usize).checked_mul(slots as usize)?;
        let len = crate::astack::page_round(astacks.checked_add(bytes)?)?;
        Some(Layout {
            slots,
            size,
            astacks,
            len,
        })
    }

    /// Offset of request entry `counter % slots`.
    pub(crate) fn req_entry(&self, counter: u32) -> usize {
        lrpc_abi::chan::req_entry(self.slots, counter)
    }

    /// Offset of reply entry `counter % slots`.
    pub(crate) fn rep_entry(&self, counter: u32) -> usize {
        lrpc_abi::chan::rep_entry(self.slots, counter)
    }

    /// Offset of slot `slot`'s A-stack (`slot < slots`).
    pub(crate) fn astack(&self, slot: u32) -> usize {
        self.astacks + self.size as usize * slot as usize
    }
}

/// The host's view of one mapping of a channel segment: `len` bytes at `base`.
///
/// Whoever builds a `SegmentView` promises that `[base, base + len)` stays mapped readable and
/// writable memory for the `SegmentView`'s whole life: here it is a window of a server replica's
/// linear memory, whose `Store` (and so whose 4 GiB reservation, which never moves) the
/// channel keeps alive, and whose pages are not given back to the replica's window allocator
/// before the channel is dropped (see `ChannelShared`'s `Drop`). After the channel is closed
/// the pages are private zero pages: still mapped, no longer shared.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SegmentView {
    base: usize,
    len: usize,
}

impl SegmentView {
    /// # Safety
    ///
    /// `[base, base + len)` must stay mapped, readable and writable memory for as long as
    /// the returned value (or a copy) is used, and `base` must be 64-byte aligned.
    pub(crate) unsafe fn new(base: *mut u8, len: usize) -> SegmentView {
        SegmentView {
            base: base as usize,
            len,
        }
    }

    fn word(&self, off: usize) -> Option<&AtomicU32> {
        let end = off.checked_add(4)?;
        if end > self.len || !off.is_multiple_of(4) {
            return None;
        }
        // SAFETY: `off + 4 <= len`, `off` is 4-aligned and `base` is 64-aligned, so the
        // pointer is an aligned u32 inside the mapped window (the `SegmentView` contract). The
        // host touches these words only through atomics; the guest's plain wasm accesses to
        // them are aligned 4-byte loads and stores (single-copy atomic on the host ISA, see
        // the module docs of `channel`) made outside the Rust abstract machine, like another
        // process writing a shared mapping.
        Some(unsafe { AtomicU32::from_ptr((self.base + off) as *mut u32) })
    }

    /// Loads the word at `off` with acquire ordering; 0 when `off` is outside the window.
    pub(crate) fn load(&self, off: usize) -> u32 {
        self.word(off).map_or(0, |w| w.load(Ordering::Acquire))
    }

    /// Stores `v` at `off` with release ordering (ignored outside the window).
    pub(crate) fn store(&self, off: usize, v: u32) {
        if let Some(w) = self.word(off) {
            w.store(v, Ordering::Release);
        }
    }

    /// Copies bytes out of the window; `None` when the range is not inside it.
    pub(crate) fn read(&self, off: usize, dst: &mut [u8]) -> Option<()> {
        let end = off.checked_add(dst.len())?;
        if end > self.len {
            return None;
        }
        let src = (self.base + off) as *const u8;
        for (i, b) in dst.iter_mut().enumerate() {
            // SAFETY: `off + i < len`: inside the mapped window. A volatile byte load
            // tolerates a peer writing the same byte concurrently (it reads some value).
            *b = unsafe { src.add(i).read_volatile() };
        }
        Some(())
    }

    /// Copies bytes into the window; `None` when the range is not inside it.
    pub(crate) fn write(&self, off: usize, src: &[u8]) -> Option<()> {
        let end = off.checked_add(src.len())?;
        if end > self.len {
            return None;
        }
        let dst = (self.base + off) as *mut u8;
        for (i, b) in src.iter().enumerate() {
            // SAFETY: in bounds as in `read`; raw volatile stores form no Rust reference to
            // pages the peer may be writing.
            unsafe { dst.add(i).write_volatile(*b) };
        }
        Some(())
    }
}

// SAFETY: a `SegmentView` is an address range plus a length; all accesses through it are atomic
// words or volatile bytes into memory that stays mapped (the constructor's contract), so
// sharing it between threads can not create a data race in the Rust sense.
unsafe impl Send for SegmentView {}
// SAFETY: as for `Send`.
unsafe impl Sync for SegmentView {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_places_rings_then_page_aligned_astacks() {
        let l = Layout::new(32, 64).unwrap();
        assert_eq!(l.astacks, 4096);
        assert_eq!(l.len, 8192);
        assert_eq!(l.req_entry(33), RINGS + ENTRY);
        assert_eq!(l.rep_entry(0), RINGS + ENTRY * 32);
        assert_eq!(l.astack(31), 4096 + 31 * 64);
        assert!(Layout::new(u32::MAX, u32::MAX).is_none());
    }

    #[test]
    fn accesses_outside_the_window_are_refused() {
        let mut buf = vec![0u64; 64];
        // SAFETY: `buf` outlives `w` and is 8-aligned; the test only needs 4-alignment
        // for words, and the 64-byte rule matters only for cache lines.
        let w = unsafe { SegmentView::new(buf.as_mut_ptr().cast(), 512) };
        w.store(508, 7);
        assert_eq!(w.load(508), 7);
        assert_eq!(w.load(512), 0);
        assert_eq!(w.load(usize::MAX), 0);
        assert_eq!(w.load(2), 0, "misaligned");
        let mut b = [0u8; 8];
        assert!(w.read(508, &mut b).is_none());
        assert!(w.write(usize::MAX - 2, &b).is_none());
        assert!(w.read(504, &mut b).is_some());
    }
}
