//! Multicast as real processes: every process of a multicast deployment is an OS process (an
//! `ensemble xcast node`) on the real runtime (`ensemble-net`: TCP, authenticated frames), keeping
//! its group's consensus log in a [`FileLog`] and what the primitive must keep across a crash in a
//! record file of its own ([`FileStore`]), both fsync'd before the messages that depend on them
//! leave. [`run`] starts such a deployment on this machine, drives a multicast load, can
//! `kill -9` one member of every group in the middle of it and start it again, and checks the
//! deliveries with `ensemble_history::delivery` once everything cast has been delivered.
//!
//! What the record files hold is also what the check reads: each caster's casts (id,
//! destinations, wall-clock time) and each process's deliveries in order (with their time).
//! Those are written before the messages that reveal them, so a killed process loses none of
//! it, and the orchestrator reads them while the processes run (a torn tail is skipped, not cut).
//!
//! Not checked for real: genuineness. It needs every message's sender and receiver counted per
//! cast, which the simulator records; a real process would lose its counts to `kill -9`.

use crate::node::{CastPlan, Durable, Kind, Node, Setup, Store, XCast};
use anyhow::{bail, Context};
use ensemble_core::topology::Topology;
use ensemble_core::{Deployment, Group, ProcessId, Time};
use ensemble_group::multicast::{CastId, Directory, Entry, GmEntry};
use ensemble_group::{FileLog, FileLogError, GroupConfig, GroupId, RecordFile};
use ensemble_history::delivery::{check, Cast, DeliveryLog, DeliveryReport, Property};
use ensemble_net::auth::Secret;
use ensemble_net::cluster::{addrs_line, parse_addrs_line, ready_line, wait_for_ready_line_within};
use ensemble_net::{ClusterSpec, HostId, HostedProcess, ShutdownHandle};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write as _};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The first bytes of a multicast process's record file; the last one is the format version.
const MAGIC: [u8; 8] = *b"ENSXCST\x01";

/// A real multicast run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RealRun {
    pub kind: Kind,
    /// Groups of three members.
    pub groups: u32,
    /// Casters outside every group (the first member of every group casts too).
    pub outside_casters: u32,
    /// Casts per caster.
    pub casts: u64,
    /// Time between two casts of a caster, in milliseconds.
    pub every_ms: u64,
    /// Groups per cast (`None`: the primitive's own choice, as in the simulated runs).
    pub dst_groups: Option<usize>,
    pub seed: u64,
    /// `kill -9` one member of every group once a third of the casts are made, and start it
    /// again once two thirds are. Which member is drawn from the seed: seeds 0, 1 and 2 kill
    /// every member position once (the caster, and whichever member leads).
    pub kill: bool,
}

