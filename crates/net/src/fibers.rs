//! The storage workers as fibers on the host's own loop ([`HostConfig::storage_on_loop`]): the
//! same storages, jobs, serial lane and results as [`crate::workers`], without their threads.
//!
//! Each worker is an [`ensemble_fiber::Fiber`] that makes its storage and then takes jobs from
//! the pool's queue, driven by a task of the loop's runtime. A storage whose client waits through
//! `ensemble_fiber::wait` (PostgreSQL's, `ensemble_server`) suspends its fiber at each request
//! instead of blocking a thread, so the loop goes on reading requests and writing replies while
//! the server works, and a job's start and end wake no other thread. A storage that blocks
//! (SQLite, MariaDB's synchronous client) would stall the loop: the harness keeps those on
//! threads.
//!
//! [`HostConfig::storage_on_loop`]: crate::HostConfig::storage_on_loop

use crate::workers::{panic_text, JobFailed, StorageFactory, MAX_SERIAL_BATCH};
use ensemble_core::{SerialLane, Storage, WorkId};
use ensemble_fiber::Fiber;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio::sync::Mutex;
use tokio::task::{JoinHandle, LocalSet};

/// A queue of jobs for the fibers that take from it, one at a time.
type Queue<J> = Rc<Mutex<UnboundedReceiver<(WorkId, J)>>>;

pub(crate) struct FiberPool<J> {
    jobs: Option<UnboundedSender<(WorkId, J)>>,
    /// The lane's picker and its fiber's queue.
    serial: Option<(SerialLane<J>, UnboundedSender<(WorkId, J)>)>,
    fibers: Vec<JoinHandle<()>>,
}

impl<J: 'static> FiberPool<J> {
    /// Starts `workers` fibers (at least one) on `local`, and with a `serial` lane one more, as
    /// [`crate::workers::WorkerPool::start`] starts threads: `make_storage(i)` runs on fiber `i`
    /// (the serial fiber's `i` is `workers`), and `done` is called there with every job's
    /// outcome. They run once `local` is driven.
    pub(crate) fn start<R, D>(local: &LocalSet, name: &str, workers: usize, make_storage: StorageFactory<J, R>, serial: Option<SerialLane<J>>, done: D) -> FiberPool<J>
    where
        R: 'static,
        D: Fn(WorkId, Result<R, JobFailed>) + Clone + 'static,
    {
        let (tx, rx) = unbounded_channel();
        let shared: Queue<J> = Rc::new(Mutex::new(rx));
        let workers = workers.max(1);
        let mut pool = FiberPool { jobs: Some(tx), serial: None, fibers: Vec::new() };
        for index in 0..workers {
            let worker = Worker { label: format!("{name}-{index}"), index, make_storage: make_storage.clone(), queue: shared.clone(), batch: 1, done: done.clone() };
            pool.fibers.push(local.spawn_local(worker.drive()));
        }
        if let Some(pick) = serial {
            let (tx, rx) = unbounded_channel();
            pool.serial = Some((pick, tx));
            let worker = Worker { label: format!("{name}-serial"), index: workers, make_storage, queue: Rc::new(Mutex::new(rx)), batch: MAX_SERIAL_BATCH, done };
            pool.fibers.push(local.spawn_local(worker.drive()));
        }
        pool
    }
}

impl<J> FiberPool<J> {
    /// Queues a job; false only if every fiber has ended.
    pub(crate) fn submit(&self, work: WorkId, job: J) -> bool {
        if let Some((pick, lane)) = &self.serial {
            if pick(&job) {
                return lane.send((work, job)).is_ok();
            }
        }
        self.jobs.as_ref().is_some_and(|tx| tx.send((work, job)).is_ok())
    }

    /// Lets the fibers finish the jobs already queued, and waits for them to end. Must be
    /// awaited on the [`LocalSet`] they were started on.
    pub(crate) async fn shutdown(mut self) {
        self.jobs = None;
        self.serial = None;
        for fiber in self.fibers.drain(..) {
            let _ = fiber.await;
        }
    }
}

/// One fiber's worth of the pool.
struct Worker<J, R, D> {
    label: String,
    index: usize,
    make_storage: StorageFactory<J, R>,
    queue: Queue<J>,
    batch: usize,
    done: D,
}

/// What a fiber's code shares with its driver, for the driver to answer for it if it panics.
#[derive(Default)]
struct InHand {
    /// Its storage was made.
    opened: Cell<bool>,
    /// The jobs it was running.
    works: RefCell<Vec<WorkId>>,
}

/// What a fiber waiting for work gets.
enum Next<J> {
    Jobs(Vec<(WorkId, J)>),
    /// Nothing came for [`ensemble_core::STORAGE_IDLE_AFTER`].
    Idle,
    /// The pool is shutting down and the queue is empty.
    Closed,
}

