//! The client driver: runs a set of sans-IO [`Client`]s against real nodes.
//!
//! Like the node, the clients' code runs on one thread — the one that called [`run_clients`] —
//! fed by one channel of replies, timers and link failures; a tokio runtime does the i/o.
//!
//! Connections: one TCP connection per (client, instance) pair, opened lazily on the client's
//! first request to that instance and announced with `Hello::Client`. That keeps the node's reply
//! routing trivial (a reply goes back on the connection its request came on) and matches a real
//! deployment, where every user session has its own connections. Hundreds of clients times a few
//! instances stay well within loopback limits.

use crate::conn::{connect_with_retry, write_loop, OutRx, Outlet};
use crate::error::{io_context, NetError};
use crate::frame::{encode_frame, Frame, FrameCodec, FrameError, Hello, NoMsg};
use crate::wan::WanEmulator;
use crossbeam_channel::{RecvTimeoutError, Sender};
use ensemble_core::topology::Topology;
use ensemble_core::{Client, ClientEffect, ClientEvent, ClientId, Completion, InstanceId, Reply, Time, TimerId};
use futures::StreamExt;
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::ops::ControlFlow;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use tokio_util::codec::FramedRead;

/// Where the instances are and how to reach them.
#[derive(Clone, Debug)]
pub struct ClientDriverConfig {
    pub instances: BTreeMap<InstanceId, SocketAddr>,
    pub instance_sites: BTreeMap<InstanceId, usize>,
    /// `Some` emulates this topology's delays on every request (client site → instance site).
    pub topology: Option<Topology>,
    /// Seeds the WAN emulation's delay draws.
    pub seed: u64,
    pub connect_timeout: Duration,
    /// Time zero for every client: all completions of a run, across drivers in one process, are
    /// comparable when they share it.
    pub epoch: Instant,
    /// The run stops here at the latest.
    pub deadline: Instant,
}

impl ClientDriverConfig {
    /// A configuration without WAN emulation that runs for at most `run_for` from now.
    pub fn new(instances: BTreeMap<InstanceId, SocketAddr>, run_for: Duration) -> ClientDriverConfig {
        let epoch = Instant::now();
        ClientDriverConfig {
            instance_sites: instances.keys().map(|i| (*i, 0)).collect(),
            instances,
            topology: None,
            seed: 0,
            connect_timeout: Duration::from_secs(30),
            epoch,
            deadline: epoch + run_for,
        }
    }
}

/// One client session and the site it runs at.
pub struct ClientSlot {
    pub client: Box<dyn Client>,
    pub site: usize,
}

/// Why [`run_clients`] returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    Deadline,
    /// The completion callback returned `ControlFlow::Break`.
    Callback,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientReport {
    pub completions: u64,
    pub requests_sent: u64,
    pub replies: u64,
    pub timers: u64,
    /// Requests that could not be sent: unknown instance, or the connection failed.
    pub requests_undeliverable: u64,
    /// Connections that failed or that a node closed with an Error frame.
    pub link_failures: u64,
    pub stopped: StopReason,
}

enum Input {
    Reply { slot: usize, from: InstanceId, reply: Reply },
    Timer { slot: usize, id: TimerId },
    LinkFailed { slot: usize, instance: InstanceId, why: String },
}

