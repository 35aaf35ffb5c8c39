//! The client driver: runs a set of sans-IO [`Client`]s against real hosts.
//!
//! Like a host, the clients' code runs on one thread — the one that called [`run_clients`] — fed
//! by one channel of replies and link failures, with the clients' timers in an agenda of its own
//! (woken by an [`Alarm`]); the connections' readers and writers run on the same thread, on a
//! single-threaded tokio runtime, so a request and its reply never cross threads in this process.
//!
//! Connections: one TCP connection per (client, host) pair, opened lazily on the client's first
//! request to any process of that host and announced with `Hello::Client`. Requests name their
//! process and replies name theirs, so one connection serves every process of the host. That
//! keeps the host's reply routing trivial (a reply goes back on the connection its request came
//! on) and matches a real deployment, where every user session has its own connections.
//! Hundreds of clients times a few hosts stay well within loopback limits.
//! A host of this OS process can be reached without a socket instead
//! ([`run_clients_beside`], [`LocalClients`]): the request goes to its loop through a channel and
//! the reply comes back through this driver's own input channel. The driver can also run on
//! that host's loop thread, as a task beside the loop ([`ClientsOnLoop`](crate::ClientsOnLoop)):
//! then both channels stay on one thread.

use crate::agenda::Agenda;
use crate::alarm::Alarm;
use crate::conn::{connect_with_retry, dial_handshake, write_loop, OutRx, Outlet};
use crate::error::{io_context, NetError};
use crate::frame::{encode_frame, Frame, FrameError, Hello, Never};
use crate::host::{ConnId, LocalClients};
use crate::wan::WanEmulator;
use tokio::sync::mpsc::UnboundedSender as Sender;
use ensemble_core::topology::Topology;
use ensemble_core::{Client, ClientEffect, ClientEvent, ClientId, Completion, ProcessId, Reply, Request, Time, TimerId};
use futures::StreamExt;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Debug;
use std::net::SocketAddr;
use std::ops::ControlFlow;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Where a process is served: its host's address, and the process's site (for WAN emulation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessAddr {
    pub addr: SocketAddr,
    pub site: usize,
}

/// Where the processes are and how to reach them
/// ([`ClusterSpec::client_config`](crate::ClusterSpec::client_config) makes one).
#[derive(Clone, Debug)]
pub struct ClientDriverConfig {
    pub processes: BTreeMap<ProcessId, ProcessAddr>,
    /// `Some` emulates this topology's delays on every request (client site → process site).
    pub topology: Option<Topology>,
    /// Seeds the WAN emulation's delay draws.
    pub seed: u64,
    pub connect_timeout: Duration,
    /// Time zero for every client: all completions of a run, across drivers in one OS process,
    /// are comparable when they share it.
    pub epoch: Instant,
    /// The run stops here at the latest.
    pub deadline: Instant,
    /// The key clients prove with (the operator's, [`crate::auth::operator_key`]); `None` on
    /// the plain wire.
    pub key: Option<crate::auth::Secret>,
    /// Triggering it stops the run at once ([`StopReason::Aborted`]): for a watcher that saw a
    /// host die or stall, or a signal.
    pub abort: Option<crate::host::ShutdownHandle>,
    /// Holds the clients' requests to some processes while their host restarts.
    pub hold: Option<RequestHold>,
}

/// Holds the clients' requests to some processes, from another thread: for restarting their
/// host within a run. Once held, a request to one of them waits in the driver (its latency
/// grows by the wait); [`RequestHold::hold`] says when every request sent to them before is
/// answered, so that killing their host then loses no request whose outcome the history
/// needs. Released, the held requests go out on new connections.
#[derive(Clone)]
pub struct RequestHold {
    orders: mpsc::UnboundedSender<HoldOrder>,
    /// Taken by the driver as it starts.
    taken: std::sync::Arc<std::sync::Mutex<Option<mpsc::UnboundedReceiver<HoldOrder>>>>,
}

enum HoldOrder {
    Hold { processes: Vec<ProcessId>, answered: std::sync::mpsc::Sender<()> },
    Release { processes: Vec<ProcessId> },
}

impl Default for RequestHold {
    fn default() -> RequestHold {
        let (orders, rx) = mpsc::unbounded_channel();
        RequestHold { orders, taken: std::sync::Arc::new(std::sync::Mutex::new(Some(rx))) }
    }
}

impl std::fmt::Debug for RequestHold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RequestHold")
    }
}

