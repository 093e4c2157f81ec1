//! Benchmarks of the lrpc kernel (`cargo bench -p lrpc-benches`).
//!
//! * `table_iv`: LRPC's Table IV (Null, Add, BigIn, BigInOut) on the isolated path, with two
//!   floors in the same group: an intra-instance call and wasmtime's host→wasm typed call.
//! * `threads`: call throughput with one and two calling threads (LRPC Fig. 2).
//! * `flick`: Flick's Figs. 10, 11 and 12 (presentations).
//! * `urpc`: URPC Figs. 3 and 4, asynchronous Null calls over a channel as T, C and S vary.
//! * `report`: every case in a quick mode, written to `bench-results/`.
//!
//! Peers measured beside the isolated path: the direct-linked path, thread-per-domain message
//! passing (`Serving::OwnThread`) and an out-of-process gRPC plugin on a Unix socket
//! (`lrpc-grpc-peer`, this package's binary).
//!
//! Calls are driven by loops inside the client guest, so a sample measures `iters` calls
//! plus one host→client entry; criterion divides by `iters`.

use lrpc_kernel::{Domain, DomainOptions, Kernel};

pub mod components;
pub mod urpc;

/// The gRPC peer's protocol (`proto/bench.proto`).
#[allow(missing_docs, clippy::all, reason = "generated code")]
pub mod pb {
    tonic::include_proto!("lrpc.bench");
}

/// A kernel with a bench server (`replicas` instances) and a bound bench client.
pub fn setup(replicas: usize) -> (Kernel, Domain, Domain) {
    setup_with(replicas, lrpc_kernel::Serving::Migrate)
}

/// Like [`setup`], with the server run as `serving` says.
pub fn setup_with(replicas: usize, serving: lrpc_kernel::Serving) -> (Kernel, Domain, Domain) {
    let kernel = Kernel::new().expect("kernel");
    let server = kernel
        .domain_with(
            "bench-server",
            lrpc_artifacts::BENCH_SERVER,
            DomainOptions::default().with_replicas(replicas),
        )
        .expect("server");
    kernel
        .export_as(
            &server,
            "lrpc:bench/bench",
            "lrpc:bench/bench",
            lrpc_kernel::ExportOptions::default().with_serving(serving),
        )
        .expect("export");
    let client = new_client(&kernel, "bench-client");
    (kernel, server, client)
}

/// Another bound bench client.
pub fn new_client(kernel: &Kernel, name: &str) -> Domain {
    let client = kernel
        .domain(name, lrpc_artifacts::BENCH_CLIENT)
        .expect("client");
    let s: i32 = client.call("bind", ()).expect("bind");
    assert_eq!(s, 0, "bind failed with status {s}");
    client
}

