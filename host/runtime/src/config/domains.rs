//! `[domains.NAME]`: a domain's module, exports, binds, limits and WASI grants, core and
//! component alike.

use super::raw::*;
use super::spec::*;
use super::text::{ConfigError, Ctx};
use toml::Spanned;
pub(super) fn domain(
    cx: &Ctx<'_>,
    name: &str,
    d: &Spanned<RawDomain>,
) -> Result<DomainSpec, ConfigError> {
    let mut spec = domain_spec(cx, name, d)?;
    if let Some(b) = &d.get_ref().body {
        if spec.plugin().is_none() {
            return Err(cx.err(
                b,
                format!("`body` is for HTTP plugins (domains exporting `{PLUGIN_INTERFACE}`)"),
            ));
        }
        spec.takes_body = match b.get_ref().as_str() {
            "whole" => true,
            "none" => false,
            other => {
                return Err(cx.err(b, format!("body `{other}`: `whole` or `none` expected")));
            }
        };
    }
    Ok(spec)
}

/// A domain's table, but for `body`.
fn domain_spec(
    cx: &Ctx<'_>,
    name: &str,
    d: &Spanned<RawDomain>,
) -> Result<DomainSpec, ConfigError> {
    let r = d.get_ref();
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(cx.err(
            d,
            format!("`{name}`: a domain name is letters, digits, `-`, `_`"),
        ));
    }
    let source = source(cx, name, d)?;
    if kind(cx, r, &source)? {
        return component_domain(cx, name, d, source);
    }
    if let Some(w) = &r.wasi {
        return Err(cx.err(
            w,
            format!("WASI grants are for component domains; `{name}` is a core module"),
        ));
    }
    if let Some(t) = &r.trust_fully {
        return Err(cx.err(
            t,
            "`trust_fully` is for component domains (core modules trust through presentations)",
        ));
    }
    let replicas = match &r.replicas {
        // The kernel's own bound (`lrpc_kernel::Quotas::replicas`): a config it would refuse is
        // refused here, at its line.
        Some(n) => cx.count(
            n,
            "replicas",
            i64::from(lrpc_kernel::Quotas::default().replicas),
        )?,
        None => 1,
    };
    let (limit_deadline, quotas) = match &r.limits {
        Some(l) => core_limits(cx, l.get_ref())?,
        None => (None, None),
    };
    let exports = r
        .exports
        .iter()
        .map(|e| export(cx, name, e, limit_deadline))
        .collect::<Result<Vec<_>, ConfigError>>()?;
    let binds = r
        .binds
        .iter()
        .map(|b| {
            let br = b.get_ref();
            Ok(Bind {
                interface: br.interface.get_ref().clone(),
                server: br.server.get_ref().clone(),
                presentation: br
                    .presentation
                    .as_ref()
                    .map(|p| cx.existing(p, "presentation"))
                    .transpose()?,
                line: cx.line(b.span().start),
            })
        })
        .collect::<Result<Vec<_>, ConfigError>>()?;
    let isolation = isolation(cx, r, &exports)?;
    Ok(DomainSpec {
        name: name.to_string(),
        source,
        replicas,
        isolation,
        exports,
        binds,
        quotas,
        component: None,
        takes_body: true,
        line: cx.line(d.span().start),
    })
}

/// Where a domain's binary comes from: a built-in guest (`guest`) or a file (`wasm`).
fn source(cx: &Ctx<'_>, name: &str, d: &Spanned<RawDomain>) -> Result<Source, ConfigError> {
    let r = d.get_ref();
    match (&r.guest, &r.wasm) {
        (Some(g), None) => {
            let bytes = lrpc_artifacts::by_name(g.get_ref()).ok_or_else(|| {
                let known: Vec<&str> = lrpc_artifacts::BY_NAME.iter().map(|(n, _)| *n).collect();
                cx.err(
                    g,
                    format!(
                        "no built-in guest `{}` (known: {})",
                        g.get_ref(),
                        known.join(", ")
                    ),
                )
            })?;
            Ok(Source::Builtin(g.get_ref().clone(), bytes))
        }
        (None, Some(w)) => Ok(Source::File(cx.existing(w, "module")?)),
        (Some(_), Some(w)) => Err(cx.err(w, "give either `guest` or `wasm`, not both")),
        (None, None) => Err(cx.err(d, format!("domain `{name}` needs `guest` or `wasm`"))),
    }
}

