//! The NATS transport: calls over a message bus, served by several kernels in one queue group.
//!
//! wRPC's NATS protocol (as `wrpc-transport-nats` 0.31 speaks it) carries an invocation as
//! messages: the client publishes a handshake on the function's subject
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
//!   queue group; [`RemoteServer::listen_nats`] takes invocations as they come and starts
//!   them while fewer than `ServeOptions::max_connections` calls are in progress, handing
//!   each to the same checking translation as TCP ([`crate::wire`], via `read_values`) and
//!   to the driver pool. Invocations not yet started wait, at most `4 × max_connections`
//!   per procedure: past that they are dropped (as NATS drops messages for a slow consumer)
//!   and their callers see their deadline pass. A call's parameters are bounded by
//!   `ServeOptions::max_request` and `read_deadline`; nothing buffers without bound.
//!
//! **Security** is the NATS server's own ([`NatsAuth`]): an endpoint presents
//! credentials (a creds file, an nkey seed, a user and password, or a token) and may require
//! TLS; every subject a connection uses sits under the endpoint's prefix, its inboxes
//! (`PREFIX._INBOX.…`) included, so a NATS user confined to `PREFIX.>` serves and calls
//! that prefix's exports and nothing else. The server's refusals end a call at once as
//! [`RemoteError::Denied`]: a refused connection on its first attempt, a refused subject
//! when the server reports the violation.
//!
//! Both sides speak the protocol over `async-nats` itself, each with one subscription on an
//! inbox of its own and a routing task handing its messages to the calls. A call is entered
//! in the routing table before anything that makes its peer send to it is published (the
//! invocation on the client, the handshake's answer on the server), so no message of a call
//! can arrive before its route. `wrpc-transport-nats`'s client and server register a call's
//! subjects by a command to their routing task instead, which can see the messages first
//! and drop them (see `Caller` and `Inflows`). The value encoding ([`crate::wire`]) is ours
//! and the same on every transport.

use crate::error::{RemoteError, ServeError};
use crate::local::LocalExport;
use crate::server::RemoteServer;
use crate::values::read_result;
use bytes::Bytes;
use futures::StreamExt as _;
use futures::stream::{BoxStream, SelectAll};
use lrpc_kernel::presentation::InterfacePlan;
use lrpc_lock::lock;
use lrpc_presentation::Ty;
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::hash::{Hash, Hasher};
use std::pin::Pin;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::{OnceCell, OwnedSemaphorePermit, Semaphore, mpsc, watch};

mod auth;
mod serve;

use auth::Violations;
pub use auth::{NatsAuth, NatsCredentials, NatsTls};
use serve::PARAMS;
pub use serve::{NatsListener, ServedCount};

