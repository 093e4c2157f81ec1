//! The epoch ticker, below the concept modules: one thread per kernel advances the epoch of
//! every engine the kernel runs guest code on (its own, the fuel-metering engine of
//! components once a domain asks for fuel, and the pooled engine once an embedder uses it)
//! and counts the ticks deadlines are measured in.

use crate::sync::lock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;
use wasmtime::Engine;

/// The ticker thread and what it ticks; stopped and joined when dropped.
pub(crate) struct Ticker {
    ticks: Arc<AtomicU64>,
    engines: Arc<Mutex<Vec<Engine>>>,
    stop: Arc<AtomicBool>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Ticker {
    /// Starts ticking `engine` every `tick`.
    pub(crate) fn start(engine: Engine, tick: Duration) -> std::io::Result<Ticker> {
        let ticks = Arc::new(AtomicU64::new(0));
        let engines = Arc::new(Mutex::new(vec![engine]));
        let stop = Arc::new(AtomicBool::new(false));
        let (t, e, s) = (ticks.clone(), engines.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("lrpc-epoch".into())
            .spawn(move || {
                let began = std::time::Instant::now();
                let nanos = tick.as_nanos().max(1);
                while !s.load(Ordering::Relaxed) {
                    std::thread::sleep(tick);
                    // The count first: a deadline callback that an epoch wakes reads it. It
                    // follows the clock, not the wake-ups: sleeps that overshoot on a loaded
                    // machine would otherwise stretch every deadline (50 ms ran 57-68 ms).
                    let now = u64::try_from(began.elapsed().as_nanos() / nanos).unwrap_or(u64::MAX);
                    t.fetch_max(now, Ordering::Relaxed);
                    for engine in lock(&e).iter() {
                        engine.increment_epoch();
                    }
                }
            })?;
        Ok(Ticker {
            ticks,
            engines,
            stop,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// The tick count, shared with whatever measures deadlines in ticks.
    pub(crate) fn ticks(&self) -> Arc<AtomicU64> {
        self.ticks.clone()
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
            let _ = t.join();
        }
    }
}
