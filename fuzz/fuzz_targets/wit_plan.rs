//! WIT text (arbitrary, and generated interfaces of every supported type) through the front
//! end, the plan, `combine` and the Rust back end.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| lrpc_fuzz::wit::run(data));
