//! A-stacks: page-aligned windows of a memfd mapped into the linear memories of exactly the
//! two domains of a binding (LRPC 3.2, "pairwise allocation").
//!
//! This is the only module of the kernel that maps memory. Everything here follows three rules
//! taken from measurements on wasmtime 48:
//!
//! * A window is placed over pages of a linear memory that the host itself grew
//!   ([`wasmtime::Memory::grow`]): the guest's allocator never uses them. The memory is
//!   configured with a 4 GiB reservation and `memory_may_move(false)`, so its base never
//!   moves and the pages stay inside the reservation for the memory's whole life.
//! * A window is removed by mapping private, zero-filled, read-write anonymous memory over it,
//!   never with `munmap` (a hole could be filled by an unrelated mapping) and never by making
//!   it `PROT_NONE` (a guest's `memory.copy` over such a page faults inside a wasmtime libcall,
//!   which is host code, and aborts the process).
//! * The host touches window contents through raw pointers only: the same physical pages
//!   appear in two memories, so slices of both would alias.
//!
//! Callers guarantee the one property this module can not check itself: a memory is mapped
//! into only while the `Store` owning it is alive (see [`MemoryRange`]).
#![allow(
    unsafe_code,
    reason = "this module owns the memfd mappings; every block is argued"
)]

use rustix::fd::OwnedFd;
use rustix::fs::{MemfdFlags, ftruncate, memfd_create};
use rustix::mm::{MapFlags, ProtFlags, mmap, mmap_anonymous};
use std::io;

/// Host page size assumed for window alignment. Wasm pages (64 KiB) are multiples of it.
pub const PAGE: usize = 4096;

/// Wasm page size: linear memories grow by whole wasm pages.
pub const WASM_PAGE: usize = 65536;

/// Rounds `len` up to whole host pages (at least one page).
pub fn page_round(len: usize) -> Option<usize> {
    let len = len.max(1);
    len.checked_add(PAGE - 1).map(|l| l & !(PAGE - 1))
}

/// A memfd holding the pages of one window, owned by a binding. Dropping it closes the fd;
/// mappings of it that remain keep the pages alive until they are replaced.
#[derive(Debug)]
pub struct Segment {
    fd: OwnedFd,
    len: usize,
}

impl Segment {
    /// Creates a zero-filled shared segment of `len` bytes (rounded up to pages).
    pub fn new(len: usize) -> io::Result<Segment> {
        let len = page_round(len).ok_or_else(|| io::Error::other("segment size overflows"))?;
        let fd = memfd_create("lrpc-astack", MemfdFlags::CLOEXEC)?;
        ftruncate(&fd, len as u64)?;
        Ok(Segment { fd, len })
    }

    /// Length in bytes (a multiple of [`PAGE`]).
    pub fn len(&self) -> usize {
        self.len
    }
}

/// The most pages [`MemoryRange::put_back`] copies back; past that it drops them: a request
/// that wrote that much (a large body, say) gives the memory back to the system, and the
/// requests after it do not copy a megabyte each.
pub const PUT_BACK_MAX: usize = 256;

/// A page of zeros, the source for pages that read as zeros in a fresh memory.
static ZEROS: [u8; PAGE] = [0; PAGE];

/// How [`MemoryRange::put_back`] reverted a range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutBack {
    /// It copied the snapshot back into this many pages the guest wrote.
    Copied(usize),
    /// It dropped the pages (`madvise`): this many were private (0: the system can not say).
    Dropped(usize),
}

/// A memory's snapshot: the memory file holding its pages' bytes at their offsets, a
/// read-only view of the file in the host, and which pages hold data (the others are holes,
/// which read as zeros; the view is never read there, so they take no memory).
#[derive(Debug)]
pub struct Snapshot {
    seg: Segment,
    /// The view's address (a `usize`, so that the snapshot may move between threads with
    /// the Store that owns it).
    view: usize,
    data: Vec<bool>,
}

impl Snapshot {
    fn of(seg: Segment, data: Vec<bool>) -> io::Result<Snapshot> {
        // SAFETY: a new shared read-only mapping of the whole file at an address of the
        // system's choosing; it is unmapped only when the snapshot is dropped.
        let view = unsafe {
            mmap(
                std::ptr::null_mut(),
                seg.len,
                ProtFlags::READ,
                MapFlags::SHARED,
                &seg.fd,
                0,
            )?
        };
        Ok(Snapshot {
            seg,
            view: view as usize,
            data,
        })
    }

