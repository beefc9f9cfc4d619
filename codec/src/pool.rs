//! An ordered parallel map on the CPU worker pool: jobs run on every core, results come back in
//! submission order, and a bound on jobs in flight keeps memory flat however long the input is.

use crate::ordered::{Next, Ordered};

/// Runs jobs on the CPU workers (`workers`) and hands their results back in the order they were submitted.
pub struct OrderedPool<T: Send + 'static> {
    done: Ordered<T>,
    next_submit: u64,
    max_in_flight: usize,
}

impl<T: Send + 'static> OrderedPool<T> {
    /// A pool that holds at most `max_in_flight` unfinished or undelivered jobs.
    pub fn new(max_in_flight: usize) -> Self {
        OrderedPool { done: Ordered::new(), next_submit: 0, max_in_flight: max_in_flight.max(1) }
    }

    /// A bound suited to this machine: two jobs per worker thread.
    pub fn for_this_machine() -> Self {
        Self::new(2 * crate::workers::threads() + 1)
    }

    /// Whether submitting now would exceed the bound; call `wait_next` first.
    pub fn is_full(&self) -> bool {
        self.in_flight() >= self.max_in_flight
    }

    /// Jobs submitted and not yet handed back.
    pub fn in_flight(&self) -> usize {
        self.done.in_flight()
    }

    /// Starts a job. A job that panics on a worker thread is handed back as
    /// [`crate::ordered::Lost`] in its turn (where no worker thread could start, jobs run on the
    /// caller's thread, and a panic unwinds it).
    pub fn submit<F: FnOnce() -> T + Send + 'static>(&mut self, job: F) {
        let promise = self.done.promise(self.next_submit);
        self.next_submit += 1;
        crate::workers::spawn(move || promise.fulfil(job()));
    }

    /// The next result in order if it is ready, without waiting.
    pub fn ready(&mut self) -> Next<T> {
        self.done.try_next()
    }

    /// The next result in order, waiting for it; `None` when nothing is in flight.
    pub fn wait_next(&mut self) -> Next<T> {
        if self.in_flight() == 0 {
            return None;
        }
        self.done.wait_next()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ordered::Lost;

    #[test]
    fn results_come_back_in_submission_order() {
        let mut p = OrderedPool::new(4);
        let mut out = Vec::new();
        for i in 0..50u64 {
            while p.is_full() {
                out.push(p.wait_next().unwrap().unwrap());
            }
            p.submit(move || {
                std::thread::sleep(std::time::Duration::from_micros((50 - i) * 20));
                i
            });
            while let Some(v) = p.ready() {
                out.push(v.unwrap());
            }
        }
        while let Some(v) = p.wait_next() {
            out.push(v.unwrap());
        }
        assert_eq!(out, (0..50).collect::<Vec<_>>());
    }

    #[test]
    fn a_job_that_panics_is_handed_back_as_lost_in_its_turn() {
        let mut p = OrderedPool::new(4);
        p.submit(|| 0);
        p.submit(|| panic!("a job that fails"));
        p.submit(|| 2);
        assert_eq!(p.wait_next(), Some(Ok(0)));
        assert_eq!(p.wait_next(), Some(Err(Lost(1))));
        assert_eq!(p.wait_next(), Some(Ok(2)));
        assert_eq!(p.wait_next(), None);
    }
}
