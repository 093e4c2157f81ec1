//! MultiRPC from a guest: `Client::multi_add` in `bench-client` calls many bindings at once
//! through `lrpc.multi_start` / `multi_next` / `multi_end`. Local members are called with
//! their ordinary semantics; remote ones (targets in this process, under the test's control)
//! are sent at once and answered in arrival order.

use lrpc_artifacts as artifacts;
use lrpc_kernel::{Domain, Kernel, Status, transport::RemoteTarget};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

const BENCH: &str = "lrpc:bench/bench";

/// Answers `add` after waiting `wait`, as a server elsewhere would, and records how many of
/// its calls were under way at once.
struct Delayed {
    wait: Duration,
    now: AtomicUsize,
    most: AtomicUsize,
}

impl Delayed {
    fn new(wait: Duration) -> Arc<Delayed> {
        Arc::new(Delayed {
            wait,
            now: AtomicUsize::new(0),
            most: AtomicUsize::new(0),
        })
    }
}

impl RemoteTarget for Delayed {
    fn call(&self, _proc: usize, req: &[u8]) -> Result<Vec<u8>, Status> {
        let n = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(n, Ordering::SeqCst);
        std::thread::sleep(self.wait);
        self.now.fetch_sub(1, Ordering::SeqCst);
        let a = u32::from_le_bytes(req[..4].try_into().unwrap());
        let b = u32::from_le_bytes(req[4..8].try_into().unwrap());
        Ok(a.wrapping_add(b).to_le_bytes().to_vec())
    }
}

/// A kernel with the bench server exported under each of `names`, and the bench client.
fn setup(names: &[&str]) -> (Kernel, Vec<Domain>, Domain) {
    let kernel = Kernel::new().unwrap();
    let servers = names
        .iter()
        .map(|name| {
            let s = kernel
                .domain(&format!("server {name}"), artifacts::BENCH_SERVER)
                .unwrap();
            kernel
                .export_as(&s, BENCH, name, Default::default())
                .unwrap();
            s
        })
        .collect();
    let client = kernel
        .domain("bench-client", artifacts::BENCH_CLIENT)
        .unwrap();
    (kernel, servers, client)
}

/// Binds `n` members of `client` to the export `name`; the member count.
fn bind(client: &Domain, name: &str, n: i32) -> i32 {
    let buf: i32 = client.call("name_buf", ()).unwrap();
    client.write_memory(buf as usize, name.as_bytes()).unwrap();
    client.call("multi_bind", (name.len() as i32, n)).unwrap()
}

struct Outcome {
    events: usize,
    ok: usize,
    stopped: bool,
    timed_out: bool,
    /// `(member, Ok(result) or Err(status code))`, in arrival order.
    log: Vec<(usize, Result<u32, u32>)>,
}

fn multi_add(client: &Domain, a: i32, b: i32, stop_after: i32, timeout_ms: i32) -> Outcome {
    let r: i64 = client
        .call("multi_add", (a, b, stop_after, timeout_ms))
        .unwrap();
    assert!(r >= 0, "the MultiRPC failed: status {}", -r);
    let events = (r & 0xffff) as usize;
    let log = (0..events as i32)
        .map(|k| {
            let e: i64 = client.call("multi_event", k).unwrap();
            assert!(e >= 0);
            let member = (e >> 32) as usize;
            let low = e as u32;
            if low & 0x8000_0000 != 0 {
                (member, Err(low & 0x7fff_ffff))
            } else {
                (member, Ok(low))
            }
        })
        .collect();
    Outcome {
        events,
        ok: ((r >> 16) & 0xffff) as usize,
        stopped: r & (1 << 32) != 0,
        timed_out: r & (1 << 33) != 0,
        log,
    }
}

#[test]
fn a_guest_multirpc_reaches_a_hundred_members_once_each() {
    let _g = crate::shared();
    let (_k, _servers, client) = setup(&[BENCH, "bench-b"]);
    assert_eq!(bind(&client, BENCH, 50), 50);
    assert_eq!(bind(&client, "bench-b", 50), 100);
    let o = multi_add(&client, 40, 2, 0, 10_000);
    assert_eq!((o.events, o.ok), (100, 100));
    assert!(!o.stopped && !o.timed_out);
    let mut members: Vec<usize> = o.log.iter().map(|(m, _)| *m).collect();
    members.sort_unstable();
    assert_eq!(members, (0..100).collect::<Vec<_>>(), "each member once");
    assert!(o.log.iter().all(|(_, r)| *r == Ok(42)));
    // The bindings stay usable: the same MultiRPC again, other arguments.
    let o = multi_add(&client, 7, 8, 0, 10_000);
    assert_eq!((o.events, o.ok), (100, 100));
    assert!(o.log.iter().all(|(_, r)| *r == Ok(15)));
}

#[test]
fn the_handler_ends_a_guest_multirpc_early() {
    let _g = crate::shared();
    let (_k, _servers, client) = setup(&[BENCH]);
    assert_eq!(bind(&client, BENCH, 20), 20);
    let o = multi_add(&client, 1, 2, 3, 10_000);
    assert_eq!((o.events, o.ok), (3, 3));
    assert!(o.stopped && !o.timed_out);
    // Nothing of the stopped call lingers: the next one sees every member.
    let o = multi_add(&client, 1, 2, 0, 10_000);
    assert_eq!((o.events, o.ok), (20, 20));
}

