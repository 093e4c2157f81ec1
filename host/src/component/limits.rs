//! Store limits that also count the linear memory a Store's instances hold. A component has
//! no `Memory` handle an embedder could ask for its size, but every linear memory is created
//! and grown through the Store's resource limiter, which sees each size change.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use wasmtime::{ResourceLimiter, StoreLimits};

/// [`StoreLimits`] that keep the total bytes of linear memory allowed so far (memories only
/// grow) in a counter the embedder reads without entering the Store.
#[derive(Debug)]
pub struct MeteredLimits {
    limits: StoreLimits,
    bytes: Arc<AtomicUsize>,
}

impl MeteredLimits {
    /// `limits`, counting into `bytes` (added to: a fresh Store's count starts where
    /// `bytes` stands, so reset it when the Store it counted is dropped).
    pub fn new(limits: StoreLimits, bytes: Arc<AtomicUsize>) -> MeteredLimits {
        MeteredLimits { limits, bytes }
    }
}

impl ResourceLimiter for MeteredLimits {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let allowed = self.limits.memory_growing(current, desired, maximum)?;
        if allowed {
            self.bytes
                .fetch_add(desired.saturating_sub(current), Ordering::Relaxed);
        }
        Ok(allowed)
    }

    fn memory_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.limits.memory_grow_failed(error)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.limits.table_growing(current, desired, maximum)
    }

    fn table_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.limits.table_grow_failed(error)
    }

    fn instances(&self) -> usize {
        self.limits.instances()
    }

    fn tables(&self) -> usize {
        self.limits.tables()
    }

    fn memories(&self) -> usize {
        self.limits.memories()
    }
}
