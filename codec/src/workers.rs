//! The CPU worker threads that encode and decode frames: one per core, named, each waiting on a
//! shared queue without spinning (an idle pool costs nothing between frames).
//!
//! Frames arrive one request at a time, a millisecond or so apart. A work-stealing pool (rayon's)
//! spins and yields before it sleeps, and on a mount that spinning cost a tenth of the CPU of a
//! writer; a frame is a whole job of its own, so a plain queue loses nothing.

use std::sync::OnceLock;

type Job = Box<dyn FnOnce() + Send + 'static>;

struct Pool {
    tx: crossbeam_channel::Sender<Job>,
    threads: usize,
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| {
        let threads = std::thread::available_parallelism().map_or(1, usize::from);
        let (tx, rx) = crossbeam_channel::unbounded::<Job>();
        for i in 0..threads {
            let rx = rx.clone();
            // A thread that cannot start leaves the others; with none at all, `spawn` runs jobs
            // on the caller's thread.
            let started = std::thread::Builder::new().name(format!("shrinkfs-cpu-{i}")).spawn(move || {
                while let Ok(job) = rx.recv() {
                    // A panicking job is a bug; it drops its result channel (the waiter sees the
                    // job stopped) and the thread stays to serve the next one.
                    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)).is_err() {
                        tracing::error!("a frame job panicked; its request fails");
                    }
                }
            });
            if let Err(e) = started {
                tracing::warn!(error = %e, "cannot start a CPU worker thread");
            }
        }
        Pool { tx, threads }
    })
}

/// Runs `job` on a worker thread.
pub fn spawn(job: impl FnOnce() + Send + 'static) {
    // (The receivers live in the worker threads, which never exit: sending fails only if none
    // could start, and then the job runs here.)
    if let Err(crossbeam_channel::SendError(job)) = pool().tx.send(Box::new(job)) {
        job();
    }
}

/// Worker threads: one per core.
pub fn threads() -> usize {
    pool().threads
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_run_on_named_workers_and_a_panic_does_not_stop_the_pool() {
        let (tx, rx) = std::sync::mpsc::channel();
        spawn(|| panic!("a job that fails"));
        for i in 0..4 * threads() {
            let tx = tx.clone();
            spawn(move || {
                let name = std::thread::current().name().unwrap_or_default().to_owned();
                tx.send((i, name)).unwrap();
            });
        }
        drop(tx);
        let mut got: Vec<_> = rx.iter().collect();
        got.sort();
        assert_eq!(got.len(), 4 * threads(), "every job after the panic ran");
        assert!(got.iter().all(|(_, n)| n.starts_with("shrinkfs-cpu-")), "{got:?}");
    }
}
