//! Lock helpers every concept module uses, below all of them: a mutex lock that survives
//! poisoning, and a bounded wait for a replica's `Store` lock.

use lrpc_lock::{Guard, TryLock};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Locks a mutex, recovering the data if a panic poisoned it (`lrpc_lock::lock`).
pub(crate) use lrpc_lock::lock;

/// Locks `m`, polling with back-off for at most `wait`. A `Store` lock is held for the whole
/// of a call, which may legitimately be long; a cycle of calls across threads (T1: A→B while
/// T2: B→A) would deadlock a blocking lock, so waiting is bounded by the caller's deadline.
/// A thread that has to wait is counted in `waiting` meanwhile: the holder of a `Store`
/// learns from it that someone waits (a thread that paces its guest code at epoch ticks,
/// `pace`, does not pause then).
#[inline]
pub(crate) fn wait_lock<'a, T>(
    m: &'a TryLock<T>,
    wait: Duration,
    waiting: &AtomicU32,
) -> Option<Guard<'a, T>> {
    // The common case, a free lock, reads no clock and counts nothing.
    match m.try_lock() {
        Some(g) => Some(g),
        None => {
            waiting.fetch_add(1, Ordering::Relaxed);
            let g = wait_lock_contended(m, wait);
            waiting.fetch_sub(1, Ordering::Relaxed);
            g
        }
    }
}

/// The waiting half of [`wait_lock`]: the lock was held when first tried. After a short
/// spin it tells this thread's wait hook (`pace::set_wait_hook`) that it is about to wait.
#[cold]
#[inline(never)]
fn wait_lock_contended<T>(m: &TryLock<T>, wait: Duration) -> Option<Guard<'_, T>> {
    let start = Instant::now();
    let mut spins = 0u32;
    loop {
        spins += 1;
        if spins == 64 {
            crate::pace::on_wait();
        }
        if spins < 64 {
            std::hint::spin_loop();
        } else if spins < 256 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(50));
        }
        if let Some(g) = m.try_lock() {
            return Some(g);
        }
        if start.elapsed() >= wait {
            return None;
        }
    }
}
