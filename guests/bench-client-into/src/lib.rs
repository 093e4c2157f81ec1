//! Client of `lrpc:bench/bench` under the presentation `bench-client-into.toml`: it provides
//! the buffer big-in-out's result is copied into.

include!(concat!(env!("OUT_DIR"), "/stubs.rs"));

use std::cell::RefCell;

thread_local! {
    static CLIENT: RefCell<Option<bench::Client>> = const { RefCell::new(None) };
}

/// Binds; returns the status.
#[unsafe(no_mangle)]
pub extern "C" fn bind() -> i32 {
    match bench::Client::bind() {
        Ok(c) => {
            CLIENT.with(|slot| *slot.borrow_mut() = Some(c));
            0
        }
        Err(e) => e.code(),
    }
}

/// `iters` big-in-out calls of `len` pattern bytes into one reused buffer; the first reply is
/// checked. Returns 0, `-(status)`, or 1000 for a wrong reply.
#[unsafe(no_mangle)]
pub extern "C" fn big_in_out_loop(len: i32, iters: i32) -> i32 {
    let data: Vec<u8> = (0..len.max(0) as usize)
        .map(|i| (i * 7 + 3) as u8)
        .collect();
    let want: Vec<u8> = data.iter().map(|b| b ^ 0x5a).collect();
    let mut out = vec![0u8; data.len()];
    CLIENT.with(|c| {
        let c = c.borrow();
        let Some(c) = c.as_ref() else {
            return -(lrpc_sdk::Status::StaleBinding as i32);
        };
        for i in 0..iters.max(1) {
            match c.big_in_out(&data, &mut out) {
                Ok(n) if i > 0 || (n == want.len() && out == want) => {}
                Ok(_) => return 1000,
                Err(e) => return -e.code(),
            }
        }
        0
    })
}

/// A byte pattern marshaled straight onto the A-stack, never held in memory (`special`).
struct Pattern(usize);

impl lrpc_sdk::rt::Marshal for Pattern {
    fn size(&self) -> usize {
        4 + self.0
    }

    fn encode(&self, w: &mut lrpc_sdk::rt::Writer) {
        w.len_prefix(self.0);
        for i in 0..self.0 {
            w.u8((i * 7 + 3) as u8);
        }
    }
}

/// `iters` big-in calls whose argument this client marshals itself; returns the answer.
#[unsafe(no_mangle)]
pub extern "C" fn big_in_special(len: i32, iters: i32) -> i64 {
    CLIENT.with(|c| {
        let c = c.borrow();
        let Some(c) = c.as_ref() else {
            return -(lrpc_sdk::Status::StaleBinding as i64);
        };
        let mut answer = 0;
        for _ in 0..iters.max(1) {
            match c.big_in(&Pattern(len.max(0) as usize)) {
                Ok(a) => answer = i64::from(a),
                Err(e) => return -i64::from(e.code()),
            }
        }
        answer
    })
}
