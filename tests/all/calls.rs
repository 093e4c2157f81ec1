//! Results are correct across argument sizes, inline and out of band.

use crate::{bench_pair, neg, pattern};
use lrpc::Status;

/// Sizes around every boundary that matters: empty, small, Table IV's 200 bytes, the inline
/// capacity of a 1500-byte A-stack (8-byte header, 4-byte list length), host pages, wasm
/// pages and far past the A-stack (out of band).
const SIZES: &[usize] = &[
    0, 1, 2, 7, 8, 100, 199, 200, 201, 1000, 1487, 1488, 1489, 1492, 1499, 1500, 1501, 2048, 4095,
    4096, 4097, 8191, 8192, 8193, 65535, 65536, 65537, 100_000, 262_144, 300_001,
];

#[test]
fn null_and_add_return_what_the_server_computes() {
    let _guard = crate::shared();
    let (_k, _s, client) = bench_pair();
    let s: i32 = client.call("null", (10,)).unwrap();
    assert_eq!(s, 0);
    let r: i64 = client.call("add", (40, 2)).unwrap();
    assert_eq!(r, 42);
    let r: i64 = client.call("add", (-1, 2)).unwrap();
    assert_eq!(r, 1, "u32 wrapping add");
}

#[test]
fn big_in_out_echoes_every_size_from_empty_to_past_the_astack() {
    let _guard = crate::shared();
    let (_k, _s, client) = bench_pair();
    for &len in SIZES {
        let r: i32 = client.call("big_in_out", (len as i32, 2)).unwrap();
        assert_eq!(r, 0, "big_in_out of {len} bytes");
    }
    // And back down again: segments grown for big payloads keep working for small ones.
    for &len in SIZES.iter().rev() {
        let r: i32 = client.call("big_in_out", (len as i32, 1)).unwrap();
        assert_eq!(r, 0, "big_in_out of {len} bytes after larger ones");
    }
}

#[test]
fn big_in_checks_every_size() {
    let _guard = crate::shared();
    let (_k, _s, client) = bench_pair();
    for &len in SIZES {
        let p = pattern(len);
        let ends = match p.as_slice() {
            [] => 0,
            [only] => *only,
            [first, .., last] => first ^ last,
        };
        let want = ((len as u32) << 8) | u32::from(ends);
        let r: i64 = client.call("big_in", (len as i32, 1)).unwrap();
        assert_eq!(r, i64::from(want), "big_in of {len} bytes");
    }
}

#[test]
fn a_payload_past_the_kernels_limit_is_refused_not_fatal() {
    let _guard = crate::shared();
    let (_k, server, client) = bench_pair();
    // 80 MiB is more than one out-of-band segment may hold (`KernelConfig::max_oob`).
    let r: i32 = client.call("big_in_out", (80 << 20, 1)).unwrap();
    assert_eq!(i64::from(r), neg(Status::QuotaOutOfBand));
    let r: i64 = client.call("add", (1, 1)).unwrap();
    assert_eq!(r, 2, "the binding still works");
    assert!(!server.is_terminated());
}

#[test]
fn the_key_value_store_round_trips_every_type() {
    let _guard = crate::shared();
    let kernel = lrpc::Kernel::new().unwrap();
    let server = kernel.domain("kv", lrpc::artifacts::KV_SERVER).unwrap();
    kernel.export(&server, "lrpc:kv/store").unwrap();
    let client = kernel
        .domain("kv-client", lrpc::artifacts::KV_CLIENT)
        .unwrap();
    let r: i32 = client.call("selftest", ()).unwrap();
    assert_eq!(r, 0, "kv self-test failed check {r}");
    for len in [0, 1, 1487, 1488, 1489, 4096, 70_000, 1 << 20] {
        let r: i32 = client.call("put_get", (len,)).unwrap();
        assert_eq!(r, 0, "put_get of {len} bytes");
    }
}

#[test]
fn the_pdl_follows_the_wit() {
    let _guard = crate::shared();
    let kernel = lrpc::Kernel::new().unwrap();
    let plan = kernel.interface("lrpc:bench/bench").unwrap();
    let names: Vec<&str> = plan.procs.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["null", "add", "big-in", "big-in-out"]);
    let add = &plan.procs[1];
    assert!(add.bounded);
    assert_eq!(add.astack_size, 8, "two u32 in, one u32 out: exact");
    assert_eq!(add.astack_count, 5);
    let big = &plan.procs[3];
    assert!(!big.bounded);
    assert_eq!(big.astack_size, 1500);
    assert!(matches!(
        kernel.interface("lrpc:bench/nope"),
        Err(lrpc::Error::UnknownInterface(_))
    ));
}
