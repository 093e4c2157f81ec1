//! The out-of-process plugin peer: a separate process serving LRPC's Table IV procedures over
//! gRPC on a Unix socket (`lrpc-grpc-peer <socket path>`). Each request is answered by the
//! bench server guest (its component build, `guests/component-server`, in a wasmtime Store of
//! this process) on the bytes received; the calling process pays for the socket, HTTP/2 and
//! protobuf.

use lrpc_benches::components::ComponentServer;
use lrpc_benches::pb::bench_server::{Bench, BenchServer};
use lrpc_benches::pb::{AddRequest, Blob, Empty, Word};
use std::sync::Mutex;
use tonic::{Request, Response, Status};

struct Peer {
    server: Mutex<ComponentServer>,
}

fn failed(what: &str, e: impl std::fmt::Display) -> Status {
    Status::internal(format!("{what} failed in the server guest: {e}"))
}

impl Peer {
    fn server(&self) -> std::sync::MutexGuard<'_, ComponentServer> {
        self.server.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[tonic::async_trait]
impl Bench for Peer {
    async fn null(&self, _: Request<Empty>) -> Result<Response<Empty>, Status> {
        self.server()
            .null()
            .map(|()| Response::new(Empty {}))
            .map_err(|e| failed("null", e))
    }

    async fn add(&self, r: Request<AddRequest>) -> Result<Response<Word>, Status> {
        let r = r.into_inner();
        self.server()
            .add(r.a, r.b)
            .map(|value| Response::new(Word { value }))
            .map_err(|e| failed("add", e))
    }

    async fn big_in(&self, r: Request<Blob>) -> Result<Response<Word>, Status> {
        self.server()
            .big_in(r.into_inner().data)
            .map(|value| Response::new(Word { value }))
            .map_err(|e| failed("big-in", e))
    }

    async fn big_in_out(&self, r: Request<Blob>) -> Result<Response<Blob>, Status> {
        self.server()
            .big_in_out(r.into_inner().data)
            .map(|data| Response::new(Blob { data }))
            .map_err(|e| failed("big-in-out", e))
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .ok_or("usage: lrpc-grpc-peer <socket path>")?;
    let _ = std::fs::remove_file(&path);
    // A wasmtime host that bounds guest time the usual way: epoch interruption, with a
    // thread advancing the epoch every millisecond (as the kernel does).
    let mut config = wasmtime::Config::new();
    config.epoch_interruption(true);
    let engine = wasmtime::Engine::new(&config).map_err(|e| e.to_string())?;
    let ticker = engine.clone();
    std::thread::spawn(move || {
        loop {
            std::thread::sleep(std::time::Duration::from_millis(1));
            ticker.increment_epoch();
        }
    });
    let server = ComponentServer::new(&engine).map_err(|e| e.to_string())?;
    let peer = Peer {
        server: Mutex::new(server),
    };
    let listener = tokio::net::UnixListener::bind(&path)?;
    tonic::transport::Server::builder()
        .add_service(BenchServer::new(peer))
        .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener))
        .await?;
    Ok(())
}
