//! The node server: runs one sans-IO [`Node`] over TCP.
//!
//! Threads and tasks:
//! - the **protocol loop** runs on the thread that called [`run_node`]. It owns the node state
//!   machine and consumes one channel of [`Input`]s: client requests, peer messages, timers,
//!   storage completions, connection bookkeeping. It is the only place node code runs, so given
//!   the order of its inputs the node is as deterministic as in the simulator;
//! - a small tokio runtime does the i/o: an accept loop, a reader and a writer task per inbound
//!   connection, one outbound link task per peer, one task per pending timer;
//! - a [`WorkerPool`] of std threads runs storage jobs, each on its own database connection.
//!
//! Connections: every node dials every peer and only *sends* on that connection (after a
//! `Hello::Peer`); it *receives* peer messages on the connections the peers dialed. Two
//! one-way connections per pair need no tie-breaking about who dials whom. Clients dial the node,
//! say `Hello::Client`, send requests and get replies on the same connection.

use crate::conn::{connect_with_retry, linger, write_loop, OutRx, OutTx, Outgoing, Outlet};
use crate::error::{io_context, NetError};
use crate::frame::{encode_error, encode_frame, Frame, FrameCodec, FrameError, Hello, NoMsg};
use crate::wan::WanEmulator;
use crate::workers::WorkerPool;
use crossbeam_channel::{Receiver, Sender};
use ensemble_core::topology::Topology;
use ensemble_core::{ClientId, InstanceId, Node, NodeEffect, NodeEvent, Request, Storage, Time};
use futures::StreamExt;
use serde::de::DeserializeOwned;
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_util::codec::FramedRead;

/// Everything a node process needs to know about itself and the cluster.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    pub instance: InstanceId,
    /// Where [`run_node`] listens (ignored by [`run_node_on`], which is handed a bound listener).
    pub listen: SocketAddr,
    /// The other instances; an entry for this instance itself is ignored.
    pub peers: BTreeMap<InstanceId, SocketAddr>,
    /// This instance's site (index into the topology's sites).
    pub site: usize,
    pub peer_sites: BTreeMap<InstanceId, usize>,
    /// `Some` emulates this topology's delays on every outgoing frame.
    pub topology: Option<Topology>,
    /// Storage worker threads (database connections).
    pub workers: usize,
    /// Seeds the WAN emulation's delay draws.
    pub seed: u64,
    /// How long to keep dialing a peer that is not up yet.
    pub connect_timeout: Duration,
}

impl NodeConfig {
    /// A single-site configuration without peers; fill in the rest as needed.
    pub fn new(instance: InstanceId, listen: SocketAddr) -> NodeConfig {
        NodeConfig {
            instance,
            listen,
            peers: BTreeMap::new(),
            site: 0,
            peer_sites: BTreeMap::new(),
            topology: None,
            workers: 2,
            seed: 0,
            connect_timeout: Duration::from_secs(30),
        }
    }

    fn validate(&self) -> Result<(), NetError> {
        let bad = |m: String| Err(NetError::Config(format!("instance {}: {m}", self.instance)));
        if let Some(t) = &self.topology {
            t.validate()?;
            let n = t.sites.len();
            if self.site >= n {
                return bad(format!("site {} out of range: topology `{}` has {n} sites", self.site, t.name));
            }
            for peer in self.peers.keys().filter(|p| **p != self.instance) {
                match self.peer_sites.get(peer) {
                    None => return bad(format!("no site given for peer {peer}")),
                    Some(s) if *s >= n => return bad(format!("peer {peer}: site {s} out of range ({n} sites)")),
                    Some(_) => {}
                }
            }
        }
        Ok(())
    }
}

/// What a node did, for the harness to print or check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeReport {
    pub instance: InstanceId,
    pub requests: u64,
    pub messages_in: u64,
    pub messages_out: u64,
    pub timers: u64,
    pub storage_jobs: u64,
    pub storage_done: u64,
    pub replies: u64,
    /// Replies to clients with no open connection (they disconnected).
    pub replies_undeliverable: u64,
    /// Messages to instances that are unknown or whose link gave up.
    pub messages_undeliverable: u64,
    /// Connections closed with an Error frame because they broke the protocol.
    pub bad_connections: u64,
    pub uptime: Duration,
}

