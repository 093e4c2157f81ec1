//! A running deployment: the kernel, the config's domains with their exports, and the HTTP
//! plugins kept under supervision (restarted fresh after a fault, swapped on reload).

use crate::config::{
    CompileCache, Config, DomainSpec, Export, PLUGIN_INTERFACE, ServingMode, Source,
    is_plugin_interface,
};
use crate::metrics::Metrics;
pub use crate::supervise::DeployError;
use crate::supervise::{Supervised, Supervision, died, lock, read, recycle, reload};
use lrpc_kernel::{Domain, DomainOptions, ExportOptions, Kernel, KernelConfig, Serving};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

fn kerr(what: impl Into<String>) -> impl FnOnce(lrpc_kernel::Error) -> DeployError {
    let what = what.into();
    move |error| DeployError::Kernel { what, error }
}

/// The deployment's domains, started.
pub struct Deployment {
    /// The kernel they run in.
    pub kernel: Kernel,
    /// The config.
    pub config: Config,
    /// Domains that are not plugins, by name.
    pub domains: BTreeMap<String, Domain>,
    /// Component domains, by name.
    pub components: BTreeMap<String, lrpc_kernel::ComponentDomain>,
    /// Plugins, by domain name.
    pub plugins: BTreeMap<String, Arc<Plugin>>,
    /// `wasi:http/incoming-handler` components, by domain name.
    pub handlers: BTreeMap<String, Arc<crate::wasi_http::HttpHandler>>,
    /// Counters and histograms.
    pub metrics: Arc<Metrics>,
    /// Remote exports bound here and exports served to other kernels, when configured.
    pub network: Option<crate::network::Network>,
}

impl Deployment {
    /// Creates the kernel and every domain of `config`, exports what each exports.
    pub fn start(config: Config) -> Result<Deployment, DeployError> {
        let cache_dir = match &config.cache {
            CompileCache::Off => None,
            CompileCache::Folder(dir) => Some(dir.clone()),
            // The default folder is a convenience: a home that can not hold it (read-only,
            // full) costs compile time, not the start.
            CompileCache::PerUser(dir) => match std::fs::create_dir_all(dir) {
                Ok(()) => Some(dir.clone()),
                Err(e) => {
                    tracing::warn!(
                        "compiling without a cache: the cache folder {} can not be made: {e} \
                         (set `[kernel] cache-dir`, or `false` to say so)",
                        dir.display()
                    );
                    None
                }
            },
        };
        let mut kc = KernelConfig::default()
            .with_cache_dir(cache_dir)
            .with_pool(crate::wasi_http::pool(&config));
        if let Some(d) = config.deadline {
            kc.deadline = d;
        }
        let kernel = Kernel::with_config(kc).map_err(kerr("starting the kernel"))?;
        for dir in &config.wit {
            kernel
                .add_wit_dir(&dir.path)
                .map_err(kerr(format!("loading the WIT in {}", dir.path.display())))
                .map_err(|e| e.at(&config.file, dir.line))?;
        }
        // Remote exports first: guests bind to them by name like to local ones.
        let mut network = crate::network::Network::start(&kernel, &config)?;
        let metrics = Arc::new(Metrics::default());
        let mut domains = BTreeMap::new();
        let mut plugins = BTreeMap::new();
        let mut handlers = BTreeMap::new();
        // Servers first, so that clients' presentations and binds find them.
        // Every error from here on names the line of the domain it concerns.
        let file = &config.file;
        let at = move |spec: &DomainSpec| {
            let line = spec.line;
            move |e: DeployError| e.at(file, line)
        };
        for spec in config.domains.values() {
            if spec.http_handler() {
                let workers = crate::wasi_http::workers(&config, &spec.name);
                let h =
                    crate::wasi_http::HttpHandler::start(&kernel, spec, metrics.clone(), workers)
                        .map_err(at(spec))?;
                handlers.insert(spec.name.clone(), h);
                continue;
            }
            if spec.component.is_some() {
                continue;
            }
            if spec.plugin().is_some() {
                let p = Plugin::start(&kernel, &config, spec, metrics.clone()).map_err(at(spec))?;
                plugins.insert(spec.name.clone(), p);
                continue;
            }
            let mut presentations = Vec::new();
            for b in &spec.binds {
                if let Some(p) = &b.presentation {
                    presentations.push(
                        kernel
                            .load_presentation(p)
                            .map_err(kerr(format!("domain `{}`", spec.name)))
                            .map_err(at(spec))?,
                    );
                }
            }
            let wasm = read(&spec.source).map_err(at(spec))?;
            let options = DomainOptions::default()
                .with_replicas(spec.replicas)
                .with_presentations(presentations)
                .with_quotas(spec.quotas)
                .with_start_deadline(start_deadline(spec));
            let d = kernel
                .domain_with(&spec.name, &wasm, options)
                .map_err(kerr(format!("domain `{}`", spec.name)))
                .map_err(at(spec))?;
            for e in &spec.exports {
                let opts = export_options(&kernel, e).map_err(|err| err.at(file, e.line))?;
                kernel
                    .export_as(&d, &e.interface, &e.name, opts)
                    .map_err(kerr(format!(
                        "domain `{}` exporting `{}`",
                        spec.name, e.name
                    )))
                    .map_err(|err| err.at(file, e.line))?;
            }
            domains.insert(spec.name.clone(), d);
        }
        let components = start_components(&kernel, &config)?;
        // Component plugins last: their imports may bind to any other domain.
        for spec in config.domains.values() {
            if spec.component.is_some() && spec.plugin().is_some() {
                let p = Plugin::start(&kernel, &config, spec, metrics.clone()).map_err(at(spec))?;
                plugins.insert(spec.name.clone(), p);
            }
        }
        if let (Some(net), Some(spec)) = (&mut network, &config.network) {
            let exported: Vec<(String, String)> = config
                .domains
                .values()
                .filter(|d| d.served_to_network())
                .flat_map(|d| d.exports.iter())
                .map(|e| (e.name.clone(), e.interface.clone()))
                .collect();
            net.serve(&kernel, spec, &exported)?;
            if let Some(server) = net.server() {
                metrics.remote_refusals(move || server.refused());
            }
        }
        Ok(Deployment {
            kernel,
            config,
            domains,
            components,
            plugins,
            handlers,
            metrics,
            network,
        })
    }

