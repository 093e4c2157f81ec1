//! `lrpc:bench/bench` served by a wasmtime component: the peer of `bench-server` for the
//! component-model benchmarks (same results for the same arguments).

/// What wit-bindgen generates from the WIT: private to this guest, which exports only
/// what the world names.
mod bindings {
    wit_bindgen::generate!({
        generate_all,
        path: ["../../wit/bench.wit", "../component-peers/wit/peers.wit"],
        world: "lrpc:peers/server",
    });
}
use bindings::*;

struct Bench;

impl exports::lrpc::bench::bench::Guest for Bench {
    fn null() {}

    fn add(a: u32, b: u32) -> u32 {
        a.wrapping_add(b)
    }

    fn big_in(data: Vec<u8>) -> u32 {
        let ends = match data.as_slice() {
            [] => 0,
            [first, .., last] => first ^ last,
            [only] => *only,
        };
        ((data.len() as u32) << 8) | u32::from(ends)
    }

    fn big_in_out(data: Vec<u8>) -> Vec<u8> {
        data.iter().map(|b| b ^ 0x5a).collect()
    }
}

export!(Bench with_types_in bindings);
