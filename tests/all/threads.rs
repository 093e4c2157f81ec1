//! Calls from several threads at once are correct. Domains are locked one by one (one Store
//! each), never by a kernel-wide lock: two threads calling two replicas of a server, or two
//! different servers, run in parallel (the scaling is shown by the `threads` benchmark).

use lrpc_kernel::{Domain, Kernel};
use std::sync::{Arc, Barrier};

fn client(kernel: &Kernel, name: &str) -> Domain {
    let c = kernel.domain(name, lrpc_artifacts::BENCH_CLIENT).unwrap();
    assert_eq!(c.call::<(), i32>("bind", ()).unwrap(), 0);
    c
}

fn hammer(clients: Vec<Domain>) {
    let barrier = Arc::new(Barrier::new(clients.len()));
    let threads: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(t, c)| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                for i in 0..2_000i32 {
                    let r: i64 = c.call("add", (i, t as i32)).unwrap();
                    assert_eq!(r, i64::from(i + t as i32));
                    if i % 100 == 0 {
                        let len = (i as usize * 37) % 5000;
                        let ok: i32 = c.call("big_in_out", (len as i32, 1)).unwrap();
                        assert_eq!(ok, 0, "thread {t}, {len} bytes");
                    }
                }
                let s: i32 = c.call("null", (20_000,)).unwrap();
                assert_eq!(s, 0);
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn two_threads_call_one_replicated_server_at_once() {
    let _guard = crate::shared();
    let kernel = Kernel::new().unwrap();
    let server = crate::replicated(&kernel, "bench-server", lrpc_artifacts::BENCH_SERVER, 2);
    kernel.export(&server, "lrpc:bench/bench").unwrap();
    hammer(vec![client(&kernel, "c1"), client(&kernel, "c2")]);
    assert!(!server.is_terminated());
}

#[test]
fn two_threads_share_a_single_replica_server_correctly() {
    let _guard = crate::shared();
    let kernel = Kernel::new().unwrap();
    let server = kernel
        .domain("bench-server", lrpc_artifacts::BENCH_SERVER)
        .unwrap();
    kernel.export(&server, "lrpc:bench/bench").unwrap();
    hammer(vec![client(&kernel, "c1"), client(&kernel, "c2")]);
}

#[test]
fn two_pairs_on_two_threads_are_independent() {
    let _guard = crate::shared();
    let kernel = Kernel::new().unwrap();
    let s1 = kernel.domain("s1", lrpc_artifacts::KV_SERVER).unwrap();
    kernel.export(&s1, "lrpc:kv/store").unwrap();
    let server = kernel
        .domain("bench-server", lrpc_artifacts::BENCH_SERVER)
        .unwrap();
    kernel.export(&server, "lrpc:bench/bench").unwrap();
    let kv = kernel
        .domain("kv-client", lrpc_artifacts::KV_CLIENT)
        .unwrap();
    let bench = client(&kernel, "c1");
    let t = std::thread::spawn(move || {
        assert_eq!(kv.call::<(), i32>("selftest", ()).unwrap(), 0);
        for len in [10, 2000, 70_000, 10, 2000, 70_000] {
            assert_eq!(kv.call::<(i32,), i32>("put_get", (len,)).unwrap(), 0);
        }
    });
    hammer(vec![bench]);
    t.join().unwrap();
}

#[test]
fn a_server_on_its_own_thread_answers_by_message() {
    let _guard = crate::shared();
    let kernel = Kernel::new().unwrap();
    let server = kernel
        .domain("bench-server", lrpc_artifacts::BENCH_SERVER)
        .unwrap();
    crate::export_with(
        &kernel,
        &server,
        "lrpc:bench/bench",
        lrpc_kernel::ExportOptions::default().with_serving(lrpc_kernel::Serving::OwnThread),
    )
    .unwrap();
    let c = client(&kernel, "c1");
    assert_eq!(c.call::<(i32, i32), i64>("add", (40, 2)).unwrap(), 42);
    assert_eq!(c.call::<(i32,), i32>("null", (100,)).unwrap(), 0);
    for len in [0, 200, 1488, 1489, 5000, 70_000] {
        assert_eq!(
            c.call::<(i32, i32), i32>("big_in_out", (len, 2)).unwrap(),
            0,
            "{len} bytes"
        );
    }
    hammer(vec![client(&kernel, "c2"), client(&kernel, "c3")]);
}

#[test]
fn a_server_thread_that_traps_fails_the_call() {
    let _guard = crate::shared();
    let kernel = Kernel::new().unwrap();
    let server = kernel
        .domain("faulty", lrpc_artifacts::FAULTY_SERVER)
        .unwrap();
    crate::export_with(
        &kernel,
        &server,
        "lrpc:test/faulty",
        lrpc_kernel::ExportOptions::default().with_serving(lrpc_kernel::Serving::OwnThread),
    )
    .unwrap();
    let c = kernel
        .domain("faulty-client", lrpc_artifacts::FAULTY_CLIENT)
        .unwrap();
    assert_eq!(c.call::<(), i32>("bind", ()).unwrap(), 0);
    assert_eq!(c.call::<(i32,), i64>("echo", (1,)).unwrap(), 2);
    assert_eq!(
        c.call::<(), i32>("crash", ()).unwrap(),
        lrpc_kernel::Status::ServerTrapped as i32
    );
    assert!(server.is_terminated());
    assert!(!c.is_terminated());
}

#[test]
fn domains_created_at_once_on_several_threads_get_distinct_ids() {
    let _guard = crate::shared();
    let kernel = Kernel::new().unwrap();
    let domains: Vec<lrpc_kernel::Domain> = std::thread::scope(|s| {
        let made: Vec<_> = (0..4)
            .map(|t| {
                let kernel = &kernel;
                s.spawn(move || {
                    (0..4)
                        .map(|i| {
                            kernel
                                .domain(&format!("d-{t}-{i}"), lrpc_artifacts::HOSTILE)
                                .unwrap()
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        made.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    let mut ids: Vec<u16> = domains.iter().map(|d| d.id()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), domains.len(), "every domain its own id");
}