impl<J: 'static, R: 'static, D: Fn(WorkId, Result<R, JobFailed>) + Clone + 'static> Worker<J, R, D> {
    /// Runs the worker's fiber until the queue closes. A storage that panics fails the jobs it
    /// had, as on a thread, and a fresh fiber with a fresh storage takes the next job (the old
    /// one's stack is gone). One that panics while it is made fails every job instead, as
    /// [`crate::workers`] does, rather than being made again and again.
    async fn drive(self) {
        loop {
            let in_hand = Rc::new(InHand::default());
            let fiber = {
                let (in_hand, make_storage, queue, done) = (in_hand.clone(), self.make_storage.clone(), self.queue.clone(), self.done.clone());
                let (index, batch) = (self.index, self.batch);
                Fiber::new(move || serve(index, &*make_storage, &queue, batch, &done, &in_hand))
            };
            let panicked = match fiber {
                Ok(fiber) => match fiber.run().await {
                    Ok(()) => return,
                    Err(p) => panic_text(&*p),
                },
                Err(e) => format!("no stack for its fiber: {e}"),
            };
            let works = in_hand.works.take();
            let which = match works.len() {
                0 => "with no job".to_string(),
                1 => format!("job {:?}", works[0]),
                _ => format!("jobs {works:?}"),
            };
            let label = &self.label;
            eprintln!("[ensemble-net] storage worker {label} (on the loop): {which} panicked: {panicked}");
            for work in works {
                (self.done)(work, Err(JobFailed(format!("storage worker {label}: {which} panicked: {panicked}"))));
            }
            if !in_hand.opened.get() {
                let why = format!("storage worker {label} has no storage: opening it panicked");
                loop {
                    match next_jobs(&self.queue, usize::MAX, false).await {
                        Next::Jobs(jobs) => jobs.into_iter().for_each(|(work, _)| (self.done)(work, Err(JobFailed(why.clone())))),
                        Next::Idle => {}
                        Next::Closed => return,
                    }
                }
            }
        }
    }
}

/// The fiber's code: makes the storage, then runs the queue's jobs, up to `batch` at a time
/// ([`Storage::run_batch`] for more than one), as a worker thread does.
fn serve<J: 'static, R>(
    index: usize,
    make_storage: &dyn Fn(usize) -> Box<dyn Storage<Job = J, Result = R>>,
    queue: &Queue<J>,
    batch: usize,
    done: &dyn Fn(WorkId, Result<R, JobFailed>),
    in_hand: &InHand,
) {
    let mut storage = make_storage(index);
    in_hand.opened.set(true);
    // Tell the storage once that it is idle, then wait without a bound, as a thread does.
    let mut told_idle = false;
    loop {
        let next = ensemble_fiber::wait(next_jobs(queue, batch, !told_idle)).unwrap_or_else(|_| unreachable!("serve runs on a fiber"));
        let jobs = match next {
            Next::Closed => return,
            Next::Idle => {
                told_idle = true;
                storage.idle();
                continue;
            }
            Next::Jobs(jobs) => jobs,
        };
        told_idle = false;
        let (works, jobs): (Vec<WorkId>, Vec<J>) = jobs.into_iter().unzip();
        *in_hand.works.borrow_mut() = works.clone();
        let results = if jobs.len() == 1 { vec![storage.run(&jobs[0])] } else { storage.run_batch(&jobs) };
        in_hand.works.borrow_mut().clear();
        if results.len() == works.len() {
            for (work, result) in works.into_iter().zip(results) {
                done(work, Ok(result));
            }
        } else {
            let why = format!("storage worker {index} (on the loop): a batch of {} job(s) {works:?} returned {} result(s)", works.len(), results.len());
            for work in works {
                done(work, Err(JobFailed(why.clone())));
            }
        }
    }
}

