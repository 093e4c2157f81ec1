//! The NATS transport: calls over a message bus, served by several kernels in one queue group.
//!
//! wRPC's NATS transport (`wrpc-transport-nats` 0.31, on `async-nats` 0.49) carries an
//! invocation as messages: the client publishes a handshake on the function's subject
//! `[PREFIX.]wrpc.0.0.1.<instance>.<function>` carrying the parameters, the server that takes
//! it answers with a subject of its own for any further parameter bytes, and the results come
//! back on the client's inbox; an empty message ends each direction. Servers subscribe to the
//! function subjects in a **queue group**, so NATS hands each invocation to exactly one of
//! the kernels serving that export: several kernels share the load, and one that leaves (or
//! dies) stops receiving calls as soon as NATS notices its connection closed.
//!
//! * Client: a [`NatsEndpoint`] (`nats://HOST:PORT[/PREFIX]`) owns one NATS connection,
//!   opened by the first call and shared by every call of every binding made from that
//!   endpoint or its clones; `async-nats` reconnects it when the server restarts (and
//!   resubscribes), so later calls succeed again without new bindings. The binding's
//!   deadline, in-flight bound and statuses apply as over TCP: no server in the group
//!   (NATS's "no responders") is [`RemoteError::Unreachable`], like nobody listening; no
//!   result in time is [`RemoteError::Timeout`]. Unlike a TCP connection, the bus does not
//!   tell a caller that the kernel serving its call died: such a call ends at its deadline
//!   (`DeadlineExceeded`), and the next one goes to a kernel still in the group.
//! * Server: [`RemoteServer::bind_nats`] subscribes every procedure of every export in a
//!   queue group; [`RemoteServer::listen_nats`] takes invocations while fewer than
//!   `ServeOptions::max_connections` calls are in progress and hands each to the same
//!   checking translation as TCP ([`crate::wire`], via `read_values`) and to the driver pool.
//!   Invocations not yet taken wait in the connection's subscription buffer, bounded to
//!   `4 × max_connections` per procedure: past that NATS drops them (a slow consumer) and
//!   their callers see their deadline pass; nothing buffers without bound.
//!
//! The server side builds on `wrpc-transport-nats`, and so on `wrpc-transport` 0.29 while TCP
//! and Unix use 0.30; both are in the build, 0.29 under the name `wrpc-transport-nats-base`
//! for its `Serve` trait only. The client side speaks the same protocol with `async-nats`
//! itself (see `Caller`: `wrpc-transport-nats`'s client can lose a server's answer). The
//! value encoding ([`crate::wire`]) is ours and the same on every transport.

use crate::client::read_result;
use crate::error::{RemoteError, ServeError};
use crate::local::LocalExport;
use crate::server::RemoteServer;
use bytes::Bytes;
use futures::stream::{BoxStream, SelectAll};
use futures::{Stream, StreamExt as _};
use lrpc::InterfacePlan;
use lrpc_presentation::Ty;
use std::collections::HashMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::pin::Pin;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWriteExt as _, ReadBuf};
use tokio::sync::{OnceCell, Semaphore, mpsc};
use wrpc_transport_nats::{NatsContext, Reader, SubjectWriter};
use wrpc_transport_nats_base::Serve as _;

/// A NATS server and a subject prefix: `nats://HOST:PORT` or `nats://HOST:PORT/PREFIX`,
/// e.g. `nats://127.0.0.1:4222/lrpc.prod`. The prefix (dot-separated tokens, no spaces,
/// `*` or `>`) goes before wRPC's subjects, so deployments on one NATS server stay apart;
/// without one the subjects are wRPC's own, as a `wit-bindgen-wrpc` peer with an empty prefix
/// uses them.
///
/// Clones share one connection, opened by the first call (see the module docs) on the tokio
/// runtime that makes it, which must outlive the endpoint's use.
#[derive(Clone)]
pub struct NatsEndpoint {
    server: String,
    prefix: String,
    conn: Arc<OnceCell<Caller>>,
}

