//! The deployment config: a TOML file naming the domains, what each exports, which
//! interfaces clients bind to, limits, and the HTTP routes of the edge server.
//!
//! ```toml
//! [kernel]
//! deadline = "2s"                 # default deadline of a call into a domain
//! wit = ["wit"]                   # WIT folders beside the embedded WIT (components' interfaces)
//!
//! [domains.store]
//! guest = "kv-server"             # a built-in guest (`lrpc_artifacts::BY_NAME`) …
//! # wasm = "store.wasm"           # … or a core module, relative to this file
//! replicas = 1
//! exports = [{ interface = "lrpc:kv/store", deadline = "500ms" }]
//!
//! [domains.client]
//! guest = "kv-client"
//! binds = [{ interface = "lrpc:kv/store", server = "store" }]
//!
//! [domains.probe]
//! guest = "comp-probe"            # a component (told from the binary; `kind` may say so)
//! kind = "component"
//! exports = [{ interface = "lrpc:comp/probe" }]
//! [domains.probe.wasi]            # WASI is granted per component domain, nothing by default
//! env = { GREETING = "hi" }
//! args = ["probe", "-v"]
//! preopens = [{ host = "data", guest = "/data", writable = false }]
//! stdout = "inherit"              # "discard" (default), "inherit" or "capture"
//! network = ["127.0.0.1:6379"]    # addresses it may connect to; none by default
//! [domains.probe.limits]
//! memory = "64MiB"                # components: memory, fuel, deadline
//! fuel = 100000000
//!
//! [run]
//! entry = "client.selftest"       # what `lrpc run` calls
//!
//! [serve]
//! listen = "127.0.0.1:8080"
//! # tls-cert = "cert.pem"         # HTTPS: PEM files, reloaded when they change or on SIGHUP
//! # tls-key = "key.pem"
//! recycle-above = "16MiB"         # a plugin or edge driver grown past it is replaced fresh
//!
//! [domains.stamp]
//! guest = "comp-http-stamp"      # an HTTP plugin may be a component too
//! exports = [{ interface = "lrpc:http/plugin@0.2.0" }]   # header values as bytes; the
//!                                 # older "lrpc:http/plugin" has them as strings
//!
//! [domains.handler]
//! wasm = "handler.wasm"           # a wasi:http/proxy component, served with wasmtime-wasi-http
//! exports = [{ interface = "wasi:http/incoming-handler" }]
//! [domains.handler.limits]
//! deadline = "200ms"              # memory, deadline and reuse (requests per instance, 1 by
//!                                 # default); WASI from [domains.handler.wasi]
//!
//! [[routes]]
//! prefix = "/api"
//! chain = ["auth", "rewrite", "hello"]   # domains exporting lrpc:http/plugin (either) …
//!
//! [[routes]]
//! prefix = "/app"
//! chain = ["auth", "handler"]     # … the last one may be a wasi:http handler
//!
//! [remotes.kv]                    # an export of another kernel, bound like a local one
//! interface = "lrpc:kv/store"     # (clients: binds = [{ interface = "lrpc:kv/store", server = "kv" }])
//! endpoint = "tcp:10.0.0.2:7000"  # or "unix:/run/kv.sock", "nats://HOST:4222/PREFIX"
//! deadline = "2s"                 # per call, network included
//! tls = { ca = "ca.pem", cert = "client.pem", key = "client.key" }  # tcp: over TLS
//! # nkey-seed = "kv.nk"           # nats:// only: a credential for the NATS server (or `creds`,
//!                                 # `user-env` + `password-env`, `token-env`), and
//!                                 # tls = { ca = "ca.pem" }; the same keys in a listen table
//!
//! [network]                       # this kernel's exports, served to other kernels over wRPC
//! listen = ["tcp:127.0.0.1:7000"] # or "unix:PATH", or "nats://HOST:4222[/PREFIX]" (behind a
//! group = "kv"                    # NATS server, in this queue group: kernels share calls);
//!                                 # other hosts: TLS, or { address = "…", insecure = true }
//! tls = { cert = "server.pem", key = "server.key", client-ca = "ca.pem" }  # every tcp: address
//! exports = ["lrpc:kv/store"]     # export names; when left out, every export of a core
//!                                 # domain that is not an HTTP plugin; an entry
//!                                 # { name = "…", allow = ["CN=billing", "dns:…", "uri:…"] }
//!                                 # serves only callers whose certificate carries a name listed
//! workers = 2                     # threads calling into the kernel for remote callers
//! ```
//!
//! Every mistake is reported as `file:line: reason`, the line found from the span toml
//! keeps for each value.
//!
//! The files, bottom to top (each imports only files listed before it):
//! - `text.rs`: sizes, rates and durations as text; [`ConfigError`] and the context each
//!   parser reports through.
//! - `spec.rs`: the checked records ([`Config`], [`DomainSpec`], [`Route`], …) and limits.
//! - `raw.rs`: the file as written, every value with its span.
//! - `kernel.rs`, `serve.rs`, `telemetry.rs`: the `[kernel]`, `[serve]` and `[telemetry]`
//!   tables.
//! - `network.rs`: `[remotes.NAME]` and `[network]`, TLS and NATS credentials.
//! - `domains.rs`: `[domains.NAME]`, core and component, with their WASI grants.
//! - `binds.rs`: what ties the domains together (binds, cycles, export names).
//! - `routes.rs`: `[[routes]]` and their chains.
//! - `mod.rs`: [`Config::parse`], each table by its file, and `[run]`.

mod binds;
mod domains;
mod kernel;
mod network;
mod raw;
mod routes;
mod serve;
mod spec;
mod telemetry;
mod text;

use binds::*;
use domains::*;
use kernel::*;
use network::*;
use raw::*;
use routes::*;
use serve::*;
pub use spec::*;
use std::collections::BTreeMap;
use std::path::Path;
use telemetry::*;
use text::Ctx;
pub use text::{ConfigError, MAX_DEADLINE, parse_duration, parse_rate, parse_size};

