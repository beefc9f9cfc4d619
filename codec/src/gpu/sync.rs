//! What a lane waits on and how lanes share the host: CUDA events (sleeping waits), the phase
//! timings logged at debug level, and the turns lanes take staging their input.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaContext, CudaEvent, CudaStream};

use super::error::{GpuError, cuda};

/// Where one lane's batch spent its time, logged at debug level: host set-up, staging into pinned
/// memory, waiting on the GPU, bringing results back, copying them out; and from CUDA events the
/// milliseconds of host-to-device copies, kernel and copies back.
pub(super) struct Timings {
    pub(super) setup: std::time::Duration,
    pub(super) stage: std::time::Duration,
    pub(super) wait: std::time::Duration,
    pub(super) back: std::time::Duration,
    pub(super) collect: std::time::Duration,
    pub(super) gpu: [f32; 3],
}

impl Timings {
    pub(super) fn log(&self, what: &'static str, chunks: usize, bytes: usize, start: Instant) {
        let us = |d: std::time::Duration| d.as_micros() as u64;
        let [h2d, kernel, d2h] = self.gpu;
        tracing::debug!(
            chunks,
            bytes,
            setup_us = us(self.setup),
            stage_us = us(self.stage),
            wait_us = us(self.wait),
            back_us = us(self.back),
            collect_us = us(self.collect),
            gpu_h2d_ms = h2d,
            gpu_kernel_ms = kernel,
            gpu_d2h_ms = d2h,
            total_us = us(start.elapsed()),
            "{what}"
        );
    }
}

/// Lets the lanes of one decode batch stage their input one after another: the first lane's
/// copies and kernel start once its own share is staged and run while the next lanes stage.
/// (Compression's lanes stage at once, each on its own thread: measured faster on the H100 host,
/// BENCHMARKS.md §9.)
#[derive(Default)]
pub(super) struct Turns {
    next: Mutex<usize>,
    cv: std::sync::Condvar,
}

impl Turns {
    pub(super) fn turn(&self, k: usize) -> Turn<'_> {
        Turn { turns: Some(self), k }
    }
}

/// Lane `k`'s place in its batch's `Turns`; passes the turn on when dropped, so a lane that
/// fails early never holds up the others.
pub(super) struct Turn<'a> {
    turns: Option<&'a Turns>,
    k: usize,
}

impl Turn<'_> {
    /// A lane alone: never waits.
    pub(super) fn solo() -> Turn<'static> {
        Turn { turns: None, k: 0 }
    }

    pub(super) fn wait(&self) {
        if let Some(t) = self.turns {
            let mut next = t.next.lock().expect("turns lock");
            while *next < self.k {
                next = t.cv.wait(next).expect("turns lock");
            }
        }
    }

    pub(super) fn pass(&self) {
        if let Some(t) = self.turns {
            let mut next = t.next.lock().expect("turns lock");
            *next = (*next).max(self.k + 1);
            t.cv.notify_all();
        }
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.pass();
    }
}

/// Runs each job on its own thread, started by the caller, whose priority it inherits (lanes
/// block on their streams and on each other's turns, which must not happen on the rayon pool a
/// decode's collecting uses) and returns the results in order.
pub(super) fn on_threads<T: Send, F: FnOnce() -> Result<T, GpuError> + Send>(
    jobs: impl Iterator<Item = F>,
) -> Vec<Result<T, GpuError>> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = jobs.map(|job| scope.spawn(job)).collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(GpuError::LanePanicked))).collect()
    })
}

/// CUDA events a lane records on its stream and waits on (cudarc destroys them).
pub(super) struct Events(Vec<CudaEvent>);

impl Events {
    /// Events to wait on. Waiting sleeps instead of spinning (blocking sync): several lanes
    /// spinning would take the cores the host's copies need. (They keep timing, which cudarc's
    /// events cannot combine with blocking sync: measured in BENCHMARKS.md §9, session 23.)
    pub(super) fn new(ctx: &Arc<CudaContext>, n: usize) -> Result<Self, GpuError> {
        Self::with_flags(ctx, n, CUevent_flags::CU_EVENT_BLOCKING_SYNC)
    }

    fn with_flags(ctx: &Arc<CudaContext>, n: usize, flags: CUevent_flags) -> Result<Self, GpuError> {
        (0..n).map(|_| cuda(ctx.new_event(Some(flags)))).collect::<Result<_, _>>().map(Events)
    }

    pub(super) fn record(&self, j: usize, stream: &CudaStream) -> Result<(), GpuError> {
        cuda(self.0[j].record(stream))
    }

    pub(super) fn wait(&self, j: usize) -> Result<(), GpuError> {
        cuda(self.0[j].synchronize())
    }
}

/// Where a lane's GPU time goes: marks before the host-to-device copies, after them, after the
/// kernel and after the copies back. Only made when debug logging is on.
pub(super) struct Phases(Events);

impl Phases {
    pub(super) fn new(ctx: &Arc<CudaContext>) -> Result<Option<Self>, GpuError> {
        if !tracing::enabled!(tracing::Level::DEBUG) {
            return Ok(None);
        }
        Ok(Some(Phases(Events::with_flags(ctx, 4, CUevent_flags::CU_EVENT_DEFAULT)?)))
    }

    pub(super) fn mark(phases: &Option<Self>, k: usize, stream: &CudaStream) -> Result<(), GpuError> {
        phases.as_ref().map_or(Ok(()), |p| p.0.record(k, stream))
    }

    /// Milliseconds of host-to-device copies, kernel and copies back (after the stream is done).
    pub(super) fn totals(phases: &Option<Self>) -> [f32; 3] {
        let mut t = [0f32; 3];
        if let Some(p) = phases {
            for (k, slot) in t.iter_mut().enumerate() {
                *slot = p.0.0[k].elapsed_ms(&p.0.0[k + 1]).unwrap_or(0.0);
            }
        }
        t
    }
}

/// Waits, when dropped, for the work queued on a launch's stream: a launch that returns early
/// (an error) must not let its caller reuse the host memory its copies read from (a lent frame
/// buffer), nor another launch its lane's buffers, while those copies may still run.
pub(super) struct Drained<'a>(pub(super) &'a CudaStream);

impl Drained<'_> {
    /// The launch waited for all its work itself: nothing to wait for.
    pub(super) fn waited(self) {
        std::mem::forget(self);
    }
}

impl Drop for Drained<'_> {
    fn drop(&mut self) {
        // Raw, not `CudaStream::synchronize`: that returns early, without waiting, when an error
        // some drop stored in the context is pending, and this wait must happen whatever else
        // failed. (A failure of the wait itself is the context's own.)
        // SAFETY: the stream of a lane of this GPU, which outlives the launch; the launching
        // thread, where this runs, has the context bound.
        let _ = unsafe { cudarc::driver::result::stream::synchronize(self.0.cu_stream()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_take_turns_in_order_and_a_dropped_turn_passes_on() {
        let turns = Turns::default();
        let order = Mutex::new(Vec::new());
        let outs = on_threads((0..4).rev().map(|k| {
            let (turn, order) = (turns.turn(k), &order);
            move || {
                turn.wait();
                order.lock().unwrap().push(k);
                if k == 1 {
                    return Err(GpuError::Injected); // dropped without an explicit pass
                }
                turn.pass();
                Ok(k)
            }
        }));
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3]);
        assert!(matches!(outs[2], Err(GpuError::Injected)), "results come back in job order");
        assert_eq!(outs.iter().filter(|o| o.is_ok()).count(), 3);
    }
}
