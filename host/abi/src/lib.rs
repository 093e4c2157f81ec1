//! The binary contract between the lrpc kernel (the host) and guest domains.
//!
//! Both sides compile this crate: the host links it natively, guests link it into their
//! wasm32 modules through `lrpc-sdk`. Everything a guest and the kernel must agree on lives
//! here and nowhere else: the names and signatures of the kernel imports, the status codes a
//! call can return, the layout of binding descriptors, the A-stack header, the names of
//! server entry exports and the interface fingerprint.
//!
//! All multi-byte integers in guest memory are little endian.
#![no_std]
#![deny(unsafe_code)]
#![warn(missing_docs)]

/// Wasm import module under which the kernel's functions are provided.
pub const IMPORT_MODULE: &str = "lrpc";

/// Kernel import names. Signatures are given as wasm core types; pointers are guest addresses.
pub mod import {
    /// `bind(name_ptr: i32, name_len: i32, fingerprint: i64, desc_ptr: i32, desc_cap: i32) -> i32`
    ///
    /// Binds the calling domain (as client) to the interface exported under `name`, refusing
    /// with [`Status::InterfaceMismatch`](crate::Status::InterfaceMismatch) if the server's
    /// interface has a different fingerprint. On success writes a binding descriptor
    /// ([`desc`](crate::desc)) of `desc::len(nprocs)` bytes at `desc_ptr`.
    pub const BIND: &str = "bind";
    /// `unbind(handle: i64) -> i32`: revokes the binding and returns its pages.
    pub const UNBIND: &str = "unbind";
    /// `call(handle: i64, proc: i32, astack: i32) -> i32`: transfers the calling thread into
    /// the server's entry for `proc`, with the A-stack at client address `astack`.
    pub const CALL: &str = "call";
    /// `astacks_more(handle: i64, proc: i32, extent_ptr: i32) -> i32`: allocates another
    /// extent of A-stacks for `proc` (LRPC 5.2) and writes an extent record
    /// ([`desc::EXTENT_LEN`](crate::desc::EXTENT_LEN) bytes) at `extent_ptr`.
    pub const ASTACKS_MORE: &str = "astacks_more";
    /// `oob(handle: i64, proc: i32, astack: i32, dir: i32, min_len: i32, seg_ptr: i32) -> i32`:
    /// makes sure the out-of-band segment of direction `dir` ([`OOB_IN`](crate::OOB_IN) or
    /// [`OOB_OUT`](crate::OOB_OUT)) attached to that A-stack holds at least `min_len` bytes,
    /// and writes its client address and capacity (two u32) at `seg_ptr`. With `min_len` 0 it
    /// only reports an existing segment ([`Status::BadReply`](crate::Status::BadReply) when
    /// there is none).
    pub const OOB: &str = "oob";
    /// `reply_oob(min_len: i32, seg_ptr: i32) -> i32`: called by a server during a call:
    /// makes sure the current call's [`OOB_OUT`](crate::OOB_OUT) segment holds at least
    /// `min_len` bytes and writes its server address and capacity (two u32) at `seg_ptr`.
    pub const REPLY_OOB: &str = "reply_oob";
    /// `channel_bind(name_ptr: i32, name_len: i32, fingerprint: i64, slots: i32, desc_ptr: i32,
    /// desc_cap: i32) -> i32`
    ///
    /// Makes an asynchronous binding (a URPC channel, see [`chan`](crate::chan)) from the
    /// calling domain to the interface exported under `name`, served by the processors the
    /// embedder started for its server. The channel's segment is mapped into the calling
    /// replica's memory and the server's. On success writes a channel descriptor
    /// ([`chan::Desc`](crate::chan::Desc), [`chan::DESC_LEN`](crate::chan::DESC_LEN) bytes) at
    /// `desc_ptr`. Refuses with [`Status::NoProcessors`](crate::Status::NoProcessors) when the
    /// server has none.
    pub const CHANNEL_BIND: &str = "channel_bind";
    /// `channel_wait(handle: i64, rep_tail: i32, timeout_us: i32) -> i32`: called when the
    /// domain has nothing to run: returns as soon as the channel's reply head differs from
    /// `rep_tail` (replies to harvest) or after about `timeout_us` microseconds (status
    /// `Ok` either way), or with the status that failed the channel. Meanwhile it wakes the
    /// server's processors, and runs the server's loop on the calling thread when the server
    /// has no processor free (URPC's processor donation).
    pub const CHANNEL_WAIT: &str = "channel_wait";
    /// `channel_unbind(handle: i64) -> i32`: closes the channel and takes its segment out of
    /// both memories.
    pub const CHANNEL_UNBIND: &str = "channel_unbind";
    /// `multi_start(members_ptr: i32, n: i32, proc: i32, timeout_ms: i32) -> i32`: starts a
    /// MultiRPC: procedure `proc` on each of `n` bindings, whose member records
    /// ([`multi::Member`](crate::multi::Member)) are at `members_ptr`, each A-stack already
    /// holding the arguments. Returns the call's id (≥ 0), or the negated status that refused
    /// it. Calls to remote exports go out at once; calls to local servers are made one at a
    /// time by `multi_next`, on the calling thread, with their ordinary semantics.
    pub const MULTI_START: &str = "multi_start";
    /// `multi_next(id: i32, next_ptr: i32) -> i32`: waits for the MultiRPC's next event (a
    /// member's reply or failure, in arrival order; the end; the overall timeout) and writes
    /// its record ([`multi::Next`](crate::multi::Next)) at `next_ptr`. A member's results
    /// are on its A-stack, as after `call`.
    pub const MULTI_NEXT: &str = "multi_next";
    /// `multi_end(id: i32) -> i32`: ends the MultiRPC: local members not yet called are not
    /// called, remote replies still out are dropped, and no A-stack of it is touched again.
    pub const MULTI_END: &str = "multi_end";
}

