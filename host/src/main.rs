//! The `lrpc` command line.

use anyhow::Context as _;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "lrpc",
    version,
    about = "LRPC between WebAssembly protection domains"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start a client and a server domain, make Null, Add, BigIn and BigInOut calls, print
    /// the results and the measured time per call.
    Demo {
        /// Calls per procedure in the measured loop.
        #[arg(long, default_value_t = 1_000_000)]
        iters: u32,
    },
    /// Print the procedure descriptor list of an interface (embedded WIT, or `--wit DIR`).
    Pdl {
        /// Interface name, e.g. `lrpc:bench/bench`.
        interface: String,
        /// A directory of `.wit` files to load besides the embedded ones.
        #[arg(long)]
        wit: Option<std::path::PathBuf>,
    },
}

fn main() -> std::process::ExitCode {
    match run(Cli::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Demo { iters } => {
            let rows = lrpc::demo::run(iters).context("the demo failed")?;
            print!("{}", lrpc::demo::render(&rows));
        }
        Command::Pdl { interface, wit } => {
            let kernel = lrpc::Kernel::new()?;
            if let Some(dir) = wit {
                kernel
                    .add_wit_dir(&dir)
                    .with_context(|| format!("loading {}", dir.display()))?;
            }
            let plan = kernel.interface(&interface)?;
            println!("{}  fingerprint {:016x}", plan.name, plan.fingerprint);
            println!(
                "{:<4} {:<20} {:>8} {:>6} {:>8}  entry",
                "id", "procedure", "a-stack", "count", "bounded"
            );
            for (i, p) in plan.procs.iter().enumerate() {
                println!(
                    "{:<4} {:<20} {:>8} {:>6} {:>8}  {}",
                    i, p.name, p.astack_size, p.astack_count, p.bounded, p.entry
                );
            }
        }
    }
    Ok(())
}
