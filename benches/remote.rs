//! Remote calls: MultiRPC's experiment and the cost of a remote Null.
//!
//! * **MultiRPC** (Satyanarayanan and Siegel, Fig. "r/m"): the time of `n` sequential calls
//!   (r) over the time of one MultiRPC to `n` servers (m), for n = 1..100 and several server
//!   times, beside the model r/m = (1 + T)/(1 + T/n), T = server time / client send+receive
//!   time. Every member is a remote binding to a kernel in another process on loopback TCP.
//!   Two cores can not run a hundred servers' computations in parallel, so the server time is
//!   **modelled as waiting**: the node waits `--wait-us` before each call (no processor used),
//!   as the paper's servers' computations overlapped on separate machines. The client's
//!   send-and-receive time per call `c` is what each further member adds to a MultiRPC in the
//!   settings with waiting (the slope of m over n); the server time of each setting is the
//!   rest of a sequential call: network, the server's own work and its waiting. The setting
//!   without waiting is reported but left out of the key: its server time is the node's
//!   processor time and thread hand-offs on the client's two cores, not a fixed time that
//!   the members of a MultiRPC overlap.
//! * **Remote Null**: a null call through a remote binding over loopback TCP (a session: one
//!   kept connection) against the out-of-process gRPC peer over a Unix socket
//!   (`lrpc-grpc-peer`, one kept connection), measured in the same run, interleaved.
//! * **Remote Null over TLS**: the same null call to a node serving over TLS with client
//!   certificates (a kept session: the handshake paid once) beside plain TCP, interleaved;
//!   `remote_null_tls_over_tcp` (target ≤ 1.3). `-- --test` runs only this, briefly, and
//!   writes nothing.
//!
//! Writes `bench-results/remote.json`, `bench-results/REMOTE.md`, `bench-results/multirpc.png`,
//! and adds `multirpc_model_max_rel_error` (n ≤ 32), `remote_null_over_grpc_uds_null` and
//! `remote_null_tls_over_tcp` to the ratios of `bench-results/summary.json`.
//!
//! `cargo bench -p lrpc-benches --bench remote` (about a minute).

#[allow(
    dead_code,
    reason = "the report's plot helpers; only the font is used here"
)]
mod plots;

use lrpc_benches::{GrpcPeer, Peer as _};
use lrpc_remote::{Endpoint, Member, RemoteBinding, RemoteOptions, multi_call};
use plotters::prelude::*;
use std::fmt::Write as _;
use std::io::{BufRead as _, BufReader};
use std::ops::ControlFlow;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const BENCH: &str = "lrpc:bench/bench";
const NS: [usize; 9] = [1, 2, 4, 8, 16, 24, 32, 64, 100];
// Waits of whole milliseconds: tokio's timer ticks once a millisecond, so a shorter wait lasts
// anywhere up to the next tick, differently for sequential and parallel calls.
const WAITS_US: [u64; 5] = [0, 1000, 2000, 5000, 10000];

struct Node {
    child: Child,
    endpoint: Endpoint,
}

impl Node {
    fn start(wait_us: u64) -> Node {
        Node::start_with(wait_us, &[])
    }

    fn start_with(wait_us: u64, more: &[&str]) -> Node {
        let mut child = Command::new(env!("CARGO_BIN_EXE_lrpc-bench-remote-node"))
            .args([
                "--listen",
                "tcp:127.0.0.1:0",
                "--wait-us",
                &wait_us.to_string(),
            ])
            .args(more)
            .stdout(Stdio::piped())
            .spawn()
            .expect("starting a node");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("the node's address");
        let endpoint = line
            .trim()
            .strip_prefix("listening ")
            .and_then(|e| e.parse().ok())
            .unwrap_or_else(|| panic!("the node said `{line}`"));
        Node { child, endpoint }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median over `reps` runs of `f`'s time, in ns.
fn time(reps: usize, mut f: impl FnMut()) -> f64 {
    median(
        (0..reps)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed().as_nanos() as f64
            })
            .collect(),
    )
}

