//! Compiles `proto/bench.proto` for the gRPC peer, with the protoc shipped by
//! `protoc-bin-vendored` (nothing to install).

fn main() {
    let protoc = protoc_bin_vendored::protoc_bin_path().expect("vendored protoc");
    println!("cargo:rerun-if-changed=proto/bench.proto");
    // SAFETY: a build script is single threaded; nothing else reads the environment while the
    // variable is set.
    unsafe { std::env::set_var("PROTOC", protoc) };
    tonic_prost_build::configure()
        .compile_protos(&["proto/bench.proto"], &["proto"])
        .expect("compiling proto/bench.proto");
}
