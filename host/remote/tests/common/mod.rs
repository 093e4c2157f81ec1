//! What the remote tests share: a local kernel with the node's servers, and the A-stack
//! encodings of arguments.
#![allow(
    dead_code,
    reason = "each test file is its own crate and uses a part of these"
)]

use anyhow::Result;
use lrpc_artifacts as artifacts;
use lrpc_kernel::{DomainOptions, Kernel};
use lrpc_remote::{Endpoint, LocalPool, RemoteBinding, RemoteOptions};
use std::process::Child;
use std::sync::Arc;

/// A child process that is killed and reaped when dropped.
pub struct Reaped(pub Child);

impl Reaped {
    pub fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A loopback port nobody listens on now.
pub fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// A node listen address (`tcp:127.0.0.1:PORT`) on a free port, to start a node on and to
/// start it again on after it was killed.
pub fn free_tcp() -> Result<String> {
    Ok(format!("tcp:127.0.0.1:{}", free_port()?))
}

/// A binding to export `name` at `endpoint`, with the plan of the pool's export of it.
pub fn binding(
    pool: &LocalPool,
    endpoint: &Endpoint,
    name: &str,
    o: RemoteOptions,
) -> RemoteBinding {
    let plan = pool.export(name).expect("export").plan.clone();
    RemoteBinding::new(endpoint.clone(), name, plan, o)
}

pub const BENCH: &str = "lrpc:bench/bench";
pub const KV: &str = "lrpc:kv/store";

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// A kernel in this process with the same servers as a node, and a pool calling them.
pub fn local() -> Result<(Kernel, Arc<LocalPool>)> {
    let kernel = Kernel::new()?;
    let bench = kernel.domain_with(
        "bench-server",
        artifacts::BENCH_SERVER,
        DomainOptions::default().with_replicas(2),
    )?;
    kernel.export(&bench, BENCH)?;
    let kv = kernel.domain("kv-server", artifacts::KV_SERVER)?;
    kernel.export(&kv, KV)?;
    let pool = LocalPool::new(&kernel, &[(BENCH, BENCH), (KV, KV)], 2, 64)?;
    Ok((kernel, Arc::new(pool)))
}

pub fn proc_of(pool: &LocalPool, name: &str, function: &str) -> usize {
    let plan = &pool.export(name).expect("export").plan;
    plan.procs
        .iter()
        .position(|p| p.name == function)
        .expect("function")
}

// A-stack encodings of arguments.
pub fn u32s(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub fn string(s: &str) -> Vec<u8> {
    let mut b = u32s(&[s.len() as u32]);
    b.extend_from_slice(s.as_bytes());
    b
}

pub fn bytes(v: &[u8]) -> Vec<u8> {
    string_bytes(v)
}

pub fn string_bytes(v: &[u8]) -> Vec<u8> {
    let mut b = u32s(&[v.len() as u32]);
    b.extend_from_slice(v);
    b
}

/// Calls of the bench interface: (export, function, A-stack encoded arguments).
pub fn bench_calls() -> Vec<(&'static str, &'static str, Vec<u8>)> {
    let big: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
    vec![
        (BENCH, "null", vec![]),
        (BENCH, "add", u32s(&[40, 2])),
        (BENCH, "add", u32s(&[u32::MAX, 3])),
        (BENCH, "big-in", bytes(&[7; 200])),
        (BENCH, "big-in", bytes(&[])),
        (BENCH, "big-in-out", bytes(&big[..200])),
        (BENCH, "big-in-out", bytes(&big)),
    ]
}

/// Calls of the key-value interface, in an order whose answers depend on the ones before.
pub fn kv_calls() -> Vec<(&'static str, &'static str, Vec<u8>)> {
    let put = |k: &str, v: &[u8], kind: u8| {
        let mut a = string(k);
        a.extend(string_bytes(v));
        a.push(kind);
        a
    };
    let mut measure = u32s(&[u32::from('é')]);
    measure.extend_from_slice(&(-5i64).to_le_bytes());
    measure.extend_from_slice(&2.5f64.to_le_bytes());
    vec![
        (KV, "put", put("alpha", b"one", 0)),
        (KV, "put", put("beta", &[0, 1, 2, 255], 1)),
        (KV, "put", put("alpha", b"uno", 0)),
        (KV, "put", put("", b"", 0)),
        (KV, "get", string("alpha")),
        (KV, "get", string("missing")),
        (KV, "keys", vec![0]),
        (KV, "keys", [vec![1], string("al")].concat()),
        (KV, "stats", vec![]),
        (KV, "rights", vec![]),
        (KV, "measure", measure),
        (KV, "delete", string("beta")),
        (KV, "delete", string("beta")),
        (KV, "stats", vec![]),
    ]
}
