//! Benchmarks of the lrpc kernel (`cargo bench -p lrpc-benches`).
//!
//! * `table_iv`: LRPC's Table IV (Null, Add, BigIn, BigInOut) on the isolated path, with two
//!   floors in the same group: an intra-instance call and wasmtime's host→wasm typed call.
//! * `threads`: call throughput with one and two calling threads (LRPC Fig. 2).
//! * `flick`: Flick's Figs. 10, 11 and 12 (presentations).
//! * `report`: every case in a quick mode, written to `bench-results/`.
//!
//! Peers measured beside the isolated path: the direct-linked path, thread-per-domain message
//! passing (`Serving::OwnThread`) and an out-of-process gRPC plugin on a Unix socket
//! (`lrpc-grpc-peer`, this package's binary).
//!
//! Calls are driven by loops inside the client guest, so a sample measures `iters` calls
//! plus one host→client entry; criterion divides by `iters`.

use lrpc::{Domain, DomainOptions, Kernel};

pub mod components;

/// The gRPC peer's protocol (`proto/bench.proto`).
#[allow(missing_docs, clippy::all, reason = "generated code")]
pub mod pb {
    tonic::include_proto!("lrpc.bench");
}

/// A kernel with a bench server (`replicas` instances) and a bound bench client.
pub fn setup(replicas: usize) -> (Kernel, Domain, Domain) {
    setup_with(replicas, lrpc::Serving::Migrate)
}

/// Like [`setup`], with the server run as `serving` says.
pub fn setup_with(replicas: usize, serving: lrpc::Serving) -> (Kernel, Domain, Domain) {
    let kernel = Kernel::new().expect("kernel");
    let server = kernel
        .domain_with(
            "bench-server",
            lrpc::artifacts::BENCH_SERVER,
            DomainOptions {
                replicas,
                ..Default::default()
            },
        )
        .expect("server");
    kernel
        .export_as(
            &server,
            "lrpc:bench/bench",
            "lrpc:bench/bench",
            lrpc::ExportOptions {
                serving,
                ..Default::default()
            },
        )
        .expect("export");
    let client = new_client(&kernel, "bench-client");
    (kernel, server, client)
}

/// Another bound bench client.
pub fn new_client(kernel: &Kernel, name: &str) -> Domain {
    let client = kernel
        .domain(name, lrpc::artifacts::BENCH_CLIENT)
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

    /// `n` null calls; 0, or -1 if one failed.
    pub fn null(&mut self, n: i32) -> i64 {
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
    pub fn add(&mut self, n: i32) -> i64 {
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

    /// `n` big-in-out calls of `len` bytes, the first reply checked; 0, or -1.
    pub fn big_in_out(&mut self, len: usize, n: i32) -> i64 {
        let data: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
        let want: Vec<u8> = data.iter().rev().map(|b| b ^ 0x5a).collect();
        let c = &mut self.client;
        self.rt.block_on(async {
            for i in 0..n {
                match c.big_in_out(pb::Blob { data: data.clone() }).await {
                    Ok(r) if i > 0 || r.get_ref().data == want => {}
                    _ => return -1,
                }
            }
            0
        })
    }
}

impl Drop for GrpcPeer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A kernel with `server_wasm` exported as `lrpc:bench/bench` (server presentation text
/// `server`, serving mode `serving`) and a bound client from `client_wasm` (client
/// presentation text `client`). Returns the kernel and the client.
pub fn pair(
    client_wasm: &[u8],
    server_wasm: &[u8],
    client: Option<String>,
    server: Option<String>,
    serving: lrpc::Serving,
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
            lrpc::ExportOptions {
                presentation: sp,
                serving,
                ..Default::default()
            },
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
            DomainOptions {
                presentations,
                ..Default::default()
            },
        )
        .expect("client");
    assert_eq!(c.call::<(), i32>("bind", ()).expect("bind"), 0);
    (kernel, c)
}

/// The text of a presentation of `lrpc:bench/bench` for `side` with `trust`, plus `extra`.
pub fn presentation_text(side: &str, trust: &str, extra: &str) -> String {
    format!("interface = \"lrpc:bench/bench\"\nside = \"{side}\"\ntrust = \"{trust}\"\n{extra}")
}
