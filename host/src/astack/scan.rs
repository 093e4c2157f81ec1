//! Which pages of a range hold private copies: the `PAGEMAP_SCAN` ioctl of
//! `/proc/self/pagemap` (Linux 6.7 and later), which per-request isolation's resets use to
//! find the pages a guest wrote.
//!
//! In a private mapping of a memory file, a page the guest only read is the file's own page
//! (or not mapped at all); the first write replaces it with a private, anonymous copy. Pages
//! that grew past the file are anonymous from their first write. So the private pages of a
//! range are the ones that may differ from the file (or from zeros): a reset writes the
//! file's bytes back into just those, and leaves the page tables as they are. (Dropping the
//! pages instead, `madvise(MADV_DONTNEED)`, changes page tables on every request: each
//! change flushes the TLB of every processor running the process, an interrupt per
//! processor, and each page faults in again on the next request.)
//!
//! The scan reads page tables only; it changes nothing. Where the ioctl is missing (an older
//! kernel, a seccomp filter, no `/proc`) or `LRPC_PAGE_SCAN=off` is set, [`available`] is
//! false and callers drop pages instead.
#![allow(
    unsafe_code,
    reason = "the pagemap ioctl takes a raw pointer to its argument; every block is argued"
)]

use rustix::fd::{AsFd, OwnedFd};
use rustix::ioctl::{Ioctl, IoctlOutput, Opcode, opcode};
use std::ffi::c_void;
use std::io;
use std::sync::OnceLock;

/// `struct pm_scan_arg` of `linux/fs.h`.
#[repr(C)]
struct PmScanArg {
    size: u64,
    flags: u64,
    start: u64,
    end: u64,
    walk_end: u64,
    vec: u64,
    vec_len: u64,
    max_pages: u64,
    category_inverted: u64,
    category_mask: u64,
    category_anyof_mask: u64,
    return_mask: u64,
}

/// `struct page_region` of `linux/fs.h`: one run of pages the scan reports.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct PageRegion {
    start: u64,
    end: u64,
    categories: u64,
}

const PAGEMAP_SCAN: Opcode = opcode::read_write::<PmScanArg>(b'f', 16);
/// A page of a file (or shared memory), not a private copy.
const PAGE_IS_FILE: u64 = 1 << 2;
const PAGE_IS_PRESENT: u64 = 1 << 3;
const PAGE_IS_SWAPPED: u64 = 1 << 4;
/// The shared zero page: read, never written.
const PAGE_IS_PFNZERO: u64 = 1 << 5;

/// The environment variable that turns scanning off (`LRPC_PAGE_SCAN=off`): resets then drop
/// pages, as where the system has no `PAGEMAP_SCAN`.
pub(crate) const SWITCH: &str = "LRPC_PAGE_SCAN";

/// An ioctl whose argument is a `T` the system reads and writes.
struct Call<'a, T> {
    op: Opcode,
    arg: &'a mut T,
}

// SAFETY: the one `Call` made here pairs `PAGEMAP_SCAN` with `PmScanArg`, whose layout is the
// uapi header's (`repr(C)`, twelve `u64`s); the pointer handed over is that exclusive borrow,
// valid for the call. The output is the ioctl's return value, read without the pointer.
unsafe impl<T> Ioctl for Call<'_, T> {
    type Output = IoctlOutput;
    const IS_MUTATING: bool = true;

    fn opcode(&self) -> Opcode {
        self.op
    }

    fn as_ptr(&mut self) -> *mut c_void {
        (self.arg as *mut T).cast()
    }

    unsafe fn output_from_ptr(out: IoctlOutput, _: *mut c_void) -> rustix::io::Result<IoctlOutput> {
        Ok(out)
    }
}

/// The process's `pagemap`, opened once (`None`: no scanning here).
static PAGEMAP: OnceLock<Option<OwnedFd>> = OnceLock::new();

fn pagemap() -> Option<&'static OwnedFd> {
    PAGEMAP
        .get_or_init(|| {
            if std::env::var_os(SWITCH).is_some_and(|v| v == "off") {
                return None;
            }
            open()
                .inspect_err(|e| {
                    tracing::info!(
                        "PAGEMAP_SCAN is unavailable ({e}): isolated domains reset by dropping \
                         the pages they wrote, which costs more per request"
                    );
                })
                .ok()
        })
        .as_ref()
}

/// Whether this process can scan its page tables (asked once; the answer never changes).
#[cfg(test)]
pub(crate) fn available() -> bool {
    pagemap().is_some()
}

