//! The HTTP listener of `lrpc serve`: it accepts connections within their budgets and hands
//! each request to a router (the edge server's).
//!
//! Every connection has a budget, so that clients that stall can not hold the server:
//! - at most [`Connections::max`] are open at once; further clients wait in the kernel's
//!   accept queue until one closes. Each takes a file descriptor, so at start the open-file
//!   limit's soft value is raised to its hard one, and the cap is lowered (with one warning)
//!   to what that limit leaves after the files already open and a reserve
//!   ([`FD_RESERVE`]) for what the plugins, the log and the handlers' outgoing requests
//!   open later;
//! - a request's head must arrive within [`Connections::header_timeout`]. hyper counts the
//!   wait of an idle keep-alive connection for its next request as a head wait too, so the
//!   same budget closes idle connections;
//! - a request body must keep arriving (the edge's handler reads it with
//!   [`Connections::body_timeout`] between pieces) and, after a grace, average at least
//!   [`Connections::min_body_rate`] (see [`crate::body_rate`]): a body sent a byte at a
//!   time is answered 408 and its connection closed;
//! - an error accepting a connection (out of file descriptors, mostly) pauses the loop for
//!   50 ms, and is logged at most once a second, with a count of those not logged;
//! - on shutdown, connections with no request in flight (idle keep-alive ones, and those
//!   whose request head or TLS handshake has not fully arrived) close at once, and requests
//!   whose head has arrived get [`Connections::shutdown_grace`] to finish. At the grace's
//!   end the caller's `grace_ended` runs (the edge then terminates what still runs and
//!   answers 503), the answers get [`ANSWER_WINDOW`] to go out, and every connection left
//!   is closed;
//! - while requests in flight finish, new connections are still accepted (within
//!   [`Connections::max`]), so that a load balancer's probes see the server draining: their
//!   requests carry [`AcceptedWhileDraining`] (the edge answers its probes and 503 to the
//!   rest), and they do not hold the shutdown.
//!
//! The listening socket is bound from the config, or passed by a service manager (socket
//! activation, [`passed_sockets`] and [`adopt`]).
//!
//! HTTP/1.1 and HTTP/2 (with prior knowledge) are served on the same port; with TLS (see
//! [`crate::tls`]) every connection is TLS, the handshake within the header timeout, and
//! ALPN picks the protocol.

use crate::body_rate::MinBodyRate;
use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};

/// The budgets of the connections of one listener (`[serve]` in the config).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Connections {
    /// Connections open at once.
    pub max: usize,
    /// Longest wait for a request's head, idle keep-alive waits included.
    pub header_timeout: Duration,
    /// Longest wait for the next piece of a request body.
    pub body_timeout: Duration,
    /// How long requests in flight may run on after a shutdown signal.
    pub shutdown_grace: Duration,
    /// The least rate a request body must average after its grace (`None`: no minimum).
    pub min_body_rate: Option<MinBodyRate>,
}

impl Default for Connections {
    fn default() -> Connections {
        Connections {
            max: 1024,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(10),
            shutdown_grace: Duration::from_secs(10),
            min_body_rate: Some(MinBodyRate::default()),
        }
    }
}

/// The mark on every request of a connection accepted after the shutdown signal: the
/// router should answer only what tells the server's state (its probes), and 503 to the
/// rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcceptedWhileDraining;

/// How long, after the grace period, the answers to the requests the edge stopped (503) have
/// to go out before their connections are closed.
pub const ANSWER_WINDOW: Duration = Duration::from_millis(300);

/// How long a connection with no request in flight has, at a shutdown signal, to send what
/// it holds already (an HTTP/2 GOAWAY, the end of an answer) before it is closed.
const CLOSE_IDLE: Duration = Duration::from_millis(100);

/// Where a shutdown stands, as every connection sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    Serving,
    /// The signal came: requests in flight finish, nothing else is served.
    Draining,
    /// The grace and the answer window are over: every connection closes.
    Closing,
}

