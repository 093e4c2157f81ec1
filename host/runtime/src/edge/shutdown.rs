//! Stopping: draining (the readiness probe fails from the shutdown signal on), taking no
//! more requests, the end of a shutdown's grace (every call still
//! running terminated, queued requests answered 503), waiting for the workers with a bound,
//! and the signals that start it.

use super::Edge;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// What [`Edge::end_grace`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct GraceEnded {
    /// Requests a seat was serving (their calls into plugins or handlers are terminated).
    pub running: usize,
    /// Requests queued for a worker, not started, answered 503.
    pub queued: usize,
}

impl Edge {
    /// Says the server is draining, at a shutdown signal: the readiness probe answers 503
    /// from now on. Requests are served as before.
    pub fn drain(&self) {
        self.inner.draining.store(true, Ordering::SeqCst);
    }

    /// Why the server is not ready for traffic, or `None` when it is: it is draining (see
    /// [`Edge::drain`]), or a plugin's instance died and its restart is pending.
    pub fn unready(&self) -> Option<String> {
        if self.inner.draining.load(Ordering::SeqCst) || self.inner.stopped.load(Ordering::SeqCst) {
            return Some("shutting down".into());
        }
        let dep = &self.inner.deployment;
        dep.plugins
            .values()
            .find(|p| p.restarting())
            .map(|p| format!("plugin `{}` is restarting", p.name))
    }

    /// Stops taking requests and waits for the workers to finish the ones queued.
    pub fn shutdown(&self) {
        self.inner.stopped.store(true, Ordering::Relaxed);
        for r in &self.inner.routes {
            r.pool.close();
        }
        for r in &self.inner.routes {
            r.pool.join();
        }
    }

    /// Ends a shutdown's grace period: stops every plugin and `wasi:http` handler of the
    /// deployment for good (the calls still running in them are terminated at their next
    /// epoch tick, on whatever thread runs them, and answer 503; nothing is restarted),
    /// answers 503 to the requests queued for a worker and to those waiting for a worker's
    /// answer, and refuses new ones with 503. Returns at once: the calls stop on their own
    /// threads. What it did is logged; `None` when it was done before.
    pub fn end_grace(&self) -> Option<GraceEnded> {
        let inner = &self.inner;
        inner.stopped.store(true, Ordering::SeqCst);
        if inner.ended.swap(true, Ordering::SeqCst) {
            return None;
        }
        // Counted before the requests waiting for an answer are told: a handler's request
        // is counted by the request that waits for its task.
        let mut ended = GraceEnded::default();
        for r in &inner.routes {
            ended.queued += r.pool.stop();
            ended.running += r.running.load(Ordering::SeqCst);
        }
        inner.ended_now.notify_waiters();
        let dep = &inner.deployment;
        // Marked stopped first, so that none of them restarts another's generation.
        for p in dep.plugins.values() {
            p.stop();
        }
        for h in dep.handlers.values() {
            h.stop();
        }
        tracing::warn!(
            running = ended.running,
            queued = ended.queued,
            "the grace period ended: {} calls still running in plugins or handlers were \
             terminated and {} queued requests answered 503",
            ended.running,
            ended.queued
        );
        Some(ended)
    }

    /// Whether [`Edge::end_grace`] was called.
    pub fn grace_ended(&self) -> bool {
        self.inner.ended.load(Ordering::SeqCst)
    }

    /// Stops taking requests and waits at most `wait` for the route workers to finish the
    /// requests queued and stop; the number of workers still running then, which are left
    /// to the end of the process. (After [`Edge::end_grace`], a worker runs on only where
    /// a handler waits outside its guest code, for a slow client or an outgoing request.)
    pub fn shutdown_within(&self, wait: Duration) -> usize {
        self.inner.stopped.store(true, Ordering::Relaxed);
        for r in &self.inner.routes {
            r.pool.close();
        }
        let until = Instant::now() + wait;
        self.inner
            .routes
            .iter()
            .map(|r| {
                r.pool
                    .join_within(until.saturating_duration_since(Instant::now()))
            })
            .sum()
    }
}

/// Catches ctrl-c and SIGTERM from the moment it returns, and gives a future that ends when
/// either arrives.
///
/// The handlers are registered at once, not when the future is first polled: a server that
/// answers before its shutdown task runs must not be killed by a signal's default action.
/// Call it inside a tokio runtime (`Runtime::enter` or an async context).
pub fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()> + Send> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate())?;
        let mut interrupt = signal(SignalKind::interrupt())?;
        Ok(async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = interrupt.recv() => {}
            }
        })
    }
    #[cfg(not(unix))]
    {
        Ok(async {
            let _ = tokio::signal::ctrl_c().await;
        })
    }
}
