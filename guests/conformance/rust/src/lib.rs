//! The conformance run's `wasi:http/incoming-handler` in Rust, with the same routes as
//! `../js/handler.js` and `../py/app.py`. `scripts/conformance.sh` sends the same requests
//! to it under `lrpc serve` and `wasmtime serve` and compares the answers.
//!
//! - `GET|HEAD /hello`: 200 `hello\n`.
//! - `POST /echo`: the request body, streamed back as it arrives.
//! - `GET /headers`: the request's `x-odd` header back as `x-odd`, its bytes in hex as body.
//! - `GET /latin1`: 200 with `x-odd: caf\xe9`, a header value that is not UTF-8.
//! - `GET /stream/N`: N bytes of a pattern (byte `i` is `i % 251`), streamed, no length.
//! - `GET /trap`: traps.
//! - `GET /spin`: computes forever.
//! - `GET /outgoing`: `GET $BACKEND/backend`; its status, `x-backend` header and body.

use wasip2::exports::http::incoming_handler::Guest;
use wasip2::http::outgoing_handler;
use wasip2::http::types::{
    Fields, IncomingBody, IncomingRequest, OutgoingBody, OutgoingRequest, OutgoingResponse,
    ResponseOutparam, Scheme,
};
use wasip2::io::streams::{OutputStream, StreamError};

const PIECE: usize = 64 * 1024;

struct Conformance;

impl Guest for Conformance {
    fn handle(request: IncomingRequest, out: ResponseOutparam) {
        let path = request.path_with_query().unwrap_or_else(|| "/".into());
        let path = path.split('?').next().unwrap_or_default();
        match path {
            "/hello" => answer(out, 200, b"hello\n", &[]),
            "/echo" => echo(&request, out),
            "/headers" => match request.headers().get("x-odd").into_iter().next() {
                Some(odd) => {
                    let hex: String = odd.iter().map(|b| format!("{b:02x}")).collect();
                    answer(out, 200, format!("{hex}\n").as_bytes(), &[("x-odd", odd)]);
                }
                None => answer(out, 400, b"no x-odd header\n", &[]),
            },
            "/latin1" => answer(out, 200, b"ok\n", &[("x-odd", b"caf\xe9".to_vec())]),
            "/trap" => core::arch::wasm32::unreachable(),
            "/spin" => spin(),
            "/outgoing" => outgoing(out),
            p => match p.strip_prefix("/stream/").map(str::parse::<usize>) {
                Some(Ok(len)) => generate(out, len),
                Some(Err(_)) => answer(out, 400, b"bad length\n", &[]),
                None => answer(out, 404, b"not found\n", &[]),
            },
        }
    }
}

/// Sets the response (status, headers); its body's stream and the body.
fn start(
    out: ResponseOutparam,
    status: u16,
    headers: &[(&str, Vec<u8>)],
) -> (OutputStream, OutgoingBody) {
    let list: Vec<(String, Vec<u8>)> =
        headers.iter().map(|(n, v)| (n.to_string(), v.clone())).collect();
    let response = OutgoingResponse::new(Fields::from_list(&list).expect("valid headers"));
    response.set_status_code(status).expect("a valid status");
    let body = response.body().expect("a new response's body");
    ResponseOutparam::set(out, Ok(response));
    let stream = body.write().expect("a new body's stream");
    (stream, body)
}

/// Flushes the stream, then finishes the body; a body whose writes failed stays unfinished.
fn finish(stream: OutputStream, body: OutgoingBody, sent: Result<(), StreamError>) {
    let flushed = sent.and_then(|()| stream.blocking_flush());
    drop(stream);
    if flushed.is_ok() {
        let _ = OutgoingBody::finish(body, None);
    }
}

fn answer(out: ResponseOutparam, status: u16, text: &[u8], extra: &[(&str, Vec<u8>)]) {
    let mut headers = vec![("content-type", b"text/plain".to_vec())];
    headers.extend(extra.iter().cloned());
    let (stream, body) = start(out, status, &headers);
    let sent = write_all(&stream, text);
    finish(stream, body, sent);
}