impl RequestHold {
    /// Holds every request to `processes` from now on. The receiver gets a message once no
    /// request sent to them is unanswered; it is disconnected instead if the driver has
    /// stopped (or never started), and nothing is held.
    pub fn hold(&self, processes: Vec<ProcessId>) -> std::sync::mpsc::Receiver<()> {
        let (answered, rx) = std::sync::mpsc::channel();
        let _ = self.orders.send(HoldOrder::Hold { processes, answered });
        rx
    }

    /// Sends the requests held for `processes`, and those to come, again.
    pub fn release(&self, processes: Vec<ProcessId>) {
        let _ = self.orders.send(HoldOrder::Release { processes });
    }
}

impl ClientDriverConfig {
    /// A configuration without WAN emulation (every process at site 0) that runs for at most
    /// `run_for` from now.
    pub fn new(processes: BTreeMap<ProcessId, SocketAddr>, run_for: Duration) -> ClientDriverConfig {
        let epoch = Instant::now();
        ClientDriverConfig {
            processes: processes.into_iter().map(|(p, addr)| (p, ProcessAddr { addr, site: 0 })).collect(),
            topology: None,
            seed: 0,
            connect_timeout: Duration::from_secs(30),
            epoch,
            deadline: epoch + run_for,
            key: None,
            abort: None,
            hold: None,
        }
    }
}

/// One client session and the site it runs at.
pub struct ClientSlot<E> {
    pub client: Box<dyn Client<E>>,
    pub site: usize,
}

/// Why [`run_clients`] returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    Deadline,
    /// The completion callback returned `ControlFlow::Break`.
    Callback,
    /// [`ClientDriverConfig::abort`] was triggered.
    Aborted,
    /// Every client said it was [`Client::finished`]: nothing in flight, nothing more to issue.
    Finished,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientReport {
    pub completions: u64,
    pub requests_sent: u64,
    pub replies: u64,
    pub timers: u64,
    /// Requests that could not be sent: unknown process, or the connection failed.
    pub requests_undeliverable: u64,
    /// Connections that failed or that a host closed with an Error frame.
    pub link_failures: u64,
    pub stopped: StopReason,
}

enum Input<E> {
    Reply { slot: usize, from: ProcessId, reply: Reply<E> },
    /// `link` tells a failure of a connection replaced since (a held host's) from the current one's.
    LinkFailed { slot: usize, addr: SocketAddr, link: u64, why: String },
    Hold(HoldOrder),
    Aborted,
    /// A timer or the deadline is due.
    Alarm,
}

/// Runs the clients until every client is finished, until `on_complete` breaks, or until
/// `cfg.deadline`, handing every completion to `on_complete` as it happens. Blocks the calling
/// thread, which runs all client code (so clients need not be `Send`). Each client starts in
/// slot order.
pub fn run_clients<E>(
    cfg: ClientDriverConfig,
    clients: Vec<ClientSlot<E>>,
    on_complete: impl FnMut(Completion<E>) -> ControlFlow<()>,
) -> Result<ClientReport, NetError>
where
    E: Debug + Serialize + DeserializeOwned + Send + 'static,
{
    run_clients_beside(cfg, clients, HashMap::new(), on_complete)
}

