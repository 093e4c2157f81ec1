//! `lrpc:kv/store` as a component (wit-bindgen, `wasm32-wasip2`): a key-value store with the
//! same answers as `kv-server`, run by the kernel as a component domain.
//!
//! Entries live in memory. When the domain is granted a directory at [`DATA`] (a WASI
//! preopen), every entry is also kept there as one file, written on `put` and removed on
//! `delete`, and a fresh instance loads them when it is first called: the store survives a
//! restart of its domain. Without the grant it is memory only.

/// What wit-bindgen generates from the WIT: private to this guest, which exports only
/// what the world names.
mod bindings {
    wit_bindgen::generate!({
        generate_all,
        path: ["../../wit/kv.wit", "../comp-wit/probe.wit", "../comp-wit/worlds/worlds.wit"],
        world: "lrpc:comp-worlds/kv-server",
    });
}
use bindings::*;

use exports::lrpc::kv::store::{Access, Entry, Error, Guest, Kind};
use std::cell::RefCell;
use std::collections::BTreeMap;

const MAX_KEY: usize = 256;
const MAX_VALUE: usize = 1 << 20;

/// A stored value, its kind and its version.
type Stored = (Vec<u8>, Kind, u64);

thread_local! {
    static MAP: RefCell<Option<BTreeMap<String, Stored>>> = const { RefCell::new(None) };
}

/// Where a granted directory keeps the entries.
const DATA: &str = "/data";

/// The file of `key` under [`DATA`]: the key's bytes in hex, or for a key too long for a
/// file name, the hex of its first 100 bytes and a 64-bit FNV-1a hash of the whole key. The
/// file holds the key too (see `encode`): a name only has to be unique.
fn file_of(key: &str) -> String {
    let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    let bytes = key.as_bytes();
    let name = if bytes.len() <= 100 {
        hex(bytes)
    } else {
        let hash = bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
        format!("{}-{hash:016x}", hex(&bytes[..100]))
    };
    format!("{DATA}/{name}")
}

/// An entry as its file holds it: kind (0 text, 1 binary), version (8 bytes, little endian),
/// the key's length (4 bytes, little endian) and bytes, then the value.
fn encode(key: &str, value: &[u8], kind: Kind, version: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(13 + key.len() + value.len());
    out.push(match kind {
        Kind::Text => 0,
        Kind::Binary => 1,
    });
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(key.as_bytes());
    out.extend_from_slice(value);
    out
}

/// An entry's file back (`None` for anything `encode` did not write).
fn decode(bytes: &[u8]) -> Option<(String, Stored)> {
    let kind = match bytes.first()? {
        0 => Kind::Text,
        1 => Kind::Binary,
        _ => return None,
    };
    let version = u64::from_le_bytes(bytes.get(1..9)?.try_into().ok()?);
    let len = u32::from_le_bytes(bytes.get(9..13)?.try_into().ok()?) as usize;
    let end = 13usize.checked_add(len)?;
    let key = String::from_utf8(bytes.get(13..end)?.to_vec()).ok()?;
    check_key(&key).ok()?;
    Some((key, (bytes[end..].to_vec(), kind, version)))
}

/// The entries a granted directory holds (files that are not entries are left alone).
fn load() -> BTreeMap<String, Stored> {
    let mut map = BTreeMap::new();
    let Ok(dir) = std::fs::read_dir(DATA) else {
        return map;
    };
    for entry in dir.flatten() {
        if let Some((key, stored)) = std::fs::read(entry.path()).ok().as_deref().and_then(decode) {
            map.insert(key, stored);
        }
    }
    map
}

/// Runs `f` on the entries, loading them from the granted directory on first use.
fn with_map<R>(f: impl FnOnce(&mut BTreeMap<String, Stored>) -> R) -> R {
    MAP.with_borrow_mut(|m| f(m.get_or_insert_with(load)))
}

/// Whether this domain was granted a directory to keep its entries in.
fn durable() -> bool {
    std::fs::metadata(DATA).is_ok_and(|m| m.is_dir())
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
        with_map(|map| {
            let version = map.get(&key).map_or(1, |(_, _, v)| v + 1);
            if durable() {
                // The file first: an entry the store answers with is one it keeps.
                std::fs::write(file_of(&key), encode(&key, &value, kind, version))
                    .map_err(|_| Error::Denied(Access::WRITE))?;
            }
            map.insert(key, (value, kind, version));
            Ok(version)
        })
    }

    fn get(key: String) -> Result<Entry, Error> {
        check_key(&key)?;
        with_map(|map| {
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
        with_map(|map| {
            let removed = map.remove(&key).is_some();
            if removed && durable() {
                let _ = std::fs::remove_file(file_of(&key));
            }
            removed
        })
    }

    fn keys(prefix: Option<String>) -> Vec<String> {
        let prefix = prefix.unwrap_or_default();
        with_map(|map| {
            map.keys()
                .filter(|k| k.starts_with(&prefix))
                .cloned()
                .collect()
        })
    }

    fn stats() -> (u32, u64) {
        with_map(|map| {
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

export!(Kv with_types_in bindings);
