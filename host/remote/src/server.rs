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
//! one call after another; the parameters of each are checked the same way, and a failed
//! call answers `failed` and the session goes on. A session is served by a thread of its own
//! with blocking reads and writes: it reads a request, makes the call itself with a driver
//! the pool lends ([`LocalPool::call_blocking`]) and writes the reply, so no other thread is
//! woken on a call's path. Sessions are bounded by [`ServeOptions::max_connections`].
//!
//! **Who may call.** On a TLS listener ([`RemoteServer::listen_tls`]) a caller's verified
//! certificate is its [`Identity`]. An export with an allow list
//! ([`RemoteServer::with_allow`]) serves only callers whose identity carries a name on it;
//! the check is made where a call's export is found, for every call. A refused call on a
//! session is answered `not allowed` with the export's name (the client's
//! [`crate::RemoteError::NotAllowed`]) and the session goes on; a plain wRPC invocation has
//! no error channel, so its connection closes. Callers without an identity (no TLS, a Unix
//! socket, NATS) are refused by such exports. Refusals are counted per export
//! ([`RemoteServer::refused`]).

use crate::error::ServeError;
use crate::local::{LocalExport, LocalPool};
use crate::session::{
    self, ACCEPT, BlockingStream, FAILED, NOT_ALLOWED, REQUEST, RETURNED, SESSION_FUNC,
    SESSION_FUNC_2, SESSION_INSTANCE, Stream,
};
use crate::tls::{Identity, Principal, ServerTls};
use crate::values::{param_types, read_values, result_types};
use crate::wire;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::Semaphore;
use wrpc_transport::frame::{Header, Incoming, Outgoing};

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
    /// Export name -> who may call it, and the calls refused.
    allow: HashMap<String, (Vec<Principal>, AtomicU64)>,
}

/// A connection's caller, when its TLS certificate says who it is.
type Peer = Option<Arc<Identity>>;

impl RemoteServer {
    /// Serves every procedure of every export of `pool` (connections are accepted by
    /// [`RemoteServer::listen_tcp`] and [`RemoteServer::listen_unix`]). Must run inside a
    /// tokio runtime.
    pub async fn new(
        pool: Arc<LocalPool>,
        options: ServeOptions,
    ) -> Result<Arc<RemoteServer>, ServeError> {
        RemoteServer::with_allow(pool, options, HashMap::new()).await
    }

    /// [`RemoteServer::new`], with allow lists: export name -> the names a caller's
    /// certificate must carry one of (see the module docs). An export not named serves every
    /// caller that reaches it.
    pub async fn with_allow(
        pool: Arc<LocalPool>,
        options: ServeOptions,
        allow: HashMap<String, Vec<Principal>>,
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
        if let Some(name) = allow.keys().find(|n| !functions.contains_key(*n)) {
            return Err(ServeError::Register(
                name.clone(),
                "an allow list for an export not served".into(),
            ));
        }
        let allow = allow
            .into_iter()
            .map(|(n, list)| (n, (list, AtomicU64::new(0))))
            .collect();
        Ok(Arc::new(RemoteServer {
            permits: Arc::new(Semaphore::new(options.max_connections.max(1))),
            pool,
            options,
            functions,
            allow,
        }))
    }

    fn function(&self, instance: &str, func: &str) -> Option<&(LocalExport, usize)> {
        self.functions.get(instance)?.get(func)
    }

    /// Whether `peer` may call `export`; a refusal is counted.
    pub(crate) fn admits(&self, export: &str, peer: Option<&Identity>) -> bool {
        let Some((list, refused)) = self.allow.get(export) else {
            return true;
        };
        if peer.is_some_and(|id| list.iter().any(|p| p.matches(id))) {
            return true;
        }
        refused.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(export, ?peer, "caller not on the export's allow list");
        false
    }

    /// The calls refused so far by each export with an allow list (export name, count),
    /// sorted by name.
    pub fn refused(&self) -> Vec<(String, u64)> {
        let mut r: Vec<(String, u64)> = self
            .allow
            .iter()
            .map(|(n, (_, c))| (n.clone(), c.load(Ordering::Relaxed)))
            .collect();
        r.sort();
        r
    }

