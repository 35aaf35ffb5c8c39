//! The attacks of issue 11 on a real `ensemble node` running the Conveyor Belt: each one now
//! fails to do harm, and the node keeps serving.
//!
//! The node is instance 0 of a two-instance ring; the test plays instance 1's host when it needs
//! a peer (it knows the cluster secret, as a member would). The node's own link to instance 1
//! goes to a listener that never answers, so the token the node passes on is lost: the node only
//! ever sees the tokens the test sends it.

use ensemble_app::{ChangeKind, InstanceId, RowChange, StateUpdate};
use ensemble_belt::{BeltEvidence, Message, Token, TokenEntry};
use ensemble_bench::{Experiment, Runtime, System};
use ensemble_core::topology::Topology;
use ensemble_core::*;
use ensemble_net::cluster::{probe, send_shutdown, wait_for_ready_line};
use ensemble_net::auth::{operator_key, pair_key};
use ensemble_net::frame::{encode_frame, Never, PROTOCOL_VERSION};
use ensemble_net::{BlockingConn, ClusterSpec, Frame, Hello, HostId, ProcessReport, Secret};
use std::io::{BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const T: Duration = Duration::from_secs(30);

struct Node {
    child: Child,
    addr: SocketAddr,
    /// The cluster's master secret: the test derives every party's key from it.
    secret: Secret,
    dir: tempfile::TempDir,
    /// Instance 1's address: accepts connections and never answers.
    _silent_peer: TcpListener,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_node() -> Node {
    let dir = tempfile::tempdir().unwrap();
    let mut exp = Experiment::new("shop", System::Ensemble, 2, Topology::lan()).unwrap();
    exp.runtime = Runtime::Real;
    let exp_path = dir.path().join("experiment.json");
    std::fs::write(&exp_path, serde_json::to_string(&exp).unwrap()).unwrap();
    let deployment = Deployment::one_per_machine(&[0, 0], exp.topology.cpu.cores, "instance");
    let mut spec = ClusterSpec::loopback(deployment, exp.topology.clone(), false).unwrap();
    let secret = Secret::generate();
    spec.secret = Some(secret.clone());
    spec.connect_timeout_ms = 2_000;
    let cluster_path = dir.path().join("cluster.toml");
    spec.for_host(HostId(0)).unwrap().save(&cluster_path).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_ensemble"))
        .args(["node", "--host", "0"])
        .arg("--experiment")
        .arg(&exp_path)
        .arg("--cluster")
        .arg(&cluster_path)
        .arg("--dir")
        .arg(dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (_, addr) = wait_for_ready_line(BufReader::new(child.stdout.take().unwrap())).unwrap();
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    writeln!(child.stdin.take().unwrap(), "{addr} {}", silent.local_addr().unwrap()).unwrap();
    Node { child, addr, secret, dir, _silent_peer: silent }
}

impl Node {
    fn client(&self, id: u64, timeout: Duration) -> BlockingConn {
        BlockingConn::connect(self.addr, Some(&operator_key(&self.secret)), Hello::Client { client: ClientId(id), site: 0 }, timeout).unwrap()
    }

    /// A browse served end to end: the node is alive and answering.
    fn serves(&self, id: u64) {
        let mut c = self.client(id, T);
        let request = Request { client: ClientId(id), seq: 0, txn: "browse_items".into(), params: vec![Value::Int(1), Value::Int(3)] };
        c.send(&Frame::<Never, Never>::Request { to: ProcessId(0), request }).unwrap();
        match c.recv::<Never, BeltEvidence>().unwrap() {
            Frame::Reply { reply, .. } => assert!(matches!(reply.body, ReplyBody::Done(_)), "{reply:?}"),
            other => panic!("expected a reply, got {other:?}"),
        }
    }

    fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    /// Stops the node the way an operator does and returns what its process reported.
    fn stop(mut self) -> ProcessReport {
        send_shutdown(self.addr, Some(&operator_key(&self.secret)), T).unwrap();
        assert!(self.child.wait().unwrap().success());
        let text = std::fs::read_to_string(self.dir.path().join("host0-report.json")).unwrap();
        let mut reports: Vec<ProcessReport> = serde_json::from_str(&text).unwrap();
        reports.remove(0)
    }
}

/// Everything a raw connection gets back after `bytes`, until the node closes it.
fn raw(addr: SocketAddr, bytes: &[u8], close: bool) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    s.write_all(bytes).unwrap();
    if close {
        s.shutdown(std::net::Shutdown::Write).unwrap();
    }
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    String::from_utf8_lossy(&got).into_owned()
}

fn token(globals: u64, entries: Vec<(u64, u32)>) -> Message {
    let update = StateUpdate {
        changes: vec![RowChange {
            table: "items".into(),
            kind: ChangeKind::Insert { row: vec![("item_id".into(), Value::Int(999_999)), ("name".into(), Value::Text("forged".into()))] },
        }],
        writer: None,
    };
    let entries = entries.into_iter().map(|(seq, origin)| TokenEntry { seq, origin: InstanceId(origin), update: update.clone() }).collect();
    Message::Token(Token { hops: 1, globals, entries })
}

fn as_peer(node: &Node, secret: Option<&Secret>) -> Result<BlockingConn, ensemble_net::NetError> {
    BlockingConn::connect(node.addr, secret, Hello::Peer { host: HostId(1), processes: vec![ProcessId(1)] }, T)
}

#[test]
fn strangers_cannot_stop_or_steer_a_node_and_a_crafted_token_is_refused() {
    let node = start_node();
    // The six bytes that stopped a node: a bare Shutdown frame.
    let said = raw(node.addr, &[0, 0, 0, 0, PROTOCOL_VERSION, 6], true);
    assert!(said.contains("expected Hello, got a Shutdown frame"), "{said}");
    node.serves(1);

    // Posing as instance 1's host without the secret, with a token whose update writes an
    // `items` row: the node wants a proof first, and never sees the token.
    let hello = encode_frame::<Never, Never>(&Frame::Hello { hello: Hello::Peer { host: HostId(1), processes: vec![ProcessId(1)] }, nonce: [0; 32] }).unwrap();
    let forged = encode_frame::<Message, Never>(&Frame::Message { from: ProcessId(1), to: ProcessId(0), msg: token(1, vec![(1, 1)]) }).unwrap();
    let said = raw(node.addr, &[hello.to_vec(), forged.to_vec()].concat(), true);
    assert!(said.contains("expected Proof, got a Message frame"), "{said}");
    assert!(as_peer(&node, Some(&Secret::generate())).is_err(), "a wrong key was accepted");
    assert!(as_peer(&node, Some(&operator_key(&node.secret))).is_err(), "a client's key let a connection pose as a host");

    // A member that sends a token which puts the node's own entry after another's: refused,
    // named, and the node serves on.
    let mut peer = as_peer(&node, Some(&pair_key(&node.secret, 0, 1))).unwrap();
    let crafted = token(2, vec![(1, 1), (2, 0)]);
    peer.send(&Frame::<Message, Never>::Message { from: ProcessId(1), to: ProcessId(0), msg: crafted }).unwrap();
    node.serves(2);
    assert!(probe(node.addr, Some(&operator_key(&node.secret)), T).is_ok());

    let report = node.stop();
    assert_eq!(report.failure, None, "{report:?}");
    assert_eq!(report.traffic.messages_in, 1, "only the member's token reached the process");
    assert_eq!(report.traffic.messages_refused, 1, "{report:?}");
    assert!(report.counters.iter().any(|(k, v)| k == "tokens_refused" && *v == 1), "{:?}", report.counters);
}

#[test]
fn a_flood_of_unread_requests_and_of_huge_frames_leaves_the_node_small() {
    let node = start_node();
    node.serves(1);
    let before = node.rss_kib();
    // 20000 browses of 200 items each, replies never read: 12 MiB → 1.26 GiB before replies
    // needed credit. The node now stops reading, so the client's writes block (and time out).
    let mut greedy = node.client(2, Duration::from_secs(2));
    let mut sent = 0;
    for seq in 0..20_000u64 {
        let request = Request { client: ClientId(2), seq, txn: "browse_items".into(), params: vec![Value::Int(1), Value::Int(200)] };
        if greedy.send(&Frame::<Never, Never>::Request { to: ProcessId(0), request }).is_err() {
            break;
        }
        sent += 1;
    }
    // Eight connections announcing 64 MiB frames before any Hello: 493 MiB held before.
    let huge = [(64u32 << 20).to_be_bytes().to_vec(), vec![PROTOCOL_VERSION, 1]].concat();
    for _ in 0..8 {
        let said = raw(node.addr, &huge, false);
        assert!(said.contains("over the limit of 4096 bytes"), "{said}");
    }
    node.serves(3);
    let after = node.rss_kib();
    eprintln!("node RSS {before} KiB before, {after} KiB after {sent} unread requests and 8 huge frames");
    assert!(after < before + 200 * 1024, "the node grew from {before} KiB to {after} KiB");
    drop(greedy);
    node.serves(4);
    let report = node.stop();
    assert_eq!(report.failure, None);
}
