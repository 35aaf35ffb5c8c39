//! Clients in the host's own OS process ([`LocalClients`]): served through a channel beside the
//! clients on its listener, and told plainly when the host is gone; and run on the host's own
//! loop thread ([`ClientsOnLoop`]).
//!
//! As in `end_to_end.rs`, nothing sleeps to synchronise: runs end when the expected completions
//! are in (the deadline only turns a hang into a failure).

mod common;

use common::{assert_all_answered, deployment, machines, place, ring_of, slots, test_secret, until, Ring, Served, Storages, ToyClient};
use ensemble_core::topology::Topology;
use ensemble_core::{ClientId, ProcessId};
use ensemble_net::{
    clients_hand_over, run_clients, run_clients_beside, run_host_with_clients_on_loop, run_host_with_local_clients, ClientDriverConfig,
    ClientReport, ClientsHandOver, ClientsOnLoop, ClusterSpec, HostId, HostReport, LocalClients, NetError, ShutdownHandle, StopReason,
};
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::ops::ControlFlow;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// One host running p0 and p1 (a ring of the two, both with storage), with `local` as the way in
/// for clients of this process; its thread returns its report once `stop` is triggered.
fn one_host(local: &LocalClients<Served>, stop: &ShutdownHandle) -> (ClusterSpec, std::thread::JoinHandle<Result<HostReport, NetError>>) {
    let (spec, serve) = one_host_cluster();
    let (local, stop) = (local.clone(), stop.clone());
    let host = std::thread::spawn(move || serve(Box::new(move |listener, cfg, processes| run_host_with_local_clients::<Ring>(listener, cfg, processes, stop, &local))));
    (spec, host)
}

/// What a host's thread is handed to run its processes on.
type Serve = Box<dyn FnOnce(std::net::TcpListener, ensemble_net::HostConfig, Vec<ensemble_net::HostedProcess<Ring>>) -> Result<HostReport, NetError>>;

/// The cluster of [`one_host`], and what builds its processes (on the host's thread, which
/// owns them) and serves them as it is told.
fn one_host_cluster() -> (ClusterSpec, impl FnOnce(Serve) -> Result<HostReport, NetError> + Send) {
    let d = deployment(machines(&[0]), vec![place(0, 0, Some(0)), place(1, 0, Some(0))]);
    let build = ring_of(&d, &[]);
    let (mut spec, listeners) = ClusterSpec::local_bound(d, Topology::lan(), false).unwrap();
    spec.secret = Some(test_secret());
    assert_eq!(listeners.len(), 1, "one host");
    let listener = listeners.into_iter().next().unwrap();
    let cfg = spec.host_config(HostId(0)).unwrap();
    let serve = move |serve: Serve| {
        let storages = Storages::default();
        let processes = cfg.processes().iter().map(|p| build(*p, &storages)).collect();
        serve(listener, cfg, processes)
    };
    (spec, serve)
}

