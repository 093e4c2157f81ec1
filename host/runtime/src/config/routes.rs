//! `[[routes]]`: a path prefix, the chain of domains its requests go through, and the
//! route's workers and limits.

use super::raw::*;
use super::spec::*;
use super::text::{ConfigError, Ctx};
use std::collections::BTreeMap;
use toml::Spanned;

/// Checks the routes against the domains: distinct prefixes, chains of HTTP plugins that
/// may end in one `wasi:http` handler, at most [`MAX_WORKERS`] workers in all. A route's
/// `max-body` defaults to the `[serve]` table's.
pub(super) fn routes(
    cx: &Ctx<'_>,
    raw: &[Spanned<RawRoute>],
    domains: &BTreeMap<String, DomainSpec>,
    max_body: usize,
) -> Result<Vec<Route>, ConfigError> {
    let mut routes: Vec<Route> = Vec::new();
    let mut workers_in_all = 0;
    for r in raw {
        let rr = r.get_ref();
        if !rr.prefix.get_ref().starts_with('/') {
            return Err(cx.err(&rr.prefix, "a route prefix starts with `/`"));
        }
        if let Some(before) = routes.iter().find(|x| x.prefix == *rr.prefix.get_ref()) {
            return Err(cx.err(
                &rr.prefix,
                format!("the prefix is the route's of line {} already", before.line),
            ));
        }
        let chain = chain(cx, &rr.chain, domains)?;
        let workers = match &rr.workers {
            Some(w) => cx.count(w, "workers", 256)?,
            None => 2,
        };
        workers_in_all += workers;
        if workers_in_all > MAX_WORKERS {
            return Err(cx.err_at(
                r.span().start,
                format!("the routes have more than {MAX_WORKERS} workers in all"),
            ));
        }
        let max_body = match &rr.max_body {
            Some(m) => cx.count(m, "max-body", 1 << 30)?,
            None => max_body,
        };
        let max_in_flight = match &rr.max_in_flight {
            Some(m) => cx.count(m, "max-in-flight", 65_536)?,
            None => 1024,
        };
        let reuse = match &rr.reuse {
            Some(n)
                if chain
                    .last()
                    .and_then(|h| domains.get(h))
                    .is_some_and(DomainSpec::http_handler) =>
            {
                Some(cx.count(n, "reuse", MAX_REUSE as i64)?)
            }
            Some(n) => {
                return Err(cx.err(
                    n,
                    format!("`reuse` is for routes that end in a `{HANDLER_INTERFACE}` component"),
                ));
            }
            None => None,
        };
        routes.push(Route {
            prefix: rr.prefix.get_ref().clone(),
            chain,
            workers,
            max_body,
            max_in_flight,
            reuse,
            line: cx.line(r.span().start),
        });
    }
    Ok(routes)
}

/// A route's chain: 1 to [`MAX_CHAIN`] domains, each an HTTP plugin, but for the last,
/// which may be a `wasi:http` handler instead.
fn chain(
    cx: &Ctx<'_>,
    raw: &Spanned<Vec<Spanned<String>>>,
    domains: &BTreeMap<String, DomainSpec>,
) -> Result<Vec<String>, ConfigError> {
    if raw.get_ref().is_empty() {
        return Err(cx.err(raw, "a route needs at least one plugin"));
    }
    if raw.get_ref().len() > MAX_CHAIN {
        return Err(cx.err(raw, format!("a chain has at most {MAX_CHAIN} plugins")));
    }
    let mut chain = Vec::new();
    let last = raw.get_ref().len() - 1;
    for (i, p) in raw.get_ref().iter().enumerate() {
        match domains.get(p.get_ref()) {
            None => return Err(cx.err(p, format!("no domain `{}`", p.get_ref()))),
            Some(d) if d.http_handler() && i != last => {
                return Err(cx.err(
                    p,
                    format!(
                        "`{}` is a `{HANDLER_INTERFACE}` component: it answers every request, \
                         so it goes last in a chain",
                        p.get_ref()
                    ),
                ));
            }
            Some(d) if d.plugin().is_none() && !d.http_handler() => {
                return Err(cx.err(
                    p,
                    format!(
                        "domain `{}` exports neither `{PLUGIN_INTERFACE}` (or \
                         `{PLUGIN_INTERFACE_BYTES}`) nor `{HANDLER_INTERFACE}`",
                        p.get_ref()
                    ),
                ));
            }
            Some(_) => chain.push(p.get_ref().clone()),
        }
    }
    Ok(chain)
}
