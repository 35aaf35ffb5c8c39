//! An `ensemble node` process on loopback, spoken to frame by frame: malformed frames and bad
//! requests get errors naming what was wrong, and the node keeps serving without losing anything.

use bytes::BytesMut;
use ensemble_app::InstanceId;
use ensemble_belt::BeltEvidence;
use ensemble_bench::{Experiment, Runtime, System};
use ensemble_core::topology::Topology;
use ensemble_core::*;
use ensemble_net::cluster::{send_shutdown, wait_for_ready_line};
use ensemble_net::frame::{FrameCodec, Never};
use ensemble_net::{BlockingConn, ClusterSpec, Frame, Hello};
use ensemble_sqlite::SqliteStorage;
use std::io::{BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio_util::codec::Decoder;

/// A bare TCP connection, for what a node does with bytes that are not a handshake.
struct Conn {
    stream: TcpStream,
    buf: BytesMut,
    codec: FrameCodec<Never, BeltEvidence>,
}

impl Conn {
    fn open(addr: SocketAddr) -> Conn {
        let stream = TcpStream::connect(addr).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        Conn { stream, buf: BytesMut::new(), codec: FrameCodec::new() }
    }
    /// The next frame, or `None` when the node closed the connection.
    fn next(&mut self) -> Option<Frame<Never, BeltEvidence>> {
        loop {
            if let Some(f) = self.codec.decode(&mut self.buf).unwrap() {
                return Some(f);
            }
            let mut chunk = [0u8; 4096];
            let n = self.stream.read(&mut chunk).unwrap();
            if n == 0 {
                return None;
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

/// A client session that went through the handshake (the cluster has no secret).
struct Session(BlockingConn);

impl Session {
    fn open(addr: SocketAddr) -> Session {
        let hello = Hello::Client { client: ClientId(9), site: 0 };
        Session(BlockingConn::connect(addr, None, hello, Duration::from_secs(30)).unwrap())
    }
    fn call(&mut self, seq: u64, txn: &str, params: Vec<Value>) -> ReplyBody<BeltEvidence> {
        let request = Request { client: ClientId(9), seq, txn: txn.into(), params };
        self.0.send(&Frame::<Never, BeltEvidence>::Request { to: ProcessId(0), request }).unwrap();
        match self.0.recv::<Never, BeltEvidence>().unwrap() {
            Frame::Reply { reply: r, .. } => {
                assert_eq!(r.seq, seq);
                r.body
            }
            other => panic!("expected a reply, got {other:?}"),
        }
    }
}

/// `ensemble node` for host 0 (instance 0) of a cluster of `instances` on loopback running
/// `exp`, its files in `dir`. Every host binds port 0: see [`start`].
fn node_command(dir: &std::path::Path, exp: &Experiment, instances: usize) -> Command {
    let exp_path = dir.join("experiment.json");
    std::fs::write(&exp_path, serde_json::to_string(exp).unwrap()).unwrap();
    let cluster_path = dir.join("cluster.toml");
    let deployment = Deployment::one_per_machine(&vec![0; instances], exp.topology.cpu.cores, "instance");
    ClusterSpec::loopback(deployment, exp.topology.clone(), false).unwrap().save(&cluster_path).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ensemble"));
    cmd.args(["node", "--host", "0"]).arg("--experiment").arg(exp_path).arg("--cluster").arg(cluster_path).arg("--dir").arg(dir);
    cmd
}

/// Starts the one node of a one-host cluster as `bench --real` does: the node binds port 0 and
/// announces the address it got; then it learns every host's address (here, its own) on stdin.
fn start(mut cmd: Command) -> (Child, SocketAddr) {
    let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    let (_, addr) = wait_for_ready_line(BufReader::new(child.stdout.take().unwrap())).unwrap();
    assert_ne!(addr.port(), 0, "the ready line carries the port the node bound");
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "{addr}").unwrap();
    (child, addr)
}

#[test]
fn a_node_refuses_bad_frames_and_requests_and_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let mut exp = Experiment::new("shop", System::Centralized, 1, Topology::lan()).unwrap();
    exp.runtime = Runtime::Real;
    let db = dir.path().join("i0.db");
    let (mut child, addr) = start(node_command(dir.path(), &exp, 1));

    // A well-behaved client, connected first and kept open throughout.
    let mut good = Session::open(addr);
    assert!(matches!(good.call(1, "create_cart", vec![Value::Int(5)]), ReplyBody::Done(_)));

    // Garbage on another connection: a header claiming protocol version 7.
    let mut bad = Conn::open(addr);
    bad.stream.write_all(&[0, 0, 0, 1, 7, 3, 0]).unwrap();
    match bad.next() {
        Some(Frame::Error(m)) => assert!(m.contains("unknown protocol version 7"), "{m}"),
        other => panic!("expected an Error frame, got {other:?}"),
    }
    assert_eq!(bad.next(), None, "the node closes a connection that sent garbage");

    // A truncated frame, then the connection ends.
    let mut cut = Conn::open(addr);
    cut.stream.write_all(&[0, 0, 0, 50, ensemble_net::frame::PROTOCOL_VERSION, 2, 1, 2, 3]).unwrap();
    cut.stream.shutdown(std::net::Shutdown::Write).unwrap();
    match cut.next() {
        Some(Frame::Error(m)) => assert!(m.contains("truncated"), "{m}"),
        None => {} // the node may close before its Error frame is read; what matters is below
        other => panic!("{other:?}"),
    }

    // Bad requests on the good connection: errors that name the problem; the connection stays.
    match good.call(2, "checkout", vec![]) {
        ReplyBody::Error(e) => assert_eq!(e.to_string(), "unknown transaction type `checkout`"),
        other => panic!("{other:?}"),
    }
    match good.call(3, "add_item", vec![Value::Int(5)]) {
        ReplyBody::Error(e) => assert_eq!(e.to_string(), "transaction `add_item` takes 3 parameter(s), got 1"),
        other => panic!("{other:?}"),
    }
    match good.call(4, "order", vec![Value::Text("5".into())]) {
        ReplyBody::Error(e) => assert!(e.to_string().contains("parameter 0 (`cart_id`) must be int, got text"), "{e}"),
        other => panic!("{other:?}"),
    }
    // And the node still serves.
    assert!(matches!(good.call(5, "add_item", vec![Value::Int(5), Value::Int(2), Value::Int(1)]), ReplyBody::Done(_)));
    match good.call(6, "order", vec![Value::Int(5)]) {
        ReplyBody::Done(Done { outcome: Outcome::Committed(_), .. }) => {}
        other => panic!("{other:?}"),
    }

    send_shutdown(addr, None, Duration::from_secs(10)).unwrap();
    assert!(child.wait().unwrap().success());
    // Nothing committed was lost.
    let app = ensemble_app::application("shop").unwrap();
    let s = SqliteStorage::open_file(&db, app, InstanceId(0)).unwrap();
    assert_eq!(s.dump("carts").unwrap(), vec![vec![Value::Int(5), Value::Text("ordered".into())]]);
    assert_eq!(s.dump("orders").unwrap().len(), 1);
}

#[test]
fn a_node_refuses_a_plan_that_does_not_match_the_application() {
    let dir = tempfile::tempdir().unwrap();
    let mut exp = Experiment::new("shop", System::Ensemble, 1, Topology::lan()).unwrap();
    exp.plan.fingerprint = "0000000000000000".into();
    let out = node_command(dir.path(), &exp, 1).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("fingerprint 0000000000000000 is not the application's"), "{err}");
}

#[test]
fn a_node_refuses_a_cluster_file_that_deploys_other_processes_than_the_experiment() {
    let dir = tempfile::tempdir().unwrap();
    let exp = Experiment::new("shop", System::Centralized, 1, Topology::lan()).unwrap();
    let out = node_command(dir.path(), &exp, 2).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("deploys other processes than experiment"), "{err}");
}

#[test]
fn plan_files_are_checked_against_the_application() {
    let dir = tempfile::tempdir().unwrap();
    let run = |text: &str| {
        let p = dir.path().join("plan.toml");
        std::fs::write(&p, text).unwrap();
        Command::new(env!("CARGO_BIN_EXE_ensemble")).args(["plan", "shop", "--check"]).arg(&p).output().unwrap()
    };
    let shipped = include_str!("../../../plans/shop.toml");
    let ok = run(shipped);
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    let cases = [
        (shipped.replace("[transactions.order]", "[transactions.checkout]"), "transaction `order` has no entry"),
        (shipped.replace("column = \"cart_id\"", "column = \"cart\""), "has no column `cart` to partition by"),
        (shipped.replace("partition_by = [\"cart_id\"]", "partition_by = [\"cart\"]"), "has no parameter `cart` to partition by"),
        (shipped.replace("class = \"global\"", "class = \"sometimes\""), "unknown variant `sometimes`"),
        (shipped.replace("application = \"shop\"", "application = \"micro\""), "the plan names another application"),
    ];
    for (text, want) in cases {
        let out = run(&text);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "expected `{want}` in: {err}");
    }
}

