//! The edge server's HTTP request encoding for plugins, and its decoders of what plugins
//! pass back.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[global_allocator]
static ALLOC: lrpc_fuzz::alloc::Counting = lrpc_fuzz::alloc::Counting;

fuzz_target!(|data: &[u8]| lrpc_fuzz::edge::run(data));
