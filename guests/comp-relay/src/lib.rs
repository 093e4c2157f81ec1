//! `lrpc:relay/forward` as a component (wit-bindgen, `wasm32-wasip2`): a client domain that
//! forwards every call to its imports `lrpc:kv/store` and `lrpc:bench/bench`, which the
//! kernel binds to a component or a core (A-stack) domain alike.

/// What wit-bindgen generates from the WIT: private to this guest, which exports only
/// what the world names.
mod bindings {
    wit_bindgen::generate!({
        generate_all,
        path: ["../../wit/kv.wit", "../../wit/bench.wit", "wit/relay.wit"],
        world: "lrpc:relay/client",
    });
}
use bindings::*;

use exports::lrpc::relay::forward::Guest;
use lrpc::bench::bench;
use lrpc::kv::store::{self, Access, Entry, Error, Kind};

struct Relay;

impl Guest for Relay {
    fn kv_put(key: String, value: Vec<u8>, kind: Kind) -> Result<u64, Error> {
        store::put(&key, &value, kind)
    }

    fn kv_get(key: String) -> Result<Entry, Error> {
        store::get(&key)
    }

    fn kv_delete(key: String) -> bool {
        store::delete(&key)
    }

    fn kv_keys(prefix: Option<String>) -> Vec<String> {
        store::keys(prefix.as_deref())
    }

    fn kv_stats() -> (u32, u64) {
        store::stats()
    }

    fn kv_rights() -> Access {
        store::rights()
    }

    fn kv_measure(c: char, delta: i64, scale: f64) -> (char, i64, f64) {
        store::measure(c, delta, scale)
    }

    fn null() {
        bench::null()
    }

    fn add(a: u32, b: u32) -> u32 {
        bench::add(a, b)
    }

    fn big_in(data: Vec<u8>) -> u32 {
        bench::big_in(&data)
    }

    fn big_in_out(data: Vec<u8>) -> Vec<u8> {
        bench::big_in_out(&data)
    }
}

export!(Relay with_types_in bindings);
