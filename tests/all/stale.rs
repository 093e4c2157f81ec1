//! Requests that outlive their caller (thread-per-domain serving): a client that gives up
//! after its deadline, unbinds, and whose window is reused by the next binding must not
//! have its request run later, and the server must not be blamed for being busy.

use lrpc_kernel::{Domain, ExportOptions, Kernel, Serving, Status};
use std::time::{Duration, Instant};

fn faulty_client(kernel: &Kernel, name: &str) -> Domain {
    let c = kernel.domain(name, lrpc_artifacts::FAULTY_CLIENT).unwrap();
    assert_eq!(c.call::<(), i32>("bind", ()).unwrap(), 0);
    c
}

/// How many units of `busy` take about `target` on this machine.
fn units_for(client: &Domain, target: Duration) -> i32 {
    let busy = |units: i32| {
        let start = Instant::now();
        assert_eq!(
            client.call::<(i32,), i64>("busy", (units,)).unwrap(),
            i64::from(units)
        );
        start.elapsed()
    };
    busy(1);
    let mut units = 4;
    loop {
        let took = busy(units);
        if took >= Duration::from_millis(20) || units >= 1 << 20 {
            let scaled = f64::from(units) * target.as_secs_f64() / took.as_secs_f64();
            return scaled.clamp(1.0, f64::from(1 << 24)) as i32;
        }
        units *= 4;
    }
}

fn echoes(server: &Domain) -> i32 {
    server.call::<(), i32>("echoes", ()).unwrap()
}

/// A raw client (the hostile guest) of the faulty interface exported under `name`.
struct RawEcho<'k> {
    kernel: &'k Kernel,
    h: Domain,
    name: &'static str,
    handle: i64,
    astack: i32,
}

impl<'k> RawEcho<'k> {
    fn new(kernel: &'k Kernel, name: &'static str, tag: &str) -> RawEcho<'k> {
        let h = kernel.domain(tag, lrpc_artifacts::HOSTILE).unwrap();
        let mut c = RawEcho {
            kernel,
            h,
            name,
            handle: 0,
            astack: 0,
        };
        c.bind();
        c
    }

    fn bind(&mut self) {
        let scratch = self.h.call::<(), i32>("scratch", ()).unwrap();
        self.h
            .write_memory(scratch as usize, self.name.as_bytes())
            .unwrap();
        let fingerprint = self
            .kernel
            .interface("lrpc:test/faulty")
            .unwrap()
            .fingerprint as i64;
        let desc = scratch + 256;
        // Binding maps windows into the server, so it waits for the server's store too:
        // while the blocker holds it, a bind is refused as busy, and tried again.
        loop {
            let s: i32 = self
                .h
                .call(
                    "bind_any",
                    (scratch, self.name.len() as i32, fingerprint, desc, 2048),
                )
                .unwrap();
            if s == Status::ServerBusy as i32 {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
            assert_eq!(s, 0, "bind {}", self.name);
            break;
        }
        let d = self.h.read_memory(desc as usize, 32).unwrap();
        self.handle = i64::from_le_bytes(d[..8].try_into().unwrap());
        // Procedure 0 is `echo`; its first A-stack is the first extent's base.
        self.astack = i32::from_le_bytes(d[16..20].try_into().unwrap());
    }

    fn unbind(&mut self) {
        let s: i32 = self.h.call("unbind_raw", (self.handle,)).unwrap();
        assert_eq!(s, 0);
    }

    /// `echo(x)` on the A-stack: the status and the answer.
    fn echo(&self, x: u32) -> (i32, u32) {
        if let Err(e) = self.h.write_memory(self.astack as usize, &x.to_le_bytes()) {
            panic!(
                "{e}: astack {:#x}, handle {:#x}, memory {:#x}, bindings {:?}",
                self.astack,
                self.handle,
                self.h.memory_size().unwrap(),
                self.h.client_bindings()
            );
        }
        let status: i32 = self
            .h
            .call("call_raw", (self.handle, 0, self.astack))
            .unwrap();
        let out = self.h.read_memory(self.astack as usize, 4).unwrap();
        (status, u32::from_le_bytes(out.try_into().unwrap()))
    }
}

