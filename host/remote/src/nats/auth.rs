//! How a kernel proves to a NATS server who it is, and what the server refuses.
//!
//! NATS endpoints rely on the NATS server's own security: its users (with a password, a
//! token or an nkey) or its operator JWTs (a `.creds` file), its subject permissions, its
//! accounts, and TLS. A [`NatsAuth`] carries what one endpoint presents; the NATS server
//! decides what that identity may publish and subscribe to. A deployment confined to its
//! prefix (`publish` and `subscribe` on `PREFIX.>`) can serve and call its own exports
//! because every subject it uses sits under its prefix: the invocations
//! (`PREFIX.wrpc.…`) and its inboxes (`PREFIX._INBOX.…`, see [`inbox_prefix`]).
//!
//! The server refuses in two ways, both reported with the endpoint's address:
//!
//! * a connection without valid credentials: the connection attempt fails with
//!   "authorization violation", at once and without retrying ([`refused_connect`]); when a
//!   reconnection is refused so (the credentials were revoked), `async-nats` keeps trying,
//!   and calls fail at once until the server accepts it again;
//! * a publication or subscription outside the permissions: the connection stays open, and
//!   the server sends an error naming the subject. [`Violations`] keeps these, so a call
//!   whose invocation (or whose inbox) was refused fails at once instead of at its deadline.

use crate::error::RemoteError;
use std::collections::VecDeque;
use std::fmt;
use std::path::{Path, PathBuf};
use tokio::sync::watch;

/// What a kernel presents to the NATS server of an endpoint: credentials, and TLS. The
/// default is nothing (an open NATS server). Its `Debug` form shows no secret.
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct NatsAuth {
    /// Who the connection says it is; `None`: nobody in particular.
    pub credentials: Option<NatsCredentials>,
    /// TLS to the NATS server: the CA that signed its certificate, and a client certificate
    /// if it asks for one. `Some` requires TLS even on a `nats://` URL.
    pub tls: Option<NatsTls>,
}

impl NatsAuth {
    /// Nothing presented.
    pub fn new() -> NatsAuth {
        NatsAuth::default()
    }

    /// With `credentials`.
    pub fn with_credentials(mut self, credentials: NatsCredentials) -> NatsAuth {
        self.credentials = Some(credentials);
        self
    }

    /// With TLS to the NATS server.
    pub fn with_tls(mut self, tls: NatsTls) -> NatsAuth {
        self.tls = Some(tls);
        self
    }
}

impl fmt::Debug for NatsAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NatsAuth")
            .field("credentials", &self.credentials)
            .field("tls", &self.tls)
            .finish()
    }
}

/// One way of proving who a connection is, as the NATS server knows its users. The secrets
/// are held in memory; `Debug` names the kind only.
#[derive(Clone)]
pub struct NatsCredentials(Secret);

#[derive(Clone)]
enum Secret {
    /// A `.creds` file's text: a user JWT and its nkey seed (NATS's decentralized auth).
    Creds(String),
    /// A user nkey seed (`SU…`); the server knows the public key.
    Nkey(String),
    UserPassword(String, String),
    Token(String),
}

impl NatsCredentials {
    /// The text of a `.creds` file (as `nsc` writes them): checked here, so a malformed
    /// file is refused before any connection.
    pub fn creds(text: &str) -> Result<NatsCredentials, String> {
        async_nats::ConnectOptions::new()
            .credentials(text)
            .map_err(|e| format!("not a NATS credentials file: {e}"))?;
        Ok(NatsCredentials(Secret::Creds(text.to_owned())))
    }

    /// A user's nkey seed (`SU…`, as `nk -gen user` writes it); surrounding white space is
    /// dropped. Checked here.
    pub fn nkey_seed(seed: &str) -> Result<NatsCredentials, String> {
        let seed = seed.trim();
        nkeys::KeyPair::from_seed(seed).map_err(|e| format!("not an nkey seed: {e}"))?;
        if !seed.starts_with("SU") {
            return Err("not a user nkey seed (those start with `SU`)".into());
        }
        Ok(NatsCredentials(Secret::Nkey(seed.to_owned())))
    }

    /// A user name and its password.
    pub fn user_password(user: &str, password: &str) -> NatsCredentials {
        NatsCredentials(Secret::UserPassword(user.to_owned(), password.to_owned()))
    }

    /// A token (a server whose `authorization` has a `token`).
    pub fn token(token: &str) -> NatsCredentials {
        NatsCredentials(Secret::Token(token.to_owned()))
    }

    fn apply(
        &self,
        o: async_nats::ConnectOptions,
    ) -> Result<async_nats::ConnectOptions, std::io::Error> {
        Ok(match &self.0 {
            Secret::Creds(text) => o.credentials(text)?,
            Secret::Nkey(seed) => o.nkey(seed.clone()),
            Secret::UserPassword(u, p) => o.user_and_password(u.clone(), p.clone()),
            Secret::Token(t) => o.token(t.clone()),
        })
    }
}

