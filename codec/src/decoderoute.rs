//! Where a batch of frames read together is decoded while the GPU is shared (`--gpu auto`): on
//! the GPU or on the CPU workers, per codec, whichever was last measured to hand back a batch's
//! bytes sooner (the GPU by a margin), as writes are routed by what each side delivers. The way
//! not taken is tried again now and then, since the host's load changes what each delivers; the
//! GPU's try decodes a copy beside the CPU, so no reader waits for it.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::codec::CodecId;

/// Where a batch is decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeOn {
    /// The GPU (or a test's stand-in), the whole batch in one call.
    Gpu,
    /// The CPU workers, a frame each.
    Cpu,
    /// The CPU workers, and the GPU on a copy of the batch beside them, to measure it (its
    /// output dropped): a GPU not measured faster holds up no reader. The caller reports the
    /// try's end, whatever it was, with [`DecodeRoute::try_ended`].
    CpuTryingGpu,
}

/// How long the way not taken goes unmeasured before one batch tries it again, by default.
pub const RETRY_AFTER: Duration = Duration::from_secs(2);

/// How many times as fast as the CPU workers the GPU must be measured to take batches for real:
/// the way in use is measured under all its load, the other on one batch alone, which flatters
/// it (as writes launch only when measured clearly faster).
const GPU_MARGIN: f64 = 1.5;

/// Weight of a batch's time against the ones measured before it.
const WEIGHT: f64 = 0.3;

/// What is measured of one way, for one codec.
#[derive(Debug, Default, Clone, Copy)]
struct Way {
    /// Wall nanoseconds per decoded byte of its batches, from handing a batch over until every
    /// frame of it was back (queueing behind other work included).
    ns_per_byte: Option<f64>,
    /// When its last batch failed (the GPU only): not taken until it is tried again, and
    /// batches that began before then do not count.
    failed: Option<Instant>,
    /// When it was last chosen: a try is not repeated by every batch that comes meanwhile.
    chosen: Option<Instant>,
}

impl Way {
    fn due(&self, now: Instant, retry: Duration) -> bool {
        self.chosen.is_none_or(|t| now.saturating_duration_since(t) >= retry)
    }
}

/// The ways of one codec, and whether a try of the GPU is still out.
#[derive(Debug, Default, Clone, Copy)]
struct Ways {
    gpu: Way,
    cpu: Way,
    trying: bool,
}

impl Ways {
    /// Whether the GPU is measured faster (by [`GPU_MARGIN`]) and did not fail since.
    fn gpu_faster(&self) -> bool {
        let (gpu, cpu) = (self.gpu.ns_per_byte, self.cpu.ns_per_byte);
        matches!((gpu, cpu), (Some(g), Some(c)) if self.gpu.failed.is_none() && g * GPU_MARGIN < c)
    }
}

/// The measurements of both ways, per codec, and the choice made from them (shared by every
/// reader).
#[derive(Debug)]
pub struct DecodeRoute {
    codecs: Mutex<HashMap<CodecId, Ways>>,
    retry: Duration,
}

impl Default for DecodeRoute {
    fn default() -> Self {
        Self::new(RETRY_AFTER)
    }
}

impl DecodeRoute {
    /// A route that tries the way not taken again after `retry`.
    pub fn new(retry: Duration) -> Self {
        DecodeRoute { codecs: Mutex::default(), retry }
    }

    fn ways(&self) -> std::sync::MutexGuard<'_, HashMap<CodecId, Ways>> {
        self.codecs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Where the next batch of `codec` goes: the CPU until it is measured, then a try of the
    /// GPU, then the GPU for real while it is measured faster (see [`GPU_MARGIN`]) and the CPU
    /// otherwise; the way not taken again once it has not been chosen for the retry time (a
    /// try of the GPU, never two at once).
    pub fn choose(&self, codec: CodecId) -> DecodeOn {
        self.choose_at(codec, Instant::now())
    }

    fn choose_at(&self, codec: CodecId, now: Instant) -> DecodeOn {
        let mut all = self.ways();
        let w = all.entry(codec).or_default();
        let gpu_faster = w.gpu_faster();
        let gpu_due = w.gpu.due(now, self.retry) && !w.trying;
        let on = match (w.gpu.ns_per_byte, w.cpu.ns_per_byte) {
            (_, None) => DecodeOn::Cpu,
            (None, Some(_)) if gpu_due => DecodeOn::CpuTryingGpu,
            (None, Some(_)) => DecodeOn::Cpu,
            (Some(_), Some(_)) if gpu_faster => {
                if w.cpu.due(now, self.retry) {
                    DecodeOn::Cpu
                } else {
                    DecodeOn::Gpu
                }
            }
            (Some(_), Some(_)) if gpu_due => DecodeOn::CpuTryingGpu,
            (Some(_), Some(_)) => DecodeOn::Cpu,
        };
        match on {
            DecodeOn::Cpu => w.cpu.chosen = Some(now),
            DecodeOn::Gpu => w.gpu.chosen = Some(now),
            DecodeOn::CpuTryingGpu => {
                (w.gpu.chosen, w.cpu.chosen) = (Some(now), Some(now));
                w.trying = true;
            }
        }
        on
    }

