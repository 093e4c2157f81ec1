//! The `lrpc` command line.
//!
//! Its `unsafe` blocks, all run at start before the program starts other threads:
//! - one sets the C allocator's mmap threshold (`give_large_buffers_back`), so that large
//!   request buffers go back to the system;
//! - two take a listening socket a service manager passed (`take_passed_socket`): one unsets
//!   the `LISTEN_*` variables, one takes ownership of descriptor 3.

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use lrpc_runtime::config::{Config, LogFormat};
use lrpc_runtime::deploy::Deployment;
use lrpc_runtime::edge::{Edge, shutdown_signal};
use lrpc_runtime::telemetry::Telemetry;
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
    /// The log's format: `text` (the default) or `json` (one JSON object per line). For
    /// `lrpc serve`, the default is the config's `[serve] log-format`.
    #[arg(long, global = true, value_name = "FORMAT")]
    log_format: Option<LogFormat>,
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
        /// Serve on the listening socket a service manager passed (socket activation):
        /// descriptor 3, with `LISTEN_FDS` set, whatever `LISTEN_PID` says. Without this
        /// flag such a socket is still used when `LISTEN_PID` is this process's id.
        #[arg(long, conflicts_with = "listen")]
        listenfd: bool,
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
    let cli = Cli::parse();
    let passed = match &cli.command {
        Command::Serve { listenfd, .. } => take_passed_socket(*listenfd),
        _ => Ok(None),
    };
    match passed.and_then(|passed| run(cli, passed)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Writes the log to stderr in `format`, at the levels `RUST_LOG` says: by default `info`
/// without the access log, whose line per request would cost a busy server a write each.
/// Exports spans over OTLP too when the environment or `telemetry` (the config's
/// `[telemetry]`) configures it (see `lrpc_runtime::telemetry`): the running export, to
/// flush at exit.
fn start_log(
    format: LogFormat,
    telemetry: Option<&lrpc_runtime::config::TelemetrySpec>,
) -> anyhow::Result<Option<Telemetry>> {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let log_filter = || {
        tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,lrpc::access=off"))
    };
    let filter = log_filter();
    let log = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let log = match format {
        LogFormat::Text => log
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_filter(filter)
            .boxed(),
        // The event's fields beside `timestamp`, `level` and `target`, not nested.
        LogFormat::Json => log.json().flatten_event(true).with_filter(filter).boxed(),
    };
    // A filter with span directives (`target[span{field}]=level`) follows the spans entered.
    let follows_spans = std::env::var("RUST_LOG").is_ok_and(|v| v.contains('['));
    let log = LogLayer {
        inner: log,
        spans: follows_spans,
    };
    let registry = tracing_subscriber::registry().with(log);
    // The export's layer goes over the log's, and keeps a filter like the log's, to tell
    // the callsites neither takes (see `TraceLayer`).
    match Telemetry::start(telemetry).context("exporting traces")? {
        Some((running, trace)) => {
            registry.with(trace.over(log_filter())).init();
            Ok(Some(running))
        }
        None => {
            registry.init();
            Ok(None)
        }
    }
}

/// The log's layer (the formatter under its per-layer filter), not told of spans entered,
/// left or closed unless its filter follows spans (`spans`). The log writes no span events
/// (the formatter's `FmtSpan::NONE`), and a filter without span directives keeps nothing per
/// span: told, the per-layer filter would only look each span up to find nothing to do, for
/// every span the export takes (see `lrpc_runtime::telemetry::TraceLayer`). New spans, their
/// fields and events reach it as before.
struct LogLayer {
    inner: Box<dyn tracing_subscriber::Layer<Registry> + Send + Sync>,
    spans: bool,
}

type Registry = tracing_subscriber::Registry;

impl tracing_subscriber::Layer<Registry> for LogLayer {
    fn on_register_dispatch(&self, subscriber: &tracing::Dispatch) {
        self.inner.on_register_dispatch(subscriber);
    }

    fn on_layer(&mut self, subscriber: &mut Registry) {
        self.inner.on_layer(subscriber);
    }

    fn register_callsite(
        &self,
        m: &'static tracing::Metadata<'static>,
    ) -> tracing::subscriber::Interest {
        self.inner.register_callsite(m)
    }

    fn enabled(
        &self,
        m: &tracing::Metadata<'_>,
        ctx: tracing_subscriber::layer::Context<'_, Registry>,
    ) -> bool {
        self.inner.enabled(m, ctx)
    }

    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        ctx: tracing_subscriber::layer::Context<'_, Registry>,
    ) {
        self.inner.on_new_span(attrs, id, ctx);
    }

    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        self.inner.max_level_hint()
    }

    fn on_record(
        &self,
        id: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        ctx: tracing_subscriber::layer::Context<'_, Registry>,
    ) {
        self.inner.on_record(id, values, ctx);
    }

    fn on_follows_from(
        &self,
        id: &tracing::span::Id,
        follows: &tracing::span::Id,
        ctx: tracing_subscriber::layer::Context<'_, Registry>,
    ) {
        self.inner.on_follows_from(id, follows, ctx);
    }

    fn event_enabled(
        &self,
        event: &tracing::Event<'_>,
        ctx: tracing_subscriber::layer::Context<'_, Registry>,
    ) -> bool {
        self.inner.event_enabled(event, ctx)
    }

    fn on_event(
        &self,
        event: &tracing::Event<'_>,
        ctx: tracing_subscriber::layer::Context<'_, Registry>,
    ) {
        self.inner.on_event(event, ctx);
    }

    fn on_enter(
        &self,
        id: &tracing::span::Id,
        ctx: tracing_subscriber::layer::Context<'_, Registry>,
    ) {
        if self.spans {
            self.inner.on_enter(id, ctx);
        }
    }

    fn on_exit(
        &self,
        id: &tracing::span::Id,
        ctx: tracing_subscriber::layer::Context<'_, Registry>,
    ) {
        if self.spans {
            self.inner.on_exit(id, ctx);
        }
    }

    fn on_close(
        &self,
        id: tracing::span::Id,
        ctx: tracing_subscriber::layer::Context<'_, Registry>,
    ) {
        if self.spans {
            self.inner.on_close(id, ctx);
        }
    }

    fn on_id_change(
        &self,
        old: &tracing::span::Id,
        new: &tracing::span::Id,
        ctx: tracing_subscriber::layer::Context<'_, Registry>,
    ) {
        self.inner.on_id_change(old, new, ctx);
    }

    // The per-layer filter inside says so: the registry keeps the filter's state per span.
    #[allow(unsafe_code, reason = "forwarding the layer's own downcast")]
    unsafe fn downcast_raw(&self, id: std::any::TypeId) -> Option<*const ()> {
        if id == std::any::TypeId::of::<Self>() {
            return Some(std::ptr::from_ref(self).cast());
        }
        // SAFETY: the inner layer answers for itself, as `Layer::downcast_raw` requires: a
        // pointer to a value of the type `id` names, which lives as long as the layer.
        unsafe { self.inner.downcast_raw(id) }
    }
}

