//! @NAME@: an HTTP plugin of the lrpc edge server (`lrpc:http/plugin@0.2.0`), as a component.
//!
//! A route sends each request through its chain of plugins, in order, until one answers.
//! This plugin answers requests itself, except those under `/pass/`: it passes them on to
//! the next plugin of the chain.

/// The bindings that wit-bindgen generates from `wit/http-bytes.wit`: the interface's types
/// and the trait `Guest`, for a world that exports `lrpc:http/plugin@0.2.0`.
mod bindings {
    wit_bindgen::generate!({
        inline: "package local:plugin; world plugin { export lrpc:http/plugin@0.2.0; }",
        path: ["wit/http-bytes.wit"],
        world: "local:plugin/plugin",
    });
}

use bindings::exports::lrpc::http::plugin::{Action, Guest, Head, Header, Response};

/// The plugin's name, which it puts in its answers.
const NAME: &str = "@NAME@";

struct Plugin;

impl Guest for Plugin {
    /// Sees one request: its head (method, path below the route's prefix, headers) and body.
    /// Header names are strings; values are bytes (`Vec<u8>`), UTF-8 or not.
    fn handle(mut head: Head, _body: Vec<u8>) -> Action {
        // Under `/pass/`: drop `/pass` from the path, add a header, and pass the request on.
        if let Some(rest) = head.path.strip_prefix("/pass/") {
            head.path = format!("/{rest}");
            head.headers.push(Header {
                name: "x-passed-by".into(),
                value: NAME.into(),
            });
            return Action::Continue(head);
        }
        // Anything else: answer now. Later plugins of the chain do not run.
        let text = format!("hello from {NAME} at {} {}\n", head.method, head.path);
        Action::Respond(Response {
            status: 200,
            headers: vec![
                Header {
                    name: "content-type".into(),
                    value: "text/plain".into(),
                },
                Header {
                    name: "x-plugin".into(),
                    value: NAME.into(),
                },
            ],
            body: text.into_bytes(),
        })
    }
}

bindings::export!(Plugin with_types_in bindings);
