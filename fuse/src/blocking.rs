//! Where blocking file work runs: inline on a kernel request's own thread, which waits for the
//! answer anyway, and on tokio's blocking pool everywhere else.
//!
//! A request thread of the adapter drives its operation with `block_on`; handing a `stat` or a
//! 1 KiB read to the blocking pool from there costs two thread wake-ups, more than the system call
//! itself on a local-directory bucket. Work that is large (a frame of a big read, which the
//! request may fetch beside others) still goes to the pool, so those run side by side.

use std::cell::Cell;

use tokio::task::JoinError;

thread_local! {
    static REQUEST_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// Bytes of file work up to which a request thread does it itself (a small object's whole GET).
pub const INLINE_BYTES: u64 = 256 * 1024;

/// Runs `f` with the current thread marked as a request thread: blocking work of at most
/// [`INLINE_BYTES`] that `f`'s futures start on this thread runs inline.
pub fn on_request_thread<R>(f: impl FnOnce() -> R) -> R {
    struct Unmark(bool);
    impl Drop for Unmark {
        fn drop(&mut self) {
            REQUEST_THREAD.with(|c| c.set(self.0));
        }
    }
    let _unmark = Unmark(REQUEST_THREAD.with(|c| c.replace(true)));
    f()
}

/// Whether the current thread is a request thread (inside [`on_request_thread`]).
pub fn is_request_thread() -> bool {
    REQUEST_THREAD.with(Cell::get)
}

/// Runs blocking `work` that touches about `bytes` bytes: inline on a request thread when small,
/// inline without a tokio runtime, else on the runtime's blocking pool.
pub async fn run<T: Send + 'static>(bytes: u64, work: impl FnOnce() -> T + Send + 'static) -> Result<T, JoinError> {
    if bytes <= INLINE_BYTES && is_request_thread() {
        return Ok(work());
    }
    match tokio::runtime::Handle::try_current() {
        Ok(rt) => rt.spawn_blocking(work).await,
        Err(_) => Ok(work()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thread_id() -> std::thread::ThreadId {
        std::thread::current().id()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn small_work_runs_on_a_request_thread_and_large_work_on_the_pool() {
        let rt = tokio::runtime::Handle::current();
        let (here, small, large, after) = std::thread::spawn(move || {
            let here = thread_id();
            let (small, large) = on_request_thread(|| {
                rt.block_on(async {
                    let small = run(INLINE_BYTES, thread_id).await.unwrap();
                    let large = run(INLINE_BYTES + 1, thread_id).await.unwrap();
                    (small, large)
                })
            });
            let after = rt.block_on(run(0, thread_id)).unwrap();
            (here, small, large, after)
        })
        .join()
        .unwrap();
        assert_eq!(small, here, "small work on the request thread runs inline");
        assert_ne!(large, here, "large work goes to the pool");
        assert_ne!(after, here, "the mark ends with on_request_thread");
        assert!(!is_request_thread());
    }
}
