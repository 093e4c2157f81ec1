//! Failure isolation: a server that traps, loops or is terminated never takes its client down.

use crate::neg;
use lrpc_kernel::{Domain, Error, Kernel, Status, error::Fault};
use std::time::{Duration, Instant};

fn faulty(deadline: Option<Duration>) -> (Kernel, Domain, Domain) {
    let (kernel, server) = crate::faulty_server(deadline);
    let client = kernel
        .domain("faulty-client", lrpc_artifacts::FAULTY_CLIENT)
        .unwrap();
    assert_eq!(client.call::<(), i32>("bind", ()).unwrap(), 0);
    (kernel, server, client)
}

#[test]
fn a_trapping_server_fails_the_call_and_the_client_continues() {
    let _guard = crate::shared();
    let (kernel, server, client) = faulty(None);
    assert_eq!(client.call::<(i32,), i64>("echo", (41,)).unwrap(), 42);
    let s: i32 = client.call("crash", ()).unwrap();
    assert_eq!(s, Status::ServerTrapped as i32);
    assert!(server.is_terminated(), "a trapped server is terminated");
    assert!(!client.is_terminated(), "its client is not");
    // Its memory went back to the system at once, though the handle still names it.
    assert_eq!(server.memory_size().unwrap(), 0);
    // Later calls fail fast with a clear status; the client keeps running its own code.
    let r: i64 = client.call("echo", (1,)).unwrap();
    assert_eq!(r, neg(Status::ServerTerminated));
    let rebind: i32 = client.call("bind", ()).unwrap();
    assert_eq!(
        rebind,
        Status::UnknownInterface as i32,
        "the export was withdrawn"
    );
    assert!(kernel.exported().is_empty());
    assert!(
        server.server_bindings().is_empty(),
        "its bindings are revoked"
    );
}

#[test]
fn a_looping_server_is_interrupted_at_the_deadline() {
    let _guard = crate::shared();
    let (_kernel, server, client) = faulty(Some(Duration::from_millis(100)));
    let start = Instant::now();
    let s: i32 = client.call("spin", ()).unwrap();
    let took = start.elapsed();
    assert_eq!(s, Status::DeadlineExceeded as i32);
    // A call's start is read from the tick count, which lags the clock when the ticker
    // thread runs late on a busy machine (a loaded run ended this at 99.7 ms): the
    // deadline may end up to that lag early (see docs/src/limits.md).
    assert!(
        took >= Duration::from_millis(90),
        "well before the deadline: {took:?}"
    );
    assert!(server.is_terminated());
    assert!(!client.is_terminated());
    assert_eq!(
        client.call::<(i32,), i64>("echo", (1,)).unwrap(),
        neg(Status::ServerTerminated)
    );
}

/// A thread's tick hook runs while the thread executes the server's code (the call migrated
/// it there), at each epoch tick; time it spends pausing counts toward the call's deadline.
#[test]
fn a_threads_tick_hook_paces_the_server_it_migrated_into() {
    let _guard = crate::shared();
    let (_kernel, server, client) = faulty(Some(Duration::from_millis(100)));
    let ticks = std::rc::Rc::new(std::cell::Cell::new(0u32));
    let t = ticks.clone();
    let hook = move |_wanted: bool| {
        t.set(t.get() + 1);
        std::thread::sleep(Duration::from_millis(5));
    };
    assert!(lrpc_kernel::pace::set_tick_hook(Some(Box::new(hook))).is_none());
    let start = Instant::now();
    let s: i32 = client.call("spin", ()).unwrap();
    let took = start.elapsed();
    assert!(lrpc_kernel::pace::set_tick_hook(None).is_some());
    assert_eq!(s, Status::DeadlineExceeded as i32);
    // Up to the ticker's lag early, as above.
    assert!(took >= Duration::from_millis(90), "{took:?}");
    // Each tick paused the spinning server for 5 ms: about 100 / (1 + 5) ticks fit, and
    // certainly fewer than the 100 of a server that was not paused.
    let n = ticks.get();
    assert!((2..60).contains(&n), "{n} ticks");
    assert!(server.is_terminated());
    // Without the hook, the same thread's calls are not paced.
    assert_eq!(
        client.call::<(i32,), i64>("echo", (1,)).unwrap(),
        neg(Status::ServerTerminated)
    );
    assert_eq!(ticks.get(), n);
}

