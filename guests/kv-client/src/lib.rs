//! Client of `lrpc:kv/store` with a self-test of every function and type.

include!(concat!(env!("OUT_DIR"), "/stubs.rs"));

use store::{Access, Error, Kind};

fn value(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Runs every check; returns 0, or the number of the first failed check:
/// 1 bind, 2x put/get round trip of size index x (10 + index), 30 overwrite version,
/// 31 get missing, 32 empty key, 33 keys with prefix, 34 keys without prefix, 35 delete,
/// 36 delete missing, 37 stats, 38 rights, 39 measure, 40 text kind, 41 long key,
/// 50 + status when a call itself failed.
#[unsafe(no_mangle)]
pub extern "C" fn selftest() -> i32 {
    match run() {
        Ok(()) => 0,
        Err(code) => code,
    }
}

fn run() -> Result<(), i32> {
    let kv = store::Client::bind().map_err(|_| 1)?;
    let call = |e: lrpc_sdk::CallError| 50 + e.code();
    let sizes = [0usize, 1, 1499, 1500, 4096, 100_000];
    for (i, &n) in sizes.iter().enumerate() {
        let key = format!("bin-{n}");
        let v = value(n, i as u8);
        kv.put(&key, &v, Kind::Binary)
            .map_err(call)?
            .map_err(|_| 10 + i as i32)?;
        let e = kv.get(&key).map_err(call)?.map_err(|_| 10 + i as i32)?;
        if e.value != v || e.kind != Kind::Binary || e.key != key || e.version != 1 {
            return Err(10 + i as i32);
        }
    }
    let v2 = kv.put("bin-1", b"again", Kind::Binary).map_err(call)?;
    if v2 != Ok(2) {
        return Err(30);
    }
    if kv.get("missing").map_err(call)? != Err(Error::NotFound("missing".into())) {
        return Err(31);
    }
    if kv.put("", b"x", Kind::Text).map_err(call)? != Err(Error::InvalidKey) {
        return Err(32);
    }
    let text = "grüße, κόσμε";
    kv.put("txt-1", text.as_bytes(), Kind::Text)
        .map_err(call)?
        .map_err(|_| 40)?;
    let e = kv.get("txt-1").map_err(call)?.map_err(|_| 40)?;
    if e.kind != Kind::Text || std::str::from_utf8(&e.value) != Ok(text) {
        return Err(40);
    }
    let keys = kv.keys(Some("txt-".into())).map_err(call)?;
    if keys != ["txt-1"] {
        return Err(33);
    }
    let all = kv.keys(None).map_err(call)?;
    if all.len() != sizes.len() + 1 || !all.windows(2).all(|w| w[0] < w[1]) {
        return Err(34);
    }
    if !kv.delete("txt-1").map_err(call)? {
        return Err(35);
    }
    if kv.delete("txt-1").map_err(call)? {
        return Err(36);
    }
    let (count, bytes) = kv.stats().map_err(call)?;
    let want_bytes: u64 = sizes.iter().map(|&n| n as u64).sum::<u64>() - 1 + 5;
    if count != sizes.len() as u32 || bytes != want_bytes {
        return Err(37);
    }
    let r = kv.rights().map_err(call)?;
    if !r.contains(Access::READ | Access::WRITE) || !r.contains(Access::SCAN) {
        return Err(38);
    }
    let (c, d, s) = kv.measure('é', -21, 3.0).map_err(call)?;
    if c != 'ê' || d != -42 || s != 1.5 {
        return Err(39);
    }
    let long = "k".repeat(300);
    if kv.get(&long).map_err(call)? != Err(Error::InvalidKey) {
        return Err(41);
    }
    Ok(())
}

/// Puts a value of `len` bytes under "k" and reads it back; 0 when identical.
#[unsafe(no_mangle)]
pub extern "C" fn put_get(len: i32) -> i32 {
    let Ok(kv) = store::Client::bind() else {
        return 1;
    };
    let v = value(len.max(0) as usize, 7);
    match kv.put("k", &v, Kind::Binary) {
        Ok(Ok(_)) => {}
        Ok(Err(Error::TooLarge(_))) => return 3,
        Ok(Err(_)) => return 4,
        Err(e) => return 50 + e.code(),
    }
    match kv.get("k") {
        Ok(Ok(e)) if e.value == v => 0,
        Ok(_) => 2,
        Err(e) => 50 + e.code(),
    }
}