/// [`run_clients`], reaching the hosts of this OS process that `local` names (by the address
/// in [`ClientDriverConfig::processes`]) through their [`LocalClients`] instead of a socket:
/// the clients are the application's threads, with Ensemble linked into it.
pub fn run_clients_beside<E>(
    cfg: ClientDriverConfig,
    clients: Vec<ClientSlot<E>>,
    local: HashMap<SocketAddr, LocalClients<E>>,
    on_complete: impl FnMut(Completion<E>) -> ControlFlow<()>,
) -> Result<ClientReport, NetError>
where
    E: Debug + Serialize + DeserializeOwned + Send + 'static,
{
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(io_context("start the tokio runtime"))?;
    let report = runtime.block_on(drive(cfg, clients, local, on_complete));
    runtime.shutdown_timeout(Duration::from_secs(1));
    report
}

/// The client driver itself, on the tokio runtime (single-threaded) of the thread that awaits
/// it: [`run_clients_beside`]'s own, or a host's loop that runs its application's clients
/// beside its processes ([`ClientsOnLoop`](crate::ClientsOnLoop)).
pub(crate) async fn drive<E>(
    cfg: ClientDriverConfig,
    clients: Vec<ClientSlot<E>>,
    local: HashMap<SocketAddr, LocalClients<E>>,
    mut on_complete: impl FnMut(Completion<E>) -> ControlFlow<()>,
) -> Result<ClientReport, NetError>
where
    E: Debug + Serialize + DeserializeOwned + Send + 'static,
{
    if let Some(t) = &cfg.topology {
        t.validate()?;
        let n = t.sites.len();
        if let Some(s) = clients.iter().map(|c| c.site).find(|s| *s >= n) {
            return Err(NetError::Config(format!("client site {s} out of range: topology `{}` has {n} site(s)", t.name)));
        }
        if let Some((p, a)) = cfg.processes.iter().find(|(_, a)| a.site >= n) {
            return Err(NetError::Config(format!("{p}: site {} out of range ({n} site(s))", a.site)));
        }
    }
    let (tx, mut rx) = mpsc::unbounded_channel::<Input<E>>();
    let alarm_tx = tx.clone();
    let alarm = Alarm::new(move || {
        let _ = alarm_tx.send(Input::Alarm);
    });
    if let Some(abort) = cfg.abort.clone() {
        let tx = tx.clone();
        tokio::spawn(async move {
            abort.wait().await;
            let _ = tx.send(Input::Aborted);
        });
    }
    if let Some(mut orders) = cfg.hold.as_ref().and_then(|h| h.taken.lock().unwrap_or_else(|e| e.into_inner()).take()) {
        let tx = tx.clone();
        tokio::spawn(async move {
            while let Some(order) = orders.recv().await {
                if tx.send(Input::Hold(order)).is_err() {
                    return;
                }
            }
        });
    }
    let mut driver = Driver {
        wan: cfg.topology.clone().map(|t| WanEmulator::new(t, cfg.seed)),
        cfg,
        runtime: tokio::runtime::Handle::current(),
        inputs: tx,
        links: HashMap::new(),
        links_opened: 0,
        unanswered: HashMap::new(),
        held: HashMap::new(),
        held_back: Vec::new(),
        local,
        local_conns: HashMap::new(),
        timers: Agenda::new(),
        report: ClientReport {
            completions: 0,
            requests_sent: 0,
            replies: 0,
            timers: 0,
            requests_undeliverable: 0,
            link_failures: 0,
            stopped: StopReason::Deadline,
        },
    };
    let mut slots = clients;
    let mut effects = Vec::new();

    let mut stop = ControlFlow::Continue(());
    let mut aborted = false;
    let mut finished = false;
    for slot in 0..slots.len() {
        slots[slot].client.on_event(driver.now(), ClientEvent::Start, &mut effects);
        stop = driver.apply(slot, &slots, &mut effects, &mut on_complete);
        if stop.is_break() {
            break;
        }
    }
    {
        'run: while stop.is_continue() {
            // Timers that were due when the round began, then one input.
            let now = Instant::now();
            let mut budget = driver.timers.len();
            while budget > 0 {
                let Some((slot, id)) = driver.timers.pop_due(now) else { break };
                budget -= 1;
                driver.report.timers += 1;
                let s: &mut ClientSlot<E> = &mut slots[slot];
                s.client.on_event(driver.now(), ClientEvent::Timer(id), &mut effects);
                stop = driver.apply(slot, &slots, &mut effects, &mut on_complete);
                if stop.is_break() {
                    break 'run;
                }
                if all_finished(&slots, slot, driver.now()) {
                    finished = true;
                    break 'run;
                }
            }
            let wake = driver.timers.next_due().map_or(driver.cfg.deadline, |due| due.min(driver.cfg.deadline));
            alarm.set(Some(wake));
            let Some(input) = rx.recv().await else { break };
            let (slot, event) = match input {
                Input::Alarm if Instant::now() < driver.cfg.deadline => continue,
                Input::Alarm => break,
                Input::Reply { slot, from, reply } => {
                    driver.report.replies += 1;
                    driver.answered(from);
                    (slot, ClientEvent::Reply { from, reply })
                }
                Input::Aborted => {
                    aborted = true;
                    break;
                }
                Input::LinkFailed { slot, addr, link, why } => {
                    if driver.links.get(&(slot, addr)).is_none_or(|(_, current)| *current != link) {
                        // A connection to a held host's earlier incarnation, already replaced.
                        continue;
                    }
                    driver.links.remove(&(slot, addr));
                    // A held host is being restarted, with none of its requests in flight: its
                    // connections closing is the plan, and nothing was lost on them.
                    if !driver.is_held(addr) {
                        driver.report.link_failures += 1;
                        let client = slots.get(slot).map(|s| s.client.id());
                        eprintln!("[ensemble-net clients] connection of {client:?} to {addr} failed: {why}");
                    }
                    continue;
                }
                Input::Hold(order) => {
                    driver.order(order, &slots);
                    continue;
                }
            };
            let Some(s) = slots.get_mut(slot) else { continue };
            s.client.on_event(driver.now(), event, &mut effects);
            stop = driver.apply(slot, &slots, &mut effects, &mut on_complete);
            if stop.is_continue() && all_finished(&slots, slot, driver.now()) {
                finished = true;
                break;
            }
        }
    }
    drop(alarm);
    for ((_, addr), conn) in driver.local_conns.drain() {
        if let Some(host) = driver.local.get(&addr) {
            host.gone(conn);
        }
    }
    if aborted {
        driver.report.stopped = StopReason::Aborted;
    } else if stop.is_break() {
        driver.report.stopped = StopReason::Callback;
    } else if finished {
        driver.report.stopped = StopReason::Finished;
    }
    Ok(driver.report.clone())
}

