//! URPC channels: asynchronous calls over pairwise shared-memory rings, served by the
//! server's own processors (S threads) or, with S = 0, by the client's idle processor.

use lrpc_kernel::channel::{AsyncBinding, Call, CallError, ChannelOptions, Processors};
use lrpc_kernel::{Domain, ExportOptions, Kernel, Status};
use lrpc_runtime::driver::Driver;
use lrpc_runtime::value;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

/// Polls a call once on this thread (with S = 0 this runs the server's loop).
fn poll_once(call: &mut Call) -> Poll<Result<Vec<u8>, CallError>> {
    let mut cx = Context::from_waker(Waker::noop());
    Pin::new(call).poll(&mut cx)
}

/// Polls a call until it resolves.
fn wait(mut call: Call) -> Result<Vec<u8>, CallError> {
    loop {
        if let Poll::Ready(r) = poll_once(&mut call) {
            return r;
        }
        std::thread::yield_now();
    }
}

fn u32_of(bytes: &[u8]) -> u32 {
    u32::from_le_bytes(bytes[..4].try_into().expect("4 bytes"))
}

/// Polls a call until it resolves or `limit` passes (a hostile server may hide a request
/// from its own loop; then only the client's own timeout ends the call).
fn wait_at_most(mut call: Call, limit: Duration) -> Option<Result<Vec<u8>, CallError>> {
    let start = std::time::Instant::now();
    loop {
        if let Poll::Ready(r) = poll_once(&mut call) {
            return Some(r);
        }
        if start.elapsed() > limit {
            return None;
        }
        std::thread::yield_now();
    }
}

/// A kernel with the faulty server exported (with `deadline`), its processors and an
/// asynchronous binding to it.
fn faulty(s: usize, deadline: Option<Duration>) -> (Kernel, Domain, Processors, AsyncBinding) {
    let (kernel, server) = crate::faulty_server(deadline);
    let cpus = Processors::start(&kernel, &server, s).unwrap();
    let b = cpus
        .bind("lrpc:test/faulty", ChannelOptions::default())
        .unwrap();
    (kernel, server, cpus, b)
}

fn echo(b: &AsyncBinding, x: u32) -> Call {
    b.call_async(b.procedure("echo").unwrap(), &x.to_le_bytes())
}