#[test]
fn failures_are_reported_per_member_and_the_rest_answer() {
    let _g = crate::shared();
    let (kernel, servers, client) = setup(&[BENCH, "bench-b"]);
    assert_eq!(bind(&client, BENCH, 3), 3);
    assert_eq!(bind(&client, "bench-b", 3), 6);
    kernel.terminate(&servers[1]);
    let o = multi_add(&client, 40, 2, 0, 10_000);
    assert_eq!((o.events, o.ok), (6, 3));
    for (m, r) in &o.log {
        if *m < 3 {
            assert_eq!(*r, Ok(42), "member {m}");
        } else {
            let code = r.expect_err("a member of the terminated server");
            assert!(
                code == Status::ServerTerminated as u32 || code == Status::StaleBinding as u32,
                "member {m}: status {code}"
            );
        }
    }
}

#[test]
fn remote_members_go_out_at_once_and_a_straggler_meets_the_timeout() {
    let _g = crate::shared();
    let (kernel, _servers, client) = setup(&[BENCH]);
    let fast = Delayed::new(Duration::from_millis(150));
    let slow = Delayed::new(Duration::from_secs(5));
    let _f = kernel
        .export_remote("bench-fast", BENCH, fast.clone())
        .unwrap();
    let _s = kernel.export_remote("bench-slow", BENCH, slow).unwrap();
    assert_eq!(bind(&client, BENCH, 2), 2);
    assert_eq!(bind(&client, "bench-fast", 8), 10);
    assert_eq!(bind(&client, "bench-slow", 1), 11);
    let o = multi_add(&client, 40, 2, 0, 1_000);
    // The eight remote members were under way together (all sent at the start), and the
    // straggler was cut off by the timeout.
    assert_eq!(fast.most.load(Ordering::SeqCst), 8);
    assert!(o.timed_out && !o.stopped);
    assert_eq!((o.events, o.ok), (10, 10));
    assert!(o.log.iter().all(|(m, r)| *m != 10 && *r == Ok(42)));
    // The local members come first: the remote replies arrive later.
    let first: Vec<usize> = o.log.iter().take(2).map(|(m, _)| *m).collect();
    assert_eq!(first, vec![0, 1]);
}

#[test]
fn members_of_a_server_with_replicas_run_on_helpers_and_free_their_astacks() {
    let _g = crate::shared();
    let kernel = Kernel::new().unwrap();
    let server = crate::replicated(&kernel, "bench-server", artifacts::BENCH_SERVER, 4);
    kernel.export(&server, BENCH).unwrap();
    let client = kernel
        .domain("bench-client", artifacts::BENCH_CLIENT)
        .unwrap();
    assert_eq!(bind(&client, BENCH, 100), 100);
    for round in 0..3 {
        let o = multi_add(&client, 40, round, 0, 10_000);
        assert_eq!((o.events, o.ok), (100, 100), "round {round}");
        let want = 40 + round as u32;
        assert!(o.log.iter().all(|(_, r)| *r == Ok(want)), "round {round}");
    }
    // Stopped early: the members still running on helpers finish before the A-stacks are
    // taken again, so the next MultiRPC finds every one of them free.
    let o = multi_add(&client, 1, 1, 5, 10_000);
    assert!(o.stopped && o.events == 5);
    let o = multi_add(&client, 1, 1, 0, 10_000);
    assert_eq!((o.events, o.ok), (100, 100));
    // A plain call on one of the members' bindings still works.
    assert_eq!(client.call::<(), i32>("bind", ()).unwrap(), 0);
    assert_eq!(client.call::<(i32, i32), i64>("add", (2, 3)).unwrap(), 5);
}

