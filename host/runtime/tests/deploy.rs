//! The recipes under `deploy/` agree with the configs they ship, and the configs work.
//!
//! - `deploy/container/Containerfile`: a multi-stage build of the release binary, a non-root
//!   runtime image that runs `lrpc serve` on the shipped config, the port it exposes.
//! - `deploy/systemd/lrpc.socket` and `lrpc.service` (read with a small INI reader): socket
//!   activation on the config's port, the stop timeout against `shutdown-grace`, the
//!   open-file limit against `max-connections`, the cache folder, the hardening.
//! - `deploy/kubernetes/*.yaml` (every document parsed as YAML): each Deployment's config
//!   (from its ConfigMap, with the Secret's files beside it, loaded with `Config::load`),
//!   its port, probe paths, grace period and cache volume; the Services' selectors and
//!   ports; the NATS endpoint of the configs against the NATS Service and its server config.
//!
//! Each value is read on both sides, so a change to one side only fails here. Two tests run
//! the shipped configs through the real binary: `deploy/lrpc.toml` serves its route and its
//! probes, and the Kubernetes configs serve and call the key-value store over a real
//! `nats-server` that runs the NATS config of the manifests with an nkey shaped as the
//! Secret's.
//!
//! Nothing here runs docker, systemd or kubectl: the machine that runs the tests has none.

mod common;

use lrpc_runtime::config::{CompileCache, Config};
use serde::Deserialize as _;
use serde_yaml_ng::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead as _, BufReader};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const LRPC: &str = env!("CARGO_BIN_EXE_lrpc");

/// How long a start or a run may take on a loaded machine before the test calls it a hang.
const BOUND: Duration = Duration::from_secs(90);

/// The shutdown ends within the grace period and this much more (`[serve] shutdown-grace`).
const EXIT_MARGIN: Duration = Duration::from_secs(1);

fn root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize().unwrap_or(root)
}

