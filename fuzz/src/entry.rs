//! The generated server entry stubs on untrusted A-stacks: every entry export of the real
//! server guests, instantiated on raw wasmtime with the `lrpc` imports stubbed, is called
//! `(astack, cap, oob, oob_cap, borrow) -> status` with fuzzer bytes on the A-stack and in
//! the out-of-band segment.
//!
//! What must hold: the entry returns `ENTRY_OK` or `ENTRY_REJECTED` (never traps, never runs
//! out of fuel), and it touches nothing it was not given. The regions are laid out in pages
//! grown for the call and filled with a guard pattern; either the A-stack or the segment ends
//! exactly at the end of linear memory (the fuzzer picks which), so a read one byte past it
//! traps, and after the call every guard byte must be intact (no stray write).

use arbitrary::Arbitrary;
use lrpc_artifacts as artifacts;
use lrpc_abi::{ENTRY_OK, ENTRY_REJECTED, Status, header};
use std::sync::OnceLock;
use wasmtime::{Caller, Config, Engine, InstancePre, Linker, Memory, Module, Store};

/// One server guest and its entries.
pub struct Server {
    /// Guest name, for messages.
    pub name: &'static str,
    pre: InstancePre<Host>,
    /// Entries that may be called with anything.
    pub procs: Vec<Proc>,
}

/// One entry.
#[derive(Debug, Clone)]
pub struct Proc {
    /// Export name.
    pub entry: String,
    /// A-stack size of the procedure descriptor list.
    pub astack_size: u32,
    /// No header: arguments and results have fixed bounds.
    pub bounded: bool,
}

/// Store data: where the reply segment is, if the call may have one.
#[derive(Default)]
pub struct Host {
    reply: Option<(u32, u32)>,
    memory: Option<Memory>,
}

/// Fuel per call: far more than any entry needs for the largest input.
const FUEL: u64 = 200_000_000;
/// Largest out-of-band segment and reply segment.
const SEG_MAX: usize = 128 * 1024;
/// Largest A-stack the fuzzer may ask for (beyond the plan's own sizes).
const ASTACK_MAX: u32 = 70_000;
const PAGE: usize = 65536;
const GUARD: u8 = 0xa5;
const GAP: usize = 4096;

fn engine() -> &'static Engine {
    static E: OnceLock<Engine> = OnceLock::new();
    E.get_or_init(|| {
        let mut c = Config::new();
        c.consume_fuel(true);
        Engine::new(&c).expect("engine")
    })
}

fn linker() -> Linker<Host> {
    let mut l = Linker::new(engine());
    let no = Status::NoCall as i32;
    let m = lrpc_abi::IMPORT_MODULE;
    l.func_wrap(m, "bind", move |_: i32, _: i32, _: i64, _: i32, _: i32| no)
        .expect("bind");
    l.func_wrap(m, "unbind", move |_: i64| no).expect("unbind");
    l.func_wrap(m, "call", move |_: i64, _: i32, _: i32| no)
        .expect("call");
    l.func_wrap(m, "astacks_more", move |_: i64, _: i32, _: i32| no)
        .expect("astacks_more");
    l.func_wrap(
        m,
        "oob",
        move |_: i64, _: i32, _: i32, _: i32, _: i32, _: i32| no,
    )
    .expect("oob");
    l.func_wrap(
        m,
        "reply_oob",
        |mut c: Caller<'_, Host>, min: i32, seg: i32| -> i32 {
            let Some((at, cap)) = c.data().reply else {
                return Status::ResourceExhausted as i32;
            };
            if min < 0 || min as u32 > cap {
                return Status::ResourceExhausted as i32;
            }
            let Some(mem) = c.data().memory else {
                return Status::NoCall as i32;
            };
            let mut rec = [0u8; 8];
            rec[..4].copy_from_slice(&at.to_le_bytes());
            rec[4..].copy_from_slice(&cap.to_le_bytes());
            match mem.write(&mut c, seg as u32 as usize, &rec) {
                Ok(()) => 0,
                Err(_) => Status::BadPointer as i32,
            }
        },
    )
    .expect("reply_oob");
    l
}

/// The server guests and the interfaces they serve; procedures that misbehave on purpose
/// (the faulty server's `crash`, `spin` and `busy`) are left out.
pub fn servers() -> &'static [Server] {
    static S: OnceLock<Vec<Server>> = OnceLock::new();
    S.get_or_init(|| {
        let wit = crate::presentation::wit();
        let linker = linker();
        let list: [(&str, &[u8], &str); 6] = [
            ("bench-server", artifacts::BENCH_SERVER, "lrpc:bench/bench"),
            (
                "bench-server-inplace",
                artifacts::BENCH_SERVER_INPLACE,
                "lrpc:bench/bench",
            ),
            ("kv-server", artifacts::KV_SERVER, "lrpc:kv/store"),
            (
                "faulty-server",
                artifacts::FAULTY_SERVER,
                "lrpc:test/faulty",
            ),
            ("node", artifacts::NODE, "lrpc:test/node"),
            (
                "fuzz-kitchen",
                crate::roundtrip::KITCHEN,
                "lrpc:kitchen/sink",
            ),
        ];
        list.iter()
            .map(|&(name, wasm, iface)| {
                let module = Module::new(engine(), wasm).expect("a guest compiles");
                let pre = linker.instantiate_pre(&module).expect("imports resolve");
                let plan = wit.interface(iface).expect("known interface");
                let procs = plan
                    .procs
                    .iter()
                    .filter(|p| {
                        !(name == "faulty-server" && matches!(&*p.name, "crash" | "spin" | "busy"))
                    })
                    .map(|p| Proc {
                        entry: p.entry.clone(),
                        astack_size: p.astack_size,
                        bounded: p.bounded,
                    })
                    .collect();
                Server { name, pre, procs }
            })
            .collect()
    })
}