/// The records of MultiRPC from guests (`multi_start`, `multi_next`).
pub mod multi {
    /// Bytes of a member record.
    pub const MEMBER_LEN: usize = 16;
    /// Bytes of an event record.
    pub const NEXT_LEN: usize = 12;
    /// Most members of one MultiRPC.
    pub const MAX_MEMBERS: usize = 1024;
    /// Most MultiRPCs a domain replica has under way at once.
    pub const MAX_OPEN: usize = 16;

    /// One member: a binding and the A-stack holding the arguments.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct Member {
        /// The binding's handle.
        pub handle: u64,
        /// The A-stack's address in the caller's memory.
        pub astack: u32,
    }

    impl Member {
        /// The record's bytes.
        pub fn encode(&self) -> [u8; MEMBER_LEN] {
            let lo = self.handle as u32;
            let hi = (self.handle >> 32) as u32;
            crate::words::put([lo, hi, self.astack, 0])
        }

        /// Reads a record from the start of `b`; `None` if `b` is too short.
        pub fn decode(b: &[u8]) -> Option<Member> {
            let [lo, hi, astack, _] = crate::words::get(b)?;
            Some(Member {
                handle: u64::from(lo) | (u64::from(hi) << 32),
                astack,
            })
        }
    }

    /// What an event is.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Kind {
        /// A member's reply or failure: `member` and `status` say which and how.
        Reply = 0,
        /// Every member has been reported.
        Done = 1,
        /// The overall timeout passed; members not reported are stragglers.
        Timeout = 2,
    }

    /// One event of a MultiRPC.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct Next {
        /// What happened.
        pub kind: Kind,
        /// The member's index (for a reply).
        pub member: u32,
        /// The member call's status code (for a reply).
        pub status: u32,
    }

    impl Next {
        /// The record's bytes.
        pub fn encode(&self) -> [u8; NEXT_LEN] {
            crate::words::put([self.kind as u32, self.member, self.status])
        }

        /// Reads a record from the start of `b`; `None` if `b` is too short or its kind is
        /// unknown.
        pub fn decode(b: &[u8]) -> Option<Next> {
            let [kind, member, status] = crate::words::get(b)?;
            let kind = match kind {
                0 => Kind::Reply,
                1 => Kind::Done,
                2 => Kind::Timeout,
                _ => return None,
            };
            Some(Next {
                kind,
                member,
                status,
            })
        }
    }
}

/// Out-of-band segment carrying arguments (client to server).
pub const OOB_IN: i32 = 0;
/// Out-of-band segment carrying results (server to client).
pub const OOB_OUT: i32 = 1;