/// A node serving over TLS with client certificates, and a client's TLS settings for it (a
/// CA, the server's certificate and the client's, made here). The files live in a scratch
/// folder while the node reads them at start.
fn tls_node() -> (Node, Arc<lrpc_remote::ClientTls>) {
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "bench CA");
    let ca_key = rcgen::KeyPair::generate().expect("CA key");
    let ca_pem = ca.self_signed(&ca_key).expect("CA").pem();
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let leaf = |names: Vec<String>, cn: &str| {
        let mut p = rcgen::CertificateParams::new(names).expect("params");
        p.distinguished_name.push(rcgen::DnType::CommonName, cn);
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = p.signed_by(&key, &issuer).expect("certificate");
        (cert.pem(), key.serialize_pem())
    };
    let (server, server_key) = leaf(vec!["localhost".into()], "bench node");
    let (client, client_key) = leaf(vec![], "bench client");
    let dir = std::env::temp_dir().join(format!("lrpc-bench-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch folder");
    let file = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).expect("a PEM file");
        p.to_string_lossy().into_owned()
    };
    let node = Node::start_with(
        0,
        &[
            "--tls-cert",
            &file("server.pem", &server),
            "--tls-key",
            &file("server.key", &server_key),
            "--tls-client-ca",
            &file("ca.pem", &ca_pem),
        ],
    );
    let _ = std::fs::remove_dir_all(&dir);
    let tls = lrpc_remote::ClientTls::from_pem(
        ca_pem.as_bytes(),
        Some((client.as_bytes(), client_key.as_bytes())),
        Some("localhost"),
    )
    .expect("the client's TLS");
    (node, tls)
}

/// The remote Null over TLS and over plain TCP, each a kept session, on a current-thread
/// runtime, `reps` interleaved runs of `calls` calls: (TLS ns per call, TCP ns per call).
fn tls_null(
    plan: &Arc<lrpc_kernel::presentation::InterfacePlan>,
    null: usize,
    calls: usize,
    reps: usize,
) -> (f64, f64) {
    let st = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let (tls_node, tls) = tls_node();
    let tcp_node = Node::start(0);
    let options = || RemoteOptions {
        deadline: Duration::from_secs(30),
        ..Default::default()
    };
    let over_tls = RemoteBinding::with_tls(
        tls_node.endpoint.clone(),
        BENCH,
        plan.clone(),
        options(),
        Some(tls),
    );
    let over_tcp = RemoteBinding::new(tcp_node.endpoint.clone(), BENCH, plan.clone(), options());
    let run = |b: &RemoteBinding| {
        st.block_on(async {
            for _ in 0..calls {
                b.call(null, &[]).await.expect("a remote null");
            }
        })
    };
    run(&over_tls);
    run(&over_tcp);
    let (mut t, mut p) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        t.push(time(1, || run(&over_tls)) / calls as f64);
        p.push(time(1, || run(&over_tcp)) / calls as f64);
    }
    assert_eq!(over_tls.kept_connections(), 1, "one kept TLS session");
    eprintln!(
        "null runs (µs): TLS {:.1?}, TCP {:.1?}",
        t.iter().map(|x| x / 1e3).collect::<Vec<_>>(),
        p.iter().map(|x| x / 1e3).collect::<Vec<_>>()
    );
    (median(t), median(p))
}

/// The remote Null's figures.
struct Nulls {
    remote: f64,
    grpc: f64,
    ratio: f64,
    tls: f64,
    tcp_beside_tls: f64,
    tls_ratio: f64,
}

