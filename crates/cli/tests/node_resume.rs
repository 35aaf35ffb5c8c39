//! `ensemble node --resume`: a node of the two-phase-commit baseline that was killed starts again
//! over the database it left and serves; what committed before is there, and the other node's
//! transactions that need it commit once it is back. A system whose nodes cannot recover from
//! their databases, and a database that is not there, are refused with a message that says so.
//! And within a measured run (`ensemble bench --restart-node`), the run checked.
//! Needs the local PostgreSQL and MariaDB servers: `.ci/run` starts them and runs these
//! (scripts/server-suites.sh).

use ensemble_app::InstanceId;
use ensemble_bench::{BackendKind, Experiment, Runtime};
use ensemble_core::topology::Topology;
use ensemble_core::*;
use ensemble_net::cluster::{send_shutdown, wait_for_ready_line};
use ensemble_net::frame::Never;
use ensemble_net::{BlockingConn, ClusterSpec, Frame, Hello};
use ensemble_server::{admin, Engine};
use ensemble_twopc::TwoPcEvidence;
use std::io::BufReader;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A two-instance shop of `system` on the local server of `engine`, its files in `dir`, each
/// host on a port fixed in the cluster file (a node that starts again must be found where it
/// was).
fn write_run(dir: &Path, system: &str, engine: Engine) -> (Vec<SocketAddr>, std::path::PathBuf, std::path::PathBuf) {
    let mut exp = Experiment::for_system("shop", system, 2, Topology::lan()).unwrap();
    exp.runtime = Runtime::Real;
    exp.backend.kind = match engine {
        Engine::Postgres => BackendKind::Postgres,
        Engine::Mariadb => BackendKind::Mariadb,
    };
    let exp_path = dir.join("experiment.json");
    std::fs::write(&exp_path, serde_json::to_string(&exp).unwrap()).unwrap();
    let listeners: Vec<std::net::TcpListener> = (0..2).map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    let addrs: Vec<SocketAddr> = listeners.iter().map(|l| l.local_addr().unwrap()).collect();
    drop(listeners);
    let deployment = Deployment::one_per_machine(&[0, 0], exp.topology.cpu.cores, "instance");
    let mut spec = ClusterSpec::loopback(deployment, exp.topology.clone(), false).unwrap();
    spec.set_addrs(&addrs).unwrap();
    let cluster_path = dir.join("cluster.toml");
    spec.save(&cluster_path).unwrap();
    (addrs, exp_path, cluster_path)
}

fn node(dir: &Path, exp: &Path, cluster: &Path, host: u32, tag: &str, resume: bool) -> Command {
    let host_dir = dir.join(format!("h{host}"));
    std::fs::create_dir_all(&host_dir).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ensemble"));
    cmd.args(["node", "--host", &host.to_string(), "--db-run", tag]).arg("--experiment").arg(exp).arg("--cluster").arg(cluster).arg("--dir").arg(host_dir);
    if resume {
        cmd.arg("--resume");
    }
    cmd
}

/// Starts a node and waits for its ready line.
fn start(mut cmd: Command) -> Child {
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().unwrap();
    wait_for_ready_line(BufReader::new(child.stdout.take().unwrap())).unwrap();
    child
}

fn local_server(engine: Engine) -> Vec<String> {
    vec![admin::default_url(engine).to_string()]
}

/// The nodes and the databases of run `tag`, stopped and dropped however the test ends.
struct Run {
    engine: Engine,
    tag: String,
    nodes: Vec<Child>,
}

impl Drop for Run {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            let _ = n.kill();
            let _ = n.wait();
        }
        for i in 0..2 {
            let _ = admin::drop_database(self.engine, &local_server(self.engine), &self.tag, i);
        }
    }
}

fn call(conn: &mut BlockingConn, seq: u64, txn: &str, params: Vec<Value>) -> Done<TwoPcEvidence> {
    let request = Request { client: ClientId(9), seq, txn: txn.into(), params };
    conn.send(&Frame::<Never, TwoPcEvidence>::Request { to: ProcessId(0), request }).unwrap();
    match conn.recv::<Never, TwoPcEvidence>().unwrap() {
        Frame::Reply { reply, .. } => match reply.body {
            ReplyBody::Done(d) if d.outcome.committed() => d,
            other => panic!("#{seq} `{txn}`: {other:?}"),
        },
        other => panic!("expected a reply, got {other:?}"),
    }
}

/// Orders cart `cart` (instance 0's: an even id) with one item in it: a global with a branch at
/// instance 1.
fn order(conn: &mut BlockingConn, seq: u64, cart: i64) -> Done<TwoPcEvidence> {
    call(conn, seq, "create_cart", vec![Value::Int(cart)]);
    call(conn, seq + 1, "add_item", vec![Value::Int(cart), Value::Int(3), Value::Int(1)]);
    call(conn, seq + 2, "order", vec![Value::Int(cart)])
}

