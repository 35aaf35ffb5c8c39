//! Hosts and clients on loopback, end to end, one process per host.
//!
//! Nothing here sleeps to synchronise: listeners are bound before anyone dials them, runs end
//! when the expected number of completions has been seen (the deadline is only a bound that
//! turns a hang into a failure), and the only timing assertions are lower bounds, which the WAN
//! emulation guarantees.

mod common;

use common::{assert_all_answered, ring_of, serve_two_clients_per_process, slots, two_sites, until, Cluster, RingMsg, Served, ToyClient};
use ensemble_core::topology::Topology;
use ensemble_core::{ClientId, Deployment, ProcessId, Request};
use ensemble_net::frame::{encode_frame, FrameCodec, Never, HEADER_LEN, PROTOCOL_VERSION};
use ensemble_net::{probe, run_clients, Frame, Hello, HostId, RequestHold, StopReason};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

fn one_per_host(sites: &[usize]) -> Deployment {
    Deployment::one_per_machine(sites, 2, "ring")
}

fn lan_cluster(n: usize) -> Cluster {
    let d = one_per_host(&vec![0; n]);
    let build = ring_of(&d, &[]);
    Cluster::start(d, Topology::lan(), false, 2, build)
}

/// A cluster without a secret, so raw frames can be written without a handshake's proof (the
/// host still answers a Hello with a Challenge, without a proof).
fn plain_cluster(n: usize) -> Cluster {
    let d = one_per_host(&vec![0; n]);
    let build = ring_of(&d, &[]);
    Cluster::start_with(d, Topology::lan(), false, 2, None, ensemble_net::Limits::default(), build)
}

/// A hold on a process's requests ([`RequestHold`], what `ensemble bench --restart-node` uses
/// before it kills the process's host): the holder is told once every request sent to it is
/// answered, and then nothing is in flight at any host; the requests the clients send meanwhile
/// wait in the driver, and once released every one is answered, none lost.
#[test]
fn requests_held_for_a_process_wait_in_the_driver_and_are_answered_once_released() {
    let cluster = lan_cluster(2);
    let per_client = 20;
    let targets: BTreeMap<_, _> = (0..4u64).map(|c| (ClientId(c), ProcessId(0))).collect();
    let clients = slots(targets.iter().map(|(c, p)| (ToyClient::boxed(c.0, p.0, per_client), 0)));
    let hold = RequestHold::default();
    let mut cfg = cluster.client_config();
    cfg.hold = Some(hold.clone());
    let expected = targets.len() * per_client as usize;
    let driver = std::thread::spawn(move || {
        let mut done = Vec::new();
        let report = run_clients(cfg, clients, until(&mut done, expected)).unwrap();
        (report, done)
    });
    let answered = hold.hold(vec![ProcessId(0)]);
    answered.recv_timeout(Duration::from_secs(30)).expect("told once the requests sent before the hold are answered");
    for h in 0..2 {
        let status = probe(cluster.addr(h), cluster.spec.operator_key().as_ref(), Duration::from_secs(5)).unwrap();
        assert!(status.quiescent, "host {h} has work in flight while every request is held: {status:?}");
    }
    hold.release(vec![ProcessId(0)]);
    let (report, done) = driver.join().unwrap();
    assert_eq!(report.stopped, StopReason::Callback, "{report:?}");
    assert_eq!((report.requests_undeliverable, report.link_failures), (0, 0), "{report:?}");
    assert_all_answered(&done, &targets, per_client);
    cluster.stop_clean();
}

