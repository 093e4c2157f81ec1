//! Supervision of the domains the runtime restarts fresh when they die (HTTP plugins,
//! `wasi:http` handlers): generations, reloads, restarts with backoff; and the error every
//! part of a deployment reports.

use crate::config::Source;
use crate::metrics::Metrics;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Why a deployment could not start or change. The message says everything once: the
/// errors it wraps are part of its text, not a chain of sources printed again after it.
#[derive(Debug, thiserror::Error)]
pub enum DeployError {
    /// The kernel refused something.
    #[error("{what}: {}", chain(error))]
    Kernel {
        /// What was being done.
        what: String,
        /// The kernel's error.
        error: lrpc_kernel::Error,
    },
    /// A module file could not be read.
    #[error("reading {path}: {error}")]
    Read {
        /// The file.
        path: String,
        /// The error.
        error: std::io::Error,
    },
    /// A mistake found while starting what a line of the config describes.
    #[error("{file}:{line}: {error}")]
    At {
        /// The config file.
        file: String,
        /// Its line.
        line: usize,
        /// What went wrong there.
        error: Box<DeployError>,
    },
    /// A name used on the command line or in a request is unknown.
    #[error("{0}")]
    Unknown(String),
    /// Remote exports or serving exports to the network failed.
    #[error("{what}: {reason}")]
    Network {
        /// What was being done.
        what: String,
        /// Why it failed.
        reason: String,
    },
}

/// Locks `m`, taking the data of a lock a panicking thread left poisoned.
pub(crate) use lrpc_lock::lock;

/// The bytes of a domain's module or component, from its file or built in.
pub(crate) fn read(source: &Source) -> Result<Vec<u8>, DeployError> {
    source.load().map_err(|e| DeployError::Read {
        path: match source {
            Source::File(p) => p.display().to_string(),
            Source::Builtin(n, _) => n.clone(),
        },
        error: e,
    })
}

/// The first restart waits this long; each further one within [`QUIET`] twice as long.
const BACKOFF: Duration = Duration::from_millis(50);
/// The longest wait before a restart.
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// A plugin that ran this long since its last restart starts its backoff afresh.
const QUIET: Duration = Duration::from_secs(10);

/// The wait before the next restart, given `(restarts in a row, time of the last one)`;
/// counts this restart.
pub(crate) fn next_backoff(streak: &Mutex<(u32, Instant)>) -> Duration {
    let mut s = lock(streak);
    if s.1.elapsed() > QUIET {
        s.0 = 0;
    }
    let wait = BACKOFF.saturating_mul(1 << s.0.min(16)).min(MAX_BACKOFF);
    s.0 = s.0.saturating_add(1);
    wait
}

/// A domain the runtime restarts fresh when it dies (an HTTP plugin, a `wasi:http` handler):
/// what differs between kinds is how a fresh generation is made ([`replace`](Self::replace));
/// the backoff, the one restart thread per death and its log and count are [`died`].
pub(crate) trait Supervised: Send + Sync + 'static {
    /// What the log calls it.
    const KIND: &'static str;
    /// The domain's name.
    fn name(&self) -> &str;
    /// Its generations and restarts.
    fn supervision(&self) -> &Supervision;
    /// Makes generation `generation` (the current one + 1) from the source's current bytes
    /// and makes it the domain's current instance. Called with [`Supervision::swap`] held;
    /// the generation count moves on when it succeeds.
    fn replace(&self, generation: u64) -> Result<(), DeployError>;
    /// Runs once the generation count has moved on to a fresh generation.
    fn renewed(&self) {}
}

/// Replaces the running generation of `d` with a fresh one from its source's current bytes;
/// requests in flight finish on the old one. Logged and counted as a reload.
pub(crate) fn reload<D: Supervised>(d: &D) -> Result<u64, DeployError> {
    let s = d.supervision();
    let _g = lock(&s.swap);
    let generation = s.renew(|g| d.replace(g))?;
    d.renewed();
    s.metrics.reload(d.name());
    tracing::info!(plugin = d.name(), generation, "{} reloaded", D::KIND);
    Ok(generation)
}

