//! Generates the stubs this guest uses from the project's WIT.
fn main() {
    lrpc_presentation::build::guest(&["lrpc:kv/store"]);
}
