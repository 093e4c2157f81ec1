//! The wasmtime component-model peers really do the work: the composed component (fused
//! adapters) and the two host-linked Stores give the bench server's results.

use lrpc_benches::components::{ComponentServer, Fused, HostLinked};
use lrpc_benches::{Peer, big_in_answer, check};

#[test]
fn the_fused_composition_answers_every_procedure_correctly() {
    let kernel = lrpc_kernel::Kernel::new().unwrap();
    let mut peer = Fused::new(kernel.engine()).expect("the composed component instantiates");
    check(&mut peer, "fused");
    assert_eq!(peer.big_in(65536, 1), big_in_answer(65536));
    assert_eq!(peer.big_in_out(65536, 1), 0);
    assert_eq!(peer.intra(10), 0);
}

#[test]
fn the_host_linked_components_answer_every_procedure_correctly() {
    let kernel = lrpc_kernel::Kernel::new().unwrap();
    let mut peer = HostLinked::new(kernel.engine()).expect("both components instantiate");
    check(&mut peer, "host-linked");
    assert_eq!(peer.big_in(65536, 1), big_in_answer(65536));
}

#[test]
fn the_server_component_computes_on_the_bytes_it_is_given() {
    let kernel = lrpc_kernel::Kernel::new().unwrap();
    let mut server = ComponentServer::new(kernel.engine()).unwrap();
    server.null().unwrap();
    assert_eq!(server.add(40, 2).unwrap(), 42);
    assert_eq!(server.add(u32::MAX, 2).unwrap(), 1, "wrapping");
    assert_eq!(
        server.big_in(vec![9, 1, 2, 12]).unwrap(),
        (4 << 8) | (9 ^ 12)
    );
    assert_eq!(server.big_in(vec![]).unwrap(), 0);
    assert_eq!(
        server.big_in_out(vec![1, 2, 3]).unwrap(),
        [1 ^ 0x5a, 2 ^ 0x5a, 3 ^ 0x5a]
    );
}

#[test]
fn the_composition_links_the_client_to_the_server_inside_one_component() {
    // The composed component imports nothing: the client's `lrpc:bench/bench` import is
    // satisfied by the server instance inside it. The client alone does import it.
    let kernel = lrpc_kernel::Kernel::new().unwrap();
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
