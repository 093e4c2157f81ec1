//! The kernel is a dependency anyone can take: it builds no guests, so an embedder needs Rust
//! alone (no wasm targets, no Python, no nested cargo).

use std::path::Path;
use std::process::Command;

#[test]
fn the_kernel_has_no_build_script_and_no_guest_crate_below_it() {
    let host = Path::new(env!("CARGO_MANIFEST_DIR"));
    assert!(!host.join("build.rs").exists(), "host/build.rs is back");
    let manifest = std::fs::read_to_string(host.join("Cargo.toml")).expect("host/Cargo.toml");
    assert!(
        !manifest.contains("build ="),
        "the kernel names a build script"
    );

    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "tree",
            "--offline",
            "-p",
            "lrpc-kernel",
            "-e",
            "normal,build",
        ])
        .args(["--prefix", "none", "--format", "{p}"])
        .current_dir(host)
        .output()
        .expect("run cargo tree");
    let tree = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(tree.contains("lrpc-kernel"), "{tree}");
    assert!(tree.contains("wasmtime"), "{tree}");
    for guest_builder in ["lrpc-artifacts", "lrpc-sdk"] {
        assert!(
            !tree.contains(guest_builder),
            "the kernel depends on {guest_builder}:\n{tree}"
        );
    }
}
