//! Builds the guest domains under `guests/` from source for `wasm32-unknown-unknown`, and
//! the component guests (`guests/comp-*`) for `wasm32-wasip2` (rustc links those into
//! components itself), and places them in `OUT_DIR/guests/`, where `src/lib.rs` embeds them.
//! With the `python` feature it also makes the Python guest a component (componentize-py).

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

const TARGET: &str = "wasm32-unknown-unknown";
const GUESTS: &[&str] = &[
    "bench_server",
    "bench_client",
    "bench_server_inplace",
    "bench_client_into",
    "kv_server",
    "kv_client",
    "faulty_server",
    "faulty_client",
    "node",
    "hostile",
    "http_driver",
    "http_auth",
    "http_rewrite",
    "http_hello",
    "http_faulty",
    "http_leak",
];
/// Core modules of the component-model peers; not embedded by the host, but published to
/// dependents (the benches) through `DEP_LRPC_GUESTS_DIR`.
const COMPONENT_CORES: &[&str] = &["component_server", "component_client"];
/// Component guests, built for WASI preview 2: run by the kernel as component domains.
const COMPONENT_TARGET: &str = "wasm32-wasip2";
const COMPONENT_GUESTS: &[&str] = &[
    "comp-kv-server",
    "comp-probe",
    "comp-driver",
    "comp-holder",
    "comp-relay",
    "comp-bench-server",
    "http-wasi-hello",
    "http-wasi-once",
    "http-wasi-proxy",
    "http-wasi-stream",
    "http-wasi-p3-hello",
    "comp-http-stamp",
];

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let root = manifest
        .ancestors()
        .nth(2)
        .expect("host/artifacts/ is inside the workspace")
        .to_path_buf();
    let guests = root.join("guests");
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets it")).join("guests");
    std::fs::create_dir_all(&out).expect("create OUT_DIR/guests");

    for dir in [
        "wit",
        "presentation/src",
        "presentation/Cargo.toml",
        "host/abi",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(dir).display());
    }
    println!(
        "cargo:rerun-if-changed={}",
        guests.join("Cargo.toml").display()
    );
    println!(
        "cargo:rerun-if-changed={}",
        guests.join("Cargo.lock").display()
    );
    if let Ok(entries) = std::fs::read_dir(&guests) {
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() && p.file_name().is_some_and(|n| n != "target") {
                println!("cargo:rerun-if-changed={}", p.display());
            }
        }
    }

    ensure_target(TARGET);
    ensure_target(COMPONENT_TARGET);

    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let target_dir = root.join("target").join("guests");
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&guests)
        .args(["build", "--release", "--locked", "--target", TARGET])
        .arg("--manifest-path")
        .arg(guests.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target_dir);
    scrub_env(&mut cmd);
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("could not run cargo to build the guests: {e}"));
    if !status.success() {
        panic!(
            "building the guests in {} failed ({status})",
            guests.display()
        );
    }
    let mut cmd = Command::new(env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(&guests)
        .args([
            "build",
            "--release",
            "--locked",
            "--target",
            COMPONENT_TARGET,
        ])
        .arg("--manifest-path")
        .arg(guests.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target_dir);
    for g in COMPONENT_GUESTS {
        cmd.args(["-p", g]);
    }
    scrub_env(&mut cmd);
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("could not run cargo to build the component guests: {e}"));
    if !status.success() {
        panic!("building the component guests for {COMPONENT_TARGET} failed ({status})");
    }
    let components = target_dir.join(COMPONENT_TARGET).join("release");
    for g in COMPONENT_GUESTS {
        let file = format!("{}.wasm", g.replace('-', "_"));
        std::fs::copy(components.join(&file), out.join(&file)).unwrap_or_else(|e| {
            panic!(
                "component guest {} missing: {e}",
                components.join(&file).display()
            )
        });
    }
    if env::var_os("CARGO_FEATURE_PYTHON").is_some() {
        build_python_guest(&guests.join("comp-py-kv"), &out.join("comp_py_kv.wasm"));
    }
    let built = target_dir.join(TARGET).join("release");
    for g in GUESTS.iter().chain(COMPONENT_CORES) {
        let from = built.join(format!("{g}.wasm"));
        let to = out.join(format!("{g}.wasm"));
        std::fs::copy(&from, &to)
            .unwrap_or_else(|e| panic!("guest module {} missing: {e}", from.display()));
    }
    println!("cargo::metadata=dir={}", out.display());
}

