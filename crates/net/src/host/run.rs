//! The protocol loop: the host's processes, their inputs in order, their effects applied.

use super::inbound::{accept_loop, Inbound, PeerLink};
use super::local::{ClientsAwaited, ClientsOnLoop, LocalInput, ReplySink};
use super::{HostConfig, HostReport, HostedProcess, ProcessReport, ProcessTraffic, ShutdownHandle};
use crate::agenda::Agenda;
use crate::conn::{OutTx, Outlet};
use crate::error::{io_context, NetError};
use crate::frame::{encode_frame, Frame, HostId, Never};
use crate::layout::{Directory, Place};
use crate::wan::{Pacer, WanEmulator};
use crate::workers::{panic_text, JobFailed, WorkerPool};
use crate::alarm::Alarm;
use ensemble_core::{ClientId, Effect, Event, Process, ProcessId, Protocol, Reply, Request, Time, TimerId, WorkId};
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc::{self, UnboundedReceiver, UnboundedSender};

/// Identifies an inbound connection for the protocol loop.
pub(crate) type ConnId = u64;

/// Everything the protocol loop reacts to but timers, on one channel so that their order is the
/// order the processes see.
pub(super) enum Input<P: Protocol> {
    /// A message from a process of another host, read off a peer host's connection.
    Peer { from: ProcessId, to: ProcessId, msg: P::Msg },
    /// A message between processes of this host (or from a process to itself).
    Local { from: ProcessId, to: ProcessId, msg: P::Msg },
    /// A client authenticated on connection `conn`; replies to it go to `out`.
    ClientHello { conn: ConnId, site: usize, out: OutTx },
    /// A client of this OS process opened connection `conn` ([`super::LocalClients`]).
    LocalHello { conn: ConnId, replies: ReplySink<P::Evidence> },
    /// An admin tool asks how the host is; the Pong goes to `out`.
    Ping { nonce: u64, out: OutTx },
    ClientRequest { conn: ConnId, to: ProcessId, request: Request },
    ClientGone { conn: ConnId },
    /// Storage work of the process in `slot` finished.
    StorageDone { slot: usize, work: WorkId, result: Result<P::JobResult, JobFailed> },
    BadConnection,
    /// The agenda's next item is due ([`Alarm`]).
    Alarm,
    Shutdown,
}

/// What the agenda holds.
enum Due<P: Protocol> {
    Timer { slot: usize, id: TimerId },
    /// A message between processes of this host on different machines, held back by its
    /// emulated delay.
    Delivery { from: ProcessId, slot: usize, msg: P::Msg },
}

/// One hosted process and what the host knows of it.
struct Slot<P: Protocol> {
    id: ProcessId,
    place: Place,
    process: Box<dyn Process<P>>,
    pool: Option<WorkerPool<P::Job>>,
    traffic: ProcessTraffic,
    /// The first thing that went wrong as the host saw it.
    trouble: Option<String>,
    /// Its handler panicked: it gets no more events.
    halted: bool,
}

/// A storage job running at least this long is named in what a host says it has in flight: a
/// job of a protocol here takes milliseconds, and one that has taken a second is what a host
/// that does not drain is most often waiting for.
const LONG_JOB: Duration = Duration::from_secs(1);

/// At most this many long jobs are named, the longest first.
const LONG_JOBS_NAMED: usize = 4;

/// The most of a Pong's account of what is in flight, in bytes: enough for every process of a
/// host here; a host of many busy processes is cut short rather than made to send a long frame
/// every time it is probed.
const MAX_PONG_TEXT: usize = 4096;

/// How long a stopping host waits for its storage workers to finish what was queued. A host
/// stopped once drained has none left; one stopped early (a run salvaged) must still write its
/// report within the bench's wait for it, two seconds.
const WORKERS_JOINED_WITHIN: Duration = Duration::from_secs(1);

impl<P: Protocol> Slot<P> {
    /// Why the process failed, if it did: what it says ([`Process::failure`]), then what the
    /// host saw go wrong with it (a panic that halted it, a storage job that failed).
    fn failure(&self) -> Option<String> {
        // A halted process may be in any state; asking it must not lose the answer.
        let said = catch_unwind(AssertUnwindSafe(|| self.process.failure())).unwrap_or_else(|p| Some(format!("failure() panicked: {}", panic_text(&*p))));
        match (said, &self.trouble) {
            (Some(a), Some(b)) => Some(format!("{a}; {b}")),
            (a, b) => a.or_else(|| b.clone()),
        }
    }