impl RealRun {
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=16).contains(&self.groups) {
            return Err(format!("groups: {} is not in 1..=16", self.groups));
        }
        if self.outside_casters > 16 {
            return Err(format!("outside casters: {} is more than 16", self.outside_casters));
        }
        if !(1..=100_000).contains(&self.casts) {
            return Err(format!("casts: {} is not in 1..=100000", self.casts));
        }
        if !(1..=10_000).contains(&self.every_ms) {
            return Err(format!("every: {} ms is not in 1..=10000", self.every_ms));
        }
        if let Some(k) = self.dst_groups {
            if k == 0 || k > self.groups as usize {
                return Err(format!("groups per cast: {k} is not in 1..={}", self.groups));
            }
        }
        if !Kind::WORKING.contains(&self.kind) {
            return Err(format!("{} is not a primitive to run", self.kind.name()));
        }
        Ok(())
    }

    fn members(&self) -> u32 {
        3 * self.groups
    }

    fn total(&self) -> u32 {
        self.members() + self.outside_casters
    }

    fn group_list(&self) -> Vec<(GroupId, Vec<ProcessId>)> {
        (0..self.groups).map(|g| (GroupId(g), (3 * g..3 * g + 3).map(ProcessId).collect())).collect()
    }

    fn casters(&self) -> BTreeSet<ProcessId> {
        self.group_list().iter().map(|(_, ms)| ms[0]).chain((self.members()..self.total()).map(ProcessId)).collect()
    }

    /// The member of every group that is killed.
    pub fn victims(&self) -> Vec<ProcessId> {
        (0..self.groups).map(|g| ProcessId(3 * g + ((self.seed + u64::from(g)) % 3) as u32)).collect()
    }

    /// Every process at its own machine of one site: a LAN, loopback.
    fn deployment(&self) -> Deployment {
        let sites = vec![0; self.total() as usize];
        let mut deployment = Deployment::one_per_machine(&sites, 1, "member");
        for (g, ms) in self.group_list() {
            deployment.groups.push(Group { name: format!("g{}", g.0), members: ms });
        }
        deployment
    }

    fn setup(&self) -> Setup {
        let groups = self.group_list();
        Setup {
            kind: self.kind,
            seed: self.seed,
            directory: Directory::new(groups.clone()),
            sequencer: GroupConfig::new(GroupId(0), groups[0].1.clone()).timing(13, 25),
            tick: Duration::from_millis(20),
            slow_tick: Duration::from_millis(100),
            resend: Duration::from_millis(500),
        }
    }

    fn plan(&self, p: ProcessId) -> Option<CastPlan> {
        self.casters().contains(&p).then_some(CastPlan {
            count: self.casts,
            every: Duration::from_millis(self.every_ms),
            groups: self.dst_groups,
        })
    }
}

/// One record of a process's file.
#[derive(Debug, Serialize, Deserialize)]
enum Record {
    /// A cast, before its messages leave.
    Cast { id: CastId, dst: Vec<GroupId>, at_ns: u64 },
    /// Progress: the cast counter, the broadcast position, and what was just delivered, in order.
    Progress { next_seq: u64, next: u64, delivered: Vec<CastId>, at_ns: u64 },
}

fn wall_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
}

/// What one process's record file says.
#[derive(Clone, Debug, Default)]
pub struct ProcessRecord {
    pub durable: Durable,
    /// Its casts: id, destinations, wall-clock nanoseconds.
    pub casts: Vec<(CastId, Vec<GroupId>, u64)>,
    /// Its deliveries, in order, with their wall-clock nanoseconds.
    pub delivered: Vec<(CastId, u64)>,
}

impl ProcessRecord {
    fn apply(&mut self, payload: &[u8]) -> Result<(), String> {
        let record: Record = postcard::from_bytes(payload).map_err(|e| format!("its checksum is valid but it does not decode: {e}"))?;
        match record {
            Record::Cast { id, dst, at_ns } => {
                self.durable.next_seq = self.durable.next_seq.max(id.seq + 1);
                self.durable.casts.push((id, dst.clone()));
                self.casts.push((id, dst, at_ns));
            }
            Record::Progress { next_seq, next, delivered, at_ns } => {
                self.durable.next_seq = self.durable.next_seq.max(next_seq);
                self.durable.next = self.durable.next.max(next);
                for id in delivered {
                    if !self.durable.delivered.insert(id) {
                        return Err(format!("{id} delivered a second time"));
                    }
                    self.delivered.push((id, at_ns));
                }
            }
        }
        Ok(())
    }

    /// Reads the record file of a process that may be running (a torn tail is skipped).
    pub fn read(path: &Path) -> Result<ProcessRecord, FileLogError> {
        let mut rec = ProcessRecord::default();
        RecordFile::read(path, MAGIC, |_, payload| rec.apply(payload))?;
        Ok(rec)
    }
}

/// The real runtime's [`Store`]: a record file per process, and the group's consensus log in a
/// [`FileLog`], all under the process's directory. A failed write panics: the runtime reports the
/// process as failed and the others keep serving, which is all a process that cannot persist
/// may do.
pub struct FileStore {
    dir: PathBuf,
    me: ProcessId,
    file: RecordFile,
    durable: Durable,
    /// Messages refused since the start of this incarnation.
    pub refused: u64,
}

