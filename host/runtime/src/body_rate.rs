//! The clock of a request body: how long the server may wait for it.
//!
//! Two budgets, both counted only while the server waits for the body (a handler that does
//! not read yet does not use the client's time, as in Kestrel's `MinRequestBodyDataRate`):
//! - **the next piece** must come within `body-timeout` of the wait's start (a stall);
//! - **the minimum rate** (`min-body-rate`, [`MinBodyRate`]): after a grace period of
//!   waiting, the bytes received must average at least the rate over all the waiting so far.
//!   A client that sends a byte a second never stalls, but falls below the rate and is
//!   answered 408 at the end of the grace.
//!
//! The edge reads a body it collects whole with [`BodyClock`] (`edge::read_body`), and a
//! body that streams to a `wasi:http` handler polls the same clock
//! (`wasi_http::RequestBody`).

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// The least rate a request body must average once its grace is over (`[serve]`
/// `min-body-rate` and `min-body-rate-grace`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MinBodyRate {
    /// Bytes per second, above zero.
    pub bytes_per_second: u64,
    /// Waiting time before the rate is checked.
    pub grace: Duration,
}

impl Default for MinBodyRate {
    /// 240 bytes per second after 5 s, as Kestrel's default.
    fn default() -> MinBodyRate {
        MinBodyRate {
            bytes_per_second: 240,
            grace: Duration::from_secs(5),
        }
    }
}

/// Why a body was given up on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Late {
    /// No piece arrived within `body-timeout`.
    Stalled,
    /// The body averaged less than the minimum rate after its grace.
    TooSlow,
}

impl Late {
    /// The text of the 408 answer.
    pub fn reason(self) -> &'static str {
        match self {
            Late::Stalled => "request body stalled\n",
            Late::TooSlow => "request body below the minimum rate\n",
        }
    }
}

/// The clock of one request body (see the module docs).
pub struct BodyClock {
    idle: Duration,
    min: Option<MinBodyRate>,
    /// Bytes received so far.
    seen: u64,
    /// Time waited for the body before the current wait.
    waited: Duration,
    /// When the current wait began, if the reader waits.
    waiting_since: Option<Instant>,
    /// The timer of the current wait and when it is set to fire.
    timer: Option<(Pin<Box<tokio::time::Sleep>>, Instant)>,
}

impl BodyClock {
    /// A clock that allows `idle` between pieces and, if `min` is set, at least that rate.
    pub fn new(idle: Duration, min: Option<MinBodyRate>) -> BodyClock {
        BodyClock {
            idle,
            min,
            seen: 0,
            waited: Duration::ZERO,
            waiting_since: None,
            timer: None,
        }
    }

    /// A piece of `n` bytes arrived: the current wait ends.
    pub fn arrived(&mut self, n: usize) {
        if let Some(since) = self.waiting_since.take() {
            self.waited = self.waited.saturating_add(since.elapsed());
        }
        self.seen = self.seen.saturating_add(n as u64);
    }

    /// The reader waits for the next piece: ready with the reason when the body is late,
    /// else pending with a timer set to wake the task when it would become late. (Outside
    /// a tokio runtime no timer is set: the body is late only when polled late.)
    pub fn poll_late(&mut self, cx: &mut Context<'_>) -> Poll<Late> {
        let now = Instant::now();
        let since = *self.waiting_since.get_or_insert(now);
        let stall_at = since.checked_add(self.idle);
        let slow_at = self.min.and_then(|m| {
            // The waiting the bytes seen so far pay for at the rate, and at least the grace.
            let paid = Duration::try_from_secs_f64(self.seen as f64 / m.bytes_per_second as f64)
                .unwrap_or(Duration::MAX);
            since.checked_add(paid.max(m.grace).saturating_sub(self.waited))
        });
        let late = |now: Instant| {
            if stall_at.is_some_and(|at| now >= at) {
                Some(Late::Stalled)
            } else if slow_at.is_some_and(|at| now >= at) {
                Some(Late::TooSlow)
            } else {
                None
            }
        };
        if let Some(l) = late(now) {
            return Poll::Ready(l);
        }
        let at = match (stall_at, slow_at) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => match a.or(b) {
                Some(at) => at,
                None => return Poll::Pending,
            },
        };
        if tokio::runtime::Handle::try_current().is_err() {
            return Poll::Pending;
        }
        let timer = match &mut self.timer {
            Some((sleep, when)) => {
                if *when != at {
                    sleep.as_mut().reset(at.into());
                    *when = at;
                }
                sleep
            }
            None => {
                &mut self
                    .timer
                    .insert((Box::pin(tokio::time::sleep_until(at.into())), at))
                    .0
            }
        };
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => match late(Instant::now()) {
                Some(l) => Poll::Ready(l),
                // The timer fired a hair early by this clock: the deadline was `at`.
                None => Poll::Ready(if stall_at == Some(at) {
                    Late::Stalled
                } else {
                    Late::TooSlow
                }),
            },
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waker_cx() -> Context<'static> {
        Context::from_waker(std::task::Waker::noop())
    }

    #[test]
    fn a_trickle_is_too_slow_after_the_grace_and_a_pause_is_a_stall() {
        let ms = Duration::from_millis;
        let min = MinBodyRate {
            bytes_per_second: 1000,
            grace: ms(50),
        };
        // A byte every 10 ms: never a stall, too slow once 50 ms of waiting passed.
        let mut c = BodyClock::new(Duration::from_secs(10), Some(min));
        let start = Instant::now();
        let late = loop {
            if let Poll::Ready(l) = c.poll_late(&mut waker_cx()) {
                break l;
            }
            std::thread::sleep(ms(10));
            if let Poll::Ready(l) = c.poll_late(&mut waker_cx()) {
                break l;
            }
            c.arrived(1);
            assert!(start.elapsed() < Duration::from_secs(5));
        };
        assert_eq!(late, Late::TooSlow);
        assert!(start.elapsed() >= ms(50));
        // Fast enough: each piece pays for far more waiting than it took.
        let mut c = BodyClock::new(Duration::from_secs(10), Some(min));
        for _ in 0..5 {
            assert!(c.poll_late(&mut waker_cx()).is_pending());
            std::thread::sleep(ms(20));
            assert!(c.poll_late(&mut waker_cx()).is_pending());
            c.arrived(10_000);
        }
        // A pause longer than the time between pieces: a stall.
        let mut c = BodyClock::new(ms(20), Some(min));
        assert!(c.poll_late(&mut waker_cx()).is_pending());
        std::thread::sleep(ms(40));
        assert_eq!(c.poll_late(&mut waker_cx()), Poll::Ready(Late::Stalled));
        // Without a minimum rate, a trickle is never late.
        let mut c = BodyClock::new(Duration::from_secs(10), None);
        for _ in 0..10 {
            assert!(c.poll_late(&mut waker_cx()).is_pending());
            std::thread::sleep(ms(10));
            c.arrived(1);
        }
    }

    #[test]
    fn huge_counts_do_not_overflow() {
        let mut c = BodyClock::new(
            Duration::MAX,
            Some(MinBodyRate {
                bytes_per_second: 1,
                grace: Duration::MAX,
            }),
        );
        c.arrived(usize::MAX);
        c.arrived(usize::MAX);
        assert!(c.poll_late(&mut waker_cx()).is_pending());
    }
}
