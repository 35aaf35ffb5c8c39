//! Running a cluster as separate OS processes: the spec every process reads, picking loopback
//! ports, and telling when a host is ready — without sleeping.
//!
//! Readiness protocol: a host process binds its listener *first* (on the port its spec gives it,
//! or port 0: [`ClusterSpec::loopback`]), then prints [`ready_line`] with the address it got on
//! stdout; on port 0 it then reads every host's address from its parent (who collected the ready
//! lines; see `ensemble node`), and calls [`run_host_on`](crate::run_host_on) with that listener. Because the
//! listener is bound before the line is printed, a parent that has read the line may connect at
//! once (connections queue in the kernel until the host accepts them). [`wait_for_ready_line`]
//! reads it; [`wait_until_accepting`] is the fallback for a parent that cannot read the child's
//! stdout.

use crate::client::{ClientDriverConfig, ProcessAddr};
use crate::error::{io_context, NetError};
use crate::frame::{AdminFrame, HostId};
use crate::host::HostConfig;
use crate::layout::{Directory, HostSpec};
use ensemble_core::topology::Topology;
use ensemble_core::{Deployment, ProcessId};
use serde::{Deserialize, Serialize};
use std::io::BufRead;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

/// A topology by preset name or file path (`topology = "wan5"`), or written out in full
/// (`[topology]` table).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum TopologyRef {
    Named(String),
    Inline(Box<Topology>),
}

impl TopologyRef {
    pub fn resolve(&self) -> Result<Topology, NetError> {
        let t = match self {
            TopologyRef::Named(name) => Topology::load(name)?,
            TopologyRef::Inline(t) => (**t).clone(),
        };
        t.validate()?;
        Ok(t)
    }
}

impl From<Topology> for TopologyRef {
    fn from(t: Topology) -> TopologyRef {
        TopologyRef::Inline(Box::new(t))
    }
}

impl From<&str> for TopologyRef {
    fn from(name_or_path: &str) -> TopologyRef {
        TopologyRef::Named(name_or_path.into())
    }
}

/// What every OS process of a cluster reads: the deployment (which processes exist, on which
/// machines and sites, grouped into which OS processes), where each host (OS process) listens,
/// and whether to emulate the topology's WAN.
///
/// ```toml
/// topology = "wan5"      # preset or file path; or a [topology] table
/// emulate_wan = true
/// workers = 2
/// seed = 1
///
/// [[hosts]]              # one per OS process of the deployment, in order
/// addr = "127.0.0.1:7000"
/// processes = [0, 1]
///
/// [[hosts]]
/// addr = "127.0.0.1:7001"
/// processes = [2]
///
/// [deployment]
/// [[deployment.machines]]
/// site = 0
/// cores = 2
/// # ...
/// [[deployment.processes]]
/// process = 0
/// machine = 0
/// os_process = 0
/// kind = "replica"
/// # ...
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterSpec {
    pub topology: TopologyRef,
    /// Emulate the topology's delays between machines on loopback.
    #[serde(default)]
    pub emulate_wan: bool,
    /// Storage worker threads per process that has storage.
    #[serde(default = "default_workers")]
    pub workers: usize,
    #[serde(default)]
    pub seed: u64,
    #[serde(default = "default_connect_timeout_ms")]
    pub connect_timeout_ms: u64,
    /// The cluster's master secret, from which every key is derived
    /// ([`KeyRing`](crate::auth::KeyRing)): the operator's file has it. Every connection proves
    /// it holds the key of its role before anything else is accepted (`ARCHITECTURE.md`, "Trust
    /// and limits"). Without a secret or keys, every host must listen on a loopback address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<crate::auth::Secret>,
    /// One host's keys, instead of the master: what `bench --real` writes into each node's own
    /// cluster file ([`ClusterSpec::for_host`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keys: Option<crate::auth::KeyRing>,
    /// The deployment's OS processes, in order ([`Deployment::os_processes`]).
    pub hosts: Vec<HostSpec>,
    pub deployment: Deployment,
}

fn default_workers() -> usize {
    2
}

fn default_connect_timeout_ms() -> u64 {
    30_000
}