/// A plain wasmtime `Store` (no kernel) on the kernel's engine with an empty exported
/// function: the floor for a host→wasm typed call.
pub fn raw_floor(kernel: &Kernel) -> (wasmtime::Store<()>, wasmtime::TypedFunc<(), ()>) {
    let module = wasmtime::Module::new(kernel.engine(), r#"(module (func (export "f")))"#)
        .expect("floor module");
    let mut store = wasmtime::Store::new(kernel.engine(), ());
    store.set_epoch_deadline(u64::MAX / 2);
    let instance = wasmtime::Instance::new(&mut store, &module, &[]).expect("instantiate");
    let f = instance
        .get_typed_func::<(), ()>(&mut store, "f")
        .expect("export");
    (store, f)
}

/// The bare mechanism under an isolated call, without the kernel: a wasm loop whose import is
/// a host function that calls an entry-shaped export (five `i32`s in, one out) of an instance
/// in another `Store`, on the kernel's engine. What the kernel and the stubs add to a call is
/// the isolated path's time minus this one.
pub struct CrossStore {
    store: wasmtime::Store<CrossData>,
    run: wasmtime::TypedFunc<i32, i32>,
}

struct CrossData {
    server: wasmtime::Store<()>,
    entry: wasmtime::TypedFunc<(i32, i32, i32, i32, i32), i32>,
}

impl CrossStore {
    /// Builds both instances on `kernel`'s engine.
    pub fn new(kernel: &Kernel) -> CrossStore {
        use wasmtime::{Caller, Instance, Linker, Module, Store};
        let engine = kernel.engine();
        let server = Module::new(
            engine,
            r#"(module (memory 1)
                 (func (export "entry") (param i32 i32 i32 i32 i32) (result i32) i32.const 0))"#,
        )
        .expect("server module");
        let mut s = Store::new(engine, ());
        s.set_epoch_deadline(u64::MAX / 2);
        let instance = Instance::new(&mut s, &server, &[]).expect("server instance");
        let entry = instance
            .get_typed_func(&mut s, "entry")
            .expect("entry export");
        let client = Module::new(
            engine,
            r#"(module
                 (import "lrpc" "call" (func $call (param i64 i32 i32) (result i32)))
                 (func (export "run") (param $n i32) (result i32)
                   (block $done
                     (loop $next
                       (br_if $done (i32.eqz (local.get $n)))
                       (if (call $call (i64.const 1) (i32.const 0) (i32.const 64))
                         (then (return (i32.const 1))))
                       (local.set $n (i32.sub (local.get $n) (i32.const 1)))
                       (br $next)))
                   (i32.const 0)))"#,
        )
        .expect("client module");
        let mut linker = Linker::<CrossData>::new(engine);
        linker
            .func_wrap(
                "lrpc",
                "call",
                |mut caller: Caller<'_, CrossData>, _h: i64, _p: i32, a: i32| -> i32 {
                    let d = caller.data_mut();
                    d.entry.call(&mut d.server, (a, 8, 0, 0, 0)).unwrap_or(-1)
                },
            )
            .expect("host function");
        let mut store = Store::new(engine, CrossData { server: s, entry });
        store.set_epoch_deadline(u64::MAX / 2);
        let instance = linker
            .instantiate(&mut store, &client)
            .expect("client instance");
        let run = instance
            .get_typed_func(&mut store, "run")
            .expect("run export");
        CrossStore { store, run }
    }

    /// `n` crossings; 0, or a negative value if one failed.
    pub fn run(&mut self, n: i32) -> i64 {
        match self.run.call(&mut self.store, n) {
            Ok(0) => 0,
            _ => -1,
        }
    }
}

/// The kernel's isolated path without the client stub: the `hostile` guest (which speaks
/// the raw ABI) bound to the bench server, calling `lrpc.call` on one A-stack in a loop.
pub struct RawCall {
    f: lrpc_kernel::domain::DomainFunc<(i64, i32, i32, i32), i32>,
    handle: i64,
    astack: i32,
    _kernel: Kernel,
}

impl RawCall {
    /// A kernel with the bench server exported and the raw client bound to it.
    pub fn new() -> RawCall {
        let kernel = Kernel::new().expect("kernel");
        let server = kernel
            .domain("bench-server", lrpc_artifacts::BENCH_SERVER)
            .expect("server");
        kernel.export(&server, "lrpc:bench/bench").expect("export");
        let raw = kernel
            .domain("raw-client", lrpc_artifacts::HOSTILE)
            .expect("raw client");
        let fp = kernel
            .interface("lrpc:bench/bench")
            .expect("interface")
            .fingerprint as i64;
        let handle: i64 = raw.call("bind_raw", (fp,)).expect("bind_raw");
        assert!(handle > 0, "bind failed with status {}", -handle);
        let astack: i32 = raw.call("astack", (0,)).expect("astack");
        RawCall {
            f: raw.func("call_loop").expect("call_loop"),
            handle,
            astack,
            _kernel: kernel,
        }
    }

    /// `n` null calls; 0, or a negative value if one failed.
    pub fn run(&mut self, n: i32) -> i64 {
        match self.f.call((self.handle, 0, self.astack, n)) {
            Ok(0) => 0,
            Ok(s) => -i64::from(s),
            Err(_) => -1,
        }
    }
}

impl Default for RawCall {
    fn default() -> RawCall {
        RawCall::new()
    }
}

