//! The host: one OS process running a set of processes of one protocol over TCP.
//!
//! Threads and tasks:
//! - the **protocol loop** runs on the thread that called [`run_host_on`]. It owns every process
//!   of the host and consumes one channel of inputs — client requests, peer messages, messages
//!   between its own processes, storage completions, connection bookkeeping — dispatching each to
//!   its process in arrival order. Timers are not inputs: the loop keeps them in an agenda, and
//!   an alarm thread (`alarm.rs`) wakes it when the next one is due, to the microsecond (tokio's
//!   timers round to the millisecond). It is the only place protocol code runs, so given the
//!   order of its inputs the processes are as deterministic as in the simulator;
//! - the i/o runs on the same thread, as tasks of a single-threaded tokio runtime that the loop
//!   is itself a task of: an accept loop, a reader and a writer task per inbound connection, one
//!   outbound link task per peer host. A request read and its reply written never cross threads;
//!   the only hand-offs on a request's way are to a storage worker and back (each a wake-up of a
//!   sleeping thread, which is what the overhead figure found the hop made of), and, for a client
//!   of this OS process ([`LocalClients`]), from its thread to the loop and back, unless the
//!   client driver runs on the loop's thread too ([`ClientsOnLoop`]);
//! - each process with storage has its own [`WorkerPool`](crate::workers::WorkerPool) of std
//!   threads, each worker on its own storage (database connection).
//!
//! Connections: every host dials every other host and only *sends* on that connection (after a
//! handshake as `Hello::Peer`, naming itself and its processes and proving the pair key of the
//! two hosts); it *receives* messages on the connections the other hosts dialed. Two one-way
//! connections per pair of hosts need no tie-breaking about who dials whom. Clients dial a host,
//! do the handshake as `Hello::Client` (the operator's key), send requests for any of its
//! processes and get the replies on the same connection. Clients of the host's own OS process
//! may come through a [`LocalClients`] instead (`host/local.rs`): a channel to the loop and one
//! back, no socket, framing or key. Who may send what, and the bounds on
//! what a connection can make the host hold, are in `host/inbound.rs` and `ARCHITECTURE.md` ("Trust
//! and limits").
//!
//! Delivery of a process's effects:
//! - `Send` to a process of the same host goes through the host's own input channel, the path a
//!   message to self takes: it is never encoded and never touches a socket. To a process of
//!   another host it is a `Message` frame on the link to that host.
//! - With `emulate_wan`, a message or reply between *different machines* is held back by a delay
//!   drawn from the topology for the two sites (the diagonal for two machines of one site), and
//!   each link stays FIFO. A hop between processes of *one machine* gets no emulated delay,
//!   whether the two share a host (a channel) or not (loopback TCP): that hop is real here, and it
//!   is what the topology's `machine_local_ms` models in the simulator, so emulating it as well
//!   would count it twice (and its 10 µs default is below what a timer can honour anyway).
//!   Processes of one host on different machines (a whole deployment in few OS processes) get
//!   their emulated delay from the loop's agenda instead of a socket.
//! - `Reply` goes to the connection the client's latest request came on.
//! - `Storage` goes to the process's worker pool; its `cost` is ignored (the job costs what it
//!   costs). A job whose storage panicked never completes: the host reports it as the process's
//!   failure, since the protocol's result type has no way to say so.
//! - `SetTimer` schedules `Event::Timer` after the delay; setting an id that is still pending
//!   moves it (it fires once, at the new time). `CancelTimer` forgets it on the spot, so a
//!   cancelled timer is never delivered.
//! - `Charge` is ignored: the real runtime's handlers cost what they cost.
//!
//! A process whose handler panics is halted: it gets no further events, the host reports the
//! panic as its failure, and the other processes go on.

mod inbound;
mod local;
mod run;

pub use local::{clients_hand_over, ClientsAwaited, ClientsHandOver, ClientsOnLoop, LocalClients};
pub(crate) use run::ConnId;

