//! Serves `lrpc:test/faulty`: a server that can be told to misbehave.

include!(concat!(env!("OUT_DIR"), "/stubs.rs"));

use core::sync::atomic::{AtomicU32, Ordering};

/// How many `echo` calls this server has run.
static ECHOES: AtomicU32 = AtomicU32::new(0);

/// The number of `echo` calls served so far (for tests that check a call did not run).
#[unsafe(no_mangle)]
pub extern "C" fn echoes() -> i32 {
    ECHOES.load(Ordering::Relaxed) as i32
}

#[derive(Default)]
struct Faulty;

impl faulty::Server for Faulty {
    fn echo(&self, x: u32) -> u32 {
        ECHOES.fetch_add(1, Ordering::Relaxed);
        x.wrapping_add(1)
    }

    fn crash(&self) {
        #[cfg(target_arch = "wasm32")]
        core::arch::wasm32::unreachable();
        #[cfg(not(target_arch = "wasm32"))]
        std::process::abort();
    }

    fn spin(&self) {
        let flag = 0u8;
        // SAFETY: a volatile read of a local; it keeps the loop from being optimized away.
        while unsafe { core::ptr::read_volatile(&flag) } == 0 {}
    }

    fn busy(&self, millis: u32) -> u32 {
        // Roughly a millisecond of work per unit on current hardware.
        let mut x = 0u64;
        for i in 0..u64::from(millis) * 200_000 {
            x = core::hint::black_box(x.wrapping_add(i));
        }
        core::hint::black_box(x);
        millis
    }
}

faulty::export!(Faulty);
