//! The client of `lrpc:bench/bench` as a wasmtime component: the same call loops as
//! `bench-client`, over the component model's canonical ABI.

/// What wit-bindgen generates from the WIT: private to this guest, which exports only
/// what the world names.
mod bindings {
    wit_bindgen::generate!({
        generate_all,
        path: ["../../wit/bench.wit", "../component-peers/wit/peers.wit"],
        world: "lrpc:peers/client",
    });
}
use bindings::*;

use lrpc::bench::bench;

struct Runner;

fn pattern(len: i32) -> Vec<u8> {
    (0..len.max(0) as usize)
        .map(|i| (i * 7 + 3) as u8)
        .collect()
}

#[inline(never)]
fn local_null() {
    core::hint::black_box(());
}

impl exports::lrpc::peers::runner::Guest for Runner {
    fn null_loop(n: i32) -> i32 {
        for _ in 0..n {
            bench::null();
        }
        0
    }

    fn add_loop(n: i32) -> i32 {
        for i in 0..n.max(0) as u32 {
            if bench::add(i, 7) != i.wrapping_add(7) {
                return 1000;
            }
        }
        0
    }

    fn big_in_loop(size: i32, n: i32) -> i64 {
        let data = pattern(size);
        let mut last = 0;
        for _ in 0..n.max(1) {
            last = bench::big_in(&data);
        }
        i64::from(last)
    }

    fn big_in_out_loop(size: i32, n: i32) -> i32 {
        let data = pattern(size);
        let want: Vec<u8> = data.iter().map(|b| b ^ 0x5a).collect();
        if bench::big_in_out(&data) != want {
            return 1000;
        }
        for _ in 1..n.max(1) {
            core::hint::black_box(bench::big_in_out(&data));
        }
        0
    }

    fn intra_loop(n: i32) -> i32 {
        for _ in 0..n {
            core::hint::black_box(local_null)();
        }
        0
    }
}

export!(Runner with_types_in bindings);