/// The listening socket a service manager passed to this process, as systemd does
/// (`LISTEN_FDS` sockets from descriptor 3, for the process `LISTEN_PID`; with `any_pid`,
/// `--listenfd`, whatever `LISTEN_PID` says), or `None`. The `LISTEN_*` variables are unset
/// either way, so that no process started later takes them for its own. Only the first
/// socket is served; how many were passed comes with it.
///
/// Call it once, from `main`, before the program starts other threads or opens files.
fn take_passed_socket(any_pid: bool) -> anyhow::Result<Option<(std::os::fd::OwnedFd, u32)>> {
    use lrpc_runtime::listener::{LISTEN_FDS_START, is_open_socket, passed_sockets};
    use std::os::fd::FromRawFd as _;
    let count = passed_sockets(
        std::env::var_os("LISTEN_PID").as_deref(),
        std::env::var_os("LISTEN_FDS").as_deref(),
        std::process::id(),
        any_pid,
    );
    #[allow(
        unsafe_code,
        reason = "changing the environment, before any thread starts"
    )]
    // SAFETY: `main` calls this before the program starts other threads, so no other thread
    // reads or writes the environment meanwhile.
    unsafe {
        for v in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] {
            std::env::remove_var(v);
        }
    }
    let count = count.map_err(anyhow::Error::msg)?;
    if count == 0 {
        return Ok(None);
    }
    let fd = LISTEN_FDS_START;
    anyhow::ensure!(
        is_open_socket(fd),
        "LISTEN_FDS says {count} sockets were passed, but descriptor {fd} is not an open socket"
    );
    #[allow(
        unsafe_code,
        reason = "taking ownership of the descriptor the service manager passed"
    )]
    // SAFETY: descriptor 3 is open on a socket (checked just above) that the service manager
    // passed to this process to serve on (`LISTEN_FDS`). Nothing else in the process owns
    // it: this runs once, at start, before anything opens or closes a file, and the
    // variables that told of it are gone, so nothing will take it again.
    let owned = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    Ok(Some((owned, count)))
}

