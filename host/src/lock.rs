//! The lock around each replica's `Store`.
//!
//! A `Store` is single threaded; the call path takes the server replica's lock on every call.
//! `std::sync::Mutex` costs two atomic read-modify-writes per lock/unlock pair (its unlock
//! swaps to learn whether to wake a waiter). Waiting for a `Store` is always bounded and
//! polled here (see `domain::wait_lock`: a call cycle across threads must give up rather
//! than deadlock), so nobody sleeps on the lock and unlocking is a plain release store.
#![allow(
    unsafe_code,
    reason = "a lock owns its data through an UnsafeCell; argued below"
)]

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};

/// A try-only lock.
pub(crate) struct TryLock<T> {
    locked: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the value is only reachable through a `Guard`, and at most one `Guard` exists at a
// time (the `locked` flag is taken with an acquiring compare-exchange and released with a
// releasing store), so sharing the lock between threads only ever moves exclusive access to
// `T` from one thread to another, which `T: Send` permits.
unsafe impl<T: Send> Sync for TryLock<T> {}

impl<T> TryLock<T> {
    pub(crate) fn new(value: T) -> TryLock<T> {
        TryLock {
            locked: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// Takes the lock if it is free.
    #[inline]
    pub(crate) fn try_lock(&self) -> Option<Guard<'_, T>> {
        self.locked
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| Guard { lock: self })
    }
}

/// Exclusive access to the locked value; unlocks when dropped.
pub(crate) struct Guard<'a, T> {
    lock: &'a TryLock<T>,
}

impl<T> Deref for Guard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: this guard is the only one (see the `Sync` impl), so no `&mut T` exists.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for Guard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: this guard is the only one, and `&mut self` makes this borrow unique.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for Guard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        self.lock.locked.store(false, Ordering::Release);
    }
}

#[cfg(test)]
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
