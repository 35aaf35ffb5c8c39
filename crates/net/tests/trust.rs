//! Who may talk to a host and what a connection can make it hold: each attack of issue 11, and
//! that the host keeps serving its real clients through all of them.
//!
//! Deadlines are shortened in these clusters so the tests that wait for one are quick; nothing
//! asserts how long anything took.

mod common;

use common::{assert_all_answered, operator, ring_of, slots, test_secret, Cluster, RingMsg, Served, ToyClient};
use ensemble_core::topology::Topology;
use ensemble_core::{ClientId, Deployment, ProcessId, Request};
use ensemble_net::frame::{encode_frame, Never, PROTOCOL_VERSION};
use ensemble_net::{BlockingConn, Frame, Hello, HostId, Limits, NetError, Secret};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

const T: Duration = Duration::from_secs(30);

fn limits() -> Limits {
    Limits {
        max_connections: 8,
        in_flight_per_connection: 4,
        hello_deadline: Duration::from_millis(300),
        frame_deadline: Duration::from_millis(300),
        ..Limits::default()
    }
}

fn cluster(n: usize) -> Cluster {
    let d = Deployment::one_per_machine(&vec![0; n], 2, "ring");
    let build = ring_of(&d, &[]);
    Cluster::start_with(d, Topology::lan(), false, 2, Some(test_secret()), limits(), build)
}

fn request(client: u64, seq: u64, to: u32) -> Frame<Never, Never> {
    Frame::Request { to: ProcessId(to), request: Request { client: ClientId(client), seq, txn: "toy".into(), params: vec![] } }
}

/// Everything the host sends on a raw connection after `bytes`, until it closes. With
/// `stall`, the write side stays open, so only a deadline of the host can end the connection.
fn raw_conn(addr: SocketAddr, bytes: &[u8], stall: bool) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    s.write_all(bytes).unwrap();
    if !stall {
        s.shutdown(std::net::Shutdown::Write).unwrap();
    }
    let mut got = Vec::new();
    s.read_to_end(&mut got).expect("the host closes the connection");
    String::from_utf8_lossy(&got).into_owned()
}

fn raw(addr: SocketAddr, bytes: &[u8]) -> String {
    raw_conn(addr, bytes, false)
}

fn raw_stalled(addr: SocketAddr, bytes: &[u8]) -> String {
    raw_conn(addr, bytes, true)
}

/// The host still serves: two clients, five requests each, all answered.
fn still_serves(c: &Cluster) {
    let targets: BTreeMap<_, _> = [(ClientId(100), ProcessId(0)), (ClientId(101), ProcessId(0))].into();
    let done = c.run(slots(targets.iter().map(|(c, p)| (ToyClient::boxed(c.0, p.0, 5), 0))), 10);
    assert_all_answered(&done, &targets, 5);
}

fn admin(c: &Cluster, secret: Option<&Secret>) -> Result<BlockingConn, NetError> {
    BlockingConn::connect(c.addr(0), secret, Hello::Admin, T)
}

#[test]
fn a_bare_shutdown_frame_from_a_stranger_stops_nothing() {
    let c = cluster(1);
    // The six bytes that stopped a node: length 0, version, kind Shutdown.
    let text = raw(c.addr(0), &[0, 0, 0, 0, PROTOCOL_VERSION, 6]);
    assert!(text.contains("expected Hello, got a Shutdown frame"), "{text}");
    still_serves(&c);
    c.stop_clean();
}

