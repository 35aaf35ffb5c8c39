//! `ensemble node`: one host of a real deployment as an OS process. It builds the processes the
//! deployment puts on this host with the system's harness (creating and loading their storage),
//! binds, prints a ready line with the address it got, learns its peers' addresses from stdin
//! when the cluster file leaves ports to the hosts (port 0), serves until asked to shut down, and
//! writes what its processes reported. The same host can run on a thread of the bench's own
//! process instead ([`embedded`]), its clients beside it.

use crate::systems::{self, WithHarness};
use anyhow::Context;
use clap::Args;
use ensemble_bench::{BackendKind, Experiment, Harness};
use ensemble_net::cluster::ready_line;
use ensemble_core::Protocol;
use ensemble_net::{ClusterSpec, HostId, HostedProcess, LocalClients, ShutdownHandle};
use std::any::Any;
use std::io::{BufRead, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Args)]
pub struct NodeArgs {
    /// The experiment (JSON, as in a result file): system, workload, data scale and seed.
    #[arg(long)]
    pub(crate) experiment: PathBuf,
    /// Where every host listens and which processes it runs.
    #[arg(long)]
    pub(crate) cluster: PathBuf,
    #[arg(long)]
    pub(crate) host: u32,
    /// Where this host's processes keep their storage (databases are created, and must not
    /// exist, unless `--resume`), and where the host writes its report when it stops.
    #[arg(long)]
    pub(crate) dir: PathBuf,
    /// The DBMS under the SQL applications' instances, instead of the experiment's: sqlite,
    /// postgres or mariadb.
    #[arg(long, value_parser = BackendKind::parse)]
    backend: Option<BackendKind>,
    /// Server URL(s) instead of the experiment's: one for every instance, or one per instance.
    #[arg(long, value_delimiter = ',')]
    db_url: Vec<String>,
    /// A server backend's run tag, when the experiment carries none (a node started by hand):
    /// this node creates the databases `ensemble_<TAG>_<i>` of the instances it runs and leaves
    /// them when it stops. Letters, digits and `_`.
    #[arg(long)]
    pub(crate) db_run: Option<String>,
    /// Start again over the databases an earlier node of this host made and left (it stopped
    /// or was killed): nothing is created or loaded, and the node recovers what it needs from
    /// them. Only for systems whose nodes can (2pc); the others refuse, saying why.
    #[arg(long)]
    pub(crate) resume: bool,
}

impl NodeArgs {
    /// A host of the run whose experiment and cluster files are these.
    pub(crate) fn of_run(experiment: PathBuf, cluster: PathBuf, host: HostId, dir: PathBuf) -> NodeArgs {
        NodeArgs { experiment, cluster, host: host.0, dir, backend: None, db_url: Vec::new(), db_run: None, resume: false }
    }
}

/// How the host was started, so how it says it is ready and learns its peers.
enum Launch {
    /// `ensemble node`: its ready line on stdout, the hosts' addresses on stdin.
    Process,
    /// On a thread of the bench's process, the only host of its run: the address it bound goes
    /// to `ready`, and its clients come through `local`, an [`Embedding`] of the system's
    /// evidence (the harness's type is known only once the system is dispatched).
    Embedded { ready: std::sync::mpsc::Sender<SocketAddr>, local: Box<dyn Any + Send>, stop: ShutdownHandle },
}

pub fn run(a: NodeArgs) -> anyhow::Result<()> {
    run_launched(a, Launch::Process)
}

/// How an embedded host's clients reach it: through `local` from a thread of their own, or, with
/// `on_loop`, run on the host's loop thread once the bench hands them over.
pub(crate) struct Embedding<E> {
    pub local: LocalClients<E>,
    pub on_loop: Option<ensemble_net::ClientsAwaited<E>>,
}

/// Runs the host as `ensemble node` would, on the calling thread, with `embedding`'s clients
/// served beside any on its listener, until a Shutdown frame or `stop`; sends the address it
/// bound to `ready` once it serves. The run must have this one host.
pub(crate) fn embedded<E: Send + 'static>(
    a: NodeArgs,
    ready: std::sync::mpsc::Sender<SocketAddr>,
    embedding: Embedding<E>,
    stop: ShutdownHandle,
) -> anyhow::Result<()> {
    run_launched(a, Launch::Embedded { ready, local: Box::new(embedding), stop })
}

fn run_launched(a: NodeArgs, launch: Launch) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&a.experiment).with_context(|| format!("reading {}", a.experiment.display()))?;
    let mut exp: Experiment = serde_json::from_str(&text).with_context(|| format!("{} is not an experiment", a.experiment.display()))?;
    if let Some(kind) = a.backend {
        exp.backend.kind = kind;
    }
    if !a.db_url.is_empty() {
        exp.backend.urls = a.db_url.clone();
    }
    if let Some(tag) = &a.db_run {
        anyhow::ensure!(
            !tag.is_empty() && tag.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
            "--db-run {tag:?}: a tag is lowercase letters, digits and `_`"
        );
        anyhow::ensure!(exp.backend.kind.engine().is_some(), "--db-run is for a server backend (postgres, mariadb)");
        anyhow::ensure!(exp.backend.run.is_empty() || exp.backend.run == *tag, "the experiment's databases are tagged {}, not {tag}", exp.backend.run);
    } else if let (Some(engine), true) = (exp.backend.kind.engine(), exp.backend.run.is_empty()) {
        anyhow::bail!("a {} backend needs its databases' run tag: the experiment carries none, so give --db-run TAG", engine.name());
    }
    let spec = ClusterSpec::load(&a.cluster)?;
    systems::dispatch(&exp.system.clone(), Serve { exp, spec, args: a, launch })?
}

