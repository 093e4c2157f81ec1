//! Quotas: one domain can not starve the host or the other domains of fds, mappings,
//! A-stacks, out-of-band space, memory or instances.

use lrpc_kernel::{DomainOptions, Error, Kernel, Quotas, Status, domain::Usage, error::Quota};

/// The bench interface's fingerprint, as a raw client must claim it.
fn bench_fingerprint(kernel: &Kernel) -> i64 {
    kernel.interface("lrpc:bench/bench").unwrap().fingerprint as i64
}

fn hostile(kernel: &Kernel, quotas: Option<Quotas>) -> lrpc_kernel::Domain {
    kernel
        .domain_with(
            "hostile",
            lrpc_artifacts::HOSTILE,
            DomainOptions::default().with_quotas(quotas),
        )
        .unwrap()
}

/// Binds raw until the kernel refuses; returns how many bindings were made and the refusal.
fn bind_until_refused(
    h: &lrpc_kernel::Domain,
    fingerprint: i64,
    at_most: usize,
) -> (usize, Status) {
    for made in 0..at_most {
        let r: i64 = h.call("bind_raw", (fingerprint,)).unwrap();
        if r < 0 {
            return (made, Status::try_from(-r as i32).unwrap());
        }
    }
    panic!("no refusal after {at_most} bindings");
}

#[test]
fn a_binding_flood_is_refused_by_quota_without_touching_the_fd_table() {
    let _guard = crate::exclusive();
    let (kernel, _server, good) = crate::bench_pair();
    let fds_before = crate::open_fds();
    let h = hostile(&kernel, None);
    let limit = h.quotas().bindings as usize;
    let (made, refusal) = bind_until_refused(&h, bench_fingerprint(&kernel), limit + 10);
    assert_eq!(made, limit, "the quota's worth of bindings");
    assert_eq!(refusal, Status::QuotaBindings);
    assert_eq!(h.usage().bindings, limit as u64);
    // A mapped window needs no open file: the flood left the fd table as it was.
    let fds_after = crate::open_fds();
    assert!(
        fds_after <= fds_before + 2,
        "{limit} bindings held {} fds",
        fds_after.saturating_sub(fds_before)
    );
    // Everyone else keeps binding and calling.
    assert_eq!(good.call::<(i32, i32), i64>("add", (40, 2)).unwrap(), 42);
    let other = kernel
        .domain("bench-client-2", lrpc_artifacts::BENCH_CLIENT)
        .unwrap();
    assert_eq!(other.call::<(), i32>("bind", ()).unwrap(), 0);
    assert_eq!(other.call::<(i32, i32), i64>("add", (1, 2)).unwrap(), 3);
    assert!(other.call::<(i32, i32), i64>("big_in", (5000, 3)).unwrap() >= 0);
    // Terminating the flooder gives everything back.
    kernel.terminate(&h);
    assert_eq!(h.usage(), Usage::default());
}

#[test]
fn unbinding_returns_what_a_binding_charged() {
    let _guard = crate::shared();
    let (kernel, _server, client) = crate::bench_pair();
    let bound = client.usage();
    assert_eq!(bound.bindings, 1);
    assert_eq!(bound.astack_extents, 4, "one extent per procedure");
    assert_eq!(bound.mappings, 2, "the client's and the server's");
    assert_eq!(bound.memfds, 0, "no file stays open for a mapped window");
    assert!(bound.astack_bytes > 0);
    // A big argument adds an out-of-band segment.
    assert!(
        client
            .call::<(i32, i32), i64>("big_in", (200_000, 2))
            .unwrap()
            >= 0
    );
    let with_oob = client.usage();
    assert!(with_oob.oob_bytes >= 200_000, "{with_oob:?}");
    assert_eq!(with_oob.mappings, 4);
    assert_eq!(client.call::<(), i32>("unbind", ()).unwrap(), 0);
    assert_eq!(client.usage(), Usage::default());
    // Bind and unbind many times: the account stays balanced.
    assert_eq!(
        client.call::<(i32,), i32>("bind_cycles", (300,)).unwrap(),
        0
    );
    assert_eq!(client.usage(), Usage::default());
    drop(kernel);
}