    /// Records a batch of `bytes` decoded bytes of `codec` that `on` handed back in `took`
    /// (a try counts as the GPU's).
    pub fn record(&self, codec: CodecId, on: DecodeOn, bytes: u64, took: Duration) {
        self.record_at(codec, on, bytes, took, Instant::now());
    }

    fn record_at(&self, codec: CodecId, on: DecodeOn, bytes: u64, took: Duration, now: Instant) {
        if bytes == 0 {
            return;
        }
        let ns = took.as_nanos() as f64 / bytes as f64;
        let mut all = self.ways();
        let w = all.entry(codec).or_default();
        let way = if on == DecodeOn::Cpu { &mut w.cpu } else { &mut w.gpu };
        let began = now.checked_sub(took);
        match way.failed {
            // A batch that began before the last failure says nothing of the GPU since.
            Some(at) if began.is_none_or(|b| b < at) => return,
            Some(_) => way.ns_per_byte = Some(ns),
            None => way.ns_per_byte = Some(way.ns_per_byte.map_or(ns, |m| (1.0 - WEIGHT) * m + WEIGHT * ns)),
        }
        way.failed = None;
    }

    /// Records that a GPU batch of `codec` failed (its frames were decoded on the CPU): the GPU
    /// is not chosen again until it is due for a try.
    pub fn record_failure(&self, codec: CodecId) {
        self.record_failure_at(codec, Instant::now());
    }

    fn record_failure_at(&self, codec: CodecId, now: Instant) {
        let mut all = self.ways();
        let gpu = &mut all.entry(codec).or_default().gpu;
        gpu.failed = Some(now);
        gpu.chosen = Some(now);
        gpu.ns_per_byte.get_or_insert(f64::MAX);
    }

