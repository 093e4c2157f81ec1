//! Every Table IV peer the benchmarks time answers every procedure correctly, with the
//! buffer sizes the benchmarks use.

#[test]
fn every_peer_answers_every_procedure_correctly() {
    let peers = lrpc_benches::peers(env!("CARGO_BIN_EXE_lrpc-grpc-peer").as_ref());
    let names: Vec<&str> = peers.iter().map(|(n, _, _)| *n).collect();
    assert_eq!(
        names,
        [
            "isolated",
            "direct",
            "component-host",
            "component-kernel",
            "component-to-astack",
            "astack-to-component",
            "component-fused",
            "message-passing",
            "grpc-uds"
        ]
    );
    for (name, make, _) in peers {
        let mut peer = make();
        lrpc_benches::check(&mut *peer, name);
        for size in lrpc_benches::SIZES {
            assert_eq!(
                peer.big_in(size, 1),
                lrpc_benches::big_in_answer(size),
                "{name}: big-in of {size} bytes"
            );
            assert_eq!(
                peer.big_in_out(size, 1),
                0,
                "{name}: big-in-out of {size} bytes"
            );
        }
    }
}

#[test]
fn the_floors_under_an_isolated_call_run() {
    let kernel = lrpc_kernel::Kernel::new().unwrap();
    let mut cross = lrpc_benches::CrossStore::new(&kernel);
    assert_eq!(cross.run(100), 0);
    let mut raw = lrpc_benches::RawCall::new();
    assert_eq!(raw.run(100), 0, "raw lrpc.call on a bound A-stack succeeds");
}
