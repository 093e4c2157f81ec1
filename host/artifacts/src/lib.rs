//! The project's test, example and benchmark guests, built from `guests/` by the build script
//! and embedded, so the CLI, tests and benchmarks run without any file beside the binary.
//!
//! The kernel (`lrpc`) builds no guests; this crate is what the runtime, the tests and the
//! benchmarks depend on for theirs (as wasmtime keeps its test programs apart).
#![deny(unsafe_code)]
#![warn(missing_docs)]

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
guest!(
    /// The edge server's driver: binds to the plugins of a chain and carries a request
    /// through them; also makes single raw calls for `lrpc run --call`.
    HTTP_DRIVER,
    "http_driver.wasm"
);
guest!(
    /// `lrpc:http/plugin@0.2.0`: answers 401 without a known bearer token, else passes the
    /// request on with an `x-user` header.
    HTTP_AUTH,
    "http_auth.wasm"
);
guest!(
    /// `lrpc:http/plugin@0.2.0`: drops a leading `/v1` from the path, tags the request,
    /// upper-cases the body on `x-upper`.
    HTTP_REWRITE,
    "http_rewrite.wasm"
);
guest!(
    /// `lrpc:http/plugin@0.2.0`: answers with a greeting and echoes the body.
    HTTP_HELLO,
    "http_hello.wasm"
);
guest!(
    /// `lrpc:http/plugin` (header values as strings): traps on `/trap`, loops on `/spin`,
    /// works on `/busy/<ms>`.
    HTTP_FAULTY,
    "http_faulty.wasm"
);
guest!(
    /// `lrpc:http/plugin` (header values as strings): keeps each request's `x-tenant` in a
    /// static, on the heap and in a counter, and answers with what it found from before.
    HTTP_LEAK,
    "http_leak.wasm"
);

guest!(
    /// A component (wit-bindgen, `wasm32-wasip2`) serving `lrpc:kv/store`.
    COMP_KV_SERVER,
    "comp_kv_server.wasm"
);
guest!(
    /// A component serving `lrpc:comp/probe` (`guests/comp-wit`): reaches for files,
    /// environment variables, arguments and sockets through WASI; traps, spins and grows on
    /// demand.
    COMP_PROBE,
    "comp_probe.wasm"
);
guest!(
    /// A component serving `lrpc:comp/driver`, importing `lrpc:comp/probe` and
    /// `lrpc:kv/store`.
    COMP_DRIVER,
    "comp_driver.wasm"
);
guest!(
    /// A component serving `lrpc:comp/holder`, importing `lrpc:comp/counters` (a resource
    /// whose handles cross to the server's domain).
    COMP_HOLDER,
    "comp_holder.wasm"
);
guest!(
    /// A component importing `lrpc:kv/store` and `lrpc:bench/bench` and forwarding every
    /// call to them (`lrpc:relay/forward`): a client of either kind of server.
    COMP_RELAY,
    "comp_relay.wasm"
);
guest!(
    /// A component serving `lrpc:bench/bench` with the core `bench-server`'s answers.
    COMP_BENCH_SERVER,
    "comp_bench_server.wasm"
);

#[cfg(feature = "python")]
/// Where the build put the Python key-value server (`guests/comp-py-kv`, a component made
/// by componentize-py). Not embedded: it carries a Python interpreter (about 18 MB).
pub const COMP_PY_KV_PATH: &str = concat!(env!("OUT_DIR"), "/guests/comp_py_kv.wasm");

guest!(
    /// The hello handler as a `wasi:http/incoming-handler` component (WASI preview 2): the
    /// handler at the end of an edge chain, served with wasmtime-wasi-http, and the
    /// `wasmtime serve` peer of the edge benchmark.
    HTTP_WASI_HELLO,
    "http_wasi_hello.wasm"
);
guest!(
    /// A `wasi:http` handler that serves one request per instance and traps on a second, as
    /// components written for `wasmtime serve` may; `/count` answers the instance's count.
    HTTP_WASI_ONCE,
    "http_wasi_once.wasm"
);
guest!(
    /// A `wasi:http/incoming-handler` component that forwards each request to the URL in its
    /// `x-target` header with `wasi:http/outgoing-handler`: the edge's outgoing HTTP tests.
    HTTP_WASI_PROXY,
    "http_wasi_proxy.wasm"
);
guest!(
    /// A `wasi:http/incoming-handler` component that streams bodies both ways (`/echo`,
    /// `/gen/<MiB>`), answers without reading (`/ignore`), and leaves its body unfinished
    /// (`/hang`, `/leave`): the edge's streaming tests.
    HTTP_WASI_STREAM,
    "http_wasi_stream.wasm"
);
guest!(
    /// A WASI 0.3 (p3) `wasi:http/service` handler: `hello from p3` to a GET, the body
    /// streamed back to a POST; `/trap` traps and `/spin` never returns. Built for
    /// `wasm32-wasip2`, so besides `wasi:http@0.3.0` it imports the p2 `wasi:cli` of Rust's std.
    HTTP_WASI_P3_HELLO,
    "http_wasi_p3_hello.wasm"
);
guest!(
    /// `lrpc:http/plugin@0.2.0` as a component: stamps the request's path and headers, answers 403
    /// under `/deny`; `/trap` and `/spin` fail.
    COMP_HTTP_STAMP,
    "comp_http_stamp.wasm"
);

/// The embedded guests by name (the names deployment configs use for built-in guests).
pub const BY_NAME: &[(&str, &[u8])] = &[
    ("bench-server", BENCH_SERVER),
    ("bench-client", BENCH_CLIENT),
    ("bench-server-inplace", BENCH_SERVER_INPLACE),
    ("bench-client-into", BENCH_CLIENT_INTO),
    ("kv-server", KV_SERVER),
    ("kv-client", KV_CLIENT),
    ("faulty-server", FAULTY_SERVER),
    ("faulty-client", FAULTY_CLIENT),
    ("node", NODE),
    ("hostile", HOSTILE),
    ("http-driver", HTTP_DRIVER),
    ("http-auth", HTTP_AUTH),
    ("http-rewrite", HTTP_REWRITE),
    ("http-hello", HTTP_HELLO),
    ("http-faulty", HTTP_FAULTY),
    ("http-leak", HTTP_LEAK),
    ("comp-kv-server", COMP_KV_SERVER),
    ("comp-probe", COMP_PROBE),
    ("comp-driver", COMP_DRIVER),
    ("comp-holder", COMP_HOLDER),
    ("comp-relay", COMP_RELAY),
    ("comp-bench-server", COMP_BENCH_SERVER),
    ("http-wasi-hello", HTTP_WASI_HELLO),
    ("http-wasi-once", HTTP_WASI_ONCE),
    ("http-wasi-proxy", HTTP_WASI_PROXY),
    ("http-wasi-stream", HTTP_WASI_STREAM),
    ("http-wasi-p3-hello", HTTP_WASI_P3_HELLO),
    ("comp-http-stamp", COMP_HTTP_STAMP),
];

/// The embedded guest called `name` (as in [`BY_NAME`]).
pub fn by_name(name: &str) -> Option<&'static [u8]> {
    BY_NAME.iter().find(|(n, _)| *n == name).map(|(_, w)| *w)
}