    /// Calls `domain.export` (a function without parameters returning one integer, or
    /// nothing) and returns what it returned, as text.
    pub fn call_entry(&self, entry: &str) -> Result<String, DeployError> {
        let (d, f) = entry
            .split_once('.')
            .ok_or_else(|| DeployError::Unknown(format!("`{entry}`: `domain.export` expected")))?;
        let dom = self
            .domains
            .get(d)
            .ok_or_else(|| DeployError::Unknown(format!("no domain `{d}`")))?;
        if let Ok(func) = dom.func::<(), i32>(f) {
            return func.call(()).map(|v| v.to_string()).map_err(kerr(entry));
        }
        if let Ok(func) = dom.func::<(), i64>(f) {
            return func.call(()).map(|v| v.to_string()).map_err(kerr(entry));
        }
        let func = dom.func::<(), ()>(f).map_err(kerr(format!(
            "`{entry}` (an export taking nothing and returning an i32, an i64 or nothing)"
        )))?;
        func.call(())
            .map(|()| "()".to_string())
            .map_err(kerr(entry))
    }

    /// Calls `function` of the interface exported under `name`, its arguments given as WIT
    /// value text; returns the result as text. The call is made by a driver domain bound to
    /// the export, so it takes the same path as a guest's call.
    pub fn call_function(
        &self,
        interface: &str,
        function: &str,
        args: &str,
    ) -> Result<String, CallFailure> {
        if let Some(d) = self.component_exporting(interface) {
            return call_component(d, interface, function, args);
        }
        let name = self
            .export_name(interface)
            .ok_or_else(|| CallFailure::Setup(format!("no domain exports `{interface}`")))?;
        let plan = self
            .kernel
            .interface(interface)
            .map_err(|e| CallFailure::Setup(e.to_string()))?;
        let (proc, p) = plan
            .procs
            .iter()
            .enumerate()
            .find(|(_, p)| p.name == function)
            .ok_or_else(|| {
                CallFailure::Setup(format!("`{interface}` has no function `{function}`"))
            })?;
        let encoded = crate::value::encode_args(&plan, &p.params, args)
            .map_err(|e| CallFailure::Setup(format!("arguments of `{function}`: {e}")))?;
        let driver = crate::driver::Driver::new(&self.kernel, "lrpc-call")
            .map_err(|e| CallFailure::Setup(e.to_string()))?;
        driver
            .bind(0, &name, plan.fingerprint, plan.procs.len())
            .map_err(|e| CallFailure::Setup(format!("binding to `{name}`: {e}")))?;
        let out = driver.call(0, proc, p.bounded, p.out_bound.unwrap_or(0), &encoded)?;
        match &p.result {
            None if out.is_empty() => Ok("()".into()),
            None => Err(CallFailure::Setup(
                "a result came back from a function without one".into(),
            )),
            Some(t) => {
                crate::value::print(&plan, t, &out).map_err(|e| CallFailure::Setup(e.to_string()))
            }
        }
    }

