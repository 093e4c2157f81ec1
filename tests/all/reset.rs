//! Isolated core domains (`Isolation::Request`) keep their bindings across resets: a client
//! whose bound state was captured calls its server request after request, an isolated
//! server reset between requests still answers, and A-stack contents (the pair's pages) are
//! not reset.

use lrpc_kernel::domain::Isolation;
use lrpc_kernel::{DomainOptions, ExportOptions, Kernel};

#[test]
fn bindings_to_and_from_isolated_domains_work_across_resets() {
    let _guard = crate::shared();
    let kernel = Kernel::new().unwrap();
    let iso = DomainOptions::default().with_isolation(Isolation::Request);
    let server = kernel
        .domain_with("bench-server", lrpc_artifacts::BENCH_SERVER, iso.clone())
        .unwrap();
    crate::export_with(
        &kernel,
        &server,
        "lrpc:bench/bench",
        ExportOptions::default(),
    )
    .unwrap();
    let client = kernel
        .domain_with("bench-client", lrpc_artifacts::BENCH_CLIENT, iso.clone())
        .unwrap();
    assert_eq!(client.call::<(), i32>("bind", ()).unwrap(), 0);
    // Bound: this is the state each of the client's requests starts from.
    client.capture_fresh_state().unwrap();
    for i in 0..50 {
        let sum: i64 = client.call("add", (i, 1)).unwrap();
        assert_eq!(sum, i64::from(i) + 1, "request {i}");
        // The server is reached through a binding: its requests end where the embedder says.
        server.reset().unwrap();
    }

    // The client sends 1000 bytes of 0xAB on an A-stack; a reset of either side leaves them
    // there: the window's pages belong to the pair, not to one domain's fresh state.
    assert_eq!(
        client
            .call::<(i32, i32), i32>("fill", (1000, 0xab))
            .unwrap(),
        0
    );
    let (c_off, s_offs, len) = client.client_bindings()[0].windows[0].clone();
    client.reset().unwrap();
    server.reset().unwrap();
    let has_fill = |bytes: Vec<u8>| bytes.windows(1000).any(|w| w.iter().all(|&b| b == 0xab));
    assert!(has_fill(client.read_memory(c_off, len).unwrap()));
    assert!(has_fill(server.read_memory(s_offs[0], len).unwrap()));
    let sum: i64 = client.call("add", (2, 3)).unwrap();
    assert_eq!(sum, 5, "still bound after explicit resets");

    // Without a captured state a client forgets its handle at the next request (the kernel
    // keeps the binding; the guest's fresh memory never held it).
    let forgetful = kernel
        .domain_with("forgetful", lrpc_artifacts::BENCH_CLIENT, iso)
        .unwrap();
    assert_eq!(forgetful.call::<(), i32>("bind", ()).unwrap(), 0);
    let r: i64 = forgetful.call("add", (1, 1)).unwrap();
    assert!(r < 0, "the fresh client holds no binding: {r}");
    assert_eq!(forgetful.client_bindings().len(), 1);
}

#[test]
fn an_isolated_server_meets_each_request_of_its_clients_fresh() {
    // The kv self-test puts keys and reads them back, counts them and checks versions: it
    // passes only if its calls (one request: one top-level call into the client) share the
    // server's state, and a second run passes only if the server forgot the first run's
    // keys. Without isolation the second run finds the old keys and fails.
    let _guard = crate::shared();
    for (isolation, replicas) in [
        (Isolation::Request, 1),
        (Isolation::Request, 2),
        (Isolation::None, 1),
    ] {
        let kernel = Kernel::new().unwrap();
        let options = DomainOptions::default()
            .with_isolation(isolation)
            .with_replicas(replicas);
        let server = kernel
            .domain_with("kv", lrpc_artifacts::KV_SERVER, options)
            .unwrap();
        kernel.export(&server, "lrpc:kv/store").unwrap();
        let client = kernel
            .domain("kv-client", lrpc_artifacts::KV_CLIENT)
            .unwrap();
        let case = format!("{isolation:?}, {replicas} replicas");
        let first: i32 = client.call("selftest", ()).unwrap();
        assert_eq!(first, 0, "{case}: the first request failed check {first}");
        let second: i32 = client.call("selftest", ()).unwrap();
        if isolation == Isolation::Request {
            assert_eq!(
                second, 0,
                "{case}: the second request failed check {second}"
            );
        } else {
            assert_ne!(
                second, 0,
                "{case}: the second request should see the first's keys"
            );
        }
    }
}

/// An isolated component domain (`ComponentOptions::isolation`) meets each top-level call
/// with a fresh instance: the key-value server forgets what the call before stored, where the
/// same server reused counts the versions up.
#[test]
fn an_isolated_component_domain_meets_each_call_fresh() {
    use lrpc_kernel::component::ComponentOptions;
    use wasmtime::component::Val;
    let kernel = Kernel::new().unwrap();
    kernel
        .add_wit_dir(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../guests/comp-wit"))
        .unwrap();
    let put = |d: &lrpc_kernel::ComponentDomain| {
        let args = [
            Val::String("k".into()),
            Val::List(vec![Val::U8(7)]),
            Val::Enum("text".into()),
        ];
        match d.call("lrpc:kv/store", "put", &args).unwrap().remove(0) {
            Val::Result(Ok(Some(v))) => *v,
            other => panic!("put failed: {other:?}"),
        }
    };
    let iso = kernel
        .component(
            "kv-iso",
            lrpc_artifacts::COMP_KV_SERVER,
            ComponentOptions::default().with_isolation(Isolation::Request),
        )
        .unwrap();
    let reused = kernel
        .component(
            "kv-reused",
            lrpc_artifacts::COMP_KV_SERVER,
            ComponentOptions::default(),
        )
        .unwrap();
    for i in 1..=5u64 {
        assert_eq!(
            put(&iso),
            Val::U64(1),
            "call {i} met an earlier call's entry"
        );
        assert_eq!(
            put(&reused),
            Val::U64(i),
            "the reused server counts versions up"
        );
    }
}