struct Row {
    wait_us: u64,
    server_ns: f64,
    t: f64,
    n: usize,
    seq_ns: f64,
    multi_ns: f64,
    ratio: f64,
    model: f64,
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let quick = std::env::var_os("LRPC_BENCH_QUICK").is_some();
    let reps = if quick { 3 } else { 7 };
    // `-- --test`: the TLS Null beside TCP, briefly, nothing written.
    let smoke = std::env::args().any(|a| a == "--test");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let kernel = lrpc_kernel::Kernel::new().expect("kernel");
    let plan = Arc::new(kernel.interface(BENCH).expect("the bench interface"));
    let proc = |name: &str| {
        plan.procs
            .iter()
            .position(|p| p.name == name)
            .expect("proc")
    };
    let (null, add) = (proc("null"), proc("add"));
    if smoke {
        let (tls, tcp) = tls_null(&plan, null, 200, 3);
        eprintln!(
            "remote null over TLS {:.1} µs, over TCP {:.1} µs, remote_null_tls_over_tcp {:.2} (target ≤ 1.3)",
            tls / 1e3,
            tcp / 1e3,
            tls / tcp
        );
        return;
    }
    let args: Vec<u8> = [40u32, 2].iter().flat_map(|x| x.to_le_bytes()).collect();
    let mut nodes: Vec<Node> = WAITS_US.iter().map(|&w| Node::start(w)).collect();
    let binding = |node: &Node| {
        RemoteBinding::new(
            node.endpoint.clone(),
            BENCH,
            plan.clone(),
            RemoteOptions {
                deadline: Duration::from_secs(30),
                max_in_flight: 128,
                ..Default::default()
            },
        )
    };
    let sequential = |b: &RemoteBinding, n: usize| {
        rt.block_on(async {
            for _ in 0..n {
                let r = b.call(add, &args).await.expect("a remote add");
                assert_eq!(r, 42u32.to_le_bytes());
            }
        })
    };

    // Every setting: its member bindings made once (their sessions opened by a MultiRPC to
    // all of them and kept), a warm-up, then per n, `reps` pairs of n sequential calls (r) and
    // one MultiRPC (m), interleaved, and the median of each.
    let b0 = binding(&nodes[0]);
    sequential(&b0, 200);
    let multi = |members: &[Member]| {
        let out = rt
            .block_on(multi_call(
                members,
                add,
                &args,
                Duration::from_secs(60),
                |_, r| {
                    assert!(r.is_ok(), "{r:?}");
                    ControlFlow::Continue(())
                },
            ))
            .expect("a MultiRPC");
        assert_eq!(out.arrival.len(), members.len());
    };
    let mut raw = Vec::new();
    for (node, &wait_us) in nodes.iter().zip(&WAITS_US) {
        let b = binding(node);
        let all: Vec<Member> = (0..NS[NS.len() - 1])
            .map(|_| Member::Remote(binding(node)))
            .collect();
        let calls = if wait_us == 0 { 200 } else { 20 };
        sequential(&b, calls);
        multi(&all);
        multi(&all);
        let per_call = time(reps, || sequential(&b, calls)) / calls as f64;
        for &n in &NS {
            let members = &all[..n];
            multi(members);
            let (mut seq, mut par) = (Vec::new(), Vec::new());
            for _ in 0..reps {
                seq.push(time(1, || sequential(&b, n)));
                par.push(time(1, || multi(members)));
            }
            raw.push((wait_us, per_call, n, median(seq), median(par)));
        }
    }
    // c, the client's send + receive time per member: what each further member adds to a
    // MultiRPC (least-squares slope of m over n <= 32, one intercept per setting) in the
    // settings whose server time is waiting. Server time s is the rest of a sequential call
    // (network, the server's work, its waiting): T = s / c.
    let (mut sxy, mut sxx) = (0.0, 0.0);
    for &w in WAITS_US.iter().filter(|&&w| w > 0) {
        let pts: Vec<(f64, f64)> = raw
            .iter()
            .filter(|r| r.0 == w && r.2 <= 32)
            .map(|r| (r.2 as f64, r.4))
            .collect();
        let k = pts.len() as f64;
        let (sx, sy) = pts.iter().fold((0.0, 0.0), |a, p| (a.0 + p.0, a.1 + p.1));
        let (mx, my) = (sx / k, sy / k);
        for p in &pts {
            sxy += (p.0 - mx) * (p.1 - my);
            sxx += (p.0 - mx) * (p.0 - mx);
        }
    }
    let c = (sxy / sxx).max(1.0);
    let mut rows = Vec::new();
    for (wait_us, per_call, n, seq_ns, multi_ns) in raw {
        let server_ns = (per_call - c).max(0.0);
        let t = server_ns / c;
        let ratio = seq_ns / multi_ns;
        let model = (1.0 + t) / (1.0 + t / n as f64);
        eprintln!(
            "multirpc wait {wait_us} µs (T = {t:.2}) n = {n}: r = {:.1} µs, m = {:.1} µs, r/m = {ratio:.2}, model {model:.2}",
            seq_ns / 1e3,
            multi_ns / 1e3
        );
        rows.push(Row {
            wait_us,
            server_ns,
            t,
            n,
            seq_ns,
            multi_ns,
            ratio,
            model,
        });
    }
    let error = |r: &&Row| (r.ratio - r.model).abs() / r.model;
    // The key: the settings whose server time is waiting. With no waiting the server time is
    // the node's processor time and thread hand-offs on the two cores the client uses too,
    // not a fixed time that members overlap: reported, not part of the key.
    let max_err_cpu = rows
        .iter()
        .filter(|r| r.n <= 32 && r.wait_us == 0)
        .map(|r| error(&r))
        .fold(0.0f64, f64::max);
    let max_err = rows
        .iter()
        .filter(|r| r.n <= 32 && r.wait_us > 0)
        .map(|r| error(&r))
        .fold(0.0f64, f64::max);

