//! Per-request isolation on arbitrary request sequences: after each request an isolated
//! domain shows what fresh instances show.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| lrpc_fuzz::reset::run(data));
