//! A WASI 0.2 handler serving a request: a task on the runtime of the connection that
//! brought it (wasmtime's async bindings), on an instance of the handler's own (a fresh one
//! per request, or an idle one it may use again), the call, and what its response, trap or
//! deadline answer.
//!
//! **Where it runs.** The request's task runs the guest on the thread that runs the
//! connection, with no hand-over to a worker thread and back. Guest code that keeps the
//! processor yields at every epoch tick, so a long computation takes turns with the
//! connections of its thread. At most the handler's room (`Instances`: its routes'
//! `workers`) of its requests run at once; the others wait for room, and one whose client
//! went away meanwhile is not run.

use super::body::drain;
use super::handler::HttpHandler;
use super::heads::{HOLD, Outparam, Sent, stream};
use super::instances::{AtWork, HandlerInstance};
use super::request::hyper_request;
use super::request::{BodyState, RequestBody};
use super::{Generation, HttpState, PastDeadline, Pre, ShutDown};
use crate::http::{Answer, Incoming, Reply};
use crate::supervise::{lock, report_failure};
use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Instant;
use tokio::sync::oneshot;
use tracing::Instrument as _;
use wasmtime::{Store, UpdateDeadline};
use wasmtime_wasi_http::WasiHttpView;
use wasmtime_wasi_http::p2::bindings::ProxyPre;
use wasmtime_wasi_http::p2::bindings::http::types::Scheme;
use wasmtime_wasi_http::p2::body::HostOutgoingBody;

