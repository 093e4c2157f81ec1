//! Typed errors, and how each maps onto the kernel's statuses.

use crate::wire::CodecError;
use lrpc_kernel::Status;

/// Why a remote call (or one member of a MultiRPC) failed.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// The peer could not be reached: nothing listens there (a refused bind).
    #[error("no peer at {addr}: {source}")]
    Unreachable {
        /// The address.
        addr: String,
        /// What the connection attempt said.
        source: std::io::Error,
    },
    /// The NATS server behind the endpoint refused: the connection's credentials
    /// (an authorization violation), or its subject permissions (a permission violation
    /// naming the subject the call needed).
    #[error("the NATS server of {addr} refused: {reason}")]
    Denied {
        /// The endpoint.
        addr: String,
        /// What the server said.
        reason: String,
    },
    /// The peer closed or reset the connection before the whole result arrived: it died, or
    /// its server failed the call.
    #[error("the peer failed the call: {0}")]
    PeerFailed(String),
    /// No result within the call's deadline.
    #[error("no result within {0:?}")]
    Timeout(std::time::Duration),
    /// The result did not decode as a value of the procedure's result type.
    #[error("the reply is malformed: {0}")]
    BadReply(CodecError),
    /// Our own arguments are not a value of the procedure's parameter types.
    #[error("the arguments are malformed: {0}")]
    BadArguments(CodecError),
    /// The procedure index is out of range for the interface.
    #[error("procedure {0} is out of range")]
    BadProcedure(usize),
    /// The local call behind a member failed with a kernel status.
    #[error("the call failed: {0}")]
    Status(Status),
    /// The local driver domain faulted or is gone.
    #[error("the local driver failed: {0}")]
    Driver(String),
    /// The peer's export refused this caller: the identity in its TLS certificate is not on
    /// the export's allow list (or it presented none).
    #[error("the peer's export `{export}` does not allow this caller")]
    NotAllowed {
        /// The export that refused.
        export: String,
    },
    /// The TLS handshake with the peer failed: its certificate is not trusted, or it refused
    /// ours (none, or not signed by its client CA).
    #[error("TLS with {addr}: {reason}")]
    Tls {
        /// The address.
        addr: String,
        /// What the handshake said.
        reason: String,
    },
    /// A MultiRPC stopped before this member answered (the handler ended the call early, or
    /// the overall timeout passed).
    #[error("the call ended before this member answered")]
    Abandoned,
}

impl RemoteError {
    /// The kernel status a guest's stub sees for this failure: a dead peer is
    /// `ServerTerminated` (call-failed), a timeout `DeadlineExceeded`, an unreachable peer,
    /// one that refuses this caller or a NATS server's refusal `UnknownInterface` (the bind
    /// refusal), a malformed reply `BadReply`.
    pub fn status(&self) -> Status {
        match self {
            RemoteError::Unreachable { .. }
            | RemoteError::Denied { .. }
            | RemoteError::NotAllowed { .. }
            | RemoteError::Tls { .. } => Status::UnknownInterface,
            RemoteError::PeerFailed(_) | RemoteError::Abandoned => Status::ServerTerminated,
            RemoteError::Timeout(_) => Status::DeadlineExceeded,
            RemoteError::BadReply(_) => Status::BadReply,
            RemoteError::BadArguments(_) => Status::ServerRejected,
            RemoteError::BadProcedure(_) => Status::BadProcedure,
            RemoteError::Status(s) => *s,
            RemoteError::Driver(_) => Status::ServerTerminated,
        }
    }
}

/// Why a remote export could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The kernel refused (unknown interface, driver domain creation).
    #[error(transparent)]
    Kernel(#[from] lrpc_kernel::Error),
    /// The local binding of the driver was refused.
    #[error("binding to `{name}`: {status}")]
    Bind {
        /// The export name.
        name: String,
        /// The refusal.
        status: Status,
    },
    /// Listening failed.
    #[error("listening on {addr}: {source}")]
    Listen {
        /// The address.
        addr: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The wRPC server refused to register a handler.
    #[error("registering `{0}`: {1}")]
    Register(String, String),
}
