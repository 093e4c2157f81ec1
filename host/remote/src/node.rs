//! A node: a kernel serving the project's bench (`lrpc:bench/bench`) and key-value
//! (`lrpc:kv/store`) servers to the network. The `lrpc-remote-node` binary, the tests' and
//! the benchmarks' remote kernels.
//!
//! With a NATS endpoint (`--listen nats://HOST:PORT[/PREFIX]`, or `--nats`), the node
//! subscribes its exports in a queue group (`--group NAME`, default `lrpc`), so every node
//! in that group shares the calls, and it answers the line `served` on its standard input
//! with `served N`: the calls it has answered with a result over NATS.

use crate::endpoint::Endpoint;
use crate::error::ServeError;
use crate::local::LocalPool;
use crate::server::{RemoteServer, ServeOptions};
use lrpc_artifacts as artifacts;
use lrpc_kernel::{DomainOptions, Kernel};
use std::io::Write as _;
use std::sync::Arc;
use std::time::Duration;

/// What a node serves and how.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// Where to listen (`tcp:127.0.0.1:0` picks a free port).
    pub listen: Vec<Endpoint>,
    /// Driver threads, and replicas of the bench server.
    pub workers: usize,
    /// Waiting before every call (server time for the MultiRPC experiment).
    pub wait: Duration,
    /// The NATS queue group the node serves in.
    pub group: String,
}

impl NodeConfig {
    /// Parses `--listen tcp:HOST:PORT | unix:PATH | nats://HOST:PORT[/PREFIX]` (repeatable;
    /// `--nats URL` is `--listen` for a NATS URL), `--group NAME`, `--workers N`,
    /// `--wait-us N`.
    pub fn from_args(args: impl IntoIterator<Item = String>) -> Result<NodeConfig, String> {
        let mut c = NodeConfig {
            listen: Vec::new(),
            workers: 2,
            wait: Duration::ZERO,
            group: "lrpc".into(),
        };
        let mut args = args.into_iter();
        while let Some(a) = args.next() {
            let v = args.next().ok_or_else(|| format!("{a} needs a value"))?;
            match a.as_str() {
                "--listen" => c.listen.push(v.parse()?),
                "--nats" => c.listen.push(Endpoint::Nats(v.parse()?)),
                "--group" => {
                    if v.is_empty() || v.contains(|c: char| c.is_whitespace()) {
                        return Err(format!("--group: `{v}` is not a queue group name"));
                    }
                    c.group = v
                }
                "--workers" => c.workers = v.parse().map_err(|e| format!("--workers: {e}"))?,
                "--wait-us" => {
                    c.wait =
                        Duration::from_micros(v.parse().map_err(|e| format!("--wait-us: {e}"))?)
                }
                other => return Err(format!("unknown argument `{other}`")),
            }
        }
        if c.listen.is_empty() {
            c.listen.push(Endpoint::Tcp("127.0.0.1:0".into()));
        }
        Ok(c)
    }
}

/// Runs a node: prints `listening <endpoint>` on stdout for every listener once it accepts
/// connections (for NATS: once its exports are subscribed), then serves until the process
/// ends. With NATS listeners, a line `served` on stdin is answered with `served N`.
pub fn run(config: &NodeConfig) -> Result<(), ServeError> {
    let kernel = Kernel::new()?;
    let replicas = DomainOptions::default().with_replicas(config.workers.max(1));
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
        config.workers,
        1024,
    )?);
    let io = |addr: &Endpoint| {
        let addr = addr.to_string();
        move |source| ServeError::Listen { addr, source }
    };
    // One thread for the network: it only moves bytes (calls run on the driver threads), and
    // a second reactor thread would mostly wake the first.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(io(&Endpoint::Tcp("runtime".into())))?;
    rt.block_on(async {
        let server = RemoteServer::new(
            pool,
            ServeOptions {
                server_wait: config.wait,
                ..Default::default()
            },
        )
        .await?;
        let mut out = std::io::stdout().lock();
        let mut served = Vec::new();
        for e in &config.listen {
            let line = match e {
                Endpoint::Tcp(a) => {
                    let l = tokio::net::TcpListener::bind(a.as_str())
                        .await
                        .map_err(io(e))?;
                    let at = l.local_addr().map_err(io(e))?;
                    tokio::spawn(server.clone().listen_tcp(l));
                    format!("listening tcp:{at}")
                }
                Endpoint::Unix(p) => {
                    let l = crate::endpoint::bind_unix_private(p).map_err(io(e))?;
                    tokio::spawn(server.clone().listen_unix(l));
                    format!("listening {e}")
                }
                Endpoint::Nats(n) => {
                    let l = server.bind_nats(n, &config.group).await?;
                    served.push(l.served());
                    tokio::spawn(server.clone().listen_nats(l));
                    format!("listening {e}")
                }
            };
            writeln!(out, "{line}").map_err(io(e))?;
        }
        out.flush().map_err(io(&config.listen[0]))?;
        drop(out);
        if !served.is_empty() {
            answer_served(served);
        }
        std::future::pending::<()>().await;
        Ok(())
    })
}

/// Answers `served` lines on stdin with the calls served over NATS, on a thread of its own;
/// the end of stdin ends only the answering.
fn answer_served(served: Vec<crate::nats::ServedCount>) {
    let _ = std::thread::Builder::new()
        .name("served".into())
        .spawn(move || {
            for line in std::io::stdin().lines() {
                let Ok(line) = line else { return };
                if line.trim() == "served" {
                    let n: u64 = served.iter().map(|s| s.get()).sum();
                    let mut out = std::io::stdout().lock();
                    let _ = writeln!(out, "served {n}");
                    let _ = out.flush();
                }
            }
        });
}
