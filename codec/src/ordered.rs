//! Putting results back in sequence: values promised by number, fulfilled in any order on any
//! thread, and taken by one consumer in number order — by a blocking wait (`pack`, `unpack`) or an
//! awaited one (a mount's uploads). The one ordering step of every encode pipeline
//! ([`crate::pipeline::EncodeStream`]) and of [`crate::pool::OrderedPool`].

use std::collections::VecDeque;
use std::future::poll_fn;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::task::{Poll, Waker};

/// The value numbered here never came: its promise was dropped unfulfilled (a worker that failed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lost(pub u64);

impl std::fmt::Display for Lost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "item {} was lost: its worker stopped without a result", self.0)
    }
}

impl std::error::Error for Lost {}

/// What one consumer takes next: the value numbered [`Ordered::next_number`], or why not.
pub type Next<T> = Option<Result<T, Lost>>;

/// Values numbered from 0, taken back in number order.
pub struct Ordered<T> {
    inner: Arc<Inner<T>>,
}

struct Inner<T> {
    state: Mutex<State<T>>,
    /// Signalled when the value the consumer waits for is settled, or on `close`.
    settled: Condvar,
}

struct State<T> {
    /// The number of `slots[0]`: the next value the consumer takes.
    next: u64,
    slots: VecDeque<Slot<T>>,
    /// The consumer's task, while it awaits `slots[0]`.
    waker: Option<Waker>,
    /// No more promises: a wait for a number never promised ends.
    closed: bool,
}

enum Slot<T> {
    /// Not promised (yet).
    Open,
    Promised,
    Done(T),
    Lost,
}

/// The promise of value number `n`: fulfilled once, or dropped, which settles it as [`Lost`].
#[must_use = "dropping a promise settles its value as lost"]
pub struct Promise<T> {
    inner: Arc<Inner<T>>,
    n: u64,
    kept: bool,
}

impl<T> Default for Ordered<T> {
    fn default() -> Self {
        Ordered {
            inner: Arc::new(Inner {
                state: Mutex::new(State { next: 0, slots: VecDeque::new(), waker: None, closed: false }),
                settled: Condvar::new(),
            }),
        }
    }
}

impl<T> std::fmt::Debug for Ordered<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.inner.lock();
        write!(f, "Ordered(next {}, {} in flight)", s.next, s.slots.len())
    }
}

impl<T> Inner<T> {
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        // No code panics while holding the lock; a poisoned one still holds consistent state.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn settle(&self, n: u64, slot: Slot<T>) {
        let mut s = self.lock();
        let Some(at) = n.checked_sub(s.next) else { return };
        if let Some(place) = s.slots.get_mut(at as usize) {
            *place = slot;
        }
        if at == 0 {
            let waker = s.waker.take();
            drop(s);
            self.settled.notify_one();
            if let Some(w) = waker {
                w.wake();
            }
        }
    }
}

impl<T> State<T> {
    /// Takes the front value if it is settled; `Some(None)` when it can never come (closed and
    /// not promised), `None` while it is still to come.
    fn take(&mut self) -> Option<Next<T>> {
        match self.slots.front() {
            Some(Slot::Done(_)) => {
                let Some(Slot::Done(v)) = self.slots.pop_front() else { unreachable!("matched above") };
                self.next += 1;
                Some(Some(Ok(v)))
            }
            Some(Slot::Lost) => {
                self.slots.pop_front();
                self.next += 1;
                Some(Some(Err(Lost(self.next - 1))))
            }
            Some(Slot::Open) | None if self.closed => Some(None),
            _ => None,
        }
    }
}

impl<T> Ordered<T> {
    /// Nothing promised yet; the first value taken is number 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// Promises value number `n` (not taken yet, not promised before). Any thread may promise.
    pub fn promise(&self, n: u64) -> Promise<T> {
        let mut s = self.inner.lock();
        let at = n.checked_sub(s.next).expect("a number not yet taken") as usize;
        if s.slots.len() <= at {
            s.slots.resize_with(at + 1, || Slot::Open);
        }
        debug_assert!(matches!(s.slots[at], Slot::Open), "value {n} promised twice");
        s.slots[at] = Slot::Promised;
        Promise { inner: self.inner.clone(), n, kept: false }
    }