/// The faulty server exported twice: migrating calls under the interface's name (a long
/// call there holds the server's store), and a server thread with a short `deadline` under
/// the name `faulty-by-message`, whose requests queue, wait for the store, and are given up on.
fn two_exports(deadline: Duration) -> (Kernel, Domain) {
    let kernel = Kernel::new().unwrap();
    let server = kernel
        .domain("faulty", lrpc_artifacts::FAULTY_SERVER)
        .unwrap();
    kernel.export(&server, "lrpc:test/faulty").unwrap();
    kernel
        .export_as(
            &server,
            "lrpc:test/faulty",
            "faulty-by-message",
            ExportOptions::default()
                .with_serving(Serving::OwnThread)
                .with_deadline(Some(deadline)),
        )
        .unwrap();
    (kernel, server)
}

#[test]
fn a_call_the_client_gave_up_on_never_runs_later_even_across_window_reuse() {
    let _guard = crate::shared();
    // The deadline also bounds each echo's run: 150 ms leaves room for a loaded machine
    // to deschedule the server thread, and the blocker holds the store well past it.
    let (kernel, server) = two_exports(Duration::from_millis(150));
    let blocker = faulty_client(&kernel, "blocker");
    let units = units_for(&blocker, Duration::from_millis(400));
    let before = echoes(&server);
    let clients_done = std::sync::atomic::AtomicUsize::new(0);
    let (answered, gave_up) = std::thread::scope(|s| {
        let clients_done = &clients_done;
        s.spawn(move || {
            while clients_done.load(std::sync::atomic::Ordering::Acquire) < 3 {
                assert_eq!(
                    blocker.call::<(i32,), i64>("busy", (units,)).unwrap(),
                    i64::from(units)
                );
                std::thread::sleep(Duration::from_millis(40));
            }
        });
        let clients: Vec<_> = (0..3)
            .map(|t| {
                let kernel = &kernel;
                s.spawn(move || {
                    // Counted as done however the client ends, so the blocker stops.
                    struct Done<'a>(&'a std::sync::atomic::AtomicUsize);
                    impl Drop for Done<'_> {
                        fn drop(&mut self) {
                            self.0.fetch_add(1, std::sync::atomic::Ordering::Release);
                        }
                    }
                    let _done = Done(clients_done);
                    let mut c = RawEcho::new(kernel, "faulty-by-message", &format!("raw-{t}"));
                    let (mut answered, mut gave_up) = (0u32, 0u32);
                    let mut x = 0u32;
                    let start = Instant::now();
                    // Until this client has seen both outcomes a few times.
                    while answered < 3 || gave_up < 3 {
                        assert!(start.elapsed() < Duration::from_secs(60), "stuck");
                        x += 1;
                        match c.echo(x) {
                            (0, y) => {
                                assert_eq!(
                                    y,
                                    x + 1,
                                    "an answer to this very call: astack {:#x} bindings {:?}",
                                    c.astack,
                                    c.h.client_bindings()
                                );
                                answered += 1;
                            }
                            (s, _) => {
                                assert_eq!(s, Status::ServerBusy as i32);
                                gave_up += 1;
                                // Leave while the abandoned request may still be queued,
                                // and come back: the next binding reuses the windows.
                                c.unbind();
                                c.bind();
                            }
                        }
                    }
                    (answered, gave_up)
                })
            })
            .collect();
        clients
            .into_iter()
            .map(|c| c.join().unwrap())
            .fold((0, 0), |(a, g), (x, y)| (a + x, g + y))
    });
    assert!(gave_up > 0, "the blocker made clients give up");
    assert!(answered > 0, "and answered others in between");
    assert!(!server.is_terminated(), "busy is not a fault");
    // Exactly the calls that were answered ran: none of the given-up ones ran late.
    assert_eq!((echoes(&server) - before) as u32, answered);
}