/// How the harness frames the A-stack.
#[derive(Debug, Arbitrary, Clone, Copy)]
pub enum Framing {
    /// The bytes as they are.
    Raw,
    /// A header `(0, len)` then the bytes (an unbounded request carried inline).
    Inline,
    /// A header `(OOB, len)`; the segment's bytes are the payload.
    OutOfBand,
}

/// One call of one entry.
#[derive(Debug, Arbitrary)]
pub struct EntryInput {
    /// Server, modulo the list.
    pub server: u8,
    /// Procedure, modulo its list.
    pub proc: u8,
    /// A-stack capacity other than the plan's (unbounded procedures only; a server
    /// presentation may size them).
    pub size: Option<u32>,
    /// The borrow mask.
    pub borrow: u32,
    /// Put the segment, not the A-stack, at the end of memory.
    pub oob_at_end: bool,
    /// The reply segment's capacity, if the call may have one.
    pub reply: Option<u16>,
    /// How the A-stack is framed.
    pub framing: Framing,
    /// A-stack contents (cut to its capacity).
    pub astack: Vec<u8>,
    /// Out-of-band segment contents, if there is one.
    pub oob: Option<Vec<u8>>,
    /// Instead of the bytes above: a well-formed request of the kitchen sink's
    /// `round-trip`, possibly damaged.
    pub kitchen: Option<KitchenRequest>,
}

/// A request of `lrpc:kitchen/sink#round-trip` encoded as the stub compiler documents the
/// encoding (`presentation/src/plan.rs`), written here independently of the generated code,
/// then damaged by a few byte flips or a cut. Undamaged, the entry must accept it and its
/// handler must see exactly the encoded value.
#[derive(Debug, Arbitrary)]
pub struct KitchenRequest {
    /// The value.
    pub value: crate::roundtrip::Everything,
    /// `(offset, xor)` flips.
    pub flips: Vec<(u16, u8)>,
    /// Keep only this many bytes (the header then says so).
    pub cut: Option<u16>,
}

/// The documented encoding of an `everything` record: the tape's layout, except that a
/// flags value of more than 64 flags takes 32-bit words (70 flags: 12 bytes, not 16).
pub fn encode_everything(v: &crate::roundtrip::Everything) -> Vec<u8> {
    /// Offset of the 70-flag `huge` field in the tape, which stores it as a `u128`.
    const HUGE_AT: usize = 57;
    let mut e = v.tape();
    e.drain(HUGE_AT + 12..HUGE_AT + 16);
    e
}

/// What a call did.
#[derive(Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The entry's status.
    pub status: i32,
}

/// Runs one input; panics with the reason on a trap, an unknown status or a stray write, or
/// when an undamaged kitchen-sink request is refused or decoded to another value.
pub fn run(input: &EntryInput) -> Outcome {
    let Some(k) = &input.kitchen else {
        return call(input, false).0;
    };
    let mut value = k.value.clone();
    value.fix();
    let good = encode_everything(&value);
    let mut bytes = good.clone();
    for &(at, x) in k.flips.iter().take(8) {
        if !bytes.is_empty() {
            let n = bytes.len();
            bytes[usize::from(at) % n] ^= x;
        }
    }
    if let Some(n) = k.cut {
        bytes.truncate(usize::from(n));
    }
    let servers = servers();
    let server = servers
        .iter()
        .position(|s| s.name == "fuzz-kitchen")
        .expect("the kitchen guest");
    let proc = servers[server]
        .procs
        .iter()
        .position(|p| p.entry.ends_with("#round-trip"))
        .expect("round-trip");
    let cap = servers[server].procs[proc].astack_size as usize;
    let inline = bytes.len() + header::LEN <= cap;
    let req = EntryInput {
        server: server as u8,
        proc: proc as u8,
        size: None,
        framing: if inline {
            Framing::Inline
        } else {
            Framing::OutOfBand
        },
        astack: if inline { bytes.clone() } else { Vec::new() },
        oob: (!inline).then(|| bytes.clone()),
        kitchen: None,
        ..*input
    };
    let (out, seen) = call(&req, bytes == good);
    if bytes == good {
        assert_eq!(
            out.status, ENTRY_OK,
            "a well-formed request refused: {value:?}"
        );
        assert!(
            seen.as_deref() == Some(&value.tape()[..]),
            "the handler saw another value than {value:?}"
        );
    }
    out
}

