//! Puts the kernel and a deployment's plugin chains inside an existing axum application:
//! the application keeps its own routes (here a native `/native` handler answering like the
//! hello plugin) and merges the edge server's router beside them.
//!
//!     cargo run --release -p lrpc-runtime --example embed -- CONFIG [ADDR]
//!
//! The load benchmark (`host/runtime/bench/run.sh`) uses it to measure the native handler
//! and the plugin routes in one process. `/hop` answers like `/native`, but from one of two
//! threads of its own, as a route's worker pool does (a queue there, a oneshot back): the
//! ceiling of any route that keeps its work off the reactor, whatever the work. Short plugin
//! routes run on the reactor instead (see `lrpc_runtime::edge`). `/spin/{NANOS}/…` answers
//! like `/native` after busy-waiting NANOS nanoseconds: what a given amount of processor
//! time per request costs the native handler's throughput on the machine at hand.

use anyhow::Context as _;
use axum::Router;
use axum::extract::Path;
use axum::routing::get;
use lrpc_runtime::config::Config;
use lrpc_runtime::deploy::Deployment;
use lrpc_runtime::edge::{Edge, shutdown_signal};
use std::sync::Arc;

/// The answer of `/native` and `/hop`, as the hello plugin gives it to an anonymous caller.
fn greeting(rest: &str) -> String {
    format!("hello anonymous at GET /{rest}\n")
}

async fn native(Path(rest): Path<String>) -> ([(&'static str, &'static str); 1], String) {
    ([("content-type", "text/plain")], greeting(&rest))
}

async fn spin(
    Path((nanos, rest)): Path<(u64, String)>,
) -> ([(&'static str, &'static str); 1], String) {
    let start = std::time::Instant::now();
    while start.elapsed() < std::time::Duration::from_nanos(nanos.min(1_000_000)) {
        std::hint::spin_loop();
    }
    ([("content-type", "text/plain")], greeting(&rest))
}

/// A request for the `/hop` threads: the path, and where its answer goes.
type Hop = (String, tokio::sync::oneshot::Sender<String>);

/// Starts the two `/hop` threads; answers their queue.
fn hop_threads() -> std::io::Result<crossbeam_channel::Sender<Hop>> {
    let (tx, rx) = crossbeam_channel::unbounded::<Hop>();
    for k in 0..2 {
        let rx = rx.clone();
        std::thread::Builder::new()
            .name(format!("hop#{k}"))
            .spawn(move || {
                for (rest, reply) in rx {
                    let _ = reply.send(greeting(&rest));
                }
            })?;
    }
    Ok(tx)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let config = args.next().context("usage: embed CONFIG [ADDR]")?;
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:8080".into());
    let deployment = Deployment::start(Config::load(config.as_ref())?)?;
    let edge = Edge::start(Arc::new(deployment))?;
    let hops = hop_threads()?;
    let hop = move |Path(rest): Path<String>| {
        let hops = hops.clone();
        async move {
            let (tx, rx) = tokio::sync::oneshot::channel();
            let _ = hops.send((rest, tx));
            let body = rx.await.unwrap_or_default();
            ([("content-type", "text/plain")], body)
        }
    };
    let app = Router::new()
        .route("/native/{*rest}", get(native))
        .route("/hop/{*rest}", get(hop))
        .route("/spin/{nanos}/{*rest}", get(spin))
        .merge(edge.router());
    // Caught from here on, before the first request can be answered.
    let stop = shutdown_signal()?;
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening on http://{}", listener.local_addr()?);
    // As `lrpc serve` does: a streamed response's head and body go out without waiting
    // for the client's delayed acknowledgement.
    use axum::serve::ListenerExt as _;
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, app)
        .with_graceful_shutdown(stop)
        .await?;
    tokio::task::spawn_blocking(move || edge.shutdown()).await?;
    Ok(())
}
