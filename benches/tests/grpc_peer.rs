//! The out-of-process gRPC peer really does the work: a separate process answers over a Unix
//! socket with the bench server guest's results for the bytes it was sent.

use lrpc_benches::Peer;

#[test]
fn the_grpc_peer_answers_every_procedure_correctly() {
    let mut peer = lrpc_benches::GrpcPeer::start(env!("CARGO_BIN_EXE_lrpc-grpc-peer").as_ref());
    lrpc_benches::check(&mut peer, "grpc-uds");
    assert_eq!(
        peer.big_in(65536, 1),
        lrpc_benches::big_in_answer(65536),
        "64 KiB in one message"
    );
}
