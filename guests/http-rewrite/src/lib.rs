//! An `lrpc:http/plugin@0.2.0` that rewrites requests on their way: it drops a leading `/v1` from
//! the path, tags the request with `x-rewritten`, and upper-cases the body when the request
//! asks for it with `x-upper`.

include!(concat!(env!("OUT_DIR"), "/stubs.rs"));

/// A rewritten path or body and the headers a plugin adds are small allocations dropped at
/// every call: the SDK's size-class allocator serves them in a few instructions each.
#[global_allocator]
static ALLOC: lrpc_sdk::alloc::Pools = lrpc_sdk::alloc::Pools::new();

use plugin::{Action, Head, Header};
use std::borrow::Cow;

#[derive(Default)]
struct Rewrite;

impl plugin::Server for Rewrite {
    /// The head's strings are lent from the request (`server.toml`: borrowed types): a path
    /// without `/v1` is a shorter view of the same bytes, and untouched headers are passed
    /// on as they came.
    fn handle<'a>(&self, mut head: Head<'a>, body: &'a [u8]) -> Action<'a> {
        head.path = strip_v1(std::mem::take(&mut head.path));
        head.headers.push(Header {
            name: "x-rewritten".into(),
            value: Cow::Borrowed(b"1"),
        });
        let upper = head
            .headers
            .iter()
            .any(|h| h.name.eq_ignore_ascii_case("x-upper"));
        if upper {
            Action::Rewrite((head, body.to_ascii_uppercase().into()))
        } else {
            Action::Continue(head)
        }
    }
}

/// `path` without a leading `/v1`; lent from the same bytes when what follows is a path.
fn strip_v1(path: Cow<'_, str>) -> Cow<'_, str> {
    let Some(rest) = path.strip_prefix("/v1") else {
        return path;
    };
    if !rest.starts_with('/') {
        return Cow::Owned(format!("/{rest}"));
    }
    match path {
        Cow::Borrowed(p) => Cow::Borrowed(&p[3..]),
        Cow::Owned(p) => Cow::Owned(p[3..].to_string()),
    }
}

plugin::export!(Rewrite);
