//! Calls into a kernel's local exports from async code.
//!
//! A migrating call blocks its thread, so wasm never runs on the tokio reactor here: a
//! [`lrpc_driver::pool::Pool`] of OS threads each owns a driver domain
//! (`lrpc_artifacts::HTTP_DRIVER`, a client domain of the kernel) bound to every export the
//! pool serves. A call waits for room first (a semaphore: backpressure to async callers,
//! never a buffer without bound), then goes to the thread idle last. With several workers,
//! calls into a server with replicas run in parallel.

use crate::error::{RemoteError, ServeError};
use lrpc_driver::pool as threads;
use lrpc_driver::{BindError, CallFailure, Driver};
use lrpc_kernel::{Kernel, Status, presentation::InterfacePlan};
use lrpc_lock::lock;
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};

/// One export the pool calls into.
#[derive(Debug, Clone)]
pub struct LocalExport {
    /// The name it is exported under.
    pub name: String,
    /// Its interface's plan.
    pub plan: Arc<InterfacePlan>,
    slot: usize,
}

/// What a worker does with a call's result, on its own thread.
type Done = Box<dyn FnOnce(Result<Vec<u8>, RemoteError>) + Send>;

/// A call for the pool's threads.
struct Job {
    slot: usize,
    proc: usize,
    args: Vec<u8>,
    done: Done,
    /// The span the call was made in, entered by the worker (`Span::none()` unless traces
    /// are exported: see `trace.rs`).
    span: tracing::Span,
    /// The job's place in the bound, given back when it is done.
    _permit: OwnedSemaphorePermit,
}

impl threads::Job for Job {
    fn refuse(self) {
        (self.done)(Err(RemoteError::Driver("the pool is shut down".into())));
    }
}

/// What every driver of a pool is bound to: slot, export name, fingerprint, procedures.
type Bind = (usize, String, u64, usize);

/// The drivers a pool lends to blocking threads, and how many it has made.
#[derive(Default)]
struct Lent {
    idle: Vec<Driver>,
    made: usize,
}

/// A pool of driver threads calling into a kernel's exports.
pub struct LocalPool {
    exports: HashMap<String, LocalExport>,
    /// The threads, each with its bound driver (dropping the pool lets them finish the
    /// calls queued, then end).
    threads: threads::Pool<Job>,
    /// Calls in the pool (waiting or running): acquired before a call is queued.
    permits: Arc<Semaphore>,
    kernel: Kernel,
    binds: Arc<[Bind]>,
    plans: Arc<HashMap<usize, Arc<InterfacePlan>>>,
    /// Drivers lent to blocking threads, at most `workers` of them.
    lent: Mutex<Lent>,
    returned: Condvar,
    workers: usize,
}

impl LocalPool {
    /// A pool of `workers` threads (at least one) serving calls into `exports`, each an
    /// export name of `kernel`'s clerk and its interface, with at most `queue` calls waiting.
    pub fn new(
        kernel: &Kernel,
        named: &[(&str, &str)],
        workers: usize,
        queue: usize,
    ) -> Result<LocalPool, ServeError> {
        let mut exports = HashMap::new();
        for (slot, (name, interface)) in named.iter().enumerate() {
            let plan = Arc::new(kernel.interface(interface)?);
            exports.insert(
                (*name).to_owned(),
                LocalExport {
                    name: (*name).to_owned(),
                    plan,
                    slot,
                },
            );
        }
        let workers = workers.max(1);
        let queue = queue.max(1);
        let binds: Arc<[Bind]> = exports
            .values()
            .map(|e| {
                (
                    e.slot,
                    e.name.clone(),
                    e.plan.fingerprint,
                    e.plan.procs.len(),
                )
            })
            .collect();
        let plans: Arc<HashMap<usize, Arc<InterfacePlan>>> =
            Arc::new(exports.values().map(|e| (e.slot, e.plan.clone())).collect());
        // The semaphore below keeps calls in the pool to `workers + queue`: the queue is
        // never full.
        let pool = threads::Pool::new(workers + queue, threads::Wake::LastIdle);
        let (k, b, b2, p) = (kernel.clone(), binds.clone(), binds.clone(), plans.clone());
        pool.start(
            workers,
            |w| format!("lrpc-remote-{w}"),
            move |w| make_driver(&k, &format!("lrpc-remote-{w}"), &b),
            move |driver: &mut Driver, job: Job| {
                let entered = job.span.enter();
                let result = run(driver, &b2, &p, job.slot, job.proc, &job.args);
                drop(entered);
                (job.done)(result);
            },
        )
        .map_err(|e| match e {
            threads::StartError::State(e) => e,
            threads::StartError::Spawn(e) => ServeError::Listen {
                addr: "worker thread".into(),
                source: e,
            },
            threads::StartError::Panicked => ServeError::Register("driver".into(), "exited".into()),
        })?;
        Ok(LocalPool {
            exports,
            threads: pool,
            permits: Arc::new(Semaphore::new(workers + queue)),
            kernel: kernel.clone(),
            binds,
            plans,
            lent: Mutex::new(Lent::default()),
            returned: Condvar::new(),
            workers,
        })
    }

