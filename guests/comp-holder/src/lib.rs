//! `lrpc:comp/holder` as a component (wit-bindgen, `wasm32-wasip2`): a client of
//! `lrpc:comp/counters` whose resource handles the kernel carries to the server's domain.

/// What wit-bindgen generates from the WIT: private to this guest, which exports only
/// what the world names.
mod bindings {
    wit_bindgen::generate!({
        generate_all,
        path: ["../../wit/kv.wit", "../comp-wit/probe.wit", "../comp-wit/worlds/worlds.wit"],
        world: "lrpc:comp-worlds/holder",
    });
}
use bindings::*;

use exports::lrpc::comp::holder::Guest;
use lrpc::comp::counters::{self, Counter};
use std::cell::RefCell;

struct Holder;

thread_local! {
    static KEPT: RefCell<Option<Counter>> = const { RefCell::new(None) };
}

fn expect<T: PartialEq + core::fmt::Debug>(what: &str, got: T, want: T) -> Result<(), String> {
    if got == want {
        Ok(())
    } else {
        Err(format!("{what}: got {got:?}, want {want:?}"))
    }
}

impl Guest for Holder {
    fn counters_selftest() -> Result<u64, String> {
        let before = counters::live();
        let a = Counter::new(5);
        expect("add", a.add(3), 8)?;
        expect("get", a.get(), 8)?;
        let b = counters::make(10);
        expect("add to made", b.add(1), 11)?;
        expect("live with two", counters::live(), before + 2)?;
        expect("total of a", counters::total(&a), 8)?;
        expect("total of b", counters::total(&b), 11)?;
        let sum = a.get() + b.get();
        drop(a);
        expect("live after a drop", counters::live(), before + 1)?;
        expect("b after a drop", b.get(), 11)?;
        drop(b);
        expect("live after both drops", counters::live(), before)?;
        Ok(sum)
    }

    fn keep(start: u64) {
        let c = Counter::new(start);
        KEPT.with(|k| *k.borrow_mut() = Some(c));
    }

    fn kept_add(n: u64) -> u64 {
        KEPT.with(|k| k.borrow().as_ref().map_or(0, |c| c.add(n)))
    }

    fn release() {
        KEPT.with(|k| k.borrow_mut().take());
    }
}

export!(Holder with_types_in bindings);
