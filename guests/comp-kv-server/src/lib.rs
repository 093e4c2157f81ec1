//! `lrpc:kv/store` as a component (wit-bindgen, `wasm32-wasip2`): an in-memory key-value
//! store with the same answers as `kv-server`, run by the kernel as a component domain.

wit_bindgen::generate!({
    generate_all,
    path: ["../../wit/kv.wit", "../comp-wit/probe.wit", "../comp-wit/worlds/worlds.wit"],
    world: "lrpc:comp-worlds/kv-server",
});

use exports::lrpc::kv::store::{Access, Entry, Error, Guest, Kind};
use std::cell::RefCell;
use std::collections::BTreeMap;

const MAX_KEY: usize = 256;
const MAX_VALUE: usize = 1 << 20;

/// A stored value, its kind and its version.
type Stored = (Vec<u8>, Kind, u64);

thread_local! {
    static MAP: RefCell<BTreeMap<String, Stored>> = const { RefCell::new(BTreeMap::new()) };
}

fn check_key(key: &str) -> Result<(), Error> {
    if key.is_empty() || key.len() > MAX_KEY {
        Err(Error::InvalidKey)
    } else {
        Ok(())
    }
}

struct Kv;

impl Guest for Kv {
    fn put(key: String, value: Vec<u8>, kind: Kind) -> Result<u64, Error> {
        check_key(&key)?;
        if value.len() > MAX_VALUE {
            return Err(Error::TooLarge(MAX_VALUE as u32));
        }
        MAP.with_borrow_mut(|map| {
            let version = map.get(&key).map_or(1, |(_, _, v)| v + 1);
            map.insert(key, (value, kind, version));
            Ok(version)
        })
    }

    fn get(key: String) -> Result<Entry, Error> {
        check_key(&key)?;
        MAP.with_borrow(|map| {
            let (value, kind, version) =
                map.get(&key).ok_or_else(|| Error::NotFound(key.clone()))?;
            Ok(Entry {
                key: key.clone(),
                value: value.clone(),
                kind: *kind,
                version: *version,
            })
        })
    }

    fn delete(key: String) -> bool {
        MAP.with_borrow_mut(|map| map.remove(&key).is_some())
    }

    fn keys(prefix: Option<String>) -> Vec<String> {
        let prefix = prefix.unwrap_or_default();
        MAP.with_borrow(|map| {
            map.keys()
                .filter(|k| k.starts_with(&prefix))
                .cloned()
                .collect()
        })
    }

    fn stats() -> (u32, u64) {
        MAP.with_borrow(|map| {
            let bytes = map.values().map(|(v, _, _)| v.len() as u64).sum();
            (map.len() as u32, bytes)
        })
    }

    fn rights() -> Access {
        Access::READ | Access::WRITE | Access::SCAN
    }

    fn measure(c: char, delta: i64, scale: f64) -> (char, i64, f64) {
        // The next Unicode scalar value (stepping over the surrogates), or `c` at the end.
        let next = match c {
            '\u{d7ff}' => '\u{e000}',
            c => char::from_u32(u32::from(c) + 1).unwrap_or(c),
        };
        (next, delta.wrapping_mul(2), scale * 0.5)
    }
}

export!(Kv);