impl NodeReport {
    fn new(instance: InstanceId) -> NodeReport {
        NodeReport {
            instance,
            requests: 0,
            messages_in: 0,
            messages_out: 0,
            timers: 0,
            storage_jobs: 0,
            storage_done: 0,
            replies: 0,
            replies_undeliverable: 0,
            messages_undeliverable: 0,
            bad_connections: 0,
            uptime: Duration::ZERO,
        }
    }
}

/// Asks a running node (or anything else waiting on it) to stop. Cheap to clone; triggering is
/// idempotent and may come from any thread.
#[derive(Clone, Debug)]
pub struct ShutdownHandle(Arc<tokio::sync::watch::Sender<bool>>);

impl Default for ShutdownHandle {
    fn default() -> Self {
        ShutdownHandle::new()
    }
}

impl ShutdownHandle {
    pub fn new() -> ShutdownHandle {
        ShutdownHandle(Arc::new(tokio::sync::watch::channel(false).0))
    }

    pub fn trigger(&self) {
        self.0.send_replace(true);
    }

    pub fn is_triggered(&self) -> bool {
        *self.0.borrow()
    }

    pub async fn wait(&self) {
        let mut rx = self.0.subscribe();
        let _ = rx.wait_for(|stopped| *stopped).await;
    }
}

/// Identifies an inbound connection for the protocol loop.
type ConnId = u64;

/// Everything the protocol loop reacts to, on one channel so that their order is the order the
/// node sees.
enum Input<M> {
    Event(NodeEvent<M>),
    /// A client said hello on connection `conn`; replies to it go to `out`.
    ClientHello { conn: ConnId, client: ClientId, site: usize, out: OutTx },
    ClientRequest { conn: ConnId, request: Request },
    ClientGone { conn: ConnId },
    BadConnection,
    Shutdown,
}

/// Binds `cfg.listen` and runs the node until shutdown (see [`run_node_on`]).
pub fn run_node<N, S>(
    cfg: NodeConfig,
    node: N,
    make_storage: impl Fn(usize) -> S + Send + Sync + 'static,
    shutdown: ShutdownHandle,
) -> Result<NodeReport, NetError>
where
    N: Node,
    S: Storage + 'static,
{
    let listener = std::net::TcpListener::bind(cfg.listen).map_err(io_context(format!("bind {}", cfg.listen)))?;
    run_node_on(listener, cfg, node, make_storage, shutdown)
}

/// Runs the node on an already bound listener until `shutdown` is triggered or a Shutdown frame
/// arrives, then returns what it did. Blocks the calling thread, which becomes the protocol loop.
///
/// Taking a bound listener is what makes readiness race-free: connections to it queue in the
/// kernel from the moment it is bound, so a parent may announce (or a test may hand out) its
/// address before this function is even called.
pub fn run_node_on<N, S>(
    listener: std::net::TcpListener,
    cfg: NodeConfig,
    mut node: N,
    make_storage: impl Fn(usize) -> S + Send + Sync + 'static,
    shutdown: ShutdownHandle,
) -> Result<NodeReport, NetError>
where
    N: Node,
    S: Storage + 'static,
{
    cfg.validate()?;
    if node.id() != cfg.instance {
        return Err(NetError::Config(format!("node says it is {} but is configured as {}", node.id(), cfg.instance)));
    }
    let started = Instant::now();
    let me = cfg.instance;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(format!("ensemble-net-{me}"))
        .enable_all()
        .build()
        .map_err(io_context("start the tokio runtime"))?;
    let (tx, rx) = crossbeam_channel::unbounded::<Input<N::Msg>>();

    listener.set_nonblocking(true).map_err(io_context("make the listener non-blocking"))?;
    let listener = {
        let _guard = runtime.enter();
        tokio::net::TcpListener::from_std(listener).map_err(io_context("register the listener"))?
    };
    let inbound = Arc::new(Inbound {
        me,
        peers: cfg.peers.keys().copied().filter(|p| *p != me).collect(),
        sites: cfg.topology.as_ref().map(|t| t.sites.len()),
        inputs: tx.clone(),
        next_conn: AtomicU64::new(0),
    });
    runtime.spawn(accept_loop(listener, inbound));

    let mut peers = BTreeMap::new();
    for (&peer, &addr) in cfg.peers.iter().filter(|(p, _)| **p != me) {
        let (out_tx, out_rx) = mpsc::unbounded_channel();
        runtime.spawn(peer_link(me, peer, addr, out_rx, cfg.connect_timeout));
        peers.insert(peer, Outlet::new(out_tx, cfg.peer_sites.get(&peer).copied().unwrap_or(0)));
    }

    let stop_tx = tx.clone();
    runtime.spawn(async move {
        shutdown.wait().await;
        let _ = stop_tx.send(Input::Shutdown);
    });

    let done_tx = tx.clone();
    let pool = WorkerPool::start(cfg.workers, Arc::new(make_storage), move |work, result| {
        let _ = done_tx.send(Input::Event(NodeEvent::StorageDone { work, result }));
    })
    .map_err(io_context("start storage workers"))?;

    let mut protocol = Protocol {
        me,
        site: cfg.site,
        started,
        peers,
        conns: HashMap::new(),
        clients: HashMap::new(),
        wan: cfg.topology.clone().map(|t| WanEmulator::new(t, cfg.seed)),
        pool: &pool,
        inputs: tx,
        runtime: runtime.handle().clone(),
        report: NodeReport::new(me),
    };
    protocol.run(&mut node, rx);
    let mut report = protocol.report;
    drop(pool);
    runtime.shutdown_timeout(Duration::from_secs(1));
    report.uptime = started.elapsed();
    Ok(report)
}

