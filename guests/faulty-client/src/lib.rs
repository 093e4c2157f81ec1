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
