//! What a checked config holds: the records [`Config::load`] makes, read by the deployment
//! and the edge.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The most plugins in one route's chain. The driver that carries a request binds to each,
/// and every binding takes A-stack mappings of the kernel's quotas.
pub const MAX_CHAIN: usize = 16;

/// The most worker threads of all routes together.
pub const MAX_WORKERS: usize = 1024;

/// The most requests one instance of a `wasi:http` handler may serve (`reuse`).
pub const MAX_REUSE: usize = 1_000_000;

/// `[serve] recycle-above` when the config does not set it: a domain that grew past 16 MiB
/// for a peak is replaced after it.
pub const DEFAULT_RECYCLE_ABOVE: usize = 16 << 20;

/// The interface of HTTP plugins whose header values are strings (`wit/http.wit`): such a
/// plugin can not see a value that is not UTF-8, so a route with one answers 400 to it.
pub const PLUGIN_INTERFACE: &str = "lrpc:http/plugin";

/// The interface of HTTP plugins whose header values are bytes (`wit/http-bytes.wit`): they
/// see every byte of a request.
pub const PLUGIN_INTERFACE_BYTES: &str = "lrpc:http/plugin@0.2.0";

/// Whether `interface` is one of the HTTP plugin interfaces ([`PLUGIN_INTERFACE`] or
/// [`PLUGIN_INTERFACE_BYTES`]); a chain may mix both.
pub fn is_plugin_interface(interface: &str) -> bool {
    interface == PLUGIN_INTERFACE || interface == PLUGIN_INTERFACE_BYTES
}

/// The interface of an off-the-shelf `wasi:http` handler component, which may end a chain.
pub const HANDLER_INTERFACE: &str = "wasi:http/incoming-handler";

/// Where a domain's module comes from.
#[derive(Debug, Clone)]
pub enum Source {
    /// A guest embedded in the binary, by name.
    Builtin(String, &'static [u8]),
    /// A `.wasm` (or `.wat`) file.
    File(PathBuf),
}

impl Source {
    /// The module's bytes.
    pub fn load(&self) -> std::io::Result<Vec<u8>> {
        match self {
            Source::Builtin(_, b) => Ok(b.to_vec()),
            Source::File(p) => std::fs::read(p),
        }
    }
}

/// How a server runs calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServingMode {
    /// The caller's thread migrates into the server.
    Migrate,
    /// The server runs on a thread of its own.
    OwnThread,
}

/// One export of a domain.
#[derive(Debug, Clone)]
pub struct Export {
    /// The WIT interface.
    pub interface: String,
    /// The name clients bind under (plugins: chosen by the runtime).
    pub name: String,
    /// The server's presentation file.
    pub presentation: Option<PathBuf>,
    /// Serving mode.
    pub serving: ServingMode,
    /// Deadline of one call.
    pub deadline: Option<Duration>,
    /// Line of the export in the file.
    pub line: usize,
}

/// One binding a client domain makes.
#[derive(Debug, Clone)]
pub struct Bind {
    /// The WIT interface.
    pub interface: String,
    /// The server domain.
    pub server: String,
    /// The client's presentation file.
    pub presentation: Option<PathBuf>,
    /// Line in the file.
    pub line: usize,
}

/// One domain.
#[derive(Debug, Clone)]
pub struct DomainSpec {
    /// Its name.
    pub name: String,
    /// Its module.
    pub source: Source,
    /// Replicas (instances).
    pub replicas: usize,
    /// `isolation = "request"`: each request meets the plugin in its fresh state (a core
    /// plugin reset, a component plugin a fresh instance); `None` by default.
    pub isolation: lrpc_kernel::domain::Isolation,
    /// What it exports.
    pub exports: Vec<Export>,
    /// What it binds to.
    pub binds: Vec<Bind>,
    /// Its quotas, when `[domains.<name>.limits]` sets any (the kernel's defaults for the
    /// rest).
    pub quotas: Option<lrpc_kernel::Quotas>,
    /// Set when the binary is a component: its WASI grants, limits and fully trusted imports.
    pub component: Option<ComponentSpec>,
    /// An HTTP plugin's `body`: whether it gets the request body (`"whole"`, the default)
    /// or none (`"none"`: it may not rewrite it, and a chain of such plugins streams the
    /// body to its `wasi:http` handler).
    pub takes_body: bool,
    /// Line of its table in the file.
    pub line: usize,
}

