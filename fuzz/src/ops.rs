//! Kernel operation sequences, checked against a model.
//!
//! Each input is a list of [`Op`]s run on a fresh set of domains of one long-lived kernel: a
//! `bench-server` exporting `lrpc:bench/bench`, and up to three clients, each a `hostile`
//! guest (raw kernel ABI: made-up handles, stray A-stacks, other domains' handles, extra
//! A-stack extents) or a `bench-client` (generated stubs: `add` with its sum checked,
//! `big-in-out` with out-of-band payloads checked byte for byte). The model tracks which
//! bindings are live and whether the server and each client are alive, and says which
//! status each operation must return. A second thread runs calls concurrently with the
//! first, and may terminate the server while they run.

use arbitrary::Arbitrary;
use lrpc_kernel::{Domain, Kernel};
use lrpc_artifacts as artifacts;
use lrpc_abi::Status;
use std::sync::OnceLock;

const BENCH: &str = "lrpc:bench/bench";

/// What a client domain runs.
#[derive(Debug, Arbitrary, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `guests/hostile`: the raw kernel ABI.
    Hostile,
    /// `guests/bench-client`: generated stubs.
    Bench,
}

/// One operation. `c` picks a client (modulo the number of clients).
#[derive(Debug, Arbitrary, Clone)]
#[allow(missing_docs, reason = "each variant's doc says what its fields are")]
pub enum Op {
    /// Bind (hostile: `bind_raw` with the right fingerprint; bench: `bind`).
    Bind { c: u8 },
    /// Hostile: bind claiming a wrong fingerprint.
    BindMismatch { c: u8, fingerprint: i64 },
    /// Unbind the client's current binding.
    Unbind { c: u8 },
    /// Hostile: a null call on the current binding's first A-stack. Bench: `add(a, b)`.
    Call { c: u8, a: u32, b: u32 },
    /// Bench: `big-in-out` with `len` bytes (out of band beyond the A-stack).
    BigInOut { c: u8, len: u16 },
    /// Hostile: a call naming a procedure the interface lacks.
    BadProcedure { c: u8, proc: i32 },
    /// Hostile: a call with an A-stack address that is not the binding's.
    BadAStack { c: u8, delta: i32 },
    /// Hostile: a call with a made-up handle.
    Forged { c: u8, handle: i64 },
    /// Hostile: a call with another client's current handle.
    Foreign { c: u8, other: u8 },
    /// Hostile: another extent of A-stacks for a procedure.
    More { c: u8, proc: i32 },
    /// Hostile: an out-of-band segment for the first A-stack of `big-in`.
    Segment { c: u8, dir: bool, min: u32 },
    /// Terminate the server (every binding to it is revoked).
    TerminateServer,
    /// A new server exporting the interface (if the old one is gone).
    RestartServer,
    /// Terminate a client.
    TerminateClient { c: u8 },
    /// Two threads: bench clients `c` and `d` run `n` checked `add` calls at once.
    Parallel { c: u8, d: u8, n: u8 },
    /// A second thread runs `n` `add` calls on client `c` while this one terminates the
    /// server.
    TerminateDuring { c: u8, n: u8 },
    /// Hostile: a MultiRPC of null calls to 1 to 8 members, each the current binding's first
    /// A-stack, or a made-up handle where `forged` has the member's bit set; ended after
    /// `stop` events (0: after all of them).
    Multi { c: u8, n: u8, forged: u8, stop: u8 },
}

/// A sequence and the clients it runs on.
#[derive(Debug, Arbitrary)]
pub struct OpsInput {
    /// One to three clients.
    pub clients: Vec<Kind>,
    /// The operations.
    pub ops: Vec<Op>,
}

/// The kernel shared by every input (compiling the guests once).
pub fn kernel() -> &'static Kernel {
    static K: OnceLock<Kernel> = OnceLock::new();
    K.get_or_init(|| Kernel::new().expect("kernel"))
}

struct Client {
    kind: Kind,
    domain: Domain,
    alive: bool,
    /// Current binding: (handle, live). Hostile clients keep their earlier handles (never
    /// unbound: they stay held until termination).
    current: Option<(i64, bool)>,
    /// Asked for more A-stacks of the null procedure (addresses past the first extent may
    /// then be real A-stacks).
    more_null: bool,
    /// The current binding was revoked by the server's termination and not unbound since.
    revoked: bool,
}

struct World {
    server: Option<Domain>,
    clients: Vec<Client>,
    /// Every handle the hostile clients were given.
    issued: Vec<i64>,
}