#[test]
fn without_the_secret_no_role_is_granted() {
    let c = cluster(2);
    let wrong = Secret::from_bytes([1; 32]);
    // A dialer with the wrong secret sees that the host cannot prove the right one, and stops.
    let err = BlockingConn::connect(c.addr(0), Some(&wrong), Hello::Peer { host: HostId(1), processes: vec![ProcessId(1)] }, T).err().unwrap();
    assert!(err.to_string().contains("failed to prove it knows the cluster secret"), "{err}");
    // A member that is host h1 cannot be told apart by a shared secret, but h0 and h1 share a
    // key no other host holds: a third party with the operator's key, or another host's pair
    // key, cannot pose as h1.
    let as_h1 = |key: &Secret| BlockingConn::connect(c.addr(0), Some(key), Hello::Peer { host: HostId(1), processes: vec![ProcessId(1)] }, T);
    assert!(as_h1(&operator()).is_err(), "the operator's key let a connection pose as host h1");
    assert!(as_h1(&ensemble_net::auth::pair_key(&test_secret(), 0, 2)).is_err(), "another pair's key let a connection pose as host h1");
    assert!(as_h1(&ensemble_net::auth::pair_key(&test_secret(), 0, 1)).is_ok());
    // One without any secret is told the host requires it.
    let err = admin(&c, None).err().unwrap();
    assert!(err.to_string().contains("requires the cluster secret"), "{err}");
    // A stranger posing as peer h1 that skips the proof and sends a token-like message, or
    // sends a made-up proof: refused before anything reaches a process.
    let hello = encode_frame::<Never, Never>(&Frame::Hello { hello: Hello::Peer { host: HostId(1), processes: vec![ProcessId(1)] }, nonce: [0; 32] }).unwrap();
    let forged = Frame::<RingMsg, Never>::Message {
        from: ProcessId(1),
        to: ProcessId(0),
        msg: RingMsg::Forward { origin: ProcessId(1), request: Request { client: ClientId(0), seq: 0, txn: "toy".into(), params: vec![] } },
    };
    let text = raw(c.addr(0), &[hello.to_vec(), encode_frame(&forged).unwrap().to_vec()].concat());
    assert!(text.contains("expected Proof, got a Message frame"), "{text}");
    let proof = encode_frame::<Never, Never>(&Frame::Proof([7; 32])).unwrap();
    let text = raw(c.addr(0), &[hello.to_vec(), proof.to_vec()].concat());
    assert!(text.contains("wrong proof"), "{text}");
    still_serves(&c);
    let reports = c.stop_clean();
    // The ring's own messages only: 10 requests, each forwarded once around two processes.
    assert_eq!(reports[0].processes[0].traffic.messages_in, 10);
    assert!(reports[0].bad_connections >= 2);
}

#[test]
fn a_client_may_neither_stop_the_host_nor_speak_for_another_client() {
    let c = cluster(1);
    let secret = operator();
    let mut first = BlockingConn::connect(c.addr(0), Some(&secret), Hello::Client { client: ClientId(7), site: 0 }, T).unwrap();
    // Once the first session has been served (so the host has seen its proof), a second session
    // claiming client 7 is refused, and the first keeps its replies.
    first.send(&request(7, 0, 0)).unwrap();
    assert!(matches!(first.recv::<Never, Served>().unwrap(), Frame::Reply { reply, .. } if reply.client == ClientId(7) && reply.seq == 0));
    let err = BlockingConn::connect(c.addr(0), Some(&secret), Hello::Client { client: ClientId(7), site: 0 }, T).err().unwrap();
    assert!(err.to_string().contains("client c7 is already connected"), "{err}");
    // Requests in another client's name, and Shutdown, are not a client's to send.
    first.send(&request(8, 1, 0)).unwrap();
    assert!(matches!(first.recv::<Never, Served>().unwrap(), Frame::Error(t) if t.contains("request of c8 on the connection of c7")));
    let mut other = BlockingConn::connect(c.addr(0), Some(&secret), Hello::Client { client: ClientId(9), site: 0 }, T).unwrap();
    other.send(&Frame::<Never, Never>::Shutdown).unwrap();
    assert!(matches!(other.recv::<Never, Served>().unwrap(), Frame::Error(t) if t.contains("a Shutdown frame is not for client c9 to send")));
    // Once the first session is gone, client 7 may connect again.
    drop(first);
    still_serves(&c);
    let mut again = (0..100)
        .find_map(|_| BlockingConn::connect(c.addr(0), Some(&secret), Hello::Client { client: ClientId(7), site: 0 }, T).ok())
        .expect("client 7 can reconnect after its first session closed");
    again.send(&request(7, 1, 0)).unwrap();
    assert!(matches!(again.recv::<Never, Served>().unwrap(), Frame::Reply { .. }));
    c.stop_clean();
}