    // Remote Null over loopback TCP against gRPC over a Unix socket, same run: both clients on
    // a current-thread tokio runtime, each with its connection kept, runs interleaved.
    nodes.truncate(1);
    let calls = if quick { 500 } else { 2000 };
    let st = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let bn = binding(&nodes[0]);
    let remote_run = || {
        st.block_on(async {
            for _ in 0..calls {
                bn.call(null, &[]).await.expect("a remote null");
            }
        })
    };
    let mut peer = GrpcPeer::start(Path::new(env!("CARGO_BIN_EXE_lrpc-grpc-peer")));
    remote_run();
    assert_eq!(peer.null(calls as i32), 0);
    let (mut remote, mut grpc) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        remote.push(time(1, remote_run) / calls as f64);
        grpc.push(time(1, || assert_eq!(peer.null(calls as i32), 0)) / calls as f64);
    }
    eprintln!(
        "null runs (µs): remote {:.1?}, gRPC {:.1?}",
        remote.iter().map(|x| x / 1e3).collect::<Vec<_>>(),
        grpc.iter().map(|x| x / 1e3).collect::<Vec<_>>()
    );
    drop(peer);
    let (remote_null, grpc_null) = (median(remote), median(grpc));
    let null_ratio = remote_null / grpc_null;
    eprintln!(
        "remote null {:.1} µs, gRPC-UDS null {:.1} µs, ratio {null_ratio:.2}",
        remote_null / 1e3,
        grpc_null / 1e3
    );
    drop(nodes);
    let (tls_ns, tcp_ns) = tls_null(&plan, null, calls, reps);
    let nulls = Nulls {
        remote: remote_null,
        grpc: grpc_null,
        ratio: null_ratio,
        tls: tls_ns,
        tcp_beside_tls: tcp_ns,
        tls_ratio: tls_ns / tcp_ns,
    };
    eprintln!(
        "remote null over TLS {:.1} µs, over TCP {:.1} µs, ratio {:.2}",
        tls_ns / 1e3,
        tcp_ns / 1e3,
        nulls.tls_ratio
    );

    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace")
        .join("bench-results");
    std::fs::create_dir_all(&root).expect("bench-results");
    let errs = (max_err, max_err_cpu);
    write_json(&root, c, &rows, errs, &nulls);
    write_markdown(&root, c, &rows, errs, &nulls);
    plots::init();
    if let Err(e) = plot(&root.join("multirpc.png"), &rows) {
        eprintln!("multirpc.png: {e}");
    }
    lrpc_benches::merge_summary(
        &root.join("summary.json"),
        &[
            ("multirpc_model_max_rel_error", max_err),
            ("remote_null_over_grpc_uds_null", null_ratio),
            ("remote_null_tls_over_tcp", nulls.tls_ratio),
        ],
    );
}

