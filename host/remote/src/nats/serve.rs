//! The serving side of wRPC over NATS: a kernel's exports subscribed in a queue group
//! ([`RemoteServer::bind_nats`]), their parameters routed to the calls that wait for them,
//! and the calls made on the driver pool with their number in progress bounded.

use super::*;

/// How many calls a NATS listener has answered with a result; readable while it serves.
#[derive(Debug, Clone, Default)]
pub struct ServedCount(Arc<AtomicU64>);

impl ServedCount {
    /// The count so far.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// The invocations of one procedure, each tagged with the procedure's slot in
/// [`NatsListener`]'s table.
type Invocations = BoxStream<'static, (usize, async_nats::Message)>;

/// A server's exports subscribed on NATS in a queue group (from
/// [`RemoteServer::bind_nats`]); [`RemoteServer::listen_nats`] serves them.
pub struct NatsListener {
    endpoint: NatsEndpoint,
    group: String,
    inflows: Arc<Inflows>,
    /// Each subscribed procedure, by slot: its export and index.
    procs: Vec<(LocalExport, usize)>,
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

/// Invocations of one procedure taken off the bus and waiting for a call in progress to end,
/// per `max_connections` (the bound of [`Backlog`]).
const WAITING_PER_CALL: usize = 4;

/// The least number of messages the listener's connection buffers per subscription before
/// the task reading them sees them: both readers (the listener, and the routing task of the
/// parameters) take every message as it comes and never wait on a call, so the buffer only
/// bridges the moments they are not scheduled.
const MIN_SUBSCRIPTION_BUFFER: usize = 1024;

/// The server side of a listener's connection: one subscription on an inbox of its own
/// (`_INBOX.<unique>.*.params`) receives the parameter messages of every call in progress,
/// and a routing task hands each to the call it belongs to.
///
/// Like the client (see `Caller`), and unlike `wrpc-transport-nats`'s server (whose routing
/// task learns of a call's subject by a command on a channel while the messages arrive on
/// the subscription, and can see a parameter chunk or the end of the parameters before the
/// command and drop it), a call is entered in the routing table before the handshake's
/// answer tells the client where to send the rest of its parameters, so none of them can
/// arrive before the call's route.
type Inflows = Inbox<Inflow>;

/// A call's parameter route: where its messages go, and what they may still cost (see
/// [`Inflows::start`]).
struct Inflow {
    tx: mpsc::UnboundedSender<Bytes>,
    left: usize,
}

impl Inflows {
    /// A new call, entered in the routing table: its subject (the handshake's answer names
    /// it), and its parameters, `first` (those the invocation carried) then the messages on
    /// `<subject>.params` up to an empty one. Once the messages after `first` cost more than
    /// `limit` (their bytes and [`MESSAGE_COST`] each), the call's route is dropped and
    /// reading its parameters fails.
    fn start(&self, first: Bytes, limit: usize) -> Params {
        let (tx, rx) = mpsc::unbounded_channel();
        Params {
            chunks: Chunks::new(first),
            rx,
            route: self.enter(Inflow { tx, left: limit }),
        }
    }
}

/// How long a listener waits for its probe to come back through the NATS server
/// ([`RemoteServer::bind_nats`]).
const PROBE_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// What a call's parameter subject ends with (after its own subject).
pub(super) const PARAMS: &str = ".params";

/// What a parameter message costs its call's budget beside its bytes (its place in the
/// call's queue), so that a flood of tiny messages is bounded too.
const MESSAGE_COST: usize = 64;

/// Parameter messages smaller than this are copied out of the connection's read buffer
/// (sharing it, a few bytes waiting in a call's queue would hold a whole buffer).
const COPY_BELOW: usize = 64 << 10;

/// The budget of a call's parameter messages after the invocation's, for parameters of at
/// most `max_request` bytes: twice that covers the bytes and [`MESSAGE_COST`] for messages
/// of 64 bytes and more (NATS's are up to `max_payload`, 1 MiB by default).
fn params_budget(max_request: usize) -> usize {
    max_request
        .saturating_mul(2)
        .saturating_add(2 * MESSAGE_COST)
}

/// Hands every parameter message on the inbox (`<inbox><call>.params`) to its call, without
/// ever waiting: a call's queue is bounded by its budget (see [`Inflows::start`]; past it the
/// route is dropped, failing the call), and messages for no call (one that ended, or never
/// was) are dropped.
async fn route_params(mut sub: async_nats::Subscriber, inbox: String, routes: Arc<Table<Inflow>>) {
    while let Some(msg) = sub.next().await {
        let id = call_of(&inbox, &msg.subject);
        let mut routes = lock(&routes);
        let Some((id, flow)) = id.and_then(|id| routes.get_mut(&id).map(|flow| (id, flow))) else {
            tracing::trace!(subject = %msg.subject, "parameters for no call");
            continue;
        };
        let n = msg.payload.len();
        let cost = n.saturating_add(MESSAGE_COST);
        let keep = if cost > flow.left {
            tracing::debug!(subject = %msg.subject, "parameters larger than the limit");
            false
        } else {
            flow.left -= cost;
            let payload = if n < COPY_BELOW {
                Bytes::copy_from_slice(&msg.payload)
            } else {
                msg.payload
            };
            // An empty message ends the parameters: nothing more goes to the call.
            flow.tx.send(payload).is_ok() && n > 0
        };
        if !keep {
            routes.remove(&id);
        }
    }
}

/// A call's parameter stream: the invocation's payload, then the messages routed to the call,
/// ended by an empty one.
struct Params {
    chunks: Chunks,
    rx: mpsc::UnboundedReceiver<Bytes>,
    /// The call's place in the routing table, and its subject.
    route: Entry<Inflow>,
}

impl AsyncRead for Params {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let Params { chunks, rx, .. } = &mut *self;
        // The route was dropped before the end of the parameters.
        let cut_off = || {
            Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "the parameters were cut off: larger than the limit, or the connection to NATS \
                 closed",
            ))
        };
        chunks.poll_read(cx, out, |cx| rx.poll_recv(cx), cut_off)
    }
}

