//! WASI (preview 2) as capabilities: a component domain reaches exactly what its options
//! grant. Nothing granted means no directory, no environment variable, no argument, no
//! socket address; standard output and error are discarded and standard input is closed.
//! Clocks and random numbers are always available (they reach nothing outside the domain).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use wasmtime_wasi::p2::pipe::{MemoryOutputPipe, SinkOutputStream};
use wasmtime_wasi::sockets::SocketAddrUse;
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder};

/// A host directory made visible to a component domain.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Preopen {
    /// The directory on the host.
    pub host: PathBuf,
    /// Where the guest sees it (for example `/data`).
    pub guest: String,
    /// Whether the guest may create, write and remove files under it.
    pub writable: bool,
}

impl Preopen {
    /// The host directory `host`, seen by the guest at `guest`, read-only unless `writable`.
    pub fn new(host: impl Into<PathBuf>, guest: impl Into<String>, writable: bool) -> Preopen {
        Preopen {
            host: host.into(),
            guest: guest.into(),
            writable,
        }
    }
}

/// Where a component domain's standard output or error goes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Stdio {
    /// Dropped (the default).
    #[default]
    Discard,
    /// The host process's own stream.
    Inherit,
    /// Kept in memory, up to 1 MiB; read it with
    /// [`ComponentDomain::stdout`](crate::ComponentDomain::stdout) and `stderr`.
    Capture,
}

/// The WASI capabilities a component domain is granted.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct WasiGrants {
    /// Directories, read-only or read-write.
    pub preopens: Vec<Preopen>,
    /// Environment variables, as `(name, value)`.
    pub env: Vec<(String, String)>,
    /// Command-line arguments.
    pub args: Vec<String>,
    /// Standard output.
    pub stdout: Stdio,
    /// Standard error.
    pub stderr: Stdio,
    /// Socket addresses the domain may connect to, send to or bind (TCP and UDP); empty: no
    /// network at all. Name lookup is never granted.
    pub network: Vec<SocketAddr>,
}

setters!(WasiGrants {
    with_preopens => preopens: Vec<Preopen>,
    with_env => env: Vec<(String, String)>,
    with_args => args: Vec<String>,
    with_stdout => stdout: Stdio,
    with_stderr => stderr: Stdio,
    with_network => network: Vec<SocketAddr>,
});

/// Captured output of one stream, shared between the domain's Store and the embedder.
#[derive(Clone, Default)]
pub(crate) struct Captured(Arc<Mutex<Option<MemoryOutputPipe>>>);

impl Captured {
    pub(crate) fn contents(&self) -> Vec<u8> {
        crate::sync::lock(&self.0)
            .as_ref()
            .map(|p| p.contents().to_vec())
            .unwrap_or_default()
    }
}

/// Captured standard output and error of a domain.
#[derive(Clone, Default)]
pub(crate) struct Output {
    pub stdout: Captured,
    pub stderr: Captured,
}

const CAPTURE_LIMIT: usize = 1 << 20;

/// What a WASI context made by [`WasiGrants::context`] captured of its standard output and
/// error (when its grants say [`Stdio::Capture`]). Clones share the capture.
#[derive(Clone, Default)]
pub struct CapturedOutput(Output);

impl CapturedOutput {
    /// Standard output captured so far (up to 1 MiB).
    pub fn stdout(&self) -> Vec<u8> {
        self.0.stdout.contents()
    }

    /// Standard error captured so far (up to 1 MiB).
    pub fn stderr(&self) -> Vec<u8> {
        self.0.stderr.contents()
    }
}

impl WasiGrants {
    /// A WASI context granting exactly these capabilities, for a Store the embedder runs
    /// itself (a component served outside the kernel's component domains, such as a
    /// `wasi:http` handler). Captured streams are (re)attached to `output`.
    pub fn context(&self, output: &CapturedOutput) -> Result<WasiCtx, String> {
        self.build(&output.0)
    }

    /// A WASI context granting exactly these capabilities; captured streams are (re)attached
    /// to `output`.
    pub(crate) fn build(&self, output: &Output) -> Result<WasiCtx, String> {
        let mut b = WasiCtxBuilder::new();
        for p in &self.preopens {
            let perms = if p.writable {
                FsPerms::ReadWrite
            } else {
                FsPerms::ReadOnly
            };
            b.preopened_dir(&p.host, &p.guest, perms)
                .map_err(|e| format!("preopening {} as {}: {e:#}", p.host.display(), p.guest))?;
        }
        b.envs(self.env.as_slice());
        b.args(self.args.as_slice());
        match self.stdout {
            Stdio::Discard => {
                b.stdout(SinkOutputStream);
            }
            Stdio::Inherit => {
                b.inherit_stdout();
            }
            Stdio::Capture => {
                let pipe = MemoryOutputPipe::new(CAPTURE_LIMIT);
                *crate::sync::lock(&output.stdout.0) = Some(pipe.clone());
                b.stdout(pipe);
            }
        }
        match self.stderr {
            Stdio::Discard => {
                b.stderr(SinkOutputStream);
            }
            Stdio::Inherit => {
                b.inherit_stderr();
            }
            Stdio::Capture => {
                let pipe = MemoryOutputPipe::new(CAPTURE_LIMIT);
                *crate::sync::lock(&output.stderr.0) = Some(pipe.clone());
                b.stderr(pipe);
            }
        }
        let allowed: Arc<[SocketAddr]> = self.network.clone().into();
        b.allow_tcp(!allowed.is_empty());
        b.allow_udp(!allowed.is_empty());
        b.allow_ip_name_lookup(false);
        b.socket_addr_check(move |addr: SocketAddr, usage: SocketAddrUse| {
            // A granted address may be connected to, sent to, or bound; connecting binds the
            // socket implicitly to the wildcard address and an ephemeral port first.
            let implicit = matches!(usage, SocketAddrUse::TcpBind | SocketAddrUse::UdpBind)
                && addr.ip().is_unspecified()
                && addr.port() == 0;
            let ok = !allowed.is_empty() && (implicit || allowed.contains(&addr));
            Box::pin(async move { ok })
        });
        Ok(b.build())
    }
}
