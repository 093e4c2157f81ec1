//! Remote bindings and MultiRPC for the LRPC kernel.
//!
//! LRPC keeps a cross-machine call transparent with one bit in the Binding Object (LRPC
//! 5.1): the kernel notices the binding is remote and hands the call to a network RPC
//! engine. Here that engine is **wRPC**: a kernel's exports are served as wRPC functions
//! ([`RemoteServer`], over TCP or Unix sockets) and a client calls them through a
//! [`RemoteBinding`]; values travel in the component model's value encoding exactly as
//! `wit-bindgen-wrpc` writes them ([`wire`]), so a peer generated from the same WIT by
//! `wit-bindgen-wrpc` can call our exports and serve our imports. Calls into the local
//! kernel run on driver threads ([`LocalPool`]), never on the tokio reactor.
//!
//! A guest reaches a remote export through its ordinary client stub once the export is
//! registered with its kernel ([`export_remote`]): the binding carries the remote bit, and
//! the kernel forwards each call through [`Forward`].
//!
//! **Scale-out over NATS** ([`nats`]): with an [`Endpoint::Nats`]
//! (`nats://HOST:PORT[/PREFIX]`) a binding calls whichever kernels serve the export behind a
//! NATS server, over one shared connection that reconnects by itself;
//! [`RemoteServer::bind_nats`] subscribes a kernel's exports in a queue group, so several
//! kernels serving one interface share its calls. Who may call is the NATS server's to say:
//! an endpoint presents credentials and TLS settings ([`NatsAuth`]), and every subject it
//! uses sits under its prefix, so the server's permissions can confine a deployment to it.
//! Arguments arriving over NATS go through
//! the same checking translation ([`wire`]) and the same driver pool as over TCP, with the
//! calls in progress bounded.
//!
//! wRPC's TCP and Unix framing carries one invocation per connection. Between a binding and
//! a server of this crate, a connection opened by a wRPC invocation of
//! `lrpc:remote/session@1` / `open` instead carries one call after another (a *session*) and
//! is kept between calls; peers that do not answer it are called in plain wRPC. The server
//! serves each session on a thread of its own, which makes the calls itself with a driver
//! the pool lends ([`LocalPool`]); both sides keep their thread awake briefly for a peer that
//! answers within microseconds (`session::SPIN`). A version 2 session (`open-2`) also
//! carries each call's trace context, as NATS headers do ([`trace`]).
//!
//! **TLS** ([`tls`]): a `tcp:` listener may serve over TLS ([`RemoteServer::listen_tls`])
//! and ask callers for certificates signed by a CA; a caller's certificate names who it is,
//! and an export's allow list ([`RemoteServer::with_allow`]) says who may call it. A binding
//! made with [`RemoteBinding::with_tls`] calls over TLS, plain wRPC and sessions alike; a
//! session keeps its TLS connection between calls.
//!
//! [`multi_call`] is MultiRPC for embedders: one call to N members (local, remote or mixed)
//! with the arguments encoded once, a handler per reply in arrival order that may end the
//! call, and an overall timeout. Guests have their own (`Client::multi_<method>` in every
//! generated client, over the kernel's `multi_*` imports); their remote members go out
//! through [`Forward`]'s `RemoteTarget::start`.
//!
//! **Versions.** `wrpc-transport` 0.30 (with `wasm-tokio` 0.8: lengths read off the wire no
//! longer size allocations up front) and, for the foreign peer in the tests,
//! `wit-bindgen-wrpc` 0.12, which is built on the same 0.30. Neither depends on wasmtime, so
//! both sit beside wasmtime 48. NATS needs no wRPC crate: client and server speak wRPC's
//! NATS protocol over `async-nats` 0.49 themselves (see [`nats`]: `wrpc-transport-nats`
//! 0.31, its newest release, registers a call's subjects with its routing task in a way that
//! can lose a message, and is built on `wrpc-transport` 0.29). The tests still call our NATS
//! server with `wrpc-transport-nats`'s client, a dev-dependency, for interoperability. Each
//! transport hands us byte streams (`AsyncRead` / `AsyncWrite`, or whole payloads), and the
//! value encoding on them is ours ([`wire`]), the same on all.
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod client;
mod endpoint;
mod error;
mod forward;
mod local;
mod multi;
pub mod nats;
pub mod node;
mod pool;
mod server;
pub mod tls;
pub mod trace;
// Public only for the fuzz targets (`fuzz/`): the session framing and the reading of values
// off a stream take bytes from the network.
#[doc(hidden)]
pub mod session;
#[doc(hidden)]
pub mod values;
pub mod wire;

pub use client::{RemoteBinding, RemoteOptions, encode_args};
pub use endpoint::{Endpoint, bind_unix_private};
pub use error::{RemoteError, ServeError};
pub use forward::{Forward, export_remote};
pub use local::{LocalExport, LocalPool};
pub use multi::{Member, MultiOutcome, multi_call};
pub use nats::{NatsAuth, NatsCredentials, NatsEndpoint, NatsListener, NatsTls, ServedCount};
pub use server::{RemoteServer, ServeOptions};
pub use tls::{
    ClientTls, ClientTlsFiles, Identity, Principal, ServerTls, ServerTlsFiles, TlsError,
};
