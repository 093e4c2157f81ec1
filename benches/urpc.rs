//! URPC Figures 3 and 4: latency and throughput of Null calls over an asynchronous channel
//! as a function of T, the client's user-level threads, for C client processors and S server
//! processors.
//!
//! The client processor is the benchmark's thread; its T user-level threads are T call loops
//! multiplexed by a small round-robin executor (each "thread" is a pending [`Call`]; the
//! executor polls the channel with [`Call::try_take`] when it has nothing else to run, as
//! URPC's user-level scheduler does; a thread whose call returned makes its next call). The server's S processors are the
//! kernel's (`lrpc_kernel::channel::Processors`); with S = 0 the client processor runs the server's
//! loop when it has nothing runnable (processor donation). Latency is the time one thread
//! waits per call (elapsed / calls per thread), throughput all threads' calls per second.

use lrpc_kernel::channel::{AsyncBinding, Call, ChannelOptions, Processors};
use lrpc_kernel::{Domain, Kernel};
use std::time::Instant;

/// One point of Figs. 3 and 4.
#[derive(Debug, Clone, Copy)]
pub struct Point {
    /// ns a thread waits for one call.
    pub latency_ns: f64,
    /// Calls completed per second by all threads.
    pub calls_per_sec: f64,
}

/// A bench server with S processors and an asynchronous binding to it.
pub struct Urpc {
    _kernel: Kernel,
    _server: Domain,
    _cpus: Processors,
    binding: AsyncBinding,
    null: usize,
}

impl Urpc {
    /// The server with `s` processors of its own.
    pub fn new(s: usize) -> Urpc {
        let (kernel, server, cpus) = served(s);
        let binding = cpus
            .bind("lrpc:bench/bench", ChannelOptions::default())
            .expect("bind");
        let null = binding.procedure("null").expect("null");
        Urpc {
            _kernel: kernel,
            _server: server,
            _cpus: cpus,
            binding,
            null,
        }
    }

    /// Checks the answers of every bench procedure once.
    pub fn check(&self) {
        let b = &self.binding;
        let add = b.procedure("add").expect("add");
        let mut args = 40u32.to_le_bytes().to_vec();
        args.extend_from_slice(&2u32.to_le_bytes());
        let r = b.call_blocking(add, &args).expect("add");
        assert_eq!(r, 42u32.to_le_bytes(), "add over the channel");
        assert!(b.call_blocking(self.null, &[]).expect("null").is_empty());
    }

    /// The fastest of `rounds` short rounds of `t` threads (2,000 calls in all per round):
    /// on a machine shared with other work, the rounds in which the client's and the
    /// server's processors both had a core.
    pub fn best(&self, t: usize, rounds: usize) -> Point {
        let per_thread = (2_000 / t as u32).max(1);
        (0..rounds.max(1))
            .map(|_| self.run(t, per_thread))
            .max_by(|a, b| a.calls_per_sec.total_cmp(&b.calls_per_sec))
            .expect("at least one round")
    }

    /// `t` user-level threads making `calls` Null calls each.
    pub fn run(&self, t: usize, calls: u32) -> Point {
        let mut threads: Vec<(u32, Option<Call>)> = (0..t).map(|_| (0, None)).collect();
        let start = Instant::now();
        let mut done = 0;
        let mut idle = 0u32;
        while done < t {
            let mut progressed = false;
            for (made, call) in threads.iter_mut() {
                if let Some(c) = call {
                    match c.try_take() {
                        Some(r) => {
                            r.expect("null");
                            *call = None;
                            progressed = true;
                        }
                        None => continue,
                    }
                    if *made == calls {
                        done += 1;
                        continue;
                    }
                }
                if call.is_none() && *made < calls {
                    *made += 1;
                    *call = Some(self.binding.call_async(self.null, &[]));
                    progressed = true;
                }
            }
            if progressed {
                idle = 0;
            } else {
                // Nothing runnable: spin, and now and then give the core away (on a machine
                // with more runnable threads than cores the server's processor may be
                // waiting for this one).
                idle += 1;
                if idle.is_multiple_of(64) {
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
            }
        }
        let elapsed = start.elapsed().as_nanos() as f64;
        Point {
            latency_ns: elapsed / f64::from(calls),
            calls_per_sec: (t as f64 * f64::from(calls)) / (elapsed / 1e9),
        }
    }
}

/// The floor of any cross-processor call on this machine: the fastest of `rounds` rounds of
/// 2,000 round trips of two threads handing a counter back and forth through two atomic
/// words (no kernel, no wasm), in ns per round trip.
pub fn pingpong_floor(rounds: usize) -> f64 {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};
    let words = Arc::new([AtomicU32::new(0), AtomicU32::new(0)]);
    let n = 2_000u32 * rounds.max(1) as u32;
    let peer = {
        let words = words.clone();
        std::thread::spawn(move || {
            for i in 1..=n {
                while words[0].load(Ordering::Acquire) != i {
                    std::hint::spin_loop();
                }
                words[1].store(i, Ordering::Release);
            }
        })
    };
    let mut best = f64::MAX;
    let mut round = Instant::now();
    for i in 1..=n {
        words[0].store(i, Ordering::Release);
        while words[1].load(Ordering::Acquire) != i {
            std::hint::spin_loop();
        }
        if i % 2_000 == 0 {
            best = best.min(round.elapsed().as_nanos() as f64 / 2_000.0);
            round = Instant::now();
        }
    }
    peer.join().expect("the ping-pong peer");
    best
}

