//! A request served on the reactor thread that received it: the route's seats there, the
//! hand-off of the reactor's other work when guest code runs long, and the times that make a
//! route leave the reactor for its workers (see the module docs of [`super`]).

use super::chain::Seat;
use super::{Edge, LONG_REQUEST, RouteRt};
use crate::deploy::Deployment;
use crate::http::Answer;
use crate::metrics::RouteMeters;
use crate::supervise::lock;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A route's requests on the reactor's threads (see the module docs): whether they still
/// run there, and the seats they use.
pub(super) struct OnReactor {
    pub(super) on: AtomicBool,
    /// One seat per thread (a thread uses slot `thread_index() % SEATS`), each on a cache
    /// line of its own: a thread takes its own seat's lock, which no other thread touches
    /// while the two run on different slots.
    pub(super) slots: Box<[ThreadSlot]>,
    /// Seats made and not yet taken by a thread (and the seats a thread borrows when its
    /// own slot is busy).
    pub(super) spare: Mutex<Seated<Vec<Seat>>>,
    /// Seats made so far (each has a driver domain of its own name).
    pub(super) made: AtomicUsize,
    /// Times the route left the reactor.
    pub(super) left: AtomicU32,
    /// A seat is being made.
    pub(super) making: AtomicBool,
}

/// Slots for the reactor's threads' seats, per route. Threads beyond it share slots; a
/// thread that finds its slot busy borrows a spare seat.
pub(super) const SEATS: usize = 32;

/// A reactor thread's place on a route (by its thread index): its seat, and the times of
/// the requests served on it.
#[repr(align(128))]
pub(super) struct ThreadSlot(pub(super) Mutex<Seated>);

/// What a [`ThreadSlot`], or the route's spare seats, hold: the seat (or seats) and the
/// times of the requests served on them.
#[derive(Default)]
pub(super) struct Seated<S = Option<Seat>> {
    seat: S,
    times: RequestTimes,
}

/// The recent wall-clock time of a route's requests: moving averages, each request entering
/// with weight 1/16, of their time and of how many of them were long (half of
/// [`LONG_REQUEST`] or more).
///
/// Wall-clock time is what a request holds a reactor thread for, also while its guest waits
/// on something, but it also counts the time the system ran other threads in its place: on a
/// loaded machine a request of microseconds now and then takes milliseconds that way. Such a
/// request is rare among its route's requests, where a long computation, or a guest that
/// waits, makes most of them long or their average very long. So a route is long when its
/// requests average [`LONG_REQUEST`] and at least one in eight of them is long, or when
/// they average eight times [`LONG_REQUEST`].
#[derive(Clone, Copy, Default, Debug, PartialEq)]
pub(super) struct RequestTimes {
    /// Seconds.
    average: f64,
    /// The share of long requests, from 0 to 1.
    long: f64,
}

impl RequestTimes {
    /// Counts a request that took `took`.
    pub(super) fn add(&mut self, took: Duration) {
        let long = if took >= LONG_REQUEST / 2 { 1.0 } else { 0.0 };
        self.average = self.average * (15.0 / 16.0) + took.as_secs_f64() / 16.0;
        self.long = self.long * (15.0 / 16.0) + long / 16.0;
    }

    /// Whether these are the requests of a long route (see above).
    fn is_long(&self) -> bool {
        let long = LONG_REQUEST.as_secs_f64();
        (self.average >= long && self.long >= 1.0 / 8.0) || self.average >= 8.0 * long
    }

    /// Whether these are clearly the requests of a short route: a route that left the
    /// reactor comes back only on this, well away from [`RequestTimes::is_long`], so that it does
    /// not go back and forth.
    pub(super) fn is_short(&self) -> bool {
        self.average < LONG_REQUEST.as_secs_f64() / 4.0 && self.long < 1.0 / 32.0
    }
}

