//! Binding and unbinding return every page, mapping and file descriptor.

use crate::{bench_pair, memfd_mappings, open_fds};
use lrpc_kernel::Kernel;

#[test]
fn ten_thousand_bind_unbind_cycles_leak_nothing() {
    let _guard = crate::exclusive();
    let (_kernel, server, client) = bench_pair();
    // Warm up: one cycle and a call so lazily created state exists before counting.
    assert_eq!(client.call::<(i32,), i32>("bind_cycles", (1,)).unwrap(), 0);
    let fds = open_fds();
    let maps = memfd_mappings();
    let client_mem = client.memory_size().unwrap();
    let server_mem = server.memory_size().unwrap();
    assert_eq!(
        client
            .call::<(i32,), i32>("bind_cycles", (10_000,))
            .unwrap(),
        0
    );
    assert_eq!(open_fds(), fds, "file descriptors leaked");
    assert_eq!(memfd_mappings(), maps, "A-stack mappings leaked");
    // Window pages are reused, so memories do not grow with the number of cycles.
    assert!(client.memory_size().unwrap() <= client_mem + (1 << 20));
    assert!(server.memory_size().unwrap() <= server_mem + (1 << 20));
    assert_eq!(
        server.server_bindings().len(),
        1,
        "only the original binding is live"
    );
    // The original binding still works.
    assert_eq!(client.call::<(i32, i32), i64>("add", (2, 3)).unwrap(), 5);
}

#[test]
fn dropping_the_kernel_and_domains_unmaps_everything() {
    let _guard = crate::exclusive();
    let maps = memfd_mappings();
    {
        let (kernel, server, client) = bench_pair();
        let r: i32 = client.call("big_in_out", (100_000, 1)).unwrap();
        assert_eq!(r, 0);
        assert!(memfd_mappings() > maps);
        drop((client, server, kernel));
    }
    assert_eq!(memfd_mappings(), maps);
}

#[test]
fn unbinding_from_the_host_side_view_is_reflected() {
    let _guard = crate::shared();
    let kernel = Kernel::new().unwrap();
    let server = kernel
        .domain("bench-server", lrpc_artifacts::BENCH_SERVER)
        .unwrap();
    kernel.export(&server, "lrpc:bench/bench").unwrap();
    let client = kernel
        .domain("bench-client", lrpc_artifacts::BENCH_CLIENT)
        .unwrap();
    assert!(client.client_bindings().is_empty());
    assert_eq!(client.call::<(), i32>("bind", ()).unwrap(), 0);
    assert_eq!(client.client_bindings().len(), 1);
    assert_eq!(server.server_bindings().len(), 1);
    assert_eq!(client.call::<(), i32>("unbind", ()).unwrap(), 0);
    assert!(client.client_bindings().is_empty());
    assert!(server.server_bindings().is_empty());
}
