//! A toy protocol shared by the integration tests, and a harness that runs its hosts on threads.
//!
//! The ring: each request travels once around a ring of processes, then the process it arrived
//! at runs it (as a storage job if it has storage, in memory if not) and replies. A second kind
//! of process, the timer probe, answers a request only after a fixed dance of timers.
#![allow(dead_code)]

use ensemble_core::topology::Topology;
use ensemble_core::{
    Client, ClientEffect, ClientEvent, ClientId, Completion, CompletionResult, Deployment, Done, DynStorage, Effect, Event,
    Machine, Outcome, Placement, Process, ProcessId, Protocol, Reply, ReplyBody, Request, Rows, Storage, Time, TimerId,
    Value, WorkId,
};
use ensemble_net::cluster::send_shutdown;
use ensemble_net::{Limits, Secret, 
    run_clients, run_host_on, ClientDriverConfig, ClientSlot, ClusterSpec, HostId, HostReport, HostedProcess, ShutdownHandle,
    StopReason,
};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The toy protocol's types.
#[derive(Debug)]
pub struct Ring;

impl Protocol for Ring {
    type Msg = RingMsg;
    type Job = Request;
    type JobResult = Ran;
    type Evidence = Served;
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum RingMsg {
    Forward { origin: ProcessId, request: Request },
}

/// What a storage job produced.
#[derive(Debug)]
pub struct Ran {
    pub rows: Rows,
}

/// The toy's evidence: which process served the request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Served {
    pub by: ProcessId,
}

pub struct RingProcess {
    id: ProcessId,
    ring: Vec<ProcessId>,
    has_storage: bool,
    next_work: u64,
    pending: HashMap<WorkId, Request>,
    forwarded: u64,
    served_in_memory: u64,
}

impl RingProcess {
    pub fn new(id: ProcessId, ring: Vec<ProcessId>, has_storage: bool) -> RingProcess {
        RingProcess { id, ring, has_storage, next_work: 0, pending: HashMap::new(), forwarded: 0, served_in_memory: 0 }
    }

    fn next(&self) -> ProcessId {
        let pos = self.ring.iter().position(|i| *i == self.id).unwrap_or(0);
        self.ring[(pos + 1) % self.ring.len()]
    }
}

fn reply(by: ProcessId, request: &Request, rows: Rows) -> Effect<Ring> {
    let body = ReplyBody::Done(Done { outcome: Outcome::Committed(rows), evidence: Served { by } });
    Effect::Reply { to: request.client, reply: Reply { client: request.client, seq: request.seq, body } }
}

/// The rows a toy request returns: its sequence number, and a blob it carried echoed back (so
/// a test can make replies as large as it needs).
pub fn toy_rows(request: &Request) -> Rows {
    match request.params.first() {
        Some(Value::Blob(b)) => vec![vec![Value::Int(request.seq as i64), Value::Blob(b.clone())]],
        _ => vec![vec![Value::Int(request.seq as i64)]],
    }
}

impl Process<Ring> for RingProcess {
    fn id(&self) -> ProcessId {
        self.id
    }

    fn start(&mut self, _now: Time, _out: &mut Vec<Effect<Ring>>) {}

    fn on_event(&mut self, _now: Time, event: Event<Ring>, out: &mut Vec<Effect<Ring>>) {
        match event {
            Event::Request(request) if request.txn == "panic" => panic!("boom"),
            Event::Request(request) => out.push(Effect::Send { to: self.next(), msg: RingMsg::Forward { origin: self.id, request } }),
            Event::Message { msg: RingMsg::Forward { origin, request }, .. } if origin == self.id => {
                if self.has_storage {
                    let work = WorkId(self.next_work);
                    self.next_work += 1;
                    self.pending.insert(work, request.clone());
                    out.push(Effect::Storage { work, job: request, cost: Duration::ZERO });
                } else {
                    self.served_in_memory += 1;
                    out.push(reply(self.id, &request, toy_rows(&request)));
                }
            }
            Event::Message { msg, .. } => {
                self.forwarded += 1;
                out.push(Effect::Send { to: self.next(), msg });
            }
            Event::Timer(_) => {}
            Event::StorageDone { work, result } => {
                let Some(request) = self.pending.remove(&work) else { return };
                out.push(reply(self.id, &request, result.rows));
            }
        }
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![("forwarded", self.forwarded), ("served_in_memory", self.served_in_memory)]
    }

