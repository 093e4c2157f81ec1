//! Across hosts (`lrpc-remote`, wRPC): the exports of other kernels that the deployment's
//! clients bind to (`[remotes.NAME]`), registered with the kernel before any guest binds, and
//! the deployment's own exports served to other kernels (`[network]`).
//!
//! Both need a tokio runtime; the deployment owns a small one for them, so that `lrpc run`
//! (which has none) and `lrpc serve` (whose runtime serves HTTP) work alike. Guests calling a
//! remote export wait on their own threads while the call is on the network.
//!
//! With `[network] tls`, every `tcp:` address is served over TLS, and the exports' allow
//! lists decide who may call ([`lrpc_remote::RemoteServer::with_allow`]); the server's
//! refusals are read into `/metrics` at each scrape. A remote with `tls` is called over TLS.

use crate::config::{Config, NetworkSpec};
use crate::supervise::DeployError;
use lrpc_kernel::{Domain, Kernel};
use lrpc_remote::{
    Endpoint, LocalPool, RemoteBinding, RemoteOptions, RemoteServer, ServeOptions, export_remote,
};
use std::sync::Arc;

/// The deployment's network side: its runtime, the stand-ins of the remote exports, and the
/// addresses it serves on.
pub struct Network {
    runtime: Option<tokio::runtime::Runtime>,
    stand_ins: Vec<Domain>,
    listening: Vec<Endpoint>,
    /// The server of `[network]`, once it serves (its refusals are counted in `/metrics`).
    server: Option<Arc<RemoteServer>>,
}

impl std::fmt::Debug for Network {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Network")
            .field("remotes", &self.stand_ins.len())
            .field("listening", &self.listening)
            .finish()
    }
}

fn failed(what: impl Into<String>, reason: impl std::fmt::Display) -> DeployError {
    DeployError::Network {
        what: what.into(),
        reason: reason.to_string(),
    }
}

impl Network {
    /// Registers the config's remote exports with `kernel`; `None` when the config has
    /// neither remotes nor `[network]`.
    pub(crate) fn start(kernel: &Kernel, config: &Config) -> Result<Option<Network>, DeployError> {
        if config.remotes.is_empty() && config.network.is_none() {
            return Ok(None);
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("lrpc-network")
            .enable_all()
            .build()
            .map_err(|e| failed("starting the network runtime", e))?;
        let mut stand_ins = Vec::new();
        for r in config.remotes.values() {
            let what = format!("remote `{}` ({} at {})", r.name, r.interface, r.endpoint);
            let plan = Arc::new(
                kernel
                    .interface(&r.interface)
                    .map_err(|e| failed(what.clone(), e))?,
            );
            let mut options = RemoteOptions::default();
            if let Some(d) = r.deadline {
                options.deadline = d;
            }
            let binding = RemoteBinding::with_tls(
                r.endpoint.clone(),
                &r.interface,
                plan,
                options,
                r.tls.clone(),
            );
            let stand_in = export_remote(kernel, &r.interface, binding, runtime.handle().clone())
                .map_err(|e| failed(what, e))?;
            tracing::info!(remote = r.name, interface = r.interface, endpoint = %r.endpoint, "remote export");
            stand_ins.push(stand_in);
        }
        Ok(Some(Network {
            runtime: Some(runtime),
            stand_ins,
            listening: Vec::new(),
            server: None,
        }))
    }

    /// Serves `spec`'s exports to other kernels on its addresses: those it names among
    /// `exported` (export name, interface), or all of them.
    pub(crate) fn serve(
        &mut self,
        kernel: &Kernel,
        spec: &NetworkSpec,
        exported: &[(String, String)],
    ) -> Result<(), DeployError> {
        let named: Vec<(&str, &str)> = exported
            .iter()
            .filter(|(name, _)| spec.exports.as_ref().is_none_or(|l| l.contains(name)))
            .map(|(n, i)| (n.as_str(), i.as_str()))
            .collect();
        let pool = LocalPool::new(kernel, &named, spec.workers, 1024)
            .map_err(|e| failed("the network's driver threads", e))?;
        let Some(rt) = &self.runtime else {
            return Ok(());
        };
        let allow = spec
            .allow
            .iter()
            .map(|(n, a)| (n.clone(), a.clone()))
            .collect();
        let (listening, server) = rt.block_on(async {
            let server = RemoteServer::with_allow(Arc::new(pool), ServeOptions::default(), allow)
                .await
                .map_err(|e| failed("serving exports", e))?;
            let mut listening = Vec::new();
            for e in &spec.listen {
                let at = |x: &dyn std::fmt::Display| failed(format!("listening on {e}"), x);
                let bound = match e {
                    Endpoint::Tcp(a) => {
                        let l = tokio::net::TcpListener::bind(a.as_str())
                            .await
                            .map_err(|x| at(&x))?;
                        let local = l.local_addr().map_err(|x| at(&x))?;
                        match &spec.tls {
                            Some(tls) => {
                                tokio::spawn(server.clone().listen_tls(l, tls.clone()));
                                tracing::info!(endpoint = %local, client_certificates = tls.verifies_clients(), "serving exports over TLS");
                            }
                            None => {
                                tokio::spawn(server.clone().listen_tcp(l));
                            }
                        }
                        Endpoint::Tcp(local.to_string())
                    }
                    // Mode 0600: only this user may connect.
                    Endpoint::Unix(p) => {
                        let l = lrpc_remote::bind_unix_private(p).map_err(|x| at(&x))?;
                        tokio::spawn(server.clone().listen_unix(l));
                        e.clone()
                    }
                    // Behind a NATS server: this kernel joins the exports' queue group, and
                    // the kernels in it share the calls.
                    Endpoint::Nats(n) => {
                        if n.auth().credentials.is_none() {
                            tracing::warn!(endpoint = %n, "serving exports on NATS without a credential: whoever may publish on this NATS server may call them");
                        }
                        let l = server
                            .bind_nats(n, &spec.group)
                            .await
                            .map_err(|x| at(&x))?;
                        tokio::spawn(server.clone().listen_nats(l));
                        e.clone()
                    }
                };
                if spec.insecure.contains(e) {
                    tracing::warn!(endpoint = %bound, "serving exports in clear (`insecure = true`): anyone who reaches this address may call them");
                }
                tracing::info!(endpoint = %bound, exports = ?named, "serving exports to the network");
                listening.push(bound);
            }
            Ok::<_, DeployError>((listening, server))
        })?;
        self.listening = listening;
        self.server = Some(server);
        Ok(())
    }

    /// The server of `[network]`, once it serves.
    pub fn server(&self) -> Option<Arc<RemoteServer>> {
        self.server.clone()
    }

    /// The addresses the deployment's exports are served on (ports chosen when `0`).
    pub fn listening(&self) -> &[Endpoint] {
        &self.listening
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        // Not a blocking drop: a deployment may be dropped inside another runtime.
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}
