//! `[serve]`: the edge server's address, TLS files, connection budgets, body limits, the
//! probes and the admin endpoint.

use super::raw::*;
use super::spec::*;
use super::text::{ConfigError, Ctx, parse_rate};

/// The `[serve]` table, checked.
pub(super) struct ServeTable {
    pub(super) listen: Option<String>,
    pub(super) admin: Option<AdminToken>,
    pub(super) probes: Probes,
    pub(super) log_format: Option<LogFormat>,
    pub(super) max_body: usize,
    pub(super) recycle_above: Option<usize>,
    pub(super) connections: crate::listener::Connections,
    pub(super) tls: Option<crate::tls::TlsFiles>,
}

/// Checks the `[serve]` table.
pub(super) fn serve(cx: &Ctx<'_>, s: &RawServe) -> Result<ServeTable, ConfigError> {
    let listen = match &s.listen {
        Some(l) => {
            l.get_ref()
                .parse::<std::net::SocketAddr>()
                .map_err(|e| cx.err(l, format!("`{}`: {e}", l.get_ref())))?;
            Some(l.get_ref().clone())
        }
        None => None,
    };
    let log_format = match &s.log_format {
        Some(f) => Some(f.get_ref().parse().map_err(|e: String| cx.err(f, e))?),
        None => None,
    };
    let max_body = match &s.max_body {
        Some(m) => cx.count(m, "max-body", 1 << 30)?,
        None => 16 << 20,
    };
    let recycle_above = match &s.recycle_above {
        None => Some(DEFAULT_RECYCLE_ABOVE),
        Some(v) if matches!(v.get_ref(), toml::Value::Boolean(false)) => None,
        Some(v) => Some(usize::try_from(cx.size(v, "recycle-above")?).unwrap_or(usize::MAX)),
    };
    let tls = match (&s.tls_cert, &s.tls_key) {
        (Some(c), Some(k)) => Some(crate::tls::TlsFiles {
            cert: cx.existing(c, "tls-cert")?,
            key: cx.existing(k, "tls-key")?,
        }),
        (Some(c), None) => return Err(cx.err(c, "`tls-cert` needs `tls-key` too")),
        (None, Some(k)) => return Err(cx.err(k, "`tls-key` needs `tls-cert` too")),
        (None, None) => None,
    };
    Ok(ServeTable {
        listen,
        admin: admin_token(cx, s)?,
        probes: probes(cx, s)?,
        log_format,
        max_body,
        recycle_above,
        connections: connections(cx, s)?,
        tls,
    })
}

/// The connections' budgets: how many at once, the timeouts of a head and of a body's
/// pieces, the shutdown's grace, and the minimum body rate.
fn connections(cx: &Ctx<'_>, s: &RawServe) -> Result<crate::listener::Connections, ConfigError> {
    let mut connections = crate::listener::Connections::default();
    if let Some(m) = &s.max_connections {
        connections.max = cx.count(m, "max-connections", 65_536)?;
    }
    for (key, slot) in [
        (&s.header_timeout, &mut connections.header_timeout),
        (&s.body_timeout, &mut connections.body_timeout),
        (&s.shutdown_grace, &mut connections.shutdown_grace),
    ] {
        if let Some(d) = key {
            *slot = cx.duration(d)?;
        }
    }
    connections.min_body_rate = min_body_rate(cx, s)?;
    Ok(connections)
}