    /// A request forwarded around the ring is not counted: the toy keeps no note of it.
    fn quiescent(&self) -> bool {
        self.pending.is_empty()
    }
}

/// Lets the storage jobs of requests named `stall` finish: until it is set, each runs on, as a
/// statement that its server never answers would.
pub static RELEASE_STALLED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Counts the jobs it ran; the counter is shared by every worker of one process. A request
/// named `boom` makes it panic, one named `stall` runs until [`RELEASE_STALLED`] is set.
pub struct CountingStorage {
    pub ran: Arc<AtomicU64>,
}

impl Storage for CountingStorage {
    type Job = Request;
    type Result = Ran;
    fn run(&mut self, request: &Request) -> Ran {
        self.ran.fetch_add(1, Ordering::SeqCst);
        if request.txn == "boom" {
            panic!("storage boom");
        }
        if request.txn == "stall" {
            // Stands for a statement the server does not answer; not a synchronisation.
            while !RELEASE_STALLED.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        Ran { rows: toy_rows(request) }
    }
}

/// Answers each request after a dance of timers set in one handler: timer 1 is set and then
/// cancelled, timer 3 is set and then set again later, timer 2 is the last due. When timer 2 fires
/// it replies with how often timers 1 and 3 fired: `[[0, 1]]` unless a cancelled timer was
/// delivered or a moved one fired twice.
pub struct TimerProbe {
    id: ProcessId,
    waiting: Option<Request>,
    fired: BTreeMap<TimerId, u64>,
}

impl TimerProbe {
    pub fn new(id: ProcessId) -> TimerProbe {
        TimerProbe { id, waiting: None, fired: BTreeMap::new() }
    }
}

impl Process<Ring> for TimerProbe {
    fn id(&self) -> ProcessId {
        self.id
    }

    fn start(&mut self, _now: Time, _out: &mut Vec<Effect<Ring>>) {}

    fn on_event(&mut self, _now: Time, event: Event<Ring>, out: &mut Vec<Effect<Ring>>) {
        let ms = Duration::from_millis;
        match event {
            Event::Request(request) => {
                assert!(self.waiting.is_none(), "one request at a time");
                self.waiting = Some(request);
                self.fired.clear();
                out.extend([
                    Effect::SetTimer { id: TimerId(1), after: ms(2) },
                    Effect::SetTimer { id: TimerId(2), after: ms(30) },
                    Effect::CancelTimer { id: TimerId(1) },
                    Effect::SetTimer { id: TimerId(3), after: ms(1) },
                    Effect::SetTimer { id: TimerId(3), after: ms(10) },
                ]);
            }
            Event::Timer(id) => {
                *self.fired.entry(id).or_default() += 1;
                if id == TimerId(2) {
                    let request = self.waiting.take().expect("timer 2 is set with a request");
                    let count = |t| Value::Int(self.fired.get(&TimerId(t)).copied().unwrap_or(0) as i64);
                    out.push(reply(self.id, &request, vec![vec![count(1), count(3)]]));
                }
            }
            Event::Message { .. } | Event::StorageDone { .. } => {}
        }
    }
}

/// A closed-loop client: `total` requests of type `txn` to `target`, with a short think time (a
/// timer) between a reply and the next request.
pub struct ToyClient {
    id: ClientId,
    target: ProcessId,
    txn: String,
    total: u64,
    sent: u64,
    in_flight: Option<(Request, Time)>,
}

impl ToyClient {
    pub fn boxed(id: u64, target: u32, total: u64) -> Box<dyn Client<Served>> {
        ToyClient::boxed_txn(id, target, total, "toy")
    }

