//! A `wasi:http/incoming-handler` component that forwards each request (method and body) to
//! the URL in its `x-target` header with `wasi:http/outgoing-handler`, for the edge's tests
//! of outgoing HTTP.
//!
//! It answers with the backend's status and body. When the request fails, it answers with
//! the error code's name as the body: 403 for `HttpRequestDenied`, 504 for a timeout, 502
//! for any other code, and 400 when `x-target` is missing or not a URL.

use wasip2::http::outgoing_handler;
use wasip2::http::types::{
    ErrorCode, Fields, IncomingBody, IncomingRequest, InputStream, OutgoingBody, OutgoingRequest,
    OutgoingResponse, ResponseOutparam, Scheme,
};
use wasip2::io::streams::StreamError;

struct Proxy;

impl wasip2::exports::http::incoming_handler::Guest for Proxy {
    fn handle(request: IncomingRequest, out: ResponseOutparam) {
        let (status, body) = match forward(&request) {
            Ok(answer) => answer,
            Err(Failure::BadTarget(why)) => (400, format!("{why}\n").into_bytes()),
            Err(Failure::Code(code)) => {
                let name = format!("{code:?}");
                let name = name.trim_start_matches("ErrorCode::");
                (status_of(&code), format!("{name}\n").into_bytes())
            }
        };
        answer(out, status, &body);
    }
}

/// Why a request was not forwarded.
enum Failure {
    /// `x-target` is missing or not a URL.
    BadTarget(String),
    /// The host or the backend failed the request.
    Code(ErrorCode),
}

impl From<ErrorCode> for Failure {
    fn from(code: ErrorCode) -> Self {
        Failure::Code(code)
    }
}

/// The status answered for a failed request.
fn status_of(code: &ErrorCode) -> u16 {
    match code {
        ErrorCode::HttpRequestDenied => 403,
        ErrorCode::ConnectionTimeout
        | ErrorCode::ConnectionReadTimeout
        | ErrorCode::ConnectionWriteTimeout
        | ErrorCode::HttpResponseTimeout => 504,
        _ => 502,
    }
}

/// Sends `request` on to its `x-target`; the backend's status and body.
fn forward(request: &IncomingRequest) -> Result<(u16, Vec<u8>), Failure> {
    let target = request
        .headers()
        .get("x-target")
        .into_iter()
        .next()
        .map(|v| String::from_utf8_lossy(&v).into_owned())
        .ok_or_else(|| Failure::BadTarget("no x-target header".into()))?;
    let (scheme, authority, path) =
        split_url(&target).ok_or_else(|| Failure::BadTarget(format!("`{target}` is not a URL")))?;
    let body = request
        .consume()
        .ok()
        .and_then(|b| read_all(&b).ok())
        .unwrap_or_default();

    let outgoing = OutgoingRequest::new(Fields::new());
    let set = outgoing.set_method(&request.method()).is_ok()
        && outgoing.set_scheme(Some(&scheme)).is_ok()
        && outgoing.set_authority(Some(&authority)).is_ok()
        && outgoing.set_path_with_query(Some(&path)).is_ok();
    if !set {
        return Err(Failure::BadTarget(format!("`{target}` is not a URL")));
    }
    let Ok(out_body) = outgoing.body() else {
        return Err(ErrorCode::InternalError(Some("no request body".into())).into());
    };
    let future = outgoing_handler::handle(outgoing, None)?;
    write_all(&out_body, &body)?;
    OutgoingBody::finish(out_body, None)?;

    let response = loop {
        match future.get() {
            Some(Ok(r)) => break r?,
            Some(Err(())) => {
                return Err(ErrorCode::InternalError(Some("response taken twice".into())).into());
            }
            None => future.subscribe().block(),
        }
    };
    let status = response.status();
    let Ok(incoming) = response.consume() else {
        return Err(ErrorCode::InternalError(Some("no response body".into())).into());
    };
    let body = read_all(&incoming)?;
    Ok((status, body))
}

/// `scheme://authority/path` as its parts (the path is `/` when the URL has none).
fn split_url(url: &str) -> Option<(Scheme, String, String)> {
    let (scheme, rest) = url.split_once("://")?;
    let scheme = match scheme {
        "http" => Scheme::Http,
        "https" => Scheme::Https,
        other => Scheme::Other(other.to_string()),
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    (!authority.is_empty()).then(|| (scheme, authority.to_string(), path.to_string()))
}

/// The whole of `body`, or the error code that ended it early.
fn read_all(body: &IncomingBody) -> Result<Vec<u8>, ErrorCode> {
    let stream: InputStream = body
        .stream()
        .map_err(|()| ErrorCode::InternalError(Some("body stream taken".into())))?;
    let mut all = Vec::new();
    loop {
        match stream.blocking_read(64 * 1024) {
            Ok(chunk) => all.extend_from_slice(&chunk),
            Err(StreamError::Closed) => return Ok(all),
            Err(StreamError::LastOperationFailed(e)) => {
                return Err(wasip2::http::types::http_error_code(&e)
                    .unwrap_or(ErrorCode::InternalError(Some(e.to_debug_string()))));
            }
        }
    }
}

/// Writes `bytes` to `body`'s stream, then closes the stream.
fn write_all(body: &OutgoingBody, bytes: &[u8]) -> Result<(), ErrorCode> {
    let stream = body
        .write()
        .map_err(|()| ErrorCode::InternalError(Some("body stream taken".into())))?;
    // At most 4096 bytes per blocking write (the interface's limit).
    for c in bytes.chunks(4096) {
        stream
            .blocking_write_and_flush(c)
            .map_err(|e| ErrorCode::InternalError(Some(format!("{e:?}"))))?;
    }
    Ok(())
}

/// Answers `status` with `body` as `text/plain` (a failure to write it is left to the host).
fn answer(out: ResponseOutparam, status: u16, body: &[u8]) {
    let Ok(headers) = Fields::from_list(&[("content-type".into(), b"text/plain".to_vec())]) else {
        return;
    };
    let response = OutgoingResponse::new(headers);
    let _ = response.set_status_code(status);
    let Ok(outgoing) = response.body() else {
        return;
    };
    ResponseOutparam::set(out, Ok(response));
    if write_all(&outgoing, body).is_ok() {
        let _ = OutgoingBody::finish(outgoing, None);
    }
}

wasip2::http::proxy::export!(Proxy with_types_in wasip2);
