//! An `lrpc:http/plugin` that misbehaves on request: `/trap` traps, `/spin` loops forever,
//! `/busy/<ms>` works for about that many milliseconds before answering, `/fill/<mib>` fills
//! that many MiB of fresh memory (at most 1024) and then traps; any other path is answered
//! with `faulty ok <path>`.

include!(concat!(env!("OUT_DIR"), "/stubs.rs"));

/// Requests are decoded into small strings and dropped at every call: the SDK's size-class
/// allocator serves them in a few instructions each.
#[global_allocator]
static ALLOC: lrpc_sdk::alloc::Pools = lrpc_sdk::alloc::Pools::new();

use plugin::{Action, Head, Header, Response};

#[derive(Default)]
struct Faulty;

fn trap() -> ! {
    #[cfg(target_arch = "wasm32")]
    core::arch::wasm32::unreachable();
    #[cfg(not(target_arch = "wasm32"))]
    std::process::abort();
}

impl plugin::Server for Faulty {
    fn handle(&self, head: Head, _body: &[u8]) -> Action {
        let path = head.path.as_str();
        if path.ends_with("/trap") {
            trap();
        }
        if path.ends_with("/spin") {
            let flag = 0u8;
            // SAFETY: a volatile read of a local; it keeps the loop from being optimized away.
            while unsafe { core::ptr::read_volatile(&flag) } == 0 {}
        }
        if let Some(mib) = path
            .rsplit_once("/fill/")
            .and_then(|(_, n)| n.parse::<usize>().ok())
        {
            // Every page written, so that the host really holds it, then kept until the trap.
            let mut held: Vec<Vec<u8>> = Vec::new();
            for _ in 0..mib.min(1024) {
                held.push(vec![0xa5; 1 << 20]);
            }
            core::hint::black_box(&held);
            trap();
        }
        if let Some(ms) = path
            .rsplit_once("/busy/")
            .and_then(|(_, ms)| ms.parse::<u64>().ok())
        {
            // Roughly a millisecond of work per unit on current x86-64 hardware (measured:
            // about 4 million of these additions per millisecond).
            let mut x = 0u64;
            for i in 0..ms.min(10_000) * 4_000_000 {
                x = core::hint::black_box(x.wrapping_add(i));
            }
            core::hint::black_box(x);
        }
        Action::Respond(Response {
            status: 200,
            headers: vec![Header {
                name: "x-plugin".into(),
                value: "faulty".into(),
            }],
            body: format!("faulty ok {path}\n").into_bytes(),
        })
    }
}

plugin::export!(Faulty);