fn read(rel: &str) -> String {
    let path = root().join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The port of an `ip:port` address.
fn port_of(addr: &str) -> u16 {
    addr.rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in `{addr}`"))
}

/// The shipped config of the container and the systemd unit.
fn shipped_config() -> Config {
    Config::load(&root().join("deploy/lrpc.toml")).unwrap_or_else(|e| panic!("{e}"))
}

fn listen_port(c: &Config) -> u16 {
    port_of(
        c.listen
            .as_deref()
            .expect("the config names `[serve] listen`"),
    )
}

// ---------------------------------------------------------------------------------------
// The Containerfile

/// The instructions of a Containerfile: (keyword in upper case, its arguments), with
/// continuation lines joined and comments left out.
fn instructions(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for line in text.lines() {
        let t = line.trim();
        if cur.is_empty() && (t.is_empty() || t.starts_with('#')) {
            continue;
        }
        if let Some(head) = t.strip_suffix('\\') {
            cur.push_str(head);
            cur.push(' ');
            continue;
        }
        cur.push_str(t);
        let (k, rest) = cur.split_once(char::is_whitespace).unwrap_or((&cur, ""));
        out.push((k.to_ascii_uppercase(), rest.trim().to_string()));
        cur.clear();
    }
    out
}

/// A JSON-array (exec form) argument list: `["a", "b"]`.
fn exec_form(args: &str) -> Vec<String> {
    serde_json::from_str(args).unwrap_or_else(|e| panic!("not an exec form `{args}`: {e}"))
}

struct Image {
    /// The binary `ENTRYPOINT` runs.
    binary: String,
    /// `CMD`: the arguments given to it.
    cmd: Vec<String>,
    /// Where `COPY deploy/lrpc.toml` puts the config.
    config: String,
    /// `USER`'s user id.
    uid: u64,
    /// `ENV XDG_CACHE_HOME`.
    cache_home: String,
}

/// Reads the Containerfile and checks what holds whatever the config says.
fn image() -> Image {
    let text = read("deploy/container/Containerfile");
    let ins = instructions(&text);
    let all = |k: &str| -> Vec<&str> {
        ins.iter()
            .filter(|(kw, _)| kw == k)
            .map(|(_, a)| a.as_str())
            .collect()
    };
    let one = |k: &str| -> &str {
        let v = all(k);
        assert_eq!(v.len(), 1, "the Containerfile has one {k}, not {v:?}");
        v[0]
    };

    // Multi-stage: a builder named `build`, and a runtime stage from another image.
    let froms = all("FROM");
    assert_eq!(froms.len(), 2, "a builder and a runtime stage: {froms:?}");
    let (builder, name) = froms[0]
        .split_once(" AS ")
        .or_else(|| froms[0].split_once(" as "))
        .expect("the first stage is named");
    assert_eq!(name.trim(), "build");
    assert_ne!(
        builder.trim(),
        froms[1].trim(),
        "the runtime image is another one"
    );
    let runtime_start = ins.iter().rposition(|(k, _)| k == "FROM").expect("a FROM");
    let runtime = &ins[runtime_start..];
    let builder_runs: Vec<&str> = ins[..runtime_start]
        .iter()
        .filter(|(k, _)| k == "RUN")
        .map(|(_, a)| a.as_str())
        .collect();
    let targets = builder_runs
        .iter()
        .find(|r| r.contains("rustup target add"))
        .expect("the builder adds the wasm targets");
    for t in ["wasm32-unknown-unknown", "wasm32-wasip2"] {
        assert!(targets.split_whitespace().any(|w| w == t), "{t}: {targets}");
    }
    assert!(
        builder_runs.contains(&"cargo build --release --locked -p lrpc-runtime --bin lrpc"),
        "the builder builds the release binary: {builder_runs:?}"
    );

    // The runtime stage: the release binary, the config, a non-root user.
    let copies: Vec<&str> = runtime
        .iter()
        .filter(|(k, _)| k == "COPY")
        .map(|(_, a)| a.as_str())
        .collect();
    let binary = copies
        .iter()
        .find_map(|c| c.strip_prefix("--from=build /src/target/release/lrpc "))
        .expect("the runtime stage copies the release binary")
        .trim()
        .to_string();
    let config = copies
        .iter()
        .find_map(|c| c.strip_prefix("deploy/lrpc.toml "))
        .expect("the runtime stage copies deploy/lrpc.toml")
        .trim()
        .to_string();
    let entry = exec_form(one("ENTRYPOINT"));
    assert_eq!(
        entry,
        [binary.as_str()],
        "ENTRYPOINT runs the copied binary"
    );
    let cmd = exec_form(one("CMD"));

    let user = one("USER");
    let uid: u64 = user
        .split(':')
        .next()
        .and_then(|u| u.parse().ok())
        .unwrap_or_else(|| panic!("USER is numeric (Kubernetes checks runAsNonRoot): {user}"));
    assert_ne!(uid, 0, "the image runs as a user other than root");
    assert!(
        runtime.iter().rposition(|(k, _)| k == "USER")
            > runtime.iter().rposition(|(k, _)| k == "RUN"),
        "USER comes after the last RUN"
    );

    assert_eq!(one("STOPSIGNAL"), "SIGTERM");
    assert!(
        all("HEALTHCHECK").is_empty(),
        "probes are the orchestrator's"
    );

    let env = all("ENV");
    let cache_home = env
        .iter()
        .find_map(|e| e.strip_prefix("XDG_CACHE_HOME="))
        .expect("ENV XDG_CACHE_HOME: where the compile cache goes")
        .to_string();
    let cache = format!("{cache_home}/lrpc");
    let runs: Vec<&str> = runtime
        .iter()
        .filter(|(k, _)| k == "RUN")
        .map(|(_, a)| a.as_str())
        .collect();
    assert!(
        runs.iter()
            .any(|r| r.contains(&format!("mkdir -p {cache} "))
                && r.contains(&format!("chown {uid}:"))
                && r.trim_end().ends_with(&cache)),
        "the image makes {cache}, owned by the user: {runs:?}"
    );

    // The build context leaves the build output out.
    let ignore = read(".dockerignore");
    assert!(
        ignore
            .lines()
            .any(|l| l.trim().trim_matches('/') == "target"),
        ".dockerignore leaves out target/"
    );

    Image {
        binary,
        cmd,
        config,
        uid,
        cache_home,
    }
}

#[test]
fn the_container_image_serves_the_shipped_config() {
    let image = image();
    let config = shipped_config();
    let text = read("deploy/container/Containerfile");
    let ins = instructions(&text);
    let exposed: Vec<u16> = ins
        .iter()
        .filter(|(k, _)| k == "EXPOSE")
        .flat_map(|(_, a)| a.split_whitespace())
        .map(|p| p.trim_end_matches("/tcp").parse().expect("a port"))
        .collect();
    assert_eq!(
        exposed,
        [listen_port(&config)],
        "EXPOSE is `[serve] listen`'s port"
    );
    assert_eq!(
        image.cmd,
        ["serve".to_string(), image.config.clone()],
        "CMD serves the copied config"
    );
    // Inside a container the server must listen on every interface.
    let listen = config.listen.as_deref().expect("listen");
    assert!(
        listen.starts_with("0.0.0.0:") || listen.starts_with("[::]:"),
        "{listen}"
    );
    // The cache folder is the per-user default under $XDG_CACHE_HOME.
    assert!(
        matches!(config.cache, CompileCache::PerUser(_) | CompileCache::Off),
        "deploy/lrpc.toml leaves `cache-dir` to its default: {:?}",
        config.cache
    );
}

// ---------------------------------------------------------------------------------------
// The systemd units

/// A systemd unit file: section -> its (key, value) entries in order.
type Unit = BTreeMap<String, Vec<(String, String)>>;

/// Reads a unit file as systemd does, for what these units use: `[Section]` headers,
/// `Key=Value` lines, comments starting with `#` or `;`, lines continued with `\`.
fn unit(rel: &str) -> Unit {
    let text = read(rel);
    let mut out = Unit::new();
    let mut section: Option<String> = None;
    let mut pending = String::new();
    for (n, line) in text.lines().enumerate() {
        let t = line.trim();
        if pending.is_empty() && (t.is_empty() || t.starts_with('#') || t.starts_with(';')) {
            continue;
        }
        if let Some(head) = t.strip_suffix('\\') {
            pending.push_str(head);
            pending.push(' ');
            continue;
        }
        pending.push_str(t);
        let whole = std::mem::take(&mut pending);
        if let Some(name) = whole.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
            section = Some(name.to_string());
            out.entry(name.to_string()).or_default();
            continue;
        }
        let (k, v) = whole
            .split_once('=')
            .unwrap_or_else(|| panic!("{rel}:{}: not `Key=Value`: {whole}", n + 1));
        let s = section
            .as_ref()
            .unwrap_or_else(|| panic!("{rel}:{}: a key outside a section", n + 1));
        out.get_mut(s)
            .expect("the section")
            .push((k.trim().to_string(), v.trim().to_string()));
    }
    out
}

