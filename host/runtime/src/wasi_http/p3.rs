//! WASI 0.3 (p3) handlers: components exporting `wasi:http/handler@0.3` (world
//! `wasi:http/service`), served with wasmtime-wasi-http's p3 support.
//!
//! **Instances serve requests side by side.** A p3 handler's `handle` is an async export: one
//! instance may run many calls at once, each waiting for its I/O while others run. As under
//! `wasmtime serve` (48), an instance takes up to [`CONCURRENCY`] requests at once and
//! [`REUSE`] in all (`reuse` sets another number), and goes after [`IDLE`] without work; as
//! many instances as the handler's routes have workers run at once (each in a Store of its
//! own), and requests wait in a queue for room on one. Instances run as tasks on the WASI
//! runtime (tokio), with the component model's concurrency (`Store::run_concurrent`), on the
//! kernel's pooled concurrent engine; a request is handed over at once.
//!
//! **A request.** Each goes to `handle` as a `wasi:http/types.request` whose body streams from
//! the client (capped at the route's `max-body`), through wasmtime-wasi-http's `Prepared`
//! call. The head of the response goes out when `handle` returns it, and its body streams
//! behind it while the instance keeps running ([`super::body::StreamedBody`], cut off at the
//! request's deadline).
//!
//! **Failure.** A request with no response by its deadline answers 504 (the instance then
//! takes no more requests and goes once its others are done). Guest code that keeps the
//! processor yields to the runtime at every epoch tick, so a guest that computes past a
//! request's deadline is stopped: its instance is dropped with every request on it (504 for
//! those past their deadline, 500 for the others). A trap answers 500 to the requests on the
//! instance, which is dropped; an `error-code` answers 502. An instance that could not be
//! made answers 503 and restarts the domain with backoff, as for p2. At the end of a
//! shutdown's grace ([`HttpHandler::stop`]) every instance is dropped, whether its guest code
//! computes or waits, and its requests answer 503.

use super::HttpState;
use super::handler::HttpHandler;
use super::heads::stream;
use super::request::RequestBody;
use super::request::hyper_request;
use crate::http::{Answer, Incoming, Reply};
use crate::supervise::lock;
use futures::stream::{FuturesUnordered, StreamExt as _};
use lrpc_kernel::component::EngineKind;
use std::collections::{HashMap, VecDeque};
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::Poll;
use std::time::{Duration, Instant};
use tokio::sync::{Notify, oneshot};
use wasmtime::component::{Accessor, Linker};
use wasmtime::{AsContextMut as _, Engine, UpdateDeadline};
use wasmtime_wasi_http::WasiHttpView as _;
use wasmtime_wasi_http::handler::{ExpirationError, Prepared, Proxy, ProxyPre};
use wasmtime_wasi_http::p3::bindings::ServicePre;

/// The export of a WASI 0.3 handler (any 0.3 patch version).
pub(super) const HANDLER: &str = "wasi:http/handler@0.3";

/// Requests one instance serves in all unless `reuse` says otherwise (`wasmtime serve`'s
/// default for WASIp3 components).
pub(super) const REUSE: usize = 128;

/// Requests one instance serves at once (`wasmtime serve`'s default for WASIp3 components).
pub(super) const CONCURRENCY: usize = 16;

/// How long an instance with nothing to do is kept for the next request (as under `wasmtime
/// serve`).
const IDLE: Duration = Duration::from_secs(1);

/// How long past a request's deadline an instance that has not answered it, nor let its
/// expiry be seen (its guest code keeps the processor), is left before it is dropped.
const GRACE: Duration = Duration::from_millis(100);

/// How a p3 handler's instances serve.
#[derive(Debug, Clone, Copy)]
pub(super) struct Limits {
    /// Instances alive at once.
    pub instances: usize,
    /// Requests one instance serves in all.
    pub reuse: usize,
    /// A request's deadline.
    pub deadline: Duration,
}

