//! An off-the-shelf `wasi:http/incoming-handler` component as the handler at the end of a
//! chain, served with wasmtime-wasi-http.
//!
//! **WASI 0.3.** A component that exports `wasi:http/handler@0.3` instead (found in its
//! exports when it is deployed or reloaded) is served by [`p3`]: instances that serve
//! several requests at once, on the kernel's pooled concurrent engine. What follows is about
//! WASI 0.2 handlers; the grants, the outgoing-HTTP hooks, the request body and the streamed
//! response body are shared.
//!
//! **Where it runs.** The component is a domain of the deployment, but not one of the
//! kernel's component domains: its imports are `wasi:http` and WASI, which the edge provides
//! (the kernel has no HTTP), so it gets a Store of its own with exactly the WASI its
//! `[domains.X.wasi]` table grants, its memory limit, and its deadline.
//!
//! **An instance per request.** Components written for `wasmtime serve` or Spin expect a
//! fresh instance for each request, so each request gets one by default; `reuse = N` lets
//! one instance serve up to N requests in turn. Handlers run on the kernel's pooled engine
//! (`Kernel::pooled_engine`): instances come from a pool reserved at start, and memories
//! from copy-on-write images, so instantiating costs tens of microseconds. The kernel's
//! epoch ticker ticks that engine too, which enforces the deadline. An instance that failed
//! in any way is never used again.
//!
//! **Outgoing HTTP.** A handler may send requests only to the origins its `[domains.X.wasi]
//! http` list grants; others fail with `HttpRequestDenied`. Allowed ones go out through
//! wasmtime-wasi-http's default sender (HTTPS with the webpki roots), and none outlives the
//! deadline of the request the handler is serving.
//!
//! **A request.** After the plugins of the chain have passed the request on, the worker
//! hands it, as they left it, to the handler: an `incoming-request` whose authority is the
//! request's `host` header, and a `response-outparam`. When no plugin in front takes the
//! body (none does, or all say `body = "none"`), the body is not collected: it streams from
//! the client as the guest reads it ([`RequestBody`], capped at the route's `max-body`).
//!
//! **The response.** The response the guest sets is held back (see [`Outparam`]): a guest
//! that finishes its body and returns, as most do, has it sent whole, in one hand-over to
//! the client's connection. A guest still running a tick or two of the [`watch`] thread
//! later gets its head sent then, over the worker's reply channel, and its body streams
//! behind it ([`StreamedBody`]) through wasmtime-wasi-http's bounded channel, so a slow
//! client slows the guest's writes.
//!
//! **Failure.** A trap answers 500, a call past the deadline 504, both naming the domain;
//! the instance is dropped (its Store is poisoned) and the next request gets a fresh one, as
//! under `wasmtime serve`: unlike a plugin, the domain is not restarted, so a client that
//! makes the handler trap can not hold its route in a restart's backoff. When the head went out
//! already, the body ends badly instead (the client's connection is aborted), as it does at
//! the deadline and when the guest returns with the body unfinished. A guest that answers
//! nothing, or an `error-code`, answers 502, and its instance is dropped (the domain is not
//! restarted).

mod p3;

use crate::body_rate::BodyClock;
use crate::config::{DomainSpec, HttpOrigin, Source};
use crate::http::{Answer, Incoming, Reply};
use crate::metrics::{Metrics, OutgoingMeters};
use crate::supervise::{DeployError, Supervised, Supervision, died, lock, read, report_failure};
use axum::body::Bytes;
use axum::http::{HeaderName, HeaderValue, Method, Request, Uri};
use http_body_util::{BodyExt as _, Full};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;
use wasmtime::component::{Linker, ResourceTable};
use wasmtime::{Engine, Store, StoreLimitsBuilder, UpdateDeadline};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::p2::bindings::http::types::{ErrorCode, Scheme};
use wasmtime_wasi_http::p2::bindings::sync::{Proxy, ProxyPre};
use wasmtime_wasi_http::p2::body::{HostOutgoingBody, HyperOutgoingBody};
use wasmtime_wasi_http::{
    Error as HttpError, RequestOptions, WasiBody, WasiHttpCtx, WasiHttpCtxView, WasiHttpHooks,
    WasiHttpView,
};

/// The data of a handler's Store.
pub struct HttpState {
    wasi: WasiCtx,
    http: WasiHttpCtx,
    table: ResourceTable,
    hooks: Outgoing,
    limits: lrpc_kernel::component::MeteredLimits,
    /// When the running call must stop.
    deadline: Option<Instant>,
}

impl WasiView for HttpState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for HttpState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        // An outgoing request made through this view ends by the running call's deadline.
        self.hooks.deadline = self.deadline;
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.hooks,
        }
    }
}

/// `wasi:http` hooks that send a handler's outgoing requests to the origins it is granted,
/// within the deadline of the call that makes them, and deny the rest.
struct Outgoing {
    origins: Arc<[HttpOrigin]>,
    meters: OutgoingMeters,
    /// The running call's deadline, copied from [`HttpState`] by its view.
    deadline: Option<Instant>,
}

/// What a sent request's response resolves to (the response, and the connection's driver).
type SendResult = wasmtime_wasi_http::Result<(
    axum::http::Response<WasiBody>,
    Box<dyn Future<Output = Result<(), HttpError>> + Send>,
)>;

/// Writes a body's stream buffers before the guest waits for them to be taken: a response
/// body of up to this many writes is whole by the time its handler returns (see
/// [`Outparam`]). Each write is at most [`BODY_CHUNK`] bytes.
const BODY_WRITES: usize = 32;

/// The most bytes one write to a body's stream may take (what `check-write` grants).
const BODY_CHUNK: usize = 64 << 10;

impl WasiHttpHooks for Outgoing {
    fn p2_outgoing_body_buffer_chunks(&mut self) -> usize {
        // The channel holds one write more than this.
        BODY_WRITES - 1
    }

    fn p2_outgoing_body_chunk_size(&mut self) -> usize {
        BODY_CHUNK
    }