    /// The component domain exporting `interface`, if a component exports it.
    fn component_exporting(&self, interface: &str) -> Option<&lrpc_kernel::ComponentDomain> {
        let spec = self
            .config
            .domains
            .values()
            .find(|d| d.exports.iter().any(|e| e.interface == interface))?;
        self.components.get(&spec.name)
    }

    /// The name `interface` is exported under in this deployment.
    fn export_name(&self, interface: &str) -> Option<String> {
        if is_plugin_interface(interface) {
            // HTTP plugins: the current generation of the first one of that version, by
            // domain name.
            return self
                .plugins
                .values()
                .find(|p| p.interface() == interface)
                .map(|p| p.current().export.clone());
        }
        self.config
            .domains
            .values()
            .flat_map(|d| &d.exports)
            .find(|e| e.interface == interface)
            .map(|e| e.name.clone())
            .or_else(|| {
                // A remote export, registered under its interface's name.
                self.config
                    .remotes
                    .values()
                    .any(|r| r.interface == interface)
                    .then(|| interface.to_string())
            })
    }
}

/// Creates the component domains of `config` and exports what each exports. A component's
/// imports are bound when it is created, so a domain waits until the domains it imports from
/// exist: each pass creates those whose imports can be bound, until all are made or a pass
/// makes none (then the first refusal is the error).
fn start_components(
    kernel: &Kernel,
    config: &Config,
) -> Result<BTreeMap<String, lrpc_kernel::ComponentDomain>, DeployError> {
    let mut made = BTreeMap::new();
    let mut pending: Vec<&DomainSpec> = config
        .domains
        .values()
        .filter(|d| d.component.is_some() && !d.http_handler() && d.plugin().is_none())
        .collect();
    while !pending.is_empty() {
        let mut refused = None;
        let mut waiting = Vec::new();
        let before = made.len();
        for spec in pending {
            match start_component(kernel, config, spec) {
                Ok(d) => {
                    made.insert(spec.name.clone(), d);
                }
                Err(e @ lrpc_kernel::Error::Unbound { .. }) => {
                    refused.get_or_insert((spec, e));
                    waiting.push(spec);
                }
                Err(e) => {
                    return Err(
                        kerr(format!("domain `{}`", spec.name))(e).at(&config.file, spec.line)
                    );
                }
            }
        }
        if made.len() == before
            && let Some((spec, e)) = refused
        {
            let name = &spec.name;
            return Err(kerr(format!("domain `{name}`"))(e).at(&config.file, spec.line));
        }
        pending = waiting;
    }
    Ok(made)
}