#[test]
fn bench_runs_real_processes_and_checks_them() {
    let out_dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ensemble"))
        .args(["bench", "shop", "--real", "--topology", "lan", "--instances", "2", "--clients", "4", "--warmup", "0.5", "--measure", "2", "--quiet", "--out"])
        .arg(out_dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("shop-ensemble-2-real: serializable"), "{stdout}");
    assert!(stdout.contains("shop-centralized-1-real: serializable"), "{stdout}");
    assert!(out_dir.path().join("shop-ensemble-2-real-seed1.json").exists());
}

/// `--cpus`: the bench and the nodes it starts on the cores named, as its summary and result
/// file say; refused for a simulated run.
#[test]
fn a_real_run_on_one_core_says_so_and_is_checked() {
    let out_dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ensemble"))
        .args(["bench", "shop", "--real", "--topology", "lan", "--instances", "2", "--system", "ensemble", "--clients", "4", "--warmup", "0.5", "--measure", "2", "--cpus", "0", "--quiet", "--out"])
        .arg(out_dir.path())
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    // A machine of one core has nothing narrower to record or say. (Its cores online, not the
    // test's own affinity, which an outside taskset may have narrowed.)
    let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    let label = "shop-ensemble-2-real-cpus0";
    let said = if online > 1 { " on core(s) 0 (--cpus)" } else { "" };
    assert!(stdout.contains(&format!("{label}: serializable")), "{stdout}");
    assert!(stdout.contains(&format!("real processes on this machine{said} |")), "{stdout}");
    assert!(stderr.contains("--cpus: this command, its clients and the nodes it starts run on core(s) 0"), "{stderr}");
    let result: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out_dir.path().join(format!("{label}-seed1.json"))).unwrap()).unwrap();
    let want = if online > 1 { serde_json::json!([0]) } else { serde_json::Value::Null };
    assert_eq!(result["experiment"]["cpus"], want, "the result says where the run could run");

    let out = Command::new(env!("CARGO_BIN_EXE_ensemble")).args(["bench", "shop", "--cpus", "0", "--measure", "0.1", "--warmup", "0", "--quiet", "--out"]).arg(out_dir.path()).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--cpus places real processes on this machine's cores: add --real"), "{}", String::from_utf8_lossy(&out.stderr));

    // Narrowed from outside (as `taskset -c 0` would), without --cpus: the summary line and the
    // result file say it all the same, from the one reading of the affinity; the label and the
    // file's name stay as they would be anywhere.
    if online > 1 {
        let mut narrowed = Command::new(env!("CARGO_BIN_EXE_ensemble"));
        narrowed
            .args(["bench", "shop", "--real", "--topology", "lan", "--instances", "1", "--system", "centralized", "--clients", "2", "--warmup", "0.5", "--measure", "1", "--quiet", "--out"])
            .arg(out_dir.path());
        // SAFETY: the closure only calls sched_setaffinity, which is async-signal-safe.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut narrowed, || {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(0, &mut set);
                if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let out = narrowed.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
        assert!(stdout.contains("shop-centralized-1-real: serializable"), "{stdout}");
        assert!(stdout.contains("real processes on this machine on core(s) 0 (narrowed before this command started)"), "{stdout}");
        let result: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out_dir.path().join("shop-centralized-1-real-seed1.json")).unwrap()).unwrap();
        assert_eq!(result["experiment"]["cpus"], serde_json::json!([0]));
    }
}

