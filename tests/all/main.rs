//! Integration tests: real guests built from `guests/`, a real wasmtime, real memfd windows.

mod calls;
mod component;
mod failures;
mod isolation;
mod lifecycle;
mod nesting;
mod presentation;
mod quotas;
mod stale;
mod threads;
mod urpc;

use lrpc::{Domain, Kernel, Status};
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
    options: lrpc::ExportOptions,
) -> Result<(), lrpc::Error> {
    kernel.export_as(server, interface, interface, options)
}

/// A kernel with the faulty server exported under `lrpc:test/faulty` with `deadline`.
pub fn faulty_server(deadline: Option<std::time::Duration>) -> (Kernel, Domain) {
    let kernel = Kernel::new().unwrap();
    let server = kernel
        .domain("faulty", lrpc::artifacts::FAULTY_SERVER)
        .unwrap();
    export_with(
        &kernel,
        &server,
        "lrpc:test/faulty",
        lrpc::ExportOptions {
            deadline,
            ..Default::default()
        },
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
        .domain("bench-server", lrpc::artifacts::BENCH_SERVER)
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
        lrpc::ExportOptions {
            presentation,
            ..Default::default()
        },
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
            lrpc::artifacts::BENCH_CLIENT,
            lrpc::DomainOptions {
                presentations,
                ..Default::default()
            },
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