/// Prefix of the export name of a server entry stub; see [`entry_name`].
pub const ENTRY_PREFIX: &str = "lrpc-entry:";

/// Writes the export name of the entry stub for `function` of `interface` (for example
/// `lrpc-entry:lrpc:bench/bench#add`) through `out`.
///
/// An entry has the core type
/// `(astack: i32, astack_cap: i32, oob: i32, oob_cap: i32, borrow: i32) -> i32`: the server
/// address and capacity of the A-stack and of its `in` out-of-band segment (zero when there
/// is none), and the binding's borrow mask for this procedure (bit i: `in` parameter i may be
/// read in place, because the client said `trashable` or the server `preserved`). It returns
/// [`ENTRY_OK`] or [`ENTRY_REJECTED`].
pub fn entry_name(
    interface: &str,
    function: &str,
    out: &mut impl core::fmt::Write,
) -> core::fmt::Result {
    write!(out, "{ENTRY_PREFIX}{interface}#{function}")
}

/// Prefix of the export name of a server's register entry; see [`fast_entry_name`].
pub const FAST_PREFIX: &str = "lrpc-fast:";

/// Writes the export name of the register entry for `function` of `interface` (for example
/// `lrpc-fast:lrpc:bench/bench#add`) through `out`.
///
/// Procedures whose parameters and result are all scalars (integers, floats, `bool`; not
/// `char`) have, besides their entry stub, a register entry that takes the parameters as
/// core values and returns the result as one: `u8`…`u32`, `s8`…`s32` and `bool` as `i32`
/// (`bool` as 0 or 1), `u64`/`s64` as `i64`, `f32`/`f64` as themselves. It is used only on
/// direct-linked bindings, where the kernel places it in the client's function table after
/// checking its type; no A-stack is involved.
pub fn fast_entry_name(
    interface: &str,
    function: &str,
    out: &mut impl core::fmt::Write,
) -> core::fmt::Result {
    write!(out, "{FAST_PREFIX}{interface}#{function}")
}

/// Entry return value: results are on the A-stack.
pub const ENTRY_OK: i32 = 0;
/// Entry return value: the server refused the request as malformed (bad length, UTF-8, tag).
pub const ENTRY_REJECTED: i32 = 1;

/// Layout of the binding descriptor the kernel writes for `bind`.
///
/// ```text
/// 0   u64 handle
/// 8   u32 number of procedures
/// 12  u32 flags (FLAG_DIRECT; bit 0 is unused)
/// 16  extent[nprocs]: for procedure i, its first extent of A-stacks
///     direct[nprocs]: with FLAG_DIRECT, for procedure i: u32 function-table index of the
///     server's entry in this domain, u32 server address of the first extent's first
///     A-stack, u32 borrow mask, u32 function-table index + 1 of the server's register
///     entry (see `fast_entry_name`; 0: the procedure has none)
/// ```
pub mod desc {
    /// Binding flag: the binding is direct-linked (the client fully trusts the server): the
    /// client calls the entry through its own function table, without entering the kernel.
    pub const FLAG_DIRECT: u32 = 2;
    /// Bytes of one direct record.
    pub const DIRECT_LEN: usize = 16;
    /// Bytes before the first extent.
    pub const HEADER_LEN: usize = 16;
    /// Bytes of one extent record: `u32 base` (client address of the first A-stack),
    /// `u32 size` (bytes per A-stack), `u32 count`, `u32 reserved`.
    pub const EXTENT_LEN: usize = 16;
    /// Total descriptor length for `nprocs` procedures.
    pub const fn len(nprocs: usize) -> usize {
        HEADER_LEN + (EXTENT_LEN + DIRECT_LEN) * nprocs
    }

    /// Where procedure `i`'s extent record starts.
    pub const fn extent_at(i: usize) -> usize {
        HEADER_LEN + EXTENT_LEN * i
    }

    /// Where procedure `i`'s direct record starts, in a descriptor for `nprocs` procedures.
    pub const fn direct_at(nprocs: usize, i: usize) -> usize {
        HEADER_LEN + EXTENT_LEN * nprocs + DIRECT_LEN * i
    }