impl HttpHandler {
    /// Serves one request: the answer goes through `reply`, the head as soon as the guest
    /// sets it (its body streaming while the guest writes it), or the failure's answer. A
    /// WASI 0.2 handler's request runs as a task of its own (see the module's doc); `reuse`
    /// is the route's, over the handler's.
    ///
    /// With `here`, called on a thread of the runtime, the task first runs on this thread
    /// until it ends or waits, and is spawned only then. A handler that answers without
    /// waiting (most do, reusing an instance) then costs no spawned task (see `watched` for
    /// what the two save together). Without it the call returns at once.
    ///
    /// The call has a `handler` span; with trace export on, the request the guest gets
    /// carries that span's `traceparent` (its outgoing requests are the span's children).
    pub fn serve(
        self: &Arc<Self>,
        mut req: Incoming,
        body: Option<RequestBody>,
        reply: oneshot::Sender<Reply>,
        reuse: Option<usize>,
        here: bool,
    ) {
        let span = tracing::debug_span!(
            "handler",
            domain = self.name.as_str(),
            deadline_ms = u64::try_from(self.deadline.as_millis()).unwrap_or(u64::MAX),
            status = tracing::field::Empty,
        );
        if crate::telemetry::on()
            && let Some(headers) = crate::telemetry::carry_on(&req.headers, &span)
        {
            req.headers = headers;
        }
        let entered = span.enter();
        let answer = |answer: Answer, reply: oneshot::Sender<Reply>| {
            span.record("status", answer.status);
            let _ = reply.send(answer.into());
        };
        let current = match self.admit() {
            Ok(current) => current,
            Err(refused) => return answer(refused, reply),
        };
        if let Pre::P3(service) = &current.pre {
            let mut reply = Some(reply);
            let a = self.serve_p3(service, current.generation, req, body, &mut reply);
            // Not sent: the head goes out when the handler answers.
            if let Some(tx) = reply {
                answer(a, tx);
            }
            return;
        }
        drop(entered);
        let me = self.clone();
        let task = async move {
            let mut reply = Some(reply);
            let mut work = None;
            let answer = me
                .serve_p2(&current, req, body, &mut reply, &mut work)
                .await;
            // The answer is the client's unless the head went out already (streamed, whose
            // status the guest set).
            if let Some(tx) = reply {
                tracing::Span::current().record("status", answer.status);
                let _ = tx.send(answer.into());
            }
            if let Some(work) = work {
                me.put_back(work, &current, reuse).await;
            }
        };
        let mut task = Box::pin(task.instrument(span));
        if here {
            // Polled here until it first waits, with a waker that does nothing: a task that
            // waits is spawned below, and its first poll there registers the runtime's waker
            // with what it waits for. A panic ends the task as tokio's harness would: the
            // reply channel goes with it, and the client is answered 500.
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            let polled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                task.as_mut().poll(&mut cx)
            }));
            if !matches!(polled, Ok(Poll::Pending)) {
                return;
            }
        }
        wasmtime_wasi::runtime::with_ambient_tokio_runtime(|| {
            tokio::spawn(task);
        });
    }

    /// Counts the call; the generation to serve it, unless the handler is stopped or
    /// restarting (then the answer).
    fn admit(self: &Arc<Self>) -> Result<Arc<Generation>, Answer> {
        self.calls.inc();
        if self.stopped.load(Ordering::Acquire) {
            return Err(self.fail(
                503,
                "terminated",
                "was stopped: the server is shutting down",
            ));
        }
        // Its guest code runs in a Store the kernel does not call: wake a resting ticker, so
        // the deadline is checked at every tick from the start.
        self.kernel.wake_ticker();
        let current = self.current();
        if self.down.load(Ordering::Acquire) {
            // Schedules another attempt if the last restart failed.
            self.died(current.generation);
            return Err(self.fail(503, "terminated", "is restarting"));
        }
        Ok(current)
    }

    /// Counts a failure of `kind`; its answer.
    fn fail(&self, code: u16, kind: &str, what: &str) -> Answer {
        self.supervision.metrics.failure(&self.name, kind);
        Answer::text(code, format!("plugin {} {what}\n", self.name))
    }

    /// Serves a request of a WASI 0.2 generation: waits for room, takes an idle instance or
    /// makes one (into `work`), and calls it.
    async fn serve_p2(
        self: &Arc<Self>,
        current: &Generation,
        req: Incoming,
        body: Option<RequestBody>,
        reply: &mut Option<oneshot::Sender<Reply>>,
        work: &mut Option<AtWork>,
    ) -> Answer {
        let Pre::P2(pre) = &current.pre else {
            return self.fail(500, "other", "changed its kind");
        };
        let room = {
            let Some(tx) = reply.as_mut() else {
                return self.fail(500, "other", "answered where no reply could go");
            };
            tokio::select! {
                room = self.instances.room.clone().acquire_owned() => room.ok(),
                // The client went away while the request waited: it is not run.
                () = tx.closed() => None,
            }
        };
        let Some(room) = room else {
            return Answer::text(503, "the client went away\n".into());
        };
        let idle = lock(&self.instances.idle).pop();
        let at_work = work.insert(AtWork {
            instance: idle.filter(|i| i.generation == current.generation),
            _room: room,
        });
        if at_work.instance.is_none() {
            match self.instantiate(current, pre).await {
                Ok(i) => at_work.instance = Some(i),
                Err(e) => {
                    tracing::warn!(plugin = self.name, "instantiating failed: {e}");
                    self.died(current.generation);
                    return self.fail(503, "terminated", "is restarting");
                }
            }
        }
        self.call(&mut at_work.instance, req, body, reply).await
    }

    /// After the answer: an instance that may serve again waits among the idle ones; one
    /// used up, failed or of an old generation is dropped, once the answer's task has run
    /// (giving its memory back to the pool is not part of the request's time).
    async fn put_back(&self, mut work: AtWork, current: &Generation, reuse: Option<usize>) {
        let again = work.instance.as_ref().is_some_and(|i| {
            i.served < reuse.unwrap_or(self.reuse)
                && i.generation == current.generation
                && !self.stopped.load(Ordering::Acquire)
        });
        if again {
            if let Some(i) = work.instance.take() {
                lock(&self.instances.idle).push(i);
            }
        } else if work.instance.is_some() {
            tokio::task::yield_now().await;
        }
        drop(work);
    }

    /// A fresh instance of the generation `generation`, in a fresh Store whose memory is
    /// counted in [`HttpHandler::memory`].
    async fn instantiate(
        &self,
        generation: &Generation,
        pre: &ProxyPre<HttpState>,
    ) -> Result<HandlerInstance, String> {
        let mut store = self.new_store(&self.engine, self.memory_counter())?;
        store.data_mut().deadline = Some(Instant::now() + self.deadline);
        let stopped = self.stopped.clone();
        store.epoch_deadline_callback(move |ctx| match ctx.data().deadline {
            _ if stopped.load(Ordering::Relaxed) => Err(wasmtime::Error::new(ShutDown)),
            Some(d) if Instant::now() >= d => Err(wasmtime::Error::new(PastDeadline)),
            // Guest code that keeps the processor takes turns with its thread's other tasks.
            _ => Ok(UpdateDeadline::Yield(1)),
        });
        store.set_epoch_deadline(1);
        let proxy = pre
            .instantiate_async(&mut store)
            .await
            .map_err(|e| format!("{e:#}"))?;
        store.data_mut().deadline = None;
        Ok(HandlerInstance {
            generation: generation.generation,
            store,
            proxy,
            served: 0,
        })
    }

    /// Calls the instance in `slot` with the request; counts its failures. When the guest
    /// sets its response, the head goes out through `reply` (taken) a moment later if the
    /// guest runs on (see [`Outparam`]); otherwise the answer to send is returned. The
    /// instance is dropped if it failed.
    async fn call(
        self: &Arc<Self>,
        slot: &mut Option<HandlerInstance>,
        req: Incoming,
        body: Option<RequestBody>,
        reply: &mut Option<oneshot::Sender<Reply>>,
    ) -> Answer {
        let Some(inst) = slot.as_mut() else {
            return self.fail(503, "terminated", "is restarting");
        };
        let (request, over) = match hyper_request(req, body) {
            Ok(r) => r,
            Err(e) => {
                report_failure(&self.name, || format!("a request it can not take: {e}"));
                return self.fail(502, "malformed", "was passed a malformed request");
            }
        };
        let until = Instant::now() + self.deadline;
        let outparam = Arc::new(Mutex::new(Outparam {
            reply: reply.take(),
            sent: None,
            until,
        }));
        let sink = outparam.clone();
        let resources = {
            let mut http = inst.store.data_mut().http();
            http.new_incoming_request(Scheme::Http, request)
                .and_then(|r| {
                    let out =
                        http.new_response_outparam_from_callback(move |v| lock(&sink).set(v))?;
                    Ok((r, out))
                })
        };
        let (request, out) = match resources {
            Ok(r) => r,
            Err(e) => {
                *reply = lock(&outparam).reply.take();
                report_failure(&self.name, || format!("passing the request: {e:#}"));
                return self.fail(502, "malformed", "was passed a malformed request");
            }
        };
        inst.store.data_mut().deadline = Some(until);
        let called = {
            let call =
                inst.proxy
                    .wasi_http_incoming_handler()
                    .call_handle(&mut inst.store, request, out);
            self.watched(call, &outparam, until).await
        };
        inst.store.data_mut().deadline = None;
        inst.served += 1;
        let (sent, unsent) = {
            let mut o = lock(&outparam);
            (o.sent.take(), o.reply.take())
        };
        // The reply channel, unless the head went out through it.
        *reply = unsent;
        self.settle(slot, called, sent, reply, over, until)
    }

    /// Runs the guest's `call` to its end, unless the handler is stopped or the request's
    /// deadline passes while the guest waits (guest code that computes is stopped at an
    /// epoch tick either way). A response the guest set is held back while the call runs
    /// on, [`HOLD`] at most: then its head goes out and its body streams.
    async fn watched(
        &self,
        call: impl Future<Output = wasmtime::Result<()>>,
        outparam: &Mutex<Outparam>,
        until: Instant,
    ) -> wasmtime::Result<()> {
        let mut stopping = pin!(self.stopping.notified());
        stopping.as_mut().enable();
        if self.stopped.load(Ordering::Acquire) {
            return Err(wasmtime::Error::new(ShutDown));
        }
        let mut call = pin!(call);
        let mut hold: Option<Pin<Box<tokio::time::Sleep>>> = None;
        // The deadline's timer is made when the guest first waits (or yields at a tick), not
        // for every call: registering a timer wakes the runtime's parked thread, and a call
        // that never waits (most, reusing an instance) needs none. With both this and the
        // task started here (`serve`), the reused hello handler made 0.3 futex calls and
        // 0.2 eventfd writes a request where it made 0.6 of each, and took about 6% less
        // processor time a request (median of five interleaved rounds).
        let mut deadline: Option<Pin<Box<tokio::time::Sleep>>> = None;
        let run = std::future::poll_fn(|cx| {
            if let Poll::Ready(r) = call.as_mut().poll(cx) {
                return Poll::Ready(r);
            }
            let timer =
                deadline.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(until.into())));
            if timer.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Err(wasmtime::Error::new(PastDeadline)));
            }
            let mut o = lock(outparam);
            if o.held() {
                let timer = hold.get_or_insert_with(|| Box::pin(tokio::time::sleep(HOLD)));
                if timer.as_mut().poll(cx).is_ready() {
                    o.send_head();
                }
            }
            Poll::Pending
        });
        tokio::select! {
            called = run => called,
            () = stopping => Err(wasmtime::Error::new(ShutDown)),
        }
    }

    /// What a call to the handler answers, once it returned (`called`) having set `sent`
    /// (with `reply` still here unless the head went out): a response it held back goes
    /// now; a trap, a deadline or a body left unfinished is the failure's answer (or the
    /// refusal of the request's body, when that caused it), and the instance goes.
    fn settle(
        &self,
        slot: &mut Option<HandlerInstance>,
        called: wasmtime::Result<()>,
        sent: Option<Sent>,
        reply: &mut Option<oneshot::Sender<Reply>>,
        over: Option<Arc<BodyState>>,
        until: Instant,
    ) -> Answer {
        let fail = |code: u16, kind: &str, what: &str| self.fail(code, kind, what);
        // A response held back that the guest gave past its deadline (it waited for something
        // the deadline cut short, an outgoing request say, then answered) is 504, as when the
        // guest is stopped at a tick: which of the two comes first must not pick the answer.
        if called.is_ok() && matches!(sent, Some(Sent::Held(_))) && Instant::now() >= until {
            return fail(504, "deadline", "ran past its deadline");
        }
        // A response still held back goes now: whole when the guest finished its body (all
        // of it waits in the body's buffer then), else streaming, to be cut off below. After
        // a trap, nothing of it went out: the client gets the failure's answer instead.
        let sent = match sent {
            Some(Sent::Held(response)) if called.is_ok() => {
                let finished = !slot.as_mut().is_some_and(|i| unfinished(&mut i.store));
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
            *slot = None;
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
            *slot = None;
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
                if slot.as_mut().is_some_and(|i| unfinished(&mut i.store)) {
                    report_failure(&self.name, || "returned with its body unfinished".into());
                    body.end_badly();
                    *slot = None;
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
