//! Generators, models and checks behind lrpc's fuzz targets. The targets in `fuzz_targets/`
//! are one call each into this library, so the logic here can be read, unit-tested and
//! reused for reproducers without libFuzzer.
//!
//! * [`presentation`]: presentation files (raw text and a structured generator) through the
//!   parser, `combine` and the Rust back end;
//! * [`wit`]: WIT text (raw and generated interfaces using every supported type) through the
//!   front end, the plan, `combine` and the Rust back end;
//! * [`entry`]: the generated server entry stubs of the real server guests, run on raw
//!   wasmtime with fuzzer bytes on the A-stack and in the out-of-band segment;
//! * [`roundtrip`]: values of the kitchen-sink interface encoded by a generated client stub,
//!   decoded by a generated server stub and echoed back, compared with the value wasmtime's
//!   canonical ABI carries for the same WIT type;
//! * [`ops`]: sequences of kernel operations from several client domains and threads,
//!   checked against a model of which calls must succeed;
//! * [`remote`]: what arrives from the network at `lrpc-remote`: wire values of the
//!   project's procedures (both translations, read off a stream in pieces) and the session
//!   framing of requests and replies;
//! * [`edge`]: the edge server's encoding of an HTTP request for a plugin, and its decoders
//!   of what plugins pass back, against the plan of `lrpc:http/plugin`;
//! * [`config`]: the deployment config parser on arbitrary text;
//! * [`reset`]: per-request isolation on arbitrary request sequences, each compared with
//!   fresh instances.
//!
//! [`alloc`] counts allocations, for the targets that check memory stays in proportion to
//! their input.
#![warn(missing_docs)]

pub mod alloc;
pub mod config;
pub mod edge;
pub mod entry;
pub mod ops;
pub mod presentation;
pub mod remote;
pub mod reset;
pub mod roundtrip;
pub mod wit;

use std::path::{Path, PathBuf};

/// The repository's root (the parent of `fuzz/`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("fuzz/ is inside the repository")
        .to_path_buf()
}

/// The project's WIT: `wit/` plus the kitchen-sink interface of the stub compiler's tests,
/// as `(file name, text)` pairs.
pub fn project_wit() -> Vec<(&'static str, &'static str)> {
    let mut v: Vec<(&str, &str)> = lrpc_kernel::domain::EMBEDDED_WIT.to_vec();
    v.push((
        "kitchen.wit",
        include_str!("../../presentation/tests/wit/kitchen.wit"),
    ));
    v
}