    /// Serves one connection: a plain wRPC invocation, or a session (handed to a thread of
    /// its own, which takes the connection's permit with it).
    async fn serve(self: Arc<Self>, mut conn: Stream, permit: Cx, peer: Peer) {
        let deadline = self.options.read_deadline;
        let mut rx = BufReader::new(&mut conn);
        let Ok(Ok(Header { instance, name })) =
            tokio::time::timeout(deadline, Header::read(&mut rx)).await
        else {
            return;
        };
        if instance == SESSION_INSTANCE && (name == SESSION_FUNC || name == SESSION_FUNC_2) {
            let accept = if name == SESSION_FUNC_2 {
                session::ACCEPT_2
            } else {
                ACCEPT
            };
            // The opening invocation's parameters: one empty frame on the root path.
            let mut empty = [0u8; 2];
            match tokio::time::timeout(deadline, rx.read_exact(&mut empty)).await {
                Ok(Ok(_)) if empty == [0, 0] => {}
                _ => return,
            }
            // What the client sent ahead of the answer stays first in line.
            let early = rx.buffer().to_vec();
            let accept = async {
                conn.write_all(&accept).await?;
                conn.flush().await
            };
            match tokio::time::timeout(deadline, accept).await {
                Ok(Ok(())) => {}
                _ => return,
            }
            let Ok(stream) = conn.into_blocking() else {
                return;
            };
            let me = self.clone();
            let spawned = std::thread::Builder::new()
                .name("lrpc-session".into())
                .spawn(move || {
                    me.session(stream, early, peer.as_deref());
                    drop(permit);
                });
            if let Err(e) = spawned {
                tracing::warn!("no thread for a session: {e}");
            }
            return;
        }
        // A function without a handler: the connection closes, as with any wRPC server.
        let Some((export, proc)) = self.function(&instance, &name) else {
            tracing::debug!(instance, name, "no such function");
            return;
        };
        // No error channel in plain wRPC: a refused call's connection closes.
        if !self.admits(&instance, peer.as_deref()) {
            return;
        }
        let early = rx.buffer().to_vec();
        let (r, w) = conn.into_split();
        let r: session::BoxedRead = Box::pin(std::io::Cursor::new(early).chain(r));
        let paths: [&[Option<usize>]; 0] = [];
        let inc = Incoming::new(BufReader::new(r), paths, true, |_, _| async {});
        let out = Outgoing::new(w, |_, _| async {});
        self.handle(export, *proc, out, inc).await;
        drop(permit);
    }

