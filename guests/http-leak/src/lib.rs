//! An `lrpc:http/plugin` that tries to carry data from one request to the next, to show
//! what per-request isolation takes away. Each request's `x-tenant` value is kept in three
//! places: a static array (the module's data), a heap allocation a static points to, and a
//! counter of requests served. The answer (`200`, header `x-seen`) says what it found there
//! from before: `static=<value>;heap=<value>;count=<n>`. A path ending in `/trap` keeps the
//! value, then traps.

include!(concat!(env!("OUT_DIR"), "/stubs.rs"));

#[global_allocator]
static ALLOC: lrpc_sdk::alloc::Pools = lrpc_sdk::alloc::Pools::new();

use plugin::{Action, Head, Header, Response};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

/// The last tenant, in the module's own data: its length, then its bytes.
static LAST: Mutex<(usize, [u8; 64])> = Mutex::new((0, [0; 64]));
/// The last tenant, on the heap.
static LAST_HEAP: Mutex<Option<String>> = Mutex::new(None);
/// Requests this instance has seen.
static COUNT: AtomicU32 = AtomicU32::new(0);

#[derive(Default)]
struct Leak;

fn trap() -> ! {
    #[cfg(target_arch = "wasm32")]
    core::arch::wasm32::unreachable();
    #[cfg(not(target_arch = "wasm32"))]
    std::process::abort();
}

impl plugin::Server for Leak {
    fn handle(&self, head: Head, _body: &[u8]) -> Action {
        let tenant = head
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case("x-tenant"))
            .map(|h| h.value.clone())
            .unwrap_or_default();
        let count = COUNT.fetch_add(1, Ordering::Relaxed);
        let from_static = {
            let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
            let len = last.0.min(64);
            let seen = String::from_utf8_lossy(&last.1[..len]).into_owned();
            let n = tenant.len().min(64);
            last.1[..n].copy_from_slice(&tenant.as_bytes()[..n]);
            last.0 = n;
            seen
        };
        let from_heap = LAST_HEAP
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .replace(tenant)
            .unwrap_or_default();
        if head.path.ends_with("/trap") {
            trap();
        }
        Action::Respond(Response {
            status: 200,
            headers: vec![Header {
                name: "x-seen".into(),
                value: format!("static={from_static};heap={from_heap};count={count}"),
            }],
            body: b"leak\n".to_vec(),
        })
    }
}

plugin::export!(Leak);