/// What a component domain is given (see `lrpc_kernel::component::ComponentOptions`).
#[derive(Debug, Clone, Default)]
pub struct ComponentSpec {
    /// `[domains.<name>.wasi]`.
    pub wasi: lrpc_kernel::component::WasiGrants,
    /// `[domains.<name>.limits]`: memory, fuel, deadline.
    pub limits: lrpc_kernel::component::ComponentLimits,
    /// `trust_fully`: imports whose servers are composed into the domain.
    pub trust_fully: Vec<String>,
    /// `[domains.<name>.limits] reuse`: how many requests one instance of a `wasi:http`
    /// handler serves; `None`: one (a fresh instance per request).
    pub reuse: Option<usize>,
    /// `[domains.<name>.wasi] http`: the origins a `wasi:http` handler may send requests to.
    pub http: Vec<HttpOrigin>,
}

/// An origin a `wasi:http` handler may send requests to: a scheme, a host and a port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpOrigin {
    /// `https` (else `http`).
    pub https: bool,
    /// The host in lower case; an IPv6 address keeps its brackets.
    pub host: String,
    /// The port: the one written, else 80 for `http` and 443 for `https`.
    pub port: u16,
}

impl HttpOrigin {
    /// Parses `scheme://host[:port]` (a trailing `/` is allowed); the reason when `s` is not
    /// one.
    pub fn parse(s: &str) -> Result<HttpOrigin, String> {
        let Some((scheme, rest)) = s.split_once("://") else {
            return Err(format!(
                "`{s}`: an origin like `https://api.example.com` expected (scheme, host, port)"
            ));
        };
        let https = match scheme.to_ascii_lowercase().as_str() {
            "http" => false,
            "https" => true,
            other => {
                return Err(format!(
                    "`{s}`: scheme `{other}`: `http` or `https` expected"
                ));
            }
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains('*') {
            return Err(format!(
                "`{s}`: wildcards are not supported; list each origin"
            ));
        }
        if let Some(at) = rest.find(['/', '?', '#']) {
            return Err(format!(
                "`{s}`: an origin has no path or query: drop `{}`",
                &rest[at..]
            ));
        }
        if rest.contains('@') {
            return Err(format!("`{s}`: an origin has no user name"));
        }
        let authority: axum::http::uri::Authority = rest
            .parse()
            .ok()
            .filter(|a: &axum::http::uri::Authority| !a.host().is_empty() && !rest.ends_with(':'))
            .ok_or_else(|| format!("`{s}`: `{rest}` is not a host with an optional port"))?;
        let port = match port_of(&authority, https) {
            Some(0) => return Err(format!("`{s}`: port 0 is not a port")),
            Some(p) => p,
            None => return Err(format!("`{s}`: `{rest}` has a port past 65535")),
        };
        Ok(HttpOrigin {
            https,
            host: authority.host().to_ascii_lowercase(),
            port,
        })
    }

    /// Whether a request to `uri` goes to this origin: the same scheme and port, and the same
    /// host ignoring case. A URI with a user name matches no origin.
    pub fn matches(&self, uri: &axum::http::Uri) -> bool {
        let https = match uri.scheme_str() {
            Some(s) if s.eq_ignore_ascii_case("https") => true,
            Some(s) if s.eq_ignore_ascii_case("http") => false,
            _ => return false,
        };
        let Some(a) = uri.authority() else {
            return false;
        };
        let Some(port) = port_of(a, https) else {
            return false;
        };
        !a.as_str().contains('@')
            && https == self.https
            && port == self.port
            && a.host().eq_ignore_ascii_case(&self.host)
    }
}

/// The port `a` names (80 or 443 when none); `None` when it is not a 16-bit number.
fn port_of(a: &axum::http::uri::Authority, https: bool) -> Option<u16> {
    // `Authority::port` is `None` for a port past 65535, so read the text after the host.
    let after = a.as_str().rsplit('@').next().unwrap_or_default();
    match after.get(a.host().len()..).unwrap_or_default() {
        "" if https => Some(443),
        "" => Some(80),
        port => port.strip_prefix(':')?.parse().ok(),
    }
}

impl std::fmt::Display for HttpOrigin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scheme = if self.https { "https" } else { "http" };
        write!(f, "{scheme}://{}:{}", self.host, self.port)
    }
}

impl DomainSpec {
    /// Whether `[network]` serves its exports: a core domain that is not an HTTP plugin (a
    /// plugin's export changes with each generation).
    pub fn served_to_network(&self) -> bool {
        self.component.is_none() && self.plugin().is_none()
    }

    /// The domain's plugin export, if it is an HTTP plugin.
    pub fn plugin(&self) -> Option<&Export> {
        self.exports
            .iter()
            .find(|e| is_plugin_interface(&e.interface))
    }