    /// What the process still has in flight, in its own words ([`Process::in_flight`]), and
    /// which of its storage jobs have run for [`LONG_JOB`] or more: `None` if it is quiescent.
    fn in_flight(&self) -> Option<String> {
        let said = catch_unwind(AssertUnwindSafe(|| self.process.in_flight())).unwrap_or_else(|p| Some(format!("in_flight() panicked: {}", panic_text(&*p))));
        let long = self.pool.as_ref().map(|pool| pool.running(LONG_JOB)).unwrap_or_default();
        if long.is_empty() {
            return said;
        }
        let mut named: Vec<String> = long
            .iter()
            .take(LONG_JOBS_NAMED)
            .map(|(worker, works, d)| {
                let works: Vec<String> = works.iter().map(|w| w.0.to_string()).collect();
                format!("{worker} has run job {} for {:.1} s", works.join("+"), d.as_secs_f64())
            })
            .collect();
        if long.len() > LONG_JOBS_NAMED {
            named.push(format!("{} more for over {} s", long.len() - LONG_JOBS_NAMED, LONG_JOB.as_secs()));
        }
        let long = format!("storage: {}", named.join(", "));
        Some(match said {
            Some(s) => format!("{s}; {long}"),
            None => long,
        })
    }
}

/// A client connection: a socket's writer and its client's site, or a client of this OS
/// process.
enum ClientConn<E> {
    Socket { outlet: Outlet, site: usize },
    Local(ReplySink<E>),
}

