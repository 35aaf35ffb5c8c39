//! The storage worker pool: the real-runtime counterpart of the simulator's CPU cores.
//!
//! Each worker is a std thread that creates its own [`Storage`] inside the thread, because
//! database connections are not `Sync` (and sessions are not even `Send`): the storage never
//! leaves the thread that made it. Jobs arrive on one shared crossbeam channel, so an idle worker
//! takes the next job; completions go to a callback that the host wires to its input channel.
//! A host runs one pool per process that has storage.

use crossbeam_channel::{Receiver, Sender};
use ensemble_core::{Storage, WorkId};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Makes worker `i`'s storage, on worker `i`'s own thread.
pub type StorageFactory<J, R> = Arc<dyn Fn(usize) -> Box<dyn Storage<Job = J, Result = R>> + Send + Sync>;

/// Why a job has no result: its storage panicked, or never opened. The protocol's result type
/// cannot say so (the runtime cannot make one up), so the host reports it as its process's
/// failure instead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobFailed(pub String);

pub struct WorkerPool<J> {
    jobs: Option<Sender<(WorkId, J)>>,
    threads: Vec<JoinHandle<()>>,
}

impl<J: Send + 'static> WorkerPool<J> {
    /// Starts `workers` threads (at least one) named `{name}-{i}`. `make_storage(i)` runs on
    /// worker `i`'s own thread; `done` is called on that thread with every job's outcome.
    pub fn start<R, D>(name: &str, workers: usize, make_storage: StorageFactory<J, R>, done: D) -> std::io::Result<WorkerPool<J>>
    where
        R: Send + 'static,
        D: Fn(WorkId, Result<R, JobFailed>) + Send + Clone + 'static,
    {
        let (tx, rx) = crossbeam_channel::unbounded::<(WorkId, J)>();
        let mut pool = WorkerPool { jobs: Some(tx), threads: Vec::new() };
        for index in 0..workers.max(1) {
            let rx = rx.clone();
            let make_storage = make_storage.clone();
            let done = done.clone();
            let label = format!("{name}-{index}");
            let handle = std::thread::Builder::new().name(label.clone()).spawn(move || worker(&label, index, &*make_storage, rx, done))?;
            pool.threads.push(handle);
        }
        Ok(pool)
    }

}

impl<J> WorkerPool<J> {
    /// Queues a job; false only if every worker has exited.
    pub fn submit(&self, work: WorkId, job: J) -> bool {
        self.jobs.as_ref().is_some_and(|tx| tx.send((work, job)).is_ok())
    }

    /// Lets the workers finish the jobs already queued, then joins them.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        self.jobs = None;
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

/// A panicking storage must not take the host down or leave its job unanswered without a trace:
/// both turn into a [`JobFailed`] for the job.
fn worker<J, R, D>(label: &str, index: usize, make_storage: &dyn Fn(usize) -> Box<dyn Storage<Job = J, Result = R>>, rx: Receiver<(WorkId, J)>, done: D)
where
    D: Fn(WorkId, Result<R, JobFailed>),
{
    let mut storage = match catch_unwind(AssertUnwindSafe(|| make_storage(index))) {
        Ok(s) => Some(s),
        Err(p) => {
            let why = panic_text(&*p);
            eprintln!("[ensemble-net] storage worker {label}: opening storage panicked: {why}");
            None
        }
    };
    loop {
        let (work, job) = match rx.recv_timeout(ensemble_core::STORAGE_IDLE_AFTER) {
            Ok(next) => next,
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                if let Some(s) = storage.as_mut() {
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
        let result = match storage.as_mut() {
            None => Err(JobFailed(format!("storage worker {label} has no storage: opening it panicked"))),
            Some(s) => catch_unwind(AssertUnwindSafe(|| s.run(&job))).map_err(|p| {
                let why = panic_text(&*p);
                eprintln!("[ensemble-net] storage worker {label}: job {work:?} panicked: {why}");
                JobFailed(format!("storage worker {label}: job {work:?} panicked: {why}"))
            }),
        };
        done(work, result);
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
        let pool = WorkerPool::start("test", 3, make, move |w, r| tx.send((w, r)).unwrap()).unwrap();
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
        let pool = WorkerPool::start("test", 1, make, |_, _| {}).unwrap();
        pool.submit(WorkId(1), "ok");
        let wait = std::time::Duration::from_secs(30);
        assert_eq!(rx.recv_timeout(wait), Ok("ran"));
        assert_eq!(rx.recv_timeout(wait), Ok("idle"), "no job came after the first, so the storage is told it is idle");
        pool.shutdown();
    }

    #[test]
    fn a_storage_that_cannot_open_fails_its_jobs_instead_of_hanging() {
        let (tx, rx) = crossbeam_channel::unbounded();
        let make: Factory = Arc::new(|_| panic!("no database"));
        let pool = WorkerPool::start("test", 1, make, move |w, r| tx.send((w, r)).unwrap()).unwrap();
        pool.submit(WorkId(1), "ok");
        pool.shutdown();
        let got: Vec<_> = rx.try_iter().collect();
        assert!(matches!(&got[..], [(WorkId(1), Err(JobFailed(m)))] if m.contains("opening it panicked")), "{got:?}");
    }
}