fn run(cli: Cli, passed: Option<(std::os::fd::OwnedFd, u32)>) -> anyhow::Result<()> {
    if !matches!(cli.command, Command::Serve { .. } | Command::Run { .. }) {
        start_log(cli.log_format.unwrap_or_default(), None)?;
    }
    match cli.command {
        Command::Demo { iters } => {
            let rows = lrpc_runtime::demo::run(iters).context("the demo failed")?;
            print!("{}", lrpc_runtime::demo::render(&rows));
        }
        Command::Run { config, call, args } => {
            let config = Config::load(&config)?;
            let telemetry = start_log(
                cli.log_format.unwrap_or_default(),
                config.telemetry.as_ref(),
            )?;
            let dep = Deployment::start(config)?;
            let target = call.or_else(|| dep.config.entry.clone()).ok_or_else(|| {
                anyhow::anyhow!("the config has no `[run] entry`; give one with --call")
            })?;
            let (head, function) = target
                .rsplit_once('.')
                .ok_or_else(|| anyhow::anyhow!("`{target}`: `interface.function` expected"))?;
            // The run's span: a child of `TRACEPARENT` (and `TRACESTATE`) when the caller's
            // environment names a trace, as a shell script tracing its steps passes it.
            let span = tracing::debug_span!("run", otel.kind = "client", call = target.as_str());
            if lrpc_runtime::telemetry::on()
                && let Some(parent) = std::env::var_os("TRACEPARENT")
            {
                let state = std::env::var_os("TRACESTATE");
                lrpc_runtime::telemetry::adopt(
                    &span,
                    parent.as_encoded_bytes(),
                    state.as_ref().map(|s| s.as_encoded_bytes()),
                );
            }
            let called = span.in_scope(|| {
                if dep.domains.contains_key(head) {
                    anyhow::ensure!(args.is_empty(), "`{target}` takes no arguments");
                    dep.call_entry(&target).map_err(anyhow::Error::from)
                } else {
                    dep.call_function(head, function, &args.join(", "))
                        .map_err(anyhow::Error::from)
                }
            });
            drop(span);
            if let Some(t) = telemetry {
                t.shutdown();
            }
            println!("{}", called?);
        }
        Command::Serve { config, listen, .. } => {
            let config = Config::load(&config)?;
            let telemetry = start_log(
                cli.log_format.or(config.log_format).unwrap_or_default(),
                config.telemetry.as_ref(),
            )?;
            let listen = match passed {
                Some((fd, count)) => {
                    if count > 1 {
                        tracing::warn!(
                            passed = count,
                            "{count} sockets were passed: serving on the first (descriptor 3)"
                        );
                    }
                    let listener = lrpc_runtime::listener::adopt(fd)
                        .context("the socket the service manager passed")?;
                    Listen::Passed(listener)
                }
                None => Listen::Bind(
                    listen
                        .or_else(|| config.listen.clone())
                        .unwrap_or_else(|| "127.0.0.1:8080".into()),
                ),
            };
            let served = serve(config, listen);
            // The spans of the last requests go out before the process ends.
            if let Some(t) = telemetry {
                t.shutdown();
            }
            served?;
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

/// Where `lrpc serve` listens.
enum Listen {
    /// An address to bind (`--listen`, `[serve] listen`).
    Bind(String),
    /// A listening socket a service manager passed (socket activation).
    Passed(std::net::TcpListener),
}

/// Serves until a shutdown signal: fails the readiness probe, closes the connections with no
/// request in flight (new ones get the probes and 503), lets requests in flight finish for
/// at most the grace period, then terminates
/// the calls still running (their clients get 503) and exits, within the grace and one
/// second whatever the calls' deadlines.
fn serve(config: Config, listen: Listen) -> anyhow::Result<()> {
    // A bad certificate is reported before the domains start.
    let tls = match &config.tls {
        Some(files) => Some(lrpc_runtime::tls::Tls::load(files)?),
        None => None,
    };
    let dep = Arc::new(Deployment::start(config)?);
    let edge = Edge::start(dep.clone()).context("starting the route workers")?;
    let plugins = lrpc_runtime::reload::reloadable(&dep);
    let _watcher = lrpc_runtime::reload::watch(&plugins).context("watching plugin files")?;
    let _tls_watcher = tls
        .as_ref()
        .map(|t| t.watch())
        .transpose()
        .context("watching the TLS files")?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting tokio")?;
    let budget = dep.config.connections;
    let signalled = shutdown_control(&edge, budget.shutdown_grace)?;
    let ended = rt.block_on(async {
        let (listener, passed) = match listen {
            Listen::Bind(at) => {
                let l = tokio::net::TcpListener::bind(&at)
                    .await
                    .with_context(|| format!("listening on {at}"))?;
                (l, false)
            }
            Listen::Passed(l) => (tokio::net::TcpListener::from_std(l)?, true),
        };
        let addr = listener.local_addr()?;
        tracing::info!(
            %addr,
            routes = dep.config.routes.len(),
            tls = tls.is_some(),
            passed,
            "serving"
        );
        if let Some(t) = &tls {
            let hangups =
                lrpc_runtime::tls::reload_on_hangup(t.clone()).context("catching SIGHUP")?;
            tokio::spawn(hangups);
        }
        let transport = lrpc_runtime::tls::Transport {
            tls: tls.is_some(),
            loopback: addr.ip().to_canonical().is_loopback(),
        };
        // One write: a reader that takes the first line and closes the pipe must not make
        // a later line fail.
        let scheme = if tls.is_some() { "https" } else { "http" };
        let mut lines = format!("listening on {scheme}://{addr}\n");
        for e in dep.network.iter().flat_map(|n| n.listening()) {
            lines.push_str(&format!("exports on {e}\n"));
        }
        let mut out = std::io::stdout().lock();
        out.write_all(lines.as_bytes())?;
        out.flush()?;
        drop(out);
        let signalled = async {
            let _ = signalled.await;
        };
        let mut ended = false;
        // The listener's clock and the control thread's may differ a little: whichever
        // ends the grace first does (once).
        lrpc_runtime::listener::serve(
            listener,
            edge.router().layer(axum::Extension(transport)),
            budget,
            tls,
            signalled,
            || {
                end_grace(&edge);
                ended = true;
            },
        )
        .await;
        anyhow::Ok(ended)
    })?;
    let left = edge.shutdown_within(WORKER_WAIT);
    // The shutdown thread may have ended the grace first.
    match (ended || edge.grace_ended(), left) {
        (false, 0) => {
            tracing::info!("shut down: the requests in flight finished within the grace period");
        }
        (true, 0) => tracing::info!("shut down at the end of the grace period"),
        _ => tracing::warn!(
            workers = left,
            "shut down at the end of the grace period; workers still waiting outside guest \
             code were left to the end of the process"
        ),
    }
    // Reactor threads that ran a long request are not waited for either.
    rt.shutdown_timeout(RUNTIME_WAIT);
    Ok(())
}

/// How long the exit may take past the grace period, at most (see [`shutdown_control`]).
const EXIT_MARGIN: std::time::Duration = std::time::Duration::from_secs(1);
/// How long, after the grace period and the answers' window, the workers have to stop.
const WORKER_WAIT: std::time::Duration = std::time::Duration::from_millis(200);
/// How long the reactor's threads then have to stop.
const RUNTIME_WAIT: std::time::Duration = std::time::Duration::from_millis(100);

/// Starts the thread that keeps a shutdown's promises whatever the server's reactor is
/// doing (its threads may all be in guest code): it waits for SIGTERM or ctrl-c and says so
/// through the returned channel, ends the grace period `grace` later ([`Edge::end_grace`]:
/// the calls still running are terminated, which frees the threads they hold), and ends
/// the process [`EXIT_MARGIN`] after that if it has not ended by then.
fn shutdown_control(
    edge: &Edge,
    grace: std::time::Duration,
) -> anyhow::Result<tokio::sync::oneshot::Receiver<()>> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting tokio for the shutdown signal")?;
    // Registered before the server answers anything: a SIGTERM that comes early (a test, a
    // service manager stopping what it just started) must be caught, not kill the process.
    let signal = {
        let _entered = rt.enter();
        shutdown_signal().context("catching SIGTERM and ctrl-c")?
    };
    let (tx, rx) = tokio::sync::oneshot::channel();
    let edge = edge.clone();
    std::thread::Builder::new()
        .name("shutdown".into())
        .spawn(move || {
            rt.block_on(signal);
            // The readiness probe fails from now on.
            edge.drain();
            tracing::info!(
                grace_ms = grace.as_millis() as u64,
                "shutting down: requests in flight get the grace period"
            );
            let _ = tx.send(());
            std::thread::sleep(grace);
            end_grace(&edge);
            std::thread::sleep(EXIT_MARGIN);
            tracing::error!(
                "the shutdown overran its grace period by {EXIT_MARGIN:?}: exiting now"
            );
            std::process::exit(1);
        })
        .context("starting the shutdown thread")?;
    Ok(rx)
}

/// Ends the grace period on its own thread: a component plugin's termination waits for its
/// running code to stop, which the caller need not.
fn end_grace(edge: &Edge) {
    let edge = edge.clone();
    let spawned = std::thread::Builder::new()
        .name("end-grace".into())
        .spawn(move || edge.end_grace());
    if let Err(e) = spawned {
        tracing::error!("can not start a thread to end the grace period: {e}");
    }
}
