//! Runs an experiment in the deterministic simulator, for any [`Harness`].

use crate::experiment::Experiment;
use crate::harness::{Harness, RunOutput};
use crate::metrics::Metrics;
use crate::report::{ProcessCounters, RunResult, SimFigures};
use ensemble_core::{Completion, ProcessId, Protocol, Time};
use ensemble_sim::{FaultPlan, Simulation};
use std::time::Duration;

/// After the measurement window clients stop issuing; the run goes on until no completion has
/// arrived for this long (longer than any round trip of the shipped topologies) and every
/// process is quiescent, so that every request has its reply and every process has seen every
/// update.
const QUIET: Duration = Duration::from_secs(3);
/// A run that has not drained after this long is reported as such by the check.
const MAX_DRAIN: Duration = Duration::from_secs(600);

/// A finished simulation before its check: what the checker needs, kept apart so that tests can
/// tamper with it and see the checker object.
pub struct Simulated<H: Harness> {
    pub result: RunResult,
    pub history: Vec<Completion<<H::P as Protocol>::Evidence>>,
    pub storages: Vec<Option<H::S>>,
    /// Processes that reported a failure, with the reason.
    pub failures: Vec<String>,
    /// A server backend's databases, dropped with the run (after the check).
    pub databases: Option<crate::databases::RunDatabases>,
    /// What the simulator saw of the run's end and of its faults.
    pub ending: Ending,
}

/// How a simulated run ended, for the fault runs ([`crate::fault_runs`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Ending {
    /// No completion for `QUIET` and every process quiescent before `MAX_DRAIN` ran out.
    pub drained: bool,
    /// Requests sent and never answered, by client and sequence number.
    pub unanswered: Vec<(ensemble_core::ClientId, u64)>,
    /// Messages the fault plan delivered twice.
    pub duplicated: u64,
    /// Events that reached a stalled process and waited for the stall's end.
    pub held_in_stalls: u64,
    /// Messages the processes refused, in all, and the first each refusing process refused.
    pub refused: u64,
    pub first_refusals: Vec<String>,
    /// Refusals no duplicated message explains (a copy may be refused once), and the first
    /// such refusal of each process that made one.
    pub unexplained_refusals: u64,
    pub first_unexplained_refusals: Vec<String>,
}

impl<H: Harness> Simulated<H> {
    /// Runs the protocol's checks, writes the history file if the experiment asks for one, and
    /// records the verdict in the result.
    pub fn check(self, h: &H, exp: &Experiment) -> anyhow::Result<RunResult> {
        let Simulated { mut result, history, storages, failures, databases, ending: _ } = self;
        let run = RunOutput { history: &history, storages, failures };
        crate::finish_run(h, exp, run, &mut result)?;
        drop(databases);
        Ok(result)
    }
}

pub fn run_sim<H: Harness>(h: &H, exp: &Experiment, progress: bool) -> anyhow::Result<RunResult> {
    let s = simulate(h, exp, progress)?;
    if exp.check || exp.history_file.is_some() {
        s.check(h, exp)
    } else {
        Ok(s.result)
    }
}

/// Runs the experiment; the history is kept when it will be checked or written.
pub fn simulate<H: Harness>(h: &H, exp: &Experiment, progress: bool) -> anyhow::Result<Simulated<H>> {
    simulate_under(h, exp, FaultPlan::new(), progress)
}

