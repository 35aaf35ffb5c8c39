//! What a run did, for sanity checks and for reporting CPU utilisation next to latency.

use ensemble_core::{ProcessId, Time};
use std::time::Duration;

/// Messages lost, by cause. A message is counted once, under the first cause that lost it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DropCounts {
    /// Lost by a [`crate::FaultKind::Drop`] rule.
    pub rule: u64,
    /// Lost to a partition.
    pub partition: u64,
    /// Reached a process while it was crashed.
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

/// Per-process counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcessStats {
    /// Cores of the pool the process runs on (its pinned core, or its machine's unpinned ones).
    pub cores: u32,
    /// Sum of the service times of CPU jobs this process completed, plus the CPU time its
    /// handlers charged (over all cores).
    pub busy: Duration,
    /// Messages and requests handled (CPU jobs that called `on_event`).
    pub handled: u64,
    /// Storage jobs run.
    pub storage_jobs: u64,
    /// Longest the CPU's wait queue got (jobs waiting for a core, not those running).
    pub max_cpu_queue: usize,
    /// Jobs lost from the CPU (queued or running) when the process crashed.
    pub jobs_lost_in_crash: u64,
    pub crashes_losing_state: u64,
    /// Times the process was rebuilt by the recovery after losing its state.
    pub recoveries: u64,
    /// Messages it refused as breaking the protocol ([`Effect::Refuse`](ensemble_core::Effect::Refuse)).
    pub messages_refused: u64,
    /// What the first refused message was, and who sent it.
    pub first_refusal: Option<String>,
    /// Refusals no duplicated message explains (see [`SimStats::refusals_of_duplicates`]),
    /// counted as the handler refuses, and the first of them.
    pub refusals_unexplained: u64,
    pub first_unexplained_refusal: Option<String>,
}

impl ProcessStats {
    /// Fraction of the process's pool's core time it kept busy over `elapsed`.
    pub fn utilisation(&self, elapsed: Duration) -> f64 {
        let capacity = elapsed.as_secs_f64() * f64::from(self.cores.max(1));
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
    /// Messages handed to the network: process to process, client requests and replies, lost or
    /// not (a duplicate is not counted again).
    pub messages_sent: u64,
    /// Messages a fault rule delivered twice.
    pub messages_duplicated: u64,
    /// Refusals of a message the network duplicated, at most one per duplication (of the
    /// original or of the copy, whichever came second to the protocol's eyes): what a protocol
    /// that must refuse copies may refuse.
    pub refusals_of_duplicates: u64,
    pub messages_dropped: DropCounts,
    /// Storage jobs run (all processes).
    pub storage_jobs: u64,
    /// Timers that fired and were delivered (nodes and clients).
    pub timers_fired: u64,
    /// Process timers that fired while their process was paused.
    pub timers_discarded: u64,
    /// Events that reached a stalled process and waited for the stall's end.
    pub events_held_in_stalls: u64,
    /// Time messages spent waiting for their site's outgoing link, all added up.
    pub uplink_wait: std::time::Duration,
    /// Longest the event queue got.
    pub max_queue_len: usize,
    /// Indexed by process id.
    pub processes: Vec<ProcessStats>,
}

impl SimStats {
    pub fn process(&self, id: ProcessId) -> Option<&ProcessStats> {
        self.processes.get(id.0 as usize)
    }

    /// Utilisation of `id`'s cores from time zero to `now`.
    pub fn utilisation(&self, id: ProcessId, now: Time) -> f64 {
        self.process(id).map_or(0.0, |n| n.utilisation(now.as_duration()))
    }
}
