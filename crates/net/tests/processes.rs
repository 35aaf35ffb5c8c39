//! Nodes as separate OS processes, started the way the CLI starts them: a cluster spec file,
//! one process per instance, readiness from the ready line on each child's stdout, stop with an
//! admin Shutdown frame.
//!
//! The child is this very test binary, re-run with an environment variable that makes the
//! `node_process` test act as a node; run normally, that test does nothing.

mod common;

use common::{assert_all_answered, CountingStorage, RingNode, ToyClient};
use ensemble_core::{ClientId, InstanceId};
use ensemble_net::cluster::{bind_listener, ready_line, send_shutdown, wait_for_ready_line_within};
use ensemble_net::{run_clients, run_node_on, ClientSlot, ClusterSpec, ShutdownHandle, StopReason, TopologyRef};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `<spec path>#<instance>`: set only in the child processes.
const CHILD_ENV: &str = "ENSEMBLE_NET_TEST_NODE";
const REPORT_PREFIX: &str = "node report: requests=";

/// What `ensemble node --cluster FILE --instance N` is expected to do.
#[test]
fn node_process() {
    let Ok(arg) = std::env::var(CHILD_ENV) else { return };
    let (path, id) = arg.rsplit_once('#').expect("spec#instance");
    let spec = ClusterSpec::load(Path::new(path)).unwrap();
    let id = InstanceId(id.parse().unwrap());
    let cfg = spec.node_config(id).unwrap();
    let listener = bind_listener(cfg.listen).unwrap();
    println!("{}", ready_line(id, listener.local_addr().unwrap()));
    let n = spec.instances.len() as u32;
    let ran = Arc::new(AtomicU64::new(0));
    let make = move |_| CountingStorage { instance: id, ran: ran.clone() };
    let report = run_node_on(listener, cfg, RingNode::new(id, n), make, ShutdownHandle::new()).unwrap();
    println!("{REPORT_PREFIX}{}", report.requests);
}

/// Kills the child if the test fails before it exits on its own.
struct NodeProcess {
    child: Child,
    stdout: Option<BufReader<ChildStdout>>,
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn spawn_node(spec_path: &Path, id: u32) -> NodeProcess {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "node_process", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, format!("{}#{id}", spec_path.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().map(BufReader::new);
    NodeProcess { child, stdout }
}

struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn a_cluster_of_node_processes_serves_clients_and_shuts_down() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let spec = ClusterSpec::local(2, Some(TopologyRef::Named("lan".into())), false).unwrap();
    let path = TempFile(std::env::temp_dir().join(format!("ensemble-net-cluster-{}.toml", std::process::id())));
    spec.save(&path.0).unwrap();

    let mut nodes: Vec<NodeProcess> = (0..2).map(|i| spawn_node(&path.0, i)).collect();
    for (i, node) in nodes.iter_mut().enumerate() {
        let stdout = node.stdout.take().unwrap();
        let (id, addr, stdout) = wait_for_ready_line_within(stdout, Duration::from_secs(60)).unwrap();
        assert_eq!((id, addr), (InstanceId(i as u32), spec.instances[i].addr));
        node.stdout = Some(stdout);
    }

    let per_client = 10;
    let targets: BTreeMap<_, _> = (0..4u64).map(|c| (ClientId(c), InstanceId((c % 2) as u32))).collect();
    let clients = targets.iter().map(|(c, i)| ClientSlot { client: ToyClient::boxed(c.0, i.0, per_client), site: 0 }).collect();
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

    for i in &spec.instances {
        send_shutdown(i.addr, Duration::from_secs(5)).unwrap();
    }
    for node in &mut nodes {
        // Reading to the end of stdout waits for the child to exit (its report is the last
        // line); the bound turns a node that ignores Shutdown into a failure, not a hang.
        let stdout = node.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(stdout.lines().map_while(Result::ok).collect::<Vec<String>>());
        });
        let lines = rx.recv_timeout(Duration::from_secs(60)).expect("the node did not exit after Shutdown");
        let requests = lines.iter().find_map(|l| l.strip_prefix(REPORT_PREFIX)).expect("the node printed its report");
        assert_eq!(requests, (2 * per_client).to_string());
        assert!(node.child.wait().unwrap().success());
    }
}
