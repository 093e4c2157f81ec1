//! Errors. [`Fault`] is the typed failure of code running in a domain (trap, deadline,
//! termination), kept apart from ordinary errors of the embedding API ([`Error`]).

/// What the epoch callback raises to stop a domain's code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Interrupt {
    /// The domain was terminated while running.
    #[error("the domain was terminated")]
    Terminated,
    /// The running call passed its deadline.
    #[error("the call ran past its deadline")]
    Deadline,
}

/// Why code in a domain stopped abnormally. A faulting domain is terminated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
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

/// A boxed error kept as the cause of a kernel error.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Errors of the kernel's embedding API. Each keeps the error that caused it as its
/// [`source`](std::error::Error::source).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The guest module failed to compile.
    #[error("domain `{domain}`: the module does not compile")]
    Compile {
        /// Domain name.
        domain: String,
        /// The compiler's error.
        #[source]
        source: BoxError,
    },
    /// The module could not be instantiated as a domain.
    #[error("domain `{domain}`: can not instantiate")]
    Instantiate {
        /// Domain name.
        domain: String,
        /// Why.
        #[source]
        source: BoxError,
    },
    /// The domain has no such export, or it has another type.
    #[error("domain `{domain}`: export `{export}`")]
    NoSuchExport {
        /// Domain name.
        domain: String,
        /// Export name.
        export: String,
        /// Why.
        #[source]
        source: BoxError,
    },
    /// Loading or planning a WIT interface failed.
    #[error(transparent)]
    Wit(#[from] lrpc_presentation::Error),
    /// No WIT interface of that name is known to the kernel.
    #[error("unknown interface `{0}`")]
    UnknownInterface(String),
    /// The server module lacks an entry stub the interface needs.
    #[error("domain `{domain}` does not implement `{interface}`: entry `{entry}`")]
    NotImplemented {
        /// Domain name.
        domain: String,
        /// Interface name.
        interface: String,
        /// The missing or mistyped entry.
        entry: String,
        /// Why it does not fit.
        #[source]
        source: BoxError,
    },
    /// Another domain already exports under that name.
    #[error("an interface is already exported under the name `{0}`")]
    NameTaken(String),
    /// A presentation does not fit where it was given.
    #[error("presentation: {0}")]
    Presentation(String),
    /// Options that a domain of this kind does not take.
    #[error("{0}")]
    Options(String),
    /// An isolated domain could not be put back into its fresh state; it is terminated.
    #[error("domain `{domain}` could not be reset and is terminated")]
    Reset {
        /// Domain name.
        domain: String,
        /// Why.
        source: BoxError,
    },
    /// A presentation file could not be read.
    #[error("presentation file {path}")]
    PresentationFile {
        /// The file.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
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
    /// A domain reached one of its quotas; other domains are unaffected.
    #[error(
        "domain `{domain}`: {quota} quota exceeded ({requested} requested, {in_use} in use, limit {limit})"
    )]
    QuotaExceeded {
        /// The domain.
        domain: String,
        /// Which quota.
        quota: Quota,
        /// The limit.
        limit: u64,
        /// What is in use already.
        in_use: u64,
        /// What was asked for on top.
        requested: u64,
    },
    /// The host could not create a memory file for a window.
    #[error("creating a memory file for a window")]
    Memfd(#[source] std::io::Error),
    /// The host could not map a window into a linear memory.
    #[error("mapping a window into domain `{domain}`")]
    Map {
        /// The domain whose memory was being mapped.
        domain: String,
        /// The mapping error.
        #[source]
        source: std::io::Error,
    },
    /// A linear memory could not grow to make room for windows.
    #[error("growing the memory of domain `{domain}`")]
    Grow {
        /// The domain.
        domain: String,
        /// Why.
        #[source]
        source: BoxError,
    },
    /// The out-of-band segment named does not exist (it was replaced or revoked).
    #[error("no such out-of-band segment")]
    NoSegment,
    /// As many domains are live as the kernel can identify.
    #[error("too many live domains")]
    TooManyDomains,
    /// The wasmtime engine or the kernel's imports could not be set up.
    #[error("setting up the engine")]
    Engine(#[source] BoxError),
    /// A kernel thread (epoch ticker, server thread) could not be started.
    #[error("starting a kernel thread")]
    Thread(#[source] std::io::Error),
    /// A host-side memory access fell outside the domain's memory.
    #[error("{len} bytes at {offset:#x} are outside the domain's memory")]
    OutOfBounds {
        /// Offset.
        offset: usize,
        /// Length.
        len: usize,
    },
    /// A component's export does not match the WIT interface it is exported as.
    #[error(
        "domain `{domain}` does not export `{interface}` as its WIT says: `{function}`: {reason}"
    )]
    ComponentMismatch {
        /// Domain name.
        domain: String,
        /// The interface.
        interface: String,
        /// The function that does not match (`*` for the whole interface).
        function: String,
        /// Why.
        reason: String,
    },
    /// A component's import could not be bound to an export.
    #[error("domain `{domain}`: import `{import}` can not be bound: {reason}")]
    Unbound {
        /// Domain name.
        domain: String,
        /// The imported interface.
        import: String,
        /// Why.
        reason: String,
    },
    /// A guest answered a driver (the demo, a runtime) with a refusal or a wrong result.
    #[error("{what}: {reason}")]
    Guest {
        /// What was being done.
        what: String,
        /// What went wrong.
        reason: String,
    },
}