fn write_json(root: &Path, c: f64, rows: &[Row], (max_err, max_err_cpu): (f64, f64), n: &Nulls) {
    let (remote_null, grpc_null, null_ratio) = (n.remote, n.grpc, n.ratio);
    let mut j = String::from("{\n");
    let _ = writeln!(j, "  \"client_ns_per_call\": {c:.1},");
    let _ = writeln!(j, "  \"remote_null_tcp_ns\": {remote_null:.1},");
    let _ = writeln!(j, "  \"grpc_uds_null_ns\": {grpc_null:.1},");
    let _ = writeln!(j, "  \"remote_null_over_grpc_uds_null\": {null_ratio:.3},");
    let _ = writeln!(j, "  \"remote_null_tls_ns\": {:.1},", n.tls);
    let _ = writeln!(
        j,
        "  \"remote_null_tcp_beside_tls_ns\": {:.1},",
        n.tcp_beside_tls
    );
    let _ = writeln!(j, "  \"remote_null_tls_over_tcp\": {:.3},", n.tls_ratio);
    let _ = writeln!(j, "  \"multirpc_model_max_rel_error\": {max_err:.3},");
    let _ = writeln!(
        j,
        "  \"multirpc_model_max_rel_error_no_wait\": {max_err_cpu:.3},"
    );
    j.push_str("  \"multirpc\": [\n");
    for (i, r) in rows.iter().enumerate() {
        let _ = writeln!(
            j,
            "    {{\"wait_us\": {}, \"server_ns\": {:.1}, \"T\": {:.3}, \"n\": {}, \"sequential_ns\": {:.1}, \"multi_ns\": {:.1}, \"ratio\": {:.3}, \"model\": {:.3}}}{}",
            r.wait_us,
            r.server_ns,
            r.t,
            r.n,
            r.seq_ns,
            r.multi_ns,
            r.ratio,
            r.model,
            if i + 1 < rows.len() { "," } else { "" }
        );
    }
    j.push_str("  ]\n}\n");
    std::fs::write(root.join("remote.json"), j).expect("remote.json");
}

