//! Nodes and clients on loopback, end to end.
//!
//! Nothing here sleeps to synchronise: listeners are bound before anyone dials them, runs end
//! when the expected number of completions has been seen (the deadline is only a bound that
//! turns a hang into a failure), and the only timing assertions are lower bounds.

mod common;

use common::{assert_all_answered, CountingStorage, RingNode, ToyClient};
use ensemble_core::topology::{Jitter, Topology};
use ensemble_core::{Client, ClientId, Completion, InstanceId, Request};
use ensemble_net::cluster::send_shutdown;
use ensemble_net::frame::{encode_frame, FrameCodec, NoMsg, HEADER_LEN};
use ensemble_net::{run_clients, run_node_on, ClientDriverConfig, ClientSlot, Frame, Hello, NodeConfig, NodeReport, ShutdownHandle, StopReason};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

// ---------------------------------------------------------------------------------------------
// Harness

struct Cluster {
    addrs: BTreeMap<InstanceId, SocketAddr>,
    sites: BTreeMap<InstanceId, usize>,
    topology: Option<Topology>,
    shutdowns: Vec<ShutdownHandle>,
    nodes: Vec<JoinHandle<NodeReport>>,
    storage_runs: Vec<Arc<AtomicU64>>,
}

impl Cluster {
    /// `sites[i]` is instance i's site. Every listener is bound before any node starts, so no
    /// node ever dials a port that is not listening yet.
    fn start(sites: &[usize], topology: Option<Topology>) -> Cluster {
        let n = sites.len() as u32;
        let listeners: Vec<TcpListener> = (0..n).map(|_| TcpListener::bind("127.0.0.1:0").unwrap()).collect();
        let addrs: BTreeMap<_, _> = listeners.iter().enumerate().map(|(i, l)| (InstanceId(i as u32), l.local_addr().unwrap())).collect();
        let site_map: BTreeMap<_, _> = sites.iter().enumerate().map(|(i, s)| (InstanceId(i as u32), *s)).collect();
        let mut cluster = Cluster {
            addrs: addrs.clone(),
            sites: site_map.clone(),
            topology: topology.clone(),
            shutdowns: Vec::new(),
            nodes: Vec::new(),
            storage_runs: Vec::new(),
        };
        for (i, listener) in listeners.into_iter().enumerate() {
            let id = InstanceId(i as u32);
            let mut cfg = NodeConfig::new(id, addrs[&id]);
            cfg.peers = addrs.clone();
            cfg.peer_sites = site_map.clone();
            cfg.site = sites[i];
            cfg.topology = topology.clone();
            cfg.seed = i as u64;
            cfg.workers = 2;
            let shutdown = ShutdownHandle::new();
            let ran = Arc::new(AtomicU64::new(0));
            let (sd, ran2) = (shutdown.clone(), ran.clone());
            cluster.nodes.push(std::thread::spawn(move || {
                let make = move |_| CountingStorage { instance: id, ran: ran2.clone() };
                run_node_on(listener, cfg, RingNode::new(id, n), make, sd).unwrap()
            }));
            cluster.shutdowns.push(shutdown);
            cluster.storage_runs.push(ran);
        }
        cluster
    }

    fn client_config(&self) -> ClientDriverConfig {
        let mut cfg = ClientDriverConfig::new(self.addrs.clone(), Duration::from_secs(60));
        cfg.instance_sites = self.sites.clone();
        cfg.topology = self.topology.clone();
        cfg.seed = 42;
        cfg
    }

