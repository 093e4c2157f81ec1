//! Build steps of the benchmarks:
//! * compiles `proto/bench.proto` for the gRPC peer, with the protoc shipped by
//!   `protoc-bin-vendored` (nothing to install);
//! * turns the core modules of the component-model peers (built from `guests/component-*` by
//!   `lrpc-artifacts`' build script, which publishes their directory as `DEP_LRPC_GUESTS_DIR`) into
//!   components with `wit-component`, and composes client and server into one component with
//!   `wac-graph`, so that wasmtime links them with fused adapters.

use std::path::{Path, PathBuf};
use wac_graph::{CompositionGraph, EncodeOptions, types::Package};

fn main() {
    let protoc = protoc_bin_vendored::protoc_bin_path().expect("vendored protoc");
    println!("cargo:rerun-if-changed=proto/bench.proto");
    // SAFETY: a build script is single threaded; nothing else reads the environment while the
    // variable is set.
    unsafe { std::env::set_var("PROTOC", protoc) };
    tonic_prost_build::configure()
        .compile_protos(&["proto/bench.proto"], &["proto"])
        .expect("compiling proto/bench.proto");

    let guests = PathBuf::from(
        std::env::var("DEP_LRPC_GUESTS_DIR")
            .expect("lrpc-artifacts publishes the guest directory (links = \"lrpc_guests\")"),
    );
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("set by cargo"));
    println!("cargo:rerun-if-env-changed=DEP_LRPC_GUESTS_DIR");
    let server = componentize(&guests.join("component_server.wasm"));
    let client = componentize(&guests.join("component_client.wasm"));
    let composed = compose(&client, &server).expect("composing the component peers");
    for (name, bytes) in [
        ("component_server.wasm", &server),
        ("component_client.wasm", &client),
        ("component_composed.wasm", &composed),
    ] {
        std::fs::write(out.join(name), bytes).expect("writing a component");
    }
}

/// A component made of the core module at `path` and the WIT world wit-bindgen embedded in it.
fn componentize(path: &Path) -> Vec<u8> {
    println!("cargo:rerun-if-changed={}", path.display());
    let module = std::fs::read(path)
        .unwrap_or_else(|e| panic!("reading the core module {}: {e}", path.display()));
    wit_component::ComponentEncoder::default()
        .module(&module)
        .and_then(|e| e.validate(true).encode())
        .unwrap_or_else(|e| panic!("making a component of {}: {e:#}", path.display()))
}

/// One component in which an instance of `client` imports `lrpc:bench/bench` from an instance
/// of `server`, exporting the client's `lrpc:peers/runner`.
fn compose(client: &[u8], server: &[u8]) -> anyhow::Result<Vec<u8>> {
    const BENCH: &str = "lrpc:bench/bench";
    const RUNNER: &str = "lrpc:peers/runner";
    let mut graph = CompositionGraph::new();
    let s = Package::from_bytes(
        "lrpc:bench-server",
        None,
        server.to_vec(),
        graph.types_mut(),
    )?;
    let s = graph.register_package(s)?;
    let c = Package::from_bytes(
        "lrpc:bench-client",
        None,
        client.to_vec(),
        graph.types_mut(),
    )?;
    let c = graph.register_package(c)?;
    let si = graph.instantiate(s);
    let ci = graph.instantiate(c);
    let bench = graph.alias_instance_export(si, BENCH)?;
    graph.set_instantiation_argument(ci, BENCH, bench)?;
    let runner = graph.alias_instance_export(ci, RUNNER)?;
    graph.export(runner, RUNNER)?;
    Ok(graph.encode(EncodeOptions::default())?)
}
