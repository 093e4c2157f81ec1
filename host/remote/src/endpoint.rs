//! Where a remote export listens: the addresses a binding calls and a server serves on.

use crate::nats::NatsEndpoint;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

/// Where a remote export listens: `tcp:HOST:PORT` (or just `HOST:PORT`), `unix:PATH`, or
/// `nats://HOST:PORT[/PREFIX]` (a NATS server and subject prefix, see [`NatsEndpoint`];
/// `tls://HOST:PORT[/PREFIX]` reaches it over TLS).
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
        if s.starts_with("nats://") || s.starts_with("tls://") {
            return s.parse().map(Endpoint::Nats);
        }
        let a = s.strip_prefix("tcp:").unwrap_or(s);
        if a.rsplit_once(':')
            .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok())
        {
            Ok(Endpoint::Tcp(a.to_owned()))
        } else {
            Err(format!(
                "`{s}` is neither tcp:HOST:PORT, unix:PATH nor nats://HOST:PORT[/PREFIX] \
                 (or tls://HOST:PORT[/PREFIX])"
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

/// Binds a Unix socket at `path` that only the user running this process can connect to
/// (mode 0600), replacing a file already there.
///
/// The socket is made in a private folder (mode 0700) beside `path`, narrowed to 0600 there,
/// then renamed into place: at no moment can another user connect to it. The folder's name
/// adds about 20 bytes to the path, which must stay under the kernel's limit (108 bytes on
/// Linux). Call it inside a tokio runtime.
pub fn bind_unix_private(path: &std::path::Path) -> std::io::Result<tokio::net::UnixListener> {
    use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    if path.file_name().is_none() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("`{}` names no file", path.display()),
        ));
    }
    let private = dir.join(format!(
        ".lrpc-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::DirBuilder::new().mode(0o700).create(&private)?;
    let inner = private.join("s");
    let bound = (|| {
        let listener = tokio::net::UnixListener::bind(&inner)?;
        std::fs::set_permissions(&inner, std::fs::Permissions::from_mode(0o600))?;
        std::fs::rename(&inner, path)?;
        Ok(listener)
    })();
    let _ = std::fs::remove_file(&inner);
    let _ = std::fs::remove_dir(&private);
    bound
}

impl Endpoint {
    /// Whether the endpoint is reachable from this machine only: a Unix socket, or a TCP
    /// address in 127.0.0.0/8, `::1` or the name `localhost`. Any other host name counts as
    /// reachable from elsewhere, and so does a NATS server (its own settings decide).
    pub fn is_local(&self) -> bool {
        match self {
            Endpoint::Unix(_) => true,
            Endpoint::Nats(_) => false,
            Endpoint::Tcp(a) => {
                let host = a.rsplit_once(':').map_or(a.as_str(), |(h, _)| h);
                let host = host
                    .strip_prefix('[')
                    .and_then(|h| h.strip_suffix(']'))
                    .unwrap_or(host);
                host.eq_ignore_ascii_case("localhost")
                    || host
                        .parse::<std::net::IpAddr>()
                        .is_ok_and(|ip| ip.to_canonical().is_loopback())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Endpoint;

    #[test]
    fn loopback_addresses_are_local_and_others_are_not() {
        let local = |s: &str| s.parse::<Endpoint>().expect(s).is_local();
        for s in [
            "tcp:127.0.0.1:7000",
            "127.1.2.3:0",
            "tcp:[::1]:7000",
            "tcp:localhost:7000",
            "tcp:LocalHost:7000",
            "tcp:[::ffff:127.0.0.1]:7000",
            "unix:/run/x.sock",
        ] {
            assert!(local(s), "{s}");
        }
        for s in [
            "tcp:0.0.0.0:7000",
            "tcp:[::]:7000",
            "tcp:10.0.0.2:7000",
            "tcp:example.com:7000",
            "tcp:localhost.example.com:7000",
            "tcp:128.0.0.1:7000",
            "nats://127.0.0.1:4222",
        ] {
            assert!(!local(s), "{s}");
        }
    }
}