/// The tick hook learns when another thread waits for the server Store its thread holds, so
/// that a thread pacing itself for others' sake does not hold that one up.
#[test]
fn a_tick_hook_learns_when_another_thread_waits_for_its_server() {
    let _guard = crate::shared();
    // A deadline no loaded machine reaches: the server is terminated once the hook saw the
    // waiting call (or at the deadline, and then the test fails).
    let (kernel, server, client) = faulty(Some(Duration::from_secs(30)));
    // A second client of the same server (one replica), calling from another thread.
    let other = kernel
        .domain("faulty-client-2", lrpc_artifacts::FAULTY_CLIENT)
        .unwrap();
    assert_eq!(other.call::<(), i32>("bind", ()).unwrap(), 0);
    use std::sync::atomic::{AtomicBool, Ordering};
    let seen = std::sync::Arc::new(AtomicBool::new(false));
    // Set at the hook's first tick: the spinning call holds the server's Store.
    let spinning = std::sync::Arc::new(AtomicBool::new(false));
    let started = spinning.clone();
    let waiter = std::thread::spawn(move || {
        while !started.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(1));
        }
        // Waits for the spinning call's Store, then fails with it (the spinner is
        // terminated).
        other.call::<(i32,), i64>("echo", (1,)).unwrap()
    });
    let (s2, k2, watched) = (seen.clone(), kernel.clone(), seen.clone());
    let killer = std::thread::spawn(move || {
        let until = Instant::now() + Duration::from_secs(30);
        while !watched.load(Ordering::Acquire) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
        }
        k2.terminate(&server);
    });
    let hook = move |wanted: bool| {
        spinning.store(true, Ordering::Release);
        if wanted {
            s2.store(true, Ordering::Release);
        }
    };
    lrpc_kernel::pace::set_tick_hook(Some(Box::new(hook)));
    let s: i32 = client.call("spin", ()).unwrap();
    lrpc_kernel::pace::set_tick_hook(None);
    killer.join().expect("the killer");
    assert!(
        seen.load(Ordering::Acquire),
        "the hook never saw the waiting call"
    );
    assert_eq!(s, Status::ServerTerminated as i32);
    assert!(waiter.join().expect("the waiting client") < 0);
}

#[test]
fn work_inside_the_deadline_completes() {
    let _guard = crate::shared();
    let (_kernel, server, client) = faulty(Some(Duration::from_secs(5)));
    let r: i64 = client.call("busy", (20,)).unwrap();
    assert_eq!(r, 20);
    assert!(!server.is_terminated());
}

#[test]
fn terminating_a_server_during_a_call_fails_the_call() {
    let _guard = crate::shared();
    let (kernel, server, client) = faulty(Some(Duration::from_secs(60)));
    let k2 = kernel.clone();
    let s2 = server.clone();
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        k2.terminate(&s2);
    });
    let start = Instant::now();
    let s: i32 = client.call("spin", ()).unwrap();
    killer.join().unwrap();
    assert_eq!(s, Status::ServerTerminated as i32);
    // Terminated while it ran: its memory went back once the interrupted call returned.
    assert_eq!(server.memory_size().unwrap(), 0);
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "stopped long before the deadline"
    );
    assert!(!client.is_terminated());
    assert_eq!(
        client.call::<(i32,), i64>("echo", (1,)).unwrap(),
        neg(Status::ServerTerminated)
    );
}

#[test]
fn terminating_a_client_revokes_its_bindings_and_spares_the_server() {
    let _guard = crate::shared();
    let (kernel, server, client) = faulty(None);
    let other = kernel
        .domain("other-client", lrpc_artifacts::FAULTY_CLIENT)
        .unwrap();
    assert_eq!(other.call::<(), i32>("bind", ()).unwrap(), 0);
    assert_eq!(server.server_bindings().len(), 2);
    kernel.terminate(&client);
    assert!(client.is_terminated());
    assert!(matches!(
        client.call::<(i32,), i64>("echo", (1,)),
        Err(Error::Fault(Fault::Terminated))
    ));
    assert_eq!(
        server.server_bindings().len(),
        1,
        "only the other client's binding is left"
    );
    assert_eq!(other.call::<(i32,), i64>("echo", (9,)).unwrap(), 10);
}