/// The out-of-process gRPC peer (`lrpc-grpc-peer`) running on a Unix socket, and a client
/// connected to it. Dropping it stops the process.
pub struct GrpcPeer {
    child: std::process::Child,
    path: std::path::PathBuf,
    rt: tokio::runtime::Runtime,
    client: pb::bench_client::BenchClient<tonic::transport::Channel>,
}

impl GrpcPeer {
    /// Starts the peer executable `exe` and connects to it.
    pub fn start(exe: &std::path::Path) -> GrpcPeer {
        let path = std::env::temp_dir().join(format!("lrpc-grpc-peer-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let child = std::process::Command::new(exe)
            .arg(&path)
            .spawn()
            .expect("starting the gRPC peer");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("tokio runtime");
        let client = rt.block_on(async {
            for _ in 0..200 {
                let p = path.clone();
                let connector = tower::service_fn(move |_: tonic::transport::Uri| {
                    let p = p.clone();
                    async move {
                        let s = tokio::net::UnixStream::connect(p).await?;
                        Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(s))
                    }
                });
                let endpoint =
                    tonic::transport::Endpoint::try_from("http://lrpc.peer").expect("endpoint");
                if let Ok(ch) = endpoint.connect_with_connector(connector).await {
                    return pb::bench_client::BenchClient::new(ch);
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            panic!("the gRPC peer did not come up on {}", path.display());
        });
        GrpcPeer {
            child,
            path,
            rt,
            client,
        }
    }
}

impl Drop for GrpcPeer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A mixed pair: the A-stack bench client bound to the bench server as a component domain
/// (its calls go through the component's core stand-in).
pub fn astack_to_component() -> (Kernel, Domain) {
    let kernel = Kernel::new().expect("kernel");
    let server = kernel
        .component("bench-server", components::SERVER, Default::default())
        .expect("server component");
    kernel.export(&server, "lrpc:bench/bench").expect("export");
    let client = kernel
        .domain("bench-client", lrpc_artifacts::BENCH_CLIENT)
        .expect("client");
    assert_eq!(client.call::<(), i32>("bind", ()).expect("bind"), 0);
    (kernel, client)
}

/// A kernel with `server_wasm` exported as `lrpc:bench/bench` (server presentation text
/// `server`, serving mode `serving`) and a bound client from `client_wasm` (client
/// presentation text `client`). Returns the kernel and the client.
pub fn pair(
    client_wasm: &[u8],
    server_wasm: &[u8],
    client: Option<String>,
    server: Option<String>,
    serving: lrpc_kernel::Serving,
) -> (Kernel, Domain) {
    let kernel = Kernel::new().expect("kernel");
    let s = kernel.domain("bench-server", server_wasm).expect("server");
    let sp = server.map(|t| {
        kernel
            .presentation("server", &t)
            .expect("server presentation")
    });
    kernel
        .export_as(
            &s,
            "lrpc:bench/bench",
            "lrpc:bench/bench",
            lrpc_kernel::ExportOptions::default()
                .with_presentation(sp)
                .with_serving(serving),
        )
        .expect("export");
    let presentations = client
        .map(|t| {
            vec![
                kernel
                    .presentation("client", &t)
                    .expect("client presentation"),
            ]
        })
        .unwrap_or_default();
    let c = kernel
        .domain_with(
            "bench-client",
            client_wasm,
            DomainOptions::default().with_presentations(presentations),
        )
        .expect("client");
    assert_eq!(c.call::<(), i32>("bind", ()).expect("bind"), 0);
    (kernel, c)
}

/// A bound bench client on the direct-linked path that lends its `in` buffer to big-in (client
/// `trashable`, server `preserved`): the peer of the fused composition, which copies it.
pub fn direct_borrow_pair() -> (Kernel, Domain) {
    pair(
        lrpc_artifacts::BENCH_CLIENT,
        lrpc_artifacts::BENCH_SERVER,
        Some(presentation_text(
            "client",
            "leaky+unprotected",
            "[function.big-in]\nin.data = \"trashable\"\n",
        )),
        Some(presentation_text(
            "server",
            "none",
            "[function.big-in]\nin.data = \"preserved\"\n",
        )),
        lrpc_kernel::Serving::Migrate,
    )
}

/// The text of a presentation of `lrpc:bench/bench` for `side` with `trust`, plus `extra`.
pub fn presentation_text(side: &str, trust: &str, extra: &str) -> String {
    format!("interface = \"lrpc:bench/bench\"\nside = \"{side}\"\ntrust = \"{trust}\"\n{extra}")
}

/// Median ns per call of `a(n)` and of `b(n)` over nine rounds each, the rounds interleaved
/// (a, b, a, b, …) so that both see the same machine: for two peers whose ratio is a target
/// and whose difference is smaller than the drift of a shared machine between two separate
/// measurements. Each function runs `n` calls and answers a negative value if one failed.
pub fn per_call_interleaved(
    mut a: impl FnMut(i32) -> i64,
    mut b: impl FnMut(i32) -> i64,
    n: i32,
) -> (f64, f64) {
    assert!(a(n.min(1000)) >= 0, "a call failed before timing");
    assert!(b(n.min(1000)) >= 0, "a call failed before timing");
    let time = |f: &mut dyn FnMut(i32) -> i64| {
        let t = std::time::Instant::now();
        let r = f(n);
        assert!(r >= 0, "a call failed while timing ({r})");
        t.elapsed().as_nanos() as f64 / f64::from(n)
    };
    let (mut ra, mut rb) = (Vec::new(), Vec::new());
    for _ in 0..9 {
        ra.push(time(&mut a));
        rb.push(time(&mut b));
    }
    ra.sort_by(f64::total_cmp);
    rb.sort_by(f64::total_cmp);
    (ra[4], rb[4])
}

/// The argument sizes of the `in` buffers every peer is measured with (LRPC's 200 B, plus
/// 4 KiB and 64 KiB).
pub const SIZES: [i32; 3] = [200, 4096, 65536];

/// One peer's Table IV call loops. Each method makes `n` calls (at least one) and returns a
/// negative value when a call fails.
pub trait Peer {
    /// `n` null calls; 0 on success.
    fn null(&mut self, n: i32) -> i64;
    /// `n` add calls, each sum checked; 0 on success (1000 on a wrong sum).
    fn add(&mut self, n: i32) -> i64;
    /// `n` big-in calls with `size` pattern bytes; the server's last answer.
    fn big_in(&mut self, size: i32, n: i32) -> i64;
    /// `n` big-in-out calls with `size` pattern bytes, the first reply checked; 0 on success.
    fn big_in_out(&mut self, size: i32, n: i32) -> i64;
}

/// The bytes every peer's big-in and big-in-out calls carry: `size` bytes of `(i * 7 + 3)`, as
/// the bench client guests make them.
pub fn pattern(size: i32) -> Vec<u8> {
    (0..size.max(0) as usize)
        .map(|i| (i * 7 + 3) as u8)
        .collect()
}

/// What the bench server answers to big-in with `size` pattern bytes.
pub fn big_in_answer(size: i32) -> i64 {
    let data = pattern(size);
    let ends = match data.as_slice() {
        [] => 0,
        [only] => *only,
        [first, .., last] => first ^ last,
    };
    i64::from(((data.len() as u32) << 8) | u32::from(ends))
}

/// Checks, outside any timed loop, that `peer` answers every procedure correctly.
pub fn check(peer: &mut dyn Peer, name: &str) {
    assert_eq!(peer.null(10), 0, "{name}: null");
    assert_eq!(peer.add(100), 0, "{name}: add, sums checked call by call");
    for size in [0, 1, 200, 4096] {
        assert_eq!(
            peer.big_in(size, 2),
            big_in_answer(size),
            "{name}: big-in of {size} bytes"
        );
        assert_eq!(
            peer.big_in_out(size, 2),
            0,
            "{name}: big-in-out of {size} bytes"
        );
    }
}

/// The out-of-process plugin over gRPC, as a [`Peer`]: each call a request on the socket.
impl Peer for GrpcPeer {
    /// `n` null calls; 0, or -1 if one failed.
    fn null(&mut self, n: i32) -> i64 {
        let c = &mut self.client;
        self.rt.block_on(async {
            for _ in 0..n {
                if c.null(pb::Empty {}).await.is_err() {
                    return -1;
                }
            }
            0
        })
    }

    /// `n` add calls, each checked; 0, or -1 on a failure or a wrong sum.
    fn add(&mut self, n: i32) -> i64 {
        let c = &mut self.client;
        self.rt.block_on(async {
            for i in 0..n as u32 {
                match c.add(pb::AddRequest { a: i, b: 7 }).await {
                    Ok(r) if r.get_ref().value == i.wrapping_add(7) => {}
                    _ => return -1,
                }
            }
            0
        })
    }

    /// `n` big-in calls of `size` pattern bytes; the last answer, or -1.
    fn big_in(&mut self, size: i32, n: i32) -> i64 {
        let data = pattern(size);
        let c = &mut self.client;
        self.rt.block_on(async {
            let mut last = -1;
            for _ in 0..n.max(1) {
                match c.big_in(pb::Blob { data: data.clone() }).await {
                    Ok(r) => last = i64::from(r.get_ref().value),
                    Err(_) => return -1,
                }
            }
            last
        })
    }

    /// `n` big-in-out calls of `size` pattern bytes, the first reply checked; 0, or -1.
    fn big_in_out(&mut self, size: i32, n: i32) -> i64 {
        let data = pattern(size);
        let want: Vec<u8> = data.iter().map(|b| b ^ 0x5a).collect();
        let c = &mut self.client;
        self.rt.block_on(async {
            for i in 0..n.max(1) {
                match c.big_in_out(pb::Blob { data: data.clone() }).await {
                    Ok(r) if i > 0 || r.get_ref().data == want => {}
                    _ => return -1,
                }
            }
            0
        })
    }
}

/// A bound bench client domain (and what keeps it alive) as a [`Peer`]: the isolated path,
/// the direct-linked path or message passing, as its kernel and presentations say.
pub struct Lrpc {
    null: lrpc_kernel::domain::DomainFunc<(i32,), i32>,
    add: lrpc_kernel::domain::DomainFunc<(i32,), i64>,
    big_in: lrpc_kernel::domain::DomainFunc<(i32, i32), i64>,
    big_in_out: lrpc_kernel::domain::DomainFunc<(i32, i32), i32>,
    _kernel: Kernel,
}

impl Lrpc {
    /// Wraps `client` (a bound `bench-client` of `kernel`).
    pub fn new(kernel: Kernel, client: &Domain) -> Lrpc {
        Lrpc {
            null: client.func("null").expect("null"),
            add: client.func("add_loop").expect("add_loop"),
            big_in: client.func("big_in").expect("big_in"),
            big_in_out: client.func("big_in_out_loop").expect("big_in_out_loop"),
            _kernel: kernel,
        }
    }
}

impl Peer for Lrpc {
    fn null(&mut self, n: i32) -> i64 {
        self.null.call((n,)).map_or(-1, i64::from)
    }
    fn add(&mut self, n: i32) -> i64 {
        self.add.call((n,)).unwrap_or(-1)
    }
    fn big_in(&mut self, size: i32, n: i32) -> i64 {
        self.big_in.call((size, n)).unwrap_or(-1)
    }
    fn big_in_out(&mut self, size: i32, n: i32) -> i64 {
        self.big_in_out.call((size, n)).map_or(-1, i64::from)
    }
}

/// Builds one peer (see [`peers`]).
pub type MakePeer = Box<dyn Fn() -> Box<dyn Peer>>;

/// Every Table IV peer, by the name its cases carry (`table-iv/<name>/...`), with a builder
/// (so that only the peer being measured is alive: idle peers' threads would disturb it) and
/// a scale for how many calls a timing round makes (relative to the isolated path).
pub fn peers(grpc_exe: &std::path::Path) -> Vec<(&'static str, MakePeer, f64)> {
    fn lrpc_peer(client: Option<String>, serving: lrpc_kernel::Serving) -> MakePeer {
        Box::new(move || {
            let (kernel, c) = pair(
                lrpc_artifacts::BENCH_CLIENT,
                lrpc_artifacts::BENCH_SERVER,
                client.clone(),
                None,
                serving,
            );
            Box::new(Lrpc::new(kernel, &c))
        })
    }
    /// A component peer, with the kernel whose engine configuration it runs on.
    struct OnKernel<P> {
        peer: P,
        _kernel: Kernel,
    }
    impl<P: Peer> Peer for OnKernel<P> {
        fn null(&mut self, n: i32) -> i64 {
            self.peer.null(n)
        }
        fn add(&mut self, n: i32) -> i64 {
            self.peer.add(n)
        }
        fn big_in(&mut self, size: i32, n: i32) -> i64 {
            self.peer.big_in(size, n)
        }
        fn big_in_out(&mut self, size: i32, n: i32) -> i64 {
            self.peer.big_in_out(size, n)
        }
    }
    let grpc_exe = grpc_exe.to_path_buf();
    vec![
        (
            "isolated",
            lrpc_peer(None, lrpc_kernel::Serving::Migrate),
            1.0,
        ),
        (
            "direct",
            lrpc_peer(
                Some(presentation_text("client", "leaky+unprotected", "")),
                lrpc_kernel::Serving::Migrate,
            ),
            4.0,
        ),
        (
            "component-host",
            Box::new(|| {
                let kernel = Kernel::new().expect("kernel");
                let peer =
                    components::HostLinked::new(kernel.engine()).expect("host-linked components");
                Box::new(OnKernel {
                    peer,
                    _kernel: kernel,
                })
            }),
            0.5,
        ),
        (
            "component-kernel",
            Box::new(|| {
                Box::new(components::KernelLinked::new().expect("component domains"))
                    as Box<dyn Peer>
            }),
            0.5,
        ),
        (
            "component-to-astack",
            Box::new(|| {
                Box::new(components::KernelLinked::to_astack().expect("a mixed pair"))
                    as Box<dyn Peer>
            }),
            0.5,
        ),
        (
            "astack-to-component",
            Box::new(|| {
                let (kernel, client) = astack_to_component();
                Box::new(OnKernel {
                    peer: Lrpc::new(kernel.clone(), &client),
                    _kernel: kernel,
                })
            }),
            0.5,
        ),
        (
            "component-fused",
            Box::new(|| {
                let kernel = Kernel::new().expect("kernel");
                let peer = components::Fused::new(kernel.engine()).expect("the fused composition");
                Box::new(OnKernel {
                    peer,
                    _kernel: kernel,
                })
            }),
            4.0,
        ),
        (
            "message-passing",
            lrpc_peer(None, lrpc_kernel::Serving::OwnThread),
            0.01,
        ),
        (
            "grpc-uds",
            Box::new(move || Box::new(GrpcPeer::start(&grpc_exe))),
            0.001,
        ),
    ]
}

/// Sets `keys` in the `ratios` object of the report's summary (written by the `report`
/// bench), keeping everything else.
pub fn merge_summary(path: &std::path::Path, keys: &[(&str, f64)]) {
    let Ok(text) = std::fs::read_to_string(path) else {
        eprintln!("{} not found: run the report bench first", path.display());
        return;
    };
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let Some(at) = lines.iter().position(|l| l.trim() == "\"ratios\": {") else {
        eprintln!("{}: no ratios object", path.display());
        return;
    };
    for (k, v) in keys {
        let key = format!("\"{k}\"");
        // In place when present, keeping its comma; at the top of the object otherwise.
        match lines[at..]
            .iter()
            .position(|l| l.trim_start().starts_with(&key))
        {
            Some(i) => {
                let l = &mut lines[at + i];
                let comma = if l.trim_end().ends_with(',') { "," } else { "" };
                *l = format!("    {key}: {v:.3}{comma}");
            }
            None => lines.insert(at + 1, format!("    {key}: {v:.3},")),
        }
    }
    let _ = std::fs::write(path, lines.join("\n") + "\n");
}
