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

thread_local! {
    /// The members of this client's MultiRPCs, bound by `multi_bind`.
    static MEMBERS: RefCell<Vec<bench::Client>> = const { RefCell::new(Vec::new()) };
    /// The last MultiRPC's events, in arrival order: `(member, result or error)`.
    static MULTI_LOG: RefCell<Vec<(usize, Result<u32, CallError>)>> = const { RefCell::new(Vec::new()) };
}

/// A buffer the embedder writes a name into before `multi_bind`.
static mut NAME: [u8; 256] = [0; 256];

/// The address of the name buffer (256 bytes).
#[unsafe(no_mangle)]
pub extern "C" fn name_buf() -> i32 {
    core::ptr::addr_of_mut!(NAME) as i32
}

/// Binds `n` more MultiRPC members to the export named by the first `len` bytes of the name
/// buffer; the number of members, or `-(status)`.
#[unsafe(no_mangle)]
pub extern "C" fn multi_bind(len: i32, n: i32) -> i32 {
    // SAFETY: the buffer is only read here, on this domain's one thread.
    let buf = unsafe { &*core::ptr::addr_of!(NAME) };
    let Some(Ok(name)) = buf.get(..len.max(0) as usize).map(std::str::from_utf8) else {
        return -(lrpc_sdk::Status::UnknownInterface as i32);
    };
    for _ in 0..n.max(0) {
        match bench::Client::bind_named(name) {
            Ok(c) => MEMBERS.with(|m| m.borrow_mut().push(c)),
            Err(e) => return -e.code(),
        }
    }
    MEMBERS.with(|m| m.borrow().len() as i32)
}

/// One MultiRPC of `add(a, b)` to every member, ending after `stop_after` events (0: never)
/// or after `timeout_ms`. Returns the number of events (bits 0–15), of replies among them
/// (16–31), whether the handler stopped the call (bit 32) and whether it timed out (bit 33);
/// or `-(status)` when the MultiRPC could not be made. The events are read by `multi_event`.
#[unsafe(no_mangle)]
pub extern "C" fn multi_add(a: i32, b: i32, stop_after: i32, timeout_ms: i32) -> i64 {
    MULTI_LOG.with(|l| l.borrow_mut().clear());
    let r = MEMBERS.with(|m| {
        let m = m.borrow();
        let members: Vec<&bench::Client> = m.iter().collect();
        bench::Client::multi_add(
            &members,
            a as u32,
            b as u32,
            timeout_ms.max(0) as u32,
            |i, r| {
                let seen = MULTI_LOG.with(|l| {
                    let mut l = l.borrow_mut();
                    l.push((i, r));
                    l.len()
                });
                if stop_after > 0 && seen >= stop_after as usize {
                    core::ops::ControlFlow::Break(())
                } else {
                    core::ops::ControlFlow::Continue(())
                }
            },
        )
    });
    match r {
        Ok(o) => {
            let (events, ok) = MULTI_LOG.with(|l| {
                let l = l.borrow();
                (l.len(), l.iter().filter(|(_, r)| r.is_ok()).count())
            });
            if o.answered.iter().filter(|&&x| x).count() != events {
                return -2001;
            }
            events as i64
                | (ok as i64) << 16
                | i64::from(o.stopped) << 32
                | i64::from(o.timed_out) << 33
        }
        Err(e) => neg(e),
    }
}

/// One MultiRPC of `big-in` with `len` pattern bytes to every member: the number of replies
/// that saw `len` bytes, or `-(status)` when the MultiRPC could not be made.
#[unsafe(no_mangle)]
pub extern "C" fn multi_big_in(len: i32, timeout_ms: i32) -> i64 {
    let data = pattern(len.max(0) as usize);
    let mut right = 0;
    let r = MEMBERS.with(|m| {
        let m = m.borrow();
        let members: Vec<&bench::Client> = m.iter().collect();
        bench::Client::multi_big_in(&members, &data, timeout_ms.max(0) as u32, |_, r| {
            if r.is_ok_and(|v| v >> 8 == data.len() as u32) {
                right += 1;
            }
            core::ops::ControlFlow::Continue(())
        })
    });
    r.map_or_else(neg, |_| right)
}

/// Event `k` of the last MultiRPC: the member's index (bits 32–62) and its result (bits
/// 0–31), or the member's index and its error's status code with bit 31 set; -1 if none.
#[unsafe(no_mangle)]
pub extern "C" fn multi_event(k: i32) -> i64 {
    MULTI_LOG.with(|l| match l.borrow().get(k.max(0) as usize) {
        Some((i, Ok(v))) => (*i as i64) << 32 | i64::from(*v),
        Some((i, Err(e))) => {
            (*i as i64) << 32 | 0x8000_0000 | i64::from(e.code() as u32 & 0x7fff_ffff)
        }
        None => -1,
    })
}
