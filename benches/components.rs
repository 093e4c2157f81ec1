//! The wasmtime component-model peers: the bench server and client of `guests/component-*`
//! as components (built and composed by this package's build script).
//!
//! * [`Fused`]: one composed component; the client instance imports `lrpc:bench/bench` from
//!   the server instance, so wasmtime compiles fused adapters between the two (no host code on
//!   the call path, and no isolation between them beyond separate linear memories inside one
//!   Store).
//! * [`HostLinked`]: server and client instantiated in two `Store`s, the client's import
//!   implemented by host functions that call the server's exports: the same isolation as the
//!   kernel's isolated path (separate Stores), linked the way an embedder would without this
//!   project.
//!
//! Both run the client's call loops (`lrpc:peers/runner`), like the kernel's bench client.
//! [`KernelLinked`] runs them on the kernel, bound to the server component or (a mixed pair)
//! to the core bench server.

use crate::Peer;
use wasmtime::component::{Component, ComponentExportIndex, Instance, Linker, TypedFunc};
use wasmtime::{Engine, Store};

/// The composed component (client and server with fused adapters).
pub const COMPOSED: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/component_composed.wasm"));
/// The server component.
pub const SERVER: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/component_server.wasm"));
/// The client component (imports `lrpc:bench/bench`).
pub const CLIENT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/component_client.wasm"));

const BENCH: &str = "lrpc:bench/bench";
const RUNNER: &str = "lrpc:peers/runner";

/// The export indices of the functions `names` of the exported interface `interface`.
fn functions<T, const N: usize>(
    store: &mut Store<T>,
    instance: &Instance,
    interface: &str,
    names: [&str; N],
) -> wasmtime::Result<[ComponentExportIndex; N]> {
    let parent = instance
        .get_export_index(&mut *store, None, interface)
        .ok_or_else(|| wasmtime::format_err!("the component exports no {interface}"))?;
    let mut out = Vec::with_capacity(N);
    for name in names {
        out.push(
            instance
                .get_export_index(&mut *store, Some(&parent), name)
                .ok_or_else(|| wasmtime::format_err!("{interface} has no {name}"))?,
        );
    }
    Ok(out
        .try_into()
        .unwrap_or_else(|_| unreachable!("one index per name")))
}

/// The client's call loops, typed.
struct Runner {
    null: TypedFunc<(i32,), (i32,)>,
    add: TypedFunc<(i32,), (i32,)>,
    big_in: TypedFunc<(i32, i32), (i64,)>,
    big_in_out: TypedFunc<(i32, i32), (i32,)>,
    intra: TypedFunc<(i32,), (i32,)>,
}

impl Runner {
    fn new<T>(store: &mut Store<T>, instance: &Instance) -> wasmtime::Result<Runner> {
        let [null, add, big_in, big_in_out, intra] = functions(
            store,
            instance,
            RUNNER,
            [
                "null-loop",
                "add-loop",
                "big-in-loop",
                "big-in-out-loop",
                "intra-loop",
            ],
        )?;
        Ok(Runner {
            null: instance.get_typed_func(&mut *store, null)?,
            add: instance.get_typed_func(&mut *store, add)?,
            big_in: instance.get_typed_func(&mut *store, big_in)?,
            big_in_out: instance.get_typed_func(&mut *store, big_in_out)?,
            intra: instance.get_typed_func(&mut *store, intra)?,
        })
    }
}

macro_rules! runner_calls {
    () => {
        fn null(&mut self, n: i32) -> i64 {
            self.runner
                .null
                .call(&mut self.store, (n,))
                .map_or(-1, |r| i64::from(r.0))
        }
        fn add(&mut self, n: i32) -> i64 {
            self.runner
                .add
                .call(&mut self.store, (n,))
                .map_or(-1, |r| i64::from(r.0))
        }
        fn big_in(&mut self, size: i32, n: i32) -> i64 {
            self.runner
                .big_in
                .call(&mut self.store, (size, n))
                .map_or(-1, |r| r.0)
        }
        fn big_in_out(&mut self, size: i32, n: i32) -> i64 {
            self.runner
                .big_in_out
                .call(&mut self.store, (size, n))
                .map_or(-1, |r| i64::from(r.0))
        }
    };
}

/// Client and server composed into one component (fused adapters).
pub struct Fused {
    store: Store<()>,
    runner: Runner,
}

impl Fused {
    /// Instantiates the composed component on `engine`.
    pub fn new(engine: &Engine) -> wasmtime::Result<Fused> {
        let component = Component::new(engine, COMPOSED)?;
        let mut store = Store::new(engine, ());
        // Engines with epoch interruption (the kernel's) need a deadline; never reached here.
        store.set_epoch_deadline(u64::MAX / 2);
        let instance = Linker::new(engine).instantiate(&mut store, &component)?;
        let runner = Runner::new(&mut store, &instance)?;
        Ok(Fused { store, runner })
    }
}

impl Fused {
    /// `n` local calls inside the client component: the intra-instance floor of a component.
    pub fn intra(&mut self, n: i32) -> i64 {
        self.runner
            .intra
            .call(&mut self.store, (n,))
            .map_or(-1, |r| i64::from(r.0))
    }
}

impl Peer for Fused {
    runner_calls!();
}

/// The server component alone, instantiated in its own Store, with its exports typed: the
/// server half of [`HostLinked`], and what the out-of-process gRPC peer hosts.
pub struct ComponentServer {
    store: Store<()>,
    null: TypedFunc<(), ()>,
    add: TypedFunc<(u32, u32), (u32,)>,
    big_in: TypedFunc<(Vec<u8>,), (u32,)>,
    big_in_out: TypedFunc<(Vec<u8>,), (Vec<u8>,)>,
}