    /// Whether the domain is a `wasi:http/incoming-handler` component (served by the edge
    /// with wasmtime-wasi-http in a Store of its own, at the end of a chain).
    pub fn http_handler(&self) -> bool {
        self.component.is_some()
            && self
                .exports
                .iter()
                .any(|e| e.interface == HANDLER_INTERFACE)
    }
}

/// One HTTP route.
#[derive(Debug, Clone)]
pub struct Route {
    /// Path prefix (`/` matches everything).
    pub prefix: String,
    /// Plugin domains, first first.
    pub chain: Vec<String>,
    /// Threads (each with its own driver domain) serving the route when its requests do not
    /// run on the reactor's threads: once they average over 1 ms, or when the chain ends in
    /// a `wasi:http` handler (see `crate::edge`).
    pub workers: usize,
    /// Largest request body the route takes, in bytes (`[serve] max-body` unless set).
    pub max_body: usize,
    /// Requests of the route served at once; more are answered 503 at once, so that one
    /// route's load can not hold the plugins it shares with others.
    pub max_in_flight: usize,
    /// Requests one instance of the route's `wasi:http` handler serves on this route; `None`:
    /// the handler's own `reuse`.
    pub reuse: Option<usize>,
    /// Line in the file.
    pub line: usize,
}

/// An export of another kernel that the deployment's clients bind to (`[remotes.NAME]`).
#[derive(Debug, Clone)]
pub struct RemoteSpec {
    /// The name clients' binds give as `server`.
    pub name: String,
    /// The WIT interface; the export is registered (and bound) under this name.
    pub interface: String,
    /// Where the other kernel serves it.
    pub endpoint: lrpc_remote::Endpoint,
    /// Per-call deadline, network included; `None`: the remote binding's default.
    pub deadline: Option<Duration>,
    /// TLS to a `tcp:` endpoint (`tls = { ca, cert, key, server-name }`), its files loaded.
    pub tls: Option<Arc<lrpc_remote::ClientTls>>,
    /// Line in the file.
    pub line: usize,
}

/// This kernel's exports served to other kernels over wRPC (`[network]`).
#[derive(Debug, Clone)]
pub struct NetworkSpec {
    /// Addresses to listen on.
    pub listen: Vec<lrpc_remote::Endpoint>,
    /// Those of them reachable from other machines that the config lets serve in clear
    /// (`insecure = true`, no `tls`): the config refuses a TCP address that is not loopback
    /// otherwise.
    pub insecure: Vec<lrpc_remote::Endpoint>,
    /// TLS on every `tcp:` address (`tls = { cert, key, client-ca }`), its files loaded.
    pub tls: Option<Arc<lrpc_remote::ServerTls>>,
    /// Export name -> the names a caller's certificate must carry one of (`allow`).
    pub allow: BTreeMap<String, Vec<lrpc_remote::Principal>>,
    /// Export names served; `None`: every export of the core domains that are not HTTP
    /// plugins.
    pub exports: Option<Vec<String>>,
    /// Threads calling into the kernel for remote callers.
    pub workers: usize,
    /// The queue group joined on `nats://` addresses: the kernels in one group share the
    /// calls.
    pub group: String,
    /// Line in the file.
    pub line: usize,
}

/// The secret that `POST /admin/...` requests carry as `authorization: Bearer TOKEN`. Its
/// `Debug` form does not show it.
#[derive(Clone, PartialEq, Eq)]
pub struct AdminToken(pub(super) String);

impl AdminToken {
    /// The shortest token accepted.
    pub const MIN_LEN: usize = 16;

    /// Whether `authorization` (a request's header value) carries this token. The bytes are
    /// compared in full whatever they hold, so the time taken does not tell how much of a
    /// guess was right.
    pub fn accepts(&self, authorization: Option<&[u8]>) -> bool {
        let Some(given) = authorization.and_then(|a| a.strip_prefix(b"Bearer ")) else {
            return false;
        };
        let want = self.0.as_bytes();
        let mut diff = u8::from(given.len() != want.len());
        for (i, w) in want.iter().enumerate() {
            diff |= w ^ given.get(i).copied().unwrap_or(!w);
        }
        diff == 0
    }
}

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminToken(…)")
    }
}

/// The paths the edge server answers its probes on, before any route sees the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probes {
    /// Answers 200 while the process serves (`[serve] health-path`).
    pub health: String,
    /// Answers 200 while the server is ready for traffic, 503 from a shutdown signal on
    /// (`[serve] ready-path`).
    pub ready: String,
}

impl Default for Probes {
    fn default() -> Probes {
        Probes {
            health: "/healthz".into(),
            ready: "/readyz".into(),
        }
    }
}

