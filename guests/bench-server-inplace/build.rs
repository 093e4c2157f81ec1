//! Generates this guest's stubs from the project's WIT and its server presentation.
use std::path::Path;

fn main() {
    lrpc_presentation::build::wasm_link_args();
    let out =
        std::path::PathBuf::from(std::env::var("OUT_DIR").expect("set by cargo")).join("stubs.rs");
    let presentation = Path::new("../../presentation/examples/bench-server-inplace.toml");
    if let Err(e) = lrpc_presentation::build::generate_presented(
        "../../wit".as_ref(),
        &[("lrpc:bench/bench", None, Some(presentation))],
        &out,
    ) {
        panic!("generating stubs: {e}");
    }
}