    /// The descriptor's header.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct Header {
        /// The Binding Object's handle.
        pub handle: u64,
        /// Number of procedures (one extent and one direct record each).
        pub nprocs: u32,
        /// `FLAG_*` bits.
        pub flags: u32,
    }

    impl Header {
        /// The header's bytes.
        pub fn encode(&self) -> [u8; HEADER_LEN] {
            let mut b = [0; HEADER_LEN];
            b[..8].copy_from_slice(&self.handle.to_le_bytes());
            let w: [u8; 8] = crate::words::put([self.nprocs, self.flags]);
            b[8..].copy_from_slice(&w);
            b
        }

        /// Reads a header from the start of `b`; `None` if `b` is too short.
        pub fn decode(b: &[u8]) -> Option<Header> {
            let handle = u64::from_le_bytes(b.get(..8)?.try_into().ok()?);
            let [nprocs, flags] = crate::words::get(b.get(8..)?)?;
            Some(Header {
                handle,
                nprocs,
                flags,
            })
        }
    }

    /// An extent record: a run of `count` A-stacks of `size` bytes from client address
    /// `base`. Written for each procedure in the descriptor and by `astacks_more`.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct Extent {
        /// Client address of the first A-stack.
        pub base: u32,
        /// Bytes per A-stack.
        pub size: u32,
        /// Number of A-stacks.
        pub count: u32,
    }

    impl Extent {
        /// The record's bytes.
        pub fn encode(&self) -> [u8; EXTENT_LEN] {
            crate::words::put([self.base, self.size, self.count, 0])
        }

        /// Reads a record from the start of `b`; `None` if `b` is too short.
        pub fn decode(b: &[u8]) -> Option<Extent> {
            let [base, size, count, _] = crate::words::get(b)?;
            Some(Extent { base, size, count })
        }
    }

    /// A direct record (meaningful with `FLAG_DIRECT`; zero otherwise).
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct Direct {
        /// Function-table index of the server copy's entry in the client's table.
        pub index: u32,
        /// Server address of the first extent's first A-stack.
        pub server_base: u32,
        /// Borrow mask passed to the entry.
        pub borrow: u32,
        /// Function-table index + 1 of the server copy's register entry (0: none).
        pub fast: u32,
    }

    impl Direct {
        /// The record's bytes.
        pub fn encode(&self) -> [u8; DIRECT_LEN] {
            crate::words::put([self.index, self.server_base, self.borrow, self.fast])
        }

        /// Reads a record from the start of `b`; `None` if `b` is too short.
        pub fn decode(b: &[u8]) -> Option<Direct> {
            let [index, server_base, borrow, fast] = crate::words::get(b)?;
            Some(Direct {
                index,
                server_base,
                borrow,
                fast,
            })
        }
    }
}

/// The segment record `oob` and `reply_oob` write: `u32 address`, `u32 capacity` (the
/// segment's address in the caller's memory and its length in bytes).
pub mod segment {
    /// Bytes of a segment record.
    pub const LEN: usize = 8;

    /// A segment record.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct Segment {
        /// Address in the caller's memory.
        pub addr: u32,
        /// Capacity in bytes.
        pub cap: u32,
    }

    impl Segment {
        /// The record's bytes.
        pub fn encode(&self) -> [u8; LEN] {
            crate::words::put([self.addr, self.cap])
        }

        /// Reads a record from the start of `b`; `None` if `b` is too short.
        pub fn decode(b: &[u8]) -> Option<Segment> {
            let [addr, cap] = crate::words::get(b)?;
            Some(Segment { addr, cap })
        }
    }
}

/// Little-endian `u32` words, the unit of every record above.
mod words {
    /// The first `N` words of `b`; `None` if `b` is shorter.
    pub fn get<const N: usize>(b: &[u8]) -> Option<[u32; N]> {
        let b = b.get(..4 * N)?;
        let mut w = [0u32; N];
        for (v, c) in w.iter_mut().zip(b.chunks_exact(4)) {
            *v = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        }
        Some(w)
    }

