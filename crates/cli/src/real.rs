//! `bench --real`: any system's deployment as OS processes on this machine (one per host, the
//! `node` command), talking TCP on loopback with the topology's delays emulated, clients driven
//! from this process. The same harness as the simulated run builds the processes, the clients,
//! the classification and the check.

use anyhow::Context;
use ensemble_bench::harness::RunOutput;
use ensemble_bench::metrics::Metrics;
use ensemble_bench::report::ProcessCounters;
use ensemble_bench::{Experiment, Harness, RunResult};
use ensemble_core::{Completion, ProcessId, Protocol, Time};
use ensemble_net::cluster::{send_shutdown, wait_for_ready_line};
use ensemble_net::{run_clients, ClientSlot, ClusterSpec, HostId, ProcessReport, TopologyRef};
use std::io::BufReader;
use std::ops::ControlFlow;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Time after the window for replies in flight and the protocol's last round.
const DRAIN: Duration = Duration::from_secs(5);

/// Node processes of a run; killed if the run ends early.
struct Hosts(Vec<Child>);

impl Drop for Hosts {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Where host `h` writes what its processes reported when it stops.
pub fn report_path(dir: &Path, h: HostId) -> std::path::PathBuf {
    dir.join(format!("host{}-report.json", h.0))
}

pub fn run_real<H: Harness>(h: &H, exp: &Experiment, progress: bool) -> anyhow::Result<RunResult> {
    exp.validate().map_err(anyhow::Error::msg)?;
    h.validate(exp).map_err(anyhow::Error::msg)?;
    let dir = tempfile::tempdir()?;
    let deployment = h.deployment(exp);
    let n = deployment.len();
    let mut spec = ClusterSpec::local(deployment, TopologyRef::Inline(Box::new(exp.topology.clone())), true)?;
    spec.seed = exp.seed;
    spec.workers = 2;
    let exp_path = dir.path().join("experiment.json");
    let cluster_path = dir.path().join("cluster.toml");
    std::fs::write(&exp_path, serde_json::to_string(exp)?)?;
    spec.save(&cluster_path)?;
    let exe = std::env::current_exe().context("locating the ensemble binary")?;
    let mut hosts = Hosts(Vec::new());
    let host_ids: Vec<HostId> = spec.host_ids().map(|(id, _)| id).collect();
    for host in &host_ids {
        let child = Command::new(&exe)
            .arg("node")
            .arg("--experiment")
            .arg(&exp_path)
            .arg("--cluster")
            .arg(&cluster_path)
            .arg("--host")
            .arg(host.0.to_string())
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting a node process")?;
        hosts.0.push(child);
    }
    for (host, child) in host_ids.iter().zip(hosts.0.iter_mut()) {
        let out = child.stdout.take().expect("piped");
        let (id, _) = wait_for_ready_line(BufReader::new(out)).with_context(|| format!("host {} did not start", host.0))?;
        anyhow::ensure!(id == *host, "host {} announced itself as host {}", host.0, id.0);
    }

    let epoch = Instant::now();
    let end = Duration::from_secs_f64(exp.warmup_s + exp.measure_s);
    let cfg = spec.client_config(epoch, epoch + end + DRAIN)?;
    let slots = (0..exp.clients)
        .map(|c| {
            let (client, site) = h.client(exp, c, Time::from_duration(end));
            ClientSlot { client, site }
        })
        .collect();
    let mut metrics = Metrics::new(Time::from_duration(Duration::from_secs_f64(exp.warmup_s)), Time::from_duration(end));
    let mut history: Vec<Completion<<H::P as Protocol>::Evidence>> = Vec::new();
    let bar = if progress { indicatif::ProgressBar::new_spinner() } else { indicatif::ProgressBar::hidden() };
    bar.set_message(format!("{} (real processes)", exp.label));
    let report = run_clients(cfg, slots, |c| {
        metrics.record(&c, &h.classify(&c));
        history.push(c);
        bar.tick();
        ControlFlow::Continue(())
    })?;
    bar.finish_and_clear();
    for (_, s) in spec.host_ids() {
        send_shutdown(s.addr, Duration::from_secs(10))?;
    }
    for (host, child) in host_ids.iter().zip(hosts.0.iter_mut()) {
        let status = child.wait()?;
        anyhow::ensure!(status.success(), "host {} exited with {status}", host.0);
    }
    hosts.0.clear();
    anyhow::ensure!(
        report.requests_undeliverable == 0 && report.link_failures == 0,
        "the client driver lost {} request(s) and {} connection(s)",
        report.requests_undeliverable,
        report.link_failures
    );

    let mut reports: Vec<ProcessReport> = Vec::new();
    for host in &host_ids {
        let path = report_path(dir.path(), *host);
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        reports.extend(serde_json::from_str::<Vec<ProcessReport>>(&text).with_context(|| format!("{} is not a host report", path.display()))?);
    }
    reports.sort_by_key(|r| r.id);
    let counters: Vec<ProcessCounters> =
        reports.iter().map(|r| ProcessCounters { process: r.id, counters: r.counters.clone() }).collect();
    let failures: Vec<String> = reports.iter().filter_map(|r| r.failure.as_ref().map(|f| format!("{}: {f}", r.id))).collect();
    let mut result = RunResult { experiment: exp.clone(), summary: metrics.summary(), check: None, check_passed: None, sim: None, processes: counters };
    if exp.check || exp.history_file.is_some() {
        let storages = (0..n as u32).map(|i| h.reopen_storage(exp, ProcessId(i), dir.path())).collect::<anyhow::Result<Vec<_>>>()?;
        ensemble_bench::finish_run(h, exp, RunOutput { history: &history, storages, failures }, &mut result)?;
    }
    Ok(result)
}
