//! Running a cluster as separate processes: the spec every process reads, picking loopback
//! ports, and telling when a node is ready — without sleeping.
//!
//! Readiness protocol: a node process binds its listener *first*, then prints
//! [`ready_line`] on stdout, then calls [`run_node_on`](crate::run_node_on) with that listener.
//! Because the listener is bound before the line is printed, a parent that has read the line may
//! connect at once (connections queue in the kernel until the node accepts them).
//! [`wait_for_ready_line`] reads it; [`wait_until_accepting`] is the fallback for a parent that
//! cannot read the child's stdout.

use crate::client::ClientDriverConfig;
use crate::error::{io_context, NetError};
use crate::frame::{encode_frame, Frame, NoMsg};
use crate::node::NodeConfig;
use ensemble_core::topology::Topology;
use ensemble_core::InstanceId;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{BufRead, Write};
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

/// One instance of the cluster.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstanceSpec {
    pub id: u32,
    pub addr: SocketAddr,
    pub site: usize,
}

/// What every process of a cluster reads: where each instance listens and at which site it is,
/// and whether (and which) WAN to emulate.
///
/// ```toml
/// topology = "wan5"      # preset or file path; or a [topology] table
/// emulate_wan = true
/// workers = 2
/// seed = 1
///
/// [[instances]]
/// id = 0
/// addr = "127.0.0.1:7000"
/// site = 0
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterSpec {
    #[serde(default)]
    pub topology: Option<TopologyRef>,
    /// Emulate the topology's delays on loopback (needs `topology`).
    #[serde(default)]
    pub emulate_wan: bool,
    /// Storage worker threads per node.
    #[serde(default = "default_workers")]
    pub workers: usize,
    #[serde(default)]
    pub seed: u64,
    #[serde(default = "default_connect_timeout_ms")]
    pub connect_timeout_ms: u64,
    pub instances: Vec<InstanceSpec>,
}

fn default_workers() -> usize {
    2
}

fn default_connect_timeout_ms() -> u64 {
    30_000
}

impl ClusterSpec {
    /// `n` instances on free loopback ports, placed on sites as the topology places them
    /// (`i % sites`), or all at site 0 without a topology.
    pub fn local(n: usize, topology: Option<TopologyRef>, emulate_wan: bool) -> Result<ClusterSpec, NetError> {
        let resolved = topology.as_ref().map(|t| t.resolve()).transpose()?;
        let addrs = free_local_addrs(n).map_err(io_context("pick free loopback ports"))?;
        let instances = addrs
            .into_iter()
            .enumerate()
            .map(|(i, addr)| InstanceSpec { id: i as u32, addr, site: resolved.as_ref().map_or(0, |t| t.instance_site(i as u32)) })
            .collect();
        let spec = ClusterSpec {
            topology,
            emulate_wan,
            workers: default_workers(),
            seed: 0,
            connect_timeout_ms: default_connect_timeout_ms(),
            instances,
        };
        spec.validate()?;
        Ok(spec)
    }

    pub fn from_toml(text: &str) -> Result<ClusterSpec, NetError> {
        let spec: ClusterSpec = toml::from_str(text).map_err(|e| NetError::Spec(e.to_string()))?;
        spec.validate()?;
        Ok(spec)
    }

    pub fn to_toml(&self) -> Result<String, NetError> {
        toml::to_string(self).map_err(|e| NetError::Spec(e.to_string()))
    }

    pub fn load(path: &Path) -> Result<ClusterSpec, NetError> {
        let text = std::fs::read_to_string(path).map_err(io_context(format!("read {}", path.display())))?;
        ClusterSpec::from_toml(&text).map_err(|e| NetError::Spec(format!("{}: {e}", path.display())))
    }

    pub fn save(&self, path: &Path) -> Result<(), NetError> {
        std::fs::write(path, self.to_toml()?).map_err(io_context(format!("write {}", path.display())))
    }

    pub fn validate(&self) -> Result<(), NetError> {
        let bad = |m: String| Err(NetError::Spec(m));
        if self.instances.is_empty() {
            return bad("no instances".into());
        }
        let mut seen = BTreeMap::new();
        for i in &self.instances {
            if seen.insert(i.id, ()).is_some() {
                return bad(format!("instance {} listed twice", i.id));
            }
        }
        if self.emulate_wan && self.topology.is_none() {
            return bad("emulate_wan needs a topology".into());
        }
        if let Some(t) = self.resolved_topology()? {
            if let Some(i) = self.instances.iter().find(|i| i.site >= t.sites.len()) {
                return bad(format!("instance {}: site {} out of range: topology `{}` has {} sites", i.id, i.site, t.name, t.sites.len()));
            }
        }
        Ok(())
    }

    pub fn resolved_topology(&self) -> Result<Option<Topology>, NetError> {
        self.topology.as_ref().map(|t| t.resolve()).transpose()
    }

