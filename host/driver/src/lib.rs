//! The host side of the driver guest (`lrpc_artifacts::HTTP_DRIVER`): a client domain with
//! one replica, owned by one thread, through which the host makes calls into server domains
//! (the kernel's call path starts in a client domain). The runtime (`lrpc-runtime`) calls
//! plugin chains and `lrpc run --call` through it, and remote exports (`lrpc-remote`) call
//! the local kernel through it. [`pool::Pool`] runs the threads that own drivers, for both.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod pool;

use lrpc_kernel::{Domain, Error, Kernel, Status, domain::DomainFunc};
use std::cell::Cell;
use std::time::Duration;

/// A failed call through a driver (or, in the runtime, a failed `lrpc run --call`).
#[derive(Debug, thiserror::Error)]
pub enum CallFailure {
    /// Before the call: names, arguments, binding.
    #[error("{0}")]
    Setup(String),
    /// The call itself failed with a kernel status.
    #[error("the call failed: {0}")]
    Status(lrpc_kernel::Status),
    /// The driver domain faulted.
    #[error("the driver faulted: {0}")]
    Driver(lrpc_kernel::Error),
    /// A call into a component domain failed.
    #[error("the call failed: {0}")]
    Component(lrpc_kernel::Error),
}

/// A driver domain and its exports, looked up once.
pub struct Driver {
    domain: Domain,
    input: DomainFunc<i32, i32>,
    /// The input buffer's address and the bytes it holds, as `input` last gave them: it
    /// stays there until a larger one is asked for, so each request is written there
    /// without a call into the driver first.
    buffer: Cell<(usize, usize)>,
    /// The address of the driver's mailbox: where its last answer lies.
    mailbox: usize,
    bind: DomainFunc<(i32, i32, i64, i32), i32>,
    call: DomainFunc<(i32, i32, i32, i32, i32), i32>,
    chain: DomainFunc<(i32, i32, i32), i32>,
    /// The deadline of one call into the driver (`None`: the kernel's default). The driver's
    /// deadline runs on while the servers it calls run, so it must cover theirs.
    deadline: Option<Duration>,
}

/// How [`Driver::chain`] ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChainEnd {
    /// Plugin `slot` answered with this encoded `lrpc:http/plugin#response`.
    Responded {
        /// The plugin that answered.
        slot: usize,
        /// The encoded response.
        response: Vec<u8>,
    },
    /// The call into plugin `slot` failed with `status`.
    Failed {
        /// The plugin.
        slot: usize,
        /// The kernel status (or `BadReply` for an action that did not decode).
        status: Status,
    },
    /// Plugin `slot`, which takes no body, passed a body on (a `rewrite` with one).
    RewroteBody {
        /// The plugin.
        slot: usize,
    },
    /// Every plugin passed the request on.
    Unanswered {
        /// The request as the last plugin passed it on, encoded as `handle`'s arguments.
        request: Vec<u8>,
    },
}

impl Driver {
    /// A new driver domain called `name`.
    pub fn new(kernel: &Kernel, name: &str) -> Result<Driver, Error> {
        let domain = kernel.domain(name, lrpc_artifacts::HTTP_DRIVER)?;
        let mailbox = domain.func::<(), i32>("mailbox")?.call(())?;
        let mailbox = address(mailbox, "the driver's mailbox", || format!("at {mailbox}"))?;
        Ok(Driver {
            input: domain.func("input")?,
            buffer: Cell::new((0, 0)),
            mailbox,
            bind: domain.func("bind")?,
            call: domain.func("call")?,
            chain: domain.func("chain")?,
            domain,
            deadline: None,
        })
    }

    /// Sets the deadline of each call into the driver: at least the longest its calls into
    /// servers may take, waits for a busy server included. The kernel's default deadline
    /// (10 s unless configured) applies until then.
    pub fn set_deadline(&mut self, deadline: Duration) {
        self.deadline = Some(deadline);
    }

    /// Calls `f` under the driver's deadline.
    fn run<P, R>(&self, f: &DomainFunc<P, R>, params: P) -> Result<R, Error>
    where
        P: wasmtime::WasmParams,
        R: wasmtime::WasmResults,
    {
        match self.deadline {
            Some(d) => f.call_within(params, d),
            None => f.call(params),
        }
    }

    /// The driver's domain.
    pub fn domain(&self) -> &Domain {
        &self.domain
    }