impl ClusterSpec {
    /// The deployment's OS processes on loopback, each host's listener (in host order) already
    /// bound, for running the hosts in this OS process with [`run_host_on`](crate::run_host_on):
    /// nothing can take the ports in between, and peers may dial at once. (Hosts in separate OS
    /// processes use [`ClusterSpec::loopback`] instead.)
    pub fn local_bound(
        deployment: Deployment,
        topology: impl Into<TopologyRef>,
        emulate_wan: bool,
    ) -> Result<(ClusterSpec, Vec<TcpListener>), NetError> {
        let mut spec = ClusterSpec::loopback(deployment, topology, emulate_wan)?;
        let listeners = (0..spec.hosts.len())
            .map(|_| TcpListener::bind("127.0.0.1:0"))
            .collect::<Result<Vec<_>, _>>()
            .map_err(io_context("pick free loopback ports"))?;
        let addrs = listeners.iter().map(|l| l.local_addr()).collect::<Result<Vec<_>, _>>().map_err(io_context("read a listener's address"))?;
        spec.set_addrs(&addrs)?;
        Ok((spec, listeners))
    }

    /// The deployment's OS processes on loopback, each at port 0: every host binds a port of
    /// its own choosing and announces it on its ready line, and whoever started the hosts tells
    /// each one the others' addresses ([`ClusterSpec::set_addrs`]) before it dials them. Nothing
    /// is bound and released in between, so parallel runs cannot steal each other's ports.
    pub fn loopback(deployment: Deployment, topology: impl Into<TopologyRef>, emulate_wan: bool) -> Result<ClusterSpec, NetError> {
        let unbound = SocketAddr::from(([127, 0, 0, 1], 0));
        let hosts = deployment.os_processes().into_iter().map(|processes| HostSpec { addr: unbound, processes }).collect();
        let spec = ClusterSpec {
            topology: topology.into(),
            emulate_wan,
            workers: default_workers(),
            seed: 0,
            connect_timeout_ms: default_connect_timeout_ms(),
            secret: None,
            keys: None,
            hosts,
            deployment,
        };
        spec.validate()?;
        Ok(spec)
    }

    /// Fills in the hosts' addresses, in host order, once they are bound.
    pub fn set_addrs(&mut self, addrs: &[SocketAddr]) -> Result<(), NetError> {
        if addrs.len() != self.hosts.len() {
            return Err(NetError::Spec(format!("{} address(es) for {} host(s)", addrs.len(), self.hosts.len())));
        }
        for (h, a) in self.hosts.iter_mut().zip(addrs) {
            h.addr = *a;
        }
        self.validate()
    }

    pub fn from_toml(text: &str) -> Result<ClusterSpec, NetError> {
        ClusterSpec::parse(text).map_err(NetError::Spec)
    }

    pub fn to_toml(&self) -> Result<String, NetError> {
        toml::to_string(self).map_err(|e| NetError::Spec(e.to_string()))
    }

    /// Reads and checks a spec file; every error names the file.
    pub fn load(path: &Path) -> Result<ClusterSpec, NetError> {
        let text = std::fs::read_to_string(path).map_err(io_context(format!("read cluster spec {}", path.display())))?;
        ClusterSpec::parse(&text).map_err(|e| NetError::Spec(format!("{}: {e}", path.display())))
    }

    pub fn save(&self, path: &Path) -> Result<(), NetError> {
        std::fs::write(path, self.to_toml()?).map_err(io_context(format!("write {}", path.display())))
    }

    fn parse(text: &str) -> Result<ClusterSpec, String> {
        let spec: ClusterSpec = toml::from_str(text).map_err(|e| e.to_string())?;
        spec.check()?;
        Ok(spec)
    }

    pub fn validate(&self) -> Result<(), NetError> {
        self.check().map(|_| ()).map_err(NetError::Spec)
    }

    fn check(&self) -> Result<Directory, String> {
        if self.workers == 0 {
            return Err("workers must be at least 1".into());
        }
        if let Some(ring) = &self.keys {
            if self.secret.is_some() {
                return Err("a cluster file holds the master `secret` or one host's `keys`, not both".into());
            }
            if ring.host.index() >= self.hosts.len() {
                return Err(format!("`keys` are host {}'s, but the cluster has {} host(s)", ring.host, self.hosts.len()));
            }
        }
        let topology = self.topology.resolve().map_err(|e| e.to_string())?;
        Directory::new(&self.deployment, &topology, &self.hosts)
    }

    pub fn resolved_topology(&self) -> Result<Topology, NetError> {
        self.topology.resolve()
    }

