//! Which host runs which process, and where each process sits: the one consistency check every
//! host, every client driver and every cluster spec agree on.

use crate::frame::HostId;
use ensemble_core::topology::Topology;
use ensemble_core::{Deployment, ProcessId};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;

/// One host (an OS process of the real runtime): where it listens and which processes it runs,
/// in id order. A cluster's hosts are its deployment's OS processes, in the same order
/// ([`Deployment::os_processes`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostSpec {
    pub addr: SocketAddr,
    pub processes: Vec<ProcessId>,
}

/// Where a process is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Place {
    pub host: HostId,
    /// Index into the deployment's machines.
    pub machine: usize,
    /// Index into the topology's sites.
    pub site: usize,
}

/// Hosts and the place of every process, checked against each other.
#[derive(Debug)]
pub(crate) struct Directory {
    hosts: Vec<HostSpec>,
    /// Indexed by process id (the deployment's ids are dense).
    places: Vec<Place>,
    sites: usize,
}

pub(crate) fn list(ps: &[ProcessId]) -> String {
    let names: Vec<String> = ps.iter().map(|p| p.to_string()).collect();
    format!("[{}]", names.join(", "))
}

impl Directory {
    /// Checks that the topology is valid, the deployment fits it, and `hosts` are the
    /// deployment's OS processes in order, each at its own address.
    pub(crate) fn new(deployment: &Deployment, topology: &Topology, hosts: &[HostSpec]) -> Result<Directory, String> {
        topology.validate().map_err(|e| e.to_string())?;
        if deployment.is_empty() {
            return Err("the deployment has no processes".into());
        }
        deployment.validate(topology.sites.len()).map_err(|e| e.to_string())?;
        let os = deployment.os_processes();
        if os.len() != hosts.len() {
            return Err(format!("the deployment runs {} OS process(es), but {} host(s) are listed", os.len(), hosts.len()));
        }
        for (i, (host, want)) in hosts.iter().zip(&os).enumerate() {
            if &host.processes != want {
                return Err(format!(
                    "host {} lists processes {}, but the deployment's OS process {i} runs {}",
                    HostId(i as u32),
                    list(&host.processes),
                    list(want)
                ));
            }
        }
        for (i, a) in hosts.iter().enumerate() {
            // Port 0: the host binds any free port and announces it (`ClusterSpec::loopback`).
            if let Some(j) = hosts[..i].iter().position(|b| b.addr == a.addr && a.addr.port() != 0) {
                return Err(format!("hosts {} and {} both listen on {}", HostId(j as u32), HostId(i as u32), a.addr));
            }
        }
        let mut places = vec![None; deployment.len()];
        for (h, host) in hosts.iter().enumerate() {
            for p in &host.processes {
                let machine = deployment.processes[p.0 as usize].machine;
                let site = deployment.machines[machine].site;
                places[p.0 as usize] = Some(Place { host: HostId(h as u32), machine, site });
            }
        }
        let places = places.into_iter().map(|p| p.expect("every process is in exactly one OS process")).collect();
        Ok(Directory { hosts: hosts.to_vec(), places, sites: topology.sites.len() })
    }

    pub(crate) fn hosts(&self) -> &[HostSpec] {
        &self.hosts
    }

    pub(crate) fn host(&self, h: HostId) -> Option<&HostSpec> {
        self.hosts.get(h.index())
    }

    pub(crate) fn place(&self, p: ProcessId) -> Option<Place> {
        self.places.get(p.0 as usize).copied()
    }

    pub(crate) fn processes(&self) -> impl Iterator<Item = (ProcessId, Place)> + '_ {
        self.places.iter().enumerate().map(|(i, p)| (ProcessId(i as u32), *p))
    }

    pub(crate) fn sites(&self) -> usize {
        self.sites
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    #[test]
    fn places_follow_machines_and_os_processes() {
        let mut d = Deployment::one_per_machine(&[0, 1, 0], 2, "replica");
        d.processes[0].os_process = Some(1);
        d.processes[2].os_process = Some(1);
        let hosts = vec![
            HostSpec { addr: addr(1), processes: vec![ProcessId(0), ProcessId(2)] },
            HostSpec { addr: addr(2), processes: vec![ProcessId(1)] },
        ];
        let dir = Directory::new(&d, &Topology::wan5(), &hosts).unwrap();
        assert_eq!(dir.place(ProcessId(2)), Some(Place { host: HostId(0), machine: 2, site: 0 }));
        assert_eq!(dir.place(ProcessId(1)), Some(Place { host: HostId(1), machine: 1, site: 1 }));
        assert_eq!(dir.place(ProcessId(3)), None);
    }

    #[test]
    fn disagreements_are_named() {
        let d = Deployment::one_per_machine(&[0, 0], 1, "x");
        let t = Topology::lan();
        let err = |hosts: &[HostSpec]| Directory::new(&d, &t, hosts).unwrap_err();
        let one = HostSpec { addr: addr(1), processes: vec![ProcessId(0)] };
        assert_eq!(err(std::slice::from_ref(&one)), "the deployment runs 2 OS process(es), but 1 host(s) are listed");
        let swapped = HostSpec { addr: addr(2), processes: vec![ProcessId(0)] };
        assert_eq!(err(&[one.clone(), swapped]), "host h1 lists processes [p0], but the deployment's OS process 1 runs [p1]");
        let same_addr = HostSpec { addr: addr(1), processes: vec![ProcessId(1)] };
        assert_eq!(err(&[one.clone(), same_addr]), "hosts h0 and h1 both listen on 127.0.0.1:1");
        let far = Deployment::one_per_machine(&[3], 1, "x");
        assert!(Directory::new(&far, &t, &[one]).unwrap_err().contains("machine 0 is at site 3, but the topology has 1 site(s)"));
    }
}