use crate::error::{io_context, NetError};
use crate::frame::HostId;
use crate::layout::{list, Directory, HostSpec};
use crate::workers::StorageFactory;
use ensemble_core::topology::Topology;
use ensemble_core::{Deployment, DynStorage, Process, ProcessId, Protocol, SerialLane};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// Everything a host needs to know about itself and the cluster
/// ([`ClusterSpec::host_config`](crate::ClusterSpec::host_config) makes one).
#[derive(Clone, Debug)]
pub struct HostConfig {
    pub host: HostId,
    /// Where [`run_host`] listens ([`run_host_on`] is handed a bound listener instead).
    pub listen: SocketAddr,
    /// Every host of the cluster, this one included, in order: the deployment's OS processes.
    pub hosts: Vec<HostSpec>,
    pub deployment: Deployment,
    pub topology: Topology,
    /// Emulate the topology's delays between processes on different machines.
    pub emulate_wan: bool,
    /// Storage worker threads (database connections) per process that has storage, besides
    /// the worker of its serial lane if it has one ([`HostedProcess::serial_lane`]).
    pub workers: usize,
    /// Seeds the WAN emulation's delay draws.
    pub seed: u64,
    /// How long to keep dialing a peer host that is not up yet.
    pub connect_timeout: Duration,
    /// This host's keys ([`KeyRing`](crate::auth::KeyRing)): every connection must prove it
    /// holds the one its role needs. `None` (the plain wire) is allowed only on a loopback address.
    pub keys: Option<crate::auth::KeyRing>,
    pub limits: Limits,
}

/// What one host will hold for the connections it accepted, and for how long it waits for them.
/// Peer hosts are members of the cluster (they proved it): their messages are the protocol's,
/// bounded by it, not by these.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Open inbound connections; one more gets an Error frame and is closed.
    pub max_connections: usize,
    /// Requests (and pings) one connection may have unanswered, counting answers not yet written
    /// to its socket; past it the connection is not read until answers drain.
    pub in_flight_per_connection: usize,
    /// The same, over all of the host's connections.
    pub in_flight_per_host: usize,
    /// From accepting a connection to the end of its handshake.
    pub hello_deadline: Duration,
    /// From a frame's first byte to its last.
    pub frame_deadline: Duration,
    /// The largest frame a client may send once authenticated (requests are small).
    pub client_max_frame: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: 4096,
            in_flight_per_connection: 256,
            in_flight_per_host: 65_536,
            hello_deadline: Duration::from_secs(10),
            frame_deadline: Duration::from_secs(10),
            client_max_frame: 1 << 20,
        }
    }
}

impl HostConfig {
    /// The processes this host runs, in id order.
    pub fn processes(&self) -> &[ProcessId] {
        self.hosts.get(self.host.index()).map_or(&[], |h| &h.processes)
    }

    fn directory(&self) -> Result<Directory, NetError> {
        let bad = |m: String| NetError::Config(format!("host {}: {m}", self.host));
        let dir = Directory::new(&self.deployment, &self.topology, &self.hosts).map_err(bad)?;
        if dir.host(self.host).is_none() {
            return Err(bad(format!("no such host: the cluster has {} host(s)", self.hosts.len())));
        }
        Ok(dir)
    }
}

/// One process for a host to run, with its storage if it has any.
pub struct HostedProcess<P: Protocol> {
    pub process: Box<dyn Process<P>>,
    /// Makes worker `i`'s storage, on that worker's thread; the process gets its own pool of
    /// [`HostConfig::workers`] workers. `None`: the process keeps its data in memory and must not
    /// ask for storage work.
    pub storage: Option<StorageFactory<P::Job, P::JobResult>>,
    /// The jobs that run on a lane of their own, batched ([`SerialLane`]): one more worker.
    pub serial_lane: Option<SerialLane<P::Job>>,
}

impl<P: Protocol> HostedProcess<P> {
    /// A process without storage.
    pub fn new(process: impl Process<P> + 'static) -> HostedProcess<P> {
        HostedProcess { process: Box::new(process), storage: None, serial_lane: None }
    }