/// The next job, and whatever has queued behind it up to `batch` in all; with `idle_bound`,
/// [`Next::Idle`] if nothing comes (the fibers waiting for the queue included) for
/// [`ensemble_core::STORAGE_IDLE_AFTER`].
async fn next_jobs<J>(queue: &Queue<J>, batch: usize, idle_bound: bool) -> Next<J> {
    let take = async {
        let mut rx = queue.lock().await;
        let Some(first) = rx.recv().await else { return Next::Closed };
        let mut jobs = vec![first];
        while jobs.len() < batch {
            match rx.try_recv() {
                Ok(job) => jobs.push(job),
                Err(_) => break,
            }
        }
        Next::Jobs(jobs)
    };
    if !idle_bound {
        return take.await;
    }
    tokio::time::timeout(ensemble_core::STORAGE_IDLE_AFTER, take).await.unwrap_or(Next::Idle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A storage that waits (on its fiber) before answering, and says which worker ran a job.
    struct Waiting {
        worker: usize,
        log: Rc<RefCell<Vec<String>>>,
    }

    impl Storage for Waiting {
        type Job = u32;
        type Result = usize;
        fn run(&mut self, job: &u32) -> usize {
            if *job == 13 {
                panic!("unlucky job");
            }
            // A real storage waits for its server here; other fibers run meanwhile.
            ensemble_fiber::wait(tokio::time::sleep(std::time::Duration::from_millis(1))).unwrap_or_else(|_| panic!("not on a fiber"));
            self.log.borrow_mut().push(format!("{} ran {job}", self.worker));
            self.worker
        }
        fn run_batch(&mut self, jobs: &[u32]) -> Vec<usize> {
            self.log.borrow_mut().push(format!("{} batch {jobs:?}", self.worker));
            jobs.iter().map(|_| self.worker).collect()
        }
        fn idle(&mut self) {
            self.log.borrow_mut().push(format!("{} idle", self.worker));
        }
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
    }

    thread_local! {
        static LOG: Rc<RefCell<Vec<String>>> = Rc::default();
    }

    fn factory() -> StorageFactory<u32, usize> {
        Arc::new(|worker| Box::new(Waiting { worker, log: LOG.with(Rc::clone) }))
    }

    #[test]
    fn every_job_completes_once_on_the_loop_even_when_its_storage_panics() {
        let local = LocalSet::new();
        let got = Rc::new(RefCell::new(Vec::new()));
        let sink = got.clone();
        let pool = FiberPool::start(&local, "test", 3, factory(), None, move |w: WorkId, r| sink.borrow_mut().push((w, r)));
        for i in 0..40u32 {
            assert!(pool.submit(WorkId(i as u64), i));
        }
        local.block_on(&runtime(), pool.shutdown());
        let mut got = got.take();
        got.sort_by_key(|(w, _)| *w);
        assert_eq!(got.iter().map(|(w, _)| w.0).collect::<Vec<_>>(), (0..40).collect::<Vec<_>>());
        assert!(matches!(&got[13].1, Err(JobFailed(m)) if m.contains("job WorkId(13) panicked: unlucky job")), "{:?}", got[13]);
        assert_eq!(got.iter().filter(|(_, r)| matches!(r, Ok(w) if *w < 3)).count(), 39);
        let log = LOG.with(|l| l.borrow().clone());
        let workers: std::collections::BTreeSet<_> = log.iter().filter_map(|l| l.split(' ').next()).collect();
        assert_eq!(workers.len(), 3, "the three fibers shared the jobs: {log:?}");
    }

    #[test]
    fn a_serial_fiber_takes_what_queued_behind_its_first_job_as_one_batch() {
        let local = LocalSet::new();
        let got = Rc::new(RefCell::new(Vec::new()));
        let sink = got.clone();
        let odd: SerialLane<u32> = Arc::new(|j: &u32| j % 2 == 1);
        let pool = FiberPool::start(&local, "test", 1, factory(), Some(odd), move |w: WorkId, r| sink.borrow_mut().push((w, r)));
        // Queued before any fiber runs: the lane's first take finds them all.
        for i in [1u32, 3, 5, 2, 7] {
            assert!(pool.submit(WorkId(i as u64), i));
        }
        local.block_on(&runtime(), pool.shutdown());
        let log = LOG.with(|l| l.borrow().clone());
        assert!(log.contains(&"1 batch [1, 3, 5, 7]".to_string()), "{log:?}");
        assert!(log.contains(&"0 ran 2".to_string()), "{log:?}");
        let odd_done: Vec<u64> = got.borrow().iter().map(|(w, _)| w.0).filter(|w| w % 2 == 1).collect();
        assert_eq!(odd_done, vec![1, 3, 5, 7], "the lane's jobs complete in the order submitted");
    }

    #[test]
    fn a_fiber_without_jobs_for_a_while_tells_its_storage_once() {
        let local = LocalSet::new();
        let pool = FiberPool::start(&local, "test", 1, factory(), None, |_: WorkId, _| {});
        // Virtual time: the runtime skips ahead whenever every task waits on a timer.
        let paused = tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap();
        local.block_on(&paused, async {
            assert!(pool.submit(WorkId(1), 1));
            tokio::time::sleep(ensemble_core::STORAGE_IDLE_AFTER * 5).await;
            pool.shutdown().await;
        });
        let log = LOG.with(|l| l.borrow().clone());
        assert_eq!(log, vec!["0 ran 1".to_string(), "0 idle".to_string()]);
    }

    #[test]
    fn a_storage_that_cannot_open_fails_its_jobs_instead_of_hanging() {
        let local = LocalSet::new();
        let got = Rc::new(RefCell::new(Vec::new()));
        let sink = got.clone();
        let make: StorageFactory<u32, usize> = Arc::new(|_| panic!("no database"));
        let pool = FiberPool::start(&local, "test", 1, make, None, move |w: WorkId, r| sink.borrow_mut().push((w, r)));
        assert!(pool.submit(WorkId(1), 1));
        assert!(pool.submit(WorkId(2), 2));
        local.block_on(&runtime(), pool.shutdown());
        let got = got.take();
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(got.iter().all(|(_, r)| matches!(r, Err(JobFailed(m)) if m.contains("opening it panicked"))), "{got:?}");
    }
}
