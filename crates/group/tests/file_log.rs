//! The file log on its own, against `MemoryLog` as the model: a seeded script of the writes the
//! library makes, applied to both, must leave the same state, before and after a reopen; a torn
//! last record (the file cut at each of its bytes) is cut off on open and never an error; a byte
//! flipped inside a middle record is corruption, reported with the file and offset; and a child
//! process SIGKILLed while appending leaves a file that opens and holds a prefix of its writes,
//! with every write it acknowledged.

use ensemble_group::omnipaxos::ballot_leader_election::Ballot;
use ensemble_group::omnipaxos::storage::{Storage, StorageOp};
use ensemble_group::{DurableLog, FileLog, FileLogError, LogItem, MemoryLog, MemoryLogState};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::io::{BufRead, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

type Entry = (u64, String);

/// One storage operation of the script (`StorageOp` is not `Clone`).
#[derive(Clone, Debug)]
enum Op {
    Append(Entry),
    AppendMany(Vec<Entry>),
    OnPrefix(usize, Vec<Entry>),
    Promise(u32),
    Accepted(u32),
    Decided(usize),
}

/// One write call.
#[derive(Clone, Debug)]
enum Step {
    Single(Op),
    Atomic(Vec<Op>),
    Incarnation,
}

fn ballot(n: u32) -> Ballot {
    Ballot::with(1, n, 0, 1 + n as u64 % 3)
}

fn items(es: &[Entry]) -> Vec<LogItem<Entry>> {
    es.iter().cloned().map(LogItem).collect()
}

fn storage_op(op: &Op) -> StorageOp<LogItem<Entry>> {
    match op {
        Op::Append(e) => StorageOp::AppendEntry(LogItem(e.clone())),
        Op::AppendMany(es) => StorageOp::AppendEntries(items(es)),
        Op::OnPrefix(i, es) => StorageOp::AppendOnPrefix(*i, items(es)),
        Op::Promise(n) => StorageOp::SetPromise(ballot(*n)),
        Op::Accepted(n) => StorageOp::SetAcceptedRound(ballot(*n)),
        Op::Decided(i) => StorageOp::SetDecidedIndex(*i),
    }
}

/// Applies `step` the way the library would: single operations through their own methods.
fn apply<L: DurableLog<Entry>>(log: &mut L, step: &Step) {
    match step {
        Step::Single(op) => match op.clone() {
            Op::Append(e) => log.append_entry(LogItem(e)),
            Op::AppendMany(es) => log.append_entries(items(&es)),
            Op::OnPrefix(i, es) => log.append_on_prefix(i, items(&es)),
            Op::Promise(n) => log.set_promise(ballot(n)),
            Op::Accepted(n) => log.set_accepted_round(ballot(n)),
            Op::Decided(i) => log.set_decided_idx(i),
        }
        .expect("a valid write"),
        Step::Atomic(ops) => log.write_atomically(ops.iter().map(storage_op).collect()).expect("a valid batch"),
        Step::Incarnation => {
            log.next_incarnation();
        }
    }
}

fn entry(rng: &mut ChaCha8Rng) -> Entry {
    let len = rng.random_range(0..120);
    let text: String = (0..len).map(|_| rng.random_range(b'a'..=b'z') as char).collect();
    (rng.random(), text)
}

fn entries(rng: &mut ChaCha8Rng, n: usize) -> Vec<Entry> {
    (0..n).map(|_| entry(rng)).collect()
}

/// The next write of the script: valid for `state` (prefixes within the log, decided indices
/// within it and never going back, rounds never going back), drawn from `rng`.
fn next_step<S: Storage<LogItem<Entry>>>(rng: &mut ChaCha8Rng, log: &S) -> Step {
    // Through the library's getters, so that following the script copies nothing.
    let len = log.get_log_len().unwrap();
    let decided = log.get_decided_idx().unwrap();
    let round = log.get_promise().unwrap().map_or(0, |b| b.n);
    match rng.random_range(0..100) {
        0..=29 => Step::Single(Op::Append(entry(rng))),
        30..=44 => {
            let n = rng.random_range(1..5);
            Step::Single(Op::AppendMany(entries(rng, n)))
        }
        45..=54 => {
            let n = rng.random_range(0..3);
            Step::Single(Op::OnPrefix(rng.random_range(decided..=len), entries(rng, n)))
        }
        55..=62 => Step::Single(Op::Promise(round + rng.random_range(0..2))),
        63..=69 => Step::Single(Op::Accepted(round)),
        70..=84 => Step::Single(Op::Decided(rng.random_range(decided..=len))),
        85..=97 => {
            // A log sync: truncate and append, adopt the round, decide, all at once.
            let n = rng.random_range(1..4);
            let from = rng.random_range(decided..=len);
            let decide = rng.random_range(decided..=from + n);
            Step::Atomic(vec![Op::OnPrefix(from, entries(rng, n)), Op::Accepted(round), Op::Decided(decide)])
        }
        _ => Step::Incarnation,
    }
}

/// What must survive a restart, rendered for comparison (the incarnation is compared apart:
/// every open bumps it).
fn view(s: &MemoryLogState<Entry>) -> String {
    format!(
        "entries {:?}\npromise {:?}\naccepted {:?}\ndecided {}\ncompacted {}\nstopsign {:?}",
        s.entries, s.promise, s.accepted_round, s.decided_idx, s.compacted_idx, s.stopsign
    )
}

/// Runs `steps` steps of the script of `seed` on a model and on the file log at `path`,
/// checking they agree after every step; returns the model's states (index j: after j steps)
/// the file's end offset after each step (index j: after j steps), and the steps.
struct Script {
    states: Vec<MemoryLogState<Entry>>,
    ends: Vec<u64>,
    steps: Vec<Step>,
    file: FileLog<Entry>,
}

fn run_script(seed: u64, steps: usize, path: &Path) -> Script {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut model = MemoryLog::new();
    let mut file = FileLog::open(path).expect("open a new log");
    let mut states = vec![model.snapshot()];
    let mut ends = vec![file.end()];
    let mut done = Vec::new();
    for _ in 0..steps {
        let step = next_step(&mut rng, &model);
        apply(&mut model, &step);
        apply(&mut file, &step);
        assert_eq!(view(file.state()), view(&model.snapshot()), "after {step:?}");
        assert_eq!(file.incarnation(), model.snapshot().incarnation.max(1));
        states.push(model.snapshot());
        ends.push(file.end());
        done.push(step);
    }
    Script { states, ends, steps: done, file }
}

#[test]
fn round_trip_write_drop_reopen_same_state() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("member.log");
    let Script { states, file, .. } = run_script(1, 400, &path);
    let last = states.last().unwrap();
    // The script did every kind of thing.
    assert!(last.entries.len() > 50 && last.decided_idx > 0, "{}", view(last));
    assert!(last.promise.is_some() && last.accepted_round.is_some());
    let incarnation = file.incarnation();
    drop(file);

    for reopen in 1..=3u64 {
        let mut file: FileLog<Entry> = FileLog::open(&path).expect("reopen");
        assert_eq!(view(file.state()), view(last), "reopen {reopen}");
        assert_eq!(file.recovery().torn_bytes, 0);
        assert!(!file.recovery().created);
        // Every open hands out a new incarnation, and the first `next_incarnation` is that one.
        assert_eq!(file.next_incarnation(), incarnation + reopen);
        // The library's reads agree with the model's.
        let len = last.entries.len();
        assert_eq!(file.get_entries(3, len - 2).unwrap(), last.entries[3..len - 2].to_vec());
        assert_eq!(file.get_suffix(len - 5).unwrap(), last.entries[len - 5..].to_vec());
        assert_eq!(file.get_entries(0, len + 1).unwrap(), Vec::new(), "all or nothing");
        assert_eq!(file.get_decided_idx().unwrap(), last.decided_idx);
        assert_eq!(file.get_promise().unwrap(), last.promise);
        assert_eq!(file.get_accepted_round().unwrap(), last.accepted_round);
    }
}

