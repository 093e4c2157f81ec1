//! The wasmtime component-model peers really do the work: the composed component (fused
//! adapters) and the two host-linked Stores give the bench server's results.

use lrpc_benches::components::{ComponentPeer, Fused, HostLinked};

fn check(peer: &mut dyn ComponentPeer, what: &str) {
    assert_eq!(peer.null(10), 0, "{what}: null");
    assert_eq!(peer.add(100), 0, "{what}: sums checked call by call");
    assert_eq!(peer.intra(10), 0, "{what}: intra");
    for len in [0usize, 1, 200, 4096, 65536] {
        let ends = match len {
            0 => 0,
            1 => 3,
            _ => 3u8 ^ (((len - 1) * 7 + 3) as u8),
        };
        let want = ((len as i64) << 8) | i64::from(ends);
        assert_eq!(
            peer.big_in(len as i32, 2),
            want & 0xffff_ffff,
            "{what}: big-in of {len} bytes"
        );
        assert_eq!(peer.big_in_out(len as i32, 2), 0, "{what}: {len} bytes");
    }
}

#[test]
fn the_fused_composition_answers_every_procedure_correctly() {
    let kernel = lrpc::Kernel::new().unwrap();
    let mut peer = Fused::new(kernel.engine()).expect("the composed component instantiates");
    check(&mut peer, "fused");
}

#[test]
fn the_host_linked_components_answer_every_procedure_correctly() {
    let kernel = lrpc::Kernel::new().unwrap();
    let mut peer = HostLinked::new(kernel.engine()).expect("both components instantiate");
    check(&mut peer, "host-linked");
}

#[test]
fn the_composition_links_the_client_to_the_server_inside_one_component() {
    // The composed component imports nothing: the client's `lrpc:bench/bench` import is
    // satisfied by the server instance inside it. The client alone does import it.
    let kernel = lrpc::Kernel::new().unwrap();
    let engine = kernel.engine();
    let composed =
        wasmtime::component::Component::new(engine, lrpc_benches::components::COMPOSED).unwrap();
    assert_eq!(composed.component_type().imports(engine).count(), 0);
    let client =
        wasmtime::component::Component::new(engine, lrpc_benches::components::CLIENT).unwrap();
    let imports: Vec<String> = client
        .component_type()
        .imports(engine)
        .map(|(name, _)| name.to_string())
        .collect();
    assert_eq!(imports, ["lrpc:bench/bench"]);
}
