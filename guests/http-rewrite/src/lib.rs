//! An `lrpc:http/plugin` that rewrites requests on their way: it drops a leading `/v1` from
//! the path, tags the request with `x-rewritten`, and upper-cases the body when the request
//! asks for it with `x-upper`.

include!(concat!(env!("OUT_DIR"), "/stubs.rs"));

/// Requests are decoded into small strings and dropped at every call: the SDK's size-class
/// allocator serves them in a few instructions each.
#[global_allocator]
static ALLOC: lrpc_sdk::alloc::Pools = lrpc_sdk::alloc::Pools::new();

use plugin::{Action, Head, Header};

#[derive(Default)]
struct Rewrite;

impl plugin::Server for Rewrite {
    fn handle(&self, mut head: Head, body: &[u8]) -> Action {
        if let Some(rest) = head.path.strip_prefix("/v1") {
            head.path = if rest.starts_with('/') {
                rest.to_string()
            } else {
                format!("/{rest}")
            };
        }
        head.headers.push(Header {
            name: "x-rewritten".into(),
            value: "1".into(),
        });
        let upper = head
            .headers
            .iter()
            .any(|h| h.name.eq_ignore_ascii_case("x-upper"));
        if upper {
            Action::Rewrite((head, body.to_ascii_uppercase()))
        } else {
            Action::Continue(head)
        }
    }
}

plugin::export!(Rewrite);
