//! The config file as written: the TOML tables, deserialized with the span of every value
//! (`Spanned`) so that each section's parser can say `file:line` when it refuses one.

use serde::Deserialize;
use std::collections::BTreeMap;
use toml::Spanned;

/// The file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    #[serde(default)]
    pub(super) kernel: RawKernel,
    #[serde(default)]
    pub(super) domains: BTreeMap<String, Spanned<RawDomain>>,
    #[serde(default)]
    pub(super) run: RawRun,
    #[serde(default)]
    pub(super) serve: RawServe,
    #[serde(default)]
    pub(super) routes: Vec<Spanned<RawRoute>>,
    #[serde(default)]
    pub(super) remotes: BTreeMap<String, Spanned<RawRemote>>,
    pub(super) network: Option<Spanned<RawNetwork>>,
    pub(super) telemetry: Option<Spanned<RawTelemetry>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTelemetry {
    pub(super) endpoint: Option<Spanned<String>>,
    pub(super) protocol: Option<Spanned<String>>,
    #[serde(rename = "service-name")]
    pub(super) service_name: Option<Spanned<String>>,
    #[serde(rename = "sample-ratio")]
    pub(super) sample_ratio: Option<Spanned<f64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRemote {
    pub(super) interface: Spanned<String>,
    pub(super) endpoint: Spanned<String>,
    pub(super) deadline: Option<Spanned<String>>,
    // What a `nats://` endpoint presents to the NATS server (see `nats_auth`).
    pub(super) creds: Option<Spanned<String>>,
    #[serde(rename = "nkey-seed")]
    pub(super) nkey_seed: Option<Spanned<String>>,
    #[serde(rename = "user-env")]
    pub(super) user_env: Option<Spanned<String>>,
    #[serde(rename = "password-env")]
    pub(super) password_env: Option<Spanned<String>>,
    #[serde(rename = "token-env")]
    pub(super) token_env: Option<Spanned<String>>,
    /// `tcp:`: `{ ca, cert, key, server-name }` (read by hand, see [`remote_tls`]);
    /// `nats://`: `{ ca, cert, key }` (see `nats_auth`).
    pub(super) tls: Option<Spanned<toml::Value>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawNetwork {
    /// Each an endpoint string, or `{ address = "…", insecure = true }` (read by hand: a
    /// table inside an array is no table of the config's own).
    pub(super) listen: Spanned<Vec<Spanned<toml::Value>>>,
    /// Each an export name, or `{ name = "…", allow = […] }` (see [`network_export`]).
    pub(super) exports: Option<Vec<Spanned<toml::Value>>>,
    pub(super) workers: Option<Spanned<i64>>,
    pub(super) group: Option<Spanned<String>>,
    /// `{ cert, key, client-ca }` (read by hand, see [`network_tls`]).
    pub(super) tls: Option<Spanned<toml::Value>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawKernel {
    pub(super) deadline: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) wit: Vec<Spanned<String>>,
    #[serde(rename = "cache-dir")]
    pub(super) cache_dir: Option<Spanned<RawCacheDir>>,
}

/// `[kernel] cache-dir`: a folder, `true` (the per-user folder) or `false` (no cache).
#[derive(Debug)]
pub(super) enum RawCacheDir {
    Folder(String),
    On(bool),
}

impl<'de> Deserialize<'de> for RawCacheDir {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = RawCacheDir;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a folder, or `false` for no cache, or `true` for the default folder")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<RawCacheDir, E> {
                Ok(RawCacheDir::Folder(v.into()))
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<RawCacheDir, E> {
                Ok(RawCacheDir::On(v))
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDomain {
    pub(super) guest: Option<Spanned<String>>,
    pub(super) wasm: Option<Spanned<String>>,
    pub(super) kind: Option<Spanned<String>>,
    pub(super) replicas: Option<Spanned<i64>>,
    pub(super) isolation: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) exports: Vec<Spanned<RawExport>>,
    #[serde(default)]
    pub(super) binds: Vec<Spanned<RawBind>>,
    pub(super) limits: Option<Spanned<RawLimits>>,
    pub(super) wasi: Option<Spanned<RawWasi>>,
    pub(super) trust_fully: Option<Spanned<Vec<String>>>,
    pub(super) body: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWasi {
    #[serde(default)]
    pub(super) env: BTreeMap<String, String>,
    #[serde(default)]
    pub(super) args: Vec<String>,
    #[serde(default)]
    pub(super) preopens: Vec<Spanned<RawPreopen>>,
    pub(super) stdout: Option<Spanned<String>>,
    pub(super) stderr: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) network: Vec<Spanned<String>>,
    #[serde(default)]
    pub(super) http: Vec<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPreopen {
    pub(super) host: Spanned<String>,
    pub(super) guest: Spanned<String>,
    #[serde(default)]
    pub(super) writable: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawExport {
    pub(super) interface: Spanned<String>,
    pub(super) name: Option<Spanned<String>>,
    pub(super) presentation: Option<Spanned<String>>,
    pub(super) serving: Option<Spanned<String>>,
    pub(super) deadline: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBind {
    pub(super) interface: Spanned<String>,
    pub(super) server: Spanned<String>,
    pub(super) presentation: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLimits {
    pub(super) deadline: Option<Spanned<String>>,
    pub(super) memory: Option<Spanned<toml::Value>>,
    pub(super) fuel: Option<Spanned<toml::Value>>,
    pub(super) bindings: Option<Spanned<i64>>,
    pub(super) astack_bytes: Option<Spanned<toml::Value>>,
    pub(super) oob_bytes: Option<Spanned<toml::Value>>,
    pub(super) mappings: Option<Spanned<i64>>,
    pub(super) reuse: Option<Spanned<i64>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRun {
    pub(super) entry: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawServe {
    pub(super) listen: Option<Spanned<String>>,
    pub(super) admin: Option<Spanned<bool>>,
    #[serde(rename = "admin-token")]
    pub(super) admin_token: Option<Spanned<String>>,
    #[serde(rename = "admin-token-env")]
    pub(super) admin_token_env: Option<Spanned<String>>,
    #[serde(rename = "max-body")]
    pub(super) max_body: Option<Spanned<i64>>,
    #[serde(rename = "max-connections")]
    pub(super) max_connections: Option<Spanned<i64>>,
    #[serde(rename = "header-timeout")]
    pub(super) header_timeout: Option<Spanned<String>>,
    #[serde(rename = "body-timeout")]
    pub(super) body_timeout: Option<Spanned<String>>,
    #[serde(rename = "shutdown-grace")]
    pub(super) shutdown_grace: Option<Spanned<String>>,
    #[serde(rename = "tls-cert")]
    pub(super) tls_cert: Option<Spanned<String>>,
    #[serde(rename = "tls-key")]
    pub(super) tls_key: Option<Spanned<String>>,
    #[serde(rename = "min-body-rate")]
    pub(super) min_body_rate: Option<Spanned<toml::Value>>,
    #[serde(rename = "min-body-rate-grace")]
    pub(super) min_body_rate_grace: Option<Spanned<String>>,
    #[serde(rename = "recycle-above")]
    pub(super) recycle_above: Option<Spanned<toml::Value>>,
    #[serde(rename = "health-path")]
    pub(super) health_path: Option<Spanned<String>>,
    #[serde(rename = "ready-path")]
    pub(super) ready_path: Option<Spanned<String>>,
    #[serde(rename = "log-format")]
    pub(super) log_format: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRoute {
    pub(super) prefix: Spanned<String>,
    pub(super) chain: Spanned<Vec<Spanned<String>>>,
    pub(super) workers: Option<Spanned<i64>>,
    #[serde(rename = "max-body")]
    pub(super) max_body: Option<Spanned<i64>>,
    #[serde(rename = "max-in-flight")]
    pub(super) max_in_flight: Option<Spanned<i64>>,
    pub(super) reuse: Option<Spanned<i64>>,
}
