//! Builds the kitchen-sink guest (`fuzz/guest`, client and server of `lrpc:kitchen/sink`) for
//! wasm32 and places it in `OUT_DIR`, where `src/roundtrip.rs` embeds it.

use std::env;
use std::path::PathBuf;
use std::process::Command;

const TARGET: &str = "wasm32-unknown-unknown";

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let root = manifest.parent().expect("fuzz/ is in the repository");
    let guest = manifest.join("guest");
    for p in [
        guest.join("src"),
        guest.join("Cargo.toml"),
        guest.join("build.rs"),
        root.join("presentation/src"),
        root.join("presentation/tests/wit"),
        root.join("guests/sdk/src"),
        root.join("host/abi/src"),
    ] {
        println!("cargo:rerun-if-changed={}", p.display());
    }
    let target_dir = root.join("target").join("guests");
    let mut cmd = Command::new(env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(&guest)
        .args(["build", "--release", "--target", TARGET, "--target-dir"])
        .arg(&target_dir);
    // The nested build must not see the instrumented build's flags or settings.
    for (k, _) in env::vars_os() {
        let Some(k) = k.to_str() else { continue };
        let keep = k == "CARGO_HOME" || k.starts_with("CARGO_NET") || k.starts_with("CARGO_HTTP");
        if (k.starts_with("CARGO_") && !keep)
            || matches!(
                k,
                "RUSTFLAGS"
                    | "RUSTDOCFLAGS"
                    | "RUSTC_WRAPPER"
                    | "RUSTC_WORKSPACE_WRAPPER"
                    | "RUSTC_BOOTSTRAP"
                    | "TARGET"
                    | "HOST"
                    | "OUT_DIR"
                    | "PROFILE"
                    | "OPT_LEVEL"
                    | "DEBUG"
                    | "NUM_JOBS"
            )
        {
            cmd.env_remove(k);
        }
    }
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("could not run cargo for the fuzz guest: {e}"));
    assert!(status.success(), "building fuzz/guest failed ({status})");
    let from = target_dir
        .join(TARGET)
        .join("release")
        .join("fuzz_kitchen.wasm");
    let to = PathBuf::from(env::var("OUT_DIR").expect("cargo sets it")).join("fuzz_kitchen.wasm");
    std::fs::copy(&from, &to).unwrap_or_else(|e| panic!("{}: {e}", from.display()));
}
