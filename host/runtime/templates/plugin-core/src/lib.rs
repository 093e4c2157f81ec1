//! @NAME@: an HTTP plugin of the lrpc edge server (`lrpc:http/plugin@0.2.0`).
//!
//! A route sends each request through its chain of plugins, in order, until one answers.
//! This plugin answers requests itself, except those under `/pass/`: it passes them on to
//! the next plugin of the chain.

// The stubs that build.rs generated: the module `plugin`, with the interface's types, the
// trait `Server` and the macro `export!`.
include!(concat!(env!("OUT_DIR"), "/stubs.rs"));

use plugin::{Action, Head, Header, Response};

/// The plugin's name, which it puts in its answers.
const NAME: &str = "@NAME@";

#[derive(Default)]
struct Plugin;

impl plugin::Server for Plugin {
    /// Sees one request: its head (method, path below the route's prefix, headers) and body.
    /// Header names are strings; values are bytes (`Vec<u8>`), UTF-8 or not.
    fn handle(&self, mut head: Head, _body: &[u8]) -> Action {
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

plugin::export!(Plugin);
