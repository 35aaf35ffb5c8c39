//! The storage worker pool: the real-runtime counterpart of the simulator's CPU cores.
//!
//! Each worker is a std thread that creates its own [`Storage`] inside the thread, because
//! database connections are not `Sync` (and sessions are not even `Send`): the storage never
//! leaves the thread that made it. Jobs arrive on one shared crossbeam channel, so an idle worker
//! takes the next job; completions go to a callback that the node wires to its event channel.

use crossbeam_channel::{Receiver, Sender};
use ensemble_core::{Storage, StorageJob, StorageResult, WorkId};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::thread::JoinHandle;

type Job = (WorkId, StorageJob);

pub struct WorkerPool {
    jobs: Option<Sender<Job>>,
    threads: Vec<JoinHandle<()>>,
}

impl WorkerPool {
    /// Starts `workers` threads (at least one). `make_storage(i)` runs on worker `i`'s own
    /// thread; `done` is called on that thread with every result.
    pub fn start<S, F, D>(workers: usize, make_storage: Arc<F>, done: D) -> std::io::Result<WorkerPool>
    where
        S: Storage + 'static,
        F: Fn(usize) -> S + Send + Sync + 'static,
        D: Fn(WorkId, StorageResult) + Send + Clone + 'static,
    {
        let (tx, rx) = crossbeam_channel::unbounded::<Job>();
        let mut pool = WorkerPool { jobs: Some(tx), threads: Vec::new() };
        for index in 0..workers.max(1) {
            let rx = rx.clone();
            let make_storage = make_storage.clone();
            let done = done.clone();
            let handle = std::thread::Builder::new()
                .name(format!("ensemble-storage-{index}"))
                .spawn(move || worker(index, &*make_storage, rx, done))?;
            pool.threads.push(handle);
        }
        Ok(pool)
    }

    /// Queues a job; false only if every worker has exited.
    pub fn submit(&self, work: WorkId, job: StorageJob) -> bool {
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

impl Drop for WorkerPool {
    fn drop(&mut self) {
        self.stop();
    }
}

fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic".into())
}

/// A panicking storage must not take the node down or leave its job unanswered (the node would
/// wait forever): both turn into `StorageResult::Failed`, which the protocol reports.
fn worker<S: Storage, F: Fn(usize) -> S, D: Fn(WorkId, StorageResult)>(index: usize, make_storage: &F, rx: Receiver<Job>, done: D) {
    let mut storage = match catch_unwind(AssertUnwindSafe(|| make_storage(index))) {
        Ok(s) => Some(s),
        Err(p) => {
            let why = panic_text(&*p);
            eprintln!("[ensemble-net] storage worker {index}: opening storage panicked: {why}");
            None
        }
    };
    while let Ok((work, job)) = rx.recv() {
        let result = match storage.as_mut() {
            None => StorageResult::Failed(format!("storage worker {index} has no storage: opening it panicked")),
            Some(s) => match catch_unwind(AssertUnwindSafe(|| s.run(&job))) {
                Ok(r) => r,
                Err(p) => {
                    let why = panic_text(&*p);
                    eprintln!("[ensemble-net] storage worker {index}: job {work:?} panicked: {why}");
                    StorageResult::Failed(format!("storage panicked: {why}"))
                }
            },
        };
        done(work, result);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ensemble_core::{ClientId, ExecRole, Request};
    use std::cell::RefCell;
    use std::rc::Rc;

    /// Deliberately neither Send nor Sync, like a database session.
    struct Counting {
        worker: usize,
        ran: Rc<RefCell<u64>>,
    }

    impl Storage for Counting {
        fn run(&mut self, job: &StorageJob) -> StorageResult {
            *self.ran.borrow_mut() += 1;
            match job {
                StorageJob::Execute { request, .. } if request.txn == "boom" => panic!("boom"),
                _ => StorageResult::Applied { globals_seen: self.worker as u64 },
            }
        }
    }

    fn job(txn: &str) -> StorageJob {
        StorageJob::Execute {
            request: Request { client: ClientId(1), seq: 0, txn: txn.into(), params: vec![] },
            role: ExecRole::Local,
        }
    }

    #[test]
    fn every_job_completes_once_even_when_storage_panics() {
        let (tx, rx) = crossbeam_channel::unbounded();
        let make = Arc::new(|worker| Counting { worker, ran: Rc::new(RefCell::new(0)) });
        let pool = WorkerPool::start(3, make, move |w, r| tx.send((w, r)).unwrap()).unwrap();
        for i in 0..50 {
            assert!(pool.submit(WorkId(i), job(if i == 7 { "boom" } else { "ok" })));
        }
        pool.shutdown();
        let mut got: Vec<_> = rx.try_iter().collect();
        got.sort_by_key(|(w, _)| *w);
        assert_eq!(got.iter().map(|(w, _)| w.0).collect::<Vec<_>>(), (0..50).collect::<Vec<_>>());
        assert!(matches!(&got[7].1, StorageResult::Failed(m) if m.contains("boom")));
        assert!(got.iter().filter(|(_, r)| matches!(r, StorageResult::Applied { .. })).count() == 49);
    }

    #[test]
    fn a_storage_that_cannot_open_fails_its_jobs_instead_of_hanging() {
        let (tx, rx) = crossbeam_channel::unbounded();
        let make = Arc::new(|_| -> Counting { panic!("no database") });
        let pool = WorkerPool::start(1, make, move |w, r| tx.send((w, r)).unwrap()).unwrap();
        pool.submit(WorkId(1), job("ok"));
        pool.shutdown();
        let got: Vec<_> = rx.try_iter().collect();
        assert!(matches!(&got[..], [(WorkId(1), StorageResult::Failed(_))]));
    }
}