    fn send_request(
        &mut self,
        request: axum::http::Request<WasiBody>,
        options: Option<RequestOptions>,
        _fut: Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ) -> Box<dyn Future<Output = SendResult> + Send> {
        if !self.origins.iter().any(|o| o.matches(request.uri())) {
            self.meters.denied.inc();
            tracing::debug!(uri = %request.uri(), "outgoing request denied");
            return Box::new(async { Err(HttpError::HttpRequestDenied) });
        }
        let meters = self.meters.clone();
        let deadline = self.deadline;
        Box::new(async move {
            let deadline = deadline.map(tokio::time::Instant::from_std);
            let options = within(options, deadline);
            let send = wasmtime_wasi_http::default_send_request(request, Some(options));
            // Each timeout is at most the time left; together they could add up past it.
            let sent = match deadline {
                Some(d) => tokio::time::timeout_at(d, send)
                    .await
                    .unwrap_or(Err(HttpError::HttpResponseTimeout)),
                None => send.await,
            };
            let (response, io) = match sent {
                Ok(s) => s,
                Err(e) => {
                    meters.failed.inc();
                    return Err(e);
                }
            };
            meters.sent.inc();
            let response = response.map(|b| {
                DeadlineBody {
                    inner: b.boxed_unsync(),
                    deadline: deadline.map(|d| Box::pin(tokio::time::sleep_until(d))),
                }
                .boxed_unsync()
            });
            // The connection is closed at the deadline too (its body fails then).
            let io = async move {
                match deadline {
                    Some(d) => tokio::time::timeout_at(d, io).await.unwrap_or(Ok(())),
                    None => io.await,
                }
            };
            Ok((response, Box::new(io) as Box<dyn Future<Output = _> + Send>))
        })
    }
}

/// `options` with each timeout at most the time left until `deadline`.
fn within(
    options: Option<RequestOptions>,
    deadline: Option<tokio::time::Instant>,
) -> RequestOptions {
    let mut o = options.unwrap_or_default();
    if let Some(d) = deadline {
        let left = d.saturating_duration_since(tokio::time::Instant::now());
        for t in [
            &mut o.connect_timeout,
            &mut o.first_byte_timeout,
            &mut o.between_bytes_timeout,
        ] {
            *t = Some(t.map_or(left, |t| t.min(left)));
        }
    }
    o
}

/// A response body that fails with `HttpResponseTimeout` once its deadline has passed.
struct DeadlineBody {
    inner: WasiBody,
    deadline: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
}

