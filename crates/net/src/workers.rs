//! The storage worker pool: the real-runtime counterpart of the simulator's CPU cores.
//!
//! Each worker is a std thread that creates its own [`Storage`] inside the thread, because
//! database connections are not `Sync` (and sessions are not even `Send`): the storage never
//! leaves the thread that made it. Jobs arrive on one shared crossbeam channel, so an idle worker
//! takes the next job; completions go to a callback that the host wires to its input channel.
//! A host runs one pool per process that has storage.
//!
//! A pool may also have a [`SerialLane`]: the jobs it picks go to one worker of their own, in
//! the order submitted, and whatever has queued there while that worker was busy is handed to
//! [`Storage::run_batch`] at once (up to [`MAX_SERIAL_BATCH`]), so that jobs that would have
//! run one at a time anyway share a commit.
//!
//! The storages never leave their threads, so what each counted ([`Storage::tally`]) is copied
//! out after every job once it has counted anything, before the job's completion is handed on:
//! whoever has seen a job complete reads counts that include it ([`WorkerPool::tally`]).

use crossbeam_channel::{Receiver, Sender};
use ensemble_core::{SerialLane, Storage, WorkId};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Makes worker `i`'s storage, on worker `i`'s own thread.
pub type StorageFactory<J, R> = Arc<dyn Fn(usize) -> Box<dyn Storage<Job = J, Result = R>> + Send + Sync>;

/// The most jobs a serial lane hands its storage at once: every job a node's clients can have
/// waiting for one instance's writers in the runs here, and few enough that the first of a batch
/// does not wait long for the last before their common commit.
pub const MAX_SERIAL_BATCH: usize = 32;

/// Why a job has no result: its storage panicked, or never opened. The protocol's result type
/// cannot say so (the runtime cannot make one up), so the host reports it as its process's
/// failure instead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobFailed(pub String);

/// A queue of jobs for the workers that take from it.
type Queue<J> = Sender<(WorkId, J)>;

/// Each worker's storage's last [`Storage::tally`], by worker index.
type Tallies = Arc<Mutex<Vec<Vec<(&'static str, u64)>>>>;

/// What each worker is running, by worker index: the job(s) and since when. A host that does not
/// drain says which jobs it waits for, and how long they have run ([`WorkerPool::running`]).
type Running = Arc<Mutex<Vec<Option<(Vec<WorkId>, Instant)>>>>;

pub struct WorkerPool<J> {
    jobs: Option<Queue<J>>,
    /// The lane's picker and its worker's queue.
    serial: Option<(SerialLane<J>, Queue<J>)>,
    threads: Vec<JoinHandle<()>>,
    tallies: Tallies,
    running: Running,
    /// The workers' names, by index.
    labels: Vec<String>,
}

impl<J: Send + 'static> WorkerPool<J> {
    /// Starts `workers` threads (at least one) named `{name}-{i}`, and with a `serial` lane one
    /// more, `{name}-serial`. `make_storage(i)` runs on worker `i`'s own thread (the serial
    /// worker's `i` is `workers`); `done` is called on that thread with every job's outcome.
    pub fn start<R, D>(name: &str, workers: usize, make_storage: StorageFactory<J, R>, serial: Option<SerialLane<J>>, done: D) -> std::io::Result<WorkerPool<J>>
    where
        R: Send + 'static,
        D: Fn(WorkId, Result<R, JobFailed>) + Send + Clone + 'static,
    {
        let (tx, rx) = crossbeam_channel::unbounded::<(WorkId, J)>();
        let workers = workers.max(1);
        let all = workers + usize::from(serial.is_some());
        let tallies: Tallies = Arc::new(Mutex::new(vec![Vec::new(); all]));
        let running: Running = Arc::new(Mutex::new(vec![None; all]));
        let mut pool = WorkerPool { jobs: Some(tx), serial: None, threads: Vec::new(), tallies: tallies.clone(), running: running.clone(), labels: Vec::new() };
        for index in 0..workers {
            let rx = rx.clone();
            let make_storage = make_storage.clone();
            let done = done.clone();
            let (tallies, running) = (tallies.clone(), running.clone());
            let label = format!("{name}-{index}");
            pool.labels.push(label.clone());
            let handle = std::thread::Builder::new()
                .name(label.clone())
                .spawn(move || worker(&label, index, &*make_storage, rx, 1, &tallies, &running, done))?;
            pool.threads.push(handle);
        }
        if let Some(pick) = serial {
            let (tx, rx) = crossbeam_channel::unbounded::<(WorkId, J)>();
            pool.serial = Some((pick, tx));
            let label = format!("{name}-serial");
            pool.labels.push(label.clone());
            let handle = std::thread::Builder::new()
                .name(label.clone())
                .spawn(move || worker(&label, workers, &*make_storage, rx, MAX_SERIAL_BATCH, &tallies, &running, done))?;
            pool.threads.push(handle);
        }
        Ok(pool)
    }

}

