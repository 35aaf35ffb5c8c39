//! `ensemble node`: one host of a real deployment as an OS process. It builds the processes the
//! deployment puts on this host with the system's harness (creating and loading their storage),
//! binds, prints a ready line with the address it got, learns its peers' addresses from stdin
//! when the cluster file leaves ports to the hosts (port 0), serves until asked to shut down, and
//! writes what its processes reported.

use crate::systems::{self, WithHarness};
use anyhow::Context;
use clap::Args;
use ensemble_bench::{BackendKind, Experiment, Harness};
use ensemble_net::cluster::ready_line;
use ensemble_net::{ClusterSpec, HostId, HostedProcess, ShutdownHandle};
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Args)]
pub struct NodeArgs {
    /// The experiment (JSON, as in a result file): system, workload, data scale and seed.
    #[arg(long)]
    experiment: PathBuf,
    /// Where every host listens and which processes it runs.
    #[arg(long)]
    cluster: PathBuf,
    #[arg(long)]
    host: u32,
    /// Where this host's processes keep their storage (databases are created; they must not
    /// exist), and where the host writes its report when it stops.
    #[arg(long)]
    dir: PathBuf,
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
    db_run: Option<String>,
}

pub fn run(a: NodeArgs) -> anyhow::Result<()> {
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
    systems::dispatch(&exp.system.clone(), Serve { exp, spec, args: a })?
}

struct Serve {
    exp: Experiment,
    spec: ClusterSpec,
    args: NodeArgs,
}

impl WithHarness for Serve {
    type Out = anyhow::Result<()>;
    fn with<H: Harness>(self, h: &H) -> anyhow::Result<()> {
        let Serve { exp, mut spec, args } = self;
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
                for &id in cfg.processes() {
                    ensemble_server::admin::create_database(engine, &urls, tag, id.0).map_err(anyhow::Error::msg)?;
                }
            }
        }
        let mut processes = Vec::new();
        for &id in cfg.processes() {
            let storage = h.real_storage(&exp, id, &args.dir)?.map(|open| {
                let f: ensemble_net::StorageFactory<_, _> = Arc::new(move |worker| Box::new(open(worker)) as _);
                f
            });
            let serial_lane = h.serial_lane(&exp, id)?;
            processes.push(HostedProcess { process: h.process(&exp, id)?, storage, serial_lane });
        }
        let listener = std::net::TcpListener::bind(cfg.listen).with_context(|| format!("binding {}", cfg.listen))?;
        let bound = listener.local_addr().with_context(|| format!("the address bound for {}", cfg.listen))?;
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
        let path = crate::real::report_path(&args.dir, host);
        std::fs::write(&path, serde_json::to_string(&report.processes)?).with_context(|| format!("writing {}", path.display()))?;
        // One write for the whole line: the hosts of a run share the terminal's stderr, and
        // piecewise writes from several processes interleave into an unreadable line.
        let line = format!("{report:?}\n");
        std::io::stderr().write_all(line.as_bytes())?;
        Ok(())
    }
}
