//! Where processes run: machines (a site and some cores), processes placed on them, and groups of
//! processes that replicate the same data.
//!
//! The simulator gives each machine its cores: a process pinned to a core has that core's queue
//! (shared with whatever else is pinned there); the others share the machine's unpinned cores and
//! one queue. Messages between processes of one machine (and to self) take the topology's
//! machine-local delay, not the network's. The real runtime runs the processes that name the same
//! `os_process` in one OS process, and every other process in its own.

use crate::ProcessId;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Deployment {
    pub machines: Vec<Machine>,
    /// One entry per process, ids dense from 0 (entry `i` places process `i`).
    pub processes: Vec<Placement>,
    #[serde(default)]
    pub groups: Vec<Group>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Machine {
    /// Index into the topology's sites.
    pub site: usize,
    pub cores: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Placement {
    pub process: ProcessId,
    /// Index into [`Deployment::machines`].
    pub machine: usize,
    /// The core this process runs on alone (with anything else pinned there); `None`: it shares
    /// the machine's unpinned cores.
    #[serde(default)]
    pub pinned: Option<u32>,
    /// Processes naming the same number run in one OS process in the real runtime.
    #[serde(default)]
    pub os_process: Option<u32>,
    /// What kind of process this is, in the protocol's words ("instance", "replica",
    /// "coordinator"): the protocol's harness builds it from this.
    pub kind: String,
}

/// Processes that replicate the same data (a partition's replicas, a consensus group).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Group {
    pub name: String,
    pub members: Vec<ProcessId>,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum DeploymentError {
    #[error("deployment: process entry {index} places {found}; entries must be in id order from p0")]
    NotDense { index: usize, found: ProcessId },
    #[error("deployment: {process} is on machine {machine}, but there are {machines} machine(s)")]
    UnknownMachine { process: ProcessId, machine: usize, machines: usize },
    #[error("deployment: machine {machine} is at site {site}, but the topology has {sites} site(s)")]
    UnknownSite { machine: usize, site: usize, sites: usize },
    #[error("deployment: machine {machine} has no cores")]
    NoCores { machine: usize },
    #[error("deployment: {process} is pinned to core {core} of machine {machine}, which has {cores} core(s)")]
    NoSuchCore { process: ProcessId, machine: usize, core: u32, cores: u32 },
    #[error("deployment: machine {machine} has unpinned processes but every core is pinned")]
    NoSharedCore { machine: usize },
    #[error("deployment: group `{group}` names {process}, which is not deployed")]
    UnknownMember { group: String, process: ProcessId },
}

impl Deployment {
    /// One machine per process, each at the given site with `cores` cores, every process
    /// unpinned and in its own OS process: the shape of a scale-out instance per server.
    pub fn one_per_machine(sites: &[usize], cores: u32, kind: &str) -> Deployment {
        Deployment {
            machines: sites.iter().map(|&site| Machine { site, cores }).collect(),
            processes: (0..sites.len())
                .map(|i| Placement { process: ProcessId(i as u32), machine: i, pinned: None, os_process: None, kind: kind.into() })
                .collect(),
            groups: Vec::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.processes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.processes.is_empty()
    }

    pub fn placement(&self, p: ProcessId) -> Option<&Placement> {
        self.processes.get(p.0 as usize)
    }

    /// The site a process sits at.
    pub fn site_of(&self, p: ProcessId) -> Option<usize> {
        self.placement(p).map(|pl| self.machines[pl.machine].site)
    }

    pub fn group(&self, name: &str) -> Option<&Group> {
        self.groups.iter().find(|g| g.name == name)
    }

    /// The processes that share an OS process with `p` in the real runtime (including `p`).
    pub fn os_process_of(&self, p: ProcessId) -> Vec<ProcessId> {
        match self.placement(p).and_then(|pl| pl.os_process) {
            None => vec![p],
            Some(k) => self.processes.iter().filter(|pl| pl.os_process == Some(k)).map(|pl| pl.process).collect(),
        }
    }

    /// The OS processes of the real runtime: each a list of process ids, in order of their
    /// first process.
    pub fn os_processes(&self) -> Vec<Vec<ProcessId>> {
        let mut out: Vec<Vec<ProcessId>> = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        for pl in &self.processes {
            if seen.contains(&pl.process) {
                continue;
            }
            let members = self.os_process_of(pl.process);
            seen.extend(members.iter().copied());
            out.push(members);
        }
        out
    }

    pub fn validate(&self, sites: usize) -> Result<(), DeploymentError> {
        for (machine, m) in self.machines.iter().enumerate() {
            if m.site >= sites {
                return Err(DeploymentError::UnknownSite { machine, site: m.site, sites });
            }
            if m.cores == 0 {
                return Err(DeploymentError::NoCores { machine });
            }
        }
        for (index, pl) in self.processes.iter().enumerate() {
            if pl.process.0 as usize != index {
                return Err(DeploymentError::NotDense { index, found: pl.process });
            }
            let Some(m) = self.machines.get(pl.machine) else {
                return Err(DeploymentError::UnknownMachine { process: pl.process, machine: pl.machine, machines: self.machines.len() });
            };
            if let Some(core) = pl.pinned {
                if core >= m.cores {
                    return Err(DeploymentError::NoSuchCore { process: pl.process, machine: pl.machine, core, cores: m.cores });
                }
            }
        }
        for (machine, m) in self.machines.iter().enumerate() {
            let on: Vec<&Placement> = self.processes.iter().filter(|p| p.machine == machine).collect();
            let pinned: std::collections::BTreeSet<u32> = on.iter().filter_map(|p| p.pinned).collect();
            if on.iter().any(|p| p.pinned.is_none()) && pinned.len() as u32 >= m.cores {
                return Err(DeploymentError::NoSharedCore { machine });
            }
        }
        for g in &self.groups {
            if let Some(p) = g.members.iter().find(|p| p.0 as usize >= self.processes.len()) {
                return Err(DeploymentError::UnknownMember { group: g.name.clone(), process: *p });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_names_what_is_wrong() {
        let mut d = Deployment::one_per_machine(&[0, 1], 2, "instance");
        assert_eq!(d.validate(2), Ok(()));
        assert_eq!(d.validate(1), Err(DeploymentError::UnknownSite { machine: 1, site: 1, sites: 1 }));
        d.processes[1].pinned = Some(2);
        assert!(d.validate(2).unwrap_err().to_string().contains("pinned to core 2 of machine 1, which has 2 core(s)"));
        d.processes[1].pinned = Some(0);
        d.processes.push(Placement { process: ProcessId(2), machine: 1, pinned: Some(1), os_process: None, kind: "x".into() });
        d.processes.push(Placement { process: ProcessId(3), machine: 1, pinned: None, os_process: None, kind: "x".into() });
        assert_eq!(d.validate(2), Err(DeploymentError::NoSharedCore { machine: 1 }));
        d.processes[3].process = ProcessId(7);
        assert_eq!(d.validate(2), Err(DeploymentError::NotDense { index: 3, found: ProcessId(7) }));
    }

    #[test]
    fn os_processes_group_by_number() {
        let mut d = Deployment::one_per_machine(&[0, 0, 0], 1, "replica");
        d.processes[0].os_process = Some(5);
        d.processes[2].os_process = Some(5);
        assert_eq!(d.os_processes(), vec![vec![ProcessId(0), ProcessId(2)], vec![ProcessId(1)]]);
    }
}
