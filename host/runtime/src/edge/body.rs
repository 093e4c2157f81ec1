//! A request body read whole for the plugins: the route's cap, the body clock's deadlines,
//! and the answers when a body is too large, malformed or late.

use crate::body_rate::{BodyClock, Late};
use axum::body::Body;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

/// The answer to a request body over the route's cap.
pub(super) fn too_large() -> Response {
    (StatusCode::PAYLOAD_TOO_LARGE, "request body too large\n").into_response()
}

/// Reads a request body of at most `max` bytes, as fast as `clock` asks (each piece within
/// `body-timeout` of the one before, and at least the minimum rate after its grace); the
/// answer to give instead when it can not.
pub(super) async fn read_body(
    body: Body,
    max: usize,
    clock: BodyClock,
) -> Result<Vec<u8>, Response> {
    use axum::body::HttpBody as _;
    let mut body = body;
    let mut clock = clock;
    let hint = axum::body::HttpBody::size_hint(&body);
    if hint.lower() > max as u64 {
        return Err(too_large());
    }
    let mut out = Vec::with_capacity(hint.upper().map_or(0, |n| n.min(max as u64) as usize));
    loop {
        let next = std::future::poll_fn(|cx| match std::pin::Pin::new(&mut body).poll_frame(cx) {
            std::task::Poll::Ready(f) => std::task::Poll::Ready(Ok(f)),
            std::task::Poll::Pending => clock.poll_late(cx).map(Err),
        })
        .await;
        match next {
            Err(late) => return Err(late_body(late)),
            Ok(None) => return Ok(out),
            // Malformed framing (a bad chunk size, a missing CRLF) or a connection that broke.
            Ok(Some(Err(_))) => {
                return Err((StatusCode::BAD_REQUEST, "malformed request body\n").into_response());
            }
            Ok(Some(Ok(frame))) => {
                if let Ok(data) = frame.into_data() {
                    clock.arrived(data.len());
                    if out.len() + data.len() > max {
                        return Err(too_large());
                    }
                    out.extend_from_slice(&data);
                }
            }
        }
    }
}

/// The answer to a body that came too late: 408 (the caller closes the connection: the rest
/// of the body is not waited for).
fn late_body(late: Late) -> Response {
    (StatusCode::REQUEST_TIMEOUT, late.reason()).into_response()
}

/// `resp` with `connection: close` on HTTP/1 (HTTP/2 has no such header: there the stream
/// ends, as its body was dropped).
pub(super) fn closing(mut resp: Response, version: axum::http::Version) -> Response {
    if version <= axum::http::Version::HTTP_11 {
        resp.headers_mut().insert(
            axum::http::header::CONNECTION,
            HeaderValue::from_static("close"),
        );
    } else {
        resp.headers_mut().remove(axum::http::header::CONNECTION);
    }
    resp
}
