//! `[remotes.NAME]` and `[network]`: remote exports' endpoints, the addresses this kernel
//! serves on, their TLS and allow lists, and what a `nats://` endpoint presents to its NATS
//! server.

use super::raw::*;
use super::spec::*;
use super::text::{ConfigError, Ctx};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use toml::Spanned;
fn endpoint(cx: &Ctx<'_>, s: &Spanned<String>) -> Result<lrpc_remote::Endpoint, ConfigError> {
    s.get_ref().parse().map_err(|e: String| cx.err(s, e))
}

pub(super) fn remote(
    cx: &Ctx<'_>,
    name: &str,
    r: &Spanned<RawRemote>,
) -> Result<RemoteSpec, ConfigError> {
    let rr = r.get_ref();
    fn keyed(v: &Option<Spanned<String>>) -> Option<(&str, usize)> {
        v.as_ref().map(|v| (v.get_ref().as_str(), v.span().start))
    }
    let end = endpoint(cx, &rr.endpoint)?;
    // `tls` is TLS to the NATS server on `nats://`, to the other kernel on `tcp:`.
    let (nats_tls, kernel_tls) = match end {
        lrpc_remote::Endpoint::Nats(_) => (rr.tls.as_ref(), None),
        _ => (None, rr.tls.as_ref()),
    };
    let keys = NatsKeys {
        creds: keyed(&rr.creds),
        nkey_seed: keyed(&rr.nkey_seed),
        user_env: keyed(&rr.user_env),
        password_env: keyed(&rr.password_env),
        token_env: keyed(&rr.token_env),
        tls: nats_tls.map(|v| (v.get_ref(), v.span().start)),
    };
    Ok(RemoteSpec {
        name: name.to_string(),
        interface: rr.interface.get_ref().clone(),
        endpoint: nats_auth(cx, end, &keys)?,
        deadline: rr.deadline.as_ref().map(|d| cx.duration(d)).transpose()?,
        tls: kernel_tls
            .map(|t| remote_tls(cx, t, &rr.endpoint))
            .transpose()?,
        line: cx.line(r.span().start),
    })
}

/// One address of `[network] listen`: a string, or `{ address = "…", insecure = true }`; with
/// whether it is served in clear although other machines can reach it.
///
/// A TCP address that is not loopback is refused unless `[network] tls` serves it or it says
/// `insecure = true`: DESIGN.md has remote callers prove who they are.
fn listen_endpoint(
    cx: &Ctx<'_>,
    l: &Spanned<toml::Value>,
    tls: bool,
) -> Result<(lrpc_remote::Endpoint, bool), ConfigError> {
    const FORMS: &str = "an address is a string like \"tcp:127.0.0.1:7000\", or a table \
                         `{ address = \"tcp:0.0.0.0:7000\", insecure = true }`";
    let mut keys = NatsKeys::default();
    let (address, insecure) = match l.get_ref() {
        toml::Value::String(a) => (a.as_str(), None),
        toml::Value::Table(t) => {
            if let Some(k) = t
                .keys()
                .find(|k| !matches!(k.as_str(), "address" | "insecure") && !is_nats_key(k))
            {
                return Err(cx.err(l, format!("unknown key `{k}`: {FORMS}")));
            }
            let Some(toml::Value::String(a)) = t.get("address") else {
                return Err(cx.err(l, format!("`address` missing or not a string: {FORMS}")));
            };
            let insecure = match t.get("insecure") {
                None => false,
                Some(toml::Value::Boolean(b)) => *b,
                Some(_) => return Err(cx.err(l, "`insecure` is `true` or `false`")),
            };
            keys = NatsKeys::in_table(cx, t, l.span().start)?;
            (a.as_str(), Some(insecure))
        }
        _ => return Err(cx.err(l, FORMS)),
    };
    let e: lrpc_remote::Endpoint = address.parse().map_err(|e: String| cx.err(l, e))?;
    let e = nats_auth(cx, e, &keys)?;
    let reachable = matches!(e, lrpc_remote::Endpoint::Tcp(_)) && !e.is_local() && !tls;
    match insecure {
        Some(true) if reachable => Ok((e, true)),
        _ if reachable => Err(cx.err(
            l,
            format!(
                "`{e}` is reachable from other machines: serve it over TLS (`[network] tls = \
                 {{ cert = \"…\", key = \"…\", client-ca = \"…\" }}`), or in clear with \
                 `{{ address = \"{address}\", insecure = true }}` (or listen on 127.0.0.1 or a \
                 unix: socket)"
            ),
        )),
        _ => Ok((e, false)),
    }
}