    /// The topology whose delays the runtime should emulate, if any.
    fn emulated_topology(&self) -> Result<Option<Topology>, NetError> {
        if self.emulate_wan {
            self.resolved_topology()
        } else {
            Ok(None)
        }
    }

    pub fn instance(&self, id: InstanceId) -> Option<&InstanceSpec> {
        self.instances.iter().find(|i| i.id == id.0)
    }

    pub fn addrs(&self) -> BTreeMap<InstanceId, SocketAddr> {
        self.instances.iter().map(|i| (InstanceId(i.id), i.addr)).collect()
    }

    pub fn sites(&self) -> BTreeMap<InstanceId, usize> {
        self.instances.iter().map(|i| (InstanceId(i.id), i.site)).collect()
    }

    /// The configuration of node `id`.
    pub fn node_config(&self, id: InstanceId) -> Result<NodeConfig, NetError> {
        let me = self.instance(id).ok_or_else(|| NetError::Spec(format!("no instance {id} in the cluster")))?;
        let mut peers = self.addrs();
        peers.remove(&id);
        let mut peer_sites = self.sites();
        peer_sites.remove(&id);
        Ok(NodeConfig {
            instance: id,
            listen: me.addr,
            peers,
            site: me.site,
            peer_sites,
            topology: self.emulated_topology()?,
            workers: self.workers,
            seed: self.seed ^ u64::from(id.0).wrapping_mul(0x9E37_79B9_7F4A_7C15),
            connect_timeout: Duration::from_millis(self.connect_timeout_ms),
        })
    }

    /// The configuration of a client driver that runs until `deadline`, timing from `epoch`.
    pub fn client_config(&self, epoch: Instant, deadline: Instant) -> Result<ClientDriverConfig, NetError> {
        Ok(ClientDriverConfig {
            instances: self.addrs(),
            instance_sites: self.sites(),
            topology: self.emulated_topology()?,
            seed: self.seed ^ 0xC11E_47C1_1E47,
            connect_timeout: Duration::from_millis(self.connect_timeout_ms),
            epoch,
            deadline,
        })
    }
}

/// `n` distinct free ports on 127.0.0.1. The listeners are all bound at once (so the ports are
/// distinct) and released on return; another process could take one in between, so prefer
/// binding a listener and passing it to [`run_node_on`](crate::run_node_on) when in one process.
pub fn free_local_addrs(n: usize) -> std::io::Result<Vec<SocketAddr>> {
    let listeners = (0..n).map(|_| TcpListener::bind("127.0.0.1:0")).collect::<Result<Vec<_>, _>>()?;
    listeners.iter().map(|l| l.local_addr()).collect()
}

/// Binds a node's listener (before printing the ready line and calling
/// [`run_node_on`](crate::run_node_on)).
pub fn bind_listener(addr: SocketAddr) -> Result<TcpListener, NetError> {
    TcpListener::bind(addr).map_err(io_context(format!("bind {addr}")))
}

pub const READY_PREFIX: &str = "ensemble-node ready";

/// The line a node process prints on stdout once its listener is bound.
pub fn ready_line(instance: InstanceId, addr: SocketAddr) -> String {
    format!("{READY_PREFIX} {} {addr}", instance.0)
}

/// Finds the ready line's fields. The prefix may come after other text on the same line (a
/// child that printed a partial line before it), since a parent only sees lines.
pub fn parse_ready_line(line: &str) -> Option<(InstanceId, SocketAddr)> {
    let start = line.find(READY_PREFIX)?;
    let mut words = line[start + READY_PREFIX.len()..].split_whitespace();
    let id = words.next()?.parse().ok()?;
    let addr = words.next()?.parse().ok()?;
    words.next().is_none().then_some((InstanceId(id), addr))
}

/// Reads a child's stdout until its ready line, skipping anything else it prints first.
pub fn wait_for_ready_line(mut stdout: impl BufRead) -> Result<(InstanceId, SocketAddr), NetError> {
    let mut line = String::new();
    loop {
        line.clear();
        let n = stdout.read_line(&mut line).map_err(io_context("read the node's stdout"))?;
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
) -> Result<(InstanceId, SocketAddr, R), NetError> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut stdout = stdout;
        let ready = wait_for_ready_line(&mut stdout);
        let _ = tx.send(ready.map(|(id, addr)| (id, addr, stdout)));
    });
    rx.recv_timeout(timeout).map_err(|_| NetError::NotReady(format!("no ready line within {timeout:?}")))?
}

/// Connects to `addr` until it accepts or `timeout` passes. The probe connection closes without
/// a Hello, which a node treats as an ordinary disconnect.
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

