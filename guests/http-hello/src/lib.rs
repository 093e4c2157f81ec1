//! An `lrpc:http/plugin` at the end of a chain: it answers every request with a greeting
//! naming the path and the user, followed by the request body (echoed).

include!(concat!(env!("OUT_DIR"), "/stubs.rs"));

/// Requests are decoded into small strings and dropped at every call: the SDK's size-class
/// allocator serves them in a few instructions each.
#[global_allocator]
static ALLOC: lrpc_sdk::alloc::Pools = lrpc_sdk::alloc::Pools::new();

use plugin::{Action, Head, Header, Response};

#[derive(Default)]
struct Hello;

impl plugin::Server for Hello {
    fn handle(&self, head: Head, body: &[u8]) -> Action {
        let user = head
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case("x-user"))
            .map_or("anonymous", |h| h.value.as_str());
        let mut out = format!("hello {user} at {} {}\n", head.method, head.path).into_bytes();
        out.extend_from_slice(body);
        Action::Respond(Response {
            status: 200,
            headers: vec![
                Header {
                    name: "content-type".into(),
                    value: "text/plain".into(),
                },
                Header {
                    name: "x-plugin".into(),
                    value: "hello".into(),
                },
            ],
            body: out,
        })
    }
}

plugin::export!(Hello);