    /// Calls procedure `proc` of `export` on this thread, with a driver the pool lends
    /// (waiting at most `wait` for one while all are lent); the A-stack encoded result.
    pub(crate) fn call_blocking(
        &self,
        export: &LocalExport,
        proc: usize,
        args: &[u8],
        wait: std::time::Duration,
    ) -> Result<Vec<u8>, RemoteError> {
        let driver = self.borrow(wait)?;
        let r = run(&driver, &self.binds, &self.plans, export.slot, proc, args);
        lock(&self.lent).idle.push(driver);
        self.returned.notify_one();
        r
    }

    /// An idle lent driver, a new one while fewer than `workers` exist, or the next one
    /// given back within `wait`.
    fn borrow(&self, wait: std::time::Duration) -> Result<Driver, RemoteError> {
        let until = std::time::Instant::now() + wait;
        let mut g = lock(&self.lent);
        loop {
            if let Some(d) = g.idle.pop() {
                return Ok(d);
            }
            if g.made < self.workers {
                g.made += 1;
                let name = format!("lrpc-remote-lent-{}", g.made);
                drop(g);
                return make_driver(&self.kernel, &name, &self.binds).map_err(|e| {
                    lock(&self.lent).made -= 1;
                    self.returned.notify_one();
                    RemoteError::Driver(e.to_string())
                });
            }
            let left = until.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Err(RemoteError::Status(Status::ServerBusy));
            }
            g = self
                .returned
                .wait_timeout(g, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// The export named `name`.
    pub fn export(&self, name: &str) -> Option<&LocalExport> {
        self.exports.get(name)
    }

    /// The exports, by name.
    pub fn exports(&self) -> impl Iterator<Item = &LocalExport> {
        self.exports.values()
    }

    /// Calls procedure `proc` of `export` with A-stack encoded arguments; the A-stack encoded
    /// result.
    pub async fn call(
        &self,
        export: &LocalExport,
        proc: usize,
        args: Vec<u8>,
    ) -> Result<Vec<u8>, RemoteError> {
        self.call_then(export, proc, args, |r| r).await?
    }

    /// Calls procedure `proc` of `export`, then runs `then` on the result on the worker's
    /// thread (a server sends the reply from there, without waking the task first); what
    /// `then` returns.
    pub(crate) async fn call_then<T: Send + 'static>(
        &self,
        export: &LocalExport,
        proc: usize,
        args: Vec<u8>,
        then: impl FnOnce(Result<Vec<u8>, RemoteError>) -> T + Send + 'static,
    ) -> Result<T, RemoteError> {
        let (reply, rx) = oneshot::channel();
        self.submit(export, proc, args, move |r| {
            let _ = reply.send(then(r));
        })
        .await?;
        rx.await
            .map_err(|_| RemoteError::Driver("the worker stopped".into()))
    }

    /// Queues a call of procedure `proc` of `export` (waiting while the pool is full); a
    /// worker runs `done` on its result on its own thread. Nothing wakes the caller.
    pub(crate) async fn submit(
        &self,
        export: &LocalExport,
        proc: usize,
        args: Vec<u8>,
        done: impl FnOnce(Result<Vec<u8>, RemoteError>) + Send + 'static,
    ) -> Result<(), RemoteError> {
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| RemoteError::Driver("the pool is shut down".into()))?;
        let job = Job {
            slot: export.slot,
            proc,
            args,
            done: Box::new(done),
            span: if crate::trace::installed() {
                tracing::Span::current()
            } else {
                tracing::Span::none()
            },
            _permit: permit,
        };
        match self.threads.submit(job) {
            Ok(()) => Ok(()),
            Err(threads::Refused::Closed(_)) => {
                Err(RemoteError::Driver("the pool is shut down".into()))
            }
            Err(threads::Refused::Full(_)) => Err(RemoteError::Status(Status::ServerBusy)),
        }
    }
}

/// A driver domain named `name`, bound to every export of the pool.
fn make_driver(kernel: &Kernel, name: &str, binds: &[Bind]) -> Result<Driver, ServeError> {
    let driver = Driver::new(kernel, name)?;
    for (slot, name, fp, nprocs) in binds {
        driver
            .bind(*slot, name, *fp, *nprocs)
            .map_err(|e| match e {
                BindError::Status(status) => ServeError::Bind {
                    name: name.clone(),
                    status,
                },
                BindError::Driver(e) => ServeError::Kernel(e),
            })?;
    }
    Ok(driver)
}

/// One call through `driver`: procedure `proc` of the export in `slot`.
fn run(
    driver: &Driver,
    binds: &[Bind],
    plans: &HashMap<usize, Arc<InterfacePlan>>,
    slot: usize,
    proc: usize,
    args: &[u8],
) -> Result<Vec<u8>, RemoteError> {
    let result = match plans.get(&slot).and_then(|p| p.procs.get(proc)) {
        None => Err(RemoteError::BadProcedure(proc)),
        Some(p) => driver
            .call(slot, proc, p.bounded, p.out_bound.unwrap_or(0), args)
            .map_err(|e| match e {
                CallFailure::Status(s) => RemoteError::Status(s),
                CallFailure::Setup(s) => RemoteError::Driver(s),
                CallFailure::Driver(e) | CallFailure::Component(e) => {
                    RemoteError::Driver(e.to_string())
                }
            }),
    };
    // A terminated server leaves the driver's binding stale; a restarted server under the
    // same name is bound again on the next failure.
    if let Err(RemoteError::Status(Status::ServerTerminated | Status::StaleBinding)) = &result
        && let Some((slot, name, fp, n)) = binds.iter().find(|b| b.0 == slot)
    {
        let _ = driver.bind(*slot, name, *fp, *n);
    }
    result
}