#[test]
fn a_second_next_incarnation_on_one_handle_is_persisted_and_never_repeats() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("member.log");
    let mut seen = Vec::new();
    for _ in 0..3 {
        let mut log: FileLog<Entry> = FileLog::open(&path).unwrap();
        seen.push(log.next_incarnation());
        seen.push(log.next_incarnation());
    }
    assert_eq!(seen, vec![1, 2, 3, 4, 5, 6]);
}

/// Copies the first `len` bytes of `from` to `to`.
fn copy_prefix(from: &Path, to: &Path, len: u64) {
    let bytes = std::fs::read(from).unwrap();
    std::fs::write(to, &bytes[..len as usize]).unwrap();
}

#[test]
fn a_torn_last_record_cut_at_any_byte_is_the_crash_point_never_an_error() {
    let dir = tempfile::tempdir().unwrap();
    // The first seeds whose last step is a single write and an atomic batch: both are torn.
    let mut kinds = std::collections::BTreeSet::new();
    for seed in 0..40u64 {
        let path = dir.path().join(format!("full-{seed}.log"));
        let Script { states, ends, steps, file } = run_script(seed, 30, &path);
        let incarnation = file.incarnation();
        drop(file);
        let kind = match steps.last().unwrap() {
            Step::Single(_) => "single",
            Step::Atomic(_) => "atomic",
            Step::Incarnation => continue, // may write nothing: no record to tear
        };
        if !kinds.insert(kind) {
            continue;
        }
        let (start, end) = (ends[29], ends[30]);
        assert!(end > start + 16, "seed {seed}: the last step wrote a record");
        let before = view(&states[29]);
        for cut in start..end {
            let torn = dir.path().join(format!("torn-{seed}-{cut}.log"));
            copy_prefix(&path, &torn, cut);
            let log: FileLog<Entry> = FileLog::open(&torn)
                .unwrap_or_else(|e| panic!("seed {seed}, {kind} record cut at {cut} of [{start}, {end}): {e}"));
            assert_eq!(view(log.state()), before, "seed {seed}: cut at {cut}");
            assert_eq!(log.recovery().torn_bytes, cut - start);
            assert_eq!(log.incarnation(), incarnation + 1);
            // The tail was cut off on disk: the next open finds a clean file.
            drop(log);
            let again: FileLog<Entry> = FileLog::open(&torn).unwrap();
            assert_eq!(again.recovery().torn_bytes, 0);
            assert_eq!(view(again.state()), before);
            std::fs::remove_file(&torn).unwrap();
        }
        if kinds.len() == 2 {
            return;
        }
    }
    panic!("no seed ended with both kinds of record: {kinds:?}");
}