/// Whether the component `wasm` exports WASI 0.3's `wasi:http/handler` (an export of the
/// component itself, not of one nested in it).
pub(super) fn exports_handler(wasm: &[u8]) -> bool {
    use wasmparser::{Parser, Payload};
    let mut depth = 0usize;
    for payload in Parser::new(0).parse_all(wasm) {
        let Ok(payload) = payload else { return false };
        match payload {
            Payload::ModuleSection { .. } | Payload::ComponentSection { .. } => depth += 1,
            Payload::End(_) => match depth.checked_sub(1) {
                Some(d) => depth = d,
                None => return false,
            },
            Payload::ComponentExportSection(exports) if depth == 0 => {
                for e in exports.into_iter().flatten() {
                    if e.name.name.starts_with(HANDLER) {
                        return true;
                    }
                }
            }
            _ => {}
        }
    }
    false
}

/// A p3 handler compiled for the pooled concurrent engine and linked: WASI 0.3 and
/// `wasi:http@0.3`, and WASI 0.2 as well (Rust's standard library for `wasm32-wasip2`
/// imports `wasi:cli@0.2`, also in p3 components).
pub(super) struct Pre {
    pre: ProxyPre<HttpState>,
    pub(super) engine: Engine,
}

/// Compiles `wasm` (or takes the kernel's code of the same bytes) and links it.
pub(super) fn prepare(kernel: &lrpc_kernel::Kernel, wasm: &[u8]) -> Result<Pre, String> {
    let e = |e: wasmtime::Error| format!("{e:#}");
    let component = kernel
        .compile_component(EngineKind::PooledConcurrent, wasm)
        .map_err(|e| format!("{e:#}"))?;
    let mut linker: Linker<HttpState> = Linker::new(component.engine());
    wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(e)?;
    wasmtime_wasi::p3::add_to_linker(&mut linker).map_err(e)?;
    wasmtime_wasi_http::p3::add_to_linker(&mut linker).map_err(e)?;
    let pre = linker.instantiate_pre(&component).map_err(e)?;
    let pre = ServicePre::new(pre).map_err(|e| format!("does not export {HANDLER}: {e:#}"))?;
    Ok(Pre {
        pre: ProxyPre::P3(pre),
        engine: component.engine().clone(),
    })
}

/// What became of a request handed to an instance.
type Outcome = Result<wasmtime_wasi_http::handler::Response, Failure>;

/// Why a request got no response.
#[derive(Debug)]
pub(super) enum Failure {
    /// No instance could be made.
    Instantiate(String),
    /// Its deadline passed.
    Deadline,
    /// The instance trapped (or was dropped with another request on it).
    Trap(String),
    /// The server is shutting down: the instance was stopped.
    Stopped,
    /// The guest answered with an `error-code`, or with a response that could not be sent.
    Error(String),
}

/// A request waiting for an instance.
struct Job {
    request: wasmtime_wasi_http::handler::Request,
    until: Instant,
    tx: oneshot::Sender<Outcome>,
}

/// A generation of a p3 handler: its component, and the instances serving it.
///
/// Its queue is not an [`crate::driver::pool::Pool`]: a p3 instance is an async task on the
/// handler's tokio runtime, not a thread, and takes several requests at once into one
/// concurrent `Store`. A pool thread runs one job to its end and owns no runtime; an
/// instance waits on a tokio `Notify`, which a pool thread's `Condvar` would block.
pub(super) struct Service {
    pre: Pre,
    handler: Weak<HttpHandler>,
    generation: u64,
    limits: Limits,
    queue: Mutex<VecDeque<Job>>,
    pushed: Notify,
    /// Instances alive.
    live: AtomicUsize,
    /// Instances that would take a request now.
    available: AtomicUsize,
}

impl Service {
    /// The service of generation `generation` of `handler`, of the component `pre`.
    pub(super) fn new(
        pre: Pre,
        handler: Weak<HttpHandler>,
        generation: u64,
        limits: Limits,
    ) -> Service {
        Service {
            pre,
            handler,
            generation,
            limits,
            queue: Mutex::default(),
            pushed: Notify::new(),
            live: AtomicUsize::new(0),
            available: AtomicUsize::new(0),
        }
    }

    /// Queues `job` for an instance; starts one if none would take it and there is room.
    fn submit(self: &Arc<Self>, job: Job) {
        lock(&self.queue).push_back(job);
        if self.available.load(Ordering::Acquire) == 0 {
            self.start_instance();
        }
        self.pushed.notify_one();
    }