/// Serves `router` on `listener` until `shutdown` completes; then closes the connections with
/// no request in flight, lets requests in flight finish for at most the grace period, runs
/// `grace_ended` if some are still running then, gives their answers [`ANSWER_WINDOW`] to go
/// out, closes what is left, and returns.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    budget: Connections,
    tls: Option<Arc<crate::tls::Tls>>,
    shutdown: impl Future<Output = ()>,
    grace_ended: impl FnOnce(),
) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(budget.header_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(budget.header_timeout))
        .keep_alive_timeout(budget.header_timeout);
    let builder = Arc::new(builder);
    let slots = Arc::new(Semaphore::new(fit_to_fd_limit(budget.max).max(1)));
    let mut accept_errors = Throttled::default();
    let (phase, phase_rx) = watch::channel(Phase::Serving);
    // Each connection's task holds a clone: `recv` ends when all of them have ended.
    let (alive, mut all_closed) = tokio::sync::mpsc::channel::<()>(1);
    let late_service =
        TowerToHyperService::new(router.clone().layer(axum::Extension(AcceptedWhileDraining)));
    let service = TowerToHyperService::new(router);
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            p = slots.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        let stream = tokio::select! {
            a = listener.accept() => match a {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors, or a connection reset before it was taken:
                    // wait a moment rather than spin, and do not flood the log.
                    if let Some(unlogged) = accept_errors.admit(Instant::now()) {
                        tracing::warn!(
                            not_logged = unlogged,
                            "accepting a connection: {e} (logged at most once a second; \
                             {unlogged} more since the last line)"
                        );
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let (builder, service) = (builder.clone(), service.clone());
        let (phase, alive) = (phase_rx.clone(), alive.clone());
        let tls = tls.clone();
        let header_timeout = budget.header_timeout;
        tokio::spawn(async move {
            let until = Phase::Draining;
            connection(stream, &builder, service, header_timeout, tls, phase, until).await;
            drop((permit, alive));
        });
    }
    let _ = phase.send(Phase::Draining);
    drop(alive);
    let drained = async {
        if tokio::time::timeout(budget.shutdown_grace, all_closed.recv())
            .await
            .is_ok()
        {
            return;
        }
        grace_ended();
        let answered = tokio::time::timeout(ANSWER_WINDOW, all_closed.recv()).await;
        let _ = phase.send(Phase::Closing);
        if answered.is_err() {
            tracing::warn!(
                grace_ms = budget.shutdown_grace.as_millis() as u64,
                "connections still busy after the grace period were closed"
            );
            // The tasks drop their connections at their next poll.
            let _ = tokio::time::timeout(CLOSE_IDLE, all_closed.recv()).await;
        }
    };
    let late = Late {
        listener: &listener,
        slots: &slots,
        builder: &builder,
        service: &late_service,
        tls: &tls,
        phase: &phase_rx,
        header_timeout: budget.header_timeout,
    };
    tokio::select! {
        () = drained => {}
        () = late.accept() => {}
    }
}

/// What serves the connections accepted after the shutdown signal (see
/// [`AcceptedWhileDraining`]).
struct Late<'a> {
    listener: &'a TcpListener,
    slots: &'a Arc<Semaphore>,
    builder: &'a Arc<auto::Builder<TokioExecutor>>,
    service: &'a TowerToHyperService<Router>,
    tls: &'a Option<Arc<crate::tls::Tls>>,
    phase: &'a watch::Receiver<Phase>,
    header_timeout: Duration,
}

impl Late<'_> {
    /// Accepts connections until dropped, each within the connection budget and closed at
    /// the end of the shutdown at the latest; they are not waited for.
    async fn accept(&self) {
        loop {
            let Ok(permit) = self.slots.clone().acquire_owned().await else {
                return;
            };
            let Ok((stream, _)) = self.listener.accept().await else {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            let _ = stream.set_nodelay(true);
            let (builder, service) = (self.builder.clone(), self.service.clone());
            let (tls, phase) = (self.tls.clone(), self.phase.clone());
            let header_timeout = self.header_timeout;
            tokio::spawn(async move {
                let until = Phase::Closing;
                connection(stream, &builder, service, header_timeout, tls, phase, until).await;
                drop(permit);
            });
        }
    }
}

