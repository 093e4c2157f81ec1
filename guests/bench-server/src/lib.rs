//! Serves `lrpc:bench/bench`, the four procedures of LRPC's Table IV.

include!(concat!(env!("OUT_DIR"), "/stubs.rs"));

#[derive(Default)]
struct Bench;

impl bench::Server for Bench {
    fn null(&self) {}

    fn add(&self, a: u32, b: u32) -> u32 {
        a.wrapping_add(b)
    }

    fn big_in(&self, data: &[u8]) -> u32 {
        // Like LRPC's BigIn, the server does no work proportional to the argument: it
        // reports the length and the first and last bytes it received.
        let ends = match data {
            [] => 0,
            [first, .., last] => first ^ last,
            [only] => *only,
        };
        ((data.len() as u32) << 8) | u32::from(ends)
    }

    fn big_in_out(&self, data: &[u8]) -> Vec<u8> {
        data.iter().map(|b| b ^ 0x5a).collect()
    }
}

bench::export!(Bench);

/// An empty export: the floor for a host→wasm call.
#[unsafe(no_mangle)]
pub extern "C" fn floor_null() {}