fn start_component(
    kernel: &Kernel,
    config: &Config,
    spec: &DomainSpec,
) -> Result<lrpc_kernel::ComponentDomain, lrpc_kernel::Error> {
    let c = spec.component.clone().unwrap_or_default();
    let wasm = spec
        .source
        .load()
        .map_err(|e| lrpc_kernel::Error::Compile {
            domain: spec.name.clone(),
            source: e.into(),
        })?;
    let bind = component_binds(config, spec);
    let options = lrpc_kernel::component::ComponentOptions::default()
        .with_wasi(c.wasi)
        .with_limits(c.limits)
        .with_bind(bind)
        .with_trust_fully(c.trust_fully)
        .with_isolation(spec.isolation);
    let d = kernel.component(&spec.name, &wasm, options)?;
    for e in &spec.exports {
        kernel.export_as(
            &d,
            &e.interface,
            &e.name,
            lrpc_kernel::ExportOptions::default(),
        )?;
    }
    Ok(d)
}

/// A component's imports as `(interface, export name)`: a bind names the server domain, and
/// the import goes to that domain's export of the interface.
fn component_binds(config: &Config, spec: &DomainSpec) -> Vec<(String, String)> {
    spec.binds
        .iter()
        .map(|b| {
            let export = config
                .domains
                .get(&b.server)
                .and_then(|d| d.exports.iter().find(|e| e.interface == b.interface))
                .map_or_else(|| b.interface.clone(), |e| e.name.clone());
            (b.interface.clone(), export)
        })
        .collect()
}

/// `--call` into a component domain: the arguments parsed as WIT value text against the
/// function's parameter types, the results printed the same way.
fn call_component(
    d: &lrpc_kernel::ComponentDomain,
    interface: &str,
    function: &str,
    args: &str,
) -> Result<String, CallFailure> {
    let ty = d
        .function_type(interface, function)
        .ok_or_else(|| CallFailure::Setup(format!("`{interface}` has no function `{function}`")))?;
    let types: Vec<wasmtime::component::Type> = ty.params().map(|(_, t)| t).collect();
    let text = format!("{function}({args})");
    let params = wasm_wave::untyped::UntypedFuncCall::parse(&text)
        .and_then(|c| c.to_wasm_params::<wasmtime::component::Val>(&types))
        .map_err(|e| CallFailure::Setup(format!("arguments of `{function}`: {e}")))?;
    let results = d
        .call(interface, function, &params)
        .map_err(CallFailure::Component)?;
    let printed = results
        .iter()
        .map(|v| wasm_wave::to_string(v).map_err(|e| CallFailure::Setup(e.to_string())))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(match printed.len() {
        0 => "()".into(),
        1 => printed.into_iter().next().unwrap_or_default(),
        _ => format!("({})", printed.join(", ")),
    })
}

pub use lrpc_driver::CallFailure;

/// How long a core domain's start function may run: as long as its longest export's
/// deadline, or the kernel's deadline when no export sets one. A start function that loops
/// then fails start-up, a restart or a reload as quickly as a call would.
fn start_deadline(spec: &DomainSpec) -> Option<std::time::Duration> {
    let deadlines: Option<Vec<std::time::Duration>> =
        spec.exports.iter().map(|e| e.deadline).collect();
    deadlines?.into_iter().max()
}

fn export_options(kernel: &Kernel, e: &Export) -> Result<ExportOptions, DeployError> {
    let presentation = e
        .presentation
        .as_ref()
        .map(|p| kernel.load_presentation(p))
        .transpose()
        .map_err(kerr(format!("exporting `{}`", e.name)))?;
    Ok(ExportOptions::default()
        .with_serving(match e.serving {
            ServingMode::Migrate => Serving::Migrate,
            ServingMode::OwnThread => Serving::OwnThread,
        })
        .with_deadline(e.deadline)
        .with_presentation(presentation))
}

/// The domain of a plugin's generation: a core module, or a component (which the driver
/// reaches through the kernel's core stand-in of its export).
pub enum PluginDomain {
    /// A core-module domain.
    Core(Domain),
    /// A component domain.
    Component(lrpc_kernel::ComponentDomain),
}

/// One generation of a plugin: a domain exported under a name of its own. Dropped when the
/// plugin has moved on to a newer generation and no driver is bound to this one any more;
/// the domain is then terminated.
pub struct PluginInstance {
    /// The domain.
    pub domain: PluginDomain,
    /// The name it is exported under (`http-plugin/<domain>@<generation>`).
    pub export: String,
    /// Its generation (1 for the first).
    pub generation: u64,
    kernel: Kernel,
}