impl FileStore {
    pub fn open(dir: &Path, me: ProcessId) -> Result<FileStore, FileLogError> {
        let mut rec = ProcessRecord::default();
        let (file, _) = RecordFile::open(dir.join(format!("{me}.records")), MAGIC, |_, payload| rec.apply(payload))?;
        Ok(FileStore { dir: dir.to_path_buf(), me, file, durable: rec.durable, refused: 0 })
    }

    fn append(&mut self, record: &Record) {
        if let Err(e) = self.file.append_serde(record) {
            panic!("{}: cannot persist: {e}", self.me);
        }
    }

    fn log<T: ensemble_group::Payload>(&self, name: &str) -> FileLog<T> {
        let path = self.dir.join(format!("{}-{name}.log", self.me));
        FileLog::open(&path).unwrap_or_else(|e| panic!("{}: cannot open its log: {e}", self.me))
    }
}

impl Store for FileStore {
    type AbLog = FileLog<Entry<u64>>;
    type GmLog = FileLog<GmEntry<u64>>;

    fn durable(&self) -> Durable {
        self.durable.clone()
    }

    fn ab_log(&mut self) -> Self::AbLog {
        self.log("broadcast")
    }

    fn gm_log(&mut self) -> Self::GmLog {
        self.log("genuine")
    }

    fn persist(&mut self, next_seq: u64, next: u64, delivered: &[CastId]) {
        // Every handler ends here: write only what changed, so that a tick costs no fsync.
        if next_seq == self.durable.next_seq && next == self.durable.next && delivered.is_empty() {
            return;
        }
        self.append(&Record::Progress { next_seq, next, delivered: delivered.to_vec(), at_ns: wall_ns() });
        self.durable.next_seq = next_seq;
        self.durable.next = next;
        self.durable.delivered.extend(delivered.iter().copied());
    }

    fn cast(&mut self, id: CastId, dst: &[GroupId], _now: Time) {
        self.append(&Record::Cast { id, dst: dst.to_vec(), at_ns: wall_ns() });
        self.durable.next_seq = self.durable.next_seq.max(id.seq + 1);
        self.durable.casts.push((id, dst.to_vec()));
    }

    fn step(&mut self, _ids: &[CastId]) {}

    fn refused(&mut self, what: &str) {
        self.refused += 1;
        eprintln!("[ensemble xcast {}] refused a message: {what}", self.me);
    }
}

/// `ensemble xcast node`: one process of a real multicast run (started by [`run`]).
pub struct NodeArgs {
    pub run: PathBuf,
    pub cluster: PathBuf,
    pub host: u32,
    pub dir: PathBuf,
}

pub fn serve(a: &NodeArgs) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&a.run).with_context(|| format!("reading {}", a.run.display()))?;
    let run: RealRun = serde_json::from_str(&text).with_context(|| format!("{} is not a multicast run", a.run.display()))?;
    run.validate().map_err(anyhow::Error::msg).with_context(|| format!("{}", a.run.display()))?;
    let mut spec = ClusterSpec::load(&a.cluster)?;
    anyhow::ensure!(
        spec.deployment == run.deployment(),
        "cluster file {} deploys other processes than run {} asks for",
        a.cluster.display(),
        a.run.display()
    );
    let host = HostId(a.host);
    let cfg = spec.host_config(host)?;
    std::fs::create_dir_all(&a.dir).with_context(|| format!("creating {}", a.dir.display()))?;
    let mut processes: Vec<HostedProcess<XCast>> = Vec::new();
    for &id in cfg.processes() {
        let store = FileStore::open(&a.dir, id)?;
        processes.push(HostedProcess { process: Box::new(Node::new(run.setup(), id, store, run.plan(id))), storage: None, serial_lane: None });
    }
    let listener = std::net::TcpListener::bind(cfg.listen).with_context(|| format!("binding {}", cfg.listen))?;
    let bound = listener.local_addr().context("the address bound")?;
    println!("{}", ready_line(host, bound));
    std::io::stdout().flush()?;
    let cfg = if spec.hosts.iter().any(|h| h.addr.port() == 0) {
        let mut line = String::new();
        let n = std::io::stdin().lock().read_line(&mut line).context("reading the hosts' addresses from stdin")?;
        anyhow::ensure!(n > 0, "host {host} listens on {bound} and needs every host's address on stdin; stdin closed first");
        spec.set_addrs(&parse_addrs_line(&line)?)?;
        anyhow::ensure!(spec.hosts[host.index()].addr == bound, "the addresses on stdin put host {host} elsewhere than {bound}");
        spec.host_config(host)?
    } else {
        cfg
    };
    let report = ensemble_net::run_host_on(listener, cfg, processes, ShutdownHandle::new())?;
    let line = format!("{report:?}\n");
    std::io::stderr().write_all(line.as_bytes())?;
    Ok(())
}