impl fmt::Debug for NatsCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.0 {
            Secret::Creds(_) => "creds",
            Secret::Nkey(_) => "nkey",
            Secret::UserPassword(u, _) => return write!(f, "NatsCredentials(user {u:?})"),
            Secret::Token(_) => "token",
        };
        write!(f, "NatsCredentials({kind})")
    }
}

/// TLS to a NATS server: PEM files, read when the connection is made.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct NatsTls {
    /// The CA certificates the server's certificate must chain to; `None`: the system's.
    pub ca: Option<PathBuf>,
    /// A client certificate and its key, for a server that verifies clients.
    pub client: Option<(PathBuf, PathBuf)>,
}

impl NatsTls {
    /// TLS trusting the system's CAs, without a client certificate.
    pub fn new() -> NatsTls {
        NatsTls::default()
    }

    /// Trusting the CA certificates in the PEM file `ca` (instead of the system's).
    pub fn with_ca(mut self, ca: &Path) -> NatsTls {
        self.ca = Some(ca.to_owned());
        self
    }

    /// Presenting the certificate `cert` with its private key `key` (PEM files).
    pub fn with_client_certificate(mut self, cert: &Path, key: &Path) -> NatsTls {
        self.client = Some((cert.to_owned(), key.to_owned()));
        self
    }
}

/// Where a connection to an endpoint with subject prefix `prefix` makes its inboxes:
/// `PREFIX._INBOX`, so that everything a deployment subscribes to is under its prefix (a
/// NATS user confined to `PREFIX.>` can receive its answers), or NATS's `_INBOX` without one.
pub(crate) fn inbox_prefix(prefix: &str) -> String {
    if prefix.is_empty() {
        "_INBOX".to_owned()
    } else {
        format!("{prefix}._INBOX")
    }
}

/// The options of a connection to an endpoint: its inboxes under its prefix, what `auth`
/// presents, and TLS when the URL says `tls://` or `auth` has TLS settings.
pub(crate) fn connect_options(
    prefix: &str,
    require_tls: bool,
    auth: &NatsAuth,
) -> Result<async_nats::ConnectOptions, std::io::Error> {
    let mut o = async_nats::ConnectOptions::new().custom_inbox_prefix(inbox_prefix(prefix));
    if let Some(c) = &auth.credentials {
        o = c.apply(o)?;
    }
    if require_tls || auth.tls.is_some() {
        o = o.require_tls(true);
    }
    if let Some(tls) = &auth.tls {
        if let Some(ca) = &tls.ca {
            o = o.add_root_certificates(ca.clone());
        }
        if let Some((cert, key)) = &tls.client {
            o = o.add_client_certificate(cert.clone(), key.clone());
        }
    }
    Ok(o)
}

/// Why a connection to `addr` could not be made: an authorization violation (missing or
/// wrong credentials) is [`RemoteError::Denied`] and says so; anything else is
/// [`RemoteError::Unreachable`].
pub(crate) fn refused_connect(addr: &str, e: &async_nats::ConnectError) -> RemoteError {
    use async_nats::ConnectErrorKind as K;
    match e.kind() {
        K::AuthorizationViolation | K::Authentication => RemoteError::Denied {
            addr: addr.to_owned(),
            reason: format!(
                "authorization violation: the server refused this connection's credentials \
                 ({e})"
            ),
        },
        K::Tls => RemoteError::Unreachable {
            addr: addr.to_owned(),
            source: std::io::Error::new(std::io::ErrorKind::ConnectionRefused, format!("TLS: {e}")),
        },
        _ => RemoteError::Unreachable {
            addr: addr.to_owned(),
            source: std::io::Error::new(std::io::ErrorKind::ConnectionRefused, e.to_string()),
        },
    }
}

/// How many refusals a connection remembers (the newest).
const KEPT: usize = 16;

/// The permission violations the NATS server reported on one connection, newest last,
/// each with its number; the first refused subscription is kept for good (a refused
/// subscription stays refused, and every later call on the connection needs it).
#[derive(Debug, Default)]
pub(crate) struct Violations {
    /// How many were reported so far.
    pub(crate) count: u64,
    recent: VecDeque<(u64, String)>,
    /// The first refused subscription.
    pub(crate) subscription: Option<String>,
    /// Why the server refuses the connection as it reconnects (its credentials no longer
    /// accepted), until it is accepted again. `async-nats` keeps trying meanwhile.
    refused: Option<String>,
}

impl Violations {
    /// The first refusal after the first `since` that names `subject` (a publication to it),
    /// else the refused subscription, else the refused reconnection.
    pub(crate) fn refusing(&self, since: u64, subject: &str) -> Option<&str> {
        let quoted = format!("\"{subject}\"");
        self.recent
            .iter()
            .filter(|(n, _)| *n >= since)
            .map(|(_, m)| m.as_str())
            .find(|m| m.contains("Publish") && m.contains(&quoted))
            .or(self.subscription.as_deref())
            .or(self.refused.as_deref())
    }

    fn note(&mut self, message: String) {
        if message.contains("Subscription") && self.subscription.is_none() {
            self.subscription = Some(message.clone());
        }
        if self.recent.len() == KEPT {
            self.recent.pop_front();
        }
        self.recent.push_back((self.count, message));
        self.count += 1;
    }
}