/// The generations and restarts of a [`Supervised`] domain.
pub(crate) struct Supervision {
    /// The generation running now (the first is 1).
    generation: AtomicU64,
    /// A restart is scheduled or running.
    restarting: AtomicBool,
    /// The server is shutting down: no restart starts, no request waits for one.
    stopped: AtomicBool,
    /// A recycle ([`recycle`]) is running.
    recycling: AtomicBool,
    /// Consecutive restarts without a quiet period, for the backoff.
    streak: Mutex<(u32, Instant)>,
    /// Serializes reloads and restarts.
    pub(crate) swap: Mutex<()>,
    /// Where reloads, restarts and the domain's failures are counted.
    pub(crate) metrics: Arc<Metrics>,
    /// Notified when a generation is made or a restart gives up (see
    /// [`wait_past`](Self::wait_past)); its lock guards nothing else.
    moved: (Mutex<()>, Condvar),
}

impl Supervision {
    /// A domain's supervision, running its first generation.
    pub(crate) fn new(metrics: Arc<Metrics>) -> Supervision {
        Supervision {
            generation: AtomicU64::new(1),
            restarting: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
            recycling: AtomicBool::new(false),
            streak: Mutex::new((0, Instant::now())),
            swap: Mutex::new(()),
            metrics,
            moved: (Mutex::new(()), Condvar::new()),
        }
    }

    /// Waits, at most until `until`, for a generation after `dead` while a restart is
    /// pending; whether one came. A request that found its plugin terminated waits here for
    /// the fresh instance instead of failing.
    pub(crate) fn wait_past(&self, dead: u64, until: Instant) -> bool {
        let (m, cv) = &self.moved;
        let mut g = lock(m);
        loop {
            if self.generation() > dead {
                return true;
            }
            let now = Instant::now();
            if !self.pending() || self.stopped() || now >= until {
                return false;
            }
            g = cv
                .wait_timeout(g, until - now)
                .map_or_else(|e| e.into_inner().0, |(g, _)| g);
        }
    }

    /// Wakes the requests waiting in [`wait_past`](Self::wait_past).
    fn notify_moved(&self) {
        let _g = lock(&self.moved.0);
        self.moved.1.notify_all();
    }

    /// The generation running now.
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Makes the next generation with `make` (given its number) and, once it is made,
    /// counts it as the current one; its number. Called with [`swap`](Self::swap) held.
    fn renew(&self, make: impl FnOnce(u64) -> Result<(), DeployError>) -> Result<u64, DeployError> {
        let generation = self.generation() + 1;
        make(generation)?;
        self.generation.store(generation, Ordering::Release);
        self.notify_moved();
        Ok(generation)
    }

    /// Whether a restart is scheduled or running.
    pub(crate) fn pending(&self) -> bool {
        self.restarting.load(Ordering::Acquire)
    }

    /// Stops supervising for good (the server is shutting down): deaths reported from now on
    /// schedule no restart, a scheduled one does not start, and the requests waiting for one
    /// stop waiting.
    pub(crate) fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        self.notify_moved();
    }

    /// Whether [`stop`](Self::stop) was called.
    pub(crate) fn stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }
}

/// Reports that generation `generation` of `d` died (trapped, ran past its deadline, was
/// terminated). The first report of the current generation schedules a restart with backoff
/// on a thread of its own; later reports, and reports of older generations, do nothing.
pub(crate) fn died<D: Supervised>(d: &Arc<D>, generation: u64) {
    let r = d.supervision();
    if r.stopped() || r.generation() != generation || r.restarting.swap(true, Ordering::AcqRel) {
        return;
    }
    let wait = next_backoff(&r.streak);
    let me = d.clone();
    let spawned = std::thread::Builder::new()
        .name(format!("restart-{}", d.name()))
        .spawn(move || restart(&*me, generation, wait));
    if let Err(e) = spawned {
        tracing::error!(plugin = d.name(), "can not start a restart thread: {e}");
        r.restarting.store(false, Ordering::Release);
    }
}

