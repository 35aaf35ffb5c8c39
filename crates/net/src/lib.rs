//! The real runtime: drives the same sans-IO [`Process`](ensemble_core::Process),
//! [`Client`](ensemble_core::Client) and [`Storage`](ensemble_core::Storage) code as the
//! simulator, for any [`Protocol`](ensemble_core::Protocol), over TCP, with real threads, timers
//! and database connections.
//!
//! A cluster is a [`Deployment`](ensemble_core::Deployment) run as *hosts*: one OS process per
//! group of processes that the deployment puts in one `os_process` (every other process is a
//! host of its own). A host runs all its processes on one protocol loop; messages between them
//! never leave it, messages to other hosts' processes travel as frames over TCP.
//!
//! Where to look:
//! - [`frame`]: the wire format (length-prefixed, versioned, postcard, process-addressed) and its
//!   typed errors;
//! - [`host`]: the host — one protocol loop owning its processes, tokio for the sockets, how each
//!   effect is carried out;
//! - [`workers`]: the storage worker pool, one per process with storage, one storage per thread;
//! - [`client`]: the client driver;
//! - [`cluster`]: the cluster spec and readiness helpers for running hosts as OS processes;
//! - [`wan`]: WAN emulation on loopback (topology delays between machines).
//!
//! A host process (what `ensemble node` does):
//! ```no_run
//! # use ensemble_core::{Process, Protocol, ProcessId, DynStorage};
//! # fn demo<P: Protocol>(
//! #     build: impl Fn(ProcessId, &str) -> Box<dyn Process<P>>,
//! #     open_db: impl Fn(ProcessId, usize) -> DynStorage<P> + Clone + Send + Sync + 'static,
//! # ) -> Result<(), ensemble_net::NetError> {
//! use ensemble_net::cluster::{bind_listener, ready_line};
//! use ensemble_net::{ClusterSpec, HostId, HostedProcess, NetError, ShutdownHandle};
//! let spec = ClusterSpec::load(std::path::Path::new("cluster.toml"))?;
//! let cfg = spec.host_config(HostId(0))?;
//! // This host's processes, built from what the deployment says they are.
//! let processes = cfg
//!     .processes()
//!     .iter()
//!     .map(|&p| {
//!         let kind = &cfg.deployment.processes[p.0 as usize].kind;
//!         let open_db = open_db.clone();
//!         HostedProcess { process: build(p, kind), storage: Some(std::sync::Arc::new(move |w| open_db(p, w))), serial_lane: None }
//!     })
//!     .collect();
//! let listener = bind_listener(cfg.listen)?;
//! let addr = listener.local_addr().map_err(|e| NetError::Config(e.to_string()))?;
//! println!("{}", ready_line(cfg.host, addr)); // the parent waits for this line
//! let report = ensemble_net::run_host_on(listener, cfg, processes, ShutdownHandle::new())?;
//! eprintln!("{report:?}");
//! # Ok(()) }
//! ```
//! The parent reads each child's stdout with [`cluster::wait_for_ready_line`], runs the clients
//! with [`run_clients`] (config from [`ClusterSpec::client_config`]), then stops every host with
//! [`cluster::send_shutdown`].

pub mod admin;
mod agenda;
mod alarm;
pub mod auth;
pub mod client;
pub mod cluster;
mod conn;
pub mod error;
pub mod frame;
pub mod host;
mod layout;
pub mod wan;
pub mod workers;

pub use client::{run_clients, run_clients_beside, ClientDriverConfig, ClientReport, ClientSlot, ProcessAddr, RequestHold, StopReason};
pub use admin::BlockingConn;
pub use auth::{KeyRing, Secret};
pub use cluster::{probe, ClusterSpec, HostStatus, TopologyRef};
pub use error::NetError;
pub use frame::{Frame, FrameError, FrameKind, Hello, HostId};
pub use host::{clients_hand_over, run_host, run_host_on, run_host_with_clients_on_loop, run_host_with_local_clients, ClientsAwaited, ClientsHandOver, ClientsOnLoop, HostConfig, LocalClients, HostReport, Limits, HostedProcess, ProcessReport, ProcessTraffic, ShutdownHandle};
pub use layout::HostSpec;
pub use workers::StorageFactory;