/// Runs the clients until `cfg.deadline` or until `on_complete` breaks, handing every
/// completion to `on_complete` as it happens. Blocks the calling thread, which runs all client
/// code (so clients need not be `Send`).
pub fn run_clients(
    cfg: ClientDriverConfig,
    clients: Vec<ClientSlot>,
    mut on_complete: impl FnMut(Completion) -> ControlFlow<()>,
) -> Result<ClientReport, NetError> {
    if let Some(t) = &cfg.topology {
        t.validate()?;
        let n = t.sites.len();
        if let Some(s) = clients.iter().map(|c| c.site).find(|s| *s >= n) {
            return Err(NetError::Config(format!("client site {s} out of range: topology `{}` has {n} sites", t.name)));
        }
        if let Some((i, s)) = cfg.instance_sites.iter().find(|(_, s)| **s >= n) {
            return Err(NetError::Config(format!("instance {i}: site {s} out of range ({n} sites)")));
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("ensemble-clients")
        .enable_all()
        .build()
        .map_err(io_context("start the tokio runtime"))?;
    let (tx, rx) = crossbeam_channel::unbounded::<Input>();
    let mut driver = Driver {
        cfg,
        runtime: runtime.handle().clone(),
        inputs: tx,
        links: HashMap::new(),
        wan: None,
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
    driver.wan = driver.cfg.topology.clone().map(|t| WanEmulator::new(t, driver.cfg.seed));
    let mut slots = clients;
    let mut effects = Vec::new();

    let mut stop = ControlFlow::Continue(());
    for slot in 0..slots.len() {
        slots[slot].client.on_event(driver.now(), ClientEvent::Start, &mut effects);
        stop = driver.apply(slot, &slots, &mut effects, &mut on_complete);
        if stop.is_break() {
            break;
        }
    }
    while stop.is_continue() {
        let input = match rx.recv_deadline(driver.cfg.deadline) {
            Ok(input) => input,
            Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => break,
        };
        let (slot, event) = match input {
            Input::Reply { slot, from, reply } => {
                driver.report.replies += 1;
                (slot, ClientEvent::Reply { from, reply })
            }
            Input::Timer { slot, id } => {
                driver.report.timers += 1;
                (slot, ClientEvent::Timer(id))
            }
            Input::LinkFailed { slot, instance, why } => {
                driver.report.link_failures += 1;
                let client = slots.get(slot).map(|s| s.client.id());
                eprintln!("[ensemble-net clients] connection of {client:?} to {instance} failed: {why}");
                driver.links.remove(&(slot, instance));
                continue;
            }
        };
        let Some(s) = slots.get_mut(slot) else { continue };
        s.client.on_event(driver.now(), event, &mut effects);
        stop = driver.apply(slot, &slots, &mut effects, &mut on_complete);
    }
    if stop.is_break() {
        driver.report.stopped = StopReason::Callback;
    }
    let report = driver.report.clone();
    drop(driver);
    runtime.shutdown_timeout(Duration::from_secs(1));
    Ok(report)
}

struct Driver {
    cfg: ClientDriverConfig,
    runtime: tokio::runtime::Handle,
    inputs: Sender<Input>,
    links: HashMap<(usize, InstanceId), Outlet>,
    wan: Option<WanEmulator>,
    report: ClientReport,
}

impl Driver {
    fn now(&self) -> Time {
        Time::from_duration(Instant::now().saturating_duration_since(self.cfg.epoch))
    }

    fn apply(
        &mut self,
        slot: usize,
        slots: &[ClientSlot],
        effects: &mut Vec<ClientEffect>,
        on_complete: &mut impl FnMut(Completion) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        let Some(this) = slots.get(slot) else { return ControlFlow::Continue(()) };
        for effect in effects.drain(..) {
            match effect {
                ClientEffect::Completed(c) => {
                    self.report.completions += 1;
                    on_complete(c)?;
                }
                ClientEffect::SetTimer { id, after } => {
                    let tx = self.inputs.clone();
                    self.runtime.spawn(async move {
                        tokio::time::sleep(after).await;
                        let _ = tx.send(Input::Timer { slot, id });
                    });
                }
                ClientEffect::Send { to, request } => {
                    self.report.requests_sent += 1;
                    let bytes = match encode_frame::<NoMsg>(&Frame::Request(request)) {
                        Ok(b) => b,
                        Err(e) => {
                            self.report.requests_undeliverable += 1;
                            eprintln!("[ensemble-net clients] request of {} dropped: {e}", this.client.id());
                            continue;
                        }
                    };
                    if !self.open_link(slot, this, to) {
                        self.report.requests_undeliverable += 1;
                        eprintln!("[ensemble-net clients] request of {} to unknown instance {to} dropped", this.client.id());
                        continue;
                    }
                    let link = self.links.get_mut(&(slot, to));
                    if !link.is_some_and(|l| l.send(bytes, self.wan.as_mut(), this.site)) {
                        self.report.requests_undeliverable += 1;
                        eprintln!("[ensemble-net clients] request of {} to {to} dropped: connection failed", this.client.id());
                    }
                }
            }
        }
        ControlFlow::Continue(())
    }

    /// Opens the connection of `slot` to `instance` unless it is open; false if the instance
    /// is unknown.
    fn open_link(&mut self, slot: usize, this: &ClientSlot, instance: InstanceId) -> bool {
        if !self.links.contains_key(&(slot, instance)) {
            let Some(addr) = self.cfg.instances.get(&instance).copied() else { return false };
            let site = self.cfg.instance_sites.get(&instance).copied().unwrap_or(0);
            let (tx, rx) = mpsc::unbounded_channel();
            self.runtime.spawn(client_link(
                slot,
                this.client.id(),
                this.site,
                instance,
                addr,
                rx,
                self.inputs.clone(),
                self.cfg.connect_timeout,
            ));
            self.links.insert((slot, instance), Outlet::new(tx, site));
        }
        true
    }
}

/// One client's connection to one instance: dial, Hello, then requests out and replies in.
#[allow(clippy::too_many_arguments)]
async fn client_link(
    slot: usize,
    client: ClientId,
    site: usize,
    instance: InstanceId,
    addr: SocketAddr,
    mut rx: OutRx,
    inputs: Sender<Input>,
    timeout: Duration,
) {
    let failed = |why: String| Input::LinkFailed { slot, instance, why };
    let stream = match connect_with_retry(addr, timeout).await {
        Ok(s) => s,
        Err(e) => {
            let _ = inputs.send(failed(e.to_string()));
            return;
        }
    };
    let (rd, mut wr) = stream.into_split();
    let hello = match encode_frame::<NoMsg>(&Frame::Hello(Hello::Client { client, site })) {
        Ok(h) => h,
        Err(e) => {
            let _ = inputs.send(failed(e.to_string()));
            return;
        }
    };
    let reader_inputs = inputs.clone();
    tokio::spawn(async move {
        let mut frames = FramedRead::new(rd, FrameCodec::<NoMsg>::new());
        let why = loop {
            match frames.next().await {
                None => return,
                Some(Ok(Frame::Reply(reply))) => {
                    if reader_inputs.send(Input::Reply { slot, from: instance, reply }).is_err() {
                        return;
                    }
                }
                Some(Ok(Frame::Error(text))) => break format!("the node reported: {text}"),
                Some(Ok(other)) => break format!("unexpected {} frame from the node", other.kind()),
                Some(Err(FrameError::Io(e))) => break e.to_string(),
                Some(Err(e)) => break e.to_string(),
            }
        };
        let _ = reader_inputs.send(Input::LinkFailed { slot, instance, why });
    });
    let result = match wr.write_all(&hello).await {
        Ok(()) => write_loop(&mut wr, &mut rx).await.map(|_| ()),
        Err(e) => Err(e),
    };
    if let Err(e) = result {
        let _ = inputs.send(failed(e.to_string()));
    }
}