    /// `N` words as bytes (`B` = 4 × `N`).
    pub fn put<const N: usize, const B: usize>(w: [u32; N]) -> [u8; B] {
        const { assert!(B == 4 * N, "four bytes per word") };
        let mut b = [0u8; B];
        for (c, v) in b.chunks_exact_mut(4).zip(w) {
            c.copy_from_slice(&v.to_le_bytes());
        }
        b
    }
}

/// URPC channels: the layout of a channel's segment and the descriptor `channel_bind` writes.
///
/// ```text
/// 0        u32 magic, u32 slots, u32 A-stack size          (written once by the kernel)
/// 64       u32 request head   (client: requests published)
/// 128      u32 request tail   (server: requests taken)
/// 192      u32 reply head     (server: replies published)
/// 256      u32 reply tail     (client: replies taken)
/// 512      request ring: `slots` entries of 16 bytes: u32 slot, u32 seq, u32 proc, u32 0
/// 512+16s  reply ring:   `slots` entries of 16 bytes: u32 slot, u32 seq, i32 status, u32 0
/// A        `slots` A-stacks of `size` bytes each (A is in the descriptor)
/// ```
///
/// Each counter sits on its own cache line so that the two sides' writes never share one.
/// Counters run freely (wrapping `u32`); an entry lives at `counter % slots`. An A-stack
/// holds a request's arguments and then its results, encoded as on a synchronous binding
/// (with the [`header`] for unbounded procedures; out-of-band segments are
/// not used: what does not fit is refused).
pub mod chan {
    /// Identifies a channel segment (written by the kernel, never trusted).
    pub const MAGIC: u32 = 0x5552_5043; // "URPC"
    /// Offset of the request head (client writes).
    pub const REQ_HEAD: usize = 64;
    /// Offset of the request tail (server writes).
    pub const REQ_TAIL: usize = 128;
    /// Offset of the reply head (server writes).
    pub const REP_HEAD: usize = 192;
    /// Offset of the reply tail (client writes).
    pub const REP_TAIL: usize = 256;
    /// Offset of the request ring.
    pub const RINGS: usize = 512;
    /// Bytes of one ring entry.
    pub const ENTRY: usize = 16;
    /// Most slots (calls in flight) one channel may have.
    pub const MAX_SLOTS: u32 = 256;
    /// Slots of a channel when the client does not say.
    pub const DEFAULT_SLOTS: u32 = 32;

    /// Offset of request entry `counter % slots` (`slots` > 0).
    pub const fn req_entry(slots: u32, counter: u32) -> usize {
        RINGS + ENTRY * (counter % slots) as usize
    }

    /// Offset of reply entry `counter % slots` (`slots` > 0).
    pub const fn rep_entry(slots: u32, counter: u32) -> usize {
        RINGS + ENTRY * (slots + counter % slots) as usize
    }

    /// Bytes of a channel descriptor.
    pub const DESC_LEN: usize = 32;

    /// The channel descriptor `channel_bind` writes.
    ///
    /// ```text
    /// 0   u64 handle
    /// 8   u32 base     client address of the segment
    /// 12  u32 len      bytes of the segment
    /// 16  u32 slots
    /// 20  u32 size     bytes per A-stack
    /// 24  u32 astacks  offset of slot 0's A-stack in the segment
    /// 28  u32 nprocs   procedures of the interface
    /// ```
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct Desc {
        /// The channel's handle.
        pub handle: u64,
        /// Client address of the segment.
        pub base: u32,
        /// Bytes of the segment.
        pub len: u32,
        /// Calls that may be in flight at once.
        pub slots: u32,
        /// Bytes per A-stack.
        pub size: u32,
        /// Offset of slot 0's A-stack in the segment.
        pub astacks: u32,
        /// Procedures of the interface.
        pub nprocs: u32,
    }

    impl Desc {
        /// The record's bytes.
        pub fn encode(&self) -> [u8; DESC_LEN] {
            let mut b = [0; DESC_LEN];
            b[..8].copy_from_slice(&self.handle.to_le_bytes());
            let w: [u8; 24] = crate::words::put([
                self.base,
                self.len,
                self.slots,
                self.size,
                self.astacks,
                self.nprocs,
            ]);
            b[8..].copy_from_slice(&w);
            b
        }

