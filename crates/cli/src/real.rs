//! `bench --real`: any system's deployment as OS processes on this machine (one per host, the
//! `node` command), talking TCP on loopback with the topology's delays emulated, clients driven
//! from this process. The same harness as the simulated run builds the processes, the clients,
//! the classification and the check. With `Experiment::embedded` a run's one host runs on a
//! thread of this process instead, built as `ensemble node` builds it, and the clients reach it
//! through its `LocalClients`; the watcher, the drain and the shutdown treat that thread as they
//! treat a node process.
//!
//! A run fails fast and cleans up after itself. Every phase has a bound: start-up (every host's
//! ready line), the clients' window and drain, the hosts' drain (every host quiescent), shutdown
//! (every host exits). While the clients run, a watcher ends the run within seconds when a host
//! exits or stops answering probes, naming the host and what happened. SIGINT and SIGTERM stop
//! every node and remove the run's files; nodes die with the bench even when it is SIGKILLed.
//! A run that ends early still hands back what it measured, marked partial ([`PartialRun`]).
//!
//! Start-up has no port race: every host binds port 0 and announces the port it got on its ready
//! line; once every host is up, each one reads every host's address from its stdin
//! ([`addrs_line`](ensemble_net::cluster::addrs_line)).

use anyhow::Context;
use ensemble_bench::harness::RunOutput;
use ensemble_bench::metrics::{Metrics, Summary};
use ensemble_bench::report::ProcessCounters;
use ensemble_bench::{Experiment, Harness, RunResult};
use ensemble_core::{Completion, ProcessId, Protocol, Time};
use ensemble_net::cluster::{addrs_line, send_shutdown, wait_for_ready_line};
use ensemble_net::{
    clients_hand_over, probe, run_clients_beside, ClientReport, ClientsOnLoop, LocalClients, ClientSlot, ClusterSpec, HostId, HostStatus, NetError, ProcessReport, RequestHold, Secret, ShutdownHandle, StopReason,
    TopologyRef,
};
use std::collections::HashMap;
use std::io::{BufReader, ErrorKind, Write};
use std::net::SocketAddr;
use std::ops::ControlFlow;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The longest the clients wait after the window for replies in flight; they stop as soon as
/// none is (`StopReason::Finished`). As long as the hosts get to drain ([`QUIESCE`]): a
/// transaction whose reply comes after the clients stopped may have committed, and it is missing
/// from the history the check replays (seen: the 2PC baseline on MariaDB, a convoy of RUBiS
/// registrations at one instance lasting some 20 s, each of 30-odd late commits then counted as a
/// replica's extra row).
const DRAIN: Duration = QUIESCE;
/// Every host's ready line: each builds and loads its databases before it binds.
const STARTUP: Duration = Duration::from_secs(60);
/// How often the watcher looks at the hosts while the clients run.
const PROBE_EVERY: Duration = Duration::from_millis(250);
/// How long one probe waits for its answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// A host unanswering for this long is stopped or hung: a live protocol loop answers a probe
/// within milliseconds, and three seconds leave room for a loaded machine.
const SILENCE: Duration = Duration::from_secs(3);
/// After the clients stop, until every host is quiescent (the belt: its token round done). The
/// 2pc baseline under load can still be running a transaction through a few lock waits of a
/// second each.
const QUIESCE: Duration = Duration::from_secs(30);
/// From Shutdown to the host's exit (it writes its report first); then it is killed.
const SHUTDOWN: Duration = Duration::from_secs(10);
/// The name of an embedded host's thread, by which the overhead figure tells its CPU time
/// from the clients' (`crate::cpu_use`).
pub const EMBEDDED_HOST_THREAD: &str = "ensemble-host";
/// How often a bounded wait for a child's exit or a host's drain looks again.
const POLL: Duration = Duration::from_millis(50);
/// A run that ends early asks the hosts still alive for their reports: this long for each to
/// take the Shutdown, and for all to exit. A stopped or hung one is not waited for longer.
const SALVAGE: Duration = Duration::from_secs(2);
/// In a run's directory: the bench's pid, so a later bench can tell a directory whose bench was
/// SIGKILLed (no code of it ran to remove the directory) and remove it.
const OWNER_FILE: &str = "bench.pid";

/// A run that ended before its window, drain and shutdown did: why, with what was measured
/// until then (`result.partial` holds the reason). `bench` writes it as a `-partial` result.
#[derive(Debug)]
pub struct PartialRun {
    pub result: Box<RunResult>,
}

impl std::fmt::Display for PartialRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.result.partial.as_deref().unwrap_or("the run ended early"))
    }
}

impl std::error::Error for PartialRun {}

/// One host of a run.
struct Node {
    host: HostId,
    /// "host h1 (process p1, instance 1)": how every message names it.
    name: String,
    running: Running,
}

/// Where a host runs.
enum Running {
    /// `ensemble node`, a child process.
    Process(Child),
    /// On a thread of this process, its clients beside it ([`Experiment::embedded`]).
    Thread {
        /// `None` once joined.
        thread: Option<std::thread::JoinHandle<anyhow::Result<()>>>,
        /// What it ended with, once joined.
        ended: Option<Ended>,
        /// The address it bound, once it serves; `None` once read.
        ready: Option<mpsc::Receiver<SocketAddr>>,
        /// Stops its host as a Shutdown frame would.
        stop: ShutdownHandle,
    },
}

/// How a host ended.
#[derive(Clone)]
enum Ended {
    Process(ExitStatus),
    /// A host thread's error (or panic), if it had one.
    Thread(Option<String>),
}

impl Ended {
    fn success(&self) -> bool {
        match self {
            Ended::Process(status) => status.success(),
            Ended::Thread(error) => error.is_none(),
        }
    }

    /// Whether it was ended from outside (a signal), not on its own.
    fn killed(&self) -> bool {
        matches!(self, Ended::Process(status) if status.signal().is_some())
    }

    /// How it ended, as the end of a sentence about it.
    fn fate(&self) -> String {
        match self {
            Ended::Process(status) => fate(*status),
            Ended::Thread(None) => "stopped".into(),
            Ended::Thread(Some(error)) => format!("stopped: {error}"),
        }
    }
}

