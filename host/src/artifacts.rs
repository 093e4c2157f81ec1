//! The project's guest modules, built from `guests/` by the build script and embedded, so the
//! CLI, tests and benchmarks run without any file beside the binary.

macro_rules! guest {
    ($(#[$doc:meta])* $name:ident, $file:literal) => {
        $(#[$doc])*
        pub const $name: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/guests/", $file));
    };
}

guest!(
    /// Serves `lrpc:bench/bench` (Null, Add, BigIn, BigInOut); exports `floor_null`.
    BENCH_SERVER,
    "bench_server.wasm"
);
guest!(
    /// Client of `lrpc:bench/bench` with call loops for tests and benchmarks.
    BENCH_CLIENT,
    "bench_client.wasm"
);
guest!(
    /// Serves `lrpc:bench/bench` under `presentation/examples/bench-server-inplace.toml`:
    /// byte arrays read in place, big-in-out written straight onto the A-stack.
    BENCH_SERVER_INPLACE,
    "bench_server_inplace.wasm"
);
guest!(
    /// Client of `lrpc:bench/bench` under `presentation/examples/bench-client-into.toml`: it
    /// provides the buffer for big-in-out's result.
    BENCH_CLIENT_INTO,
    "bench_client_into.wasm"
);
guest!(
    /// Serves `lrpc:kv/store`, an in-memory key-value store.
    KV_SERVER,
    "kv_server.wasm"
);
guest!(
    /// Client of `lrpc:kv/store` with a self-test of every type of the interface.
    KV_CLIENT,
    "kv_client.wasm"
);
guest!(
    /// Serves `lrpc:test/faulty`: echo, trap, loop, busy work.
    FAULTY_SERVER,
    "faulty_server.wasm"
);
guest!(
    /// Client of `lrpc:test/faulty`.
    FAULTY_CLIENT,
    "faulty_client.wasm"
);
guest!(
    /// Serves and calls `lrpc:test/node` (call chains and call-backs).
    NODE,
    "node.wasm"
);
guest!(
    /// Speaks the raw kernel ABI: forged handles, stray A-stacks, memory scans.
    HOSTILE,
    "hostile.wasm"
);