impl NatsEndpoint {
    /// The endpoint for the NATS server at `host:port` with subject prefix `prefix` (may be
    /// empty).
    pub fn new(server: &str, prefix: &str) -> Result<NatsEndpoint, String> {
        if !server
            .rsplit_once(':')
            .is_some_and(|(h, p)| !h.is_empty() && !h.contains('/') && p.parse::<u16>().is_ok())
        {
            return Err(format!("`{server}` is not HOST:PORT"));
        }
        let bad_token = |t: &str| {
            t.is_empty()
                || t.chars()
                    .any(|c| c.is_whitespace() || c == '*' || c == '>' || c == '/')
        };
        if !prefix.is_empty() && prefix.split('.').any(bad_token) {
            return Err(format!("`{prefix}` is not a NATS subject prefix"));
        }
        Ok(NatsEndpoint {
            server: server.to_owned(),
            prefix: prefix.to_owned(),
            conn: Arc::default(),
        })
    }

    /// The server's `host:port`.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The subject prefix (empty for none).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    fn url(&self) -> String {
        format!("nats://{}", self.server)
    }

    fn unreachable(&self, kind: std::io::ErrorKind, what: impl fmt::Display) -> RemoteError {
        RemoteError::Unreachable {
            addr: self.to_string(),
            source: std::io::Error::new(kind, what.to_string()),
        }
    }

    /// The shared connection, opened on first use; a failed attempt is not kept, so the next
    /// call tries again.
    async fn caller(&self) -> Result<&Caller, RemoteError> {
        self.conn
            .get_or_try_init(|| async {
                let nats = async_nats::ConnectOptions::new()
                    .connect(self.url())
                    .await
                    .map_err(|e| self.unreachable(std::io::ErrorKind::ConnectionRefused, e))?;
                Caller::new(nats).await
            })
            .await
    }
}

/// The client side of an endpoint's connection: one subscription on an inbox of its own
/// (`_INBOX.<unique>.>`) receives every answer to every call, and a routing task hands each
/// message to the call it belongs to.
///
/// This is wRPC's NATS protocol, as `wrpc-transport-nats` speaks it, but not its client:
/// that client registers a call's subjects by a command to its routing task, sent on one
/// channel while the messages arrive on another, and the task can see the server's answer
/// before the command (a command sent just before by another task, not yet written into
/// the channel, holds back the ones behind it; or the routing task is descheduled between
/// looking at one channel and the other). The answer is then dropped as addressed to nobody
/// and the call waits for its deadline, about once in 10 000 calls on a loaded machine.
/// Here a call is entered in the routing table before its invocation is published, so its
/// answers always find it.
struct Caller {
    nats: async_nats::Client,
    /// The inbox subject with its trailing dot; a call's subject is this and its number.
    inbox: String,
    next: AtomicU64,
    routes: Arc<Routes>,
    router: tokio::task::JoinHandle<()>,
}

/// The calls waiting for answers, by number.
type Routes = Mutex<HashMap<u64, mpsc::Sender<async_nats::Message>>>;

/// Messages a call's channel holds before the routing task waits for the call to read them
/// (the handshake answer and the result chunks as they come).
const CALL_QUEUE: usize = 32;

fn lock(
    routes: &Routes,
) -> std::sync::MutexGuard<'_, HashMap<u64, mpsc::Sender<async_nats::Message>>> {
    routes.lock().unwrap_or_else(|p| p.into_inner())
}

impl Caller {
    async fn new(nats: async_nats::Client) -> Result<Caller, RemoteError> {
        let mut inbox = nats.new_inbox();
        inbox.push('.');
        let sub = nats
            .subscribe(format!("{inbox}>"))
            .await
            .map_err(|e| RemoteError::PeerFailed(format!("subscribing to the inbox: {e}")))?;
        let routes = Arc::new(Routes::default());
        let router = tokio::spawn(route(sub, inbox.clone(), routes.clone()));
        Ok(Caller {
            nats,
            inbox,
            next: AtomicU64::new(0),
            routes,
            router,
        })
    }

