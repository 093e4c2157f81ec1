//! An `lrpc:http/plugin@0.2.0` that lets a request through only with a known bearer token: it
//! answers 401 itself otherwise, and passes the request on with the token replaced by an
//! `x-user` header.
//!
//! The plugins after this one trust `x-user`, so only this plugin may set it: any `x-user`
//! the client sent is removed first, whatever its case. Otherwise bob's token with
//! `x-user: alice` would reach the handler as alice. A request with more than one
//! `authorization` header is refused: which one counts would be a guess.
//!
//! Header values are bytes (version 0.2.0 of the interface), so a value that is not UTF-8
//! reaches this plugin too: such an `authorization` matches no token, and such an `x-user` is
//! removed as any other.

include!(concat!(env!("OUT_DIR"), "/stubs.rs"));

/// Responses and the headers a plugin adds are small vectors dropped at every call: the
/// SDK's size-class allocator serves them in a few instructions each.
#[global_allocator]
static ALLOC: lrpc_sdk::alloc::Pools = lrpc_sdk::alloc::Pools::new();

use plugin::{Action, Head, Header, Response};
use std::borrow::Cow;

/// The header that names the user to the plugins and handler after this one.
const IDENTITY: &str = "x-user";

/// Tokens and the users they stand for.
const TOKENS: &[(&str, &str)] = &[("Bearer letmein", "alice"), ("Bearer opensesame", "bob")];

#[derive(Default)]
struct Auth;

impl plugin::Server for Auth {
    /// The head's strings are lent from the request (`server.toml`: borrowed types): the
    /// headers passed on are not copied here, only re-encoded by the stub.
    fn handle<'a>(&self, mut head: Head<'a>, _body: &'a [u8]) -> Action<'a> {
        let mut tokens = head
            .headers
            .iter()
            .filter(|h| h.name.eq_ignore_ascii_case("authorization"));
        let user = match (tokens.next(), tokens.next()) {
            (Some(h), None) => TOKENS
                .iter()
                .find(|(t, _)| t.as_bytes() == &*h.value)
                .map(|(_, u)| *u),
            _ => None,
        };
        let Some(user) = user else {
            return Action::Respond(Response {
                status: 401,
                headers: vec![Header {
                    name: "www-authenticate".into(),
                    value: Cow::Borrowed(b"Bearer"),
                }],
                body: b"auth: missing or unknown token\n".into(),
            });
        };
        // The client's credentials and any identity it claimed for itself go; the identity
        // this plugin vouches for takes their place.
        head.headers.retain(|h| {
            !h.name.eq_ignore_ascii_case("authorization") && !h.name.eq_ignore_ascii_case(IDENTITY)
        });
        head.headers.push(Header {
            name: IDENTITY.into(),
            value: Cow::Borrowed(user.as_bytes()),
        });
        Action::Continue(head)
    }
}

plugin::export!(Auth);
