//! The out-of-process gRPC peer really does the work: a separate process answers over a Unix
//! socket with the bench server guest's results.

#[test]
fn the_grpc_peer_answers_every_procedure_correctly() {
    let mut peer = lrpc_benches::GrpcPeer::start(env!("CARGO_BIN_EXE_lrpc-grpc-peer").as_ref());
    assert_eq!(peer.null(10), 0);
    assert_eq!(peer.add(100), 0, "sums checked call by call");
    for len in [0, 200, 4096] {
        assert_eq!(peer.big_in_out(len, 3), 0, "{len} bytes");
    }
}