/// Serves one connection until it ends, or the shutdown `phase` reaches `until` (see
/// [`serve`]): at [`Phase::Draining`] it finishes the requests in flight, at
/// [`Phase::Closing`] it closes at once.
async fn connection(
    stream: tokio::net::TcpStream,
    builder: &auto::Builder<TokioExecutor>,
    service: TowerToHyperService<Router>,
    header_timeout: Duration,
    tls: Option<Arc<crate::tls::Tls>>,
    mut phase: watch::Receiver<Phase>,
    until: Phase,
) {
    // hyper reads the first bytes to tell HTTP/1 from HTTP/2 before its head timer runs: a
    // client that sends nothing at all is closed here. At the shutdown signal it gets a
    // moment more: a connection accepted just before the signal may have its request on
    // the way, and closing it then would reset a client that did nothing wrong.
    let mut first = [0u8; 1];
    let arrived = |r: &Result<std::io::Result<usize>, _>| matches!(r, Ok(Ok(n)) if *n > 0);
    let first_bytes = {
        let peek = tokio::time::timeout(header_timeout, stream.peek(&mut first));
        tokio::pin!(peek);
        let before = tokio::select! {
            r = &mut peek => Some(arrived(&r)),
            _ = phase.wait_for(|p| *p >= until) => None,
        };
        match before {
            Some(came) => came,
            None => {
                let moment = if until == Phase::Draining {
                    CLOSE_IDLE
                } else {
                    Duration::ZERO
                };
                tokio::time::timeout(moment, &mut peek)
                    .await
                    .is_ok_and(|r| arrived(&r))
            }
        }
    };
    if !first_bytes {
        return;
    }
    let stream = tokio::select! {
        s = crate::tls::wrap(tls.as_deref(), stream, header_timeout) => match s {
            Some(s) => s,
            None => return,
        },
        _ = phase.wait_for(|p| *p >= until) => return,
    };
    let busy = Arc::new(AtomicUsize::new(0));
    let service = Counted {
        inner: service,
        busy: busy.clone(),
    };
    let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
    tokio::pin!(conn);
    let signalled = *phase.borrow() >= until;
    if signalled {
        // Signalled while the first bytes came: a moment for the request they begin to be
        // read, so that it counts as in flight below rather than the connection as idle.
        if tokio::time::timeout(CLOSE_IDLE, conn.as_mut())
            .await
            .is_ok()
        {
            return;
        }
    } else {
        tokio::select! {
            _ = conn.as_mut() => return,
            _ = phase.wait_for(|p| *p >= until) => {}
        }
    }
    if until == Phase::Closing {
        return;
    }
    // No keep-alive from here on. A connection with no request whose head has arrived
    // (idle, or half a head sent) gets only a moment to send what it holds.
    conn.as_mut().graceful_shutdown();
    if busy.load(Ordering::Acquire) == 0 {
        let _ = tokio::time::timeout(CLOSE_IDLE, conn.as_mut()).await;
        return;
    }
    tokio::select! {
        _ = conn.as_mut() => {}
        _ = phase.wait_for(|p| *p >= Phase::Closing) => {}
    }
}

/// The connection's service, counting its requests in flight in `busy`: from the moment
/// their head has arrived to the end of their answer's body.
#[derive(Clone)]
struct Counted<S> {
    inner: S,
    busy: Arc<AtomicUsize>,
}