/// Asks the node at `addr` to stop (an admin Shutdown frame).
pub fn send_shutdown(addr: SocketAddr, timeout: Duration) -> Result<(), NetError> {
    let mut stream = TcpStream::connect_timeout(&addr, timeout).map_err(io_context(format!("connect to {addr}")))?;
    stream.set_nodelay(true).map_err(io_context("set_nodelay"))?;
    stream.write_all(&encode_frame::<NoMsg>(&Frame::Shutdown)?).map_err(io_context(format!("send Shutdown to {addr}")))?;
    stream.flush().map_err(io_context(format!("send Shutdown to {addr}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_round_trips_through_toml_with_named_and_inline_topologies() {
        let mut spec = ClusterSpec::local(3, Some(TopologyRef::Named("wan5".into())), true).unwrap();
        spec.seed = 9;
        let text = spec.to_toml().unwrap();
        assert!(text.contains("topology = \"wan5\""), "{text}");
        assert_eq!(ClusterSpec::from_toml(&text).unwrap(), spec);
        assert_eq!(spec.instances.iter().map(|i| i.site).collect::<Vec<_>>(), [0, 1, 2]);

        let mut inline = spec.clone();
        inline.topology = Some(TopologyRef::Inline(Box::new(Topology::wan_normal50(3))));
        let text = inline.to_toml().unwrap();
        assert_eq!(ClusterSpec::from_toml(&text).unwrap(), inline);
    }

    #[test]
    fn hand_written_spec_parses_and_yields_node_and_client_configs() {
        let spec = ClusterSpec::from_toml(
            r#"
            topology = "wan5"
            emulate_wan = true
            [[instances]]
            id = 0
            addr = "127.0.0.1:7000"
            site = 0
            [[instances]]
            id = 1
            addr = "127.0.0.1:7001"
            site = 3
            "#,
        )
        .unwrap();
        let n1 = spec.node_config(InstanceId(1)).unwrap();
        assert_eq!(n1.listen, "127.0.0.1:7001".parse().unwrap());
        assert_eq!(n1.site, 3);
        assert_eq!(n1.peers.keys().copied().collect::<Vec<_>>(), [InstanceId(0)]);
        assert_eq!(n1.peer_sites[&InstanceId(0)], 0);
        assert_eq!(n1.topology.as_ref().map(|t| t.name.as_str()), Some("wan5"));
        assert_eq!(n1.workers, 2);
        let c = spec.client_config(Instant::now(), Instant::now()).unwrap();
        assert_eq!(c.instance_sites[&InstanceId(1)], 3);
        assert!(spec.node_config(InstanceId(5)).is_err());
    }

    #[test]
    fn bad_specs_say_what_is_wrong() {
        let err = |t: &str| ClusterSpec::from_toml(t).unwrap_err().to_string();
        let two = "[[instances]]\nid = 0\naddr = \"127.0.0.1:1\"\nsite = 0\n[[instances]]\nid = 0\naddr = \"127.0.0.1:2\"\nsite = 0\n";
        assert!(err(two).contains("instance 0 listed twice"));
        assert!(err("emulate_wan = true\n[[instances]]\nid = 0\naddr = \"127.0.0.1:1\"\nsite = 0\n").contains("needs a topology"));
        assert!(err("topology = \"lan\"\n[[instances]]\nid = 0\naddr = \"127.0.0.1:1\"\nsite = 4\n").contains("site 4 out of range"));
        assert!(err("topology = \"mars\"\n[[instances]]\nid = 0\naddr = \"127.0.0.1:1\"\nsite = 0\n").contains("unknown topology"));
        assert!(err("instances = []\nbogus = 1\n").contains("bogus"));
    }

    #[test]
    fn free_addrs_are_distinct_loopback_ports() {
        let addrs = free_local_addrs(5).unwrap();
        let ports: std::collections::BTreeSet<_> = addrs.iter().map(|a| a.port()).collect();
        assert_eq!(ports.len(), 5);
        assert!(addrs.iter().all(|a| a.ip().is_loopback()));
    }

    #[test]
    fn ready_line_is_found_among_other_output() {
        let addr: SocketAddr = "127.0.0.1:4567".parse().unwrap();
        let line = ready_line(InstanceId(2), addr);
        assert_eq!(parse_ready_line(&line), Some((InstanceId(2), addr)));
        assert_eq!(parse_ready_line(&format!("test x ... {line}\n")), Some((InstanceId(2), addr)));
        assert_eq!(parse_ready_line("ensemble-node ready 2"), None);
        assert_eq!(parse_ready_line("ensemble-node ready x 127.0.0.1:1"), None);
        let out = format!("loading schema\n{line}\nmore\n");
        assert_eq!(wait_for_ready_line(out.as_bytes()).unwrap(), (InstanceId(2), addr));
        assert!(matches!(wait_for_ready_line("crashed\n".as_bytes()), Err(NetError::NotReady(_))));
        let (id, got, _rest) = wait_for_ready_line_within(std::io::Cursor::new(out), Duration::from_secs(30)).unwrap();
        assert_eq!((id, got), (InstanceId(2), addr));
    }

    #[test]
    fn waiting_for_a_bound_listener_succeeds_at_once() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        wait_until_accepting(l.local_addr().unwrap(), Duration::from_secs(5)).unwrap();
    }
}
