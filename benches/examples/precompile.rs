//! Compiles a guest module with the kernel's own engine settings (epoch interruption, the
//! same Cranelift flags) into a precompiled artifact, an ELF file whose machine code
//! `objdump` disassembles function by function: what the guest side of a call runs, as the
//! kernel runs it.
//!
//! ```text
//! cargo build --profile bench -p lrpc-benches --example precompile
//! target/release/examples/precompile target/guests/wasm32-unknown-unknown/release/bench_client.wasm /tmp/bench_client.cwasm
//! objdump -d --no-show-raw-insn /tmp/bench_client.cwasm | less
//! ```
//!
//! Functions appear as `wasm[0]::function[N]::<name>`; with `callpath`'s instruction counts
//! (`LRPC_PERFMAP=1` names the same functions) this shows where a stub's instructions go.

use anyhow::Context;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let (Some(input), Some(output)) = (args.next(), args.next()) else {
        anyhow::bail!("usage: precompile GUEST.wasm OUTPUT.cwasm");
    };
    let kernel =
        lrpc_kernel::Kernel::new().map_err(|e| anyhow::anyhow!("starting a kernel: {e}"))?;
    let wasm = std::fs::read(&input).with_context(|| format!("reading {input}"))?;
    let compiled = kernel
        .engine()
        .precompile_module(&wasm)
        .map_err(|e| anyhow::anyhow!("compiling {input}: {e}"))?;
    std::fs::write(&output, compiled).with_context(|| format!("writing {output}"))?;
    Ok(())
}