    /// The spec as host `host` needs it: its own keys instead of the master secret, so the file
    /// written for it lets no one who reads it pose as another host.
    pub fn for_host(&self, host: HostId) -> Result<ClusterSpec, NetError> {
        if host.index() >= self.hosts.len() {
            return Err(NetError::Spec(format!("no host {host}: the cluster has {} host(s)", self.hosts.len())));
        }
        let mut spec = self.clone();
        if let Some(master) = spec.secret.take() {
            spec.keys = Some(crate::auth::KeyRing::for_host(&master, host, self.hosts.len()));
        }
        Ok(spec)
    }

    /// The key clients and operators prove with, if the cluster has keys.
    pub fn operator_key(&self) -> Option<crate::auth::Secret> {
        match (&self.secret, &self.keys) {
            (Some(master), _) => Some(crate::auth::operator_key(master)),
            (None, Some(ring)) => Some(ring.operator.clone()),
            (None, None) => None,
        }
    }

    /// The host that runs `p`.
    pub fn host_of(&self, p: ProcessId) -> Option<HostId> {
        self.hosts.iter().position(|h| h.processes.contains(&p)).map(|i| HostId(i as u32))
    }

    /// The hosts, with their ids.
    pub fn host_ids(&self) -> impl Iterator<Item = (HostId, &HostSpec)> {
        self.hosts.iter().enumerate().map(|(i, h)| (HostId(i as u32), h))
    }

    /// The configuration of host `host`.
    pub fn host_config(&self, host: HostId) -> Result<HostConfig, NetError> {
        let me = self
            .hosts
            .get(host.index())
            .ok_or_else(|| NetError::Spec(format!("no host {host}: the cluster has {} host(s)", self.hosts.len())))?;
        Ok(HostConfig {
            host,
            listen: me.addr,
            hosts: self.hosts.clone(),
            deployment: self.deployment.clone(),
            topology: self.resolved_topology()?,
            emulate_wan: self.emulate_wan,
            workers: self.workers,
            seed: self.seed ^ u64::from(host.0).wrapping_mul(0x9E37_79B9_7F4A_7C15),
            connect_timeout: Duration::from_millis(self.connect_timeout_ms),
            keys: match (&self.keys, &self.secret) {
                (Some(ring), _) => Some(ring.clone()),
                (None, Some(master)) => Some(crate::auth::KeyRing::for_host(master, host, self.hosts.len())),
                (None, None) => None,
            },
            limits: crate::host::Limits::default(),
        })
    }

    /// The configuration of a client driver that runs until `deadline`, timing from `epoch`:
    /// every process's host address and site.
    pub fn client_config(&self, epoch: Instant, deadline: Instant) -> Result<ClientDriverConfig, NetError> {
        let topology = self.resolved_topology()?;
        let dir = Directory::new(&self.deployment, &topology, &self.hosts).map_err(NetError::Spec)?;
        let processes = dir
            .processes()
            .map(|(p, place)| (p, ProcessAddr { addr: self.hosts[place.host.index()].addr, site: place.site }))
            .collect();
        Ok(ClientDriverConfig {
            processes,
            topology: self.emulate_wan.then_some(topology),
            seed: self.seed ^ 0xC11E_47C1_1E47,
            connect_timeout: Duration::from_millis(self.connect_timeout_ms),
            epoch,
            deadline,
            key: self.operator_key(),
            abort: None,
            hold: None,
        })
    }
}

/// The line that tells hosts started on port 0 every host's address, in host order.
pub fn addrs_line(addrs: &[SocketAddr]) -> String {
    let addrs: Vec<String> = addrs.iter().map(SocketAddr::to_string).collect();
    format!("{}\n", addrs.join(" "))
}

/// Reads an [`addrs_line`].
pub fn parse_addrs_line(line: &str) -> Result<Vec<SocketAddr>, NetError> {
    line.split_whitespace()
        .map(|a| a.parse().map_err(|_| NetError::Spec(format!("`{a}` is not a socket address"))))
        .collect()
}

/// Binds a host's listener (before printing the ready line and calling
/// [`run_host_on`](crate::run_host_on)).
pub fn bind_listener(addr: SocketAddr) -> Result<TcpListener, NetError> {
    TcpListener::bind(addr).map_err(io_context(format!("bind {addr}")))
}

pub const READY_PREFIX: &str = "ensemble-host ready";

/// The line a host process prints on stdout once its listener is bound:
/// `ensemble-host ready <host index> <address>`.
pub fn ready_line(host: HostId, addr: SocketAddr) -> String {
    format!("{READY_PREFIX} {} {addr}", host.0)
}

