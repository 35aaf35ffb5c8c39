//! Several processes in one host: what stays inside the host, timers, and a process that fails
//! while its neighbours go on.
//!
//! As in `end_to_end.rs`, nothing sleeps to synchronise and the only timing assertion is a lower
//! bound the WAN emulation guarantees.

mod common;

use common::{
    assert_all_answered, deployment, machines, place, ring_of, serve_two_clients_per_process, slots, two_sites, Cluster, Ring, RingProcess, Served, TimerProbe, ToyClient,
};
use ensemble_core::topology::Topology;
use ensemble_core::{ClientId, CompletionResult, Done, Outcome, ProcessId, Reply, ReplyBody, Request, Value};
use ensemble_net::frame::Never;
use ensemble_net::{run_host_on, ClusterSpec, Frame, Hello, HostId, HostedProcess, NetError, ShutdownHandle};
use std::collections::BTreeMap;

use std::net::SocketAddr;
use std::time::Duration;

#[test]
fn two_processes_in_one_host_talk_without_tcp_and_serve_requests() {
    // Host h0 runs p0 and p1 on machine 0 (p1 without storage); host h1 runs p2 on machine 1.
    let d = deployment(machines(&[0, 0]), vec![place(0, 0, Some(0)), place(1, 0, Some(0)), place(2, 1, None)]);
    let build = ring_of(&d, &[1]);
    let cluster = Cluster::start(d, Topology::lan(), false, 2, build);
    assert_eq!(cluster.spec.hosts.iter().map(|h| h.processes.len()).collect::<Vec<_>>(), [2, 1]);

    let per_client = 20;
    serve_two_clients_per_process(&cluster, per_client);

    let runs = cluster.storages.runs();
    let reports = cluster.stop_clean();
    assert_eq!(runs, [(ProcessId(0), 2 * per_client), (ProcessId(2), 2 * per_client)].into(), "p1 has no storage");
    // Every request crosses each ring link once: p0 → p1 inside h0, p1 → p2 and p2 → p0 between
    // the hosts.
    let total = 6 * per_client;
    let (h0, h1) = (&reports[0], &reports[1]);
    let (p0, p1, p2) = (&h0.processes[0].traffic, &h0.processes[1].traffic, &h1.processes[0].traffic);
    assert_eq!((p0.messages_out_local, p0.messages_out_remote), (total, 0));
    assert_eq!((p1.messages_out_local, p1.messages_out_remote), (0, total));
    assert_eq!((p2.messages_out_local, p2.messages_out_remote), (0, total));
    assert_eq!((p0.messages_in, p1.messages_in, p2.messages_in), (total, total, total));
    // The frames on the wire are exactly the messages between hosts: none of p0 → p1.
    assert_eq!((h0.peer_messages_out, h0.peer_messages_in), (total, total));
    assert_eq!((h1.peer_messages_out, h1.peer_messages_in), (total, total));
    assert_eq!((p1.storage_jobs, p1.replies), (0, 2 * per_client));
    assert_eq!(h0.processes[1].counters, vec![("forwarded".to_string(), 4 * per_client), ("served_in_memory".to_string(), 2 * per_client)]);
}

#[test]
fn processes_of_one_host_on_two_machines_get_the_emulated_wan_delay() {
    // One host runs p0 (machine 0, site a) and p1 (machine 1, site b), 30 ms apart one way.
    let d = 30.0;
    let topology = two_sites(d);
    let dep = deployment(machines(&[0, 1]), vec![place(0, 0, Some(0)), place(1, 1, Some(0))]);
    let build = ring_of(&dep, &[]);
    let cluster = Cluster::start(dep, topology, true, 2, build);
    // A client at site a: its request's ring p0 → p1 → p0 crosses between the sites twice.
    let per_client = 3;
    let targets: BTreeMap<_, _> = [(ClientId(0), ProcessId(0))].into();
    let done = cluster.run(slots([(ToyClient::boxed(0, 0, per_client), 0)]), per_client as usize);
    assert_all_answered(&done, &targets, per_client);
    let floor = Duration::from_millis(2 * d as u64);
    for c in &done {
        let latency = c.completed.saturating_sub(c.issued);
        assert!(latency >= floor, "{:?} took {latency:?}, less than the emulated {floor:?}", c.request);
    }
    let reports = cluster.stop_clean();
    let [h0] = &reports[..] else { panic!("one host") };
    assert_eq!((h0.peer_messages_out, h0.peer_messages_in), (0, 0), "nothing left the host");
    assert_eq!(h0.processes.iter().map(|p| p.traffic.messages_out_local).sum::<u64>(), 2 * per_client);
}

#[test]
fn a_cancelled_timer_is_never_delivered_and_a_moved_one_fires_once() {
    let d = ensemble_core::Deployment::one_per_machine(&[0], 1, "probe");
    let cluster = Cluster::start(d, Topology::lan(), false, 1, |p, _| HostedProcess::new(TimerProbe::new(p)));
    let rounds = 5;
    let done = cluster.run(slots([(ToyClient::boxed(1, 0, rounds), 0)]), rounds as usize);
    for c in &done {
        // Timer 1 was cancelled in the handler that set it; timer 3 was set again to fire later.
        // Both were due before timer 2, whose firing sends the reply: had either misbehaved, it
        // would have shown by then.
        let CompletionResult::Done(Done { outcome, .. }) = &c.result else { panic!("{:?}", c.result) };
        assert_eq!(outcome, &Outcome::Committed(vec![vec![Value::Int(0), Value::Int(1)]]), "fired (timer 1, timer 3)");
    }
    let reports = cluster.stop_clean();
    let t = &reports[0].processes[0].traffic;
    assert_eq!((t.timers_fired, t.timers_cancelled), (2 * rounds, 2 * rounds));
}