    /// A session, on a thread of its own: calls one after another, each read off the
    /// connection (its parameters within [`ServeOptions::read_deadline`]), made on this
    /// thread and answered; the session ends when the client closes it, sends something else
    /// than a request or stays idle for [`ServeOptions::session_idle`].
    fn session(&self, stream: BlockingStream, early: Vec<u8>, peer: Option<&Identity>) {
        let opts = &self.options;
        let Ok(mut tx) = stream.try_clone() else {
            return;
        };
        // One wait of a read (or a write) is bounded by the shorter limit; the idle time and
        // a request's whole time are checked against the clock.
        if stream
            .set_timeouts(
                opts.read_deadline
                    .min(opts.session_idle)
                    .max(Duration::from_millis(1)),
            )
            .is_err()
        {
            return;
        }
        let timed = Timed {
            stream,
            until: None,
        };
        let mut rx =
            std::io::BufReader::new(std::io::Read::chain(std::io::Cursor::new(early), timed));
        let (mut instance, mut func) = (String::new(), String::new());
        let (mut scratch, mut params) = (Vec::new(), Vec::new());
        let mut idle_since = Instant::now();
        // How long the client took to send its last request after our reply.
        let mut gap = Duration::MAX;
        loop {
            if gap < session::SPIN && rx.buffer().is_empty() {
                session::spin_until_readable(&tx, session::SPIN);
            }
            let tag = match session::read_u8(&mut rx) {
                Ok(t) => t,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) && idle_since.elapsed() < opts.session_idle =>
                {
                    continue;
                }
                Err(_) => return,
            };
            if tag != REQUEST && tag != session::TRACED_REQUEST {
                return;
            }
            gap = idle_since.elapsed();
            rx.get_mut().get_mut().1.until = Some(Instant::now() + opts.read_deadline);
            let mut trace = None;
            let read = (|| {
                if tag == session::TRACED_REQUEST {
                    trace = session::read_trace(&mut rx, &mut scratch)?;
                }
                session::read_name(&mut rx, &mut scratch, &mut instance)?;
                session::read_name(&mut rx, &mut scratch, &mut func)?;
                let n = session::read_len(&mut rx, opts.max_request)?;
                session::read_exact_into_blocking(&mut rx, &mut params, n)
            })();
            rx.get_mut().get_mut().1.until = None;
            if read.is_err() {
                return;
            }
            let reply = self.session_call(&instance, &func, &params, peer, trace.as_ref());
            if std::io::Write::write_all(&mut tx, &reply)
                .and_then(|()| std::io::Write::flush(&mut tx))
                .is_err()
            {
                return;
            }
            idle_since = Instant::now();
        }
    }

    /// One call of a session, made on this thread; its reply.
    fn session_call(
        &self,
        instance: &str,
        func: &str,
        params: &[u8],
        peer: Option<&Identity>,
        trace: Option<&crate::trace::TraceContext>,
    ) -> Vec<u8> {
        let span = crate::trace::serving("session", instance, func, trace);
        let _entered = span.enter();
        let reply = self.answer_session_call(instance, func, params, peer);
        let failed = reply.first() != Some(&RETURNED);
        span.record("status", if failed { "failed" } else { "ok" });
        reply
    }

    /// [`RemoteServer::session_call`]'s work, inside its span.
    fn answer_session_call(
        &self,
        instance: &str,
        func: &str,
        params: &[u8],
        peer: Option<&Identity>,
    ) -> Vec<u8> {
        let Some((export, proc)) = self.function(instance, func) else {
            tracing::debug!(instance, func, "no such function");
            return vec![FAILED];
        };
        if !self.admits(instance, peer) {
            let mut reply = vec![NOT_ALLOWED];
            return match session::put_name(&mut reply, instance) {
                Ok(()) => reply,
                Err(_) => vec![FAILED],
            };
        }
        let (plan, proc) = (&export.plan, *proc);
        let Ok(ptys) = param_types(plan, proc) else {
            return vec![FAILED];
        };
        // Checked while translated into the A-stack encoding, before a domain sees a byte.
        let args = match wire::from_wire_whole(plan, &ptys, params, self.options.max_request) {
            Ok(args) => args,
            Err(e) => {
                tracing::debug!(export = %export.name, proc, "refused parameters: {e}");
                return vec![FAILED];
            }
        };
        if !self.options.server_wait.is_zero() {
            std::thread::sleep(self.options.server_wait);
        }
        let r = self
            .pool
            .call_blocking(export, proc, &args, self.options.read_deadline);
        session_reply(plan, proc, r, &export.name)
    }

    async fn handle(&self, export: &LocalExport, proc: usize, mut out: Outgoing, inc: Incoming) {
        // Plain wRPC has no place for a trace context: the span starts a trace of its own.
        let function = export.plan.procs.get(proc).map_or("", |p| p.name.as_str());
        let span = crate::trace::serving("wrpc", &export.name, function, None);
        let answered =
            tracing::Instrument::instrument(self.answer(export, proc, inc), span.clone());
        let Some(bytes) = answered.await else {
            span.record("status", "failed");
            return;
        };
        span.record("status", "ok");
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
            self.accept(Stream::Tcp(stream), permit);
        }
    }

    /// Accepts TLS connections on `listener` until the task is dropped. The handshake must
    /// end within [`ServeOptions::read_deadline`]; with a client CA, a caller without a
    /// certificate it signed is refused there. A caller's certificate is its [`Identity`].
    pub async fn listen_tls(self: Arc<Self>, listener: TcpListener, tls: Arc<ServerTls>) {
        loop {
            let Ok(permit) = self.permits.clone().acquire_owned().await else {
                return;
            };
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            let (me, tls) = (self.clone(), tls.clone());
            // The handshake in the connection's own task: a caller that stalls in it never
            // holds up the accept loop.
            tokio::spawn(async move {
                let handshake = tls.acceptor.accept(stream);
                let s = match tokio::time::timeout(me.options.read_deadline, handshake).await {
                    Ok(Ok(s)) => s,
                    Ok(Err(e)) => {
                        tracing::debug!("TLS handshake refused: {e}");
                        return;
                    }
                    Err(_) => return,
                };
                let peer = s
                    .get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|c| c.first())
                    .map(|c| Arc::new(Identity::of(c)));
                me.serve(Stream::TlsServer(Box::new(s)), permit, peer).await;
            });
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
            self.accept(Stream::Unix(stream), permit);
        }
    }

    fn accept(self: &Arc<Self>, conn: Stream, permit: Cx) {
        let me = self.clone();
        // A task per connection before its header is read: a connection opened ahead of its
        // calls never holds up the accept loop.
        tokio::spawn(me.serve(conn, permit, None));
    }
}

/// A session's reply to a call that reached the kernel: its results, or the failure.
fn session_reply(
    plan: &lrpc_kernel::presentation::InterfacePlan,
    proc: usize,
    r: Result<Vec<u8>, crate::error::RemoteError>,
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
                crate::wire::put_uleb(&mut reply, u64::from(n));
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

/// A session's connection, read with a bound on a whole request's time: past `until`, a read
/// fails as timed out.
struct Timed {
    stream: BlockingStream,
    until: Option<Instant>,
}

impl std::io::Read for Timed {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.until.is_some_and(|t| Instant::now() >= t) {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        self.stream.read(buf)
    }
}
