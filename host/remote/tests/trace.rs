//! A call's trace context on the wire (`lrpc_remote::trace`): a version 2 session carries it
//! to the server, whose propagation gets it; a server that only opens version 1 sessions
//! is still called, in version 1 and without it.

use anyhow::Result;
use lrpc_remote::trace::{Propagation, TraceContext};
use lrpc_remote::{Endpoint, RemoteOptions, RemoteServer, ServeOptions};
use std::io::{Read as _, Write as _};
use std::sync::{Arc, Mutex};

mod common;

use common::{BENCH, binding, local, proc_of, runtime};

/// The contexts the served calls of this process came with.
static ADOPTED: Mutex<Vec<TraceContext>> = Mutex::new(Vec::new());

/// A propagation that notes what it is given.
struct Recorder;

impl Propagation for Recorder {
    fn current(&self) -> Option<TraceContext> {
        None
    }

    fn adopt(&self, _span: &tracing::Span, incoming: &TraceContext) {
        ADOPTED.lock().unwrap().push(incoming.clone());
    }
}

fn context(span: &str) -> TraceContext {
    TraceContext {
        traceparent: format!("00-4bf92f3577b34da6a3ce929d0e0e4736-{span}-01"),
        tracestate: "congo=t61rcWkgMzE".into(),
    }
}

#[test]
fn a_session_carries_the_caller_s_trace_context_to_the_server() -> Result<()> {
    let _ = lrpc_remote::trace::set_propagation(Box::new(Recorder));
    let (_kernel, pool) = local()?;
    let rt = runtime();
    let server = rt.block_on(RemoteServer::new(pool.clone(), ServeOptions::default()))?;
    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
    let addr = listener.local_addr()?;
    rt.spawn(server.listen_tcp(listener));
    let b = binding(
        &pool,
        &Endpoint::Tcp(addr.to_string()),
        BENCH,
        RemoteOptions::default(),
    );
    let null = proc_of(&pool, BENCH, "null");
    let cx = context("00f067aa0ba902b7");
    let before = ADOPTED.lock().unwrap().len();
    rt.block_on(b.call_wire_traced(null, bytes::Bytes::new(), Some(cx.clone())))?;
    // The next call on the kept session, with another context, and one without any.
    let cx2 = context("b7ad6b7169203331");
    rt.block_on(b.call_wire_traced(null, bytes::Bytes::new(), Some(cx2.clone())))?;
    rt.block_on(b.call_wire_traced(null, bytes::Bytes::new(), None))?;
    assert_eq!(b.kept_connections(), 1);
    let adopted = ADOPTED.lock().unwrap()[before..].to_vec();
    assert_eq!(adopted, [cx, cx2]);
    Ok(())
}

/// A session server of the first version, as an older kernel runs it: `open-2` is a
/// function it does not have (it closes the connection), and it takes only requests
/// without a context, answering each with empty results (the `null` procedure's).
struct OldServer {
    addr: std::net::SocketAddr,
    /// The opening functions asked for, and the request tags seen, in order.
    seen: Arc<Mutex<Vec<String>>>,
}

fn read_name(s: &mut std::net::TcpStream) -> std::io::Result<String> {
    let n = lrpc_remote::session::read_leb_u32_blocking(s)? as usize;
    let mut b = vec![0; n];
    s.read_exact(&mut b)?;
    Ok(String::from_utf8_lossy(&b).into_owned())
}

impl OldServer {
    fn start() -> Result<OldServer> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut s) = conn else { return };
                let log = log.clone();
                std::thread::spawn(move || -> std::io::Result<()> {
                    // wRPC's invocation: protocol byte, instance, function, an empty path,
                    // the parameters' length (0).
                    let mut protocol = [0u8; 1];
                    s.read_exact(&mut protocol)?;
                    let _instance = read_name(&mut s)?;
                    let func = read_name(&mut s)?;
                    let mut rest = [0u8; 2];
                    s.read_exact(&mut rest)?;
                    log.lock().unwrap().push(func.clone());
                    if func != "open" {
                        return Ok(());
                    }
                    s.write_all(&[0x00, 0x01, 0x01])?;
                    loop {
                        let mut tag = [0u8; 1];
                        s.read_exact(&mut tag)?;
                        log.lock().unwrap().push(format!("request {}", tag[0]));
                        if tag[0] != 0x01 {
                            return Ok(());
                        }
                        let _instance = read_name(&mut s)?;
                        let _func = read_name(&mut s)?;
                        let _params = read_name(&mut s)?;
                        s.write_all(&[0x00, 0x00])?;
                    }
                });
            }
        });
        Ok(OldServer { addr, seen })
    }
}

#[test]
fn a_server_without_version_2_is_called_in_version_1_without_the_context() -> Result<()> {
    let (_kernel, pool) = local()?;
    let rt = runtime();
    let old = OldServer::start()?;
    let b = binding(
        &pool,
        &Endpoint::Tcp(old.addr.to_string()),
        BENCH,
        RemoteOptions::default(),
    );
    let null = proc_of(&pool, BENCH, "null");
    for span in ["00f067aa0ba902b7", "b7ad6b7169203331"] {
        let r = rt.block_on(b.call_wire_traced(null, bytes::Bytes::new(), Some(context(span))))?;
        assert!(r.is_empty());
    }
    // One refused `open-2`, then a version 1 session that carries both calls; the next
    // connection would not ask for version 2 again for a while.
    assert_eq!(
        *old.seen.lock().unwrap(),
        ["open-2", "open", "request 1", "request 1"]
    );
    Ok(())
}
