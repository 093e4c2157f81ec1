//! Client of `lrpc:bench/bench`: call loops for the demo, the tests and the benchmarks.
//! Exports return 0 (or a result) on success and `-(status)` when a call fails.

include!(concat!(env!("OUT_DIR"), "/stubs.rs"));

use lrpc_sdk::CallError;
use std::cell::RefCell;

thread_local! {
    static CLIENT: RefCell<Option<bench::Client>> = const { RefCell::new(None) };
}

fn with<R>(f: impl FnOnce(&bench::Client) -> Result<R, CallError>) -> Result<R, CallError> {
    CLIENT.with(|c| match c.borrow().as_ref() {
        Some(client) => f(client),
        None => Err(CallError::StaleBinding),
    })
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + 3) as u8).collect()
}

fn neg(e: CallError) -> i64 {
    -i64::from(e.code())
}

/// Binds once; later calls use this binding.
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

/// Unbinds the binding made by `bind`.
#[unsafe(no_mangle)]
pub extern "C" fn unbind() -> i32 {
    match CLIENT.with(|slot| slot.borrow_mut().take()) {
        Some(c) => c.unbind().err().map_or(0, |e| e.code()),
        None => lrpc_sdk::Status::StaleBinding as i32,
    }
}

/// `iters` null calls.
#[unsafe(no_mangle)]
pub extern "C" fn null(iters: i32) -> i32 {
    with(|c| {
        for _ in 0..iters {
            c.null()?;
        }
        Ok(())
    })
    .err()
    .map_or(0, |e| e.code())
}

/// One add call.
#[unsafe(no_mangle)]
pub extern "C" fn add(a: i32, b: i32) -> i64 {
    with(|c| c.add(a as u32, b as u32)).map_or_else(neg, i64::from)
}

/// `iters` add calls, each checked; returns 0 or `-(status)`, or 1000 on a wrong sum.
#[unsafe(no_mangle)]
pub extern "C" fn add_loop(iters: i32) -> i64 {
    with(|c| {
        for i in 0..iters as u32 {
            if c.add(i, 7)? != i.wrapping_add(7) {
                return Ok(1000);
            }
        }
        Ok(0)
    })
    .unwrap_or_else(neg)
}

/// `iters` big-in calls with `len` pattern bytes; returns the server's answer.
#[unsafe(no_mangle)]
pub extern "C" fn big_in(len: i32, iters: i32) -> i64 {
    let data = pattern(len.max(0) as usize);
    with(|c| {
        let mut sum = 0;
        for _ in 0..iters.max(1) {
            sum = c.big_in(&data)?;
        }
        Ok(sum)
    })
    .map_or_else(neg, i64::from)
}

/// `iters` big-in-out calls with `len` pattern bytes, checking every reply.
#[unsafe(no_mangle)]
pub extern "C" fn big_in_out(len: i32, iters: i32) -> i32 {
    let data = pattern(len.max(0) as usize);
    let want: Vec<u8> = data.iter().map(|b| b ^ 0x5a).collect();
    with(|c| {
        for _ in 0..iters.max(1) {
            if c.big_in_out(&data)? != want {
                return Ok(1000);
            }
        }
        Ok(0)
    })
    .unwrap_or_else(|e| -e.code())
}

/// `iters` big-in-out calls with `len` pattern bytes, checking the first reply only (the
/// benchmark loop: the other replies are dropped unread).
#[unsafe(no_mangle)]
pub extern "C" fn big_in_out_loop(len: i32, iters: i32) -> i32 {
    let data = pattern(len.max(0) as usize);
    let want: Vec<u8> = data.iter().map(|b| b ^ 0x5a).collect();
    with(|c| {
        if c.big_in_out(&data)? != want {
            return Ok(1000);
        }
        for _ in 1..iters.max(1) {
            core::hint::black_box(c.big_in_out(&data)?);
        }
        Ok(0)
    })
    .unwrap_or_else(|e| -e.code())
}

#[inline(never)]
fn local_null() {
    core::hint::black_box(());
}

/// `iters` calls of a local function: the intra-instance floor.
#[unsafe(no_mangle)]
pub extern "C" fn intra_null(iters: i32) -> i32 {
    for _ in 0..iters {
        core::hint::black_box(local_null)();
    }
    0
}

/// `n` times: bind a fresh client and unbind it.
#[unsafe(no_mangle)]
pub extern "C" fn bind_cycles(n: i32) -> i32 {
    for _ in 0..n {
        let c = match bench::Client::bind() {
            Ok(c) => c,
            Err(e) => return e.code(),
        };
        if let Err(e) = c.unbind() {
            return e.code();
        }
    }
    0
}

/// One big-in call with `len` bytes all equal to `byte`.
#[unsafe(no_mangle)]
pub extern "C" fn fill(len: i32, byte: i32) -> i32 {
    let data = vec![byte as u8; len.max(0) as usize];
    with(|c| c.big_in(&data)).err().map_or(0, |e| e.code())
}
