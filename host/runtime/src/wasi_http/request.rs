//! The request a handler gets: the chain's request as an HTTP request, and a body that
//! streams from the client within the route's cap and the body clock.

use super::is_framing;
use crate::body_rate::BodyClock;
use crate::http::{Answer, Incoming};
use axum::body::Bytes;
use axum::http::{HeaderName, HeaderValue, Method, Request, Uri};
use http_body_util::{BodyExt as _, Full};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use wasmtime_wasi_http::Error as HttpError;

/// A request body streaming from the client to a handler with no plugins before it: at
/// most `max` bytes (past that, reads fail), as fast as its [`BodyClock`] asks (each piece
/// within `body-timeout`, at least the minimum rate after a grace; else reads fail, and the
/// request is answered 408 if its head has not gone out, and its connection closes).
pub struct RequestBody {
    inner: axum::body::Body,
    max: usize,
    seen: usize,
    clock: BodyClock,
    /// What went wrong with the body, for the answer.
    state: Arc<BodyState>,
    /// The request's header lines as they came, for a handler no plugin comes before.
    headers: Option<axum::http::HeaderMap>,
    /// The client's framing lines (`content-length`, `transfer-encoding`): they describe
    /// this body, whatever the plugins passed on.
    framing: Vec<(HeaderName, HeaderValue)>,
}

/// What went wrong with a streamed request body, as the handler's caller sees it.
#[derive(Default, Debug)]
pub struct BodyState {
    /// The body went past the route's `max-body`.
    over: AtomicBool,
    /// The body came too late (stalled, or below the minimum rate).
    late: AtomicBool,
}

impl BodyState {
    /// Whether the body came too late: its connection is to close.
    pub fn late(&self) -> bool {
        self.late.load(Ordering::Acquire)
    }

    /// The answer the client gets instead of the handler's failure, if the body caused it.
    pub(super) fn refusal(&self) -> Option<Answer> {
        if self.over.load(Ordering::Acquire) {
            Some(Answer::text(413, "request body too large\n".into()))
        } else if self.late() {
            Some(Answer::text(408, "request body too late\n".into()))
        } else {
            None
        }
    }
}

impl RequestBody {
    /// `body`, capped at `max` bytes, read as fast as `clock` asks.
    pub fn new(body: axum::body::Body, max: usize, clock: BodyClock) -> RequestBody {
        RequestBody {
            inner: body,
            max,
            seen: 0,
            clock,
            state: Arc::default(),
            headers: None,
            framing: Vec::new(),
        }
    }

    /// Notes the framing lines among the client's `headers`, which the handler gets with
    /// this body in place of any the plugins passed on.
    pub fn with_framing_of(mut self, headers: &axum::http::HeaderMap) -> RequestBody {
        self.framing = headers
            .iter()
            .filter(|(n, _)| is_framing(n.as_str()))
            .map(|(n, v)| (n.clone(), v.clone()))
            .collect();
        self
    }

    /// Gives the handler `headers` (the request's header lines as they came: values as
    /// bytes, also those that are not UTF-8) instead of those the chain passed on as text.
    pub fn with_headers(mut self, headers: axum::http::HeaderMap) -> RequestBody {
        self.headers = Some(headers);
        self
    }

    /// What goes wrong with the body, shared.
    pub fn state(&self) -> Arc<BodyState> {
        self.state.clone()
    }
}

impl http_body::Body for RequestBody {
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, HttpError>>> {
        use std::task::Poll;
        let this = &mut *self;
        if this.state.over.load(Ordering::Relaxed) {
            return Poll::Ready(Some(Err(HttpError::HttpRequestBodySize(Some(
                this.seen as u64,
            )))));
        }
        if this.state.late() {
            return Poll::Ready(Some(Err(HttpError::ConnectionReadTimeout)));
        }
        match std::pin::Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(d) = frame.data_ref() {
                    this.clock.arrived(d.len());
                    this.seen = this.seen.saturating_add(d.len());
                    if this.seen > this.max {
                        this.state.over.store(true, Ordering::Release);
                        return Poll::Ready(Some(Err(HttpError::HttpRequestBodySize(Some(
                            this.seen as u64,
                        )))));
                    }
                } else {
                    this.clock.arrived(0);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            // Malformed framing, or a connection that broke.
            Poll::Ready(Some(Err(_))) => Poll::Ready(Some(Err(HttpError::ConnectionTerminated))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => match this.clock.poll_late(cx) {
                Poll::Ready(late) => {
                    tracing::debug!(?late, "a streamed request body came too late");
                    this.state.late.store(true, Ordering::Release);
                    Poll::Ready(Some(Err(HttpError::ConnectionReadTimeout)))
                }
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// A request as a handler gets it.
type HandlerRequest =
    Request<http_body_util::combinators::UnsyncBoxBody<Bytes, wasmtime_wasi_http::Error>>;

/// The request as the chain left it, as an HTTP request (method, path and headers checked,
/// then the lines the plugins could not see), with `body` instead of its own when the body
/// streams, and the header lines as they came instead of its own when `body` has them; and
/// what goes wrong with the streamed body.
pub(super) fn hyper_request(
    req: Incoming,
    mut body: Option<RequestBody>,
) -> Result<(HandlerRequest, Option<Arc<BodyState>>), String> {
    let over = body.as_ref().map(RequestBody::state);
    let raw = body.as_mut().and_then(|b| b.headers.take());
    let method = Method::from_bytes(req.method.as_bytes()).map_err(|e| e.to_string())?;
    let host = match &raw {
        Some(h) => h
            .get(axum::http::header::HOST)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("localhost"),
        None => req
            .headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case("host"))
            .and_then(|(_, v)| std::str::from_utf8(v).ok())
            .unwrap_or("localhost"),
    };
    let path = if req.path.starts_with('/') {
        req.path.clone()
    } else {
        format!("/{}", req.path)
    };
    let uri = Uri::builder()
        .scheme("http")
        .authority(host)
        .path_and_query(path.as_str())
        .build()
        .or_else(|_| {
            Uri::builder()
                .scheme("http")
                .authority("localhost")
                .path_and_query(path.as_str())
                .build()
        })
        .map_err(|e| format!("path `{path}`: {e}"))?;
    let mut b = Request::builder().method(method).uri(uri);
    match raw {
        Some(h) => {
            if let Some(m) = b.headers_mut() {
                *m = h;
            }
        }
        None => {
            // The plugins' lines, but the framing: that belongs to the body the handler
            // gets, not to what a plugin says of it (a plugin that rewrote a body or a
            // `content-length` would otherwise give the handler a length its body does
            // not have).
            for (n, v) in &req.headers {
                if is_framing(n) {
                    continue;
                }
                let name =
                    HeaderName::from_bytes(n.as_bytes()).map_err(|e| format!("`{n}`: {e}"))?;
                // Exactly the bytes the last plugin passed on.
                let value = HeaderValue::from_bytes(v).map_err(|e| format!("`{n}`: {e}"))?;
                b = b.header(name, value);
            }
            match &body {
                Some(streamed) => {
                    for (n, v) in &streamed.framing {
                        b = b.header(n, v);
                    }
                }
                None if !req.body.is_empty() || req.headers.iter().any(|(n, _)| is_framing(n)) => {
                    b = b.header(axum::http::header::CONTENT_LENGTH, req.body.len());
                }
                None => {}
            }
        }
    }
    let body = match body {
        Some(b) => b.boxed_unsync(),
        None => Full::new(Bytes::from(req.body))
            .map_err(|never| match never {})
            .boxed_unsync(),
    };
    Ok((b.body(body).map_err(|e| e.to_string())?, over))
}