    pub fn boxed_txn(id: u64, target: u32, total: u64, txn: &str) -> Box<dyn Client<Served>> {
        Box::new(ToyClient { id: ClientId(id), target: ProcessId(target), txn: txn.into(), total, sent: 0, in_flight: None })
    }

    fn send(&mut self, now: Time, out: &mut Vec<ClientEffect<Served>>) {
        let request = Request { client: self.id, seq: self.sent, txn: self.txn.clone(), params: vec![Value::Int(self.sent as i64)] };
        self.sent += 1;
        self.in_flight = Some((request.clone(), now));
        out.push(ClientEffect::Send { to: self.target, request });
    }
}

impl Client<Served> for ToyClient {
    fn id(&self) -> ClientId {
        self.id
    }

    fn on_event(&mut self, now: Time, event: ClientEvent<Served>, out: &mut Vec<ClientEffect<Served>>) {
        match event {
            ClientEvent::Start => self.send(now, out),
            ClientEvent::Timer(_) => self.send(now, out),
            ClientEvent::Reply { from, reply } => {
                let Some((request, issued)) = self.in_flight.take() else { panic!("reply with nothing in flight") };
                assert_eq!((reply.client, reply.seq), (request.client, request.seq));
                assert_eq!(from, self.target, "the reply names the process that answered");
                let result = match reply.body {
                    ReplyBody::Done(done) => CompletionResult::Done(done),
                    other => panic!("unexpected reply {other:?}"),
                };
                out.push(ClientEffect::Completed(Completion { request, issued, completed: now, redirects: 0, result, interaction: None }));
                if self.sent < self.total {
                    out.push(ClientEffect::SetTimer { id: TimerId(self.sent), after: Duration::from_micros(200) });
                }
            }
        }
    }

    fn finished(&self, _now: Time) -> bool {
        self.sent >= self.total && self.in_flight.is_none()
    }
}

/// Every (client, seq) in `0..per_client` answered exactly once, by the process it was sent to.
pub fn assert_all_answered(done: &[Completion<Served>], targets: &BTreeMap<ClientId, ProcessId>, per_client: u64) {
    let mut seen = BTreeSet::new();
    for c in done {
        assert!(seen.insert((c.request.client, c.request.seq)), "answered twice: {:?}", c.request);
        let CompletionResult::Done(Done { outcome, evidence }) = &c.result else { panic!("{:?}", c.result) };
        assert_eq!(evidence.by, targets[&c.request.client]);
        assert_eq!(outcome, &Outcome::Committed(toy_rows(&c.request)));
        assert!(c.completed >= c.issued);
    }
    let want: BTreeSet<_> = targets.keys().flat_map(|c| (0..per_client).map(move |s| (*c, s))).collect();
    assert_eq!(seen, want);
}

// ---------------------------------------------------------------------------------------------
// Deployments

/// A placement on `machine`, in OS process `os_process`.
/// Six clients at site 0, two per process of a three-process cluster, each sending
/// `per_client` requests; asserts every one was answered by the process it was sent to.
pub fn serve_two_clients_per_process(cluster: &Cluster, per_client: u64) {
    let targets: BTreeMap<_, _> = (0..6u64).map(|c| (ClientId(c), ProcessId((c % 3) as u32))).collect();
    let clients = slots(targets.iter().map(|(c, p)| (ToyClient::boxed(c.0, p.0, per_client), 0)));
    let done = cluster.run(clients, 6 * per_client as usize);
    assert_all_answered(&done, &targets, per_client);
}

/// Two sites `a` and `b`, `d` ms apart one way, no delay inside a site, no jitter.
pub fn two_sites(d: f64) -> Topology {
    Topology {
        name: "two-sites".into(),
        sites: vec!["a".into(), "b".into()],
        one_way_ms: vec![vec![0.0, d], vec![d, 0.0]],
        jitter: ensemble_core::topology::Jitter::None,
        ..Topology::lan()
    }
}

pub fn place(process: u32, machine: usize, os_process: Option<u32>) -> Placement {
    Placement { process: ProcessId(process), machine, pinned: None, os_process, kind: "ring".into() }
}

/// One machine per site listed, two cores each.
pub fn machines(sites: &[usize]) -> Vec<Machine> {
    sites.iter().map(|&site| Machine { site, cores: 2 }).collect()
}

pub fn deployment(machines: Vec<Machine>, processes: Vec<Placement>) -> Deployment {
    Deployment { machines, processes, groups: Vec::new() }
}

/// A ring of every deployed process, each with storage unless listed in `in_memory`.
pub fn ring_of(d: &Deployment, in_memory: &[u32]) -> impl Fn(ProcessId, &Storages) -> HostedProcess<Ring> + Send + Sync + 'static {
    let ring: Vec<ProcessId> = d.processes.iter().map(|p| p.process).collect();
    let in_memory: Vec<ProcessId> = in_memory.iter().map(|p| ProcessId(*p)).collect();
    move |p, storages| {
        let has_storage = !in_memory.contains(&p);
        let process = RingProcess::new(p, ring.clone(), has_storage);
        if has_storage {
            HostedProcess::with_storage(process, storages.factory(p))
        } else {
            HostedProcess::new(process)
        }
    }
}

