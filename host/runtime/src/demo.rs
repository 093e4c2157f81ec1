//! `lrpc demo`: a client and a server domain, the four calls of LRPC's Table IV, their
//! results and the measured time per call.

use lrpc_artifacts as artifacts;
use lrpc_kernel::{Domain, Error, Kernel};
use std::fmt::Write as _;
use std::time::Instant;

/// One measured call of the demo.
#[derive(Debug, Clone)]
pub struct DemoRow {
    /// Procedure name.
    pub name: &'static str,
    /// What the call returned, as checked by the client guest.
    pub result: String,
    /// Mean nanoseconds per call over the measured loop.
    pub ns_per_call: f64,
}

/// Runs the demo with `iters` calls per procedure and returns its rows.
pub fn run(iters: u32) -> Result<Vec<DemoRow>, Error> {
    let kernel = Kernel::new()?;
    let server = kernel.domain("bench-server", artifacts::BENCH_SERVER)?;
    kernel.export(&server, "lrpc:bench/bench")?;
    let client = kernel.domain("bench-client", artifacts::BENCH_CLIENT)?;
    let status: i32 = client.call("bind", ())?;
    check(status as i64, "bind")?;

    let iters_i = i32::try_from(iters.max(1)).unwrap_or(i32::MAX);
    let mut rows = Vec::new();

    let add: i64 = client.call("add", (40, 2))?;
    check(add, "add")?;
    rows.push(timed(&client, "Null", "()".into(), iters_i, |c, n| {
        let s: i32 = c.call("null", (n,))?;
        check(i64::from(s), "null")
    })?);
    rows.push(timed(
        &client,
        "Add",
        format!("40 + 2 = {add}"),
        iters_i,
        |c, n| {
            let r: i64 = c.call("add_loop", (n,))?;
            check(r, "add_loop")
        },
    )?);
    let sum: i64 = client.call("big_in", (200, 1))?;
    check(sum, "big_in")?;
    rows.push(timed(
        &client,
        "BigIn",
        format!("200 bytes in, the server saw {} bytes", sum >> 8),
        iters_i,
        |c, n| {
            let r: i64 = c.call("big_in", (200, n))?;
            check(r, "big_in")
        },
    )?);
    rows.push(timed(
        &client,
        "BigInOut",
        "200 bytes in, 200 masked bytes out, verified".into(),
        iters_i,
        |c, n| {
            let r: i32 = c.call("big_in_out_loop", (200, n))?;
            check(i64::from(r), "big_in_out")
        },
    )?);
    Ok(rows)
}

fn check(v: i64, what: &str) -> Result<(), Error> {
    if v < 0 {
        let code = i32::try_from(-v).unwrap_or(i32::MAX);
        let status = lrpc_kernel::Status::try_from(code)
            .map(|s| s.describe().to_string())
            .unwrap_or_else(|c| format!("unknown status {c}"));
        return Err(Error::Guest {
            what: what.to_string(),
            reason: status,
        });
    }
    if (what == "big_in_out" || what == "add_loop") && v != 0 {
        return Err(Error::Guest {
            what: what.to_string(),
            reason: format!("the reply was wrong ({v})"),
        });
    }
    Ok(())
}

fn timed(
    client: &Domain,
    name: &'static str,
    result: String,
    iters: i32,
    f: impl Fn(&Domain, i32) -> Result<(), Error>,
) -> Result<DemoRow, Error> {
    f(client, 1000.min(iters))?;
    let start = Instant::now();
    f(client, iters)?;
    let ns = start.elapsed().as_nanos() as f64 / f64::from(iters);
    Ok(DemoRow {
        name,
        result,
        ns_per_call: ns,
    })
}

/// Formats the demo's rows as a table.
pub fn render(rows: &[DemoRow]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{:<10} {:>12}  result", "call", "ns/call");
    for r in rows {
        let _ = writeln!(s, "{:<10} {:>12.1}  {}", r.name, r.ns_per_call, r.result);
    }
    s
}
