//! Generates this guest's stubs from the project's WIT and its client presentation.
fn main() {
    lrpc_presentation::build::guest_presented(&[(
        "lrpc:bench/bench",
        Some("../../presentation/examples/bench-client-into.toml".as_ref()),
        None,
    )]);
}
