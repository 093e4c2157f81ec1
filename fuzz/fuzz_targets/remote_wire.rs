//! What arrives from the network at a remote binding or server: wire values of the
//! project's procedures, both translations, streams in pieces, and the session framing.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[global_allocator]
static ALLOC: lrpc_fuzz::alloc::Counting = lrpc_fuzz::alloc::Counting;

fuzz_target!(|data: &[u8]| lrpc_fuzz::remote::run(data));