impl http_body::Body for DeadlineBody {
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, HttpError>>> {
        // A finished sleep stays ready: every poll past the deadline fails.
        if let Some(d) = self.deadline.as_mut()
            && d.as_mut().poll(cx).is_ready()
        {
            return std::task::Poll::Ready(Some(Err(HttpError::HttpResponseTimeout)));
        }
        std::pin::Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// The error a call stopped at its deadline traps with.
#[derive(Debug, thiserror::Error)]
#[error("the call ran past its deadline")]
struct PastDeadline;

/// The error a call stopped at shutdown traps with (see [`HttpHandler::stop`]).
#[derive(Debug, thiserror::Error)]
#[error("the server is shutting down")]
struct ShutDown;

/// One generation of a handler: the component, pre-instantiated.
pub struct Generation {
    pre: Pre,
    /// 1 for the first; each restart or reload makes the next.
    pub generation: u64,
}

/// A generation's component: a WASI 0.2 handler, run on the route workers' threads, or a
/// WASI 0.3 one, run by its [`p3::Service`] on the WASI runtime.
enum Pre {
    P2(ProxyPre<HttpState>),
    P3(Arc<p3::Service>),
}

/// Generation `generation` of the handler `me`, of the component `pre`.
fn generation_of(
    pre: Prepared,
    me: std::sync::Weak<HttpHandler>,
    generation: u64,
    limits: p3::Limits,
) -> Generation {
    let pre = match pre {
        Prepared::P2(pre) => Pre::P2(pre),
        Prepared::P3(pre) => Pre::P3(Arc::new(p3::Service::new(pre, me, generation, limits))),
    };
    Generation { pre, generation }
}

/// A component prepared for serving, before it is a generation.
enum Prepared {
    P2(ProxyPre<HttpState>),
    P3(p3::Pre),
}

/// A worker's instance of a handler.
struct HandlerInstance {
    generation: u64,
    store: Store<HttpState>,
    proxy: Proxy,
    /// Requests it has served.
    served: usize,
}

/// What a worker thread keeps of a handler between requests: the instance it may use again
/// (with `reuse` above 1), and the memory of its instance, or of the last one it ran.
#[derive(Default)]
pub struct HandlerSlot {
    instance: Option<HandlerInstance>,
    /// An instance that served its last request, until [`HandlerSlot::tidy`] drops it.
    spent: Option<HandlerInstance>,
    /// Bytes of linear memory, counted by the instance's Store's limiter.
    bytes: Option<Arc<std::sync::atomic::AtomicUsize>>,
    /// The route's `reuse`, over the handler's.
    reuse: Option<usize>,
}

impl HandlerSlot {
    /// The slot of a worker of a route whose `reuse` is `reuse` (`None`: the handler's).
    pub fn new(reuse: Option<usize>) -> HandlerSlot {
        HandlerSlot {
            reuse,
            ..HandlerSlot::default()
        }
    }

    /// Whether the worker has not run the handler yet (its first request pays for warming
    /// the pool's memory slot).
    pub fn cold(&self) -> bool {
        self.bytes.is_none()
    }

    /// Drops the instance that served its last request. Called once the answer has gone, so
    /// that giving its memory back to the pool is not part of the request's time.
    pub fn tidy(&mut self) {
        self.spent = None;
    }
}

/// The most bytes a linear memory of a handler takes when its `memory` limit is not set.
pub const HANDLER_MEMORY: usize = 128 << 20;

/// Instances in the handler pool beyond one per worker thread of the routes that end in a
/// handler (each thread holds at most one instance at a time).
const POOL_MARGIN: u32 = 2;

/// A handler's memory limit: its `memory`, else [`HANDLER_MEMORY`].
fn memory_limit(spec: &DomainSpec) -> usize {
    spec.component
        .as_ref()
        .and_then(|c| c.limits.memory)
        .unwrap_or(HANDLER_MEMORY)
}

/// The worker threads of the routes of `config` that end in the handler `name` (a WASI 0.3
/// handler runs as many instances at once at most).
pub fn workers(config: &crate::config::Config, name: &str) -> usize {
    config
        .routes
        .iter()
        .filter(|r| r.chain.last().is_some_and(|h| h == name))
        .map(|r| r.workers)
        .sum()
}

/// The kernel's instance pool for the `wasi:http` handlers of `config`: an instance per
/// worker of a route ending in one, and memories as large as the largest handler's limit.
pub fn pool(config: &crate::config::Config) -> lrpc_kernel::InstancePool {
    let workers: usize = config
        .routes
        .iter()
        .filter(|r| {
            r.chain
                .last()
                .and_then(|h| config.domains.get(h))
                .is_some_and(DomainSpec::http_handler)
        })
        .map(|r| r.workers)
        .sum();
    let memory = config
        .domains
        .values()
        .filter(|d| d.http_handler())
        .map(memory_limit)
        .max()
        .unwrap_or(HANDLER_MEMORY);
    lrpc_kernel::InstancePool::default()
        .with_instances(
            u32::try_from(workers)
                .unwrap_or(u32::MAX)
                .saturating_add(POOL_MARGIN),
        )
        .with_memory(memory)
}

/// A `wasi:http/incoming-handler` domain under supervision.
pub struct HttpHandler {
    /// The domain's name.
    pub name: String,
    source: Source,
    engine: Engine,
    /// The kernel, whose compiled code a restart or reload of the same bytes reuses.
    kernel: lrpc_kernel::Kernel,
    grants: lrpc_kernel::component::WasiGrants,
    memory: Option<usize>,
    deadline: Duration,
    /// Requests one instance serves (`reuse`; 1: a fresh instance per request).
    reuse: usize,
    /// How a WASI 0.3 handler's instances serve.
    p3: p3::Limits,
    /// The handler itself, for the instances of its WASI 0.3 generations.
    me: std::sync::Weak<HttpHandler>,
    output: lrpc_kernel::component::CapturedOutput,
    current: Mutex<Arc<Generation>>,
    /// The current generation died and no fresh one has replaced it yet.
    down: AtomicBool,
    /// Set at shutdown ([`HttpHandler::stop`]): the guest code of WASI 0.2 instances stops
    /// at its next epoch tick.
    stopped: Arc<AtomicBool>,
    supervision: Supervision,
    /// The handler's call counter (looked up once).
    calls: crate::metrics::sharded::Counter,
    /// The origins its outgoing requests may go to (`[domains.X.wasi] http`).
    origins: Arc<[HttpOrigin]>,
    /// Its outgoing request counters (looked up once).
    outgoing: OutgoingMeters,
    /// The linear memory of each worker's instance (or last instance), counted by its
    /// Store's limiter; a worker's count goes when its slot does.
    memories: Mutex<Vec<std::sync::Weak<std::sync::atomic::AtomicUsize>>>,
}

impl Supervised for HttpHandler {
    const KIND: &'static str = "wasi:http handler";
    fn name(&self) -> &str {
        &self.name
    }
    fn supervision(&self) -> &Supervision {
        &self.supervision
    }
    fn replace(&self, generation: u64) -> Result<(), DeployError> {
        let wasm = read(&self.source)?;
        let pre = prepare(&self.kernel, &wasm)
            .map_err(|e| DeployError::Unknown(format!("wasi:http handler `{}`: {e}", self.name)))?;
        *lock(&self.current) = Arc::new(generation_of(pre, self.me.clone(), generation, self.p3));
        Ok(())
    }
    fn renewed(&self) {
        self.down.store(false, Ordering::Release);
    }
}

impl HttpHandler {
    /// Compiles and links the handler `spec` (a component domain exporting
    /// `wasi:http/incoming-handler`, or WASI 0.3's `wasi:http/handler`), whose routes have
    /// `workers` worker threads in all (a WASI 0.3 handler runs as many instances at most).
    pub fn start(
        kernel: &lrpc_kernel::Kernel,
        spec: &DomainSpec,
        metrics: Arc<Metrics>,
        workers: usize,
    ) -> Result<Arc<HttpHandler>, DeployError> {
        let c = spec.component.clone().unwrap_or_default();
        let unknown =
            |e: String| DeployError::Unknown(format!("wasi:http handler `{}`: {e}", spec.name));
        let engine = kernel
            .pooled_engine()
            .map_err(|error| DeployError::Kernel {
                what: format!("wasi:http handler `{}`", spec.name),
                error,
            })?
            .clone();
        let wasm = read(&spec.source)?;
        let pre = prepare(kernel, &wasm).map_err(unknown)?;
        let deadline = c.limits.deadline.unwrap_or(kernel.config().deadline);
        let limits = p3::Limits {
            instances: workers.max(1),
            reuse: c.reuse.unwrap_or(p3::REUSE).max(1),
            deadline,
        };
        Ok(Arc::new_cyclic(|me| HttpHandler {
            name: spec.name.clone(),
            source: spec.source.clone(),
            engine,
            kernel: kernel.clone(),
            grants: c.wasi,
            memory: Some(memory_limit(spec)),
            deadline,
            reuse: c.reuse.unwrap_or(1).max(1),
            p3: limits,
            me: me.clone(),
            output: lrpc_kernel::component::CapturedOutput::default(),
            current: Mutex::new(Arc::new(generation_of(pre, me.clone(), 1, limits))),
            down: AtomicBool::new(false),
            stopped: Arc::default(),
            calls: metrics.call_counter(&spec.name),
            origins: c.http.into(),
            outgoing: metrics.outgoing(&spec.name),
            supervision: Supervision::new(metrics),
            memories: Mutex::default(),
        }))
    }

    /// Whether the handler is a WASI 0.3 one (`wasi:http/handler@0.3`), as its current
    /// generation is.
    pub fn is_p3(&self) -> bool {
        matches!(self.current().pre, Pre::P3(_))
    }

    /// The generation requests use now.
    pub fn current(&self) -> Arc<Generation> {
        lock(&self.current).clone()
    }

    /// The component file, when the handler comes from one.
    pub fn file(&self) -> Option<&std::path::Path> {
        match &self.source {
            Source::File(p) => Some(p),
            Source::Builtin(..) => None,
        }
    }

    /// What the handler wrote to standard output and error, when its grants capture them.
    pub fn captured(&self) -> &lrpc_kernel::component::CapturedOutput {
        &self.output
    }

    /// Replaces the running generation with one from the component's current bytes.
    /// Requests in flight finish on the instances they started on.
    pub fn reload(&self) -> Result<u64, DeployError> {
        crate::supervise::reload(self)
    }

    /// Reports that generation `generation` died: the handler is down until a fresh
    /// generation replaces it, and the first report schedules a restart with backoff.
    pub fn died(self: &Arc<Self>, generation: u64) {
        if self.supervision.generation() == generation {
            self.down.store(true, Ordering::Release);
        }
        died(self, generation);
    }

    /// Stops the handler for good, at shutdown: the guest code of its WASI 0.2 instances stops
    /// at the next epoch tick (their requests answer 503), no request starts on it, and it
    /// is not restarted. (A WASI 0.3 instance runs on until the process ends; the edge
    /// answers its requests 503.)
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        self.supervision.stop();
    }

    /// A counter of an instance's linear memory, counted in [`HttpHandler::memory`] while it
    /// lives.
    fn memory_counter(&self) -> Arc<std::sync::atomic::AtomicUsize> {
        let bytes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut m = lock(&self.memories);
        m.retain(|w| w.strong_count() > 0);
        m.push(Arc::downgrade(&bytes));
        bytes
    }

    /// A fresh Store on `engine` for an instance of the handler: its WASI grants, outgoing
    /// HTTP hooks and memory limit, its memory counted in `bytes`.
    fn new_store(
        &self,
        engine: &Engine,
        bytes: Arc<std::sync::atomic::AtomicUsize>,
    ) -> Result<Store<HttpState>, String> {
        let wasi = self.grants.context(&self.output)?;
        let mut limits = StoreLimitsBuilder::new();
        if let Some(m) = self.memory {
            limits = limits.memory_size(m);
        }
        // The last instance's Store is gone: the count starts afresh.
        bytes.store(0, Ordering::Relaxed);
        let mut store = Store::new(
            engine,
            HttpState {
                wasi,
                http: WasiHttpCtx::new(),
                table: ResourceTable::new(),
                hooks: Outgoing {
                    origins: self.origins.clone(),
                    meters: self.outgoing.clone(),
                    deadline: None,
                },
                limits: lrpc_kernel::component::MeteredLimits::new(limits.build(), bytes),
                deadline: None,
            },
        );
        store.limiter(|s| &mut s.limits);
        Ok(store)
    }

    /// A fresh instance of the current generation, in a fresh Store, whose memory is counted
    /// in `slot`'s bytes.
    fn instantiate(
        &self,
        generation: &Generation,
        pre: &ProxyPre<HttpState>,
        slot: &mut HandlerSlot,
    ) -> Result<HandlerInstance, String> {
        let bytes = slot
            .bytes
            .get_or_insert_with(|| self.memory_counter())
            .clone();
        let mut store = self.new_store(&self.engine, bytes)?;
        store.data_mut().deadline = Some(Instant::now() + self.deadline);
        let stopped = self.stopped.clone();
        store.epoch_deadline_callback(move |ctx| match ctx.data().deadline {
            _ if stopped.load(Ordering::Relaxed) => Err(wasmtime::Error::new(ShutDown)),
            Some(d) if Instant::now() >= d => Err(wasmtime::Error::new(PastDeadline)),
            _ => Ok(UpdateDeadline::Continue(1)),
        });
        store.set_epoch_deadline(1);
        let proxy = pre.instantiate(&mut store).map_err(|e| format!("{e:#}"))?;
        store.data_mut().deadline = None;
        Ok(HandlerInstance {
            generation: generation.generation,
            store,
            proxy,
            served: 0,
        })
    }

    /// Bytes of linear memory of the handler's instances: per route worker that has served
    /// it, its instance's, or its last instance's.
    pub fn memory(&self) -> usize {
        lock(&self.memories)
            .iter()
            .filter_map(std::sync::Weak::upgrade)
            .map(|b| b.load(Ordering::Relaxed))
            .sum()
    }

    /// Serves one request on the worker's instance in `slot` (a fresh one unless the last
    /// may be used again); counts the call and its failures. When the guest sets its
    /// response, the head goes out at once through `reply` (taken), and its body streams
    /// while the guest writes it; otherwise the answer to send is returned.
    /// A used-up instance waits in the slot for [`HandlerSlot::tidy`].
    pub fn serve(
        self: &Arc<Self>,
        slot: &mut HandlerSlot,
        req: Incoming,
        body: Option<RequestBody>,
        reply: &mut Option<oneshot::Sender<Reply>>,
    ) -> Answer {
        slot.tidy();
        let answer = self.serve_on(slot, req, body, reply);
        // Used up, or failed (then already gone): the next request gets a fresh instance.
        if slot
            .instance
            .as_ref()
            .is_some_and(|i| i.served >= slot.reuse.unwrap_or(self.reuse))
        {
            slot.spent = slot.instance.take();
        }
        answer
    }

    /// [`HttpHandler::serve`]'s work; drops the instance if it failed.
    fn serve_on(
        self: &Arc<Self>,
        slot: &mut HandlerSlot,
        req: Incoming,
        body: Option<RequestBody>,
        reply: &mut Option<oneshot::Sender<Reply>>,
    ) -> Answer {
        self.calls.inc();
        let fail = |code: u16, kind: &str, what: &str| {
            self.supervision.metrics.failure(&self.name, kind);
            Answer::text(code, format!("plugin {} {what}\n", self.name))
        };
        if self.stopped.load(Ordering::Acquire) {
            return fail(
                503,
                "terminated",
                "was stopped: the server is shutting down",
            );
        }
        let current = self.current();
        if self.down.load(Ordering::Acquire) {
            // Schedules another attempt if the last restart failed.
            self.died(current.generation);
            return fail(503, "terminated", "is restarting");
        }
        let pre = match &current.pre {
            Pre::P2(pre) => pre,
            Pre::P3(service) => {
                slot.instance = None;
                return self.serve_p3(service, current.generation, req, body, reply);
            }
        };
        if slot
            .instance
            .as_ref()
            .is_none_or(|i| i.generation != current.generation)
        {
            slot.instance = None;
            match self.instantiate(&current, pre, slot) {
                Ok(i) => slot.instance = Some(i),
                Err(e) => {
                    tracing::warn!(plugin = self.name, "instantiating failed: {e}");
                    self.died(current.generation);
                    return fail(503, "terminated", "is restarting");
                }
            }
        }
        let Some(inst) = slot.instance.as_mut() else {
            return fail(503, "terminated", "is restarting");
        };
        let (request, over) = match hyper_request(req, body) {
            Ok(r) => r,
            Err(e) => {
                report_failure(&self.name, || format!("a request it can not take: {e}"));
                return fail(502, "malformed", "was passed a malformed request");
            }
        };
        let until = Instant::now() + self.deadline;
        let outparam = Arc::new(Mutex::new(Outparam {
            reply: reply.take(),
            sent: None,
            until,
            aged: false,
        }));
        let sink = outparam.clone();
        let resources = {
            let mut http = inst.store.data_mut().http();
            http.new_incoming_request(Scheme::Http, request)
                .and_then(|r| {
                    let out = http.new_response_outparam_from_callback(move |v| {
                        let held = {
                            let mut o = lock(&sink);
                            o.set(v);
                            matches!(o.sent, Some(Sent::Held(_)))
                        };
                        if held {
                            watch(&sink);
                        }
                    })?;
                    Ok((r, out))
                })
        };
        let (request, out) = match resources {
            Ok(r) => r,
            Err(e) => {
                *reply = lock(&outparam).reply.take();
                report_failure(&self.name, || format!("passing the request: {e:#}"));
                return fail(502, "malformed", "was passed a malformed request");
            }
        };
        inst.store.data_mut().deadline = Some(until);
        let called =
            inst.proxy
                .wasi_http_incoming_handler()
                .call_handle(&mut inst.store, request, out);
        inst.store.data_mut().deadline = None;
        inst.served += 1;
        let (sent, unsent) = {
            let mut o = lock(&outparam);
            (o.sent.take(), o.reply.take())
        };
        // The reply channel, unless the head went out through it.
        *reply = unsent;
        // A response still held back goes now: whole when the guest finished its body (all
        // of it waits in the body's buffer then), else streaming, to be cut off below. After
        // a trap, nothing of it went out: the client gets the failure's answer instead.
        let sent = match sent {
            Some(Sent::Held(response)) if called.is_ok() => {
                let finished = !unfinished(&mut inst.store);
                reply.take().map(|tx| {
                    let status = response.status().as_u16();
                    let (parts, body) = response.into_parts();
                    let drained = if finished { drain(body) } else { Err(body) };
                    match drained {
                        Ok(whole) => {
                            let body = axum::body::Body::new(whole);
                            let _ = tx.send(Reply::Streamed(axum::http::Response::from_parts(
                                parts, body,
                            )));
                            Sent::Whole(status)
                        }
                        Err(body) => stream(tx, parts, body, until),
                    }
                })
            }
            sent => sent,
        };
        // A body over the route's cap, or too late, failed the guest's reads: with no head
        // out yet, the client is told why.
        let refusal = if reply.is_some() {
            over.and_then(|o| o.refusal())
        } else {
            None
        };
        let fail = |code: u16, kind: &str, what: &str| match &refusal {
            Some(answer) => {
                self.supervision.metrics.failure(&self.name, kind);
                answer.clone()
            }
            None => fail(code, kind, what),
        };
        if let Err(e) = called {
            // A body that streams ends badly once the Store that writes it goes.
            if let Some(Sent::Streaming(body, _)) = &sent {
                body.end_badly();
            }
            // The Store is poisoned: the instance goes. The domain is not restarted: its
            // compiled code and pre-instance are sound, and the next request gets a fresh
            // instance at once. (A restart's backoff would let a client that makes the
            // handler trap keep the route answering 503.)
            slot.instance = None;
            return if e.downcast_ref::<PastDeadline>().is_some() {
                fail(504, "deadline", "ran past its deadline")
            } else if e.downcast_ref::<ShutDown>().is_some() {
                fail(
                    503,
                    "terminated",
                    "was stopped: the server is shutting down",
                )
            } else {
                report_failure(&self.name, || format!("trapped: {e:#}"));
                // 500, as `wasmtime serve` answers a handler's trap (a plugin's trap in a
                // chain is 502: the plugin is a gateway to what comes after it).
                fail(500, "trap", "trapped")
            };
        }
        if !matches!(sent, Some(Sent::Streaming(..) | Sent::Whole(_))) {
            // A guest that did not answer may be in any state: it is not used again.
            slot.instance = None;
        }
        match sent {
            None => fail(502, "malformed", "answered nothing"),
            // Only before the guest returns.
            Some(Sent::Held(_)) => fail(500, "other", "answered where no reply could go"),
            Some(Sent::Whole(status)) => Answer {
                status,
                headers: Vec::new(),
                body: Vec::new(),
            },
            Some(Sent::Error(code)) => {
                report_failure(&self.name, || format!("answered with an error: {code:?}"));
                fail(502, "malformed", "answered with an error")
            }
            Some(Sent::Unsendable) => fail(500, "other", "answered where no reply could go"),
            Some(Sent::Streaming(body, status)) => {
                // A body the guest left unfinished when it returned would look complete
                // once its Store is gone: it ends badly instead, after what was written.
                if slot
                    .instance
                    .as_mut()
                    .is_some_and(|i| unfinished(&mut i.store))
                {
                    report_failure(&self.name, || "returned with its body unfinished".into());
                    body.end_badly();
                    slot.instance = None;
                    return fail(status, "malformed", "left its response body unfinished");
                }
                Answer {
                    status,
                    headers: Vec::new(),
                    body: Vec::new(),
                }
            }
        }
    }
}

/// Whether the guest in `store` holds an outgoing body it has not finished.
fn unfinished(store: &mut Store<HttpState>) -> bool {
    store
        .data_mut()
        .table
        .iter_mut()
        .any(|e| e.is::<HostOutgoingBody>())
}

/// The `response-outparam` of a request being handled: where its head goes, and what the
/// guest passed to `set`.
///
/// A response the guest sets is held back at first ([`Sent::Held`]). Most guests finish
/// their body and return at once: the response then goes whole, with its length, in one
/// hand-over to the client's connection. A guest still running [`HOLD_TICK`] or two later
/// (it streams, waits, or computes) gets its head sent by the [`watch`] thread, and its
/// body streams behind it. The body's buffer holds [`BODY_WRITES`] writes: a guest that
/// writes more waits for the head to go.
struct Outparam {
    reply: Option<oneshot::Sender<Reply>>,
    sent: Option<Sent>,
    /// The request's deadline, by which a streamed body is cut off.
    until: Instant,
    /// The watch thread saw the response held at one of its ticks already.
    aged: bool,
}

impl Outparam {
    /// Takes what the guest passed to `response-outparam.set`: a response is held back (see
    /// above).
    fn set(&mut self, v: Result<axum::http::Response<HyperOutgoingBody>, ErrorCode>) {
        self.sent = Some(match v {
            Err(code) => Sent::Error(code),
            Ok(_) if self.reply.is_none() => Sent::Unsendable,
            Ok(r) => Sent::Held(r),
        });
    }