/// The value systemd uses for `key` in `section`: the last one given.
fn value<'a>(u: &'a Unit, section: &str, key: &str) -> Option<&'a str> {
    u.get(section)?
        .iter()
        .rev()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

fn must<'a>(u: &'a Unit, section: &str, key: &str) -> &'a str {
    value(u, section, key).unwrap_or_else(|| panic!("[{section}] {key}= is not set"))
}

/// A systemd time span as these units write it: `30s`, `1min`, `500ms`, or seconds.
fn time_span(s: &str) -> Duration {
    let s = s.trim();
    let (num, unit) = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .map_or((s, ""), |i| (&s[..i], &s[i..]));
    let n: f64 = num.parse().unwrap_or_else(|_| panic!("a time span: `{s}`"));
    let secs = match unit.trim() {
        "" | "s" | "sec" => n,
        "ms" | "msec" => n / 1000.0,
        "m" | "min" => n * 60.0,
        other => panic!("a time span unit this test does not know: `{other}`"),
    };
    Duration::from_secs_f64(secs)
}

fn yes(v: Option<&str>) -> bool {
    matches!(v, Some("yes" | "true" | "on" | "1"))
}

#[test]
fn the_systemd_units_activate_the_shipped_config_on_its_port() {
    let image = image();
    let config = shipped_config();
    let socket = unit("deploy/systemd/lrpc.socket");
    let service = unit("deploy/systemd/lrpc.service");

    // The socket: the config's port, handed to lrpc.service.
    let listen = must(&socket, "Socket", "ListenStream");
    let port = listen
        .rsplit_once(':')
        .map_or(listen, |(_, p)| p)
        .parse::<u16>()
        .unwrap_or_else(|_| panic!("ListenStream= a port or an address: {listen}"));
    assert_eq!(
        port,
        listen_port(&config),
        "ListenStream is `[serve] listen`'s port"
    );
    assert!(
        value(&socket, "Socket", "Service").is_none_or(|s| s == "lrpc.service"),
        "the socket activates lrpc.service"
    );
    assert!(
        must(&service, "Unit", "Requires")
            .split_whitespace()
            .any(|u| u == "lrpc.socket")
    );

    // The service: the same binary and config path as the image, on the passed socket.
    let exec: Vec<&str> = must(&service, "Service", "ExecStart")
        .split_whitespace()
        .collect();
    assert_eq!(
        exec,
        [
            image.binary.as_str(),
            "serve",
            image.config.as_str(),
            "--listenfd"
        ],
        "ExecStart serves the config at the image's path on the passed socket"
    );
    assert!(matches!(
        must(&service, "Service", "Type"),
        "exec" | "simple"
    ));

    // Stopping: SIGTERM, and time for the grace period before SIGKILL.
    assert_eq!(must(&service, "Service", "KillSignal"), "SIGTERM");
    let stop = time_span(must(&service, "Service", "TimeoutStopSec"));
    let grace = config.connections.shutdown_grace;
    assert!(
        stop > grace + EXIT_MARGIN,
        "TimeoutStopSec {stop:?} leaves room for shutdown-grace {grace:?} and its exit"
    );

    // File descriptors for `max-connections`, and the 64 the server keeps for itself.
    let nofile: usize = must(&service, "Service", "LimitNOFILE")
        .split(':')
        .next_back()
        .and_then(|n| n.parse().ok())
        .expect("LimitNOFILE= a number");
    assert!(
        nofile >= config.connections.max + 64 + 64,
        "LimitNOFILE {nofile} leaves room for max-connections {}",
        config.connections.max
    );

    // The compile cache: $XDG_CACHE_HOME/lrpc is the folder systemd makes.
    let cache_dir = must(&service, "Service", "CacheDirectory");
    let env: BTreeMap<&str, &str> = service["Service"]
        .iter()
        .filter(|(k, _)| k == "Environment")
        .flat_map(|(_, v)| v.split_whitespace())
        .filter_map(|kv| kv.split_once('='))
        .collect();
    let xdg = env
        .get("XDG_CACHE_HOME")
        .expect("Environment=XDG_CACHE_HOME: where the cache goes");
    assert_eq!(
        format!("{xdg}/lrpc"),
        format!("/var/cache/{cache_dir}"),
        "the config's default cache folder is the unit's CacheDirectory"
    );
    assert!(matches!(
        config.cache,
        CompileCache::PerUser(_) | CompileCache::Off
    ));

    // Hardening.
    assert!(
        yes(value(&service, "Service", "DynamicUser"))
            || value(&service, "Service", "User").is_some_and(|u| u != "root" && u != "0"),
        "the service runs as a user other than root"
    );
    for key in [
        "NoNewPrivileges",
        "ProtectHome",
        "PrivateTmp",
        "PrivateDevices",
    ] {
        assert!(yes(value(&service, "Service", key)), "{key}=yes");
    }
    assert_eq!(must(&service, "Service", "ProtectSystem"), "strict");
    let families: BTreeSet<&str> = must(&service, "Service", "RestrictAddressFamilies")
        .split_whitespace()
        .collect();
    assert_eq!(
        families,
        BTreeSet::from(["AF_INET", "AF_INET6", "AF_UNIX"]),
        "RestrictAddressFamilies"
    );
    // wasmtime maps the code it compiles writable, then executable.
    assert!(
        !yes(value(&service, "Service", "MemoryDenyWriteExecute")),
        "MemoryDenyWriteExecute would stop every domain from starting"
    );
}