/// A NATS server and a subject prefix: `nats://HOST:PORT` or `nats://HOST:PORT/PREFIX`,
/// e.g. `nats://127.0.0.1:4222/lrpc.prod`. The prefix (dot-separated tokens, no spaces,
/// `*` or `>`) goes before wRPC's subjects, so deployments on one NATS server stay apart;
/// without one the subjects are wRPC's own, as a `wit-bindgen-wrpc` peer with an empty prefix
/// uses them.
///
/// Clones share one connection, opened by the first call (see the module docs) on the tokio
/// runtime that makes it, which must outlive the endpoint's use.
///
/// `tls://HOST:PORT[/PREFIX]` is the same over TLS. What the kernel presents to the NATS
/// server (credentials, a CA, a client certificate) is a [`NatsAuth`], given with
/// [`NatsEndpoint::with_auth`].
#[derive(Clone)]
pub struct NatsEndpoint {
    server: String,
    prefix: String,
    /// `tls://`: TLS required.
    tls: bool,
    auth: Arc<NatsAuth>,
    conn: Arc<OnceCell<Client>>,
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
            tls: false,
            auth: Arc::default(),
            conn: Arc::default(),
        })
    }

    /// The same endpoint presenting `auth` to the NATS server (a connection of its own: the
    /// clones made before do not share it).
    pub fn with_auth(self, auth: NatsAuth) -> NatsEndpoint {
        NatsEndpoint {
            auth: Arc::new(auth),
            conn: Arc::default(),
            ..self
        }
    }

    /// The same endpoint over TLS (`tls://`).
    pub fn with_tls_required(self) -> NatsEndpoint {
        NatsEndpoint {
            tls: true,
            conn: Arc::default(),
            ..self
        }
    }

    /// What it presents to the NATS server.
    pub fn auth(&self) -> &NatsAuth {
        &self.auth
    }

    /// Whether TLS is required (`tls://`, or TLS settings in its [`NatsAuth`]).
    pub fn requires_tls(&self) -> bool {
        self.tls || self.auth.tls.is_some()
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
        let scheme = if self.tls { "tls" } else { "nats" };
        format!("{scheme}://{}", self.server)
    }

    /// The options of a connection: inboxes under the prefix, credentials, TLS, and a watch
    /// on the permission violations the server reports.
    fn connect_options(
        &self,
    ) -> Result<(async_nats::ConnectOptions, watch::Receiver<Violations>), RemoteError> {
        let options = auth::connect_options(&self.prefix, self.tls, &self.auth).map_err(|e| {
            RemoteError::Denied {
                addr: self.to_string(),
                reason: format!("the credentials are not usable: {e}"),
            }
        })?;
        Ok(auth::watch_violations(self.to_string(), options))
    }

    fn unreachable(&self, kind: std::io::ErrorKind, what: impl fmt::Display) -> RemoteError {
        RemoteError::Unreachable {
            addr: self.to_string(),
            source: std::io::Error::new(kind, what.to_string()),
        }
    }

    /// The shared connection, opened on first use; a failed attempt is not kept, so the next
    /// call tries again.
    async fn caller(&self) -> Result<&Client, RemoteError> {
        self.conn
            .get_or_try_init(|| async {
                let (options, violations) = self.connect_options()?;
                let nats = options
                    .connect(self.url())
                    .await
                    .map_err(|e| auth::refused_connect(&self.to_string(), &e))?;
                let inbox = Caller::new(nats, ">", route).await.map_err(|e| {
                    RemoteError::PeerFailed(format!("subscribing to the inbox: {e}"))
                })?;
                Ok(Client { inbox, violations })
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
type Caller = Inbox<mpsc::Sender<async_nats::Message>>;

/// An endpoint's connection: its inbox, and the permission violations the NATS server
/// reported on it (a call whose invocation or inbox the server refuses fails at once).
struct Client {
    inbox: Caller,
    violations: watch::Receiver<Violations>,
}

/// An inbox of a connection's own (`_INBOX.<unique>.`) and the calls whose messages arrive on
/// it, each under its number (`<inbox><call>`, and subjects below that): a routing task
/// hands each message to the call it is addressed to. The client's answers and the server's
/// parameter parts arrive this way. A call is entered in the table before anything names its
/// subject, so no message for it can arrive first.
struct Inbox<V> {
    nats: async_nats::Client,
    /// The inbox subject with its trailing dot; a call's subject is this and its number.
    prefix: String,
    next: AtomicU64,
    table: Arc<Table<V>>,
    router: tokio::task::JoinHandle<()>,
}

/// The calls of an [`Inbox`], by number.
type Table<V> = Mutex<HashMap<u64, V>>;

impl<V: Send + 'static> Inbox<V> {
    /// Subscribes to `<inbox>` + `pattern` and starts `route` on the messages, with the
    /// inbox prefix and the table.
    async fn new<F>(
        nats: async_nats::Client,
        pattern: &str,
        route: impl FnOnce(async_nats::Subscriber, String, Arc<Table<V>>) -> F,
    ) -> Result<Inbox<V>, async_nats::SubscribeError>
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let mut prefix = nats.new_inbox();
        prefix.push('.');
        let sub = nats.subscribe(format!("{prefix}{pattern}")).await?;
        let table = Arc::new(Table::default());
        let router = tokio::spawn(route(sub, prefix.clone(), table.clone()));
        Ok(Inbox {
            nats,
            prefix,
            next: AtomicU64::new(0),
            table,
            router,
        })
    }

    /// A new call, entered in the table with `v`.
    fn enter(&self, v: V) -> Entry<V> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        lock(&self.table).insert(id, v);
        Entry {
            subject: format!("{}{id}", self.prefix),
            id,
            table: self.table.clone(),
        }
    }
}

impl<V> Drop for Inbox<V> {
    fn drop(&mut self) {
        self.router.abort();
    }
}

/// The number of the call a message on inbox `prefix` is addressed to.
fn call_of(prefix: &str, subject: &async_nats::Subject) -> Option<u64> {
    subject
        .as_str()
        .strip_prefix(prefix)?
        .split('.')
        .next()?
        .parse()
        .ok()
}

/// A call's place in an [`Inbox`]'s table and its subject; dropping it takes the call out.
struct Entry<V> {
    subject: String,
    id: u64,
    table: Arc<Table<V>>,
}

