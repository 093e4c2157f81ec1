//! Minimal WASI 0.3 (p3) `wasi:http/service` handler.
//!
//! * any method but POST: 200, body `hello from p3\n`
//! * POST: 200, body = the request body, copied chunk by chunk by the guest
//!   (guest reads the request `stream<u8>` and writes the response
//!   `stream<u8>`, so the body streams through the component both ways).
//! * path `/trap`: the handler panics (a trap: the host answers 500).
//! * path `/spin`: the handler loops forever (the host's deadline answers 504).
//! * path `/proxy`: sends a GET to the URL in the `x-target` header with
//!   `wasi:http/client` and answers with the backend's status and body; a failed send
//!   answers the error code's name: 403 for `HttpRequestDenied`, 502 for others.

use wasip3::http::types::{ErrorCode, Fields, Method, Request, Response, Scheme};
use wasip3::wit_bindgen::StreamResult;
use wasip3::wit_stream;
use wasip3::{wit_bindgen, wit_future};

wasip3::http::service::export!(Hello);

struct Hello;

const CHUNK: usize = 16 * 1024;

impl wasip3::exports::http::handler::Guest for Hello {
    async fn handle(request: Request) -> Result<Response, ErrorCode> {
        match request.get_path_with_query().as_deref() {
            Some("/trap") => panic!("trap requested"),
            Some("/proxy") => return Ok(proxy(request).await),
            Some("/spin") => {
                let mut n = 0u64;
                loop {
                    n = std::hint::black_box(n.wrapping_add(1));
                }
            }
            _ => {}
        }
        let is_post = matches!(request.get_method(), Method::Post);

        let (mut body_tx, body_rx) = wit_stream::new::<u8>();
        // Trailers of the response: none. The writer is dropped right away,
        // which resolves the future to the default `Ok(None)`.
        let (trailers_tx, trailers_rx) = wit_future::new(|| Ok(None));
        drop(trailers_tx);
        let headers = Fields::new();
        let ct = if is_post {
            "application/octet-stream"
        } else {
            "text/plain"
        };
        let _ = headers.append("content-type", ct.as_bytes());
        let (response, _transmit) = Response::new(headers, Some(body_rx), trailers_rx);

        if is_post {
            // `res` tells the host how handling of the request body went;
            // dropping its writer reports the default `Ok(())`.
            let (res_tx, res_rx) = wit_future::new(|| Ok(()));
            let (mut req_body, _req_trailers) = Request::consume_body(request, res_rx);
            wit_bindgen::spawn_local(async move {
                let mut buf = Vec::with_capacity(CHUNK);
                loop {
                    let (status, chunk) = req_body.read(buf).await;
                    match status {
                        StreamResult::Complete(_) => {
                            if !chunk.is_empty() {
                                let rest = body_tx.write_all(chunk).await;
                                if !rest.is_empty() {
                                    break; // client went away
                                }
                            }
                            buf = Vec::with_capacity(CHUNK);
                        }
                        StreamResult::Dropped | StreamResult::Cancelled => break,
                    }
                }
                drop(res_tx);
                drop(body_tx);
            });
        } else {
            drop(request);
            wit_bindgen::spawn_local(async move {
                let rest = body_tx.write_all(b"hello from p3\n".to_vec()).await;
                let _ = rest;
            });
        }
        Ok(response)
    }
}

/// A response with `status` and the text `body`.
fn text(status: u16, body: String) -> Response {
    let (mut body_tx, body_rx) = wit_stream::new::<u8>();
    let (trailers_tx, trailers_rx) = wit_future::new(|| Ok(None));
    drop(trailers_tx);
    let (response, _transmit) = Response::new(Fields::new(), Some(body_rx), trailers_rx);
    let _ = response.set_status_code(status);
    wit_bindgen::spawn_local(async move {
        let _ = body_tx.write_all(body.into_bytes()).await;
    });
    response
}

/// Forwards a GET to the request's `x-target` URL; the backend's status and body, or the
/// error code's name.
async fn proxy(request: Request) -> Response {
    let target = request
        .get_headers()
        .get("x-target")
        .first()
        .and_then(|v| String::from_utf8(v.clone()).ok());
    drop(request);
    let Some(target) = target else {
        return text(400, "no x-target\n".into());
    };
    let (scheme, rest) = if let Some(r) = target.strip_prefix("http://") {
        (Scheme::Http, r)
    } else if let Some(r) = target.strip_prefix("https://") {
        (Scheme::Https, r)
    } else {
        return text(400, "x-target is not an http(s) URL\n".into());
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let (trailers_tx, trailers_rx) = wit_future::new(|| Ok(None));
    drop(trailers_tx);
    let (out, _sent) = Request::new(Fields::new(), None, trailers_rx, None);
    let set = out
        .set_scheme(Some(&scheme))
        .and_then(|()| out.set_authority(Some(authority)))
        .and_then(|()| out.set_path_with_query(Some(path)));
    if set.is_err() {
        return text(400, "x-target is not a valid URL\n".into());
    }
    let backend = match wasip3::http::client::send(out).await {
        Ok(r) => r,
        Err(code) => {
            let status = match code {
                ErrorCode::HttpRequestDenied => 403,
                _ => 502,
            };
            // `ErrorCode::HttpRequestDenied`, or `ErrorCode::DnsError(..)`: the name alone.
            let name = format!("{code:?}");
            let name = name.trim_start_matches("ErrorCode::");
            let name = name.split('(').next().unwrap_or(name).to_string();
            return text(status, format!("{name}\n"));
        }
    };
    let status = backend.get_status_code();
    let (res_tx, res_rx) = wit_future::new(|| Ok(()));
    let (mut from, _trailers) = Response::consume_body(backend, res_rx);
    let (mut to, body_rx) = wit_stream::new::<u8>();
    let (trailers_tx, trailers_rx) = wit_future::new(|| Ok(None));
    drop(trailers_tx);
    let (response, _transmit) = Response::new(Fields::new(), Some(body_rx), trailers_rx);
    let _ = response.set_status_code(status);
    wit_bindgen::spawn_local(async move {
        let mut buf = Vec::with_capacity(CHUNK);
        loop {
            let (status, chunk) = from.read(buf).await;
            match status {
                StreamResult::Complete(_) => {
                    if !chunk.is_empty() && !to.write_all(chunk).await.is_empty() {
                        break;
                    }
                    buf = Vec::with_capacity(CHUNK);
                }
                StreamResult::Dropped | StreamResult::Cancelled => break,
            }
        }
        drop(res_tx);
    });
    response
}
