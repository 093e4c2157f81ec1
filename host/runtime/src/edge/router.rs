//! The routes at run time, and how a request finds its own: the longest prefix that
//! matches its path, the path below that prefix, and one authority for the whole chain.

use super::pool::JobQueue;
use super::reactor::OnReactor;
use crate::config::Route;
use crate::deploy::Plugin;
use crate::metrics::RouteMeters;
use crate::wasi_http::HttpHandler;
use axum::http::HeaderValue;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

pub(super) struct RouteRt {
    pub(super) route: Route,
    /// The chain's plugins (without a `wasi:http` handler that ends it).
    pub(super) plugins: Vec<Arc<Plugin>>,
    /// The `wasi:http` handler at the end of the chain, if it has one.
    pub(super) handler: Option<Arc<HttpHandler>>,
    /// The plugins that take no body (`body = "none"`), bit `slot` each: they get an empty
    /// one and may not pass one on.
    pub(super) bodyless: u32,
    pub(super) queue: Arc<JobQueue>,
    /// The route's metrics, and each plugin's call counter (in chain order).
    pub(super) meters: RouteMeters,
    pub(super) calls: Vec<crate::metrics::sharded::Counter>,
    pub(super) workers: Mutex<Vec<JoinHandle<()>>>,
    /// The route's requests on the reactor's threads.
    pub(super) reactor: OnReactor,
    /// Requests admitted and not yet answered (bounded by the route's `max_in_flight`).
    pub(super) admitted: AtomicUsize,
    /// Requests a seat is serving now (on the reactor or a worker).
    pub(super) running: AtomicUsize,
}

impl RouteRt {
    /// Whether a plugin takes the body, which is then read whole before the chain runs.
    /// Otherwise it streams to the handler, if there is one, and is not read if not.
    pub(super) fn reads_body(&self) -> bool {
        (self.bodyless.count_ones() as usize) < self.plugins.len()
    }
}

pub(super) fn matches(prefix: &str, path: &str) -> bool {
    prefix == "/"
        || path
            .strip_prefix(prefix.trim_end_matches('/'))
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/') || rest.starts_with('?'))
}

/// `path` below the route's prefix, always starting with `/`.
pub(super) fn strip<'a>(prefix: &str, path: &'a str) -> std::borrow::Cow<'a, str> {
    let rest = path
        .strip_prefix(prefix.trim_end_matches('/'))
        .unwrap_or(path);
    if rest.starts_with('/') {
        rest.into()
    } else {
        format!("/{rest}").into()
    }
}

/// Gives the request one authority that every plugin and the handler see alike: its `host`
/// line. The target's own authority (HTTP/2's `:authority`, or an HTTP/1.1 absolute-form
/// target) takes the place of any `host` line, as RFC 9112 §3.2.2 asks; otherwise plugins
/// would check one authority while the handler used another. Two `host` lines are a bad
/// request (RFC 9112 §3.2). The error says why the request is refused.
pub(super) fn one_authority(parts: &mut axum::http::request::Parts) -> Result<(), &'static str> {
    use axum::http::header::HOST;
    if let Some(authority) = parts.uri.authority() {
        match HeaderValue::from_str(authority.as_str()) {
            Ok(v) => {
                parts.headers.insert(HOST, v);
            }
            Err(_) => return Err("a malformed authority\n"),
        }
    } else if parts.headers.get_all(HOST).iter().nth(1).is_some() {
        return Err("more than one host header\n");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{matches, strip};

    #[test]
    fn prefixes() {
        assert!(matches("/api", "/api"));
        assert!(matches("/api", "/api/x"));
        assert!(matches("/api/", "/api/x"));
        assert!(!matches("/api", "/apix"));
        assert!(matches("/", "/anything"));
        assert_eq!(strip("/api", "/api/x?y"), "/x?y");
        assert_eq!(strip("/api", "/api"), "/");
        assert_eq!(strip("/", "/x"), "/x");
    }
}