impl World {
    fn server_alive(&self) -> bool {
        self.server.as_ref().is_some_and(|s| !s.is_terminated())
    }

    fn teardown(&mut self) {
        let k = kernel();
        for c in &self.clients {
            k.terminate(&c.domain);
        }
        if let Some(s) = &self.server {
            k.terminate(s);
        }
    }
}

fn code(s: Status) -> i64 {
    s as i32 as i64
}

/// The status of a call on a binding the model says is `(live, server alive)`.
fn expect_call(current: Option<(i64, bool)>) -> i64 {
    match current {
        Some((_, true)) => 0,
        Some((_, false)) | None => code(Status::StaleBinding),
    }
}

/// Runs one input; panics when the kernel's answer differs from the model's.
pub fn run(input: &OpsInput) {
    let k = kernel();
    let kinds: Vec<Kind> = if input.clients.is_empty() {
        vec![Kind::Hostile]
    } else {
        input.clients.iter().take(3).copied().collect()
    };
    let mut w = World {
        server: None,
        clients: Vec::new(),
        issued: Vec::new(),
    };
    let server = k
        .domain("bench-server", artifacts::BENCH_SERVER)
        .expect("server");
    k.export(&server, BENCH).expect("export");
    w.server = Some(server);
    for (i, kind) in kinds.iter().enumerate() {
        let wasm = match kind {
            Kind::Hostile => artifacts::HOSTILE,
            Kind::Bench => artifacts::BENCH_CLIENT,
        };
        let domain = k.domain(&format!("client-{i}"), wasm).expect("client");
        w.clients.push(Client {
            kind: *kind,
            domain,
            alive: true,
            current: None,
            more_null: false,
            revoked: false,
        });
    }
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        for (step, op) in input.ops.iter().take(64).enumerate() {
            step_op(&mut w, op, step);
        }
    }));
    w.teardown();
    if let Err(p) = r {
        std::panic::resume_unwind(p);
    }
}

fn pick(w: &World, c: u8) -> usize {
    usize::from(c) % w.clients.len()
}

/// A server's termination revokes every binding to it.
fn revoke_all(w: &mut World) {
    for c in &mut w.clients {
        if let Some((_, live)) = &mut c.current {
            c.revoked |= *live;
            *live = false;
        }
    }
}