    /// A new call, entered in the routing table.
    fn start(&self) -> Pending<'_> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel(CALL_QUEUE);
        lock(&self.routes).insert(id, tx);
        let subject = format!("{}{id}", self.inbox);
        Pending {
            results: wrpc_transport_nats::result_subject(&subject),
            subject,
            id,
            rx,
            routes: &self.routes,
        }
    }
}

impl Drop for Caller {
    fn drop(&mut self) {
        self.router.abort();
    }
}

/// Hands every message on the inbox to the call it is addressed to: `<inbox><call>` (the
/// handshake's answer) or `<inbox><call>.results`.
async fn route(mut sub: async_nats::Subscriber, inbox: String, routes: Arc<Routes>) {
    while let Some(msg) = sub.next().await {
        let id = msg
            .subject
            .as_str()
            .strip_prefix(inbox.as_str())
            .and_then(|rest| rest.split('.').next())
            .and_then(|id| id.parse::<u64>().ok());
        let tx = id.and_then(|id| lock(&routes).get(&id).cloned());
        let Some(tx) = tx else {
            // An answer to a call that ended (its deadline passed, or the end of a result
            // already read).
            tracing::trace!(subject = %msg.subject, "message for no call");
            continue;
        };
        // The call reads its channel while it waits; one that ended dropped it.
        let _ = tx.send(msg).await;
    }
}

/// A call in progress: its subjects, and the channel its answers arrive on. Dropping it
/// takes the call out of the routing table.
struct Pending<'a> {
    subject: String,
    results: String,
    id: u64,
    rx: mpsc::Receiver<async_nats::Message>,
    routes: &'a Routes,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        lock(self.routes).remove(&self.id);
    }
}

/// A call's result stream: the payloads of the messages on its results subject, ended by an
/// empty one.
struct Results<'a> {
    call: Pending<'a>,
    buf: Bytes,
    ended: bool,
}

impl AsyncRead for Results<'_> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        loop {
            if !self.buf.is_empty() {
                let n = self.buf.len().min(out.remaining());
                let chunk = self.buf.split_to(n);
                out.put_slice(&chunk);
                return Poll::Ready(Ok(()));
            }
            if self.ended || out.remaining() == 0 {
                return Poll::Ready(Ok(()));
            }
            match self.call.rx.poll_recv(cx) {
                Poll::Ready(Some(msg)) => {
                    if msg.subject.as_str() != self.call.results {
                        continue;
                    }
                    if msg.payload.is_empty() {
                        self.ended = true;
                    }
                    self.buf = msg.payload;
                }
                Poll::Ready(None) => self.ended = true,
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl PartialEq for NatsEndpoint {
    fn eq(&self, other: &NatsEndpoint) -> bool {
        self.server == other.server && self.prefix == other.prefix
    }
}

impl Eq for NatsEndpoint {}

impl Hash for NatsEndpoint {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.server.hash(state);
        self.prefix.hash(state);
    }
}

impl fmt::Debug for NatsEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NatsEndpoint({self})")
    }
}

impl fmt::Display for NatsEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "nats://{}", self.server)?;
        if !self.prefix.is_empty() {
            write!(f, "/{}", self.prefix)?;
        }
        Ok(())
    }
}