    /// Starts an instance, unless as many as the limit are alive.
    fn start_instance(self: &Arc<Self>) {
        let room = self
            .live
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.limits.instances).then_some(n + 1)
            })
            .is_ok();
        if !room {
            return;
        }
        let me = self.clone();
        wasmtime_wasi::runtime::with_ambient_tokio_runtime(|| {
            tokio::spawn(async move {
                me.instance().await;
                me.live.fetch_sub(1, Ordering::AcqRel);
                // Requests left waiting get an instance of their own.
                if me.available.load(Ordering::Acquire) == 0 && !lock(&me.queue).is_empty() {
                    me.start_instance();
                }
            })
        });
    }

    /// Fails every queued request with `failure`.
    fn fail_queued(&self, failure: impl Fn() -> Failure) {
        let jobs = std::mem::take(&mut *lock(&self.queue));
        for j in jobs {
            let _ = j.tx.send(Err(failure()));
        }
    }

    /// A fresh instance in a fresh Store whose guest code yields at every tick, with the
    /// handler's stop flag and notice; `None` (and the queued requests failed) when the
    /// handler is gone or stopped, or instantiating failed or ran past the deadline.
    async fn instantiate(
        self: &Arc<Self>,
    ) -> Option<(
        wasmtime::Store<HttpState>,
        Proxy,
        Arc<std::sync::atomic::AtomicBool>,
        Arc<Notify>,
    )> {
        let Some(handler) = self.handler.upgrade() else {
            self.fail_queued(|| Failure::Instantiate("the handler is gone".into()));
            return None;
        };
        let (stopped, stopping) = (handler.stopped.clone(), handler.stopping.clone());
        if handler.stopped.load(Ordering::Acquire) {
            self.fail_queued(|| Failure::Stopped);
            return None;
        }
        let store = handler.new_store(&self.pre.engine, handler.memory_counter());
        drop(handler);
        let mut store = match store {
            Ok(s) => s,
            Err(e) => {
                self.fail_queued(|| Failure::Instantiate(e.clone()));
                return None;
            }
        };
        // Guest code that keeps the processor yields at every tick, so that the deadlines
        // below are seen while it runs.
        store.epoch_deadline_callback(|_| Ok(UpdateDeadline::Yield(1)));
        store.set_epoch_deadline(1);
        let made = tokio::time::timeout(
            self.limits.deadline,
            self.pre.pre.instantiate_async(&mut store),
        )
        .await;
        let proxy = match made {
            Ok(Ok(p)) => p,
            Ok(Err(e)) => {
                let e = format!("{e:#}");
                self.fail_queued(|| Failure::Instantiate(e.clone()));
                return None;
            }
            Err(_) => {
                self.fail_queued(|| {
                    Failure::Instantiate("instantiating ran past the deadline".into())
                });
                return None;
            }
        };
        Some((store, proxy, stopped, stopping))
    }

    /// One instance: made, then serving requests from the queue until it is used up, idle,
    /// or failed; then dropped.
    async fn instance(self: &Arc<Self>) {
        let Some((mut store, proxy, stopped, stopping)) = self.instantiate().await else {
            return;
        };
        // Registered before the flag is read: a stop after the read wakes it.
        let stop = pin!(stopping.notified());
        if stopped.load(Ordering::Acquire) {
            self.fail_queued(|| Failure::Stopped);
            return;
        }
        let Proxy::P3(guest) = &proxy else {
            return;
        };
        let func = *guest.wasi_http_handler().func_handle().func();

        // The requests taken and not answered yet: their reply channels and deadlines.
        let senders: Mutex<HashMap<usize, (Instant, oneshot::Sender<Outcome>)>> = Mutex::default();
        let watch = Mutex::new(Watch {
            state: State::Idle(Instant::now()),
            latest: None,
        });
        let mut open = Open {
            service: self,
            on: false,
        };
        let limits = self.limits;
        let proxy = &proxy;

        let function = async |accessor: &Accessor<HttpState>| -> wasmtime::Result<()> {
            let mut running: FuturesUnordered<Running<'_>> = FuturesUnordered::new();
            let mut taken = 0usize;
            let mut may_take = true;
            // Registered for a new request only while the instance has room, so that a
            // request queued wakes an instance that can take it.
            let mut pushed = pin!(self.pushed.notified());
            std::future::poll_fn(|cx| {
                loop {
                    if let Poll::Ready(Some((id, ran, rx))) = running.poll_next_unpin(cx) {
                        let Some((_, tx)) = lock(&senders).remove(&id) else {
                            continue;
                        };
                        let outcome = match ran {
                            Ok(answered) => {
                                may_take &= answered;
                                outcome(rx)
                            }
                            Err(e) => Err(Failure::Trap(format!("{e:#}"))),
                        };
                        let fatal = matches!(outcome, Err(Failure::Trap(_)));
                        let _ = tx.send(outcome);
                        if fatal {
                            // The instance may be in any state: it goes, with what else
                            // it serves.
                            return Poll::Ready(Err(wasmtime::format_err!("a request trapped")));
                        }
                        continue;
                    }
                    let ready = accessor.poll_ready_for_concurrent_call(func, cx).is_ready();
                    may_take &= taken < limits.reuse;
                    let room = may_take && ready && running.len() < CONCURRENCY;
                    open.set(room);
                    let job = if room {
                        pushed.as_mut().enable();
                        lock(&self.queue).pop_front()
                    } else {
                        // Not waiting: a wake-up it was given goes to another instance.
                        pushed.set(self.pushed.notified());
                        None
                    };
                    if job.is_none() && room && pushed.as_mut().poll(cx).is_ready() {
                        pushed.set(self.pushed.notified());
                        continue;
                    }
                    if let Some(job) = job {
                        let Job { request, until, tx } = job;
                        if tx.is_closed() {
                            // The client went away while it waited.
                            continue;
                        }
                        taken += 1;
                        lock(&senders).insert(taken, (until, tx));
                        running.push(start(accessor, proxy, request, until, taken, &watch));
                        if !lock(&self.queue).is_empty() {
                            // Another instance may take the next.
                            self.pushed.notify_one();
                        }
                        continue;
                    }
                    if !running.is_empty() {
                        lock(&watch).state = State::Busy;
                        break Poll::Pending;
                    }
                    if accessor.poll_no_interesting_tasks(cx).is_pending() {
                        // Responses' bodies still being written, or other work the guest
                        // left running.
                        lock(&watch).state = State::After;
                        break Poll::Pending;
                    }
                    if !(may_take && ready) {
                        break Poll::Ready(Ok(()));
                    }
                    let mut w = lock(&watch);
                    if !matches!(w.state, State::Idle(_)) {
                        w.state = State::Idle(Instant::now());
                    }
                    break Poll::Pending;
                }
            })
            .await
        };

        let result = watched(
            pin!(store.run_concurrent(function)),
            &stopped,
            stop,
            &watch,
            &senders,
        )
        .await;
        open.set(false);
        let left: Vec<_> = lock(&senders).drain().map(|(_, v)| v).collect();
        self.fail_left(left, result);
        drop(store);
    }

    /// Answers the requests `left` on an instance when it went, having ended with `result`.
    fn fail_left(
        &self,
        left: Vec<(Instant, oneshot::Sender<Outcome>)>,
        result: wasmtime::Result<()>,
    ) {
        let now = Instant::now();
        for (until, tx) in left {
            let failure = match &result {
                Err(e) if e.is::<super::ShutDown>() => Failure::Stopped,
                Err(e) if e.is::<super::PastDeadline>() && until <= now => Failure::Deadline,
                Err(e) => Failure::Trap(format!("{e:#}")),
                Ok(()) => Failure::Trap("the instance ended first".into()),
            };
            let _ = tx.send(Err(failure));
        }
        if let Err(e) = result {
            tracing::debug!(
                generation = self.generation,
                "a p3 handler instance failed: {e:#}"
            );
        }
    }
}