    /// A try of the GPU on `codec` has ended, however (recorded or failed first): another may
    /// come once it is due.
    pub fn try_ended(&self, codec: CodecId) {
        self.ways().entry(codec).or_default().trying = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    const Z: CodecId = CodecId::Zstd;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A try chosen at `now` that came back in `took`.
    fn tried(r: &DecodeRoute, took: Duration, now: Instant) {
        assert_eq!(r.choose_at(Z, now), DecodeOn::CpuTryingGpu);
        r.record_at(Z, DecodeOn::Gpu, 16 * MIB, took, now + took);
        r.try_ended(Z);
    }

    #[test]
    fn the_cpu_is_measured_first_then_the_gpu_tried_then_a_faster_gpu_kept() {
        let r = DecodeRoute::default();
        let t = Instant::now();
        assert_eq!(r.choose_at(Z, t), DecodeOn::Cpu, "nothing measured: the CPU");
        assert_eq!(r.choose_at(Z, t), DecodeOn::Cpu, "still nothing measured");
        r.record_at(Z, DecodeOn::Cpu, 16 * MIB, ms(40), t);
        assert_eq!(r.choose_at(Z, t), DecodeOn::CpuTryingGpu, "the CPU measured: the GPU tried beside it");
        assert_eq!(r.choose_at(Z, t), DecodeOn::Cpu, "one try at a time, not one per batch meanwhile");
        r.record_at(Z, DecodeOn::Gpu, 16 * MIB, ms(10), t + ms(10));
        r.try_ended(Z);
        for k in 1..5 {
            assert_eq!(r.choose_at(Z, t + ms(k)), DecodeOn::Gpu, "the GPU was measured faster");
        }
        assert_eq!(r.choose_at(CodecId::Lz4, t), DecodeOn::Cpu, "another codec is measured on its own");
    }

    #[test]
    fn a_gpu_only_a_little_faster_is_not_taken_for_real() {
        let r = DecodeRoute::default();
        let t = Instant::now();
        r.record_at(Z, DecodeOn::Cpu, 16 * MIB, ms(40), t);
        tried(&r, ms(30), t);
        assert_eq!(r.choose_at(Z, t + ms(1)), DecodeOn::Cpu, "30 ms against 40: within the margin");
    }

    #[test]
    fn a_slower_gpu_is_left_and_tried_again_beside_the_cpu_after_a_while() {
        let r = DecodeRoute::default();
        let t = Instant::now();
        r.record_at(Z, DecodeOn::Cpu, 16 * MIB, ms(10), t);
        tried(&r, ms(40), t);
        assert_eq!(r.choose_at(Z, t + ms(1)), DecodeOn::Cpu, "the CPU was faster");
        assert_eq!(r.choose_at(Z, t + RETRY_AFTER - ms(1)), DecodeOn::Cpu);
        assert_eq!(r.choose_at(Z, t + RETRY_AFTER), DecodeOn::CpuTryingGpu, "tried again after a while");
        assert_eq!(r.choose_at(Z, t + RETRY_AFTER + ms(1)), DecodeOn::Cpu, "once");
        // The host got busy: the cores now take longer, and the GPU's try is faster.
        for _ in 0..8 {
            r.record_at(Z, DecodeOn::Cpu, 16 * MIB, ms(100), t + RETRY_AFTER);
        }
        r.record_at(Z, DecodeOn::Gpu, 16 * MIB, ms(30), t + RETRY_AFTER + ms(30));
        r.try_ended(Z);
        assert_eq!(r.choose_at(Z, t + RETRY_AFTER + ms(40)), DecodeOn::Gpu, "now the GPU is the faster");
    }

    #[test]
    fn no_second_try_while_one_is_out_however_long_it_takes() {
        let r = DecodeRoute::default();
        let t = Instant::now();
        r.record_at(Z, DecodeOn::Cpu, 16 * MIB, ms(10), t);
        assert_eq!(r.choose_at(Z, t), DecodeOn::CpuTryingGpu);
        assert_eq!(r.choose_at(Z, t + 3 * RETRY_AFTER), DecodeOn::Cpu, "the try is still out");
        r.try_ended(Z);
        assert_eq!(r.choose_at(Z, t + 3 * RETRY_AFTER), DecodeOn::CpuTryingGpu, "the next try");
    }

    #[test]
    fn the_cpu_keeps_being_measured_while_a_faster_gpu_is_chosen() {
        let r = DecodeRoute::default();
        let t = Instant::now();
        assert_eq!(r.choose_at(Z, t), DecodeOn::Cpu);
        r.record_at(Z, DecodeOn::Cpu, MIB, ms(40), t);
        tried(&r, ms(10), t);
        assert_eq!(r.choose_at(Z, t + ms(20)), DecodeOn::Gpu, "the CPU was chosen at t");
        assert_eq!(r.choose_at(Z, t + RETRY_AFTER), DecodeOn::Cpu, "the CPU tried again");
        assert_eq!(r.choose_at(Z, t + RETRY_AFTER + ms(1)), DecodeOn::Gpu);
    }

    #[test]
    fn a_failed_gpu_is_left_until_its_retry_and_a_success_then_counts_alone() {
        let r = DecodeRoute::default();
        let t = Instant::now();
        assert_eq!(r.choose_at(Z, t), DecodeOn::Cpu);
        r.record_at(Z, DecodeOn::Cpu, MIB, ms(40), t);
        tried(&r, ms(10), t);
        assert_eq!(r.choose_at(Z, t + ms(20)), DecodeOn::Gpu);
        r.record_failure_at(Z, t + ms(30));
        assert_eq!(r.choose_at(Z, t + ms(31)), DecodeOn::Cpu, "failed: the CPU, though the GPU measured faster");
        // A batch that began before the failure and ended after it does not clear it.
        r.record_at(Z, DecodeOn::Gpu, MIB, ms(20), t + ms(40));
        assert_eq!(r.choose_at(Z, t + ms(41)), DecodeOn::Cpu, "still failed");
        assert_eq!(r.choose_at(Z, t + ms(30) + RETRY_AFTER - ms(1)), DecodeOn::Cpu);
        assert_eq!(r.choose_at(Z, t + ms(30) + RETRY_AFTER), DecodeOn::CpuTryingGpu, "tried again after a while");
        r.record_at(Z, DecodeOn::Gpu, MIB, ms(10), t + ms(40) + RETRY_AFTER);
        r.try_ended(Z);
        assert_eq!(r.choose_at(Z, t + ms(41) + RETRY_AFTER), DecodeOn::Gpu, "its success counts, not the failure");
    }

    #[test]
    fn a_failure_before_any_success_leaves_the_gpu_too() {
        let r = DecodeRoute::default();
        let t = Instant::now();
        r.record_at(Z, DecodeOn::Cpu, MIB, ms(40), t);
        assert_eq!(r.choose_at(Z, t), DecodeOn::CpuTryingGpu);
        r.record_failure_at(Z, t);
        r.try_ended(Z);
        assert_eq!(r.choose_at(Z, t + ms(1)), DecodeOn::Cpu);
        assert_eq!(r.choose_at(Z, t + RETRY_AFTER), DecodeOn::CpuTryingGpu);
    }

    #[test]
    fn the_retry_time_is_the_routes_own() {
        let r = DecodeRoute::new(Duration::from_secs(60));
        let t = Instant::now();
        r.record_at(Z, DecodeOn::Cpu, 16 * MIB, ms(10), t);
        tried(&r, ms(40), t);
        assert_eq!(r.choose_at(Z, t + RETRY_AFTER), DecodeOn::Cpu, "not due after the default's time");
        assert_eq!(r.choose_at(Z, t + Duration::from_secs(60)), DecodeOn::CpuTryingGpu);
    }
}
