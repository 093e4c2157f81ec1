//! The edge benchmark's hello handler (`http-hello`, the plugin at the end of its chains) as a
//! `wasi:http/incoming-handler` component: a greeting naming the user, the method and the
//! path, followed by the request body (echoed), as `text/plain`. It is the handler at the end
//! of the `guests/apps/wasi-http` chain (served by the edge with wasmtime-wasi-http) and the
//! `wasmtime serve` peer of the edge benchmark.
//!
//! Two paths make it fail, for the edge's tests: `/trap` traps, `/spin` computes forever.
//! A path ending in `/headers` answers the request's authority and header lines as it sees
//! them, one a line (values as their bytes), instead of the greeting.

use wasip2::exports::http::incoming_handler::Guest;
use wasip2::http::types::{
    Fields, IncomingRequest, Method, OutgoingBody, OutgoingResponse, ResponseOutparam,
};

struct Hello;

impl Guest for Hello {
    fn handle(request: IncomingRequest, out: ResponseOutparam) {
        let user = request
            .headers()
            .get("x-user")
            .into_iter()
            .next()
            .map(|v| String::from_utf8_lossy(&v).into_owned())
            .unwrap_or_else(|| "anonymous".into());
        let method = match request.method() {
            Method::Get => "GET".to_string(),
            Method::Post => "POST".to_string(),
            Method::Put => "PUT".to_string(),
            Method::Delete => "DELETE".to_string(),
            Method::Head => "HEAD".to_string(),
            Method::Other(m) => m,
            other => format!("{other:?}").to_uppercase(),
        };
        let path = request.path_with_query().unwrap_or_default();
        match path.as_str() {
            "/trap" => core::arch::wasm32::unreachable(),
            "/spin" => spin(),
            _ => {}
        }
        let mut answer = if path.ends_with("/headers") {
            let mut text =
                format!("authority {}\n", request.authority().unwrap_or_default()).into_bytes();
            // Each value's bytes as they arrived, UTF-8 or not.
            for (name, value) in request.headers().entries() {
                text.extend_from_slice(name.as_bytes());
                text.extend_from_slice(b": ");
                text.extend_from_slice(&value);
                text.push(b'\n');
            }
            text
        } else {
            format!("hello {user} at {method} {path}\n").into_bytes()
        };
        read_body(&request, &mut answer);
        let headers = Fields::from_list(&[
            ("content-type".into(), b"text/plain".to_vec()),
            ("x-plugin".into(), b"hello".to_vec()),
        ])
        .expect("valid header names");
        let response = OutgoingResponse::new(headers);
        let body = response.body().expect("a new response's body");
        ResponseOutparam::set(out, Ok(response));
        let stream = body.write().expect("a new body's stream");
        // At most 4096 bytes per blocking write (the interface's limit).
        let sent = answer
            .chunks(4096)
            .all(|c| stream.blocking_write_and_flush(c).is_ok());
        drop(stream);
        if sent {
            let _ = OutgoingBody::finish(body, None);
        }
    }
}

/// Appends the request's body to `out`.
fn read_body(request: &IncomingRequest, out: &mut Vec<u8>) {
    let Ok(body) = request.consume() else { return };
    let Ok(stream) = body.stream() else { return };
    // Until the stream is closed (or fails).
    while let Ok(chunk) = stream.blocking_read(64 * 1024) {
        out.extend_from_slice(&chunk);
    }
}

/// Computes until the host stops it.
fn spin() -> ! {
    let mut x = 1u64;
    loop {
        x = core::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
    }
}

wasip2::http::proxy::export!(Hello with_types_in wasip2);
