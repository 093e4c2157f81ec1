//! Runs requests through a deployment's route in process, without HTTP, on a multi-thread
//! runtime of `THREADS` threads (each sending requests one after another), and prints the
//! time per request: the edge's own share of a request, to read beside the load benchmark's
//! numbers (which include HTTP and the load generator) or under `valgrind --tool=callgrind`.
//!
//!     cargo run --release -p lrpc-runtime --example dispatch -- CONFIG PATH [REQUESTS] [THREADS] [EVICT_KIB]
//!
//! e.g. `host/runtime/bench/edge.toml /chain/v1/x 200000 2`.
//!
//! With `EVICT_KIB`, each thread writes that many KiB of a buffer of its own (a store to each
//! 64-byte line) before every request, as a server's other work (HTTP, the network stack, a
//! load generator beside it) pushes a route's code and data out of the caches between its
//! requests; the time printed is the sum of the requests' own times, without the writing.
//!
//! With `OTEL_EXPORTER_OTLP_ENDPOINT` set (and `OTEL_TRACES_SAMPLER=always_on`), spans are
//! exported as `lrpc serve` exports them: what tracing costs a request, without HTTP.

use anyhow::Context as _;
use lrpc_runtime::config::Config;
use lrpc_runtime::deploy::Deployment;
use lrpc_runtime::edge::Edge;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: dispatch CONFIG PATH [REQUESTS] [THREADS]";
    let config = args.next().context(usage)?;
    let path = args.next().context(usage)?;
    let requests: u64 = args.next().map_or(Ok(100_000), |s| s.parse())?;
    let threads: usize = args.next().map_or(Ok(1), |s| s.parse())?;
    let evict_kib: usize = args.next().map_or(Ok(0), |s| s.parse())?;
    let telemetry = export_spans()?;
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
    // Each thread's requests that did not answer 200, and the time they took: all of it, or
    // with `EVICT_KIB` the sum of each request's own time (without the writing before it).
    let run = |n: u64| {
        let tasks: Vec<_> = (0..threads.max(1))
            .map(|_| {
                let (edge, path, headers) = (edge.clone(), path.clone(), headers.clone());
                rt.spawn(async move {
                    let mut evict = Evict::new(evict_kib);
                    let mut failed = 0u64;
                    let mut took = Duration::ZERO;
                    let all = Instant::now();
                    for _ in 0..n {
                        // The clock is read around each request only when evicting.
                        let start = (evict_kib > 0).then(|| {
                            evict.write();
                            Instant::now()
                        });
                        let a = edge.dispatch("GET", &path, &headers, b"").await;
                        if let Some(start) = start {
                            took += start.elapsed();
                        }
                        failed += u64::from(a.status != 200);
                    }
                    if evict_kib == 0 {
                        took = all.elapsed();
                    }
                    (failed, took)
                })
            })
            .collect();
        rt.block_on(async {
            let (mut failed, mut took) = (0, Duration::ZERO);
            for t in tasks {
                let (f, d) = t.await.unwrap_or((n, Duration::ZERO));
                failed += f;
                took = took.max(d);
            }
            (failed, took)
        })
    };
    // Warm: every thread's seat made and bound.
    let (warm, _) = run(2_000);
    let (failed, took) = run(requests);
    let total = requests * threads.max(1) as u64;
    let evicted = if evict_kib > 0 {
        format!(", {evict_kib} KiB evicted before each")
    } else {
        String::new()
    };
    println!(
        "{total} requests on {threads} thread(s): {:.0} ns each, {:.0} per second ({failed} not 200, {warm} while warming{evicted})",
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
    if let Some(t) = telemetry {
        t.shutdown();
    }
    Ok(())
}

/// Exports spans over OTLP when the environment configures it, as `lrpc serve` does (with
/// no log layer beneath): the running export, to flush at the end.
fn export_spans() -> anyhow::Result<Option<lrpc_runtime::telemetry::Telemetry>> {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let Some((running, layer)) = lrpc_runtime::telemetry::Telemetry::start(None)? else {
        return Ok(None);
    };
    tracing_subscriber::registry().with(layer).init();
    Ok(Some(running))
}

/// A thread's buffer for pushing the route out of the caches between requests.
struct Evict {
    buf: Vec<u8>,
    round: u8,
}

impl Evict {
    fn new(kib: usize) -> Evict {
        Evict {
            buf: vec![0; kib * 1024],
            round: 0,
        }
    }

    /// Stores to every 64-byte line of the buffer (a new value each time, so that no store
    /// can be left out).
    fn write(&mut self) {
        self.round = self.round.wrapping_add(1);
        for line in self.buf.chunks_mut(64) {
            line[0] = self.round;
        }
        std::hint::black_box(&mut self.buf);
    }
}