/// Finds the ready line's fields. The prefix may come after other text on the same line (a
/// child that printed a partial line before it), since a parent only sees lines.
pub fn parse_ready_line(line: &str) -> Option<(HostId, SocketAddr)> {
    let start = line.find(READY_PREFIX)?;
    let mut words = line[start + READY_PREFIX.len()..].split_whitespace();
    let id = words.next()?.parse().ok()?;
    let addr = words.next()?.parse().ok()?;
    words.next().is_none().then_some((HostId(id), addr))
}

/// Reads a child's stdout until its ready line, skipping anything else it prints first.
pub fn wait_for_ready_line(mut stdout: impl BufRead) -> Result<(HostId, SocketAddr), NetError> {
    let mut line = String::new();
    loop {
        line.clear();
        let n = stdout.read_line(&mut line).map_err(io_context("read the host's stdout"))?;
        if n == 0 {
            return Err(NetError::NotReady("its stdout closed before the ready line (did it exit?)".into()));
        }
        if let Some(ready) = parse_ready_line(&line) {
            return Ok(ready);
        }
    }
}

/// [`wait_for_ready_line`] with a bound, for a child that may hang before it is ready. Hands the
/// reader back so the caller can keep reading the child's output. On timeout the reading thread
/// stays blocked until the child's stdout closes: kill the child.
pub fn wait_for_ready_line_within<R: BufRead + Send + 'static>(
    stdout: R,
    timeout: Duration,
) -> Result<(HostId, SocketAddr, R), NetError> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut stdout = stdout;
        let ready = wait_for_ready_line(&mut stdout);
        let _ = tx.send(ready.map(|(id, addr)| (id, addr, stdout)));
    });
    rx.recv_timeout(timeout).map_err(|_| NetError::NotReady(format!("no ready line within {timeout:?}")))?
}

/// Connects to `addr` until it accepts or `timeout` passes. The probe connection closes without
/// a Hello, which a host treats as an ordinary disconnect.
pub fn wait_until_accepting(addr: SocketAddr, timeout: Duration) -> Result<(), NetError> {
    let deadline = Instant::now() + timeout;
    let mut backoff = Duration::from_millis(5);
    let mut attempts = 0;
    loop {
        attempts += 1;
        let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
        match TcpStream::connect_timeout(&addr, left) {
            Ok(_) => return Ok(()),
            Err(source) => {
                if Instant::now() + backoff > deadline {
                    return Err(NetError::Connect { addr, attempts, source });
                }
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(Duration::from_millis(200));
            }
        }
    }
}

/// What a host said when probed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostStatus {
    /// Every process of the host said it is [quiescent](ensemble_core::Process::quiescent).
    pub quiescent: bool,
    /// If not, what the busy processes still have in flight
    /// ([`Process::in_flight`](ensemble_core::Process::in_flight), and their storage jobs that
    /// have run a second or more), each after its process id.
    pub in_flight: Option<String>,
    /// The failures of its processes so far, each after its process id: a run cannot get past
    /// them, so its driver stops on them.
    pub failed: Option<String>,
}

/// Asks the host at `addr` how it is (an operator's Ping, answered by the host's protocol loop,
/// so a host whose loop is stuck, or whose process is stopped, does not answer). Fails if no
/// answer comes within `timeout`.
pub fn probe(addr: SocketAddr, operator_key: Option<&crate::auth::Secret>, timeout: Duration) -> Result<HostStatus, NetError> {
    let mut conn = crate::admin::BlockingConn::connect(addr, operator_key, crate::frame::Hello::Admin, timeout)?;
    let nonce = rand::random::<u64>();
    conn.send(&AdminFrame::Ping(nonce))?;
    match conn.recv::<crate::frame::Never, crate::frame::Never>()? {
        AdminFrame::Pong { nonce: n, quiescent, in_flight, failed } if n == nonce => Ok(HostStatus { quiescent, in_flight, failed }),
        other => Err(NetError::Unexpected { addr, what: format!("a {} frame instead of the Pong to Ping {nonce}", other.kind()) }),
    }
}

