//! Linker arguments shared by every guest (see `lrpc_presentation::build::wasm_link_args`,
//! which this guest, having no stubs, does not depend on): export a growable function table.
fn main() {
    if std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("wasm32") {
        println!("cargo::rustc-link-arg=--export-table");
        println!("cargo::rustc-link-arg=--growable-table");
    }
}