/// The `[serve]` table's minimum body rate: `min-body-rate` (bytes per second, like
/// `"240B/s"` or `"1KiB/s"`; `0` or `false` turns it off) and `min-body-rate-grace`.
fn min_body_rate(
    cx: &Ctx<'_>,
    serve: &RawServe,
) -> Result<Option<crate::body_rate::MinBodyRate>, ConfigError> {
    let mut min = crate::body_rate::MinBodyRate::default();
    if let Some(v) = &serve.min_body_rate {
        let rate = match v.get_ref() {
            toml::Value::Boolean(true) => Some(min.bytes_per_second),
            toml::Value::Boolean(false) => Some(0),
            toml::Value::Integer(n) => u64::try_from(*n).ok(),
            toml::Value::String(t) => parse_rate(t),
            _ => None,
        };
        match rate {
            Some(0) => return Ok(None),
            Some(n) => min.bytes_per_second = n,
            None => {
                return Err(cx.err(
                    v,
                    "min-body-rate is a rate like \"240B/s\" or \"1KiB/s\", or 0 or false \
                     to turn it off",
                ));
            }
        }
    }
    if let Some(g) = &serve.min_body_rate_grace {
        min.grace = cx.duration(g)?;
    }
    Ok(Some(min))
}

/// The probes' paths: each starts with `/` and is made of letters, digits and `-_.~/`, at
/// most 256 of them (a path the router takes literally); the two differ, and neither is
/// `/metrics` nor under `/admin/`, which the server answers itself.
fn probes(cx: &Ctx<'_>, s: &RawServe) -> Result<Probes, ConfigError> {
    let mut probes = Probes::default();
    for (key, slot) in [
        (&s.health_path, &mut probes.health),
        (&s.ready_path, &mut probes.ready),
    ] {
        let Some(p) = key else { continue };
        let path = p.get_ref();
        let plain = |c: char| c.is_ascii_alphanumeric() || "-_.~/".contains(c);
        if !path.starts_with('/') || path.len() > 256 || !path.chars().all(plain) {
            return Err(cx.err(
                p,
                "a probe's path starts with `/` and has at most 256 letters, digits, and \
                 `-`, `_`, `.`, `~` or `/`",
            ));
        }
        if path == "/metrics" || path.starts_with("/admin/") {
            return Err(cx.err(
                p,
                "`/metrics` and the paths under `/admin/` are the server's own",
            ));
        }
        *slot = path.clone();
    }
    if probes.health == probes.ready {
        let at = s.ready_path.as_ref().or(s.health_path.as_ref());
        return Err(cx.err_at(
            at.map_or(0, |p| p.span().start),
            "`health-path` and `ready-path` must differ",
        ));
    }
    Ok(probes)
}

/// The admin endpoint's token: off unless `admin = true`, which needs a token of at least
/// [`AdminToken::MIN_LEN`] characters, from `admin-token` or from the environment variable
/// that `admin-token-env` names.
fn admin_token(cx: &Ctx<'_>, s: &RawServe) -> Result<Option<AdminToken>, ConfigError> {
    let on = s.admin.as_ref().is_some_and(|a| *a.get_ref());
    if !on {
        return match (&s.admin_token, &s.admin_token_env) {
            (Some(t), _) => Err(cx.err(t, "`admin-token` is used only with `admin = true`")),
            (_, Some(e)) => Err(cx.err(e, "`admin-token-env` is used only with `admin = true`")),
            (None, None) => Ok(None),
        };
    }
    let token = match (&s.admin_token, &s.admin_token_env) {
        (Some(_), Some(e)) => {
            return Err(cx.err(e, "give `admin-token` or `admin-token-env`, not both"));
        }
        (Some(t), None) => (t.get_ref().clone(), t.span()),
        (None, Some(e)) => {
            let name = e.get_ref();
            let value = std::env::var(name).map_err(|_| {
                cx.err(e, format!("the environment variable `{}` is not set", name))
            })?;
            (value, e.span())
        }
        (None, None) => {
            let a = s.admin.as_ref().map_or(0, |a| a.span().start);
            return Err(cx.err_at(
                a,
                "`admin = true` needs a token: `admin-token-env = \"NAME\"` (an environment \
                 variable holding it) or `admin-token`",
            ));
        }
    };
    if token.0.chars().count() < AdminToken::MIN_LEN || token.0.chars().any(char::is_whitespace) {
        return Err(cx.err_at(
            token.1.start,
            format!(
                "an admin token has at least {} characters and no spaces",
                AdminToken::MIN_LEN
            ),
        ));
    }
    Ok(Some(AdminToken(token.0)))
}
