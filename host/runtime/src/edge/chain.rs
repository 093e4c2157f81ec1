//! A seat at work: what a thread keeps between a route's requests (driver, bindings,
//! handler instance), and one request through the chain's plugins, then its handler, with
//! restarts waited for and the driver's deadline.

use super::RouteRt;
use super::codec::{decode_request, decode_response};
use super::response::shutting_down;
use crate::deploy::{Deployment, Plugin, PluginInstance};
use crate::driver::{BindError, ChainEnd, Driver};
use crate::http::{Answer, Reply};
use crate::supervise::report_failure;
use crate::wasi_http::RequestBody;
use lrpc_kernel::Status;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// What a thread that serves a route's requests keeps between them: its driver domain (by
/// its name) and the plugin generations the driver is bound to.
pub(super) struct Seat {
    name: String,
    driver: Option<Driver>,
    bound: Vec<Option<Arc<PluginInstance>>>,
    /// Time the last request spent on the seat's own setup (a driver started, plugins bound
    /// after a restart or reload), which is not the route's.
    setup: Duration,
    /// The last request ended in a plugin's trap: its time is mostly the kernel's
    /// terminating the plugin, not the route's.
    trapped: bool,
    /// When [`ChainRun::set_up`] began work this request, if it did.
    setup_began: Option<Instant>,
    /// The route's gauge of its drivers' memory, and what this seat's driver added to it.
    drivers: prometheus_client::metrics::gauge::Gauge,
    counted: i64,
}

impl Seat {
    /// Of the last request's time `took`, what counts toward the route's average: without
    /// the seat's setup, and nothing after a plugin's trap. Resets both for the next.
    pub(super) fn route_time(&mut self, took: Duration) -> Option<Duration> {
        let setup = std::mem::take(&mut self.setup);
        (!std::mem::take(&mut self.trapped)).then(|| took.saturating_sub(setup))
    }

    pub(super) fn new(name: String, rt: &RouteRt) -> Seat {
        Seat {
            name,
            driver: None,
            bound: vec![None; rt.plugins.len()],
            setup: Duration::ZERO,
            trapped: false,
            setup_began: None,
            drivers: rt.meters.drivers.clone(),
            counted: 0,
        }
    }

    /// After a request: lets go of plugin generations that were replaced (so that they can
    /// be released), has a plugin generation whose memory grew past `[serve] recycle-above`
    /// replaced, and drops the driver when its own memory did (its bindings, and their
    /// segments, go with it; a fresh driver starts at the next request). Reads atomics only,
    /// unless something is to be replaced.
    fn tidy(&mut self, dep: &Deployment, rt: &RouteRt) {
        for (b, plugin) in self.bound.iter_mut().zip(&rt.plugins) {
            if let Some(inst) = b {
                if inst.generation != plugin.generation() {
                    *b = None;
                } else if plugin.recycle_if_grown(inst) {
                    // Its replacement comes in a moment; the seat binds to it then.
                    tracing::debug!(plugin = plugin.name, "recycling a grown plugin");
                }
            }
        }
        let memory = self
            .driver
            .as_ref()
            .map_or(0, |d| d.domain().memory_bytes());
        if let Some(mark) = dep.config.recycle_above
            && memory > mark
            && let Some(d) = self.driver.take()
        {
            tracing::debug!(driver = self.name, memory, "replacing a grown edge driver");
            dep.kernel.terminate(d.domain());
            self.bound.iter_mut().for_each(|b| *b = None);
            dep.metrics.recycled("edge-driver", "memory");
            self.count_driver(0);
        } else {
            self.count_driver(memory);
        }
    }

    /// Sets this seat's share of the route's driver memory gauge to `bytes`.
    fn count_driver(&mut self, bytes: usize) {
        let bytes = i64::try_from(bytes).unwrap_or(i64::MAX);
        if bytes != self.counted {
            self.drivers.inc_by(bytes - self.counted);
            self.counted = bytes;
        }
    }

    /// Whether a request served now would start this seat's driver (and so take longer
    /// than the route's requests do).
    pub(super) fn cold(&self, rt: &RouteRt) -> bool {
        self.driver.is_none() && !rt.plugins.is_empty()
    }

