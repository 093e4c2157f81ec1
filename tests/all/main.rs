//! Integration tests: real guests built from `guests/`, a real wasmtime, real memfd windows.

mod calls;
mod component;
mod failures;
mod isolation;
mod lifecycle;
mod multi;
mod nesting;
mod presentation;
mod quotas;
mod remote;
mod reset;
mod stale;
mod threads;
mod urpc;

use lrpc_kernel::{Domain, Kernel, Status};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Tests that count process-wide resources (fds, mappings) run alone; every other test holds
/// this lock shared.
static PROCESS: RwLock<()> = RwLock::new(());

/// Taken by every test that does not count process-wide resources.
pub fn shared() -> RwLockReadGuard<'static, ()> {
    PROCESS.read().unwrap_or_else(|e| e.into_inner())
}

/// Taken by tests that count process-wide resources.
pub fn exclusive() -> RwLockWriteGuard<'static, ()> {
    PROCESS.write().unwrap_or_else(|e| e.into_inner())
}

/// Exports `interface` from `server` under the interface's own name with `options`.
pub fn export_with(
    kernel: &Kernel,
    server: &Domain,
    interface: &str,
    options: lrpc_kernel::ExportOptions,
) -> Result<(), lrpc_kernel::Error> {
    kernel.export_as(server, interface, interface, options)
}

/// A domain of `replicas` replicas of `wasm` on `kernel`.
pub fn replicated(kernel: &Kernel, name: &str, wasm: &[u8], replicas: usize) -> Domain {
    kernel
        .domain_with(
            name,
            wasm,
            lrpc_kernel::DomainOptions::default().with_replicas(replicas),
        )
        .unwrap()
}

/// A kernel with the faulty server exported under `lrpc:test/faulty` with `deadline`.
pub fn faulty_server(deadline: Option<std::time::Duration>) -> (Kernel, Domain) {
    let kernel = Kernel::new().unwrap();
    let server = kernel
        .domain("faulty", lrpc_artifacts::FAULTY_SERVER)
        .unwrap();
    export_with(
        &kernel,
        &server,
        "lrpc:test/faulty",
        lrpc_kernel::ExportOptions::default().with_deadline(deadline),
    )
    .unwrap();
    (kernel, server)
}

/// A kernel with the bench server exported and a bound bench client, both with the default
/// presentation.
pub fn bench_pair() -> (Kernel, Domain, Domain) {
    bench_pair_with(None, None)
}

/// The path of an example presentation file.
pub fn example(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../presentation/examples")
        .join(format!("{name}.toml"))
}

/// A bench pair whose client and server use the named example presentations.
pub fn bench_pair_with(client: Option<&str>, server: Option<&str>) -> (Kernel, Domain, Domain) {
    let kernel = Kernel::new().expect("kernel");
    let server_domain = kernel
        .domain("bench-server", lrpc_artifacts::BENCH_SERVER)
        .expect("server domain");
    let presentation = server.map(|n| {
        kernel
            .load_presentation(&example(n))
            .expect("server presentation")
    });
    crate::export_with(
        &kernel,
        &server_domain,
        "lrpc:bench/bench",
        lrpc_kernel::ExportOptions::default().with_presentation(presentation),
    )
    .expect("export");
    let presentations = client
        .map(|n| {
            vec![
                kernel
                    .load_presentation(&example(n))
                    .expect("client presentation"),
            ]
        })
        .unwrap_or_default();
    let client = kernel
        .domain_with(
            "bench-client",
            lrpc_artifacts::BENCH_CLIENT,
            lrpc_kernel::DomainOptions::default().with_presentations(presentations),
        )
        .expect("client domain");
    let s: i32 = client.call("bind", ()).expect("bind runs");
    assert_eq!(s, 0, "bind: {:?}", Status::try_from(s));
    (kernel, server_domain, client)
}

/// The status encoded as `-(status)` by the guests' exports.
pub fn neg(s: Status) -> i64 {
    -(s as i64)
}

/// The bytes bench-client sends: byte i is `(i*7+3) as u8`.
pub fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + 3) as u8).collect()
}

/// Lines of this process's memory map that map an A-stack memfd.
pub fn memfd_mappings() -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .expect("maps")
        .lines()
        .filter(|l| l.contains("memfd:lrpc-astack"))
        .count()
}

/// Open file descriptors of this process.
pub fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").expect("fd dir").count()
}

/// The next value of a xorshift stream: deterministic arguments for the raw-import tests.
pub fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// A 32-bit import argument from random `r`, mixing plausible values (inside the guest's
/// scratch buffer, within `near_span` bytes of `near`, the memory's last word) with absurd
/// ones (0, -1, `i32::MAX`, past the memory of `mem` bytes, anything).
pub fn pick32(r: u64, scratch: i32, near: i32, near_span: i32, mem: i64) -> i32 {
    match r % 8 {
        0 => 0,
        1 => -1,
        2 => i32::MAX,
        3 => scratch + (r >> 8) as i32 % 64,
        4 => near + (r >> 8) as i32 % near_span,
        5 => (mem - 8) as i32,
        6 => (r >> 32) as i32 % 70_000,
        _ => (r >> 16) as i32,
    }
}

/// A 64-bit handle argument from random `r`: `handle`, its neighbours, -1 or anything.
pub fn pick64(r: u64, handle: i64) -> i64 {
    match r % 4 {
        0 => handle,
        1 => handle + ((r >> 8) % 5) as i64 - 2,
        2 => -1,
        _ => (r >> 3) as i64,
    }
}
