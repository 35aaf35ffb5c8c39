//! `bench --real` when a node dies, stalls or the bench is told to stop: the run ends within
//! seconds of the fault, names the host and what happened, keeps what it measured as a partial
//! result, and leaves no node process and no temporary directory behind. And the real runtime
//! running the belt under emulated WAN delays completes and passes its check.
//!
//! Each test waits for events it can observe (a line on the bench's stderr, the bench's exit, a
//! process's disappearance) with a generous bound, and asserts nothing about how long anything
//! took.

use ensemble_bench::RunResult;
use ensemble_core::topology::Topology;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// Each test runs a bench and three nodes on a machine of two cores: one at a time, so that a
/// healthy host is not starved into missing its probes by another test's cluster.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn exclusive() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Start-up builds and loads every node's databases.
const STARTUP: Duration = Duration::from_secs(180);
/// From a fault to the bench's exit, with room for a loaded machine (the run's window is 30 s;
/// whether the bench stopped before its end is read from the partial result, not the clock).
const EXIT: Duration = Duration::from_secs(90);

/// A running `ensemble bench --real`, SIGKILLed if a test fails first (its nodes die with it).
struct Bench {
    child: Child,
    lines: mpsc::Receiver<String>,
    stderr: Vec<String>,
    out: tempfile::TempDir,
}

impl Drop for Bench {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A node process of the bench, identified by its pid and its start time (so that a recycled
/// pid is not taken for it).
#[derive(Debug)]
struct NodeProc {
    pid: i32,
    host: u32,
    started: u64,
}

fn start_bench(args: &[&str]) -> Bench {
    let out = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_ensemble"))
        .args(["bench", "shop", "--real", "--quiet", "--out"])
        .arg(out.path())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, lines) = mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // The table goes to stdout: read it so that the bench never blocks on a full pipe.
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || std::io::copy(&mut BufReader::new(stdout), &mut std::io::sink()));
    Bench { child, lines, stderr: Vec::new(), out }
}

impl Bench {
    /// Waits for a stderr line containing `what` and returns it.
    fn wait_for_line(&mut self, what: &str, within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            match self.lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(line) => {
                    self.stderr.push(line.clone());
                    if line.contains(what) {
                        return line;
                    }
                }
                Err(e) => panic!("no stderr line with `{what}` ({e:?}); stderr so far:\n{}", self.stderr.join("\n")),
            }
        }
    }

    /// The nodes are up and the clients are about to run.
    fn wait_until_running(&mut self) -> Vec<NodeProc> {
        self.wait_for_line("host(s) ready at", STARTUP);
        let nodes = node_processes(self.child.id() as i32);
        assert_eq!(nodes.len(), 3, "three node processes: {nodes:?}");
        nodes
    }

    /// Waits for the bench to exit, then for the rest of its stderr.
    fn wait_exit(&mut self) -> ExitStatus {
        let deadline = Instant::now() + EXIT;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            // Reading stderr paces the loop: a line or a short timeout.
            match self.lines.recv_timeout(Duration::from_millis(100)) {
                Ok(line) => self.stderr.push(line),
                Err(RecvTimeoutError::Timeout) => {}
                // Its stderr closed: it is exiting.
                Err(RecvTimeoutError::Disconnected) => std::thread::sleep(Duration::from_millis(100)),
            }
            assert!(Instant::now() < deadline, "the bench did not exit; stderr so far:\n{}", self.stderr.join("\n"));
        };
        // Its stderr ends when the bench and every node are gone (they share it).
        let rest_until = Instant::now() + EXIT;
        loop {
            match self.lines.recv_timeout(rest_until.saturating_duration_since(Instant::now())) {
                Ok(line) => self.stderr.push(line),
                Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => panic!("something still holds the bench's stderr:\n{}", self.stderr.join("\n")),
            }
        }
        status
    }

    fn stderr(&self) -> String {
        self.stderr.join("\n")
    }

    fn partial_result(&self) -> RunResult {
        let path = self.out.path().join("shop-ensemble-3-real-seed1-partial.json");
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e}; the bench said:\n{}", path.display(), self.stderr()));
        serde_json::from_str(&text).unwrap()
    }
}

