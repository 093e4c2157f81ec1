//! A node: a kernel serving the project's bench (`lrpc:bench/bench`) and key-value
//! (`lrpc:kv/store`) servers to the network. The `lrpc-remote-node` binary, the tests' and
//! the benchmarks' remote kernels.
//!
//! With a NATS endpoint (`--listen nats://HOST:PORT[/PREFIX]`, or `--nats`), the node
//! subscribes its exports in a queue group (`--group NAME`, default `lrpc`), so every node
//! in that group shares the calls, and it answers the line `served` on its standard input
//! with `served N`: the calls it has answered with a result over NATS.
//!
//! With `--tls-cert` and `--tls-key` its `tcp:` listeners serve over TLS (with
//! `--tls-client-ca`, callers need a certificate that CA signed). A `tcp:` listener that other
//! machines can reach is refused in clear unless `--insecure` is given.

use crate::endpoint::Endpoint;
use crate::error::ServeError;
use crate::local::LocalPool;
use crate::server::{RemoteServer, ServeOptions};
use crate::tls::{ServerTls, ServerTlsFiles};
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
    /// TLS on its `tcp:` listeners (`--tls-cert`, `--tls-key`, `--tls-client-ca`).
    pub tls: Option<ServerTlsFiles>,
    /// Whether a `tcp:` listener reachable from other machines may serve in clear
    /// (`--insecure`).
    pub insecure: bool,
}

impl NodeConfig {
    /// Parses `--listen tcp:HOST:PORT | unix:PATH | nats://HOST:PORT[/PREFIX]` (repeatable;
    /// `--nats URL` is `--listen` for a NATS URL), `--group NAME`, `--workers N`,
    /// `--wait-us N`, `--tls-cert FILE --tls-key FILE [--tls-client-ca FILE]`, `--insecure`.
    ///
    /// A `tcp:` listener that other machines can reach (not loopback) is refused without TLS
    /// unless `--insecure` is given, as `[network] listen` in a deployment's config.
    pub fn from_args(args: impl IntoIterator<Item = String>) -> Result<NodeConfig, String> {
        let mut c = NodeConfig {
            listen: Vec::new(),
            workers: 2,
            wait: Duration::ZERO,
            group: "lrpc".into(),
            tls: None,
            insecure: false,
        };
        let (mut cert, mut key, mut client_ca) = (None, None, None);
        let mut args = args.into_iter();
        while let Some(a) = args.next() {
            if a == "--insecure" {
                c.insecure = true;
                continue;
            }
            let v = args.next().ok_or_else(|| format!("{a} needs a value"))?;
            match a.as_str() {
                "--tls-cert" => cert = Some(v.into()),
                "--tls-key" => key = Some(v.into()),
                "--tls-client-ca" => client_ca = Some(v.into()),
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
        c.tls = match (cert, key, client_ca) {
            (Some(cert), Some(key), client_ca) => Some(ServerTlsFiles {
                cert,
                key,
                client_ca,
            }),
            (None, None, None) => None,
            _ => return Err("TLS needs both --tls-cert and --tls-key".into()),
        };
        if c.tls.is_none()
            && !c.insecure
            && let Some(e) = c
                .listen
                .iter()
                .find(|e| matches!(e, Endpoint::Tcp(_)) && !e.is_local())
        {
            return Err(format!(
                "`{e}` is reachable from other machines: serve it over TLS (--tls-cert, \
                 --tls-key, --tls-client-ca) or in clear with --insecure"
            ));
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
    let tls = match &config.tls {
        Some(files) => Some(ServerTls::load(files).map_err(|e| ServeError::Listen {
            addr: "TLS".into(),
            source: std::io::Error::other(e),
        })?),
        None => None,
    };
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
                    match &tls {
                        Some(tls) => tokio::spawn(server.clone().listen_tls(l, tls.clone())),
                        None => tokio::spawn(server.clone().listen_tcp(l)),
                    };
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
