//! Generates the stubs of `lrpc:http/plugin@0.2.0` (header values as bytes) from the lrpc
//! project's WIT (`wit/http-bytes.wit`)
//! into `$OUT_DIR/stubs.rs`, and gives the linker the exports the host needs.
fn main() {
    lrpc_presentation::build::guest(&["lrpc:http/plugin@0.2.0"]);
}