pub(super) fn run<P: Protocol>(
    listener: std::net::TcpListener,
    cfg: HostConfig,
    dir: Arc<Directory>,
    processes: Vec<HostedProcess<P>>,
    shutdown: ShutdownHandle,
    local: Option<UnboundedReceiver<LocalInput<P::Evidence>>>,
    clients_on_loop: Option<ClientsAwaited<P::Evidence>>,
) -> Result<HostReport, NetError> {
    let started = Instant::now();
    let me = cfg.host;
    // One thread for the loop and all i/o: a request read, its reply written and every message
    // in between stay on it, where a hand-off to another thread costs a wake-up each way.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(io_context("start the tokio runtime"))?;
    let (tx, rx) = mpsc::unbounded_channel::<Input<P>>();

    listener.set_nonblocking(true).map_err(io_context("make the listener non-blocking"))?;
    let listener = {
        let _guard = runtime.enter();
        tokio::net::TcpListener::from_std(listener).map_err(io_context("register the listener"))?
    };
    let inbound = Arc::new(Inbound {
        me,
        dir: dir.clone(),
        inputs: tx.clone(),
        next_conn: AtomicU64::new(0),
        keys: cfg.keys.clone(),
        limits: cfg.limits,
        connections: Arc::new(tokio::sync::Semaphore::new(cfg.limits.max_connections)),
        in_flight: Arc::new(tokio::sync::Semaphore::new(cfg.limits.in_flight_per_host)),
        client_conns: std::sync::Mutex::new(HashMap::new()),
    });
    runtime.spawn(accept_loop(listener, inbound));

    let mine = dir.host(me).expect("checked by the configuration").processes.clone();
    let mut peers = Vec::new();
    for (h, host) in dir.hosts().iter().enumerate() {
        let peer = HostId(h as u32);
        if peer == me {
            peers.push(None);
            continue;
        }
        let (out_tx, out_rx) = mpsc::unbounded_channel();
        let key = cfg.keys.as_ref().and_then(|r| r.pair(peer)).cloned();
        let link = PeerLink { me, mine: mine.clone(), peer, addr: host.addr, timeout: cfg.connect_timeout, key };
        runtime.spawn(link.run(out_rx));
        peers.push(Some(Outlet::new(out_tx)));
    }

    if let Some(mut local) = local {
        // On the loop's own thread: a local request crosses threads once, from its client's
        // thread to this one, as one read off a socket would.
        let local_tx = tx.clone();
        runtime.spawn(async move {
            while let Some(input) = local.recv().await {
                let input = match input {
                    LocalInput::Hello { conn, replies } => Input::LocalHello { conn, replies },
                    LocalInput::Request { conn, to, request } => Input::ClientRequest { conn, to, request },
                    LocalInput::Gone { conn } => Input::ClientGone { conn },
                };
                if local_tx.send(input).is_err() {
                    return;
                }
            }
        });
    }

    let stop_tx = tx.clone();
    runtime.spawn(async move {
        shutdown.wait().await;
        let _ = stop_tx.send(Input::Shutdown);
    });

    let mut local = vec![None; cfg.deployment.len()];
    let mut slots = Vec::new();
    for (index, hosted) in processes.into_iter().enumerate() {
        let id = hosted.process.id();
        local[id.0 as usize] = Some(index);
        let pool = match hosted.storage {
            None => None,
            Some(make) => {
                let done_tx = tx.clone();
                let done = move |work, result| {
                    let _ = done_tx.send(Input::StorageDone { slot: index, work, result });
                };
                let name = format!("ensemble-storage-{id}");
                Some(WorkerPool::start(&name, cfg.workers, make, hosted.serial_lane, done).map_err(io_context(format!("start {id}'s storage workers")))?)
            }
        };
        let place = dir.place(id).expect("checked by the configuration");
        slots.push(Slot { id, place, process: hosted.process, pool, traffic: ProcessTraffic::default(), trouble: None, halted: false });
    }

    let alarm_tx = tx.clone();
    let alarm = Alarm::new(move || {
        let _ = alarm_tx.send(Input::Alarm);
    });
    let mut host = HostLoop {
        me,
        started,
        dir,
        slots,
        local,
        peers,
        conns: HashMap::new(),
        clients: HashMap::new(),
        agenda: Agenda::new(),
        pacers: HashMap::new(),
        wan: cfg.emulate_wan.then(|| WanEmulator::new(cfg.topology.clone(), cfg.seed)),
        inputs: tx,
        effects: Vec::new(),
        report: HostReport {
            host: me,
            processes: Vec::new(),
            peer_messages_in: 0,
            peer_messages_out: 0,
            messages_misaddressed: 0,
            bad_connections: 0,
            uptime: Duration::ZERO,
        },
    };
    match clients_on_loop {
        None => runtime.block_on(host.run(rx, &alarm)),
        Some(clients) => runtime.block_on(async {
            // The clients run beside the loop until they are done; the loop runs until it is
            // told to stop (after the clients, once their work has drained), and a loop that
            // stops first drops them.
            let driver = async {
                let Ok(ClientsOnLoop { cfg, clients, local, on_complete, done }) = clients.await else { return };
                done(crate::client::drive(cfg, clients, local, on_complete).await);
            };
            tokio::pin!(driver);
            let serving = host.run(rx, &alarm);
            tokio::pin!(serving);
            let mut clients_done = false;
            loop {
                tokio::select! {
                    () = &mut serving => break,
                    () = &mut driver, if !clients_done => clients_done = true,
                }
            }
        }),
    }
    drop(alarm);
    let report = host.finish();
    // The storage workers finish the jobs already queued and are joined, for at most
    // `WORKERS_JOINED_WITHIN`: a worker stuck in a job (a statement its server does not answer)
    // must not keep the report from its caller, who writes it for the run; such a worker is
    // left to end with the OS process.
    let me = host.me;
    let pools: Vec<WorkerPool<P::Job>> = host.slots.iter_mut().filter_map(|s| s.pool.take()).collect();
    drop(host);
    let (joined_tx, joined) = std::sync::mpsc::channel::<()>();
    let joiner = std::thread::Builder::new().name("ensemble-storage-join".into()).spawn(move || {
        pools.into_iter().for_each(WorkerPool::shutdown);
        let _ = joined_tx.send(());
    });
    if joiner.is_ok() && joined.recv_timeout(WORKERS_JOINED_WITHIN).is_err() {
        eprintln!("[ensemble-net {me}] storage workers were still busy {} s after the host stopped: left to end with the process", WORKERS_JOINED_WITHIN.as_secs());
    }
    runtime.shutdown_timeout(Duration::from_secs(1));
    Ok(report)
}

/// The protocol loop's state: the processes and their view of the world outside.
struct HostLoop<P: Protocol> {
    me: HostId,
    started: Instant,
    dir: Arc<Directory>,
    slots: Vec<Slot<P>>,
    /// Process id → its slot, for the processes of this host.
    local: Vec<Option<usize>>,
    /// Links to the other hosts, by host index.
    peers: Vec<Option<Outlet>>,
    conns: HashMap<ConnId, ClientConn<P::Evidence>>,
    /// Replies go to the connection the client's latest request came on.
    clients: HashMap<ClientId, ConnId>,
    /// Timers, keyed by (slot, id), and emulated-delay deliveries between this host's machines.
    agenda: Agenda<(usize, TimerId), Due<P>>,
    /// Keeps each pair of processes FIFO under emulated delays inside the host.
    pacers: HashMap<(ProcessId, ProcessId), Pacer>,
    wan: Option<WanEmulator>,
    /// For messages between this host's processes.
    inputs: UnboundedSender<Input<P>>,
    /// Reused for every handler's effects.
    effects: Vec<Effect<P>>,
    report: HostReport,
}

