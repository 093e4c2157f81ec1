//! What a replica does with its memory and its store: locking the store (or borrowing it
//! from the linkage stack when this thread is inside a call the replica made), the memory
//! as a range to map windows over, allocating and unmapping windows (at once, or, for a
//! client that is running, when it stops: LRPC's revocation must not hand a running client
//! zeros as an answer), giving a terminated replica's memory back, and picking a free
//! replica of a server.

use super::linkage;
use super::records::{DomainData, Replica};
use crate::astack::alloc::grown_offset;
use crate::astack::map::{MemoryRange, WASM_PAGE};
use crate::error::Error;
use crate::sync::lock;
use lrpc_lock::Guard;
use std::sync::atomic::Ordering;
use std::time::Duration;
use wasmtime::{AsContextMut, Memory, Store, StoreContextMut, Val};

impl Replica {
    /// See [`DomainShared::release_memory`].
    pub(super) fn release_memory(&self) {
        if self.released.load(Ordering::Acquire) {
            return;
        }
        // Only while no code runs in the replica: the store lock is what a running call
        // holds.
        let Some(store) = self.store.try_lock() else {
            return;
        };
        let size = self.memory.data_size(&*store);
        // The guest's own pages only: windows stay as they are (a channel's replies that
        // its client has yet to collect live there), and go when their owners give them
        // back. They are pages of memory files, not the guest's heap.
        let guest = self.guest_ranges(size);
        let range = self.range(size);
        for (off, len) in guest {
            if let Err(e) = range.unmap(off, len) {
                tracing::error!(
                    domain = self.key.domain,
                    replica = self.key.replica,
                    "giving a terminated replica's memory back failed: {e}"
                );
                return;
            }
        }
        self.released.store(true, Ordering::Release);
    }

    /// Whether the replica's memory went back to the system.
    pub(crate) fn is_released(&self) -> bool {
        self.released.load(Ordering::Acquire)
    }

