//! Flick's figures on this kernel: Fig. 10 (`in` buffers of 1 KiB and 64 KiB under every
//! trashable × preserved combination: copy-always is neither, borrow the other three),
//! Fig. 11 (a 1 KiB `out` buffer: who allocates it) and Fig. 12 (the null call over the
//! 3 × 3 trust matrix).

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use lrpc::{DomainOptions, ExportOptions, Kernel};
use std::time::{Duration, Instant};

fn example(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../presentation/examples")
        .join(format!("{name}.toml"))
}

fn pair(kernel: &Kernel, client: &str, server: Option<&str>) -> lrpc::Domain {
    let s = kernel
        .domain("bench-server", lrpc::artifacts::BENCH_SERVER)
        .unwrap();
    let presentation = server.map(|n| kernel.load_presentation(&example(n)).unwrap());
    kernel
        .export_as(
            &s,
            "lrpc:bench/bench",
            "lrpc:bench/bench",
            ExportOptions {
                presentation,
                ..Default::default()
            },
        )
        .unwrap();
    let c = kernel
        .domain_with(
            "bench-client",
            lrpc::artifacts::BENCH_CLIENT,
            DomainOptions {
                presentations: vec![kernel.presentation("client", client).unwrap()],
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(c.call::<(), i32>("bind", ()).unwrap(), 0);
    c
}

fn client_text(trust: &str, trashable: bool) -> String {
    let mut t =
        format!("interface = \"lrpc:bench/bench\"\nside = \"client\"\ntrust = \"{trust}\"\n");
    if trashable {
        t.push_str("[function.big-in]\nin.data = \"trashable\"\n");
    }
    t
}

fn guest_loop(f: impl Fn(i32) -> i64, iters: u64) -> Duration {
    let mut left = iters;
    let start = Instant::now();
    while left > 0 {
        let n = left.min(1 << 30) as i32;
        assert!(f(n) >= 0, "a call in the measured loop failed");
        left -= n as u64;
    }
    start.elapsed()
}

fn fig10(c: &mut Criterion) {
    let mut g = c.benchmark_group("flick-fig10");
    g.warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    for size in [1024usize, 65536] {
        g.throughput(Throughput::Bytes(size as u64));
        for (trashable, preserved) in [(false, false), (true, false), (false, true), (true, true)] {
            let kernel = Kernel::new().unwrap();
            let client = pair(
                &kernel,
                &client_text("leaky", trashable),
                preserved.then_some("bench-server-preserved"),
            );
            let f = client.func::<(i32, i32), i64>("big_in").unwrap();
            assert_eq!(f.call((size as i32, 1)).unwrap() >> 8, size as i64);
            let name = match (trashable, preserved) {
                (false, false) => "copy (neither)",
                (true, false) => "borrow (trashable)",
                (false, true) => "borrow (preserved)",
                (true, true) => "borrow (both)",
            };
            g.bench_with_input(BenchmarkId::new(name, size), &size, |b, &s| {
                b.iter_custom(|iters| guest_loop(|n| f.call((s as i32, n)).unwrap(), iters))
            });
        }
    }
    g.finish();
}

fn fig12(c: &mut Criterion) {
    let mut g = c.benchmark_group("flick-fig12");
    g.warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    let levels = ["none", "leaky", "leaky+unprotected"];
    for ct in levels {
        for st in levels {
            let kernel = Kernel::new().unwrap();
            let server_text =
                format!("interface = \"lrpc:bench/bench\"\nside = \"server\"\ntrust = \"{st}\"\n");
            let s = kernel
                .domain("bench-server", lrpc::artifacts::BENCH_SERVER)
                .unwrap();
            kernel
                .export_as(
                    &s,
                    "lrpc:bench/bench",
                    "lrpc:bench/bench",
                    ExportOptions {
                        presentation: Some(kernel.presentation("server", &server_text).unwrap()),
                        ..Default::default()
                    },
                )
                .unwrap();
            let client = kernel
                .domain_with(
                    "bench-client",
                    lrpc::artifacts::BENCH_CLIENT,
                    DomainOptions {
                        presentations: vec![
                            kernel
                                .presentation("client", &client_text(ct, false))
                                .unwrap(),
                        ],
                        ..Default::default()
                    },
                )
                .unwrap();
            assert_eq!(client.call::<(), i32>("bind", ()).unwrap(), 0);
            let f = client.func::<(i32,), i32>("null").unwrap();
            g.bench_function(format!("null/client {ct}/server {st}"), |b| {
                b.iter_custom(|iters| guest_loop(|n| i64::from(f.call((n,)).unwrap()), iters))
            });
        }
    }
    g.finish();
}

fn fig11(c: &mut Criterion) {
    let mut g = c.benchmark_group("flick-fig11");
    g.warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    let size = 1024usize;
    g.throughput(Throughput::Bytes(size as u64));
    let cases = [
        (
            "client allocates+server allocates",
            lrpc::artifacts::BENCH_CLIENT,
            lrpc::artifacts::BENCH_SERVER,
        ),
        (
            "caller buffer+server allocates",
            lrpc::artifacts::BENCH_CLIENT_INTO,
            lrpc::artifacts::BENCH_SERVER,
        ),
        (
            "client allocates+server writes in place",
            lrpc::artifacts::BENCH_CLIENT,
            lrpc::artifacts::BENCH_SERVER_INPLACE,
        ),
        (
            "caller buffer+server writes in place",
            lrpc::artifacts::BENCH_CLIENT_INTO,
            lrpc::artifacts::BENCH_SERVER_INPLACE,
        ),
    ];
    for (name, client_wasm, server_wasm) in cases {
        let kernel = Kernel::new().unwrap();
        let server = kernel.domain("bench-server", server_wasm).unwrap();
        kernel.export(&server, "lrpc:bench/bench").unwrap();
        let client = kernel
            .domain_with(
                "bench-client",
                client_wasm,
                DomainOptions {
                    presentations: vec![
                        kernel
                            .presentation("client", &client_text("leaky", false))
                            .unwrap(),
                    ],
                    ..Default::default()
                },
            )
            .unwrap();
        assert_eq!(client.call::<(), i32>("bind", ()).unwrap(), 0);
        let f = client.func::<(i32, i32), i32>("big_in_out_loop").unwrap();
        assert_eq!(
            f.call((size as i32, 1)).unwrap(),
            0,
            "{name}: checked reply"
        );
        g.bench_with_input(BenchmarkId::new(name, size), &size, |b, &s| {
            b.iter_custom(|iters| guest_loop(|n| i64::from(f.call((s as i32, n)).unwrap()), iters))
        });
    }
    g.finish();
}

criterion_group!(benches, fig10, fig11, fig12);
criterion_main!(benches);
