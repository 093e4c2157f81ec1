//! Client of `lrpc:test/faulty`. Exports return results or `-(status)`.

include!(concat!(env!("OUT_DIR"), "/stubs.rs"));

use lrpc_sdk::CallError;
use std::cell::RefCell;

thread_local! {
    static CLIENT: RefCell<Option<faulty::Client>> = const { RefCell::new(None) };
}

fn with<R>(f: impl FnOnce(&faulty::Client) -> Result<R, CallError>) -> Result<R, CallError> {
    CLIENT.with(|c| match c.borrow().as_ref() {
        Some(client) => f(client),
        None => Err(CallError::StaleBinding),
    })
}

/// Binds (again); returns the status.
#[unsafe(no_mangle)]
pub extern "C" fn bind() -> i32 {
    match faulty::Client::bind() {
        Ok(c) => {
            CLIENT.with(|slot| *slot.borrow_mut() = Some(c));
            0
        }
        Err(e) => e.code(),
    }
}

/// Unbinds the binding made by `bind`; returns the status.
#[unsafe(no_mangle)]
pub extern "C" fn unbind() -> i32 {
    match CLIENT.with(|slot| slot.borrow_mut().take()) {
        Some(c) => c.unbind().err().map_or(0, |e| e.code()),
        None => lrpc_sdk::Status::StaleBinding as i32,
    }
}

/// echo(x): `x + 1` or `-(status)`.
#[unsafe(no_mangle)]
pub extern "C" fn echo(x: i32) -> i64 {
    with(|c| c.echo(x as u32)).map_or_else(|e| -i64::from(e.code()), i64::from)
}

/// crash(): the status.
#[unsafe(no_mangle)]
pub extern "C" fn crash() -> i32 {
    with(|c| c.crash()).err().map_or(0, |e| e.code())
}

/// spin(): the status.
#[unsafe(no_mangle)]
pub extern "C" fn spin() -> i32 {
    with(|c| c.spin()).err().map_or(0, |e| e.code())
}

/// busy(ms): `ms` or `-(status)`.
#[unsafe(no_mangle)]
pub extern "C" fn busy(ms: i32) -> i64 {
    with(|c| c.busy(ms as u32)).map_or_else(|e| -i64::from(e.code()), i64::from)
}

use lrpc_sdk::exec;
use std::rc::Rc;

thread_local! {
    static ASYNC: RefCell<Option<Rc<faulty::AsyncClient>>> = const { RefCell::new(None) };
}

/// Binds asynchronously (a URPC channel); the `async_*` exports use this binding.
#[unsafe(no_mangle)]
pub extern "C" fn bind_async() -> i32 {
    match faulty::AsyncClient::bind() {
        Ok(c) => {
            ASYNC.with(|slot| *slot.borrow_mut() = Some(Rc::new(c)));
            0
        }
        Err(e) => e.code(),
    }
}

/// Unbinds the binding made by `bind_async`.
#[unsafe(no_mangle)]
pub extern "C" fn unbind_async() -> i32 {
    match ASYNC
        .with(|slot| slot.borrow_mut().take())
        .map(Rc::try_unwrap)
    {
        Some(Ok(c)) => c.unbind().err().map_or(0, |e| e.code()),
        Some(Err(_)) => lrpc_sdk::Status::NoCall as i32,
        None => lrpc_sdk::Status::StaleBinding as i32,
    }
}

/// One asynchronous echo, awaited on the executor: `x + 1` or `-(status)`.
#[unsafe(no_mangle)]
pub extern "C" fn async_echo(x: i32) -> i64 {
    let Some(c) = ASYNC.with(|slot| slot.borrow().clone()) else {
        return -i64::from(lrpc_sdk::Status::StaleBinding as i32);
    };
    match exec::block_on(c.echo_async(x as u32)) {
        Ok(Ok(v)) => i64::from(v),
        Ok(Err(e)) => -i64::from(e.code()),
        Err(exec::Stalled) => -2000,
    }
}

/// A server trap with calls in flight: user-level thread 0 sends `busy(millis)` and then
/// `crash`; threads 1..`threads` each send an echo while those are in flight. Returns
/// `ok * 1_000_000 + call_failed * 1000 + other`: the calls that succeeded, that failed with
/// a call-failed status, and that failed otherwise (a wrong echo counts as other).
#[unsafe(no_mangle)]
pub extern "C" fn async_crash(threads: i32, millis: i32) -> i64 {
    let Some(c) = ASYNC.with(|slot| slot.borrow().clone()) else {
        return -i64::from(lrpc_sdk::Status::StaleBinding as i32);
    };
    let tally = Rc::new(core::cell::Cell::new((0i64, 0i64, 0i64)));
    let note = {
        let tally = tally.clone();
        move |r: Result<bool, CallError>| {
            let (ok, failed, other) = tally.get();
            tally.set(match r {
                Ok(true) => (ok + 1, failed, other),
                Err(e) if e.is_call_failed() => (ok, failed + 1, other),
                _ => (ok, failed, other + 1),
            });
        }
    };
    let run = exec::block_on(async move {
        let mut handles = Vec::new();
        for t in 0..threads.max(1) as u32 {
            let c = c.clone();
            let note = note.clone();
            handles.push(exec::spawn(async move {
                if t == 0 {
                    let busy = c.busy_async(millis.max(0) as u32);
                    let crash = c.crash_async();
                    note(busy.await.map(|v| v == millis.max(0) as u32));
                    note(crash.await.map(|()| true));
                } else {
                    note(c.echo_async(t).await.map(|v| v == t + 1));
                }
            }));
        }
        for h in handles {
            h.await;
        }
    });
    if run.is_err() {
        return -2000;
    }
    let (ok, failed, other) = tally.get();
    ok * 1_000_000 + failed * 1000 + other
}
