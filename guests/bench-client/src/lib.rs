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

thread_local! {
    static ASYNC: RefCell<Option<std::rc::Rc<bench::AsyncClient>>> = const { RefCell::new(None) };
}

/// Binds asynchronously (a URPC channel with `slots` slots, 0: the default); later
/// `async_*` calls use this binding.
#[unsafe(no_mangle)]
pub extern "C" fn bind_async(slots: i32) -> i32 {
    match bench::AsyncClient::bind_with(bench::INTERFACE, slots.max(0) as u32) {
        Ok(c) => {
            ASYNC.with(|slot| *slot.borrow_mut() = Some(std::rc::Rc::new(c)));
            0
        }
        Err(e) => e.code(),
    }
}

/// Unbinds the binding made by `bind_async`.
#[unsafe(no_mangle)]
pub extern "C" fn unbind_async() -> i32 {
    match ASYNC.with(|slot| slot.borrow_mut().take()) {
        Some(c) => match std::rc::Rc::try_unwrap(c) {
            Ok(c) => c.unbind().err().map_or(0, |e| e.code()),
            Err(_) => lrpc_sdk::Status::NoCall as i32,
        },
        None => lrpc_sdk::Status::StaleBinding as i32,
    }
}

/// Most calls that were in flight at once on the asynchronous binding.
#[unsafe(no_mangle)]
pub extern "C" fn async_max_in_flight() -> i32 {
    ASYNC.with(|slot| {
        slot.borrow()
            .as_ref()
            .map_or(-1, |c| c.channel().max_in_flight() as i32)
    })
}

/// One user-level thread's calls: `iters` rounds of null, add, big-in and big-in-out (with
/// `len` bytes), each answer compared with the same call made synchronously when `check`
/// (then `bind` must have been called too). Yields between calls so that the threads'
/// calls interleave. The sum of the add results, or an error (`1000` on a mismatch).
async fn round(
    c: std::rc::Rc<bench::AsyncClient>,
    t: u32,
    iters: u32,
    len: usize,
    check: bool,
) -> Result<u64, CallError> {
    let data: Vec<u8> = pattern(len)
        .iter()
        .map(|b| b.wrapping_add(t as u8))
        .collect();
    let mut sum = 0u64;
    for i in 0..iters {
        // Two calls in flight from this thread at once, awaited in reverse order.
        let null = c.null_async();
        let add = c.add_async(i, t);
        let x = add.await?;
        null.await?;
        exec::yield_now().await;
        let big = c.big_in_async(&data).await?;
        exec::yield_now().await;
        let out = c.big_in_out_async(&data).await?;
        if check {
            let same = with(|s| {
                s.null()?;
                Ok(s.add(i, t)? == x && s.big_in(&data)? == big && s.big_in_out(&data)? == out)
            })?;
            if !same {
                return Err(CallError::Unknown(1000));
            }
        }
        sum += u64::from(x);
    }
    Ok(sum)
}

use lrpc_sdk::exec;

/// `threads` user-level threads each making `iters` rounds of asynchronous calls (see
/// `round`) on the binding made by `bind_async`, interleaved; with `check` every answer is
/// compared with the synchronous path. Returns the sum of the add results, or `-(status)`
/// (`-1000`: a result differed from the synchronous one; `-2000`: the executor stalled).
#[unsafe(no_mangle)]
pub extern "C" fn async_rounds(threads: i32, iters: i32, len: i32, check: i32) -> i64 {
    let Some(c) = ASYNC.with(|slot| slot.borrow().clone()) else {
        return -i64::from(lrpc_sdk::Status::StaleBinding as i32);
    };
    let (iters, len) = (iters.max(0) as u32, len.max(0) as usize);
    let run = exec::block_on(async move {
        let handles: Vec<_> = (0..threads.max(0) as u32)
            .map(|t| exec::spawn(round(c.clone(), t, iters, len, check != 0)))
            .collect();
        let mut total = 0u64;
        let mut first_err = None;
        for h in handles {
            match h.await {
                Ok(s) => total += s,
                Err(e) => first_err = first_err.or(Some(e)),
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(total),
        }
    });
    match run {
        Ok(Ok(total)) => total as i64,
        Ok(Err(e)) => neg(e),
        Err(exec::Stalled) => -2000,
    }
}

/// `iters` asynchronous null calls from `threads` user-level threads (the benchmark loop).
#[unsafe(no_mangle)]
pub extern "C" fn async_null(threads: i32, iters: i32) -> i64 {
    let Some(c) = ASYNC.with(|slot| slot.borrow().clone()) else {
        return -i64::from(lrpc_sdk::Status::StaleBinding as i32);
    };
    let run = exec::block_on(async move {
        let handles: Vec<_> = (0..threads.max(1))
            .map(|_| {
                let c = c.clone();
                exec::spawn(async move {
                    for _ in 0..iters.max(0) {
                        c.null_async().await?;
                    }
                    Ok::<(), CallError>(())
                })
            })
            .collect();
        for h in handles {
            h.await?;
        }
        Ok::<(), CallError>(())
    });
    match run {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => neg(e),
        Err(exec::Stalled) => -2000,
    }
}