fn echo(request: &IncomingRequest, out: ResponseOutparam) {
    let (stream, body) = start(out, 200, &[("content-type", b"application/octet-stream".to_vec())]);
    let sent = (|| {
        let Ok(incoming) = request.consume() else { return Ok(()) };
        let Ok(input) = incoming.stream() else { return Ok(()) };
        loop {
            match input.blocking_read(PIECE as u64) {
                Ok(piece) => write_all(&stream, &piece)?,
                Err(StreamError::Closed) => return Ok(()),
                Err(e) => return Err(e),
            }
        }
    })();
    finish(stream, body, sent);
}

fn generate(out: ResponseOutparam, len: usize) {
    let (stream, body) = start(out, 200, &[("content-type", b"application/octet-stream".to_vec())]);
    // A piece of the pattern, plus 250 bytes, so that a whole piece starts at any offset.
    let pattern: Vec<u8> = (0..PIECE + 251).map(|i| (i % 251) as u8).collect();
    let sent = (|| {
        let mut at = 0;
        while at < len {
            let skip = at % 251;
            let n = (len - at).min(PIECE);
            write_all(&stream, &pattern[skip..skip + n])?;
            at += n;
        }
        Ok(())
    })();
    finish(stream, body, sent);
}

/// Writes all of `data`, as fast as the stream takes it.
fn write_all(stream: &OutputStream, mut data: &[u8]) -> Result<(), StreamError> {
    while !data.is_empty() {
        let n = stream.check_write()?;
        if n == 0 {
            stream.subscribe().block();
            continue;
        }
        let n = usize::try_from(n).unwrap_or(usize::MAX).min(data.len());
        stream.write(&data[..n])?;
        data = &data[n..];
    }
    Ok(())
}

/// The whole of a body, or `None` when a read fails.
fn read_all(body: &IncomingBody) -> Option<Vec<u8>> {
    let input = body.stream().ok()?;
    let mut all = Vec::new();
    loop {
        match input.blocking_read(PIECE as u64) {
            Ok(piece) => all.extend_from_slice(&piece),
            Err(StreamError::Closed) => return Some(all),
            Err(_) => return None,
        }
    }
}

/// `GET $BACKEND/backend`, answered with the backend's status, `x-backend` and body. A
/// failed request traps, as an uncaught error does in the other languages' handlers.
fn outgoing(out: ResponseOutparam) {
    let Ok(origin) = std::env::var("BACKEND") else {
        return answer(out, 500, b"no BACKEND\n", &[]);
    };
    let (scheme, authority) = match origin.split_once("://") {
        Some(("https", a)) => (Scheme::Https, a.to_string()),
        Some((_, a)) => (Scheme::Http, a.to_string()),
        None => (Scheme::Http, origin.clone()),
    };
    let request = OutgoingRequest::new(Fields::new());
    request.set_scheme(Some(&scheme)).expect("a valid scheme");
    request.set_authority(Some(&authority)).expect("a valid authority");
    request.set_path_with_query(Some("/backend")).expect("a valid path");
    let body = request.body().expect("a new request's body");
    OutgoingBody::finish(body, None).expect("an empty body");
    let future = outgoing_handler::handle(request, None).expect("the request is sent");
    let response = loop {
        match future.get() {
            Some(got) => break got,
            None => future.subscribe().block(),
        }
    };
    let Ok(Ok(response)) = response else {
        panic!("the outgoing request failed: {response:?}");
    };
    let status = response.status();
    let tag = response.headers().get("x-backend").into_iter().next().unwrap_or_default();
    let text = response.consume().ok().and_then(|b| read_all(&b)).expect("the backend's body");
    answer(out, status, &text, &[("x-backend", tag)]);
}

/// Computes until the host stops it.
fn spin() -> ! {
    let mut x = 1u64;
    loop {
        x = core::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
    }
}

wasip2::http::proxy::export!(Conformance with_types_in wasip2);