#[test]
fn an_operator_pings_and_a_forged_frame_after_the_handshake_is_caught() {
    let c = cluster(1);
    let status = ensemble_net::probe(c.addr(0), Some(&operator()), T).unwrap();
    assert!(status.quiescent);
    // A frame whose tag is not the session's: what an attacker injecting into an authenticated
    // TCP stream would send.
    let mut conn = admin(&c, Some(&operator())).unwrap();
    let mut ping = encode_frame::<Never, Never>(&Frame::Ping(1)).unwrap().to_vec();
    ping[3] += ensemble_net::auth::TAG_LEN as u8;
    ping.extend_from_slice(&[0; ensemble_net::auth::TAG_LEN]);
    conn.send_raw(&ping).unwrap();
    match conn.recv::<Never, Never>().unwrap() {
        Frame::Error(t) => assert!(t.contains("Ping frame failed authentication"), "{t}"),
        other => panic!("expected an Error frame, got {other:?}"),
    }
    still_serves(&c);
    c.stop_clean();
}

#[test]
fn oversized_stalled_and_silent_connections_are_closed_and_connections_are_capped() {
    let c = cluster(1);
    // Announcing a 64 MiB frame before authenticating: refused on the header.
    let text = raw(c.addr(0), &[(64u32 << 20).to_be_bytes().to_vec(), vec![PROTOCOL_VERSION, 1]].concat());
    assert!(text.contains("over the limit of 4096 bytes"), "{text}");
    // An authenticated client announcing one: over the clients' limit.
    let mut client = BlockingConn::connect(c.addr(0), Some(&operator()), Hello::Client { client: ClientId(3), site: 0 }, T).unwrap();
    client.send_raw(&[(64u32 << 20).to_be_bytes().to_vec(), vec![PROTOCOL_VERSION, 3]].concat()).unwrap();
    match client.recv::<Never, Served>().unwrap() {
        Frame::Error(t) => assert!(t.contains("over the limit of 1048576 bytes"), "{t}"),
        other => panic!("expected an Error frame, got {other:?}"),
    }
    // Half a header, then nothing: closed at the frame deadline. Nothing at all: at the
    // handshake deadline.
    let text = raw_stalled(c.addr(0), &[0, 0]);
    assert!(text.contains("no complete handshake within"), "{text}");
    let text = raw_stalled(c.addr(0), &[]);
    assert!(text.contains("no complete handshake within"), "{text}");
    // Eight connections (the cap) held open: the ninth is refused and told why.
    let held: Vec<_> = (0..8).map(|i| BlockingConn::connect(c.addr(0), Some(&operator()), Hello::Client { client: ClientId(200 + i), site: 0 }, T)).collect();
    let refused = held.iter().filter(|h| h.is_err()).count();
    let ninth = BlockingConn::connect(c.addr(0), Some(&operator()), Hello::Admin, T);
    assert!(refused > 0 || ninth.is_err(), "nine connections were all accepted under a cap of eight");
    if let Err(e) = &ninth {
        assert!(e.to_string().contains("too many connections"), "{e}");
    }
    drop(held);
    drop(ninth);
    // The host frees a connection's slot once it has seen it close: an operator gets in again.
    assert!((0..200).any(|_| ensemble_net::probe(c.addr(0), Some(&operator()), T).is_ok()), "the cap was never released");
    let reports = c.stop();
    assert!(reports[0].bad_connections >= 4);
}