#[test]
fn a_server_store_busy_past_the_deadline_is_busy_not_terminated() {
    let _guard = crate::shared();
    let (kernel, server) = two_exports(Duration::from_millis(100));
    let slow = faulty_client(&kernel, "slow");
    let raw = RawEcho::new(&kernel, "faulty-by-message", "raw");
    let echo = || raw.echo(41);
    assert_eq!(echo(), (0, 42));
    // Far longer than the 100 ms wait: a calibration that a loaded machine slowed (and so
    // made too short) still holds the store long enough (seen failing at 400 ms).
    let units = units_for(&slow, Duration::from_millis(1500));
    let slow = &slow;
    std::thread::scope(|s| {
        let w = s.spawn(move || slow.call::<(i32,), i64>("busy", (units,)).unwrap());
        // Until the long call holds the store, an echo is answered at once; while it does,
        // the server thread waits out its 100 ms and the answer is `ServerBusy`.
        let mut saw_busy = false;
        while !w.is_finished() && !saw_busy {
            let (status, value) = echo();
            match status {
                0 => assert_eq!(value, 42),
                s => {
                    assert_eq!(s, Status::ServerBusy as i32);
                    saw_busy = true;
                }
            }
        }
        assert!(saw_busy, "the long call held the store for about 1.5 s");
        assert_eq!(w.join().unwrap(), i64::from(units));
    });
    assert!(
        !server.is_terminated(),
        "waiting for a busy store is no fault"
    );
    assert_eq!(echo(), (0, 42), "the server thread serves again");
}

/// Two calls at once on a server with one replica: the second waits for the first, then gets
/// the binding's whole deadline for its own run. The wait is the server being busy, not its
/// fault, so neither call is cut short and the server is not terminated.
///
/// The first call holds the server for a fixed 8 s of its 10 s deadline (its thread's tick
/// hook sleeps), so the wait does not depend on the machine's speed; the second runs about
/// 3 s of work. Counted from its start, the second call would have 2 s left to run; counted
/// from its entry it has 10 s, which a machine three times slower than measured still meets.
#[test]
fn a_call_that_waited_for_a_busy_server_gets_its_whole_deadline_to_run() {
    let _guard = crate::shared();
    let deadline = Duration::from_secs(10);
    let kernel = Kernel::new().unwrap();
    let server = kernel
        .domain("faulty", lrpc_artifacts::FAULTY_SERVER)
        .unwrap();
    let options = ExportOptions::default().with_deadline(Some(deadline));
    kernel
        .export_as(&server, "lrpc:test/faulty", "lrpc:test/faulty", options)
        .unwrap();
    let first = faulty_client(&kernel, "first");
    let second = faulty_client(&kernel, "second");
    let long = units_for(&second, Duration::from_secs(3));
    let short = units_for(&first, Duration::from_millis(50));
    let (held, holding) = std::sync::mpsc::channel();
    let answers = std::thread::scope(|s| {
        let holder = s.spawn(|| {
            // At the first tick inside the server: let the second call go, then hold the
            // server's Store for 8 s.
            let mut once = Some(held);
            let hook = move |_wanted: bool| {
                if let Some(held) = once.take() {
                    let _ = held.send(());
                    std::thread::sleep(Duration::from_secs(8));
                }
            };
            lrpc_kernel::pace::set_tick_hook(Some(Box::new(hook)));
            let r = first.call::<(i32,), i64>("busy", (short,)).unwrap();
            lrpc_kernel::pace::set_tick_hook(None);
            r
        });
        let second = &second;
        let waiter = s.spawn(move || {
            holding
                .recv_timeout(Duration::from_secs(60))
                .expect("the first call reached a tick in the server");
            second.call::<(i32,), i64>("busy", (long,)).unwrap()
        });
        [holder.join().unwrap(), waiter.join().unwrap()]
    });
    assert_eq!(
        answers,
        [i64::from(short), i64::from(long)],
        "both calls ran to the end"
    );
    assert!(
        !server.is_terminated(),
        "waiting for the server is no fault"
    );
}
