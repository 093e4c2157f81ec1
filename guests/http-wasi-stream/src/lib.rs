//! A `wasi:http/incoming-handler` component that streams bodies both ways, for the edge's
//! tests.
//!
//! `/echo` sets its response first, then writes back each piece of the request body as it
//! reads it. `/gen/<MiB>` streams that many MiB of a pattern (byte `i` is `i % 251`) with no
//! length. `/ignore` answers without reading the body; `/sum` reads it all, then answers
//! its length (and nothing when the read fails). `/hang` sets its response, writes a
//! line and then computes forever; `/leave` writes a line and returns with its body
//! unfinished; `/abandon` returns with its body unfinished and nothing written, as a
//! JavaScript handler that throws after setting its response; `/abandon-trap` does the
//! same, then traps.

use std::cell::RefCell;
use wasip2::exports::http::incoming_handler::Guest;
use wasip2::http::types::{
    Fields, IncomingRequest, OutgoingBody, OutgoingResponse, ResponseOutparam,
};
use wasip2::io::streams::{OutputStream, StreamError};

thread_local! {
    /// Bodies `/leave` and `/abandon` left unfinished.
    static LEFT: RefCell<Vec<(OutputStream, OutgoingBody)>> = const { RefCell::new(Vec::new()) };
}

struct Stream;

impl Guest for Stream {
    fn handle(request: IncomingRequest, out: ResponseOutparam) {
        let path = request.path_with_query().unwrap_or_default();
        let mut text = String::new();
        if path == "/sum" {
            match length(&request) {
                Some(n) => text = format!("{n}\n"),
                None => return,
            }
        }
        let headers =
            Fields::from_list(&[("content-type".into(), b"application/octet-stream".to_vec())])
                .expect("a valid header name");
        let response = OutgoingResponse::new(headers);
        let body = response.body().expect("a new response's body");
        ResponseOutparam::set(out, Ok(response));
        let stream = body.write().expect("a new body's stream");
        let sent = match path.as_str() {
            "/echo" => echo(&request, &stream),
            "/ignore" => write_all(&stream, b"ignored\n"),
            "/sum" => write_all(&stream, text.as_bytes()),
            "/hang" => {
                let _ = write_all(&stream, b"partial\n");
                spin()
            }
            "/leave" => {
                let _ = write_all(&stream, b"partial\n");
                LEFT.with(|l| l.borrow_mut().push((stream, body)));
                return;
            }
            "/abandon" => {
                LEFT.with(|l| l.borrow_mut().push((stream, body)));
                return;
            }
            "/abandon-trap" => {
                LEFT.with(|l| l.borrow_mut().push((stream, body)));
                core::arch::wasm32::unreachable()
            }
            p => match p
                .strip_prefix("/gen/")
                .and_then(|n| n.parse::<usize>().ok())
            {
                Some(mib) => generate(&stream, mib << 20),
                None => write_all(&stream, b"unknown path\n"),
            },
        };
        let flushed = sent.and_then(|()| stream.blocking_flush());
        drop(stream);
        if flushed.is_ok() {
            let _ = OutgoingBody::finish(body, None);
        }
    }
}

/// Writes back each piece of the request body as it arrives.
fn echo(request: &IncomingRequest, out: &OutputStream) -> Result<(), StreamError> {
    let Ok(body) = request.consume() else {
        return Ok(());
    };
    let Ok(input) = body.stream() else {
        return Ok(());
    };
    loop {
        match input.blocking_read(64 * 1024) {
            Ok(piece) => write_all(out, &piece)?,
            Err(StreamError::Closed) => return Ok(()),
            Err(e) => return Err(e),
        }
    }
}

/// The length of the request body; `None` when reading it fails.
fn length(request: &IncomingRequest) -> Option<u64> {
    let body = request.consume().ok()?;
    let input = body.stream().ok()?;
    let mut n = 0;
    loop {
        match input.blocking_read(64 * 1024) {
            Ok(piece) => n += piece.len() as u64,
            Err(StreamError::Closed) => return Some(n),
            Err(_) => return None,
        }
    }
}

/// Writes `len` bytes of the pattern.
fn generate(out: &OutputStream, len: usize) -> Result<(), StreamError> {
    let piece: Vec<u8> = (0..64 * 1024).map(|i| (i % 251) as u8).collect();
    let mut at = 0;
    while at < len {
        // The piece starts where the pattern is at `at`.
        let skip = at % 251;
        let n = (len - at).min(piece.len() - skip);
        write_all(out, &piece[skip..skip + n])?;
        at += n;
    }
    Ok(())
}

/// Writes all of `data`, as fast as the stream takes it.
fn write_all(out: &OutputStream, mut data: &[u8]) -> Result<(), StreamError> {
    while !data.is_empty() {
        let n = match out.check_write()? {
            0 => {
                out.subscribe().block();
                continue;
            }
            n => usize::try_from(n).unwrap_or(usize::MAX).min(data.len()),
        };
        out.write(&data[..n])?;
        data = &data[n..];
    }
    Ok(())
}

/// Computes until the host stops it.
fn spin() -> ! {
    let mut x = 1u64;
    loop {
        x = core::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
    }
}

wasip2::http::proxy::export!(Stream with_types_in wasip2);
