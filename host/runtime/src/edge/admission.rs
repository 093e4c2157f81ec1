//! A request's way in: one authority, the route's cap on requests in flight, its body
//! (read whole for the plugins, or streamed to a handler) and header values the plugins can
//! read; then [`Edge::dispatch_on`] runs it. Its access line is written when its answer's
//! head is ready (see [`super::access`]). A connection accepted after the shutdown signal
//! ([`AcceptedWhileDraining`]) gets 503.

use super::Edge;
use super::RouteRt;
use super::access;
use super::body::{closing, read_body, too_large};
use super::response::{no_route, response, shutting_down};
use super::router::one_authority;
use crate::body_rate::BodyClock;
use crate::listener::AcceptedWhileDraining;
use crate::wasi_http::RequestBody;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

impl RouteRt {
    /// Admits one more request if the route has room for it.
    fn admit(&self) -> Option<Admitted<'_>> {
        if self.admitted.fetch_add(1, Ordering::AcqRel) >= self.route.max_in_flight {
            self.admitted.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Admitted(&self.admitted))
    }
}

/// A request admitted to a route; gives its place back when dropped.
struct Admitted<'a>(&'a AtomicUsize);

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One request in flight on a route, for the in-flight gauge.
pub(super) struct InFlight<'a>(&'a crate::metrics::RouteMeters);

impl<'a> InFlight<'a> {
    pub(super) fn new(meters: &'a crate::metrics::RouteMeters) -> Self {
        meters.in_flight(1);
        InFlight(meters)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight(-1);
    }
}

/// What the access log's line takes from the way a request was answered.
#[derive(Default)]
struct Seen<'e> {
    /// The prefix of the route that matched.
    route: Option<&'e str>,
    /// The request body's bytes: read whole, or as its `content-length` says.
    request_bytes: Option<u64>,
}

/// Answers a request to the routes, and writes its access line (see [`super::access`]).
pub(super) async fn handle(State(edge): State<Edge>, req: Request) -> Response {
    let start = Instant::now();
    let (mut parts, body) = req.into_parts();
    if !access::on() {
        return answer(&edge, &mut parts, body, start, &mut Seen::default()).await;
    }
    let trace = access::TraceId::of(&parts.headers);
    let mut seen = Seen::default();
    let resp = answer(&edge, &mut parts, body, start, &mut seen).await;
    access::log(&access::Line {
        method: parts.method.as_str(),
        route: seen.route,
        path: parts.uri.path(),
        status: resp.status().as_u16(),
        took: start.elapsed(),
        request_bytes: seen.request_bytes,
        response_bytes: axum::body::HttpBody::size_hint(resp.body()).exact(),
        trace,
    });
    resp
}

async fn answer<'e>(
    edge: &'e Edge,
    parts: &mut axum::http::request::Parts,
    body: axum::body::Body,
    start: Instant,
    seen: &mut Seen<'e>,
) -> Response {
    if let Err(why) = one_authority(parts) {
        return (StatusCode::BAD_REQUEST, why).into_response();
    }
    let config = &edge.inner.deployment.config;
    let metrics = &edge.inner.deployment.metrics;
    let path = parts
        .uri
        .path_and_query()
        .map_or_else(|| parts.uri.path(), |p| p.as_str());
    // The route's own caps, before its body is read: a route's large bodies or many
    // requests can not take what the plugins it shares with other routes need. Their
    // refusals are counted as the chain's answers are.
    let route = edge.route_for(path);
    seen.route = route.map(|r| r.route.prefix.as_str());
    seen.request_bytes = parts
        .headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| std::str::from_utf8(v.as_bytes()).ok()?.parse().ok());
    let refused = |r: Response| {
        if let Some(route) = route {
            route
                .meters
                .answered(metrics, r.status().as_u16(), start.elapsed());
        }
        r
    };
    // A connection that came after the shutdown signal gets the probes (routed before
    // this) and nothing else.
    if parts.extensions.get::<AcceptedWhileDraining>().is_some() {
        let r = closing(response(shutting_down().into(), false), parts.version);
        if route.is_none() {
            metrics.unrouted(503);
        }
        return refused(r);
    }
    let _admitted = match route.map(|r| r.admit()) {
        Some(None) => {
            return refused(
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the route is at its limit of requests\n",
                )
                    .into_response(),
            );
        }
        Some(Some(a)) => Some(a),
        None => None,
    };
    let max_body = route.map_or(config.max_body, |r| r.route.max_body);
    let clock = || {
        BodyClock::new(
            config.connections.body_timeout,
            config.connections.min_body_rate,
        )
    };
    // Plugins that take the body get it whole. Otherwise a handler reads it as it arrives
    // (after the plugins, which get none); with no handler, nothing reads it.
    let (body, stream) = match route {
        Some(r) if !r.reads_body() => {
            if axum::body::HttpBody::size_hint(&body).lower() > max_body as u64 {
                return refused(too_large());
            }
            let stream = r.handler.is_some().then(|| {
                let stream = RequestBody::new(body, max_body, clock());
                // A handler no plugin comes before gets the header lines as they came,
                // values as bytes; after plugins, it gets the client's framing with the
                // body the client sends.
                if r.plugins.is_empty() {
                    stream.with_headers(std::mem::take(&mut parts.headers))
                } else {
                    stream.with_framing_of(&parts.headers)
                }
            });
            (Vec::new(), stream)
        }
        _ => match read_body(body, max_body, clock()).await {
            Ok(b) => {
                seen.request_bytes = Some(b.len() as u64);
                (b, None)
            }
            Err(answer) if answer.status() == StatusCode::REQUEST_TIMEOUT => {
                return refused(closing(answer, parts.version));
            }
            Err(answer) => return refused(answer),
        },
    };
    // A streamed body that came too late: the connection closes after the answer.
    let late = stream.as_ref().map(RequestBody::state);
    // Header values go to the plugins as bytes. A plugin of `lrpc:http/plugin` takes them as
    // WIT strings, so a value that is not UTF-8 can not reach it; and nothing may pass
    // around a plugin (one that strips or checks a header would be bypassed by the same
    // header with a byte above 0x7F), so a route with such a plugin refuses the request
    // before any plugin runs. (A handler alone took them all above, as bytes.)
    let strict = route.is_some_and(|r| r.plugins.iter().any(|p| p.speaks_strings()));
    let mut headers: Vec<(&str, &[u8])> = Vec::with_capacity(parts.headers.len());
    for (n, v) in &parts.headers {
        if strict && std::str::from_utf8(v.as_bytes()).is_err() {
            return refused(
                (
                    StatusCode::BAD_REQUEST,
                    format!(
                        "the value of header `{n}` is not UTF-8, which the plugins can not read\n"
                    ),
                )
                    .into_response(),
            );
        }
        headers.push((n.as_str(), v.as_bytes()));
    }

    let reply = match route {
        Some(route) => {
            edge.dispatch_on(route, parts.method.as_str(), path, &headers, &body, stream)
                .await
        }
        None => {
            metrics.unrouted(404);
            no_route(path).into()
        }
    };
    let resp = response(reply, parts.method == axum::http::Method::HEAD);
    if late.is_some_and(|l| l.late()) {
        return closing(resp, parts.version);
    }
    resp
}
