//! `[telemetry]`: where trace spans are exported, and how many.

use super::raw::*;
use super::spec::*;
use super::text::{ConfigError, Ctx};

/// The `[telemetry]` table: an `http://` endpoint (the exporters speak no TLS), a protocol
/// this build speaks, a service name, a sampling ratio from 0 to 1.
pub(super) fn telemetry(cx: &Ctx<'_>, t: &RawTelemetry) -> Result<TelemetrySpec, ConfigError> {
    let endpoint = match &t.endpoint {
        Some(e) => {
            let url = e.get_ref().trim();
            if url.starts_with("https://") {
                return Err(cx.err(
                    e,
                    format!(
                        "`{url}`: the OTLP exporter speaks plain HTTP only; put a local \
                         collector in front of one that needs TLS"
                    ),
                ));
            }
            let rest = url.strip_prefix("http://");
            if rest.is_none_or(|r| r.is_empty() || r.starts_with('/')) {
                return Err(cx.err(
                    e,
                    format!("`{url}`: an OTLP endpoint is a URL like \"http://collector:4318\""),
                ));
            }
            Some(url.to_owned())
        }
        None => None,
    };
    let protocol = match &t.protocol {
        Some(p) => Some(p.get_ref().parse().map_err(|e: String| cx.err(p, e))?),
        None => None,
    };
    let service_name = match &t.service_name {
        Some(n) if n.get_ref().trim().is_empty() => {
            return Err(cx.err(n, "the service name is empty"));
        }
        Some(n) => Some(n.get_ref().clone()),
        None => None,
    };
    let sample_ratio = match &t.sample_ratio {
        Some(r) if !(0.0..=1.0).contains(r.get_ref()) => {
            return Err(cx.err(r, "`sample-ratio` is from 0 (none) to 1 (every trace)"));
        }
        Some(r) => Some(*r.get_ref()),
        None => None,
    };
    Ok(TelemetrySpec {
        endpoint,
        protocol,
        service_name,
        sample_ratio,
    })
}
