//! Where a remote export listens: the addresses a binding calls and a server serves on.

use crate::nats::NatsEndpoint;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

/// Where a remote export listens: `tcp:HOST:PORT` (or just `HOST:PORT`), `unix:PATH`, or
/// `nats://HOST:PORT[/PREFIX]` (a NATS server and subject prefix, see [`NatsEndpoint`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Endpoint {
    /// A TCP address, `host:port`.
    Tcp(String),
    /// A Unix socket path.
    Unix(PathBuf),
    /// Whichever kernels serve the export behind a NATS server.
    Nats(NatsEndpoint),
}

impl FromStr for Endpoint {
    type Err = String;
    fn from_str(s: &str) -> Result<Endpoint, String> {
        if let Some(p) = s.strip_prefix("unix:") {
            return Ok(Endpoint::Unix(p.into()));
        }
        if s.starts_with("nats://") {
            return s.parse().map(Endpoint::Nats);
        }
        let a = s.strip_prefix("tcp:").unwrap_or(s);
        if a.rsplit_once(':')
            .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok())
        {
            Ok(Endpoint::Tcp(a.to_owned()))
        } else {
            Err(format!(
                "`{s}` is neither tcp:HOST:PORT, unix:PATH nor nats://HOST:PORT[/PREFIX]"
            ))
        }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Tcp(a) => write!(f, "tcp:{a}"),
            Endpoint::Unix(p) => write!(f, "unix:{}", p.display()),
            Endpoint::Nats(n) => write!(f, "{n}"),
        }
    }
}