/// `[telemetry]`: where and how spans are exported over OTLP (see [`crate::telemetry`]).
/// The standard `OTEL_*` variables override each of these.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TelemetrySpec {
    /// The collector's base URL (`http://HOST:4318` for HTTP, `http://HOST:4317` for gRPC).
    pub endpoint: Option<String>,
    /// How spans travel to it.
    pub protocol: Option<TelemetryProtocol>,
    /// The service name spans carry (default `lrpc`).
    pub service_name: Option<String>,
    /// The share of traces started here that are kept, 0 to 1 (a sampled parent's
    /// decision is followed); default 1.
    pub sample_ratio: Option<f64>,
}

/// The OTLP protocol spans are exported with.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum TelemetryProtocol {
    /// Protobuf over HTTP (`http/protobuf`), the default.
    #[default]
    HttpProtobuf,
    /// gRPC (`grpc`).
    Grpc,
}

impl std::str::FromStr for TelemetryProtocol {
    type Err = String;

    fn from_str(s: &str) -> Result<TelemetryProtocol, String> {
        match s {
            "http/protobuf" => Ok(TelemetryProtocol::HttpProtobuf),
            "grpc" => Ok(TelemetryProtocol::Grpc),
            _ => Err(format!(
                "`{s}` is not an OTLP protocol this build speaks: `http/protobuf` or `grpc`"
            )),
        }
    }
}

/// How the server writes its log lines.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines (the default).
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<LogFormat, String> {
        match s {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            _ => Err(format!("`{s}` is not a log format: `text` or `json`")),
        }
    }
}

/// A folder of WIT packages named in `[kernel] wit`.
#[derive(Debug, Clone)]
pub struct WitFolder {
    /// The folder.
    pub path: PathBuf,
    /// The config's line that names it.
    pub line: usize,
}

/// A checked deployment config.
#[derive(Debug, Clone)]
pub struct Config {
    /// The file it came from.
    pub file: PathBuf,
    /// Default call deadline.
    pub deadline: Option<Duration>,
    /// Folders of WIT packages the kernel loads beside its embedded WIT (`[kernel] wit`).
    pub wit: Vec<WitFolder>,
    /// Where compiled code is kept across process starts (`[kernel] cache-dir`).
    pub cache: CompileCache,
    /// Domains, by name.
    pub domains: BTreeMap<String, DomainSpec>,
    /// `domain.export` that `lrpc run` calls.
    pub entry: Option<String>,
    /// Address to serve HTTP on.
    pub listen: Option<String>,
    /// The token `/admin/...` requests must carry; `None` when the admin endpoint is off
    /// (the default).
    pub admin: Option<AdminToken>,
    /// The paths of the liveness and readiness probes (`[serve] health-path`, `ready-path`).
    pub probes: Probes,
    /// How `lrpc serve` writes its log (`[serve] log-format`); `--log-format` overrides it.
    pub log_format: Option<LogFormat>,
    /// Largest request body accepted, in bytes.
    pub max_body: usize,
    /// The budgets of the edge server's connections.
    pub connections: crate::listener::Connections,
    /// The certificate and key the edge server serves TLS with; `None`: plain HTTP.
    pub tls: Option<crate::tls::TlsFiles>,
    /// `[serve] recycle-above`: after a request, a plugin domain or an edge driver whose
    /// linear memory grew past this many bytes is replaced by a fresh one (`None`: never).
    pub recycle_above: Option<usize>,
    /// HTTP routes.
    pub routes: Vec<Route>,
    /// Exports of other kernels the clients bind to, by name.
    pub remotes: BTreeMap<String, RemoteSpec>,
    /// Exports served to other kernels.
    pub network: Option<NetworkSpec>,
    /// `[telemetry]`: trace export, when the config has the table.
    pub telemetry: Option<TelemetrySpec>,
}

/// Where compiled code is kept across starts of the process (`[kernel] cache-dir`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompileCache {
    /// No cache: every start compiles every module (`cache-dir = false`).
    Off,
    /// The per-user folder, as wasmtime's own cache: `$XDG_CACHE_HOME/lrpc`, else
    /// `$HOME/.cache/lrpc`. When it can not be made, the server warns and starts without.
    PerUser(PathBuf),
    /// A folder the config names: a start fails when it can not be used.
    Folder(PathBuf),
}

impl CompileCache {
    /// The per-user cache folder, or [`CompileCache::Off`] where there is no home to put it.
    pub fn per_user() -> CompileCache {
        let base = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .or_else(|| {
                std::env::var_os("HOME")
                    .map(PathBuf::from)
                    .filter(|p| p.is_absolute())
                    .map(|h| h.join(".cache"))
            });
        match base {
            Some(b) => CompileCache::PerUser(b.join("lrpc")),
            None => CompileCache::Off,
        }
    }
}