/// The protocol loop's state: the node's view of the world outside it.
struct Protocol<'p, M> {
    me: InstanceId,
    site: usize,
    started: Instant,
    peers: BTreeMap<InstanceId, Outlet>,
    conns: HashMap<ConnId, Outlet>,
    /// Replies go to the connection the client's latest request came on.
    clients: HashMap<ClientId, ConnId>,
    wan: Option<WanEmulator>,
    pool: &'p WorkerPool,
    /// For timers and messages a node sends to itself.
    inputs: Sender<Input<M>>,
    runtime: tokio::runtime::Handle,
    report: NodeReport,
}

impl<M: serde::Serialize + Send + 'static> Protocol<'_, M> {
    fn now(&self) -> Time {
        Time::from_duration(self.started.elapsed())
    }

    fn run<N: Node<Msg = M>>(&mut self, node: &mut N, rx: Receiver<Input<M>>) {
        let mut effects = Vec::new();
        node.start(self.now(), &mut effects);
        self.apply(&mut effects);
        while let Ok(input) = rx.recv() {
            let event = match input {
                Input::Event(event) => event,
                Input::ClientHello { conn, client, site, out } => {
                    self.conns.insert(conn, Outlet::new(out, site));
                    self.clients.insert(client, conn);
                    continue;
                }
                Input::ClientRequest { conn, request } => {
                    self.clients.insert(request.client, conn);
                    NodeEvent::Request(request)
                }
                Input::ClientGone { conn } => {
                    self.conns.remove(&conn);
                    self.clients.retain(|_, c| *c != conn);
                    continue;
                }
                Input::BadConnection => {
                    self.report.bad_connections += 1;
                    continue;
                }
                Input::Shutdown => break,
            };
            match &event {
                NodeEvent::Request(_) => self.report.requests += 1,
                NodeEvent::Message { .. } => self.report.messages_in += 1,
                NodeEvent::Timer(_) => self.report.timers += 1,
                NodeEvent::StorageDone { .. } => self.report.storage_done += 1,
            }
            node.on_event(self.now(), event, &mut effects);
            self.apply(&mut effects);
        }
    }

