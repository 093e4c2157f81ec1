//! Throughput of null calls from one and from two threads (LRPC Fig. 2): each thread has
//! its own client domain. On the isolated path the server has one replica per thread; with
//! thread-per-domain message passing every request goes to the server's one thread.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

fn threads(c: &mut Criterion) {
    let mut g = c.benchmark_group("threads");
    g.warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    for (mode, serving) in [
        ("isolated", lrpc_kernel::Serving::Migrate),
        ("message-passing", lrpc_kernel::Serving::OwnThread),
    ] {
        for n in [1usize, 2] {
            bench_threads(&mut g, mode, serving, n);
        }
    }
    g.finish();
}

fn bench_threads(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    mode: &str,
    serving: lrpc_kernel::Serving,
    n: usize,
) {
    {
        let (kernel, _server, first) = lrpc_benches::setup_with(n, serving);
        let mut clients = vec![first];
        for i in 1..n {
            clients.push(lrpc_benches::new_client(&kernel, &format!("client-{i}")));
        }
        let funcs: Vec<_> = clients
            .iter()
            .map(|c| Arc::new(c.func::<(i32,), i32>("null").unwrap()))
            .collect();
        g.throughput(Throughput::Elements(n as u64));
        g.bench_function(format!("{mode}/null/{n}-threads"), |b| {
            b.iter_custom(|iters| {
                // Every thread makes `iters` calls; time until all are done.
                let barrier = Arc::new(Barrier::new(n + 1));
                let handles: Vec<_> = funcs
                    .iter()
                    .map(|f| {
                        let f = f.clone();
                        let barrier = barrier.clone();
                        std::thread::spawn(move || {
                            barrier.wait();
                            let mut left = iters;
                            while left > 0 {
                                let k = left.min(1 << 30) as i32;
                                assert_eq!(f.call((k,)).unwrap(), 0);
                                left -= k as u64;
                            }
                        })
                    })
                    .collect();
                barrier.wait();
                let start = Instant::now();
                for h in handles {
                    h.join().unwrap();
                }
                start.elapsed()
            })
        });
    }
}

criterion_group!(benches, threads);
criterion_main!(benches);
