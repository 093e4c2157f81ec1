//! Soak: millions of calls mixed across procedures and sizes, binds and unbinds, and domains
//! created, faulted and terminated, on two threads; the process's resident memory, open file
//! descriptors and memory mappings must stay flat once warmed up.
//!
//! Not part of the default test run:
//!
//! ```text
//! cargo test -p lrpc-tests --release --test soak -- --ignored          # 10^7 calls
//! LRPC_SOAK_CALLS=200000 cargo test -p lrpc-tests --test soak -- --ignored
//! ```

use lrpc_kernel::{Domain, DomainOptions, Kernel, Status};

/// Resident set size, bytes.
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("statm");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("resident pages");
    pages * 4096
}

fn fds() -> usize {
    std::fs::read_dir("/proc/self/fd").expect("fd dir").count()
}

fn mappings() -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .expect("maps")
        .lines()
        .count()
}

#[derive(Debug, Clone, Copy)]
struct Sample {
    rss: u64,
    fds: usize,
    mappings: usize,
}

fn sample() -> Sample {
    Sample {
        rss: rss(),
        fds: fds(),
        mappings: mappings(),
    }
}

fn bench_client(kernel: &Kernel, name: &str) -> Domain {
    let c = kernel.domain(name, lrpc_artifacts::BENCH_CLIENT).unwrap();
    assert_eq!(c.call::<(), i32>("bind", ()).unwrap(), 0);
    c
}

/// A faulty pair that lives for one round: an answered call, then a trap that terminates
/// the server, then both dropped.
fn churn(kernel: &Kernel, tag: usize) -> u64 {
    let server = kernel
        .domain(&format!("faulty-{tag}"), lrpc_artifacts::FAULTY_SERVER)
        .unwrap();
    let name = format!("faulty-{tag}");
    kernel
        .export_as(&server, "lrpc:test/faulty", &name, Default::default())
        .unwrap();
    // Bind through the raw ABI under the per-round name.
    let h = kernel.domain("raw", lrpc_artifacts::HOSTILE).unwrap();
    let scratch = h.call::<(), i32>("scratch", ()).unwrap();
    h.write_memory(scratch as usize, name.as_bytes()).unwrap();
    let fingerprint = kernel.interface("lrpc:test/faulty").unwrap().fingerprint as i64;
    let s: i32 = h
        .call(
            "bind_any",
            (scratch, name.len() as i32, fingerprint, scratch + 256, 2048),
        )
        .unwrap();
    assert_eq!(s, 0);
    let d = h.read_memory(scratch as usize + 256, 64).unwrap();
    let handle = i64::from_le_bytes(d[..8].try_into().unwrap());
    let echo_astack = i32::from_le_bytes(d[16..20].try_into().unwrap());
    let crash_astack = i32::from_le_bytes(d[32..36].try_into().unwrap());
    h.write_memory(echo_astack as usize, &9u32.to_le_bytes())
        .unwrap();
    assert_eq!(
        h.call::<(i64, i32, i32), i32>("call_raw", (handle, 0, echo_astack))
            .unwrap(),
        0
    );
    assert_eq!(
        h.call::<(i64, i32, i32), i32>("call_raw", (handle, 1, crash_astack))
            .unwrap(),
        Status::ServerTrapped as i32
    );
    assert!(server.is_terminated());
    kernel.terminate(&h);
    2
}

/// One round of mixed work on `client`; returns the number of calls made.
fn round(kernel: &Kernel, client: &mut Domain, i: usize, tag: &str) -> u64 {
    let ok = |r: i64, what: &str| assert_eq!(r, 0, "{what} in round {i} of {tag}");
    // `big_in` answers the server's digest of what it received: anything but a status.
    let answered = |r: i64, what: &str| assert!(r >= 0, "{what} in round {i} of {tag}: {r}");
    match i % 10 {
        0 => {
            ok(
                client.call::<(i32,), i32>("null", (2000,)).unwrap().into(),
                "null",
            );
            2000
        }
        1 => {
            ok(
                client.call::<(i32,), i64>("add_loop", (2000,)).unwrap(),
                "add",
            );
            2000
        }
        2 => {
            answered(
                client
                    .call::<(i32, i32), i64>("big_in", (200, 1000))
                    .unwrap(),
                "big_in 200",
            );
            1000
        }
        3 => {
            answered(
                client
                    .call::<(i32, i32), i64>("big_in", (4096, 300))
                    .unwrap(),
                "big_in 4K",
            );
            300
        }
        4 => {
            answered(
                client
                    .call::<(i32, i32), i64>("big_in", (70_000, 20))
                    .unwrap(),
                "big_in 70K",
            );
            20
        }
        5 => {
            ok(
                client
                    .call::<(i32, i32), i32>("big_in_out", (200, 1000))
                    .unwrap()
                    .into(),
                "big_in_out 200",
            );
            1000
        }
        6 => {
            ok(
                client
                    .call::<(i32, i32), i32>("big_in_out", (70_000, 10))
                    .unwrap()
                    .into(),
                "big_in_out 70K",
            );
            10
        }
        7 => {
            ok(
                client
                    .call::<(i32,), i32>("bind_cycles", (20,))
                    .unwrap()
                    .into(),
                "bind cycles",
            );
            40
        }
        8 => {
            // The client unbinds and binds again, or is replaced by a new domain.
            if i % 20 == 8 {
                *client = bench_client(kernel, tag);
            } else {
                ok(
                    client.call::<(), i32>("unbind", ()).unwrap().into(),
                    "unbind",
                );
                ok(client.call::<(), i32>("bind", ()).unwrap().into(), "bind");
            }
            2
        }
        _ => churn(kernel, i),
    }
}

/// Runs rounds on two threads until together they made `calls` calls.
fn run(kernel: &Kernel, clients: &mut [Domain; 2], calls: u64, first_round: usize) {
    std::thread::scope(|s| {
        for (t, client) in clients.iter_mut().enumerate() {
            s.spawn(move || {
                let mut made = 0;
                let mut i = first_round + t;
                while made < calls / 2 {
                    made += round(kernel, client, i, &format!("client-{t}"));
                    i += 2;
                }
            });
        }
    });
}

#[test]
#[ignore = "long: run with --ignored (CI runs it with a reduced LRPC_SOAK_CALLS)"]
fn calls_binds_and_terminations_leave_memory_fds_and_mappings_flat() {
    let calls: u64 = std::env::var("LRPC_SOAK_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000_000);
    let kernel = Kernel::new().unwrap();
    let server = kernel
        .domain_with(
            "bench-server",
            lrpc_artifacts::BENCH_SERVER,
            DomainOptions::default().with_replicas(2),
        )
        .unwrap();
    kernel.export(&server, "lrpc:bench/bench").unwrap();
    let mut clients = [
        bench_client(&kernel, "client-0"),
        bench_client(&kernel, "client-1"),
    ];
    // Warm up: every kind of round several times, caches and allocators at their size.
    run(&kernel, &mut clients, (calls / 10).max(100_000), 0);
    let warm = sample();
    run(&kernel, &mut clients, calls, 1_000_000);
    let end = sample();
    println!("after warm-up {warm:?}, at the end {end:?}");
    assert!(
        end.rss <= warm.rss + (32 << 20),
        "resident memory grew by {} KiB",
        (end.rss.saturating_sub(warm.rss)) >> 10
    );
    assert!(end.fds <= warm.fds + 4, "fds {} → {}", warm.fds, end.fds);
    assert!(
        end.mappings <= warm.mappings + 64,
        "mappings {} → {}",
        warm.mappings,
        end.mappings
    );
    assert!(!server.is_terminated());
}