    fn apply(&mut self, effects: &mut Vec<NodeEffect<M>>) {
        for effect in effects.drain(..) {
            match effect {
                NodeEffect::Send { to, msg } if to == self.me => {
                    self.report.messages_out += 1;
                    let _ = self.inputs.send(Input::Event(NodeEvent::Message { from: to, msg }));
                }
                NodeEffect::Send { to, msg } => {
                    self.report.messages_out += 1;
                    let Some(link) = self.peers.get_mut(&to) else {
                        self.report.messages_undeliverable += 1;
                        eprintln!("[ensemble-net {}] message to unknown instance {to} dropped", self.me);
                        continue;
                    };
                    let bytes = match encode_frame(&Frame::Message(msg)) {
                        Ok(b) => b,
                        Err(e) => {
                            self.report.messages_undeliverable += 1;
                            eprintln!("[ensemble-net {}] message to {to} dropped: {e}", self.me);
                            continue;
                        }
                    };
                    if !link.send(bytes, self.wan.as_mut(), self.site) {
                        self.report.messages_undeliverable += 1;
                        eprintln!("[ensemble-net {}] message to {to} dropped: the link gave up", self.me);
                    }
                }
                NodeEffect::Reply { to, reply } => {
                    self.report.replies += 1;
                    let bytes = match encode_frame::<NoMsg>(&Frame::Reply(reply)) {
                        Ok(b) => b,
                        Err(e) => {
                            self.report.replies_undeliverable += 1;
                            eprintln!("[ensemble-net {}] reply to {to} dropped: {e}", self.me);
                            continue;
                        }
                    };
                    let conn = self.clients.get(&to).and_then(|c| self.conns.get_mut(c));
                    if !conn.is_some_and(|c| c.send(bytes, self.wan.as_mut(), self.site)) {
                        self.report.replies_undeliverable += 1;
                        eprintln!("[ensemble-net {}] reply to {to} dropped: the client is not connected", self.me);
                    }
                }
                NodeEffect::Storage { work, job } => {
                    self.report.storage_jobs += 1;
                    if !self.pool.submit(work, job) {
                        eprintln!("[ensemble-net {}] storage job {work:?} dropped: no workers left", self.me);
                    }
                }
                NodeEffect::SetTimer { id, after } => {
                    let tx = self.inputs.clone();
                    self.runtime.spawn(async move {
                        tokio::time::sleep(after).await;
                        let _ = tx.send(Input::Event(NodeEvent::Timer(id)));
                    });
                }
            }
        }
    }
}

/// What inbound connection tasks share.
struct Inbound<M> {
    me: InstanceId,
    peers: Vec<InstanceId>,
    /// Number of topology sites when emulating a WAN, to check the site a client claims.
    sites: Option<usize>,
    inputs: Sender<Input<M>>,
    next_conn: AtomicU64,
}