/// What a real run found.
#[derive(Debug)]
pub struct RealOutcome {
    pub report: DeliveryReport,
    pub log: DeliveryLog,
    pub casts: usize,
    /// Deliveries, over every process.
    pub deliveries: usize,
    /// The processes killed with SIGKILL and started again.
    pub killed: Vec<ProcessId>,
    /// From the first cast to the last delivery.
    pub span: Duration,
    /// Latency of each cast from its caster's record to its last destination's delivery.
    pub latencies: Vec<Duration>,
    /// Whether every cast was delivered everywhere before the limit.
    pub settled: bool,
    /// Where the files of a run that failed were kept.
    pub kept: Option<PathBuf>,
}

impl RealOutcome {
    /// Casts completed (delivered by every destination process) per second of the run.
    pub fn throughput(&self) -> f64 {
        self.casts as f64 / self.span.as_secs_f64().max(1e-9)
    }

    /// The `q` quantile of the latencies.
    pub fn latency(&self, q: f64) -> Duration {
        let mut l = self.latencies.clone();
        l.sort();
        l.get(((l.len() as f64 * q) as usize).min(l.len().saturating_sub(1))).copied().unwrap_or_default()
    }
}

/// The node processes of a run, killed when it ends however it ends.
struct Nodes {
    children: BTreeMap<u32, (Child, Option<ChildStdin>)>,
}