/// Whether every client is finished, asked only when the one that just had an event is: before
/// the clients' end none is, so the run does not scan them all on every reply.
fn all_finished<E>(slots: &[ClientSlot<E>], slot: usize, now: Time) -> bool {
    slots.get(slot).is_some_and(|s| s.client.finished(now)) && slots.iter().all(|s| s.client.finished(now))
}

struct Driver<E> {
    cfg: ClientDriverConfig,
    runtime: tokio::runtime::Handle,
    inputs: Sender<Input<E>>,
    /// Each client's connections, by host address, each with its number among those opened.
    links: HashMap<(usize, SocketAddr), (Outlet, u64)>,
    links_opened: u64,
    /// Requests sent to each process and not yet answered, with a [`RequestHold`] (a reply
    /// comes from the process its request went to).
    unanswered: HashMap<ProcessId, u64>,
    /// The processes whose requests are held ([`RequestHold`]), and who waits to hear that
    /// none sent to them before is unanswered.
    held: HashMap<ProcessId, Option<std::sync::mpsc::Sender<()>>>,
    /// Requests held, in the order the clients sent them: (slot, process, request).
    held_back: Vec<(usize, ProcessId, Request)>,
    /// The hosts of this OS process, by address, and each client's connection to them.
    local: HashMap<SocketAddr, LocalClients<E>>,
    local_conns: HashMap<(usize, SocketAddr), ConnId>,
    timers: Agenda<(), (usize, TimerId)>,
    wan: Option<WanEmulator>,
    report: ClientReport,
}

