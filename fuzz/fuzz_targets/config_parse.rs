//! The deployment config parser on arbitrary text.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| lrpc_fuzz::config::run(data));
