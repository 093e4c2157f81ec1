//! Generates the stubs this guest uses from the project's WIT, under its server presentation
//! (`server.toml`: borrowed types).
fn main() {
    lrpc_presentation::build::guest_presented(&[(
        "lrpc:http/plugin@0.2.0",
        None,
        Some("server.toml".as_ref()),
    )]);
}