/// Whether the binary is a component (told from its header), checked against `kind` when
/// the table says it.
fn kind(cx: &Ctx<'_>, r: &RawDomain, source: &Source) -> Result<bool, ConfigError> {
    let is_component = match source {
        Source::Builtin(_, bytes) => lrpc_kernel::component::is_component(bytes),
        Source::File(p) => {
            let mut head = [0u8; 8];
            std::fs::File::open(p)
                .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head))
                .is_ok_and(|()| lrpc_kernel::component::is_component(&head))
        }
    };
    if let Some(k) = &r.kind {
        match (k.get_ref().as_str(), is_component) {
            ("component", true) | ("module", false) => {}
            ("component", false) => {
                return Err(cx.err(k, "the binary is a core module, not a component"));
            }
            ("module", true) => {
                return Err(cx.err(k, "the binary is a component, not a core module"));
            }
            (other, _) => {
                return Err(cx.err(
                    k,
                    format!("kind `{other}`: `module` or `component` expected"),
                ));
            }
        }
    }
    Ok(is_component)
}

/// A core domain's `[limits]`: the deadline of its exports (unless one says its own) and
/// its quotas, if any is set.
fn core_limits(
    cx: &Ctx<'_>,
    l: &RawLimits,
) -> Result<(Option<std::time::Duration>, Option<lrpc_kernel::Quotas>), ConfigError> {
    if let Some(n) = &l.reuse {
        return Err(cx.err(
            n,
            format!("`reuse` is for `{HANDLER_INTERFACE}` components"),
        ));
    }
    let mut q = lrpc_kernel::Quotas::default();
    let mut any = false;
    if let Some(m) = &l.memory {
        q.memory = cx.memory(m)?;
        any = true;
    }
    if let Some(b) = &l.astack_bytes {
        q.astack_bytes = cx.size(b, "astack_bytes")?;
        any = true;
    }
    if let Some(b) = &l.oob_bytes {
        q.oob_bytes = cx.size(b, "oob_bytes")?;
        any = true;
    }
    if let Some(n) = &l.bindings {
        q.bindings = cx.count(n, "bindings", i64::from(u32::MAX))? as u32;
        any = true;
    }
    if let Some(n) = &l.mappings {
        q.mappings = cx.count(n, "mappings", i64::from(u32::MAX))? as u32;
        any = true;
    }
    if let Some(f) = &l.fuel {
        return Err(cx.err(
            f,
            "fuel limits are not supported by this kernel yet (it meters with deadlines)",
        ));
    }
    let deadline = l.deadline.as_ref().map(|s| cx.duration(s)).transpose()?;
    Ok((deadline, any.then_some(q)))
}

/// One of a core domain's exports: a plugin's name is the runtime's, another's defaults to
/// its interface; its deadline defaults to the domain's `[limits]` one.
fn export(
    cx: &Ctx<'_>,
    domain: &str,
    e: &Spanned<RawExport>,
    limit_deadline: Option<std::time::Duration>,
) -> Result<Export, ConfigError> {
    let er = e.get_ref();
    let interface = er.interface.get_ref().clone();
    let plugin = is_plugin_interface(&interface);
    let name = match &er.name {
        Some(n) if plugin => {
            return Err(cx.err(
                n,
                "plugins are exported under names the runtime chooses; drop `name`",
            ));
        }
        Some(n) => n.get_ref().clone(),
        None if plugin => format!("http-plugin/{domain}"),
        None => interface.clone(),
    };
    let serving = match er.serving.as_ref().map(|s| (s, s.get_ref().as_str())) {
        None | Some((_, "migrate")) => ServingMode::Migrate,
        Some((_, "own-thread")) => ServingMode::OwnThread,
        Some((s, other)) => {
            return Err(cx.err(
                s,
                format!("serving `{other}`: `migrate` or `own-thread` expected"),
            ));
        }
    };
    let deadline = match &er.deadline {
        Some(d) => Some(cx.duration(d)?),
        None => limit_deadline,
    };
    Ok(Export {
        interface,
        name,
        presentation: er
            .presentation
            .as_ref()
            .map(|p| cx.existing(p, "presentation"))
            .transpose()?,
        serving,
        deadline,
        line: cx.line(e.span().start),
    })
}

/// A domain's `isolation`: `none` (the default) or `request`, which only an HTTP plugin
/// takes (the edge's requests are what it isolates).
fn isolation(
    cx: &Ctx<'_>,
    r: &RawDomain,
    exports: &[Export],
) -> Result<lrpc_kernel::domain::Isolation, ConfigError> {
    match r.isolation.as_ref().map(|s| (s, s.get_ref().as_str())) {
        None | Some((_, "none")) => Ok(lrpc_kernel::domain::Isolation::None),
        Some((s, "request")) => {
            if !exports.iter().any(|e| is_plugin_interface(&e.interface)) {
                return Err(cx.err(
                    s,
                    "`isolation = \"request\"` is for HTTP plugin domains (it resets a plugin \
                     at each request of the edge)",
                ));
            }
            Ok(lrpc_kernel::domain::Isolation::Request)
        }
        Some((s, other)) => Err(cx.err(
            s,
            format!("isolation `{other}`: `none` or `request` expected"),
        )),
    }
}

