//! Generates the stubs this guest uses from the project's WIT, under its server presentation
//! (`server.toml`: borrowed types).
fn main() {
    lrpc_presentation::build::guest_presented(&[(
        "lrpc:http/plugin",
        None,
        Some("server.toml".as_ref()),
    )]);
}