    /// Starts the driver and binds it to the route's plugins, ahead of any request; whether
    /// that worked.
    pub(super) fn warm(&mut self, dep: &Deployment, rt: &RouteRt) -> bool {
        let mut w = ChainRun {
            dep,
            rt,
            seat: self,
            reply: None,
            body: None,
        };
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| w.ready().is_ok()))
            .unwrap_or(false)
            && !self.cold(rt)
    }

    /// Serves one request; a panic below (a kernel bug) costs this request and the driver,
    /// not the thread. A `wasi:http` handler sends its streamed head through `reply`; the
    /// answer, and `reply` unless it was used.
    pub(super) fn serve(
        &mut self,
        dep: &Deployment,
        rt: &RouteRt,
        request: &[u8],
        reply: Option<oneshot::Sender<Reply>>,
        body: Option<RequestBody>,
    ) -> (Answer, Option<oneshot::Sender<Reply>>) {
        let _running = Serving::new(&rt.running);
        let mut w = ChainRun {
            dep,
            rt,
            seat: self,
            reply,
            body,
        };
        let answer = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| w.serve(request)))
            .unwrap_or_else(|_| {
                tracing::error!("a request panicked; the driver is replaced");
                w.drop_driver();
                Answer::text(500, "internal error\n".into())
            });
        let reply = w.reply;
        self.tidy(dep, rt);
        (answer, reply)
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        self.count_driver(0);
    }
}

/// A request a seat is serving, counted in its route's `running` while it lives.
pub(super) struct Serving<'a>(&'a AtomicUsize);

impl<'a> Serving<'a> {
    pub(super) fn new(running: &'a AtomicUsize) -> Serving<'a> {
        running.fetch_add(1, Ordering::SeqCst);
        Serving(running)
    }
}

impl Drop for Serving<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The longest a request's walk through `plugins` may take, for the deadline of the driver
/// that walks it. The driver's deadline runs on while a plugin runs, so it must outlast every
/// plugin's: each call may wait for a busy replica as long as its deadline, then run as long,
/// and the driver's own work gets a second. (The kernel's default deadline would otherwise
/// end the driver, and with it the request as a 500, before a plugin allowed more ran out.)
/// Capped at a day, where a sum of deadlines set for other reasons stops meaning anything.
fn chain_deadline(plugins: &[Arc<Plugin>]) -> Duration {
    const CAP: Duration = Duration::from_secs(24 * 60 * 60);
    plugins
        .iter()
        .fold(Duration::from_secs(1), |sum, p| {
            sum.saturating_add(p.deadline().saturating_mul(2))
        })
        .min(CAP)
}

/// A seat at work on one request of a route: the chain's plugins in order, then the
/// route's `wasi:http` handler.
struct ChainRun<'a> {
    dep: &'a Deployment,
    rt: &'a RouteRt,
    seat: &'a mut Seat,
    /// Where a `wasi:http` handler sends its head as soon as it sets it.
    reply: Option<oneshot::Sender<Reply>>,
    /// The request body, when it streams to the handler.
    body: Option<RequestBody>,
}

/// Why a seat is not ready for a request: the answer to give, or a plugin to wait for.
enum Stop {
    Answer(Answer),
    Restarting(Restarting),
}

/// A plugin of the chain was terminated before it ran the request (by another request's
/// fault, a reload, or the kernel): generation `generation` of the plugin in `slot`.
struct Restarting {
    slot: usize,
    generation: u64,
}