/// Runs an instance's event loop (`run`) until it ends, the server stops (`stopped`, or
/// `stop` woken), or a deadline of `watch`'s passes: the earliest of the requests taken and
/// not answered (plus [`GRACE`], failing with `PastDeadline`), of the work it left running
/// after the last answer, or [`IDLE`] after it went idle. Watched from outside the event
/// loop, which guest code that keeps the processor holds.
async fn watched(
    mut run: std::pin::Pin<&mut impl Future<Output = wasmtime::Result<wasmtime::Result<()>>>>,
    stopped: &std::sync::atomic::AtomicBool,
    mut stop: std::pin::Pin<&mut tokio::sync::futures::Notified<'_>>,
    watch: &Mutex<Watch>,
    senders: &Mutex<HashMap<usize, (Instant, oneshot::Sender<Outcome>)>>,
) -> wasmtime::Result<()> {
    let mut timer = pin!(tokio::time::sleep(IDLE));
    std::future::poll_fn(|cx| {
        if let Poll::Ready(r) = run.as_mut().poll(cx) {
            return Poll::Ready(r.and_then(|r| r));
        }
        // Shutdown: guest code that keeps the processor comes back here at every
        // tick; one that waits is woken by the stop.
        if stopped.load(Ordering::Acquire) || stop.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Err(wasmtime::Error::new(super::ShutDown)));
        }
        // Outside the instance's event loop, which guest code that keeps the
        // processor holds: the deadlines of requests it has not answered.
        let (due, late) = {
            let w = lock(watch);
            match w.state {
                State::Busy => {
                    let first = lock(senders).values().map(|(u, _)| *u).min();
                    (first.map(|u| u + GRACE), true)
                }
                State::After => (w.latest.map(|l| l + GRACE), false),
                State::Idle(since) => (Some(since + IDLE), false),
            }
        };
        if let Some(due) = due {
            if Instant::now() >= due {
                return Poll::Ready(if late {
                    Err(wasmtime::Error::new(super::PastDeadline))
                } else {
                    Ok(())
                });
            }
            timer.as_mut().reset(tokio::time::Instant::from_std(due));
            let _ = timer.as_mut().poll(cx);
        }
        Poll::Pending
    })
    .await
}

