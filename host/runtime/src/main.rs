//! The `lrpc` command line.

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use lrpc_runtime::config::Config;
use lrpc_runtime::deploy::Deployment;
use lrpc_runtime::edge::{Edge, shutdown_signal};
use std::io::Write as _;
use std::sync::Arc;

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
    /// Start the domains of a deployment config, bind them, and run its entry (`[run]
    /// entry`), or one call given here; print the result.
    Run {
        /// The deployment config (TOML).
        config: std::path::PathBuf,
        /// Call this instead of the entry: `interface.function` (e.g.
        /// `lrpc:kv/store.put`) with ARGS, or `domain.export` (an export without parameters).
        #[arg(long)]
        call: Option<String>,
        /// The call's arguments as WIT value text (`"key"`, `[1, 2]`, `some(3)`, `text`, …).
        args: Vec<String>,
    },
    /// Start a deployment and serve its HTTP routes until ctrl-c or SIGTERM.
    Serve {
        /// The deployment config (TOML).
        config: std::path::PathBuf,
        /// Address to listen on (default: the config's `[serve] listen`, else
        /// 127.0.0.1:8080).
        #[arg(long)]
        listen: Option<String>,
    },
    /// Print the procedure descriptor list of an interface (embedded WIT, or `--wit DIR`).
    Pdl {
        /// Interface name, e.g. `lrpc:bench/bench`.
        interface: String,
        /// A directory of `.wit` files to load besides the embedded ones.
        #[arg(long)]
        wit: Option<std::path::PathBuf>,
    },
    /// Start a crate from a template: `lrpc new plugin NAME [--component]`.
    New(lrpc_runtime::template::New),
}

/// Makes the C allocator (glibc's) take every allocation of 256 KiB or more from a
/// mapping of its own, given back to the system when it is freed. By default glibc raises
/// that threshold to the largest block freed so far (up to 32 MiB), after which request and
/// response bodies of megabytes come from its per-thread heaps, which keep their peak: a
/// few 15 MiB bodies left the server 170 MiB larger for good, beside the wasm memories the
/// edge gives back (see `[serve] recycle-above`). A fixed threshold keeps the peak of a
/// large body from staying; smaller allocations are served as before.
fn give_large_buffers_back() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        /// Blocks of this size and larger are mapped (and unmapped) on their own.
        const LARGE: libc::c_int = 256 << 10;
        #[allow(
            unsafe_code,
            reason = "one call into the C allocator's settings, before any thread starts"
        )]
        // SAFETY: `mallopt` changes a setting of glibc's allocator; it is called once, from
        // the main thread, before the program starts other threads, and takes integers.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, LARGE);
        }
    }
}

fn main() -> std::process::ExitCode {
    give_large_buffers_back();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
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
            let rows = lrpc_runtime::demo::run(iters).context("the demo failed")?;
            print!("{}", lrpc_runtime::demo::render(&rows));
        }
        Command::Run { config, call, args } => {
            let config = Config::load(&config)?;
            let dep = Deployment::start(config)?;
            let target = call.or_else(|| dep.config.entry.clone()).ok_or_else(|| {
                anyhow::anyhow!("the config has no `[run] entry`; give one with --call")
            })?;
            let (head, function) = target
                .rsplit_once('.')
                .ok_or_else(|| anyhow::anyhow!("`{target}`: `interface.function` expected"))?;
            if dep.domains.contains_key(head) {
                anyhow::ensure!(args.is_empty(), "`{target}` takes no arguments");
                println!("{}", dep.call_entry(&target)?);
            } else {
                println!("{}", dep.call_function(head, function, &args.join(", "))?);
            }
        }
        Command::Serve { config, listen } => {
            let config = Config::load(&config)?;
            let listen = listen
                .or_else(|| config.listen.clone())
                .unwrap_or_else(|| "127.0.0.1:8080".into());
            serve(config, &listen)?;
        }
        Command::New(new) => lrpc_runtime::template::run(&new)?,
        Command::Pdl { interface, wit } => {
            let kernel = lrpc_kernel::Kernel::new()?;
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

/// Serves until a shutdown signal: stops accepting, lets requests in flight finish, stops
/// the workers.
fn serve(config: Config, listen: &str) -> anyhow::Result<()> {
    let dep = Arc::new(Deployment::start(config)?);
    let edge = Edge::start(dep.clone()).context("starting the route workers")?;
    let plugins = lrpc_runtime::reload::reloadable(&dep);
    let _watcher = lrpc_runtime::reload::watch(&plugins).context("watching plugin files")?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting tokio")?;
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .with_context(|| format!("listening on {listen}"))?;
        let addr = listener.local_addr()?;
        tracing::info!(%addr, routes = dep.config.routes.len(), "serving");
        // One write: a reader that takes the first line and closes the pipe must not make
        // a later line fail.
        let mut lines = format!("listening on http://{addr}\n");
        for e in dep.network.iter().flat_map(|n| n.listening()) {
            lines.push_str(&format!("exports on {e}\n"));
        }
        let mut out = std::io::stdout().lock();
        out.write_all(lines.as_bytes())?;
        out.flush()?;
        drop(out);
        lrpc_runtime::listener::serve(
            listener,
            edge.router(),
            dep.config.connections,
            shutdown_signal(),
        )
        .await;
        tracing::info!("shut down: requests in flight finished or the grace period ended");
        anyhow::Ok(())
    })?;
    edge.shutdown();
    Ok(())
}
