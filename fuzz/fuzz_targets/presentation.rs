//! The presentation parser on arbitrary and structured files: a typed error or a checked
//! presentation, never a panic.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| lrpc_fuzz::presentation::run(data));
