//! An ordered parallel map on the CPU worker pool: jobs run on every core, results come back in
//! submission order, and a bound on jobs in flight keeps memory flat however long the input is.

use std::collections::BTreeMap;
use std::sync::mpsc::{Receiver, Sender, channel};

/// Runs jobs on the CPU workers (`workers`) and hands their results back in the order they were submitted.
pub struct OrderedPool<T: Send + 'static> {
    tx: Sender<(u64, T)>,
    rx: Receiver<(u64, T)>,
    next_submit: u64,
    next_out: u64,
    done: BTreeMap<u64, T>,
    max_in_flight: usize,
}

impl<T: Send + 'static> OrderedPool<T> {
    /// A pool that holds at most `max_in_flight` unfinished or undelivered jobs.
    pub fn new(max_in_flight: usize) -> Self {
        let (tx, rx) = channel();
        OrderedPool { tx, rx, next_submit: 0, next_out: 0, done: BTreeMap::new(), max_in_flight: max_in_flight.max(1) }
    }

    /// A bound suited to this machine: two jobs per worker thread.
    pub fn for_this_machine() -> Self {
        Self::new(2 * crate::workers::threads() + 1)
    }

    /// Whether submitting now would exceed the bound; call `wait_next` first.
    pub fn is_full(&self) -> bool {
        (self.next_submit - self.next_out) as usize >= self.max_in_flight
    }

    /// Jobs submitted and not yet handed back.
    pub fn in_flight(&self) -> usize {
        (self.next_submit - self.next_out) as usize
    }

    /// Starts a job. Jobs must not panic: a panic in a job aborts the process.
    pub fn submit<F: FnOnce() -> T + Send + 'static>(&mut self, job: F) {
        let seq = self.next_submit;
        self.next_submit += 1;
        let tx = self.tx.clone();
        crate::workers::spawn(move || {
            // The receiver outlives every job unless the pool was dropped early; then nobody wants it.
            let _ = tx.send((seq, job()));
        });
    }

    /// Starts a job that completes by calling the callback it is given, on any thread (for work
    /// handed to another scheduler, such as the GPU dispatcher).
    pub fn submit_async(&mut self, start: impl FnOnce(Box<dyn FnOnce(T) + Send>)) {
        let seq = self.next_submit;
        self.next_submit += 1;
        let tx = self.tx.clone();
        start(Box::new(move |v| {
            let _ = tx.send((seq, v));
        }));
    }

    /// The next result in order if it is ready, without waiting.
    pub fn ready(&mut self) -> Option<T> {
        while let Ok((seq, v)) = self.rx.try_recv() {
            self.done.insert(seq, v);
        }
        self.pop()
    }

    /// The next result in order, waiting for it; `None` when nothing is in flight.
    pub fn wait_next(&mut self) -> Option<T> {
        while self.next_out < self.next_submit {
            if let Some(v) = self.pop() {
                return Some(v);
            }
            let (seq, v) = self.rx.recv().expect("a sender lives in every unfinished job");
            self.done.insert(seq, v);
        }
        None
    }

    fn pop(&mut self) -> Option<T> {
        let v = self.done.remove(&self.next_out)?;
        self.next_out += 1;
        Some(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_come_back_in_submission_order() {
        let mut p = OrderedPool::new(4);
        let mut out = Vec::new();
        for i in 0..50u64 {
            while p.is_full() {
                out.extend(p.wait_next());
            }
            p.submit(move || {
                std::thread::sleep(std::time::Duration::from_micros((50 - i) * 20));
                i
            });
            while let Some(v) = p.ready() {
                out.push(v);
            }
        }
        while let Some(v) = p.wait_next() {
            out.push(v);
        }
        assert_eq!(out, (0..50).collect::<Vec<_>>());
    }
}
