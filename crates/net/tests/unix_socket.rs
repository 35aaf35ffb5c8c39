//! A host's Unix socket ([`HostSpec::unix_socket`](ensemble_net::HostSpec)): clients on its
//! machine reach it there instead of over loopback TCP, with the same handshake and the same
//! treatment of garbage; a socket a stopped host left behind is replaced, any other file is not.
//!
//! As in `end_to_end.rs`, nothing sleeps to synchronise: runs end when the expected completions
//! are in (the deadline only turns a hang into a failure).

mod common;

use common::{assert_all_answered, deployment, machines, place, ring_of, slots, test_secret, until, Storages, ToyClient};
use ensemble_core::topology::Topology;
use ensemble_core::{ClientId, ProcessId};
use ensemble_net::frame::{encode_frame, Never};
use ensemble_net::{run_clients, run_host_on, ClusterSpec, HostId, HostReport, NetError, ShutdownHandle, StopReason};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A fresh directory for this test's socket (short: a socket's path has a small limit).
fn socket_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ensemble-net-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// One host running p0 and p1 (both with storage), listening on its port and on `socket`.
fn start(socket: &Path) -> (ClusterSpec, ShutdownHandle, JoinHandle<Result<HostReport, NetError>>) {
    let d = deployment(machines(&[0]), vec![place(0, 0, Some(0)), place(1, 0, Some(0))]);
    let build = ring_of(&d, &[]);
    let (mut spec, listeners) = ClusterSpec::local_bound(d, Topology::lan(), false).unwrap();
    spec.secret = Some(test_secret());
    spec.hosts[0].unix_socket = Some(socket.to_path_buf());
    let listener = listeners.into_iter().next().expect("one host");
    let cfg = spec.host_config(HostId(0)).unwrap();
    let stop = ShutdownHandle::new();
    let stopper = stop.clone();
    let host = std::thread::spawn(move || {
        let storages = Storages::default();
        let processes = cfg.processes().iter().map(|p| build(*p, &storages)).collect();
        run_host_on(listener, cfg, processes, stopper)
    });
    (spec, stop, host)
}

/// Two clients per process, `per_client` requests each, numbered from `first`, through the
/// host's Unix socket alone: their configuration names a TCP address nothing listens on, which
/// only the socket stands in for.
fn served_through_the_socket(spec: &ClusterSpec, first: u64, per_client: u64) {
    let epoch = Instant::now();
    let mut cfg = spec.client_config(epoch, epoch + Duration::from_secs(60)).unwrap();
    assert_eq!(cfg.unix_sockets.len(), 1, "the cluster's client configuration names the host's socket");
    let dead: SocketAddr = "127.0.0.1:1".parse().unwrap();
    let socket = cfg.unix_sockets.values().next().unwrap().clone();
    for p in cfg.processes.values_mut() {
        p.addr = dead;
    }
    cfg.unix_sockets = [(dead, socket)].into();
    cfg.connect_timeout = Duration::from_secs(10);
    let targets: BTreeMap<ClientId, ProcessId> = (0..4).map(|i| (ClientId(first + i), ProcessId((i / 2) as u32))).collect();
    let mut done = Vec::new();
    let expected = (targets.len() as u64 * per_client) as usize;
    let report = run_clients(cfg, slots(targets.iter().map(|(c, p)| (ToyClient::boxed(c.0, p.0, per_client), 0))), until(&mut done, expected)).unwrap();
    assert_eq!(report.stopped, StopReason::Callback, "the run hit its deadline: {report:?}");
    assert_eq!((report.requests_undeliverable, report.link_failures), (0, 0), "{report:?}");
    assert_all_answered(&done, &targets, per_client);
}

/// What the host sends back on a raw connection to its socket after `bytes`, until it closes.
fn raw(socket: &Path, bytes: &[u8]) -> String {
    let mut s = std::os::unix::net::UnixStream::connect(socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(bytes).unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut got = Vec::new();
    s.read_to_end(&mut got).expect("the host closes the connection");
    String::from_utf8_lossy(&got).into_owned()
}

#[test]
fn clients_on_the_hosts_machine_are_served_through_its_socket_and_garbage_there_is_refused() {
    let dir = socket_dir("serve");
    let socket = dir.join("h0.sock");
    let (spec, stop, host) = start(&socket);
    served_through_the_socket(&spec, 1, 5);
    // Garbage through the socket gets the Error frame it would get on the port, and the host
    // goes on serving; without the key nothing else is granted either.
    let text = raw(&socket, b"GET / HTTP/1.1\r\n\r\n");
    assert!(text.contains("unknown protocol version"), "{text}");
    // A stranger that says Hello as the operator and then asks for a Shutdown without the proof.
    let frame = |f: &ensemble_net::Frame<Never, Never>| encode_frame::<Never, Never>(f).unwrap().to_vec();
    let text = raw(&socket, &[frame(&ensemble_net::Frame::Hello { hello: ensemble_net::Hello::Admin, nonce: [0; 32] }), frame(&ensemble_net::Frame::Shutdown)].concat());
    assert!(text.contains("expected Proof, got a Shutdown frame"), "{text}");
    served_through_the_socket(&spec, 11, 5);
    stop.trigger();
    let report = host.join().unwrap().unwrap();
    assert_eq!(report.failure(), None, "{report:?}");
    assert_eq!(report.bad_connections, 2, "{report:?}");
    // Eight clients and the two strangers, all through the socket.
    assert_eq!(report.unix_socket_connections, 10, "{report:?}");
    for p in &report.processes {
        let t = &p.traffic;
        assert_eq!((t.requests, t.replies, t.replies_undeliverable), (20, 20, 0), "{}", p.id);
    }
    assert!(!socket.exists(), "the host removes its socket when it stops");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_socket_left_behind_is_replaced_and_any_other_file_is_refused() {
    let dir = socket_dir("stale");
    let socket = dir.join("h0.sock");
    // A host killed before it could clean up leaves its socket's file.
    drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());
    assert!(socket.exists());
    let (spec, stop, host) = start(&socket);
    served_through_the_socket(&spec, 1, 2);
    stop.trigger();
    assert_eq!(host.join().unwrap().unwrap().failure(), None);
    // A file that is not a socket is nobody's to delete: the host refuses to start and says why.
    std::fs::write(&socket, "not a socket").unwrap();
    let (_spec, _stop, host) = start(&socket);
    let err = host.join().unwrap().err().expect("the host refuses the path");
    assert!(err.to_string().contains("exists and is not a socket"), "{err}");
    assert_eq!(std::fs::read_to_string(&socket).unwrap(), "not a socket");
    std::fs::remove_dir_all(&dir).unwrap();
}