/// The host on a thread of the bench's own process, its clients reaching it through a channel
/// (`--embedded`): checked like any real run; refused where the run has more than one host, or
/// is simulated.
#[test]
fn an_embedded_host_serves_its_clients_in_process_and_is_checked() {
    let out_dir = tempfile::tempdir().unwrap();
    let bench = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_ensemble"))
            .args(["bench", "shop", "--topology", "lan", "--clients", "4", "--warmup", "0.5", "--measure", "2", "--quiet", "--out"])
            .arg(out_dir.path())
            .args(args)
            .output()
            .unwrap()
    };
    let out = bench(&["--real", "--embedded", "--system", "centralized"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("shop-centralized-1-real-embedded: serializable"), "{stdout}");
    let result = std::fs::read_to_string(out_dir.path().join("shop-centralized-1-real-embedded-seed1.json")).unwrap();
    assert!(result.contains("\"embedded\": true") || result.contains("\"embedded\":true"), "the result says how it ran: {result}");

    // The same with the clients on the host's loop: run and checked as well.
    let out = bench(&["--real", "--embedded", "--clients-on-loop", "--system", "centralized"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("shop-centralized-1-real-embedded-on-loop: serializable"), "{stdout}");
    let result = std::fs::read_to_string(out_dir.path().join("shop-centralized-1-real-embedded-on-loop-seed1.json")).unwrap();
    assert!(result.contains("\"clients_on_loop\": true") || result.contains("\"clients_on_loop\":true"), "{result}");
    let out = bench(&["--real", "--clients-on-loop", "--system", "centralized"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--embedded"), "{}", String::from_utf8_lossy(&out.stderr));

    let out = bench(&["--real", "--embedded", "--system", "ensemble", "--instances", "2"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--embedded") && err.contains("one host"), "{err}");
    let out = bench(&["--embedded"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--embedded is for real runs"), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn analyze_writes_a_plan_that_bench_accepts() {
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("shop.toml");
    let out = Command::new(env!("CARGO_BIN_EXE_ensemble")).args(["analyze", "shop", "--out"]).arg(&plan).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(report.contains("order         global        cart_id"), "{report}");
    let out = Command::new(env!("CARGO_BIN_EXE_ensemble"))
        .args(["bench", "shop", "--system", "ensemble", "--measure", "2", "--warmup", "0", "--clients", "5", "--quiet", "--plan"])
        .arg(&plan)
        .arg("--out")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("shop-ensemble-3: serializable"));
    let bad = Command::new(env!("CARGO_BIN_EXE_ensemble")).args(["analyze", "nope"]).output().unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown application `nope`"));
}

/// The primary-backup toy plugs in through its harness alone: the same `bench` runs it in the
/// simulator and as real processes, checks each run with the dependency-graph checker, and
/// writes a history that `ensemble check` reads back.
#[test]
fn a_toy_protocol_runs_simulated_and_real_through_the_one_harness() {
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("history.json");
    for real in [false, true] {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_ensemble"));
        cmd.args(["bench", "kv", "--system", "primary-backup", "--topology", "lan", "--instances", "3", "--clients", "4"])
            .args(["--warmup", "0.5", "--measure", "2", "--quiet", "--out"])
            .arg(dir.path());
        if real {
            cmd.arg("--real");
        } else {
            cmd.arg("--history").arg(&history);
        }
        let out = cmd.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
        let label = if real { "kv-primary-backup-3-real" } else { "kv-primary-backup-3" };
        assert!(stdout.contains(&format!("{label}: primary-backup:")), "{stdout}");
        assert!(stdout.contains("SER: serializable"), "{stdout}");
        assert!(stdout.contains("update mean"), "the toy's own latency class is a column: {stdout}");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_ensemble")).args(["check", "--criterion", "ser,rc"]).arg(&history).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("SER: serializable") && stdout.contains("RC:"), "{stdout}");

    // A history with a lost update: RC accepts it, SER does not, and the command says so.
    let lost = dir.path().join("lost.json");
    std::fs::write(
        &lost,
        r#"{"transactions": [
            {"id": 1, "committed": true, "reads": [{"key": "x", "writer": null}], "writes": [{"key": "x", "value": "1"}]},
            {"id": 2, "committed": true, "reads": [{"key": "x", "writer": null}], "writes": [{"key": "x", "value": "2"}]}],
          "installs": [{"replica": "r0", "key": "x", "order": [1, 2]}]}"#,
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ensemble")).args(["check", "--criterion", "rc"]).arg(&lost).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = Command::new(env!("CARGO_BIN_EXE_ensemble")).args(["check"]).arg(&lost).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("NOT serializable"), "{}", String::from_utf8_lossy(&out.stdout));
    // Bad input names the file and what is wrong.
    std::fs::write(&lost, "{ not json").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ensemble")).args(["check"]).arg(&lost).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("lost.json"), "{}", String::from_utf8_lossy(&out.stderr));
    let out = Command::new(env!("CARGO_BIN_EXE_ensemble")).args(["check", "--criterion", "strict"]).arg(&history).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--criterion"));
}

/// The G-DUR engine as real processes over TCP, with atomic commitment by multicast and votes
/// and by 2PC, the first with its stores on disk: every run checked (serializability, replica
/// agreement, no committed write lost).
#[test]
fn gdur_systems_run_as_real_processes_and_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let stores = dir.path().join("stores");
    std::fs::create_dir(&stores).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ensemble"))
        .args(["bench", "tpcb", "--system", "p-store,p-store-2pc", "--real", "--groups", "2", "--key-scale", "0.05", "--clients", "6"])
        .args(["--warmup", "0.5", "--measure", "2", "--quiet", "--store-dir"])
        .arg(&stores)
        .arg("--out")
        .arg(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}\n{}", String::from_utf8_lossy(&out.stderr), stdout);
    for system in ["p-store", "p-store-2pc"] {
        let line = stdout.lines().find(|l| l.starts_with(&format!("tpcb-{system}-2x3-real: "))).unwrap_or_else(|| panic!("no verdict for {system}: {stdout}"));
        assert!(line.contains("SER: serializable"), "{line}");
    }
    assert_eq!(stdout.matches("no lost commit").count(), 2, "{stdout}");
    for system in ["p-store", "p-store-2pc"] {
        assert!(stores.join(format!("tpcb-{system}-2x3-real-store-0.sqlite")).exists());
    }
}