#[test]
fn astack_growth_is_refused_by_the_extent_quota() {
    let _guard = crate::shared();
    let (kernel, _server, _client) = crate::bench_pair();
    let h = hostile(&kernel, Some(Quotas::default().with_astack_extents(6)));
    let handle: i64 = h.call("bind_raw", (bench_fingerprint(&kernel),)).unwrap();
    assert!(handle > 0);
    let scratch: i32 = h.call("scratch", ()).unwrap();
    // 4 extents at bind time; two more fit, the third is refused.
    let more = |proc: i32| h.call::<(i64, i32, i32), i32>("more_raw", (handle, proc, scratch));
    assert_eq!(more(0).unwrap(), 0);
    assert_eq!(more(1).unwrap(), 0);
    assert_eq!(more(0).unwrap(), Status::QuotaAStacks as i32);
    assert_eq!(h.usage().astack_extents, 6);
    // The binding keeps working with what it has.
    let astack: i32 = h.call("astack", (0,)).unwrap();
    assert_eq!(
        h.call::<(i64, i32, i32), i32>("call_raw", (handle, 0, astack))
            .unwrap(),
        0
    );
}

#[test]
fn out_of_band_space_is_refused_by_its_quota() {
    let _guard = crate::shared();
    let kernel = Kernel::new().unwrap();
    let server = kernel
        .domain("bench-server", lrpc_artifacts::BENCH_SERVER)
        .unwrap();
    kernel.export(&server, "lrpc:bench/bench").unwrap();
    let client = kernel
        .domain_with(
            "small-client",
            lrpc_artifacts::BENCH_CLIENT,
            DomainOptions::default().with_quotas(Some(Quotas::default().with_oob_bytes(256 << 10))),
        )
        .unwrap();
    assert_eq!(client.call::<(), i32>("bind", ()).unwrap(), 0);
    // 100 KB fits in one 128 KiB segment; 1 MB does not fit the quota.
    assert!(
        client
            .call::<(i32, i32), i64>("big_in", (100_000, 2))
            .unwrap()
            >= 0
    );
    assert_eq!(
        client
            .call::<(i32, i32), i64>("big_in", (1_000_000, 1))
            .unwrap(),
        crate::neg(Status::QuotaOutOfBand)
    );
    // Refused, not failed: the server lives and small calls go on.
    assert!(!server.is_terminated());
    assert_eq!(client.call::<(i32, i32), i64>("add", (2, 3)).unwrap(), 5);
}

#[test]
fn the_mapping_quota_bounds_bindings_by_their_windows() {
    let _guard = crate::shared();
    let (kernel, _server, _client) = crate::bench_pair();
    // Each binding to a one-replica server maps two windows.
    let h = hostile(&kernel, Some(Quotas::default().with_mappings(5)));
    let (made, refusal) = bind_until_refused(&h, bench_fingerprint(&kernel), 10);
    assert_eq!((made, refusal), (2, Status::QuotaMappings));
}

#[test]
fn a_memory_quota_refuses_windows_that_would_pass_it() {
    let _guard = crate::shared();
    let (kernel, _server, _client) = crate::bench_pair();
    // The guest's heap grows on its first allocation: let it make that once (a bind with a
    // wrong fingerprint allocates what a bind does, and is refused), then measure.
    let warm = |h: &lrpc_kernel::Domain| {
        let r: i64 = h.call("bind_raw", (0i64,)).unwrap();
        assert_eq!(r, crate::neg(Status::InterfaceMismatch));
    };
    let probe = hostile(&kernel, None);
    warm(&probe);
    let size = probe.memory_size().unwrap() as u64;
    kernel.terminate(&probe);
    // Room for the guest as it is, and not one wasm page more.
    let h = hostile(&kernel, Some(Quotas::default().with_memory(size)));
    warm(&h);
    let r: i64 = h.call("bind_raw", (bench_fingerprint(&kernel),)).unwrap();
    assert_eq!(r, crate::neg(Status::QuotaMemory));
    assert_eq!(h.usage(), Usage::default(), "a refused bind holds nothing");
    // A memory quota below the module's own minimum refuses the domain itself.
    let e = kernel
        .domain_with(
            "tiny",
            lrpc_artifacts::HOSTILE,
            DomainOptions::default().with_quotas(Some(Quotas::default().with_memory(65536))),
        )
        .unwrap_err();
    assert!(matches!(e, Error::Instantiate { .. }), "{e}");
    assert!(std::error::Error::source(&e).is_some(), "keeps its cause");
}