impl Config {
    /// Reads and checks a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let file = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|e| ConfigError {
            file: file.clone(),
            line: 0,
            reason: e.to_string(),
        })?;
        let text = String::from_utf8(bytes).map_err(|e| {
            let at = e.utf8_error().valid_up_to();
            let line = e.as_bytes()[..at].iter().filter(|&&b| b == b'\n').count() + 1;
            ConfigError {
                file,
                line,
                reason: "the config is not UTF-8 text".into(),
            }
        })?;
        Config::parse(path, &text)
    }

    /// Checks `text` as the config file `path` (relative paths in it are relative to the
    /// file's directory): each table by its own file, then what ties them together.
    pub fn parse(path: &Path, text: &str) -> Result<Config, ConfigError> {
        let file = path.display().to_string();
        let dir = path.parent().unwrap_or(Path::new("."));
        let cx = Ctx {
            file: &file,
            text,
            dir,
        };
        let raw: RawConfig = toml::from_str(text).map_err(|e| {
            let at = e.span().map_or(0, |s| s.start);
            cx.err_at(at, e.message().trim_end().to_string())
        })?;
        let kernel = kernel(&cx, &raw.kernel)?;
        let mut domains = BTreeMap::new();
        for (name, d) in &raw.domains {
            domains.insert(name.clone(), domain(&cx, name, d)?);
        }
        let mut remotes = BTreeMap::new();
        for (name, r) in &raw.remotes {
            if domains.contains_key(name) {
                return Err(cx.err(r, format!("`{name}` names both a domain and a remote")));
            }
            remotes.insert(name.clone(), remote(&cx, name, r)?);
        }
        binds(&cx, &raw.domains, &domains, &remotes)?;
        no_component_cycle(&cx, &raw.domains, &domains)?;
        one_server_per_export(&cx, &domains, &remotes)?;
        let network = match &raw.network {
            Some(n) => Some(network(&cx, n, &domains)?),
            None => None,
        };
        let entry = match &raw.run.entry {
            Some(e) => Some(run_entry(&cx, e, &domains)?),
            None => None,
        };
        let telemetry = match &raw.telemetry {
            Some(t) => Some(telemetry(&cx, t.get_ref())?),
            None => None,
        };
        let serve = serve(&cx, &raw.serve)?;
        let routes = routes(&cx, &raw.routes, &domains, serve.max_body)?;
        Ok(Config {
            file: path.to_path_buf(),
            deadline: kernel.deadline,
            wit: kernel.wit,
            cache: kernel.cache,
            domains,
            entry,
            listen: serve.listen,
            admin: serve.admin,
            probes: serve.probes,
            log_format: serve.log_format,
            max_body: serve.max_body,
            connections: serve.connections,
            tls: serve.tls,
            recycle_above: serve.recycle_above,
            routes,
            remotes,
            network,
            telemetry,
        })
    }
}