impl<V> Drop for Entry<V> {
    fn drop(&mut self) {
        lock(&self.table).remove(&self.id);
    }
}

/// Messages a call's channel holds before the routing task waits for the call to read them
/// (the handshake answer and the result chunks as they come).
const CALL_QUEUE: usize = 32;

impl Caller {
    /// A new call, entered in the routing table.
    fn start(&self) -> Pending {
        let (tx, rx) = mpsc::channel(CALL_QUEUE);
        let entry = self.enter(tx);
        Pending {
            results: result_subject(&entry.subject),
            entry,
            rx,
        }
    }
}

/// Hands every message on the inbox to the call it is addressed to: `<inbox><call>` (the
/// handshake's answer) or `<inbox><call>.results`.
async fn route(
    mut sub: async_nats::Subscriber,
    inbox: String,
    routes: Arc<Table<mpsc::Sender<async_nats::Message>>>,
) {
    while let Some(msg) = sub.next().await {
        let tx = call_of(&inbox, &msg.subject).and_then(|id| lock(&routes).get(&id).cloned());
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

/// A call in progress: its place in the routing table (and subject), its results subject,
/// and the channel its answers arrive on.
struct Pending {
    entry: Entry<mpsc::Sender<async_nats::Message>>,
    results: String,
    rx: mpsc::Receiver<async_nats::Message>,
}

/// A byte stream made of the payloads of a call's messages, ended by an empty one: a call's
/// results (client) and its parameters (server) arrive this way.
struct Chunks {
    buf: Bytes,
    ended: bool,
}

impl Chunks {
    fn new(first: Bytes) -> Chunks {
        Chunks {
            buf: first,
            ended: false,
        }
    }

    /// Reads into `out` what is left of the current payload, else the next one: `next` gives
    /// the next message's payload, or `None` when no more will come, which `cut_off` turns
    /// into the read's outcome (the end of the stream, or an error).
    fn poll_read(
        &mut self,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
        mut next: impl FnMut(&mut Context<'_>) -> Poll<Option<Bytes>>,
        cut_off: fn() -> std::io::Result<()>,
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
            match next(cx) {
                Poll::Ready(Some(b)) => {
                    self.ended = b.is_empty();
                    self.buf = b;
                }
                Poll::Ready(None) => {
                    let r = cut_off();
                    self.ended = r.is_ok();
                    return Poll::Ready(r);
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

/// A call's result stream: the payloads of the messages on its results subject.
struct Results {
    call: Pending,
    chunks: Chunks,
}

impl AsyncRead for Results {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let Results { call, chunks } = &mut *self;
        let next = |cx: &mut Context<'_>| loop {
            match call.rx.poll_recv(cx) {
                Poll::Ready(Some(msg)) if msg.subject.as_str() != call.results => continue,
                Poll::Ready(m) => return Poll::Ready(m.map(|m| m.payload)),
                Poll::Pending => return Poll::Pending,
            }
        };
        // The connection closed: the results end here (they are checked whole).
        chunks.poll_read(cx, out, next, || Ok(()))
    }
}

impl PartialEq for NatsEndpoint {
    fn eq(&self, other: &NatsEndpoint) -> bool {
        self.server == other.server && self.prefix == other.prefix && self.tls == other.tls
    }
}

impl Eq for NatsEndpoint {}

impl Hash for NatsEndpoint {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.server.hash(state);
        self.prefix.hash(state);
        self.tls.hash(state);
    }
}

impl fmt::Debug for NatsEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NatsEndpoint({self})")
    }
}

impl fmt::Display for NatsEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.tls { "tls" } else { "nats" };
        write!(f, "{scheme}://{}", self.server)?;
        if !self.prefix.is_empty() {
            write!(f, "/{}", self.prefix)?;
        }
        Ok(())
    }
}