/// Every process's storage counter.
#[derive(Clone, Default)]
pub struct Storages(Arc<std::sync::Mutex<BTreeMap<ProcessId, Arc<AtomicU64>>>>);

impl Storages {
    pub fn factory(&self, p: ProcessId) -> impl Fn(usize) -> DynStorage<Ring> + Send + Sync + 'static {
        let ran = self.0.lock().unwrap().entry(p).or_default().clone();
        move |_| Box::new(CountingStorage { ran: ran.clone() })
    }

    pub fn runs(&self) -> BTreeMap<ProcessId, u64> {
        self.0.lock().unwrap().iter().map(|(p, r)| (*p, r.load(Ordering::SeqCst))).collect()
    }
}

// ---------------------------------------------------------------------------------------------
// An in-process cluster: every host on its own thread.

type Build = Arc<dyn Fn(ProcessId, &Storages) -> HostedProcess<Ring> + Send + Sync>;

pub struct Cluster {
    pub spec: ClusterSpec,
    pub storages: Storages,
    shutdowns: Vec<ShutdownHandle>,
    hosts: Vec<JoinHandle<HostReport>>,
    build: Build,
    limits: Limits,
}

impl Cluster {
    /// Starts every host of `spec`'s deployment, building each process with `build` on its
    /// host's thread. Every listener is bound before any host starts, so no host ever dials a
    /// port that is not listening yet.
    pub fn start(
        deployment: Deployment,
        topology: Topology,
        emulate_wan: bool,
        workers: usize,
        build: impl Fn(ProcessId, &Storages) -> HostedProcess<Ring> + Send + Sync + 'static,
    ) -> Cluster {
        Cluster::start_with(deployment, topology, emulate_wan, workers, Some(test_secret()), Limits::default(), build)
    }

    /// [`Cluster::start`] with the given secret (`None`: the plain protocol, loopback only) and
    /// limits.
    pub fn start_with(
        deployment: Deployment,
        topology: Topology,
        emulate_wan: bool,
        workers: usize,
        secret: Option<Secret>,
        limits: Limits,
        build: impl Fn(ProcessId, &Storages) -> HostedProcess<Ring> + Send + Sync + 'static,
    ) -> Cluster {
        let (mut spec, listeners) = ClusterSpec::local_bound(deployment, topology, emulate_wan).unwrap();
        spec.workers = workers;
        spec.secret = secret;
        let build: Build = Arc::new(build);
        let storages = Storages::default();
        let mut cluster = Cluster { spec: spec.clone(), storages, shutdowns: Vec::new(), hosts: Vec::new(), build, limits };
        for (h, listener) in listeners.into_iter().enumerate() {
            let (shutdown, host) = cluster.spawn(h, listener);
            cluster.hosts.push(host);
            cluster.shutdowns.push(shutdown);
        }
        cluster
    }