    /// Sends the head of a response held back; its body streams behind it.
    fn send_head(&mut self) {
        if !matches!(self.sent, Some(Sent::Held(_))) {
            return;
        }
        if let (Some(Sent::Held(r)), Some(tx)) = (self.sent.take(), self.reply.take()) {
            let (parts, body) = r.into_parts();
            self.sent = Some(stream(tx, parts, body, self.until));
        }
    }
}

/// Sends a response's head through `tx`, its body streaming behind it until `until`.
fn stream(
    tx: oneshot::Sender<Reply>,
    parts: axum::http::response::Parts,
    body: HyperOutgoingBody,
    until: Instant,
) -> Sent {
    let status = parts.status.as_u16();
    let (body, cut) = StreamedBody::new(body, until);
    // A client that went away drops the body: the guest's next write fails.
    let _ = tx.send(Reply::Streamed(axum::http::Response::from_parts(
        parts,
        axum::body::Body::new(body),
    )));
    Sent::Streaming(cut, status)
}

/// The whole of a finished body, taken from its buffer without waiting; when it is not all
/// there, or it ends with trailers or an error, the body, with what was taken put back.
fn drain(mut body: HyperOutgoingBody) -> Result<WholeBody, HyperOutgoingBody> {
    use std::task::{Context, Poll, Waker};
    let mut cx = Context::from_waker(Waker::noop());
    let mut data = std::collections::VecDeque::new();
    let last = loop {
        match http_body::Body::poll_frame(std::pin::Pin::new(&mut body), &mut cx) {
            Poll::Ready(None) => {
                let len = data.iter().map(|d: &Bytes| d.len() as u64).sum();
                return Ok(WholeBody { data, len });
            }
            Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                Ok(d) => data.push_back(d),
                Err(trailers) => break Some(Ok(trailers)),
            },
            Poll::Ready(Some(Err(e))) => break Some(Err(e)),
            Poll::Pending => break None,
        }
    };
    let frames = data
        .into_iter()
        .map(|d| Ok(http_body::Frame::data(d)))
        .chain(last)
        .collect();
    Err(Replay { frames, rest: body }.boxed_unsync())
}