impl<J> WorkerPool<J> {
    /// Queues a job; false only if every worker has exited.
    pub fn submit(&self, work: WorkId, job: J) -> bool {
        if let Some((pick, lane)) = &self.serial {
            if pick(&job) {
                return lane.send((work, job)).is_ok();
            }
        }
        self.jobs.as_ref().is_some_and(|tx| tx.send((work, job)).is_ok())
    }

    /// What the pool's storages counted ([`Storage::tally`]), summed by name, in the order the
    /// names first appear; it covers every job whose completion has been handed on.
    pub fn tally(&self) -> Vec<(&'static str, u64)> {
        let tallies = self.tallies.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut sum: Vec<(&'static str, u64)> = Vec::new();
        for (name, n) in tallies.iter().flatten() {
            match sum.iter_mut().find(|(k, _)| k == name) {
                Some((_, total)) => *total += n,
                None => sum.push((name, *n)),
            }
        }
        sum
    }

    /// The jobs the workers are running that began at least `longer_than` ago, longest first:
    /// the worker's name, the job(s) and for how long.
    pub fn running(&self, longer_than: Duration) -> Vec<(String, Vec<WorkId>, Duration)> {
        let now = Instant::now();
        let running = self.running.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut long: Vec<(String, Vec<WorkId>, Duration)> = running
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.as_ref().map(|(works, since)| (self.labels[i].clone(), works.clone(), now.saturating_duration_since(*since))))
            .filter(|(_, _, d)| *d >= longer_than)
            .collect();
        long.sort_by(|a, b| b.2.cmp(&a.2));
        long
    }

    /// Lets the workers finish the jobs already queued, then joins them.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        self.jobs = None;
        self.serial = None;
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl<J> Drop for WorkerPool<J> {
    fn drop(&mut self) {
        self.stop();
    }
}

pub(crate) fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic".into())
}