    /// A process whose storage jobs run on storages made by `make` (called once per worker, on
    /// the worker's own thread).
    pub fn with_storage(process: impl Process<P> + 'static, make: impl Fn(usize) -> DynStorage<P> + Send + Sync + 'static) -> HostedProcess<P> {
        HostedProcess { process: Box::new(process), storage: Some(Arc::new(make)), serial_lane: None }
    }
}

/// What a host did, for the harness to print, check or parse (it serializes).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostReport {
    pub host: HostId,
    /// One per process, in id order.
    pub processes: Vec<ProcessReport>,
    /// Message frames read from peer hosts' connections.
    pub peer_messages_in: u64,
    /// Message frames queued on links to peer hosts.
    pub peer_messages_out: u64,
    /// Message frames for a process this host does not run: counted and dropped.
    pub messages_misaddressed: u64,
    /// Connections closed with an Error frame because they broke the protocol.
    pub bad_connections: u64,
    pub uptime: Duration,
}

impl HostReport {
    /// The first failure any process of this host reported, with its process.
    pub fn failure(&self) -> Option<(ProcessId, &str)> {
        self.processes.iter().find_map(|p| p.failure.as_deref().map(|f| (p.id, f)))
    }
}

/// What one process did and said.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessReport {
    pub id: ProcessId,
    /// The process's own counters ([`Process::counters`]), in its order, then what its storages
    /// counted ([`ensemble_core::Storage::tally`], summed over its pool).
    pub counters: Vec<(String, u64)>,
    /// Why it stopped serving: what [`Process::failure`] said, or what the host saw (a panic in
    /// its handler or its storage, storage work asked of a process without storage).
    pub failure: Option<String>,
    /// What it still had in flight when it stopped ([`Process::in_flight`]): `None` if it was
    /// quiescent.
    #[serde(default)]
    pub in_flight: Option<String>,
    pub traffic: ProcessTraffic,
}

/// The events a process got and the effects it had, as the host counted them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessTraffic {
    /// Requests delivered to it (the counts of delivered events leave out those dropped because
    /// it had halted).
    pub requests: u64,
    /// Messages delivered to it, from any process.
    pub messages_in: u64,
    /// Messages it sent to processes of this host (itself included): never on a socket.
    pub messages_out_local: u64,
    /// Messages it sent to processes of other hosts: frames on a peer link.
    pub messages_out_remote: u64,
    /// Messages to processes that are not deployed, or whose host link gave up.
    pub messages_undeliverable: u64,
    pub timers_fired: u64,
    /// Pending timers that will not fire: cancelled, or set again (moved).
    pub timers_cancelled: u64,
    pub storage_jobs: u64,
    pub storage_done: u64,
    /// Storage jobs that did not complete: their storage panicked or never opened, or the
    /// process has no storage.
    pub storage_failed: u64,
    pub replies: u64,
    /// Replies to clients with no open connection (they disconnected).
    pub replies_undeliverable: u64,
    /// Events not delivered because the process had halted (its handler panicked).
    pub events_dropped: u64,
    /// Messages the process refused as breaking the protocol (a forged or corrupt message);
    /// it kept serving.
    #[serde(default)]
    pub messages_refused: u64,
}

/// Asks a running host (or anything else waiting on it) to stop. Cheap to clone; triggering is
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

/// Binds `cfg.listen` and runs the host until shutdown (see [`run_host_on`]).
pub fn run_host<P: Protocol>(cfg: HostConfig, processes: Vec<HostedProcess<P>>, shutdown: ShutdownHandle) -> Result<HostReport, NetError> {
    let listener = std::net::TcpListener::bind(cfg.listen).map_err(io_context(format!("bind {}", cfg.listen)))?;
    run_host_on(listener, cfg, processes, shutdown)
}