impl<P: Protocol> HostLoop<P> {
    fn now(&self) -> Time {
        Time::from_duration(self.started.elapsed())
    }

    async fn run(&mut self, mut rx: UnboundedReceiver<Input<P>>, alarm: &Alarm) {
        for slot in 0..self.slots.len() {
            self.handle(slot, None);
        }
        loop {
            self.fire_due();
            alarm.set(self.agenda.next_due());
            let Some(input) = rx.recv().await else { break };
            match input {
                Input::Peer { from, to, msg } => {
                    self.report.peer_messages_in += 1;
                    match self.slot_of(to) {
                        Some(slot) => self.handle(slot, Some(Event::Message { from, msg })),
                        None => self.misaddressed(from, to),
                    }
                }
                Input::Local { from, to, msg } => {
                    let slot = self.slot_of(to).expect("local messages are only sent to local processes");
                    self.handle(slot, Some(Event::Message { from, msg }));
                }
                Input::ClientHello { conn, site, out } => {
                    self.conns.insert(conn, ClientConn::Socket { outlet: Outlet::new(out), site });
                }
                Input::LocalHello { conn, replies } => {
                    self.conns.insert(conn, ClientConn::Local(replies));
                }
                Input::Ping { nonce, out } => self.pong(nonce, out),
                Input::ClientRequest { conn, to, request } => {
                    // A socket's reader checked that `to` runs here (and answered an Error frame
                    // if not); a local client's request is this OS process's own code, which
                    // addressed it wrong: said, and dropped.
                    let Some(slot) = self.slot_of(to) else {
                        eprintln!("[ensemble-net {}] request of {} for {to} dropped: {to} does not run here", self.me, request.client);
                        continue;
                    };
                    self.clients.insert(request.client, conn);
                    self.handle(slot, Some(Event::Request(request)));
                }
                Input::ClientGone { conn } => {
                    self.conns.remove(&conn);
                    self.clients.retain(|_, c| *c != conn);
                }
                Input::StorageDone { slot, work, result } => match result {
                    Ok(result) => self.handle(slot, Some(Event::StorageDone { work, result })),
                    Err(JobFailed(why)) => {
                        self.slots[slot].traffic.storage_failed += 1;
                        self.trouble(slot, why);
                    }
                },
                Input::BadConnection => self.report.bad_connections += 1,
                Input::Alarm => {}
                Input::Shutdown => break,
            }
        }
    }

    /// Fires what was due when the round began. One at a time, because a handler may cancel a
    /// timer that is due too; and no more than was pending, so a handler that keeps setting
    /// zero-delay timers cannot starve the input channel.
    fn fire_due(&mut self) {
        let now = Instant::now();
        let mut budget = self.agenda.len();
        while budget > 0 {
            let Some(due) = self.agenda.pop_due(now) else { return };
            budget -= 1;
            match due {
                Due::Timer { slot, id } => self.handle(slot, Some(Event::Timer(id))),
                Due::Delivery { from, slot, msg } => self.handle(slot, Some(Event::Message { from, msg })),
            }
        }
    }

    fn slot_of(&self, p: ProcessId) -> Option<usize> {
        self.local.get(p.0 as usize).copied().flatten()
    }

    /// Records what went wrong with a process, as the host saw it; the first such thing is
    /// reported as its failure.
    fn trouble(&mut self, slot: usize, what: String) {
        eprintln!("[ensemble-net {}] {what}", self.me);
        self.slots[slot].trouble.get_or_insert(what);
    }

    fn misaddressed(&mut self, from: ProcessId, to: ProcessId) {
        self.report.messages_misaddressed += 1;
        let n = self.report.messages_misaddressed;
        // Logged at the 1st, 2nd, 4th, 8th… so that a misconfigured peer cannot flood the log.
        if n.is_power_of_two() {
            eprintln!("[ensemble-net {}] message from {from} to {to} dropped: {to} does not run here ({n} so far)", self.me);
        }
    }