impl OnReactor {
    /// Counts a request that took `took` on a reactor thread into `times` (its slot's);
    /// a route whose requests turn out long ([`RequestTimes::is_long`]) leaves the reactor for its
    /// workers, until they find its requests short again ([`ComeBack`]). (A request counts
    /// without its seat's setup, and not at all, `None`, when it ended in a plugin's trap:
    /// see `Seat::route_time`.)
    fn took(
        &self,
        times: &mut RequestTimes,
        took: Option<Duration>,
        prefix: &str,
        meters: &RouteMeters,
    ) {
        let Some(took) = took else { return };
        times.add(took);
        if times.is_long() && self.on.swap(false, Ordering::Relaxed) {
            self.left.fetch_add(1, Ordering::Relaxed);
            meters.on_reactor(false);
            tracing::info!(
                route = prefix,
                "requests take over {LONG_REQUEST:?}: the route's workers serve them"
            );
        }
    }

    /// Brings a route that left the reactor back to it, with its seats' paces cleared.
    pub(super) fn come_back(&self, prefix: &str, meters: &RouteMeters) {
        for slot in &self.slots {
            lock(&slot.0).times = RequestTimes::default();
        }
        lock(&self.spare).times = RequestTimes::default();
        if !self.on.swap(true, Ordering::Relaxed) {
            meters.on_reactor(true);
            tracing::info!(
                route = prefix,
                "requests are short again: the reactor's threads serve them"
            );
        }
    }
}

impl Edge {
    /// Serves `request`, which arrived at `start`, on this reactor thread with a warm seat
    /// of the route's own (this thread's, else a spare one); the answer and the time since
    /// `start`. `None` when no seat is free (one is being made meanwhile, off the reactor:
    /// starting a driver and binding it takes milliseconds).
    pub(super) fn serve_on_reactor(
        &self,
        route: &Arc<RouteRt>,
        request: &[u8],
        start: Instant,
    ) -> Option<(Answer, Duration)> {
        note_short_request(&self.inner.short);
        let reactor = &route.reactor;
        let slot = &reactor.slots[crate::metrics::sharded::thread_index() % SEATS].0;
        // This thread's slot: its seat's driver memory is in this processor's caches.
        let mut mine = match slot.try_lock() {
            Ok(g) => Some(g),
            Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
            // Another thread on the same slot.
            Err(std::sync::TryLockError::WouldBlock) => None,
        };
        let (answer, took) = match mine.as_deref_mut() {
            Some(seated) => {
                if seated.seat.is_none() {
                    seated.seat = lock(&reactor.spare).seat.pop();
                }
                let Some(seat) = seated.seat.as_mut() else {
                    // No seat for this thread, and none spare.
                    self.make_seat(route);
                    return None;
                };
                let (answer, took, counted, handed) =
                    self.serve_seated(route, seat, request, start);
                reactor.took(
                    &mut seated.times,
                    counted,
                    &route.route.prefix,
                    &route.meters,
                );
                if handed {
                    // This thread handed its share of the reactor to a new one and leaves
                    // when this request ends: its seat goes to the spare pool, where the new
                    // thread (another slot) finds it instead of making one.
                    lock(&reactor.spare).seat.extend(seated.seat.take());
                }
                (answer, took)
            }
            // Another thread on this slot: a spare seat, if there is one, for this request.
            None => {
                let Some(mut seat) = lock(&reactor.spare).seat.pop() else {
                    self.make_seat(route);
                    return None;
                };
                let (answer, took, counted, _) =
                    self.serve_seated(route, &mut seat, request, start);
                let mut spare = lock(&reactor.spare);
                spare.seat.push(seat);
                reactor.took(
                    &mut spare.times,
                    counted,
                    &route.route.prefix,
                    &route.meters,
                );
                (answer, took)
            }
        };
        Some((answer, took))
    }

    /// Serves `request` on `seat`, handing the reactor's other work over if it runs long;
    /// the answer, the time since `start`, the part of it that counts toward the route's
    /// average (`Seat::route_time`), and whether this thread handed its work over.
    fn serve_seated(
        &self,
        route: &RouteRt,
        seat: &mut Seat,
        request: &[u8],
        start: Instant,
    ) -> (Answer, Duration, Option<Duration>, bool) {
        let dep = &self.inner.deployment;
        let (answer, handed) = hand_off_if_long(start, || {
            seat.serve(dep, route, request, None, Default::default()).0
        });
        if handed {
            route.meters.handed_off();
        }
        let took = start.elapsed();
        (answer, took, seat.route_time(took), handed)
    }