/// The componentize-py version the Python guest is built with (`scripts/test.sh` installs it from PyPI).
const COMPONENTIZE_PY: &str = "0.25.1";

/// Makes a component of the Python guest in `dir` (`app.py`, world `kv-server` of `dir/wit`)
/// with componentize-py. A missing componentize-py is a build error that says how to install
/// it, never a skipped guest.
fn build_python_guest(dir: &Path, to: &Path) {
    let exe = env::var("COMPONENTIZE_PY").unwrap_or_else(|_| "componentize-py".into());
    println!("cargo:rerun-if-env-changed=COMPONENTIZE_PY");
    let version = Command::new(&exe).arg("--version").output();
    match version {
        Ok(o) if o.status.success() => {
            let v = String::from_utf8_lossy(&o.stdout);
            if !v.contains(COMPONENTIZE_PY) {
                println!(
                    "cargo::warning=componentize-py {COMPONENTIZE_PY} is the tested version; found {}",
                    v.trim()
                );
            }
        }
        _ => panic!(
            "`{exe}` is needed to build the Python guest {} (only the tests build it) and was \
             not found: `scripts/test.sh` installs componentize-py {COMPONENTIZE_PY} into \
             target/tools/venv (or set COMPONENTIZE_PY to its path)",
            dir.display()
        ),
    }
    let status = Command::new(&exe)
        .arg("-d")
        .arg(dir.join("wit"))
        .args(["-w", "kv-server", "componentize", "-p"])
        .arg(dir)
        .args(["app", "-o"])
        .arg(to)
        .status()
        .unwrap_or_else(|e| panic!("could not run {exe}: {e}"));
    if !status.success() {
        panic!(
            "componentize-py failed to build {} ({status})",
            dir.display()
        );
    }
}

/// The nested cargo must not inherit the outer build's flags, wrappers or target settings.
fn scrub_env(cmd: &mut Command) {
    for (k, _) in env::vars_os() {
        let Some(k) = k.to_str() else { continue };
        let keep = matches!(k, "CARGO_HOME" | "CARGO_NET_OFFLINE")
            || k.starts_with("CARGO_REGISTRIES_")
            || k.starts_with("CARGO_HTTP_")
            || k.starts_with("CARGO_NET_");
        let drop = (k.starts_with("CARGO_") && !keep)
            || matches!(
                k,
                "RUSTFLAGS"
                    | "RUSTDOCFLAGS"
                    | "RUSTC_WRAPPER"
                    | "RUSTC_WORKSPACE_WRAPPER"
                    | "MAKEFLAGS"
                    | "MFLAGS"
                    | "TARGET"
                    | "HOST"
                    | "OUT_DIR"
                    | "PROFILE"
                    | "OPT_LEVEL"
                    | "DEBUG"
                    | "NUM_JOBS"
            );
        if drop {
            cmd.env_remove(k);
        }
    }
}

/// Installs a wasm target through rustup when the toolchain lacks it.
fn ensure_target(target: &str) {
    let rustc = env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let installed = Command::new(&rustc)
        .args(["--print", "target-libdir", "--target", target])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
        .is_some_and(|p| has_std(&p));
    if installed {
        return;
    }
    let added = Command::new("rustup")
        .args(["target", "add", target])
        .status();
    match added {
        Ok(s) if s.success() => {}
        Ok(s) => panic!(
            "the Rust target {target} is missing and `rustup target add {target}` failed ({s}); \
             install it and build again"
        ),
        Err(e) => panic!(
            "the Rust target {target} is missing and rustup could not be run ({e}); \
             install the target for this toolchain and build again"
        ),
    }
}

fn has_std(libdir: &Path) -> bool {
    std::fs::read_dir(libdir).is_ok_and(|d| {
        d.flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with("libstd-"))
    })
}