/// A peer host that ends and starts again at its address (a node killed and started again)
/// gets what is sent to it once it is back, however often it restarts: the link to it is
/// dialed again as soon as its end closes. Written into the old connection, the first message
/// would be taken by the kernel without an error and lost (the old connection's reset comes
/// back only after it), and the request that carried it around the ring would never be
/// answered; and a link that counted each restart as a failure would give up on the peer
/// after a few.
#[test]
fn a_peer_started_again_at_its_address_gets_what_is_sent_to_it_after() {
    let mut cluster = lan_cluster(2);
    let per_client = 5;
    for round in 0..7u64 {
        let client = ClientId(round + 1);
        let targets: BTreeMap<_, _> = [(client, ProcessId(0))].into();
        let done = cluster.run(slots([(ToyClient::boxed(client.0, 0, per_client), 0)]), per_client as usize);
        assert_all_answered(&done, &targets, per_client);
        if round < 6 {
            let old = cluster.restart(1);
            assert_eq!(old.processes[0].traffic.messages_in, per_client, "round {round}: host 1 had every request once: {old:?}");
        }
    }
    let reports = cluster.stop_clean();
    assert_eq!(reports[1].processes[0].traffic.messages_in, per_client, "every request of the last run crossed to host 1 once");
}

#[test]
fn three_host_ring_answers_every_request() {
    let cluster = lan_cluster(3);
    let per_client = 25;
    serve_two_clients_per_process(&cluster, per_client);

    let runs = cluster.storages.runs();
    let reports = cluster.stop_clean();
    // Two clients per process; each request runs once, at the process it was sent to.
    assert_eq!(runs.values().copied().collect::<Vec<_>>(), vec![2 * per_client; 3]);
    let total = 6 * per_client;
    for r in &reports {
        let [p] = &r.processes[..] else { panic!("one process per host: {r:?}") };
        let t = &p.traffic;
        assert_eq!((t.requests, t.storage_jobs, t.storage_done, t.replies), (2 * per_client, 2 * per_client, 2 * per_client, 2 * per_client));
        assert_eq!((t.replies_undeliverable, t.messages_undeliverable, r.bad_connections, r.messages_misaddressed), (0, 0, 0, 0));
        // Every request crossed all three ring links once, each a frame between hosts.
        assert_eq!((t.messages_in, t.messages_out_remote, t.messages_out_local), (total, total, 0));
        assert_eq!((r.peer_messages_in, r.peer_messages_out), (total, total));
        assert_eq!(p.counters, vec![("forwarded".to_string(), 2 * 2 * per_client), ("served_in_memory".to_string(), 0)]);
    }
}

#[test]
fn a_single_host_sends_ring_messages_to_itself() {
    let cluster = lan_cluster(1);
    let targets: BTreeMap<_, _> = [(ClientId(5), ProcessId(0))].into();
    let done = cluster.run(slots([(ToyClient::boxed(5, 0, 10), 0)]), 10);
    assert_all_answered(&done, &targets, 10);
    let reports = cluster.stop_clean();
    let t = &reports[0].processes[0].traffic;
    assert_eq!((t.messages_in, t.messages_out_local, t.messages_out_remote), (10, 10, 0));
    assert_eq!((reports[0].peer_messages_in, reports[0].peer_messages_out), (0, 0));
}

#[test]
fn the_clients_stop_when_every_one_is_finished_not_at_the_deadline() {
    let cluster = lan_cluster(2);
    let mut done = Vec::new();
    // The driver's deadline is a minute away and the callback never breaks: only the clients'
    // own word that they are finished ends the run.
    let report = ensemble_net::run_clients(cluster.client_config(), slots([(ToyClient::boxed(1, 0, 6), 0), (ToyClient::boxed(2, 1, 6), 0)]), |c| {
        done.push(c);
        std::ops::ControlFlow::Continue(())
    })
    .unwrap();
    assert_eq!(report.stopped, ensemble_net::StopReason::Finished, "{report:?}");
    assert_eq!((report.completions, report.requests_sent, report.replies), (12, 12, 12));
    let targets: BTreeMap<_, _> = [(ClientId(1), ProcessId(0)), (ClientId(2), ProcessId(1))].into();
    assert_all_answered(&done, &targets, 6);
    cluster.stop_clean();
}

