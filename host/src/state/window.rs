//! A replica's windows: the window space of one domain replica's memory (through the one
//! [`WindowAlloc`]), and unmapping windows when a binding, a channel or a mixed pair gives
//! them back — at once, or, for a client that is running, when it stops (LRPC's revocation
//! must not hand a running client zeros as an answer).

use super::domain::{DomainData, Replica};
use crate::astack::alloc::{WindowAlloc, grown_offset};
use crate::astack::map::{MemoryRange, WASM_PAGE};
use crate::error::Error;
use crate::sync::lock;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use wasmtime::AsContextMut;

/// The window space of one replica's memory.
pub(crate) struct WindowSpace {
    alloc: Mutex<WindowAlloc>,
    /// Windows revoked while this replica was running (see [`Replica::unmap_or_defer`]).
    deferred: Mutex<Vec<(usize, usize)>>,
    /// Set while `deferred` is not empty (shared with the replica's store data).
    has_deferred: Arc<AtomicBool>,
}

impl WindowSpace {
    /// No windows yet; `has_deferred` is the flag the replica's store data reads too.
    pub(crate) fn new(has_deferred: Arc<AtomicBool>) -> WindowSpace {
        WindowSpace {
            alloc: Mutex::new(WindowAlloc::default()),
            deferred: Mutex::new(Vec::new()),
            has_deferred,
        }
    }
}

impl Replica {
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
            super::reset::host_grew(&mut ctx, &self.memory);
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
