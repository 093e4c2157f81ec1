//! Component domains: components built with wit-bindgen for `wasm32-wasip2`
//! (`guests/comp-*`), exported through the clerk, their imports bound to other component
//! domains; failures, restart, WASI capabilities and limits.

use lrpc_artifacts::{COMP_DRIVER, COMP_HOLDER, COMP_KV_SERVER, COMP_PROBE};
use lrpc_kernel::{
    ComponentDomain, Error, Kernel, Status, component::AnyDomain, component::ComponentLimits,
    component::ComponentOptions, component::Preopen, component::Stdio, component::WasiGrants,
    error::Fault,
};
use std::path::{Path, PathBuf};
use std::time::Duration;
use wasmtime::component::Val;

const PROBE: &str = "lrpc:comp/probe";
const DRIVER: &str = "lrpc:comp/driver";
const KV: &str = "lrpc:kv/store";
const COUNTERS: &str = "lrpc:comp/counters";
const HOLDER: &str = "lrpc:comp/holder";

/// A kernel that knows the component guests' WIT (`guests/comp-wit`).
fn kernel() -> Kernel {
    let k = Kernel::new().expect("kernel");
    k.add_wit_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../guests/comp-wit"))
        .expect("the component guests' WIT");
    k
}

fn probe_with(k: &Kernel, options: ComponentOptions) -> ComponentDomain {
    let p = k.component("probe", COMP_PROBE, options).expect("probe");
    k.export(&p, PROBE).expect("export probe");
    p
}

/// A kernel with the probe and the key-value server exported, and the driver bound to both.
fn trio(probe: ComponentOptions) -> (Kernel, ComponentDomain, ComponentDomain) {
    let k = kernel();
    let p = probe_with(&k, probe);
    let kv = k
        .component("kv", COMP_KV_SERVER, ComponentOptions::default())
        .expect("kv server");
    k.export(&kv, KV).expect("export kv");
    let d = k
        .component("driver", COMP_DRIVER, ComponentOptions::default())
        .expect("driver");
    (k, p, d)
}

fn call1(d: &ComponentDomain, iface: &str, f: &str, args: &[Val]) -> Val {
    let mut r = d.call(iface, f, args).expect("call");
    assert_eq!(r.len(), 1, "{f}: one result");
    r.remove(0)
}

fn s(text: &str) -> Val {
    Val::String(text.into())
}

fn ok_string(v: Val) -> Result<String, String> {
    match v {
        Val::Result(Ok(Some(b))) => match *b {
            Val::String(s) => Ok(s),
            other => panic!("not a string: {other:?}"),
        },
        Val::Result(Ok(None)) => Ok(String::new()),
        Val::Result(Err(Some(b))) => match *b {
            Val::String(s) => Err(s),
            other => panic!("not a string: {other:?}"),
        },
        other => panic!("not a result: {other:?}"),
    }
}