    /// Whether the page at byte `offset` holds data (is inside the snapshot and not a hole).
    fn holds_data(&self, offset: usize) -> bool {
        self.data.get(offset / PAGE).copied().unwrap_or(false)
    }
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the view mapped in `Snapshot::of`; nothing borrows from it
        // (it is read only through raw pointers while the snapshot is alive).
        let _ = unsafe { rustix::mm::munmap(self.view as *mut std::ffi::c_void, self.seg.len) };
    }
}

/// The address range of one wasm linear memory in the host: base pointer and the byte length
/// currently accessible to the guest.
///
/// Holding a `MemoryRange` is a promise made by its creator (the `domain` module): the memory
/// belongs to a `Store` that stays alive for as long as this range is used to map, unmap or
/// access windows, and `len` never exceeds the memory's current size. The memory never moves
/// (`memory_may_move(false)` with a full 4 GiB reservation).
#[derive(Clone, Copy, Debug)]
pub struct MemoryRange {
    base: usize,
    len: usize,
}

impl MemoryRange {
    /// Records a memory's base and current size.
    ///
    /// # Safety
    /// `[base, base + len)` must be the accessible part of a wasm linear memory whose `Store`
    /// stays alive for as long as the range (or a copy of it) is used; mapping, unmapping
    /// and raw accesses through the range rely on it.
    pub unsafe fn new(base: *mut u8, len: usize) -> MemoryRange {
        MemoryRange {
            base: base as usize,
            len,
        }
    }

    fn window_ptr(&self, offset: usize, len: usize) -> io::Result<*mut u8> {
        let end = offset
            .checked_add(len)
            .ok_or_else(|| io::Error::other("window overflows"))?;
        if !offset.is_multiple_of(PAGE) || !len.is_multiple_of(PAGE) || end > self.len {
            return Err(io::Error::other(format!(
                "window {offset:#x}+{len:#x} is not page aligned inside a memory of {:#x} bytes",
                self.len
            )));
        }
        Ok((self.base + offset) as *mut u8)
    }

    /// Maps all of `segment` at `offset` in this memory, shared.
    pub fn map(&self, offset: usize, segment: &Segment) -> io::Result<()> {
        let ptr = self.window_ptr(offset, segment.len)?;
        // SAFETY: `window_ptr` checked that [ptr, ptr+len) is page aligned and lies inside the
        // accessible part of a linear memory whose Store is alive (the `MemoryRange` contract).
        // Those pages belong to wasmtime's reservation for that memory and were grown by the
        // host for windows, so no Rust object lives there; replacing them with MAP_FIXED
        // changes only what the guest (and our raw-pointer accessors) see.
        unsafe {
            mmap(
                ptr.cast(),
                segment.len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED | MapFlags::FIXED,
                &segment.fd,
                0,
            )?;
        }
        Ok(())
    }