async fn accept_loop<M: DeserializeOwned + Send + 'static>(listener: tokio::net::TcpListener, ctx: Arc<Inbound<M>>) {
    loop {
        match listener.accept().await {
            Ok((stream, addr)) => {
                let conn = ctx.next_conn.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(serve_inbound(stream, addr, conn, ctx.clone()));
            }
            Err(e) => {
                // Typically out of file descriptors; back off instead of spinning.
                eprintln!("[ensemble-net {}] accept failed: {e}", ctx.me);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Who is at the other end of an inbound connection, as its Hello said.
#[derive(Clone, Copy, Debug)]
enum Who {
    Unknown,
    Peer(InstanceId),
    Client(ClientId),
}

impl std::fmt::Display for Who {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Who::Unknown => f.write_str("a connection that has not said Hello"),
            Who::Peer(i) => write!(f, "peer {i}"),
            Who::Client(c) => write!(f, "client {c}"),
        }
    }
}

/// Reads one inbound connection. Anything that breaks the protocol gets an Error frame naming
/// the problem and the connection is closed; nothing else in the node is affected.
async fn serve_inbound<M: DeserializeOwned + Send + 'static>(stream: TcpStream, addr: SocketAddr, conn: ConnId, ctx: Arc<Inbound<M>>) {
    let me = ctx.me;
    if let Err(e) = stream.set_nodelay(true) {
        eprintln!("[ensemble-net {me}] connection from {addr}: set_nodelay failed: {e}");
    }
    let (rd, mut wr) = stream.into_split();
    let (out, mut out_rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        if let Err(e) = write_loop(&mut wr, &mut out_rx).await {
            eprintln!("[ensemble-net {me}] writing to {addr} failed: {e}");
        }
    });
    let mut frames = FramedRead::new(rd, FrameCodec::<M>::new());
    let mut who = Who::Unknown;
    let problem = loop {
        let frame = match frames.next().await {
            None => break None,
            Some(Err(FrameError::Io(e))) => {
                eprintln!("[ensemble-net {me}] connection from {addr} ({who}) failed: {e}");
                break None;
            }
            Some(Err(e)) => break Some(e.to_string()),
            Some(Ok(frame)) => frame,
        };
        let sent = match (who, frame) {
            (_, Frame::Shutdown) => ctx.inputs.send(Input::Shutdown),
            (_, Frame::Error(text)) => {
                eprintln!("[ensemble-net {me}] {who} at {addr} reported an error: {text}");
                Ok(())
            }
            (Who::Unknown, Frame::Hello(Hello::Peer { instance })) => {
                if !ctx.peers.contains(&instance) {
                    break Some(format!("instance {instance} is not a peer of {me}"));
                }
                who = Who::Peer(instance);
                Ok(())
            }
            (Who::Unknown, Frame::Hello(Hello::Client { client, site })) => {
                if let Some(n) = ctx.sites.filter(|n| site >= *n) {
                    break Some(format!("client site {site} out of range: the topology has {n} sites"));
                }
                who = Who::Client(client);
                ctx.inputs.send(Input::ClientHello { conn, client, site, out: out.clone() })
            }
            (Who::Peer(from), Frame::Message(msg)) => ctx.inputs.send(Input::Event(NodeEvent::Message { from, msg })),
            (Who::Client(_), Frame::Request(request)) => ctx.inputs.send(Input::ClientRequest { conn, request }),
            (who, frame) => break Some(format!("unexpected {} frame from {who}", frame.kind())),
        };
        if sent.is_err() {
            // The protocol loop has stopped: the node is shutting down.
            break None;
        }
    };
    if let Some(problem) = problem {
        eprintln!("[ensemble-net {me}] closing connection from {addr} ({who}): {problem}");
        let _ = ctx.inputs.send(Input::BadConnection);
        let _ = out.send(Outgoing::Frame { due: None, bytes: encode_error(&problem) });
        let _ = out.send(Outgoing::Close);
        linger(frames.into_inner()).await;
    }
    if matches!(who, Who::Client(_)) {
        let _ = ctx.inputs.send(Input::ClientGone { conn });
    }
}

/// The sending side of the connection to one peer: dials (with retry), says Hello, then writes
/// the protocol's messages. If the connection breaks it redials; the frame being written when it
/// broke is lost, as it would be with any TCP failure.
async fn peer_link(me: InstanceId, peer: InstanceId, addr: SocketAddr, mut rx: OutRx, timeout: Duration) {
    let hello = match encode_frame::<NoMsg>(&Frame::Hello(Hello::Peer { instance: me })) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("[ensemble-net {me}] cannot encode Hello: {e}");
            return;
        }
    };
    let mut failures = 0;
    loop {
        let stream = match connect_with_retry(addr, timeout).await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("[ensemble-net {me}] giving up on peer {peer}: {e}; messages to it are dropped");
                return;
            }
        };
        let (rd, mut wr) = stream.into_split();
        tokio::spawn(watch_peer_replies(me, peer, rd));
        let result = match wr.write_all(&hello).await {
            Ok(()) => write_loop(&mut wr, &mut rx).await,
            Err(e) => Err(e),
        };
        match result {
            Ok(_) => return,
            Err(e) => {
                failures += 1;
                eprintln!("[ensemble-net {me}] link to peer {peer} broke: {e}");
                if failures >= 5 {
                    eprintln!("[ensemble-net {me}] giving up on peer {peer} after {failures} broken links");
                    return;
                }
            }
        }
    }
}

/// A peer never sends on a connection we dialed, except an Error frame if it thinks we broke the
/// protocol; log that so the cause of a dropped link is visible.
async fn watch_peer_replies(me: InstanceId, peer: InstanceId, rd: tokio::net::tcp::OwnedReadHalf) {
    let mut frames = FramedRead::new(rd, FrameCodec::<NoMsg>::new());
    while let Some(frame) = frames.next().await {
        match frame {
            Ok(Frame::Error(text)) => eprintln!("[ensemble-net {me}] peer {peer} reported an error: {text}"),
            Ok(other) => eprintln!("[ensemble-net {me}] peer {peer} sent an unexpected {} frame", other.kind()),
            Err(_) => break,
        }
    }
}
