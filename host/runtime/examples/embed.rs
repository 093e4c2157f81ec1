//! Puts the kernel and a deployment's plugin chains inside an existing axum application:
//! the application keeps its own routes (here a native `/native` handler answering like the
//! hello plugin) and merges the edge server's router beside them.
//!
//!     cargo run --release -p lrpc-runtime --example embed -- CONFIG [ADDR]
//!
//! The load benchmark (`host/runtime/bench/run.sh`) uses it to measure the native handler
//! and the plugin routes in one process.

use anyhow::Context as _;
use axum::Router;
use axum::extract::Path;
use axum::routing::get;
use lrpc_runtime::config::Config;
use lrpc_runtime::deploy::Deployment;
use lrpc_runtime::edge::{Edge, shutdown_signal};
use std::sync::Arc;

async fn native(Path(rest): Path<String>) -> ([(&'static str, &'static str); 1], String) {
    (
        [("content-type", "text/plain")],
        format!("hello anonymous at GET /{rest}\n"),
    )
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let config = args.next().context("usage: embed CONFIG [ADDR]")?;
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:8080".into());
    let deployment = Deployment::start(Config::load(config.as_ref())?)?;
    let edge = Edge::start(Arc::new(deployment))?;
    let app = Router::new()
        .route("/native/{*rest}", get(native))
        .merge(edge.router());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown_signal())
        .await?;
    tokio::task::spawn_blocking(move || edge.shutdown()).await?;
    Ok(())
}
