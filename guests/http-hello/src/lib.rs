//! An `lrpc:http/plugin@0.2.0` at the end of a chain: it answers every request with a greeting
//! naming the path and the user, followed by the request body (echoed).

include!(concat!(env!("OUT_DIR"), "/stubs.rs"));

/// The response is built in small vectors dropped at every call: the SDK's size-class
/// allocator serves them in a few instructions each.
#[global_allocator]
static ALLOC: lrpc_sdk::alloc::Pools = lrpc_sdk::alloc::Pools::new();

use plugin::{Action, Head, Header, Response};
use std::borrow::Cow;

#[derive(Default)]
struct Hello;

impl plugin::Server for Hello {
    /// The head is lent from the stub's private copy of the request and the body read in
    /// place (`server.toml`): the greeting is the only copy made here.
    fn handle<'a>(&self, head: Head<'a>, body: &'a [u8]) -> Action<'a> {
        let user = head
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case("x-user"))
            .map_or(&b"anonymous"[..], |h| &h.value);
        let parts: [&[u8]; 7] = [
            b"hello ",
            user,
            b" at ",
            head.method.as_bytes(),
            b" ",
            head.path.as_bytes(),
            b"\n",
        ];
        let mut out = Vec::with_capacity(parts.iter().map(|p| p.len()).sum::<usize>() + body.len());
        for p in parts {
            out.extend_from_slice(p);
        }
        out.extend_from_slice(body);
        Action::Respond(Response {
            status: 200,
            headers: vec![
                Header {
                    name: "content-type".into(),
                    value: Cow::Borrowed(b"text/plain"),
                },
                Header {
                    name: "x-plugin".into(),
                    value: Cow::Borrowed(b"hello"),
                },
            ],
            body: out.into(),
        })
    }
}

plugin::export!(Hello);
