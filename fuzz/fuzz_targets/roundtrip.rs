//! Client-encode → server-decode → reply through the kernel, against wasmtime's canonical
//! ABI for the same WIT type.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lrpc_fuzz::roundtrip::{Rig, RoundTripInput, run};
use std::sync::OnceLock;

fuzz_target!(|input: RoundTripInput| {
    static RIG: OnceLock<Rig> = OnceLock::new();
    run(
        RIG.get_or_init(|| Rig::new().expect("the round-trip rig")),
        &input,
    );
});
