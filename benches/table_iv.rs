//! LRPC Table IV, every peer side by side (`table-iv/<peer>/<case>`), beside the floors.
//!
//! Peers: this project's isolated and direct-linked paths, wasmtime components linked
//! through host functions in two Stores and composed with fused adapters, thread-per-domain
//! message passing, and an out-of-process gRPC plugin on a Unix socket. Each does Null, Add,
//! BigIn and BigInOut with 200 B, 4 KiB and 64 KiB buffers, its answers checked first.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use std::time::{Duration, Instant};

fn table_iv(c: &mut Criterion) {
    let mut g = c.benchmark_group("table-iv");
    g.warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));

    // Floors: wasmtime's own host→wasm typed call into an empty export, on a plain Store of
    // the kernel's engine (same configuration, epoch checks included); the same through the
    // kernel's embedding API; and an indirect call inside one instance. Each group of cases
    // lives in its own block, so that only what is being measured has threads alive.
    {
        let (kernel, server, client) = lrpc_benches::setup(1);
        let (mut store, floor) = lrpc_benches::raw_floor(&kernel);
        g.throughput(Throughput::Elements(1));
        g.bench_function("floor/host-to-wasm", |b| {
            b.iter(|| floor.call(&mut store, ()).unwrap())
        });
        let api_floor = server.func::<(), ()>("floor_null").unwrap();
        g.bench_function("floor/host-to-domain", |b| {
            b.iter(|| api_floor.call(()).unwrap())
        });
        // The bare cross-Store mechanism (no kernel), and the kernel without the client stub.
        let mut cross = lrpc_benches::CrossStore::new(&kernel);
        g.bench_function("floor/cross-store", |b| {
            b.iter_custom(|iters| guest_loop(|n| cross.run(n), iters))
        });
        let mut raw = lrpc_benches::RawCall::new();
        g.bench_function("floor/kernel-raw-call", |b| {
            b.iter_custom(|iters| guest_loop(|n| raw.run(n), iters))
        });
        let intra = client.func::<(i32,), i32>("intra_null").unwrap();
        g.bench_function("floor/intra-instance", |b| {
            b.iter_custom(|iters| guest_loop(|n| i64::from(intra.call((n,)).unwrap()), iters))
        });
    }

    for (name, make, _) in lrpc_benches::peers(env!("CARGO_BIN_EXE_lrpc-grpc-peer").as_ref()) {
        let peer = std::cell::RefCell::new(make());
        lrpc_benches::check(&mut **peer.borrow_mut(), name);
        g.throughput(Throughput::Elements(1));
        g.bench_function(format!("{name}/null"), |b| {
            b.iter_custom(|iters| guest_loop(|n| peer.borrow_mut().null(n), iters))
        });
        g.bench_function(format!("{name}/add"), |b| {
            b.iter_custom(|iters| guest_loop(|n| peer.borrow_mut().add(n), iters))
        });
        for size in lrpc_benches::SIZES {
            g.throughput(Throughput::Bytes(size as u64));
            g.bench_with_input(
                BenchmarkId::new(format!("{name}/big-in"), size),
                &size,
                |b, &s| {
                    b.iter_custom(|iters| {
                        guest_loop(|n| peer.borrow_mut().big_in(s, n).min(0), iters)
                    })
                },
            );
            g.bench_with_input(
                BenchmarkId::new(format!("{name}/big-in-out"), size),
                &size,
                |b, &s| {
                    b.iter_custom(|iters| guest_loop(|n| peer.borrow_mut().big_in_out(s, n), iters))
                },
            );
        }
    }

    // The direct-linked path borrowing its `in` buffer: the peer of the fused composition,
    // which copies it.
    let (_bk, borrow_client) = lrpc_benches::direct_borrow_pair();
    let borrow_big_in = borrow_client.func::<(i32, i32), i64>("big_in").unwrap();
    for size in lrpc_benches::SIZES {
        assert_eq!(
            borrow_big_in.call((size, 1)).unwrap(),
            lrpc_benches::big_in_answer(size)
        );
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_with_input(
            BenchmarkId::new("direct-borrow/big-in", size),
            &size,
            |b, &s| {
                b.iter_custom(|iters| {
                    guest_loop(|n| borrow_big_in.call((s, n)).unwrap().min(0), iters)
                })
            },
        );
    }
    g.finish();
}

/// Runs `f(n)` (which makes `n` calls inside the guest) for `iters` calls in all.
fn guest_loop(mut f: impl FnMut(i32) -> i64, iters: u64) -> Duration {
    let mut left = iters;
    let start = Instant::now();
    while left > 0 {
        let n = left.min(1 << 30) as i32;
        let status = f(n);
        assert!(status >= 0, "a call in the measured loop failed ({status})");
        left -= n as u64;
    }
    start.elapsed()
}

criterion_group!(benches, table_iv);
criterion_main!(benches);
