//! `lrpc-remote-node`: a kernel serving the bench (`lrpc:bench/bench`) and key-value
//! (`lrpc:kv/store`) servers to the network.
//!
//! ```text
//! lrpc-remote-node [--listen tcp:HOST:PORT | unix:PATH]... [--workers N] [--wait-us N]
//! ```
//!
//! Prints `listening <endpoint>` for every listener once it accepts connections (port 0
//! picks a free port), then serves until killed. `--wait-us` adds that much waiting before
//! every call (server time for the MultiRPC experiment).

use anyhow::{Context as _, bail};
use lrpc::{DomainOptions, Kernel, artifacts};
use lrpc_remote::{Endpoint, LocalPool, RemoteServer, ServeOptions};
use std::io::Write as _;
use std::sync::Arc;
use std::time::Duration;

fn main() -> anyhow::Result<()> {
    let mut listen = Vec::new();
    let mut workers = 2usize;
    let mut wait = Duration::ZERO;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().with_context(|| format!("{a} needs a value"));
        match a.as_str() {
            "--listen" => listen.push(value()?.parse::<Endpoint>().map_err(anyhow::Error::msg)?),
            "--workers" => workers = value()?.parse()?,
            "--wait-us" => wait = Duration::from_micros(value()?.parse()?),
            other => bail!("unknown argument `{other}`"),
        }
    }
    if listen.is_empty() {
        listen.push(Endpoint::Tcp("127.0.0.1:0".into()));
    }
    let kernel = Kernel::new()?;
    let replicas = DomainOptions {
        replicas: workers.max(1),
        ..Default::default()
    };
    let bench = kernel.domain_with("bench-server", artifacts::BENCH_SERVER, replicas)?;
    kernel.export(&bench, "lrpc:bench/bench")?;
    let kv = kernel.domain("kv-server", artifacts::KV_SERVER)?;
    kernel.export(&kv, "lrpc:kv/store")?;
    let pool = Arc::new(LocalPool::new(
        &kernel,
        &[
            ("lrpc:bench/bench", "lrpc:bench/bench"),
            ("lrpc:kv/store", "lrpc:kv/store"),
        ],
        workers,
        1024,
    )?);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let server = RemoteServer::new(
            pool,
            ServeOptions {
                server_wait: wait,
                ..Default::default()
            },
        )
        .await?;
        let mut out = std::io::stdout().lock();
        for e in &listen {
            match e {
                Endpoint::Tcp(a) => {
                    let l = tokio::net::TcpListener::bind(a.as_str()).await?;
                    writeln!(out, "listening tcp:{}", l.local_addr()?)?;
                    tokio::spawn(server.clone().listen_tcp(l));
                }
                Endpoint::Unix(p) => {
                    let _ = std::fs::remove_file(p);
                    let l = tokio::net::UnixListener::bind(p)?;
                    writeln!(out, "listening {e}")?;
                    tokio::spawn(server.clone().listen_unix(l));
                }
            }
        }
        out.flush()?;
        drop(out);
        std::future::pending::<()>().await;
        Ok(())
    })
}
