//! The out-of-process plugin peer: a separate process serving LRPC's Table IV procedures over
//! gRPC on a Unix socket (`lrpc-grpc-peer <socket path>`). Each request is answered by the
//! bench server guest, hosted in this process by its own lrpc kernel (through a bench client
//! guest bound to it); the calling process pays for the socket, HTTP/2 and protobuf.

use lrpc::DomainFunc;
use lrpc_benches::pb::bench_server::{Bench, BenchServer};
use lrpc_benches::pb::{AddRequest, Blob, Empty, Word};
use tonic::{Request, Response, Status};

struct Peer {
    _kernel: lrpc::Kernel,
    null: DomainFunc<(i32,), i32>,
    add: DomainFunc<(i32, i32), i64>,
    big_in: DomainFunc<(i32, i32), i64>,
    big_in_out: DomainFunc<(i32, i32), i32>,
}

fn failed(what: &str) -> Status {
    Status::internal(format!("{what} failed in the server guest"))
}

#[tonic::async_trait]
impl Bench for Peer {
    async fn null(&self, _: Request<Empty>) -> Result<Response<Empty>, Status> {
        match self.null.call((1,)) {
            Ok(0) => Ok(Response::new(Empty {})),
            _ => Err(failed("null")),
        }
    }

    async fn add(&self, r: Request<AddRequest>) -> Result<Response<Word>, Status> {
        let r = r.into_inner();
        match self.add.call((r.a as i32, r.b as i32)) {
            Ok(v) if v >= 0 => Ok(Response::new(Word { value: v as u32 })),
            _ => Err(failed("add")),
        }
    }

    async fn big_in(&self, r: Request<Blob>) -> Result<Response<Word>, Status> {
        let len = r.into_inner().data.len() as i32;
        match self.big_in.call((len, 1)) {
            Ok(v) if v >= 0 => Ok(Response::new(Word { value: v as u32 })),
            _ => Err(failed("big-in")),
        }
    }

    async fn big_in_out(&self, r: Request<Blob>) -> Result<Response<Blob>, Status> {
        let data = r.into_inner().data;
        match self.big_in_out.call((data.len() as i32, 1)) {
            Ok(0) => Ok(Response::new(Blob {
                data: data.iter().rev().map(|b| b ^ 0x5a).collect(),
            })),
            _ => Err(failed("big-in-out")),
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .ok_or("usage: lrpc-grpc-peer <socket path>")?;
    let _ = std::fs::remove_file(&path);
    let (kernel, _server, client) = lrpc_benches::setup(1);
    let peer = Peer {
        null: client.func("null")?,
        add: client.func("add")?,
        big_in: client.func("big_in")?,
        big_in_out: client.func("big_in_out")?,
        _kernel: kernel,
    };
    let listener = tokio::net::UnixListener::bind(&path)?;
    tonic::transport::Server::builder()
        .add_service(BenchServer::new(peer))
        .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener))
        .await?;
    Ok(())
}
