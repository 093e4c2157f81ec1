//! The answers: the HTTP response that carries a chain's reply (none of a body to `HEAD`),
//! a streamed reply collected whole, and the fixed answers (no route, shutting down).

use crate::http::{Answer, Reply};
use axum::body::Body;
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::Response;

/// The answer to a request the server stops or refuses while it shuts down.
pub(super) fn shutting_down() -> Answer {
    Answer::text(503, "shutting down\n".into())
}

/// The answer to a path no route serves.
pub(super) fn no_route(path: &str) -> Answer {
    Answer::text(404, format!("no route for {path}\n"))
}

/// The response that carries `reply`. To a `HEAD` request (RFC 9110) it has no body: the
/// headers the handler set pass, and no length is made up from a body that is not sent.
pub(super) fn response(reply: Reply, head: bool) -> Response {
    let mut resp = match reply {
        Reply::Streamed(r) => r,
        Reply::Whole(a) => {
            let mut resp = Response::new(Body::from(a.body));
            *resp.status_mut() = StatusCode::from_u16(a.status).unwrap_or(StatusCode::BAD_GATEWAY);
            for (n, v) in a.headers {
                if let (Ok(n), Ok(v)) = (HeaderName::try_from(n), HeaderValue::try_from(v)) {
                    resp.headers_mut().append(n, v);
                }
            }
            resp
        }
    };
    if head {
        let body = std::mem::replace(resp.body_mut(), Body::new(Headless));
        // A handler writes its body as for `GET`: it is read and dropped, so that its writes
        // do not fail (a streamed body ends by the handler's deadline).
        tokio::spawn(async move {
            use http_body_util::BodyExt as _;
            let mut body = body;
            while let Some(Ok(_)) = body.frame().await {}
        });
    }
    resp
}

/// The body of a response to `HEAD`: none, and of no stated length.
struct Headless;

impl axum::body::HttpBody for Headless {
    type Data = axum::body::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        std::task::Poll::Ready(None)
    }
}

/// `reply` as a whole answer: a streamed body is collected, up to `max` bytes.
pub(super) async fn whole(reply: Reply, max: usize) -> Answer {
    use http_body_util::BodyExt as _;
    let r = match reply {
        Reply::Whole(a) => return a,
        Reply::Streamed(r) => r,
    };
    let (parts, body) = r.into_parts();
    match http_body_util::Limited::new(body, max).collect().await {
        Ok(b) => Answer {
            status: parts.status.as_u16(),
            headers: parts
                .headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.as_bytes().to_vec()))
                .collect(),
            body: b.to_bytes().to_vec(),
        },
        Err(e) => Answer::text(502, format!("the handler's response body failed: {e}\n")),
    }
}