/// A fresh directory under the system's temporary directory.
fn scratch(tag: &str) -> PathBuf {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "lrpc-comp-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

#[test]
fn component_export_and_bind_by_name() {
    let _g = crate::shared();
    let (k, _p, d) = trio(ComponentOptions::default());
    let mut names = k.exported();
    names.retain(|n| n == PROBE || n == KV);
    assert_eq!(names, vec![PROBE.to_string(), KV.to_string()]);
    let bound = d.bindings();
    assert_eq!(bound.len(), 2, "{bound:?}");
    assert!(bound.iter().all(|b| b.live));
    assert!(
        bound
            .iter()
            .any(|b| b.interface == PROBE && b.server == "probe")
    );
    assert!(bound.iter().any(|b| b.interface == KV && b.server == "kv"));
    // Every function of the key-value interface, through the kernel, each answer checked.
    assert_eq!(
        call1(&d, DRIVER, "kv-selftest", &[]),
        Val::Result(Ok(Some(Box::new(Val::U32(13)))))
    );
    for text in ["", "plain", "non-ASCII: ä ß ✓ 𝄞 ключ", &"x".repeat(200_000)] {
        assert_eq!(call1(&d, DRIVER, "echo", &[s(text)]), s(text));
    }
    // Lists from empty to well past an A-stack.
    for len in [0usize, 1, 200, 4096, 65_536, 300_000] {
        let value: Vec<Val> = (0..len).map(|i| Val::U8((i * 7 + 3) as u8)).collect();
        let key = format!("len-{len}");
        call1(&d, DRIVER, "kv-put", &[s(&key), Val::List(value.clone())]);
        assert_eq!(
            call1(&d, DRIVER, "kv-get", &[s(&key)]),
            Val::Result(Ok(Some(Box::new(Val::List(value)))))
        );
    }
    assert!(d.take_failures().is_empty());
}

#[test]
fn component_bind_to_a_named_server() {
    let _g = crate::shared();
    let k = kernel();
    let p = k
        .component("probe-b", COMP_PROBE, ComponentOptions::default())
        .expect("probe");
    k.export_as(&p, PROBE, "probe-b", lrpc_kernel::ExportOptions::default())
        .expect("export");
    let kv = k
        .component("kv", COMP_KV_SERVER, ComponentOptions::default())
        .expect("kv");
    k.export(&kv, KV).expect("export kv");
    // Nothing is exported under the interface's own name.
    match k.component("driver", COMP_DRIVER, ComponentOptions::default()) {
        Err(Error::Unbound { import, .. }) => assert_eq!(import, PROBE),
        other => panic!("expected Unbound, got {other:?}"),
    }
    let d = k
        .component(
            "driver",
            COMP_DRIVER,
            ComponentOptions::default().with_bind(vec![(PROBE.into(), "probe-b".into())]),
        )
        .expect("driver bound by name");
    assert_eq!(call1(&d, DRIVER, "counter", &[]), Val::U64(1));
    assert_eq!(call1(&p, PROBE, "counter", &[]), Val::U64(2));
}

#[test]
fn component_export_checked_against_the_wit() {
    let _g = crate::shared();
    let k = kernel();
    let probe = k
        .component("probe", COMP_PROBE, ComponentOptions::default())
        .expect("probe");
    // The probe does not export the key-value interface.
    match k.export(&probe, KV) {
        Err(Error::ComponentMismatch { interface, .. }) => assert_eq!(interface, KV),
        other => panic!("expected ComponentMismatch, got {other:?}"),
    }
    // A WIT whose `put` differs from the one the server was built against.
    let dir = scratch("wit");
    std::fs::write(
        dir.join("kv.wit"),
        "package lrpc:kv;\ninterface store {\n  enum kind { text, binary }\n  \
         flags access { read, write, scan }\n  \
         record entry { key: string, value: list<u8>, kind: kind, version: u64 }\n  \
         variant error { not-found(string), too-large(u32), invalid-key, denied(access) }\n  \
         put: func(key: string, value: list<u8>, kind: kind) -> result<u32, error>;\n  \
         get: func(key: string) -> result<entry, error>;\n  delete: func(key: string) -> bool;\n  \
         keys: func(prefix: option<string>) -> list<string>;\n  stats: func() -> tuple<u32, u64>;\n  \
         rights: func() -> access;\n  measure: func(c: char, delta: s64, scale: f64) -> tuple<char, s64, f64>;\n}\n",
    )
    .expect("write WIT");
    k.add_wit_dir(&dir).expect("changed WIT");
    let kv = k
        .component("kv", COMP_KV_SERVER, ComponentOptions::default())
        .expect("kv");
    match k.export(&kv, KV) {
        Err(e @ Error::ComponentMismatch { .. }) => {
            let text = e.to_string();
            assert!(text.contains("`put`") && text.contains("u32"), "{text}");
        }
        other => panic!("expected ComponentMismatch, got {other:?}"),
    }
    assert!(!k.exported().contains(&KV.to_string()));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn component_load_detects_the_kind() {
    let _g = crate::shared();
    let k = kernel();
    assert!(lrpc_kernel::component::is_component(COMP_PROBE));
    assert!(!lrpc_kernel::component::is_component(
        lrpc_artifacts::BENCH_SERVER
    ));
    match k.load("p", COMP_PROBE, ComponentOptions::default()) {
        Ok(AnyDomain::Component(p)) => assert_eq!(p.name(), "p"),
        other => panic!("expected a component domain, got {other:?}"),
    }
    match k.load(
        "b",
        lrpc_artifacts::BENCH_SERVER,
        ComponentOptions::default(),
    ) {
        Ok(AnyDomain::Core(d)) => assert_eq!(d.name(), "b"),
        other => panic!("expected a core domain, got {other:?}"),
    }
    assert!(matches!(
        k.domain("p", COMP_PROBE),
        Err(Error::Compile { .. })
    ));
}

#[test]
fn component_server_trap_leaves_the_client_answering() {
    let _g = crate::shared();
    let (k, p, d) = trio(ComponentOptions::default());
    assert_eq!(call1(&d, DRIVER, "counter", &[]), Val::U64(1));
    // No error channel: the zero value, and the failure recorded.
    assert_eq!(call1(&d, DRIVER, "trap", &[]), Val::U32(0));
    assert!(
        matches!(p.dead(), Some(Fault::Trapped { .. })),
        "{:?}",
        p.dead()
    );
    assert_eq!(call1(&d, DRIVER, "ping", &[]), Val::U32(42));
    // Later calls fail at once, without entering the dead server.
    assert_eq!(call1(&d, DRIVER, "echo", &[s("hi")]), s(""));
    // With an error channel (`result<_, string>`): `err` with the failure's text.
    let err = ok_string(call1(&d, DRIVER, "read-file", &[s("/x")])).expect_err("failed");
    assert!(err.contains("ServerTrapped"), "{err}");
    let failures = d.take_failures();
    assert_eq!(failures.len(), 3, "{failures:?}");
    assert!(failures.iter().all(|f| f.status == Status::ServerTrapped));
    assert_eq!(failures[0].function, "trap");
    // The other server is untouched.
    assert_eq!(
        call1(&d, DRIVER, "kv-selftest", &[]),
        Val::Result(Ok(Some(Box::new(Val::U32(13)))))
    );
    // Restart: a fresh instance, reached through the same binding.
    k.restart_component(&p).expect("restart");
    assert!(p.dead().is_none());
    assert_eq!(call1(&d, DRIVER, "counter", &[]), Val::U64(1));
    assert_eq!(call1(&d, DRIVER, "counter", &[]), Val::U64(2));
    assert_eq!(call1(&d, DRIVER, "echo", &[s("back")]), s("back"));
    assert!(d.take_failures().is_empty());
}

#[test]
fn component_server_deadline_leaves_the_client_answering() {
    let _g = crate::shared();
    let (k, p, d) = trio(
        ComponentOptions::default()
            .with_limits(ComponentLimits::default().with_deadline(Some(Duration::from_millis(50)))),
    );
    assert_eq!(call1(&d, DRIVER, "spin", &[]), Val::U32(0));
    assert_eq!(p.dead(), Some(Fault::Deadline));
    let failures = d.take_failures();
    assert_eq!(failures.len(), 1);
    assert_eq!(failures[0].status, Status::DeadlineExceeded);
    assert_eq!(call1(&d, DRIVER, "ping", &[]), Val::U32(42));
    k.restart_component(&p).expect("restart");
    assert_eq!(call1(&d, DRIVER, "echo", &[s("again")]), s("again"));
}

#[test]
fn component_termination_revokes_bindings() {
    let _g = crate::shared();
    let (k, p, d) = trio(ComponentOptions::default());
    k.terminate(&p);
    assert!(p.is_terminated());
    assert!(!k.exported().contains(&PROBE.to_string()));
    assert_eq!(call1(&d, DRIVER, "echo", &[s("hi")]), s(""));
    assert_eq!(d.take_failures()[0].status, Status::StaleBinding);
    assert!(d.bindings().iter().any(|b| b.interface == PROBE && !b.live));
    assert!(matches!(k.restart_component(&p), Err(Error::Terminated(_))));
    assert_eq!(call1(&d, DRIVER, "ping", &[]), Val::U32(42));
}

#[test]
fn component_wasi_denies_what_was_not_granted() {
    let _g = crate::shared();
    let k = kernel();
    let dir = scratch("wasi");
    std::fs::write(dir.join("granted.txt"), "granted").expect("write");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listener");
    let addr = listener.local_addr().expect("addr").to_string();
    let p = k
        .component("bare", COMP_PROBE, ComponentOptions::default())
        .expect("probe");
    let file = dir.join("granted.txt").display().to_string();
    for path in [file.as_str(), "/etc/hostname", "/data/granted.txt"] {
        let r = ok_string(call1(&p, PROBE, "read-file", &[s(path)]));
        assert!(r.is_err(), "{path}: {r:?}");
    }
    assert!(matches!(
        call1(&p, PROBE, "write-file", &[s("/tmp/x"), s("no")]),
        Val::Result(Err(_))
    ));
    assert_eq!(call1(&p, PROBE, "env", &[s("PATH")]), Val::Option(None));
    assert_eq!(call1(&p, PROBE, "args", &[]), Val::List(Vec::new()));
    let r = ok_string(call1(&p, PROBE, "connect", &[s(&addr)]));
    assert!(r.is_err(), "connect without a grant: {r:?}");

    // The same guest with grants reaches exactly those.
    let g = k
        .component(
            "granted",
            COMP_PROBE,
            ComponentOptions::default().with_wasi(
                WasiGrants::default()
                    .with_preopens(vec![
                        Preopen::new(dir.clone(), "/ro", false),
                        Preopen::new(dir.clone(), "/rw", true),
                    ])
                    .with_env(vec![("GREETING".into(), "hello".into())])
                    .with_args(vec!["probe".into(), "--flag".into()])
                    .with_stdout(Stdio::Capture)
                    .with_network(vec![listener.local_addr().expect("addr")]),
            ),
        )
        .expect("granted probe");
    assert_eq!(
        ok_string(call1(&g, PROBE, "read-file", &[s("/ro/granted.txt")])),
        Ok("granted".into())
    );
    let r = ok_string(call1(&g, PROBE, "write-file", &[s("/ro/new.txt"), s("x")]));
    assert!(r.is_err(), "read-only preopen written: {r:?}");
    assert_eq!(
        ok_string(call1(
            &g,
            PROBE,
            "write-file",
            &[s("/rw/new.txt"), s("written")]
        )),
        Ok(String::new())
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("new.txt")).expect("written"),
        "written"
    );
    assert!(ok_string(call1(&g, PROBE, "read-file", &[s("/etc/hostname")])).is_err());
    assert_eq!(
        call1(&g, PROBE, "env", &[s("GREETING")]),
        Val::Option(Some(Box::new(s("hello"))))
    );
    assert_eq!(call1(&g, PROBE, "env", &[s("PATH")]), Val::Option(None));
    assert_eq!(
        call1(&g, PROBE, "args", &[]),
        Val::List(vec![s("probe"), s("--flag")])
    );
    assert_eq!(
        ok_string(call1(&g, PROBE, "connect", &[s(&addr)])),
        Ok(String::new())
    );
    assert!(
        g.call(PROBE, "print", &[s("to the captured stdout")])
            .expect("print")
            .is_empty()
    );
    assert_eq!(g.stdout(), b"to the captured stdout\n");
    assert!(p.stdout().is_empty());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn component_limits_fail_the_call_not_the_host() {
    let _g = crate::shared();
    let k = kernel();
    let p = probe_with(
        &k,
        ComponentOptions::default()
            .with_limits(ComponentLimits::default().with_memory(Some(16 << 20))),
    );
    assert_eq!(call1(&p, PROBE, "grow", &[Val::U32(4)]), Val::U32(4));
    match p.call(PROBE, "grow", &[Val::U32(64)]) {
        Err(Error::Fault(Fault::Trapped { .. })) => {}
        other => panic!("expected a trap past the memory limit, got {other:?}"),
    }
    assert!(p.dead().is_some());
    k.restart_component(&p).expect("restart");
    assert_eq!(call1(&p, PROBE, "grow", &[Val::U32(4)]), Val::U32(4));

    let f = k
        .component(
            "fuel",
            COMP_PROBE,
            ComponentOptions::default()
                .with_limits(ComponentLimits::default().with_fuel(Some(5_000_000))),
        )
        .expect("fueled probe");
    assert_eq!(call1(&f, PROBE, "echo", &[s("fuel")]), s("fuel"));
    match f.call(PROBE, "spin", &[]) {
        Err(Error::Fault(Fault::Trapped { trap, .. })) => {
            assert_eq!(trap, Some(wasmtime::Trap::OutOfFuel))
        }
        other => panic!("expected OutOfFuel, got {other:?}"),
    }
}

#[test]
fn component_python_server_called_from_a_rust_client() {
    let _g = crate::shared();
    let k = kernel();
    let wasm = std::fs::read(lrpc_artifacts::COMP_PY_KV_PATH).expect("the Python guest");
    let kv = k
        .component("py-kv", &wasm, ComponentOptions::default())
        .expect("Python kv server");
    k.export(&kv, KV).expect("export the Python kv server");
    probe_with(&k, ComponentOptions::default());
    let d = k
        .component("driver", COMP_DRIVER, ComponentOptions::default())
        .expect("driver");
    assert_eq!(
        d.bindings()
            .iter()
            .find(|b| b.interface == KV)
            .map(|b| b.server.as_str()),
        Some("py-kv")
    );
    assert_eq!(
        call1(&d, DRIVER, "kv-selftest", &[]),
        Val::Result(Ok(Some(Box::new(Val::U32(13)))))
    );
    assert!(d.take_failures().is_empty());
}

#[test]
fn component_fully_trusting_pair_is_composed_at_creation() {
    let _g = crate::shared();
    let k = kernel();
    let p = probe_with(&k, ComponentOptions::default());
    let kv = k
        .component("kv", COMP_KV_SERVER, ComponentOptions::default())
        .expect("kv server");
    k.export(&kv, KV).expect("export kv");
    let d = k
        .component(
            "driver",
            COMP_DRIVER,
            ComponentOptions::default().with_trust_fully(vec![PROBE.into(), KV.into()]),
        )
        .expect("driver composed with its servers");
    assert_eq!(d.fused(), [PROBE.to_string(), KV.to_string()]);
    // No import goes through the kernel.
    assert!(d.bindings().is_empty(), "{:?}", d.bindings());
    assert_eq!(
        call1(&d, DRIVER, "kv-selftest", &[]),
        Val::Result(Ok(Some(Box::new(Val::U32(13)))))
    );
    assert_eq!(call1(&d, DRIVER, "echo", &[s("fused ✓")]), s("fused ✓"));
    // The composed copies keep their own state, apart from the exported domains.
    assert_eq!(call1(&d, DRIVER, "counter", &[]), Val::U64(1));
    assert_eq!(call1(&p, PROBE, "counter", &[]), Val::U64(1));
    assert_eq!(
        call1(&kv, KV, "stats", &[]),
        Val::Tuple(vec![Val::U32(0), Val::U64(0)])
    );
    // Full trust: a trap in the composed server kills the client with it.
    match d.call(DRIVER, "trap", &[]) {
        Err(Error::Fault(Fault::Trapped { .. })) => {}
        other => panic!("expected the client to trap, got {other:?}"),
    }
    assert!(d.dead().is_some());
    assert!(p.dead().is_none());
    k.restart_component(&d).expect("restart");
    assert_eq!(call1(&d, DRIVER, "ping", &[]), Val::U32(42));
}

#[test]
fn component_resource_passed_and_called_across_a_pair() {
    let _g = crate::shared();
    let k = kernel();
    let p = probe_with(&k, ComponentOptions::default());
    k.export(&p, COUNTERS).expect("export counters");
    let h = k
        .component("holder", COMP_HOLDER, ComponentOptions::default())
        .expect("holder bound to the counters");
    assert!(
        h.bindings()
            .iter()
            .any(|b| b.interface == COUNTERS && b.server == "probe" && b.live)
    );
    let live = |p: &ComponentDomain| call1(p, COUNTERS, "live", &[]);
    let selftest_ok = Val::Result(Ok(Some(Box::new(Val::U64(19)))));
    // Constructor, `make`, methods, a borrow lent to `total`, drops: every handle the
    // client dropped was dropped in the server too.
    for _ in 0..3 {
        assert_eq!(call1(&h, HOLDER, "counters-selftest", &[]), selftest_ok);
        assert_eq!(live(&p), Val::U32(0));
    }
    // A handle kept between calls.
    call1_unit(&h, HOLDER, "keep", &[Val::U64(7)]);
    assert_eq!(live(&p), Val::U32(1));
    assert_eq!(call1(&h, HOLDER, "kept-add", &[Val::U64(2)]), Val::U64(9));
    call1_unit(&h, HOLDER, "keep", &[Val::U64(100)]);
    assert_eq!(live(&p), Val::U32(1), "the first kept counter was dropped");
    assert_eq!(call1(&h, HOLDER, "kept-add", &[Val::U64(1)]), Val::U64(101));
    call1_unit(&h, HOLDER, "release", &[]);
    assert_eq!(live(&p), Val::U32(0));
    assert!(h.take_failures().is_empty());

    // The server dies: calls with handles fail (recorded), the client keeps answering.
    call1_unit(&h, HOLDER, "keep", &[Val::U64(1)]);
    assert!(p.call(PROBE, "trap", &[]).is_err());
    assert!(p.dead().is_some());
    assert_eq!(call1(&h, HOLDER, "kept-add", &[Val::U64(1)]), Val::U64(0));
    match call1(&h, HOLDER, "counters-selftest", &[]) {
        Val::Result(Err(_)) => {}
        other => panic!("expected the self-test to fail, got {other:?}"),
    }
    let failures = h.take_failures();
    assert!(!failures.is_empty());
    assert!(failures.iter().all(|f| f.interface == COUNTERS));
    assert_eq!(failures[0].status, Status::ServerTrapped);
    // Restarted: the handle kept into the old instance is stale; new handles work.
    k.restart_component(&p).expect("restart");
    assert_eq!(call1(&h, HOLDER, "kept-add", &[Val::U64(1)]), Val::U64(0));
    let failures = h.take_failures();
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert_eq!(failures[0].function, "[method]counter.add");
    assert_eq!(failures[0].status, Status::StaleBinding);
    call1_unit(&h, HOLDER, "release", &[]);
    assert_eq!(call1(&h, HOLDER, "counters-selftest", &[]), selftest_ok);
    assert_eq!(live(&p), Val::U32(0));
    assert!(h.take_failures().is_empty());
    // A client that goes away (restarted or terminated): the handles it held are dropped in
    // the server.
    let h2 = k
        .component("holder-2", COMP_HOLDER, ComponentOptions::default())
        .expect("a second holder");
    call1_unit(&h2, HOLDER, "keep", &[Val::U64(5)]);
    assert_eq!(live(&p), Val::U32(1));
    k.restart_component(&h2).expect("restart the client");
    assert_eq!(live(&p), Val::U32(0));
    call1_unit(&h2, HOLDER, "keep", &[Val::U64(5)]);
    assert_eq!(live(&p), Val::U32(1));
    k.terminate(&h2);
    assert_eq!(live(&p), Val::U32(0));
    // Terminated: handles fail as stale bindings.
    call1_unit(&h, HOLDER, "keep", &[Val::U64(3)]);
    k.terminate(&p);
    assert_eq!(call1(&h, HOLDER, "kept-add", &[Val::U64(1)]), Val::U64(0));
    call1_unit(&h, HOLDER, "release", &[]);
    assert_eq!(h.take_failures()[0].status, Status::StaleBinding);
}

#[test]
fn component_resources_refused_for_an_astack_pairing() {
    let _g = crate::shared();
    let k = kernel();
    // The plan, which core (A-stack) domains and the core stand-in of a component's export go
    // by, refuses an interface carrying resources, naming the function.
    let e = k.interface(COUNTERS).expect_err("no plan for resources");
    let text = format!("{e:#}");
    assert!(text.contains("`[constructor]counter`"), "{text}");
    // So a component exporting it gets no core stand-in: a core client's bind is refused.
    let p = probe_with(&k, ComponentOptions::default());
    k.export(&p, COUNTERS).expect("export counters");
    let driver = Driver::new(&k, "driver").expect("core client");
    match driver.bind(0, COUNTERS, 0, 6) {
        Err(BindError::Status(Status::UnknownInterface)) => {}
        other => panic!("expected the bind refused, got {other:?}"),
    }
}

fn call1_unit(d: &ComponentDomain, iface: &str, f: &str, args: &[Val]) {
    let r = d.call(iface, f, args).expect("call");
    assert!(r.is_empty(), "{f}: no result");
}

// ---------------------------------------------------------------------------------------
// Mixed pairs: component and core (A-stack) domains bound to each other. Each pairing runs
// the same calls with the same random values; every pairing must answer alike.

use lrpc_artifacts::{BENCH_SERVER, COMP_BENCH_SERVER, COMP_RELAY, KV_SERVER};
use lrpc_kernel::{component::codec, presentation::InterfacePlan, presentation::Ty};
use lrpc_runtime::driver::{BindError, Driver};

const BENCH: &str = "lrpc:bench/bench";
const FORWARD: &str = "lrpc:relay/forward";

/// A small deterministic generator (xorshift64*), so a failure can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }

    fn bytes(&mut self, len: usize) -> Val {
        Val::List((0..len).map(|_| Val::U8(self.next() as u8)).collect())
    }

    /// A string of `chars` characters, many of them outside ASCII.
    fn text(&mut self, chars: usize) -> String {
        const POOL: &[char] = &['a', 'z', '0', '-', 'é', 'ß', 'ж', '✓', '𝄞', '🔑', ' '];
        (0..chars).map(|_| *self.pick(POOL)).collect()
    }
}

/// One client of a pairing: a core client (the runtime's driver domain, speaking the
/// A-stack encoding through `lrpc.bind` and `lrpc.call`) or the relay component.
enum Client {
    Core(Box<CoreClient>),
    Component(ComponentDomain),
}

/// A core client and the plans of the interfaces it is bound to.
struct CoreClient {
    driver: Driver,
    kv: InterfacePlan,
    bench: InterfacePlan,
}

impl Client {
    /// Calls `function` of `interface` with `args`; its result (`None` when it has none),
    /// or the failure's text.
    fn call(&self, interface: &str, function: &str, args: Vec<Val>) -> Result<Option<Val>, String> {
        match self {
            Client::Component(d) => {
                let name = if interface == KV {
                    format!("kv-{function}")
                } else {
                    function.to_string()
                };
                let mut r = d
                    .call(FORWARD, &name, &args)
                    .map_err(|e| format!("{e:#}"))?;
                let failures = d.take_failures();
                if !failures.is_empty() {
                    return Err(format!("{failures:?}"));
                }
                Ok(r.pop())
            }
            Client::Core(c) => {
                let CoreClient { driver, kv, bench } = &**c;
                let (slot, plan) = if interface == KV { (0, kv) } else { (1, bench) };
                let proc = plan
                    .procs
                    .iter()
                    .position(|p| p.name == function)
                    .expect("a function of the interface");
                let p = &plan.procs[proc];
                let tys: Vec<&Ty> = p.params.iter().map(|(_, t)| t).collect();
                let mut bytes = Vec::new();
                codec::encode(plan, &tys, &args, &mut bytes).map_err(|e| e.to_string())?;
                let out = driver
                    .call(slot, proc, p.bounded, p.out_bound.unwrap_or(0), &bytes)
                    .map_err(|e| format!("{e:?}"))?;
                let Some(t) = &p.result else {
                    return Ok(None);
                };
                let vals = if p.bounded {
                    codec::decode_prefix(plan, &[t], &out)
                } else {
                    codec::decode(plan, &[t], &out)
                };
                Ok(vals.map_err(|e| e.to_string())?.pop())
            }
        }
    }
}

/// What keeps a pairing's servers alive.
#[allow(dead_code, reason = "held, not read")]
enum Server {
    Core(lrpc_kernel::Domain, lrpc_kernel::Domain),
    Component(ComponentDomain, ComponentDomain),
}

/// A kernel with key-value and bench servers of one kind, and a client of one kind bound to
/// both by name.
fn pairing(component_server: bool, component_client: bool) -> (Kernel, Server, Client) {
    let k = Kernel::new().expect("kernel");
    let server = if component_server {
        let kv = k
            .component("kv", COMP_KV_SERVER, ComponentOptions::default())
            .expect("kv");
        k.export(&kv, KV).expect("export kv");
        let b = k
            .component("bench", COMP_BENCH_SERVER, ComponentOptions::default())
            .expect("bench");
        k.export(&b, BENCH).expect("export bench");
        Server::Component(kv, b)
    } else {
        let kv = k.domain("kv", KV_SERVER).expect("kv");
        k.export(&kv, KV).expect("export kv");
        let b = k.domain("bench", BENCH_SERVER).expect("bench");
        k.export(&b, BENCH).expect("export bench");
        Server::Core(kv, b)
    };
    let client = if component_client {
        Client::Component(
            k.component("relay", COMP_RELAY, ComponentOptions::default())
                .expect("relay bound to both servers"),
        )
    } else {
        let driver = Driver::new(&k, "driver").expect("driver");
        let kv = k.interface(KV).expect("kv plan");
        let bench = k.interface(BENCH).expect("bench plan");
        driver
            .bind(0, KV, kv.fingerprint, kv.procs.len())
            .expect("bind kv");
        driver
            .bind(1, BENCH, bench.fingerprint, bench.procs.len())
            .expect("bind bench");
        Client::Core(Box::new(CoreClient { driver, kv, bench }))
    };
    (k, server, client)
}

/// The four pairings, named: core→core, core→component, component→core,
/// component→component.
fn pairings() -> Vec<(&'static str, (Kernel, Server, Client))> {
    vec![
        ("core→core", pairing(false, false)),
        ("core→component", pairing(true, false)),
        ("component→core", pairing(false, true)),
        ("component→component", pairing(true, true)),
    ]
}

/// Byte lengths from empty to well past an A-stack (1500 bytes) and a 64 KiB segment.
const LENGTHS: &[usize] = &[0, 1, 7, 200, 1491, 1492, 1500, 4096, 65_536, 200_000];

/// Runs `calls` (interface, function, arguments) through every pairing and checks they all
/// answer alike; returns the answers.
fn agree(calls: &[(&str, &str, Vec<Val>)]) -> Vec<Result<Option<Val>, String>> {
    let mut first: Option<(&str, Vec<_>)> = None;
    for (name, (_k, _s, client)) in pairings() {
        let answers: Vec<_> = calls
            .iter()
            .map(|(i, f, a)| client.call(i, f, a.clone()))
            .collect();
        for (c, a) in calls.iter().zip(&answers) {
            assert!(a.is_ok(), "{name}: {}#{}: {a:?}", c.0, c.1);
        }
        match &first {
            None => first = Some((name, answers)),
            Some((n0, a0)) => {
                for ((c, a), b) in calls.iter().zip(a0).zip(&answers) {
                    assert!(a == b, "{}#{}: {n0} and {name} differ", c.0, c.1);
                }
            }
        }
    }
    first.expect("four pairings").1
}

#[test]
fn component_mixed_pairs_agree_on_the_bench_interface() {
    let _g = crate::shared();
    let mut rng = Rng(0x6d69_7865_6421);
    let mut calls = vec![(BENCH, "null", vec![])];
    for _ in 0..8 {
        let (a, b) = (rng.next() as u32, rng.next() as u32);
        calls.push((BENCH, "add", vec![Val::U32(a), Val::U32(b)]));
    }
    for &len in LENGTHS {
        calls.push((BENCH, "big-in", vec![rng.bytes(len)]));
        calls.push((BENCH, "big-in-out", vec![rng.bytes(len)]));
    }
    let answers = agree(&calls);
    // The answers are the bench server's, not merely alike.
    for ((_, f, args), got) in calls.iter().zip(answers) {
        let want = match (*f, &args[..]) {
            ("null", _) => None,
            ("add", [Val::U32(a), Val::U32(b)]) => Some(Val::U32(a.wrapping_add(*b))),
            ("big-in", [Val::List(d)]) => {
                let b = |v: &Val| match v {
                    Val::U8(x) => *x,
                    _ => unreachable!(),
                };
                let ends = match &d[..] {
                    [] => 0,
                    [x] => b(x),
                    [x, .., y] => b(x) ^ b(y),
                };
                Some(Val::U32(((d.len() as u32) << 8) | u32::from(ends)))
            }
            ("big-in-out", [Val::List(d)]) => Some(Val::List(
                d.iter()
                    .map(|v| match v {
                        Val::U8(x) => Val::U8(x ^ 0x5a),
                        _ => unreachable!(),
                    })
                    .collect(),
            )),
            _ => unreachable!(),
        };
        assert_eq!(got, Ok(want), "{f}");
    }
}

#[test]
fn component_mixed_pairs_agree_on_the_key_value_interface() {
    let _g = crate::shared();
    let mut rng = Rng(0x6b76_2d6d_6978);
    let kinds = ["text", "binary"];
    let mut keys: Vec<String> = Vec::new();
    let mut calls: Vec<(&str, &str, Vec<Val>)> = Vec::new();
    for i in 0..40 {
        match rng.below(8) {
            0..=2 => {
                let key = if i % 9 == 0 && !keys.is_empty() {
                    rng.pick(&keys).clone()
                } else {
                    let chars = 1 + rng.below(12);
                    let k = format!("{}-{}", rng.text(chars), i);
                    keys.push(k.clone());
                    k
                };
                let len = *rng.pick(LENGTHS);
                calls.push((
                    KV,
                    "put",
                    vec![
                        s(&key),
                        rng.bytes(len),
                        Val::Enum(rng.pick(&kinds).to_string()),
                    ],
                ));
            }
            3 => {
                let key = match rng.below(3) {
                    0 if !keys.is_empty() => rng.pick(&keys).clone(),
                    1 => String::new(),
                    _ => rng.text(3),
                };
                calls.push((KV, "get", vec![s(&key)]));
            }
            4 if !keys.is_empty() => {
                let key = rng.pick(&keys).clone();
                calls.push((KV, "get", vec![s(&key)]));
                calls.push((KV, "delete", vec![s(&key)]));
            }
            5 => {
                let prefix = match rng.below(2) {
                    0 => None,
                    _ => Some(Box::new(s(&rng.text(1)))),
                };
                calls.push((KV, "keys", vec![Val::Option(prefix)]));
            }
            6 => {
                let c = char::from_u32(rng.next() as u32 % 0x11_0000).unwrap_or('\u{d7ff}');
                let delta = rng.next() as i64;
                let scale = (rng.next() % 1_000_000) as f64 / 7.0 - 5000.0;
                calls.push((
                    KV,
                    "measure",
                    vec![Val::Char(c), Val::S64(delta), Val::Float64(scale)],
                ));
            }
            _ => calls.push((KV, "stats", vec![])),
        }
    }
    // The error cases, each once: an invalid key, a value too large, a missing key, a key
    // past the limit; the rights flags.
    calls.push((
        KV,
        "put",
        vec![s(""), rng.bytes(3), Val::Enum("text".into())],
    ));
    calls.push((
        KV,
        "put",
        vec![
            s("big"),
            rng.bytes((1 << 20) + 1),
            Val::Enum("binary".into()),
        ],
    ));
    calls.push((KV, "get", vec![s("nope, ничего")]));
    calls.push((KV, "get", vec![s(&"k".repeat(300))]));
    calls.push((KV, "rights", vec![]));
    calls.push((KV, "keys", vec![Val::Option(None)]));
    calls.push((KV, "stats", vec![]));
    let answers = agree(&calls);
    let err = |e: Val| Ok(Some(Val::Result(Err(Some(Box::new(e))))));
    let n = answers.len();
    assert_eq!(
        answers[n - 7],
        err(Val::Variant("invalid-key".into(), None))
    );
    assert_eq!(
        answers[n - 6],
        err(Val::Variant(
            "too-large".into(),
            Some(Box::new(Val::U32(1 << 20)))
        ))
    );
    assert_eq!(
        answers[n - 5],
        err(Val::Variant(
            "not-found".into(),
            Some(Box::new(s("nope, ничего")))
        ))
    );
    assert_eq!(
        answers[n - 3],
        Ok(Some(Val::Flags(vec![
            "read".into(),
            "write".into(),
            "scan".into()
        ])))
    );
}

#[test]
fn component_mixed_pairs_fail_calls_not_clients() {
    let _g = crate::shared();
    // A core client of a component server that traps: a call-failed status; the client
    // binds on and calls again once the server is restarted.
    let k = kernel();
    let p = probe_with(&k, ComponentOptions::default());
    let driver = Driver::new(&k, "driver").expect("driver");
    let plan = k.interface(PROBE).expect("probe plan");
    driver
        .bind(0, PROBE, plan.fingerprint, plan.procs.len())
        .expect("a core client binds to a component's export");
    let proc = |f: &str| plan.procs.iter().position(|p| p.name == f).expect("f");
    let echo = |text: &str| {
        let p = &plan.procs[proc("echo")];
        let mut args = Vec::new();
        codec::encode(&plan, &[&Ty::String], &[s(text)], &mut args).expect("encode");
        driver
            .call(0, proc("echo"), p.bounded, 0, &args)
            .map(|out| codec::decode(&plan, &[&Ty::String], &out).expect("decode"))
    };
    assert_eq!(echo("hé ✓").expect("echo"), vec![s("hé ✓")]);
    let trap = &plan.procs[proc("trap")];
    match driver.call(0, proc("trap"), trap.bounded, 4, &[]) {
        Err(lrpc_runtime::deploy::CallFailure::Status(st)) => {
            assert_eq!(st, Status::ServerTrapped)
        }
        other => panic!("expected a call-failed status, got {other:?}"),
    }
    assert!(p.dead().is_some());
    assert!(echo("x").is_err(), "the dead server is not entered");
    k.restart_component(&p).expect("restart");
    assert_eq!(echo("again").expect("echo"), vec![s("again")]);
    // Terminating the component revokes the core client's binding.
    k.terminate(&p);
    match echo("gone") {
        Err(lrpc_runtime::deploy::CallFailure::Status(st)) => {
            assert_eq!(st, Status::ServerTerminated)
        }
        other => panic!("expected ServerTerminated, got {other:?}"),
    }

    // A component client of core servers, one terminated: the call answers the error
    // channel's zero value, the failure is recorded, and the client goes on.
    let (k, server, client) = pairing(false, true);
    let (Server::Core(kv, _), Client::Component(relay)) = (&server, &client) else {
        unreachable!()
    };
    assert_eq!(
        client.call(BENCH, "add", vec![Val::U32(2), Val::U32(3)]),
        Ok(Some(Val::U32(5)))
    );
    k.terminate(kv);
    let got = relay
        .call(FORWARD, "kv-stats", &[])
        .expect("the client is not trapped");
    assert_eq!(got, vec![Val::Tuple(vec![Val::U32(0), Val::U64(0)])]);
    let failures = relay.take_failures();
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert_eq!(failures[0].status, Status::ServerTerminated);
    assert_eq!(
        client.call(BENCH, "add", vec![Val::U32(7), Val::U32(8)]),
        Ok(Some(Val::U32(15)))
    );
    assert!(
        relay
            .bindings()
            .iter()
            .any(|b| b.interface == KV && !b.live)
    );
}

#[test]
fn component_mixed_untrusted_requests_are_refused() {
    let _g = crate::shared();
    // A core client's A-stack bytes are checked before the component sees them: a string
    // that is not UTF-8, a length past the bytes sent, a bad enum case, trailing bytes.
    let (_k, _server, client) = pairing(true, false);
    let Client::Core(c) = &client else {
        unreachable!()
    };
    let plan = &c.kv;
    let proc = |f: &str| plan.procs.iter().position(|p| p.name == f).expect("f");
    let raw = |f: &str, bytes: &[u8]| {
        let p = &plan.procs[proc(f)];
        c.driver
            .call(0, proc(f), p.bounded, p.out_bound.unwrap_or(0), bytes)
    };
    let refused = |r: Result<Vec<u8>, lrpc_runtime::deploy::CallFailure>| match r {
        Err(lrpc_runtime::deploy::CallFailure::Status(s)) => s == Status::ServerRejected,
        _ => false,
    };
    assert!(refused(raw("get", &[2, 0, 0, 0, 0xc3, 0x28])));
    assert!(refused(raw("get", &[9, 0, 0, 0, b'a'])));
    assert!(refused(raw("get", &[1, 0, 0, 0, b'a', 0])));
    assert!(refused(raw("put", &[1, 0, 0, 0, b'a', 0, 0, 0, 0, 2])));
    assert!(refused(raw("keys", &[7])));
    // The client and the server go on.
    assert_eq!(
        client.call(
            KV,
            "put",
            vec![s("a"), Val::List(vec![]), Val::Enum("text".into())]
        ),
        Ok(Some(Val::Result(Ok(Some(Box::new(Val::U64(1)))))))
    );
}

/// The key-value server component keeps its entries in the directory it is granted at
/// `/data` (WASI files through a preopen): a fresh instance after a restart answers with
/// what the last one stored, versions included, and a deleted entry's file is gone. The
/// same guest without the grant keeps entries in memory only.
#[test]
fn component_kv_server_keeps_its_entries_in_a_granted_directory() {
    let dir = scratch("kv-data");
    let grant = |host: &Path| {
        ComponentOptions::default()
            .with_wasi(WasiGrants::default().with_preopens(vec![Preopen::new(host, "/data", true)]))
    };
    let bytes = |b: &[u8]| Val::List(b.iter().map(|&x| Val::U8(x)).collect());
    let text = Val::Enum("text".into());
    let version = |v: Val| match v {
        Val::Result(Ok(Some(b))) => match *b {
            Val::U64(n) => n,
            other => panic!("not a version: {other:?}"),
        },
        other => panic!("put failed: {other:?}"),
    };
    let entry = |v: Val| match v {
        Val::Result(Ok(Some(b))) => match *b {
            Val::Record(fields) => {
                let value = match &fields[1].1 {
                    Val::List(l) => l
                        .iter()
                        .map(|x| match x {
                            Val::U8(b) => *b,
                            other => panic!("not a byte: {other:?}"),
                        })
                        .collect::<Vec<u8>>(),
                    other => panic!("not a list: {other:?}"),
                };
                let version = match fields[3].1 {
                    Val::U64(n) => n,
                    ref other => panic!("not a version: {other:?}"),
                };
                Some((value, version))
            }
            other => panic!("not an entry: {other:?}"),
        },
        Val::Result(Err(_)) => None,
        other => panic!("not a result: {other:?}"),
    };
    let long_key = "k".repeat(200) + "é";

    let k = kernel();
    let kv = k
        .component("kv", COMP_KV_SERVER, grant(&dir))
        .expect("kv server");
    let put = |key: &str, value: &[u8]| {
        version(call1(&kv, KV, "put", &[s(key), bytes(value), text.clone()]))
    };
    assert_eq!(put("greeting", b"hello"), 1);
    assert_eq!(put("greeting", b"hello again"), 2);
    assert_eq!(put(&long_key, b"long"), 1);
    assert_eq!(put("gone", b"soon"), 1);
    assert_eq!(call1(&kv, KV, "delete", &[s("gone")]), Val::Bool(true));
    let files = std::fs::read_dir(&dir).expect("data dir").count();
    assert_eq!(files, 2, "one file per entry, none for the deleted one");

    k.restart_component(&kv).expect("restart");
    let get = |key: &str| entry(call1(&kv, KV, "get", &[s(key)]));
    assert_eq!(get("greeting"), Some((b"hello again".to_vec(), 2)));
    assert_eq!(get(&long_key), Some((b"long".to_vec(), 1)));
    assert_eq!(get("gone"), None);
    assert_eq!(put("greeting", b"third"), 3, "versions carry over");

    // A second domain granted the same directory sees the same store.
    let other = k
        .component("kv-2", COMP_KV_SERVER, grant(&dir))
        .expect("second kv server");
    assert_eq!(
        entry(call1(&other, KV, "get", &[s("greeting")])),
        Some((b"third".to_vec(), 3))
    );

    // Without the grant: memory only.
    let volatile = k
        .component("kv-mem", COMP_KV_SERVER, ComponentOptions::default())
        .expect("kv server without a grant");
    assert_eq!(
        version(call1(
            &volatile,
            KV,
            "put",
            &[s("x"), bytes(b"y"), text.clone()]
        )),
        1
    );
    k.restart_component(&volatile).expect("restart");
    assert_eq!(entry(call1(&volatile, KV, "get", &[s("x")])), None);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A binary is compiled once per kernel: creating, restarting and creating again from the
/// same bytes reuses the code. With a cache folder, the code also lands on disk for the next
/// process.
#[test]
fn the_same_bytes_are_compiled_once() {
    let dir = std::env::temp_dir().join(format!("lrpc-code-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let k =
        Kernel::with_config(lrpc_kernel::KernelConfig::default().with_cache_dir(Some(dir.clone())))
            .expect("kernel");
    let before = k.compilations();
    let a = k
        .component("a", COMP_PROBE, ComponentOptions::default())
        .expect("a");
    assert_eq!(k.compilations(), before + 1);
    k.restart_component(&a).expect("restart");
    let b = k
        .component("b", COMP_PROBE, ComponentOptions::default())
        .expect("b");
    let core = |name: &str| k.domain(name, lrpc_artifacts::KV_SERVER).expect("core");
    let (c1, c2) = (core("c1"), core("c2"));
    assert_eq!(
        k.compilations(),
        before + 2,
        "one component and one module compiled"
    );
    drop((a, b, c1, c2));
    let written = || {
        walk(&dir)
            .iter()
            .any(|f| f.metadata().is_ok_and(|m| m.len() > 0))
    };
    let until = std::time::Instant::now() + Duration::from_secs(20);
    while !written() && std::time::Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(written(), "compiled code in {}", dir.display());
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

/// `export_as` takes a domain of either kind; a component's export takes no export options
/// (its calls run under its own limits), and says so.
#[test]
fn a_component_export_refuses_core_export_options() {
    let k = kernel();
    let p = k
        .component("p", COMP_PROBE, ComponentOptions::default())
        .expect("probe");
    let options =
        lrpc_kernel::ExportOptions::default().with_serving(lrpc_kernel::Serving::OwnThread);
    match k.export_as(&p, PROBE, "probe-threaded", options) {
        Err(Error::Options(m)) => assert!(m.contains("component domain"), "{m}"),
        other => panic!("unexpected {other:?}"),
    }
    k.export_as(&p, PROBE, "probe", lrpc_kernel::ExportOptions::default())
        .expect("the defaults");
    assert!(k.exported().contains(&"probe".to_string()));
    k.terminate(&p);
    assert!(!k.exported().contains(&"probe".to_string()));
}
