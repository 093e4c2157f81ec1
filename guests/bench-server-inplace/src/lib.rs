//! Serves `lrpc:bench/bench` under the presentation `bench-server-inplace.toml`: byte arrays
//! are read in place and big-in-out's result is written straight onto the A-stack.

include!(concat!(env!("OUT_DIR"), "/stubs.rs"));

#[derive(Default)]
struct Bench;

impl bench::Server for Bench {
    fn null(&self) {}

    fn add(&self, a: u32, b: u32) -> u32 {
        a.wrapping_add(b)
    }

    fn big_in(&self, data: lrpc_sdk::rt::Raw<'_>) -> u32 {
        // `special`: this handler unmarshals its argument itself.
        let Ok(data) = data.reader().list_u8() else {
            return u32::MAX;
        };
        let ends = match data {
            [] => 0,
            [first, .., last] => first ^ last,
            [only] => *only,
        };
        ((data.len() as u32) << 8) | u32::from(ends)
    }

    fn big_in_out(&self, data: &[u8], out: &mut lrpc_sdk::rt::OutBuf<'_>) {
        if let Some(buf) = out.alloc(data.len()) {
            for (o, b) in buf.iter_mut().zip(data) {
                *o = b ^ 0x5a;
            }
        }
    }
}

bench::export!(Bench);
