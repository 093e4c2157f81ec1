//! Remote exports: a kernel's exports served to the network over wRPC.
//!
//! Each procedure of each export is a wRPC function `<export name>` / `<function name>` (for
//! an export made under its interface's name, exactly what `wit-bindgen-wrpc` generates for
//! that WIT interface). An invocation's parameters are read off the connection and checked
//! while they are translated into the A-stack encoding ([`crate::wire`]), the call is made by
//! a driver domain of the kernel ([`LocalPool`]), and the result goes back in the wire
//! encoding. A call that fails locally (the server trapped, was terminated, refused the
//! arguments) closes the connection without a result, which the caller sees as a failed
//! call; malformed parameters never reach a domain.

use crate::client::{param_types, read_values, result_types};
use crate::error::ServeError;
use crate::local::{LocalExport, LocalPool};
use crate::wire;
use futures::StreamExt as _;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt as _, BufReader};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::Semaphore;

type Rx = BufReader<Pin<Box<dyn AsyncRead + Send + Sync>>>;
type Tx = Pin<Box<dyn AsyncWrite + Send + Sync>>;
/// The invocation context: the connection's permit, held until its call ends.
type Cx = tokio::sync::OwnedSemaphorePermit;
type WrpcServer = wrpc_transport::Server<Cx, Rx, Tx>;

/// How a remote export server behaves.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Connections served at one time; further ones wait in the listener's backlog.
    pub max_connections: usize,
    /// Largest parameters accepted, on the wire and translated.
    pub max_request: usize,
    /// How long a peer may take to send its parameters.
    pub read_deadline: Duration,
    /// Waiting added before every call: models server time for the MultiRPC experiment
    /// (time the server spends without using a processor). Zero in production.
    pub server_wait: Duration,
}

impl Default for ServeOptions {
    fn default() -> ServeOptions {
        ServeOptions {
            max_connections: 256,
            max_request: 64 << 20,
            read_deadline: Duration::from_secs(5),
            server_wait: Duration::ZERO,
        }
    }
}

/// Serves a [`LocalPool`]'s exports to the network.
pub struct RemoteServer {
    pub(crate) pool: Arc<LocalPool>,
    pub(crate) options: ServeOptions,
    wrpc: Arc<WrpcServer>,
    permits: Arc<Semaphore>,
}

impl RemoteServer {
    /// Registers every procedure of every export of `pool` and starts serving invocations
    /// (connections are accepted by [`RemoteServer::listen_tcp`] and
    /// [`RemoteServer::listen_unix`]). Must run inside a tokio runtime.
    pub async fn new(
        pool: Arc<LocalPool>,
        options: ServeOptions,
    ) -> Result<Arc<RemoteServer>, ServeError> {
        let wrpc = Arc::new(WrpcServer::new());
        let server = Arc::new(RemoteServer {
            permits: Arc::new(Semaphore::new(options.max_connections.max(1))),
            pool,
            options,
            wrpc,
        });
        for export in server.pool.exports() {
            for (proc, p) in export.plan.procs.iter().enumerate() {
                let invocations = wrpc_transport::Serve::serve(
                    &*server.wrpc,
                    &export.name,
                    &p.name,
                    Arc::from([]),
                )
                .await
                .map_err(|e| {
                    ServeError::Register(format!("{}#{}", export.name, p.name), e.to_string())
                })?;
                let export = export.clone();
                let me = server.clone();
                tokio::spawn(async move {
                    let mut invocations = std::pin::pin!(invocations);
                    while let Some(inv) = invocations.next().await {
                        let Ok((permit, out, inc)) = inv else {
                            continue;
                        };
                        let me = me.clone();
                        let export = export.clone();
                        tokio::spawn(async move {
                            me.handle(&export, proc, out, inc).await;
                            drop(permit);
                        });
                    }
                });
            }
        }
        Ok(server)
    }

    async fn handle(
        &self,
        export: &LocalExport,
        proc: usize,
        mut out: wrpc_transport::frame::Outgoing,
        mut inc: wrpc_transport::frame::Incoming,
    ) {
        let plan = &export.plan;
        let (Ok(ptys), Ok(rtys)) = (param_types(plan, proc), result_types(plan, proc)) else {
            return;
        };
        let args = match tokio::time::timeout(
            self.options.read_deadline,
            read_values(plan, &ptys, &mut inc, self.options.max_request),
        )
        .await
        {
            Ok(Ok(Ok(args))) => args,
            Ok(Ok(Err(e))) => {
                tracing::debug!(export = %export.name, proc, "refused parameters: {e}");
                return;
            }
            _ => return,
        };
        drop(inc);
        if !self.options.server_wait.is_zero() {
            tokio::time::sleep(self.options.server_wait).await;
        }
        let result = match self.pool.call(export, proc, args).await {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!(export = %export.name, proc, "call failed: {e}");
                return;
            }
        };
        let Ok(bytes) = wire::to_wire(plan, &rtys, &result) else {
            return;
        };
        if !bytes.is_empty() && out.write_bytes(bytes.freeze()).await.is_err() {
            return;
        }
        let _ = out.shutdown().await;
    }

    /// Accepts connections on `listener` until the task is dropped.
    pub async fn listen_tcp(self: Arc<Self>, listener: TcpListener) {
        loop {
            let Ok(permit) = self.permits.clone().acquire_owned().await else {
                return;
            };
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            let (rx, tx) = stream.into_split();
            self.accept(Box::pin(rx), Box::pin(tx), permit);
        }
    }

    /// Accepts connections on `listener` until the task is dropped.
    pub async fn listen_unix(self: Arc<Self>, listener: UnixListener) {
        loop {
            let Ok(permit) = self.permits.clone().acquire_owned().await else {
                return;
            };
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let (rx, tx) = stream.into_split();
            self.accept(Box::pin(rx), Box::pin(tx), permit);
        }
    }

    fn accept(&self, rx: Pin<Box<dyn AsyncRead + Send + Sync>>, tx: Tx, permit: Cx) {
        let wrpc = self.wrpc.clone();
        let deadline = self.options.read_deadline;
        tokio::spawn(async move {
            // The header names the function; the connection and its permit then belong to
            // the function's handler until the call ends.
            let _ =
                tokio::time::timeout(deadline, wrpc.accept(permit, tx, BufReader::new(rx))).await;
        });
    }
}
