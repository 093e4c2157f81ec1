//! Serves `lrpc:test/faulty`: a server that can be told to misbehave.

include!(concat!(env!("OUT_DIR"), "/stubs.rs"));

#[derive(Default)]
struct Faulty;

impl faulty::Server for Faulty {
    fn echo(&self, x: u32) -> u32 {
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