/// A client speaking frame by frame, to control exactly what one connection carries and in what
/// order.
struct RawClient {
    conn: ensemble_net::BlockingConn,
    client: ClientId,
}

impl RawClient {
    fn connect(addr: SocketAddr, client: u64) -> RawClient {
        let hello = Hello::Client { client: ClientId(client), site: 0 };
        let conn = ensemble_net::BlockingConn::connect(addr, Some(&common::operator()), hello, Duration::from_secs(30)).unwrap();
        RawClient { conn, client: ClientId(client) }
    }

    fn send(&mut self, to: u32, seq: u64, txn: &str) {
        let request = Request { client: self.client, seq, txn: txn.into(), params: vec![] };
        self.conn.send(&Frame::<Never, Never>::Request { to: ProcessId(to), request }).unwrap();
    }

    fn reply(&mut self) -> (ProcessId, Reply<Served>) {
        match self.conn.recv::<Never, Served>().unwrap() {
            Frame::Reply { from, reply } => (from, reply),
            other => panic!("expected a reply, got {other:?}"),
        }
    }
}

#[test]
fn a_process_whose_handler_or_storage_panics_is_reported_and_its_neighbours_go_on() {
    // One host: p0 and p1, each a ring of its own, one storage worker each (so p0's jobs run in
    // the order they were asked for).
    let d = deployment(machines(&[0]), vec![place(0, 0, Some(0)), place(1, 0, Some(0))]);
    let cluster = Cluster::start(d, Topology::lan(), false, 1, |p, storages| {
        HostedProcess::with_storage(RingProcess::new(p, vec![p], true), storages.factory(p))
    });
    let mut raw = RawClient::connect(cluster.addr(0), 77);
    let healthy = ensemble_net::probe(cluster.addr(0), Some(&common::operator()), Duration::from_secs(30)).unwrap();
    assert_eq!(healthy.failed, None, "{healthy:?}");
    // One connection carries everything, so the host sees it in this order. p0's storage
    // panics on `boom`; its next job (seq 1) is answered, and only after the failed one.
    raw.send(0, 0, "boom");
    raw.send(0, 1, "toy");
    let (from, reply) = raw.reply();
    assert_eq!((from, reply.seq), (ProcessId(0), 1));
    // p1's handler panics on `panic`; p1 is halted, p0 still serves.
    raw.send(1, 2, "panic");
    raw.send(0, 3, "toy");
    assert_eq!(raw.reply().1.seq, 3);
    raw.send(1, 4, "toy");
    raw.send(0, 5, "toy");
    let (from, reply) = raw.reply();
    assert_eq!((from, reply.seq), (ProcessId(0), 5), "the halted p1 answers nothing");
    assert!(matches!(reply.body, ReplyBody::Done(Done { evidence: Served { by: ProcessId(0) }, .. })));
    // A probe says both failures while the host runs, so a run's driver stops on them rather
    // than waiting for replies that will not come.
    let failed = ensemble_net::probe(cluster.addr(0), Some(&common::operator()), Duration::from_secs(30)).unwrap().failed.expect("the probe says the processes failed");
    assert!(failed.starts_with("p0: ") && failed.contains("job WorkId(0) panicked: storage boom"), "{failed}");
    assert!(failed.ends_with("; p1: p1 panicked and was halted: boom"), "{failed}");

    let reports = cluster.stop();
    let (p0, p1) = (&reports[0].processes[0], &reports[0].processes[1]);
    let f0 = p0.failure.as_deref().expect("p0's storage failed");
    assert!(f0.contains("job WorkId(0) panicked: storage boom"), "{f0}");
    assert_eq!((p0.traffic.storage_jobs, p0.traffic.storage_done, p0.traffic.storage_failed), (4, 3, 1));
    let f1 = p1.failure.as_deref().expect("p1 panicked");
    assert_eq!(f1, "p1 panicked and was halted: boom");
    assert_eq!((p1.traffic.requests, p1.traffic.events_dropped), (1, 1), "the request after the panic was dropped");
    assert_eq!(reports[0].failure().map(|(p, _)| p), Some(ProcessId(0)));
}

#[test]
fn a_host_handed_other_processes_than_its_own_refuses_to_start() {
    let d = deployment(machines(&[0]), vec![place(0, 0, Some(0)), place(1, 0, Some(0))]);
    let (spec, mut listeners) = ClusterSpec::local_bound(d, Topology::lan(), false).unwrap();
    let cfg = spec.host_config(HostId(0)).unwrap();
    let only_p1 = vec![HostedProcess::<Ring>::new(RingProcess::new(ProcessId(1), vec![ProcessId(1)], false))];
    let err = run_host_on(listeners.remove(0), cfg, only_p1, ShutdownHandle::new()).unwrap_err();
    assert!(matches!(&err, NetError::Config(m) if m == "host h0 runs processes [p0, p1] but was handed [p1]"), "{err}");
}