/// Calls the entry `input` names; with `seen`, also returns the kitchen guest's tape of the
/// value its handler received.
fn call(input: &EntryInput, seen: bool) -> (Outcome, Option<Vec<u8>>) {
    let servers = servers();
    let server = &servers[usize::from(input.server) % servers.len()];
    let proc = &server.procs[usize::from(input.proc) % server.procs.len()];
    let cap = match input.size {
        Some(s) if !proc.bounded => s % (ASTACK_MAX + 1),
        _ => proc.astack_size,
    } as usize;
    let oob_bytes: Option<&[u8]> = input.oob.as_deref().map(|b| &b[..b.len().min(SEG_MAX)]);
    let oob_cap = oob_bytes.map_or(0, <[u8]>::len);
    let reply_cap = input.reply.map_or(0, usize::from);

    let mut store = Store::new(engine(), Host::default());
    store.set_fuel(FUEL).expect("fuel is on");
    let instance = server
        .pre
        .instantiate(&mut store)
        .unwrap_or_else(|e| panic!("{}: instantiate: {e:#}", server.name));
    let memory = instance
        .get_memory(&mut store, "memory")
        .expect("guests export their memory");
    store.data_mut().memory = Some(memory);
    let entry = instance
        .get_typed_func::<(i32, i32, i32, i32, i32), i32>(&mut store, &proc.entry)
        .unwrap_or_else(|e| panic!("{}: {}: {e:#}", server.name, proc.entry));

    // Layout of the grown pages: gap, reply segment, gap, then the A-stack and the segment
    // separated by a gap, the last one ending exactly at the end of memory.
    let base = memory.data_size(&store);
    let need = GAP + reply_cap + GAP + cap + GAP + oob_cap;
    let pages = need.div_ceil(PAGE) as u64 + 1;
    memory
        .grow(&mut store, pages)
        .unwrap_or_else(|e| panic!("growing memory: {e:#}"));
    let end = memory.data_size(&store);
    let reply_at = base + GAP;
    let (astack_at, oob_at) = if input.oob_at_end {
        (reply_at + reply_cap + GAP, end - oob_cap)
    } else {
        (end - cap, reply_at + reply_cap + GAP)
    };
    {
        let mem = memory.data_mut(&mut store);
        mem[base..end].fill(GUARD);
        let a = &mut mem[astack_at..astack_at + cap];
        a.fill(0);
        let payload = &input.astack[..];
        match input.framing {
            Framing::Raw => {
                let n = payload.len().min(cap);
                a[..n].copy_from_slice(&payload[..n]);
            }
            Framing::Inline | Framing::OutOfBand if cap >= header::LEN => {
                let oob = matches!(input.framing, Framing::OutOfBand);
                let len = if oob { oob_cap } else { payload.len() };
                a[..4].copy_from_slice(&(if oob { header::OOB } else { 0 }).to_le_bytes());
                a[4..8].copy_from_slice(&(len as u32).to_le_bytes());
                let n = payload.len().min(cap - header::LEN);
                a[header::LEN..header::LEN + n].copy_from_slice(&payload[..n]);
            }
            _ => {}
        }
        if let Some(o) = oob_bytes {
            mem[oob_at..oob_at + oob_cap].copy_from_slice(o);
        }
    }
    if input.reply.is_some() {
        store.data_mut().reply = Some((reply_at as u32, reply_cap as u32));
    }
    let oob_arg = if oob_bytes.is_some() { oob_at } else { 0 };
    let r = entry.call(
        &mut store,
        (
            astack_at as i32,
            cap as i32,
            oob_arg as i32,
            oob_cap as i32,
            input.borrow as i32,
        ),
    );
    let status = match r {
        Ok(s) => s,
        Err(e) => panic!(
            "{} {} trapped (cap {cap}, oob {oob_cap}, reply {reply_cap}, borrow {:#x}): {e:?}",
            server.name, proc.entry, input.borrow
        ),
    };
    assert!(
        status == ENTRY_OK || status == ENTRY_REJECTED,
        "{} {}: status {status}",
        server.name,
        proc.entry
    );
    let mem = memory.data(&store);
    let mine = |i: usize| {
        (astack_at..astack_at + cap).contains(&i)
            || (oob_at..oob_at + oob_cap).contains(&i)
            || (reply_at..reply_at + reply_cap).contains(&i)
    };
    if let Some(i) = (base..end).find(|&i| mem[i] != GUARD && !mine(i)) {
        panic!(
            "{} {} wrote outside its regions at {i:#x} (A-stack {astack_at:#x}+{cap}, \
             segment {oob_at:#x}+{oob_cap}, reply {reply_at:#x}+{reply_cap})",
            server.name, proc.entry
        );
    }
    let tape = seen.then(|| {
        let f = instance
            .get_typed_func::<(), i64>(&mut store, "fuzz_seen")
            .expect("the kitchen guest's fuzz_seen");
        let packed = f.call(&mut store, ()).expect("fuzz_seen");
        let (at, len) = ((packed >> 32) as u32 as usize, packed as u32 as usize);
        memory.data(&store)[at..at + len].to_vec()
    });
    (Outcome { status }, tape)
}
