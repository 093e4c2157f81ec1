//! The runtime's modules form layers: each imports only modules below it.

#[path = "../../tests/layering/mod.rs"]
mod layering;

/// Bottom to top: TLS; a request body's clock; the HTTP listener and its budgets; the
/// config and value text; metrics; the HTTP records; supervision and the deployment's error;
/// serving to the network and `wasi:http` handlers; the deployment; reload and the edge
/// server on top; the command's own parts.
const ORDER: &[&str] = &[
    "tls",
    "body_rate",
    "listener",
    "config",
    "value",
    "metrics",
    "http",
    "supervise",
    "network",
    "wasi_http",
    "deploy",
    "reload",
    "edge",
    "demo",
    "template",
];

#[test]
fn every_module_imports_only_modules_below_it() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    // `driver` is the root's re-export of the `lrpc-driver` crate.
    layering::check(&src, ORDER, &["driver"]);
}
