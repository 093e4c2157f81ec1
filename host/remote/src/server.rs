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
//!
//! A connection whose invocation opens a session (see `session.rs`) stays open and carries
//! one call after another; the parameters of each are checked the same way, a failed call
//! answers `failed` and the session goes on, and the reply is written by the driver thread
//! that made the call.

use crate::client::{param_types, read_values, result_types};
use crate::error::ServeError;
use crate::local::{LocalExport, LocalPool};
use crate::session::{self, ACCEPT, FAILED, REQUEST, RETURNED, SESSION_FUNC, SESSION_INSTANCE};
use crate::wire;
use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _, BufReader};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{Notify, Semaphore};
use wrpc_transport::frame::{Header, Incoming, Outgoing};

type Rx = BufReader<Pin<Box<dyn AsyncRead + Send + Sync>>>;

/// A connection's sending half, written from a task or (a session's replies) from a driver
/// thread.
enum Tx {
    Tcp(tokio::net::tcp::OwnedWriteHalf),
    Unix(tokio::net::unix::OwnedWriteHalf),
}

impl Tx {
    /// Writes what the socket takes now, without waiting.
    fn try_write(&self, b: &[u8]) -> std::io::Result<usize> {
        match self {
            Tx::Tcp(w) => w.try_write(b),
            Tx::Unix(w) => w.try_write(b),
        }
    }

    async fn writable(&self) -> std::io::Result<()> {
        match self {
            Tx::Tcp(w) => w.writable().await,
            Tx::Unix(w) => w.writable().await,
        }
    }

    async fn write_all(&self, mut b: &[u8]) -> std::io::Result<()> {
        while !b.is_empty() {
            self.writable().await?;
            match self.try_write(b) {
                Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(n) => b = &b[n..],
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn boxed(self) -> Pin<Box<dyn AsyncWrite + Send + Sync>> {
        match self {
            Tx::Tcp(w) => Box::pin(w),
            Tx::Unix(w) => Box::pin(w),
        }
    }
}
/// A connection's permit, held until it closes.
type Cx = tokio::sync::OwnedSemaphorePermit;

/// How a remote export server behaves.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Connections served at one time (sessions kept open by clients count); further ones
    /// wait in the listener's backlog.
    pub max_connections: usize,
    /// Largest parameters accepted, on the wire and translated.
    pub max_request: usize,
    /// How long a peer may take to send its parameters (and a new connection its header).
    pub read_deadline: Duration,
    /// How long a session may stay without a call before it is closed.
    pub session_idle: Duration,
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
            session_idle: Duration::from_secs(120),
            server_wait: Duration::ZERO,
        }
    }
}

/// Serves a [`LocalPool`]'s exports to the network.
pub struct RemoteServer {
    pub(crate) pool: Arc<LocalPool>,
    pub(crate) options: ServeOptions,
    /// Instance (export name) -> function name -> the export and the procedure's index.
    functions: HashMap<String, HashMap<String, (LocalExport, usize)>>,
    permits: Arc<Semaphore>,
}

impl RemoteServer {
    /// Serves every procedure of every export of `pool` (connections are accepted by
    /// [`RemoteServer::listen_tcp`] and [`RemoteServer::listen_unix`]). Must run inside a
    /// tokio runtime.
    pub async fn new(
        pool: Arc<LocalPool>,
        options: ServeOptions,
    ) -> Result<Arc<RemoteServer>, ServeError> {
        let mut functions: HashMap<String, HashMap<String, (LocalExport, usize)>> = HashMap::new();
        for export in pool.exports() {
            let fs = functions.entry(export.name.clone()).or_default();
            for (proc, p) in export.plan.procs.iter().enumerate() {
                if fs.insert(p.name.clone(), (export.clone(), proc)).is_some() {
                    return Err(ServeError::Register(
                        format!("{}#{}", export.name, p.name),
                        "registered twice".into(),
                    ));
                }
            }
        }
        if functions.contains_key(SESSION_INSTANCE) {
            return Err(ServeError::Register(
                SESSION_INSTANCE.into(),
                "the name of the session function".into(),
            ));
        }
        Ok(Arc::new(RemoteServer {
            permits: Arc::new(Semaphore::new(options.max_connections.max(1))),
            pool,
            options,
            functions,
        }))
    }