/// A body all there, in the pieces the guest wrote: its length is known, so it goes with a
/// `content-length`.
struct WholeBody {
    data: std::collections::VecDeque<Bytes>,
    /// The bytes left in `data`.
    len: u64,
}

impl http_body::Body for WholeBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        let next = self.data.pop_front();
        if let Some(d) = &next {
            self.len = self.len.saturating_sub(d.len() as u64);
        }
        std::task::Poll::Ready(next.map(|d| Ok(http_body::Frame::data(d))))
    }

    fn is_end_stream(&self) -> bool {
        self.len == 0
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.len)
    }
}

/// Frames taken from a body, then the rest of it.
struct Replay {
    frames: std::collections::VecDeque<Result<http_body::Frame<Bytes>, HttpError>>,
    rest: HyperOutgoingBody,
}

impl http_body::Body for Replay {
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, HttpError>>> {
        match self.frames.pop_front() {
            Some(f) => std::task::Poll::Ready(Some(f)),
            None => http_body::Body::poll_frame(std::pin::Pin::new(&mut self.rest), cx),
        }
    }
}

/// What the guest passed to `response-outparam.set`.
enum Sent {
    /// A response held back (see [`Outparam`]).
    Held(axum::http::Response<HyperOutgoingBody>),
    /// A response sent whole; its status.
    Whole(u16),
    /// A response: its head went to the client, its body streams (cut off by the
    /// [`BodyCut`]); the status.
    Streaming(BodyCut, u16),
    /// A response, with no channel to send it on (a handler runs only on route workers,
    /// which always pass one).
    Unsendable,
    /// An error code instead of a response.
    Error(ErrorCode),
}