/// The children of `pid` that are `ensemble node` processes, with their host numbers.
fn node_processes(pid: i32) -> Vec<NodeProc> {
    let mut nodes = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let children = std::fs::read_to_string(task.unwrap().path().join("children")).unwrap_or_default();
        for child in children.split_whitespace() {
            let child: i32 = child.parse().unwrap();
            let Ok(cmdline) = std::fs::read(format!("/proc/{child}/cmdline")) else { continue };
            let args: Vec<String> = cmdline.split(|b| *b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
            let Some(at) = args.iter().position(|a| a == "--host") else { continue };
            let Some(started) = start_time(child) else { continue };
            nodes.push(NodeProc { pid: child, host: args[at + 1].parse().unwrap(), started });
        }
    }
    nodes.sort_by_key(|n| n.host);
    nodes
}

/// Field 22 of /proc/<pid>/stat, and the process's state (field 3).
fn stat(pid: i32) -> Option<(char, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces; it ends at the last ')'.
    let after = &text[text.rfind(')')? + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    Some((fields[0].chars().next()?, fields[19].parse().ok()?))
}

fn start_time(pid: i32) -> Option<u64> {
    stat(pid).map(|(_, t)| t)
}

/// The node's process is gone: no such pid, another process under that pid, or a zombie.
fn gone(n: &NodeProc) -> bool {
    match stat(n.pid) {
        None => true,
        Some((state, started)) => started != n.started || state == 'Z',
    }
}

fn signal(n: &NodeProc, sig: i32) {
    if !gone(n) {
        // SAFETY: kill(2) with a pid we just checked is still our node.
        unsafe { libc::kill(n.pid, sig) };
    }
}

fn node(nodes: &[NodeProc], host: u32) -> &NodeProc {
    nodes.iter().find(|n| n.host == host).expect("the host is among the nodes")
}

const FAULT_RUN: [&str; 12] =
    ["--topology", "lan", "--system", "ensemble", "--instances", "3", "--clients", "4", "--warmup", "0.5", "--measure", "30"];

#[test]
fn a_killed_node_ends_the_run_with_its_name_and_a_partial_result() {
    let _one = exclusive();
    let mut bench = start_bench(&FAULT_RUN);
    let nodes = bench.wait_until_running();
    signal(node(&nodes, 1), libc::SIGKILL);
    let status = bench.wait_exit();
    let err = bench.stderr();
    assert!(!status.success(), "{err}");
    assert!(err.contains("host h1 (process p1, instance 1) was killed by signal 9"), "{err}");
    let r = bench.partial_result();
    let why = r.partial.as_deref().unwrap();
    assert!(why.contains("host h1") && why.contains("killed by signal 9"), "{why}");
    assert!(r.summary.window_s < 30.0, "the run stopped inside its window: {}", r.summary.window_s);
    assert_eq!(r.check_passed, None, "a partial run is never checked");
    // The hosts still alive were asked to stop and reported; the killed one could not.
    let reported: Vec<u32> = r.processes.iter().map(|p| p.process.0).collect();
    assert_eq!(reported, [0, 2], "{:?}", r.processes);
}

#[test]
fn a_stopped_node_ends_the_run_as_a_stall_naming_it() {
    let _one = exclusive();
    let mut bench = start_bench(&FAULT_RUN);
    let nodes = bench.wait_until_running();
    let stopped = node(&nodes, 2);
    signal(stopped, libc::SIGSTOP);
    let status = bench.wait_exit();
    // Whatever the bench did, the stopped node must not linger.
    signal(stopped, libc::SIGCONT);
    signal(stopped, libc::SIGKILL);
    let err = bench.stderr();
    assert!(!status.success(), "{err}");
    assert!(err.contains("host h2 (process p2, instance 2) stopped answering probes"), "{err}");
    assert!(!err.contains("NOT serializable"), "a stall is not a safety failure: {err}");
    let r = bench.partial_result();
    assert!(r.partial.as_deref().unwrap().contains("host h2"), "{:?}", r.partial);
    assert!(r.summary.window_s < 30.0, "the run stopped inside its window: {}", r.summary.window_s);
}

/// The real counterpart of the simulated stalls of `ensemble sweep --primitive belt`: a node
/// stopped for less than the watcher's silence (a long GC pause, a VM descheduled) holds the
/// token and its clients' requests in its sockets' buffers, and once continued the ring goes on:
/// the run ends whole and checked. Half a second leaves the 3 s of silence that ends a run room
/// on a loaded machine.
#[test]
fn a_node_stopped_briefly_costs_time_only() {
    let _one = exclusive();
    let mut bench = start_bench(&["--topology", "lan", "--system", "ensemble", "--instances", "3", "--clients", "4", "--warmup", "0.5", "--measure", "3"]);
    let nodes = bench.wait_until_running();
    let stopped = node(&nodes, 1);
    signal(stopped, libc::SIGSTOP);
    std::thread::sleep(Duration::from_millis(500)); // the fault's length, not a synchronisation
    signal(stopped, libc::SIGCONT);
    let status = bench.wait_exit();
    assert!(status.success(), "{}", bench.stderr());
    let path = bench.out.path().join("shop-ensemble-3-real-seed1.json");
    let r: RunResult = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(r.partial, None);
    assert_eq!(r.check_passed, Some(true), "{:?}", r.check);
    assert!(r.summary.classes.get("global").is_some_and(|g| g.count > 0), "no global ran: {:?}", r.summary.classes.keys());
}

#[test]
fn sigterm_stops_every_node_and_removes_the_temporary_directory() {
    let _one = exclusive();
    let mut bench = start_bench(&FAULT_RUN);
    let files = bench.wait_for_line("nodes' files in ", STARTUP);
    let files = PathBuf::from(files.split("nodes' files in ").nth(1).unwrap().trim());
    assert!(files.is_dir(), "{}", files.display());
    let nodes = bench.wait_until_running();
    // SAFETY: kill(2) on our own child, not yet reaped.
    unsafe { libc::kill(bench.child.id() as i32, libc::SIGTERM) };
    let status = bench.wait_exit();
    let err = bench.stderr();
    assert!(!status.success(), "{err}");
    assert!(err.contains("interrupted by SIGTERM"), "{err}");
    let left: Vec<&NodeProc> = nodes.iter().filter(|n| !gone(n)).collect();
    for n in &left {
        signal(n, libc::SIGKILL);
    }
    assert!(left.is_empty(), "node processes left running: {left:?}");
    assert!(!files.exists(), "{} is left behind", files.display());
    assert!(bench.partial_result().partial.unwrap().contains("SIGTERM"));
}

/// No operation can be faster than the emulated network lets it be: every request crosses from
/// its client's site to its instance's site, so every latency is at least the smallest one-way
/// delay of the topology (inside a site, in wan5). The machine's speed only adds to it.
#[test]
fn the_belt_runs_as_real_processes_under_emulated_wan_delays() {
    let _one = exclusive();
    // What a SIGKILLed bench leaves behind (its nodes die with it, its directory does not), and
    // the directory of a bench that still runs (this test): a bench removes the first only.
    let dead = std::process::Command::new("true").spawn().unwrap();
    let dead_pid = dead.id();
    let _ = { dead }.wait();
    let orphan = tempfile::Builder::new().prefix("ensemble-real-").tempdir().unwrap().keep();
    std::fs::write(orphan.join("bench.pid"), dead_pid.to_string()).unwrap();
    let alive = tempfile::Builder::new().prefix("ensemble-real-").tempdir().unwrap();
    std::fs::write(alive.path().join("bench.pid"), std::process::id().to_string()).unwrap();
    let mut bench = start_bench(&[
        "--topology", "wan5", "--system", "ensemble", "--instances", "3", "--clients", "6", "--warmup", "0.5", "--measure", "2",
    ]);
    let status = bench.wait_exit();
    assert!(status.success(), "{}", bench.stderr());
    assert!(!orphan.exists(), "{} was left behind", orphan.display());
    assert!(alive.path().exists(), "a live bench's directory was removed");
    let path = bench.out.path().join("shop-ensemble-3-real-seed1.json");
    let r: RunResult = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(r.partial, None);
    assert_eq!(r.check_passed, Some(true), "{:?}", r.check);
    let min_one_way_ms = Topology::wan5().one_way_ms.iter().flatten().copied().fold(f64::INFINITY, f64::min);
    let global = r.summary.classes.get("global").expect("the run had global operations");
    assert!(global.count > 0);
    let all = &r.summary.classes["all"];
    for (class, c) in [("global", global), ("all", all)] {
        assert!(c.p50_ms >= min_one_way_ms && c.mean_ms >= min_one_way_ms, "{class}: {c:?} beats the {min_one_way_ms} ms delay");
    }
}