// ---------------------------------------------------------------------------------------
// The Kubernetes manifests

/// Every document of every `deploy/kubernetes/*.yaml`.
fn manifests() -> Vec<Value> {
    let dir = root().join("deploy/kubernetes");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("deploy/kubernetes")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no manifests in {}", dir.display());
    let mut docs = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).expect("read a manifest");
        for d in serde_yaml_ng::Deserializer::from_str(&text) {
            let v = Value::deserialize(d).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            if !v.is_null() {
                assert!(
                    v["apiVersion"].is_string() && v["kind"].is_string(),
                    "{}: a document without apiVersion and kind",
                    f.display()
                );
                docs.push(v);
            }
        }
    }
    docs
}

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or_else(|| panic!("not a string: {v:?}"))
}

fn seq(v: &Value) -> &[Value] {
    v.as_sequence()
        .map(Vec::as_slice)
        .unwrap_or_else(|| panic!("not a list: {v:?}"))
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} `{name}` in deploy/kubernetes"))
}

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

/// The entry of `list` whose `name` is `name`.
fn named<'a>(list: &'a Value, name: &str) -> &'a Value {
    seq(list)
        .iter()
        .find(|e| e["name"] == name)
        .unwrap_or_else(|| panic!("no `{name}` in {list:?}"))
}

/// The container port a probe or a Service's `targetPort` names (by name or number).
fn container_port(container: &Value, port: &Value) -> u16 {
    if let Some(n) = port.as_u64() {
        return u16::try_from(n).expect("a port");
    }
    let p = named(&container["ports"], s(port));
    u16::try_from(p["containerPort"].as_u64().expect("containerPort")).expect("a port")
}

/// True when every label of `selector` is on `labels`.
fn selects(selector: &Value, labels: &Value) -> bool {
    let sel = selector.as_mapping().expect("a selector");
    !sel.is_empty() && sel.iter().all(|(k, v)| labels[s(k)] == *v)
}

/// A Deployment of `lrpc serve`, checked against its config; what the NATS checks need.
struct Served {
    /// The config, loaded from a folder laid out as the pod's config volume.
    config: Config,
    /// That folder.
    dir: PathBuf,
    /// The config's file name in it.
    file: String,
}

