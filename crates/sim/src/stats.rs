//! What a run did, for sanity checks and for reporting CPU utilisation next to latency.

use ensemble_core::{InstanceId, Time};
use std::time::Duration;

/// Messages lost, by cause. A message is counted once, under the first cause that lost it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DropCounts {
    /// Lost by a [`crate::FaultKind::Drop`] rule.
    pub rule: u64,
    /// Lost to a partition.
    pub partition: u64,
    /// Reached an instance while it was crashed.
    pub crashed: u64,
    /// Addressed to an instance or client the simulation does not have. Protocols should never
    /// do this; a non-zero count points at a wiring mistake in the experiment.
    pub unknown_destination: u64,
}

impl DropCounts {
    pub fn total(&self) -> u64 {
        self.rule + self.partition + self.crashed + self.unknown_destination
    }
}

/// Per-instance counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeStats {
    /// Sum of the service times of CPU jobs this instance completed (over all cores).
    pub busy: Duration,
    /// Messages and requests handled (CPU jobs that called `on_event`).
    pub handled: u64,
    /// Storage jobs run.
    pub storage_jobs: u64,
    /// Longest the CPU's wait queue got (jobs waiting for a core, not those running).
    pub max_cpu_queue: usize,
    /// Jobs lost from the CPU (queued or running) when the instance crashed.
    pub jobs_lost_in_crash: u64,
}

impl NodeStats {
    /// Fraction of the instance's total core time spent busy over `elapsed`.
    pub fn utilisation(&self, cores: u32, elapsed: Duration) -> f64 {
        let capacity = elapsed.as_secs_f64() * f64::from(cores.max(1));
        if capacity > 0.0 {
            self.busy.as_secs_f64() / capacity
        } else {
            0.0
        }
    }
}

/// Counters of a whole run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SimStats {
    /// Events taken off the queue, including those discarded at a crashed instance.
    pub events: u64,
    /// Messages handed to the network: node to node, client requests and replies, lost or not.
    pub messages_sent: u64,
    pub messages_dropped: DropCounts,
    /// Storage jobs run (all instances).
    pub storage_jobs: u64,
    /// Timers that fired and were delivered (nodes and clients).
    pub timers_fired: u64,
    /// Node timers that fired while their instance was crashed.
    pub timers_discarded: u64,
    /// Longest the event queue got.
    pub max_queue_len: usize,
    /// Indexed by instance id; ids without an instance keep zeroes.
    pub nodes: Vec<NodeStats>,
}

impl SimStats {
    pub fn node(&self, id: InstanceId) -> Option<&NodeStats> {
        self.nodes.get(id.0 as usize)
    }

    /// Utilisation of `id`'s CPU from time zero to `now`.
    pub fn utilisation(&self, id: InstanceId, cores: u32, now: Time) -> f64 {
        self.node(id).map_or(0.0, |n| n.utilisation(cores, now.as_duration()))
    }
}
