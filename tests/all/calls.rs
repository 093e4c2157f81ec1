//! Results are correct across argument sizes, inline and out of band.

use crate::{bench_pair, neg, pattern};
use lrpc_kernel::Status;

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
    let kernel = lrpc_kernel::Kernel::new().unwrap();
    let server = kernel.domain("kv", lrpc_artifacts::KV_SERVER).unwrap();
    kernel.export(&server, "lrpc:kv/store").unwrap();
    let client = kernel
        .domain("kv-client", lrpc_artifacts::KV_CLIENT)
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
    let kernel = lrpc_kernel::Kernel::new().unwrap();
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
        Err(lrpc_kernel::Error::UnknownInterface(_))
    ));
}

/// Page faults (minor and major) and `read`/`write` system calls of the calling thread so
/// far, from `/proc/thread-self`. A call migrates the calling thread, so whatever the call
/// path costs the operating system shows up here.
fn thread_costs() -> (u64, u64) {
    let num = |s: &str| s.trim().parse::<u64>().expect("a counter");
    let stat = std::fs::read_to_string("/proc/thread-self/stat").expect("thread stat");
    // Fields after the command name (which may hold spaces): state, ppid, …, minflt is the
    // 8th, majflt the 10th.
    let rest: Vec<&str> = stat[stat.rfind(')').expect("command name") + 1..]
        .split_whitespace()
        .collect();
    let faults = num(rest[7]) + num(rest[9]);
    let io = std::fs::read_to_string("/proc/thread-self/io").expect("thread io");
    let syscalls = io
        .lines()
        .filter_map(|l| {
            l.strip_prefix("syscr:")
                .or_else(|| l.strip_prefix("syscw:"))
        })
        .map(num)
        .sum();
    (faults, syscalls)
}

/// In the steady state a call costs no page fault and no `read`/`write` system call, at every
/// size: the A-stacks and segments stay mapped, the stubs reuse their buffers. (Reading the
/// counters costs a few system calls of its own, measured and taken off; a cost per call would
/// show as thousands.)
#[test]
fn steady_state_calls_take_no_page_fault_and_no_read_or_write_call() {
    let _guard = crate::shared();
    let (_k, _s, client) = bench_pair();
    const CALLS: i32 = 2000;
    let null = client.func::<(i32,), i32>("null").unwrap();
    let big_in = client.func::<(i32, i32), i64>("big_in").unwrap();
    let big_in_out = client.func::<(i32, i32), i32>("big_in_out").unwrap();
    let cases = [
        ("null", 0),
        ("big_in", 200),
        ("big_in", 4096),
        ("big_in", 65536),
        ("big_in_out", 200),
        ("big_in_out", 4096),
        ("big_in_out", 65536),
    ];
    for (case, len) in cases {
        let run = |n: i32| match case {
            "null" => i64::from(null.call((n,)).unwrap()),
            "big_in" => big_in.call((len, n)).unwrap(),
            _ => i64::from(big_in_out.call((len, n)).unwrap()),
        };
        // Warm up: segments made and grown, stub and allocator buffers in place.
        let warm = run(100);
        assert!(warm >= 0, "{case}/{len} failed: {warm}");
        // What reading the counters costs by itself.
        let (a, b) = (thread_costs(), thread_costs());
        let reading = b.1 - a.1;
        let before = thread_costs();
        let r = run(CALLS);
        let after = thread_costs();
        assert!(r >= 0, "{case}/{len} failed: {r}");
        let (faults, syscalls) = (
            after.0 - before.0,
            (after.1 - before.1).saturating_sub(reading),
        );
        assert!(
            faults <= 8,
            "{case}/{len}: {faults} page faults in {CALLS} calls"
        );
        assert!(
            syscalls <= 8,
            "{case}/{len}: {syscalls} read/write system calls in {CALLS} calls"
        );
    }
}