/// How often the [`watch`] thread looks at the responses held back. A response held at
/// two of its ticks has its head sent.
const HOLD_TICK: Duration = Duration::from_millis(1);

/// The responses held back, for the [`watch`] thread.
#[derive(Default)]
struct Held {
    list: Vec<std::sync::Weak<Mutex<Outparam>>>,
    /// The thread waits for a response to watch.
    idle: bool,
    /// The thread runs (it could be started).
    running: bool,
}

static HELD: Mutex<Held> = Mutex::new(Held {
    list: Vec::new(),
    idle: false,
    running: false,
});
static HELD_WAKE: std::sync::Condvar = std::sync::Condvar::new();

/// Has the watch thread send the head of the response `o` holds if the guest is still
/// running one or two [`HOLD_TICK`]s from now. Without the thread, the head goes at once.
fn watch(o: &Arc<Mutex<Outparam>>) {
    static START: std::sync::Once = std::sync::Once::new();
    START.call_once(|| {
        let started = std::thread::Builder::new()
            .name("lrpc-http-heads".into())
            .spawn(send_held_heads)
            .is_ok();
        lock(&HELD).running = started;
    });
    let mut held = lock(&HELD);
    if !held.running {
        drop(held);
        lock(o).send_head();
        return;
    }
    held.list.push(Arc::downgrade(o));
    if held.idle {
        held.idle = false;
        HELD_WAKE.notify_one();
    }
}

/// The watch thread: every [`HOLD_TICK`] while responses are held, sends the heads of those
/// it saw held at its last tick already.
fn send_held_heads() {
    loop {
        {
            let mut held = lock(&HELD);
            while held.list.is_empty() {
                held.idle = true;
                held = HELD_WAKE
                    .wait(held)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
            }
            held.idle = false;
        }
        std::thread::sleep(HOLD_TICK);
        let list = std::mem::take(&mut lock(&HELD).list);
        let mut keep = Vec::new();
        for w in list {
            let Some(o) = w.upgrade() else { continue };
            let mut o = lock(&o);
            if !matches!(o.sent, Some(Sent::Held(_))) {
                continue;
            }
            if o.aged {
                o.send_head();
            } else {
                o.aged = true;
                drop(o);
                keep.push(w);
            }
        }
        if !keep.is_empty() {
            lock(&HELD).list.extend(keep);
        }
    }
}

/// Frames of a response body waiting between the guest and the client's connection.
const RELAY_FRAMES: usize = 8;

/// A guest's response body as a task on the WASI runtime relays it: the guest's writes
/// complete when the relay takes them, not when the client's connection (on a busy reactor
/// thread) gets to them. At most [`RELAY_FRAMES`] frames wait, so a slow client still slows
/// the guest.
struct Relay {
    frames: tokio::sync::mpsc::Receiver<Result<http_body::Frame<Bytes>, String>>,
    /// The task; aborting it drops the guest's body, so the guest's next write fails.
    _task: wasmtime_wasi::runtime::AbortOnDropJoinHandle<()>,
}