/// `[run] entry`: `domain.export`, of a domain the config has.
fn run_entry(
    cx: &Ctx<'_>,
    e: &toml::Spanned<String>,
    domains: &BTreeMap<String, DomainSpec>,
) -> Result<String, ConfigError> {
    let (d, _) = e
        .get_ref()
        .split_once('.')
        .ok_or_else(|| cx.err(e, "the entry must be `domain.export`"))?;
    if !domains.contains_key(d) {
        return Err(cx.err(e, format!("no domain `{d}`")));
    }
    Ok(e.get_ref().clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn err(text: &str) -> String {
        Config::parse(Path::new("app.toml"), text)
            .expect_err("the config is wrong")
            .to_string()
    }

    #[test]
    fn the_telemetry_table_is_checked_with_its_lines() {
        let c = Config::parse(Path::new("app.toml"), "").expect("valid");
        assert_eq!(c.telemetry, None);
        let c = Config::parse(
            Path::new("app.toml"),
            "[telemetry]\nendpoint = \"http://collector:4317\"\nprotocol = \"grpc\"\n\
             service-name = \"edge\"\nsample-ratio = 0.5\n",
        )
        .expect("valid");
        assert_eq!(
            c.telemetry,
            Some(TelemetrySpec {
                endpoint: Some("http://collector:4317".into()),
                protocol: Some(TelemetryProtocol::Grpc),
                service_name: Some("edge".into()),
                sample_ratio: Some(0.5),
            })
        );
        assert_eq!(
            err("[telemetry]\nendpoint = \"collector:4318\"\n"),
            "app.toml:2: `collector:4318`: an OTLP endpoint is a URL like \"http://collector:4318\""
        );
        assert!(
            err("[telemetry]\nendpoint = \"https://collector:4318\"\n").starts_with(
                "app.toml:2: `https://collector:4318`: the OTLP exporter speaks plain HTTP only"
            )
        );
        assert_eq!(
            err("[telemetry]\n\nprotocol = \"http/json\"\n"),
            "app.toml:3: `http/json` is not an OTLP protocol this build speaks: `http/protobuf` \
             or `grpc`"
        );
        assert_eq!(
            err("[telemetry]\nsample-ratio = 1.5\n"),
            "app.toml:2: `sample-ratio` is from 0 (none) to 1 (every trace)"
        );
        assert!(err("[telemetry]\nsampler = 1\n").contains("unknown field `sampler`"));
    }

    #[test]
    fn deadlines_and_replicas_have_the_bounds_the_kernel_keeps() {
        let d = |v: &str| format!("[kernel]\ndeadline = \"{v}\"\n");
        for bad in ["9999999999999999s", "61m", "0s", "0ms"] {
            assert_eq!(
                err(&d(bad)),
                format!("app.toml:2: `{bad}`: a deadline is above zero and at most 3600s")
            );
        }
        for good in ["60m", "1us", "250ms"] {
            Config::parse(Path::new("app.toml"), &d(good)).expect(good);
        }
        let long = "9".repeat(10_000);
        let e = err(&d(&format!("{long}x")));
        assert!(
            e.len() < 300,
            "the value is echoed whole: {} bytes",
            e.len()
        );
        let r = |n: u32| format!("[domains.a]\nguest = \"kv-server\"\nreplicas = {n}\n");
        Config::parse(Path::new("app.toml"), &r(64)).expect("64 replicas");
        assert_eq!(
            err(&r(65)),
            "app.toml:3: replicas must be between 1 and 64, not 65"
        );
    }

    #[test]
    fn recycle_above_is_a_size_or_false() {
        let c = |v: &str| {
            Config::parse(
                Path::new("app.toml"),
                &format!("[serve]\nrecycle-above = {v}\n"),
            )
            .map(|c| c.recycle_above)
        };
        let none = Config::parse(Path::new("app.toml"), "").expect("empty");
        assert_eq!(none.recycle_above, Some(DEFAULT_RECYCLE_ABOVE));
        assert_eq!(c("\"32MiB\"").expect("32MiB"), Some(32 << 20));
        assert_eq!(c("1048576").expect("bytes"), Some(1 << 20));
        assert_eq!(c("false").expect("off"), None);
        for bad in ["true", "0", "\"lots\"", "-1"] {
            let e = err(&format!("[serve]\nrecycle-above = {bad}\n"));
            assert!(
                e.starts_with("app.toml:2: recycle-above is a positive size"),
                "{e}"
            );
        }
    }

    #[test]
    fn routes_are_distinct_and_bounded() {
        let hello = "[domains.h]\nguest = \"http-hello\"\n\
                     exports = [{ interface = \"lrpc:http/plugin\" }]\n";
        let route = |prefix: &str, chain: usize, workers: usize| {
            let chain = vec!["\"h\""; chain].join(", ");
            format!("[[routes]]\nprefix = \"{prefix}\"\nchain = [{chain}]\nworkers = {workers}\n")
        };
        assert_eq!(
            err(&format!(
                "{hello}{}{}",
                route("/a", 1, 1),
                route("/a", 1, 1)
            )),
            "app.toml:9: the prefix is the route's of line 4 already"
        );
        Config::parse(
            Path::new("app.toml"),
            &format!("{hello}{}", route("/a", 16, 1)),
        )
        .expect("16 plugins");
        assert_eq!(
            err(&format!("{hello}{}", route("/a", 17, 1))),
            "app.toml:6: a chain has at most 16 plugins"
        );
        let many: String = (0..5).map(|i| route(&format!("/r{i}"), 1, 256)).collect();
        assert_eq!(
            err(&format!("{hello}{many}")),
            "app.toml:20: the routes have more than 1024 workers in all"
        );
    }

    #[test]
    fn a_config_that_is_not_utf8_is_reported_at_its_line() {
        let file = std::env::temp_dir().join(format!("lrpc-utf8-{}.toml", std::process::id()));
        std::fs::write(&file, b"[kernel]\n\ndeadline = \"2s\xff\"\n").expect("write");
        let e = Config::load(&file).expect_err("not UTF-8");
        let _ = std::fs::remove_file(&file);
        assert_eq!(
            (e.line, e.reason.as_str()),
            (3, "the config is not UTF-8 text")
        );
    }

    #[test]
    fn long_values_are_not_echoed_whole() {
        let name = "x".repeat(10 << 20);
        let e = err(&format!("[domains.a]\nguest = \"{name}\"\n"));
        assert!(e.len() < 400, "{} bytes", e.len());
        assert!(e.starts_with("app.toml:2: "), "{e}");
    }

    #[test]
    fn the_minimum_body_rate_is_on_by_default_and_can_be_turned_off() {
        use crate::body_rate::MinBodyRate;
        let parse = |extra: &str| {
            Config::parse(Path::new("app.toml"), &format!("[serve]\n{extra}\n"))
                .expect("valid")
                .connections
                .min_body_rate
        };
        assert_eq!(parse(""), Some(MinBodyRate::default()));
        assert_eq!(
            parse("min-body-rate = \"1KiB/s\"\nmin-body-rate-grace = \"1s\""),
            Some(MinBodyRate {
                bytes_per_second: 1024,
                grace: Duration::from_secs(1),
            })
        );
        assert_eq!(
            parse("min-body-rate = 100").map(|m| m.bytes_per_second),
            Some(100)
        );
        assert_eq!(parse("min-body-rate = 0"), None);
        assert_eq!(parse("min-body-rate = \"0\""), None);
        assert_eq!(parse("min-body-rate = false"), None);
        assert_eq!(parse("min-body-rate = true"), Some(MinBodyRate::default()));
        assert!(
            err("[serve]\nmin-body-rate = \"fast\"\n")
                .starts_with("app.toml:2: min-body-rate is a rate like"),
        );
        assert!(err("[serve]\nmin-body-rate = -1\n").starts_with("app.toml:2: "));
        assert!(
            err("[serve]\n\nmin-body-rate-grace = \"soon\"\n")
                .starts_with("app.toml:3: `soon` is not a duration")
        );
    }

    #[test]
    fn probe_paths_and_the_log_format_have_defaults_and_are_checked() {
        let parse = |extra: &str| {
            Config::parse(Path::new("app.toml"), &format!("[serve]\n{extra}\n")).expect("valid")
        };
        let c = parse("");
        assert_eq!(c.probes, Probes::default());
        assert_eq!(c.probes.health, "/healthz");
        assert_eq!(c.probes.ready, "/readyz");
        assert_eq!(c.log_format, None);
        let c = parse("health-path = \"/live\"\nready-path = \"/-/ready_1.x~\"");
        assert_eq!(
            (c.probes.health.as_str(), c.probes.ready.as_str()),
            ("/live", "/-/ready_1.x~")
        );
        assert_eq!(
            parse("log-format = \"json\"").log_format,
            Some(LogFormat::Json)
        );
        assert_eq!(
            parse("log-format = \"text\"").log_format,
            Some(LogFormat::Text)
        );
        for bad in [
            "health-path = \"live\"",
            "health-path = \"/{x}\"",
            "health-path = \"/a?b\"",
            "health-path = \"/a b\"",
            "ready-path = \"/metrics\"",
            "ready-path = \"/admin/reload/x\"",
            "ready-path = \"/healthz\"",
            "health-path = \"/x\"\nready-path = \"/x\"",
            "log-format = \"yaml\"",
        ] {
            let e = err(&format!("[serve]\n{bad}\n"));
            assert!(
                e.starts_with("app.toml:2: ") || e.starts_with("app.toml:3: "),
                "{bad}: {e}"
            );
        }
        let long = format!("health-path = \"/{}\"", "x".repeat(300));
        assert!(err(&format!("[serve]\n{long}\n")).starts_with("app.toml:2: "));
    }

    #[test]
    fn the_admin_endpoint_is_off_by_default_and_needs_a_token() {
        let serve = |extra: &str| format!("[serve]\n{extra}\n");
        let c = Config::parse(Path::new("app.toml"), "").expect("an empty config");
        assert!(c.admin.is_none());
        let c = Config::parse(Path::new("app.toml"), &serve("admin = false")).expect("valid");
        assert!(c.admin.is_none());
        let c = Config::parse(
            Path::new("app.toml"),
            &serve("admin = true\nadmin-token = \"0123456789abcdef\""),
        )
        .expect("valid");
        let t = c.admin.expect("the admin endpoint is on");
        assert!(t.accepts(Some(b"Bearer 0123456789abcdef")));
        assert!(!t.accepts(Some(b"Bearer 0123456789abcdeg")));
        assert!(!t.accepts(Some(b"Bearer 0123456789abcdef0")));
        assert!(!t.accepts(Some(b"0123456789abcdef")));
        assert!(!t.accepts(None));
        assert!(!format!("{t:?}").contains("0123"));

        assert_eq!(
            err(&serve("admin = true")),
            "app.toml:2: `admin = true` needs a token: `admin-token-env = \"NAME\"` (an \
             environment variable holding it) or `admin-token`"
        );
        assert_eq!(
            err(&serve("admin = true\nadmin-token = \"short\"")),
            "app.toml:3: an admin token has at least 16 characters and no spaces"
        );
        assert_eq!(
            err(&serve("admin-token = \"0123456789abcdef\"")),
            "app.toml:2: `admin-token` is used only with `admin = true`"
        );
        assert_eq!(
            err(&serve(
                "admin = true\nadmin-token-env = \"LRPC_TEST_NO_SUCH_VARIABLE_0123\""
            )),
            "app.toml:3: the environment variable `LRPC_TEST_NO_SUCH_VARIABLE_0123` is not set"
        );
        // A variable the test runner sets (cargo gives every test its package's folder).
        let folder = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it");
        if folder.len() >= AdminToken::MIN_LEN && !folder.contains(char::is_whitespace) {
            let c = Config::parse(
                Path::new("app.toml"),
                &serve("admin = true\nadmin-token-env = \"CARGO_MANIFEST_DIR\""),
            )
            .expect("valid");
            let header = format!("Bearer {folder}");
            assert!(c.admin.expect("on").accepts(Some(header.as_bytes())));
        }
    }

    #[test]
    fn component_domains_take_wasi_and_component_limits() {
        let c = Config::parse(
            Path::new("app.toml"),
            "[domains.p]\nguest = \"comp-probe\"\nexports = [{ interface = \"lrpc:comp/probe\" }]\n\
             [domains.p.wasi]\nenv = { A = \"1\" }\nargs = [\"x\"]\nstdout = \"capture\"\n\
             network = [\"127.0.0.1:80\"]\n[domains.p.limits]\nmemory = \"8MiB\"\nfuel = 1000\n",
        )
        .expect("a valid config");
        let p = &c.domains["p"];
        let spec = p.component.as_ref().expect("a component");
        assert_eq!(spec.wasi.env, [("A".to_string(), "1".to_string())]);
        assert_eq!(spec.wasi.args, ["x"]);
        assert_eq!(spec.wasi.stdout, lrpc_kernel::component::Stdio::Capture);
        assert_eq!(spec.wasi.network.len(), 1);
        assert_eq!(spec.limits.memory, Some(8 << 20));
        assert_eq!(spec.limits.fuel, Some(1000));
        assert!(
            c.domains
                .values()
                .all(|d| d.name != "p" || d.quotas.is_none())
        );
    }

    #[test]
    fn component_mistakes_name_their_line() {
        assert_eq!(
            err("[domains.a]\nguest = \"kv-server\"\n[domains.a.wasi]\nargs = []\n"),
            "app.toml:3: WASI grants are for component domains; `a` is a core module"
        );
        assert_eq!(
            err("[domains.a]\nguest = \"kv-server\"\nkind = \"component\"\n"),
            "app.toml:3: the binary is a core module, not a component"
        );
        assert_eq!(
            err("[domains.a]\nguest = \"comp-probe\"\nkind = \"module\"\n"),
            "app.toml:3: the binary is a component, not a core module"
        );
        assert!(
            err("[domains.a]\nguest = \"comp-probe\"\n[domains.a.limits]\nastack_bytes = 4096\n")
                .starts_with("app.toml:4: `astack_bytes` limits core-module domains")
        );
        assert!(
            err("[domains.a]\nguest = \"comp-probe\"\n[domains.a.wasi]\nstdout = \"file\"\n")
                .starts_with("app.toml:4: `file`: `discard`, `inherit` or `capture` expected")
        );
        assert!(
            err(
                "[domains.a]\nguest = \"comp-probe\"\n[domains.a.wasi]\nnetwork = [\"somewhere\"]\n"
            )
            .starts_with("app.toml:4: `somewhere`: an `ip:port` address expected")
        );
        assert!(
            err("[domains.a]\nguest = \"comp-probe\"\nreplicas = 2\n")
                .starts_with("app.toml:3: a component domain is one instance")
        );
    }

    #[test]
    fn isolation_is_for_plugins_of_both_kinds() {
        let plugin = |v: &str| {
            format!(
                "[domains.p]\nguest = \"http-leak\"\nisolation = \"{v}\"\n\
                 exports = [{{ interface = \"lrpc:http/plugin\" }}]\n"
            )
        };
        let c = Config::parse(Path::new("app.toml"), &plugin("request")).expect("valid");
        assert_eq!(
            c.domains["p"].isolation,
            lrpc_kernel::domain::Isolation::Request
        );
        let c = Config::parse(Path::new("app.toml"), &plugin("none")).expect("valid");
        assert_eq!(
            c.domains["p"].isolation,
            lrpc_kernel::domain::Isolation::None
        );
        assert!(
            err(&plugin("call")).starts_with("app.toml:3: isolation `call`: `none` or `request`")
        );
        assert!(
            err("[domains.a]\nguest = \"kv-server\"\nisolation = \"request\"\n")
                .starts_with("app.toml:3: `isolation = \"request\"` is for HTTP plugin domains")
        );
        assert!(
            err("[domains.a]\nguest = \"comp-probe\"\nisolation = \"request\"\n")
                .starts_with("app.toml:3: `isolation = \"request\"` is for HTTP plugin domains")
        );
        let component = "[domains.p]\nguest = \"comp-http-stamp\"\nisolation = \"request\"\n\
                         exports = [{ interface = \"lrpc:http/plugin@0.2.0\" }]\n";
        let c = Config::parse(Path::new("app.toml"), component).expect("valid");
        assert_eq!(
            c.domains["p"].isolation,
            lrpc_kernel::domain::Isolation::Request
        );
    }

    #[test]
    fn a_wasi_http_handler_ends_a_chain() {
        let plugin = "[domains.p]\nguest = \"http-rewrite\"\n\
                      exports = [{ interface = \"lrpc:http/plugin\" }]\n";
        let handler = "[domains.h]\nguest = \"http-wasi-hello\"\n\
                       exports = [{ interface = \"wasi:http/incoming-handler\" }]\n";
        let c = Config::parse(
            Path::new("app.toml"),
            &format!("{plugin}{handler}[[routes]]\nprefix = \"/\"\nchain = [\"p\", \"h\"]\n"),
        )
        .expect("valid");
        assert!(c.domains["h"].http_handler());
        assert!(!c.domains["p"].http_handler());
        assert_eq!(c.domains["h"].exports[0].name, "wasi-http/h");
        assert_eq!(c.routes[0].chain, ["p", "h"]);
        assert_eq!(
            err(&format!(
                "{plugin}{handler}[[routes]]\nprefix = \"/\"\nchain = [\"h\", \"p\"]\n"
            )),
            "app.toml:9: `h` is a `wasi:http/incoming-handler` component: it answers every \
             request, so it goes last in a chain"
        );
        assert!(
            err(&format!("{handler}[domains.h.limits]\nfuel = 100\n"))
                .starts_with("app.toml:5: a `wasi:http/incoming-handler` component is limited")
        );
        assert!(
            err(&format!(
                "{handler}binds = [{{ interface = \"lrpc:kv/store\", server = \"h\" }}]\n"
            ))
            .starts_with("app.toml:4: a `wasi:http/incoming-handler` component binds nothing")
        );
        assert!(
            err("[domains.h]\nguest = \"http-wasi-hello\"\nexports = [\
                 { interface = \"wasi:http/incoming-handler\" }, { interface = \"x:y/z\" }]\n")
            .starts_with("app.toml:3: a `wasi:http/incoming-handler` component exports only")
        );
    }

    #[test]
    fn reuse_is_a_bounded_limit_of_wasi_http_handlers_only() {
        let handler = "[domains.h]\nguest = \"http-wasi-hello\"\n\
                       exports = [{ interface = \"wasi:http/incoming-handler\" }]\n\
                       [domains.h.limits]\n";
        let reuse = |text: &str| {
            Config::parse(Path::new("app.toml"), text)
                .map(|c| c.domains["h"].component.as_ref().and_then(|s| s.reuse))
                .map_err(|e| e.to_string())
        };
        assert_eq!(reuse(handler), Ok(None));
        assert_eq!(reuse(&format!("{handler}reuse = 5\n")), Ok(Some(5)));
        assert_eq!(
            reuse(&format!("{handler}reuse = 1000000\n")),
            Ok(Some(1_000_000))
        );
        for bad in ["0", "-1", "1000001"] {
            assert_eq!(
                reuse(&format!("{handler}reuse = {bad}\n")),
                Err(format!(
                    "app.toml:5: reuse must be between 1 and 1000000, not {bad}"
                ))
            );
        }
        // A route may set its own; only one that ends in a handler.
        let route = |chain: &str, reuse: &str| {
            format!("[[routes]]\nprefix = \"/\"\nchain = [{chain}]\nreuse = {reuse}\n")
        };
        let c = Config::parse(
            Path::new("app.toml"),
            &format!("{handler}{}", route("\"h\"", "7")),
        )
        .expect("valid");
        assert_eq!(c.routes[0].reuse, Some(7));
        assert_eq!(
            err(&format!("{handler}{}", route("\"h\"", "0"))),
            "app.toml:8: reuse must be between 1 and 1000000, not 0"
        );
        assert_eq!(
            err(&format!(
                "[domains.p]\nguest = \"http-hello\"\n\
                 exports = [{{ interface = \"lrpc:http/plugin\" }}]\n{}",
                route("\"p\"", "2")
            )),
            "app.toml:7: `reuse` is for routes that end in a `wasi:http/incoming-handler` \
             component"
        );
        // Only a wasi:http handler has instances to reuse.
        let only = "`reuse` is for `wasi:http/incoming-handler` components";
        assert_eq!(
            err("[domains.h]\nguest = \"http-hello\"\n[domains.h.limits]\nreuse = 2\n"),
            format!("app.toml:4: {only}")
        );
        assert_eq!(
            err("[domains.h]\nguest = \"comp-http-stamp\"\n\
                 exports = [{ interface = \"lrpc:http/plugin\" }]\n\
                 [domains.h.limits]\nreuse = 2\n"),
            format!("app.toml:5: {only}")
        );
    }

    #[test]
    fn only_an_http_plugin_may_take_no_body() {
        let plugin = |guest: &str, body: &str| {
            format!(
                "[domains.p]\nguest = \"{guest}\"\n\
                 exports = [{{ interface = \"lrpc:http/plugin\" }}]\nbody = \"{body}\"\n"
            )
        };
        let takes = |text: &str| {
            Config::parse(Path::new("app.toml"), text)
                .map(|c| c.domains["p"].takes_body)
                .map_err(|e| e.to_string())
        };
        assert_eq!(takes(&plugin("http-auth", "none")), Ok(false));
        assert_eq!(takes(&plugin("comp-http-stamp", "none")), Ok(false));
        assert_eq!(takes(&plugin("http-auth", "whole")), Ok(true));
        assert_eq!(
            takes(
                "[domains.p]\nguest = \"http-auth\"\nexports = [{ interface = \"lrpc:http/plugin\" }]\n"
            ),
            Ok(true)
        );
        assert_eq!(
            err(&plugin("http-auth", "some")),
            "app.toml:4: body `some`: `whole` or `none` expected"
        );
        let only = "`body` is for HTTP plugins (domains exporting `lrpc:http/plugin`)";
        assert_eq!(
            err("[domains.p]\nguest = \"kv-server\"\nbody = \"none\"\n"),
            format!("app.toml:3: {only}")
        );
        assert_eq!(
            err("[domains.h]\nguest = \"http-wasi-hello\"\n\
                 exports = [{ interface = \"wasi:http/incoming-handler\" }]\nbody = \"none\"\n"),
            format!("app.toml:4: {only}")
        );
    }

    #[test]
    fn a_wasi_http_handler_is_granted_outgoing_http_by_origin() {
        let handler = "[domains.h]\nguest = \"http-wasi-hello\"\n\
                       exports = [{ interface = \"wasi:http/incoming-handler\" }]\n\
                       [domains.h.wasi]\n";
        let origins = |list: &str| -> Result<Vec<String>, String> {
            Config::parse(
                Path::new("app.toml"),
                &format!("{handler}http = [{list}]\n"),
            )
            .map(|c| {
                let spec = c.domains["h"].component.clone().expect("a component");
                spec.http.iter().map(ToString::to_string).collect()
            })
            .map_err(|e| e.to_string())
        };
        assert_eq!(origins(""), Ok(vec![]));
        assert_eq!(
            origins(
                "\"https://API.Example.com\", \"http://127.0.0.1:8081/\", \"HTTP://[::1]\", \
                 \"https://x.example:8443\""
            ),
            Ok(vec![
                "https://api.example.com:443".to_string(),
                "http://127.0.0.1:8081".to_string(),
                "http://[::1]:80".to_string(),
                "https://x.example:8443".to_string(),
            ])
        );
        for (bad, reason) in [
            (
                "api.example.com",
                "an origin like `https://api.example.com` expected (scheme, host, port)",
            ),
            (
                "ftp://files.example",
                "scheme `ftp`: `http` or `https` expected",
            ),
            (
                "https://api.example.com/v1",
                "an origin has no path or query: drop `/v1`",
            ),
            (
                "https://api.example.com?x=1",
                "an origin has no path or query: drop `?x=1`",
            ),
            (
                "https://*.example.com",
                "wildcards are not supported; list each origin",
            ),
            ("https://user@api.example.com", "an origin has no user name"),
            (
                "http://127.0.0.1:99999",
                "`127.0.0.1:99999` has a port past 65535",
            ),
            (
                "http://127.0.0.1:",
                "`127.0.0.1:` is not a host with an optional port",
            ),
            ("http://", "`` is not a host with an optional port"),
            ("http://h:0", "port 0 is not a port"),
        ] {
            assert_eq!(
                origins(&format!("\"http://ok\", \"{bad}\"")),
                Err(format!("app.toml:5: `{bad}`: {reason}")),
                "{bad}"
            );
        }
        assert!(
            err(&format!("{handler}http = \"https://a.example\"\n")).starts_with("app.toml:5:")
        );
        // Only a wasi:http handler sends HTTP requests.
        assert_eq!(
            err("[domains.a]\nguest = \"comp-probe\"\n\
                 [domains.a.wasi]\nhttp = [\"https://a.example\"]\n"),
            "app.toml:4: `http` grants outgoing HTTP to `wasi:http/incoming-handler` components only"
        );
        assert!(
            err("[domains.a]\nguest = \"kv-server\"\n[domains.a.wasi]\nhttp = []\n")
                .starts_with("app.toml:3:")
        );
    }

    #[test]
    fn origins_match_scheme_host_and_port() {
        let o = HttpOrigin::parse("http://Backend.example:8081").expect("an origin");
        let uri = |u: &str| u.parse::<axum::http::Uri>().expect("a URI");
        assert!(o.matches(&uri("http://backend.example:8081/x?y")));
        assert!(o.matches(&uri("http://BACKEND.EXAMPLE:8081")));
        for other in [
            "https://backend.example:8081/",
            "http://backend.example/",
            "http://backend.example:8082/",
            "http://backend.example:73617/",
            "http://backend.example.:8081/",
            "http://other.example:8081/",
            "http://user@backend.example:8081/",
            "/relative",
        ] {
            assert!(!o.matches(&uri(other)), "{other}");
        }
        let tls = HttpOrigin::parse("https://api.example.com").expect("an origin");
        assert!(tls.matches(&uri("https://api.example.com/")));
        assert!(tls.matches(&uri("https://api.example.com:443/")));
        assert!(!tls.matches(&uri("http://api.example.com:443/")));
    }

    #[test]
    fn components_can_not_bind_in_a_cycle() {
        let two = "[domains.a]\nguest = \"comp-probe\"\n\
                   exports = [{ interface = \"lrpc:kv/store\" }]\n\
                   binds = [{ interface = \"lrpc:bench/bench\", server = \"b\" }]\n\
                   [domains.b]\nguest = \"comp-probe\"\n\
                   exports = [{ interface = \"lrpc:bench/bench\" }]\n\
                   binds = [{ interface = \"lrpc:kv/store\", server = \"a\" }]\n";
        assert_eq!(
            err(two),
            "app.toml:4: components bind in a cycle (a -> b -> a): each is bound when it is \
             created, so none could be first"
        );
        let one = "[domains.a]\nguest = \"comp-probe\"\n\
                   exports = [{ interface = \"lrpc:kv/store\" }]\n\
                   binds = [{ interface = \"lrpc:kv/store\", server = \"a\" }]\n";
        assert!(err(one).starts_with("app.toml:4: components bind in a cycle (a -> a)"));
        // Core domains bind at run time, and may call each other back.
        let core = two.replace("comp-probe", "kv-server");
        Config::parse(Path::new("app.toml"), &core).expect("core domains may bind both ways");
    }

    #[test]
    fn a_component_may_be_a_plugin() {
        let c = Config::parse(
            Path::new("app.toml"),
            "[domains.s]\nguest = \"comp-http-stamp\"\n\
             exports = [{ interface = \"lrpc:http/plugin\" }]\n\
             [domains.s.limits]\ndeadline = \"50ms\"\n\
             [[routes]]\nprefix = \"/\"\nchain = [\"s\"]\n",
        )
        .expect("valid");
        let s = &c.domains["s"];
        assert!(s.component.is_some());
        let e = s.plugin().expect("a plugin");
        assert_eq!(e.name, "http-plugin/s");
        assert_eq!(e.deadline, Some(Duration::from_millis(50)));
        assert!(
            err("[domains.s]\nguest = \"comp-http-stamp\"\n\
                 exports = [{ interface = \"lrpc:http/plugin\", name = \"x\" }]\n")
            .starts_with("app.toml:3: plugins are exported under names the runtime chooses")
        );
    }

    /// A NATS endpoint's credential comes from a file beside the config or from the
    /// environment, one kind at a time; every mistake names its line.
    #[test]
    fn nats_credentials_are_files_or_environment_variables_checked_at_their_line() {
        let dir = std::env::temp_dir().join(format!("lrpc-config-nats-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary folder");
        let seed = nkeys::KeyPair::new_user().seed().expect("a seed");
        let seed = seed.as_str();
        std::fs::write(dir.join("u.nk"), format!("{seed}\n")).expect("write the seed");
        std::fs::write(dir.join("bad.nk"), "not a seed").expect("write");
        let at = dir.join("app.toml");
        let remote = |keys: &str| {
            format!(
                "[remotes.kv]\ninterface = \"lrpc:kv/store\"\n\
                 endpoint = \"nats://127.0.0.1:4222/a\"\n{keys}\n"
            )
        };
        let parse = |text: &str| Config::parse(&at, text);
        let e = |text: &str| {
            let e = parse(text).expect_err("the config is wrong").to_string();
            e.strip_prefix(&format!("{}:", at.display()))
                .unwrap_or_else(|| panic!("{e}"))
                .to_string()
        };
        let c = parse(&remote("nkey-seed = \"u.nk\"")).expect("a seed file");
        let lrpc_remote::Endpoint::Nats(n) = &c.remotes["kv"].endpoint else {
            panic!("not NATS");
        };
        assert!(n.auth().credentials.is_some());
        assert!(!format!("{c:?}").contains(seed), "the seed shows");
        assert!(e(&remote("nkey-seed = \"none.nk\"")).starts_with("4: nkey seed file `"));
        assert!(e(&remote("nkey-seed = \"bad.nk\"")).starts_with("4: not an nkey seed"));
        assert!(e(&remote("creds = \"bad.nk\"")).starts_with("4: not a NATS credentials file"));
        assert_eq!(
            e(&remote("token-env = \"LRPC_TEST_SURELY_UNSET_VAR\"")),
            "4: the environment variable `LRPC_TEST_SURELY_UNSET_VAR` is not set"
        );
        assert_eq!(
            e(&remote("user-env = \"USER_X\"")),
            "4: `user-env` needs `password-env` beside it"
        );
        assert_eq!(
            e(&remote("nkey-seed = \"u.nk\"\ntoken-env = \"T\"")),
            "5: give one NATS credential: `nkey-seed` or `token-env`, not both"
        );
        assert!(e(&remote("tls = { ca = \"none.pem\" }")).starts_with("4: `tls` ca `"));
        assert!(e(&remote("tls = { cert = \"u.nk\" }")).starts_with("4: `tls` of a NATS"));
        let tcp = "[remotes.kv]\ninterface = \"lrpc:kv/store\"\nendpoint = \"tcp:127.0.0.1:7000\"\n\
                   nkey-seed = \"u.nk\"\n";
        assert!(e(tcp).starts_with("4: `nkey-seed` is for nats:// and tls:// endpoints"));
        // In a `[network] listen` entry, at the entry's line.
        let net = |entry: &str| {
            format!(
                "[domains.kv]\nguest = \"kv-server\"\n\
                 exports = [{{ interface = \"lrpc:kv/store\" }}]\n\
                 [network]\nlisten = [{entry}]\n"
            )
        };
        let c = parse(&net(
            "{ address = \"tls://127.0.0.1:4222/a\", nkey-seed = \"u.nk\", tls = { ca = \"u.nk\" } }",
        ))
        .expect("a listen entry with a seed and TLS");
        let lrpc_remote::Endpoint::Nats(n) = &c.network.expect("network").listen[0] else {
            panic!("not NATS");
        };
        assert!(n.requires_tls() && n.auth().tls.is_some());
        assert_eq!(n.to_string(), "tls://127.0.0.1:4222/a");
        assert!(
            e(&net(
                "{ address = \"nats://127.0.0.1:4222/a\", nkey-seed = \"none.nk\" }"
            ))
            .starts_with("5: nkey seed file")
        );
        assert!(
            e(&net("{ address = \"nats://127.0.0.1:4222/a\", creds = 1 }"))
                .starts_with("5: `creds` is a string")
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn network_addresses_other_hosts_reach_are_refused_in_clear_unless_insecure() {
        let net = |listen: &str| {
            format!(
                "[domains.kv]\nguest = \"kv-server\"\n\
                 exports = [{{ interface = \"lrpc:kv/store\" }}]\n\
                 [network]\nlisten = {listen}\n"
            )
        };
        let parse = |listen: &str| Config::parse(Path::new("app.toml"), &net(listen));
        for refused in [
            "\"tcp:0.0.0.0:7000\"",
            "[\"tcp:0.0.0.0:7000\"]",
            "[\"tcp:127.0.0.1:7000\", \"10.0.0.2:7000\"]",
            "[\"tcp:[::]:7000\"]",
            "[\"tcp:example.com:7000\"]",
            "[{ address = \"tcp:0.0.0.0:7000\" }]",
            "[{ address = \"tcp:0.0.0.0:7000\", insecure = false }]",
        ] {
            let e = err(&net(refused));
            assert!(e.starts_with("app.toml:5: "), "{refused}: {e}");
        }
        let e = err(&net("[\"tcp:0.0.0.0:7000\"]"));
        assert!(e.contains("insecure = true"), "the way out is named: {e}");
        let c = parse("[{ address = \"tcp:0.0.0.0:0\", insecure = true }, \"tcp:127.0.0.1:0\"]")
            .expect("insecure said");
        let n = c.network.expect("[network]");
        assert_eq!(n.listen.len(), 2);
        assert_eq!(n.insecure, [n.listen[0].clone()]);
        for local in [
            "[\"tcp:127.0.0.1:0\"]",
            "[\"tcp:[::1]:0\", \"localhost:0\", \"unix:/tmp/x.sock\"]",
            "[{ address = \"tcp:127.0.0.1:0\" }]",
        ] {
            let n = parse(local).expect(local).network.expect("[network]");
            assert!(n.insecure.is_empty(), "{local}");
        }
        for (bad, says) in [
            (
                "[{ address = \"tcp:0.0.0.0:0\", insecure = \"yes\" }]",
                "`insecure` is",
            ),
            ("[{ addr = \"tcp:0.0.0.0:0\" }]", "unknown key `addr`"),
            ("[{ insecure = true }]", "`address` missing"),
            ("[7000]", "an address is a string"),
            ("[\"nowhere\"]", "is neither"),
        ] {
            let e = err(&net(bad));
            assert!(
                e.starts_with("app.toml:5: ") && e.contains(says),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn tls_needs_both_files_and_they_must_exist() {
        assert_eq!(
            err("[serve]\ntls-cert = \"c.pem\"\n"),
            "app.toml:2: `tls-cert` needs `tls-key` too"
        );
        assert_eq!(
            err("[serve]\n\ntls-key = \"k.pem\"\n"),
            "app.toml:3: `tls-key` needs `tls-cert` too"
        );
        let dir = std::env::temp_dir().join(format!("lrpc-config-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(dir.join("c.pem"), "x").expect("write");
        let text = "[serve]\ntls-cert = \"c.pem\"\ntls-key = \"k.pem\"\n";
        let e = Config::parse(&dir.join("app.toml"), text)
            .expect_err("no key file")
            .to_string();
        assert!(e.contains("app.toml:3: tls-key `"), "{e}");
        std::fs::write(dir.join("k.pem"), "x").expect("write");
        let c = Config::parse(&dir.join("app.toml"), text).expect("both files");
        let tls = c.tls.expect("tls");
        assert_eq!((tls.cert, tls.key), (dir.join("c.pem"), dir.join("k.pem")));
        assert!(
            Config::parse(Path::new("app.toml"), "")
                .expect("empty")
                .tls
                .is_none()
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("2s"), Some(Duration::from_secs(2)));
        assert_eq!(parse_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2"), None);
        assert_eq!(parse_duration("-1s"), None);
        assert_eq!(parse_duration("3h"), None);
    }

    #[test]
    fn mistakes_name_their_line() {
        assert_eq!(
            err("[domains.a]\nguest = \"kv-server\"\nreplicas = 0\n"),
            "app.toml:3: replicas must be between 1 and 64, not 0"
        );
        assert!(
            err("[domains.a]\nguest = \"nope\"\n")
                .starts_with("app.toml:2: no built-in guest `nope`")
        );
        assert!(err("\n[domains.a]\ngest = 1\n").starts_with("app.toml:3: unknown field `gest`"));
        assert_eq!(
            err(
                "[domains.a]\nguest = \"kv-client\"\nbinds = [{ interface = \"lrpc:kv/store\", server = \"b\" }]\n"
            ),
            "app.toml:3: no domain `b`"
        );
        assert_eq!(
            err("[[routes]]\nprefix = \"/\"\nchain = [\"x\"]\n"),
            "app.toml:3: no domain `x`"
        );
        assert!(
            err("[domains.a]\nguest = \"kv-server\"\n[domains.a.limits]\nfuel = 10\n")
                .starts_with("app.toml:4: fuel limits")
        );
    }

    #[test]
    fn limits_become_the_domains_quotas() {
        let c = Config::parse(
            Path::new("app.toml"),
            "[domains.a]\nguest = \"kv-server\"\n[domains.a.limits]\nmemory = \"64MiB\"\n\
             bindings = 8\noob_bytes = 1048576\n[domains.b]\nguest = \"kv-client\"\n",
        )
        .expect("valid");
        let q = c.domains["a"].quotas.expect("set");
        assert_eq!(q.memory, 64 << 20);
        assert_eq!(q.bindings, 8);
        assert_eq!(q.oob_bytes, 1 << 20);
        assert_eq!(
            q.mappings,
            lrpc_kernel::Quotas::default().mappings,
            "the rest default"
        );
        assert!(c.domains["b"].quotas.is_none());
        assert_eq!(parse_size("4KiB"), Some(4096));
        assert_eq!(parse_size("1GiB"), Some(1 << 30));
        assert_eq!(parse_size("12 parsecs"), None);
        assert!(
            err("[domains.a]\nguest = \"kv-server\"\n[domains.a.limits]\nmemory = \"lots\"\n")
                .starts_with("app.toml:4: memory is a positive size")
        );
        assert!(
            err("[domains.a]\nguest = \"kv-server\"\n[domains.a.limits]\nmemory = 9223372036854775807\n")
                .starts_with("app.toml:4: memory is at most 4GiB")
        );
        assert!(
            err("[domains.a]\nguest = \"comp-kv-server\"\nkind = \"component\"\n[domains.a.limits]\nmemory = \"5GiB\"\n")
                .starts_with("app.toml:5: memory is at most 4GiB")
        );
    }

    #[test]
    fn the_compile_cache_is_on_by_default_and_may_be_turned_off() {
        let parse = |kernel: &str| {
            Config::parse(
                Path::new("/srv/app.toml"),
                &format!("[kernel]\n{kernel}[domains.a]\nguest = \"kv-server\"\n"),
            )
        };
        let c = parse("").expect("valid");
        assert_eq!(c.cache, CompileCache::per_user());
        assert!(matches!(
            c.cache,
            CompileCache::PerUser(_) | CompileCache::Off
        ));
        assert_eq!(
            parse("cache-dir = true\n").expect("valid").cache,
            CompileCache::per_user()
        );
        assert_eq!(
            parse("cache-dir = false\n").expect("valid").cache,
            CompileCache::Off
        );
        assert_eq!(
            parse("cache-dir = \"cache\"\n").expect("valid").cache,
            CompileCache::Folder("/srv/cache".into())
        );
        let e = parse("cache-dir = 3\n").expect_err("a number").to_string();
        assert!(e.starts_with("/srv/app.toml:2:"), "{e}");
        let e = parse("cache-dir = \"\"\n").expect_err("empty").to_string();
        assert!(e.contains("empty path"), "{e}");
    }

    #[test]
    fn a_plugin_chain_checks() {
        let c = Config::parse(
            Path::new("app.toml"),
            "[domains.h]\nguest = \"http-hello\"\nreplicas = 2\n\
             exports = [{ interface = \"lrpc:http/plugin\", deadline = \"50ms\" }]\n\
             [[routes]]\nprefix = \"/api\"\nchain = [\"h\"]\n",
        )
        .expect("valid");
        assert_eq!(c.routes[0].chain, ["h"]);
        assert_eq!(c.routes[0].line, 5);
        let h = &c.domains["h"];
        assert_eq!(h.replicas, 2);
        assert_eq!(
            h.plugin().and_then(|e| e.deadline),
            Some(Duration::from_millis(50))
        );
    }
}