fn step_op(w: &mut World, op: &Op, step: usize) {
    let k = kernel();
    let ctx = |what: &str| format!("step {step} {op:?}: {what}");
    match *op {
        Op::Bind { c } => {
            let i = pick(w, c);
            let server_alive = w.server_alive();
            let cl = &mut w.clients[i];
            if !cl.alive {
                return;
            }
            let got: i64 = match cl.kind {
                Kind::Hostile => {
                    let fp = k.interface(BENCH).expect("plan").fingerprint as i64;
                    cl.domain.call("bind_raw", fp).expect("bind_raw")
                }
                Kind::Bench => i64::from(cl.domain.call::<(), i32>("bind", ()).expect("bind")),
            };
            let refused = if cl.kind == Kind::Hostile { -got } else { got };
            if out_of_resources(refused) {
                return;
            }
            if !server_alive {
                let want = code(Status::UnknownInterface);
                let got = if cl.kind == Kind::Hostile { -got } else { got };
                assert_eq!(got, want, "{}", ctx("bind with no server"));
                return;
            }
            match cl.kind {
                Kind::Hostile => {
                    assert!(got > 0, "{}", ctx(&format!("bind_raw returned {got}")));
                    cl.current = Some((got, true));
                    cl.revoked = false;
                    w.issued.push(got);
                }
                Kind::Bench => {
                    assert_eq!(got, 0, "{}", ctx("bind"));
                    cl.current = Some((0, true));
                    cl.revoked = false;
                }
            }
        }
        Op::BindMismatch { c, fingerprint } => {
            let i = pick(w, c);
            let alive = w.server_alive();
            let cl = &w.clients[i];
            if !cl.alive || cl.kind != Kind::Hostile {
                return;
            }
            let right = k.interface(BENCH).expect("plan").fingerprint as i64;
            if fingerprint == right {
                return;
            }
            let got: i64 = cl.domain.call("bind_raw", fingerprint).expect("bind_raw");
            let want = if alive {
                code(Status::InterfaceMismatch)
            } else {
                code(Status::UnknownInterface)
            };
            assert_eq!(-got, want, "{}", ctx("mismatched bind"));
        }
        Op::Unbind { c } => {
            let i = pick(w, c);
            let cl = &mut w.clients[i];
            if !cl.alive {
                return;
            }
            let got = match cl.kind {
                Kind::Hostile => {
                    let Some((h, _)) = cl.current else { return };
                    cl.domain.call::<i64, i32>("unbind_raw", h).expect("unbind")
                }
                Kind::Bench => cl.domain.call::<(), i32>("unbind", ()).expect("unbind"),
            };
            let want = match (cl.kind, cl.current) {
                (_, Some((_, true))) => 0,
                // A revoked binding: the kernel reports it as gone.
                (_, Some((_, false))) | (_, None) => code(Status::StaleBinding),
            };
            // Unbinding a binding the server's termination revoked gives the handle back:
            // the kernel may accept it, or say it is stale or its server terminated.
            let got = i64::from(got);
            let ok = got == want
                || (want != 0 && got == code(Status::ServerTerminated))
                || (cl.revoked && got == 0);
            cl.revoked = false;
            assert!(
                ok,
                "{}",
                ctx(&format!("unbind returned {got}, want {want}"))
            );
            cl.current = match cl.kind {
                Kind::Hostile => cl.current.map(|(h, _)| (h, false)),
                Kind::Bench => None,
            };
        }
        Op::Call { c, a, b } => {
            let i = pick(w, c);
            let cl = &w.clients[i];
            if !cl.alive {
                return;
            }
            match cl.kind {
                Kind::Hostile => {
                    let Some((h, _)) = cl.current else { return };
                    let astack: i32 = cl.domain.call("astack", 0).expect("astack");
                    let got: i32 = cl
                        .domain
                        .call("call_raw", (h, 0, astack))
                        .expect("call_raw");
                    check_revoked(i64::from(got), expect_call(cl.current), &ctx("null call"));
                }
                Kind::Bench => {
                    let got: i64 = cl.domain.call("add", (a as i32, b as i32)).expect("add");
                    match cl.current {
                        Some((_, true)) => {
                            assert_eq!(got, i64::from(a.wrapping_add(b)), "{}", ctx("sum"))
                        }
                        _ => check_revoked(-got, expect_call(cl.current), &ctx("add")),
                    }
                }
            }
        }
        Op::BigInOut { c, len } => {
            let i = pick(w, c);
            let cl = &w.clients[i];
            if !cl.alive || cl.kind != Kind::Bench {
                return;
            }
            let got: i32 = cl
                .domain
                .call("big_in_out", (i32::from(len), 1))
                .expect("big_in_out");
            match cl.current {
                Some((_, true)) => assert_eq!(got, 0, "{}", ctx("big-in-out reply")),
                _ => check_revoked(-i64::from(got), expect_call(cl.current), &ctx("big-in-out")),
            }
        }
        Op::BadProcedure { c, proc } => {
            let Some((cl, h)) = hostile_bound(w, c) else {
                return;
            };
            if (0..4).contains(&proc) {
                return;
            }
            let astack: i32 = cl.domain.call("astack", 0).expect("astack");
            let got: i32 = cl
                .domain
                .call("call_raw", (h, proc, astack))
                .expect("call_raw");
            assert_eq!(
                i64::from(got),
                code(Status::BadProcedure),
                "{}",
                ctx("bad procedure")
            );
        }
        Op::BadAStack { c, delta } => {
            let Some((cl, h)) = hostile_bound(w, c) else {
                return;
            };
            let base: i32 = cl.domain.call("astack", 0).expect("astack");
            // The null procedure's A-stacks are one extent of `count` stacks of `size`: any
            // address that is not the start of one of them is refused.
            let plan = k.interface(BENCH).expect("plan");
            let p = &plan.procs[0];
            let span = i64::from(p.astack_size) * i64::from(p.astack_count);
            let off = i64::from(delta);
            if cl.more_null || ((0..span).contains(&off) && off % i64::from(p.astack_size) == 0) {
                return;
            }
            let got: i32 = cl
                .domain
                .call("call_raw", (h, 0, base.wrapping_add(delta)))
                .expect("call_raw");
            assert_eq!(
                i64::from(got),
                code(Status::BadAStack),
                "{}",
                ctx("stray A-stack")
            );
        }
        Op::Forged { c, handle } => {
            let i = pick(w, c);
            let cl = &w.clients[i];
            if !cl.alive || cl.kind != Kind::Hostile {
                return;
            }
            if w.issued.contains(&handle) {
                return;
            }
            let got: i32 = cl
                .domain
                .call("call_raw", (handle, 0, 0))
                .expect("call_raw");
            let ok = [
                Status::ForgedBinding,
                Status::StaleBinding,
                Status::ForeignBinding,
            ]
            .iter()
            .any(|&s| i64::from(got) == code(s));
            assert!(ok, "{}", ctx(&format!("made-up handle answered {got}")));
        }
        Op::Foreign { c, other } => {
            let i = pick(w, c);
            let j = pick(w, other);
            if i == j || !w.clients[i].alive || w.clients[i].kind != Kind::Hostile {
                return;
            }
            let Some((h, live)) = w.clients[j].current else {
                return;
            };
            if w.clients[j].kind != Kind::Hostile {
                return;
            }
            let astack: i32 = w.clients[i].domain.call("astack", 0).expect("astack");
            let got: i32 = w.clients[i]
                .domain
                .call("call_raw", (h, 0, astack))
                .expect("call_raw");
            let want = if live && w.clients[j].alive {
                vec![code(Status::ForeignBinding)]
            } else {
                vec![
                    code(Status::ForeignBinding),
                    code(Status::ForgedBinding),
                    code(Status::StaleBinding),
                ]
            };
            assert!(
                want.contains(&i64::from(got)),
                "{}",
                ctx(&format!("another domain's handle answered {got}"))
            );
        }
        Op::More { c, proc } => {
            let Some((cl, h)) = hostile_bound(w, c) else {
                return;
            };
            let at: i32 = cl.domain.call("scratch", ()).expect("scratch");
            let got: i32 = cl.domain.call("more_raw", (h, proc, at)).expect("more_raw");
            if !(0..4).contains(&proc) {
                assert_eq!(
                    i64::from(got),
                    code(Status::BadProcedure),
                    "{}",
                    ctx("more for a bad procedure")
                );
            } else {
                let ok = got == 0 || out_of_resources(i64::from(got));
                assert!(ok, "{}", ctx(&format!("more A-stacks answered {got}")));
            }
            if proc == 0 {
                let i = pick(w, c);
                w.clients[i].more_null = true;
            }
        }
        Op::Segment { c, dir, min } => {
            let Some((cl, h)) = hostile_bound(w, c) else {
                return;
            };
            let astack: i32 = cl.domain.call("astack", 2).expect("astack");
            let at: i32 = cl.domain.call("scratch", ()).expect("scratch");
            let min = (min % (1 << 20)) as i32;
            let got: i32 = cl
                .domain
                .call("oob_raw", (h, 2, astack, i32::from(dir), min, at))
                .expect("oob_raw");
            let ok = got == 0
                || out_of_resources(i64::from(got))
                || i64::from(got) == code(Status::BadReply)
                || got == NO_SEGMENT;
            assert!(ok, "{}", ctx(&format!("segment answered {got}")));
        }
        Op::TerminateServer => {
            if let Some(s) = &w.server {
                k.terminate(s);
            }
            revoke_all(w);
        }
        Op::RestartServer => {
            if w.server_alive() {
                return;
            }
            let s = k
                .domain("bench-server", artifacts::BENCH_SERVER)
                .expect("server");
            k.export(&s, BENCH)
                .expect("export after the old server is gone");
            w.server = Some(s);
        }
        Op::TerminateClient { c } => {
            let i = pick(w, c);
            k.terminate(&w.clients[i].domain);
            w.clients[i].alive = false;
            w.clients[i].current = None;
        }
        Op::Parallel { c, d, n } => {
            let (i, j) = (pick(w, c), pick(w, d));
            let (a, b) = (&w.clients[i], &w.clients[j]);
            if !(a.alive && b.alive && a.kind == Kind::Bench && b.kind == Kind::Bench) {
                return;
            }
            let n = i32::from(n % 32) + 1;
            let (ra, rb) = std::thread::scope(|s| {
                let t = s.spawn(|| a.domain.call::<i32, i64>("add_loop", n));
                let rb = b.domain.call::<i32, i64>("add_loop", n);
                (t.join().expect("thread"), rb)
            });
            for (cl, r) in [(a, ra), (b, rb)] {
                let r = r.expect("add_loop");
                match cl.current {
                    Some((_, true)) => assert_eq!(r, 0, "{}", ctx("parallel sums")),
                    _ => check_revoked(-r, expect_call(cl.current), &ctx("parallel")),
                }
            }
        }
        Op::Multi { c, n, forged, stop } => {
            use lrpc_abi::multi::{Kind as Event, Member, NEXT_LEN, Next};
            let i = pick(w, c);
            let cl = &w.clients[i];
            if !cl.alive || cl.kind != Kind::Hostile {
                return;
            }
            let Some((h, _)) = cl.current else { return };
            let astack: i32 = cl.domain.call("astack", 0).expect("astack");
            let scratch: i32 = cl.domain.call("scratch", ()).expect("scratch");
            let n = 1 + usize::from(n % 8);
            let made_up = |k: usize| 0x7fff_0000_0000_0001_i64 + k as i64;
            let members: Vec<i64> = (0..n)
                .map(|k| {
                    if (forged >> k) & 1 == 1 && !w.issued.contains(&made_up(k)) {
                        made_up(k)
                    } else {
                        h
                    }
                })
                .collect();
            let records: Vec<u8> = members
                .iter()
                .flat_map(|&hd| {
                    Member {
                        handle: hd as u64,
                        astack: astack as u32,
                    }
                    .encode()
                })
                .collect();
            cl.domain
                .write_memory(scratch as usize, &records)
                .expect("records");
            let id: i32 = cl
                .domain
                .call("multi_start_raw", (scratch, n as i32, 0, 10_000))
                .expect("multi_start");
            assert!(id >= 0, "{}", ctx(&format!("multi_start: {id}")));
            let at = scratch + 2048;
            let mut seen = vec![false; n];
            let mut events = 0;
            loop {
                let r: i32 = cl
                    .domain
                    .call("multi_next_raw", (id, at))
                    .expect("multi_next");
                assert_eq!(r, 0, "{}", ctx("multi_next"));
                let rec = cl.domain.read_memory(at as usize, NEXT_LEN).expect("event");
                let e = Next::decode(&rec).expect("an event record");
                if e.kind == Event::Done {
                    assert!(
                        seen.iter().all(|&x| x),
                        "{}",
                        ctx("done before every member")
                    );
                    break;
                }
                assert_eq!(e.kind, Event::Reply, "{}", ctx("no timeout"));
                let m = e.member as usize;
                assert!(m < n && !seen[m], "{}", ctx(&format!("member {m} again")));
                seen[m] = true;
                let got = i64::from(e.status);
                if members[m] == h {
                    check_revoked(got, expect_call(cl.current), &ctx("a member's null call"));
                } else {
                    assert_eq!(
                        got,
                        code(Status::ForgedBinding),
                        "{}",
                        ctx("made-up member")
                    );
                }
                events += 1;
                if usize::from(stop) == events {
                    break;
                }
            }
            let r: i32 = cl.domain.call("multi_end_raw", id).expect("multi_end");
            assert_eq!(r, 0, "{}", ctx("multi_end"));
            // Nothing of it stays busy.
            if cl.current.is_some_and(|(_, live)| live) {
                let got: i32 = cl
                    .domain
                    .call("call_raw", (h, 0, astack))
                    .expect("call_raw");
                check_revoked(
                    i64::from(got),
                    expect_call(cl.current),
                    &ctx("a call after"),
                );
            }
        }
        Op::TerminateDuring { c, n } => {
            let i = pick(w, c);
            let cl = &w.clients[i];
            if !cl.alive || cl.kind != Kind::Bench {
                return;
            }
            let n = i32::from(n) * 4 + 1;
            let server = w.server.as_ref();
            let r = std::thread::scope(|s| {
                let t = s.spawn(|| cl.domain.call::<i32, i64>("add_loop", n));
                if let Some(sv) = server {
                    k.terminate(sv);
                }
                t.join().expect("thread")
            });
            let r = r.expect("add_loop");
            let ok =
                r == 0 || -r == code(Status::ServerTerminated) || -r == code(Status::StaleBinding);
            assert!(ok, "{}", ctx(&format!("calls racing a termination: {r}")));
            revoke_all(w);
        }
    }
}

/// The per-domain quota refusals, and a host-wide shortage: a domain that asks for more and
/// more may get any of them.
fn out_of_resources(status: i64) -> bool {
    status == code(Status::ResourceExhausted)
        || Status::try_from(status as i32).is_ok_and(Status::is_quota)
}

/// The status a request for an out-of-band segment that no longer exists gets.
const NO_SEGMENT: i32 = Status::NoSegment as i32;

/// A call on a binding the model says is revoked or absent: the kernel may say the binding
/// is stale or that its server is terminated.
fn check_revoked(got: i64, want: i64, ctx: &str) {
    let ok = got == want || (want != 0 && got == code(Status::ServerTerminated));
    assert!(ok, "{ctx}: got {got}, want {want}");
}

/// A live hostile client with a live current binding.
fn hostile_bound(w: &World, c: u8) -> Option<(&Client, i64)> {
    let cl = &w.clients[pick(w, c)];
    match (cl.alive, cl.kind, cl.current) {
        (true, Kind::Hostile, Some((h, true))) => Some((cl, h)),
        _ => None,
    }
}
