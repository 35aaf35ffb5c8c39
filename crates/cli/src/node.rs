//! `ensemble node`: one instance as an OS process. It creates and loads its own database, prints a
//! ready line, and serves until asked to shut down.

use anyhow::Context;
use clap::Args;
use ensemble_app::DataConfig;
use ensemble_bench::sim_run::load_partition;
use ensemble_bench::Experiment;
use ensemble_belt::{BeltConfig, ConveyorBelt};
use ensemble_core::InstanceId;
use ensemble_net::cluster::ready_line;
use ensemble_net::{ClusterSpec, ShutdownHandle};
use ensemble_sqlite::SqliteStorage;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[derive(Args)]
pub struct NodeArgs {
    /// The experiment (JSON, as in a result file): application, plan, data scale and seed.
    #[arg(long)]
    experiment: PathBuf,
    /// Where every instance listens and sits.
    #[arg(long)]
    cluster: PathBuf,
    #[arg(long)]
    instance: u32,
    /// This instance's database file (created; must not exist).
    #[arg(long)]
    db: PathBuf,
}

pub fn run(a: NodeArgs) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&a.experiment).with_context(|| format!("reading {}", a.experiment.display()))?;
    let exp: Experiment = serde_json::from_str(&text).with_context(|| format!("{} is not an experiment", a.experiment.display()))?;
    let app = exp.validate().map_err(anyhow::Error::msg)?;
    let spec = ClusterSpec::load(&a.cluster)?;
    let id = InstanceId(a.instance);
    let cfg = spec.node_config(id)?;
    if a.db.exists() {
        anyhow::bail!("database {} exists already; a node starts from a fresh database", a.db.display());
    }
    let plan = Arc::new(exp.plan.clone());
    let n = spec.instances.len() as u32;
    {
        let db = SqliteStorage::open_file(&a.db, app.clone(), id)?;
        db.create_schema()?;
        let data = (app.generate)(DataConfig { scale: exp.scale, seed: exp.seed });
        load_partition(&db, &data, &plan, id, n)?;
    }
    let belt_cfg = BeltConfig { instances: n, global_execution: exp.global_execution, idle_pause: Duration::from_micros(exp.idle_pause_us) };
    let node = ConveyorBelt::new(id, belt_cfg, app.clone(), plan);
    let listener = std::net::TcpListener::bind(cfg.listen).with_context(|| format!("binding {}", cfg.listen))?;
    let path = a.db.clone();
    let open = move |_worker: usize| {
        // A node cannot serve without its database: failing to open it is fatal.
        SqliteStorage::open_file(&path, app.clone(), id).unwrap_or_else(|e| panic!("opening {}: {e}", path.display()))
    };
    println!("{}", ready_line(cfg.instance, cfg.listen));
    std::io::stdout().flush()?;
    let report = ensemble_net::run_node_on(listener, cfg, node, open, ShutdownHandle::new())?;
    // One write for the whole line: the nodes of a run share the terminal's stderr, and
    // piecewise writes from several processes interleave into an unreadable line.
    let line = format!("{report:?}\n");
    std::io::stderr().write_all(line.as_bytes())?;
    Ok(())
}