impl<E: Debug + Serialize + DeserializeOwned + Send + 'static> Driver<E> {
    fn now(&self) -> Time {
        Time::from_duration(Instant::now().saturating_duration_since(self.cfg.epoch))
    }

    fn is_held(&self, addr: SocketAddr) -> bool {
        self.held.keys().any(|p| self.cfg.processes.get(p).is_some_and(|a| a.addr == addr))
    }

    fn answered(&mut self, from: ProcessId) {
        if let Some(n) = self.unanswered.get_mut(&from) {
            *n = n.saturating_sub(1);
        }
        self.tell_if_answered();
    }

    /// Tells who waits on a hold whose processes have nothing unanswered (once).
    fn tell_if_answered(&mut self) {
        let unanswered = &self.unanswered;
        let done = |p: &ProcessId| unanswered.get(p).copied().unwrap_or(0) == 0;
        if self.held.iter().any(|(_, w)| w.is_some()) && self.held.keys().all(done) {
            for waiter in self.held.values_mut().filter_map(Option::take) {
                let _ = waiter.send(());
            }
        }
    }

    fn order(&mut self, order: HoldOrder, slots: &[ClientSlot<E>]) {
        match order {
            HoldOrder::Hold { processes, answered } => {
                for p in processes {
                    self.held.insert(p, Some(answered.clone()));
                }
                self.tell_if_answered();
            }
            HoldOrder::Release { processes } => {
                let addrs: Vec<SocketAddr> = processes.iter().filter_map(|p| self.cfg.processes.get(p).map(|a| a.addr)).collect();
                for p in &processes {
                    self.held.remove(p);
                }
                // The connections to the host's earlier incarnation are dead or dying: the held
                // requests go on new ones.
                self.links.retain(|(_, addr), _| !addrs.contains(addr));
                let (go, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut self.held_back).into_iter().partition(|(_, to, _)| !self.held.contains_key(to));
                self.held_back = keep;
                for (slot, to, request) in go {
                    let Some(this) = slots.get(slot) else { continue };
                    if let Err(why) = self.send(slot, this, to, request) {
                        self.report.requests_undeliverable += 1;
                        eprintln!("[ensemble-net clients] request of {} to {to} dropped: {why}", this.client.id());
                    }
                }
            }
        }
    }

    fn apply(
        &mut self,
        slot: usize,
        slots: &[ClientSlot<E>],
        effects: &mut Vec<ClientEffect<E>>,
        on_complete: &mut impl FnMut(Completion<E>) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        let Some(this) = slots.get(slot) else { return ControlFlow::Continue(()) };
        for effect in effects.drain(..) {
            match effect {
                ClientEffect::Completed(c) => {
                    self.report.completions += 1;
                    on_complete(c)?;
                }
                ClientEffect::SetTimer { id, after } => {
                    self.timers.schedule(Instant::now() + after, None, (slot, id));
                }
                ClientEffect::Send { to, request } => {
                    self.report.requests_sent += 1;
                    if let Err(why) = self.send(slot, this, to, request) {
                        self.report.requests_undeliverable += 1;
                        eprintln!("[ensemble-net clients] request of {} to {to} dropped: {why}", this.client.id());
                    }
                }
            }
        }
        ControlFlow::Continue(())
    }

    fn send(&mut self, slot: usize, this: &ClientSlot<E>, to: ProcessId, request: Request) -> Result<(), String> {
        let Some(target) = self.cfg.processes.get(&to).copied() else { return Err(format!("{to} is not deployed")) };
        if self.held.contains_key(&to) {
            self.held_back.push((slot, to, request));
            return Ok(());
        }
        // Counted only where a hold may ask: a run without one pays nothing per request.
        if self.cfg.hold.is_some() {
            *self.unanswered.entry(to).or_default() += 1;
        }
        if let Some(host) = self.local.get(&target.addr) {
            let conn = match self.local_conns.get(&(slot, target.addr)) {
                Some(&conn) => conn,
                None => {
                    let inputs = self.inputs.clone();
                    let replies = Box::new(move |from, reply| inputs.send(Input::Reply { slot, from, reply }).is_ok());
                    let conn = host.connect(replies).ok_or("the host has stopped")?;
                    self.local_conns.insert((slot, target.addr), conn);
                    conn
                }
            };
            return if host.request(conn, to, request) { Ok(()) } else { Err("the host has stopped".into()) };
        }
        let bytes = encode_frame::<Never, E>(&Frame::Request { to, request }).map_err(|e| e.to_string())?;
        let (link, _) = self.links.entry((slot, target.addr)).or_insert_with(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            self.links_opened += 1;
            let link = ClientLink { slot, client: this.client.id(), site: this.site, addr: target.addr, key: self.cfg.key.clone(), link: self.links_opened };
            self.runtime.spawn(link.run::<E>(rx, self.inputs.clone(), self.cfg.connect_timeout));
            (Outlet::new(tx), self.links_opened)
        });
        let delay = self.wan.as_mut().map(|w| w.delay(this.site, target.site, bytes.len()));
        if link.send(bytes, delay) {
            Ok(())
        } else {
            Err("the connection failed".into())
        }
    }
}

