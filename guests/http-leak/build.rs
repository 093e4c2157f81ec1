//! Generates the stubs this guest uses from the project's WIT.
fn main() {
    lrpc_presentation::build::wasm_link_args();
    let out =
        std::path::PathBuf::from(std::env::var("OUT_DIR").expect("set by cargo")).join("stubs.rs");
    if let Err(e) =
        lrpc_presentation::build::generate("../../wit".as_ref(), &["lrpc:http/plugin"], &out)
    {
        panic!("generating stubs: {e}");
    }
}