/// A component domain's table: WASI grants, the limits a component takes (memory, fuel,
/// deadline), exports and binds by interface, and fully trusted imports.
fn component_domain(
    cx: &Ctx<'_>,
    name: &str,
    d: &Spanned<RawDomain>,
    source: Source,
) -> Result<DomainSpec, ConfigError> {
    let r = d.get_ref();
    if let Some(n) = &r.replicas
        && *n.get_ref() != 1
    {
        return Err(cx.err(n, "a component domain is one instance: drop `replicas`"));
    }
    let mut spec = ComponentSpec::default();
    if let Some(l) = &r.limits {
        let l = l.get_ref();
        let module_only = [
            ("bindings", l.bindings.as_ref().map(|s| s.span().start)),
            ("mappings", l.mappings.as_ref().map(|s| s.span().start)),
            (
                "astack_bytes",
                l.astack_bytes.as_ref().map(|s| s.span().start),
            ),
            ("oob_bytes", l.oob_bytes.as_ref().map(|s| s.span().start)),
        ];
        if let Some((what, at)) = module_only.iter().find_map(|(w, at)| at.map(|at| (*w, at))) {
            return Err(cx.err_at(
                at,
                format!("`{what}` limits core-module domains; a component takes memory, fuel and deadline"),
            ));
        }
        if let Some(m) = &l.memory {
            spec.limits.memory = Some(usize::try_from(cx.memory(m)?).unwrap_or(usize::MAX));
        }
        if let Some(f) = &l.fuel {
            spec.limits.fuel = Some(cx.size(f, "fuel")?);
        }
        spec.limits.deadline = l.deadline.as_ref().map(|s| cx.duration(s)).transpose()?;
    }
    if let Some(w) = &r.wasi {
        spec.wasi = wasi_grants(cx, w.get_ref())?;
    }
    if let Some(t) = &r.trust_fully {
        spec.trust_fully = t.get_ref().clone();
    }
    let handler = r
        .exports
        .iter()
        .find(|e| e.get_ref().interface.get_ref() == HANDLER_INTERFACE);
    if let Some(h) = handler {
        handler_checks(cx, r, h)?;
    }
    if let Some(n) = r.limits.as_ref().and_then(|l| l.get_ref().reuse.as_ref()) {
        if handler.is_none() {
            return Err(cx.err(
                n,
                format!("`reuse` is for `{HANDLER_INTERFACE}` components"),
            ));
        }
        spec.reuse = Some(cx.count(n, "reuse", MAX_REUSE as i64)?);
    }
    if let Some(w) = &r.wasi {
        spec.http = http_origins(cx, w.get_ref(), handler.is_some())?;
    }
    let exports = r
        .exports
        .iter()
        .map(|e| component_export(cx, name, e, spec.limits.deadline))
        .collect::<Result<Vec<_>, ConfigError>>()?;
    let mut binds = Vec::new();
    for b in &r.binds {
        let br = b.get_ref();
        if let Some(p) = &br.presentation {
            return Err(cx.err(
                p,
                "components pass values by the canonical ABI: drop `presentation`",
            ));
        }
        binds.push(Bind {
            interface: br.interface.get_ref().clone(),
            server: br.server.get_ref().clone(),
            presentation: None,
            line: cx.line(b.span().start),
        });
    }
    let isolation = isolation(cx, r, &exports)?;
    Ok(DomainSpec {
        name: name.to_string(),
        source,
        replicas: 1,
        isolation,
        exports,
        binds,
        quotas: None,
        component: Some(spec),
        takes_body: true,
        line: cx.line(d.span().start),
    })
}

/// One of a component domain's exports: no presentation, serving mode or deadline of its
/// own (the domain has one deadline); a plugin's or handler's name is the runtime's.
fn component_export(
    cx: &Ctx<'_>,
    domain: &str,
    e: &Spanned<RawExport>,
    deadline: Option<std::time::Duration>,
) -> Result<Export, ConfigError> {
    let er = e.get_ref();
    let interface = er.interface.get_ref().clone();
    let plugin = is_plugin_interface(&interface);
    if plugin && let Some(n) = &er.name {
        return Err(cx.err(
            n,
            "plugins are exported under names the runtime chooses; drop `name`",
        ));
    }
    if let Some(p) = &er.presentation {
        return Err(cx.err(
            p,
            "components pass values by the canonical ABI: drop `presentation`",
        ));
    }
    if let Some(s) = &er.serving {
        return Err(cx.err(
            s,
            "a component domain serves on the caller's thread: drop `serving`",
        ));
    }
    if let Some(dl) = &er.deadline {
        return Err(cx.err(
            dl,
            "a component domain has one deadline: set it under `[domains.<name>.limits]`",
        ));
    }
    let name = match &er.name {
        Some(n) => n.get_ref().clone(),
        None if interface == HANDLER_INTERFACE => format!("wasi-http/{domain}"),
        None if plugin => format!("http-plugin/{domain}"),
        None => interface.clone(),
    };
    Ok(Export {
        name,
        interface,
        presentation: None,
        serving: ServingMode::Migrate,
        deadline,
        line: cx.line(e.span().start),
    })
}