fn open() -> io::Result<OwnedFd> {
    let fd = rustix::fs::open(
        "/proc/self/pagemap",
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?;
    probe(&fd)?;
    Ok(fd)
}

/// Checks the scan on a mapping of its own: of two pages of a memory file mapped private,
/// one read and one written, exactly the written one is private.
fn probe(fd: &OwnedFd) -> io::Result<()> {
    let page = rustix::param::page_size();
    let file = rustix::fs::memfd_create("lrpc-probe", rustix::fs::MemfdFlags::CLOEXEC)?;
    rustix::fs::ftruncate(&file, 2 * page as u64)?;
    // SAFETY: a fresh private mapping of the two-page file at an address of the system's
    // choosing, used only here and unmapped below.
    let at = unsafe {
        rustix::mm::mmap(
            std::ptr::null_mut(),
            2 * page,
            rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
            rustix::mm::MapFlags::PRIVATE,
            &file,
            0,
        )
    }?;
    let start = at as usize;
    // SAFETY: both pages are ours, mapped read-write above, and nothing else uses them.
    unsafe {
        at.cast::<u8>().read_volatile();
        at.cast::<u8>().add(page).write_volatile(1);
    }
    let mut runs = Vec::new();
    let scanned = scan(fd, start, 2 * page, |s, l| runs.push((s - start, l)));
    // SAFETY: unmaps exactly the mapping made above, which nothing uses anymore.
    unsafe { rustix::mm::munmap(at, 2 * page) }?;
    let pages = scanned?;
    if pages == 1 && runs == [(page, page)] {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "PAGEMAP_SCAN found {runs:?} private, not the written page alone"
        )))
    }
}

/// Calls `f(start, len)` for each run of private pages (present or swapped out, not the zero
/// page) in `[start, start + len)`; returns how many pages there were.
fn scan(
    fd: &OwnedFd,
    start: usize,
    len: usize,
    mut f: impl FnMut(usize, usize),
) -> io::Result<usize> {
    let page = rustix::param::page_size();
    let end = start as u64 + len as u64;
    let mut regions = [PageRegion::default(); 32];
    let mut from = start as u64;
    let mut pages = 0;
    while from < end {
        let mut arg = PmScanArg {
            size: size_of::<PmScanArg>() as u64,
            flags: 0,
            start: from,
            end,
            walk_end: 0,
            vec: regions.as_mut_ptr() as u64,
            vec_len: regions.len() as u64,
            max_pages: 0,
            // Neither a file's page nor the zero page (both inverted, both required), and
            // present or swapped out.
            category_inverted: PAGE_IS_FILE | PAGE_IS_PFNZERO,
            category_mask: PAGE_IS_FILE | PAGE_IS_PFNZERO,
            category_anyof_mask: PAGE_IS_PRESENT | PAGE_IS_SWAPPED,
            return_mask: PAGE_IS_PRESENT | PAGE_IS_SWAPPED,
        };
        // SAFETY: see `Call`: `PAGEMAP_SCAN` with its own argument struct, whose `vec`
        // points at `regions`, `vec_len` entries the system may write, alive for the call.
        let n = unsafe {
            rustix::ioctl::ioctl(
                fd.as_fd(),
                Call {
                    op: PAGEMAP_SCAN,
                    arg: &mut arg,
                },
            )
        }?;
        let n = usize::try_from(n).unwrap_or(0).min(regions.len());
        for r in &regions[..n] {
            // The system reports runs inside the asked range; check rather than trust.
            if r.start < from || r.end > end || r.start >= r.end {
                return Err(io::Error::other(
                    "PAGEMAP_SCAN reported a run outside the range",
                ));
            }
            let run = (r.end - r.start) as usize;
            pages += run / page;
            f(r.start as usize, run);
        }
        if arg.walk_end <= from || arg.walk_end > end {
            break;
        }
        from = arg.walk_end;
    }
    Ok(pages)
}

/// Calls `f(start, len)` for each run of private pages in `[start, start + len)` (page
/// aligned); returns how many pages there were. An error when scanning is unavailable.
pub(crate) fn private_pages(
    start: usize,
    len: usize,
    f: impl FnMut(usize, usize),
) -> io::Result<usize> {
    let fd = pagemap().ok_or_else(|| io::Error::other("PAGEMAP_SCAN is unavailable"))?;
    scan(fd, start, len, f)
}
