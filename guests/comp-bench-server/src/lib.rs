//! `lrpc:bench/bench` as a component (wit-bindgen, `wasm32-wasip2`), with the same answers
//! as the core `bench-server`.

/// What wit-bindgen generates from the WIT: private to this guest, which exports only
/// what the world names.
mod bindings {
    wit_bindgen::generate!({
        generate_all,
        path: ["../../wit/kv.wit", "../../wit/bench.wit", "../comp-relay/wit/relay.wit"],
        world: "lrpc:relay/bench-server",
    });
}
use bindings::*;

use exports::lrpc::bench::bench::Guest;

struct Bench;

impl Guest for Bench {
    fn null() {}

    fn add(a: u32, b: u32) -> u32 {
        a.wrapping_add(b)
    }

    fn big_in(data: Vec<u8>) -> u32 {
        let ends = match data[..] {
            [] => 0,
            [first, .., last] => first ^ last,
            [only] => only,
        };
        ((data.len() as u32) << 8) | u32::from(ends)
    }

    fn big_in_out(data: Vec<u8>) -> Vec<u8> {
        data.iter().map(|b| b ^ 0x5a).collect()
    }
}

export!(Bench with_types_in bindings);