impl FromStr for NatsEndpoint {
    type Err = String;
    fn from_str(s: &str) -> Result<NatsEndpoint, String> {
        let (rest, tls) = match (s.strip_prefix("nats://"), s.strip_prefix("tls://")) {
            (Some(rest), _) => (rest, false),
            (None, Some(rest)) => (rest, true),
            (None, None) => return Err(format!("`{s}` is not nats://HOST:PORT[/PREFIX]")),
        };
        let (server, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let e = NatsEndpoint::new(server, prefix).map_err(|e| format!("`{s}`: {e}"))?;
        Ok(if tls { e.with_tls_required() } else { e })
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
#[allow(
    clippy::too_many_arguments,
    reason = "a call has this many parts: where, what, the values and their types, bounds, trace"
)]
pub(crate) async fn call(
    endpoint: &NatsEndpoint,
    instance: &str,
    func: &str,
    mut params: Bytes,
    plan: &InterfacePlan,
    tys: &[&Ty],
    max_reply: usize,
    trace: Option<&crate::trace::TraceContext>,
) -> Result<Vec<u8>, RemoteError> {
    let client = endpoint.caller().await?;
    let caller = &client.inbox;
    let failed = |e: &dyn fmt::Display| RemoteError::PeerFailed(e.to_string());
    let denied = |reason: &str| RemoteError::Denied {
        addr: endpoint.to_string(),
        reason: reason.to_owned(),
    };
    let to = invocation_subject(&endpoint.prefix, instance, func);
    // The server's refusals from now on (and a refused inbox, whenever it was refused).
    let mut violations = client.violations.clone();
    let since = violations.borrow_and_update().count;
    if let Some(m) = violations.borrow().refusing(since, &to) {
        return Err(denied(m));
    }
    let mut call = caller.start();
    let chunk = caller
        .nats
        .server_info()
        .max_payload
        .saturating_sub(call.entry.subject.len())
        .max(1);
    let first = params.split_to(chunk.min(params.len()));
    let published = match trace {
        // The caller's trace context rides in the invocation's headers (`trace.rs`).
        Some(cx) => {
            let mut headers = async_nats::HeaderMap::new();
            headers.insert(serve::TRACEPARENT, cx.traceparent.as_str());
            if !cx.tracestate.is_empty() {
                headers.insert(serve::TRACESTATE, cx.tracestate.as_str());
            }
            let reply = call.entry.subject.clone();
            caller
                .nats
                .publish_with_reply_and_headers(to.clone(), reply, headers, first)
                .await
        }
        None => {
            caller
                .nats
                .publish_with_reply(to.clone(), call.entry.subject.clone(), first)
                .await
        }
    };
    published.map_err(|e| failed(&e))?;
    // The handshake's answer: NATS answers here when no server subscribes to the function.
    // A publication the server's permissions refuse is dropped without an answer: the
    // server's error about it ends the call instead.
    let mut watching = true;
    let answer = loop {
        let msg = tokio::select! {
            msg = call.rx.recv() => msg.ok_or_else(|| {
                RemoteError::PeerFailed("the connection closed before the result".into())
            })?,
            changed = violations.changed(), if watching => {
                watching = changed.is_ok();
                if let Some(m) = violations.borrow_and_update().refusing(since, &to) {
                    return Err(denied(m));
                }
                continue;
            }
        };
        if msg.subject.as_str() == call.entry.subject {
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
    let to = param_subject(&server);
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
        chunks: Chunks::new(Bytes::new()),
    };
    read_result(plan, tys, results, max_reply).await
}

/// wRPC's subject for invocations of `func` of `instance`:
/// `[PREFIX.]wrpc.0.0.1.[INSTANCE.]FUNC`, as `wrpc-transport-nats` names it.
fn invocation_subject(prefix: &str, instance: &str, func: &str) -> String {
    let mut s = String::with_capacity(prefix.len() + instance.len() + func.len() + 14);
    if !prefix.is_empty() {
        s.push_str(prefix);
        s.push('.');
    }
    s.push_str(PROTOCOL);
    s.push('.');
    if !instance.is_empty() {
        s.push_str(instance);
        s.push('.');
    }
    s.push_str(func);
    s
}

/// The version of wRPC's NATS protocol, in every invocation subject.
const PROTOCOL: &str = "wrpc.0.0.1";

/// Where the parameters after the invocation's go, for a server's subject.
fn param_subject(server: &str) -> String {
    format!("{server}{PARAMS}")
}

/// Where the results go, for a client's subject.
fn result_subject(client: &str) -> String {
    format!("{client}.results")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The subjects are wRPC's, as its NATS transport names them.
    #[test]
    fn subjects_are_wrpc_ones() {
        for (prefix, instance, func) in [
            ("", "lrpc:bench/bench", "add"),
            ("lrpc.prod", "lrpc:kv/store", "get"),
            ("a", "", "f"),
        ] {
            assert_eq!(
                invocation_subject(prefix, instance, func),
                wrpc_transport_nats::invocation_subject(prefix, instance, func)
            );
        }
        assert_eq!(
            param_subject("_INBOX.x.7"),
            wrpc_transport_nats::param_subject("_INBOX.x.7")
        );
        assert_eq!(
            result_subject("_INBOX.x.7"),
            wrpc_transport_nats::result_subject("_INBOX.x.7")
        );
    }
}
