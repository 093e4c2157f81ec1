//! An `lrpc:http/plugin` that lets a request through only with a known bearer token: it
//! answers 401 itself otherwise, and passes the request on with the token replaced by an
//! `x-user` header.

include!(concat!(env!("OUT_DIR"), "/stubs.rs"));

/// Requests are decoded into small strings and dropped at every call: the SDK's size-class
/// allocator serves them in a few instructions each.
#[global_allocator]
static ALLOC: lrpc_sdk::alloc::Pools = lrpc_sdk::alloc::Pools::new();

use plugin::{Action, Head, Header, Response};

/// Tokens and the users they stand for.
const TOKENS: &[(&str, &str)] = &[("Bearer letmein", "alice"), ("Bearer opensesame", "bob")];

#[derive(Default)]
struct Auth;

impl plugin::Server for Auth {
    fn handle(&self, mut head: Head, _body: &[u8]) -> Action {
        let user = head
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case("authorization"))
            .and_then(|h| TOKENS.iter().find(|(t, _)| *t == h.value))
            .map(|(_, u)| *u);
        let Some(user) = user else {
            return Action::Respond(Response {
                status: 401,
                headers: vec![Header {
                    name: "www-authenticate".into(),
                    value: "Bearer".into(),
                }],
                body: b"auth: missing or unknown token\n".to_vec(),
            });
        };
        head.headers
            .retain(|h| !h.name.eq_ignore_ascii_case("authorization"));
        head.headers.push(Header {
            name: "x-user".into(),
            value: user.into(),
        });
        Action::Continue(head)
    }
}

plugin::export!(Auth);