impl PluginInstance {
    /// Bytes of linear memory the generation holds: every replica of a core plugin (the
    /// pages its A-stack windows are mapped over included), every memory of a component
    /// plugin's instance. Read without entering the domain.
    pub fn memory(&self) -> usize {
        match &self.domain {
            PluginDomain::Core(d) => d.memory_bytes(),
            PluginDomain::Component(c) => c.memory_size(),
        }
    }

    fn terminated(&self) -> bool {
        match &self.domain {
            PluginDomain::Core(d) => d.is_terminated(),
            PluginDomain::Component(c) => c.is_terminated(),
        }
    }

    fn terminate(&self) {
        match &self.domain {
            PluginDomain::Core(d) => self.kernel.terminate(d),
            PluginDomain::Component(d) => self.kernel.terminate(d),
        }
    }

    /// Whether the generation lives on after a call into it failed: an isolated plugin,
    /// reset (core) or given a fresh instance (component), not terminated or left dead.
    pub fn survived_fault(&self) -> bool {
        match &self.domain {
            PluginDomain::Core(d) => !d.is_terminated(),
            PluginDomain::Component(c) => !c.is_terminated() && c.dead().is_none(),
        }
    }

    /// The core-module domain, when the plugin is one.
    pub fn core(&self) -> Option<&Domain> {
        match &self.domain {
            PluginDomain::Core(d) => Some(d),
            PluginDomain::Component(_) => None,
        }
    }
}

impl Drop for PluginInstance {
    fn drop(&mut self) {
        self.terminate();
    }
}

/// An HTTP plugin under supervision.
pub struct Plugin {
    /// The plugin's domain name.
    pub name: String,
    spec: DomainSpec,
    /// A component plugin's imports, as `(interface, export name)`.
    bind: Vec<(String, String)>,
    kernel: Kernel,
    current: Mutex<Arc<PluginInstance>>,
    supervision: Supervision,
    /// After a request, a generation whose memory grew past this many bytes is replaced
    /// (`[serve] recycle-above`, at least four times what the first generation held at start).
    mark: Option<usize>,
    /// The routes whose chains hold the plugin, and the longest of their requests may take
    /// (see [`Plugin::retire`]).
    routes: Vec<String>,
    grace: std::time::Duration,
}

impl Supervised for Plugin {
    const KIND: &'static str = "plugin";
    fn name(&self) -> &str {
        &self.name
    }
    fn supervision(&self) -> &Supervision {
        &self.supervision
    }
    fn replace(&self, generation: u64) -> Result<(), DeployError> {
        let wasm = read(&self.spec.source)?;
        let next = instantiate(&self.kernel, &self.spec, &self.bind, &wasm, generation)?;
        let old = {
            let mut current = lock(&self.current);
            let old = std::mem::replace(&mut *current, Arc::new(next));
            // Made while the server stopped it (see `Plugin::stop`, which takes the same
            // lock after it marks the plugin stopped): it runs nothing either.
            if self.supervision.stopped() {
                current.terminate();
            }
            old
        };
        self.retire(old);
        Ok(())
    }
}

impl Plugin {
    /// The plugin interface the domain exports: [`PLUGIN_INTERFACE`] (header values as
    /// strings) or [`crate::config::PLUGIN_INTERFACE_BYTES`] (as bytes).
    pub fn interface(&self) -> &str {
        self.spec
            .plugin()
            .map_or(PLUGIN_INTERFACE, |e| e.interface.as_str())
    }

    /// Whether the plugin's header values are strings: it can not be given a value that is
    /// not UTF-8.
    pub fn speaks_strings(&self) -> bool {
        self.interface() == PLUGIN_INTERFACE
    }

