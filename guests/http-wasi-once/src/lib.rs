//! A `wasi:http/incoming-handler` component that expects a fresh instance for each request,
//! as components written for `wasmtime serve` and Spin do; for the edge's tests.
//!
//! Every request counts in the instance. `/count` answers the count so far (1 on a fresh
//! instance). Any other path answers `once` on a fresh instance and traps on a used one.
//! `/trap` traps, `/spin` computes forever, `/nothing` answers nothing, and `/error`
//! answers with an `error-code`.

use core::sync::atomic::{AtomicU32, Ordering};
use wasip2::exports::http::incoming_handler::Guest;
use wasip2::http::types::{
    ErrorCode, Fields, IncomingRequest, OutgoingBody, OutgoingResponse, ResponseOutparam,
};

/// Requests this instance has been handed.
static SERVED: AtomicU32 = AtomicU32::new(0);

struct Once;

impl Guest for Once {
    fn handle(request: IncomingRequest, out: ResponseOutparam) {
        let n = SERVED.fetch_add(1, Ordering::Relaxed) + 1;
        let path = request.path_with_query().unwrap_or_default();
        let text = match path.as_str() {
            "/count" => format!("{n}\n"),
            "/trap" => core::arch::wasm32::unreachable(),
            "/spin" => spin(),
            "/nothing" => return,
            "/error" => {
                ResponseOutparam::set(out, Err(ErrorCode::InternalError(None)));
                return;
            }
            // A second request on one instance: the state it left behind breaks this one.
            _ if n > 1 => core::arch::wasm32::unreachable(),
            _ => "once\n".to_string(),
        };
        let headers = Fields::from_list(&[("content-type".into(), b"text/plain".to_vec())])
            .expect("a valid header name");
        let response = OutgoingResponse::new(headers);
        let body = response.body().expect("a new response's body");
        ResponseOutparam::set(out, Ok(response));
        let stream = body.write().expect("a new body's stream");
        let sent = stream.blocking_write_and_flush(text.as_bytes()).is_ok();
        drop(stream);
        if sent {
            let _ = OutgoingBody::finish(body, None);
        }
    }
}

/// Computes until the host stops it.
fn spin() -> ! {
    let mut x = 1u64;
    loop {
        x = core::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
    }
}

wasip2::http::proxy::export!(Once with_types_in wasip2);