    /// Runs the process in `slot` on `event` (or starts it, for `None`) and applies its effects.
    fn handle(&mut self, slot: usize, event: Option<Event<P>>) {
        let now = self.now();
        let s = &mut self.slots[slot];
        let t = &mut s.traffic;
        if s.halted {
            t.events_dropped += 1;
            return;
        }
        match &event {
            None => {}
            Some(Event::Request(_)) => t.requests += 1,
            Some(Event::Message { .. }) => t.messages_in += 1,
            Some(Event::Timer(_)) => t.timers_fired += 1,
            Some(Event::StorageDone { .. }) => t.storage_done += 1,
        }
        let mut out = std::mem::take(&mut self.effects);
        let ran = catch_unwind(AssertUnwindSafe(|| match event {
            None => s.process.start(now, &mut out),
            Some(event) => s.process.on_event(now, event, &mut out),
        }));
        if let Err(payload) = ran {
            out.clear();
            s.halted = true;
            let what = format!("{} panicked and was halted: {}", s.id, panic_text(&*payload));
            self.trouble(slot, what);
        }
        self.apply(slot, &mut out);
        self.effects = out;
    }

    fn apply(&mut self, slot: usize, effects: &mut Vec<Effect<P>>) {
        for effect in effects.drain(..) {
            match effect {
                Effect::Send { to, msg } => self.send(slot, to, msg),
                Effect::Reply { to, reply } => self.reply(slot, to, reply),
                Effect::Storage { work, job, cost: _ } => {
                    let s = &mut self.slots[slot];
                    s.traffic.storage_jobs += 1;
                    let what = match &s.pool {
                        None => format!("{} asked for storage work ({work:?}) but has no storage", s.id),
                        Some(pool) if pool.submit(work, job) => continue,
                        Some(_) => format!("{}'s storage job {work:?} dropped: no workers left", s.id),
                    };
                    s.traffic.storage_failed += 1;
                    self.trouble(slot, what);
                }
                Effect::SetTimer { id, after } => {
                    if self.agenda.schedule(Instant::now() + after, Some((slot, id)), Due::Timer { slot, id }) {
                        self.slots[slot].traffic.timers_cancelled += 1;
                    }
                }
                Effect::CancelTimer { id } => {
                    if self.agenda.cancel(&(slot, id)) {
                        self.slots[slot].traffic.timers_cancelled += 1;
                    }
                }
                Effect::Charge(_) => {}
                Effect::Refuse { from, what } => {
                    let s = &mut self.slots[slot];
                    s.traffic.messages_refused += 1;
                    let n = s.traffic.messages_refused;
                    // Logged at the 1st, 2nd, 4th, 8th…: a hostile peer cannot flood the log.
                    if n.is_power_of_two() {
                        eprintln!("[ensemble-net {}] {} refused a message from {from} ({n} so far): {what}", self.me, s.id);
                    }
                }
            }
        }
    }

    /// The delay to emulate between two places, if any: none on one machine (see the module
    /// documentation), none without WAN emulation.
    fn emulated_delay(&mut self, from: Place, to: Place, bytes: usize) -> Option<Duration> {
        if from.machine == to.machine {
            return None;
        }
        self.wan.as_mut().map(|w| w.delay(from.site, to.site, bytes))
    }

    fn send(&mut self, slot: usize, to: ProcessId, msg: P::Msg) {
        let (from, from_place) = (self.slots[slot].id, self.slots[slot].place);
        let Some(to_place) = self.dir.place(to) else {
            self.slots[slot].traffic.messages_undeliverable += 1;
            eprintln!("[ensemble-net {}] message from {from} to {to} dropped: {to} is not deployed", self.me);
            return;
        };
        if to_place.host == self.me {
            self.slots[slot].traffic.messages_out_local += 1;
            if from_place.machine == to_place.machine || self.wan.is_none() {
                let _ = self.inputs.send(Input::Local { from, to, msg });
                return;
            }
            // Different machines of this host under WAN emulation: the agenda holds it back.
            let bytes = postcard::serialize_with_flavor(&msg, postcard::ser_flavors::Size::default()).unwrap_or(0);
            let delay = self.emulated_delay(from_place, to_place, bytes).unwrap_or_default();
            let due = self.pacers.entry((from, to)).or_default().due(Instant::now(), delay);
            let to_slot = self.slot_of(to).expect("a process of this host has a slot");
            self.agenda.schedule(due, None, Due::Delivery { from, slot: to_slot, msg });
            return;
        }
        self.slots[slot].traffic.messages_out_remote += 1;
        let bytes = match encode_frame::<P::Msg, Never>(&Frame::Message { from, to, msg }) {
            Ok(b) => b,
            Err(e) => {
                self.slots[slot].traffic.messages_undeliverable += 1;
                eprintln!("[ensemble-net {}] message from {from} to {to} dropped: {e}", self.me);
                return;
            }
        };
        let delay = self.emulated_delay(from_place, to_place, bytes.len());
        let link = self.peers.get_mut(to_place.host.index()).and_then(Option::as_mut);
        if link.is_some_and(|l| l.send(bytes, delay)) {
            self.report.peer_messages_out += 1;
        } else {
            self.slots[slot].traffic.messages_undeliverable += 1;
            eprintln!("[ensemble-net {}] message from {from} to {to} dropped: the link to {} gave up", self.me, to_place.host);
        }
    }