/// One client's connection to one host.
struct ClientLink {
    slot: usize,
    client: ClientId,
    site: usize,
    addr: SocketAddr,
    key: Option<crate::auth::Secret>,
    /// Its number among the driver's connections.
    link: u64,
}

impl ClientLink {
    /// Dial, handshake, then requests out and replies in.
    async fn run<E: DeserializeOwned + Send + 'static>(self, mut rx: OutRx, inputs: Sender<Input<E>>, timeout: Duration) {
        let ClientLink { slot, client, site, addr, key, link } = self;
        let failed = |why: String| Input::LinkFailed { slot, addr, link, why };
        let stream = match connect_with_retry(addr, timeout).await {
            Ok(s) => s,
            Err(e) => {
                let _ = inputs.send(failed(e.to_string()));
                return;
            }
        };
        let dialed = match dial_handshake::<Never, E>(stream, Hello::Client { client, site }, key.as_ref(), timeout).await {
            Ok(d) => d,
            Err(e) => {
                let _ = inputs.send(failed(e));
                return;
            }
        };
        let reader_inputs = inputs.clone();
        let mut frames = dialed.reader;
        tokio::spawn(async move {
            let why = loop {
                match frames.next().await {
                    None => return,
                    Some(Ok(Frame::Reply { from, reply })) => {
                        if reader_inputs.send(Input::Reply { slot, from, reply }).is_err() {
                            return;
                        }
                    }
                    Some(Ok(Frame::Error(text))) => break format!("the host reported: {text}"),
                    Some(Ok(other)) => break format!("unexpected {} frame from the host", other.kind()),
                    Some(Err(FrameError::Io(e))) => break e.to_string(),
                    Some(Err(e)) => break e.to_string(),
                }
            };
            let _ = reader_inputs.send(Input::LinkFailed { slot, addr, link, why });
        });
        let mut wr = dialed.writer;
        if let Err(e) = write_loop(&mut wr, &mut rx, dialed.sealer, None).await {
            let _ = inputs.send(failed(e.to_string()));
        }
    }
}