    /// No more promises: waits for a number not promised by now end with `None`.
    pub fn close(&self) {
        let waker = {
            let mut s = self.inner.lock();
            s.closed = true;
            s.waker.take()
        };
        self.inner.settled.notify_all();
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// The number of the value taken next.
    pub fn next_number(&self) -> u64 {
        self.inner.lock().next
    }

    /// Values from the next one taken to the last one promised: those in flight, and any gaps
    /// between them not promised yet.
    pub fn in_flight(&self) -> usize {
        self.inner.lock().slots.len()
    }

    /// The next value if it is settled, without waiting.
    pub fn try_next(&self) -> Next<T> {
        self.inner.lock().take().flatten()
    }

    /// The next value, waiting on this thread until it is settled; `None` once closed and it was
    /// never promised. (Not closed, a wait for a number nobody promises never ends.)
    pub fn wait_next(&self) -> Next<T> {
        let mut s = self.inner.lock();
        loop {
            if let Some(taken) = s.take() {
                return taken;
            }
            s = self.inner.settled.wait(s).unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// [`Self::wait_next`], awaited instead of blocking the thread. One consumer at a time.
    pub async fn next(&self) -> Next<T> {
        poll_fn(|cx| {
            let mut s = self.inner.lock();
            match s.take() {
                Some(taken) => Poll::Ready(taken),
                None => {
                    s.waker = Some(cx.waker().clone());
                    Poll::Pending
                }
            }
        })
        .await
    }

    /// Gives back the value just taken (the consumer could not use it yet): it is taken next again.
    pub fn put_back(&self, v: T) {
        let mut s = self.inner.lock();
        s.next = s.next.checked_sub(1).expect("a value was taken");
        s.slots.push_front(Slot::Done(v));
    }
}

impl<T> Promise<T> {
    /// The number promised.
    pub fn number(&self) -> u64 {
        self.n
    }

    /// Settles the value: the consumer can take it once every value before it is taken.
    pub fn fulfil(mut self, v: T) {
        self.kept = true;
        self.inner.settle(self.n, Slot::Done(v));
    }
}

impl<T> Drop for Promise<T> {
    fn drop(&mut self) {
        if !self.kept {
            self.inner.settle(self.n, Slot::Lost);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn values_fulfilled_out_of_order_are_taken_in_order() {
        let o = Ordered::new();
        let promises: Vec<_> = (0..20).map(|n| o.promise(n)).collect();
        std::thread::scope(|s| {
            for p in promises.into_iter().rev() {
                s.spawn(move || {
                    std::thread::sleep(Duration::from_micros(100 * (20 - p.number())));
                    let n = p.number();
                    p.fulfil(n * 10);
                });
            }
            let got: Vec<u64> = (0..20).map(|_| o.wait_next().unwrap().unwrap()).collect();
            assert_eq!(got, (0..20).map(|n| n * 10).collect::<Vec<_>>());
        });
        assert_eq!(o.in_flight(), 0);
        assert_eq!(o.try_next(), None, "nothing promised, not closed: nothing to take yet");
    }

    #[test]
    fn a_dropped_promise_is_taken_as_lost_in_its_turn() {
        let o = Ordered::new();
        let (p0, p1, p2) = (o.promise(0), o.promise(1), o.promise(2));
        drop(p1);
        p2.fulfil("two");
        assert_eq!(o.try_next(), None, "number 0 is still to come");
        p0.fulfil("zero");
        assert_eq!(o.try_next(), Some(Ok("zero")));
        assert_eq!(o.try_next(), Some(Err(Lost(1))));
        assert_eq!(o.try_next(), Some(Ok("two")));
    }

    #[test]
    fn closing_ends_a_wait_for_a_number_never_promised_but_not_one_promised() {
        let o = Ordered::new();
        let (p0, p2) = (o.promise(0), o.promise(2));
        o.close();
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(20));
                p0.fulfil(0);
            });
            assert_eq!(o.wait_next(), Some(Ok(0)), "promised before the close: waited for");
        });
        assert_eq!(o.wait_next(), None, "number 1 was never promised");
        p2.fulfil(2);
        assert_eq!(o.wait_next(), None, "still: number 1 comes first");
    }

    #[test]
    fn a_value_put_back_is_taken_again_first() {
        let o = Ordered::new();
        o.promise(0).fulfil('a');
        o.promise(1).fulfil('b');
        let a = o.try_next().unwrap().unwrap();
        o.put_back(a);
        assert_eq!((o.next_number(), o.in_flight()), (0, 2));
        assert_eq!(o.try_next(), Some(Ok('a')));
        assert_eq!(o.try_next(), Some(Ok('b')));
    }

    #[test]
    fn an_awaited_value_wakes_its_task_when_fulfilled_on_another_thread() {
        let o = Arc::new(Ordered::new());
        let p = o.promise(0);
        let waiter = {
            let o = o.clone();
            std::thread::spawn(move || block_on(o.next()))
        };
        std::thread::sleep(Duration::from_millis(20));
        p.fulfil(7);
        assert_eq!(waiter.join().unwrap(), Some(Ok(7)));
    }

    /// Runs a future to completion on this thread, parking between polls.
    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        struct Unpark(std::thread::Thread);
        impl std::task::Wake for Unpark {
            fn wake(self: Arc<Self>) {
                self.0.unpark();
            }
        }
        let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
        let mut cx = std::task::Context::from_waker(&waker);
        let mut f = std::pin::pin!(f);
        loop {
            if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
                return v;
            }
            std::thread::park();
        }
    }
}