    fn spawn(&self, h: usize, listener: std::net::TcpListener) -> (ShutdownHandle, JoinHandle<HostReport>) {
        let mut cfg = self.spec.host_config(HostId(h as u32)).unwrap();
        cfg.limits = self.limits;
        let shutdown = ShutdownHandle::new();
        let (sd, build, storages) = (shutdown.clone(), self.build.clone(), self.storages.clone());
        let host = std::thread::spawn(move || {
            let processes = cfg.processes().iter().map(|p| build(*p, &storages)).collect();
            run_host_on(listener, cfg, processes, sd).unwrap()
        });
        (shutdown, host)
    }

    /// Stops host `h` and starts it again at the same address (fresh processes, as a node
    /// started again would have), once the old one has ended. Returns the old one's report.
    pub fn restart(&mut self, h: usize) -> HostReport {
        self.shutdowns[h].trigger();
        let report = self.hosts.remove(h).join().unwrap();
        let listener = std::net::TcpListener::bind(self.addr(h as u32)).unwrap();
        let (shutdown, host) = self.spawn(h, listener);
        self.hosts.insert(h, host);
        self.shutdowns[h] = shutdown;
        report
    }

    pub fn addr(&self, host: u32) -> std::net::SocketAddr {
        self.spec.hosts[host as usize].addr
    }

    pub fn client_config(&self) -> ClientDriverConfig {
        let epoch = Instant::now();
        let mut cfg = self.spec.client_config(epoch, epoch + Duration::from_secs(60)).unwrap();
        cfg.seed = 42;
        cfg
    }

    /// Runs the clients until `expected` completions arrived (or the safety deadline).
    pub fn run(&self, clients: Vec<ClientSlot<Served>>, expected: usize) -> Vec<Completion<Served>> {
        let mut done = Vec::new();
        let report = run_clients(self.client_config(), clients, until(&mut done, expected)).unwrap();
        assert_eq!(report.stopped, StopReason::Callback, "the run hit its deadline: {report:?}");
        assert_eq!(report.requests_undeliverable, 0);
        done
    }

    /// Stops host 0 with an admin Shutdown frame and the others with their handles.
    pub fn stop(self) -> Vec<HostReport> {
        send_shutdown(self.addr(0), self.spec.operator_key().as_ref(), Duration::from_secs(5)).unwrap();
        for s in &self.shutdowns[1..] {
            s.trigger();
        }
        self.hosts.into_iter().map(|h| h.join().unwrap()).collect()
    }

    /// [`Cluster::stop`], requiring that no process reported a failure.
    pub fn stop_clean(self) -> Vec<HostReport> {
        let reports = self.stop();
        for r in &reports {
            assert_eq!(r.failure(), None, "{r:?}");
        }
        reports
    }
}

/// A completion callback that keeps the completions in `done` and stops the run once `expected`
/// are in.
pub fn until(done: &mut Vec<Completion<Served>>, expected: usize) -> impl FnMut(Completion<Served>) -> ControlFlow<()> + '_ {
    move |c| {
        done.push(c);
        if done.len() == expected {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    }
}

/// The secret of the test clusters: fixed, so a failure reproduces.
pub fn test_secret() -> Secret {
    Secret::from_bytes([0x5e; 32])
}

/// The key clients and admin tools of the test clusters prove with.
pub fn operator() -> Secret {
    ensemble_net::auth::operator_key(&test_secret())
}

pub fn slots(clients: impl IntoIterator<Item = (Box<dyn Client<Served>>, usize)>) -> Vec<ClientSlot<Served>> {
    clients.into_iter().map(|(client, site)| ClientSlot { client, site }).collect()
}
