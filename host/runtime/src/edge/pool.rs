//! Where a request runs ([`place`]), and a request served by its route's pool of worker
//! threads (an [`crate::driver::pool::Pool`]): each worker's state, its processor-time meter,
//! giving way to short requests, and bringing a route back to the reactor.

use super::LONG_REQUEST;
use super::RouteRt;
use super::chain::Seat;
use super::reactor::{RequestTimes, note_short_request, reactor_may_hand_off, thread_cpu_time};
use super::response::shutting_down;
use crate::deploy::Deployment;
use crate::driver::pool::Wake;
use crate::http::Reply;
use crate::wasi_http::RequestBody;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// Where a request runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Place {
    /// On the reactor thread that received it, in that thread's seat.
    Reactor,
    /// On a thread of the route's pool.
    Pool,
}

/// The edge's one policy for where a request runs, from three facts: the route's requests
/// are short (it is on the reactor: `RequestTimes` sends it to the pool, [`ComeBack`] brings
/// it back), the edge is not stopping, and this runtime can hand the reactor's other work
/// over while guest code runs long (a multi-thread runtime). When all three hold, the
/// reactor: that saves the hop to a pool thread and back, a third of a native handler's
/// throughput in the load benchmark.
pub(super) fn place(rt: &RouteRt, stopping: bool) -> Place {
    if rt.reactor.on.load(Ordering::Relaxed) && !stopping && reactor_may_hand_off() {
        Place::Reactor
    } else {
        Place::Pool
    }
}

/// Which idle worker of a route a request wakes: the one idle longest, so that a route's
/// requests spread over its workers, as they did before `lrpc_driver::pool`. With
/// [`Wake::LastIdle`], the large-body memory test (`tests/edge.rs`) held 205 MiB less (one
/// driver grew instead of each worker's). But its metric-against-RSS check then failed: a
/// 49 MiB gap on 470 MiB is over its 10% (59 on 675 is not). Switching needs that test and
/// the load benchmark looked at.
pub(super) const EDGE_WAKE: Wake = Wake::LongestIdle;

/// A request for the route's pool.
pub(super) struct Job {
    pub(super) request: Vec<u8>,
    pub(super) reply: oneshot::Sender<Reply>,
    /// The request body, when it streams to a handler (then `request` has none).
    pub(super) body: Option<RequestBody>,
    pub(super) span: tracing::Span,
}

impl crate::driver::pool::Job for Job {
    /// The edge stopped (the end of a shutdown's grace) while the request was queued.
    fn refuse(self) {
        let _ = self.reply.send(shutting_down().into());
    }
}

/// Short requests a route's worker serves, after the route left the reactor, before the
/// route comes back to it (see [`ComeBack`]); doubled each time it left again, at most
/// [`COME_BACK_DOUBLINGS`] times (about a million requests).
const COME_BACK_AFTER: u64 = 1024;
const COME_BACK_DOUBLINGS: u32 = 10;

/// What a route's worker has seen since the route left the reactor: the times of the
/// requests it served, their processor time, and how many there were. The route comes back
/// to the reactor once a worker has served enough of them ([`COME_BACK_AFTER`], doubled each
/// time the route left before) and they are clearly short, both in wall-clock time
/// ([`RequestTimes::is_short`]) and in processor time: a route that left on a spell of load, when
/// the system ran other threads in the middle of its requests, does not stay off the
/// reactor for good, and one whose requests are long does not come back.
#[derive(Default)]
struct ComeBack {
    /// The count of the route's departures this evidence is about.
    left: u32,
    times: RequestTimes,
    seen: u64,
}

impl ComeBack {
    /// Counts a request of `rt` that took `took`, its worker's processor time per request
    /// averaging `cpu`; whether the route should come back to the reactor now.
    fn add(&mut self, rt: &RouteRt, took: Duration, cpu: Duration) -> bool {
        let left = rt.reactor.left.load(Ordering::Relaxed);
        if left != self.left {
            *self = ComeBack {
                left,
                ..ComeBack::default()
            };
        }
        self.times.add(took);
        self.seen += 1;
        let needed = COME_BACK_AFTER << left.saturating_sub(1).min(COME_BACK_DOUBLINGS);
        self.seen >= needed && self.times.is_short() && cpu < LONG_REQUEST / 4
    }
}

