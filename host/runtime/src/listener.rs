//! The HTTP listener of `lrpc serve`: it accepts connections within their budgets and hands
//! each request to a router (the edge server's).
//!
//! Every connection has a budget, so that clients that stall can not hold the server:
//! - at most [`Connections::max`] are open at once; further clients wait in the kernel's
//!   accept queue until one closes;
//! - a request's head must arrive within [`Connections::header_timeout`]. hyper counts the
//!   wait of an idle keep-alive connection for its next request as a head wait too, so the
//!   same budget closes idle connections;
//! - a request body must keep arriving (the edge's handler reads it with
//!   [`Connections::body_timeout`] between pieces);
//! - on shutdown, idle connections close at once and requests in flight get
//!   [`Connections::shutdown_grace`] to finish.
//!
//! HTTP/1.1 and HTTP/2 (with prior knowledge) are served on the same port; with TLS (see
//! [`crate::tls`]) every connection is TLS, the handshake within the header timeout, and
//! ALPN picks the protocol.

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

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
}

impl Default for Connections {
    fn default() -> Connections {
        Connections {
            max: 1024,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(10),
            shutdown_grace: Duration::from_secs(10),
        }
    }
}

/// Serves `router` on `listener` until `shutdown` completes, then closes idle connections,
/// lets requests in flight finish for at most the grace period, and returns.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    budget: Connections,
    tls: Option<Arc<crate::tls::Tls>>,
    shutdown: impl Future<Output = ()>,
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
    let slots = Arc::new(Semaphore::new(budget.max.max(1)));
    let graceful = GracefulShutdown::new();
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
                    // wait a moment rather than spin.
                    tracing::warn!("accepting a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let (builder, service, watcher) = (builder.clone(), service.clone(), graceful.watcher());
        let tls = tls.clone();
        let header_timeout = budget.header_timeout;
        tokio::spawn(async move {
            // hyper reads the first bytes to tell HTTP/1 from HTTP/2 before its head timer
            // runs: a client that sends nothing at all is closed here.
            let mut first = [0u8; 1];
            match tokio::time::timeout(header_timeout, stream.peek(&mut first)).await {
                Ok(Ok(n)) if n > 0 => {}
                _ => return,
            }
            let Some(stream) = crate::tls::wrap(tls.as_deref(), stream, header_timeout).await
            else {
                return;
            };
            let conn = builder
                .serve_connection_with_upgrades(TokioIo::new(stream), service)
                .into_owned();
            let _ = watcher.watch(conn).await;
            drop(permit);
        });
    }
    drop(listener);
    if tokio::time::timeout(budget.shutdown_grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            grace_ms = budget.shutdown_grace.as_millis() as u64,
            "connections still busy after the grace period were closed"
        );
    }
}
