//! `lrpc:http/plugin` as a component (wit-bindgen, `wasm32-wasip2`), so that a chain can mix
//! plugins of both kinds: it stamps the request (the path gains a `/stamped` prefix and the
//! head an `x-stamp` header) and passes it on; it answers 403 itself on paths under
//! `/deny`, and replaces the body with `stamped\n` on `/rebody`; `/trap` traps and `/spin`
//! computes forever, for the edge's failure tests.

/// What wit-bindgen generates from the WIT: private to this guest, which exports only
/// what the world names.
mod bindings {
    wit_bindgen::generate!({
        inline: "package lrpc:comp-http; world plugin { export lrpc:http/plugin; }",
        path: ["../../wit/http.wit"],
        world: "lrpc:comp-http/plugin",
    });
}
use bindings::*;

use exports::lrpc::http::plugin::{Action, Guest, Head, Header, Response};

struct Stamp;

impl Guest for Stamp {
    fn handle(mut head: Head, _body: Vec<u8>) -> Action {
        match head.path.as_str() {
            "/trap" => core::arch::wasm32::unreachable(),
            "/spin" => spin(),
            p if p == "/deny" || p.starts_with("/deny/") => {
                return Action::Respond(Response {
                    status: 403,
                    headers: vec![Header {
                        name: "content-type".into(),
                        value: "text/plain".into(),
                    }],
                    body: b"stamp: denied\n".to_vec(),
                });
            }
            _ => {}
        }
        let rebody = head.path == "/rebody";
        head.path = format!("/stamped{}", head.path);
        head.headers.push(Header {
            name: "x-stamp".into(),
            value: "component".into(),
        });
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