/// Connects raw, sends `bytes`, and returns every frame the host sends back until it closes.
fn misbehave(addr: SocketAddr, bytes: &[u8]) -> Vec<Frame<Never, Served>> {
    use bytes::BytesMut;
    use tokio_util::codec::Decoder;
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(bytes).unwrap();
    // Half-close, so that a frame cut short is seen as truncated rather than awaited.
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut got = Vec::new();
    s.read_to_end(&mut got).expect("the host should close the connection after its Error frame");
    let mut buf = BytesMut::from(&got[..]);
    let mut codec = FrameCodec::<Never, Served>::new();
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

fn hello(h: Hello) -> Vec<u8> {
    encode_frame::<Never, Never>(&Frame::Hello { hello: h, nonce: [0; 32] }).unwrap().to_vec()
}

fn client_hello(client: u64) -> Vec<u8> {
    hello(Hello::Client { client: ClientId(client), site: 0 })
}

fn request(client: u64, to: u32) -> Vec<u8> {
    let request = Request { client: ClientId(client), seq: 0, txn: "toy".into(), params: vec![] };
    encode_frame::<Never, Never>(&Frame::Request { to: ProcessId(to), request }).unwrap().to_vec()
}

fn message(from: u32, to: u32) -> Vec<u8> {
    let request = Request { client: ClientId(0), seq: 0, txn: "toy".into(), params: vec![] };
    let msg = RingMsg::Forward { origin: ProcessId(from), request };
    encode_frame::<RingMsg, Never>(&Frame::Message { from: ProcessId(from), to: ProcessId(to), msg }).unwrap().to_vec()
}

/// Each kind of garbage host h0 (running p0, of two hosts) may be sent, and the words its Error
/// frame must contain.
fn garbage() -> Vec<(Vec<u8>, &'static str)> {
    let v = PROTOCOL_VERSION;
    let valid_request = request(900, 0);
    let peer_h1 = hello(Hello::Peer { host: HostId(1), processes: vec![ProcessId(1)] });
    vec![
        (header(0, 9, 6), "unknown protocol version 9"),
        (header(0, 2, 6), "unknown protocol version 2 (this build speaks version 5)"),
        (header(0, v, 42), "unknown frame kind 42"),
        (header(u32::MAX, v, 2), "over the limit"),
        ([header(1, v, 1), vec![0x7f]].concat(), "does not decode as Hello"),
        (valid_request.clone(), "expected Hello, got a Request frame"),
        ([client_hello(900), valid_request.clone(), header(3, v, 3), vec![0xff; 3]].concat(), "does not decode as Request"),
        ([client_hello(902), valid_request[..HEADER_LEN + 2].to_vec()].concat(), "truncated Request frame"),
        (b"GET / HTTP/1.1\r\n\r\n".to_vec(), "unknown protocol version"),
        ([client_hello(903), request(904, 0)].concat(), "request of c904 on the connection of c903"),
        ([client_hello(905), request(905, 1)].concat(), "request for p1, which runs on host h1, not h0"),
        ([client_hello(906), request(906, 9)].concat(), "request for p9, which is not deployed"),
        ([client_hello(907), message(0, 0)].concat(), "a Message frame is not for client c907 to send"),
        (hello(Hello::Client { client: ClientId(908), site: 3 }), "client site 3 out of range: the topology has 1 site(s)"),
        (hello(Hello::Peer { host: HostId(1), processes: vec![ProcessId(0)] }), "host h1 says it runs [p0], but the cluster spec gives it [p1]"),
        (hello(Hello::Peer { host: HostId(0), processes: vec![ProcessId(0)] }), "host h0 is this host, not a peer"),
        (hello(Hello::Peer { host: HostId(5), processes: vec![] }), "host h5 is not in the cluster (2 host(s))"),
        ([peer_h1.clone(), message(0, 0)].concat(), "message from p0, which host h1 does not run"),
        ([peer_h1, request(1, 0)].concat(), "a Request frame is not for peer host h1 to send"),
    ]
}

#[test]
fn garbage_gets_an_error_frame_and_other_clients_lose_nothing() {
    let cluster = plain_cluster(2);
    let addr = cluster.addr(0);
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
    let targets: BTreeMap<_, _> = (0..4u64).map(|c| (ClientId(c), ProcessId((c % 2) as u32))).collect();
    let clients = slots(targets.iter().map(|(c, p)| (ToyClient::boxed(c.0, p.0, per_client), 0)));
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

    let reports = cluster.stop_clean();
    assert_eq!(reports[0].bad_connections, 3 * cases.len() as u64);
    assert_eq!(reports[1].bad_connections, 0);
    // The toy's own clients (0 and 2 at p0) plus the misbehaving connections' valid requests,
    // each answered (or dropped if the connection was already closed).
    assert!(reports[0].processes[0].traffic.requests >= 2 * per_client);
}

#[test]
fn a_message_for_a_process_this_host_does_not_run_is_counted_and_dropped() {
    let cluster = plain_cluster(2);
    // Posing as host h1 (which runs p1): two misaddressed messages, then one that breaks the
    // protocol. The Error frame comes after the connection's reader has passed the first two on,
    // in order, so the host has them before anything the clients below send.
    let bytes = [
        hello(Hello::Peer { host: HostId(1), processes: vec![ProcessId(1)] }),
        message(1, 7),
        message(1, 1),
        message(0, 0),
    ]
    .concat();
    let frames = misbehave(cluster.addr(0), &bytes);
    assert!(
        matches!(&frames[..], [Frame::Challenge { proof: None, .. }, Frame::Error(t)] if t.contains("message from p0, which host h1 does not run")),
        "{frames:?}"
    );

    let targets: BTreeMap<_, _> = [(ClientId(1), ProcessId(0)), (ClientId(2), ProcessId(1))].into();
    let clients = slots(targets.iter().map(|(c, p)| (ToyClient::boxed(c.0, p.0, 5), 0)));
    let done = cluster.run(clients, 10);
    assert_all_answered(&done, &targets, 5);
    let reports = cluster.stop_clean();
    assert_eq!((reports[0].messages_misaddressed, reports[0].bad_connections), (2, 1));
    assert_eq!(reports[0].processes[0].traffic.messages_in, 10, "only the ring's own messages were delivered");
    assert_eq!(reports[1].messages_misaddressed, 0);
}

#[test]
fn wan_emulation_delays_every_frame_by_at_least_the_topology_delay() {
    // Two sites 40 ms apart one way, nothing inside a site.
    let d = 40.0;
    let topology = two_sites(d);
    let dep = one_per_host(&[0, 1]);
    let build = ring_of(&dep, &[]);
    let cluster = Cluster::start(dep, topology, true, 2, build);
    let per_client = 3;
    // Client 0 at site a talks to p0 (site a): its request goes around the ring a→b→a, so two
    // inter-site hops. Client 1 at site b talks to p0 too: two more hops (request and reply).
    // Client 2 at site b talks to p1 (site b): ring b→a→b.
    let targets: BTreeMap<_, _> = [(ClientId(0), ProcessId(0)), (ClientId(1), ProcessId(0)), (ClientId(2), ProcessId(1))].into();
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
    cluster.stop_clean();
}

#[test]
fn a_connection_that_just_closes_is_not_an_error() {
    let cluster = lan_cluster(1);
    let addr = cluster.addr(0);
    ensemble_net::cluster::wait_until_accepting(addr, Duration::from_secs(5)).unwrap();
    drop(TcpStream::connect(addr).unwrap());
    let done = cluster.run(slots([(ToyClient::boxed(1, 0, 3), 0)]), 3);
    assert_eq!(done.len(), 3);
    let reports = cluster.stop_clean();
    assert_eq!(reports[0].bad_connections, 0);
}