/// Watches a connection's events for the server's permission violations: `options` with a
/// callback that logs each (naming `addr`) and notes it in the returned watch.
pub(crate) fn watch_violations(
    addr: String,
    options: async_nats::ConnectOptions,
) -> (async_nats::ConnectOptions, watch::Receiver<Violations>) {
    use async_nats::{ClientError, Event, ServerError};
    let (tx, rx) = watch::channel(Violations::default());
    let options = options.event_callback(move |event| {
        // The server's text, cut short: it names a subject we chose, but bound it anyway.
        let bounded = |m: &str| m.chars().take(512).collect::<String>();
        match &event {
            Event::ServerError(ServerError::Other(m))
                if m.to_ascii_lowercase().contains("permissions violation") =>
            {
                let m = bounded(m);
                tracing::error!(endpoint = %addr, "the NATS server refused: {m}");
                tx.send_modify(|v| v.note(m));
            }
            // A reconnection refused for its credentials: calls fail at once until one is
            // accepted, instead of waiting for their deadlines.
            Event::ClientError(ClientError::Other(m))
                if m.to_ascii_lowercase().contains("authorization violation") =>
            {
                let m = format!("reconnecting: {}", bounded(m));
                tracing::error!(endpoint = %addr, "the NATS server refused: {m}");
                tx.send_modify(|v| v.refused = Some(m));
            }
            // Accepted again (the refusal is cleared as the guard is checked).
            Event::Connected if tx.send_if_modified(|v| v.refused.take().is_some()) => {
                tracing::info!(endpoint = %addr, "the NATS server accepts the connection again");
            }
            _ => {}
        }
        async {}
    });
    (options, rx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_sees_refusals_of_its_subject_after_it_started_and_of_the_inbox() {
        let mut v = Violations::default();
        v.note("Permissions Violation for Publish to \"a.wrpc.0.0.1.x.f\"".into());
        assert!(v.refusing(0, "a.wrpc.0.0.1.x.f").is_some());
        assert!(v.refusing(1, "a.wrpc.0.0.1.x.f").is_none(), "an older one");
        assert!(
            v.refusing(0, "a.wrpc.0.0.1.x.g").is_none(),
            "another subject"
        );
        assert!(v.refusing(0, "a.wrpc.0.0.1.x").is_none(), "a prefix of it");
        v.note("Permissions Violation for Subscription to \"a._INBOX.n.>\"".into());
        assert!(v.refusing(5, "anything").is_some(), "the inbox, for good");
        for i in 0..100 {
            v.note(format!("Permissions Violation for Publish to \"s{i}\""));
        }
        assert_eq!(v.recent.len(), KEPT);
        assert!(v.subscription.is_some());
        let v = Violations {
            refused: Some("reconnecting: authorization violation".into()),
            ..Violations::default()
        };
        assert_eq!(
            v.refusing(0, "a.wrpc.0.0.1.x.f"),
            Some("reconnecting: authorization violation")
        );
    }

    #[test]
    fn secrets_do_not_show() {
        let auth = NatsAuth::new()
            .with_credentials(NatsCredentials::user_password("alice", "hunter2-secret"));
        let shown = format!("{auth:?}");
        assert!(
            shown.contains("alice") && !shown.contains("hunter2"),
            "{shown}"
        );
        let shown = format!("{:?}", NatsCredentials::token("tok-secret"));
        assert!(!shown.contains("tok-secret"), "{shown}");
        assert!(NatsCredentials::nkey_seed("SUnot-a-seed").is_err());
        assert!(NatsCredentials::creds("not creds").is_err());
    }

    /// A seed and a creds file in the forms `nk` and `nsc` write them are taken; a seed of
    /// another kind (an account's) is not a user's.
    #[test]
    fn seeds_and_creds_files_are_checked_when_given() {
        let user = nkeys::KeyPair::new_user().seed().expect("a seed");
        NatsCredentials::nkey_seed(&format!("{user}\n")).expect("a user seed, with a newline");
        let account = nkeys::KeyPair::new_account().seed().expect("a seed");
        let e = NatsCredentials::nkey_seed(&account).expect_err("an account seed");
        assert!(e.contains("user"), "{e}");
        let creds = format!(
            "-----BEGIN NATS USER JWT-----\neyJhbGciOiJlZDI1NTE5In0.e30.c2ln\n\
             ------END NATS USER JWT------\n\n\
             ************************* IMPORTANT *************************\n\n\
             -----BEGIN USER NKEY SEED-----\n{user}\n------END USER NKEY SEED------\n"
        );
        let c = NatsCredentials::creds(&creds).expect("a creds file");
        assert!(!format!("{c:?}").contains(&user));
        let no_seed = creds.replace(&user, "");
        assert!(NatsCredentials::creds(&no_seed).is_err());
    }

    #[test]
    fn inboxes_sit_under_the_prefix() {
        assert_eq!(inbox_prefix(""), "_INBOX");
        assert_eq!(inbox_prefix("lrpc.prod"), "lrpc.prod._INBOX");
    }
}