impl Node {
    /// How it ended, if it has.
    fn try_wait(&mut self) -> std::io::Result<Option<Ended>> {
        match &mut self.running {
            Running::Process(child) => Ok(child.try_wait()?.map(Ended::Process)),
            Running::Thread { thread, ended, .. } => {
                if thread.as_ref().is_some_and(|t| t.is_finished()) {
                    let joined = thread.take().expect("checked").join();
                    *ended = Some(Ended::Thread(match joined {
                        Ok(Ok(())) => None,
                        Ok(Err(e)) => Some(format!("{e:#}")),
                        Err(panic) => Some(format!(
                            "panicked: {}",
                            panic.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| panic.downcast_ref::<String>().cloned()).unwrap_or_default()
                        )),
                    }));
                }
                Ok(ended.clone())
            }
        }
    }

    /// How it ended, once it has, or `None` if it still runs at `deadline`.
    fn wait_until(&mut self, deadline: Instant) -> std::io::Result<Option<Ended>> {
        loop {
            if let Some(ended) = self.try_wait()? {
                return Ok(Some(ended));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            std::thread::sleep(POLL);
        }
    }

    /// Ends it from outside: SIGKILL for a process; a thread's host is asked to stop (a thread
    /// cannot be killed).
    fn kill(&mut self) {
        match &mut self.running {
            Running::Process(child) => {
                let _ = child.kill();
            }
            Running::Thread { stop, .. } => stop.trigger(),
        }
    }
}

/// The hosts of a run; killed if the run ends early.
struct Hosts(Vec<Node>);

impl Drop for Hosts {
    fn drop(&mut self) {
        // SIGKILL ends a stopped or hung process too, so the wait is short; an exited one is
        // already reaped and both calls return at once. A host thread that still runs (the run
        // failed before its Shutdown) is asked to stop and waited for within [`SHUTDOWN`], so
        // that its database sessions are closed before the run's databases are dropped; one
        // that does not stop by then ends with this process.
        for n in &mut self.0 {
            n.kill();
            match &mut n.running {
                Running::Process(child) => {
                    let _ = child.wait();
                }
                Running::Thread { .. } => {
                    let _ = n.wait_until(Instant::now() + SHUTDOWN);
                }
            }
        }
    }
}

/// Where host `h` writes what its processes reported when it stops.
pub fn report_path(dir: &Path, h: HostId) -> std::path::PathBuf {
    dir.join(format!("host{}-report.json", h.0))
}

/// What a node started on port 0 reads from its stdin once it is up: every host's address, in
/// host order.
pub fn run_real<H: Harness>(h: &H, exp: &Experiment, progress: bool) -> anyhow::Result<RunResult> {
    run_real_measuring(h, exp, progress, None)
}

