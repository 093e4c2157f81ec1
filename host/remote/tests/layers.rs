//! The remote crate's modules form layers: each imports only modules below it.

#[path = "../../tests/layering/mod.rs"]
mod layering;

/// Bottom to top: a call's trace context; the wire encoding and errors; TLS and who a caller is; sessions and the
/// local driver pool; reading values; the server, then the NATS transport on top of it; endpoints, the client's kept
/// connections and the client; what is built on the client.
const ORDER: &[&str] = &[
    "trace", "wire", "error", "tls", "session", "local", "values", "server", "nats", "endpoint",
    "pool", "client", "forward", "multi", "node",
];

#[test]
fn every_module_imports_only_modules_below_it() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    layering::check(&src, ORDER);
}