/// Checks the Deployment `name` against the config its args name, and loads that config
/// from a scratch folder laid out as the pod's config volume: the ConfigMap's items and, for
/// each Secret item, a fresh NATS user seed (the shipped Secret holds placeholders).
fn served(docs: &[Value], name: &str, image: &Image) -> Served {
    let d = find(docs, "Deployment", name);
    let pod = &d["spec"]["template"]["spec"];
    assert!(
        selects(
            &d["spec"]["selector"]["matchLabels"],
            &d["spec"]["template"]["metadata"]["labels"]
        ),
        "{name}: the selector matches its pods"
    );
    let containers = seq(&pod["containers"]);
    assert_eq!(containers.len(), 1, "{name}: one container");
    let c = &containers[0];

    // The config path: in the config volume, as the image's CMD puts it.
    let args: Vec<&str> = seq(&c["args"]).iter().map(s).collect();
    assert_eq!(args.len(), 2, "{name}: args are `serve CONFIG`: {args:?}");
    assert_eq!(args[0], "serve");
    let path = Path::new(args[1]);
    let mount_dir = path.parent().expect("a folder").to_str().expect("utf-8");
    let file = path.file_name().expect("a file").to_str().expect("utf-8");
    assert_eq!(
        Path::new(&image.config).parent(),
        path.parent(),
        "{name}: the config sits where the image keeps it"
    );
    let mount = seq(&c["volumeMounts"])
        .iter()
        .find(|m| m["mountPath"] == mount_dir)
        .unwrap_or_else(|| panic!("{name}: nothing mounted at {mount_dir}"));
    let volume = named(&pod["volumes"], s(&mount["name"]));
    let sources: Vec<&Value> = if volume["projected"].is_mapping() {
        seq(&volume["projected"]["sources"]).iter().collect()
    } else {
        vec![volume]
    };

    let dir = common::scratch("lrpc-deploy", name);
    for src in sources {
        if src["configMap"].is_mapping() {
            let cm = find(docs, "ConfigMap", s(&src["configMap"]["name"]));
            for item in seq(&src["configMap"]["items"]) {
                let text = s(&cm["data"][s(&item["key"])]);
                std::fs::write(dir.join(s(&item["path"])), text).expect("write");
            }
        } else if src["secret"].is_mapping() {
            let secret = find(docs, "Secret", s(&src["secret"]["name"]));
            for item in seq(&src["secret"]["items"]) {
                let key = s(&item["key"]);
                assert!(
                    secret["stringData"][key].is_string() || secret["data"][key].is_string(),
                    "{name}: the Secret has no `{key}`"
                );
                let seed = nkeys::KeyPair::new_user().seed().expect("a seed");
                std::fs::write(dir.join(s(&item["path"])), seed).expect("write");
            }
        } else {
            panic!("{name}: a config volume source this test does not know: {src:?}");
        }
    }
    assert!(
        dir.join(file).is_file(),
        "{name}: the config volume has no {file}"
    );
    let config = Config::load(&dir.join(file)).unwrap_or_else(|e| panic!("{name}: {e}"));

    // The port and the probes.
    let port = listen_port(&config);
    let listen = config.listen.as_deref().expect("listen");
    assert!(listen.starts_with("0.0.0.0:"), "{name}: {listen}");
    let live = &c["livenessProbe"]["httpGet"];
    let ready = &c["readinessProbe"]["httpGet"];
    assert_eq!(
        s(&live["path"]),
        config.probes.health,
        "{name}: liveness path"
    );
    assert_eq!(
        s(&ready["path"]),
        config.probes.ready,
        "{name}: readiness path"
    );
    assert_eq!(
        container_port(c, &live["port"]),
        port,
        "{name}: liveness port"
    );
    assert_eq!(
        container_port(c, &ready["port"]),
        port,
        "{name}: readiness port"
    );
    if c["startupProbe"].is_mapping() {
        let start = &c["startupProbe"]["httpGet"];
        assert_eq!(
            s(&start["path"]),
            config.probes.health,
            "{name}: startup path"
        );
        assert_eq!(
            container_port(c, &start["port"]),
            port,
            "{name}: startup port"
        );
    }

    // The grace period: the shutdown's, and the second its exit may take.
    let grace = Duration::from_secs(
        pod["terminationGracePeriodSeconds"]
            .as_u64()
            .unwrap_or_else(|| panic!("{name}: terminationGracePeriodSeconds")),
    );
    let shutdown = config.connections.shutdown_grace;
    assert!(
        grace > shutdown + EXIT_MARGIN,
        "{name}: terminationGracePeriodSeconds {grace:?} is not above shutdown-grace {shutdown:?} + 1s"
    );

    // Not root, nothing written outside the cache.
    let sec = &c["securityContext"];
    let pod_sec = &pod["securityContext"];
    assert!(
        sec["runAsNonRoot"]
            .as_bool()
            .or(pod_sec["runAsNonRoot"].as_bool())
            == Some(true),
        "{name}: runAsNonRoot"
    );
    let uid = sec["runAsUser"].as_u64().or(pod_sec["runAsUser"].as_u64());
    assert_eq!(uid, Some(image.uid), "{name}: the image's user");
    assert_eq!(
        sec["readOnlyRootFilesystem"].as_bool(),
        Some(true),
        "{name}"
    );
    assert_eq!(
        sec["allowPrivilegeEscalation"].as_bool(),
        Some(false),
        "{name}"
    );

    // The compile cache: $XDG_CACHE_HOME/lrpc is an emptyDir.
    assert!(matches!(
        config.cache,
        CompileCache::PerUser(_) | CompileCache::Off
    ));
    let xdg = s(&named(&c["env"], "XDG_CACHE_HOME")["value"]);
    assert_eq!(xdg, image.cache_home, "{name}: the image's cache home");
    let cache = format!("{xdg}/lrpc");
    let m = seq(&c["volumeMounts"])
        .iter()
        .find(|m| m["mountPath"] == cache.as_str())
        .unwrap_or_else(|| panic!("{name}: nothing mounted at {cache}"));
    assert!(
        named(&pod["volumes"], s(&m["name"]))["emptyDir"].is_mapping(),
        "{name}: the cache is an emptyDir"
    );
    assert!(
        c["resources"]["limits"]["memory"].is_string(),
        "{name}: a memory limit"
    );
    assert!(
        c["resources"]["requests"]["cpu"].is_string(),
        "{name}: a CPU request"
    );

    Served {
        config,
        dir,
        file: file.to_string(),
    }
}