/// An invocation taken off the bus: the subscribed procedure's slot and the message.
type Invocation = (usize, async_nats::Message);

/// Invocations waiting for a call in progress to end, in arrival order, at most `per_proc`
/// of each procedure: past that a procedure's new invocations are dropped, as NATS drops
/// messages for a slow consumer (their callers see their deadline pass).
struct Backlog {
    queue: VecDeque<Invocation>,
    counts: Vec<usize>,
    per_proc: usize,
}

impl Backlog {
    fn push(&mut self, inv: Invocation) {
        let Some(count) = self.counts.get_mut(inv.0) else {
            return;
        };
        if *count >= self.per_proc {
            tracing::debug!(subject = %inv.1.subject, "too many invocations waiting: dropped");
            return;
        }
        *count += 1;
        self.queue.push_back(inv);
    }

    fn pop(&mut self) -> Option<Invocation> {
        let inv = self.queue.pop_front()?;
        if let Some(count) = self.counts.get_mut(inv.0) {
            *count = count.saturating_sub(1);
        }
        Some(inv)
    }
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
        let (options, violations) = endpoint.connect_options().map_err(|e| listen_err(&e))?;
        let nats = options
            .subscription_capacity(
                max.saturating_mul(WAITING_PER_CALL)
                    .max(MIN_SUBSCRIPTION_BUFFER),
            )
            .connect(endpoint.url())
            .await
            .map_err(|e| match auth::refused_connect(&endpoint.to_string(), &e) {
                RemoteError::Denied { reason, .. } => listen_err(&reason),
                _ => listen_err(&e),
            })?;
        let inflows = Inflows::new(nats.clone(), &format!("*{PARAMS}"), route_params)
            .await
            .map_err(|e| listen_err(&format!("subscribing to the inbox: {e}")))?;
        let mut invocations = SelectAll::new();
        let mut procs = Vec::new();
        for export in self.pool.exports() {
            for (proc, p) in export.plan.procs.iter().enumerate() {
                let subject = invocation_subject(&endpoint.prefix, &export.name, &p.name);
                let sub = nats
                    .queue_subscribe(subject, group.to_owned())
                    .await
                    .map_err(|e| {
                        ServeError::Register(format!("{}#{}", export.name, p.name), e.to_string())
                    })?;
                let slot = procs.len();
                procs.push((export.clone(), proc));
                invocations.push(sub.map(move |msg| (slot, msg)).boxed());
            }
        }
        // A round trip that also shows the inbox receives: an empty message to a probe
        // call's parameters comes back once the NATS server has handled every subscription
        // above (it handles a connection's messages in order), so calls from other
        // connections are routed here from then on. When the server's permissions refuse
        // the inbox (or the probe), its error about that comes instead.
        let mut probe = inflows.start(Bytes::new(), MESSAGE_COST);
        let probe_subject = param_subject(&probe.route.subject);
        let mut violations = violations;
        let since = violations.borrow_and_update().count;
        nats.publish(probe_subject.clone(), Bytes::new())
            .await
            .map_err(|e| listen_err(&e))?;
        tokio::select! {
            _ = probe.rx.recv() => {}
            refused = violations.wait_for(|v| v.refusing(since, &probe_subject).is_some()) => {
                let m = refused
                    .ok()
                    .and_then(|v| v.refusing(since, &probe_subject).map(str::to_owned))
                    .unwrap_or_else(|| "the connection closed".to_owned());
                return Err(listen_err(&format!("the NATS server refused: {m}")));
            }
            () = tokio::time::sleep(PROBE_WAIT) => {
                return Err(listen_err(&"the NATS server did not answer"));
            }
        }
        // A refused subscription of an invocation subject: reported before the probe came
        // back, and seen here once the connection's event task has passed it on (it runs
        // beside this one; one it passes on later is still logged as an error).
        tokio::task::yield_now().await;
        if let Some(m) = violations.borrow().subscription.clone() {
            return Err(listen_err(&format!("the NATS server refused: {m}")));
        }
        Ok(NatsListener {
            endpoint: endpoint.clone(),
            group: group.to_owned(),
            inflows: Arc::new(inflows),
            procs,
            invocations,
            served: ServedCount::default(),
        })
    }

    /// Serves the invocations of `listener` until the task is dropped: at most
    /// `max_connections` calls in progress at once; further invocations wait, at most
    /// `4 × max_connections` per procedure (past that they are dropped, and their callers
    /// see their deadline pass).
    pub async fn listen_nats(self: Arc<Self>, listener: NatsListener) {
        let NatsListener {
            inflows,
            procs,
            mut invocations,
            served,
            ..
        } = listener;
        let max = self.options.max_connections.max(1);
        let permits = Arc::new(Semaphore::new(max));
        let mut waiting = Backlog {
            queue: VecDeque::new(),
            counts: vec![0; procs.len()],
            per_proc: max.saturating_mul(WAITING_PER_CALL),
        };
        let start = |permit: OwnedSemaphorePermit, (slot, msg): Invocation| {
            let Some((export, proc)) = procs.get(slot).cloned() else {
                return;
            };
            let me = self.clone();
            let inflows = inflows.clone();
            let served = served.clone();
            tokio::spawn(async move {
                if me.handle_nats(&inflows, &export, proc, msg).await {
                    served.0.fetch_add(1, Ordering::Relaxed);
                }
                drop(permit);
            });
        };
        // Invocations are taken off the subscriptions as they come (the connection's buffer
        // is not the backlog): started while a call may begin, kept in `waiting` otherwise.
        loop {
            tokio::select! {
                biased;
                Ok(permit) = permits.clone().acquire_owned(), if !waiting.queue.is_empty() => {
                    if let Some(inv) = waiting.pop() {
                        start(permit, inv);
                    }
                }
                inv = invocations.next() => {
                    let Some(inv) = inv else {
                        return;
                    };
                    match permits.clone().try_acquire_owned() {
                        Ok(permit) if waiting.queue.is_empty() => start(permit, inv),
                        _ => waiting.push(inv),
                    }
                }
            }
        }
    }

    /// One invocation: the handshake answered once the call's parameters have a route, the
    /// parameters checked while translated, the call on a driver thread, the result back. A
    /// call that fails ends the result stream without a value (the caller sees a failed
    /// call). True when a result was sent.
    async fn handle_nats(
        &self,
        inflows: &Inflows,
        export: &LocalExport,
        proc: usize,
        msg: async_nats::Message,
    ) -> bool {
        let Some(caller) = msg.reply else {
            tracing::debug!(export = %export.name, proc, "refused invocation: no reply subject");
            return false;
        };
        // The caller's trace context, when it sent one (`trace.rs`).
        let trace = msg
            .headers
            .as_ref()
            .filter(|_| crate::trace::installed())
            .and_then(trace_of);
        let budget = params_budget(self.options.max_request);
        let params = inflows.start(msg.payload, budget);
        if let Err(e) = inflows
            .nats
            .publish_with_reply(caller.clone(), params.route.subject.clone(), Bytes::new())
            .await
        {
            tracing::debug!(export = %export.name, proc, "refused invocation: {e}");
            return false;
        }
        let results = result_subject(&caller);
        // A NATS caller has no certificate: an export with an allow list refuses it.
        if !self.admits(&export.name, None) {
            let _ = inflows.nats.publish(results, Bytes::new()).await;
            return false;
        }
        let function = export.plan.procs.get(proc).map_or("", |p| p.name.as_str());
        let span = crate::trace::serving("nats", &export.name, function, trace.as_ref());
        let answered =
            tracing::Instrument::instrument(self.answer(export, proc, params), span.clone());
        let Some(bytes) = answered.await else {
            span.record("status", "failed");
            // The end of the results without a value.
            let _ = inflows.nats.publish(results, Bytes::new()).await;
            return false;
        };
        span.record("status", "ok");
        let mut bytes = bytes.freeze();
        let chunk = inflows.nats.server_info().max_payload.max(1);
        while !bytes.is_empty() {
            let part = bytes.split_to(chunk.min(bytes.len()));
            if let Err(e) = inflows.nats.publish(results.clone(), part).await {
                tracing::debug!(export = %export.name, proc, "sending the result: {e}");
                return false;
            }
        }
        inflows.nats.publish(results, Bytes::new()).await.is_ok()
    }
}

/// The trace context in an invocation's NATS headers (`traceparent`, `tracestate`).
fn trace_of(h: &async_nats::HeaderMap) -> Option<crate::trace::TraceContext> {
    let cx = crate::trace::TraceContext {
        traceparent: h.get(TRACEPARENT)?.as_str().to_owned(),
        tracestate: h
            .get(TRACESTATE)
            .map_or_else(String::new, |v| v.as_str().to_owned()),
    };
    cx.is_carriable().then_some(cx)
}

/// The NATS header names of a trace context (those of W3C Trace Context over HTTP).
pub(crate) const TRACEPARENT: &str = "traceparent";
/// See [`TRACEPARENT`].
pub(crate) const TRACESTATE: &str = "tracestate";
