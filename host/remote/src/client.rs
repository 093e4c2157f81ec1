//! Remote bindings: the client side of a call to another kernel's export over wRPC.

use crate::endpoint::Endpoint;
use crate::error::RemoteError;
use crate::pool::{Fail, Pool};
use crate::values::{param_types, read_result, result_types};
use crate::wire;
use bytes::{Bytes, BytesMut};
use lrpc_kernel::presentation::InterfacePlan;
use lrpc_presentation::Ty;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt as _;
use tokio::sync::Semaphore;
use wrpc_transport::Invoke as _;
use wrpc_transport::frame::{Incoming, Outgoing};

/// How a remote binding behaves.
#[derive(Debug, Clone)]
pub struct RemoteOptions {
    /// The per-call deadline: connecting, sending and the whole result.
    pub deadline: Duration,
    /// Calls in flight at one time on this binding; further calls wait (backpressure).
    pub max_in_flight: usize,
    /// Largest result accepted, on the wire and translated.
    pub max_reply: usize,
    /// Connections kept open between calls (sessions with a peer of this crate; a plain
    /// wRPC peer gets a connection per call).
    pub keep_connections: usize,
    /// How long a connection is kept unused before it is closed instead of reused.
    pub keep_for: Duration,
}

impl Default for RemoteOptions {
    fn default() -> RemoteOptions {
        RemoteOptions {
            deadline: Duration::from_secs(5),
            max_in_flight: 64,
            max_reply: 64 << 20,
            keep_connections: 8,
            keep_for: Duration::from_secs(30),
        }
    }
}

/// A binding to an interface exported by another kernel (or any wRPC server of the same
/// WIT). Cheap to clone; clones share the in-flight bound.
///
/// wRPC's TCP and Unix transports carry one invocation per connection (the end of the
/// parameters and of the results is the end of each direction's stream). With a server of
/// this crate a binding instead opens sessions (see the crate docs): connections that carry
/// one call after another and are kept between calls (at most
/// [`RemoteOptions::keep_connections`] idle; as many open as calls in flight). A kept
/// connection found closed (the peer restarted) is replaced by a fresh one, so a peer that
/// restarted is reached again by the next call. A peer that does not open sessions (a
/// `wit-bindgen-wrpc` server) is called in plain wRPC, a connection per call.
#[derive(Clone)]
pub struct RemoteBinding {
    inner: Arc<Inner>,
}

struct Inner {
    endpoint: Endpoint,
    instance: String,
    plan: Arc<InterfacePlan>,
    options: RemoteOptions,
    permits: Semaphore,
    pool: Pool,
}

impl fmt::Debug for RemoteBinding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteBinding")
            .field("endpoint", &self.inner.endpoint)
            .field("instance", &self.inner.instance)
            .finish()
    }
}

/// Encodes A-stack encoded arguments of `proc` for the wire.
pub fn encode_args(plan: &InterfacePlan, proc: usize, args: &[u8]) -> Result<Bytes, RemoteError> {
    let tys = param_types(plan, proc)?;
    wire::to_wire(plan, &tys, args)
        .map(BytesMut::freeze)
        .map_err(RemoteError::BadArguments)
}

impl RemoteBinding {
    /// A binding to the export `instance` (for exports made under their interface's name,
    /// and for `wit-bindgen-wrpc` peers, the interface name, e.g. `lrpc:bench/bench`) with
    /// interface `plan` at `endpoint`.
    pub fn new(
        endpoint: Endpoint,
        instance: &str,
        plan: Arc<InterfacePlan>,
        options: RemoteOptions,
    ) -> RemoteBinding {
        RemoteBinding::with_tls(endpoint, instance, plan, options, None)
    }

    /// [`RemoteBinding::new`], calling a `tcp:` endpoint over TLS when `tls` is given (other
    /// endpoints ignore it): every connection, kept sessions and plain wRPC invocations
    /// alike, is a TLS connection whose handshake checks the server's certificate and
    /// presents ours.
    pub fn with_tls(
        endpoint: Endpoint,
        instance: &str,
        plan: Arc<InterfacePlan>,
        options: RemoteOptions,
        tls: Option<Arc<crate::tls::ClientTls>>,
    ) -> RemoteBinding {
        let tls = tls.filter(|_| matches!(endpoint, Endpoint::Tcp(_)));
        RemoteBinding {
            inner: Arc::new(Inner {
                pool: Pool::new(
                    endpoint.clone(),
                    options.keep_connections,
                    options.keep_for,
                    tls,
                ),
                endpoint,
                instance: instance.to_owned(),
                permits: Semaphore::new(options.max_in_flight.max(1)),
                plan,
                options,
            }),
        }
    }

    /// The interface's plan.
    pub fn plan(&self) -> &Arc<InterfacePlan> {
        &self.inner.plan
    }