impl ComponentServer {
    /// Instantiates the server component on `engine`.
    pub fn new(engine: &Engine) -> wasmtime::Result<ComponentServer> {
        let component = Component::new(engine, SERVER)?;
        let mut store = Store::new(engine, ());
        store.set_epoch_deadline(u64::MAX / 2);
        let instance = Linker::new(engine).instantiate(&mut store, &component)?;
        let [null, add, big_in, big_in_out] = functions(
            &mut store,
            &instance,
            BENCH,
            ["null", "add", "big-in", "big-in-out"],
        )?;
        Ok(ComponentServer {
            null: instance.get_typed_func(&mut store, null)?,
            add: instance.get_typed_func(&mut store, add)?,
            big_in: instance.get_typed_func(&mut store, big_in)?,
            big_in_out: instance.get_typed_func(&mut store, big_in_out)?,
            store,
        })
    }

    /// Calls `null`.
    pub fn null(&mut self) -> wasmtime::Result<()> {
        self.null.call(&mut self.store, ())
    }

    /// Calls `add`.
    pub fn add(&mut self, a: u32, b: u32) -> wasmtime::Result<u32> {
        Ok(self.add.call(&mut self.store, (a, b))?.0)
    }

    /// Calls `big-in`.
    pub fn big_in(&mut self, data: Vec<u8>) -> wasmtime::Result<u32> {
        Ok(self.big_in.call(&mut self.store, (data,))?.0)
    }

    /// Calls `big-in-out`.
    pub fn big_in_out(&mut self, data: Vec<u8>) -> wasmtime::Result<Vec<u8>> {
        Ok(self.big_in_out.call(&mut self.store, (data,))?.0)
    }
}

/// Server and client components in two Stores, the client's import implemented by host
/// functions that call into the server's Store.
pub struct HostLinked {
    store: Store<ComponentServer>,
    runner: Runner,
}

impl HostLinked {
    /// Instantiates both components on `engine` and links them through the host.
    pub fn new(engine: &Engine) -> wasmtime::Result<HostLinked> {
        let server = ComponentServer::new(engine)?;
        let mut linker = Linker::<ComponentServer>::new(engine);
        let mut i = linker.instance(BENCH)?;
        i.func_wrap("null", |mut cx, ()| cx.data_mut().null())?;
        i.func_wrap("add", |mut cx, (a, b): (u32, u32)| {
            Ok((cx.data_mut().add(a, b)?,))
        })?;
        i.func_wrap("big-in", |mut cx, (data,): (Vec<u8>,)| {
            Ok((cx.data_mut().big_in(data)?,))
        })?;
        i.func_wrap("big-in-out", |mut cx, (data,): (Vec<u8>,)| {
            Ok((cx.data_mut().big_in_out(data)?,))
        })?;

        let client_component = Component::new(engine, CLIENT)?;
        let mut store = Store::new(engine, server);
        store.set_epoch_deadline(u64::MAX / 2);
        let instance = linker.instantiate(&mut store, &client_component)?;
        let runner = Runner::new(&mut store, &instance)?;
        Ok(HostLinked { store, runner })
    }
}

impl Peer for HostLinked {
    runner_calls!();
}

/// The same server and client as component domains of the kernel: the client's import
/// `lrpc:bench/bench` bound by the clerk to the server's export, each call checked against
/// its Binding Object and run on the calling thread in the server's Store.
pub struct KernelLinked {
    client: lrpc_kernel::ComponentDomain,
    _server: Box<dyn std::any::Any>,
    _kernel: lrpc_kernel::Kernel,
}

impl KernelLinked {
    /// Creates both domains on a new kernel and binds the client to the server.
    pub fn new() -> Result<KernelLinked, lrpc_kernel::Error> {
        let kernel = lrpc_kernel::Kernel::new()?;
        let server = kernel.component("bench-server", SERVER, Default::default())?;
        kernel.export(&server, BENCH)?;
        let client = kernel.component("bench-client", CLIENT, Default::default())?;
        Ok(KernelLinked {
            client,
            _server: Box::new(server),
            _kernel: kernel,
        })
    }

    /// A mixed pair: the same client component, its import bound by the clerk to the core
    /// bench server's export (the kernel encodes each call onto an A-stack of its own in the
    /// server's memory and decodes the results).
    pub fn to_astack() -> Result<KernelLinked, lrpc_kernel::Error> {
        let kernel = lrpc_kernel::Kernel::new()?;
        let server = kernel.domain("bench-server", lrpc_artifacts::BENCH_SERVER)?;
        kernel.export(&server, BENCH)?;
        let client = kernel.component("bench-client", CLIENT, Default::default())?;
        Ok(KernelLinked {
            client,
            _server: Box::new(server),
            _kernel: kernel,
        })
    }

    fn run(&self, f: &str, args: &[i32]) -> i64 {
        use wasmtime::component::Val;
        let args: Vec<Val> = args.iter().map(|&a| Val::S32(a)).collect();
        match self.client.call(RUNNER, f, &args).as_deref() {
            Ok([Val::S32(r)]) => i64::from(*r),
            Ok([Val::S64(r)]) => *r,
            _ => -1,
        }
    }
}

impl Peer for KernelLinked {
    fn null(&mut self, n: i32) -> i64 {
        self.run("null-loop", &[n])
    }
    fn add(&mut self, n: i32) -> i64 {
        self.run("add-loop", &[n])
    }
    fn big_in(&mut self, size: i32, n: i32) -> i64 {
        self.run("big-in-loop", &[size, n])
    }
    fn big_in_out(&mut self, size: i32, n: i32) -> i64 {
        self.run("big-in-out-loop", &[size, n])
    }
}
