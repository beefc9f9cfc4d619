//! Page-locked frame buffers the GPU lends to whatever cuts or reads frames
//! ([`crate::framebuf::Slots`]): heap buffers registered with the driver at the GPU's start (as
//! many as the caller asks; the rest when first needed), lent
//! out and given back, never grown, moved or freed while registered. A launch copies the frames
//! that lie in them to the device directly, without staging them in its own page-locked memory
//! first (issue 15: that copy was 15-16% of a GPU `pack`'s CPU, on its launching thread).

use std::sync::{Arc, Mutex, PoisonError, RwLock};

use cudarc::driver::{CudaContext, sys};

use super::error::{GpuError, cuda};

/// The pool: up to `most` buffers of `capacity` bytes.
pub(super) struct PinnedFrames {
    ctx: Arc<CudaContext>,
    capacity: usize,
    most: usize,
    free: Mutex<Free>,
    /// Where every registered buffer lies, `(start, end)` addresses sorted by start.
    ranges: RwLock<Vec<(usize, usize)>>,
}

struct Free {
    bufs: Vec<Vec<u8>>,
    /// Buffers registered (lent or free).
    made: usize,
    /// A registration failed: no more are tried.
    failed: bool,
}

impl PinnedFrames {
    /// A pool that registers up to `most` buffers of `capacity` bytes in `ctx`, as they are asked for.
    pub(super) fn new(ctx: Arc<CudaContext>, capacity: usize, most: usize) -> Self {
        PinnedFrames {
            ctx,
            capacity,
            most,
            free: Mutex::new(Free { bufs: Vec::new(), made: 0, failed: false }),
            ranges: RwLock::new(Vec::new()),
        }
    }

    /// Which slices lie within one of the pool's buffers (the device can copy those directly
    /// while their buffers are lent; the caller holds the slices for the copies' duration).
    pub(super) fn holds(&self, slices: &[&[u8]]) -> Vec<bool> {
        let ranges = self.ranges.read().unwrap_or_else(PoisonError::into_inner);
        slices
            .iter()
            .map(|s| {
                let at = s.as_ptr() as usize;
                let i = ranges.partition_point(|&(start, _)| start <= at);
                i > 0 && at + s.len() <= ranges[i - 1].1
            })
            .collect()
    }

    /// Registers buffers until `n` are made (or `most`), free to lend: done before any frame
    /// comes, a registration never waits on a writer's thread or beside a launch. Returns how many
    /// are made.
    pub(super) fn prefill(&self, n: usize) -> usize {
        let want = n.min(self.most);
        let mut made = Vec::new();
        loop {
            // (`make` counts what it makes.)
            if self.free.lock().unwrap_or_else(PoisonError::into_inner).made >= want {
                break;
            }
            match self.make() {
                Some(buf) => made.push(buf),
                None => break,
            }
        }
        let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
        free.bufs.extend(made);
        free.made
    }

    /// Buffers registered so far (lent or free).
    pub(super) fn made(&self) -> usize {
        self.free.lock().unwrap_or_else(PoisonError::into_inner).made
    }

    /// One more registered buffer, counted as made; `None` once a registration failed or `most`
    /// are made.
    fn make(&self) -> Option<Vec<u8>> {
        {
            let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
            if free.failed || free.made >= self.most {
                return None;
            }
            free.made += 1;
        }
        let mut buf = Vec::with_capacity(self.capacity);
        match self.register(&mut buf) {
            Ok(()) => {
                let (start, end) = (buf.as_ptr() as usize, buf.as_ptr() as usize + buf.capacity());
                let mut ranges = self.ranges.write().unwrap_or_else(PoisonError::into_inner);
                let at = ranges.partition_point(|&(s, _)| s < start);
                ranges.insert(at, (start, end));
                Some(buf)
            }
            Err(e) => {
                let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
                free.made -= 1;
                if !free.failed {
                    free.failed = true;
                    tracing::info!(error = %e, "frames are staged for the GPU: no page-locked frame buffers");
                }
                None
            }
        }
    }

    fn register(&self, buf: &mut Vec<u8>) -> Result<(), GpuError> {
        cuda(self.ctx.bind_to_thread())?;
        // SAFETY: the buffer's whole capacity is this allocation's; it stays where it is (a
        // lent buffer cannot grow, and the pool never frees one) until `Drop` unregisters it.
        unsafe {
            sys::cuMemHostRegister_v2(buf.as_mut_ptr().cast(), buf.capacity(), 0)
                .result()
                .map_err(|source| GpuError::CudaCall { call: "cuMemHostRegister", source })
        }
    }
}

impl crate::framebuf::Slots for PinnedFrames {
    fn lend(&self, capacity: usize) -> Option<Vec<u8>> {
        if capacity > self.capacity {
            return None;
        }
        if let Some(buf) = self.free.lock().unwrap_or_else(PoisonError::into_inner).bufs.pop() {
            return Some(buf);
        }
        self.make()
    }

    fn give_back(&self, buf: Vec<u8>) {
        self.free.lock().unwrap_or_else(PoisonError::into_inner).bufs.push(buf);
    }
}

impl Drop for PinnedFrames {
    /// Every lent buffer holds the pool, so all of them are back: each is unregistered, then freed.
    fn drop(&mut self) {
        let free = self.free.get_mut().unwrap_or_else(PoisonError::into_inner);
        if free.bufs.is_empty() {
            return;
        }
        let bound = self.ctx.bind_to_thread().is_ok();
        for mut buf in free.bufs.drain(..) {
            // SAFETY: registered by `lend` and in use by no copy (it is back, and every launch
            // waits for its copies before it returns). A buffer the driver would not unregister
            // (its context gone) is leaked rather than freed while page-locked.
            let ok = bound && unsafe { sys::cuMemHostUnregister(buf.as_mut_ptr().cast()).result().is_ok() };
            if !ok {
                std::mem::forget(buf);
            }
        }
    }
}
