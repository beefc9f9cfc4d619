//! Raw frame buffers: a frame's bytes from where they are cut or read until they are encoded (and,
//! for a frame stored as it is, until its payload is written). Plain heap memory, or a buffer lent
//! by a pool that takes it back when the frame is done with it — the GPU's pool is page-locked
//! memory, so its launches copy such frames to the device directly instead of staging them.

use std::sync::Arc;

use bytes::Bytes;

/// A pool of frame buffers, each lent out whole and given back whole: never freed, grown nor
/// moved while lent (the GPU's are page-locked in place).
pub trait Slots: Send + Sync + 'static {
    /// A buffer of at least `capacity` bytes (empty), if one is free or can be added.
    fn lend(&self, capacity: usize) -> Option<Vec<u8>>;

    /// Takes back a buffer [`Self::lend`] gave out.
    fn give_back(&self, buf: Vec<u8>);
}

/// Where new frames get their buffers: a pool while it has them, the heap otherwise.
#[derive(Clone, Default)]
pub struct Buffers(Option<Arc<dyn Slots>>);

impl std::fmt::Debug for Buffers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "Buffers(pool)" } else { "Buffers(heap)" })
    }
}

impl Buffers {
    /// Buffers lent by `pool`.
    pub fn from_pool(pool: Arc<dyn Slots>) -> Self {
        Buffers(Some(pool))
    }

    /// Whether a pool lends the buffers (else they come from the heap).
    pub fn is_pool(&self) -> bool {
        self.0.is_some()
    }

    /// An empty buffer with room for `capacity` bytes.
    pub fn get(&self, capacity: usize) -> FrameBuf {
        if let Some(pool) = &self.0
            && let Some(mut buf) = pool.lend(capacity)
        {
            buf.clear();
            debug_assert!(buf.capacity() >= capacity, "a pool lends buffers of the capacity asked for");
            return FrameBuf { buf, home: Some(pool.clone()) };
        }
        FrameBuf::from(Vec::with_capacity(capacity))
    }
}

/// One frame's raw bytes, in a buffer of fixed capacity when lent by a pool.
pub struct FrameBuf {
    buf: Vec<u8>,
    /// The pool it goes back to when dropped; `None`: heap memory, freed as usual.
    home: Option<Arc<dyn Slots>>,
}

impl From<Vec<u8>> for FrameBuf {
    fn from(buf: Vec<u8>) -> Self {
        FrameBuf { buf, home: None }
    }
}

impl std::fmt::Debug for FrameBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FrameBuf({} bytes{})", self.buf.len(), if self.home.is_some() { ", lent" } else { "" })
    }
}

impl std::ops::Deref for FrameBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf
    }
}

impl std::ops::DerefMut for FrameBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.buf
    }
}

impl AsRef<[u8]> for FrameBuf {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl FrameBuf {
    /// Whether a pool lent it.
    pub fn is_lent(&self) -> bool {
        self.home.is_some()
    }

    /// Bytes it can hold without moving (a lent buffer never holds more).
    pub fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// Bytes it can still take without moving.
    pub fn room(&self) -> usize {
        self.buf.capacity() - self.buf.len()
    }

    /// Appends `data`. A lent buffer must have the room (callers ask for the capacity they fill).
    pub fn extend_from_slice(&mut self, data: &[u8]) {
        self.check_fits(data.len());
        self.buf.extend_from_slice(data);
    }

    /// Sets the length to `len`, zeroing bytes beyond the current length; within the capacity
    /// for a lent buffer.
    pub fn resize_zeroed(&mut self, len: usize) {
        self.check_fits(len.saturating_sub(self.buf.len()));
        self.buf.resize(len, 0);
    }

    fn check_fits(&self, more: usize) {
        // A lent buffer that grew would be moved and the pool's memory freed behind its back.
        assert!(self.home.is_none() || more <= self.room(), "a lent frame buffer cannot grow");
    }

    /// The bytes as a plain vector: a lent buffer's are copied out (its buffer goes back).
    pub fn into_vec(mut self) -> Vec<u8> {
        match self.home {
            None => std::mem::take(&mut self.buf),
            Some(_) => self.buf.clone(),
        }
    }

