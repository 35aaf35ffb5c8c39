//! A deterministic discrete-event simulator for Ensemble's sans-IO protocols.
//!
//! It runs the [`Process`](ensemble_core::Process)es of any
//! [`Protocol`](ensemble_core::Protocol), placed on machines as a
//! [`Deployment`](ensemble_core::Deployment) says, each with an optional
//! [`Storage`](ensemble_core::Storage), and [`Client`](ensemble_core::Client)s, in virtual time,
//! over the network and costs a [`Topology`](ensemble_core::topology::Topology) describes, so that
//! an experiment with tens of processes across five continents runs in seconds and says what the
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
//! * **Network.** Every message between processes of different machines, and every client
//!   request and reply, from site `a` to site `b` takes `topology.sample_delay(a, b, bytes, rng)`;
//!   `bytes` is the postcard size, computed only when the topology limits bandwidth. Messages
//!   between processes of one machine, and to self, take `topology.machine_local_delay()` and draw
//!   nothing (the real runtime likewise keeps them off the network). Links are FIFO like TCP: a
//!   message never overtakes an earlier one from the same sender to the same receiver, unless a
//!   reorder fault takes it out of line.
//! * **CPU.** Each machine has cores. A process pinned to a core queues for that core; the others
//!   share the machine's unpinned cores and one FIFO queue. Handling a message or request costs
//!   `message_time()`, and the process's `on_event` runs when that job finishes; if the handler
//!   pushes [`Effect::Charge`](ensemble_core::Effect::Charge), the core stays busy that much
//!   longer and the handler's effects take effect then. A process's effects take effect in the
//!   order its handlers ran, as in the real runtime's one event loop: those of a handler that
//!   finishes while an earlier one still charges its core wait behind them, so that a message
//!   never leaves before one its process wrote earlier. A storage job costs what the process said
//!   it costs; when it finishes `storage.run` is called and its `StorageDone` is handled at once,
//!   at no further cost. Timers cost nothing; a cancelled timer never fires, and setting a timer
//!   whose id is still pending re-arms it (only the latest setting fires). Clients have no CPU.
//! * **Faults.** A [`FaultPlan`] drops, duplicates, delays or reorders messages with a
//!   probability, or partitions sets of processes, each in a window of virtual time; and crashes
//!   processes, pause-style or losing their volatile state, with an optional restart at which a
//!   [`Recovery`] rebuilds the process from its storage ([`Crash`]); and stalls processes, which
//!   then take what reached them, in order, when the stall ends ([`Stall`]).
//!   [`FaultPlan::random`] draws a whole plan from a seed.
//!
//! # Use
//!
//! ```
//! use ensemble_core::{topology::Topology, ClientId, Deployment, ProcessId, Time};
//! use ensemble_sim::toy::{ClosedLoopClient, ToyNode, ToyStorage};
//! use ensemble_sim::Simulation;
//!
//! let deployment = Deployment::one_per_machine(&[0], 2, "toy"); // one machine in Germany
//! let mut sim = Simulation::new(Topology::wan5(), deployment, 42)?;
//! sim.add_process(Box::new(ToyNode::new(ProcessId(0))), Some(ToyStorage::new(ProcessId(0))))?;
//! sim.add_client(Box::new(ClosedLoopClient::new(ClientId(1), ProcessId(0), "t")), 1)?;
//! sim.faults_mut().crash(ProcessId(0), Time(2_000_000_000), None);
//! let mut done = 0;
//! sim.run_until(Time(1_000_000_000), &mut |_now, _completion| done += 1);
//! assert_eq!(done, 3); // a Japan client of a Germany process: 253 ms round trips plus 1 ms
//! assert!(sim.stats().events > 0);
//! # Ok::<(), ensemble_sim::SimError>(())
//! ```
//!
//! The API, in short:
//!
//! ```text
//! Simulation::<P: Protocol, S: Storage>::new(topology, deployment, seed) -> Result<Self, SimError>
//!   .add_process(Box<dyn Process<P>>, Option<S>) -> Result<(), SimError>  // placed by the deployment
//!   .set_recovery(Box<dyn FnMut(ProcessId, Option<&mut S>) -> Box<dyn Process<P>>>)
//!   .add_client(Box<dyn Client<P::Evidence>>, site) -> Result<(), SimError>
//!   .faults_mut() -> &mut FaultPlan
//!   .run_until(until, &mut |now, &Completion| ..)            // starts processes and clients first
//!   .now() / .stats() / .cpu_utilisation(id) / .process(id) / .process_reports()
//!   .storage(id) / .storage_mut(id) / .into_storages()
//!   .enable_trace() / .take_trace()                          // every event, for debugging
//! ```

mod faults;
mod queue;
mod simulation;
mod stats;
pub mod toy;

pub use faults::{Crash, Endpoint, FaultKind, FaultPlan, FaultRule, Links, RandomFaults, Stall, Window};
pub use simulation::{ProcessReport, Recovery, SimError, Simulation};
pub use stats::{DropCounts, ProcessStats, SimStats};