        /// Reads a record from the start of `b`; `None` if `b` is too short.
        pub fn decode(b: &[u8]) -> Option<Desc> {
            let handle = u64::from_le_bytes(b.get(..8)?.try_into().ok()?);
            let [base, len, slots, size, astacks, nprocs] = crate::words::get(b.get(8..)?)?;
            Some(Desc {
                handle,
                base,
                len,
                slots,
                size,
                astacks,
                nprocs,
            })
        }

        /// Whether the layout is consistent: rings before the A-stacks, every A-stack inside
        /// the segment, at least one slot and at most [`MAX_SLOTS`].
        pub fn is_sane(&self) -> bool {
            let rings = RINGS as u64 + 2 * ENTRY as u64 * self.slots as u64;
            let end = self.astacks as u64 + self.size as u64 * self.slots as u64;
            self.slots > 0
                && self.slots <= MAX_SLOTS
                && rings <= self.astacks as u64
                && end <= self.len as u64
                && self.base as u64 + self.len as u64 <= u32::MAX as u64 + 1
        }
    }
}

/// A-stack header for procedures whose arguments or results have no fixed bound.
///
/// ```text
/// 0   u32 flags   (HEADER_OOB: the payload is in the out-of-band segment)
/// 4   u32 len     payload length in bytes
/// 8   payload     (when inline)
/// ```
/// Procedures whose encodings are bounded carry no header: the payload starts at 0.
pub mod header {
    /// Header length in bytes.
    pub const LEN: usize = 8;
    /// Flag: the payload lives in the out-of-band segment of the matching direction.
    pub const OOB: u32 = 1;
}

/// Default A-stack size for procedures with unbounded arguments or results (LRPC 5.2).
pub const DEFAULT_VARIABLE_ASTACK_SIZE: u32 = 1500;
/// Default number of A-stacks per procedure (LRPC 5.2).
pub const DEFAULT_ASTACK_COUNT: u32 = 5;
/// Smallest A-stack, in bytes, even for a procedure with no arguments and no results.
pub const MIN_ASTACK_SIZE: u32 = 8;