#[test]
fn a_tail_of_zeros_or_garbage_is_a_torn_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("member.log");
    let Script { states, file, .. } = run_script(5, 50, &path);
    drop(file);
    let clean = std::fs::read(&path).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    // A file system that extended the file without writing the data leaves zeros; a torn sector
    // may hold anything.
    let garbage: Vec<u8> = (0..3000).map(|_| rng.random()).collect();
    for tail in [vec![0u8; 4096], garbage] {
        let mut bytes = clean.clone();
        bytes.extend_from_slice(&tail);
        std::fs::write(&path, &bytes).unwrap();
        let log: FileLog<Entry> = FileLog::open(&path).unwrap();
        assert_eq!(view(log.state()), view(states.last().unwrap()));
        assert_eq!(log.recovery().torn_bytes, tail.len() as u64);
        drop(log);
        std::fs::write(&path, &clean).unwrap();
    }
}

#[test]
fn a_flipped_byte_in_a_middle_record_is_corruption_naming_file_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("member.log");
    let Script { ends, file, .. } = run_script(2, 20, &path);
    drop(file);
    let clean = std::fs::read(&path).unwrap();
    // Step 10's record, followed by ten more.
    let (start, end) = (ends[9], ends[10]);
    assert!(end > start && (end as usize) < clean.len());
    let bad = dir.path().join("flipped.log");
    let mut rng = ChaCha8Rng::seed_from_u64(2);
    for at in start..end {
        let mut bytes = clean.clone();
        bytes[at as usize] ^= rng.random_range(1..=255u8);
        std::fs::write(&bad, &bytes).unwrap();
        let err = FileLog::<Entry>::open(&bad).expect_err("a flipped byte is not a torn tail");
        assert!(matches!(err, FileLogError::Corrupt { offset, .. } if offset == start), "byte {at}: {err}");
        let text = err.to_string();
        assert!(text.contains(&bad.display().to_string()), "{text}");
        assert!(text.contains(&format!("byte offset {start}")), "{text}");
        // Opening refused: the file is left as it was for whoever investigates.
        assert_eq!(std::fs::read(&bad).unwrap(), bytes);
    }
}

#[test]
fn not_a_log_and_a_torn_magic() {
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("other");
    std::fs::write(&other, b"[package]\nname = 1\n").unwrap();
    let err = FileLog::<Entry>::open(&other).unwrap_err();
    assert!(matches!(err, FileLogError::NotALog { .. }), "{err}");
    assert!(err.to_string().contains(&other.display().to_string()));

    // A crash while the magic was being written: nothing was ever acknowledged in the file.
    let torn = dir.path().join("torn");
    std::fs::write(&torn, b"ENSG").unwrap();
    let log = FileLog::<Entry>::open(&torn).unwrap();
    assert!(log.recovery().created);
    assert_eq!(log.incarnation(), 1);
}

#[test]
fn an_invalid_write_is_refused_before_it_reaches_the_disk() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("member.log");
    let mut log = FileLog::<Entry>::open(&path).unwrap();
    log.append_entries(items(&[(1, "a".into()), (2, "b".into())])).unwrap();
    let end = log.end();
    let err = log.append_on_prefix(5, items(&[(3, "c".into())])).unwrap_err();
    assert!(err.to_string().contains("append on prefix 5 outside [0, 2]"), "{err}");
    // A batch is all or nothing: its valid first operation is not applied either.
    let batch = vec![StorageOp::SetDecidedIndex(1), StorageOp::AppendOnPrefix(9, Vec::new())];
    assert!(log.write_atomically(batch).is_err());
    assert_eq!(log.end(), end);
    assert_eq!(log.state().decided_idx, 0);
    log.set_decided_idx(2).unwrap();
    drop(log);
    let log = FileLog::<Entry>::open(&path).unwrap();
    assert_eq!(log.state().entries.len(), 2);
    assert_eq!(log.state().decided_idx, 2);
}