    fn put(&self, bytes: &[u8]) -> Result<i32, Error> {
        let len = i32::try_from(bytes.len()).map_err(|_| Error::OutOfBounds {
            offset: 0,
            len: bytes.len(),
        })?;
        let (mut at, held) = self.buffer.get();
        if at == 0 || held < bytes.len() {
            let ptr = self.run(&self.input, len)?;
            at = address(ptr, "the driver's input buffer", || {
                format!("none for {len} bytes")
            })?;
            self.buffer.set((at, bytes.len()));
        }
        self.domain.write_memory(at, bytes)?;
        Ok(len)
    }

    /// The driver's last answer, where its mailbox says it lies (`read_memory` checks that
    /// range against the driver's memory before it allocates for it).
    fn output(&self) -> Result<Vec<u8>, Error> {
        let mut m = [0u8; 8];
        self.domain.read_memory_into(self.mailbox, &mut m)?;
        let [a0, a1, a2, a3, l0, l1, l2, l3] = m;
        let at = u32::from_le_bytes([a0, a1, a2, a3]) as usize;
        let len = u32::from_le_bytes([l0, l1, l2, l3]) as usize;
        self.domain.read_memory(at, len)
    }

    /// Binds `slot` to the export `name` (an interface with this fingerprint and number of
    /// procedures), replacing what the slot was bound to.
    pub fn bind(
        &self,
        slot: usize,
        name: &str,
        fingerprint: u64,
        nprocs: usize,
    ) -> Result<(), BindError> {
        let len = self.put(name.as_bytes())?;
        let status = self.run(
            &self.bind,
            (
                slot as i32,
                len,
                fingerprint as i64,
                i32::try_from(nprocs).unwrap_or(i32::MAX),
            ),
        )?;
        match status {
            0 => Ok(()),
            s => Err(BindError::Status(status_of(s))),
        }
    }

    /// One call of procedure `proc` on `slot`'s binding with encoded arguments; the encoded
    /// result.
    pub fn call(
        &self,
        slot: usize,
        proc: usize,
        bounded: bool,
        out_bound: usize,
        args: &[u8],
    ) -> Result<Vec<u8>, CallFailure> {
        let len = self.put(args).map_err(CallFailure::Driver)?;
        let status = self
            .run(
                &self.call,
                (
                    slot as i32,
                    proc as i32,
                    i32::from(bounded),
                    i32::try_from(out_bound).unwrap_or(i32::MAX),
                    len,
                ),
            )
            .map_err(CallFailure::Driver)?;
        if status != 0 {
            return Err(CallFailure::Status(status_of(status)));
        }
        self.output().map_err(CallFailure::Driver)
    }

    /// Carries an encoded request (`handle`'s arguments) through slots `0..n`. The slots
    /// whose bit is set in `bodyless` (bit `slot`, below 32) take no body: they get an empty
    /// one, the body passes them untouched, and a body they pass on ends the chain
    /// ([`ChainEnd::RewroteBody`]).
    pub fn chain(&self, n: usize, request: &[u8], bodyless: u32) -> Result<ChainEnd, Error> {
        let len = self.put(request)?;
        let r = self.run(
            &self.chain,
            (n as i32, len, i32::from_ne_bytes(bodyless.to_ne_bytes())),
        )?;
        if r < 0 {
            return Err(Error::Guest {
                what: "the driver".into(),
                reason: format!("refused the request ({r})"),
            });
        }
        let slot = ((r >> 8) as usize).saturating_sub(1);
        Ok(match r & 0xff {
            0 => ChainEnd::Responded {
                slot,
                response: self.output()?,
            },
            255 => ChainEnd::Unanswered {
                request: self.output()?,
            },
            253 => ChainEnd::RewroteBody { slot },
            254 => ChainEnd::Failed {
                slot,
                status: Status::BadReply,
            },
            s => ChainEnd::Failed {
                slot,
                status: status_of(s),
            },
        })
    }
}

/// A nonzero address the driver gave as `value`; else the guest error about `what`.
fn address(value: i32, what: &str, reason: impl FnOnce() -> String) -> Result<usize, Error> {
    usize::try_from(value)
        .ok()
        .filter(|&a| a != 0)
        .ok_or_else(|| Error::Guest {
            what: what.into(),
            reason: reason(),
        })
}

fn status_of(code: i32) -> Status {
    Status::try_from(code).unwrap_or(Status::BadReply)
}

/// A failed bind.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    /// The kernel refused it.
    #[error("{0}")]
    Status(Status),
    /// The driver faulted.
    #[error(transparent)]
    Driver(#[from] Error),
}