    fn reply(&mut self, slot: usize, to: ClientId, reply: Reply<P::Evidence>) {
        let s = &mut self.slots[slot];
        s.traffic.replies += 1;
        let (from, site) = (s.id, s.place.site);
        let sent = match self.clients.get(&to).and_then(|c| self.conns.get_mut(c)) {
            None => false,
            Some(ClientConn::Local(replies)) => replies(from, reply),
            Some(ClientConn::Socket { outlet, site: client_site }) => {
                let bytes = match encode_frame::<Never, P::Evidence>(&Frame::Reply { from, reply }) {
                    Ok(b) => b,
                    Err(e) => {
                        self.slots[slot].traffic.replies_undeliverable += 1;
                        eprintln!("[ensemble-net {}] reply of {from} to {to} dropped: {e}", self.me);
                        return;
                    }
                };
                let delay = self.wan.as_mut().map(|w| w.delay(site, *client_site, bytes.len()));
                outlet.send_answer(bytes, delay)
            }
        };
        if !sent {
            self.slots[slot].traffic.replies_undeliverable += 1;
            eprintln!("[ensemble-net {}] reply of {from} to {to} dropped: the client is not connected", self.me);
        }
    }

    /// Answers an admin's Ping: whether every process that still runs is quiescent. A halted
    /// process is left out: its failure is in the report, and waiting for it would only turn
    /// that failure into a stall.
    ///
    /// A host that is not quiescent says what each busy process still has, so that a run that
    /// does not drain can say what it waited for even if the host never reports.
    fn pong(&mut self, nonce: u64, out: OutTx) {
        fn bounded(mut text: String) -> String {
            if text.len() > MAX_PONG_TEXT {
                let mut end = MAX_PONG_TEXT;
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                text.truncate(end);
                text.push_str(" …");
            }
            text
        }
        let quiescent = self.slots.iter().all(|s| s.halted || catch_unwind(AssertUnwindSafe(|| s.process.quiescent())).unwrap_or(false));
        let in_flight = (!quiescent).then(|| {
            let busy: Vec<String> = self.slots.iter().filter(|s| !s.halted).filter_map(|s| s.in_flight().map(|w| format!("{}: {w}", s.id))).collect();
            bounded(busy.join("; "))
        });
        let failed: Vec<String> = self.slots.iter().filter_map(|s| s.failure().map(|f| format!("{}: {f}", s.id))).collect();
        let failed = (!failed.is_empty()).then(|| bounded(failed.join("; ")));
        match encode_frame::<Never, Never>(&Frame::Pong { nonce, quiescent, in_flight, failed }) {
            Ok(bytes) => {
                let _ = Outlet::new(out).send_answer(bytes, None);
            }
            Err(e) => eprintln!("[ensemble-net {}] cannot encode Pong: {e}", self.me),
        }
    }

    /// The report, with each process's counters (its storages' tally after its own) and failure.
    fn finish(&mut self) -> HostReport {
        let mut report = self.report.clone();
        report.uptime = self.started.elapsed();
        report.processes = self
            .slots
            .iter()
            .map(|s| {
                // A halted process may be in any state; asking it must not lose the report.
                let mut counters = catch_unwind(AssertUnwindSafe(|| s.process.counters())).unwrap_or_default();
                counters.extend(s.pool.as_ref().map(|pool| pool.tally()).unwrap_or_default());
                let failure = s.failure();
                let in_flight = s.in_flight();
                ProcessReport {
                    id: s.id,
                    counters: counters.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
                    failure,
                    in_flight,
                    traffic: s.traffic.clone(),
                }
            })
            .collect();
        report
    }
}