    /// The span of a call of procedure `proc` made now (`Span::none()` unless traces are
    /// exported: see `trace.rs`), with its status left to record.
    pub(crate) fn span(&self, proc: usize) -> tracing::Span {
        if !crate::trace::installed() {
            return tracing::Span::none();
        }
        let plan = &self.inner.plan;
        let procedure = plan.procs.get(proc).map_or("", |p| p.name.as_str());
        tracing::debug_span!(
            "remote call",
            otel.kind = "client",
            endpoint = %self.inner.endpoint,
            interface = plan.name.as_str(),
            procedure,
            deadline_ms = u64::try_from(self.inner.options.deadline.as_millis()).unwrap_or(u64::MAX),
            status = tracing::field::Empty,
        )
    }

    /// The peer's address.
    pub fn endpoint(&self) -> &Endpoint {
        &self.inner.endpoint
    }

    /// Connections kept open for the next calls now (0 with a plain wRPC peer).
    pub fn kept_connections(&self) -> usize {
        self.inner.pool.idle()
    }

    /// Calls procedure `proc` with A-stack encoded arguments; the A-stack encoded result
    /// (empty for a procedure without one).
    pub async fn call(&self, proc: usize, args: &[u8]) -> Result<Vec<u8>, RemoteError> {
        let wire = encode_args(&self.inner.plan, proc, args)?;
        self.call_wire(proc, wire).await
    }

    /// Calls procedure `proc` with arguments already in the wire encoding (see
    /// [`encode_args`]); used by MultiRPC to encode once for every member.
    pub async fn call_wire(&self, proc: usize, params: Bytes) -> Result<Vec<u8>, RemoteError> {
        self.call_wire_traced(proc, params, None).await
    }

    /// [`RemoteBinding::call_wire`] carrying the caller's trace context `trace` to the peer
    /// where the transport has room for it (`trace.rs`).
    pub async fn call_wire_traced(
        &self,
        proc: usize,
        params: Bytes,
        trace: Option<crate::trace::TraceContext>,
    ) -> Result<Vec<u8>, RemoteError> {
        let trace = trace.as_ref();
        let plan = &self.inner.plan;
        let name = &plan
            .procs
            .get(proc)
            .ok_or(RemoteError::BadProcedure(proc))?
            .name;
        let tys = result_types(plan, proc)?;
        let _permit = self
            .inner
            .permits
            .acquire()
            .await
            .map_err(|_| RemoteError::PeerFailed("the binding is closed".into()))?;
        let deadline = self.inner.options.deadline;
        tokio::time::timeout(deadline, async {
            if let Endpoint::Nats(n) = &self.inner.endpoint {
                let (instance, max_reply) = (&self.inner.instance, self.inner.options.max_reply);
                return crate::nats::call(n, instance, name, params, plan, &tys, max_reply, trace)
                    .await;
            }
            let pool = &self.inner.pool;
            if !pool.plain() {
                let max = self.inner.options.max_reply;
                match pool
                    .call(&self.inner.instance, name, &params, max, trace)
                    .await
                {
                    Ok(wire) => return decode_result(plan, &tys, &wire, max),
                    Err(Fail::Call(e)) => return Err(e),
                    Err(Fail::NotSession) => {}
                }
            }
            let (mut out, incoming) = self.invoke(name, params).await?;
            // The parameters went with the invocation; nothing else follows.
            let _ = out.shutdown().await;
            read_result(plan, &tys, incoming, self.inner.options.max_reply).await
        })
        .await
        .map_err(|_| RemoteError::Timeout(deadline))?
    }

    async fn invoke(&self, func: &str, params: Bytes) -> Result<(Outgoing, Incoming), RemoteError> {
        let paths: [&[Option<usize>]; 0] = [];
        if self.inner.pool.tls() {
            // One invocation on a connection of our own: wRPC's TCP client has no TLS.
            let (r, w) = self.inner.pool.connect().await?.into_split();
            let r = wrpc_transport::frame::invoke(
                w,
                tokio::io::BufReader::new(r),
                &self.inner.instance,
                func,
                params,
                paths,
            )
            .await;
            return r.map_err(|e| RemoteError::PeerFailed(format!("{e:#}")));
        }
        let r = match &self.inner.endpoint {
            Endpoint::Tcp(a) => {
                wrpc_transport::tcp::Client::from(a.as_str())
                    .invoke((), &self.inner.instance, func, params, paths)
                    .await
            }
            Endpoint::Unix(p) => {
                wrpc_transport::unix::Client::from(p.clone())
                    .invoke((), &self.inner.instance, func, params, paths)
                    .await
            }
            Endpoint::Nats(_) => return Err(RemoteError::PeerFailed("not a wRPC stream".into())),
        };
        r.map_err(|e| match e.downcast::<std::io::Error>() {
            Ok(io) => RemoteError::Unreachable {
                addr: self.inner.endpoint.to_string(),
                source: io,
            },
            Err(e) => RemoteError::PeerFailed(format!("{e:#}")),
        })
    }
}

/// Translates a whole wire-encoded result (from a session) into the A-stack encoding.
fn decode_result(
    plan: &InterfacePlan,
    tys: &[&Ty],
    wire: &[u8],
    limit: usize,
) -> Result<Vec<u8>, RemoteError> {
    wire::from_wire_whole(plan, tys, wire, limit).map_err(RemoteError::BadReply)
}