#[test]
fn a_hostile_guest_s_multirpc_arguments_are_refused_one_by_one() {
    use lrpc_abi::multi::{Kind, MAX_OPEN, Member, NEXT_LEN, Next};
    let _g = crate::shared();
    let (kernel, _servers, _client) = setup(&[BENCH]);
    let fp = kernel.interface(BENCH).unwrap().fingerprint as i64;
    let h = kernel.domain("hostile", artifacts::HOSTILE).unwrap();
    let handle: i64 = h.call("bind_raw", (fp,)).unwrap();
    assert!(handle > 0);
    let a0: i32 = h.call("astack", (0,)).unwrap();
    let scratch: i32 = h.call("scratch", ()).unwrap();
    let (records, next_at) = (scratch as usize, scratch + 2048);
    let start = |ptr: i32, n: i32, proc: i32, timeout: i32| -> i32 {
        h.call("multi_start_raw", (ptr, n, proc, timeout)).unwrap()
    };
    let next = |id: i32| -> Result<Next, i32> {
        match h
            .call::<(i32, i32), i32>("multi_next_raw", (id, next_at))
            .unwrap()
        {
            0 => Ok(Next::decode(&h.read_memory(next_at as usize, NEXT_LEN).unwrap()).unwrap()),
            s => Err(s),
        }
    };
    let end = |id: i32| -> i32 { h.call("multi_end_raw", id).unwrap() };
    let put = |members: &[Member]| {
        let bytes: Vec<u8> = members.iter().flat_map(|m| m.encode()).collect();
        h.write_memory(records, &bytes).unwrap();
    };
    let refused = |s: Status| -(s as i32);

    // The call itself: too many members, a negative count, records outside memory, a
    // negative timeout.
    assert_eq!(
        start(scratch, 5000, 0, 100),
        refused(Status::ResourceExhausted)
    );
    assert_eq!(
        start(scratch, -1, 0, 100),
        refused(Status::ResourceExhausted)
    );
    assert_eq!(start(i32::MAX - 8, 2, 0, 100), refused(Status::BadPointer));
    assert_eq!(start(scratch, 1, 0, -5), refused(Status::BadPointer));

    // Members: each refused on its own, before the good ones are called.
    let good = Member {
        handle: handle as u64,
        astack: a0 as u32,
    };
    let forged = Member {
        handle: handle as u64 + (5 << 32),
        astack: a0 as u32,
    };
    let stray = Member {
        handle: handle as u64,
        astack: a0 as u32 + 3,
    };
    put(&[good, forged, stray, good]);
    let id = start(scratch, 4, 0, 1_000);
    assert!(id >= 0, "start: {id}");
    let mut events = Vec::new();
    loop {
        let e = next(id).unwrap();
        if e.kind != Kind::Reply {
            assert_eq!(e.kind, Kind::Done);
            break;
        }
        events.push((e.member, e.status));
    }
    assert_eq!(
        events,
        vec![
            (1, Status::ForgedBinding as u32),
            (2, Status::BadAStack as u32),
            (0, Status::Ok as u32),
            (3, Status::Ok as u32),
        ]
    );
    // An event written outside memory, unknown ids, an id ended twice.
    assert_eq!(
        h.call::<(i32, i32), i32>("multi_next_raw", (id, i32::MAX - 4))
            .unwrap(),
        Status::BadPointer as i32
    );
    assert_eq!(end(id), Status::Ok as i32);
    assert_eq!(end(id), Status::BadPointer as i32);
    for bad in [id, -1, 99, i32::MAX] {
        assert_eq!(next(bad), Err(Status::BadPointer as i32), "id {bad}");
    }

    // At most MAX_OPEN under way at once; ending one makes room.
    put(&[good]);
    let ids: Vec<i32> = (0..MAX_OPEN).map(|_| start(scratch, 1, 0, 1_000)).collect();
    assert!(ids.iter().all(|&i| i >= 0), "{ids:?}");
    assert_eq!(
        start(scratch, 1, 0, 1_000),
        refused(Status::ResourceExhausted)
    );
    assert_eq!(end(ids[3]), Status::Ok as i32);
    let again = start(scratch, 1, 0, 1_000);
    assert_eq!(again, ids[3]);
    for i in ids {
        assert_eq!(end(i), Status::Ok as i32);
    }
    // Nothing is left busy: a plain call on the same A-stack works.
    let ok: i32 = h.call("call_raw", (handle, 0, a0)).unwrap();
    assert_eq!(ok, Status::Ok as i32);
}

/// A MultiRPC member on a server with one replica is called on the client's thread with an
/// ordinary call's semantics: it lends its byte list. Members run on helper threads (a
/// server with replicas) while the client's thread handles replies: they copy.
#[test]
fn multirpc_members_on_helpers_copy_their_byte_lists_and_the_others_lend() {
    let _g = crate::shared();
    const LEN: i32 = 2000;
    let kernel = Kernel::new().unwrap();
    let here = kernel
        .domain("server here", artifacts::BENCH_SERVER)
        .unwrap();
    kernel
        .export_as(&here, BENCH, "here", Default::default())
        .unwrap();
    let helped = crate::replicated(&kernel, "server helped", artifacts::BENCH_SERVER, 2);
    kernel
        .export_as(&helped, BENCH, "helped", Default::default())
        .unwrap();
    let client = kernel
        .domain("bench-client", artifacts::BENCH_CLIENT)
        .unwrap();
    assert_eq!(bind(&client, "here", 3), 3);
    assert_eq!(bind(&client, "helped", 3), 6);
    let copies = |d: &Domain| -> i64 { d.call("lrpc_in_copies", ()).unwrap() };
    let (here0, helped0) = (copies(&here), copies(&helped));
    // Which replica of `helped` a helper takes is up to the threads; the replica this
    // thread reads copies within a few rounds.
    let mut rounds = 0;
    while copies(&helped) == helped0 && rounds < 50 {
        let right: i64 = client.call("multi_big_in", (LEN, 10_000)).unwrap();
        assert_eq!(right, 6, "every member saw every byte");
        rounds += 1;
    }
    assert!(copies(&helped) > helped0, "members on helpers copy");
    assert!(copies(&helped) - helped0 <= 3 * rounds);
    assert_eq!(copies(&here) - here0, 0, "members called here lend");
}
