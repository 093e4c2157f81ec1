//! Runs requests through a deployment's route in process, without HTTP, on a multi-thread
//! runtime of `THREADS` threads (each sending requests one after another), and prints the
//! time per request: the edge's own share of a request, to read beside the load benchmark's
//! numbers (which include HTTP and the load generator) or under `valgrind --tool=callgrind`.
//!
//!     cargo run --release -p lrpc-runtime --example dispatch -- CONFIG PATH [REQUESTS] [THREADS]
//!
//! e.g. `host/runtime/bench/edge.toml /chain/v1/x 200000 2`.

use anyhow::Context as _;
use lrpc_runtime::config::Config;
use lrpc_runtime::deploy::Deployment;
use lrpc_runtime::edge::Edge;
use std::sync::Arc;
use std::time::Instant;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: dispatch CONFIG PATH [REQUESTS] [THREADS]";
    let config = args.next().context(usage)?;
    let path = args.next().context(usage)?;
    let requests: u64 = args.next().map_or(Ok(100_000), |s| s.parse())?;
    let threads: usize = args.next().map_or(Ok(1), |s| s.parse())?;
    let deployment = Deployment::start(Config::load(config.as_ref())?)?;
    let edge = Edge::start(Arc::new(deployment))?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .enable_all()
        .build()?;
    let headers = vec![
        ("host".to_string(), "127.0.0.1".to_string()),
        ("authorization".to_string(), "Bearer letmein".to_string()),
    ];
    let run = |n: u64| {
        let tasks: Vec<_> = (0..threads.max(1))
            .map(|_| {
                let (edge, path, headers) = (edge.clone(), path.clone(), headers.clone());
                rt.spawn(async move {
                    let mut failed = 0u64;
                    for _ in 0..n {
                        let a = edge.dispatch("GET", &path, &headers, b"").await;
                        failed += u64::from(a.status != 200);
                    }
                    failed
                })
            })
            .collect();
        rt.block_on(async {
            let mut failed = 0;
            for t in tasks {
                failed += t.await.unwrap_or(n);
            }
            failed
        })
    };
    // Warm: every thread's seat made and bound.
    let warm = run(2_000);
    let start = Instant::now();
    let failed = run(requests);
    let took = start.elapsed();
    let total = requests * threads.max(1) as u64;
    println!(
        "{total} requests on {threads} thread(s): {:.0} ns each, {:.0} per second ({failed} not 200, {warm} while warming)",
        took.as_nanos() as f64 / requests as f64,
        total as f64 / took.as_secs_f64(),
    );
    // Whether the route's requests ran on the runtime's threads or went to its workers.
    let metrics = edge.deployment().metrics.encode();
    for line in metrics.lines().filter(|l| {
        (l.starts_with("lrpc_http_route_on_reactor") || l.starts_with("lrpc_http_reactor_handoffs"))
            && !l.contains("/one")
            && !l.contains("/slow")
    }) {
        println!("{line}");
    }
    rt.block_on(async { tokio::task::spawn_blocking(move || edge.shutdown()).await })?;
    Ok(())
}
