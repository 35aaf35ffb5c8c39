//! Clients in the host's own OS process ([`LocalClients`]): served through a channel beside the
//! clients on its listener, and told plainly when the host is gone.
//!
//! As in `end_to_end.rs`, nothing sleeps to synchronise: runs end when the expected completions
//! are in (the deadline only turns a hang into a failure).

mod common;

use common::{assert_all_answered, deployment, machines, place, ring_of, slots, test_secret, until, Ring, Served, Storages, ToyClient};
use ensemble_core::topology::Topology;
use ensemble_core::{ClientId, ProcessId};
use ensemble_net::{
    run_clients, run_clients_beside, run_host_with_local_clients, ClientDriverConfig, ClusterSpec, HostId, HostReport, LocalClients, NetError,
    ShutdownHandle, StopReason,
};
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// One host running p0 and p1 (a ring of the two, both with storage), with `local` as the way in
/// for clients of this process; its thread returns its report once `stop` is triggered.
fn one_host(local: &LocalClients<Served>, stop: &ShutdownHandle) -> (ClusterSpec, std::thread::JoinHandle<Result<HostReport, NetError>>) {
    let d = deployment(machines(&[0]), vec![place(0, 0, Some(0)), place(1, 0, Some(0))]);
    let build = ring_of(&d, &[]);
    let (mut spec, listeners) = ClusterSpec::local_bound(d, Topology::lan(), false).unwrap();
    spec.secret = Some(test_secret());
    assert_eq!(listeners.len(), 1, "one host");
    let listener = listeners.into_iter().next().unwrap();
    let cfg = spec.host_config(HostId(0)).unwrap();
    let (local, stop) = (local.clone(), stop.clone());
    let host = std::thread::spawn(move || {
        let storages = Storages::default();
        let processes = cfg.processes().iter().map(|p| build(*p, &storages)).collect();
        run_host_with_local_clients::<Ring>(listener, cfg, processes, stop, &local)
    });
    (spec, host)
}

fn config(spec: &ClusterSpec) -> ClientDriverConfig {
    let epoch = Instant::now();
    let mut cfg = spec.client_config(epoch, epoch + Duration::from_secs(60)).unwrap();
    cfg.seed = 7;
    cfg
}

fn run_until(
    cfg: ClientDriverConfig,
    clients: Vec<ensemble_net::ClientSlot<Served>>,
    local: HashMap<SocketAddr, LocalClients<Served>>,
    expected: usize,
) -> (Vec<ensemble_core::Completion<Served>>, ensemble_net::ClientReport) {
    let mut done = Vec::new();
    let report = run_clients_beside(cfg, clients, local, until(&mut done, expected)).unwrap();
    (done, report)
}

#[test]
fn local_clients_are_served_through_the_channel_beside_clients_on_the_socket() {
    let (local, stop) = (LocalClients::new(), ShutdownHandle::new());
    let (spec, host) = one_host(&local, &stop);
    let addr = spec.hosts[0].addr;
    let per_client = 15u64;

    // Local clients hold no key: over the socket the host would refuse them at the handshake,
    // so every answer they get came through the channel.
    let mut keyless = config(&spec);
    keyless.key = None;
    let local_targets: BTreeMap<_, _> = [(ClientId(1), ProcessId(0)), (ClientId(2), ProcessId(1))].into();
    let local_run = std::thread::spawn({
        let (local, targets) = (local.clone(), local_targets.clone());
        move || {
            let clients = slots(targets.iter().map(|(c, p)| (ToyClient::boxed(c.0, p.0, per_client), 0)));
            run_until(keyless, clients, [(addr, local)].into(), 2 * per_client as usize)
        }
    });
    // Beside them, clients with the operator's key on the socket.
    let socket_targets: BTreeMap<_, _> = [(ClientId(3), ProcessId(0)), (ClientId(4), ProcessId(1))].into();
    let clients = slots(socket_targets.iter().map(|(c, p)| (ToyClient::boxed(c.0, p.0, per_client), 0)));
    let mut done = Vec::new();
    let socket_report = run_clients(config(&spec), clients, until(&mut done, 2 * per_client as usize)).unwrap();
    let (local_done, local_report) = local_run.join().unwrap();

    assert_eq!(local_report.stopped, StopReason::Callback, "{local_report:?}");
    assert_eq!((local_report.requests_undeliverable, local_report.link_failures), (0, 0));
    assert_all_answered(&local_done, &local_targets, per_client);
    assert_eq!(socket_report.stopped, StopReason::Callback, "{socket_report:?}");
    assert_all_answered(&done, &socket_targets, per_client);

    stop.trigger();
    let report = host.join().unwrap().unwrap();
    assert_eq!(report.failure(), None, "{report:?}");
    assert_eq!(report.bad_connections, 0, "no local client came through the socket");
    for p in &report.processes {
        let t = &p.traffic;
        assert_eq!((t.requests, t.replies, t.replies_undeliverable), (2 * per_client, 2 * per_client, 0), "{}", p.id);
    }
}

#[test]
fn a_local_client_of_a_host_that_stopped_is_told_and_a_way_in_serves_one_host() {
    let (local, stop) = (LocalClients::new(), ShutdownHandle::new());
    let (spec, host) = one_host(&local, &stop);
    let addr = spec.hosts[0].addr;
    stop.trigger();
    host.join().unwrap().unwrap();

    // The host is gone: the request is counted as undeliverable, and the run ends at its
    // deadline, not in a hang or a panic.
    let mut cfg = config(&spec);
    cfg.deadline = Instant::now() + Duration::from_millis(200);
    let (done, report) = run_until(cfg, slots([(ToyClient::boxed(9, 0, 3), 0)]), [(addr, local.clone())].into(), 3);
    assert!(done.is_empty());
    assert_eq!((report.requests_sent, report.requests_undeliverable, report.stopped), (1, 1, StopReason::Deadline));

    // Its way in cannot serve a second host.
    let (_, second) = one_host(&local, &ShutdownHandle::new());
    let refused = second.join().unwrap().unwrap_err().to_string();
    assert!(refused.contains("served a host already"), "{refused}");
}