#[test]
fn a_client_that_never_reads_stops_being_read() {
    // Each reply echoes a 60 kB blob: 20000 of them are 1.2 GB, which the host held in its reply
    // queue before it had credit. Now it stops reading once `in_flight_per_connection` replies
    // are unwritten, so the socket buffers fill and the client's writes block.
    let c = cluster(1);
    let short = Duration::from_secs(2);
    let mut greedy = BlockingConn::connect(c.addr(0), Some(&operator()), Hello::Client { client: ClientId(5), site: 0 }, short).unwrap();
    let big = vec![0xab_u8; 60_000];
    let mut sent = 0u64;
    // Writes block once the host stops reading; a write timeout ends the attack.
    let stream_full = (0..20_000u64).any(|seq| {
        let params = vec![ensemble_core::Value::Blob(big.clone())];
        let r = Frame::<Never, Never>::Request { to: ProcessId(0), request: Request { client: ClientId(5), seq, txn: "toy".into(), params } };
        let ok = greedy.send(&r).is_ok();
        sent += u64::from(ok);
        !ok
    });
    assert!(stream_full, "the host read all 20000 requests of a client that reads nothing");
    still_serves(&c);
    drop(greedy);
    let reports = c.stop();
    let t = &reports[0].processes[0].traffic;
    assert!(t.requests <= sent && sent < 20_000, "{} requests taken of {sent} sent", t.requests);
}

#[test]
fn a_host_without_a_secret_refuses_to_listen_beyond_loopback() {
    let d = Deployment::one_per_machine(&[0], 2, "ring");
    let (spec, _listeners) = ensemble_net::ClusterSpec::local_bound(d.clone(), Topology::lan(), false).unwrap();
    let cfg = spec.host_config(HostId(0)).unwrap();
    assert!(cfg.keys.is_none());
    let open = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let build = ring_of(&d, &[]);
    let storages = common::Storages::default();
    let processes = vec![build(ProcessId(0), &storages)];
    let err = ensemble_net::run_host_on(open, cfg, processes, ensemble_net::ShutdownHandle::new()).err().unwrap();
    assert!(err.to_string().contains("refusing to listen on 0.0.0.0"), "{err}");
    assert!(err.to_string().contains("without a cluster secret"), "{err}");
}

/// Holds every request it gets and never answers; says it is busy once it holds `busy_at`.
struct Hoarder {
    id: ProcessId,
    held: usize,
    busy_at: usize,
}

impl ensemble_core::Process<common::Ring> for Hoarder {
    fn id(&self) -> ProcessId {
        self.id
    }
    fn start(&mut self, _: ensemble_core::Time, _: &mut Vec<ensemble_core::Effect<common::Ring>>) {}
    fn on_event(&mut self, _: ensemble_core::Time, event: ensemble_core::Event<common::Ring>, _: &mut Vec<ensemble_core::Effect<common::Ring>>) {
        if let ensemble_core::Event::Request(_) = event {
            self.held += 1;
        }
    }
    fn quiescent(&self) -> bool {
        self.held < self.busy_at
    }
}

#[test]
fn a_ping_says_whether_every_process_of_the_host_is_quiescent() {
    let d = Deployment::one_per_machine(&[0], 2, "hoarder");
    let c = Cluster::start_with(d, Topology::lan(), false, 1, Some(test_secret()), limits(), |p, _| {
        ensemble_net::HostedProcess::new(Hoarder { id: p, held: 0, busy_at: 1 })
    });
    let idle = ensemble_net::probe(c.addr(0), Some(&operator()), T).unwrap();
    assert!(idle.quiescent && idle.in_flight.is_none(), "{idle:?}");
    let mut client = BlockingConn::connect(c.addr(0), Some(&operator()), Hello::Client { client: ClientId(1), site: 0 }, T).unwrap();
    client.send(&request(1, 0, 0)).unwrap();
    // The request and the probes travel on different connections, so the first probes may
    // overtake it; once the loop has it, every answer must be "not quiescent".
    let busy = (0..1000).map(|_| ensemble_net::probe(c.addr(0), Some(&operator()), T).unwrap()).find(|s| !s.quiescent);
    let busy = busy.expect("a host holding an unanswered request said it was quiescent");
    // The hoarder does not say what it holds: the host says which process is busy.
    assert_eq!(busy.in_flight.as_deref(), Some("p0: work in flight (the process does not say which)"), "{busy:?}");
    drop(client);
    c.stop();
}