/// The keys of an endpoint that say what it presents to a NATS server, each with where it
/// is written: `creds`, `nkey-seed`, `user-env` with `password-env`, `token-env` (at most
/// one kind of credential), and `tls = { ca, cert, key }`.
#[derive(Default)]
struct NatsKeys<'a> {
    creds: Option<(&'a str, usize)>,
    nkey_seed: Option<(&'a str, usize)>,
    user_env: Option<(&'a str, usize)>,
    password_env: Option<(&'a str, usize)>,
    token_env: Option<(&'a str, usize)>,
    tls: Option<(&'a toml::Value, usize)>,
}

/// Whether `k` is one of the NATS keys of an endpoint ([`NatsKeys`]).
fn is_nats_key(k: &str) -> bool {
    matches!(
        k,
        "creds" | "nkey-seed" | "user-env" | "password-env" | "token-env" | "tls"
    )
}

impl<'a> NatsKeys<'a> {
    /// The NATS keys of a `[network] listen` table written at `at`.
    fn in_table(cx: &Ctx<'_>, t: &'a toml::Table, at: usize) -> Result<NatsKeys<'a>, ConfigError> {
        let text = |k: &str| match t.get(k) {
            None => Ok(None),
            Some(toml::Value::String(v)) => Ok(Some((v.as_str(), at))),
            Some(_) => Err(cx.err_at(at, format!("`{k}` is a string"))),
        };
        Ok(NatsKeys {
            creds: text("creds")?,
            nkey_seed: text("nkey-seed")?,
            user_env: text("user-env")?,
            password_env: text("password-env")?,
            token_env: text("token-env")?,
            tls: t.get("tls").map(|v| (v, at)),
        })
    }

    /// The first key given, with its name.
    fn first(&self) -> Option<(&'static str, usize)> {
        [
            ("creds", self.creds.map(|c| c.1)),
            ("nkey-seed", self.nkey_seed.map(|c| c.1)),
            ("user-env", self.user_env.map(|c| c.1)),
            ("password-env", self.password_env.map(|c| c.1)),
            ("token-env", self.token_env.map(|c| c.1)),
            ("tls", self.tls.map(|c| c.1)),
        ]
        .into_iter()
        .find_map(|(k, at)| Some((k, at?)))
    }
}

/// `endpoint` presenting what `keys` say to its NATS server: files relative to the config
/// (read and checked now), secrets from environment variables (read now; never from the
/// config itself). A missing file, an unset variable or a key on an endpoint that is not
/// `nats://` or `tls://` is an error at its line.
fn nats_auth(
    cx: &Ctx<'_>,
    endpoint: lrpc_remote::Endpoint,
    keys: &NatsKeys<'_>,
) -> Result<lrpc_remote::Endpoint, ConfigError> {
    use lrpc_remote::{NatsAuth, NatsCredentials};
    let Some((first, at)) = keys.first() else {
        return Ok(endpoint);
    };
    let lrpc_remote::Endpoint::Nats(nats) = endpoint else {
        return Err(cx.err_at(
            at,
            format!("`{first}` is for nats:// and tls:// endpoints (a NATS server's security)"),
        ));
    };
    let file = |(p, at): (&str, usize), what: &str| {
        let path = cx.dir.join(p);
        std::fs::read_to_string(&path)
            .map_err(|e| cx.err_at(at, format!("{what} `{}`: {e}", path.display())))
    };
    let env = |(name, at): (&str, usize)| {
        std::env::var(name)
            .map_err(|_| cx.err_at(at, format!("the environment variable `{name}` is not set")))
    };
    let given = [
        keys.creds.map(|c| ("creds", c.1)),
        keys.nkey_seed.map(|c| ("nkey-seed", c.1)),
        keys.user_env
            .or(keys.password_env)
            .map(|c| ("user-env", c.1)),
        keys.token_env.map(|c| ("token-env", c.1)),
    ];
    let mut kinds = given.iter().flatten();
    if let (Some((a, _)), Some((b, at))) = (kinds.next(), kinds.next()) {
        return Err(cx.err_at(
            *at,
            format!("give one NATS credential: `{a}` or `{b}`, not both"),
        ));
    }
    let checked = |at: usize, r: Result<NatsCredentials, String>| r.map_err(|e| cx.err_at(at, e));
    let credentials = match (keys.creds, keys.nkey_seed, keys.user_env, keys.password_env) {
        (Some(c), ..) => Some(checked(
            c.1,
            NatsCredentials::creds(&file(c, "credentials file")?),
        )?),
        (_, Some(k), ..) => Some(checked(
            k.1,
            NatsCredentials::nkey_seed(&file(k, "nkey seed file")?),
        )?),
        (_, _, Some(u), Some(p)) => Some(NatsCredentials::user_password(&env(u)?, &env(p)?)),
        (_, _, Some((_, at)), None) => {
            return Err(cx.err_at(at, "`user-env` needs `password-env` beside it"));
        }
        (_, _, None, Some((_, at))) => {
            return Err(cx.err_at(at, "`password-env` needs `user-env` beside it"));
        }
        (None, None, None, None) => keys
            .token_env
            .map(env)
            .transpose()?
            .map(|t| NatsCredentials::token(&t)),
    };
    let mut auth = NatsAuth::new();
    if let Some(c) = credentials {
        auth = auth.with_credentials(c);
    }
    if let Some((v, at)) = keys.tls {
        auth = auth.with_tls(nats_tls(cx, v, at)?);
    }
    Ok(lrpc_remote::Endpoint::Nats(nats.with_auth(auth)))
}

/// `tls = { ca = "ca.pem", cert = "client.pem", key = "client.key" }` of a NATS endpoint:
/// every key optional (no `ca`: the system's CAs), `cert` and `key` together; the files
/// must exist.
fn nats_tls(cx: &Ctx<'_>, v: &toml::Value, at: usize) -> Result<lrpc_remote::NatsTls, ConfigError> {
    const FORM: &str = "`tls` of a NATS endpoint is a table `{ ca = \"ca.pem\", cert = \"client.pem\", \
                        key = \"client.key\" }` (each key optional; `cert` and `key` together)";
    let toml::Value::Table(t) = v else {
        return Err(cx.err_at(at, FORM));
    };
    if let Some(k) = t
        .keys()
        .find(|k| !matches!(k.as_str(), "ca" | "cert" | "key"))
    {
        return Err(cx.err_at(at, format!("unknown key `{k}`: {FORM}")));
    }
    let file = |k: &str| -> Result<Option<PathBuf>, ConfigError> {
        match t.get(k) {
            None => Ok(None),
            Some(toml::Value::String(p)) => {
                let path = cx.dir.join(p);
                if path.is_file() {
                    Ok(Some(path))
                } else {
                    Err(cx.err_at(at, format!("`tls` {k} `{}` not found", path.display())))
                }
            }
            Some(_) => Err(cx.err_at(at, FORM)),
        }
    };
    let mut tls = lrpc_remote::NatsTls::new();
    if let Some(ca) = file("ca")? {
        tls = tls.with_ca(&ca);
    }
    match (file("cert")?, file("key")?) {
        (Some(c), Some(k)) => tls = tls.with_client_certificate(&c, &k),
        (None, None) => {}
        _ => return Err(cx.err_at(at, FORM)),
    }
    Ok(tls)
}

pub(super) fn network(
    cx: &Ctx<'_>,
    n: &Spanned<RawNetwork>,
    domains: &BTreeMap<String, DomainSpec>,
) -> Result<NetworkSpec, ConfigError> {
    let rn = n.get_ref();
    if rn.listen.get_ref().is_empty() {
        return Err(cx.err(&rn.listen, "`listen` needs at least one address"));
    }
    let tls = rn.tls.as_ref().map(|t| network_tls(cx, t)).transpose()?;
    let mut listen = Vec::new();
    let mut insecure = Vec::new();
    for l in rn.listen.get_ref() {
        let (e, in_clear) = listen_endpoint(cx, l, tls.is_some())?;
        if in_clear {
            insecure.push(e.clone());
        }
        listen.push(e);
    }
    let mut allow = BTreeMap::new();
    let exports = match &rn.exports {
        Some(list) => {
            let mut names = Vec::new();
            for e in list {
                let (name, allowed) = network_export(cx, e, tls.as_ref())?;
                let exported = domains
                    .values()
                    .filter(|d| d.served_to_network())
                    .any(|d| d.exports.iter().any(|x| x.name == name));
                if !exported {
                    return Err(cx.err(
                        e,
                        format!("no core domain (other than an HTTP plugin) exports `{name}`"),
                    ));
                }
                if let Some(a) = allowed {
                    allow.insert(name.clone(), a);
                }
                names.push(name);
            }
            Some(names)
        }
        None => None,
    };
    let workers = match &rn.workers {
        Some(w) => cx.count(w, "workers", 256)?,
        None => 2,
    };
    let group = match &rn.group {
        Some(g) if g.get_ref().is_empty() || g.get_ref().contains(char::is_whitespace) => {
            return Err(cx.err(g, "a queue group is a non-empty name without spaces"));
        }
        Some(g) => g.get_ref().clone(),
        None => "lrpc".to_string(),
    };
    Ok(NetworkSpec {
        listen,
        insecure,
        tls,
        allow,
        exports,
        workers,
        group,
        line: cx.line(n.span().start),
    })
}

// TLS and allow lists of remote endpoints (`[network] tls`, `exports` entries with `allow`,
// `[remotes.NAME] tls`). The PEM files are loaded here, so a missing or bad file is reported
// with the config's line.

/// The string keys of a hand-read table: each of `keys` present, `path_keys` made relative
/// to the config's folder; anything else is refused.
fn tls_table(
    cx: &Ctx<'_>,
    t: &Spanned<toml::Value>,
    keys: &[&str],
    forms: &str,
) -> Result<BTreeMap<String, String>, ConfigError> {
    let toml::Value::Table(table) = t.get_ref() else {
        return Err(cx.err(t, format!("`tls` is a table: {forms}")));
    };
    let mut out = BTreeMap::new();
    for (k, v) in table {
        if !keys.contains(&k.as_str()) {
            return Err(cx.err(t, format!("unknown key `{k}` in `tls`: {forms}")));
        }
        let toml::Value::String(v) = v else {
            return Err(cx.err(t, format!("`tls` key `{k}` is a string: {forms}")));
        };
        out.insert(k.clone(), v.clone());
    }
    Ok(out)
}

/// `[network] tls = { cert = "…", key = "…", client-ca = "…" }`.
fn network_tls(
    cx: &Ctx<'_>,
    t: &Spanned<toml::Value>,
) -> Result<Arc<lrpc_remote::ServerTls>, ConfigError> {
    const FORMS: &str = "`tls = { cert = \"server.pem\", key = \"server.key\", client-ca = \
                         \"ca.pem\" }` (client-ca: callers need a certificate it signed)";
    let mut m = tls_table(cx, t, &["cert", "key", "client-ca"], FORMS)?;
    let mut path = |k: &str| m.remove(k).map(|p| cx.dir.join(p));
    let (Some(cert), Some(key)) = (path("cert"), path("key")) else {
        return Err(cx.err(t, format!("`tls` needs `cert` and `key`: {FORMS}")));
    };
    let files = lrpc_remote::ServerTlsFiles {
        cert,
        key,
        client_ca: path("client-ca"),
    };
    lrpc_remote::ServerTls::load(&files).map_err(|e| cx.err(t, e.to_string()))
}

/// `[remotes.NAME] tls = { ca = "…", cert = "…", key = "…", server-name = "…" }`, for a
/// `tcp:` endpoint.
fn remote_tls(
    cx: &Ctx<'_>,
    t: &Spanned<toml::Value>,
    endpoint: &Spanned<String>,
) -> Result<Arc<lrpc_remote::ClientTls>, ConfigError> {
    const FORMS: &str = "`tls = { ca = \"ca.pem\", cert = \"client.pem\", key = \
                         \"client.key\", server-name = \"kv.example\" }` (cert, key and \
                         server-name may be left out)";
    if !matches!(
        endpoint.get_ref().parse(),
        Ok(lrpc_remote::Endpoint::Tcp(_))
    ) {
        return Err(cx.err(
            t,
            "`tls` is for `tcp:` endpoints (TLS to the other kernel) and `nats://` ones (TLS \
             to the NATS server)",
        ));
    }
    let mut m = tls_table(cx, t, &["ca", "cert", "key", "server-name"], FORMS)?;
    let server_name = m.remove("server-name");
    let mut path = |k: &str| m.remove(k).map(|p| cx.dir.join(p));
    let Some(ca) = path("ca") else {
        return Err(cx.err(t, format!("`tls` needs `ca`: {FORMS}")));
    };
    let cert = match (path("cert"), path("key")) {
        (Some(c), Some(k)) => Some((c, k)),
        (None, None) => None,
        _ => return Err(cx.err(t, format!("`cert` and `key` go together: {FORMS}"))),
    };
    let files = lrpc_remote::ClientTlsFiles {
        ca,
        cert,
        server_name,
    };
    lrpc_remote::ClientTls::load(&files).map_err(|e| cx.err(t, e.to_string()))
}

/// An entry of `[network] exports`: an export name, or `{ name = "…", allow = ["CN=…",
/// "dns:…", "uri:…"] }`; its name and allow list. An allow list needs `[network] tls` with a
/// `client-ca`: only a verified certificate names a caller.
fn network_export(
    cx: &Ctx<'_>,
    e: &Spanned<toml::Value>,
    tls: Option<&Arc<lrpc_remote::ServerTls>>,
) -> Result<(String, Option<Vec<lrpc_remote::Principal>>), ConfigError> {
    const FORMS: &str = "an export is its name, or `{ name = \"lrpc:kv/store\", allow = \
                         [\"CN=billing\", \"dns:edge-1.example\", \"uri:spiffe://…\"] }`";
    let t = match e.get_ref() {
        toml::Value::String(n) => return Ok((n.clone(), None)),
        toml::Value::Table(t) => t,
        _ => return Err(cx.err(e, FORMS)),
    };
    if let Some(k) = t.keys().find(|k| !matches!(k.as_str(), "name" | "allow")) {
        return Err(cx.err(e, format!("unknown key `{k}`: {FORMS}")));
    }
    let Some(toml::Value::String(name)) = t.get("name") else {
        return Err(cx.err(e, format!("`name` missing or not a string: {FORMS}")));
    };
    let Some(list) = t.get("allow") else {
        return Ok((name.clone(), None));
    };
    let toml::Value::Array(list) = list else {
        return Err(cx.err(e, format!("`allow` is a list: {FORMS}")));
    };
    if !tls.is_some_and(|t| t.verifies_clients()) {
        return Err(cx.err(
            e,
            "`allow` needs `[network] tls` with `client-ca`: only a certificate that CA \
             signed names a caller",
        ));
    }
    let mut allow = Vec::new();
    for a in list {
        let toml::Value::String(a) = a else {
            return Err(cx.err(e, format!("`allow` is a list of strings: {FORMS}")));
        };
        allow.push(a.parse().map_err(|m: String| cx.err(e, m))?);
    }
    if allow.is_empty() {
        return Err(cx.err(
            e,
            "`allow = []` lets nobody call the export: leave it out of `exports` instead",
        ));
    }
    Ok((name.clone(), Some(allow)))
}