/// What the manifests say of the NATS bus, once checked against each other.
struct Bus {
    /// The name of the Service in front of `nats-server`.
    host: String,
    /// The Service's port.
    port: u16,
    /// The server's config, from its ConfigMap.
    conf: String,
    /// The subject prefix its one user is confined to (`PREFIX.>`).
    prefix: String,
}

/// Reads the NATS Deployment, its config and its Service, and checks them against each
/// other: the Service reaches the config's port, the user's public key comes from a key the
/// Secret has, and the user may use one prefix.
fn bus(docs: &[Value]) -> Bus {
    let d = find(docs, "Deployment", "nats");
    let pod = &d["spec"]["template"]["spec"];
    let c = &seq(&pod["containers"])[0];

    // The server config: the file of the ConfigMap that `-c` names.
    let command: Vec<&str> = seq(&c["command"]).iter().map(s).collect();
    let at = command
        .iter()
        .position(|a| *a == "-c" || *a == "--config")
        .expect("nats-server -c CONFIG");
    let path = Path::new(command[at + 1]);
    let dir = path.parent().expect("a folder").to_str().expect("utf-8");
    let m = seq(&c["volumeMounts"])
        .iter()
        .find(|m| m["mountPath"] == dir)
        .expect("the NATS config is mounted");
    let cm_name = s(&named(&pod["volumes"], s(&m["name"]))["configMap"]["name"]);
    let file = path.file_name().expect("a file").to_str().expect("utf-8");
    let conf = s(&find(docs, "ConfigMap", cm_name)["data"][file]).to_string();
    let conf_port: u16 = conf
        .lines()
        .find_map(|l| l.trim().strip_prefix("port:"))
        .and_then(|p| p.trim().parse().ok())
        .expect("`port:` in the NATS config");

    // The Service in front of it.
    let svc = of_kind(docs, "Service")
        .into_iter()
        .find(|svc| {
            selects(
                &svc["spec"]["selector"],
                &d["spec"]["template"]["metadata"]["labels"],
            )
        })
        .expect("a Service for nats");
    let sp = &seq(&svc["spec"]["ports"])[0];
    assert_eq!(
        container_port(c, &sp["targetPort"]),
        conf_port,
        "the NATS Service reaches the port of the NATS config"
    );

    // The one user: an nkey from the Secret, confined to one prefix.
    let nkey_var = conf
        .lines()
        .find_map(|l| l.trim().strip_prefix("nkey:"))
        .and_then(|v| v.trim().strip_prefix('$'))
        .expect("`nkey: $VAR` in the NATS config");
    let var = named(&c["env"], nkey_var);
    let key_ref = &var["valueFrom"]["secretKeyRef"];
    let secret = find(docs, "Secret", s(&key_ref["name"]));
    let key = s(&key_ref["key"]);
    assert!(
        secret["stringData"][key].is_string() || secret["data"][key].is_string(),
        "the Secret has no `{key}`"
    );
    let subjects: BTreeSet<&str> = conf
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            l.strip_prefix("publish:")
                .or_else(|| l.strip_prefix("subscribe:"))
        })
        .map(|v| v.trim().trim_matches('"'))
        .collect();
    assert_eq!(subjects.len(), 1, "one subject space: {subjects:?}");
    let prefix = subjects
        .first()
        .and_then(|p| p.strip_suffix(".>"))
        .expect("permissions `PREFIX.>`")
        .to_string();

    Bus {
        host: s(&svc["metadata"]["name"]).to_string(),
        port: u16::try_from(sp["port"].as_u64().expect("a Service port")).expect("a port"),
        conf,
        prefix,
    }
}

