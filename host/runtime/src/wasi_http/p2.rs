//! A WASI 0.2 handler serving a request on a worker's instance: the instance a worker
//! keeps ([`HandlerSlot`]), a fresh one per request or reused, the call, and what its
//! response, trap or deadline answer.

use super::body::drain;
use super::handler::HttpHandler;
use super::heads::{Outparam, Sent, stream, watch};
use super::request::hyper_request;
use super::request::{BodyState, RequestBody};
use super::{Generation, HttpState, PastDeadline, Pre, ShutDown};
use crate::http::{Answer, Incoming, Reply};
use crate::supervise::{lock, report_failure};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::oneshot;
use wasmtime::{Store, UpdateDeadline};
use wasmtime_wasi_http::WasiHttpView;
use wasmtime_wasi_http::p2::bindings::http::types::Scheme;
use wasmtime_wasi_http::p2::bindings::sync::{Proxy, ProxyPre};
use wasmtime_wasi_http::p2::body::HostOutgoingBody;

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

impl HttpHandler {
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

    /// Serves one request on the worker's instance in `slot` (a fresh one unless the last
    /// may be used again); counts the call and its failures. When the guest sets its
    /// response, the head goes out at once through `reply` (taken), and its body streams
    /// while the guest writes it; otherwise the answer to send is returned.
    /// A used-up instance waits in the slot for [`HandlerSlot::tidy`].
    ///
    /// The call has a `handler` span; with trace export on, the request the guest gets
    /// carries that span's `traceparent` (its outgoing requests are the span's children).
    pub fn serve(
        self: &Arc<Self>,
        slot: &mut HandlerSlot,
        mut req: Incoming,
        body: Option<RequestBody>,
        reply: &mut Option<oneshot::Sender<Reply>>,
    ) -> Answer {
        let span = tracing::debug_span!(
            "handler",
            domain = self.name.as_str(),
            deadline_ms = u64::try_from(self.deadline.as_millis()).unwrap_or(u64::MAX),
            status = tracing::field::Empty,
        );
        let _entered = span.enter();
        if crate::telemetry::on()
            && let Some(headers) = crate::telemetry::carry_on(&req.headers, &span)
        {
            req.headers = headers;
        }
        slot.tidy();
        let answer = self.serve_on(slot, req, body, reply);
        // The answer is the client's unless the head went out already (streamed, whose
        // status the guest set; or a WASI 0.3 handler's, answered on its own runtime).
        if reply.is_some() {
            span.record("status", answer.status);
        }
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
        // Its guest code runs in a Store the kernel does not call: wake a resting ticker, so
        // the deadline is checked at every tick from the start.
        self.kernel.wake_ticker();
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
        self.settle(slot, called, sent, reply, over, until)
    }

    /// What a call to the handler answers, once it returned (`called`) having set `sent`
    /// (with `reply` still here unless the head went out): a response it held back goes
    /// now; a trap, a deadline or a body left unfinished is the failure's answer (or the
    /// refusal of the request's body, when that caused it), and the instance goes.
    fn settle(
        self: &Arc<Self>,
        slot: &mut HandlerSlot,
        called: wasmtime::Result<()>,
        sent: Option<Sent>,
        reply: &mut Option<oneshot::Sender<Reply>>,
        over: Option<Arc<BodyState>>,
        until: Instant,
    ) -> Answer {
        let fail = |code: u16, kind: &str, what: &str| {
            self.supervision.metrics.failure(&self.name, kind);
            Answer::text(code, format!("plugin {} {what}\n", self.name))
        };
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
                let finished = !slot
                    .instance
                    .as_mut()
                    .is_some_and(|i| unfinished(&mut i.store));
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