    /// Locks the replica's store, waiting for at most `wait` (counted as a waiter meanwhile:
    /// see `DomainData::waiting`).
    #[inline]
    pub(crate) fn wait_store(&self, wait: Duration) -> Option<Guard<'_, Store<DomainData>>> {
        crate::sync::wait_lock(&self.store, wait, &self.waiting)
    }

    /// The memory as a window-mapping range, up to the host-grown high-water mark.
    #[allow(unsafe_code, reason = "the range's contract, argued below")]
    pub(crate) fn range(&self, high: usize) -> MemoryRange {
        // SAFETY: `base` is this replica's linear memory, which never moves and lives as long
        // as the replica's Store; callers pass at most the size the host has grown it to, and
        // use the range only while they hold the replica (its shared state keeps the Store).
        unsafe { MemoryRange::new(self.base as *mut u8, high) }
    }

    /// Runs `f` with this replica's store: locked if it is free, borrowed from the linkage
    /// stack if this thread is inside a call made by it, or after waiting up to `wait` for
    /// another thread to release it.
    pub(crate) fn with_store<R>(
        &self,
        wait: Duration,
        f: impl FnOnce(StoreContextMut<'_, DomainData>) -> R,
    ) -> Result<R, Busy> {
        if let Some(mut guard) = self.store.try_lock() {
            return Ok(f(guard.as_context_mut()));
        }
        let mut f = Some(f);
        if let Some(r) = linkage::reenter(self.key, |caller| {
            (f.take().expect("called once"))(caller.as_context_mut())
        }) {
            return Ok(r);
        }
        let f = f.take().expect("not yet called");
        let mut guard = self.wait_store(wait).ok_or(Busy)?;
        Ok(f(guard.as_context_mut()))
    }

    /// Allocates `len` bytes (page multiple) of window space, growing the memory through
    /// `ctx` (this replica's store) when no free range fits.
    pub(crate) fn alloc_window(
        &self,
        mut ctx: impl AsContextMut<Data = DomainData>,
        len: usize,
    ) -> Result<usize, Error> {
        let mut w = lock(&self.windows.alloc);
        w.take(len, |pages| {
            let account = ctx.as_context_mut().data().core.account.clone();
            let size = self.memory.data_size(&ctx) as u64;
            account.check(
                crate::error::Quota::Memory,
                size.saturating_add((pages * WASM_PAGE) as u64),
            )?;
            let grow_error = |source: crate::error::BoxError| Error::Grow {
                domain: account.domain.clone(),
                source,
            };
            let old = self
                .memory
                .grow(&mut ctx, pages as u64)
                .map_err(|e| grow_error(crate::error::boxed(e)))?;
            host_grew(&mut ctx, &self.memory);
            grown_offset(old).ok_or_else(|| grow_error("the memory offset overflows".into()))
        })
    }

    /// Returns a window range to the free list (its pages must already be unmapped).
    pub(crate) fn free_window(&self, off: usize, len: usize) {
        lock(&self.windows.alloc).give_back(off, len);
    }

    /// Takes a window out of this memory and returns its pages to the window allocator. A
    /// failed unmap leaves the range allocated (never reused) rather than reusing pages that
    /// may still be shared.
    pub(crate) fn unmap_free(&self, off: usize, len: usize) {
        match self.window_range().unmap(off, len) {
            Ok(()) => self.free_window(off, len),
            Err(e) => tracing::error!(
                domain = self.key.domain,
                replica = self.key.replica,
                off,
                len,
                "unmapping a window failed: {e}"
            ),
        }
    }

    /// Takes a **client's** window out of its memory when revoking a binding from any thread.
    ///
    /// A client may be running right now, between a call that returned `Ok` and its stub
    /// reading the results off the A-stack; zeroing the window under it would hand it zeros
    /// as a successful answer. So the window goes at once only when the client is not
    /// running (its store is free); otherwise it stays in the client's memory — already gone
    /// from the server's, so it is the client's private memory now — until the client next
    /// enters the kernel or returns to the embedder ([`flush_deferred`](Self::flush_deferred)),
    /// and its pages are not reused until then.
    pub(crate) fn unmap_or_defer(&self, off: usize, len: usize) {
        match self.store.try_lock() {
            Some(_running_excluded) => self.unmap_free(off, len),
            None => {
                lock(&self.windows.deferred).push((off, len));
                self.windows.has_deferred.store(true, Ordering::Release);
            }
        }
    }

    /// Unmaps the windows whose revocation waited for this replica to stop running. The
    /// caller holds the replica's store (it is the replica's thread, in an import or just
    /// back from a call into it).
    pub(crate) fn flush_deferred(&self) {
        if !self.windows.has_deferred.load(Ordering::Acquire) {
            return;
        }
        let windows = {
            let mut d = lock(&self.windows.deferred);
            self.windows.has_deferred.store(false, Ordering::Release);
            std::mem::take(&mut *d)
        };
        for (off, len) in windows {
            self.unmap_free(off, len);
        }
    }

    /// The parts of the first `size` bytes of this replica's memory that hold no window
    /// space: the guest's own pages.
    pub(crate) fn guest_ranges(&self, size: usize) -> Vec<(usize, usize)> {
        lock(&self.windows.alloc).guest_ranges(size)
    }

    /// The end of the highest range the host grew for windows (0: none).
    pub(crate) fn window_high(&self) -> usize {
        lock(&self.windows.alloc).high()
    }

    /// The memory range covering every window of this replica.
    pub(crate) fn window_range(&self) -> MemoryRange {
        self.range(lock(&self.windows.alloc).high())
    }
}

/// A replica stayed locked by another thread for the whole wait.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Busy;

/// Raises the memory size an isolated replica's guest sees to the memory's real size after
/// the host grew the memory for windows (the guest must not be handed their pages).
pub(crate) fn host_grew(mut ctx: impl AsContextMut<Data = DomainData>, memory: &Memory) {
    let mut ctx = ctx.as_context_mut();
    let Some(size) = ctx.data().fresh.as_ref().map(|f| f.size) else {
        return;
    };
    if let Ok(pages) = i32::try_from(memory.size(&ctx)) {
        // The global is an `i32` of the rewritten module: setting it can not fail.
        let _ = size.set(&mut ctx, Val::I32(pages));
    }
}

/// Locks the first free replica, starting from one chosen by the calling thread so that
/// threads spread over replicas; waits (bounded) when all are busy.
pub(crate) fn pick_replica(
    replicas: &[Replica],
    wait: Duration,
) -> Option<(usize, Guard<'_, Store<DomainData>>)> {
    let n = replicas.len();
    let start = if n == 1 { 0 } else { thread_slot() % n };
    for k in 0..n {
        let i = (start + k) % n;
        if let Some(g) = replicas[i].store.try_lock() {
            return Some((i, g));
        }
    }
    replicas[start].wait_store(wait).map(|g| (start, g))
}

/// A small per-thread number used to spread threads over replicas.
pub(crate) fn thread_slot() -> usize {
    use std::sync::atomic::AtomicUsize;
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SLOT: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    SLOT.with(|s| *s)
}