impl ChainRun<'_> {
    fn serve(&mut self, request: &[u8]) -> Answer {
        if self.rt.plugins.is_empty() {
            // A `wasi:http` handler alone.
            return self.handle(request, "the client");
        }
        // A plugin that was terminated under the request is waited for, once, as long as
        // one call into it may take: the request then goes through the chain again on the
        // fresh instance (the plugins before it run again; the terminated one never ran).
        let mut waited = false;
        loop {
            let r = match self.serve_chain(request) {
                Ok(answer) => return answer,
                Err(r) => r,
            };
            let plugin = &self.rt.plugins[r.slot];
            // A request whose client went away is not run again.
            let gone = self.reply.as_ref().is_some_and(oneshot::Sender::is_closed);
            if !waited && !gone && !plugin.stopped() {
                waited = true;
                let until = Instant::now() + plugin.deadline();
                lrpc_kernel::pace::about_to_wait();
                if plugin.wait_past(r.generation, until) {
                    continue;
                }
            }
            self.dep.metrics.failure(&plugin.name, "terminated");
            if plugin.stopped() {
                // Terminated at the end of a shutdown's grace: it is not restarted.
                return shutting_down();
            }
            return Answer::text(503, format!("plugin {} is restarting\n", plugin.name));
        }
    }

    /// Runs the request through the chain once: the answer, or the plugin that was
    /// terminated before it could run it.
    fn serve_chain(&mut self, request: &[u8]) -> Result<Answer, Restarting> {
        match self.ready() {
            Ok(()) => {}
            Err(Stop::Answer(a)) => return Ok(a),
            Err(Stop::Restarting(r)) => return Err(r),
        }
        let Some(driver) = &self.seat.driver else {
            return Ok(Answer::text(500, "no driver\n".into()));
        };
        let end = {
            let _s = tracing::debug_span!("chain", plugins = self.rt.plugins.len()).entered();
            driver.chain(self.rt.plugins.len(), request, self.rt.bodyless)
        };
        let metrics = &self.dep.metrics;
        // The plugins the request reached, in chain order: up to the one that answered or
        // failed (the driver's slot, bounded by the chain), or all of them.
        let reached = match &end {
            Ok(
                ChainEnd::Responded { slot, .. }
                | ChainEnd::Failed { slot, .. }
                | ChainEnd::RewroteBody { slot },
            ) => slot.saturating_add(1),
            Ok(ChainEnd::Unanswered { .. }) => self.rt.calls.len(),
            Err(_) => 0,
        };
        for c in self.rt.calls.iter().take(reached) {
            c.inc();
        }
        Ok(match end {
            Ok(ChainEnd::Responded { slot, response }) => decode_response(&response)
                .unwrap_or_else(|| {
                    let name = self.plugin_name(slot);
                    metrics.failure(&name, "malformed");
                    Answer::text(
                        502,
                        format!("plugin {name} answered with a malformed response\n"),
                    )
                }),
            Ok(ChainEnd::Failed { slot, status }) => {
                let name = self.plugin_name(slot);
                // A dead component keeps answering with the fault that killed it until its
                // restart: once that fault is reported, it is restarting. (A dead core
                // domain answers `ServerTerminated` instead, so a core plugin's trap or
                // deadline is always this call's own, whatever restart is pending.)
                let bound = self.seat.bound.get(slot).and_then(Option::as_ref);
                let restarting = status.is_call_failed()
                    && bound.is_some_and(|b| b.core().is_none())
                    && self.rt.plugins.get(slot).is_some_and(|p| p.restarting());
                // Terminated before it ran this request (by another request's fault, a
                // reload, or the kernel): the caller waits for the fresh instance.
                if restarting || matches!(status, Status::ServerTerminated | Status::StaleBinding) {
                    tracing::debug!(plugin = name, %status, "plugin terminated under a request");
                    let taken = self.seat.bound.get_mut(slot).and_then(Option::take);
                    let plugin = &self.rt.plugins[slot];
                    let generation = taken.map_or_else(|| plugin.generation(), |i| i.generation);
                    plugin.died(generation);
                    return Err(Restarting { slot, generation });
                }
                let (code, kind, what) = match status {
                    Status::ServerTrapped => (502, "trap", "trapped"),
                    Status::DeadlineExceeded => (504, "deadline", "ran past its deadline"),
                    Status::BadReply => (502, "malformed", "answered with a malformed action"),
                    _ => (502, "other", "failed"),
                };
                // An isolated plugin that faulted was reset (a component's instance
                // replaced), not terminated: it stays bound and serves the next request at
                // once.
                let reset = status.is_call_failed()
                    && self
                        .seat
                        .bound
                        .get(slot)
                        .and_then(Option::as_ref)
                        .is_some_and(|b| b.survived_fault());
                metrics.failure(&name, kind);
                report_failure(&name, || {
                    if reset {
                        format!(
                            "plugin call failed: {status} (an isolated plugin: reset, not restarted)"
                        )
                    } else {
                        format!("plugin call failed: {status}")
                    }
                });
                self.seat.trapped |= status == Status::ServerTrapped;
                if (status.is_call_failed() || status == Status::StaleBinding)
                    && !reset
                    && let (Some(p), Some(b)) =
                        (self.rt.plugins.get(slot), self.seat.bound.get_mut(slot))
                    && let Some(inst) = b.take()
                {
                    p.died(inst.generation);
                }
                Answer::text(code, format!("plugin {name} {what}\n"))
            }
            Ok(ChainEnd::RewroteBody { slot }) => {
                let name = self.plugin_name(slot);
                metrics.failure(&name, "malformed");
                tracing::warn!(plugin = name, "rewrote the body, but takes none");
                Answer::text(
                    502,
                    format!("plugin {name} rewrote the body, but takes none (`body = \"none\"`)\n"),
                )
            }
            Ok(ChainEnd::Unanswered { request }) => {
                if self.rt.handler.is_some() {
                    let last = self.plugin_name(self.rt.plugins.len().saturating_sub(1));
                    self.handle(&request, &format!("plugin {last}"))
                } else {
                    Answer::text(502, "no plugin of the chain answered\n".into())
                }
            }
            Err(e) => {
                tracing::error!("the driver failed: {e}");
                self.drop_driver();
                Answer::text(500, "the edge driver failed\n".into())
            }
        })
    }

    /// The seat's driver started and bound to the current generation of each plugin of
    /// the chain (the answer to give instead when that fails, or the plugin to wait for).
    fn ready(&mut self) -> Result<(), Stop> {
        let r = self.set_up();
        if let Some(began) = self.seat.setup_began.take() {
            self.seat.setup += began.elapsed();
        }
        r
    }

    /// [`ChainRun::ready`]'s work; notes in `setup_began` when it began starting a driver or
    /// binding a plugin (the clock is read only then).
    fn set_up(&mut self) -> Result<(), Stop> {
        if self.seat.driver.is_none() {
            self.seat.setup_began.get_or_insert_with(Instant::now);
            match Driver::new(&self.dep.kernel, &self.seat.name) {
                Ok(mut d) => {
                    d.set_deadline(chain_deadline(&self.rt.plugins));
                    self.seat.driver = Some(d);
                }
                Err(e) => {
                    tracing::error!("starting a driver: {e}");
                    return Err(Stop::Answer(Answer::text(
                        500,
                        "the edge driver could not start\n".into(),
                    )));
                }
            }
            self.seat.bound.iter_mut().for_each(|b| *b = None);
        }
        let Some(driver) = &self.seat.driver else {
            return Err(Stop::Answer(Answer::text(500, "no driver\n".into())));
        };
        // The interfaces' plans (fingerprint and procedures; one per plugin version, strings
        // and bytes), made only when a plugin needs binding: planning an interface costs
        // more than a whole chain of calls.
        let mut plans: [Option<(u64, usize)>; 2] = [None, None];
        for (slot, plugin) in self.rt.plugins.iter().enumerate() {
            // The generation count first: it is read by every request and written only by
            // a reload or restart, where taking the current instance writes a lock and a
            // reference count.
            let bound = |b: &Option<Arc<PluginInstance>>, g: u64| {
                b.as_ref().is_some_and(|b| b.generation == g)
            };
            if bound(&self.seat.bound[slot], plugin.generation()) {
                continue;
            }
            let cur = plugin.current();
            if bound(&self.seat.bound[slot], cur.generation) {
                continue;
            }
            self.seat.setup_began.get_or_insert_with(Instant::now);
            let plan = &mut plans[usize::from(!plugin.speaks_strings())];
            let (fingerprint, procs) = match plan {
                Some(p) => *p,
                None => match self.dep.kernel.interface(plugin.interface()) {
                    Ok(p) => *plan.insert((p.fingerprint, p.procs.len())),
                    Err(e) => return Err(Stop::Answer(Answer::text(500, format!("{e}\n")))),
                },
            };
            match driver.bind(slot, &cur.export, fingerprint, procs) {
                Ok(()) => self.seat.bound[slot] = Some(cur),
                Err(BindError::Status(s)) => {
                    tracing::debug!(plugin = plugin.name, "binding failed: {s}");
                    self.seat.bound[slot] = None;
                    plugin.died(cur.generation);
                    return Err(Stop::Restarting(Restarting {
                        slot,
                        generation: cur.generation,
                    }));
                }
                Err(BindError::Driver(e)) => {
                    tracing::error!("the driver failed: {e}");
                    self.drop_driver();
                    return Err(Stop::Answer(Answer::text(
                        500,
                        "the edge driver failed\n".into(),
                    )));
                }
            }
        }
        Ok(())
    }

    /// Hands `request` (encoded as `handle`'s arguments, as `from` passed it on) to the
    /// route's `wasi:http` handler, which answers through the reply channel (taken).
    fn handle(&mut self, request: &[u8], from: &str) -> Answer {
        let Some(h) = &self.rt.handler else {
            return Answer::text(502, "no plugin of the chain answered\n".into());
        };
        let Some(r) = decode_request(request) else {
            return Answer::text(502, format!("{from} passed on a malformed request\n"));
        };
        let Some(reply) = self.reply.take() else {
            return Answer::text(500, "no reply channel for the handler\n".into());
        };
        h.serve(r, self.body.take(), reply, self.rt.route.reuse, false);
        // Not sent: the reply channel went with the request.
        Answer::text(202, String::new())
    }

    /// Drops a driver that failed (terminated first, so that its bindings are revoked).
    fn drop_driver(&mut self) {
        if let Some(d) = self.seat.driver.take() {
            self.dep.kernel.terminate(d.domain());
        }
    }

    fn plugin_name(&self, slot: usize) -> String {
        self.rt
            .plugins
            .get(slot)
            .map_or_else(|| format!("#{slot}"), |p| p.name.clone())
    }
}
