//! What ties the domains together, checked once every domain and remote is: binds name a
//! server that exports the interface, components do not bind in a cycle, and each export
//! name has one server.

use super::raw::*;
use super::spec::*;
use super::text::{ConfigError, Ctx};
use std::collections::BTreeMap;

/// Checks every bind: its server is a remote serving the interface, or a domain exporting
/// it under the interface's own name; an interface is bound to one server only.
pub(super) fn binds(
    cx: &Ctx<'_>,
    raw: &BTreeMap<String, toml::Spanned<RawDomain>>,
    domains: &BTreeMap<String, DomainSpec>,
    remotes: &BTreeMap<String, RemoteSpec>,
) -> Result<(), ConfigError> {
    let mut taken: BTreeMap<&str, &str> = BTreeMap::new();
    for (name, d) in raw {
        for b in &d.get_ref().binds {
            let server = b.get_ref().server.get_ref();
            let iface = b.get_ref().interface.get_ref();
            if let Some(r) = remotes.get(server) {
                if r.interface != *iface {
                    return Err(cx.err(
                        &b.get_ref().interface,
                        format!("remote `{server}` serves `{}`, not `{iface}`", r.interface),
                    ));
                }
            } else {
                let Some(s) = domains.get(server) else {
                    return Err(cx.err(&b.get_ref().server, format!("no domain `{server}`")));
                };
                let Some(e) = s.exports.iter().find(|e| e.interface == *iface) else {
                    return Err(cx.err(
                        &b.get_ref().interface,
                        format!("domain `{server}` does not export `{iface}`"),
                    ));
                };
                // A client's stub binds under the interface's own name.
                if e.name != *iface {
                    return Err(cx.err(
                        b,
                        format!(
                            "`{name}` binds to `{iface}` by its interface name, but `{server}` \
                             exports it as `{}`",
                            e.name
                        ),
                    ));
                }
            }
            if let Some(other) = taken.insert(iface, server)
                && other != server
            {
                return Err(cx.err(
                    b,
                    format!("`{iface}` is bound to both `{other}` and `{server}`"),
                ));
            }
        }
    }
    Ok(())
}

/// A component's imports are bound when it is created, so its servers must exist by then:
/// components can not bind in a cycle (core domains bind at run time, and may). The error
/// names the cycle, at the bind that starts it.
pub(super) fn no_component_cycle(
    cx: &Ctx<'_>,
    raw: &BTreeMap<String, toml::Spanned<RawDomain>>,
    domains: &BTreeMap<String, DomainSpec>,
) -> Result<(), ConfigError> {
    let component = |n: &str| domains.get(n).is_some_and(|d| d.component.is_some());
    let servers = |n: &str| -> Vec<&str> {
        raw.get(n).map_or_else(Vec::new, |d| {
            d.get_ref()
                .binds
                .iter()
                .map(|b| b.get_ref().server.get_ref().as_str())
                .filter(|s| component(s))
                .collect()
        })
    };
    for (name, d) in raw {
        if !component(name) {
            continue;
        }
        let Some(cycle) = cycle_through(name, &servers) else {
            continue;
        };
        let first = cycle[1];
        let bind = d
            .get_ref()
            .binds
            .iter()
            .find(|b| b.get_ref().server.get_ref() == first)
            .map_or(d.span().start, |b| b.span().start);
        return Err(cx.err_at(
            bind,
            format!(
                "components bind in a cycle ({}): each is bound when it is created, so none \
                 could be first",
                cycle.join(" -> ")
            ),
        ));
    }
    Ok(())
}

/// The cycle from `name` back to itself along `servers`, if there is one (`name` first and
/// last): a search that visits each domain once, remembering where it came from.
fn cycle_through<'a>(
    name: &'a str,
    servers: &impl Fn(&'a str) -> Vec<&'a str>,
) -> Option<Vec<&'a str>> {
    let mut came_from: BTreeMap<&str, &str> = BTreeMap::new();
    let mut todo = vec![name];
    let mut closing = None;
    'search: while let Some(at) = todo.pop() {
        for s in servers(at) {
            if s == name {
                closing = Some(at);
                break 'search;
            }
            if !came_from.contains_key(s) {
                came_from.insert(s, at);
                todo.push(s);
            }
        }
    }
    // The domains between `name` and the last one, walked back from the last.
    let mut between = Vec::new();
    let mut at = closing?;
    while at != name {
        between.push(at);
        at = came_from.get(at).copied().unwrap_or(name);
    }
    between.reverse();
    let mut cycle = vec![name];
    cycle.extend(between);
    cycle.push(name);
    Some(cycle)
}

/// Each export name is served by one domain or remote.
pub(super) fn one_server_per_export(
    cx: &Ctx<'_>,
    domains: &BTreeMap<String, DomainSpec>,
    remotes: &BTreeMap<String, RemoteSpec>,
) -> Result<(), ConfigError> {
    let mut names: BTreeMap<&str, &str> = BTreeMap::new();
    for (dn, d) in domains {
        for e in &d.exports {
            if let Some(other) = names.insert(&e.name, dn) {
                return Err(ConfigError {
                    file: cx.file.to_string(),
                    line: e.line,
                    reason: format!("`{}` is exported by both `{other}` and `{dn}`", e.name),
                });
            }
        }
    }
    for r in remotes.values() {
        if let Some(other) = names.insert(&r.interface, &r.name) {
            return Err(ConfigError {
                file: cx.file.to_string(),
                line: r.line,
                reason: format!(
                    "`{}` is exported by both `{other}` and the remote `{}`",
                    r.interface, r.name
                ),
            });
        }
    }
    Ok(())
}