/// A thread of the route's pool (a worker: `workers` in the config): its seat on the route,
/// and what it measured of the requests it served. `short` counts the requests that short
/// requests' threads have started, on every route.
pub(super) struct Worker {
    seat: Seat,
    k: usize,
    short: Arc<AtomicU64>,
    demoted: bool,
    meter: CpuMeter,
    /// A route that may run on the reactor and left it: what this worker sees of its requests.
    back: ComeBack,
}

impl Worker {
    /// Worker `k` of route `rt`, made on its own thread.
    pub(super) fn new(rt: &RouteRt, k: usize, short: Arc<AtomicU64>) -> Worker {
        // A worker made again after a request panicked on its thread starts undemoted.
        drop(lrpc_kernel::pace::set_tick_hook(None));
        Worker {
            seat: Seat::new(
                format!("edge-driver{}#{k}", rt.route.prefix.replace('/', "-")),
                rt,
            ),
            k,
            short,
            demoted: false,
            meter: CpuMeter::new(),
            back: ComeBack::default(),
        }
    }

    /// Serves one request of the route.
    pub(super) fn run(&mut self, dep: &Deployment, rt: &RouteRt, job: Job) {
        // The client went away while the request waited: it is not run.
        if job.reply.is_closed() {
            return;
        }
        if !self.demoted {
            note_short_request(&self.short);
        }
        let seat = &mut self.seat;
        // A request that starts this worker's driver pays for it: it is not measured.
        let measured = !seat.cold(rt);
        let began = Instant::now();
        let (answer, unsent) = job
            .span
            .in_scope(|| seat.serve(dep, rt, &job.request, Some(job.reply), job.body));
        let counted = seat.route_time(began.elapsed());
        // Unless a handler's streamed head went out already.
        if let Some(tx) = unsent {
            let _ = tx.send(answer.into());
        }
        if self.demoted {
            return;
        }
        if !measured {
            self.meter.restart();
            return;
        }
        let cpu = self.meter.done();
        if cpu >= LONG_REQUEST {
            self.demoted = true;
            tracing::info!(
                route = rt.route.prefix,
                worker = self.k,
                "requests take over {LONG_REQUEST:?} of processor time: this worker's guest \
                 code now gives way while short requests arrive"
            );
            give_way_while_short_requests_arrive(self.short.clone());
        } else if let Some(took) = counted
            && rt.handler.is_none()
            && !rt.reactor.on.load(Ordering::Relaxed)
            && self.back.add(rt, took, cpu)
        {
            rt.reactor.come_back(&rt.route.prefix, &rt.meters);
        }
    }
}

/// A worker's processor time per request: a moving average over about the last 16
/// requests, so that one cold request (faulting in a fresh replica's pages) does not count.
/// The thread's clock is read once per batch of requests, not per request (reading it is a
/// system call): a batch ends after [`CpuMeter::BATCH`] requests, or at the first request
/// that ends [`LONG_REQUEST`] of wall-clock time after the batch began (processor time
/// never exceeds wall-clock time, so a long request never hides in a long batch).
struct CpuMeter {
    /// The thread's processor time when the batch began.
    cpu: std::time::Duration,
    /// When the batch began.
    began: Instant,
    /// Requests done in this batch.
    done: u32,
    /// The moving average, in seconds.
    average: f64,
}

impl CpuMeter {
    const BATCH: u32 = 8;

    fn new() -> CpuMeter {
        CpuMeter {
            cpu: thread_cpu_time(),
            began: Instant::now(),
            done: 0,
            average: 0.0,
        }
    }

    /// Begins a new batch now (what ran since the last one began is not counted).
    fn restart(&mut self) {
        *self = CpuMeter {
            average: self.average,
            ..CpuMeter::new()
        };
    }