/// The bench server exported on a kernel of its own, with `s` processors.
fn served(s: usize) -> (Kernel, Domain, Processors) {
    let kernel = Kernel::new().expect("kernel");
    let server = kernel
        .domain("bench-server", lrpc_artifacts::BENCH_SERVER)
        .expect("server");
    kernel.export(&server, "lrpc:bench/bench").expect("export");
    let cpus = Processors::start(&kernel, &server, s).expect("processors");
    (kernel, server, cpus)
}

/// The same Null calls made by a guest client: the bench client domain holds the
/// asynchronous binding (`lrpc.channel_bind`) and runs T user-level threads on the SDK's
/// executor (`lrpc_sdk::exec`), each awaiting `null_async()` in a loop; it enters the kernel
/// only when none of them can run (`lrpc.channel_wait`: wait, or donate with S = 0).
pub struct GuestUrpc {
    _kernel: Kernel,
    _server: Domain,
    _cpus: Processors,
    client: Domain,
}

impl GuestUrpc {
    /// The server with `s` processors of its own, the guest client bound to it both ways
    /// (synchronously too, to check the asynchronous answers against).
    pub fn new(s: usize) -> GuestUrpc {
        let (kernel, server, cpus) = served(s);
        let client = kernel
            .domain("bench-client", lrpc_artifacts::BENCH_CLIENT)
            .expect("client");
        assert_eq!(client.call::<(), i32>("bind", ()).expect("bind"), 0);
        let r: i32 = client.call("bind_async", (0,)).expect("bind_async");
        assert_eq!(r, 0, "bind_async");
        GuestUrpc {
            _kernel: kernel,
            _server: server,
            _cpus: cpus,
            client,
        }
    }

    /// Checks the answers of every bench procedure against the synchronous path, from two
    /// user-level threads.
    pub fn check(&self) {
        let r: i64 = self
            .client
            .call("async_rounds", (2, 3, 200, 1))
            .expect("async_rounds");
        assert_eq!(r, 3 + 6, "the guest's asynchronous answers");
    }

    /// The fastest of `rounds` rounds of `t` threads (2,000 calls in all per round).
    pub fn best(&self, t: usize, rounds: usize) -> Point {
        let per_thread = (2_000 / t as u32).max(1);
        (0..rounds.max(1))
            .map(|_| self.run(t, per_thread))
            .max_by(|a, b| a.calls_per_sec.total_cmp(&b.calls_per_sec))
            .expect("at least one round")
    }

    /// `t` user-level threads in the guest making `calls` Null calls each.
    pub fn run(&self, t: usize, calls: u32) -> Point {
        let start = Instant::now();
        let r: i64 = self
            .client
            .call("async_null", (t as i32, calls as i32))
            .expect("async_null");
        assert_eq!(r, 0, "async_null");
        let elapsed = start.elapsed().as_nanos() as f64;
        Point {
            latency_ns: elapsed / f64::from(calls),
            calls_per_sec: (t as f64 * f64::from(calls)) / (elapsed / 1e9),
        }
    }
}