/// Asks the host at `addr` to stop (an admin's Shutdown frame, after the handshake).
pub fn send_shutdown(addr: SocketAddr, operator_key: Option<&crate::auth::Secret>, timeout: Duration) -> Result<(), NetError> {
    let mut conn = crate::admin::BlockingConn::connect(addr, operator_key, crate::frame::Hello::Admin, timeout)?;
    conn.send(&AdminFrame::Shutdown)?;
    conn.finish();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_addresses_line_round_trips() {
        let addrs: Vec<SocketAddr> = vec!["127.0.0.1:4001".parse().unwrap(), "[::1]:80".parse().unwrap()];
        assert_eq!(parse_addrs_line(&addrs_line(&addrs)).unwrap(), addrs);
        let err = parse_addrs_line("127.0.0.1:1 nope").unwrap_err().to_string();
        assert!(err.contains("`nope`"), "{err}");
    }

    /// Three replicas at three sites; p0 and p2 share an OS process.
    fn deployment() -> Deployment {
        let mut d = Deployment::one_per_machine(&[0, 1, 2], 2, "replica");
        d.processes[0].os_process = Some(0);
        d.processes[2].os_process = Some(0);
        d
    }

    #[test]
    fn spec_round_trips_through_toml_with_named_and_inline_topologies() {
        let mut spec = ClusterSpec::local_bound(deployment(), "wan5", true).unwrap().0;
        spec.seed = 9;
        let text = spec.to_toml().unwrap();
        assert!(text.contains("topology = \"wan5\""), "{text}");
        assert_eq!(ClusterSpec::from_toml(&text).unwrap(), spec);
        let processes: Vec<_> = spec.hosts.iter().map(|h| h.processes.clone()).collect();
        assert_eq!(processes, [vec![ProcessId(0), ProcessId(2)], vec![ProcessId(1)]]);

        let mut inline = spec.clone();
        inline.topology = Topology::wan_normal50(3).into();
        let text = inline.to_toml().unwrap();
        assert_eq!(ClusterSpec::from_toml(&text).unwrap(), inline);
    }

    #[test]
    fn hand_written_spec_parses_and_yields_host_and_client_configs() {
        let spec = ClusterSpec::from_toml(
            r#"
            topology = "wan5"
            emulate_wan = true
            [[hosts]]
            addr = "127.0.0.1:7000"
            processes = [0, 1]
            [[hosts]]
            addr = "127.0.0.1:7001"
            processes = [2]
            [deployment]
            machines = [{ site = 0, cores = 2 }, { site = 3, cores = 2 }]
            [[deployment.processes]]
            process = 0
            machine = 0
            os_process = 7
            kind = "coordinator"
            [[deployment.processes]]
            process = 1
            machine = 0
            os_process = 7
            kind = "replica"
            [[deployment.processes]]
            process = 2
            machine = 1
            kind = "replica"
            "#,
        )
        .unwrap();
        let h1 = spec.host_config(HostId(1)).unwrap();
        assert_eq!(h1.listen, "127.0.0.1:7001".parse().unwrap());
        assert_eq!(h1.processes(), [ProcessId(2)]);
        assert_eq!(h1.topology.name, "wan5");
        assert!(h1.emulate_wan);
        assert_eq!(h1.workers, 2);
        assert_eq!(spec.host_of(ProcessId(1)), Some(HostId(0)));
        assert_eq!(spec.host_of(ProcessId(3)), None);
        let c = spec.client_config(Instant::now(), Instant::now()).unwrap();
        assert_eq!(c.processes[&ProcessId(1)], ProcessAddr { addr: "127.0.0.1:7000".parse().unwrap(), site: 0 });
        assert_eq!(c.processes[&ProcessId(2)], ProcessAddr { addr: "127.0.0.1:7001".parse().unwrap(), site: 3 });
        assert!(c.topology.is_some());
        assert!(spec.host_config(HostId(2)).unwrap_err().to_string().contains("no host h2: the cluster has 2 host(s)"));
    }

    #[test]
    fn a_hosts_file_holds_its_own_keys_and_not_the_master() {
        let mut spec = ClusterSpec::local_bound(deployment(), "wan5", false).unwrap().0;
        let master = crate::auth::Secret::from_bytes([8; 32]);
        spec.secret = Some(master.clone());
        let mine = spec.for_host(HostId(1)).unwrap();
        assert_eq!(mine.secret, None);
        let text = mine.to_toml().unwrap();
        assert!(!text.contains(&master.to_hex()), "the master is in a host's file");
        let read = ClusterSpec::from_toml(&text).unwrap();
        // The host gets the same keys from its file as from the master.
        assert_eq!(read.host_config(HostId(1)).unwrap().keys, spec.host_config(HostId(1)).unwrap().keys);
        assert_eq!(read.operator_key(), spec.operator_key());
        let mut both = read.clone();
        both.secret = Some(master);
        assert!(both.validate().unwrap_err().to_string().contains("not both"));
        let mut stray = read;
        stray.keys.as_mut().unwrap().host = HostId(9);
        assert!(stray.validate().unwrap_err().to_string().contains("host h9's, but the cluster has 2 host(s)"));
    }

    #[test]
    fn bad_specs_say_what_is_wrong() {
        let one_site = ClusterSpec::loopback(deployment(), "lan", false);
        assert!(one_site.unwrap_err().to_string().contains("machine 1 is at site 1, but the topology has 1 site(s)"));
        let mut spec = ClusterSpec::loopback(deployment(), "wan5", false).unwrap();
        spec.set_addrs(&["127.0.0.1:7000".parse().unwrap(), "127.0.0.1:7001".parse().unwrap()]).unwrap();
        let err = |f: &dyn Fn(&mut ClusterSpec)| {
            let mut s = spec.clone();
            f(&mut s);
            // Written out and read back, as a hand-edited file would be.
            ClusterSpec::from_toml(&toml::to_string(&s).unwrap()).unwrap_err().to_string()
        };
        assert!(err(&|s| drop(s.hosts.pop())).contains("the deployment runs 2 OS process(es), but 1 host(s) are listed"));
        assert!(err(&|s| s.hosts[1].addr = s.hosts[0].addr).contains("hosts h0 and h1 both listen on"));
        assert!(err(&|s| s.hosts[0].processes = vec![ProcessId(0)]).contains("host h0 lists processes [p0], but the deployment's OS process 0 runs [p0, p2]"));
        assert!(err(&|s| s.topology = "mars".into()).contains("unknown topology"));
        assert!(err(&|s| s.workers = 0).contains("workers must be at least 1"));
        assert!(err(&|s| s.deployment.processes[1].machine = 9).contains("p1 is on machine 9, but there are 3 machine(s)"));
        assert!(ClusterSpec::from_toml("bogus = 1\n").unwrap_err().to_string().contains("bogus"));
    }

    #[test]
    fn loading_names_the_file() {
        let path = std::env::temp_dir().join(format!("ensemble-net-bad-spec-{}.toml", std::process::id()));
        let mut spec = ClusterSpec::loopback(deployment(), "wan5", false).unwrap();
        spec.hosts.swap(0, 1);
        std::fs::write(&path, toml::to_string(&spec).unwrap()).unwrap();
        let err = ClusterSpec::load(&path).unwrap_err().to_string();
        let _ = std::fs::remove_file(&path);
        assert!(err.starts_with(&format!("cluster spec: {}: host h0 lists processes [p1]", path.display())), "{err}");
        let missing = ClusterSpec::load(Path::new("/nonexistent/cluster.toml")).unwrap_err().to_string();
        assert!(missing.contains("read cluster spec /nonexistent/cluster.toml"), "{missing}");
    }

    #[test]
    fn local_bound_keeps_the_listeners_of_the_addresses_it_names() {
        let (spec, listeners) = ClusterSpec::local_bound(deployment(), "wan5", false).unwrap();
        let addrs: Vec<_> = listeners.iter().map(|l| l.local_addr().unwrap()).collect();
        assert_eq!(addrs, spec.hosts.iter().map(|h| h.addr).collect::<Vec<_>>());
    }

    #[test]
    fn ready_line_is_found_among_other_output() {
        let addr: SocketAddr = "127.0.0.1:4567".parse().unwrap();
        let line = ready_line(HostId(2), addr);
        assert_eq!(line, "ensemble-host ready 2 127.0.0.1:4567");
        assert_eq!(parse_ready_line(&line), Some((HostId(2), addr)));
        assert_eq!(parse_ready_line(&format!("test x ... {line}\n")), Some((HostId(2), addr)));
        assert_eq!(parse_ready_line("ensemble-host ready 2"), None);
        assert_eq!(parse_ready_line("ensemble-host ready x 127.0.0.1:1"), None);
        let out = format!("loading schema\n{line}\nmore\n");
        assert_eq!(wait_for_ready_line(out.as_bytes()).unwrap(), (HostId(2), addr));
        assert!(matches!(wait_for_ready_line("crashed\n".as_bytes()), Err(NetError::NotReady(_))));
        let (id, got, _rest) = wait_for_ready_line_within(std::io::Cursor::new(out), Duration::from_secs(30)).unwrap();
        assert_eq!((id, got), (HostId(2), addr));
    }

    #[test]
    fn waiting_for_a_bound_listener_succeeds_at_once() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        wait_until_accepting(l.local_addr().unwrap(), Duration::from_secs(5)).unwrap();
    }
}
