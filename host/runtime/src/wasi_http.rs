//! An off-the-shelf `wasi:http/incoming-handler` component as the handler at the end of a
//! chain, served with wasmtime-wasi-http.
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
//! request's `host` header, and a `response-outparam`. When the guest sets the response, its
//! body is collected on the WASI runtime's threads while the guest writes it (so a body
//! larger than the stream's buffer does not stall the guest). The answer goes back to the
//! client the way a plugin's answer does.
//!
//! **Failure.** A trap answers 500, a call past the deadline 504 (also when the body is
//! not finished by then), both naming the domain; the instance is dropped (its Store is
//! poisoned), and the domain is restarted fresh with backoff as a plugin is: until then,
//! requests are answered 503. A guest that answers nothing, or an `error-code`, answers 502,
//! and its instance is dropped (the domain is not restarted); so is one whose response body
//! failed.

use crate::config::{DomainSpec, HttpOrigin, Source};
use crate::http::{Answer, Incoming};
use crate::metrics::{Metrics, OutgoingMeters};
use crate::supervise::{DeployError, Supervised, Supervision, died, lock, read};
use axum::body::Bytes;
use axum::http::{HeaderName, HeaderValue, Method, Request, Uri};
use http_body_util::{BodyExt as _, Full, Limited};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wasmtime::component::{Linker, ResourceTable};
use wasmtime::{Engine, Store, StoreLimitsBuilder, UpdateDeadline};
use wasmtime_wasi::runtime::AbortOnDropJoinHandle;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::p2::bindings::http::types::{ErrorCode, Scheme};
use wasmtime_wasi_http::p2::bindings::sync::{Proxy, ProxyPre};
use wasmtime_wasi_http::p2::body::HyperOutgoingBody;
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

impl WasiHttpHooks for Outgoing {
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
#[derive(Debug)]
struct PastDeadline;

impl std::fmt::Display for PastDeadline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the call ran past its deadline")
    }
}

impl std::error::Error for PastDeadline {}

/// One generation of a handler: the component, pre-instantiated.
pub struct Generation {
    pre: ProxyPre<HttpState>,
    /// 1 for the first; each restart or reload makes the next.
    pub generation: u64,
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

/// What the guest passed to `response-outparam.set`.
enum Sent {
    /// A response; its body is being collected.
    Response(
        axum::http::response::Parts,
        AbortOnDropJoinHandle<Result<Bytes, String>>,
    ),
    /// An error code instead of a response.
    Error(ErrorCode),
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
    max_body: usize,
    output: lrpc_kernel::component::CapturedOutput,
    current: Mutex<Arc<Generation>>,
    /// The current generation died and no fresh one has replaced it yet.
    down: AtomicBool,
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
        *lock(&self.current) = Arc::new(Generation { pre, generation });
        Ok(())
    }
    fn renewed(&self) {
        self.down.store(false, Ordering::Release);
    }
}