    /// Starts making a warm seat for `route` on a thread of its own, unless one is being
    /// made already.
    fn make_seat(&self, route: &Arc<RouteRt>) {
        if route.reactor.making.swap(true, Ordering::Acquire) {
            return;
        }
        let (dep, rt) = (self.inner.deployment.clone(), route.clone());
        let made = std::thread::Builder::new()
            .name("edge-seat".into())
            .spawn(move || {
                add_seat(&dep, &rt);
                rt.reactor.making.store(false, Ordering::Release);
            });
        if let Err(e) = made {
            tracing::error!("can not start a thread to make a seat: {e}");
            route.reactor.making.store(false, Ordering::Release);
        }
    }
}

/// Makes a seat for `rt`'s requests on the reactor (a driver of its own name, started and
/// bound) and adds it to the free ones; a seat that fails to start is dropped (the request
/// that finds none free goes to the route's workers).
pub(super) fn add_seat(dep: &Deployment, rt: &RouteRt) {
    let n = rt.reactor.made.fetch_add(1, Ordering::Relaxed);
    let name = format!("edge-driver{}@{n}", rt.route.prefix.replace('/', "-"));
    let mut seat = Seat::new(name, rt);
    if seat.warm(dep, rt) {
        lock(&rt.reactor.spare).seat.push(seat);
    }
}

/// Counts a short request into `short` (see `give_way_while_short_requests_arrive`) once in
/// a few of this thread's requests: a demoted worker only asks whether it moved, and a
/// counter that every request wrote would move between the processors' caches at each.
pub(super) fn note_short_request(short: &AtomicU64) {
    thread_local! {
        static SINCE: Cell<u32> = const { Cell::new(0) };
    }
    SINCE.with(|n| {
        let k = n.get();
        n.set(k.wrapping_add(1));
        if k % 4 == 0 {
            short.fetch_add(1, Ordering::Relaxed);
        }
    });
}

/// Whether this thread may run guest code for a request: it is a thread of a multi-thread
/// tokio runtime, which can take its other work over when the guest code turns out long
/// (`tokio::task::block_in_place`; a current-thread runtime can not).
///
/// Asked once per thread: a runtime's threads stay its own, and the runtime's handle is
/// shared by all of them, so taking it at every request would move its reference count
/// between the processors. (A thread that enters another kind of runtime later keeps its
/// first answer; [`hand_off`] asks again before it hands anything over.)
pub(super) fn reactor_may_hand_off() -> bool {
    thread_local! {
        static MAY: bool = multi_thread_runtime().is_some();
    }
    MAY.with(|m| *m)
}