    /// Runs the clients until `expected` completions arrived (or the safety deadline).
    fn run(&self, clients: Vec<ClientSlot>, expected: usize) -> Vec<Completion> {
        let mut done = Vec::new();
        let report = run_clients(self.client_config(), clients, |c| {
            done.push(c);
            if done.len() == expected {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })
        .unwrap();
        assert_eq!(report.stopped, StopReason::Callback, "the run hit its deadline: {report:?}");
        assert_eq!(report.requests_undeliverable, 0);
        done
    }

    /// Stops node 0 with an admin Shutdown frame and the others with their handles.
    fn stop(self) -> Vec<NodeReport> {
        send_shutdown(self.addrs[&InstanceId(0)], Duration::from_secs(5)).unwrap();
        for s in &self.shutdowns[1..] {
            s.trigger();
        }
        self.nodes.into_iter().map(|h| h.join().unwrap()).collect()
    }
}

fn slots(clients: impl IntoIterator<Item = (Box<dyn Client>, usize)>) -> Vec<ClientSlot> {
    clients.into_iter().map(|(client, site)| ClientSlot { client, site }).collect()
}

// ---------------------------------------------------------------------------------------------

#[test]
fn three_node_ring_answers_every_request() {
    let cluster = Cluster::start(&[0, 0, 0], None);
    let per_client = 25;
    let targets: BTreeMap<_, _> = (0..6u64).map(|c| (ClientId(c), InstanceId((c % 3) as u32))).collect();
    let clients = slots(targets.iter().map(|(c, i)| (ToyClient::boxed(c.0, i.0, per_client), 0)));
    let done = cluster.run(clients, 6 * per_client as usize);
    assert_all_answered(&done, &targets, per_client);

    let runs: Vec<u64> = cluster.storage_runs.iter().map(|r| r.load(Ordering::SeqCst)).collect();
    let reports = cluster.stop();
    // Two clients per instance; each request runs once, at the instance it was sent to.
    assert_eq!(runs, vec![2 * per_client; 3]);
    for r in &reports {
        assert_eq!(r.requests, 2 * per_client);
        assert_eq!(r.storage_jobs, 2 * per_client);
        assert_eq!(r.storage_done, 2 * per_client);
        assert_eq!(r.replies, 2 * per_client);
        assert_eq!((r.replies_undeliverable, r.messages_undeliverable, r.bad_connections), (0, 0, 0));
    }
    // Every request crossed all three ring links once.
    let total = 6 * per_client;
    assert_eq!(reports.iter().map(|r| r.messages_out).sum::<u64>(), 3 * total);
    assert_eq!(reports.iter().map(|r| r.messages_in).sum::<u64>(), 3 * total);
}

#[test]
fn a_single_node_sends_ring_messages_to_itself() {
    let cluster = Cluster::start(&[0], None);
    let targets: BTreeMap<_, _> = [(ClientId(5), InstanceId(0))].into();
    let done = cluster.run(slots([(ToyClient::boxed(5, 0, 10), 0)]), 10);
    assert_all_answered(&done, &targets, 10);
    let reports = cluster.stop();
    assert_eq!(reports[0].messages_in, 10);
}

/// Connects raw, sends `bytes`, and returns every frame the node sends back until it closes.
fn misbehave(addr: SocketAddr, bytes: &[u8]) -> Vec<Frame<NoMsg>> {
    use bytes::BytesMut;
    use tokio_util::codec::Decoder;
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(bytes).unwrap();
    // Half-close, so that a frame cut short is seen as truncated rather than awaited.
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut got = Vec::new();
    s.read_to_end(&mut got).expect("the node should close the connection after its Error frame");
    let mut buf = BytesMut::from(&got[..]);
    let mut codec = FrameCodec::<NoMsg>::new();
    let mut frames = Vec::new();
    while let Some(f) = codec.decode_eof(&mut buf).unwrap() {
        frames.push(f);
    }
    frames
}

fn header(len: u32, version: u8, kind: u8) -> Vec<u8> {
    let mut b = len.to_be_bytes().to_vec();
    b.extend([version, kind]);
    b
}

fn client_hello(client: u64) -> Vec<u8> {
    encode_frame::<NoMsg>(&Frame::Hello(Hello::Client { client: ClientId(client), site: 0 })).unwrap().to_vec()
}

/// Each kind of garbage, and the words its Error frame must contain.
fn garbage() -> Vec<(Vec<u8>, &'static str)> {
    let request = Request { client: ClientId(900), seq: 0, txn: "toy".into(), params: vec![] };
    let valid_request = encode_frame::<NoMsg>(&Frame::Request(request)).unwrap().to_vec();
    let mut hello_then_junk = client_hello(901);
    hello_then_junk.extend(&valid_request);
    hello_then_junk.extend(header(3, 1, 3));
    hello_then_junk.extend([0xff, 0xff, 0xff]);
    let mut truncated = client_hello(902);
    truncated.extend(&valid_request[..HEADER_LEN + 2]);
    vec![
        (header(0, 9, 6), "unknown protocol version 9"),
        (header(0, 1, 42), "unknown frame kind 42"),
        (header(u32::MAX, 1, 2), "over the limit"),
        ([header(1, 1, 1), vec![0x7f]].concat(), "does not decode as Hello"),
        (valid_request.clone(), "unexpected Request frame from a connection that has not said Hello"),
        (hello_then_junk, "does not decode as Request"),
        (truncated, "truncated Request frame"),
        (b"GET / HTTP/1.1\r\n\r\n".to_vec(), "unknown protocol version"),
    ]
}

#[test]
fn garbage_gets_an_error_frame_and_other_clients_lose_nothing() {
    let cluster = Cluster::start(&[0, 0], None);
    let addr = cluster.addrs[&InstanceId(0)];
    let cases = garbage();

    let check = |bytes: &[u8], words: &str| {
        let frames = misbehave(addr, bytes);
        // A connection may have had a reply in flight before it broke the protocol; the Error
        // frame is the last thing it gets.
        match frames.last() {
            Some(Frame::Error(text)) => assert!(text.contains(words), "expected `{words}` in `{text}`"),
            other => panic!("expected an Error frame naming `{words}`, got {other:?}"),
        }
    };
    // Before, during and after a well-behaved run.
    for (bytes, words) in &cases {
        check(bytes, words);
    }
    let per_client = 30;
    let targets: BTreeMap<_, _> = (0..4u64).map(|c| (ClientId(c), InstanceId((c % 2) as u32))).collect();
    let clients = slots(targets.iter().map(|(c, i)| (ToyClient::boxed(c.0, i.0, per_client), 0)));
    let done = std::thread::scope(|s| {
        let attacker = s.spawn(|| {
            for (bytes, words) in &cases {
                check(bytes, words);
            }
        });
        let done = cluster.run(clients, 4 * per_client as usize);
        attacker.join().unwrap();
        done
    });
    assert_all_answered(&done, &targets, per_client);
    for (bytes, words) in &cases {
        check(bytes, words);
    }

    let reports = cluster.stop();
    assert_eq!(reports[0].bad_connections, 3 * cases.len() as u64);
    assert_eq!(reports[1].bad_connections, 0);
    // The toy's own clients (0 and 2 at instance 0) plus the misbehaving connections' valid
    // requests, each answered (or dropped if the connection was already closed).
    assert!(reports[0].requests >= 2 * per_client);
}

#[test]
fn wan_emulation_delays_every_frame_by_at_least_the_topology_delay() {
    // Two sites 40 ms apart one way, nothing inside a site.
    let d = 40.0;
    let topology = Topology {
        name: "two-sites".into(),
        sites: vec!["a".into(), "b".into()],
        one_way_ms: vec![vec![0.0, d], vec![d, 0.0]],
        jitter: Jitter::None,
        ..Topology::lan()
    };
    let cluster = Cluster::start(&[0, 1], Some(topology));
    let per_client = 3;
    // Client 0 at site a talks to instance 0 (site a): its request goes around the ring
    // a→b→a, so two inter-site hops. Client 1 at site b talks to instance 0 too: two more hops
    // (request and reply). Client 2 at site b talks to instance 1 (site b): ring b→a→b.
    let targets: BTreeMap<_, _> = [(ClientId(0), InstanceId(0)), (ClientId(1), InstanceId(0)), (ClientId(2), InstanceId(1))].into();
    let clients = slots([
        (ToyClient::boxed(0, 0, per_client), 0),
        (ToyClient::boxed(1, 0, per_client), 1),
        (ToyClient::boxed(2, 1, per_client), 1),
    ]);
    let done = cluster.run(clients, 3 * per_client as usize);
    assert_all_answered(&done, &targets, per_client);
    let hop = Duration::from_millis(d as u64);
    let hops = |c: ClientId| if c == ClientId(1) { 4 } else { 2 };
    for c in &done {
        let latency = c.completed.saturating_sub(c.issued);
        let floor = hop * hops(c.request.client);
        assert!(latency >= floor, "{:?} took {latency:?}, less than the emulated {floor:?}", c.request);
    }
    cluster.stop();
}

#[test]
fn a_client_at_an_unknown_site_is_refused_when_emulating() {
    let cluster = Cluster::start(&[0], Some(Topology::lan()));
    let bytes = encode_frame::<NoMsg>(&Frame::Hello(Hello::Client { client: ClientId(1), site: 3 })).unwrap();
    let frames = misbehave(cluster.addrs[&InstanceId(0)], &bytes);
    assert!(matches!(&frames[..], [Frame::Error(t)] if t.contains("site 3 out of range")), "{frames:?}");
    cluster.stop();
}

#[test]
fn a_connection_that_just_closes_is_not_an_error() {
    let cluster = Cluster::start(&[0], None);
    let addr = cluster.addrs[&InstanceId(0)];
    ensemble_net::cluster::wait_until_accepting(addr, Duration::from_secs(5)).unwrap();
    drop(TcpStream::connect(addr).unwrap());
    let done = cluster.run(slots([(ToyClient::boxed(1, 0, 3), 0)]), 3);
    assert_eq!(done.len(), 3);
    let reports = cluster.stop();
    assert_eq!(reports[0].bad_connections, 0);
}