/// Runs the host's processes on an already bound listener until `shutdown` is triggered or a
/// Shutdown frame arrives, then returns what they did. Blocks the calling thread, which becomes
/// the protocol loop (so processes need not be `Send`). `processes` must be exactly the ones the
/// configuration gives this host, in any order; each is started once, in id order, before any
/// event.
///
/// Taking a bound listener is what makes readiness race-free: connections to it queue in the
/// kernel from the moment it is bound, so a parent may announce (or a test may hand out) its
/// address before this function is even called.
pub fn run_host_on<P: Protocol>(
    listener: std::net::TcpListener,
    cfg: HostConfig,
    processes: Vec<HostedProcess<P>>,
    shutdown: ShutdownHandle,
) -> Result<HostReport, NetError> {
    let (dir, processes) = checked(&listener, &cfg, processes)?;
    run::run(listener, cfg, Arc::new(dir), processes, shutdown, None, None)
}

/// [`run_host_on`], with clients of this OS process served through `local` besides those that
/// connect to the listener: the application's own threads, in the deployment where Ensemble is
/// linked into the application ([`LocalClients`]). Fails if `local` served a host already.
pub fn run_host_with_local_clients<P: Protocol>(
    listener: std::net::TcpListener,
    cfg: HostConfig,
    processes: Vec<HostedProcess<P>>,
    shutdown: ShutdownHandle,
    local: &LocalClients<P::Evidence>,
) -> Result<HostReport, NetError> {
    run_with_local(listener, cfg, processes, shutdown, local, None)
}

/// [`run_host_with_local_clients`], with the local clients themselves run on the loop's thread,
/// as tasks of its runtime ([`ClientsOnLoop`], handed over through `clients` once the caller
/// knows the hosts' addresses, which it learns after this host is bound): their requests and
/// replies wake no other thread. The loop serves from the start; if `clients` is dropped
/// instead, it serves without them.
pub fn run_host_with_clients_on_loop<P: Protocol>(
    listener: std::net::TcpListener,
    cfg: HostConfig,
    processes: Vec<HostedProcess<P>>,
    shutdown: ShutdownHandle,
    local: &LocalClients<P::Evidence>,
    clients: ClientsAwaited<P::Evidence>,
) -> Result<HostReport, NetError> {
    run_with_local(listener, cfg, processes, shutdown, local, Some(clients))
}

/// A host with a way in for local clients, which it takes (one host per way in), and maybe
/// those clients to run on its loop.
fn run_with_local<P: Protocol>(
    listener: std::net::TcpListener,
    cfg: HostConfig,
    processes: Vec<HostedProcess<P>>,
    shutdown: ShutdownHandle,
    local: &LocalClients<P::Evidence>,
    clients: Option<ClientsAwaited<P::Evidence>>,
) -> Result<HostReport, NetError> {
    let (dir, processes) = checked(&listener, &cfg, processes)?;
    let inputs = local
        .take_inputs()
        .ok_or_else(|| NetError::Config(format!("host {}: its local clients' way in served a host already", cfg.host)))?;
    run::run(listener, cfg, Arc::new(dir), processes, shutdown, Some(inputs), clients)
}

/// What every host checks before it serves: the cluster's layout, no plain wire beyond
/// loopback, and exactly the processes the configuration gives it (returned in id order).
fn checked<P: Protocol>(
    listener: &std::net::TcpListener,
    cfg: &HostConfig,
    mut processes: Vec<HostedProcess<P>>,
) -> Result<(Directory, Vec<HostedProcess<P>>), NetError> {
    let dir = cfg.directory()?;
    let listen = listener.local_addr().map_err(io_context("read the listener's address"))?;
    if cfg.keys.is_none() && !listen.ip().is_loopback() {
        return Err(NetError::Config(format!(
            "host {}: refusing to listen on {listen} without a cluster secret: anyone who can reach it could steer the cluster (set `secret` in the cluster file)",
            cfg.host
        )));
    }
    processes.sort_by_key(|p| p.process.id());
    let given: Vec<ProcessId> = processes.iter().map(|p| p.process.id()).collect();
    if given != cfg.processes() {
        return Err(NetError::Config(format!(
            "host {} runs processes {} but was handed {}",
            cfg.host,
            list(cfg.processes()),
            list(&given)
        )));
    }
    Ok((dir, processes))
}