/// Where `Prepared::run` sends what became of a request.
type Sent =
    futures::channel::oneshot::Receiver<wasmtime::Result<wasmtime_wasi_http::handler::Response>>;

/// A request's call on an instance: its number, whether it answered by its deadline (or
/// why the call failed), and what it sent.
type Running<'a> =
    std::pin::Pin<Box<dyn Future<Output = (usize, wasmtime::Result<bool>, Sent)> + Send + 'a>>;

/// Starts a call on the instance of `accessor` for `request` (number `id`, due by `until`),
/// noting its deadline in the Store and in `watch`.
fn start<'a>(
    accessor: &'a Accessor<HttpState>,
    proxy: &'a Proxy,
    request: wasmtime_wasi_http::handler::Request,
    until: Instant,
    id: usize,
    watch: &Mutex<Watch>,
) -> Running<'a> {
    let (itx, irx) = futures::channel::oneshot::channel();
    let prepared = accessor.with(|mut store| {
        let latest = &mut store.get().deadline;
        *latest = Some(latest.map_or(until, |l| l.max(until)));
        Prepared::new(store.as_context_mut(), proxy, request, HttpState::http, itx)
    });
    {
        let mut w = lock(watch);
        w.state = State::Busy;
        w.latest = Some(w.latest.map_or(until, |l| l.max(until)));
    }
    Box::pin(async move {
        let expiry = tokio::time::sleep_until(tokio::time::Instant::from_std(until));
        let ran = match prepared {
            Ok(p) => p.run(accessor, expiry).await,
            Err(e) => Err(e),
        };
        (id, ran, irx)
    })
}

/// What became of a request whose call ended, from what `Prepared::run` sent.
fn outcome(mut rx: Sent) -> Outcome {
    match rx.try_recv() {
        Ok(Some(Ok(response))) => Ok(response),
        Ok(Some(Err(e))) => Err(if e.is::<ExpirationError>() {
            Failure::Deadline
        } else if let Some(code) =
            e.downcast_ref::<wasmtime_wasi_http::p3::bindings::http::types::ErrorCode>()
        {
            Failure::Error(format!("{code:?}"))
        } else {
            Failure::Trap(format!("{e:#}"))
        }),
        Ok(None) | Err(_) => Err(Failure::Trap("the call ended without an answer".into())),
    }
}

/// What an instance is doing, as its event loop last saw it (read from outside the loop).
struct Watch {
    state: State,
    /// The latest deadline of the requests it took.
    latest: Option<Instant>,
}