    fn function(&self, instance: &str, func: &str) -> Option<&(LocalExport, usize)> {
        self.functions.get(instance)?.get(func)
    }

    /// Serves one connection: a plain wRPC invocation, or a session.
    async fn serve(self: Arc<Self>, tx: Tx, mut rx: Rx) {
        let deadline = self.options.read_deadline;
        let Ok(Ok(Header { instance, name })) =
            tokio::time::timeout(deadline, Header::read(&mut rx)).await
        else {
            return;
        };
        if instance == SESSION_INSTANCE && name == SESSION_FUNC {
            // The opening invocation's parameters: one empty frame on the root path.
            let mut empty = [0u8; 2];
            match tokio::time::timeout(deadline, rx.read_exact(&mut empty)).await {
                Ok(Ok(_)) if empty == [0, 0] => {}
                _ => return,
            }
            if tx.write_all(&ACCEPT).await.is_ok() {
                self.session(Arc::new(tx), rx).await;
            }
            return;
        }
        // A function without a handler: the connection closes, as with any wRPC server.
        let Some((export, proc)) = self.function(&instance, &name) else {
            tracing::debug!(instance, name, "no such function");
            return;
        };
        let paths: [&[Option<usize>]; 0] = [];
        let inc = Incoming::new(rx, paths, true, |_, _| async {});
        let out = Outgoing::new(tx.boxed(), |_, _| async {});
        self.handle(export, *proc, out, inc).await;
    }

    /// Calls made one after another on a kept connection (see `session.rs`).
    async fn session(&self, tx: Arc<Tx>, mut rx: Rx) {
        let (mut instance, mut func) = (String::new(), String::new());
        let (mut scratch, mut params) = (Vec::new(), Vec::new());
        // Given once the previous call's reply is out: one call at a time per session. The
        // task does not wait for it until the next request is read, so a reply the driver
        // thread wrote whole wakes nobody.
        let replied = Arc::new(Notify::new());
        replied.notify_one();
        loop {
            let tag = match tokio::time::timeout(self.options.session_idle, rx.read_u8()).await {
                Ok(Ok(t)) => t,
                _ => return,
            };
            if tag != REQUEST {
                return;
            }
            let read = async {
                session::read_name(&mut rx, &mut scratch, &mut instance).await?;
                session::read_name(&mut rx, &mut scratch, &mut func).await?;
                let n = session::read_len(&mut rx, self.options.max_request).await?;
                session::read_exact_into(&mut rx, &mut params, n).await
            };
            match tokio::time::timeout(self.options.read_deadline, read).await {
                Ok(Ok(())) => {}
                _ => return,
            }
            replied.notified().await;
            if !self
                .session_call(&instance, &func, &params, &tx, &replied)
                .await
            {
                if tx.write_all(&[FAILED]).await.is_err() {
                    return;
                }
                replied.notify_one();
            }
        }
    }