/// The multi-thread tokio runtime this thread is in, if it is in one.
fn multi_thread_runtime() -> Option<tokio::runtime::Handle> {
    tokio::runtime::Handle::try_current()
        .ok()
        .filter(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
}

/// How long a reactor thread that hands its other work over waits at most, each time it
/// tries, for the runtime to show that another thread has taken it.
const HAND_OFF_WAIT: Duration = Duration::from_millis(20);

/// Runs `f`, a request's guest code, on this reactor thread. When the guest code is still
/// running at an epoch tick [`LONG_REQUEST`] after the request began (at `start`) and has
/// used at least half of [`LONG_REQUEST`] of processor time from that tick to a later one,
/// or is about to wait for a `Store` another thread holds, the thread first hands the
/// reactor's other work to another thread and then goes on with the request alone; answers
/// whether it did. (A Store's first guest code after a tick reaches its epoch deadline at
/// once, so the ticks a request sees do not measure its length: the clocks do. The
/// processor time tells a long computation from a short request whose thread the system
/// preempted past a tick: handing the reactor over then would only add a thread to a busy
/// machine, and make the request wait for it.)
fn hand_off_if_long<T>(start: Instant, f: impl FnOnce() -> T) -> (T, bool) {
    // The request, where the hooks find it: the hooks capture nothing, so installing them
    // allocates nothing.
    thread_local! {
        static REQUEST: Cell<Option<Running>> = const { Cell::new(None) };
    }
    fn try_hand_off() {
        REQUEST.with(|r| {
            if let Some(run @ Running { handed: false, .. }) = r.get() {
                r.set(Some(Running {
                    handed: hand_off(),
                    ..run
                }));
            }
        });
    }
    let on_tick = |_wanted: bool| {
        let Some(run) = REQUEST.with(Cell::get) else {
            return;
        };
        if run.handed || run.start.elapsed() < LONG_REQUEST {
            return;
        }
        let cpu = thread_cpu_time();
        match run.cpu_at_long {
            // The first tick past the mark: where this thread's processor time stood.
            None => REQUEST.with(|r| {
                r.set(Some(Running {
                    cpu_at_long: Some(cpu),
                    ..run
                }))
            }),
            Some(then) if cpu.saturating_sub(then) >= LONG_REQUEST / 2 => try_hand_off(),
            Some(_) => {}
        }
    };
    let outer = REQUEST.with(|r| {
        r.replace(Some(Running {
            start,
            cpu_at_long: None,
            handed: false,
        }))
    });
    let tick = lrpc_kernel::pace::set_tick_hook(Some(Box::new(on_tick)));
    let wait = lrpc_kernel::pace::set_wait_hook(Some(Box::new(try_hand_off)));
    let r = f();
    lrpc_kernel::pace::set_tick_hook(tick);
    lrpc_kernel::pace::set_wait_hook(wait);
    let handed = REQUEST
        .with(|r| r.replace(outer))
        .is_some_and(|run| run.handed);
    (r, handed)
}

/// A request running on a reactor thread, as [`hand_off_if_long`]'s hooks see it.
#[derive(Clone, Copy)]
struct Running {
    /// When it began.
    start: Instant,
    /// The thread's processor time at the first tick [`LONG_REQUEST`] after `start`.
    cpu_at_long: Option<Duration>,
    /// Whether the thread handed the reactor's other work over.
    handed: bool,
}

/// Hands this reactor thread's other work to another thread; whether the runtime showed
/// that it went on without this thread in time (else the next tick tries again).
///
/// `block_in_place` gives the thread's share of the runtime to a thread it starts, and
/// takes it back when its closure returns if that thread has not taken it yet. So the
/// closure waits, at most [`HAND_OFF_WAIT`], until a task spawned meanwhile runs: this
/// thread runs no tasks inside `block_in_place`, so another thread did.
fn hand_off() -> bool {
    let Some(rt) = multi_thread_runtime() else {
        return false;
    };
    tokio::task::block_in_place(|| {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        rt.spawn(async move {
            let _ = tx.send(());
        });
        rx.recv_timeout(HAND_OFF_WAIT).is_ok()
    })
}

/// The processor time this thread has used.
pub(super) fn thread_cpu_time() -> std::time::Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    std::time::Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_route_is_long_on_many_long_requests_not_on_a_few_preempted_ones() {
        let us = Duration::from_micros;
        let ms = Duration::from_millis;
        let fed = |times: &mut RequestTimes, took: Duration, n: usize| {
            (0..n).for_each(|_| times.add(took));
            *times
        };
        // Short requests, one in twenty preempted for 5 ms: the average passes 1 ms at times,
        // but long ones are too few.
        let mut p = RequestTimes::default();
        for _ in 0..50 {
            fed(&mut p, us(5), 19);
            p.add(ms(5));
            assert!(!p.is_long(), "{p:?}");
        }
        // Once every few requests, the route is long.
        let mut p = RequestTimes::default();
        let long = (1..=20).find(|_| {
            fed(&mut p, us(5), 3);
            p.add(ms(5));
            p.is_long()
        });
        assert!(long.is_some(), "{p:?}");
        // Requests of 5 ms: long from the fourth (the average passes 1 ms there).
        let mut p = RequestTimes::default();
        let n = (1..=8).find(|_| fed(&mut p, ms(5), 1).is_long());
        assert_eq!(n, Some(4), "{p:?}");
        // One request of 200 ms (a guest that waits, or a spin up to its deadline) is enough.
        let mut p = fed(&mut RequestTimes::default(), us(5), 100);
        p.add(ms(200));
        assert!(p.is_long());
        // Clearly short only after the long ones have faded.
        assert!(!p.is_short());
        assert!(fed(&mut p, us(5), 200).is_short(), "{p:?}");
        // A preempted request now and then: the route is clearly short again a few requests
        // after each.
        let mut p = RequestTimes::default();
        for _ in 0..20 {
            p.add(ms(3));
            assert!(!p.is_short(), "{p:?}");
            assert!(fed(&mut p, us(5), 20).is_short(), "{p:?}");
            fed(&mut p, us(5), 79);
        }
    }
}
