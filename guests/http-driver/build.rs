//! Link arguments for a guest module.
fn main() {
    lrpc_presentation::build::wasm_link_args();
}
