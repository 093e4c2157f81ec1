//! Generates this guest's stubs from the project's WIT and its server presentation.
fn main() {
    lrpc_presentation::build::guest_presented(&[(
        "lrpc:bench/bench",
        None,
        Some("../../presentation/examples/bench-server-inplace.toml".as_ref()),
    )]);
}