    /// One call of a session, handed to a driver thread, which writes the reply and gives
    /// `replied` (what the socket does not take at once goes from a task). False when the
    /// call failed before it reached the kernel: the caller answers.
    async fn session_call(
        &self,
        instance: &str,
        func: &str,
        params: &[u8],
        tx: &Arc<Tx>,
        replied: &Arc<Notify>,
    ) -> bool {
        let Some((export, proc)) = self.function(instance, func) else {
            tracing::debug!(instance, func, "no such function");
            return false;
        };
        let (plan, proc) = (&export.plan, *proc);
        let Ok(ptys) = param_types(plan, proc) else {
            return false;
        };
        // Checked while translated into the A-stack encoding, before a domain sees a byte.
        let args = match wire::from_wire(plan, &ptys, params, self.options.max_request) {
            Ok((args, used)) if used == params.len() => args,
            Ok((_, used)) => {
                tracing::debug!(export = %export.name, proc, "{} bytes after the parameters", params.len() - used);
                return false;
            }
            Err(e) => {
                tracing::debug!(export = %export.name, proc, "refused parameters: {e}");
                return false;
            }
        };
        if !self.options.server_wait.is_zero() {
            tokio::time::sleep(self.options.server_wait).await;
        }
        let (plan, tx, replied) = (plan.clone(), tx.clone(), replied.clone());
        let name = export.name.clone();
        let rt = tokio::runtime::Handle::current();
        let sent = self.pool.submit(export, proc, args, move |r| {
            let reply = session_reply(&plan, proc, r, &name);
            let rest = match tx.try_write(&reply) {
                Ok(n) => reply.get(n..).map(<[u8]>::to_vec).unwrap_or_default(),
                Err(_) => reply,
            };
            if rest.is_empty() {
                replied.notify_one();
            } else {
                rt.spawn(async move {
                    // On failure the connection is broken: the session's next read ends it.
                    let _ = tx.write_all(&rest).await;
                    replied.notify_one();
                });
            }
        });
        match sent.await {
            Ok(()) => true,
            Err(e) => {
                tracing::debug!(export = %export.name, proc, "call failed: {e}");
                false
            }
        }
    }

    async fn handle(&self, export: &LocalExport, proc: usize, mut out: Outgoing, inc: Incoming) {
        let Some(bytes) = self.answer(export, proc, inc).await else {
            return;
        };
        if !bytes.is_empty() && out.write_bytes(bytes.freeze()).await.is_err() {
            return;
        }
        let _ = out.shutdown().await;
    }

    /// One invocation's work, whatever carried it: reads the parameters off `inc` (bounded
    /// in size and time) and checks them while translating them, makes the call on a driver
    /// thread, and returns the results in the wire encoding; `None` when a step failed
    /// (logged), and the caller sees a failed call.
    pub(crate) async fn answer<R: AsyncRead + Unpin>(
        &self,
        export: &LocalExport,
        proc: usize,
        mut inc: R,
    ) -> Option<bytes::BytesMut> {
        let plan = &export.plan;
        let (Ok(ptys), Ok(rtys)) = (param_types(plan, proc), result_types(plan, proc)) else {
            return None;
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
                return None;
            }
            _ => return None,
        };
        drop(inc);
        if !self.options.server_wait.is_zero() {
            tokio::time::sleep(self.options.server_wait).await;
        }
        let result = match self.pool.call(export, proc, args).await {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!(export = %export.name, proc, "call failed: {e}");
                return None;
            }
        };
        wire::to_wire(plan, &rtys, &result).ok()
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
            self.accept(Box::pin(rx), Tx::Tcp(tx), permit);
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
            self.accept(Box::pin(rx), Tx::Unix(tx), permit);
        }
    }

    fn accept(self: &Arc<Self>, rx: Pin<Box<dyn AsyncRead + Send + Sync>>, tx: Tx, permit: Cx) {
        let me = self.clone();
        // A task per connection before its header is read: a connection opened ahead of its
        // calls never holds up the accept loop.
        tokio::spawn(async move {
            me.serve(tx, BufReader::new(rx)).await;
            drop(permit);
        });
    }
}

/// A session's reply to a call that reached the kernel: its results, or the failure.
fn session_reply(
    plan: &lrpc::InterfacePlan,
    proc: usize,
    r: Result<Vec<u8>, crate::RemoteError>,
    name: &str,
) -> Vec<u8> {
    let results = r.map_err(|e| e.to_string()).and_then(|r| {
        let rtys = result_types(plan, proc).map_err(|e| e.to_string())?;
        wire::to_wire(plan, &rtys, &r).map_err(|e| e.to_string())
    });
    match results {
        Ok(b) => match u32::try_from(b.len()) {
            Ok(n) => {
                let mut reply = Vec::with_capacity(b.len() + 6);
                reply.push(RETURNED);
                session::put_leb_u32(&mut reply, n);
                reply.extend_from_slice(&b);
                reply
            }
            Err(_) => vec![FAILED],
        },
        Err(e) => {
            tracing::debug!(export = name, proc, "call failed: {e}");
            vec![FAILED]
        }
    }
}