#[test]
fn a_client_that_traps_is_terminated_with_a_typed_fault() {
    let _guard = crate::shared();
    let kernel = Kernel::new().unwrap();
    let h = kernel.domain("hostile", lrpc_artifacts::HOSTILE).unwrap();
    // Reading past the end of its own memory traps in the guest.
    let pages: i32 = h.call("mem_pages", ()).unwrap();
    let err = h.call::<(i32,), i32>("peek", (pages * 65536,)).unwrap_err();
    match err {
        Error::Fault(Fault::Trapped { trap, .. }) => {
            assert_eq!(trap, Some(wasmtime::Trap::MemoryOutOfBounds))
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(h.is_terminated());
}

#[test]
fn a_server_terminated_just_after_answering_never_hands_the_client_zeros_as_success() {
    let _guard = crate::shared();
    // Found by the kernel-operations fuzzer: a call that returned `Ok` while another thread
    // terminated its server had its client's A-stack zeroed before the stub read the reply.
    for round in 0..20 {
        let (kernel, server, client) = crate::bench_pair();
        std::thread::scope(|s| {
            let c = &client;
            let caller = s.spawn(move || {
                let mut answers = Vec::new();
                loop {
                    let r: i64 = c.call("add_loop", (500,)).unwrap();
                    answers.push(r);
                    if r != 0 {
                        return answers;
                    }
                }
            });
            std::thread::sleep(std::time::Duration::from_micros(200 + 100 * round));
            kernel.terminate(&server);
            let answers = caller.join().unwrap();
            let last = *answers.last().unwrap();
            // Every round of 500 adds was right until the server went; then a call failed.
            assert_ne!(
                last, 1000,
                "a wrong sum reported as success (round {round})"
            );
            let status = lrpc_kernel::Status::try_from(-last as i32).unwrap();
            assert!(
                matches!(
                    status,
                    lrpc_kernel::Status::ServerTerminated | lrpc_kernel::Status::StaleBinding
                ),
                "{status:?}"
            );
        });
    }
}

/// A module whose start function loops fails to instantiate at its start deadline, not at
/// the kernel's (10 s by default); the margin is wide for a loaded machine.
#[test]
fn a_start_function_that_loops_fails_at_the_start_deadline() {
    let k = Kernel::new().unwrap();
    // Text: the kernel's engine reads the text format too.
    let wasm = br#"(module (memory (export "memory") 1)
        (func $start (loop br 0)) (start $start))"#;
    let began = Instant::now();
    let options =
        lrpc_kernel::DomainOptions::default().with_start_deadline(Some(Duration::from_millis(100)));
    let err = k.domain_with("loops", wasm, options).unwrap_err();
    assert!(matches!(err, Error::Instantiate { .. }), "{err}");
    assert!(
        began.elapsed() < Duration::from_secs(5),
        "{:?}",
        began.elapsed()
    );
}

/// A server whose initial memory fills its memory quota could never be bound: its export is
/// refused with the sizes named, instead of every binding failing later.
#[test]
fn an_export_with_no_room_for_astacks_is_refused() {
    let k = Kernel::new().unwrap();
    let wasm = br#"(module (memory (export "memory") 16)
        (func $e (param i32 i32 i32 i32 i32) (result i32) i32.const 0)
        (export "lrpc-entry:lrpc:test/faulty#echo" (func $e))
        (export "lrpc-entry:lrpc:test/faulty#crash" (func $e))
        (export "lrpc-entry:lrpc:test/faulty#spin" (func $e))
        (export "lrpc-entry:lrpc:test/faulty#busy" (func $e)))"#;
    let quotas = lrpc_kernel::Quotas::default().with_memory(16 * 65536);
    let options = lrpc_kernel::DomainOptions::default().with_quotas(Some(quotas));
    let d = k.domain_with("full", wasm, options).unwrap();
    let err = k.export(&d, "lrpc:test/faulty").unwrap_err();
    assert!(err.to_string().contains("leaves no room"), "{err}");
    // With room for them, the same module exports.
    let quotas = lrpc_kernel::Quotas::default().with_memory(32 * 65536);
    let options = lrpc_kernel::DomainOptions::default().with_quotas(Some(quotas));
    let d = k.domain_with("roomy", wasm, options).unwrap();
    k.export(&d, "lrpc:test/faulty").unwrap();
}
