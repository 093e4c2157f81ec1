//! A handler's outgoing HTTP: the hooks that send its requests to the origins it is
//! granted, within the deadline of the call that makes them, and the response body that
//! fails past that deadline.

use crate::config::HttpOrigin;
use crate::metrics::OutgoingMeters;
use axum::body::Bytes;
use http_body_util::BodyExt as _;
use std::sync::Arc;
use std::time::Instant;
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody, WasiHttpHooks};

/// `wasi:http` hooks that send a handler's outgoing requests to the origins it is granted,
/// within the deadline of the call that makes them, and deny the rest.
pub(super) struct Outgoing {
    pub(super) origins: Arc<[HttpOrigin]>,
    pub(super) meters: OutgoingMeters,
    /// The running call's deadline, copied from [`HttpState`] by its view.
    pub(super) deadline: Option<Instant>,
}

/// What a sent request's response resolves to (the response, and the connection's driver).
type SendResult = wasmtime_wasi_http::Result<(
    axum::http::Response<WasiBody>,
    Box<dyn Future<Output = Result<(), HttpError>> + Send>,
)>;

/// Writes a body's stream buffers before the guest waits for them to be taken: a response
/// body of up to this many writes is whole by the time its handler returns (see
/// [`Outparam`]). Each write is at most [`BODY_CHUNK`] bytes.
const BODY_WRITES: usize = 32;

/// The most bytes one write to a body's stream may take (what `check-write` grants).
const BODY_CHUNK: usize = 64 << 10;

impl WasiHttpHooks for Outgoing {
    fn p2_outgoing_body_buffer_chunks(&mut self) -> usize {
        // The channel holds one write more than this.
        BODY_WRITES - 1
    }

    fn p2_outgoing_body_chunk_size(&mut self) -> usize {
        BODY_CHUNK
    }

    fn send_request(
        &mut self,
        request: axum::http::Request<WasiBody>,
        options: Option<RequestOptions>,
        _fut: Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ) -> Box<dyn Future<Output = SendResult> + Send> {
        if !self.origins.iter().any(|o| o.matches(request.uri())) {
            self.meters.denied.inc();
            tracing::debug!(uri = %request.uri(), "outgoing request denied");
            return Box::new(async { Err(HttpError::HttpRequestDenied) });
        }
        let meters = self.meters.clone();
        let deadline = self.deadline;
        // With trace export on: a span for the request, the child of the span current here
        // (the handler's, for a WASI 0.2 handler), whose `traceparent` the request carries.
        let mut request = request;
        let span = if crate::telemetry::on() {
            let span = tracing::debug_span!(
                "outgoing",
                otel.kind = "client",
                method = %request.method(),
                url = %request.uri(),
                status = tracing::field::Empty,
            );
            carry(&span, request.headers_mut());
            span
        } else {
            tracing::Span::none()
        };
        let traced = span.clone();
        // Counted as failed unless it resolves: the handler may be stopped by its deadline
        // (and this future dropped) before the timeout below fires.
        let mut unresolved = Unresolved(Some(meters.clone()));
        let sent = async move {
            let deadline = deadline.map(tokio::time::Instant::from_std);
            let options = within(options, deadline);
            let send = wasmtime_wasi_http::default_send_request(request, Some(options));
            // Each timeout is at most the time left; together they could add up past it.
            let sent = match deadline {
                Some(d) => tokio::time::timeout_at(d, send)
                    .await
                    .unwrap_or(Err(HttpError::HttpResponseTimeout)),
                None => send.await,
            };
            unresolved.resolved();
            let (response, io) = match sent {
                Ok(s) => s,
                Err(e) => {
                    meters.failed.inc();
                    traced.record("status", tracing::field::debug(&e));
                    return Err(e);
                }
            };
            meters.sent.inc();
            traced.record("status", response.status().as_u16());
            let response = response.map(|b| {
                DeadlineBody {
                    inner: b.boxed_unsync(),
                    deadline: deadline.map(|d| Box::pin(tokio::time::sleep_until(d))),
                }
                .boxed_unsync()
            });
            // The connection is closed at the deadline too (its body fails then).
            let io = async move {
                match deadline {
                    Some(d) => tokio::time::timeout_at(d, io).await.unwrap_or(Ok(())),
                    None => io.await,
                }
            };
            Ok((response, Box::new(io) as Box<dyn Future<Output = _> + Send>))
        };
        Box::new(tracing::Instrument::instrument(sent, span))
    }
}

/// An outgoing request not yet answered: counted as failed if dropped so.
struct Unresolved(Option<OutgoingMeters>);

impl Unresolved {
    /// The request resolved: whoever has it counts it.
    fn resolved(&mut self) {
        self.0 = None;
    }
}

impl Drop for Unresolved {
    fn drop(&mut self) {
        if let Some(meters) = self.0.take() {
            meters.failed.inc();
        }
    }
}

/// Puts `span`'s `traceparent` (and `tracestate`) on an outgoing request's headers, in
/// place of the ones the guest set.
fn carry(span: &tracing::Span, headers: &mut axum::http::HeaderMap) {
    use axum::http::HeaderValue;
    let Some((parent, state)) = crate::telemetry::context_of(span) else {
        return;
    };
    if let Ok(v) = HeaderValue::from_str(&parent) {
        headers.insert(crate::telemetry::TRACEPARENT, v);
    }
    if let Ok(v) = HeaderValue::from_str(&state)
        && !state.is_empty()
    {
        headers.insert(crate::telemetry::TRACESTATE, v);
    }
}

/// `options` with each timeout at most the time left until `deadline`.
fn within(
    options: Option<RequestOptions>,
    deadline: Option<tokio::time::Instant>,
) -> RequestOptions {
    let mut o = options.unwrap_or_default();
    if let Some(d) = deadline {
        let left = d.saturating_duration_since(tokio::time::Instant::now());
        for t in [
            &mut o.connect_timeout,
            &mut o.first_byte_timeout,
            &mut o.between_bytes_timeout,
        ] {
            *t = Some(t.map_or(left, |t| t.min(left)));
        }
    }
    o
}

/// A response body that fails with `HttpResponseTimeout` once its deadline has passed.
struct DeadlineBody {
    inner: WasiBody,
    deadline: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
}

impl http_body::Body for DeadlineBody {
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, HttpError>>> {
        // A finished sleep stays ready: every poll past the deadline fails.
        if let Some(d) = self.deadline.as_mut()
            && d.as_mut().poll(cx).is_ready()
        {
            return std::task::Poll::Ready(Some(Err(HttpError::HttpResponseTimeout)));
        }
        std::pin::Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}