    fn start(
        kernel: &Kernel,
        config: &Config,
        spec: &DomainSpec,
        metrics: Arc<Metrics>,
    ) -> Result<Arc<Plugin>, DeployError> {
        let wasm = read(&spec.source)?;
        let bind = component_binds(config, spec);
        let first = instantiate(kernel, spec, &bind, &wasm, 1)?;
        let mark = config
            .recycle_above
            .map(|m| m.max(first.memory().saturating_mul(4)));
        // A request that took this generation before it was replaced ends within its
        // driver's deadline: a second for the driver plus, per plugin of its chain, a wait
        // for a busy replica and a call (as `edge::chain_deadline` sets it).
        let deadline = |name: &String| {
            config
                .domains
                .get(name)
                .and_then(|d| d.plugin())
                .and_then(|e| e.deadline)
                .unwrap_or(kernel.config().deadline)
        };
        let chains = config
            .routes
            .iter()
            .filter(|r| r.chain.contains(&spec.name));
        let grace = chains
            .clone()
            .map(|r| {
                r.chain
                    .iter()
                    .fold(std::time::Duration::from_secs(1), |sum, p| {
                        sum.saturating_add(deadline(p).saturating_mul(2))
                    })
            })
            .max()
            .unwrap_or_default()
            .min(std::time::Duration::from_secs(24 * 60 * 60));
        Ok(Arc::new(Plugin {
            name: spec.name.clone(),
            spec: spec.clone(),
            bind,
            kernel: kernel.clone(),
            current: Mutex::new(Arc::new(first)),
            supervision: Supervision::new(metrics),
            mark,
            routes: chains.map(|r| r.prefix.clone()).collect(),
            grace,
        }))
    }

    /// Called after a request that ran on generation `instance`: when it grew past the
    /// memory mark, schedules its replacement by a fresh generation (see
    /// [`crate::supervise::recycle`]); whether it did.
    pub fn recycle_if_grown(self: &Arc<Self>, instance: &PluginInstance) -> bool {
        let Some(mark) = self.mark else { return false };
        if instance.memory() <= mark || instance.generation != self.generation() {
            return false;
        }
        recycle(self, instance.generation, "memory");
        true
    }

