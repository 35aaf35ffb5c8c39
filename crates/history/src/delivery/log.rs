//! The input of the delivery checker: what a run of a group-communication primitive did, as a
//! typed value that protocols build in memory and that serde reads and writes as JSON
//! (`FORMAT.md`, "Delivery logs").
//!
//! Unknown fields are parse errors, for the same reason as in a transaction history: a misspelt
//! `correct` would otherwise silently make a crashed process correct and a checker verdict wrong.

use crate::json::{load_json, parse_json, save_json, HistoryError};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// A message's identity, unique over the run (the checker's notion of "the same message").
pub type MessageId = u64;
/// A group's identity: the groups Γ of the papers, to which messages are cast.
pub type GroupId = u32;
/// A process's identity: the number inside `ensemble_core::ProcessId` (this crate depends on
/// nothing of ours, so it takes the bare number).
pub type ProcessNo = u32;

/// One group: its id and its member processes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Group {
    pub id: GroupId,
    pub members: Vec<ProcessNo>,
}

/// One invocation of the primitive's `cast` (A-MCast, R-MCast, AB-Cast, AM_pw-Cast, …).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cast {
    pub message: MessageId,
    /// The process that cast it. It need not be a member of any group (a client may cast).
    pub caster: ProcessNo,
    /// `m.dst`: the groups it is addressed to.
    pub destinations: Vec<GroupId>,
    /// When it was cast (virtual time or a step number; only the order matters). A caster's
    /// casts are ordered by `at`, ties by their position in the log; FIFO order uses that order.
    #[serde(default)]
    pub at: u64,
    /// Whether the caster was correct (never crashed during the run). Absent: the caster's own
    /// process log says (and a caster with neither is a malformed log).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correct: Option<bool>,
}

impl Cast {
    /// A cast at time 0 whose caster's correctness comes from its process log.
    pub fn new(
        message: MessageId,
        caster: ProcessNo,
        destinations: impl IntoIterator<Item = GroupId>,
    ) -> Cast {
        Cast {
            message,
            caster,
            destinations: destinations.into_iter().collect(),
            at: 0,
            correct: None,
        }
    }

    pub fn at(mut self, at: u64) -> Cast {
        self.at = at;
        self
    }

    /// States the caster's correctness on the cast itself (needed when the caster has no
    /// process log, e.g. a client outside every group).
    pub fn caster_correct(mut self, correct: bool) -> Cast {
        self.correct = Some(correct);
        self
    }
}

/// What one process delivered, in order, and whether it was correct.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessLog {
    pub process: ProcessNo,
    /// Correct = never crashed during the run (a process that crashed and recovered is not
    /// correct; see the module documentation for why). Default `true`.
    #[serde(default = "yes")]
    pub correct: bool,
    /// The ids of the messages it delivered, in delivery order, repetitions included (a repeated
    /// delivery is an integrity violation, so it must be recorded, not deduplicated).
    #[serde(default)]
    pub delivered: Vec<MessageId>,
}

fn yes() -> bool {
    true
}

/// `count` steps (sends or receipts of protocol messages) that `process` took on behalf of
/// `message`; `message: None` is a step on behalf of no cast in particular (heartbeats, leader
/// election), which genuineness judges by the letter of its definition (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    pub process: ProcessNo,
    #[serde(default)]
    pub message: Option<MessageId>,
    #[serde(default = "one")]
    pub count: u64,
}

fn one() -> u64 {
    1
}

/// Everything the delivery checker needs from a run: the groups, every cast, every process's
/// delivery sequence and correctness, and the steps taken on behalf of each message.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeliveryLog {
    pub groups: Vec<Group>,
    pub casts: Vec<Cast>,
    pub processes: Vec<ProcessLog>,
    #[serde(default)]
    pub steps: Vec<Step>,
}

impl DeliveryLog {
    pub fn new() -> DeliveryLog {
        DeliveryLog::default()
    }

    /// Adds a group and a (correct, empty) process log for each member that has none yet.
    pub fn add_group(&mut self, id: GroupId, members: impl IntoIterator<Item = ProcessNo>) {
        let members: Vec<ProcessNo> = members.into_iter().collect();
        for &p in &members {
            self.process_mut(p);
        }
        self.groups.push(Group { id, members });
    }

    pub fn add_cast(&mut self, cast: Cast) {
        self.casts.push(cast);
    }

    /// Appends `message` to `process`'s delivery sequence (creating a correct process log).
    pub fn deliver(&mut self, process: ProcessNo, message: MessageId) {
        self.process_mut(process).delivered.push(message);
    }

    /// Marks `process` as not correct: it crashed at some point of the run.
    pub fn crash(&mut self, process: ProcessNo) {
        self.process_mut(process).correct = false;
    }

    /// Records `count` steps of `process` on behalf of `message` (`None`: of no message).
    pub fn add_steps(&mut self, process: ProcessNo, message: Option<MessageId>, count: u64) {
        self.steps.push(Step {
            process,
            message,
            count,
        });
    }

    /// The log of `process`, created (correct, nothing delivered) if missing. A linear search:
    /// runs have tens of processes, and the checker itself never calls this.
    pub fn process_mut(&mut self, process: ProcessNo) -> &mut ProcessLog {
        let i = match self.processes.iter().position(|l| l.process == process) {
            Some(i) => i,
            None => {
                self.processes.push(ProcessLog {
                    process,
                    correct: true,
                    delivered: Vec::new(),
                });
                self.processes.len() - 1
            }
        };
        &mut self.processes[i]
    }

    /// Reads a delivery log from a JSON file.
    pub fn load(path: impl AsRef<Path>) -> Result<DeliveryLog, HistoryError> {
        load_json(path.as_ref())
    }

    /// Parses a delivery log from JSON text; errors name `<input>` as the file.
    pub fn from_json_str(text: &str) -> Result<DeliveryLog, HistoryError> {
        parse_json(text, Path::new("<input>"))
    }

    /// Writes the log as compact JSON.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), HistoryError> {
        save_json(self, path.as_ref())
    }

    pub fn to_json_string(&self) -> String {
        serde_json::to_string(self).expect("a delivery log always serializes")
    }
}

