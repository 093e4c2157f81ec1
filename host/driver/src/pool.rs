//! One worker pool: OS threads that each own their per-thread state (a bound driver, a
//! route's seat), fed by one bounded queue.
//!
//! Guest code called through a driver blocks its thread, and a driver belongs to the thread
//! that made it. So the runtime's edge and remote serving both run calls on threads of their
//! own, each thread building its state once and keeping it between jobs. This module is the
//! one place that does so.
//!
//! - **One queue, parked threads.** Jobs wait in one queue under a `Mutex`. An idle thread
//!   parks on a `Condvar` of its own and does not spin. (With a channel that spins and
//!   yields before it parks, crossbeam's, the edge's reused `wasi:http` handler served about
//!   15% fewer requests on a 2-core machine, where idle threads, the reactor and the load
//!   share the cores.)
//! - **The policy: which idle thread a job wakes** ([`Wake`]), and only that one: the thread
//!   idle last (its caches are warm, the others stay parked), or the one idle longest (the
//!   jobs spread over every thread).
//! - **Bounded.** A full queue refuses a job and gives it back ([`Refused::Full`]): the
//!   caller answers it (the edge with 503) or waits for room before it submits (remote
//!   serving, whose callers are async).
//! - **Shutdown.** [`Pool::close`] lets the threads finish the queued jobs, then stop;
//!   [`Pool::stop`] answers the queued jobs with an error ([`Job::refuse`]) instead. Both
//!   then [`Pool::join`] the threads, or [`Pool::join_within`] a bound. Dropping the pool
//!   closes it without waiting.
//! - **Panics.** A job that panics costs its thread its state, not its life: the thread
//!   counts the panic ([`PoolStats::panicked`]), builds its state again, and takes the next
//!   job.

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Work for a pool's thread.
pub trait Job: Send + 'static {
    /// Answers the job with an error, without running it: the pool was stopped while the
    /// job waited in its queue ([`Pool::stop`]).
    fn refuse(self);
}

/// Why [`Pool::submit`] did not take a job; the job comes back.
pub enum Refused<J> {
    /// The queue holds as many jobs as the pool's capacity.
    Full(J),
    /// The pool was closed or stopped.
    Closed(J),
}

impl<J> Refused<J> {
    /// The job that was not taken.
    pub fn into_job(self) -> J {
        match self {
            Refused::Full(j) | Refused::Closed(j) => j,
        }
    }
}

impl<J> std::fmt::Debug for Refused<J> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Refused::Full(_) => "Full",
            Refused::Closed(_) => "Closed",
        })
    }
}

/// Why [`Pool::start`] failed.
#[derive(Debug, thiserror::Error)]
pub enum StartError<E> {
    /// The system would not make a thread.
    #[error("a pool thread could not be made: {0}")]
    Spawn(std::io::Error),
    /// A thread could not build its state.
    #[error("a pool thread could not start: {0}")]
    State(E),
    /// A thread panicked while it built its state.
    #[error("a pool thread panicked while it started")]
    Panicked,
}

/// What a pool holds and has done, at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PoolStats {
    /// Threads alive (building their state, idle or running a job).
    pub threads: usize,
    /// Threads parked, waiting for a job.
    pub idle: usize,
    /// Jobs waiting in the queue.
    pub queued: usize,
    /// Jobs a thread is running now.
    pub running: usize,
    /// Jobs run to their end, panicked or not.
    pub done: u64,
    /// Jobs that panicked.
    pub panicked: u64,
}

/// The queue and the threads' places, under one lock.
struct State<J> {
    queue: VecDeque<J>,
    /// Threads parked, the most recently idle last.
    idle: Vec<usize>,
    /// Each thread's own condition variable, by its number.
    wakers: Vec<Arc<Condvar>>,
    /// Whether each thread is in `idle`.
    parked: Vec<bool>,
    closed: bool,
    capacity: usize,
    wake: Wake,
    stats: PoolStats,
}

