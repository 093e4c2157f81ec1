//! Serves `lrpc:kv/store`: an in-memory key-value store.

include!(concat!(env!("OUT_DIR"), "/stubs.rs"));

use std::cell::RefCell;
use std::collections::BTreeMap;
use store::{Access, Entry, Error, Kind};

const MAX_KEY: usize = 256;
const MAX_VALUE: usize = 1 << 20;

/// A stored value, its kind and its version.
type Stored = (Vec<u8>, Kind, u64);

#[derive(Default)]
struct Kv {
    map: RefCell<BTreeMap<String, Stored>>,
}

fn check_key(key: &str) -> Result<(), Error> {
    if key.is_empty() || key.len() > MAX_KEY {
        Err(Error::InvalidKey)
    } else {
        Ok(())
    }
}

impl store::Server for Kv {
    fn put(&self, key: &str, value: &[u8], kind: Kind) -> Result<u64, Error> {
        check_key(key)?;
        if value.len() > MAX_VALUE {
            return Err(Error::TooLarge(MAX_VALUE as u32));
        }
        let mut map = self.map.borrow_mut();
        let version = map.get(key).map_or(1, |(_, _, v)| v + 1);
        map.insert(key.to_string(), (value.to_vec(), kind, version));
        Ok(version)
    }

    fn get(&self, key: &str) -> Result<Entry, Error> {
        check_key(key)?;
        let map = self.map.borrow();
        let (value, kind, version) = map
            .get(key)
            .ok_or_else(|| Error::NotFound(key.to_string()))?;
        Ok(Entry {
            key: key.to_string(),
            value: value.clone(),
            kind: *kind,
            version: *version,
        })
    }

    fn delete(&self, key: &str) -> bool {
        self.map.borrow_mut().remove(key).is_some()
    }

    fn keys(&self, prefix: Option<String>) -> Vec<String> {
        let map = self.map.borrow();
        let prefix = prefix.unwrap_or_default();
        map.keys()
            .filter(|k| k.starts_with(&prefix))
            .cloned()
            .collect()
    }

    fn stats(&self) -> (u32, u64) {
        let map = self.map.borrow();
        let bytes = map.values().map(|(v, _, _)| v.len() as u64).sum();
        (map.len() as u32, bytes)
    }

    fn rights(&self) -> Access {
        Access::READ | Access::WRITE | Access::SCAN
    }

    fn measure(&self, c: char, delta: i64, scale: f64) -> (char, i64, f64) {
        // The next Unicode scalar value (stepping over the surrogates), or `c` at the end.
        let next = match c {
            '\u{d7ff}' => '\u{e000}',
            c => char::from_u32(u32::from(c) + 1).unwrap_or(c),
        };
        (next, delta.wrapping_mul(2), scale * 0.5)
    }
}

store::export!(Kv);
