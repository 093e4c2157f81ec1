//! The epoch ticker, below the concept modules: one thread per kernel advances the epoch of
//! every engine the kernel runs guest code on (its own, the fuel-metering engine of
//! components once a domain asks for fuel, and the pooled engine once an embedder uses it)
//! and counts the ticks deadlines are measured in ([`Clock`]).
//!
//! **It rests while no guest code runs.** A tick only matters to guest code running at that
//! moment: that is when a Store's epoch callback checks deadlines and termination. So after
//! [`REST_AFTER`] ticks in which no callback ran, the ticker slows to one tick per
//! [`RESTING_TICK`]. An idle server's ticker then wakes once a second, not 1,000 times: a
//! wake-up was measured at 40-600 µs of processor time on the 2-core virtual machines this
//! runs on, so at the 1 ms tick an idle server took 2-3% of a core, and at 200 ms still
//! 0.2%. Two things wake it at once:
//!
//! - whoever starts a call reads the clock ([`Clock::now`]) to set its deadline; a resting
//!   clock counts the ticks from the wall clock instead of its stale count, and wakes the
//!   ticker;
//! - the epoch callback of guest code that started without reading the clock (an
//!   embedder's own Store) runs within one resting tick, and wakes it ([`Clock::at_tick`]).
//!
//! A call that reads a count the ticker made just before it rested is at most one tick
//! early, as with any tick.

use crate::sync::lock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};
use wasmtime::Engine;

/// Ticks in a row with no guest code seen running after which the ticker rests.
pub(crate) const REST_AFTER: u32 = 100;

/// The ticker's period while it rests (or the kernel's tick, if that is longer).
pub(crate) const RESTING_TICK: Duration = Duration::from_secs(1);

/// The kernel's tick count, shared with whatever measures deadlines in ticks.
pub(crate) struct Clock {
    ticks: AtomicU64,
    /// The ticker rests (see the module docs).
    resting: AtomicBool,
    /// Guest code ran at a tick since the ticker last looked.
    busy: AtomicBool,
    began: Instant,
    tick_nanos: u128,
    ticker: OnceLock<Thread>,
}

impl Clock {
    fn new(tick: Duration) -> Clock {
        Clock {
            ticks: AtomicU64::new(0),
            resting: AtomicBool::new(false),
            busy: AtomicBool::new(false),
            began: Instant::now(),
            tick_nanos: tick.as_nanos().max(1),
            ticker: OnceLock::new(),
        }
    }

    /// The ticks since the kernel started, measured on the wall clock.
    fn measured(&self) -> u64 {
        u64::try_from(self.began.elapsed().as_nanos() / self.tick_nanos).unwrap_or(u64::MAX)
    }

    /// The current tick, for a call about to start: wakes a resting ticker.
    #[inline]
    pub(crate) fn now(&self) -> u64 {
        if self.resting.load(Ordering::Relaxed) {
            return self.wake();
        }
        self.ticks.load(Ordering::Relaxed)
    }

    /// The tick count, for the epoch callback of guest code running at a tick: the ticker
    /// keeps its pace, or wakes if it rests.
    #[inline]
    pub(crate) fn at_tick(&self) -> u64 {
        if !self.busy.load(Ordering::Relaxed) {
            self.busy.store(true, Ordering::Relaxed);
        }
        if self.resting.load(Ordering::Relaxed) {
            return self.wake();
        }
        self.ticks.load(Ordering::Relaxed)
    }

    /// Wakes a resting ticker; answers the current tick.
    #[cold]
    pub(crate) fn wake(&self) -> u64 {
        let now = self.measured();
        let now = self.ticks.fetch_max(now, Ordering::Relaxed).max(now);
        self.busy.store(true, Ordering::Relaxed);
        if self.resting.swap(false, Ordering::SeqCst)
            && let Some(t) = self.ticker.get()
        {
            t.unpark();
        }
        now
    }
}