impl<J> State<J> {
    /// Takes thread `w` out of `idle`, where it may still be after a spurious wake.
    fn unpark(&mut self, w: usize) {
        if self.parked.get(w).copied().unwrap_or(false) {
            self.parked[w] = false;
            self.idle.retain(|&i| i != w);
        }
    }
}

/// Which idle thread a job wakes: the pool's policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// The thread that went idle most recently: its caches and its state are warm, and a
    /// caller that sends one job at a time keeps one thread busy.
    LastIdle,
    /// The thread idle longest: the jobs spread over every thread in turn (as one
    /// `Condvar` shared by every thread wakes them).
    LongestIdle,
}

/// A pool of threads, each owning its state, running jobs of type `J` from one queue.
pub struct Pool<J: Job> {
    shared: Arc<Mutex<State<J>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

/// Locks `m`, also after a thread panicked holding it (every update here is one step).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<J: Job> Pool<J> {
    /// A pool with no threads yet ([`Pool::start`] adds them), whose queue holds at most
    /// `capacity` jobs (at least one), a job waking an idle thread as `wake` says.
    pub fn new(capacity: usize, wake: Wake) -> Pool<J> {
        Pool {
            shared: Arc::new(Mutex::new(State {
                queue: VecDeque::new(),
                idle: Vec::new(),
                wakers: Vec::new(),
                parked: Vec::new(),
                closed: false,
                capacity: capacity.max(1),
                wake,
                stats: PoolStats::default(),
            })),
            threads: Mutex::new(Vec::new()),
        }
    }