/// The restart thread: waits out the backoff, renews the domain, logs and counts it.
fn restart<D: Supervised>(d: &D, dead: u64, wait: Duration) {
    std::thread::sleep(wait);
    let r = d.supervision();
    let result = {
        let _g = lock(&r.swap);
        if r.stopped() {
            // Shutting down: the domain stays dead.
            r.restarting.store(false, Ordering::Release);
            r.notify_moved();
            return;
        }
        if r.generation() == dead {
            r.renew(|g| d.replace(g)).map(|_| d.renewed())
        } else {
            // A reload replaced it meanwhile.
            Ok(())
        }
    };
    lock(&r.streak).1 = Instant::now();
    // Counted before the waiting requests go on: whoever sees the domain back sees the
    // restart in the metric too.
    if result.is_ok() {
        r.metrics.restart(d.name());
    }
    r.restarting.store(false, Ordering::Release);
    // A restart that failed leaves the waiting requests nothing to wait for.
    r.notify_moved();
    match result {
        Ok(()) => {
            tracing::warn!(
                plugin = d.name(),
                generation = dead + 1,
                waited_ms = wait.as_millis() as u64,
                "{} restarted fresh after a fault",
                D::KIND
            );
        }
        // The next request that finds the domain dead schedules another attempt, with a
        // longer wait.
        Err(e) => tracing::error!(plugin = d.name(), "restart failed: {e}"),
    }
}

/// Replaces generation `generation` of `d`, which grew past its memory mark, with a fresh
/// one on a thread of its own, at once (no backoff: nothing failed). Counted as a recycle
/// (`reason`), not as a restart or a failure; requests in flight finish on the old
/// generation. Does nothing when `generation` is not the current one, a recycle runs, or
/// the server is shutting down.
pub(crate) fn recycle<D: Supervised>(d: &Arc<D>, generation: u64, reason: &'static str) {
    let r = d.supervision();
    if r.stopped() || r.generation() != generation || r.recycling.swap(true, Ordering::AcqRel) {
        return;
    }
    let me = d.clone();
    let spawned = std::thread::Builder::new()
        .name(format!("recycle-{}", d.name()))
        .spawn(move || {
            let r = me.supervision();
            let result = {
                let _g = lock(&r.swap);
                // A reload or restart replaced it meanwhile: nothing to do.
                (r.generation() == generation)
                    .then(|| r.renew(|g| me.replace(g)).map(|_| me.renewed()))
            };
            r.recycling.store(false, Ordering::Release);
            match result {
                Some(Ok(())) => {
                    r.metrics.recycled(me.name(), reason);
                    tracing::info!(
                        plugin = me.name(),
                        generation = generation + 1,
                        reason,
                        "{} replaced by a fresh generation",
                        D::KIND
                    );
                }
                Some(Err(e)) => tracing::error!(plugin = me.name(), "recycle failed: {e}"),
                None => {}
            }
        });
    if let Err(e) = spawned {
        tracing::error!(plugin = d.name(), "can not start a recycle thread: {e}");
        r.recycling.store(false, Ordering::Release);
    }
}

/// How often a domain's failure is reported in full; the ones between are counted.
const REPORT_EVERY: Duration = Duration::from_secs(60);

/// Reports a failure of `domain` (a trap, a call that failed) at warning level: in full once
/// a minute per domain, and counted in between, so that a client that makes a guest trap on
/// every request can not flood the log. The next full report says how many it left out.
/// `detail` is formatted only when it is written.
pub(crate) fn report_failure(domain: &str, detail: impl FnOnce() -> String) {
    static LAST: Mutex<Vec<(String, Instant, u64)>> = Mutex::new(Vec::new());
    let now = Instant::now();
    let skipped = {
        let mut last = lock(&LAST);
        match last.iter_mut().find(|(d, ..)| d == domain) {
            Some((_, at, skipped)) if now.duration_since(*at) < REPORT_EVERY => {
                *skipped += 1;
                return;
            }
            Some((_, at, skipped)) => {
                *at = now;
                std::mem::take(skipped)
            }
            // Domain names come from the config: the list is as long as it has domains.
            None => {
                last.push((domain.to_owned(), now, 0));
                0
            }
        }
    };
    if skipped > 0 {
        tracing::warn!(
            plugin = domain,
            not_reported = skipped,
            "{} ({skipped} more failures of this domain since its last report; one is \
             reported in full a minute)",
            detail()
        );
    } else {
        tracing::warn!(plugin = domain, "{}", detail());
    }
}

/// `e` and its chain of sources, each said once: a source whose text the message holds
/// already is left out.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let t = c.to_string();
        if !text.contains(&t) {
            text.push_str(": ");
            text.push_str(&t);
        }
        cause = c.source();
    }
    text
}

impl DeployError {
    /// This error, placed at `line` of the config `file` (unless it is placed already).
    pub fn at(self, file: &std::path::Path, line: usize) -> DeployError {
        match self {
            DeployError::At { .. } => self,
            e => DeployError::At {
                file: file.display().to_string(),
                line,
                error: Box::new(e),
            },
        }
    }
}