    /// Replaces `len` bytes at `offset` with private zero pages: the window's pages leave this
    /// memory, the guest keeps readable and writable (zeroed) memory at those addresses.
    pub fn unmap(&self, offset: usize, len: usize) -> io::Result<()> {
        let ptr = self.window_ptr(offset, len)?;
        // SAFETY: as in `map`: the range is inside the live, accessible part of the memory's
        // reservation. The replacement is private anonymous read-write memory, so the memory
        // stays fully accessible and no hole appears in wasmtime's reservation.
        unsafe {
            mmap_anonymous(
                ptr.cast(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE | MapFlags::FIXED,
            )?;
        }
        Ok(())
    }

    /// Makes each of `ranges` (`(offset, len)`, page aligned, in order) of this memory a
    /// private copy-on-write mapping of one new memory file that holds their current
    /// contents at the same offsets, so that [`revert`](Self::revert) can bring those
    /// contents back (per-request isolation's snapshot). Only the pages that are not all
    /// zeros are written to the file; the rest stay holes, which read as zeros and take no
    /// memory. Returns the file with a view of it ([`Snapshot`], for [`put_back`](Self::put_back)).
    pub fn snapshot(&self, ranges: &[(usize, usize)]) -> io::Result<Snapshot> {
        let mut end = 0;
        for &(off, len) in ranges {
            self.window_ptr(off, len)?;
            end = end.max(off + len);
        }
        let seg = Segment::new(end)?;
        let mut data = vec![false; seg.len / PAGE];
        let mut page = vec![0u8; PAGE];
        for &(start, len) in ranges {
            for off in (start..start + len).step_by(PAGE) {
                self.read(off, &mut page)
                    .ok_or_else(|| io::Error::other("snapshot outside the memory"))?;
                if page.iter().all(|&b| b == 0) {
                    continue;
                }
                data[off / PAGE] = true;
                let mut done = 0;
                while done < PAGE {
                    let n = rustix::io::pwrite(&seg.fd, &page[done..], (off + done) as u64)?;
                    if n == 0 {
                        return Err(io::Error::other("short write to a snapshot file"));
                    }
                    done += n;
                }
            }
        }
        for &(off, len) in ranges {
            let ptr = self.window_ptr(off, len)?;
            // SAFETY: as in `map`: `[ptr, ptr+len)` is page aligned inside the live,
            // accessible part of the memory's reservation (the `MemoryRange` contract), and
            // inside the file (`end`). The file holds the bytes just read from those pages at
            // the same offsets, and the caller holds the memory's Store (no guest code runs
            // meanwhile), so the guest sees the same contents, now copy-on-write; no Rust
            // object lives in a linear memory.
            unsafe {
                mmap(
                    ptr.cast(),
                    len,
                    ProtFlags::READ | ProtFlags::WRITE,
                    MapFlags::PRIVATE | MapFlags::FIXED,
                    &seg.fd,
                    off as u64,
                )?;
            }
        }
        Snapshot::of(seg, data)
    }

    /// Puts the snapshot's bytes back into the pages of `[offset, offset + len)` that hold
    /// private copies (the pages the guest wrote since they were mapped; those past the
    /// snapshot get zeros), leaving the page tables as they are (see `scan`). With more than
    /// [`PUT_BACK_MAX`] such pages, or where the system can not list them, it drops them
    /// instead ([`revert`](Self::revert)). Returns how it went.
    pub fn put_back(&self, snap: &Snapshot, offset: usize, len: usize) -> io::Result<PutBack> {
        let ptr = self.window_ptr(offset, len)?;
        // Pages are copied as the scan reports them (no list kept between the two); past
        // `PUT_BACK_MAX` the copying stops, and the range is dropped below instead.
        let mut copied = 0;
        let scanned = super::scan::private_pages(ptr as usize, len, |start, run| {
            // The scan reported the run inside `[ptr, ptr + len)` (checked there).
            let first = start - self.base;
            for off in (first..first + run).step_by(PAGE) {
                if copied == PUT_BACK_MAX {
                    return;
                }
                copied += 1;
                let src = if snap.holds_data(off) {
                    // SAFETY: `off` is a page of the snapshot (`holds_data` is false past it),
                    // so `[view + off, view + off + PAGE)` lies inside the view, which lives
                    // as long as `snap`.
                    unsafe { (snap.view as *const u8).add(off) }
                } else {
                    ZEROS.as_ptr()
                };
                // SAFETY: `[base + off, base + off + PAGE)` lies inside `[ptr, ptr + len)`,
                // the live, accessible part of the memory (checked by `window_ptr`, and the
                // `MemoryRange` contract); the source is a page of the snapshot's read-only
                // view or of `ZEROS`, never guest memory. The caller holds the memory's Store,
                // so no guest code runs meanwhile; the copy writes through a raw pointer.
                unsafe { crate::bulk::copy(src, (self.base + off) as *mut u8, PAGE) };
            }
        });
        match scanned {
            Ok(n) if n <= PUT_BACK_MAX => Ok(PutBack::Copied(n)),
            Ok(n) => {
                self.revert(offset, len)?;
                Ok(PutBack::Dropped(n))
            }
            Err(_) => {
                self.revert(offset, len)?;
                Ok(PutBack::Dropped(0))
            }
        }
    }

    /// Throws away the private copies of `[offset, offset + len)`: pages mapped by
    /// [`snapshot`](Self::snapshot) read as the snapshot again, and the kernel frees the
    /// pages the guest wrote (`madvise(MADV_DONTNEED)`; its cost grows with the pages that
    /// were touched, not with `len`).
    pub fn revert(&self, offset: usize, len: usize) -> io::Result<()> {
        let ptr = self.window_ptr(offset, len)?;
        // SAFETY: the range is inside the live, accessible part of the memory's reservation
        // (checked above and the `MemoryRange` contract); dropping private pages changes
        // only what the guest sees there (the snapshot's bytes; zeros for anonymous pages), and
        // the host forms no references into linear memories.
        unsafe { rustix::mm::madvise(ptr.cast(), len, rustix::mm::Advice::LinuxDontNeed)? };
        Ok(())
    }

    /// Copies `dst.len()` bytes out of the memory at `offset`, or `None` when the range is not
    /// inside the memory. Safe against concurrent writers: a racing write yields arbitrary
    /// bytes, never undefined behaviour in the host.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Option<()> {
        let end = offset.checked_add(dst.len())?;
        if end > self.len {
            return None;
        }
        let src = (self.base + offset) as *const u8;
        // SAFETY: `[offset, end)` is inside the accessible memory (the contract), which is
        // not `dst`'s; the copy reads through a raw pointer, and any bytes a peer domain
        // writes meanwhile are valid `u8`s (see `crate::bulk`).
        unsafe { crate::bulk::copy(src, dst.as_mut_ptr(), dst.len()) };
        Some(())
    }