// ---- A child process killed with SIGKILL while it appends ----

/// `<log path>#<seed>`: set only in the child.
const CHILD_ENV: &str = "ENSEMBLE_GROUP_FILE_LOG_CHILD";
/// What the child prints before the index of a write that returned.
const ACK: &str = "acknowledged write ";
/// More writes than the parent ever waits for: the child is always killed before it is done.
const CHILD_STEPS: usize = 100_000;

/// Run as the child: applies the script of the seed to the log and prints `ack <i>` once write
/// `i` returned (so it is durable), then waits on stdin to be killed. Does nothing run normally.
#[test]
fn child_appender() {
    let Ok(arg) = std::env::var(CHILD_ENV) else { return };
    let (path, seed) = arg.rsplit_once('#').expect("path#seed");
    let mut rng = ChaCha8Rng::seed_from_u64(seed.parse().unwrap());
    let mut model = MemoryLog::new();
    let mut log = FileLog::<Entry>::open(path).unwrap();
    let mut out = std::io::stdout().lock();
    for i in 0..CHILD_STEPS {
        let step = next_step(&mut rng, &model);
        apply(&mut model, &step);
        apply(&mut log, &step);
        writeln!(out, "{ACK}{i}").unwrap();
        out.flush().unwrap();
    }
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
}

/// Kills the child if the test fails before it did.
struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

#[cfg(unix)]
#[test]
fn a_child_killed_while_appending_leaves_a_prefix_holding_every_acknowledged_write() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().unwrap();
    let mut draw = ChaCha8Rng::seed_from_u64(12);
    for round in 0..6u64 {
        let path: PathBuf = dir.path().join(format!("child-{round}.log"));
        let seed = 100 + round;
        // Kill after this many acknowledged writes (the kill lands wherever the child is then).
        let acked = draw.random_range(1..300usize);
        let mut child = ChildGuard(
            Command::new(std::env::current_exe().unwrap())
                .args(["--exact", "child_appender", "--nocapture", "--test-threads=1"])
                .env(CHILD_ENV, format!("{}#{seed}", path.display()))
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap(),
        );
        let stdout = BufReader::new(child.0.stdout.take().unwrap());
        let mut next = 0usize;
        for line in stdout.lines() {
            let line = line.unwrap();
            // The test harness prints its own lines too, and starts the first with
            // `test child_appender ... ` when it does not capture output.
            let Some(at) = line.find(ACK) else { continue };
            let i = &line[at + ACK.len()..];
            assert_eq!(i.parse::<usize>().unwrap(), next, "acknowledgements in order");
            next += 1;
            if next == acked {
                break;
            }
        }
        assert_eq!(next, acked, "the child stopped before {acked} writes");
        let pid = child.0.id() as libc::pid_t;
        // SAFETY: kill(2) on the pid of our own child, which has not been waited for yet, so
        // the pid cannot have been reused.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
        let status = child.0.wait().unwrap();
        assert_eq!(status.signal(), Some(libc::SIGKILL), "round {round}: {status:?}");

        let log = FileLog::<Entry>::open(&path).unwrap_or_else(|e| panic!("round {round}: {e}"));
        let got = log.state();
        // The same script on the model: the file must hold the state after j writes, for some
        // j at least the number acknowledged (writes after the last ack may or may not be there).
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut model = MemoryLog::new();
        let mut found = None;
        for j in 0..=CHILD_STEPS {
            // Cheap fields first: the full comparison copies the model.
            let maybe = model.get_log_len().unwrap() == got.entries.len()
                && model.get_decided_idx().unwrap() == got.decided_idx
                && model.get_promise().unwrap() == got.promise
                && model.get_accepted_round().unwrap() == got.accepted_round;
            if j >= acked && maybe && view(&model.snapshot()) == view(got) {
                found = Some(j);
                break;
            }
            let step = next_step(&mut rng, &model);
            apply(&mut model, &step);
        }
        let j =
            found.unwrap_or_else(|| panic!("round {round}: the reopened log is no prefix of at least {acked} writes"));
        assert!(log.incarnation() > model.snapshot().incarnation, "round {round}: an incarnation repeated");
        eprintln!(
            "round {round}: {acked} writes acknowledged, {j} on disk after SIGKILL, torn bytes {}",
            log.recovery().torn_bytes
        );
    }
}