impl Relay {
    fn start(mut body: HyperOutgoingBody) -> Relay {
        let (tx, frames) = tokio::sync::mpsc::channel(RELAY_FRAMES);
        let task = wasmtime_wasi::runtime::spawn(async move {
            while let Some(frame) = body.frame().await {
                let failed = frame.is_err();
                if tx.send(frame.map_err(|e| e.to_string())).await.is_err() || failed {
                    break;
                }
            }
        });
        Relay {
            frames,
            _task: task,
        }
    }
}

/// A streamed response body as the client's connection and the worker share it.
struct Shared {
    /// The guest's body, relayed, until it ends or is cut off.
    body: Option<Relay>,
    /// Cut off: the client gets an error (the connection is aborted).
    cut: bool,
    /// The body fails where it ends, after what the guest wrote, if it wrote anything.
    bad_end: bool,
    /// The guest wrote a byte of the body (it has reached the client's side).
    wrote: bool,
    /// The task that last polled the body, woken when it is cut off.
    waker: Option<std::task::Waker>,
    /// When it is cut off if it has not ended by then.
    until: Instant,
    /// A task that cuts it off at `until`, started at the first poll.
    timer: Option<tokio::task::JoinHandle<()>>,
}

/// Cuts a streamed body off: its client sees the body fail, and the guest's next write to
/// it fails.
#[derive(Clone)]
struct BodyCut(Arc<Mutex<Shared>>);

impl BodyCut {
    /// Makes the body fail where it ends: the guest's Store is about to go, and with it the
    /// guest's end of the body, which would otherwise end it as if finished.
    fn end_badly(&self) {
        lock(&self.0).bad_end = true;
    }

    /// Cuts the body off now (what is buffered is dropped).
    fn cut(&self) {
        let (body, waker) = {
            let mut s = lock(&self.0);
            s.cut = true;
            (s.body.take(), s.waker.take())
        };
        drop(body);
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// A response body streaming from the guest to the client through the guest's bounded
/// channel: a slow client slows the guest's writes. It fails when cut off (the guest
/// failed or left it unfinished, or the deadline passed).
struct StreamedBody(Arc<Mutex<Shared>>);

impl StreamedBody {
    fn new(body: HyperOutgoingBody, until: Instant) -> (StreamedBody, BodyCut) {
        let shared = Arc::new(Mutex::new(Shared {
            body: Some(Relay::start(body)),
            cut: false,
            bad_end: false,
            wrote: false,
            waker: None,
            until,
            timer: None,
        }));
        (StreamedBody(shared.clone()), BodyCut(shared))
    }
}

impl Drop for StreamedBody {
    fn drop(&mut self) {
        let mut s = lock(&self.0);
        if let Some(t) = s.timer.take() {
            t.abort();
        }
        // The client went away: the guest's next write fails.
        s.body = None;
    }
}

/// The error a cut-off body fails with.
#[derive(Debug, thiserror::Error)]
#[error("the handler did not finish its response body")]
struct CutOff;

impl http_body::Body for StreamedBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        use std::task::Poll;
        let mut s = lock(&self.0);
        if s.cut {
            return Poll::Ready(Some(Err(Box::new(CutOff))));
        }
        if s.timer.is_none()
            && s.body.is_some()
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            // The deadline also holds when the client stops reading and nothing polls.
            let cut = BodyCut(self.0.clone());
            let until = tokio::time::Instant::from_std(s.until);
            s.timer = Some(rt.spawn(async move {
                tokio::time::sleep_until(until).await;
                cut.cut();
            }));
        }
        let Some(body) = s.body.as_mut() else {
            return Poll::Ready(None);
        };
        match body.frames.poll_recv(cx) {
            Poll::Ready(None) => {
                s.body = None;
                // A body cut after some of it was sent stays cut: the client must not take
                // a part for the whole. One the guest never wrote a byte of ends empty, as
                // under `wasmtime serve`: a handler that set its response and then failed
                // (a JavaScript handler that throws) answers with a clean, empty body.
                if s.bad_end && s.wrote {
                    s.cut = true;
                    return Poll::Ready(Some(Err(Box::new(CutOff))));
                }
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(e))) => {
                s.body = None;
                s.cut = true;
                Poll::Ready(Some(Err(e.into())))
            }
            Poll::Ready(Some(Ok(frame))) => {
                if frame.data_ref().is_some_and(|d| !d.is_empty()) {
                    s.wrote = true;
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Pending => {
                if !s.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    s.waker = Some(cx.waker().clone());
                }
                Poll::Pending
            }
        }
    }
}

/// Compiles `wasm` (or takes the kernel's code compiled from the same bytes before) and
/// links it against WASI and `wasi:http`: a component that exports WASI 0.3's
/// `wasi:http/handler` on the kernel's pooled concurrent engine, any other on its pooled one.
fn prepare(kernel: &lrpc_kernel::Kernel, wasm: &[u8]) -> Result<Prepared, String> {
    if !lrpc_kernel::component::is_component(wasm) {
        return Err("not a component".into());
    }
    if p3::exports_handler(wasm) {
        return p3::prepare(kernel, wasm).map(Prepared::P3);
    }
    let component = kernel
        .compile_pooled_component(wasm)
        .map_err(|e| format!("{e:#}"))?;
    let mut linker: Linker<HttpState> = Linker::new(component.engine());
    wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(|e| format!("{e:#}"))?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_sync(&mut linker)
        .map_err(|e| format!("{e:#}"))?;
    let pre = linker
        .instantiate_pre(&component)
        .map_err(|e| format!("{e:#}"))?;
    ProxyPre::new(pre)
        .map(Prepared::P2)
        .map_err(|e| format!("does not export {HANDLER} nor {}: {e:#}", p3::HANDLER))
}

const HANDLER: &str = crate::config::HANDLER_INTERFACE;

/// Whether the header `name` frames a message's body (RFC 9112 §6): the server sets those
/// lines for the body it hands on.
pub fn is_framing(name: &str) -> bool {
    name.eq_ignore_ascii_case("content-length") || name.eq_ignore_ascii_case("transfer-encoding")
}

/// A request body streaming from the client to a handler with no plugins before it: at
/// most `max` bytes (past that, reads fail), as fast as its [`BodyClock`] asks (each piece
/// within `body-timeout`, at least the minimum rate after a grace; else reads fail, and the
/// request is answered 408 if its head has not gone out, and its connection closes).
pub struct RequestBody {
    inner: axum::body::Body,
    max: usize,
    seen: usize,
    clock: BodyClock,
    /// What went wrong with the body, for the answer.
    state: Arc<BodyState>,
    /// The request's header lines as they came, for a handler no plugin comes before.
    headers: Option<axum::http::HeaderMap>,
    /// The client's framing lines (`content-length`, `transfer-encoding`): they describe
    /// this body, whatever the plugins passed on.
    framing: Vec<(HeaderName, HeaderValue)>,
}