/// Stops the host and checks that it served `requests` requests per process, each answered,
/// none of them through its socket without a key.
fn stopped_having_served(stop: &ShutdownHandle, host: std::thread::JoinHandle<Result<HostReport, NetError>>, requests: u64) {
    stop.trigger();
    let report = host.join().unwrap().unwrap();
    assert_eq!(report.failure(), None, "{report:?}");
    assert_eq!(report.bad_connections, 0, "no local client came through the socket");
    for p in &report.processes {
        let t = &p.traffic;
        assert_eq!((t.requests, t.replies, t.replies_undeliverable), (requests, requests, 0), "{}", p.id);
    }
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

    stopped_having_served(&stop, host, 2 * per_client);
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

/// The host's loop thread's name in the tests of clients on the loop.
const LOOP_THREAD: &str = "the-host-loop";

/// [`one_host`], on a thread named [`LOOP_THREAD`], which runs the clients handed over through
/// the returned end beside its processes.
fn one_host_running_clients(
    local: &LocalClients<Served>,
    stop: &ShutdownHandle,
) -> (ClusterSpec, ClientsHandOver<Served>, std::thread::JoinHandle<Result<HostReport, NetError>>) {
    let (spec, serve) = one_host_cluster();
    let (local, stop) = (local.clone(), stop.clone());
    let (hand_over, awaited) = clients_hand_over();
    let host = std::thread::Builder::new()
        .name(LOOP_THREAD.into())
        .spawn(move || serve(Box::new(move |listener, cfg, processes| run_host_with_clients_on_loop::<Ring>(listener, cfg, processes, stop, &local, awaited))))
        .unwrap();
    (spec, hand_over, host)
}

/// What the clients on the loop completed, and the names of the threads that saw each
/// completion and the driver's end.
#[derive(Default)]
struct OnLoop {
    done: Vec<ensemble_core::Completion<Served>>,
    threads: Vec<Option<String>>,
}

/// What the clients' driver ended with, and the name of the thread it ended on.
type DriverEnd = mpsc::Receiver<(Result<ClientReport, NetError>, Option<String>)>;

/// Clients on the loop that stop once `expected` completions are in, or, with `stop_host`, that
/// stop the host at the first.
fn on_loop(
    cfg: ClientDriverConfig,
    clients: Vec<ensemble_net::ClientSlot<Served>>,
    local: HashMap<SocketAddr, LocalClients<Served>>,
    expected: usize,
    stop_host: Option<ShutdownHandle>,
) -> (ClientsOnLoop<Served>, Arc<Mutex<OnLoop>>, DriverEnd) {
    let seen = Arc::new(Mutex::new(OnLoop::default()));
    let (done_tx, done) = mpsc::channel();
    let kept = seen.clone();
    let clients = ClientsOnLoop {
        cfg,
        clients,
        local,
        on_complete: Box::new(move |c| {
            let mut kept = kept.lock().unwrap();
            kept.done.push(c);
            kept.threads.push(std::thread::current().name().map(String::from));
            if let Some(stop) = &stop_host {
                stop.trigger();
            }
            if kept.done.len() == expected {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        }),
        done: Box::new(move |report| {
            let _ = done_tx.send((report, std::thread::current().name().map(String::from)));
        }),
    };
    (clients, seen, done)
}

#[test]
fn clients_on_the_hosts_loop_run_on_its_thread_beside_clients_on_the_socket() {
    let (local, stop) = (LocalClients::new(), ShutdownHandle::new());
    let (spec, hand_over, host) = one_host_running_clients(&local, &stop);
    let addr = spec.hosts[0].addr;
    let per_client = 15u64;

    // As above, the clients on the loop hold no key: whatever they got came through the channel.
    let mut keyless = config(&spec);
    keyless.key = None;
    let local_targets: BTreeMap<_, _> = [(ClientId(1), ProcessId(0)), (ClientId(2), ProcessId(1))].into();
    let clients = slots(local_targets.iter().map(|(c, p)| (ToyClient::boxed(c.0, p.0, per_client), 0)));
    let (handed, seen, done) = on_loop(keyless, clients, [(addr, local.clone())].into(), 2 * per_client as usize, None);
    assert!(hand_over.send(handed).is_ok(), "the host takes its clients");
    let socket_targets: BTreeMap<_, _> = [(ClientId(3), ProcessId(0)), (ClientId(4), ProcessId(1))].into();
    let clients = slots(socket_targets.iter().map(|(c, p)| (ToyClient::boxed(c.0, p.0, per_client), 0)));
    let mut socket_done = Vec::new();
    let socket_report = run_clients(config(&spec), clients, until(&mut socket_done, 2 * per_client as usize)).unwrap();
    let (report, ended_on) = done.recv().expect("the clients on the loop report their end");

    let report = report.unwrap();
    assert_eq!(report.stopped, StopReason::Callback, "{report:?}");
    assert_eq!((report.requests_undeliverable, report.link_failures), (0, 0));
    let seen = seen.lock().unwrap();
    assert_all_answered(&seen.done, &local_targets, per_client);
    let on_loop_thread = Some(LOOP_THREAD.to_string());
    assert!(seen.threads.iter().all(|t| *t == on_loop_thread), "completions seen on {:?}", seen.threads);
    assert_eq!(ended_on, on_loop_thread, "the driver ended on the loop's thread");
    assert_eq!(socket_report.stopped, StopReason::Callback, "{socket_report:?}");
    assert_all_answered(&socket_done, &socket_targets, per_client);

    // The clients are done, and the loop still serves until it is told to stop.
    stopped_having_served(&stop, host, 2 * per_client);
}

#[test]
fn clients_on_a_loop_that_stops_first_are_dropped_and_a_host_without_its_clients_serves() {
    // The first completion stops the host: the loop ends, the clients' driver is dropped with it
    // and never says it ended, and the host reports as usual.
    let (local, stop) = (LocalClients::new(), ShutdownHandle::new());
    let (spec, hand_over, host) = one_host_running_clients(&local, &stop);
    let addr = spec.hosts[0].addr;
    let (handed, seen, done) = on_loop(config(&spec), slots([(ToyClient::boxed(1, 0, 1_000), 0)]), [(addr, local.clone())].into(), 1_000, Some(stop));
    assert!(hand_over.send(handed).is_ok());
    let report = host.join().unwrap().unwrap();
    assert_eq!(report.failure(), None, "{report:?}");
    assert!(done.recv().is_err(), "a driver dropped with its loop does not report");
    let completed = seen.lock().unwrap().done.len();
    assert!((1..1_000).contains(&completed), "{completed} of the client's 1,000 requests completed before its loop stopped");

    // A host whose hand-over is dropped serves its socket's clients without any on its loop.
    let (local, stop) = (LocalClients::new(), ShutdownHandle::new());
    let (spec, hand_over, host) = one_host_running_clients(&local, &stop);
    drop(hand_over);
    let targets: BTreeMap<_, _> = [(ClientId(5), ProcessId(1))].into();
    let mut done = Vec::new();
    let report = run_clients(config(&spec), slots([(ToyClient::boxed(5, 1, 4), 0)]), until(&mut done, 4)).unwrap();
    assert_eq!(report.stopped, StopReason::Callback, "{report:?}");
    assert_all_answered(&done, &targets, 4);
    stop.trigger();
    assert_eq!(host.join().unwrap().unwrap().failure(), None);
}