/// [`run_real`], adding to `cpu` where the machine's CPU time went while the clients ran (Linux;
/// left as it was elsewhere).
pub fn run_real_measuring<H: Harness>(h: &H, exp: &Experiment, progress: bool, cpu: Option<&mut crate::cpu_use::CpuUse>) -> anyhow::Result<RunResult> {
    exp.validate().map_err(anyhow::Error::msg)?;
    h.validate(exp).map_err(anyhow::Error::msg)?;
    if !exp.restarts.is_empty() {
        h.restartable(exp).map_err(|e| anyhow::anyhow!("--restart-node: {e}"))?;
    }
    // A server backend's databases exist before any node starts, and outlive every node (the
    // guard is dropped after `hosts`).
    let (mut tagged, _databases) = ensemble_bench::databases::for_run(exp, h.storage_workers(exp) as u64)?;
    // The nodes start as our children and inherit where we may run.
    tagged.cpus = crate::cpus::narrowed();
    let exp = &tagged;
    let abort = ShutdownHandle::new();
    // Before anything that needs cleaning up exists, and dropped after all of it is gone.
    let _interruptible = interrupt::Registration::new(&abort)?;
    remove_orphaned_dirs();
    let dir = tempfile::Builder::new().prefix(DIR_PREFIX).tempdir().context("creating the nodes' directory")?;
    std::fs::write(dir.path().join(OWNER_FILE), std::process::id().to_string()).context("writing the run directory's owner")?;
    eprintln!("nodes' files in {}", dir.path().display());
    let deployment = h.deployment(exp);
    let n = deployment.len();
    let mut spec = ClusterSpec::loopback(deployment, TopologyRef::Inline(Box::new(exp.topology.clone())), true)?;
    spec.seed = exp.seed;
    spec.workers = h.storage_workers(exp);
    // Loopback is open to every user of the machine: only who holds a key may talk to the
    // hosts. The master stays in this process; each node's file has only its own keys, so a
    // node cannot pose as another. (The plain wire is for measuring what this costs; hosts
    // refuse it beyond loopback.)
    if !exp.plain_wire {
        spec.secret = Some(Secret::generate());
    }
    let exp_path = dir.path().join("experiment.json");
    std::fs::write(&exp_path, serde_json::to_string(exp)?).with_context(|| format!("writing {}", exp_path.display()))?;
    let exe = std::env::current_exe().context("locating the ensemble binary")?;

    // Declared before `hosts`, so dropped after: a node it started again is reaped before the
    // thread that forked it ends (and the kernel kills the node with that thread). Only a run
    // with restarts has one.
    let spawner = if exp.restarts.is_empty() { None } else { Some(Spawner::new()?) };
    // Declared after `dir`, so dropped before it: the nodes are dead before their files go.
    let mut hosts = Hosts(Vec::new());
    let host_ids: Vec<HostId> = spec.host_ids().map(|(id, _)| id).collect();
    if let Some(r) = exp.restarts.iter().find(|r| r.host as usize >= host_ids.len()) {
        anyhow::bail!("--restart-node {}@{}: there is no host {} (the run's hosts are 0 to {})", r.host, r.at_s, r.host, host_ids.len() - 1);
    }
    anyhow::ensure!(
        !exp.embedded || host_ids.len() == 1,
        "--embedded runs the host on a thread of this process, beside its clients: it needs a deployment of one host, and {} system with {} instance(s) has {}",
        exp.system,
        exp.instances,
        host_ids.len()
    );
    let local = LocalClients::<<H::P as Protocol>::Evidence>::new();
    // With the clients on the embedded host's loop, they are handed over once its address is
    // known (their configuration names it).
    let (mut hand_over, mut awaited) = (None, None);
    if exp.clients_on_loop {
        let (tx, rx) = clients_hand_over();
        (hand_over, awaited) = (Some(tx), Some(rx));
    }
    for &host in &host_ids {
        let name = host_name(&spec, host);
        let cluster_path = dir.path().join(format!("cluster-h{}.toml", host.0));
        write_private(&cluster_path, &spec.for_host(host)?.to_toml()?)?;
        let running = if exp.embedded {
            let (ready_tx, ready) = mpsc::channel();
            let args = crate::node::NodeArgs::of_run(exp_path.clone(), cluster_path, host, dir.path().to_path_buf());
            let embedding = crate::node::Embedding { local: local.clone(), on_loop: awaited.take() };
            let stop = ShutdownHandle::new();
            let stopper = stop.clone();
            let thread = std::thread::Builder::new()
                .name(EMBEDDED_HOST_THREAD.into())
                .spawn(move || crate::node::embedded(args, ready_tx, embedding, stopper))
                .with_context(|| format!("starting {name} on a thread"))?;
            Running::Thread { thread: Some(thread), ended: None, ready: Some(ready), stop }
        } else {
            let child = node_command(&exe, &exp_path, &cluster_path, host, dir.path())
                .spawn()
                .with_context(|| format!("starting {name} ({})", exe.display()))?;
            Running::Process(child)
        };
        hosts.0.push(Node { host, name, running });
    }
    let addrs = await_ready(&mut hosts.0)?;
    spec.set_addrs(&addrs)?;
    let line = addrs_line(&addrs);
    for node in &mut hosts.0 {
        if let Running::Process(child) = &mut node.running {
            let mut stdin = child.stdin.take().expect("stdin is piped");
            // Dropping `stdin` closes it: the node reads one line.
            stdin.write_all(line.as_bytes()).with_context(|| format!("telling {} the hosts' addresses", node.name))?;
        }
    }
    let local: HashMap<SocketAddr, _> = if exp.embedded { addrs.iter().map(|&a| (a, local.clone())).collect() } else { HashMap::new() };
    let end = Duration::from_secs_f64(exp.warmup_s + exp.measure_s);
    eprintln!("{} host(s) ready at {}; clients run for {:.1} s", hosts.0.len(), line.trim_end(), end.as_secs_f64());

    let epoch = Instant::now();
    let mut cfg = spec.client_config(epoch, epoch + end + DRAIN)?;
    cfg.abort = Some(abort.clone());
    let hold = RequestHold::default();
    if !exp.restarts.is_empty() {
        cfg.hold = Some(hold.clone());
    }
    let mut plan: Vec<(Instant, HostId)> = exp.restarts.iter().map(|r| (epoch + Duration::from_secs_f64(r.at_s), HostId(r.host))).collect();
    plan.sort_by_key(|(at, _)| *at);
    let restarts = Restarts { plan, hold, epoch, exe: &exe, exp_path: &exp_path, dir: dir.path(), spawner: spawner.as_ref(), made: 0 };
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
    let (stop_watching, stopped) = mpsc::channel::<()>();
    // The window is the clients' run, without the drain after it: the operations it counts are
    // those completed by its end.
    let window_start = if cpu.is_some() { crate::cpu_use::Snapshot::take() } else { None };
    let window_over = epoch + end;
    let mut window_end = None;
    let (driven, stopped_at, fault) = std::thread::scope(|s| {
        let sampler = window_start.is_some().then(|| {
            s.spawn(move || {
                std::thread::sleep(window_over.saturating_duration_since(Instant::now()));
                crate::cpu_use::Snapshot::take()
            })
        });
        let (nodes, spec, abort) = (&mut hosts.0, &spec, &abort);
        let watcher = s.spawn(move || watch(nodes, spec, abort, stopped, restarts));
        let driven = match hand_over.take() {
            None => run_clients_beside(cfg, slots, local, |c| {
                metrics.record(&c, &h.classify(&c));
                history.push(c);
                bar.tick();
                if abort.is_triggered() {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            })
            .map_err(|e| e.to_string()),
            Some(hand_over) => {
                // The completions wait on the loop's thread until the clients are done: handing
                // each to this thread would wake it once per operation.
                let kept = Arc::new(Mutex::new(Vec::new()));
                let (done_tx, done) = mpsc::channel();
                let (abort, on_loop) = (abort.clone(), kept.clone());
                let clients = ClientsOnLoop {
                    cfg,
                    clients: slots,
                    local,
                    on_complete: Box::new(move |c| {
                        on_loop.lock().unwrap_or_else(|e| e.into_inner()).push(c);
                        if abort.is_triggered() {
                            ControlFlow::Break(())
                        } else {
                            ControlFlow::Continue(())
                        }
                    }),
                    done: Box::new(move |report| {
                        let _ = done_tx.send(report);
                    }),
                };
                let driven = match hand_over.send(clients) {
                    // The spinner turns on time here, since no completion reaches this thread
                    // until the end.
                    Ok(()) => loop {
                        match done.recv_timeout(SPINNER_TICK) {
                            Ok(r) => break r.map_err(|e| e.to_string()),
                            Err(mpsc::RecvTimeoutError::Timeout) => bar.tick(),
                            Err(mpsc::RecvTimeoutError::Disconnected) => break Err("the embedded host stopped before its clients were done".to_string()),
                        }
                    },
                    Err(_) => Err("the embedded host stopped before it took its clients".to_string()),
                };
                let completions = std::mem::take(&mut *kept.lock().unwrap_or_else(|e| e.into_inner()));
                for c in completions {
                    metrics.record(&c, &h.classify(&c));
                    history.push(c);
                }
                driven
            }
        };
        let stopped_at = epoch.elapsed();
        window_end = sampler.and_then(|t| t.join().ok()).flatten();
        drop(stop_watching);
        let fault = watcher.join().unwrap_or_else(|_| Some("the hosts' watcher panicked (its message is above)".into()));
        (driven, stopped_at, fault)
    });
    bar.finish_and_clear();
    // A signal first: the faults it causes as the run unwinds are not news.
    let report: ClientReport = match (interrupt::received(), fault, driven) {
        // Whoever interrupts wants out now: no salvage.
        (Some(sig), _, _) => return Err(partial_run(exp, &metrics, Some(stopped_at), format!("interrupted by {}", signal_name(sig)), Vec::new())),
        (None, Some(fault), _) => return Err(salvaged(exp, &metrics, Some(stopped_at), fault, &mut hosts.0, &spec, dir.path())),
        (None, None, Err(e)) => {
            let why = format!("the client driver failed: {e}");
            return Err(salvaged(exp, &metrics, Some(stopped_at), why, &mut hosts.0, &spec, dir.path()));
        }
        (None, None, Ok(r)) if r.stopped == StopReason::Aborted => {
            return Err(salvaged(exp, &metrics, Some(stopped_at), "the run was aborted".into(), &mut hosts.0, &spec, dir.path()))
        }
        (None, None, Ok(r)) => r,
    };
    // The check reads the databases: only once nothing is in flight, so that a protocol that
    // stalled is reported as a stall, not as replicas that disagree.
    if let Err(why) = drain(&mut hosts.0, &spec) {
        return Err(salvaged(exp, &metrics, None, why, &mut hosts.0, &spec, dir.path()));
    }
    if let Err(why) = shut_down(&mut hosts.0, &spec) {
        return Err(salvaged(exp, &metrics, None, why, &mut hosts.0, &spec, dir.path()));
    }
    if let Some(why) = history_incomplete(&report) {
        return Err(partial_run(exp, &metrics, None, why, counters_of(&read_reports(dir.path(), &host_ids, false)?)));
    }

    if let (Some(cpu), Some(first), Some(last)) = (cpu, &window_start, &window_end) {
        // Each completion carries when it completed (from the clients' epoch): the window's
        // are those completed by its end.
        let over = Time::from_duration(end);
        cpu.add(first, last, history.iter().filter(|c| c.completed <= over).count() as u64);
    }
    let reports = read_reports(dir.path(), &host_ids, true)?;
    let counters = counters_of(&reports);
    let failures: Vec<String> = reports.iter().filter_map(|r| r.failure.as_ref().map(|f| format!("{}: {f}", r.id))).collect();
    let mut result = RunResult {
        experiment: exp.clone(),
        summary: metrics.summary(),
        check: None,
        check_passed: None,
        sim: None,
        processes: counters,
        partial: None,
    };
    if exp.check || exp.history_file.is_some() {
        let storages = (0..n as u32)
            .map(|i| h.reopen_storage(exp, ProcessId(i), dir.path()).with_context(|| format!("opening instance {i}'s storage to check the run")))
            .collect::<anyhow::Result<Vec<_>>>()?;
        ensemble_bench::finish_run(h, exp, RunOutput { history: &history, storages, failures }, &mut result)?;
    }
    // A signal during the check found nothing to abort; the bench must still stop.
    if let Some(sig) = interrupt::received() {
        result.partial = Some(format!("interrupted by {} after the run", signal_name(sig)));
        return Err(PartialRun { result: Box::new(result) }.into());
    }
    Ok(result)
}

/// `ensemble node` for `host`, its stdin and stdout piped to us (the addresses go in, the ready
/// line comes out), tied to our life.
fn node_command(exe: &Path, exp_path: &Path, cluster_path: &Path, host: HostId, dir: &Path) -> Command {
    let mut cmd = Command::new(exe);
    cmd.arg("node")
        .arg("--experiment")
        .arg(exp_path)
        .arg("--cluster")
        .arg(cluster_path)
        .arg("--host")
        .arg(host.0.to_string())
        .arg("--dir")
        .arg(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        // Out of the terminal's process group: Ctrl-C reaches the bench alone, which stops its
        // nodes in order instead of racing their deaths.
        .process_group(0);
    let parent = std::process::id();
    // SAFETY: runs in the child between fork and exec, and calls only async-signal-safe
    // functions (prctl, getppid) and allocates nothing.
    unsafe {
        cmd.pre_exec(move || die_with_parent(parent));
    }
    cmd
}

/// A node must never outlive the bench that started it: a SIGKILLed bench runs no handler and
/// no destructor, and its nodes would serve (and hold their ports and files) forever. The kernel
/// sends them SIGKILL when the parent goes. It ties this to the *thread* that forked the child:
/// `run_real`'s thread, which reaps its nodes before it returns. `parent` closes the race of a
/// bench that died between fork and `prctl`.
fn die_with_parent(parent: u32) -> std::io::Result<()> {
    // SAFETY: plain system calls with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: getppid cannot fail.
    if unsafe { libc::getppid() } as u32 != parent {
        return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
    }
    Ok(())
}

/// A node's cluster file holds its keys: readable by its owner alone, from its creation on.
fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    f.write_all(text.as_bytes()).with_context(|| format!("writing {}", path.display()))
}

/// "host h1 (process p1, instance 1)": the host and, for each of its processes, its kind and
/// its number among the processes of that kind (the belt's instance `i` is process `i`).
fn host_name(spec: &ClusterSpec, host: HostId) -> String {
    let ps = &spec.deployment.processes;
    let parts: Vec<String> = spec.hosts[host.index()]
        .processes
        .iter()
        .map(|&p| {
            let i = p.0 as usize;
            let kind = &ps[i].kind;
            let nth = ps[..i].iter().filter(|q| &q.kind == kind).count();
            format!("process {p}, {kind} {nth}")
        })
        .collect();
    format!("host {host} ({})", parts.join("; "))
}

/// Every node's ready line, within [`STARTUP`]; a node that exits first is named with its fate.
fn await_ready(nodes: &mut [Node]) -> anyhow::Result<Vec<SocketAddr>> {
    let (tx, rx) = mpsc::channel();
    for (i, node) in nodes.iter_mut().enumerate() {
        let tx = tx.clone();
        match &mut node.running {
            Running::Process(child) => {
                let out = child.stdout.take().expect("stdout is piped");
                std::thread::Builder::new()
                    .name(format!("{}-stdout", node.host))
                    .spawn(move || {
                        let mut out = BufReader::new(out);
                        let _ = tx.send((i, wait_for_ready_line(&mut out).map_err(|e| e.to_string())));
                        // Whatever the node prints later goes to our stderr: a pipe nobody reads
                        // fills up and blocks the node.
                        let _ = std::io::copy(&mut out, &mut std::io::stderr());
                    })
                    .context("starting a thread to read a node's stdout")?;
            }
            Running::Thread { ready, .. } => {
                let ready = ready.take().expect("read once");
                let host = node.host;
                std::thread::Builder::new()
                    .name(format!("{host}-ready"))
                    .spawn(move || {
                        let said = ready.recv().map(|addr| (host, addr)).map_err(|_| "it stopped before it served".to_string());
                        let _ = tx.send((i, said));
                    })
                    .context("starting a thread to wait for a host thread")?;
            }
        }
    }
    drop(tx);
    let deadline = Instant::now() + STARTUP;
    let mut addrs: Vec<Option<SocketAddr>> = vec![None; nodes.len()];
    while addrs.iter().any(Option::is_none) {
        if let Some(sig) = interrupt::received() {
            anyhow::bail!("interrupted by {} while the hosts were starting", signal_name(sig));
        }
        match rx.recv_timeout(POLL) {
            Ok((i, Ok((id, addr)))) => {
                anyhow::ensure!(id == nodes[i].host, "{} announced itself as host {id}", nodes[i].name);
                addrs[i] = Some(addr);
            }
            Ok((i, Err(e))) => {
                // Its stdout closed: it is exiting.
                let how = match nodes[i].wait_until(Instant::now() + SHUTDOWN) {
                    Ok(Some(ended @ Ended::Process(_))) => format!("it {} (its error is above)", ended.fate()),
                    Ok(Some(ended)) => format!("it {}", ended.fate()),
                    Ok(None) => format!("{e}, yet it is still running"),
                    Err(w) => format!("{e}; cannot tell how it ended: {w}"),
                };
                anyhow::bail!("{} did not start: {how}", nodes[i].name);
            }
            Err(RecvTimeoutError::Timeout) => {
                if let Some(f) = exited(nodes) {
                    anyhow::bail!("a host did not start: {f}");
                }
                if Instant::now() >= deadline {
                    let late: Vec<&str> = nodes.iter().zip(&addrs).filter(|(_, a)| a.is_none()).map(|(n, _)| n.name.as_str()).collect();
                    anyhow::bail!("{} did not report ready within {} s", late.join(", "), STARTUP.as_secs());
                }
            }
            Err(RecvTimeoutError::Disconnected) => anyhow::bail!("every node's stdout reader ended before all were ready"),
        }
    }
    Ok(addrs.into_iter().map(|a| a.expect("every host is ready")).collect())
}

/// Watches the hosts while the clients run, until `stop` closes: a host that exits, that
/// answers no probe for [`SILENCE`], or whose answer says a process of it failed (halted by a
/// panic, a storage job that failed: the run cannot be checked past it, and its clients would
/// wait for replies until the drain) aborts the run. Returns why it did. It also makes the
/// restarts the experiment plans ([`Restarts`]), when they are due.
fn watch(nodes: &mut [Node], spec: &ClusterSpec, abort: &ShutdownHandle, stop: mpsc::Receiver<()>, mut restarts: Restarts) -> Option<String> {
    let mut answered = vec![Instant::now(); nodes.len()];
    loop {
        if let Some(host) = restarts.due() {
            match restarts.restart(&mut nodes[host.index()], spec) {
                // No host was probed while the restart lasted (seconds, when it waits for a
                // vote lost with the killed node): that is no silence of theirs.
                Ok(()) => answered.fill(Instant::now()),
                Err(fault) => {
                    abort.trigger();
                    return Some(fault);
                }
            }
        }
        let fault = exited(nodes).or_else(|| {
            for ((node, host), answered) in nodes.iter().zip(&spec.hosts).zip(answered.iter_mut()) {
                match probe(host.addr, spec.operator_key().as_ref(), PROBE_TIMEOUT) {
                    Ok(HostStatus { failed: Some(why), .. }) => return Some(format!("{} failed: {why}", node.name)),
                    Ok(_) => *answered = Instant::now(),
                    Err(e) if answered.elapsed() >= SILENCE => {
                        let (name, silence, last) = (&node.name, SILENCE.as_secs(), unanswered(&e));
                        return Some(format!("{name} stopped answering probes for {silence} s (stopped or hung); the last probe: {last}"));
                    }
                    Err(_) => {}
                }
            }
            None
        });
        if let Some(f) = fault {
            abort.trigger();
            return Some(f);
        }
        match stop.recv_timeout(PROBE_EVERY.min(restarts.until_next())) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return None,
        }
    }
}