/// Interface, server module, tag, and calls (function, arguments as value text).
type Case = (
    &'static str,
    &'static [u8],
    &'static str,
    Vec<(&'static str, String)>,
);

#[test]
fn async_results_equal_the_synchronous_path_for_every_bench_and_kv_procedure() {
    let _guard = crate::shared();
    let kernel = Kernel::new().unwrap();
    let data: Vec<String> = (0..200u32)
        .map(|i| ((i * 7 + 3) % 256).to_string())
        .collect();
    let list = format!("[{}]", data.join(", "));
    let cases: [Case; 2] = [
        (
            "lrpc:bench/bench",
            lrpc_artifacts::BENCH_SERVER,
            "bench",
            vec![
                ("null", String::new()),
                ("add", "40, 2".into()),
                ("add", "4294967295, 3".into()),
                ("big-in", list.clone()),
                ("big-in", "[]".into()),
                ("big-in-out", list.clone()),
                ("big-in-out", "[9]".into()),
            ],
        ),
        (
            "lrpc:kv/store",
            lrpc_artifacts::KV_SERVER,
            "kv",
            vec![
                ("put", r#""k1", [104, 105], binary"#.into()),
                ("put", r#""k2", [1, 2, 3], text"#.into()),
                ("put", r#""", [], text"#.into()),
                ("get", r#""k1""#.into()),
                ("get", r#""missing""#.into()),
                ("keys", r#"some("k")"#.into()),
                ("keys", "none".into()),
                ("stats", String::new()),
                ("rights", String::new()),
                ("delete", r#""k1""#.into()),
                ("delete", r#""k1""#.into()),
                ("measure", "'x', -5, 2.5".into()),
                ("measure", "'\u{10ffff}', 9223372036854775807, -0.0".into()),
            ],
        ),
    ];
    for (interface, wasm, tag, calls) in cases {
        // The same calls on two fresh servers (the key-value store keeps state): one called
        // synchronously from a driver domain, one asynchronously over a channel.
        let sync_server = kernel.domain(&format!("{tag}-sync"), wasm).unwrap();
        let async_server = kernel.domain(&format!("{tag}-async"), wasm).unwrap();
        let sync_name = format!("{tag}-sync");
        let async_name = format!("{tag}-async");
        kernel
            .export_as(
                &sync_server,
                interface,
                &sync_name,
                ExportOptions::default(),
            )
            .unwrap();
        kernel
            .export_as(
                &async_server,
                interface,
                &async_name,
                ExportOptions::default(),
            )
            .unwrap();
        let plan = kernel.interface(interface).unwrap();
        let driver = Driver::new(&kernel, &format!("{tag}-driver")).unwrap();
        driver
            .bind(0, &sync_name, plan.fingerprint, plan.procs.len())
            .unwrap();
        let cpus = Processors::start(&kernel, &async_server, 1).unwrap();
        let b = cpus.bind(&async_name, ChannelOptions::default()).unwrap();
        for (function, args) in calls {
            let (proc, p) = plan
                .procs
                .iter()
                .enumerate()
                .find(|(_, p)| p.name == function)
                .unwrap();
            let encoded = value::encode_args(&plan, &p.params, &args).unwrap();
            let want = driver
                .call(0, proc, p.bounded, p.out_bound.unwrap_or(0), &encoded)
                .unwrap_or_else(|e| panic!("{function}({args}) synchronously: {e:?}"));
            let got = wait(b.call_async(proc, &encoded))
                .unwrap_or_else(|e| panic!("{function}({args}) asynchronously: {e}"));
            let show = |bytes: &[u8]| match &p.result {
                Some(t) => value::print(&plan, t, bytes).unwrap(),
                None => format!("{bytes:?}"),
            };
            assert_eq!(show(&got), show(&want), "{interface} {function}({args})");
            assert_eq!(got, want, "{interface} {function}({args}): encodings");
        }
    }
}

#[test]
fn many_user_level_threads_interleave_their_calls() {
    let _guard = crate::shared();
    for s in [0, 1] {
        let (_kernel, _server, _cpus, b) = faulty(s, None);
        let b = std::rc::Rc::new(b);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let local = tokio::task::LocalSet::new();
        let results = local.block_on(&rt, async {
            let mut tasks = Vec::new();
            for t in 0..8u32 {
                let b = b.clone();
                tasks.push(tokio::task::spawn_local(async move {
                    let mut sum = 0u64;
                    for i in 0..100u32 {
                        let x = t * 1000 + i;
                        let r = echo(&b, x).await.expect("echo");
                        assert_eq!(u32_of(&r), x + 1, "thread {t} call {i}");
                        sum += u64::from(u32_of(&r));
                        // Let the other user-level threads run between calls.
                        tokio::task::yield_now().await;
                    }
                    sum
                }));
            }
            let mut all = Vec::new();
            for t in tasks {
                all.push(t.await.unwrap());
            }
            all
        });
        for (t, sum) in results.iter().enumerate() {
            let t = t as u64;
            let want: u64 = (0..100u64).map(|i| t * 1000 + i + 1).sum();
            assert_eq!(*sum, want, "S = {s}, thread {t}");
        }
        assert_eq!(b.in_flight(), 0);
    }
}

#[test]
fn with_no_server_processor_the_idle_client_processor_runs_the_server() {
    let _guard = crate::shared();
    let (_kernel, _server, cpus, b) = faulty(0, None);
    assert_eq!(cpus.threads(), 0);
    // Several calls in flight at once; nothing runs them until a client thread polls.
    let calls: Vec<Call> = (0..10).map(|x| echo(&b, x)).collect();
    assert_eq!(b.in_flight(), 10);
    for (x, c) in calls.into_iter().enumerate() {
        assert_eq!(u32_of(&wait(c).unwrap()), x as u32 + 1);
    }
    assert_eq!(b.in_flight(), 0);
    // Donation without a call of our own: the server's loop runs what is pending.
    let mut c = echo(&b, 7);
    assert_eq!(b.donate(), 1);
    assert_eq!(
        u32_of(&wait(std::mem::replace(&mut c, echo(&b, 8))).unwrap()),
        8
    );
    assert_eq!(u32_of(&wait(c).unwrap()), 9);
}

#[test]
fn a_server_trap_fails_every_call_in_flight() {
    let _guard = crate::shared();
    let (_kernel, server, _cpus, b) = faulty(0, None);
    let crash = b.procedure("crash").unwrap();
    let first = echo(&b, 1);
    let trap = b.call_async(crash, &[]);
    let later: Vec<Call> = (10..15).map(|x| echo(&b, x)).collect();
    // The first call completed before the trap: its reply is delivered.
    assert_eq!(u32_of(&wait(first).unwrap()), 2);
    assert_eq!(wait(trap), Err(CallError::Failed(Status::ServerTrapped)));
    for c in later {
        assert_eq!(wait(c), Err(CallError::Failed(Status::ServerTrapped)));
    }
    assert!(server.is_terminated(), "a trapped server is terminated");
    assert_eq!(
        wait(echo(&b, 3)),
        Err(CallError::Failed(Status::ServerTerminated)),
        "later calls fail fast"
    );

    // The same with a processor of the server's own, calls racing the trap.
    let (_kernel, server, _cpus, b) = faulty(1, None);
    let calls: Vec<Call> = (0..8).map(|x| echo(&b, x)).collect();
    let trap = b.call_async(crash, &[]);
    let after: Vec<Call> = (0..8).map(|x| echo(&b, x)).collect();
    for (x, c) in calls.into_iter().enumerate() {
        assert_eq!(u32_of(&wait(c).unwrap()), x as u32 + 1, "before the trap");
    }
    assert_eq!(wait(trap), Err(CallError::Failed(Status::ServerTrapped)));
    // A call sent after the trap call fails with the trap when it was queued before the
    // server died, and as terminated when the server's processor got to the trap (and the
    // kernel terminated the server) before the call was sent: both race the trap here.
    for c in after {
        let r = wait(c);
        assert!(
            matches!(
                r,
                Err(CallError::Failed(
                    Status::ServerTrapped | Status::ServerTerminated
                ))
            ),
            "{r:?}"
        );
    }
    assert!(server.is_terminated());
}

#[test]
fn a_server_past_its_deadline_or_terminated_fails_calls_in_flight() {
    let _guard = crate::shared();
    let (_kernel, server, _cpus, b) = faulty(1, Some(Duration::from_millis(50)));
    let spin = b.call_async(b.procedure("spin").unwrap(), &[]);
    let behind = echo(&b, 1);
    assert_eq!(wait(spin), Err(CallError::Failed(Status::DeadlineExceeded)));
    assert_eq!(
        wait(behind),
        Err(CallError::Failed(Status::DeadlineExceeded))
    );
    assert!(server.is_terminated());

    let (kernel, server, _cpus, b) = faulty(0, None);
    let pending = echo(&b, 1);
    kernel.terminate(&server);
    assert_eq!(
        wait(pending),
        Err(CallError::Failed(Status::ServerTerminated))
    );
    assert_eq!(
        wait(echo(&b, 2)),
        Err(CallError::Failed(Status::ServerTerminated))
    );
}

/// Offsets in the segment (see `lrpc_kernel::channel`'s ring layout).
const REQ_HEAD: usize = 64;
const REP_HEAD: usize = 192;
const RINGS: usize = 512;

#[test]
fn a_hostile_server_writing_garbage_into_the_rings_is_refused() {
    let _guard = crate::shared();
    let slots = ChannelOptions::default().slots as usize;

    // A reply head far ahead of the replies: refused, not looped over.
    let (_kernel, server, _cpus, b) = faulty(0, None);
    let (off, _) = b.window();
    let c = echo(&b, 1);
    assert_eq!(b.donate(), 1);
    server
        .write_memory(off + REP_HEAD, &u32::MAX.to_le_bytes())
        .unwrap();
    assert!(matches!(wait(c), Err(CallError::Corrupt(_))));
    assert!(matches!(wait(echo(&b, 2)), Err(CallError::Corrupt(_))));

    // A reply with a forged sequence number.
    let (_kernel, server, _cpus, b) = faulty(0, None);
    let (off, _) = b.window();
    let c = echo(&b, 1);
    assert_eq!(b.donate(), 1);
    let entry = off + RINGS + 16 * slots;
    server
        .write_memory(entry + 4, &12345u32.to_le_bytes())
        .unwrap();
    assert_eq!(
        wait(c),
        Err(CallError::Corrupt("reply names no call in flight"))
    );

    // A reply naming a slot outside the channel.
    let (_kernel, server, _cpus, b) = faulty(0, None);
    let (off, _) = b.window();
    let c = echo(&b, 1);
    assert_eq!(b.donate(), 1);
    server
        .write_memory(off + RINGS + 16 * slots, &9999u32.to_le_bytes())
        .unwrap();
    assert_eq!(wait(c), Err(CallError::Corrupt("reply names no slot")));

    // A request head far ahead: the server loop refuses the channel.
    let (_kernel, server, _cpus, b) = faulty(0, None);
    let (off, _) = b.window();
    server
        .write_memory(off + REQ_HEAD, &1000u32.to_le_bytes())
        .unwrap();
    assert_eq!(b.donate(), 0);
    assert_eq!(
        wait(echo(&b, 1)),
        Err(CallError::Corrupt("request head out of range"))
    );

    // Garbage everywhere in the header and rings while calls run on the server's own
    // processor: every call ends (with its result or refused), nothing loops.
    let (_kernel, server, _cpus, b) = faulty(1, None);
    let (off, _) = b.window();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let mut x: u32 = 0x9e37_79b9;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                let at = (x as usize % ((RINGS + 32 * slots) / 4)) * 4;
                let _ = server.write_memory(off + at, &x.to_le_bytes());
            }
        });
        let mut refused = 0;
        for i in 0..2000u32 {
            match wait_at_most(echo(&b, i), Duration::from_secs(2)) {
                Some(Ok(r)) => assert_eq!(r.len(), 4),
                Some(Err(CallError::Corrupt(_))) | None => refused += 1,
                Some(Err(e)) => panic!("unexpected {e}"),
            }
            if refused > 0 {
                break;
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(refused > 0, "the garbage was noticed");
        assert!(
            matches!(wait(echo(&b, 1)), Err(CallError::Corrupt(_))) || refused > 0,
            "later calls are refused"
        );
    });
}

#[test]
fn a_cancelled_call_s_late_reply_is_discarded() {
    let _guard = crate::shared();
    // S = 0: the cancelled request is still in the ring when the next call is made.
    let (_kernel, _server, _cpus, b) = faulty(0, None);
    let cancelled = echo(&b, 100);
    drop(cancelled);
    assert_eq!(b.in_flight(), 1, "its slot waits for the reply");
    assert_eq!(u32_of(&wait(echo(&b, 200)).unwrap()), 201);
    assert_eq!(b.in_flight(), 0, "the late reply freed the slot");

    // From tokio, with the server on its own processor: calls cancelled after their first
    // poll (and by a timeout) never hand their results to the calls after them.
    let (_kernel, _server, _cpus, b) = faulty(1, None);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        let proc = b.procedure("echo").unwrap();
        let busy = b.procedure("busy").unwrap();
        // A slow call ahead keeps the processor busy, so what follows is still in flight.
        let slow = b.call_timeout(busy, &30u32.to_le_bytes(), Duration::from_millis(1));
        match slow.await {
            Ok(r) => assert_eq!(u32_of(&r), 30),
            Err(e) => assert_eq!(e, CallError::TimedOut),
        }
        for i in 0..300u32 {
            let mut call = b.call_async(proc, &i.to_le_bytes());
            let first = std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut call).poll(cx))).await;
            match first {
                Poll::Ready(r) => assert_eq!(u32_of(&r.unwrap()), i + 1),
                Poll::Pending => drop(call),
            }
            let x = i + 1_000_000;
            let r = b
                .call_timeout(proc, &x.to_le_bytes(), Duration::from_secs(60))
                .await
                .unwrap();
            assert_eq!(u32_of(&r), x + 1, "call {i} after a cancellation");
        }
    });
    assert_eq!(b.in_flight(), 0, "every late reply was taken and discarded");
}

#[test]
fn unbinding_leaks_no_mappings() {
    let _guard = crate::shared();
    let (kernel, server, cpus, b) = faulty(0, None);
    let base = server.usage();
    assert_eq!(
        base.mappings, 1,
        "the first channel's mapping, charged to the server"
    );
    let (off, len) = b.window();
    assert_eq!(u32_of(&wait(echo(&b, 1)).unwrap()), 2);
    b.unbind();
    assert_eq!(server.usage().mappings, 0, "given back at unbind");
    assert_eq!(
        server.read_memory(off, len).unwrap(),
        vec![0; len],
        "the segment left the server's memory"
    );
    let size = server.memory_size().unwrap();
    for i in 0..50u32 {
        let b = cpus
            .bind("lrpc:test/faulty", ChannelOptions::default())
            .unwrap();
        assert_eq!(b.window().0, off, "the pages are reused");
        assert_eq!(u32_of(&wait(echo(&b, i)).unwrap()), i + 1);
        let late = echo(&b, i);
        drop(b);
        assert_eq!(wait(late), Err(CallError::Closed));
    }
    assert_eq!(server.usage(), lrpc_kernel::domain::Usage::default());
    assert_eq!(
        server.memory_size().unwrap(),
        size,
        "no memory grown per binding"
    );

    // With processors running too.
    let cpus = Processors::start(&kernel, &server, 1).unwrap();
    for i in 0..20u32 {
        let b = cpus
            .bind("lrpc:test/faulty", ChannelOptions::default())
            .unwrap();
        assert_eq!(u32_of(&wait(echo(&b, i)).unwrap()), i + 1);
        b.unbind();
        assert_eq!(server.usage(), lrpc_kernel::domain::Usage::default());
    }
}

#[test]
fn an_idle_client_processor_serves_when_every_server_processor_is_busy() {
    let _guard = crate::shared();
    let kernel = Kernel::new().unwrap();
    // Two replicas: a donor runs in the one the busy processor does not hold. The spin's
    // deadline bounds the test's time and must outlast the echoes below on a loaded machine
    // (with 2 s, two busy loops beside the test command made them miss it once).
    let server = crate::replicated(&kernel, "faulty", lrpc_artifacts::FAULTY_SERVER, 2);
    crate::export_with(
        &kernel,
        &server,
        "lrpc:test/faulty",
        ExportOptions::default().with_deadline(Some(Duration::from_secs(8))),
    )
    .unwrap();
    let cpus = Processors::start(&kernel, &server, 1).unwrap();
    let stuck = cpus
        .bind("lrpc:test/faulty", ChannelOptions::default())
        .unwrap();
    let b = cpus
        .bind("lrpc:test/faulty", ChannelOptions::default())
        .unwrap();
    // The server's one processor loops in `spin` until the deadline terminates the server.
    let spin = stuck.call_async(stuck.procedure("spin").unwrap(), &[]);
    while cpus.busy() == 0 {
        std::thread::yield_now();
    }
    // Meanwhile this client's idle processor runs its own calls in the server: they are
    // answered before the deadline (without donation they would fail with it).
    for x in 0..20u32 {
        assert_eq!(
            u32_of(
                &b.call_blocking(b.procedure("echo").unwrap(), &x.to_le_bytes())
                    .unwrap()
            ),
            x + 1
        );
    }
    assert_eq!(wait(spin), Err(CallError::Failed(Status::DeadlineExceeded)));
}

// Guest clients: asynchronous bindings made by a guest (`lrpc.channel_bind`), the SDK's
// `*_async` stubs and its executor of user-level threads.

/// A bench pair whose server has `s` processors and whose client also holds an
/// asynchronous binding.
fn bench_async(s: usize) -> (Kernel, Domain, Processors, Domain) {
    let (kernel, server, client) = crate::bench_pair();
    let cpus = Processors::start(&kernel, &server, s).unwrap();
    let r: i32 = client.call("bind_async", (0,)).unwrap();
    assert_eq!(r, 0, "bind_async: {:?}", Status::try_from(r));
    (kernel, server, cpus, client)
}

#[test]
fn guest_async_calls_from_many_user_level_threads_equal_the_synchronous_path() {
    let _guard = crate::shared();
    for s in [1, 0] {
        let (_kernel, _server, _cpus, client) = bench_async(s);
        for (threads, iters, len) in [(1u64, 5u64, 0), (8, 20, 200), (3, 10, 1)] {
            // Every answer is compared with the synchronous call inside the guest; the
            // result is the sum of the add results: i + t over every thread and round.
            let want = (0..threads)
                .flat_map(|t| (0..iters).map(move |i| i + t))
                .sum::<u64>() as i64;
            let got: i64 = client
                .call("async_rounds", (threads as i32, iters as i32, len, 1))
                .unwrap();
            assert_eq!(
                got, want,
                "S = {s}, {threads} threads × {iters}, {len} bytes"
            );
        }
        // Each thread sends two calls before it awaits one; with S = 0 nothing is served
        // before every thread has sent (the guest runs the server only when idle).
        let most: i32 = client.call("async_max_in_flight", ()).unwrap();
        let least = if s == 0 { 16 } else { 2 };
        assert!(
            most >= least,
            "S = {s}: the threads' calls were in flight together ({most} at most)"
        );
        assert!(!client.is_terminated());
    }
}

#[test]
fn a_guest_client_donates_its_processor_when_the_server_has_none() {
    let _guard = crate::shared();
    let (_kernel, _server, cpus, client) = bench_async(0);
    assert_eq!(cpus.threads(), 0);
    // Nobody but the client's own processor runs the server: every reply is donated work.
    for threads in [1, 4] {
        let r: i64 = client.call("async_null", (threads, 200)).unwrap();
        assert_eq!(r, 0, "{threads} threads");
    }
    let r: i64 = client.call("async_rounds", (4, 10, 64, 1)).unwrap();
    assert_eq!(
        r,
        (0..4i64)
            .flat_map(|t| (0..10).map(move |i| i + t))
            .sum::<i64>()
    );
    // The processors stopped (dropped): later bindings still work by donation.
    drop(cpus);
    assert_eq!(
        client
            .call::<(i32, i32), i64>("async_null", (2, 50))
            .unwrap(),
        0
    );
}

#[test]
fn a_guest_client_without_server_processors_is_refused() {
    let _guard = crate::shared();
    let (_kernel, _server, client) = crate::bench_pair();
    let r: i32 = client.call("bind_async", (0,)).unwrap();
    assert_eq!(r, Status::NoProcessors as i32);
    let r: i32 = client.call("bind_async", (100_000,)).unwrap();
    assert_eq!(
        r,
        Status::ResourceExhausted as i32,
        "more slots than a channel has"
    );
    assert_eq!(client.call::<(i32,), i32>("null", (3,)).unwrap(), 0);
}

/// A faulty server with `s` processors and a faulty client holding an asynchronous
/// binding only.
fn faulty_async(s: usize) -> (Kernel, Domain, Processors, Domain) {
    let (kernel, server) = crate::faulty_server(None);
    let cpus = Processors::start(&kernel, &server, s).unwrap();
    let client = kernel
        .domain("faulty-client", lrpc_artifacts::FAULTY_CLIENT)
        .unwrap();
    assert_eq!(client.call::<(), i32>("bind_async", ()).unwrap(), 0);
    (kernel, server, cpus, client)
}

#[test]
fn a_server_trap_fails_a_guest_s_calls_in_flight_and_the_guest_keeps_running() {
    let _guard = crate::shared();
    for s in [1, 0] {
        let (_kernel, server, _cpus, client) = faulty_async(s);
        assert_eq!(client.call::<(i32,), i64>("async_echo", (41,)).unwrap(), 42);
        // Thread 0 sends busy(20 ms) and crash; five more threads send echoes meanwhile.
        let r: i64 = client.call("async_crash", (6, 20)).unwrap();
        let (ok, failed, other) = (r / 1_000_000, r / 1000 % 1000, r % 1000);
        assert_eq!(other, 0, "S = {s}: no call failed otherwise ({r})");
        assert_eq!(ok + failed, 7, "S = {s}: every call answered ({r})");
        assert!(failed >= 2, "S = {s}: crash and a later call failed ({r})");
        assert!(server.is_terminated(), "a trapped server is terminated");
        assert!(!client.is_terminated(), "its guest client is not");
        // Later calls fail with call-failed; the client's own code keeps running.
        let r: i64 = client.call("async_echo", (1,)).unwrap();
        let status = Status::try_from(-r as i32).unwrap();
        assert!(status.is_call_failed(), "S = {s}: {status:?}");
        assert_eq!(client.call::<(), i32>("unbind_async", ()).unwrap(), 0);
        assert_eq!(client.usage(), lrpc_kernel::domain::Usage::default());
    }
}

#[test]
fn a_guest_s_channel_leaks_no_mappings_after_unbind() {
    let _guard = crate::exclusive();
    let maps = crate::memfd_mappings();
    let (kernel, server, cpus, client) = faulty_async(1);
    assert_eq!(
        crate::memfd_mappings(),
        maps + 2,
        "mapped into the client and the server only"
    );
    assert_eq!(client.usage().mappings, 1);
    assert_eq!(server.usage().mappings, 1);
    assert_eq!(client.call::<(i32,), i64>("async_echo", (1,)).unwrap(), 2);
    assert_eq!(client.call::<(), i32>("unbind_async", ()).unwrap(), 0);
    assert_eq!(client.usage(), lrpc_kernel::domain::Usage::default());
    assert_eq!(server.usage(), lrpc_kernel::domain::Usage::default());
    assert_eq!(crate::memfd_mappings(), maps, "both mappings gone");
    let sizes = (client.memory_size().unwrap(), server.memory_size().unwrap());
    for i in 0..30 {
        assert_eq!(client.call::<(), i32>("bind_async", ()).unwrap(), 0);
        assert_eq!(
            client.call::<(i32,), i64>("async_echo", (i,)).unwrap(),
            i64::from(i) + 1
        );
        assert_eq!(client.call::<(), i32>("unbind_async", ()).unwrap(), 0);
        assert_eq!(
            client.call::<(i32,), i64>("async_echo", (i,)).unwrap(),
            crate::neg(Status::StaleBinding)
        );
    }
    assert_eq!(client.usage(), lrpc_kernel::domain::Usage::default());
    assert_eq!(server.usage(), lrpc_kernel::domain::Usage::default());
    assert_eq!(
        (client.memory_size().unwrap(), server.memory_size().unwrap()),
        sizes,
        "the pages are reused: no memory grown per binding"
    );
    // A client dropped with its channel bound gives the server's side back too.
    assert_eq!(client.call::<(), i32>("bind_async", ()).unwrap(), 0);
    assert_eq!(server.usage().mappings, 1);
    drop(client);
    assert_eq!(server.usage(), lrpc_kernel::domain::Usage::default());
    // So does a client terminated with its channel bound, at once.
    let client = kernel
        .domain("faulty-client-2", lrpc_artifacts::FAULTY_CLIENT)
        .unwrap();
    assert_eq!(client.call::<(), i32>("bind_async", ()).unwrap(), 0);
    assert_eq!(server.usage().mappings, 1);
    kernel.terminate(&client);
    assert_eq!(server.usage(), lrpc_kernel::domain::Usage::default());
    drop(client);
    drop((cpus, server, kernel));
    assert_eq!(crate::memfd_mappings(), maps);
}

#[test]
fn guest_async_key_value_calls_equal_the_synchronous_path() {
    let _guard = crate::shared();
    for s in [1, 0] {
        let kernel = Kernel::new().unwrap();
        let mut servers = Vec::new();
        for name in ["kv-sync", "kv-async"] {
            let d = kernel.domain(name, lrpc_artifacts::KV_SERVER).unwrap();
            kernel
                .export_as(&d, "lrpc:kv/store", name, ExportOptions::default())
                .unwrap();
            servers.push(d);
        }
        let _cpus = Processors::start(&kernel, &servers[1], s).unwrap();
        let client = kernel
            .domain("kv-client", lrpc_artifacts::KV_CLIENT)
            .unwrap();
        let r: i64 = client.call("async_compare", (3, 20)).unwrap();
        // The script's 19 comparisons and three per reader round.
        assert_eq!(r, 19 + 3 * 3 * 20, "S = {s}: {r}");
    }
}

/// Where the channel segments lie in `d`'s memory (page-aligned pages starting with the
/// channel magic).
fn channel_segments(d: &Domain) -> Vec<usize> {
    let size = d.memory_size().unwrap();
    let mem = d.read_memory(0, size).unwrap();
    (0..size)
        .step_by(4096)
        .filter(|&off| mem[off..off + 4] == 0x5552_5043u32.to_le_bytes())
        .collect()
}

#[test]
fn a_hostile_server_s_ring_values_refuse_a_guest_s_channel() {
    let _guard = crate::shared();
    // A reply head far ahead, then a reply naming a slot with no call in flight.
    for (word, value) in [(192usize, 1000u32), (192, 1)] {
        let (_kernel, server, _cpus, client) = faulty_async(0);
        let at = channel_segments(&server);
        assert_eq!(at.len(), 1, "one channel in the server's memory");
        assert_eq!(client.call::<(i32,), i64>("async_echo", (1,)).unwrap(), 2);
        // The server (here: the test, writing its memory) forges the reply head.
        server
            .write_memory(at[0] + word, &(value + 1).to_le_bytes())
            .unwrap();
        let r: i64 = client.call("async_echo", (2,)).unwrap();
        assert_eq!(r, crate::neg(Status::ChannelRefused), "{word}: {value}");
        // Refused for good; the client keeps running and unbinds cleanly.
        let r: i64 = client.call("async_echo", (3,)).unwrap();
        assert_eq!(r, crate::neg(Status::ChannelRefused));
        assert_eq!(client.call::<(), i32>("unbind_async", ()).unwrap(), 0);
        assert_eq!(client.usage(), lrpc_kernel::domain::Usage::default());
        assert!(!client.is_terminated());
    }
}

#[test]
fn every_channel_import_survives_arbitrary_arguments() {
    let _guard = crate::shared();
    let (kernel, server, client) = crate::bench_pair();
    let _cpus = Processors::start(&kernel, &server, 1).unwrap();
    let fp = kernel.interface("lrpc:bench/bench").unwrap().fingerprint as i64;
    let h = kernel.domain("hostile", lrpc_artifacts::HOSTILE).unwrap();
    let handle: i64 = h.call("chan_bind_raw", (fp, 4)).unwrap();
    assert!(handle > 0, "{handle}");
    let base: i32 = h.call("chan_base", ()).unwrap();
    let scratch: i32 = h.call("scratch", ()).unwrap();
    let pages: i32 = h.call("mem_pages", ()).unwrap();
    let mem = i64::from(pages) * 65536;
    let mut x = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = || crate::xorshift(&mut x);
    let pick32 = |r: u64| crate::pick32(r, scratch, base, 600, mem);
    let pick64 = |r: u64| crate::pick64(r, handle);
    let valid = |s: i32| Status::try_from(s).is_ok();
    for _ in 0..1500 {
        let r = next();
        let s: i32 = match r % 5 {
            0 => h
                .call(
                    "chan_bind_any",
                    (
                        pick32(next()),
                        pick32(next()) % 600,
                        fp,
                        pick32(next()) % 300,
                        pick32(next()),
                        pick32(next()),
                    ),
                )
                .unwrap(),
            // Waits are short: a wait with nothing in flight lasts its whole timeout.
            1 | 2 => h
                .call(
                    "chan_wait_raw",
                    (pick64(next()), pick32(next()), pick32(next()) % 50),
                )
                .unwrap(),
            3 => {
                // Garbage into the segment: counters, ring entries, A-stacks.
                let at = base + (next() % 8192) as i32;
                h.call::<(i32, i32), ()>("poke", (at, next() as i32))
                    .unwrap();
                0
            }
            _ => match pick64(next()) {
                // The channel stays bound, so that the waits and pokes reach it.
                x if x == handle => 0,
                x => h.call("chan_unbind_raw", (x,)).unwrap(),
            },
        };
        assert!(valid(s), "a channel import answered {s}, not a status");
    }
    assert!(!h.is_terminated(), "refusals never trap the caller");
    assert!(!server.is_terminated(), "the server is untouched");
    assert_eq!(
        h.call::<(i64,), i32>("chan_unbind_raw", (handle,)).unwrap(),
        0
    );
    assert_eq!(
        h.call::<(i64,), i32>("chan_unbind_raw", (handle,)).unwrap(),
        Status::StaleBinding as i32
    );
    assert_eq!(client.call::<(i32, i32), i64>("add", (2, 3)).unwrap(), 5);
    assert_eq!(client.call::<(i32,), i32>("bind_async", (0,)).unwrap(), 0);
    assert_eq!(
        client
            .call::<(i32, i32, i32, i32), i64>("async_rounds", (2, 3, 50, 1))
            .unwrap(),
        9
    );
    drop(h);
    assert_eq!(client.call::<(), i32>("unbind_async", ()).unwrap(), 0);
    assert_eq!(
        server.usage(),
        lrpc_kernel::domain::Usage::default(),
        "the hostile channels are gone"
    );
}

/// A channel call's client runs on while the server reads the request: the server copies
/// its byte lists, where the same calls made synchronously lend them.
#[test]
fn channel_calls_copy_their_byte_lists_where_synchronous_calls_lend_them() {
    let _guard = crate::shared();
    let (_kernel, server, _cpus, client) = bench_async(1);
    let copies = || -> i64 { server.call("lrpc_in_copies", ()).unwrap() };
    const ROUNDS: i64 = 10;
    let before = copies();
    // Each round: null (no arguments), add (fixed size: copied), big-in and big-in-out.
    let r: i64 = client
        .call("async_rounds", (1, ROUNDS as i32, 600, 0))
        .unwrap();
    assert!(r >= 0, "async_rounds: {r}");
    assert_eq!(
        copies() - before,
        3 * ROUNDS,
        "add, big-in and big-in-out copied"
    );
    let before = copies();
    let r: i64 = client.call("big_in", (600, ROUNDS as i32)).unwrap();
    assert_eq!(r >> 8, 600);
    assert_eq!(
        client
            .call::<(i32, i32), i32>("big_in_out", (600, ROUNDS as i32))
            .unwrap(),
        0
    );
    assert_eq!(copies() - before, 0, "synchronous calls lend");
}
