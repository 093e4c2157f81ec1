//! Loom model of the try-lock: every interleaving of two and three threads taking and
//! releasing it, each incrementing the value it guards. Loom reports a data race if a
//! holder's access is not ordered after the previous holder's (a too-weak ordering), and
//! the final count proves that no increment was lost.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use lrpc_lock::TryLock;

fn increment_until_done(lock: &TryLock<u32>, times: u32) {
    let mut done = 0;
    while done < times {
        match lock.try_lock() {
            Some(mut g) => {
                *g += 1;
                done += 1;
            }
            None => thread::yield_now(),
        }
    }
}

#[test]
fn two_threads_never_hold_it_together() {
    loom::model(|| {
        let lock = Arc::new(TryLock::new(0u32));
        let other = {
            let lock = lock.clone();
            thread::spawn(move || increment_until_done(&lock, 1))
        };
        increment_until_done(&lock, 1);
        other.join().unwrap();
        assert_eq!(*lock.try_lock().expect("free after both"), 2);
    });
}

#[test]
fn three_threads_each_see_the_last_holders_writes() {
    loom::model(|| {
        let lock = Arc::new(TryLock::new(0u32));
        // Each thread tries once (no spinning, so the model stays finite) and, if it got the
        // lock, increments: the final value counts exactly the successful holders.
        let try_once = |lock: &TryLock<u32>| match lock.try_lock() {
            Some(mut g) => {
                *g += 1;
                1
            }
            None => 0,
        };
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let lock = lock.clone();
                thread::spawn(move || try_once(&lock))
            })
            .collect();
        let mut took = try_once(&lock);
        for t in threads {
            took += t.join().unwrap();
        }
        assert!(took >= 1, "someone always gets a free lock");
        assert_eq!(*lock.try_lock().expect("free after all"), took);
    });
}

#[test]
fn a_held_lock_refuses_and_a_released_one_is_taken_again() {
    loom::model(|| {
        let lock = Arc::new(TryLock::new(()));
        let g = lock.try_lock().expect("free");
        let other = {
            let lock = lock.clone();
            thread::spawn(move || lock.try_lock().is_some())
        };
        let took = other.join().unwrap();
        assert!(!took, "held by this thread");
        drop(g);
        assert!(lock.try_lock().is_some());
    });
}