    /// Copies `src` into the memory at `offset`; `None` when the range is not inside it.
    pub fn write(&self, offset: usize, src: &[u8]) -> Option<()> {
        let end = offset.checked_add(src.len())?;
        if end > self.len {
            return None;
        }
        let dst = (self.base + offset) as *mut u8;
        // SAFETY: in bounds as above, and not `src`'s memory; the copy writes through a raw
        // pointer, never forming a Rust reference to pages another domain may be writing.
        unsafe { crate::bulk::copy(src.as_ptr(), dst, src.len()) };
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A private anonymous region standing in for a linear memory.
    struct Region {
        ptr: *mut u8,
        len: usize,
    }

    impl Region {
        fn new(len: usize) -> Region {
            // SAFETY: a fresh anonymous mapping at an address of the kernel's choosing.
            let ptr = unsafe {
                mmap_anonymous(
                    std::ptr::null_mut(),
                    len,
                    ProtFlags::READ | ProtFlags::WRITE,
                    MapFlags::PRIVATE,
                )
            }
            .expect("mmap");
            Region {
                ptr: ptr.cast(),
                len,
            }
        }
        fn range(&self) -> MemoryRange {
            // SAFETY: the region is a live anonymous mapping owned by `self`, standing in for a
            // linear memory, and the tests use the range only while `self` lives.
            unsafe { MemoryRange::new(self.ptr, self.len) }
        }
    }

    impl Drop for Region {
        fn drop(&mut self) {
            // SAFETY: unmaps exactly the region created in `new`, which nothing uses anymore.
            unsafe { rustix::mm::munmap(self.ptr.cast(), self.len) }.expect("munmap");
        }
    }

    #[test]
    fn a_segment_mapped_twice_is_shared_and_unmapping_zeroes_one_side() {
        let a = Region::new(16 * PAGE);
        let b = Region::new(16 * PAGE);
        let seg = Segment::new(2 * PAGE + 1).unwrap();
        assert_eq!(seg.len(), 3 * PAGE);
        a.range().map(4 * PAGE, &seg).unwrap();
        b.range().map(8 * PAGE, &seg).unwrap();
        a.range().write(4 * PAGE + 100, b"shared").unwrap();
        let mut got = [0u8; 6];
        b.range().read(8 * PAGE + 100, &mut got).unwrap();
        assert_eq!(&got, b"shared");

        a.range().unmap(4 * PAGE, seg.len()).unwrap();
        a.range().read(4 * PAGE + 100, &mut got).unwrap();
        assert_eq!(got, [0; 6], "the unmapped side sees fresh zero pages");
        b.range().read(8 * PAGE + 100, &mut got).unwrap();
        assert_eq!(&got, b"shared", "the other side keeps the segment");
    }

    #[test]
    fn a_reverted_snapshot_reads_as_it_was_taken() {
        let a = Region::new(8 * PAGE);
        a.range().write(PAGE + 3, b"fresh").unwrap();
        let _file = a
            .range()
            .snapshot(&[(0, 2 * PAGE), (3 * PAGE, PAGE)])
            .unwrap();
        a.range().write(PAGE + 3, b"dirty").unwrap();
        a.range().write(3 * PAGE, b"more").unwrap();
        a.range().write(5 * PAGE, b"beyond").unwrap();
        a.range().revert(0, 2 * PAGE).unwrap();
        a.range().revert(3 * PAGE, PAGE).unwrap();
        let mut got = [0u8; 5];
        a.range().read(PAGE + 3, &mut got).unwrap();
        assert_eq!(&got, b"fresh");
        a.range().read(3 * PAGE, &mut got).unwrap();
        assert_eq!(got, [0; 5], "a hole of the snapshot reads as zeros again");
        a.range().read(5 * PAGE, &mut got).unwrap();
        assert_eq!(&got, b"beyon", "pages past the snapshot are left alone");
        assert!(a.range().revert(0, 9 * PAGE).is_err());
    }

    /// `put_back` copies the snapshot into the written pages (zeros into a hole and past the
    /// snapshot), and leaves pages only read or never touched mapped as they were.
    #[test]
    fn put_back_restores_the_written_pages_in_place() {
        let a = Region::new(8 * PAGE);
        a.range().write(PAGE + 3, b"fresh").unwrap();
        let snap = a.range().snapshot(&[(0, 4 * PAGE)]).unwrap();
        let mut got = [0u8; 5];
        a.range().read(2 * PAGE, &mut got).unwrap();
        a.range().write(PAGE + 3, b"dirty").unwrap();
        a.range().write(3 * PAGE + 9, b"hole").unwrap();
        a.range().write(5 * PAGE, b"beyond").unwrap();
        let how = a.range().put_back(&snap, 0, 8 * PAGE).unwrap();
        // Linux has had the scan since 6.7: there, it must be in use.
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let mut v = release
            .split(['.', '-'])
            .map(|n| n.parse::<u32>().unwrap_or(0));
        if (v.next().unwrap_or(0), v.next().unwrap_or(0)) >= (6, 7)
            && std::env::var_os(crate::astack::scan::SWITCH).is_none()
        {
            assert!(crate::astack::scan::available());
        }
        if crate::astack::scan::available() {
            // The pages written: one of data, one a hole of the snapshot, one past it.
            assert_eq!(how, PutBack::Copied(3));
        } else {
            assert_eq!(how, PutBack::Dropped(0));
        }
        a.range().read(PAGE + 3, &mut got).unwrap();
        assert_eq!(&got, b"fresh");
        a.range().read(3 * PAGE + 9, &mut got).unwrap();
        assert_eq!(got, [0; 5], "a hole of the snapshot reads as zeros again");
        a.range().read(5 * PAGE, &mut got).unwrap();
        assert_eq!(got, [0; 5], "a page past the snapshot reads as zeros again");
        // Again, with the pages now private copies: the same pages are put back.
        a.range().write(PAGE + 3, b"again").unwrap();
        let how = a.range().put_back(&snap, 0, 8 * PAGE).unwrap();
        a.range().read(PAGE + 3, &mut got).unwrap();
        assert_eq!(&got, b"fresh");
        if crate::astack::scan::available() {
            assert_eq!(how, PutBack::Copied(3));
        }
        assert!(a.range().put_back(&snap, 0, 9 * PAGE).is_err());
    }

    /// Past [`PUT_BACK_MAX`] written pages, `put_back` drops them: same contents.
    #[test]
    fn put_back_drops_many_written_pages() {
        let pages = PUT_BACK_MAX + 8;
        let a = Region::new(pages * PAGE);
        a.range().write(7, b"fresh").unwrap();
        let snap = a.range().snapshot(&[(0, pages * PAGE)]).unwrap();
        for p in 0..pages {
            a.range().write(p * PAGE, b"dirty").unwrap();
        }
        let how = a.range().put_back(&snap, 0, pages * PAGE).unwrap();
        if crate::astack::scan::available() {
            assert_eq!(how, PutBack::Dropped(pages));
        }
        let mut got = [0u8; 5];
        a.range().read(7, &mut got).unwrap();
        assert_eq!(&got, b"fresh");
        a.range().read((pages - 1) * PAGE, &mut got).unwrap();
        assert_eq!(got, [0; 5]);
    }

    #[test]
    fn windows_outside_the_memory_or_misaligned_are_refused() {
        let a = Region::new(4 * PAGE);
        let seg = Segment::new(PAGE).unwrap();
        assert!(a.range().map(4 * PAGE, &seg).is_err());
        assert!(a.range().map(100, &seg).is_err());
        assert!(a.range().unmap(usize::MAX - PAGE + 1, PAGE).is_err());
        let mut buf = [0u8; 8];
        assert!(a.range().read(4 * PAGE - 4, &mut buf).is_none());
        assert!(a.range().write(usize::MAX, &buf).is_none());
    }
}