    /// Adds `threads` threads, thread `k` named `name(k)`. Each builds its state on itself
    /// with `init(k)` (again after a job panics), then runs jobs with `run(&mut state,
    /// job)`. Returns once every new thread has built its state, or with the first failure
    /// (the threads that did start keep serving).
    pub fn start<S, E, I, R>(
        &self,
        threads: usize,
        name: impl Fn(usize) -> String,
        init: I,
        run: R,
    ) -> Result<(), StartError<E>>
    where
        S: 'static,
        E: Send + 'static,
        I: Fn(usize) -> Result<S, E> + Send + Sync + 'static,
        R: Fn(&mut S, J) + Send + Sync + 'static,
    {
        let init = Arc::new(init);
        let run = Arc::new(run);
        let mut ready = Vec::new();
        for k in 0..threads {
            let w = {
                let mut s = lock(&self.shared);
                s.wakers.push(Arc::new(Condvar::new()));
                s.parked.push(false);
                s.stats.threads += 1;
                s.wakers.len() - 1
            };
            let (tx, rx) = std::sync::mpsc::channel();
            let (shared, init, run) = (self.shared.clone(), init.clone(), run.clone());
            let spawned = std::thread::Builder::new()
                .name(name(k))
                .spawn(move || work(&shared, w, k, &*init, &*run, &tx));
            match spawned {
                Ok(h) => lock(&self.threads).push(h),
                Err(e) => {
                    lock(&self.shared).stats.threads -= 1;
                    return Err(StartError::Spawn(e));
                }
            }
            ready.push(rx);
        }
        for rx in ready {
            match rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(StartError::State(e)),
                Err(_) => return Err(StartError::Panicked),
            }
        }
        Ok(())
    }

    /// Queues `job` and wakes one idle thread, as the pool's [`Wake`] says; with none idle,
    /// a thread takes the job when it finishes its own. A full or closed pool gives the job
    /// back.
    pub fn submit(&self, job: J) -> Result<(), Refused<J>> {
        let waker = {
            let mut s = lock(&self.shared);
            if s.closed {
                return Err(Refused::Closed(job));
            }
            if s.queue.len() >= s.capacity {
                return Err(Refused::Full(job));
            }
            s.queue.push_back(job);
            let idle = match s.wake {
                Wake::LastIdle => s.idle.pop(),
                Wake::LongestIdle if s.idle.is_empty() => None,
                Wake::LongestIdle => Some(s.idle.remove(0)),
            };
            match idle {
                Some(w) => {
                    s.parked[w] = false;
                    s.wakers.get(w).cloned()
                }
                None => None,
            }
        };
        // Woken after the lock is let go, so that the thread does not wait for it at once.
        if let Some(waker) = waker {
            waker.notify_one();
        }
        Ok(())
    }

    /// Takes no more jobs; the threads run those queued, then stop.
    pub fn close(&self) {
        let wakers = {
            let mut s = lock(&self.shared);
            s.closed = true;
            s.wakers.clone()
        };
        for w in wakers {
            w.notify_one();
        }
    }

    /// Takes no more jobs and answers those queued with an error ([`Job::refuse`]); the
    /// threads stop after the job each is running. Returns how many were answered.
    pub fn stop(&self) -> usize {
        let queued = {
            let mut s = lock(&self.shared);
            s.closed = true;
            std::mem::take(&mut s.queue)
        };
        self.close();
        let n = queued.len();
        for job in queued {
            job.refuse();
        }
        n
    }

    /// Waits for every thread to end (after [`Pool::close`] or [`Pool::stop`]).
    pub fn join(&self) {
        let hs = std::mem::take(&mut *lock(&self.threads));
        for h in hs {
            let _ = h.join();
        }
    }

    /// Waits at most `wait` for the threads to end; how many are still running then (they
    /// are left to end on their own).
    pub fn join_within(&self, wait: Duration) -> usize {
        let until = Instant::now() + wait;
        loop {
            let left = {
                let mut hs = lock(&self.threads);
                let (ended, running): (Vec<_>, Vec<_>) = std::mem::take(&mut *hs)
                    .into_iter()
                    .partition(|h| h.is_finished());
                *hs = running;
                for h in ended {
                    let _ = h.join();
                }
                hs.len()
            };
            if left == 0 || Instant::now() >= until {
                return left;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// What the pool holds and has done now.
    pub fn stats(&self) -> PoolStats {
        let s = lock(&self.shared);
        PoolStats {
            idle: s.idle.len(),
            queued: s.queue.len(),
            ..s.stats
        }
    }
}

impl<J: Job> Drop for Pool<J> {
    fn drop(&mut self) {
        self.close();
    }
}

/// Counts its thread out of the pool when the thread ends, however it ends.
struct Alive<'a, J>(&'a Mutex<State<J>>, usize);

impl<J> Drop for Alive<'_, J> {
    fn drop(&mut self) {
        let mut s = lock(self.0);
        s.stats.threads -= 1;
        s.unpark(self.1);
    }
}