/// The Service `name` selects the pods of Deployment `deploy` and reaches their port
/// `port`.
fn check_service(docs: &[Value], name: &str, deploy: &str, port: u16) {
    let svc = find(docs, "Service", name);
    let d = find(docs, "Deployment", deploy);
    assert!(
        selects(
            &svc["spec"]["selector"],
            &d["spec"]["template"]["metadata"]["labels"]
        ),
        "Service {name} selects the pods of {deploy}"
    );
    let c = &seq(&d["spec"]["template"]["spec"]["containers"])[0];
    for p in seq(&svc["spec"]["ports"]) {
        assert_eq!(container_port(c, &p["targetPort"]), port, "Service {name}");
    }
}

#[test]
fn the_kubernetes_manifests_agree_with_their_configs() {
    let image = image();
    let docs = manifests();
    let edge = served(&docs, "lrpc", &image);
    let store = served(&docs, "lrpc-store", &image);
    let bus = bus(&docs);

    // The edge: two replicas behind a Service.
    let d = find(&docs, "Deployment", "lrpc");
    assert_eq!(d["spec"]["replicas"].as_u64(), Some(2));
    assert!(!edge.config.routes.is_empty(), "the edge serves routes");
    check_service(&docs, "lrpc", "lrpc", listen_port(&edge.config));

    // The NATS endpoint: the bus's Service, port and prefix, on both sides.
    let want = format!("nats://{}:{}/{}", bus.host, bus.port, bus.prefix);
    let remotes: Vec<String> = edge
        .config
        .remotes
        .values()
        .map(|r| r.endpoint.to_string())
        .collect();
    assert!(
        !remotes.is_empty(),
        "the edge reaches the tier through [remotes]"
    );
    for r in &remotes {
        assert_eq!(*r, want, "the edge's remote is on the bus");
    }
    let network = store
        .config
        .network
        .as_ref()
        .expect("the tier serves on the bus ([network])");
    assert!(!network.listen.is_empty());
    for l in &network.listen {
        assert_eq!(l.to_string(), want, "the tier listens on the bus");
    }
    // What the edge calls, the tier serves.
    for r in edge.config.remotes.values() {
        assert!(
            network
                .exports
                .as_ref()
                .is_some_and(|e| e.contains(&r.interface)),
            "the tier serves {}",
            r.interface
        );
    }
    let _ = std::fs::remove_dir_all(&edge.dir);
    let _ = std::fs::remove_dir_all(&store.dir);
}

// ---------------------------------------------------------------------------------------
// The shipped configs, served

/// A child process killed when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `lrpc serve config --listen 127.0.0.1:0` with its cache in `cache_home`: the server
/// and its address, once it listens (the log is in `log`).
fn serve(config: &Path, cache_home: &Path, log: &Path) -> (Killed, String) {
    let mut child = Killed(
        Command::new(LRPC)
            .arg("serve")
            .arg(config)
            .args(["--listen", "127.0.0.1:0"])
            .env("XDG_CACHE_HOME", cache_home)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(log).expect("the log file"))
            .spawn()
            .expect("start lrpc serve"),
    );
    let out = child.0.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(out).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx.recv_timeout(BOUND).unwrap_or_default();
    let Some(addr) = line.trim().strip_prefix("listening on http://") else {
        let _ = child.0.kill();
        let _ = child.0.wait();
        panic!(
            "lrpc serve {} did not start: {line}\n{}",
            config.display(),
            std::fs::read_to_string(log).unwrap_or_default()
        );
    };
    let addr = addr.to_string();
    (child, addr)
}