struct Serve {
    exp: Experiment,
    spec: ClusterSpec,
    args: NodeArgs,
    launch: Launch,
}

impl WithHarness for Serve {
    type Out = anyhow::Result<()>;
    fn with<H: Harness>(self, h: &H) -> anyhow::Result<()> {
        let Serve { exp, mut spec, args, launch } = self;
        exp.validate().map_err(anyhow::Error::msg)?;
        h.validate(&exp).map_err(anyhow::Error::msg)?;
        anyhow::ensure!(
            h.deployment(&exp) == spec.deployment,
            "cluster file {} deploys other processes than experiment {} asks for",
            args.cluster.display(),
            args.experiment.display()
        );
        let host = HostId(args.host);
        let cfg = spec.host_config(host)?;
        let mut exp = exp;
        if let (Some(tag), Some(engine)) = (&args.db_run, exp.backend.kind.engine()) {
            if exp.backend.run.is_empty() {
                exp.backend.run = tag.clone();
                let urls = exp.backend.server_urls();
                ensemble_server::admin::preflight(engine, &urls).map_err(anyhow::Error::msg)?;
                if !args.resume {
                    for &id in cfg.processes() {
                        ensemble_server::admin::create_database(engine, &urls, tag, id.0).map_err(anyhow::Error::msg)?;
                    }
                }
            }
        }
        let mut processes = Vec::new();
        for &id in cfg.processes() {
            let storage = if args.resume { h.resume_storage(&exp, id, &args.dir)? } else { h.real_storage(&exp, id, &args.dir)? };
            let storage = storage.map(|open| {
                let f: ensemble_net::StorageFactory<_, _> = Arc::new(move |worker| Box::new(open(worker)) as _);
                f
            });
            let serial_lane = h.serial_lane(&exp, id)?;
            processes.push(HostedProcess { process: h.process(&exp, id)?, storage, serial_lane });
        }
        let listener = std::net::TcpListener::bind(cfg.listen).with_context(|| format!("binding {}", cfg.listen))?;
        let bound = listener.local_addr().with_context(|| format!("the address bound for {}", cfg.listen))?;
        if let Launch::Embedded { ready, local, stop } = launch {
            anyhow::ensure!(spec.hosts.len() == 1, "a host on the clients' thread must be its run's only one; this run has {}", spec.hosts.len());
            let Embedding { local, on_loop } = *local
                .downcast::<Embedding<<H::P as Protocol>::Evidence>>()
                .map_err(|_| anyhow::anyhow!("the clients' way in is for another protocol than {}'s", exp.system))?;
            spec.set_addrs(&[bound])?;
            let cfg = spec.host_config(host)?;
            // Told before it serves: what the clients send meanwhile waits in `local`.
            let _ = ready.send(bound);
            let report = match on_loop {
                Some(clients) => ensemble_net::run_host_with_clients_on_loop(listener, cfg, processes, stop, &local, clients)?,
                None => ensemble_net::run_host_with_local_clients(listener, cfg, processes, stop, &local)?,
            };
            return write_report(&args.dir, host, &report);
        }
        println!("{}", ready_line(host, bound));
        std::io::stdout().flush()?;
        // A host on port 0 chose its port as it bound, and so did its peers: whoever started the
        // hosts collects the ready lines and tells each host every address. Binding first and
        // never releasing leaves no window for another process to take the port.
        let cfg = if spec.hosts.iter().any(|h| h.addr.port() == 0) {
            let mut line = String::new();
            let n = std::io::stdin().lock().read_line(&mut line).context("reading the hosts' addresses from stdin")?;
            anyhow::ensure!(
                n > 0,
                "host {host} listens on {bound}, a port of its choosing, and needs every host's address on stdin \
                 (one line, in host order); stdin closed first"
            );
            let addrs = ensemble_net::cluster::parse_addrs_line(&line).context("the hosts' addresses on stdin")?;
            spec.set_addrs(&addrs).context("the hosts' addresses on stdin")?;
            let mine = spec.hosts[host.index()].addr;
            anyhow::ensure!(mine == bound, "the addresses on stdin put host {host} at {mine}, but it listens on {bound}");
            spec.host_config(host)?
        } else {
            cfg
        };
        let report = ensemble_net::run_host_on(listener, cfg, processes, ShutdownHandle::new())?;
        write_report(&args.dir, host, &report)
    }
}

/// Where the bench reads what the host's processes reported ([`crate::real::report_path`]), and
/// the whole report on stderr.
fn write_report(dir: &std::path::Path, host: HostId, report: &ensemble_net::HostReport) -> anyhow::Result<()> {
    let path = crate::real::report_path(dir, host);
    std::fs::write(&path, serde_json::to_string(&report.processes)?).with_context(|| format!("writing {}", path.display()))?;
    // One write for the whole line: the hosts of a run share the terminal's stderr, and
    // piecewise writes from several processes interleave into an unreadable line.
    let line = format!("{report:?}\n");
    std::io::stderr().write_all(line.as_bytes())?;
    Ok(())
}