impl FromStr for NatsEndpoint {
    type Err = String;
    fn from_str(s: &str) -> Result<NatsEndpoint, String> {
        let rest = s
            .strip_prefix("nats://")
            .ok_or_else(|| format!("`{s}` is not nats://HOST:PORT[/PREFIX]"))?;
        let (server, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        NatsEndpoint::new(server, prefix).map_err(|e| format!("`{s}`: {e}"))
    }
}

/// One call over NATS: parameters already in the wire encoding, the A-stack encoded result.
/// The caller applies the deadline and the in-flight bound.
///
/// wRPC's protocol: the invocation goes to the function's subject with the call's inbox
/// subject to answer on and as much of the parameters as a message holds; the server that
/// takes it answers on that subject with a subject of its own, where the rest of the
/// parameters and an empty message (their end) go; the results come on the call's subject
/// followed by `.results`, ended by an empty message.
pub(crate) async fn call(
    endpoint: &NatsEndpoint,
    instance: &str,
    func: &str,
    mut params: Bytes,
    plan: &InterfacePlan,
    tys: &[&Ty],
    max_reply: usize,
) -> Result<Vec<u8>, RemoteError> {
    let caller = endpoint.caller().await?;
    let failed = |e: &dyn fmt::Display| RemoteError::PeerFailed(e.to_string());
    let mut call = caller.start();
    let chunk = caller
        .nats
        .server_info()
        .max_payload
        .saturating_sub(call.subject.len())
        .max(1);
    let first = params.split_to(chunk.min(params.len()));
    let to = wrpc_transport_nats::invocation_subject(&endpoint.prefix, instance, func);
    caller
        .nats
        .publish_with_reply(to, call.subject.clone(), first)
        .await
        .map_err(|e| failed(&e))?;
    // The handshake's answer: NATS answers here when no server subscribes to the function.
    let answer = loop {
        let msg = call.rx.recv().await.ok_or_else(|| {
            RemoteError::PeerFailed("the connection closed before the result".into())
        })?;
        if msg.subject.as_str() == call.subject {
            break msg;
        }
    };
    match answer.status {
        Some(async_nats::StatusCode::NO_RESPONDERS) => {
            return Err(endpoint.unreachable(
                std::io::ErrorKind::NotConnected,
                format!("no server subscribes to {instance}.{func}"),
            ));
        }
        Some(code) if !code.is_success() => {
            return Err(RemoteError::PeerFailed(match &answer.description {
                Some(d) => format!("received a response with code `{code}` ({d})"),
                None => format!("received a response with code `{code}`"),
            }));
        }
        _ => {}
    }
    let server = answer
        .reply
        .ok_or_else(|| RemoteError::PeerFailed("peer did not specify a reply subject".into()))?;
    // The rest of the parameters, if they did not fit in the invocation, and their end.
    let to = wrpc_transport_nats::param_subject(&server);
    while !params.is_empty() {
        let part = params.split_to(chunk.min(params.len()));
        caller
            .nats
            .publish(to.clone(), part)
            .await
            .map_err(|e| failed(&e))?;
    }
    caller
        .nats
        .publish(to, Bytes::new())
        .await
        .map_err(|e| failed(&e))?;
    let results = Results {
        call,
        buf: Bytes::new(),
        ended: false,
    };
    read_result(plan, tys, results, max_reply).await
}

/// How many calls a NATS listener has answered with a result; readable while it serves.
#[derive(Debug, Clone, Default)]
pub struct ServedCount(Arc<AtomicU64>);

impl ServedCount {
    /// The count so far.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

type Invocations = BoxStream<
    'static,
    (
        LocalExport,
        usize,
        anyhow::Result<(NatsContext, SubjectWriter, Reader)>,
    ),
>;

/// A server's exports subscribed on NATS in a queue group (from
/// [`RemoteServer::bind_nats`]); [`RemoteServer::listen_nats`] serves them.
pub struct NatsListener {
    endpoint: NatsEndpoint,
    group: String,
    // Keeps the transport's routing task alive while invocations are served.
    _client: wrpc_transport_nats::Client,
    invocations: SelectAll<Invocations>,
    served: ServedCount,
}

impl fmt::Debug for NatsListener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NatsListener")
            .field("endpoint", &self.endpoint)
            .field("group", &self.group)
            .finish()
    }
}

impl NatsListener {
    /// The endpoint it is subscribed at.
    pub fn endpoint(&self) -> &NatsEndpoint {
        &self.endpoint
    }

    /// The queue group.
    pub fn group(&self) -> &str {
        &self.group
    }

    /// The number of calls served with a result, shared with the listener.
    pub fn served(&self) -> ServedCount {
        self.served.clone()
    }
}

fn tagged<S>(export: LocalExport, proc: usize, s: S) -> Invocations
where
    S: Stream<Item = anyhow::Result<(NatsContext, SubjectWriter, Reader)>> + Send + 'static,
{
    s.map(move |inv| (export.clone(), proc, inv)).boxed()
}