macro_rules! statuses {
    ($( $(#[$doc:meta])* $name:ident = $code:literal, )*) => {
        /// What a kernel import returns. `Ok` is 0; every other value is a distinct refusal
        /// or failure. Decode guest- or host-supplied integers with `Status::try_from`.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(i32)]
        pub enum Status {
            $( $(#[$doc])* $name = $code, )*
        }

        impl TryFrom<i32> for Status {
            type Error = i32;
            fn try_from(code: i32) -> Result<Self, i32> {
                match code {
                    $( $code => Ok(Status::$name), )*
                    other => Err(other),
                }
            }
        }

        impl Status {
            /// Every status, in code order.
            pub const ALL: &'static [Status] = &[$(Status::$name,)*];
        }
    };
}

statuses! {
    /// Success.
    Ok = 0,
    /// The server trapped during the call; it has been terminated.
    ServerTrapped = 1,
    /// The server ran past the binding's deadline and was interrupted; it has been terminated.
    DeadlineExceeded = 2,
    /// The server domain is terminated (before or during the call); the binding is revoked.
    ServerTerminated = 3,
    /// The handle named a binding of this domain that has since been unbound or revoked.
    StaleBinding = 4,
    /// The handle does not name any binding the kernel ever issued.
    ForgedBinding = 5,
    /// The handle names a live binding held by another domain.
    ForeignBinding = 6,
    /// The procedure index is out of range for the binding's interface.
    BadProcedure = 7,
    /// The A-stack address is not an A-stack of that binding and procedure.
    BadAStack = 8,
    /// The A-stack is already in use by an in-flight call.
    AStackBusy = 9,
    /// The server refused the request as malformed.
    ServerRejected = 10,
    /// The server stayed busy past the binding's deadline (or a call cycle across threads).
    ServerBusy = 11,
    /// No interface is exported under that name.
    UnknownInterface = 12,
    /// The client's and server's interfaces differ (fingerprints do not match).
    InterfaceMismatch = 13,
    /// A guest-supplied pointer or length does not lie inside the guest's memory.
    BadPointer = 14,
    /// The host could not allocate memory, mappings or memory files (a host-wide shortage,
    /// not a quota of the calling domain).
    ResourceExhausted = 15,
    /// The import was used outside a call (for example `reply_oob` with no call in flight).
    NoCall = 16,
    /// The result did not fit: the server's reply was malformed or larger than its segment.
    BadReply = 17,
    /// A domain may not bind to an interface it exports itself.
    SelfBinding = 18,
    /// The calling domain holds as many bindings as its quota allows.
    QuotaBindings = 19,
    /// The calling domain's quota of A-stack extents or A-stack bytes is used up.
    QuotaAStacks = 20,
    /// The calling domain's quota of out-of-band bytes is used up.
    QuotaOutOfBand = 21,
    /// The calling domain's quota of window mappings or open memory files is used up.
    QuotaMappings = 22,
    /// A linear memory would grow past its domain's memory quota.
    QuotaMemory = 23,
    /// The out-of-band segment the call names does not exist (any more).
    NoSegment = 24,
    /// The server has no processors for asynchronous bindings (the embedder started none).
    NoProcessors = 25,
    /// A value read from a channel was out of range (a ring index, a slot, a sequence
    /// number): the channel was refused and every call on it fails.
    ChannelRefused = 26,
    /// The call would re-enter a domain whose arguments a call on this thread lends to a
    /// server in place (a binding made during that call closed a cycle back to it).
    ReentryWhileLent = 27,
}

impl Status {
    /// The refusal says the calling domain reached one of its quotas (see the kernel's
    /// `Quotas`); other domains are unaffected.
    pub fn is_quota(self) -> bool {
        matches!(
            self,
            Status::QuotaBindings
                | Status::QuotaAStacks
                | Status::QuotaOutOfBand
                | Status::QuotaMappings
                | Status::QuotaMemory
        )
    }

    /// The call reached the server and failed there (LRPC's call-failed exception).
    pub fn is_call_failed(self) -> bool {
        matches!(
            self,
            Status::ServerTrapped | Status::DeadlineExceeded | Status::ServerTerminated
        )
    }

    /// A short, stable description.
    pub fn describe(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::ServerTrapped => "call failed: the server trapped and was terminated",
            Status::DeadlineExceeded => {
                "call failed: the server ran past the binding's deadline and was terminated"
            }
            Status::ServerTerminated => "call failed: the server domain is terminated",
            Status::StaleBinding => "stale binding: it was unbound or revoked",
            Status::ForgedBinding => "forged binding: the kernel never issued this handle",
            Status::ForeignBinding => "foreign binding: the handle belongs to another domain",
            Status::BadProcedure => "no such procedure in the binding's interface",
            Status::BadAStack => "not an A-stack of this binding and procedure",
            Status::AStackBusy => "the A-stack is in use by another call",
            Status::ServerRejected => "the server rejected the request as malformed",
            Status::ServerBusy => "the server stayed busy past the deadline",
            Status::UnknownInterface => "no domain exports that interface",
            Status::InterfaceMismatch => "client and server interfaces differ",
            Status::BadPointer => "pointer or length outside the guest's memory",
            Status::ResourceExhausted => "the host ran out of memory or mappings",
            Status::NoCall => "no call is in flight",
            Status::BadReply => "the server's reply was malformed",
            Status::SelfBinding => "a domain can not bind to its own interface",
            Status::QuotaBindings => "the domain's quota of bindings is used up",
            Status::QuotaAStacks => "the domain's quota of A-stacks is used up",
            Status::QuotaOutOfBand => "the domain's quota of out-of-band bytes is used up",
            Status::QuotaMappings => "the domain's quota of window mappings is used up",
            Status::QuotaMemory => "a linear memory would grow past the domain's memory quota",
            Status::NoSegment => "the out-of-band segment does not exist",
            Status::NoProcessors => "the server has no processors for asynchronous bindings",
            Status::ChannelRefused => {
                "the channel was refused: a value read from it was out of range"
            }
            Status::ReentryWhileLent => {
                "refused: the call would re-enter a client whose arguments are lent to a server"
            }
        }
    }
}

impl core::fmt::Display for Status {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.describe())
    }
}

/// Builds binding handles. A handle is `owner (u16) | slot (u16) | generation (u32)`, from
/// the most significant bits down; the kernel is the only party that interprets it.
pub mod handle {
    /// Packs the three parts.
    pub const fn pack(owner: u16, slot: u16, generation: u32) -> u64 {
        ((owner as u64) << 48) | ((slot as u64) << 32) | generation as u64
    }
    /// Splits a handle into `(owner, slot, generation)`.
    pub const fn unpack(handle: u64) -> (u16, u16, u32) {
        ((handle >> 48) as u16, (handle >> 32) as u16, handle as u32)
    }
}

/// FNV-1a, 64 bit: the interface fingerprint hash over the canonical interface text that
/// `lrpc-presentation` produces. Client stubs embed it; the kernel compares it at bind time.
pub const fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < bytes.len() {
        hash ^= bytes[i] as u64;
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        i += 1;
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multirpc_records_round_trip_and_unknown_kinds_are_refused() {
        let m = multi::Member {
            handle: 0x0123_4567_89ab_cdef,
            astack: 0x1_0000,
        };
        assert_eq!(multi::Member::decode(&m.encode()), Some(m));
        assert_eq!(multi::Member::decode(&m.encode()[..15]), None);
        let n = multi::Next {
            kind: multi::Kind::Timeout,
            member: 7,
            status: 3,
        };
        assert_eq!(multi::Next::decode(&n.encode()), Some(n));
        let mut bad = n.encode();
        bad[0] = 9;
        assert_eq!(multi::Next::decode(&bad), None);
    }

    #[test]
    fn statuses_round_trip_and_unknown_codes_are_refused() {
        for s in Status::ALL {
            assert_eq!(Status::try_from(*s as i32), Ok(*s));
        }
        assert_eq!(Status::try_from(-1), Err(-1));
        assert_eq!(Status::try_from(10_000), Err(10_000));
    }

    #[test]
    fn records_round_trip_and_short_input_is_refused() {
        let h = desc::Header {
            handle: 0x0102_0304_0506_0708,
            nprocs: 3,
            flags: desc::FLAG_DIRECT,
        };
        assert_eq!(desc::Header::decode(&h.encode()), Some(h));
        assert_eq!(h.encode()[..8], 0x0102_0304_0506_0708u64.to_le_bytes());
        let e = desc::Extent {
            base: 0x1_0000,
            size: 1500,
            count: 5,
        };
        assert_eq!(desc::Extent::decode(&e.encode()), Some(e));
        assert_eq!(e.encode()[4..8], 1500u32.to_le_bytes());
        let d = desc::Direct {
            index: 9,
            server_base: 0x2_0000,
            borrow: 1,
            fast: 4,
        };
        assert_eq!(desc::Direct::decode(&d.encode()), Some(d));
        let s = segment::Segment {
            addr: 0x3_0000,
            cap: 1 << 16,
        };
        assert_eq!(segment::Segment::decode(&s.encode()), Some(s));
        assert_eq!(desc::Header::decode(&[0; desc::HEADER_LEN - 1]), None);
        assert_eq!(desc::Extent::decode(&[0; desc::EXTENT_LEN - 1]), None);
        assert_eq!(segment::Segment::decode(&[0; 7]), None);
        assert_eq!(desc::direct_at(3, 1), desc::len(3) - 2 * desc::DIRECT_LEN);
        assert_eq!(desc::extent_at(0), desc::HEADER_LEN);
        let c = chan::Desc {
            handle: 0x0102_0304_0506_0708,
            base: 0x4_0000,
            len: 8192,
            slots: 32,
            size: 64,
            astacks: 4096,
            nprocs: 4,
        };
        assert_eq!(chan::Desc::decode(&c.encode()), Some(c));
        assert!(c.is_sane());
        assert!(!chan::Desc { slots: 0, ..c }.is_sane());
        assert!(!chan::Desc { size: 4096, ..c }.is_sane());
        assert!(!chan::Desc { astacks: 512, ..c }.is_sane());
        assert_eq!(chan::Desc::decode(&[0; chan::DESC_LEN - 1]), None);
        assert_eq!(chan::rep_entry(32, 33), chan::RINGS + chan::ENTRY * 33);
    }

    #[test]
    fn handles_pack_and_unpack() {
        let h = handle::pack(0xbeef, 7, 0xdead_0001);
        assert_eq!(handle::unpack(h), (0xbeef, 7, 0xdead_0001));
    }
}
