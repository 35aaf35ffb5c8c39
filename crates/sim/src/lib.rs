//! A deterministic discrete-event simulator for Ensemble's sans-IO protocols.
//!
//! It runs [`Node`](ensemble_core::Node)s (one per scale-out instance, each with its own
//! [`Storage`](ensemble_core::Storage)) and [`Client`](ensemble_core::Client)s in virtual time, over
//! the network and machines a [`Topology`](ensemble_core::topology::Topology) describes, so that an
//! experiment with tens of instances across five continents runs in seconds and says what the
//! protocol, not the test machine, costs.
//!
//! # Determinism
//!
//! A run is a pure function of its inputs and seed: one thread; virtual time
//! ([`Time`](ensemble_core::Time), nanoseconds); events at the same instant run in the order they
//! were scheduled; every random draw comes from a `ChaCha8Rng` of the seed, with one stream per
//! purpose (network delays, fault decisions) so that a change in one purpose's draws does not
//! shift the others; no wall clock and no hash-order iteration. Same seed, same run, byte for byte.
//!
//! # Model
//!
//! * **Network.** Every message (node to node, client request, reply) from site `a` to site `b`
//!   takes `topology.sample_delay(a, b, bytes, rng)`; `bytes` is the postcard size, computed only
//!   when the topology limits bandwidth. Links are FIFO like TCP: a message never overtakes an
//!   earlier one from the same sender to the same receiver. A node sending to itself goes through
//!   its site's intra-site delay like any other message.
//! * **CPU.** Each instance has `topology.cpu.cores` cores and one FIFO queue. Handling a message
//!   or request costs `message_time()`, and the node's `on_event` runs when that job finishes;
//!   a storage job costs `execute_time(txn)` or `apply_time(row changes)`, and when it finishes
//!   `storage.run` is called and its `StorageDone` is delivered at once, at no further cost.
//!   Timers cost nothing. Clients have no CPU. Queueing and saturation therefore appear as on real
//!   machines: two cores and 5 ms jobs saturate at 400 jobs/s.
//! * **Faults.** A [`FaultPlan`] drops messages with a probability, delays them, or partitions
//!   groups of instances, each in a window of virtual time; and crashes instances with an optional
//!   restart. Crashes are pause-style (see [`Crash`]): the instance loses its CPU queue and misses
//!   everything while down, then resumes with its in-memory state.
//!
//! # Use
//!
//! ```
//! use ensemble_core::{topology::Topology, ClientId, InstanceId, Time};
//! use ensemble_sim::toy::{ClosedLoopClient, ToyNode, ToyStorage};
//! use ensemble_sim::Simulation;
//!
//! let mut sim = Simulation::new(Topology::wan5(), 42)?;
//! sim.add_node(ToyNode::new(InstanceId(0)), 0, ToyStorage::new(InstanceId(0)))?;
//! sim.add_client(Box::new(ClosedLoopClient::new(ClientId(1), InstanceId(0), "t")), 1)?;
//! sim.faults_mut().crash(InstanceId(0), Time(2_000_000_000), None);
//! let mut done = 0;
//! sim.run_until(Time(1_000_000_000), &mut |_now, _completion| done += 1);
//! assert_eq!(done, 3); // a Japan client of a Germany instance: 253 ms round trips plus 1 ms
//! assert!(sim.stats().events > 0);
//! # Ok::<(), ensemble_sim::SimError>(())
//! ```
//!
//! The API, in short:
//!
//! ```text
//! Simulation::<N: Node, S: Storage>::new(topology, seed) -> Result<Self, SimError>
//!   .add_node(node, site, storage) -> Result<(), SimError>   // instance id = node.id()
//!   .add_client(Box<dyn Client>, site) -> Result<(), SimError>
//!   .faults_mut() -> &mut FaultPlan
//!   .run_until(until, &mut |now, &Completion| ..)            // starts nodes and clients first
//!   .now() / .stats() / .cpu_utilisation(id) / .node(id) / .node_mut(id)
//!   .storage(id) / .storage_mut(id) / .into_storages()
//!   .enable_trace() / .take_trace()                          // every event, for debugging
//! ```

mod faults;
mod queue;
mod simulation;
mod stats;
pub mod toy;

pub use faults::{Crash, Endpoint, FaultKind, FaultPlan, FaultRule, Links, Window};
pub use simulation::{SimError, Simulation};
pub use stats::{DropCounts, NodeStats, SimStats};