fn write_markdown(
    root: &Path,
    c: f64,
    rows: &[Row],
    (max_err, max_err_cpu): (f64, f64),
    n: &Nulls,
) {
    let (remote_null, grpc_null, null_ratio) = (n.remote, n.grpc, n.ratio);
    let mut m = String::from("# Remote calls: MultiRPC and the remote Null\n\n");
    let _ = writeln!(
        m,
        "Generated by `cargo bench -p lrpc-benches --bench remote`. Every member is a remote \
         binding (wRPC over loopback TCP; a session, one kept connection per binding, opened \
         before the measurement) to a kernel in another process. Server time is modelled as \
         waiting: the node waits before each call, without using a processor, as the paper's \
         servers computed in parallel on separate machines; two cores can not run a hundred \
         servers' computations in parallel. c, the client's send + receive time per member, \
         is what each further member adds to a MultiRPC in the settings with waiting \
         (least-squares slope of m over n ≤ 32, one intercept per setting): {:.1} µs. \
         T = server time / c, where server time is the rest of a sequential call (network, \
         the server's work, its waiting). Each r and m is the median of 7 runs, the runs of \
         r and m interleaved, after a warm-up per setting.\n\n\
         The setting without waiting (wait 0) is in the table and the plot but not in \
         `multirpc_model_max_rel_error`: there the server time is not waiting but the node's \
         processor time and its thread hand-offs, on the same two cores as the client. The \
         model assumes a fixed server time that members overlap; here a MultiRPC's servers \
         share two cores with the client, and the node takes several requests per wake-up, \
         so a member's server time is not a sequential call's and the model does not apply. \
         Its \
         largest error (n ≤ 32) is {:.3}.\n",
        c / 1e3,
        max_err_cpu
    );
    m.push_str("| wait (µs) | T | n | n sequential (µs) | one MultiRPC (µs) | r/m | model (1+T)/(1+T/n) | error |\n");
    m.push_str("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for r in rows {
        let _ = writeln!(
            m,
            "| {} | {:.2} | {} | {:.1} | {:.1} | {:.2} | {:.2} | {:.0}% |",
            r.wait_us,
            r.t,
            r.n,
            r.seq_ns / 1e3,
            r.multi_ns / 1e3,
            r.ratio,
            r.model,
            100.0 * (r.ratio - r.model).abs() / r.model
        );
    }
    let _ = writeln!(
        m,
        "\n![r/m against n](multirpc.png)\n\n`multirpc_model_max_rel_error` (n ≤ 32, the settings with \
         waiting): {max_err:.3} (target ≤ 0.2).\n\n| Null | ns per call |\n| --- | ---: |\n| remote binding, loopback \
         TCP, session (one kept connection) | {remote_null:.0} |\n| gRPC over a Unix socket \
         (tonic, one kept connection) | {grpc_null:.0} |\n\nBoth clients run on a \
         current-thread tokio runtime; the median of 7 runs of 2000 calls each, the runs of \
         the two interleaved.\n\n`remote_null_over_grpc_uds_null`: {null_ratio:.3} \
         (target ≤ 0.5).\n\n| Null, kept session | ns per call |\n| --- | ---: |\n| over TLS \
         with client certificates (TLS 1.3, the handshake paid once) | {:.0} |\n| over plain \
         TCP, measured beside it | {:.0} |\n\nTwo nodes, one serving over TLS; the runs of \
         the two interleaved, as above.\n\n`remote_null_tls_over_tcp`: {:.3} (target ≤ 1.3).",
        n.tls, n.tcp_beside_tls, n.tls_ratio
    );
    std::fs::write(root.join("REMOTE.md"), m).expect("REMOTE.md");
}

/// r/m against n, measured (points) and the model (lines), one colour per server time.
fn plot(path: &Path, rows: &[Row]) -> Result<(), Box<dyn std::error::Error>> {
    let root = BitMapBackend::new(path, (1000, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let top = rows
        .iter()
        .map(|r| r.ratio.max(r.model))
        .fold(1.0f64, f64::max)
        * 1.1;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "MultiRPC: n sequential calls / one MultiRPC (r/m)",
            ("sans-serif", 22),
        )
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..102f64, 0f64..top)?;
    chart
        .configure_mesh()
        .x_desc("n (servers)")
        .y_desc("r/m")
        .label_style(("sans-serif", 15))
        .draw()?;
    let colors = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
    ];
    for (k, &w) in WAITS_US.iter().enumerate() {
        let color = colors[k % colors.len()];
        let pts: Vec<&Row> = rows.iter().filter(|r| r.wait_us == w).collect();
        let Some(first) = pts.first() else { continue };
        let t = first.t;
        let model: Vec<(f64, f64)> = (1..=100)
            .map(|n| (n as f64, (1.0 + t) / (1.0 + t / n as f64)))
            .collect();
        chart
            .draw_series(LineSeries::new(model, color.stroke_width(2)))?
            .label(format!(
                "T = {t:.1} (wait {w} µs): model line, measured dots"
            ))
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], color.stroke_width(2)));
        chart.draw_series(
            pts.iter()
                .map(|r| Circle::new((r.n as f64, r.ratio), 5, color.filled())),
        )?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 15))
        .draw()?;
    root.present()?;
    Ok(())
}
