//! Generates the stubs of `lrpc:http/plugin` from the lrpc project's WIT (`wit/http.wit`)
//! into `$OUT_DIR/stubs.rs`, and gives the linker the exports the host needs.
fn main() {
    lrpc_presentation::build::guest(&["lrpc:http/plugin"]);
}