/// The limits a deployment sets per domain (see `Quotas`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Quota {
    /// Live bindings held as client.
    Bindings,
    /// A-stack extents over all bindings held.
    AStackExtents,
    /// Bytes of A-stacks over all bindings held.
    AStackBytes,
    /// Bytes of out-of-band segments over all bindings held.
    OutOfBandBytes,
    /// Windows mapped into linear memories on the domain's behalf.
    Mappings,
    /// Memory files held open on the domain's behalf.
    Memfds,
    /// Instances of the domain (replicas).
    Replicas,
    /// Bytes of one linear memory of the domain.
    Memory,
}

impl Quota {
    /// The status a guest sees when an import is refused by this quota.
    pub fn status(self) -> lrpc_abi::Status {
        use lrpc_abi::Status;
        match self {
            Quota::Bindings => Status::QuotaBindings,
            Quota::AStackExtents | Quota::AStackBytes => Status::QuotaAStacks,
            Quota::OutOfBandBytes => Status::QuotaOutOfBand,
            Quota::Mappings | Quota::Memfds => Status::QuotaMappings,
            Quota::Replicas | Quota::Memory => Status::QuotaMemory,
        }
    }
}

impl std::fmt::Display for Quota {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Quota::Bindings => "bindings",
            Quota::AStackExtents => "A-stack extents",
            Quota::AStackBytes => "A-stack bytes",
            Quota::OutOfBandBytes => "out-of-band bytes",
            Quota::Mappings => "window mappings",
            Quota::Memfds => "memory files",
            Quota::Replicas => "replicas",
            Quota::Memory => "memory",
        })
    }
}

impl Error {
    /// The status a guest sees when a kernel import fails with this error.
    pub(crate) fn status(&self) -> lrpc_abi::Status {
        use lrpc_abi::Status;
        match self {
            Error::Busy => Status::ServerBusy,
            Error::Terminated(_) => Status::ServerTerminated,
            Error::QuotaExceeded { quota, .. } => quota.status(),
            Error::NoSegment => Status::NoSegment,
            Error::Fault(f) => f.status(),
            _ => Status::ResourceExhausted,
        }
    }
}

/// Boxes a wasmtime (anyhow) error, keeping its chain.
pub(crate) fn boxed(e: wasmtime::Error) -> BoxError {
    e.into()
}