fn orders_at(engine: Engine, tag: &str, i: u32) -> Vec<i64> {
    let app = ensemble_app::application("shop").unwrap();
    let sql = std::sync::Arc::new(ensemble_server::translate(&app, engine).unwrap());
    let url = admin::instance_url(engine, &local_server(engine), tag, i).unwrap();
    let mut db = ensemble_server::ServerStorage::open(&url, app, sql, InstanceId(i)).unwrap();
    let mut carts: Vec<i64> = db.dump("orders").unwrap().iter().map(|r| r[0].as_int().unwrap()).collect();
    carts.sort();
    carts
}

#[test]
#[ignore = "needs PostgreSQL and MariaDB: .ci/run starts them and runs this"]
fn a_killed_2pc_node_resumes_over_its_database_and_serves() {
    for engine in [Engine::Postgres, Engine::Mariadb] {
        let name = engine.name();
        let dir = tempfile::tempdir().unwrap();
        let (addrs, exp, cluster) = write_run(dir.path(), "2pc", engine);
        let tag = admin::run_tag("resume");
        let mut run = Run { engine, tag: tag.clone(), nodes: Vec::new() };
        run.nodes.push(start(node(dir.path(), &exp, &cluster, 0, &tag, false)));
        run.nodes.push(start(node(dir.path(), &exp, &cluster, 1, &tag, false)));
        let mut conn = BlockingConn::connect(addrs[0], None, Hello::Client { client: ClientId(9), site: 0 }, Duration::from_secs(30)).unwrap();
        let first = order(&mut conn, 1, 8);
        assert_eq!(first.evidence.branches, 2, "{name}: a distributed transaction: {first:?}");

        // Instance 1's node is killed, and started again over its database. The prepare
        // instance 0 then sends it may be lost with the link to the killed node: the
        // coordinator's wait for its vote runs out, and the order runs again.
        run.nodes[1].kill().unwrap();
        run.nodes[1].wait().unwrap();
        run.nodes[1] = start(node(dir.path(), &exp, &cluster, 1, &tag, true));
        let second = order(&mut conn, 4, 10);
        eprintln!("{name}: after the restart, the order took {} attempt(s)", second.evidence.attempts);
        assert_eq!(second.evidence.branches, 2, "{name}: {second:?}");
        assert!(second.evidence.ts > first.evidence.ts, "{name}: the later commit comes later in the serial order: {first:?} {second:?}");
        assert_eq!(orders_at(engine, &tag, 1), vec![8, 10], "{name}: what committed before the kill is there, and the order after it");
        assert_eq!(orders_at(engine, &tag, 0), vec![8, 10], "{name}");

        for (h, addr) in run.nodes.iter_mut().zip(&addrs) {
            send_shutdown(*addr, None, Duration::from_secs(10)).unwrap();
            assert!(h.wait().unwrap().success(), "{name}: a node resumed stops cleanly too");
        }
    }
}

/// `ensemble bench --restart-node`: a 2PC node killed in the middle of a measured run (once its
/// clients' requests in flight were answered, their next ones held) and started again over its
/// databases. The run ends whole, every request answered, and its check passes: the resumed
/// instance's transactions take timestamps after every one its first incarnation gave.
#[test]
#[ignore = "needs PostgreSQL and MariaDB: .ci/run starts them and runs this"]
fn a_node_killed_and_started_again_within_a_run_leaves_the_run_whole_and_checked() {
    for backend in ["postgres", "mariadb"] {
        let out_dir = tempfile::tempdir().unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_ensemble"))
            .args(["bench", "shop", "--system", "2pc", "--real", "--backend", backend, "--topology", "lan", "--instances", "3", "--clients", "9"])
            .args(["--warmup", "0.5", "--measure", "3", "--restart-node", "1@1", "--quiet", "--out"])
            .arg(out_dir.path())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{backend}: {stderr}");
        assert!(stderr.contains("host h1 (process p1, instance 1) restarted 1."), "{backend}: {stderr}");
        assert!(stderr.contains("it was killed by signal 9 (SIGKILL), and served again over its databases after"), "{backend}: {stderr}");
        let file = out_dir.path().join(format!("shop-2pc-3-{backend}-real-seed1.json"));
        let result: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        assert_eq!(result["check_passed"], serde_json::Value::Bool(true), "{backend}: {}", result["check"]);
        assert_eq!(result["experiment"]["restarts"], serde_json::json!([{ "host": 1, "at_s": 1.0 }]), "{backend}: the result file says what was done");
    }
}

#[test]
#[ignore = "needs PostgreSQL: .ci/run starts it and runs this"]
fn resuming_is_refused_for_the_belt_and_without_a_database() {
    let dir = tempfile::tempdir().unwrap();
    let (_, exp, cluster) = write_run(dir.path(), "ensemble", Engine::Postgres);
    let tag = admin::run_tag("noresume");
    let _run = Run { engine: Engine::Postgres, tag: tag.clone(), nodes: Vec::new() };
    let out = node(dir.path(), &exp, &cluster, 0, &tag, true).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("ensemble nodes keep protocol state in memory that their databases do not hold"), "{err}");

    let (_, exp, cluster) = write_run(dir.path(), "2pc", Engine::Postgres);
    let out = node(dir.path(), &exp, &cluster, 0, &tag, true).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("instance 0: cannot resume over its database"), "{err}");
    assert!(err.contains(&admin::database_name(&tag, 0)), "the error names the database: {err}");
}
