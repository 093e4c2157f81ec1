//! Benchmarks of the lrpc kernel (`cargo bench -p lrpc-benches`).
//!
//! * `table_iv`: LRPC's Table IV (Null, Add, BigIn, BigInOut) on the isolated path, with two
//!   floors in the same group: an intra-instance call and wasmtime's host→wasm typed call.
//! * `threads`: call throughput with one and two calling threads (LRPC Fig. 2).
//!
//! Calls are driven by loops inside the client guest, so a sample measures `iters` calls
//! plus one host→client entry; criterion divides by `iters`.

use lrpc::{Domain, DomainOptions, Kernel};

/// A kernel with a bench server (`replicas` instances) and a bound bench client.
pub fn setup(replicas: usize) -> (Kernel, Domain, Domain) {
    setup_with(replicas, lrpc::Serving::Migrate)
}

/// Like [`setup`], with the server run as `serving` says.
pub fn setup_with(replicas: usize, serving: lrpc::Serving) -> (Kernel, Domain, Domain) {
    let kernel = Kernel::new().expect("kernel");
    let server = kernel
        .domain_with(
            "bench-server",
            lrpc::artifacts::BENCH_SERVER,
            DomainOptions {
                replicas,
                ..Default::default()
            },
        )
        .expect("server");
    kernel
        .export_as(
            &server,
            "lrpc:bench/bench",
            "lrpc:bench/bench",
            lrpc::ExportOptions {
                serving,
                ..Default::default()
            },
        )
        .expect("export");
    let client = new_client(&kernel, "bench-client");
    (kernel, server, client)
}

/// Another bound bench client.
pub fn new_client(kernel: &Kernel, name: &str) -> Domain {
    let client = kernel
        .domain(name, lrpc::artifacts::BENCH_CLIENT)
        .expect("client");
    let s: i32 = client.call("bind", ()).expect("bind");
    assert_eq!(s, 0, "bind failed with status {s}");
    client
}

/// A plain wasmtime `Store` (no kernel) on the kernel's engine with an empty exported
/// function: the floor for a host→wasm typed call.
pub fn raw_floor(kernel: &Kernel) -> (wasmtime::Store<()>, wasmtime::TypedFunc<(), ()>) {
    let module = wasmtime::Module::new(kernel.engine(), r#"(module (func (export "f")))"#)
        .expect("floor module");
    let mut store = wasmtime::Store::new(kernel.engine(), ());
    store.set_epoch_deadline(u64::MAX / 2);
    let instance = wasmtime::Instance::new(&mut store, &module, &[]).expect("instantiate");
    let f = instance
        .get_typed_func::<(), ()>(&mut store, "f")
        .expect("export");
    (store, f)
}
