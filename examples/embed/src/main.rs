//! The smallest embedder of the kernel: it loads a key-value server and its client as two
//! protection domains, exports the server's interface, and runs the client's self-test. The
//! client binds to `lrpc:kv/store` from its own code and calls it through A-stacks.
//!
//!     cargo run -p lrpc-example-embed -- SERVER.wasm CLIENT.wasm
//!
//! The guests are `guests/kv-server` and `guests/kv-client` built for `wasm32-unknown-unknown`
//! (`cargo build --release --target wasm32-unknown-unknown` in `guests/`).

use lrpc_kernel::Kernel;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [server_wasm, client_wasm] = args.as_slice() else {
        eprintln!("usage: embed SERVER.wasm CLIENT.wasm");
        return ExitCode::from(2);
    };
    match run(server_wasm, client_wasm) {
        Ok(0) => {
            println!("the client's self-test passed");
            ExitCode::SUCCESS
        }
        Ok(check) => {
            eprintln!("the client's self-test failed at check {check}");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the client's self-test against the server; returns 0 or the first failed check.
fn run(server_wasm: &str, client_wasm: &str) -> Result<i32, Box<dyn std::error::Error>> {
    let kernel = Kernel::new()?;
    let server = kernel.domain("kv-server", &std::fs::read(server_wasm)?)?;
    kernel.export(&server, "lrpc:kv/store")?;
    let client = kernel.domain("kv-client", &std::fs::read(client_wasm)?)?;
    let failures: i32 = client.call("selftest", ())?;
    Ok(failures)
}