    /// The bytes as shared bytes, without a copy: a lent buffer goes back to its pool when the
    /// last clone of them is dropped.
    pub fn into_bytes(mut self) -> Bytes {
        match self.home {
            None => Bytes::from(std::mem::take(&mut self.buf)),
            Some(_) => Bytes::from_owner(self),
        }
    }
}

impl Drop for FrameBuf {
    fn drop(&mut self) {
        if let Some(pool) = self.home.take() {
            pool.give_back(std::mem::take(&mut self.buf));
        }
    }
}

/// A pool of plain heap buffers for tests: at most `slots` at once, counted.
#[doc(hidden)]
pub mod testing {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Lends up to `slots` buffers of `capacity` bytes; counts what is out.
    pub struct CountingPool {
        free: Mutex<Vec<Vec<u8>>>,
        capacity: usize,
        /// Buffers lent and not given back.
        pub out: AtomicUsize,
        /// Buffers lent in all.
        pub lent: AtomicUsize,
    }

    impl CountingPool {
        /// `slots` buffers of `capacity` bytes.
        pub fn new(slots: usize, capacity: usize) -> Self {
            let free = (0..slots).map(|_| Vec::with_capacity(capacity)).collect();
            CountingPool { free: Mutex::new(free), capacity, out: AtomicUsize::new(0), lent: AtomicUsize::new(0) }
        }
    }

    impl super::Slots for CountingPool {
        fn lend(&self, capacity: usize) -> Option<Vec<u8>> {
            if capacity > self.capacity {
                return None;
            }
            let buf = self.free.lock().unwrap().pop()?;
            self.out.fetch_add(1, Ordering::SeqCst);
            self.lent.fetch_add(1, Ordering::SeqCst);
            Some(buf)
        }

        fn give_back(&self, buf: Vec<u8>) {
            assert_eq!(buf.capacity(), self.capacity, "given back as lent");
            self.out.fetch_sub(1, Ordering::SeqCst);
            self.free.lock().unwrap().push(buf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::CountingPool;
    use super::*;
    use std::sync::atomic::Ordering::SeqCst;

    #[test]
    fn a_lent_buffer_goes_back_when_dropped_and_when_its_bytes_are() {
        let pool = Arc::new(CountingPool::new(2, 64));
        let buffers = Buffers::from_pool(pool.clone());
        let mut a = buffers.get(64);
        a.extend_from_slice(b"frame");
        assert!(a.is_lent());
        let bytes = a.into_bytes();
        let b = buffers.get(64);
        assert!(b.is_lent() && b.is_empty(), "lent again, cleared");
        assert!(!buffers.get(64).is_lent(), "two out: the heap's");
        assert!(!buffers.get(65).is_lent(), "larger than the pool's");
        drop(b);
        assert_eq!(pool.out.load(SeqCst), 1, "its bytes still hold the first");
        let copy = bytes.clone();
        drop(bytes);
        assert_eq!(&copy[..], b"frame");
        drop(copy);
        assert_eq!(pool.out.load(SeqCst), 0);
    }

    #[test]
    fn a_lent_buffer_copied_out_goes_back_at_once() {
        let pool = Arc::new(CountingPool::new(1, 16));
        let mut a = Buffers::from_pool(pool.clone()).get(16);
        a.resize_zeroed(16);
        a[..3].copy_from_slice(b"abc");
        assert_eq!(&a.into_vec()[..4], b"abc\0");
        assert_eq!(pool.out.load(SeqCst), 0);
    }

    #[test]
    #[should_panic(expected = "cannot grow")]
    fn a_lent_buffer_refuses_to_grow() {
        let mut a = Buffers::from_pool(Arc::new(CountingPool::new(1, 8))).get(8);
        a.extend_from_slice(&[0; 9]);
    }

    #[test]
    fn heap_buffers_grow_and_move_freely() {
        let mut a = Buffers::default().get(4);
        a.extend_from_slice(&[1; 100]);
        assert_eq!(a.into_vec(), vec![1; 100]);
    }
}
