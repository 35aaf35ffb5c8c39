//! Hosts as separate OS processes, started the way the CLI starts them: a cluster spec file, one
//! OS process per host, readiness from the ready line on each child's stdout, stop with an admin
//! Shutdown frame, each host's report as one JSON line on its stdout.
//!
//! The child is this very test binary, re-run with an environment variable that makes the
//! `host_process` test act as a host; run normally, that test does nothing.

mod common;

use common::{assert_all_answered, deployment, machines, place, ring_of, Storages, ToyClient};
use ensemble_core::{ClientId, ProcessId};
use ensemble_net::cluster::{bind_listener, ready_line, send_shutdown, wait_for_ready_line_within};
use ensemble_net::{run_clients, run_host_on, ClientSlot, ClusterSpec, HostId, HostReport, ShutdownHandle, StopReason};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

/// `<spec path>#<host>`: set only in the child processes.
const CHILD_ENV: &str = "ENSEMBLE_NET_TEST_HOST";
const REPORT_PREFIX: &str = "host report: ";

/// p0 and p1 share an OS process on machine 0 (p1 keeps its data in memory); p2 is alone.
fn the_deployment() -> ensemble_core::Deployment {
    deployment(machines(&[0, 0]), vec![place(0, 0, Some(0)), place(1, 0, Some(0)), place(2, 1, None)])
}

/// What `ensemble node --cluster FILE --host N` is expected to do.
#[test]
fn host_process() {
    let Ok(arg) = std::env::var(CHILD_ENV) else { return };
    let (path, host) = arg.rsplit_once('#').expect("spec#host");
    let mut spec = ClusterSpec::load(Path::new(path)).unwrap();
    let host = HostId(host.parse().unwrap());
    let cfg = spec.host_config(host).unwrap();
    let build = ring_of(&spec.deployment, &[1]);
    let storages = Storages::default();
    let processes = cfg.processes().iter().map(|p| build(*p, &storages)).collect();
    // Port 0: bind, announce the port, then learn every host's from the parent on stdin.
    let listener = bind_listener(cfg.listen).unwrap();
    println!("{}", ready_line(cfg.host, listener.local_addr().unwrap()));
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    let addrs: Vec<std::net::SocketAddr> = line.split_whitespace().map(|a| a.parse().unwrap()).collect();
    spec.set_addrs(&addrs).unwrap();
    let cfg = spec.host_config(host).unwrap();
    let report = run_host_on(listener, cfg, processes, ShutdownHandle::new()).unwrap();
    println!("{REPORT_PREFIX}{}", serde_json::to_string(&report).unwrap());
}

/// Kills the child if the test fails before it exits on its own.
struct HostProcess {
    child: Child,
    stdout: Option<BufReader<ChildStdout>>,
}

impl Drop for HostProcess {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn spawn_host(spec_path: &Path, host: usize) -> HostProcess {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "host_process", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, format!("{}#{host}", spec_path.display()))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().map(BufReader::new);
    HostProcess { child, stdout }
}

struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn a_cluster_of_host_processes_serves_clients_and_shuts_down() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let mut spec = ClusterSpec::loopback(the_deployment(), "lan", false).unwrap();
    spec.secret = Some(common::test_secret());
    assert_eq!(spec.hosts.len(), 2);
    let path = TempFile(std::env::temp_dir().join(format!("ensemble-net-cluster-{}.toml", std::process::id())));
    spec.save(&path.0).unwrap();

    let mut hosts: Vec<HostProcess> = (0..2).map(|h| spawn_host(&path.0, h)).collect();
    let mut addrs = Vec::new();
    for (h, host) in hosts.iter_mut().enumerate() {
        let stdout = host.stdout.take().unwrap();
        let (id, addr, stdout) = wait_for_ready_line_within(stdout, Duration::from_secs(60)).unwrap();
        assert_eq!(id, HostId(h as u32));
        assert_ne!(addr.port(), 0);
        addrs.push(addr);
        host.stdout = Some(stdout);
    }
    spec.set_addrs(&addrs).unwrap();
    let line: Vec<String> = addrs.iter().map(|a| a.to_string()).collect();
    for host in &mut hosts {
        let mut stdin = host.child.stdin.take().unwrap();
        writeln!(stdin, "{}", line.join(" ")).unwrap();
    }

    let per_client = 10;
    let targets: BTreeMap<_, _> = (0..6u64).map(|c| (ClientId(c), ProcessId((c % 3) as u32))).collect();
    let clients = targets.iter().map(|(c, p)| ClientSlot { client: ToyClient::boxed(c.0, p.0, per_client), site: 0 }).collect();
    let epoch = Instant::now();
    let mut done = Vec::new();
    let report = run_clients(spec.client_config(epoch, epoch + Duration::from_secs(60)).unwrap(), clients, |c| {
        done.push(c);
        if done.len() == targets.len() * per_client as usize {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    })
    .unwrap();
    assert_eq!(report.stopped, StopReason::Callback, "{report:?}");
    assert_all_answered(&done, &targets, per_client);

    for h in &spec.hosts {
        send_shutdown(h.addr, spec.operator_key().as_ref(), Duration::from_secs(5)).unwrap();
    }
    let mut reports = Vec::new();
    for host in &mut hosts {
        // Reading to the end of stdout waits for the child to exit (its report is the last
        // line); the bound turns a host that ignores Shutdown into a failure, not a hang.
        let stdout = host.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(stdout.lines().map_while(Result::ok).collect::<Vec<String>>());
        });
        let lines = rx.recv_timeout(Duration::from_secs(60)).expect("the host did not exit after Shutdown");
        let json = lines.iter().find_map(|l| l.strip_prefix(REPORT_PREFIX)).expect("the host printed its report");
        reports.push(serde_json::from_str::<HostReport>(json).unwrap());
        assert!(host.child.wait().unwrap().success());
    }
    let total = 6 * per_client;
    let ids: Vec<Vec<ProcessId>> = reports.iter().map(|r| r.processes.iter().map(|p| p.id).collect()).collect();
    assert_eq!(ids, [vec![ProcessId(0), ProcessId(1)], vec![ProcessId(2)]]);
    for p in reports.iter().flat_map(|r| &r.processes) {
        assert_eq!(p.failure, None);
        assert_eq!(p.traffic.requests, 2 * per_client);
        assert_eq!(p.traffic.messages_in, total);
    }
    // p0 → p1 stays inside host 0; p1 → p2 and p2 → p0 cross between the OS processes.
    assert_eq!((reports[0].peer_messages_out, reports[0].peer_messages_in), (total, total));
    assert_eq!(reports[0].processes[0].traffic.messages_out_local, total);
    assert_eq!(reports[0].processes[1].counters[1], ("served_in_memory".to_string(), 2 * per_client));
}
