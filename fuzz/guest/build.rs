//! Generates the kitchen-sink stubs (client and server) from the stub compiler's test WIT.
fn main() {
    lrpc_presentation::build::wasm_link_args();
    let out =
        std::path::PathBuf::from(std::env::var("OUT_DIR").expect("set by cargo")).join("stubs.rs");
    let wit = std::path::Path::new("../../presentation/tests/wit");
    if let Err(e) = lrpc_presentation::build::generate(wit, &["lrpc:kitchen/sink"], &out) {
        panic!("generating stubs: {e}");
    }
}