/// Thread `w` of the pool (the `k`th of its batch): builds its state, then runs jobs until
/// the pool is closed and its queue empty.
fn work<J, S, E>(
    shared: &Mutex<State<J>>,
    w: usize,
    k: usize,
    init: &(dyn Fn(usize) -> Result<S, E> + Send + Sync),
    run: &(dyn Fn(&mut S, J) + Send + Sync),
    ready: &std::sync::mpsc::Sender<Result<(), E>>,
) {
    let _alive = Alive(shared, w);
    let mut state = match init(k) {
        Ok(s) => {
            let _ = ready.send(Ok(()));
            s
        }
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    // How the last job ended: counted when the next one is taken, under the same lock.
    let mut last: Option<bool> = None;
    loop {
        let job = {
            let mut s = lock(shared);
            if let Some(panicked) = last.take() {
                s.stats.running -= 1;
                s.stats.done += 1;
                s.stats.panicked += u64::from(panicked);
            }
            loop {
                if let Some(job) = s.queue.pop_front() {
                    s.unpark(w);
                    s.stats.running += 1;
                    break Some(job);
                }
                if s.closed {
                    break None;
                }
                if !s.parked[w] {
                    s.parked[w] = true;
                    s.idle.push(w);
                }
                let waker = s.wakers[w].clone();
                s = waker.wait(s).unwrap_or_else(PoisonError::into_inner);
            }
        };
        let Some(job) = job else { return };
        let panicked = catch_unwind(AssertUnwindSafe(|| run(&mut state, job))).is_err();
        last = Some(panicked);
        if panicked {
            // The state may be half way through the job: it is built again.
            drop(catch_unwind(AssertUnwindSafe(|| drop(state))));
            match catch_unwind(AssertUnwindSafe(|| init(k))) {
                Ok(Ok(s)) => state = s,
                // A thread that can not build its state again ends, counted out.
                _ => {
                    let mut s = lock(shared);
                    s.stats.running -= 1;
                    s.stats.done += 1;
                    s.stats.panicked += 1;
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;

    /// A thread's state in these tests: its number, and which build of it this is.
    struct Seat {
        k: usize,
        build: usize,
    }

    /// A test job: what it does on a thread, and where a refusal is told.
    struct Task {
        work: Box<dyn FnOnce(&mut Seat) + Send>,
        refused: mpsc::Sender<()>,
    }

    impl Job for Task {
        fn refuse(self) {
            let _ = self.refused.send(());
        }
    }

    fn task(refused: &mpsc::Sender<()>, work: impl FnOnce(&mut Seat) + Send + 'static) -> Task {
        Task {
            work: Box::new(work),
            refused: refused.clone(),
        }
    }

    /// A pool of `threads` threads whose states count their builds in `builds`.
    fn pool(threads: usize, capacity: usize, builds: &Arc<AtomicUsize>) -> Pool<Task> {
        pool_waking(threads, capacity, builds, Wake::LastIdle)
    }

    fn pool_waking(
        threads: usize,
        capacity: usize,
        builds: &Arc<AtomicUsize>,
        wake: Wake,
    ) -> Pool<Task> {
        let p = Pool::new(capacity, wake);
        let b = builds.clone();
        p.start(
            threads,
            |k| format!("test-pool-{k}"),
            move |k| {
                Ok::<_, ()>(Seat {
                    k,
                    build: b.fetch_add(1, Ordering::SeqCst),
                })
            },
            |seat, t: Task| (t.work)(seat),
        )
        .expect("start");
        p
    }

    /// Waits (with a generous bound) until `f` holds of the pool's stats.
    fn until(p: &Pool<Task>, f: impl Fn(&PoolStats) -> bool) -> PoolStats {
        let end = Instant::now() + Duration::from_secs(20);
        loop {
            let s = p.stats();
            if f(&s) {
                return s;
            }
            assert!(Instant::now() < end, "stats never held: {s:?}");
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    #[test]
    fn jobs_run_on_the_pools_threads_each_building_its_state_once() {
        let builds = Arc::new(AtomicUsize::new(0));
        let p = pool(3, 1000, &builds);
        assert_eq!(
            builds.load(Ordering::SeqCst),
            3,
            "start waits for every state"
        );
        let (refused, _r) = mpsc::channel();
        let (tx, rx) = mpsc::channel();
        for _ in 0..200 {
            let tx = tx.clone();
            p.submit(task(&refused, move |seat| {
                let name = std::thread::current().name().map(str::to_owned);
                let _ = tx.send((name, seat.k, seat.build));
            }))
            .expect("submit");
        }
        for _ in 0..200 {
            let (name, k, build) = rx.recv_timeout(Duration::from_secs(20)).expect("ran");
            assert_eq!(name, Some(format!("test-pool-{k}")));
            assert!(k < 3 && build < 3, "thread {k}, build {build}");
        }
        assert_eq!(builds.load(Ordering::SeqCst), 3, "no state built twice");
        let s = until(&p, |s| s.done == 200);
        assert_eq!((s.running, s.queued, s.panicked, s.threads), (0, 0, 0, 3));
    }

    #[test]
    fn a_job_wakes_the_thread_idle_last() {
        let p = pool(4, 16, &Arc::new(AtomicUsize::new(0)));
        let (refused, _r) = mpsc::channel();
        let (tx, rx) = mpsc::channel();
        let mut last = None;
        for _ in 0..20 {
            until(&p, |s| s.idle == 4);
            let tx = tx.clone();
            p.submit(task(&refused, move |seat| {
                let _ = tx.send(seat.k);
            }))
            .expect("submit");
            let k = rx.recv_timeout(Duration::from_secs(20)).expect("ran");
            if let Some(l) = last {
                assert_eq!(
                    k, l,
                    "the job went to another thread than the one idle last"
                );
            }
            last = Some(k);
        }
    }

    #[test]
    fn a_job_wakes_the_thread_idle_longest_if_asked() {
        let p = pool_waking(4, 16, &Arc::new(AtomicUsize::new(0)), Wake::LongestIdle);
        let (refused, _r) = mpsc::channel();
        let (tx, rx) = mpsc::channel();
        let mut seen = Vec::new();
        for _ in 0..8 {
            until(&p, |s| s.idle == 4);
            let tx = tx.clone();
            p.submit(task(&refused, move |seat| {
                let _ = tx.send(seat.k);
            }))
            .expect("submit");
            seen.push(rx.recv_timeout(Duration::from_secs(20)).expect("ran"));
        }
        // Every four jobs in a row went to the four threads, each once, in the same turn.
        let mut first: Vec<usize> = seen[..4].to_vec();
        assert_eq!(seen[..4], seen[4..], "not in turn: {seen:?}");
        first.sort_unstable();
        assert_eq!(first, [0, 1, 2, 3], "not spread: {seen:?}");
    }

    /// The processor time thread `tid` of this process has used, in clock ticks.
    #[cfg(target_os = "linux")]
    fn ticks(tid: &str) -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).expect("stat");
        // The fields after the command's closing parenthesis; utime and stime are the 12th
        // and 13th of them.
        let rest = stat.rsplit_once(')').expect("comm").1;
        let f: Vec<&str> = rest.split_whitespace().collect();
        f[11].parse::<u64>().expect("utime") + f[12].parse::<u64>().expect("stime")
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn idle_threads_park_without_spinning() {
        let p = pool(2, 16, &Arc::new(AtomicUsize::new(0)));
        let (refused, _r) = mpsc::channel();
        let (tx, rx) = mpsc::channel();
        // Each thread's id, from a job blocked until both have started.
        let gate = Arc::new(std::sync::Barrier::new(2));
        for _ in 0..2 {
            let (tx, gate) = (tx.clone(), gate.clone());
            p.submit(task(&refused, move |_| {
                let me = std::fs::read_link("/proc/thread-self").expect("thread-self");
                let _ = tx.send(me.file_name().expect("tid").to_string_lossy().into_owned());
                gate.wait();
            }))
            .expect("submit");
        }
        let tids: Vec<String> = (0..2)
            .map(|_| rx.recv_timeout(Duration::from_secs(20)).expect("tid"))
            .collect();
        until(&p, |s| s.idle == 2);
        let before: u64 = tids.iter().map(|t| ticks(t)).sum();
        std::thread::sleep(Duration::from_millis(600));
        let after: u64 = tids.iter().map(|t| ticks(t)).sum();
        // A spinning thread would use about 60 ticks (of 10 ms) each; a parked one none.
        assert!(
            after - before <= 4,
            "idle threads used {} ticks",
            after - before
        );
        assert_eq!(p.stats().idle, 2);
    }

    #[test]
    fn stopping_answers_the_queued_jobs_and_joins_the_threads() {
        let p = pool(1, 16, &Arc::new(AtomicUsize::new(0)));
        let (refused, refusals) = mpsc::channel();
        let (release, held) = mpsc::channel::<()>();
        let (ran_tx, ran) = mpsc::channel();
        p.submit(task(&refused, move |_| {
            let _ = held.recv();
        }))
        .expect("submit");
        until(&p, |s| s.running == 1);
        for _ in 0..3 {
            let ran_tx = ran_tx.clone();
            p.submit(task(&refused, move |_| {
                let _ = ran_tx.send(());
            }))
            .expect("submit");
        }
        assert_eq!(p.stop(), 3);
        assert!(matches!(
            p.submit(task(&refused, |_| {})),
            Err(Refused::Closed(_))
        ));
        drop(release);
        p.join();
        assert_eq!(
            refusals.try_iter().count(),
            3,
            "each queued job answered once"
        );
        assert!(ran.try_recv().is_err(), "no queued job ran");
        let s = p.stats();
        assert_eq!((s.threads, s.running, s.queued, s.done), (0, 0, 0, 1));
    }

    #[test]
    fn closing_runs_the_queued_jobs_then_ends_the_threads() {
        let p = pool(2, 16, &Arc::new(AtomicUsize::new(0)));
        let (refused, refusals) = mpsc::channel();
        let (tx, rx) = mpsc::channel();
        for _ in 0..10 {
            let tx = tx.clone();
            p.submit(task(&refused, move |_| {
                std::thread::sleep(Duration::from_millis(2));
                let _ = tx.send(());
            }))
            .expect("submit");
        }
        p.close();
        assert_eq!(p.join_within(Duration::from_secs(20)), 0);
        assert_eq!(rx.try_iter().count(), 10);
        assert!(refusals.try_recv().is_err());
        assert_eq!(p.stats().threads, 0);
    }

    #[test]
    fn a_full_queue_gives_the_job_back() {
        let p = pool(1, 2, &Arc::new(AtomicUsize::new(0)));
        let (refused, _r) = mpsc::channel();
        let (release, held) = mpsc::channel::<()>();
        p.submit(task(&refused, move |_| {
            let _ = held.recv();
        }))
        .expect("submit");
        until(&p, |s| s.running == 1);
        p.submit(task(&refused, |_| {})).expect("room for one");
        p.submit(task(&refused, |_| {})).expect("room for two");
        assert!(matches!(
            p.submit(task(&refused, |_| {})),
            Err(Refused::Full(_))
        ));
        drop(release);
        until(&p, |s| s.done == 3);
    }

    #[test]
    fn a_panicking_job_costs_its_thread_the_state_not_the_accounting() {
        let builds = Arc::new(AtomicUsize::new(0));
        let p = pool(1, 16, &builds);
        let (refused, _r) = mpsc::channel();
        p.submit(task(&refused, |_| panic!("a job's panic")))
            .expect("submit");
        let (tx, rx) = mpsc::channel();
        p.submit(task(&refused, move |seat| {
            let _ = tx.send(seat.build);
        }))
        .expect("submit");
        let build = rx.recv_timeout(Duration::from_secs(20)).expect("ran");
        assert_eq!(build, 1, "the state was built again after the panic");
        let s = until(&p, |s| s.done == 2);
        assert_eq!((s.panicked, s.running, s.threads), (1, 0, 1));
        assert_eq!(builds.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn a_state_that_fails_to_build_fails_the_start() {
        let p: Pool<Task> = Pool::new(4, Wake::LastIdle);
        let r = p.start(
            2,
            |k| format!("test-fail-{k}"),
            |k| if k == 1 { Err("no driver") } else { Ok(k) },
            |_, t: Task| (t.work)(&mut Seat { k: 0, build: 0 }),
        );
        assert!(matches!(r, Err(StartError::State("no driver"))));
        p.close();
        p.join();
        assert_eq!(p.stats().threads, 0);
    }
}
