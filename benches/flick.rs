//! Flick's figures on this kernel: Fig. 10 (`in` buffers of 1 KiB and 64 KiB under every
//! trashable × preserved combination, plus a server asking for a `stable` copy: by default
//! the call lends the buffer, since the server can not reach its client),
//! Fig. 11 (a 1 KiB `out` buffer: who allocates it) and Fig. 12 (the null call over the
//! 3 × 3 trust matrix).

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use lrpc_kernel::Serving;
use std::time::{Duration, Instant};

fn client_text(trust: &str, trashable: bool) -> String {
    let extra = if trashable {
        "[function.big-in]\nin.data = \"trashable\"\n"
    } else {
        ""
    };
    lrpc_benches::presentation_text("client", trust, extra)
}

fn server_text(trust: &str, mode: Option<&str>) -> String {
    let extra = mode.map_or(String::new(), |m| {
        format!("[function.big-in]\nin.data = \"{m}\"\n")
    });
    lrpc_benches::presentation_text("server", trust, &extra)
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
        let cells = [
            (false, None),
            (false, Some("stable")),
            (true, None),
            (false, Some("preserved")),
            (true, Some("preserved")),
        ];
        for (trashable, mode) in cells {
            let (_kernel, client) = lrpc_benches::pair(
                lrpc_artifacts::BENCH_CLIENT,
                lrpc_artifacts::BENCH_SERVER,
                Some(client_text("leaky", trashable)),
                Some(server_text("leaky", mode)),
                Serving::Migrate,
            );
            let f = client.func::<(i32, i32), i64>("big_in").unwrap();
            assert_eq!(f.call((size as i32, 1)).unwrap() >> 8, size as i64);
            let name = match (trashable, mode) {
                (false, None) => "lent (default)",
                (_, Some("stable")) => "copy (stable)",
                (true, None) => "borrow (trashable)",
                (false, _) => "borrow (preserved)",
                (true, _) => "borrow (both)",
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
            let (_kernel, client) = lrpc_benches::pair(
                lrpc_artifacts::BENCH_CLIENT,
                lrpc_artifacts::BENCH_SERVER,
                Some(client_text(ct, false)),
                Some(server_text(st, None)),
                Serving::Migrate,
            );
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
            lrpc_artifacts::BENCH_CLIENT,
            lrpc_artifacts::BENCH_SERVER,
        ),
        (
            "caller buffer+server allocates",
            lrpc_artifacts::BENCH_CLIENT_INTO,
            lrpc_artifacts::BENCH_SERVER,
        ),
        (
            "client allocates+server writes in place",
            lrpc_artifacts::BENCH_CLIENT,
            lrpc_artifacts::BENCH_SERVER_INPLACE,
        ),
        (
            "caller buffer+server writes in place",
            lrpc_artifacts::BENCH_CLIENT_INTO,
            lrpc_artifacts::BENCH_SERVER_INPLACE,
        ),
    ];
    for (name, client_wasm, server_wasm) in cases {
        let (_kernel, client) = lrpc_benches::pair(
            client_wasm,
            server_wasm,
            Some(client_text("leaky", false)),
            None,
            Serving::Migrate,
        );
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