enum State {
    /// Requests not answered yet.
    Busy,
    /// All answered; work of theirs (response bodies) still running.
    After,
    /// Nothing to do, since then.
    Idle(Instant),
}

/// Whether an instance would take a request now, counted in its service's `available`.
struct Open<'a> {
    service: &'a Arc<Service>,
    on: bool,
}

impl Open<'_> {
    pub(super) fn set(&mut self, on: bool) {
        if on == self.on {
            return;
        }
        self.on = on;
        let s = self.service;
        if on {
            s.available.fetch_add(1, Ordering::AcqRel);
        } else if s.available.fetch_sub(1, Ordering::AcqRel) == 1 && !lock(&s.queue).is_empty() {
            // The last instance that would take a request no longer does: one more starts
            // if there is room (else a request waits for room on one).
            s.start_instance();
        }
    }
}

impl Drop for Open<'_> {
    fn drop(&mut self) {
        self.set(false);
    }
}

impl HttpHandler {
    /// Serves one request on the p3 handler's `service` (generation `generation`): hands it
    /// over and returns at once; the head goes out through `reply` (taken) when the handler
    /// answers, its body streaming behind it.
    pub(super) fn serve_p3(
        self: &Arc<Self>,
        service: &Arc<Service>,
        generation: u64,
        req: Incoming,
        body: Option<RequestBody>,
        reply: &mut Option<oneshot::Sender<Reply>>,
    ) -> Answer {
        let (request, over) = match hyper_request(req, body) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(plugin = self.name, "a request it can not take: {e}");
                return self.p3_fail(502, "malformed", "was passed a malformed request");
            }
        };
        let Some(tx) = reply.take() else {
            return self.p3_fail(500, "other", "answered where no reply could go");
        };
        let until = Instant::now() + self.deadline;
        let (jtx, jrx) = oneshot::channel();
        service.submit(Job {
            request,
            until,
            tx: jtx,
        });
        let me = self.clone();
        wasmtime_wasi::runtime::with_ambient_tokio_runtime(|| {
            tokio::spawn(async move {
                let mut tx = tx;
                let outcome = tokio::select! {
                    o = jrx => o,
                    // The client went away: the request is dropped (if still queued) or
                    // its response with it.
                    () = tx.closed() => return,
                };
                match outcome {
                    Ok(Ok(response)) => {
                        let (parts, body) = response.into_parts();
                        let _ = stream(tx, parts, body, until);
                    }
                    Ok(Err(f)) => {
                        let refusal = over.and_then(|o| o.refusal());
                        let _ = tx.send(me.p3_failed(f, refusal, generation).into());
                    }
                    Err(_) => {
                        let _ = tx.send(me.p3_fail(500, "other", "went away").into());
                    }
                }
            })
        });
        // Not sent: the reply channel went with the request.
        Answer {
            status: 202,
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    /// The answer to a request that failed with `f`.
    /// (`refusal`, when the request body caused it: too large or too late).
    fn p3_failed(self: &Arc<Self>, f: Failure, refusal: Option<Answer>, generation: u64) -> Answer {
        if let Some(answer) = refusal {
            self.supervision.metrics.failure(&self.name, "malformed");
            return answer;
        }
        match f {
            Failure::Instantiate(e) => {
                tracing::warn!(plugin = self.name, "instantiating failed: {e}");
                self.died(generation);
                self.p3_fail(503, "terminated", "is restarting")
            }
            Failure::Deadline => self.p3_fail(504, "deadline", "ran past its deadline"),
            Failure::Stopped => self.p3_fail(
                503,
                "terminated",
                "was stopped: the server is shutting down",
            ),
            Failure::Trap(e) => {
                crate::supervise::report_failure(&self.name, || format!("trapped: {e}"));
                self.p3_fail(500, "trap", "trapped")
            }
            Failure::Error(e) => {
                crate::supervise::report_failure(&self.name, || {
                    format!("answered with an error: {e}")
                });
                self.p3_fail(502, "malformed", "answered with an error")
            }
        }
    }

    /// A failure's answer, counted.
    fn p3_fail(&self, code: u16, kind: &str, what: &str) -> Answer {
        self.supervision.metrics.failure(&self.name, kind);
        Answer::text(code, format!("plugin {} {what}\n", self.name))
    }
}