/// One request in flight on a connection (see [`Counted`]).
struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    fn new(busy: &Arc<AtomicUsize>) -> InFlight {
        busy.fetch_add(1, Ordering::AcqRel);
        InFlight(busy.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

type Answer = axum::http::Response<axum::body::Body>;

impl<S, R> hyper::service::Service<R> for Counted<S>
where
    S: hyper::service::Service<R, Response = Answer>,
    S::Future: Send + 'static,
{
    type Response = Answer;
    type Error = S::Error;
    type Future =
        std::pin::Pin<Box<dyn Future<Output = Result<Answer, S::Error>> + Send + 'static>>;

    fn call(&self, req: R) -> Self::Future {
        let held = InFlight::new(&self.busy);
        let answer = self.inner.call(req);
        Box::pin(async move {
            let answer = answer.await?;
            Ok(answer.map(|body| axum::body::Body::new(Held { body, _held: held })))
        })
    }
}

/// An answer's body, holding its request's place in [`Counted::busy`] until it is sent.
struct Held {
    body: axum::body::Body,
    _held: InFlight,
}

impl http_body::Body for Held {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// File descriptors kept out of [`Connections::max`] beyond those open at start: for the
/// plugins' and handlers' files and outgoing connections, the log, and the listener's own
/// work.
pub const FD_RESERVE: usize = 64;

/// Raises the soft open-file limit to the hard one (logged), then returns `max` lowered, with
/// one warning, to the connections the limit leaves room for: the limit less the files open
/// now and [`FD_RESERVE`]. Where the limit can not be read, `max` as it is.
pub fn fit_to_fd_limit(max: usize) -> usize {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    let Some(mut soft) = limit.current else {
        return max;
    };
    if limit.maximum.is_none_or(|hard| hard > soft) {
        // As far as the hard limit goes, but no further than a million: some systems give
        // an unlimited hard limit that the kernel then refuses as a soft one.
        let wanted = limit.maximum.unwrap_or(u64::MAX).min(1 << 20);
        if wanted > soft
            && setrlimit(
                Resource::Nofile,
                Rlimit {
                    current: Some(wanted),
                    maximum: limit.maximum,
                },
            )
            .is_ok()
        {
            tracing::info!(
                from = soft,
                to = wanted,
                "raised the open-file limit (soft) to its hard limit for the connections"
            );
            soft = wanted;
        }
    }
    let open = open_files().unwrap_or(FD_RESERVE);
    let room = usize::try_from(soft)
        .unwrap_or(usize::MAX)
        .saturating_sub(open)
        .saturating_sub(FD_RESERVE)
        .max(1);
    if room < max {
        tracing::warn!(
            max_connections = max,
            fit = room,
            open_file_limit = soft,
            "max-connections lowered to {room}: the open-file limit is {soft}, {open} files \
             are open and {FD_RESERVE} are kept for plugins and logs; raise the limit \
             (`ulimit -n`, systemd LimitNOFILE) to allow more"
        );
        return room;
    }
    max
}

/// The first file descriptor a service manager passes sockets on (`SD_LISTEN_FDS_START`).
pub const LISTEN_FDS_START: i32 = 3;

/// The sockets passed to this process by a service manager, as systemd passes them
/// (`sd_listen_fds(3)`): `listen_fds` is `LISTEN_FDS` (how many, on descriptors
/// [`LISTEN_FDS_START`] onward) and `listen_pid` is `LISTEN_PID` (the process they are for).
/// They are for this process (`pid`) when `LISTEN_PID` names it; with `any_pid`
/// (`--listenfd`), whatever it says, and then some must be passed. 0 when none are for this
/// process; an error when the variables are malformed.
pub fn passed_sockets(
    listen_pid: Option<&std::ffi::OsStr>,
    listen_fds: Option<&std::ffi::OsStr>,
    pid: u32,
    any_pid: bool,
) -> Result<u32, String> {
    let number = |v: &std::ffi::OsStr, name: &str| {
        v.to_str()
            .and_then(|s| s.parse::<u32>().ok())
            .ok_or_else(|| format!("{name} is not a number: {v:?}"))
    };
    let ours = match listen_pid {
        _ if any_pid => true,
        Some(p) => number(p, "LISTEN_PID")? == pid,
        None => false,
    };
    let count = match listen_fds {
        Some(n) if ours => number(n, "LISTEN_FDS")?,
        _ => 0,
    };
    if any_pid && count == 0 {
        return Err("--listenfd: no socket was passed (LISTEN_FDS is unset or 0)".into());
    }
    // Descriptors past `i32::MAX` do not exist.
    if count > (i32::MAX - LISTEN_FDS_START) as u32 {
        return Err(format!("LISTEN_FDS is out of range: {count}"));
    }
    Ok(count)
}

/// Whether this process has descriptor `fd` open on a socket (`/proc/self/fd`), before it is
/// taken as one.
pub fn is_open_socket(fd: i32) -> bool {
    std::fs::read_link(format!("/proc/self/fd/{fd}")).is_ok_and(|target| {
        target
            .as_os_str()
            .as_encoded_bytes()
            .starts_with(b"socket:")
    })
}

/// The listener on a socket passed by a service manager: it must be a TCP socket (IPv4 or
/// IPv6) that listens already. It is made close-on-exec and non-blocking.
pub fn adopt(fd: std::os::fd::OwnedFd) -> std::io::Result<std::net::TcpListener> {
    use std::io::{Error, ErrorKind};
    let socket = socket2::Socket::from(fd);
    let stream = socket.r#type()? == socket2::Type::STREAM;
    let inet = matches!(
        socket.domain()?,
        socket2::Domain::IPV4 | socket2::Domain::IPV6
    );
    if !stream || !inet {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            "the passed socket is not a TCP socket (IPv4 or IPv6)",
        ));
    }
    if !socket.is_listener()? {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            "the passed socket does not listen (systemd: `ListenStream=` in a .socket unit)",
        ));
    }
    socket.set_cloexec(true)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

