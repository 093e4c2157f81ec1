//! This guest has no stubs; it needs only the linker arguments every guest needs.
fn main() {
    lrpc_presentation::build::wasm_link_args();
}
