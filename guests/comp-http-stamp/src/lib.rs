//! `lrpc:http/plugin@0.2.0` as a component (wit-bindgen, `wasm32-wasip2`), so that a chain
//! can mix plugins of both kinds: it stamps the request (the path gains a `/stamped` prefix
//! and the head an `x-stamp` header, and each `x-echo` value comes back as an `x-echoed`
//! line of the same bytes; on `/latin1` it adds `x-latin1: caf\xe9`, a value that is not
//! UTF-8) and passes it on; it answers 403 itself on paths under
//! `/deny`, and replaces the body with `stamped\n` on `/rebody`; `/trap` traps and `/spin`
//! computes forever, for the edge's failure tests. `/leak` tries to carry the request's
//! `x-tenant` to the next request in a static, and answers (`200`, header `x-seen`) what it
//! found there from before: `static=<value>;count=<requests seen>`; `/leak/trap` keeps the
//! value, then traps (per-request isolation's tests).

/// What wit-bindgen generates from the WIT: private to this guest, which exports only
/// what the world names.
mod bindings {
    wit_bindgen::generate!({
        inline: "package lrpc:comp-http; world plugin { export lrpc:http/plugin@0.2.0; }",
        path: ["../../wit/http-bytes.wit"],
        world: "lrpc:comp-http/plugin",
    });
}
use bindings::*;

use exports::lrpc::http::plugin::{Action, Guest, Head, Header, Response};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

/// The last `/leak` request's tenant.
static LAST: Mutex<Vec<u8>> = Mutex::new(Vec::new());
/// `/leak` requests this instance has seen.
static COUNT: AtomicU32 = AtomicU32::new(0);

struct Stamp;

/// `/leak` and `/leak/trap`: see the module docs.
fn leak(head: &Head) -> Action {
    let tenant = head
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("x-tenant"))
        .map(|h| h.value.clone())
        .unwrap_or_default();
    let count = COUNT.fetch_add(1, Ordering::Relaxed);
    let seen = std::mem::replace(&mut *LAST.lock().unwrap_or_else(|e| e.into_inner()), tenant);
    if head.path == "/leak/trap" {
        core::arch::wasm32::unreachable();
    }
    let mut value = b"static=".to_vec();
    value.extend_from_slice(&seen);
    value.extend_from_slice(format!(";count={count}").as_bytes());
    Action::Respond(Response {
        status: 200,
        headers: vec![Header {
            name: "x-seen".into(),
            value,
        }],
        body: b"leak\n".to_vec(),
    })
}

impl Guest for Stamp {
    fn handle(mut head: Head, _body: Vec<u8>) -> Action {
        match head.path.as_str() {
            "/leak" | "/leak/trap" => return leak(&head),
            "/trap" => core::arch::wasm32::unreachable(),
            "/spin" => spin(),
            p if p == "/deny" || p.starts_with("/deny/") => {
                return Action::Respond(Response {
                    status: 403,
                    headers: vec![Header {
                        name: "content-type".into(),
                        value: b"text/plain".to_vec(),
                    }],
                    body: b"stamp: denied\n".to_vec(),
                });
            }
            _ => {}
        }
        let rebody = head.path == "/rebody";
        if head.path == "/latin1" {
            head.headers.push(Header {
                name: "x-latin1".into(),
                value: b"caf\xe9".to_vec(),
            });
        }
        head.path = format!("/stamped{}", head.path);
        head.headers.push(Header {
            name: "x-stamp".into(),
            value: b"component".to_vec(),
        });
        // Header values are bytes: one that is not UTF-8 is seen and passed on as it is.
        let echoed: Vec<Header> = head
            .headers
            .iter()
            .filter(|h| h.name.eq_ignore_ascii_case("x-echo"))
            .map(|h| Header {
                name: "x-echoed".into(),
                value: h.value.clone(),
            })
            .collect();
        head.headers.extend(echoed);
        if rebody {
            return Action::Rewrite((head, b"stamped\n".to_vec()));
        }
        Action::Continue(head)
    }
}

/// Computes until the host stops it.
fn spin() -> ! {
    let mut x = 1u64;
    loop {
        x = core::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
    }
}

export!(Stamp with_types_in bindings);
