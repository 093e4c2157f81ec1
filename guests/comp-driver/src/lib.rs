//! `lrpc:comp/driver` as a component (wit-bindgen, `wasm32-wasip2`): a client domain whose
//! imports `lrpc:comp/probe` and `lrpc:kv/store` the kernel binds to other component domains.

/// What wit-bindgen generates from the WIT: private to this guest, which exports only
/// what the world names.
mod bindings {
    wit_bindgen::generate!({
        generate_all,
        path: ["../../wit/kv.wit", "../comp-wit/probe.wit", "../comp-wit/worlds/worlds.wit"],
        world: "lrpc:comp-worlds/driver",
        additional_derives: [PartialEq],
    });
}
use bindings::*;

use exports::lrpc::comp::driver::Guest;
use lrpc::comp::probe;
use lrpc::kv::store::{self, Access, Error, Kind};

struct Driver;

fn expect<T: PartialEq + core::fmt::Debug>(
    what: &str,
    got: T,
    want: T,
    n: &mut u32,
) -> Result<(), String> {
    if got == want {
        *n += 1;
        Ok(())
    } else {
        Err(format!("{what}: got {got:?}, want {want:?}"))
    }
}

impl Guest for Driver {
    fn ping() -> u32 {
        42
    }

    fn echo(s: String) -> String {
        probe::echo(&s)
    }

    fn trap() -> u32 {
        probe::trap()
    }

    fn spin() -> u32 {
        probe::spin()
    }

    fn counter() -> u64 {
        probe::counter()
    }

    fn read_file(path: String) -> Result<String, String> {
        probe::read_file(&path)
    }

    fn kv_selftest() -> Result<u32, String> {
        let mut n = 0;
        let key = "clé-ключ-🔑";
        expect(
            "put",
            store::put(key, b"h\xffi", Kind::Binary),
            Ok(1),
            &mut n,
        )?;
        expect("put again", store::put(key, b"", Kind::Text), Ok(2), &mut n)?;
        let e = store::get(key).map_err(|e| format!("get: {e:?}"))?;
        expect(
            "entry",
            (e.key.as_str(), e.value.len(), e.kind, e.version),
            (key, 0, Kind::Text, 2),
            &mut n,
        )?;
        expect(
            "missing",
            store::get("nope"),
            Err(Error::NotFound("nope".into())),
            &mut n,
        )?;
        expect(
            "invalid",
            store::put("", b"x", Kind::Text),
            Err(Error::InvalidKey),
            &mut n,
        )?;
        let big = vec![7u8; (1 << 20) + 1];
        expect(
            "too large",
            store::put("big", &big, Kind::Binary),
            Err(Error::TooLarge(1 << 20)),
            &mut n,
        )?;
        store::put("k1", &[1; 100_000], Kind::Binary).map_err(|e| format!("{e:?}"))?;
        expect(
            "keys",
            store::keys(Some("k")),
            vec!["k1".to_string()],
            &mut n,
        )?;
        expect("all keys", store::keys(None).len(), 2, &mut n)?;
        expect("stats", store::stats(), (2, 100_000), &mut n)?;
        expect(
            "rights",
            store::rights(),
            Access::READ | Access::WRITE | Access::SCAN,
            &mut n,
        )?;
        expect(
            "measure",
            store::measure('\u{d7ff}', -21, 3.0),
            ('\u{e000}', -42, 1.5),
            &mut n,
        )?;
        expect("delete", store::delete("k1"), true, &mut n)?;
        expect("delete again", store::delete("k1"), false, &mut n)?;
        Ok(n)
    }

    fn kv_put(key: String, value: Vec<u8>) -> Result<u64, String> {
        store::put(&key, &value, Kind::Binary).map_err(|e| format!("{e:?}"))
    }

    fn kv_get(key: String) -> Result<Vec<u8>, String> {
        store::get(&key)
            .map(|e| e.value)
            .map_err(|e| format!("{e:?}"))
    }
}

export!(Driver with_types_in bindings);