#[test]
fn the_shipped_config_serves_its_route_and_probes() {
    let dir = common::scratch("lrpc-deploy", "serve");
    let config = root().join("deploy/lrpc.toml");
    let (_server, addr) = serve(&config, &dir, &dir.join("serve.log"));
    let c = shipped_config();

    let health = common::request(&addr, "GET", &c.probes.health, &[], b"");
    assert_eq!(health.status, 200, "{}", health.text());
    let ready = common::request(&addr, "GET", &c.probes.ready, &[], b"");
    assert_eq!(ready.status, 200, "{}", ready.text());
    // Through both plugins: `http-rewrite` drops `/v1`, `http-hello` greets.
    let hello = common::request(&addr, "GET", "/v1/greet", &[], b"");
    assert_eq!(hello.status, 200, "{}", hello.text());
    assert_eq!(hello.text(), "hello anonymous at GET /greet\n");
    // The compile cache went where the units and manifests expect it.
    assert!(
        dir.join("lrpc").is_dir(),
        "the cache folder $XDG_CACHE_HOME/lrpc"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// The Kubernetes configs against the manifests' NATS config, run by a real `nats-server`
/// on loopback: the tier serves the store on the bus, the edge's client passes the store's
/// self-test through it (what `kubectl exec deploy/lrpc -- lrpc run /etc/lrpc/lrpc.toml`
/// does), and the edge serves its route and probes with the remote configured.
#[test]
fn the_kubernetes_configs_serve_and_call_over_their_nats_bus() {
    let image = image();
    let docs = manifests();
    let edge = served(&docs, "lrpc", &image);
    let store = served(&docs, "lrpc-store", &image);
    let bus = bus(&docs);

    // The NATS user: one nkey, its seed in both config folders, its public key for the
    // server (as the Secret gives them).
    let user = nkeys::KeyPair::new_user();
    let seed = user.seed().expect("a seed");
    let port = free_port();
    let monitor = free_port();
    let conf = edge.dir.join("nats-server.conf");
    std::fs::write(&conf, &bus.conf).expect("write");
    let nats_var = bus
        .conf
        .lines()
        .find_map(|l| l.trim().strip_prefix("nkey:"))
        .and_then(|v| v.trim().strip_prefix('$'))
        .expect("nkey: $VAR")
        .to_string();
    let mut nats = Killed(
        Command::new(common::nats_server())
            .arg("-c")
            .arg(&conf)
            .args(["-a", "127.0.0.1", "-p", &port.to_string()])
            .args(["-m", &monitor.to_string()])
            .env(&nats_var, user.public_key())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nats-server"),
    );
    let until = Instant::now() + BOUND;
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Some(status) = nats.0.try_wait().expect("try_wait") {
            panic!("nats-server exited: {status}");
        }
        assert!(Instant::now() < until, "nats-server did not start");
        std::thread::sleep(Duration::from_millis(20));
    }

    // The configs as shipped, but for the bus's address: loopback here.
    let from = format!("nats://{}:{}/", bus.host, bus.port);
    let to = format!("nats://127.0.0.1:{port}/");
    let local = |s: &Served| -> PathBuf {
        let path = s.dir.join(&s.file);
        let text = std::fs::read_to_string(&path).expect("read");
        assert!(text.contains(&from), "{}", path.display());
        std::fs::write(&path, text.replace(&from, &to)).expect("write");
        for entry in std::fs::read_dir(&s.dir).expect("the folder") {
            let p = entry.expect("an entry").path();
            if p.extension().is_some_and(|e| e == "nk") {
                std::fs::write(&p, &seed).expect("write the seed");
            }
        }
        path
    };
    let store_config = local(&store);
    let edge_config = local(&edge);

    let (_tier, tier_addr) = serve(&store_config, &store.dir, &store.dir.join("serve.log"));
    let ready = common::request(&tier_addr, "GET", &store.config.probes.ready, &[], b"");
    assert_eq!(ready.status, 200, "{}", ready.text());

    // The edge's client: the key-value self-test, across the bus.
    let out = Command::new(LRPC)
        .arg("run")
        .arg(&edge_config)
        .env("XDG_CACHE_HOME", &edge.dir)
        .output()
        .expect("lrpc run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout, "0\n", "{stderr}");

    // The edge serves its route and probes with the remote bound.
    let (_edge, edge_addr) = serve(&edge_config, &edge.dir, &edge.dir.join("serve.log"));
    let health = common::request(&edge_addr, "GET", &edge.config.probes.health, &[], b"");
    assert_eq!(health.status, 200, "{}", health.text());
    let ready = common::request(&edge_addr, "GET", &edge.config.probes.ready, &[], b"");
    assert_eq!(ready.status, 200, "{}", ready.text());
    let hello = common::request(&edge_addr, "GET", "/v1/greet", &[], b"");
    assert_eq!(hello.status, 200, "{}", hello.text());
    assert_eq!(hello.text(), "hello anonymous at GET /greet\n");
    drop(nats);
    let _ = std::fs::remove_dir_all(&edge.dir);
    let _ = std::fs::remove_dir_all(&store.dir);
}