impl Drop for Nodes {
    fn drop(&mut self) {
        for (child, _) in self.children.values_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Starts host `host`; returns it with the address it bound.
fn start_host(exe: &[String], dir: &Path, host: u32, cluster: &Path, run_file: &Path) -> anyhow::Result<(Child, ChildStdin, SocketAddr)> {
    let stderr = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(format!("h{host}.stderr")))
        .context("creating a node's stderr file")?;
    let mut cmd = Command::new(&exe[0]);
    cmd.args(&exe[1..])
        .arg("--run")
        .arg(run_file)
        .arg("--cluster")
        .arg(cluster)
        .arg("--host")
        .arg(host.to_string())
        .arg("--dir")
        .arg(dir.join(format!("h{host}")))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(stderr);
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt as _;
        // SAFETY: prctl is async-signal-safe; the closure allocates nothing.
        unsafe {
            cmd.pre_exec(|| {
                // A node must not outlive the run that started it (a killed orchestrator).
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
    }
    let mut child = cmd.spawn().with_context(|| format!("starting host {host} ({})", exe[0]))?;
    let stdin = child.stdin.take().expect("piped");
    let stdout = BufReader::new(child.stdout.take().expect("piped"));
    let (_, addr, _) = match wait_for_ready_line_within(stdout, Duration::from_secs(60)) {
        Ok(ready) => ready,
        Err(e) => {
            let _ = child.kill();
            let tail = std::fs::read_to_string(dir.join(format!("h{host}.stderr"))).unwrap_or_default();
            bail!("host {host} did not start: {e}\n{tail}");
        }
    };
    Ok((child, stdin, addr))
}

/// Runs `run` as OS processes on this machine: `exe` is the command that serves one node
/// (`ensemble xcast node`), given `--run`, `--cluster`, `--host` and `--dir`. Gives up on
/// delivery after `limit` (the outcome then says it did not settle). `progress` hears what
/// happens (kills, restarts).
pub fn run(run: &RealRun, exe: &[String], limit: Duration, progress: &mut dyn FnMut(&str)) -> anyhow::Result<RealOutcome> {
    run.validate().map_err(anyhow::Error::msg)?;
    let tmp = tempfile::Builder::new().prefix("ensemble-xcast-").tempdir().context("creating the run's directory")?;
    let dir = tmp.path();
    let run_file = dir.join("run.json");
    std::fs::write(&run_file, serde_json::to_string_pretty(run)?)?;
    let mut spec = ClusterSpec::loopback(run.deployment(), Topology::lan(), false)?;
    spec.secret = Some(Secret::generate());
    spec.seed = run.seed;
    // A killed peer is down for seconds: keep dialing it for longer than that.
    spec.connect_timeout_ms = 120_000;
    let hosts = spec.hosts.len() as u32;
    let cluster_file = |h: u32, spec: &ClusterSpec, bound: bool| -> anyhow::Result<PathBuf> {
        let path = dir.join(format!("cluster-h{h}{}.toml", if bound { "-bound" } else { "" }));
        spec.for_host(HostId(h))?.save(&path)?;
        Ok(path)
    };

    let mut nodes = Nodes { children: BTreeMap::new() };
    let mut addrs = Vec::new();
    for h in 0..hosts {
        let file = cluster_file(h, &spec, false)?;
        let (child, stdin, addr) = start_host(exe, dir, h, &file, &run_file)?;
        nodes.children.insert(h, (child, Some(stdin)));
        addrs.push(addr);
    }
    spec.set_addrs(&addrs)?;
    let line = addrs_line(&addrs);
    for (_, stdin) in nodes.children.values_mut() {
        let mut stdin = stdin.take().expect("not yet written");
        stdin.write_all(line.as_bytes()).context("telling a host the addresses")?;
    }

    let groups = run.group_list();
    let records = |h: u32| dir.join(format!("h{h}")).join(format!("{}.records", ProcessId(h)));
    let read_all = || -> anyhow::Result<BTreeMap<ProcessId, ProcessRecord>> {
        let mut out = BTreeMap::new();
        for h in 0..hosts {
            let path = records(h);
            let rec = if path.exists() { ProcessRecord::read(&path)? } else { ProcessRecord::default() };
            out.insert(ProcessId(h), rec);
        }
        Ok(out)
    };
    let build = |recs: &BTreeMap<ProcessId, ProcessRecord>| -> DeliveryLog {
        let mut log = DeliveryLog::new();
        for (g, ms) in &groups {
            log.add_group(g.0, ms.iter().map(|p| p.0));
        }
        for p in 0..hosts {
            log.process_mut(p);
        }
        for rec in recs.values() {
            for (id, dst, at) in &rec.casts {
                log.add_cast(Cast::new(crate::node::payload(*id), id.caster.0, dst.iter().map(|g| g.0)).at(*at));
            }
        }
        for (p, rec) in recs {
            for (id, _) in &rec.delivered {
                log.deliver(p.0, crate::node::payload(*id));
            }
        }
        log
    };
    let planned = run.casters().len() * run.casts as usize;
    let cast_count = |recs: &BTreeMap<ProcessId, ProcessRecord>| recs.values().map(|r| r.casts.len()).sum::<usize>();
    let started = Instant::now();
    let deadline = started + limit;
    // Polls the record files every 50 ms until `done` holds or the limit passes.
    let wait = |done: &dyn Fn(&BTreeMap<ProcessId, ProcessRecord>) -> bool| -> anyhow::Result<bool> {
        loop {
            if done(&read_all()?) {
                return Ok(true);
            }
            if Instant::now() >= deadline {
                return Ok(false);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let check_children = |nodes: &mut Nodes| -> anyhow::Result<()> {
        for (h, (child, _)) in nodes.children.iter_mut() {
            if let Some(status) = child.try_wait()? {
                let tail = std::fs::read_to_string(dir.join(format!("h{h}.stderr"))).unwrap_or_default();
                bail!("host {h} exited on its own ({status}):\n{tail}");
            }
        }
        Ok(())
    };

    let mut killed = Vec::new();
    if run.kill {
        if !wait(&|r| cast_count(r) >= planned / 3)? {
            bail!("a third of the casts were not made within {limit:?}");
        }
        check_children(&mut nodes)?;
        for v in run.victims() {
            let (mut child, _) = nodes.children.remove(&v.0).expect("a host per process");
            child.kill().context("kill -9")?;
            let status = child.wait()?;
            progress(&format!("killed {v} (host h{}): {status}", v.0));
            killed.push(v);
        }
        if !wait(&|r| cast_count(r) >= 2 * planned / 3)? {
            bail!("two thirds of the casts were not made within {limit:?}");
        }
        for &v in &killed {
            // At the address it had: its peers keep dialing it there.
            let file = cluster_file(v.0, &spec, true)?;
            let (child, _stdin, addr) = start_host(exe, dir, v.0, &file, &run_file)?;
            anyhow::ensure!(addr == spec.hosts[v.0 as usize].addr, "{v} restarted at {addr}, not at its address");
            nodes.children.insert(v.0, (child, None));
            progress(&format!("restarted {v} at {addr}"));
        }
    }
    let settled = wait(&|r| {
        cast_count(r) == planned && check(&build(r), &[Property::Validity, Property::Agreement]).ok()
    })?;
    check_children(&mut nodes)?;
    for (h, _) in spec.host_ids() {
        let _ = ensemble_net::cluster::send_shutdown(spec.hosts[h.index()].addr, spec.operator_key().as_ref(), Duration::from_secs(5));
    }
    for (_, (child, _)) in nodes.children.iter_mut() {
        let _ = child.wait();
    }
    let recs = read_all()?;
    let log = build(&recs);
    let props: Vec<Property> =
        run.kind.primitive().properties().iter().copied().filter(|p| *p != Property::Genuineness).collect();
    let report = check(&log, &props);

    let mut delivered_at: BTreeMap<CastId, u64> = BTreeMap::new();
    for rec in recs.values() {
        for &(id, at) in &rec.delivered {
            let last = delivered_at.entry(id).or_default();
            *last = (*last).max(at);
        }
    }
    let casts: Vec<(CastId, u64)> = recs.values().flat_map(|r| r.casts.iter().map(|(id, _, at)| (*id, *at))).collect();
    let first = casts.iter().map(|c| c.1).min().unwrap_or(0);
    let last = delivered_at.values().copied().max().unwrap_or(first);
    let latencies = casts
        .iter()
        .filter_map(|(id, at)| delivered_at.get(id).map(|d| Duration::from_nanos(d.saturating_sub(*at))))
        .collect();
    // A run that failed keeps its files (records, consensus logs, each node's stderr) for
    // inspection; one that passed leaves nothing behind.
    let kept = (!settled || !report.ok()).then(|| tmp.keep());
    Ok(RealOutcome {
        kept,
        report,
        casts: casts.len(),
        deliveries: recs.values().map(|r| r.delivered.len()).sum(),
        log,
        killed,
        span: Duration::from_nanos(last.saturating_sub(first)),
        latencies,
        settled,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(caster: u32, seq: u64) -> CastId {
        CastId { caster: ProcessId(caster), seq }
    }

    #[test]
    fn a_reopened_store_has_what_was_persisted_and_the_file_reads_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let me = ProcessId(4);
        {
            let mut s = FileStore::open(dir.path(), me).unwrap();
            assert_eq!(s.durable(), Durable::default());
            s.cast(id(4, 0), &[GroupId(1)], Time(0));
            s.persist(1, 0, &[id(2, 0), id(4, 0)]);
            s.persist(1, 0, &[]);
            s.cast(id(4, 1), &[GroupId(0), GroupId(1)], Time(0));
            s.persist(2, 3, &[id(3, 7)]);
        }
        let s = FileStore::open(dir.path(), me).unwrap();
        let d = s.durable();
        assert_eq!((d.next_seq, d.next), (2, 3));
        assert_eq!(d.delivered, [id(2, 0), id(4, 0), id(3, 7)].into_iter().collect());
        let rec = ProcessRecord::read(&dir.path().join("p4.records")).unwrap();
        let order: Vec<CastId> = rec.delivered.iter().map(|d| d.0).collect();
        assert_eq!(order, vec![id(2, 0), id(4, 0), id(3, 7)]);
        let casts: Vec<(CastId, Vec<GroupId>)> = rec.casts.iter().map(|c| (c.0, c.1.clone())).collect();
        assert_eq!(casts, vec![(id(4, 0), vec![GroupId(1)]), (id(4, 1), vec![GroupId(0), GroupId(1)])]);
    }

    #[test]
    fn a_torn_tail_is_skipped_by_a_reader_and_cut_by_the_next_open() {
        let dir = tempfile::tempdir().unwrap();
        let me = ProcessId(0);
        let path = dir.path().join("p0.records");
        {
            let mut s = FileStore::open(dir.path(), me).unwrap();
            s.persist(0, 0, &[id(1, 0)]);
        }
        let whole = std::fs::metadata(&path).unwrap().len();
        // Half a record, as a kill -9 in the middle of an append leaves it.
        let mut f = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&[9, 0, 0, 0, 1, 2]).unwrap();
        drop(f);
        let rec = ProcessRecord::read(&path).unwrap();
        assert_eq!(rec.delivered.len(), 1);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), whole + 6, "a reader leaves the file alone");
        let s = FileStore::open(dir.path(), me).unwrap();
        assert_eq!(s.durable().delivered.len(), 1);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), whole, "the open cut the torn tail");
    }

    #[test]
    fn a_file_that_delivers_twice_is_refused_naming_the_offset() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p0.records");
        let (mut f, _) = RecordFile::open(&path, MAGIC, |_, _| Ok(())).unwrap();
        let twice = Record::Progress { next_seq: 0, next: 0, delivered: vec![id(1, 0)], at_ns: 0 };
        f.append_serde(&twice).unwrap();
        let second = f.end();
        f.append_serde(&twice).unwrap();
        let err = ProcessRecord::read(&path).unwrap_err();
        assert_eq!(err.offset(), second, "{err}");
        assert!(err.to_string().contains("p1#0 delivered a second time"), "{err}");
    }

    #[test]
    fn bad_runs_are_refused_naming_the_field() {
        let ok = RealRun {
            kind: Kind::Genuine,
            groups: 3,
            outside_casters: 2,
            casts: 10,
            every_ms: 50,
            dst_groups: None,
            seed: 0,
            kill: true,
        };
        assert_eq!(ok.validate(), Ok(()));
        let e = RealRun { groups: 0, ..ok.clone() }.validate().unwrap_err();
        assert!(e.starts_with("groups: 0"), "{e}");
        let e = RealRun { dst_groups: Some(4), ..ok.clone() }.validate().unwrap_err();
        assert!(e.starts_with("groups per cast: 4"), "{e}");
        let e = RealRun { kind: Kind::BrokenGenuine, ..ok.clone() }.validate().unwrap_err();
        assert!(e.contains("broken-genuine"), "{e}");
        // Seeds 0, 1, 2 kill every member position of every group once.
        let mut killed: BTreeSet<ProcessId> = BTreeSet::new();
        for seed in 0..3 {
            killed.extend(RealRun { seed, ..ok.clone() }.victims());
        }
        assert_eq!(killed.len(), 9);
    }
}
