//! Integration tests: real guests built from `guests/`, a real wasmtime, real memfd windows.

mod calls;
mod failures;
mod isolation;
mod lifecycle;
mod nesting;
mod threads;

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

/// A kernel with the bench server exported and a bound bench client.
pub fn bench_pair() -> (Kernel, Domain, Domain) {
    let kernel = Kernel::new().expect("kernel");
    let server = kernel
        .domain("bench-server", lrpc::artifacts::BENCH_SERVER)
        .expect("server domain");
    kernel.export(&server, "lrpc:bench/bench").expect("export");
    let client = kernel
        .domain("bench-client", lrpc::artifacts::BENCH_CLIENT)
        .expect("client domain");
    let s: i32 = client.call("bind", ()).expect("bind runs");
    assert_eq!(s, 0, "bind: {:?}", Status::try_from(s));
    (kernel, server, client)
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