/// What a `wasi:http/incoming-handler` domain may not have: it runs in a Store of its own
/// beside the kernel, so it exports only the handler, binds nothing, composes nothing, and
/// is limited by memory and deadline (not fuel).
fn handler_checks(cx: &Ctx<'_>, r: &RawDomain, h: &Spanned<RawExport>) -> Result<(), ConfigError> {
    let what = format!("a `{HANDLER_INTERFACE}` component");
    if let Some(other) = r
        .exports
        .iter()
        .find(|e| e.get_ref().interface.get_ref() != HANDLER_INTERFACE)
    {
        return Err(cx.err(
            other,
            format!("{what} exports only the handler (it is served outside the kernel)"),
        ));
    }
    if r.exports.len() > 1 {
        return Err(cx.err(h, format!("{what} exports the handler once")));
    }
    if let Some(n) = &h.get_ref().name {
        return Err(cx.err(n, format!("{what} is named by its domain: drop `name`")));
    }
    if let Some(b) = r.binds.first() {
        return Err(cx.err(b, format!("{what} binds nothing (its imports are WASI)")));
    }
    if let Some(t) = &r.trust_fully {
        return Err(cx.err(t, format!("{what} composes nothing: drop `trust_fully`")));
    }
    if let Some(f) = r.limits.as_ref().and_then(|l| l.get_ref().fuel.as_ref()) {
        return Err(cx.err(
            f,
            format!("{what} is limited by `memory` and `deadline`, not fuel"),
        ));
    }
    Ok(())
}

/// `[domains.<name>.wasi] http`: origins, allowed only for a `wasi:http` handler (the only
/// kind of domain with `wasi:http/outgoing-handler`).
fn http_origins(cx: &Ctx<'_>, w: &RawWasi, handler: bool) -> Result<Vec<HttpOrigin>, ConfigError> {
    if let Some(first) = w.http.first()
        && !handler
    {
        return Err(cx.err(
            first,
            format!("`http` grants outgoing HTTP to `{HANDLER_INTERFACE}` components only"),
        ));
    }
    w.http
        .iter()
        .map(|o| HttpOrigin::parse(o.get_ref()).map_err(|e| cx.err(o, e)))
        .collect()
}

fn wasi_grants(
    cx: &Ctx<'_>,
    w: &RawWasi,
) -> Result<lrpc_kernel::component::WasiGrants, ConfigError> {
    let stdio =
        |s: &Option<Spanned<String>>| -> Result<lrpc_kernel::component::Stdio, ConfigError> {
            match s.as_ref().map(|v| (v, v.get_ref().as_str())) {
                None | Some((_, "discard")) => Ok(lrpc_kernel::component::Stdio::Discard),
                Some((_, "inherit")) => Ok(lrpc_kernel::component::Stdio::Inherit),
                Some((_, "capture")) => Ok(lrpc_kernel::component::Stdio::Capture),
                Some((v, other)) => Err(cx.err(
                    v,
                    format!("`{other}`: `discard`, `inherit` or `capture` expected"),
                )),
            }
        };
    let mut preopens = Vec::new();
    for p in &w.preopens {
        let pr = p.get_ref();
        let host = cx.path(&pr.host);
        if !host.is_dir() {
            return Err(cx.err(&pr.host, format!("no directory {}", host.display())));
        }
        if !pr.guest.get_ref().starts_with('/') {
            return Err(cx.err(
                &pr.guest,
                "the guest path of a preopen is absolute (`/data`)",
            ));
        }
        preopens.push(lrpc_kernel::component::Preopen::new(
            host,
            pr.guest.get_ref().clone(),
            pr.writable,
        ));
    }
    let mut network = Vec::new();
    for a in &w.network {
        network.push(a.get_ref().parse().map_err(|_| {
            cx.err(
                a,
                format!("`{}`: an `ip:port` address expected", a.get_ref()),
            )
        })?);
    }
    Ok(lrpc_kernel::component::WasiGrants::default()
        .with_preopens(preopens)
        .with_env(w.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .with_args(w.args.clone())
        .with_stdout(stdio(&w.stdout)?)
        .with_stderr(stdio(&w.stderr)?)
        .with_network(network))
}