    /// Counts a request done; the average so far.
    fn done(&mut self) -> std::time::Duration {
        self.done += 1;
        if self.done >= Self::BATCH || self.began.elapsed() >= LONG_REQUEST {
            let now = thread_cpu_time();
            let per = now.saturating_sub(self.cpu).as_secs_f64() / f64::from(self.done);
            // As if each of the batch's requests, at its mean, entered the average in turn
            // with weight 1/16.
            let keep = (15.0f64 / 16.0).powi(self.done as i32);
            self.average = self.average * keep + per * (1.0 - keep);
            self.cpu = now;
            self.began = Instant::now();
            self.done = 0;
        }
        std::time::Duration::from_secs_f64(self.average)
    }
}

/// How long a demoted worker's guest computation pauses at a time while short requests
/// keep arriving, and at most in a row (then it runs for one epoch tick before it pauses
/// again): a long computation gets at least about a fiftieth of a processor however busy
/// the other routes are.
///
/// That tick is what the short requests' tail pays. Measured on 2 cores with the load
/// benchmark's chain saturating both and `/slow/busy/20` loaded beside it (2026-12-04):
/// with 50 ms, the chain's p99 was 1.6-3.7 times its p99 alone (8 rounds) and 10-13 slow
/// requests ended in 5 s; with 400 ms, 1.0-2.0 times and 3; with no forced tick at all,
/// 0.5-1.25 times and 0-2 (the slow requests starve until their deadline). So a smaller
/// share buys little tail until it is nearly none.
const PAUSE_STEP: std::time::Duration = std::time::Duration::from_millis(1);
const MAX_PAUSE: std::time::Duration = std::time::Duration::from_millis(50);

/// A worker whose requests take [`LONG_REQUEST`] of processor time on average serves a route
/// of long computations. It keeps its thread's scheduling class and priority: the server
/// orders its own work, and hands none of its processor time to other processes on the
/// host. (Moving such a thread to `SCHED_IDLE` or nice 19 did favour short requests, but it
/// also let any busy process on the host take a long request's processor, and an
/// unprivileged thread could never come back.) Instead its thread pauses its guest
/// computation at each epoch tick (`lrpc_kernel::pace`) for as long as short requests have started since its last
/// look, [`PAUSE_STEP`] at a time and [`MAX_PAUSE`] at most, and not while another thread
/// waits for the Store it is in (a short request to the same plugin domain). The pause counts
/// toward the call's deadline: routes of long computations need deadlines that allow for it.
fn give_way_while_short_requests_arrive(short: Arc<AtomicU64>) {
    let mut seen = short.load(Ordering::Relaxed);
    let hook = move |wanted: bool| {
        // Another thread waits for the Store this computation holds: pausing would hold
        // that request up too.
        if wanted {
            return;
        }
        let mut paused = std::time::Duration::ZERO;
        loop {
            let now = short.load(Ordering::Relaxed);
            let active = now != seen;
            seen = now;
            if !active || paused >= MAX_PAUSE {
                return;
            }
            std::thread::sleep(PAUSE_STEP);
            paused += PAUSE_STEP;
        }
    };
    lrpc_kernel::pace::set_tick_hook(Some(Box::new(hook)));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Spends `d` of this thread's processor time.
    fn spin(d: std::time::Duration) {
        let t = thread_cpu_time();
        while thread_cpu_time().saturating_sub(t) < d {
            std::hint::spin_loop();
        }
    }

    #[test]
    fn a_cpu_meter_tells_long_requests_from_short_ones() {
        let mut m = CpuMeter::new();
        for _ in 0..64 {
            spin(std::time::Duration::from_micros(20));
            let avg = m.done();
            assert!(avg < LONG_REQUEST / 4, "short requests averaged {avg:?}");
        }
        // Requests of 5 ms: the average passes 1 ms on the fourth (weights of 1/16 each).
        let long = (1..=8).find(|_| {
            spin(std::time::Duration::from_millis(5));
            m.done() >= LONG_REQUEST
        });
        assert!(
            long.is_some_and(|n| (3..=5).contains(&n)),
            "found long after {long:?} requests"
        );
    }
}
