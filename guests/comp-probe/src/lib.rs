//! `lrpc:comp/probe` as a component (wit-bindgen, `wasm32-wasip2`): reaches for files,
//! environment variables, arguments and sockets through WASI, so that tests can show a
//! domain reaches exactly what it was granted; and fails on demand (trap, endless loop,
//! memory growth).

/// What wit-bindgen generates from the WIT: private to this guest, which exports only
/// what the world names.
mod bindings {
    wit_bindgen::generate!({
        generate_all,
        path: ["../../wit/kv.wit", "../comp-wit/probe.wit", "../comp-wit/worlds/worlds.wit"],
        world: "lrpc:comp-worlds/probe",
    });
}
use bindings::*;

use exports::lrpc::comp::counters::{self, GuestCounter};
use exports::lrpc::comp::probe::Guest;
use std::cell::Cell;

thread_local! {
    static CALLS: Cell<u64> = const { Cell::new(0) };
    static LIVE: Cell<u32> = const { Cell::new(0) };
}

struct Probe;

impl Guest for Probe {
    fn read_file(path: String) -> Result<String, String> {
        std::fs::read_to_string(&path).map_err(|e| e.to_string())
    }

    fn write_file(path: String, data: String) -> Result<(), String> {
        std::fs::write(&path, data).map_err(|e| e.to_string())
    }

    fn env(name: String) -> Option<String> {
        std::env::var(name).ok()
    }

    fn args() -> Vec<String> {
        std::env::args().collect()
    }

    fn connect(addr: String) -> Result<(), String> {
        let addr: std::net::SocketAddr = addr.parse().map_err(|e| format!("{e}"))?;
        std::net::TcpStream::connect(addr)
            .map(drop)
            .map_err(|e| e.to_string())
    }

    fn grow(mib: u32) -> u32 {
        let mut blocks = Vec::new();
        for _ in 0..mib {
            let mut b = vec![0u8; 1 << 20];
            for i in (0..b.len()).step_by(4096) {
                b[i] = 1;
            }
            blocks.push(core::hint::black_box(b));
        }
        blocks.len() as u32
    }

    fn trap() -> u32 {
        core::arch::wasm32::unreachable()
    }

    #[allow(clippy::empty_loop, reason = "the probe's endless loop is the point")]
    fn spin() -> u32 {
        loop {}
    }

    fn echo(s: String) -> String {
        s
    }

    fn print(s: String) {
        println!("{s}");
    }

    fn counter() -> u64 {
        CALLS.with(|c| {
            c.set(c.get() + 1);
            c.get()
        })
    }
}

/// A counter of `lrpc:comp/counters`; the live count follows its creation and drop.
struct Count {
    value: Cell<u64>,
}

impl Drop for Count {
    fn drop(&mut self) {
        LIVE.with(|l| l.set(l.get().saturating_sub(1)));
    }
}

impl GuestCounter for Count {
    fn new(start: u64) -> Self {
        LIVE.with(|l| l.set(l.get().saturating_add(1)));
        Count {
            value: Cell::new(start),
        }
    }

    fn add(&self, n: u64) -> u64 {
        self.value.set(self.value.get().wrapping_add(n));
        self.value.get()
    }

    fn get(&self) -> u64 {
        self.value.get()
    }
}

impl counters::Guest for Probe {
    type Counter = Count;

    fn make(start: u64) -> counters::Counter {
        counters::Counter::new(Count::new(start))
    }

    fn total(c: counters::CounterBorrow<'_>) -> u64 {
        c.get::<Count>().get()
    }

    fn live() -> u32 {
        LIVE.with(|l| l.get())
    }
}

export!(Probe with_types_in bindings);