/// Runs the experiment under `faults` (none: [`simulate`]).
pub fn simulate_under<H: Harness>(h: &H, exp: &Experiment, faults: FaultPlan, progress: bool) -> anyhow::Result<Simulated<H>> {
    exp.validate().map_err(anyhow::Error::msg)?;
    h.validate(exp).map_err(anyhow::Error::msg)?;
    // A simulated instance's storage holds one session.
    let (tagged, databases) = crate::databases::for_run(exp, 1)?;
    let exp = &tagged;
    let deployment = h.deployment(exp);
    let n = deployment.len();
    let mut sim: Simulation<H::P, H::S> = Simulation::new(exp.topology.clone(), deployment, exp.seed)?;
    for i in 0..n as u32 {
        let id = ProcessId(i);
        sim.add_process(h.process(exp, id)?, h.sim_storage(exp, id)?)?;
    }
    let end = Time::ZERO + Duration::from_secs_f64(exp.warmup_s + exp.measure_s);
    for c in 0..exp.clients {
        let (client, site) = h.client(exp, c, end);
        sim.add_client(client, site)?;
    }
    *sim.faults_mut() = faults;

    let start = Time::ZERO + Duration::from_secs_f64(exp.warmup_s);
    let mut metrics = Metrics::new(start, end);
    let keep = exp.check || exp.history_file.is_some();
    let mut history = Vec::new();
    let last_completion = std::cell::Cell::new(Time::ZERO);
    let bar = progress_bar(progress, exp);
    let mut record = |now: Time, c: &Completion<<H::P as Protocol>::Evidence>| {
        metrics.record(c, &h.classify(c));
        if keep {
            history.push(c.clone());
        }
        last_completion.set(now);
    };
    // One virtual second at a time, for the progress bar and the CPU snapshot at the window start.
    let mut t = Time::ZERO;
    let mut busy_at_start = vec![];
    while t < end {
        let next = (t + Duration::from_secs(1)).min(end);
        if t < start && next >= start {
            sim.run_until(start, &mut record);
            busy_at_start = busy(&sim, n);
        }
        sim.run_until(next, &mut record);
        t = next;
        bar.set_position(t.as_secs_f64() as u64);
    }
    let busy_at_end = busy(&sim, n);
    let drained = loop {
        let next = sim.now() + Duration::from_secs(1);
        sim.run_until(next, &mut record);
        // Quiet, and every process done with what it had in flight (an overloaded replica may
        // still be applying commits its clients heard of long ago).
        let quiet = next.saturating_sub(last_completion.get().max(end)) >= QUIET;
        if quiet && sim.quiescent() {
            break true;
        }
        if next.saturating_sub(end) >= MAX_DRAIN {
            break false;
        }
    };
    bar.finish_and_clear();

    let window = Duration::from_secs_f64(exp.measure_s);
    let cpu_utilisation = busy_at_end
        .iter()
        .zip(busy_at_start.iter().chain(std::iter::repeat(&(Duration::ZERO, 1))))
        .map(|((e, cores), (s, _))| {
            let capacity = window * *cores;
            ((e.saturating_sub(*s)).as_secs_f64() / capacity.as_secs_f64() * 1e3).round() / 1e3
        })
        .collect();
    let stats = sim.stats();
    let sim_figures = SimFigures { events: stats.events, messages: stats.messages_sent, virtual_s: sim.now().as_secs_f64(), cpu_utilisation };
    let reports = sim.process_reports();
    let processes = reports.iter().map(|(id, counters, _)| ProcessCounters::new(*id, counters)).collect();
    let failures: Vec<String> = reports.iter().filter_map(|(id, _, f)| f.as_ref().map(|m| format!("{id}: {m}"))).collect();
    let ending = Ending {
        drained,
        unanswered: sim.unanswered().iter().copied().collect(),
        duplicated: stats.messages_duplicated,
        held_in_stalls: stats.events_held_in_stalls,
        refused: stats.processes.iter().map(|p| p.messages_refused).sum(),
        first_refusals: stats.processes.iter().filter_map(|p| p.first_refusal.clone()).collect(),
        unexplained_refusals: stats.processes.iter().map(|p| p.refusals_unexplained).sum(),
        first_unexplained_refusals: stats.processes.iter().filter_map(|p| p.first_unexplained_refusal.clone()).collect(),
    };

    let storages = sim.into_storages();
    let result = RunResult {
        experiment: exp.clone(),
        summary: metrics.summary(),
        check: None,
        check_passed: None,
        sim: Some(sim_figures),
        processes,
        partial: None,
    };
    Ok(Simulated { result, history, storages, failures, databases, ending })
}

/// Each process's busy time so far, with the cores it runs on.
fn busy<P: Protocol, S: ensemble_core::Storage<Job = P::Job, Result = P::JobResult>>(
    sim: &Simulation<P, S>,
    n: usize,
) -> Vec<(Duration, u32)> {
    (0..n as u32).map(|i| sim.stats().process(ProcessId(i)).map(|s| (s.busy, s.cores.max(1))).unwrap_or((Duration::ZERO, 1))).collect()
}

fn progress_bar(progress: bool, exp: &Experiment) -> indicatif::ProgressBar {
    if !progress {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new((exp.warmup_s + exp.measure_s) as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} virtual s ({elapsed})")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    bar.set_message(exp.label.clone());
    bar
}