/// What went wrong with a streamed request body, as the handler's caller sees it.
#[derive(Default, Debug)]
pub struct BodyState {
    /// The body went past the route's `max-body`.
    over: AtomicBool,
    /// The body came too late (stalled, or below the minimum rate).
    late: AtomicBool,
}

impl BodyState {
    /// Whether the body came too late: its connection is to close.
    pub fn late(&self) -> bool {
        self.late.load(Ordering::Acquire)
    }

    /// The answer the client gets instead of the handler's failure, if the body caused it.
    fn refusal(&self) -> Option<Answer> {
        if self.over.load(Ordering::Acquire) {
            Some(Answer::text(413, "request body too large\n".into()))
        } else if self.late() {
            Some(Answer::text(408, "request body too late\n".into()))
        } else {
            None
        }
    }
}

impl RequestBody {
    /// `body`, capped at `max` bytes, read as fast as `clock` asks.
    pub fn new(body: axum::body::Body, max: usize, clock: BodyClock) -> RequestBody {
        RequestBody {
            inner: body,
            max,
            seen: 0,
            clock,
            state: Arc::default(),
            headers: None,
            framing: Vec::new(),
        }
    }

    /// Notes the framing lines among the client's `headers`, which the handler gets with
    /// this body in place of any the plugins passed on.
    pub fn with_framing_of(mut self, headers: &axum::http::HeaderMap) -> RequestBody {
        self.framing = headers
            .iter()
            .filter(|(n, _)| is_framing(n.as_str()))
            .map(|(n, v)| (n.clone(), v.clone()))
            .collect();
        self
    }

    /// Gives the handler `headers` (the request's header lines as they came: values as
    /// bytes, also those that are not UTF-8) instead of those the chain passed on as text.
    pub fn with_headers(mut self, headers: axum::http::HeaderMap) -> RequestBody {
        self.headers = Some(headers);
        self
    }

    /// What goes wrong with the body, shared.
    pub fn state(&self) -> Arc<BodyState> {
        self.state.clone()
    }
}

impl http_body::Body for RequestBody {
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, HttpError>>> {
        use std::task::Poll;
        let this = &mut *self;
        if this.state.over.load(Ordering::Relaxed) {
            return Poll::Ready(Some(Err(HttpError::HttpRequestBodySize(Some(
                this.seen as u64,
            )))));
        }
        if this.state.late() {
            return Poll::Ready(Some(Err(HttpError::ConnectionReadTimeout)));
        }
        match std::pin::Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(d) = frame.data_ref() {
                    this.clock.arrived(d.len());
                    this.seen = this.seen.saturating_add(d.len());
                    if this.seen > this.max {
                        this.state.over.store(true, Ordering::Release);
                        return Poll::Ready(Some(Err(HttpError::HttpRequestBodySize(Some(
                            this.seen as u64,
                        )))));
                    }
                } else {
                    this.clock.arrived(0);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            // Malformed framing, or a connection that broke.
            Poll::Ready(Some(Err(_))) => Poll::Ready(Some(Err(HttpError::ConnectionTerminated))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => match this.clock.poll_late(cx) {
                Poll::Ready(late) => {
                    tracing::debug!(?late, "a streamed request body came too late");
                    this.state.late.store(true, Ordering::Release);
                    Poll::Ready(Some(Err(HttpError::ConnectionReadTimeout)))
                }
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// A request as a handler gets it.
type HandlerRequest =
    Request<http_body_util::combinators::UnsyncBoxBody<Bytes, wasmtime_wasi_http::Error>>;

/// The request as the chain left it, as an HTTP request (method, path and headers checked,
/// then the lines the plugins could not see), with `body` instead of its own when the body
/// streams, and the header lines as they came instead of its own when `body` has them; and
/// what goes wrong with the streamed body.
fn hyper_request(
    req: Incoming,
    mut body: Option<RequestBody>,
) -> Result<(HandlerRequest, Option<Arc<BodyState>>), String> {
    let over = body.as_ref().map(RequestBody::state);
    let raw = body.as_mut().and_then(|b| b.headers.take());
    let method = Method::from_bytes(req.method.as_bytes()).map_err(|e| e.to_string())?;
    let host = match &raw {
        Some(h) => h
            .get(axum::http::header::HOST)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("localhost"),
        None => req
            .headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case("host"))
            .and_then(|(_, v)| std::str::from_utf8(v).ok())
            .unwrap_or("localhost"),
    };
    let path = if req.path.starts_with('/') {
        req.path.clone()
    } else {
        format!("/{}", req.path)
    };
    let uri = Uri::builder()
        .scheme("http")
        .authority(host)
        .path_and_query(path.as_str())
        .build()
        .or_else(|_| {
            Uri::builder()
                .scheme("http")
                .authority("localhost")
                .path_and_query(path.as_str())
                .build()
        })
        .map_err(|e| format!("path `{path}`: {e}"))?;
    let mut b = Request::builder().method(method).uri(uri);
    match raw {
        Some(h) => {
            if let Some(m) = b.headers_mut() {
                *m = h;
            }
        }
        None => {
            // The plugins' lines, but the framing: that belongs to the body the handler
            // gets, not to what a plugin says of it (a plugin that rewrote a body or a
            // `content-length` would otherwise give the handler a length its body does
            // not have).
            for (n, v) in &req.headers {
                if is_framing(n) {
                    continue;
                }
                let name =
                    HeaderName::from_bytes(n.as_bytes()).map_err(|e| format!("`{n}`: {e}"))?;
                // Exactly the bytes the last plugin passed on.
                let value = HeaderValue::from_bytes(v).map_err(|e| format!("`{n}`: {e}"))?;
                b = b.header(name, value);
            }
            match &body {
                Some(streamed) => {
                    for (n, v) in &streamed.framing {
                        b = b.header(n, v);
                    }
                }
                None if !req.body.is_empty() || req.headers.iter().any(|(n, _)| is_framing(n)) => {
                    b = b.header(axum::http::header::CONTENT_LENGTH, req.body.len());
                }
                None => {}
            }
        }
    }
    let body = match body {
        Some(b) => b.boxed_unsync(),
        None => Full::new(Bytes::from(req.body))
            .map_err(|never| match never {})
            .boxed_unsync(),
    };
    Ok((b.body(body).map_err(|e| e.to_string())?, over))
}
