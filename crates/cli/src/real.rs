//! `bench --real`: the experiment's instances as OS processes on this machine, talking TCP on
//! loopback with the topology's delays emulated, clients driven from this process.

use anyhow::Context;
use ensemble_bench::metrics::Metrics;
use ensemble_bench::{Experiment, RunResult};
use ensemble_belt::{ClosedLoopClient, ThinkTime};
use ensemble_core::{ClientId, Completion, InstanceId, Time};
use ensemble_net::cluster::{send_shutdown, wait_for_ready_line};
use ensemble_net::{run_clients, ClientSlot, ClusterSpec, TopologyRef};
use ensemble_sqlite::SqliteStorage;
use std::io::BufReader;
use std::ops::ControlFlow;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Time after the window for replies in flight and the token's last round.
const DRAIN: Duration = Duration::from_secs(5);

struct Nodes(Vec<Child>);

impl Drop for Nodes {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub fn run_real(exp: &Experiment, progress: bool) -> anyhow::Result<RunResult> {
    let app = exp.validate().map_err(anyhow::Error::msg)?;
    let dir = tempfile::tempdir()?;
    let mut spec = ClusterSpec::local(exp.instances as usize, Some(TopologyRef::Inline(Box::new(exp.topology.clone()))), true)?;
    spec.seed = exp.seed;
    spec.workers = 2;
    let exp_path = dir.path().join("experiment.json");
    let cluster_path = dir.path().join("cluster.toml");
    std::fs::write(&exp_path, serde_json::to_string(exp)?)?;
    spec.save(&cluster_path)?;
    let exe = std::env::current_exe().context("locating the ensemble binary")?;
    let mut nodes = Nodes(Vec::new());
    for i in 0..exp.instances {
        let child = Command::new(&exe)
            .arg("node")
            .arg("--experiment")
            .arg(&exp_path)
            .arg("--cluster")
            .arg(&cluster_path)
            .arg("--instance")
            .arg(i.to_string())
            .arg("--db")
            .arg(dir.path().join(format!("i{i}.db")))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting a node process")?;
        nodes.0.push(child);
    }
    for (i, child) in nodes.0.iter_mut().enumerate() {
        let out = child.stdout.take().expect("piped");
        let (id, _) = wait_for_ready_line(BufReader::new(out)).with_context(|| format!("instance {i} did not start"))?;
        anyhow::ensure!(id == InstanceId(i as u32), "instance {i} announced itself as {id}");
    }

    let epoch = Instant::now();
    let end = Duration::from_secs_f64(exp.warmup_s + exp.measure_s);
    let cfg = spec.client_config(epoch, epoch + end + DRAIN)?;
    let think = if exp.think_ms > 0.0 { ThinkTime::Exponential { mean: Duration::from_secs_f64(exp.think_ms / 1e3) } } else { ThinkTime::None };
    let slots = (0..exp.clients)
        .map(|c| {
            let (site, ctx) = exp.client_placement(c);
            let client = ClosedLoopClient::new(ClientId(c as u64), ctx, exp.workload.client(exp.scale), exp.seed, think)
                .stop_at(Time::from_duration(end));
            ClientSlot { client: Box::new(client), site }
        })
        .collect();
    let mut metrics = Metrics::new(Time::from_duration(Duration::from_secs_f64(exp.warmup_s)), Time::from_duration(end));
    let mut history: Vec<Completion> = Vec::new();
    let bar = if progress { indicatif::ProgressBar::new_spinner() } else { indicatif::ProgressBar::hidden() };
    bar.set_message(format!("{} (real processes)", exp.label));
    let report = run_clients(cfg, slots, |c| {
        metrics.record(&c);
        history.push(c);
        bar.tick();
        ControlFlow::Continue(())
    })?;
    bar.finish_and_clear();
    for s in &spec.instances {
        send_shutdown(s.addr, Duration::from_secs(10))?;
    }
    for (i, child) in nodes.0.iter_mut().enumerate() {
        let status = child.wait()?;
        anyhow::ensure!(status.success(), "instance {i} exited with {status}");
    }
    nodes.0.clear();
    anyhow::ensure!(
        report.requests_undeliverable == 0 && report.link_failures == 0,
        "the client driver lost {} request(s) and {} connection(s)",
        report.requests_undeliverable,
        report.link_failures
    );

    let (check, check_passed) = if exp.check {
        let storages = (0..exp.instances)
            .map(|i| SqliteStorage::open_file(&dir.path().join(format!("i{i}.db")), Arc::clone(&app), InstanceId(i)))
            .collect::<Result<Vec<_>, _>>()?;
        let refs: Vec<&SqliteStorage> = storages.iter().collect();
        let data = (app.generate)(ensemble_app::DataConfig { scale: exp.scale, seed: exp.seed });
        let r = ensemble_check::check(&app, &exp.plan, &data, &history, &refs)?;
        (Some(r.summary()), Some(r.ok()))
    } else {
        (None, None)
    };
    Ok(RunResult { experiment: exp.clone(), summary: metrics.summary(), check, check_passed, sim: None, belt: vec![] })
}