/// The ticker thread and what it ticks; stopped and joined when dropped.
pub(crate) struct Ticker {
    clock: Arc<Clock>,
    engines: Arc<Mutex<Vec<Engine>>>,
    stop: Arc<AtomicBool>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Ticker {
    /// Starts ticking `engine` every `tick`.
    pub(crate) fn start(engine: Engine, tick: Duration) -> std::io::Result<Ticker> {
        let clock = Arc::new(Clock::new(tick));
        let engines = Arc::new(Mutex::new(vec![engine]));
        let stop = Arc::new(AtomicBool::new(false));
        let (c, e, s) = (clock.clone(), engines.clone(), stop.clone());
        let resting_tick = RESTING_TICK.max(tick);
        let thread = std::thread::Builder::new()
            .name("lrpc-epoch".into())
            .spawn(move || {
                let mut quiet = 0u32;
                while !s.load(Ordering::Relaxed) {
                    if c.resting.load(Ordering::SeqCst) {
                        std::thread::park_timeout(resting_tick);
                    } else {
                        std::thread::sleep(tick);
                    }
                    // The count first: a deadline callback that an epoch wakes reads it. It
                    // follows the clock, not the wake-ups: sleeps that overshoot on a loaded
                    // machine would otherwise stretch every deadline (50 ms ran 57-68 ms).
                    c.ticks.fetch_max(c.measured(), Ordering::Relaxed);
                    for engine in lock(&e).iter() {
                        engine.increment_epoch();
                    }
                    if c.busy.swap(false, Ordering::Relaxed) {
                        quiet = 0;
                    } else if !c.resting.load(Ordering::Relaxed) {
                        quiet += 1;
                        if quiet >= REST_AFTER {
                            quiet = 0;
                            c.resting.store(true, Ordering::SeqCst);
                        }
                    }
                }
            })?;
        let _ = clock.ticker.set(thread.thread().clone());
        Ok(Ticker {
            clock,
            engines,
            stop,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// The tick count, shared with whatever measures deadlines in ticks.
    pub(crate) fn clock(&self) -> Arc<Clock> {
        self.clock.clone()
    }

    /// Ticks `engine` too from now on.
    pub(crate) fn add(&self, engine: Engine) {
        lock(&self.engines).push(engine);
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = lock(&self.thread).take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resting(clock: &Clock) -> bool {
        clock.resting.load(Ordering::SeqCst)
    }

    /// Waits up to a minute for `f`.
    fn eventually(f: impl Fn() -> bool) -> bool {
        let until = Instant::now() + Duration::from_secs(60);
        while Instant::now() < until {
            if f() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        false
    }

    #[test]
    fn the_ticker_rests_when_no_guest_code_runs_and_wakes_for_a_call() {
        let ticker = Ticker::start(Engine::default(), Duration::from_millis(1)).expect("ticker");
        let clock = ticker.clock();
        assert!(eventually(|| resting(&clock)), "the ticker never rested");
        // A call starting now reads the wall clock's count, not the last resting tick's, and
        // wakes the ticker.
        std::thread::sleep(Duration::from_millis(30));
        let floor = clock.measured();
        let now = clock.now();
        assert!(now >= floor, "read {now} at tick {floor}");
        assert!(!resting(&clock));
        // While guest code runs at its ticks, the ticker keeps its pace.
        let until = Instant::now() + Duration::from_millis(500);
        while Instant::now() < until {
            clock.at_tick();
            assert!(!resting(&clock), "rested while guest code ran");
            std::thread::sleep(Duration::from_millis(1));
        }
        // Then it rests again.
        assert!(
            eventually(|| resting(&clock)),
            "the ticker never rested again"
        );
        // A guest's callback at a resting tick wakes it.
        clock.at_tick();
        assert!(!resting(&clock));
    }

    #[test]
    fn a_resting_ticker_still_ticks_and_stops_when_dropped() {
        let engine = Engine::new(wasmtime::Config::new().epoch_interruption(true)).expect("engine");
        let ticker = Ticker::start(engine, Duration::from_millis(1)).expect("ticker");
        let clock = ticker.clock();
        assert!(eventually(|| resting(&clock)));
        let before = clock.ticks.load(Ordering::Relaxed);
        assert!(
            eventually(|| clock.ticks.load(Ordering::Relaxed) > before),
            "no resting tick"
        );
        let started = Instant::now();
        drop(ticker);
        // A resting ticker is woken to stop, not waited for.
        assert!(started.elapsed() < Duration::from_secs(30));
    }
}
