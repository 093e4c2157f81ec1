//! The lock around each replica's `Store` in the lrpc kernel.
//!
//! A `Store` is single threaded; the call path takes the server replica's lock on every call.
//! `std::sync::Mutex` costs two atomic read-modify-writes per lock/unlock pair (its unlock
//! swaps to learn whether to wake a waiter). Waiting for a `Store` is always bounded and
//! polled here (see `sync::wait_lock`: a call cycle across threads must give up rather
//! than deadlock), so nobody sleeps on the lock and unlocking is a plain release store.
//!
//! The protocol (an acquiring compare-exchange to lock, a releasing store to unlock) is
//! checked by a [loom](https://docs.rs/loom) model test: `tests/loom.rs`, run with
//! `RUSTFLAGS="--cfg loom" cargo test -p lrpc-lock --release --target-dir target/loom`.
//! Under `cfg(loom)` the atomics and the cell are loom's, which explores every interleaving
//! and reports any access to the value that is not ordered after the previous holder's.
#![warn(missing_docs)]

use std::ops::{Deref, DerefMut};
use std::sync::{Mutex, MutexGuard};

#[cfg(loom)]
use loom::sync::atomic::{AtomicBool, Ordering};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicBool, Ordering};

/// The cell holding the locked value: `std`'s, or loom's tracked one under `cfg(loom)`.
#[cfg(not(loom))]
struct Cell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> Cell<T> {
    fn new(v: T) -> Self {
        Cell(std::cell::UnsafeCell::new(v))
    }
    fn ptr(&self) -> *mut T {
        self.0.get()
    }
}

#[cfg(loom)]
struct Cell<T>(loom::cell::UnsafeCell<T>);

#[cfg(loom)]
impl<T> Cell<T> {
    fn new(v: T) -> Self {
        Cell(loom::cell::UnsafeCell::new(v))
    }
    /// Records an access with loom (which checks it is ordered after every earlier access
    /// from other threads) and hands out the pointer.
    fn ptr(&self) -> *mut T {
        self.0.with_mut(|p| p)
    }
}

/// A try-only lock.
pub struct TryLock<T> {
    locked: AtomicBool,
    value: Cell<T>,
}

// SAFETY: the value is only reachable through a `Guard`, and at most one `Guard` exists at a
// time (the `locked` flag is taken with an acquiring compare-exchange and released with a
// releasing store), so sharing the lock between threads only ever moves exclusive access to
// `T` from one thread to another, which `T: Send` permits.
unsafe impl<T: Send> Sync for TryLock<T> {}

impl<T> TryLock<T> {
    /// An unlocked lock holding `value`.
    pub fn new(value: T) -> TryLock<T> {
        TryLock {
            locked: AtomicBool::new(false),
            value: Cell::new(value),
        }
    }

    /// Takes the lock if it is free.
    #[inline]
    pub fn try_lock(&self) -> Option<Guard<'_, T>> {
        self.locked
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| Guard { lock: self })
    }
}

/// Exclusive access to the locked value; unlocks when dropped.
pub struct Guard<'a, T> {
    lock: &'a TryLock<T>,
}

impl<T> Deref for Guard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: this guard is the only one (see the `Sync` impl), so no `&mut T` exists.
        unsafe { &*self.lock.value.ptr() }
    }
}

impl<T> DerefMut for Guard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: this guard is the only one, and `&mut self` makes this borrow unique.
        unsafe { &mut *self.lock.value.ptr() }
    }
}

impl<T> Drop for Guard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        self.lock.locked.store(false, Ordering::Release);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn one_guard_at_a_time_across_threads() {
        let lock = Arc::new(TryLock::new(0u64));
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let lock = lock.clone();
                std::thread::spawn(move || {
                    let mut done = 0;
                    while done < 100_000 {
                        if let Some(mut g) = lock.try_lock() {
                            let v = *g;
                            *g = v + 1;
                            done += 1;
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*lock.try_lock().unwrap(), 200_000);
        let g = lock.try_lock().unwrap();
        assert!(lock.try_lock().is_none(), "held");
        drop(g);
        assert!(lock.try_lock().is_some(), "released");
    }
}

/// Locks a `std` mutex, taking the data of a lock a panicking thread left poisoned. The
/// kernel and the crates around it keep their state consistent by construction, so a
/// poisoned lock only says that a panic happened elsewhere. The one such helper of the
/// workspace.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