    /// Lets a replaced generation go: at once when it is dead or nothing holds it; else,
    /// on a thread of its own, terminated (its memories and segments going back to the
    /// system) once no request runs on the plugin's routes, or at the latest after the
    /// longest a request that took it may still run. Seats that hold it without a request
    /// (idle ones) would otherwise keep it until their next request. A request that took it
    /// just before the swap and is terminated under it runs again on the fresh generation,
    /// as after a reload.
    fn retire(&self, old: Arc<PluginInstance>) {
        if old.terminated() {
            return;
        }
        let weak = Arc::downgrade(&old);
        drop(old);
        let old = weak;
        if old.strong_count() == 0 {
            return;
        }
        let metrics = self.supervision.metrics.clone();
        let routes = self.routes.clone();
        let grace = self.grace;
        let spawned = std::thread::Builder::new()
            .name(format!("retire-{}", self.name))
            .spawn(move || {
                let since = std::time::Instant::now();
                while old.strong_count() > 0 {
                    let idle = routes.iter().all(|r| metrics.in_flight(r) <= 0);
                    if idle || since.elapsed() >= grace {
                        if let Some(i) = old.upgrade() {
                            i.terminate();
                        }
                        return;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
            });
        if let Err(e) = spawned {
            tracing::error!(
                plugin = self.name,
                "can not start a thread to retire a generation: {e}"
            );
        }
    }

    /// Whether a restart is scheduled or under way.
    pub fn restarting(&self) -> bool {
        self.supervision.pending()
    }

    /// Stops the plugin for good, at shutdown: terminates its current generation (calls
    /// running in it stop at the next epoch tick, on whatever thread runs them, and fail),
    /// and restarts no generation after that; a reload's new generation is terminated too.
    pub fn stop(&self) {
        self.supervision.stop();
        let current = lock(&self.current).clone();
        current.terminate();
    }

    /// Whether [`Plugin::stop`] was called.
    pub fn stopped(&self) -> bool {
        self.supervision.stopped()
    }

    /// Waits, at most until `until`, for a generation after `dead` while a restart is
    /// pending; whether one came.
    pub fn wait_past(&self, dead: u64, until: std::time::Instant) -> bool {
        self.supervision.wait_past(dead, until)
    }

    /// The deadline of one call into the plugin.
    pub fn deadline(&self) -> std::time::Duration {
        self.spec
            .plugin()
            .and_then(|e| e.deadline)
            .unwrap_or(self.kernel.config().deadline)
    }

    /// The number of the generation requests should use now (what [`Plugin::current`] gives,
    /// or, while a reload or restart swaps generations, the one before it).
    pub fn generation(&self) -> u64 {
        self.supervision().generation()
    }

    /// The generation requests should use now.
    pub fn current(&self) -> Arc<PluginInstance> {
        lock(&self.current).clone()
    }

    /// The module file, when the plugin comes from one.
    pub fn file(&self) -> Option<&std::path::Path> {
        match &self.spec.source {
            Source::File(p) => Some(p),
            Source::Builtin(..) => None,
        }
    }

    /// Replaces the running generation with a fresh one from the module's current bytes
    /// (re-read from its file). Requests in flight finish on the old generation.
    pub fn reload(&self) -> Result<u64, DeployError> {
        reload(self)
    }

    /// Reports that generation `generation` died (trapped, ran past its deadline, was
    /// terminated); the first report of a generation schedules its restart with backoff.
    pub fn died(self: &Arc<Self>, generation: u64) {
        died(self, generation);
    }

    /// Bytes of linear memory of the current generation ([`PluginInstance::memory`]).
    pub fn memory(&self) -> usize {
        self.current().memory()
    }
}

fn instantiate(
    kernel: &Kernel,
    spec: &DomainSpec,
    bind: &[(String, String)],
    wasm: &[u8],
    generation: u64,
) -> Result<PluginInstance, DeployError> {
    let export = spec
        .plugin()
        .ok_or_else(|| DeployError::Unknown(format!("`{}` is not a plugin", spec.name)))?;
    let name = format!("{}@{generation}", export.name);
    if let Some(c) = &spec.component {
        let options = lrpc_kernel::component::ComponentOptions::default()
            .with_wasi(c.wasi.clone())
            .with_limits(c.limits.clone())
            .with_bind(bind.to_vec())
            .with_trust_fully(c.trust_fully.clone())
            .with_isolation(spec.isolation);
        let d = kernel
            .component(&format!("{}@{generation}", spec.name), wasm, options)
            .map_err(kerr(format!("plugin `{}`", spec.name)))?;
        if let Err(e) = kernel.export_as(
            &d,
            &export.interface,
            &name,
            lrpc_kernel::ExportOptions::default(),
        ) {
            kernel.terminate(&d);
            return Err(kerr(format!("plugin `{}`", spec.name))(e));
        }
        return Ok(PluginInstance {
            domain: PluginDomain::Component(d),
            export: name,
            generation,
            kernel: kernel.clone(),
        });
    }
    let opts = export_options(kernel, export)?;
    let domain = kernel
        .domain_with(
            &format!("{}@{generation}", spec.name),
            wasm,
            DomainOptions::default()
                .with_replicas(spec.replicas)
                .with_quotas(spec.quotas)
                .with_start_deadline(start_deadline(spec))
                .with_isolation(spec.isolation),
        )
        .map_err(kerr(format!("plugin `{}`", spec.name)))?;
    if let Err(e) = kernel.export_as(&domain, &export.interface, &name, opts) {
        kernel.terminate(&domain);
        return Err(kerr(format!("plugin `{}`", spec.name))(e));
    }
    // An isolated plugin is set up now: what it holds is what each request meets (drivers
    // bind to it later, on pages of their own that a reset leaves alone).
    if spec.isolation == lrpc_kernel::domain::Isolation::Request
        && let Err(e) = domain.capture_fresh_state()
    {
        kernel.terminate(&domain);
        return Err(kerr(format!("plugin `{}`", spec.name))(e));
    }
    Ok(PluginInstance {
        domain: PluginDomain::Core(domain),
        export: name,
        generation,
        kernel: kernel.clone(),
    })
}