#[test]
fn a_host_whose_storage_job_never_ends_names_it_when_probed_and_still_reports_when_stopped() {
    let d = Deployment::one_per_machine(&[0], 2, "ring");
    let c = Cluster::start_with(d.clone(), Topology::lan(), false, 2, Some(test_secret()), limits(), ring_of(&d, &[]));
    let mut client = BlockingConn::connect(c.addr(0), Some(&operator()), Hello::Client { client: ClientId(1), site: 0 }, T).unwrap();
    let stall = Request { client: ClientId(1), seq: 0, txn: "stall".into(), params: vec![] };
    client.send(&Frame::<Never, Never>::Request { to: ProcessId(0), request: stall }).unwrap();
    // A job is named once it has run a second; until then the host says only that it is busy.
    let deadline = std::time::Instant::now() + T;
    let named = loop {
        let status = ensemble_net::probe(c.addr(0), Some(&operator()), T).unwrap();
        match status.in_flight {
            Some(w) if w.contains("has run job") => break w,
            _ if std::time::Instant::now() > deadline => panic!("the stalled job was never named: {status:?}"),
            _ => {}
        }
    };
    assert!(named.starts_with("p0: work in flight") && named.contains("storage: ensemble-storage-p0-") && named.contains("has run job 0 for"), "{named}");
    // The worker is still stuck: the host stops anyway, and reports what it had in flight
    // (the bound turns a host that waits for its worker into a failure, not a hang).
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(c.stop()));
    let stopped = rx.recv_timeout(T);
    common::RELEASE_STALLED.store(true, std::sync::atomic::Ordering::SeqCst);
    let reports = stopped.expect("the host did not stop while a storage job of its was stuck");
    let in_flight = reports[0].processes[0].in_flight.clone().expect("a stalled job is in flight");
    assert!(in_flight.contains("has run job 0 for"), "{in_flight}");
    drop(client);
}

#[test]
fn the_hosts_in_flight_credit_bounds_all_clients_together_but_not_its_operator() {
    // Three requests in flight over the whole host; a hoarder never answers, so none returns.
    let d = Deployment::one_per_machine(&[0], 2, "hoarder");
    let limits = Limits { in_flight_per_connection: 100, in_flight_per_host: 3, ..limits() };
    let c = Cluster::start_with(d, Topology::lan(), false, 1, Some(test_secret()), limits, |p, _| {
        ensemble_net::HostedProcess::new(Hoarder { id: p, held: 0, busy_at: 3 })
    });
    let connect = |id| BlockingConn::connect(c.addr(0), Some(&operator()), Hello::Client { client: ClientId(id), site: 0 }, T).unwrap();
    let (mut a, mut b) = (connect(1), connect(2));
    for seq in 0..10 {
        a.send(&request(1, seq, 0)).unwrap();
    }
    b.send(&request(2, 0, 0)).unwrap();
    // The operator is still answered, and sees the host busy once the loop holds three.
    let busy = (0..1000).any(|_| !ensemble_net::probe(c.addr(0), Some(&operator()), T).unwrap().quiescent);
    assert!(busy);
    // Stopped with both clients connected: a connection that goes away gives its credit back
    // (`Credit`), so dropping `a` first would let `b`'s waiting request in, a fourth.
    let reports = c.stop();
    drop((a, b));
    assert_eq!(reports[0].processes[0].traffic.requests, 3, "the host took more than its in-flight credit");
}
