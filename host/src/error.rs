//! Errors. [`Fault`] is the typed failure of code running in a domain (trap, deadline,
//! termination), kept apart from ordinary errors of the embedding API ([`Error`]).

use crate::domain::Interrupt;

/// Why code in a domain stopped abnormally. A faulting domain is terminated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Fault {
    /// The guest trapped (for example `unreachable`, an out-of-bounds access, stack overflow).
    #[error("trapped: {message}")]
    Trapped {
        /// The wasm trap code, when the trap came from wasm code.
        trap: Option<wasmtime::Trap>,
        /// The trap's description.
        message: String,
    },
    /// The code ran past its deadline and was interrupted (epoch interruption).
    #[error("ran past its deadline and was interrupted")]
    Deadline,
    /// The domain was terminated while the code ran.
    #[error("the domain was terminated")]
    Terminated,
}

impl Fault {
    /// Classifies an error returned by wasmtime for a call into a domain.
    pub(crate) fn classify(e: &wasmtime::Error) -> Fault {
        if let Some(i) = e.downcast_ref::<Interrupt>() {
            return match i {
                Interrupt::Deadline => Fault::Deadline,
                Interrupt::Terminated => Fault::Terminated,
            };
        }
        let trap = e.downcast_ref::<wasmtime::Trap>().copied();
        Fault::Trapped {
            trap,
            message: format!("{e:#}"),
        }
    }

    /// The status a client sees when its server faulted with this.
    pub(crate) fn status(&self) -> lrpc_abi::Status {
        match self {
            Fault::Trapped { .. } => lrpc_abi::Status::ServerTrapped,
            Fault::Deadline => lrpc_abi::Status::DeadlineExceeded,
            Fault::Terminated => lrpc_abi::Status::ServerTerminated,
        }
    }
}

/// Errors of the kernel's embedding API.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The guest module failed to compile.
    #[error("domain `{domain}`: the module does not compile: {reason}")]
    Compile {
        /// Domain name.
        domain: String,
        /// Compiler message.
        reason: String,
    },
    /// The module could not be instantiated as a domain.
    #[error("domain `{domain}`: can not instantiate: {reason}")]
    Instantiate {
        /// Domain name.
        domain: String,
        /// Why.
        reason: String,
    },
    /// The domain has no such export, or it has another type.
    #[error("domain `{domain}`: export `{export}`: {reason}")]
    NoSuchExport {
        /// Domain name.
        domain: String,
        /// Export name.
        export: String,
        /// Why.
        reason: String,
    },
    /// Loading or planning a WIT interface failed.
    #[error(transparent)]
    Wit(#[from] lrpc_presentation::Error),
    /// No WIT interface of that name is known to the kernel.
    #[error("unknown interface `{0}`")]
    UnknownInterface(String),
    /// The server module lacks an entry stub the interface needs.
    #[error("domain `{domain}` does not implement `{interface}`: {reason}")]
    NotImplemented {
        /// Domain name.
        domain: String,
        /// Interface name.
        interface: String,
        /// The missing or mistyped entry.
        reason: String,
    },
    /// Another domain already exports under that name.
    #[error("an interface is already exported under the name `{0}`")]
    NameTaken(String),
    /// A presentation does not fit where it was given.
    #[error("presentation: {0}")]
    Presentation(String),
    /// The domain is terminated.
    #[error("domain `{0}` is terminated")]
    Terminated(String),
    /// Code running in a domain faulted; the domain has been terminated.
    #[error("the domain faulted: {0}")]
    Fault(#[from] Fault),
    /// The domain's replicas stayed busy for the whole deadline.
    #[error("the domain stayed busy past the deadline")]
    Busy,
    /// The kernel that created this object has been dropped.
    #[error("the kernel has been dropped")]
    KernelGone,
    /// Memory, mappings or identifiers ran out.
    #[error("out of resources: {0}")]
    Resource(String),
    /// A host-side memory access fell outside the domain's memory.
    #[error("{len} bytes at {offset:#x} are outside the domain's memory")]
    OutOfBounds {
        /// Offset.
        offset: usize,
        /// Length.
        len: usize,
    },
}
