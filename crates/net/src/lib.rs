//! The real runtime: drives the same sans-IO [`Node`](ensemble_core::Node),
//! [`Client`](ensemble_core::Client) and [`Storage`](ensemble_core::Storage) code as the
//! simulator, over TCP, with real threads, timers and database connections.
//!
//! Where to look:
//! - [`frame`]: the wire format (length-prefixed, versioned, postcard) and its typed errors;
//! - [`node`]: the node server — one protocol loop owning the node, tokio for the sockets;
//! - [`workers`]: the storage worker pool, one database connection per thread;
//! - [`client`]: the client driver;
//! - [`cluster`]: the cluster spec and readiness helpers for running nodes as processes;
//! - [`wan`]: WAN emulation on loopback (topology delays on every outgoing frame).
//!
//! A node process (what `ensemble node` does):
//! ```no_run
//! # fn demo<N: ensemble_core::Node, S: ensemble_core::Storage + 'static>(
//! #     node: N, open_db: impl Fn(usize) -> S + Send + Sync + 'static) -> Result<(), ensemble_net::NetError> {
//! use ensemble_net::cluster::{bind_listener, ready_line};
//! use ensemble_net::{ClusterSpec, NetError, ShutdownHandle};
//! let spec = ClusterSpec::load(std::path::Path::new("cluster.toml"))?;
//! let cfg = spec.node_config(ensemble_core::InstanceId(0))?;
//! let listener = bind_listener(cfg.listen)?;
//! let addr = listener.local_addr().map_err(|e| NetError::Config(e.to_string()))?;
//! println!("{}", ready_line(cfg.instance, addr)); // the parent waits for this line
//! let report = ensemble_net::run_node_on(listener, cfg, node, open_db, ShutdownHandle::new())?;
//! eprintln!("{report:?}");
//! # Ok(()) }
//! ```
//! The parent reads each child's stdout with [`cluster::wait_for_ready_line`], runs the clients
//! with [`run_clients`] (config from [`ClusterSpec::client_config`]), then stops every node with
//! [`cluster::send_shutdown`].

pub mod client;
pub mod cluster;
mod conn;
pub mod error;
pub mod frame;
pub mod node;
pub mod wan;
pub mod workers;

pub use client::{run_clients, ClientDriverConfig, ClientReport, ClientSlot, StopReason};
pub use cluster::{free_local_addrs, ClusterSpec, InstanceSpec, TopologyRef};
pub use error::NetError;
pub use frame::{Frame, FrameError, FrameKind, Hello};
pub use node::{run_node, run_node_on, NodeConfig, NodeReport, ShutdownHandle};