#[test]
fn replicas_beyond_the_quota_are_refused() {
    let _guard = crate::shared();
    let kernel = Kernel::new().unwrap();
    let e = kernel
        .domain_with(
            "wide",
            lrpc_artifacts::BENCH_SERVER,
            DomainOptions::default()
                .with_replicas(3)
                .with_quotas(Some(Quotas::default().with_replicas(2))),
        )
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::QuotaExceeded {
                quota: Quota::Replicas,
                limit: 2,
                requested: 3,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn errors_keep_their_causes() {
    let _guard = crate::shared();
    let kernel = Kernel::new().unwrap();
    let e = kernel.domain("junk", b"\0asm\x01\0\0\0\x99").unwrap_err();
    assert!(matches!(e, Error::Compile { .. }), "{e}");
    assert!(std::error::Error::source(&e).is_some());
    let d = kernel
        .domain("bench-server", lrpc_artifacts::BENCH_SERVER)
        .unwrap();
    let e = d.call::<(), ()>("no-such-export", ()).unwrap_err();
    assert!(matches!(e, Error::NoSuchExport { .. }), "{e}");
    assert!(std::error::Error::source(&e).is_some());
    let e = kernel.export(&d, "lrpc:test/faulty").unwrap_err();
    assert!(matches!(e, Error::NotImplemented { .. }), "{e}");
    assert!(std::error::Error::source(&e).is_some());
    let e = kernel
        .load_presentation("/no/such/presentation.toml".as_ref())
        .unwrap_err();
    let source = std::error::Error::source(&e).expect("the io error");
    assert!(source.downcast_ref::<std::io::Error>().is_some());
}

#[test]
fn the_memfd_quota_bounds_files_open_while_placing() {
    let _guard = crate::shared();
    let (kernel, _server, _client) = crate::bench_pair();
    // Placing a binding's segment holds its memory file open for a moment: with none
    // allowed, no binding can be made; the refusal holds nothing.
    let h = hostile(&kernel, Some(Quotas::default().with_memfds(0)));
    let r: i64 = h.call("bind_raw", (bench_fingerprint(&kernel),)).unwrap();
    assert_eq!(r, crate::neg(Status::QuotaMappings));
    assert_eq!(h.usage(), Usage::default());
}

#[test]
fn the_instance_quota_sends_a_trusting_client_down_the_isolated_path() {
    let _guard = crate::shared();
    let kernel = Kernel::new().unwrap();
    let server = kernel
        .domain("bench-server", lrpc_artifacts::BENCH_SERVER)
        .unwrap();
    kernel.export(&server, "lrpc:bench/bench").unwrap();
    let trusting = kernel
        .load_presentation(&crate::example("bench-client-trusting"))
        .unwrap();
    // Copies made by the client stub for `iters` add calls: none on the direct path (the
    // server copy's register entry), one each way per call on the isolated path.
    let copies_for_adds = |instances: u32| {
        let client = kernel
            .domain_with(
                "trusting-client",
                lrpc_artifacts::BENCH_CLIENT,
                DomainOptions::default()
                    .with_presentations(vec![trusting.clone()])
                    .with_quotas(Some(Quotas::default().with_instances(instances))),
            )
            .unwrap();
        assert_eq!(client.call::<(), i32>("bind", ()).unwrap(), 0);
        let before: i64 = client.call("lrpc_in_copies", ()).unwrap();
        assert_eq!(client.call::<(i32,), i64>("add_loop", (5,)).unwrap(), 0);
        let after: i64 = client.call("lrpc_in_copies", ()).unwrap();
        after - before
    };
    assert_eq!(copies_for_adds(16), 0, "room for the server copy: direct");
    assert_eq!(
        copies_for_adds(1),
        5,
        "no room: isolated, and still correct"
    );
}

#[test]
fn the_kernel_counts_linear_memory_and_segments_without_entering_domains() {
    let _guard = crate::shared();
    let (kernel, server, client) = crate::bench_pair();
    // Read from the Stores' limiters: the same as asking each replica.
    assert_eq!(client.memory_bytes(), client.memory_size().unwrap());
    assert_eq!(server.memory_bytes(), server.memory_size().unwrap());
    assert_eq!(
        kernel.memory_bytes(),
        client.memory_bytes() + server.memory_bytes()
    );
    let usage = client.usage();
    assert_eq!(kernel.segment_bytes(), usage.astack_bytes + usage.oob_bytes);
    // A big argument adds an out-of-band segment, mapped over pages grown in both memories.
    let before = (client.memory_bytes(), kernel.segment_bytes());
    assert!(
        client
            .call::<(i32, i32), i64>("big_in", (200_000, 2))
            .unwrap()
            >= 0
    );
    assert!(kernel.segment_bytes() >= before.1 + 200_000);
    assert!(client.memory_bytes() >= before.0 + 200_000);
    assert_eq!(client.memory_bytes(), client.memory_size().unwrap());
    // Terminating the client gives its memory and its bindings' segments back.
    kernel.terminate(&client);
    assert_eq!(client.memory_bytes(), 0);
    assert_eq!(kernel.segment_bytes(), 0);
    assert_eq!(kernel.memory_bytes(), server.memory_bytes());
}