/// The files this process has open (`/proc/self/fd`), where that can be read.
fn open_files() -> Option<usize> {
    Some(std::fs::read_dir("/proc/self/fd").ok()?.count())
}

/// At most one log line a second: counts the lines left out in between.
#[derive(Default)]
struct Throttled {
    last: Option<Instant>,
    unlogged: u64,
}

impl Throttled {
    /// `Some(lines left out since the last one)` when a line may be logged at `now`.
    fn admit(&mut self, now: Instant) -> Option<u64> {
        if self
            .last
            .is_some_and(|l| now.saturating_duration_since(l) < Duration::from_secs(1))
        {
            self.unlogged = self.unlogged.saturating_add(1);
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.unlogged))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passed_sockets_are_taken_only_when_meant_for_this_process() {
        use std::ffi::OsStr;
        let os = |s: &'static str| Some(OsStr::new(s));
        assert_eq!(passed_sockets(None, None, 7, false), Ok(0));
        assert_eq!(passed_sockets(os("7"), os("1"), 7, false), Ok(1));
        assert_eq!(passed_sockets(os("7"), os("2"), 7, false), Ok(2));
        // For another process (a parent that did not unset them), or no pid: not ours.
        assert_eq!(passed_sockets(os("8"), os("1"), 7, false), Ok(0));
        assert_eq!(passed_sockets(None, os("1"), 7, false), Ok(0));
        // `--listenfd` takes them whatever LISTEN_PID says, and needs some.
        assert_eq!(passed_sockets(os("8"), os("1"), 7, true), Ok(1));
        assert_eq!(passed_sockets(None, os("1"), 7, true), Ok(1));
        assert!(passed_sockets(None, None, 7, true).is_err());
        assert!(passed_sockets(os("7"), os("0"), 7, true).is_err());
        // Malformed values are errors, not guesses.
        assert!(passed_sockets(os("x"), os("1"), 7, false).is_err());
        assert!(passed_sockets(os("7"), os("-1"), 7, false).is_err());
        assert!(passed_sockets(os("7"), os("4294967295"), 7, false).is_err());
    }

    #[test]
    fn accept_errors_are_logged_once_a_second_with_a_count() {
        let mut t = Throttled::default();
        let t0 = Instant::now();
        assert_eq!(t.admit(t0), Some(0));
        for k in 1..20 {
            assert_eq!(t.admit(t0 + Duration::from_millis(50 * k)), None);
        }
        assert_eq!(t.admit(t0 + Duration::from_millis(1000)), Some(19));
        assert_eq!(t.admit(t0 + Duration::from_millis(1100)), None);
    }
}
