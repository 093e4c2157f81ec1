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

/// The same calls of every procedure on two servers of `lrpc:kv/store`: synchronously on
/// the one exported as `kv-sync`, asynchronously (a URPC channel, from user-level threads)
/// on the one exported as `kv-async`; every pair of answers must be equal. Thread 0 runs
/// the script of updates and reads in order; `readers` more threads interleave reads whose
/// answers do not depend on the script. Returns the number of calls compared, or
/// `-(1000 + index)` for the first call whose answers differ, or `-(status)` when binding
/// failed.
#[unsafe(no_mangle)]
pub extern "C" fn async_compare(readers: i32, rounds: i32) -> i64 {
    use lrpc_sdk::exec;
    use std::cell::Cell;
    use std::rc::Rc;
    let sync = match store::Client::bind_named("kv-sync") {
        Ok(c) => Rc::new(c),
        Err(e) => return -i64::from(e.code()),
    };
    let asy = match store::AsyncClient::bind_with("kv-async", 0) {
        Ok(c) => Rc::new(c),
        Err(e) => return -i64::from(e.code()),
    };
    let compared = Rc::new(Cell::new(0i64));
    let differs = Rc::new(Cell::new(None::<i64>));
    let same = {
        let (compared, differs) = (compared.clone(), differs.clone());
        move |i: i64, a: String, s: String| {
            compared.set(compared.get() + 1);
            if a != s && differs.get().is_none() {
                differs.set(Some(i));
            }
        }
    };
    let script = {
        let (sync, asy, same) = (sync.clone(), asy.clone(), same.clone());
        async move {
            let mut i = 0i64;
            let mut check = |a: String, s: String| {
                same(i, a, s);
                i += 1;
            };
            for (n, len) in [0usize, 1, 200, 1000].into_iter().enumerate() {
                let key = format!("bin-{len}");
                let v = value(len, n as u8);
                check(
                    format!("{:?}", asy.put_async(&key, &v, Kind::Binary).await),
                    format!("{:?}", sync.put(&key, &v, Kind::Binary)),
                );
                check(
                    format!("{:?}", asy.get_async(&key).await),
                    format!("{:?}", sync.get(&key)),
                );
                exec::yield_now().await;
            }
            let text = "grüße, κόσμε";
            check(
                format!(
                    "{:?}",
                    asy.put_async("txt-1", text.as_bytes(), Kind::Text).await
                ),
                format!("{:?}", sync.put("txt-1", text.as_bytes(), Kind::Text)),
            );
            check(
                format!("{:?}", asy.put_async("bin-1", b"again", Kind::Binary).await),
                format!("{:?}", sync.put("bin-1", b"again", Kind::Binary)),
            );
            check(
                format!("{:?}", asy.put_async("", b"x", Kind::Text).await),
                format!("{:?}", sync.put("", b"x", Kind::Text)),
            );
            for prefix in [Some("txt-".to_string()), Some("bin-".into()), None] {
                check(
                    format!("{:?}", asy.keys_async(prefix.clone()).await),
                    format!("{:?}", sync.keys(prefix)),
                );
            }
            for _ in 0..2 {
                check(
                    format!("{:?}", asy.delete_async("txt-1").await),
                    format!("{:?}", sync.delete("txt-1")),
                );
            }
            check(
                format!("{:?}", asy.stats_async().await),
                format!("{:?}", sync.stats()),
            );
            let long = "k".repeat(300);
            check(
                format!("{:?}", asy.get_async(&long).await),
                format!("{:?}", sync.get(&long)),
            );
            // Arguments larger than a channel slot's A-stack are refused cleanly.
            let big = value(4096, 9);
            let refused = asy.put_async("big", &big, Kind::Binary).await;
            check(
                format!("{refused:?}"),
                format!("{:?}", Err::<(), _>(lrpc_sdk::CallError::ResourceExhausted)),
            );
        }
    };
    let run = exec::block_on(async move {
        let mut hs = vec![exec::spawn(script)];
        for t in 0..readers.max(0) {
            let (sync, asy, same) = (sync.clone(), asy.clone(), same.clone());
            hs.push(exec::spawn(async move {
                for r in 0..rounds.max(0) {
                    let at = 10_000 * i64::from(t + 1) + 3 * i64::from(r);
                    let c = char::from_u32(0x41 + (r as u32 % 50)).unwrap_or('a');
                    let m = asy.measure_async(c, i64::from(r) - 7, 0.5 + f64::from(t));
                    let g = asy.get_async("missing");
                    let rights = asy.rights_async();
                    same(
                        at,
                        format!("{:?}", rights.await),
                        format!("{:?}", sync.rights()),
                    );
                    same(
                        at + 1,
                        format!("{:?}", g.await),
                        format!("{:?}", sync.get("missing")),
                    );
                    same(
                        at + 2,
                        format!("{:?}", m.await),
                        format!(
                            "{:?}",
                            sync.measure(c, i64::from(r) - 7, 0.5 + f64::from(t))
                        ),
                    );
                    exec::yield_now().await;
                }
            }));
        }
        for h in hs {
            h.await;
        }
    });
    if run.is_err() {
        return -2000;
    }
    match differs.get() {
        Some(i) => -(1000 + i),
        None => compared.get(),
    }
}