impl HttpHandler {
    /// Compiles and links the handler `spec` (a component domain exporting
    /// `wasi:http/incoming-handler`); responses are limited to `max_body` bytes.
    pub fn start(
        kernel: &lrpc_kernel::Kernel,
        spec: &DomainSpec,
        max_body: usize,
        metrics: Arc<Metrics>,
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
        Ok(Arc::new(HttpHandler {
            name: spec.name.clone(),
            source: spec.source.clone(),
            engine,
            kernel: kernel.clone(),
            grants: c.wasi,
            memory: Some(memory_limit(spec)),
            deadline: c.limits.deadline.unwrap_or(kernel.config().deadline),
            reuse: c.reuse.unwrap_or(1).max(1),
            max_body,
            output: lrpc_kernel::component::CapturedOutput::default(),
            current: Mutex::new(Arc::new(Generation { pre, generation: 1 })),
            down: AtomicBool::new(false),
            calls: metrics.call_counter(&spec.name),
            origins: c.http.into(),
            outgoing: metrics.outgoing(&spec.name),
            supervision: Supervision::new(metrics),
            memories: Mutex::default(),
        }))
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

    /// A fresh instance of the current generation, in a fresh Store, whose memory is counted
    /// in `slot`'s bytes.
    fn instantiate(
        &self,
        generation: &Generation,
        slot: &mut HandlerSlot,
    ) -> Result<HandlerInstance, String> {
        let wasi = self.grants.context(&self.output)?;
        let mut limits = StoreLimitsBuilder::new();
        if let Some(m) = self.memory {
            limits = limits.memory_size(m);
        }
        let bytes = slot
            .bytes
            .get_or_insert_with(|| {
                let bytes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
                let mut m = lock(&self.memories);
                m.retain(|w| w.strong_count() > 0);
                m.push(Arc::downgrade(&bytes));
                bytes
            })
            .clone();
        // The last instance's Store is gone: the count starts afresh.
        bytes.store(0, Ordering::Relaxed);
        let mut store = Store::new(
            &self.engine,
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
                deadline: Some(Instant::now() + self.deadline),
            },
        );
        store.limiter(|s| &mut s.limits);
        store.epoch_deadline_callback(|ctx| match ctx.data().deadline {
            Some(d) if Instant::now() >= d => Err(wasmtime::Error::new(PastDeadline)),
            _ => Ok(UpdateDeadline::Continue(1)),
        });
        store.set_epoch_deadline(1);
        let proxy = generation
            .pre
            .instantiate(&mut store)
            .map_err(|e| format!("{e:#}"))?;
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
    /// may be used again); counts the call and its failures.
    /// A used-up instance waits in the slot for [`HandlerSlot::tidy`].
    pub fn serve(self: &Arc<Self>, slot: &mut HandlerSlot, req: Incoming) -> Answer {
        slot.tidy();
        let answer = self.serve_on(slot, req);
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
    fn serve_on(self: &Arc<Self>, slot: &mut HandlerSlot, req: Incoming) -> Answer {
        self.calls.inc();
        let fail = |code: u16, kind: &str, what: &str| {
            self.supervision.metrics.failure(&self.name, kind);
            Answer::text(code, format!("plugin {} {what}\n", self.name))
        };
        let current = self.current();
        if self.down.load(Ordering::Acquire) {
            // Schedules another attempt if the last restart failed.
            self.died(current.generation);
            return fail(503, "terminated", "is restarting");
        }
        if slot
            .instance
            .as_ref()
            .is_none_or(|i| i.generation != current.generation)
        {
            slot.instance = None;
            match self.instantiate(&current, slot) {
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
        let request = match hyper_request(req) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(plugin = self.name, "a request it can not take: {e}");
                return fail(502, "malformed", "was passed a malformed request");
            }
        };
        let sent: Arc<Mutex<Option<Sent>>> = Arc::default();
        let max = self.max_body;
        let sink = sent.clone();
        let resources = {
            let mut http = inst.store.data_mut().http();
            http.new_incoming_request(Scheme::Http, request)
                .and_then(|r| {
                    let out = http.new_response_outparam_from_callback(move |v| {
                        *lock(&sink) = Some(collect(v, max));
                    })?;
                    Ok((r, out))
                })
        };
        let (request, out) = match resources {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(plugin = self.name, "passing the request: {e:#}");
                return fail(502, "malformed", "was passed a malformed request");
            }
        };
        let until = Instant::now() + self.deadline;
        inst.store.data_mut().deadline = Some(until);
        let called =
            inst.proxy
                .wasi_http_incoming_handler()
                .call_handle(&mut inst.store, request, out);
        inst.store.data_mut().deadline = None;
        inst.served += 1;
        let generation = inst.generation;
        if let Err(e) = called {
            // The Store is poisoned: the instance goes, the domain is restarted.
            slot.instance = None;
            self.died(generation);
            return if e.downcast_ref::<PastDeadline>().is_some() {
                fail(504, "deadline", "ran past its deadline")
            } else {
                tracing::warn!(plugin = self.name, "trapped: {e:#}");
                // 500, as `wasmtime serve` answers a handler's trap (a plugin's trap in a
                // chain is 502: the plugin is a gateway to what comes after it).
                fail(500, "trap", "trapped")
            };
        }
        let sent = lock(&sent).take();
        if !matches!(sent, Some(Sent::Response(..))) {
            // A guest that did not answer may be in any state: it is not used again.
            slot.instance = None;
        }
        match sent {
            None => fail(502, "malformed", "answered nothing"),
            Some(Sent::Error(code)) => {
                tracing::warn!(plugin = self.name, "answered with an error: {code:?}");
                fail(502, "malformed", "answered with an error")
            }
            Some(Sent::Response(parts, body)) => {
                let left = until.saturating_duration_since(Instant::now());
                let body = wasmtime_wasi::runtime::in_tokio(async move {
                    tokio::time::timeout(left, body).await
                });
                match body {
                    Ok(Ok(body)) => Answer {
                        status: parts.status.as_u16(),
                        headers: parts
                            .headers
                            .iter()
                            .filter_map(|(n, v)| {
                                let v = std::str::from_utf8(v.as_bytes()).ok()?;
                                Some((n.as_str().to_string(), v.to_string()))
                            })
                            .collect(),
                        body: body.to_vec(),
                    },
                    Ok(Err(e)) => {
                        tracing::warn!(plugin = self.name, "its response body failed: {e}");
                        slot.instance = None;
                        fail(502, "malformed", "answered with a malformed response")
                    }
                    Err(_) => {
                        // The guest holds on to an unfinished body: start afresh.
                        slot.instance = None;
                        self.died(generation);
                        fail(504, "deadline", "ran past its deadline")
                    }
                }
            }
        }
    }
}

/// Compiles `wasm` (or takes the kernel's code compiled from the same bytes before) and
/// links it against WASI and `wasi:http`.
fn prepare(kernel: &lrpc_kernel::Kernel, wasm: &[u8]) -> Result<ProxyPre<HttpState>, String> {
    if !lrpc_kernel::component::is_component(wasm) {
        return Err("not a component".into());
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
    ProxyPre::new(pre).map_err(|e| format!("does not export {}: {e:#}", HANDLER))
}

const HANDLER: &str = crate::config::HANDLER_INTERFACE;

/// What `response-outparam.set` received; a response's body starts being collected (at most
/// `max` bytes) on the WASI runtime.
fn collect(v: Result<axum::http::Response<HyperOutgoingBody>, ErrorCode>, max: usize) -> Sent {
    match v {
        Ok(r) => {
            let (parts, body) = r.into_parts();
            let task = wasmtime_wasi::runtime::spawn(async move {
                Limited::new(body, max)
                    .collect()
                    .await
                    .map(|c| c.to_bytes())
                    .map_err(|e| e.to_string())
            });
            Sent::Response(parts, task)
        }
        Err(code) => Sent::Error(code),
    }
}

/// The request as the chain left it, as an HTTP request (method, path and headers checked).
fn hyper_request(
    req: Incoming,
) -> Result<
    Request<http_body_util::combinators::UnsyncBoxBody<Bytes, wasmtime_wasi_http::Error>>,
    String,
> {
    let method = Method::from_bytes(req.method.as_bytes()).map_err(|e| e.to_string())?;
    let host = req
        .headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("host"))
        .map_or("localhost", |(_, v)| v.as_str());
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
    for (n, v) in &req.headers {
        let name = HeaderName::from_bytes(n.as_bytes()).map_err(|e| format!("`{n}`: {e}"))?;
        let value = HeaderValue::from_str(v).map_err(|e| format!("`{n}`: {e}"))?;
        b = b.header(name, value);
    }
    let body = Full::new(Bytes::from(req.body))
        .map_err(|never| match never {})
        .boxed_unsync();
    b.body(body).map_err(|e| e.to_string())
}