/// Runs the jobs of `rx`, up to `batch` at a time: with 1, each with [`Storage::run`]; with
/// more, whatever has queued behind the first goes with it to [`Storage::run_batch`].
/// A panicking storage must not take the host down or leave its job unanswered without a trace:
/// both turn into a [`JobFailed`] for each job it had.
fn worker<J, R, D>(
    label: &str,
    index: usize,
    make_storage: &dyn Fn(usize) -> Box<dyn Storage<Job = J, Result = R>>,
    rx: Receiver<(WorkId, J)>,
    batch: usize,
    tallies: &Mutex<Vec<Vec<(&'static str, u64)>>>,
    running: &Mutex<Vec<Option<(Vec<WorkId>, Instant)>>>,
    done: D,
) where
    D: Fn(WorkId, Result<R, JobFailed>),
{
    // Or why it could not be opened, which every job of this worker then fails with: the report
    // of a run names it, not only the host's log.
    let mut storage = catch_unwind(AssertUnwindSafe(|| make_storage(index))).map_err(|p| {
        let why = panic_text(&*p);
        eprintln!("[ensemble-net] storage worker {label}: opening storage panicked: {why}");
        why
    });
    // The storage has reported a tally: from then on every one is copied out, empty or not.
    let mut tallied = false;
    loop {
        let first = match rx.recv_timeout(ensemble_core::STORAGE_IDLE_AFTER) {
            Ok(next) => next,
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                if let Ok(s) = storage.as_mut() {
                    if let Err(p) = catch_unwind(AssertUnwindSafe(|| s.idle())) {
                        eprintln!("[ensemble-net] storage worker {label}: idle() panicked: {}", panic_text(&*p));
                    }
                }
                match rx.recv() {
                    Ok(next) => next,
                    Err(_) => break,
                }
            }
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break,
        };
        let mut works = vec![first.0];
        let mut jobs = vec![first.1];
        while jobs.len() < batch {
            match rx.try_recv() {
                Ok((w, j)) => {
                    works.push(w);
                    jobs.push(j);
                }
                Err(_) => break,
            }
        }
        running.lock().unwrap_or_else(|poisoned| poisoned.into_inner())[index] = Some((works.clone(), Instant::now()));
        let results = match storage.as_mut() {
            Err(why) => Err(format!("storage worker {label} has no storage: opening it panicked: {why}")),
            Ok(s) => catch_unwind(AssertUnwindSafe(|| if jobs.len() == 1 { vec![s.run(&jobs[0])] } else { s.run_batch(&jobs) })).map_err(|p| {
                let why = panic_text(&*p);
                let which = if works.len() == 1 { format!("job {:?}", works[0]) } else { format!("jobs {works:?}") };
                eprintln!("[ensemble-net] storage worker {label}: {which} panicked: {why}");
                format!("storage worker {label}: {which} panicked: {why}")
            }),
        };
        running.lock().unwrap_or_else(|poisoned| poisoned.into_inner())[index] = None;
        if let Some(tally) = storage.as_ref().ok().and_then(|s| catch_unwind(AssertUnwindSafe(|| s.tally())).ok()) {
            // Most storages never count anything: no lock taken for them.
            if !tally.is_empty() || tallied {
                tallied = true;
                let mut tallies = tallies.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                tallies[index] = tally;
            }
        }
        match results {
            Ok(results) if results.len() == works.len() => {
                for (work, result) in works.into_iter().zip(results) {
                    done(work, Ok(result));
                }
            }
            Ok(results) => {
                let why = format!("storage worker {label}: a batch of {} job(s) {works:?} returned {} result(s)", works.len(), results.len());
                for work in works {
                    done(work, Err(JobFailed(why.clone())));
                }
            }
            Err(why) => {
                for work in works {
                    done(work, Err(JobFailed(why.clone())));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::rc::Rc;

    /// Deliberately neither Send nor Sync, like a database session.
    struct Counting {
        worker: usize,
        ran: Rc<RefCell<u64>>,
    }

    impl Storage for Counting {
        type Job = &'static str;
        type Result = usize;
        fn run(&mut self, job: &&'static str) -> usize {
            *self.ran.borrow_mut() += 1;
            if *job == "boom" {
                panic!("boom");
            }
            self.worker
        }
    }

    type Factory = StorageFactory<&'static str, usize>;

    #[test]
    fn every_job_completes_once_even_when_storage_panics() {
        let (tx, rx) = crossbeam_channel::unbounded();
        let make: Factory = Arc::new(|worker| Box::new(Counting { worker, ran: Rc::new(RefCell::new(0)) }));
        let pool = WorkerPool::start("test", 3, make, None, move |w, r| tx.send((w, r)).unwrap()).unwrap();
        for i in 0..50 {
            assert!(pool.submit(WorkId(i), if i == 7 { "boom" } else { "ok" }));
        }
        pool.shutdown();
        let mut got: Vec<_> = rx.try_iter().collect();
        got.sort_by_key(|(w, _)| *w);
        assert_eq!(got.iter().map(|(w, _)| w.0).collect::<Vec<_>>(), (0..50).collect::<Vec<_>>());
        assert!(matches!(&got[7].1, Err(JobFailed(m)) if m.contains("WorkId(7) panicked: boom")), "{:?}", got[7]);
        assert_eq!(got.iter().filter(|(_, r)| matches!(r, Ok(w) if *w < 3)).count(), 49);
    }

    #[test]
    fn the_pools_tally_sums_its_storages_counts_of_every_completed_job() {
        /// Counts its jobs; the serial lane's storage counts its batches too.
        struct Tallying {
            serial: bool,
            jobs: u64,
            batches: u64,
        }
        impl Storage for Tallying {
            type Job = u32;
            type Result = ();
            fn run(&mut self, _: &u32) {
                self.jobs += 1;
            }
            fn run_batch(&mut self, jobs: &[u32]) -> Vec<()> {
                self.batches += 1;
                jobs.iter().map(|j| self.run(j)).collect()
            }
            fn tally(&self) -> Vec<(&'static str, u64)> {
                let mut t = vec![("jobs", self.jobs)];
                if self.serial {
                    t.push(("batches", self.batches));
                }
                t
            }
        }
        let (tx, rx) = crossbeam_channel::unbounded();
        let make: StorageFactory<u32, ()> = Arc::new(|worker| Box::new(Tallying { serial: worker == 2, jobs: 0, batches: 0 }));
        let odd: SerialLane<u32> = Arc::new(|j: &u32| j % 2 == 1);
        let pool = WorkerPool::start("test", 2, make, Some(odd), move |w, r| tx.send((w, r)).unwrap()).unwrap();
        assert_eq!(pool.tally(), vec![], "nothing run, nothing counted");
        for i in 0..40 {
            assert!(pool.submit(WorkId(i), i as u32));
        }
        for _ in 0..40 {
            rx.recv_timeout(std::time::Duration::from_secs(30)).unwrap().1.unwrap();
        }
        let tally = pool.tally();
        assert_eq!(tally.iter().filter(|(k, _)| *k == "jobs").map(|(_, n)| n).sum::<u64>(), 40, "{tally:?}");
        assert_eq!(tally.iter().filter(|(k, _)| *k == "jobs").count(), 1, "one entry per name: {tally:?}");
        let batches = tally.iter().find(|(k, _)| *k == "batches").map(|(_, n)| *n);
        assert!(batches.is_some_and(|b| (1..=20).contains(&b)), "the lane's 20 jobs in 1 to 20 batches: {tally:?}");
        pool.shutdown();
    }

    #[test]
    fn the_pool_names_the_jobs_its_workers_are_running_and_for_how_long() {
        /// Holds every job until told to go.
        struct Held(std::sync::mpsc::Receiver<()>, std::sync::mpsc::Sender<()>);
        impl Storage for Held {
            type Job = &'static str;
            type Result = usize;
            fn run(&mut self, _: &&'static str) -> usize {
                let _ = self.1.send(());
                let _ = self.0.recv();
                0
            }
        }
        let (go, hold) = std::sync::mpsc::channel();
        let hold = std::sync::Mutex::new(Some(hold));
        let (started_tx, started) = std::sync::mpsc::channel();
        let make: Factory = Arc::new(move |_| Box::new(Held(hold.lock().unwrap().take().expect("one worker"), started_tx.clone())));
        let (tx, rx) = crossbeam_channel::unbounded();
        let pool = WorkerPool::start("held", 1, make, None, move |w, r| tx.send((w, r)).unwrap()).unwrap();
        let wait = std::time::Duration::from_secs(30);
        assert!(pool.running(Duration::ZERO).is_empty(), "nothing submitted, nothing running");
        assert!(pool.submit(WorkId(41), "a"));
        started.recv_timeout(wait).unwrap();
        let running = pool.running(Duration::ZERO);
        assert_eq!(running.iter().map(|(w, jobs, _)| (w.as_str(), jobs.clone())).collect::<Vec<_>>(), vec![("held-0", vec![WorkId(41)])]);
        assert!(pool.running(Duration::from_secs(3600)).is_empty(), "it has not run for an hour");
        go.send(()).unwrap();
        assert_eq!(rx.recv_timeout(wait).unwrap().0, WorkId(41));
        assert!(pool.running(Duration::ZERO).is_empty(), "a finished job is no longer named");
        pool.shutdown();
    }

    #[test]
    fn a_worker_without_jobs_for_a_while_tells_its_storage() {
        struct Idling(std::sync::mpsc::Sender<&'static str>);
        impl Storage for Idling {
            type Job = &'static str;
            type Result = usize;
            fn run(&mut self, _: &&'static str) -> usize {
                let _ = self.0.send("ran");
                0
            }
            fn idle(&mut self) {
                let _ = self.0.send("idle");
            }
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let make: Factory = Arc::new(move |_| Box::new(Idling(tx.clone())));
        let pool = WorkerPool::start("test", 1, make, None, |_, _| {}).unwrap();
        pool.submit(WorkId(1), "ok");
        let wait = std::time::Duration::from_secs(30);
        assert_eq!(rx.recv_timeout(wait), Ok("ran"));
        assert_eq!(rx.recv_timeout(wait), Ok("idle"), "no job came after the first, so the storage is told it is idle");
        pool.shutdown();
    }

    #[test]
    fn a_serial_lane_runs_its_jobs_in_order_and_hands_over_what_queued_as_one_batch() {
        /// Holds its first job until told to go, and says how it ran each job.
        struct Lane {
            worker: usize,
            hold: Option<std::sync::mpsc::Receiver<()>>,
            seen: std::sync::mpsc::Sender<(usize, Vec<u32>)>,
        }
        impl Storage for Lane {
            type Job = u32;
            type Result = u32;
            fn run(&mut self, job: &u32) -> u32 {
                let _ = self.seen.send((self.worker, vec![*job]));
                if let Some(hold) = self.hold.take() {
                    let _ = hold.recv();
                }
                *job
            }
            fn run_batch(&mut self, jobs: &[u32]) -> Vec<u32> {
                let _ = self.seen.send((self.worker, jobs.to_vec()));
                jobs.to_vec()
            }
        }
        let (go, hold) = std::sync::mpsc::channel();
        let hold = std::sync::Mutex::new(Some(hold));
        let (seen_tx, seen) = std::sync::mpsc::channel();
        let seen_tx = std::sync::Mutex::new(seen_tx);
        let make: StorageFactory<u32, u32> = Arc::new(move |worker| {
            // Only the serial worker (index 2 of 2 + 1) holds its first job.
            let hold = if worker == 2 { hold.lock().unwrap().take() } else { None };
            Box::new(Lane { worker, hold, seen: seen_tx.lock().unwrap().clone() })
        });
        let (tx, rx) = crossbeam_channel::unbounded();
        let odd: SerialLane<u32> = Arc::new(|j: &u32| j % 2 == 1);
        let pool = WorkerPool::start("test", 2, make, Some(odd), move |w, r| tx.send((w, r)).unwrap()).unwrap();
        // The first odd job holds the serial worker; once it runs, the rest queue behind it.
        let wait = std::time::Duration::from_secs(30);
        assert!(pool.submit(WorkId(1), 1));
        assert_eq!(seen.recv_timeout(wait), Ok((2, vec![1])));
        for i in (0..12u32).filter(|i| *i != 1) {
            assert!(pool.submit(WorkId(i as u64), i));
        }
        // Every even job is done (by the shared workers) while the serial worker is held.
        for _ in 0..6 {
            let (w, r) = rx.recv_timeout(wait).unwrap();
            assert_eq!(w.0 % 2, 0, "an odd job finished while the serial worker was held");
            assert_eq!(r, Ok(w.0 as u32));
        }
        go.send(()).unwrap();
        pool.shutdown();
        let odd_done: Vec<u64> = rx.try_iter().map(|(w, r)| {
            assert_eq!(r, Ok(w.0 as u32));
            w.0
        }).collect();
        assert_eq!(odd_done, vec![1, 3, 5, 7, 9, 11], "the lane's jobs complete in the order submitted");
        let runs: Vec<(usize, Vec<u32>)> = seen.try_iter().filter(|(_, jobs)| jobs[0] % 2 == 1).collect();
        assert_eq!(runs, vec![(2, vec![3, 5, 7, 9, 11])], "what queued behind the held job went as one batch, to the serial worker");
    }

    #[test]
    fn a_storage_that_cannot_open_fails_its_jobs_instead_of_hanging() {
        let (tx, rx) = crossbeam_channel::unbounded();
        let make: Factory = Arc::new(|_| panic!("no database"));
        let pool = WorkerPool::start("test", 1, make, None, move |w, r| tx.send((w, r)).unwrap()).unwrap();
        pool.submit(WorkId(1), "ok");
        pool.shutdown();
        let got: Vec<_> = rx.try_iter().collect();
        assert!(matches!(&got[..], [(WorkId(1), Err(JobFailed(m)))] if m == "storage worker test-0 has no storage: opening it panicked: no database"), "{got:?}");
    }
}
