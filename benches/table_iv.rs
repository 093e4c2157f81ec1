//! LRPC Table IV on the isolated path, beside its floors.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use lrpc_benches::components::ComponentPeer;
use std::time::{Duration, Instant};

fn table_iv(c: &mut Criterion) {
    let (kernel, server, client) = lrpc_benches::setup(1);

    // Check once, outside the timed loops, that every path really does its work.
    assert_eq!(client.call::<(i32, i32), i64>("add", (40, 2)).unwrap(), 42);
    assert_eq!(
        client
            .call::<(i32, i32), i32>("big_in_out", (200, 1))
            .unwrap(),
        0
    );
    let ends = 3u8 ^ ((199 * 7 + 3) as u8);
    let want = (200i64 << 8) | i64::from(ends);
    assert_eq!(
        client.call::<(i32, i32), i64>("big_in", (200, 1)).unwrap(),
        want
    );

    let mut g = c.benchmark_group("table-iv");
    g.warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));

    // wasmtime's own host→wasm typed call into an empty export, on a plain Store of the
    // kernel's engine (same configuration, epoch checks included).
    let (mut store, floor) = lrpc_benches::raw_floor(&kernel);
    g.bench_function("floor/host-to-wasm", |b| {
        b.iter(|| floor.call(&mut store, ()).unwrap())
    });
    // The same empty export called through the kernel's embedding API (replica lock,
    // deadline bookkeeping).
    let api_floor = server.func::<(), ()>("floor_null").unwrap();
    g.bench_function("floor/host-to-domain", |b| {
        b.iter(|| api_floor.call(()).unwrap())
    });

    let intra = client.func::<(i32,), i32>("intra_null").unwrap();
    g.bench_function("floor/intra-instance", |b| {
        b.iter_custom(|iters| guest_loop(|n| intra.call((n,)).unwrap(), iters))
    });

    let null = client.func::<(i32,), i32>("null").unwrap();
    g.bench_function("isolated/null", |b| {
        b.iter_custom(|iters| guest_loop(|n| null.call((n,)).unwrap(), iters))
    });

    let add = client.func::<(i32,), i64>("add_loop").unwrap();
    g.bench_function("isolated/add", |b| {
        b.iter_custom(|iters| guest_loop(|n| add.call((n,)).unwrap() as i32, iters))
    });

    let big_in = client.func::<(i32, i32), i64>("big_in").unwrap();
    let big_in_out = client.func::<(i32, i32), i32>("big_in_out_loop").unwrap();
    for size in [200usize, 4096, 65536] {
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_with_input(BenchmarkId::new("isolated/big-in", size), &size, |b, &s| {
            b.iter_custom(|iters| {
                guest_loop(|n| big_in.call((s as i32, n)).unwrap().min(0) as i32, iters)
            })
        });
        g.bench_with_input(
            BenchmarkId::new("isolated/big-in-out", size),
            &size,
            |b, &s| {
                b.iter_custom(|iters| {
                    guest_loop(|n| big_in_out.call((s as i32, n)).unwrap(), iters)
                })
            },
        );
    }
    // The direct-linked path (client trust leaky+unprotected).
    let direct_client = {
        let kernel = lrpc::Kernel::new().unwrap();
        let server = kernel.domain("s", lrpc::artifacts::BENCH_SERVER).unwrap();
        kernel.export(&server, "lrpc:bench/bench").unwrap();
        let trusting = kernel
            .presentation(
                "trusting",
                "interface = \"lrpc:bench/bench\"\nside = \"client\"\ntrust = \"leaky+unprotected\"\n",
            )
            .unwrap();
        let c = kernel
            .domain_with(
                "c",
                lrpc::artifacts::BENCH_CLIENT,
                lrpc::DomainOptions {
                    presentations: vec![trusting],
                    ..Default::default()
                },
            )
            .unwrap();
        assert_eq!(c.call::<(), i32>("bind", ()).unwrap(), 0);
        (kernel, server, c)
    };
    let direct_null = direct_client.2.func::<(i32,), i32>("null").unwrap();
    g.bench_function("direct/null", |b| {
        b.iter_custom(|iters| guest_loop(|n| direct_null.call((n,)).unwrap(), iters))
    });

    // Peers: wasmtime components, composed with fused adapters (one Store, no isolation
    // beyond separate memories) and linked through host functions (two Stores).
    let fused = lrpc_benches::components::Fused::new(kernel.engine()).unwrap();
    let host = lrpc_benches::components::HostLinked::new(kernel.engine()).unwrap();
    let peers: [(&str, Box<dyn ComponentPeer>); 2] = [
        ("component-fused", Box::new(fused)),
        ("component-host", Box::new(host)),
    ];
    for (name, mut peer) in peers {
        assert_eq!(peer.add(100), 0, "{name}: add");
        assert_eq!(peer.big_in_out(200, 2), 0, "{name}: big-in-out");
        let peer = std::cell::RefCell::new(peer);
        g.throughput(Throughput::Elements(1));
        g.bench_function(format!("{name}/null"), |b| {
            b.iter_custom(|iters| guest_loop(|n| peer.borrow_mut().null(n) as i32, iters))
        });
        g.bench_function(format!("{name}/add"), |b| {
            b.iter_custom(|iters| guest_loop(|n| peer.borrow_mut().add(n) as i32, iters))
        });
        for size in [200usize, 4096, 65536] {
            g.throughput(Throughput::Bytes(size as u64));
            g.bench_with_input(
                BenchmarkId::new(format!("{name}/big-in"), size),
                &size,
                |b, &s| {
                    b.iter_custom(|iters| {
                        guest_loop(
                            |n| peer.borrow_mut().big_in(s as i32, n).min(0) as i32,
                            iters,
                        )
                    })
                },
            );
        }
    }
    // The direct-linked path borrowing its 64 KiB `in` buffer: the peer of the fused
    // composition, which copies it.
    let (_bk, borrow_client) = lrpc_benches::pair(
        lrpc::artifacts::BENCH_CLIENT,
        lrpc::artifacts::BENCH_SERVER,
        Some(lrpc_benches::presentation_text(
            "client",
            "leaky+unprotected",
            "[function.big-in]\nin.data = \"trashable\"\n",
        )),
        Some(lrpc_benches::presentation_text(
            "server",
            "none",
            "[function.big-in]\nin.data = \"preserved\"\n",
        )),
        lrpc::Serving::Migrate,
    );
    let borrow_big_in = borrow_client.func::<(i32, i32), i64>("big_in").unwrap();
    g.throughput(Throughput::Bytes(65536));
    g.bench_function("direct-borrow/big-in/65536", |b| {
        b.iter_custom(|iters| {
            guest_loop(
                |n| borrow_big_in.call((65536, n)).unwrap().min(0) as i32,
                iters,
            )
        })
    });
    g.throughput(Throughput::Elements(1));

    // Peer: an out-of-process plugin over gRPC on a Unix socket.
    let mut grpc = lrpc_benches::GrpcPeer::start(env!("CARGO_BIN_EXE_lrpc-grpc-peer").as_ref());
    assert_eq!(grpc.add(10), 0);
    g.bench_function("grpc-uds/null", |b| {
        b.iter_custom(|iters| guest_loop(|n| grpc.null(n) as i32, iters))
    });

    // Peer: thread-per-domain message passing (the server on its own OS thread; each call a
    // request message with a copy of the A-stack and a reply with a copy back).
    let (_mk, _ms, mp_client) = lrpc_benches::setup_with(1, lrpc::Serving::OwnThread);
    assert_eq!(
        mp_client.call::<(i32, i32), i64>("add", (40, 2)).unwrap(),
        42
    );
    let mp_null = mp_client.func::<(i32,), i32>("null").unwrap();
    g.throughput(Throughput::Elements(1));
    g.bench_function("message-passing/null", |b| {
        b.iter_custom(|iters| guest_loop(|n| mp_null.call((n,)).unwrap(), iters))
    });
    let mp_add = mp_client.func::<(i32,), i64>("add_loop").unwrap();
    g.bench_function("message-passing/add", |b| {
        b.iter_custom(|iters| guest_loop(|n| mp_add.call((n,)).unwrap() as i32, iters))
    });
    let mp_big_in = mp_client.func::<(i32, i32), i64>("big_in").unwrap();
    let mp_big_in_out = mp_client
        .func::<(i32, i32), i32>("big_in_out_loop")
        .unwrap();
    for size in [200usize, 4096] {
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_with_input(
            BenchmarkId::new("message-passing/big-in", size),
            &size,
            |b, &s| {
                b.iter_custom(|iters| {
                    guest_loop(
                        |n| mp_big_in.call((s as i32, n)).unwrap().min(0) as i32,
                        iters,
                    )
                })
            },
        );
        g.bench_with_input(
            BenchmarkId::new("message-passing/big-in-out", size),
            &size,
            |b, &s| {
                b.iter_custom(|iters| {
                    guest_loop(|n| mp_big_in_out.call((s as i32, n)).unwrap(), iters)
                })
            },
        );
    }
    g.finish();
}

/// Runs `f(n)` (which makes `n` calls inside the guest) for `iters` calls in all.
fn guest_loop(mut f: impl FnMut(i32) -> i32, iters: u64) -> Duration {
    let mut left = iters;
    let start = Instant::now();
    while left > 0 {
        let n = left.min(1 << 30) as i32;
        let status = f(n);
        assert_eq!(status, 0, "a call in the measured loop failed");
        left -= n as u64;
    }
    start.elapsed()
}

criterion_group!(benches, table_iv);
criterion_main!(benches);