impl RemoteServer {
    /// Connects to the NATS server of `endpoint` (a connection of the server's own) and
    /// subscribes every procedure of every export in queue group `group`: kernels binding
    /// the same exports in the same group share the calls. Once this returns, invocations
    /// are routed here; [`RemoteServer::listen_nats`] serves them.
    pub async fn bind_nats(
        &self,
        endpoint: &NatsEndpoint,
        group: &str,
    ) -> Result<NatsListener, ServeError> {
        let listen_err = |e: &dyn fmt::Display| ServeError::Listen {
            addr: endpoint.to_string(),
            source: std::io::Error::other(e.to_string()),
        };
        let max = self.options.max_connections.max(1);
        let nats = async_nats::ConnectOptions::new()
            .subscription_capacity(max.saturating_mul(4))
            .connect(endpoint.url())
            .await
            .map_err(|e| listen_err(&e))?;
        let client = wrpc_transport_nats::Client::new(
            nats.clone(),
            endpoint.prefix.as_str(),
            Some(Arc::from(group)),
        )
        .await
        .map_err(|e| listen_err(&format!("{e:#}")))?;
        let mut invocations = SelectAll::new();
        for export in self.pool.exports() {
            for (proc, p) in export.plan.procs.iter().enumerate() {
                let s = client
                    .serve(&export.name, &p.name, Arc::from([]))
                    .await
                    .map_err(|e| {
                        ServeError::Register(
                            format!("{}#{}", export.name, p.name),
                            format!("{e:#}"),
                        )
                    })?;
                invocations.push(tagged(export.clone(), proc, s));
            }
        }
        // A round trip: the NATS server handles a connection's messages in order, so once
        // it answers (here: nobody serves a fresh inbox), it has every subscription above
        // and routes calls from other connections here.
        match nats.request(nats.new_inbox(), Bytes::new()).await {
            Ok(_) => {}
            Err(e) if e.kind() == async_nats::RequestErrorKind::NoResponders => {}
            Err(e) => return Err(listen_err(&e)),
        }
        Ok(NatsListener {
            endpoint: endpoint.clone(),
            group: group.to_owned(),
            _client: client,
            invocations,
            served: ServedCount::default(),
        })
    }

    /// Serves the invocations of `listener` until the task is dropped: at most
    /// `max_connections` calls in progress at once; further invocations wait in the bounded
    /// subscription buffer.
    pub async fn listen_nats(self: Arc<Self>, listener: NatsListener) {
        let NatsListener {
            _client,
            mut invocations,
            served,
            ..
        } = listener;
        let permits = Arc::new(Semaphore::new(self.options.max_connections.max(1)));
        loop {
            let Ok(permit) = permits.clone().acquire_owned().await else {
                return;
            };
            let Some((export, proc, inv)) = invocations.next().await else {
                return;
            };
            let (_cx, out, inc) = match inv {
                Ok(inv) => inv,
                Err(e) => {
                    tracing::debug!(export = %export.name, proc, "refused invocation: {e:#}");
                    continue;
                }
            };
            let me = self.clone();
            let served = served.clone();
            tokio::spawn(async move {
                if me.handle_nats(&export, proc, out, inc).await {
                    served.0.fetch_add(1, Ordering::Relaxed);
                }
                drop(permit);
            });
        }
    }

    /// One invocation: the parameters checked while translated, the call on a driver
    /// thread, the result back. A call that fails ends the result stream without a value
    /// (the caller sees a failed call). True when a result was sent.
    async fn handle_nats(
        &self,
        export: &LocalExport,
        proc: usize,
        mut out: SubjectWriter,
        inc: Reader,
    ) -> bool {
        let Some(bytes) = self.answer(export, proc, inc).await else {
            return false;
        };
        if !bytes.is_empty() && out.write_all(&bytes).await.is_err() {
            return false;
        }
        out.shutdown().await.is_ok()
    }
}