/// The hosts to kill and start again while the clients run ([`Experiment::restarts`]).
struct Restarts<'a> {
    /// When, from the first due; each is removed as it is made.
    plan: Vec<(Instant, HostId)>,
    hold: RequestHold,
    /// The clients' time zero.
    epoch: Instant,
    exe: &'a Path,
    exp_path: &'a Path,
    dir: &'a Path,
    /// `None` when none is planned.
    spawner: Option<&'a Spawner>,
    made: u32,
}

/// Starts node processes from a thread that lives until the run's hosts are reaped: a node
/// dies with the thread that forked it ([`die_with_parent`]), and the watcher's thread, which
/// starts killed nodes again, ends with the clients, before the run's drain and shutdown.
struct Spawner {
    orders: Option<mpsc::Sender<(Command, mpsc::Sender<std::io::Result<Child>>)>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Spawner {
    fn new() -> anyhow::Result<Spawner> {
        let (orders, rx) = mpsc::channel::<(Command, mpsc::Sender<std::io::Result<Child>>)>();
        let thread = std::thread::Builder::new()
            .name("node-spawner".into())
            .spawn(move || {
                for (mut cmd, back) in rx {
                    let _ = back.send(cmd.spawn());
                }
            })
            .context("starting the thread that starts nodes again")?;
        Ok(Spawner { orders: Some(orders), thread: Some(thread) })
    }

    fn spawn(&self, cmd: Command) -> std::io::Result<Child> {
        let (back, child) = mpsc::channel();
        let gone = || std::io::Error::other("the thread that starts nodes has ended");
        self.orders.as_ref().ok_or_else(gone)?.send((cmd, back)).map_err(|_| gone())?;
        child.recv().map_err(|_| gone())?
    }
}

impl Drop for Spawner {
    fn drop(&mut self) {
        drop(self.orders.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Restarts<'_> {
    fn due(&mut self) -> Option<HostId> {
        let (at, host) = *self.plan.first()?;
        (Instant::now() >= at).then(|| self.plan.remove(0)).map(|_| host)
    }

    fn until_next(&self) -> Duration {
        self.plan.first().map_or(Duration::MAX, |(at, _)| at.saturating_duration_since(Instant::now()))
    }

    /// Holds the clients' requests to `node`'s processes, waits until those in flight are
    /// answered, kills it (SIGKILL: nothing of it runs on), starts it again over its databases
    /// (`ensemble node --resume`, at the address its peers and clients know) and releases the
    /// requests. A kill with a request of its clients in flight would leave the history without
    /// what that request did, and the run unchecked; requests of other hosts' clients may still
    /// wait on it (a vote, a branch), as they would on a host that crashed, and are answered
    /// once their coordinators have given up on it or it has recovered.
    fn restart(&mut self, node: &mut Node, spec: &ClusterSpec) -> Result<(), String> {
        let host = node.host;
        let processes = spec.hosts[host.index()].processes.clone();
        let held = Instant::now();
        let answered = self.hold.hold(processes.clone());
        let deadline = held + QUIESCE;
        loop {
            if let Some(sig) = interrupt::received() {
                return Err(format!("interrupted by {} while the requests to {} were held", signal_name(sig), node.name));
            }
            match answered.recv_timeout(POLL) {
                Ok(()) => break,
                Err(RecvTimeoutError::Timeout) if Instant::now() < deadline => {}
                Err(RecvTimeoutError::Timeout) => {
                    return Err(format!("{}: its clients' requests in flight were still unanswered {} s after new ones were held, so it was not restarted", node.name, QUIESCE.as_secs()))
                }
                Err(RecvTimeoutError::Disconnected) => {
                    eprintln!("{} not restarted: the clients were done", node.name);
                    return Ok(());
                }
            }
        }
        let quiet = held.elapsed();
        node.kill();
        let fate = match &mut node.running {
            Running::Process(child) => child.wait().map(fate).map_err(|e| format!("{}: cannot tell whether it was killed: {e}", node.name))?,
            Running::Thread { .. } => return Err(format!("{} runs on a thread of this process and cannot be killed", node.name)),
        };
        let killed = Instant::now();
        self.made += 1;
        let cluster_path = self.dir.join(format!("cluster-h{}-restart-{}.toml", host.0, self.made));
        // Every address is known now: the node binds its own again and reads none on stdin.
        let text = spec.for_host(host).and_then(|c| c.to_toml()).map_err(|e| format!("{}'s cluster file: {e}", node.name))?;
        write_private(&cluster_path, &text).map_err(|e| format!("{e:#}"))?;
        let mut cmd = node_command(self.exe, self.exp_path, &cluster_path, host, self.dir);
        cmd.arg("--resume");
        let spawner = self.spawner.ok_or_else(|| format!("{}: a restart that was not planned", node.name))?;
        let mut child = spawner.spawn(cmd).map_err(|e| format!("starting {} again: {e}", node.name))?;
        drop(child.stdin.take());
        node.running = Running::Process(child);
        let addrs = await_ready(std::slice::from_mut(node)).map_err(|e| format!("starting {} again: {e:#}", node.name))?;
        let mine = spec.hosts[host.index()].addr;
        if addrs != [mine] {
            return Err(format!("{} started again at {}, not at {mine}, where its peers and clients reach it", node.name, addrs[0]));
        }
        self.hold.release(processes);
        eprintln!(
            "{} restarted {:.2} s into the run: its clients' requests held {:.3} s (those in flight answered after {:.3} s); it {fate}, and served again over its databases after {:.3} s",
            node.name,
            held.duration_since(self.epoch).as_secs_f64(),
            held.elapsed().as_secs_f64(),
            quiet.as_secs_f64(),
            killed.elapsed().as_secs_f64()
        );
        Ok(())
    }
}

/// Why the clients' history may lack a transaction that ran, if it may: then the run is
/// partial, never checked, since a check would judge the replicas against a replay without it.
fn history_incomplete(report: &ClientReport) -> Option<String> {
    if report.stopped == StopReason::Deadline {
        // A request still unanswered may have committed.
        return Some(format!(
            "{} request(s) still unanswered {} s after the window: what they did is not in the history, so the run is not checked",
            report.requests_sent.saturating_sub(report.replies),
            DRAIN.as_secs()
        ));
    }
    if report.requests_undeliverable > 0 || report.link_failures > 0 {
        return Some(format!(
            "the client driver lost {} request(s) and {} connection(s) (see the messages above)",
            report.requests_undeliverable, report.link_failures
        ));
    }
    None
}

/// Why a probe got no answer, in words: net names a read that timed out itself, but a write that
/// timed out still says "resource temporarily unavailable".
fn unanswered(e: &NetError) -> String {
    match e {
        NetError::Io { source, .. } if matches!(source.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
            format!("no answer within {} s", PROBE_TIMEOUT.as_secs())
        }
        e => e.to_string(),
    }
}

/// The hosts whose process has ended, and how: all that one look finds, killed ones first (a
/// host may exit on its own right after a peer was killed).
fn exited(nodes: &mut [Node]) -> Option<String> {
    let mut ended: Vec<(bool, String)> = Vec::new();
    for node in nodes.iter_mut() {
        match node.try_wait() {
            Ok(Some(how)) => ended.push((!how.killed(), format!("{} {}", node.name, how.fate()))),
            Ok(None) => {}
            Err(e) => ended.push((true, format!("{}: cannot tell whether it runs: {e}", node.name))),
        }
    }
    ended.sort_by_key(|(on_its_own, _)| *on_its_own);
    let ended: Vec<String> = ended.into_iter().map(|(_, what)| what).collect();
    (!ended.is_empty()).then(|| ended.join("; "))
}

/// Waits until every host says it is quiescent in one sweep, within [`QUIESCE`].
fn drain(nodes: &mut [Node], spec: &ClusterSpec) -> Result<(), String> {
    let deadline = Instant::now() + QUIESCE;
    let within = QUIESCE.as_secs();
    loop {
        if let Some(sig) = interrupt::received() {
            return Err(format!("interrupted by {} while the hosts drained", signal_name(sig)));
        }
        if let Some(f) = exited(nodes) {
            return Err(f);
        }
        let busy = nodes.iter().zip(&spec.hosts).find_map(|(node, host)| match probe(host.addr, spec.operator_key().as_ref(), PROBE_TIMEOUT) {
            Ok(s) if s.quiescent => None,
            Ok(s) => Some(format!(
                "{} did not drain within {within} s: it still had work in flight ({})",
                node.name,
                s.in_flight.unwrap_or_else(|| "it did not say which".to_string())
            )),
            Err(e) => Some(format!("{} did not drain within {within} s: it stopped answering probes ({})", node.name, unanswered(&e))),
        });
        let Some(why) = busy else { return Ok(()) };
        if Instant::now() >= deadline {
            return Err(why);
        }
        std::thread::sleep(POLL);
    }
}

/// Asks every host to stop and waits for each to exit cleanly within [`SHUTDOWN`]; one that
/// does not is killed.
fn shut_down(nodes: &mut [Node], spec: &ClusterSpec) -> Result<(), String> {
    let mut problems = Vec::new();
    for (node, host) in nodes.iter().zip(&spec.hosts) {
        if let Err(e) = send_shutdown(host.addr, spec.operator_key().as_ref(), SHUTDOWN) {
            problems.push(format!("{} was not told to stop: {e}", node.name));
        }
    }
    let deadline = Instant::now() + SHUTDOWN;
    for node in nodes.iter_mut() {
        match node.wait_until(deadline) {
            Ok(Some(ended)) if ended.success() => {}
            Ok(Some(ended)) => problems.push(format!("{} {} after Shutdown", node.name, ended.fate())),
            Ok(None) => {
                node.kill();
                problems.push(format!("{} did not exit within {} s of Shutdown (killed)", node.name, SHUTDOWN.as_secs()));
            }
            Err(e) => problems.push(format!("{}: cannot tell whether it exited: {e}", node.name)),
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

/// How a process ended, as the end of a sentence about it.
fn fate(status: ExitStatus) -> String {
    match (status.signal(), status.code()) {
        (Some(sig), _) => format!("was killed by signal {sig} ({})", signal_name(sig)),
        (None, Some(code)) => format!("exited with status {code}"),
        (None, None) => format!("ended ({status})"),
    }
}

fn signal_name(sig: i32) -> String {
    let name = match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGTERM => "SIGTERM",
        _ => return format!("signal {sig}"),
    };
    name.to_string()
}

/// What was measured until the run ended early, as the error `run_real` returns. `stopped`: when
/// the clients stopped (from the epoch), if that was before the window's end.
/// The reports the hosts wrote as they stopped, by process id. With `all`, a missing one is an
/// error; without, the hosts that wrote none (killed, stopped) are left out.
fn read_reports(dir: &Path, hosts: &[HostId], all: bool) -> anyhow::Result<Vec<ProcessReport>> {
    let mut reports: Vec<ProcessReport> = Vec::new();
    for host in hosts {
        let path = report_path(dir, *host);
        if !all && !path.exists() {
            continue;
        }
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        reports.extend(serde_json::from_str::<Vec<ProcessReport>>(&text).with_context(|| format!("{} is not a host report", path.display()))?);
    }
    reports.sort_by_key(|r| r.id);
    Ok(reports)
}

fn counters_of(reports: &[ProcessReport]) -> Vec<ProcessCounters> {
    reports.iter().map(|r| ProcessCounters { process: r.id, counters: r.counters.clone() }).collect()
}

/// [`partial_run`] for a run that ended early with hosts possibly still alive: each is asked to
/// stop, so that it writes its report (bounded by [`SALVAGE`]; a stopped or hung host is then
/// killed as the run unwinds). The partial result carries the counters of every host that
/// reported, and the reason names any failure they reported: a process that halted is often why
/// the run stalled.
fn salvaged(
    exp: &Experiment,
    metrics: &Metrics,
    stopped: Option<Duration>,
    reason: String,
    nodes: &mut [Node],
    spec: &ClusterSpec,
    dir: &Path,
) -> anyhow::Error {
    for (node, host) in nodes.iter_mut().zip(&spec.hosts) {
        if matches!(node.try_wait(), Ok(None)) {
            let _ = send_shutdown(host.addr, spec.operator_key().as_ref(), SALVAGE);
        }
    }
    let deadline = Instant::now() + SALVAGE;
    for node in nodes.iter_mut() {
        let _ = node.wait_until(deadline);
    }
    let hosts: Vec<HostId> = nodes.iter().map(|n| n.host).collect();
    let reports = read_reports(dir, &hosts, false).unwrap_or_default();
    let mut said: Vec<String> = reports.iter().filter_map(|r| r.failure.as_ref().map(|f| format!("{} reported: {f}", r.id))).collect();
    said.extend(reports.iter().filter_map(|r| r.in_flight.as_ref().map(|w| format!("{} still had in flight when it stopped: {w}", r.id))));
    let reason = if said.is_empty() { reason } else { format!("{reason}; {}", said.join("; ")) };
    partial_run(exp, metrics, stopped, reason, counters_of(&reports))
}

fn partial_run(exp: &Experiment, metrics: &Metrics, stopped: Option<Duration>, reason: String, processes: Vec<ProcessCounters>) -> anyhow::Error {
    let mut summary = metrics.summary();
    if let Some(t) = stopped {
        truncate_window(&mut summary, (t.as_secs_f64() - exp.warmup_s).clamp(0.0, exp.measure_s));
    }
    let result = RunResult {
        experiment: exp.clone(),
        summary,
        check: None,
        check_passed: None,
        sim: None,
        processes,
        partial: Some(reason),
    };
    PartialRun { result: Box::new(result) }.into()
}

/// The summary's rates are per second of the whole window; a run cut short measured only
/// `measured_s` of it.
fn truncate_window(s: &mut Summary, measured_s: f64) {
    let rate = |count: u64| if measured_s > 0.0 { (count as f64 / measured_s * 1e3).round() / 1e3 } else { 0.0 };
    s.window_s = measured_s;
    for c in s.classes.values_mut().chain(s.phases.values_mut()) {
        c.throughput = rate(c.count);
    }
    s.throughput = s.classes.get("all").map_or(0.0, |c| c.throughput);
}

const DIR_PREFIX: &str = "ensemble-real-";

/// How often the progress spinner turns while the clients run on an embedded host's loop.
const SPINNER_TICK: Duration = Duration::from_millis(100);

/// Removes the run directories of benches that were SIGKILLed (their nodes died with them, but
/// no code of theirs ran to remove the files): directories of ours whose owner process is gone.
/// A directory without an owner file, or whose owner lives, is left alone.
fn remove_orphaned_dirs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if !entry.file_name().to_string_lossy().starts_with(DIR_PREFIX) {
            continue;
        }
        let Ok(owner) = std::fs::read_to_string(path.join(OWNER_FILE)) else { continue };
        let Ok(pid) = owner.trim().parse::<u32>() else { continue };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() && std::fs::remove_dir_all(&path).is_ok() {
            eprintln!("removed {}, left by a bench (pid {pid}) that was killed", path.display());
        }
    }
}

/// SIGINT and SIGTERM during a real run abort it (its nodes are killed and its files removed
/// as it unwinds) instead of killing the bench on the spot, which would leave both behind.
mod interrupt {
    use ensemble_net::ShutdownHandle;
    use signal_hook::consts::{SIGINT, SIGTERM};
    use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
    use std::sync::{Mutex, MutexGuard, OnceLock};

    /// The abort handles of the real runs in progress (a figure may run several at once).
    static RUNS: Mutex<Vec<(u64, ShutdownHandle)>> = Mutex::new(Vec::new());
    static NEXT: AtomicU64 = AtomicU64::new(0);
    /// The last signal received; 0: none.
    static RECEIVED: AtomicI32 = AtomicI32::new(0);

    fn runs() -> MutexGuard<'static, Vec<(u64, ShutdownHandle)>> {
        RUNS.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn received() -> Option<i32> {
        Some(RECEIVED.load(Ordering::SeqCst)).filter(|s| *s != 0)
    }

    /// A real run in progress: a signal triggers its abort until it is dropped.
    pub struct Registration(u64);

    impl Registration {
        pub fn new(abort: &ShutdownHandle) -> anyhow::Result<Registration> {
            install()?;
            let mut runs = runs();
            if let Some(sig) = received() {
                anyhow::bail!("interrupted by {}", super::signal_name(sig));
            }
            let id = NEXT.fetch_add(1, Ordering::SeqCst);
            runs.push((id, abort.clone()));
            Ok(Registration(id))
        }
    }

    impl Drop for Registration {
        fn drop(&mut self) {
            runs().retain(|(id, _)| *id != self.0);
        }
    }

    fn install() -> anyhow::Result<()> {
        static INSTALLED: OnceLock<Result<(), String>> = OnceLock::new();
        INSTALLED
            .get_or_init(|| {
                let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])
                    .map_err(|e| format!("installing the SIGINT/SIGTERM handler: {e}"))?;
                std::thread::Builder::new()
                    .name("ensemble-signals".into())
                    .spawn(move || {
                        for sig in signals.forever() {
                            let again = RECEIVED.swap(sig, Ordering::SeqCst) != 0;
                            let runs = runs();
                            // Between real runs there is nothing to clean up; a second signal
                            // means the user will not wait for the cleanup. Either way the
                            // nodes die with us (see `die_with_parent`).
                            if runs.is_empty() || again {
                                std::process::exit(128 + sig);
                            }
                            for (_, abort) in runs.iter() {
                                abort.trigger();
                            }
                        }
                    })
                    .map(drop)
                    .map_err(|e| format!("starting the signal thread: {e}"))
            })
            .clone()
            .map_err(anyhow::Error::msg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_window_gives_rates_per_second_measured() {
        use ensemble_core::{ClientId, CompletionResult, Done, Outcome, Request};
        let mut m = Metrics::new(Time::ZERO, Time::from_duration(Duration::from_secs(30)));
        for i in 0..6u64 {
            let c = Completion {
                request: Request { client: ClientId(0), seq: i, txn: "t".into(), params: vec![] },
                issued: Time::from_duration(Duration::from_millis(100 * i)),
                completed: Time::from_duration(Duration::from_millis(100 * i + 5)),
                redirects: 0,
                result: CompletionResult::Done(Done { outcome: Outcome::Committed(Default::default()), evidence: () }),
                interaction: None,
            };
            m.record(&c, &ensemble_bench::Classified { class: "local", abort: None, phases: vec![] });
        }
        let mut s = m.summary();
        assert_eq!(s.throughput, 0.2, "6 operations over the whole 30 s window");
        truncate_window(&mut s, 3.0);
        assert_eq!((s.window_s, s.throughput, s.classes["local"].throughput), (3.0, 2.0, 2.0));
        truncate_window(&mut s, 0.0);
        assert_eq!(s.throughput, 0.0, "a run stopped in its warm-up measured nothing");
    }

    #[test]
    fn a_run_whose_clients_stopped_with_requests_unanswered_or_lost_is_not_checked() {
        let finished = ClientReport {
            completions: 40,
            requests_sent: 40,
            replies: 40,
            timers: 0,
            requests_undeliverable: 0,
            link_failures: 0,
            stopped: StopReason::Finished,
        };
        assert_eq!(history_incomplete(&finished), None);
        let late = ClientReport { replies: 6, stopped: StopReason::Deadline, ..finished.clone() };
        assert_eq!(
            history_incomplete(&late).as_deref(),
            Some("34 request(s) still unanswered 30 s after the window: what they did is not in the history, so the run is not checked")
        );
        let lost = ClientReport { requests_undeliverable: 1, link_failures: 2, ..finished };
        assert_eq!(
            history_incomplete(&lost).as_deref(),
            Some("the client driver lost 1 request(s) and 2 connection(s) (see the messages above)")
        );
    }

    #[test]
    fn fates_name_the_signal() {
        assert_eq!(fate(ExitStatus::from_raw(9)), "was killed by signal 9 (SIGKILL)");
        assert_eq!(fate(ExitStatus::from_raw(1 << 8)), "exited with status 1");
    }
}
