//! Where a batch of frames read together is decoded while the GPU is shared (`--gpu auto`): on
//! the GPU or on the CPU workers, whichever was last measured to hand back a batch's bytes
//! sooner, as writes are routed by what each side delivers. The way not taken is tried again
//! now and then, since the host's load changes what each delivers.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Where a batch is decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeOn {
    /// The GPU (or a test's stand-in), the whole batch in one call.
    Gpu,
    /// The CPU workers, a frame each.
    Cpu,
    /// The CPU workers, and the GPU on a copy of the batch beside them, to measure it (its
    /// output dropped): a GPU not measured faster holds up no reader.
    CpuTryingGpu,
}

/// How long the way not taken goes unmeasured before one batch tries it again.
pub const RETRY_AFTER: Duration = Duration::from_secs(2);

/// Weight of a batch's time against the ones measured before it.
const WEIGHT: f64 = 0.3;

/// What is measured of one way.
#[derive(Debug, Default, Clone, Copy)]
struct Way {
    /// Wall nanoseconds per decoded byte of its batches, from handing a batch over until every
    /// frame of it was back (queueing behind other work included).
    ns_per_byte: Option<f64>,
    /// Its last batch failed (the GPU only): not taken until it is tried again.
    failed: bool,
    /// When it was last chosen: a try is not repeated by every batch that comes meanwhile.
    chosen: Option<Instant>,
}

impl Way {
    fn due(&self, now: Instant) -> bool {
        self.chosen.is_none_or(|t| now.saturating_duration_since(t) >= RETRY_AFTER)
    }
}

/// The measurements of both ways and the choice made from them (shared by every reader).
#[derive(Debug, Default)]
pub struct DecodeRoute {
    ways: Mutex<[Way; 2]>,
}

fn slot(on: DecodeOn) -> usize {
    match on {
        DecodeOn::Gpu | DecodeOn::CpuTryingGpu => 0,
        DecodeOn::Cpu => 1,
    }
}

impl DecodeRoute {
    /// Where the next batch goes: the CPU until it is measured, then the GPU once, then
    /// whichever delivers a byte sooner; the other again once it has not been chosen for
    /// [`RETRY_AFTER`] (a failed GPU likewise). The GPU decodes a batch for real only while it
    /// is measured faster; otherwise its turn is a try beside the CPU
    /// ([`DecodeOn::CpuTryingGpu`]).
    pub fn choose(&self) -> DecodeOn {
        self.choose_at(Instant::now())
    }

    /// [`Self::choose`] at `now`.
    pub fn choose_at(&self, now: Instant) -> DecodeOn {
        let mut ways = self.ways.lock().unwrap_or_else(PoisonError::into_inner);
        let [gpu, cpu] = *ways;
        let on = match (gpu.ns_per_byte, cpu.ns_per_byte) {
            (_, None) => DecodeOn::Cpu,
            (None, Some(_)) if gpu.due(now) => DecodeOn::Gpu,
            (None, Some(_)) => DecodeOn::Cpu,
            (Some(g), Some(c)) => {
                let (best, other) =
                    if !gpu.failed && g < c { (DecodeOn::Gpu, DecodeOn::Cpu) } else { (DecodeOn::Cpu, DecodeOn::Gpu) };
                if ways[slot(other)].due(now) { other } else { best }
            }
        };
        ways[slot(on)].chosen = Some(now);
        let faster = matches!((gpu.ns_per_byte, cpu.ns_per_byte), (Some(g), Some(c)) if !gpu.failed && g < c);
        if on == DecodeOn::Gpu && !faster { DecodeOn::CpuTryingGpu } else { on }
    }

    /// Records a batch of `bytes` decoded bytes that `on` handed back in `took` (a try counts
    /// as the GPU's).
    pub fn record(&self, on: DecodeOn, bytes: u64, took: Duration) {
        if bytes == 0 {
            return;
        }
        let ns = took.as_nanos() as f64 / bytes as f64;
        let mut ways = self.ways.lock().unwrap_or_else(PoisonError::into_inner);
        let way = &mut ways[slot(on)];
        way.ns_per_byte = Some(match way.ns_per_byte {
            Some(m) if !way.failed => (1.0 - WEIGHT) * m + WEIGHT * ns,
            _ => ns,
        });
        way.failed = false;
    }

    /// Records that a GPU batch failed (its frames were decoded on the CPU): the GPU is not
    /// chosen again until [`RETRY_AFTER`] has passed.
    pub fn failed(&self) {
        let mut ways = self.ways.lock().unwrap_or_else(PoisonError::into_inner);
        let gpu = &mut ways[slot(DecodeOn::Gpu)];
        gpu.failed = true;
        gpu.ns_per_byte.get_or_insert(f64::MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_cpu_is_measured_first_then_the_gpu_once_then_the_faster_is_kept() {
        let r = DecodeRoute::default();
        let t = Instant::now();
        assert_eq!(r.choose_at(t), DecodeOn::Cpu, "nothing measured: the CPU");
        assert_eq!(r.choose_at(t), DecodeOn::Cpu, "still nothing measured");
        r.record(DecodeOn::Cpu, 16 * MIB, ms(40));
        assert_eq!(r.choose_at(t), DecodeOn::CpuTryingGpu, "the CPU measured: the GPU is tried");
        assert_eq!(r.choose_at(t), DecodeOn::Cpu, "one try at a time, not one per batch meanwhile");
        r.record(DecodeOn::Gpu, 16 * MIB, ms(10));
        for k in 0..5 {
            assert_eq!(r.choose_at(t + ms(k)), DecodeOn::Gpu, "the GPU was measured faster");
        }
    }

    #[test]
    fn a_slower_gpu_is_left_and_tried_again_once_after_a_while() {
        let r = DecodeRoute::default();
        let t = Instant::now();
        r.record(DecodeOn::Cpu, 16 * MIB, ms(10));
        assert_eq!(r.choose_at(t), DecodeOn::CpuTryingGpu);
        r.record(DecodeOn::Gpu, 16 * MIB, ms(40));
        assert_eq!(r.choose_at(t + ms(1)), DecodeOn::Cpu, "the CPU was faster");
        assert_eq!(r.choose_at(t + RETRY_AFTER - ms(1)), DecodeOn::Cpu);
        assert_eq!(r.choose_at(t + RETRY_AFTER), DecodeOn::CpuTryingGpu, "tried again after a while, beside the CPU");
        assert_eq!(r.choose_at(t + RETRY_AFTER + ms(1)), DecodeOn::Cpu, "once");
        // The host got busy: the cores now take longer, and the GPU's retry is faster.
        for _ in 0..8 {
            r.record(DecodeOn::Cpu, 16 * MIB, ms(100));
        }
        r.record(DecodeOn::Gpu, 16 * MIB, ms(30));
        assert_eq!(r.choose_at(t + RETRY_AFTER + ms(2)), DecodeOn::Gpu, "now the GPU is the faster");
    }

    #[test]
    fn a_faster_cpu_keeps_being_measured_while_the_gpu_is_chosen() {
        let r = DecodeRoute::default();
        let t = Instant::now();
        r.record(DecodeOn::Cpu, MIB, ms(40));
        r.record(DecodeOn::Gpu, MIB, ms(10));
        assert_eq!(r.choose_at(t), DecodeOn::Cpu, "never chosen: the CPU is due for a try");
        assert_eq!(r.choose_at(t + ms(1)), DecodeOn::Gpu);
        assert_eq!(r.choose_at(t + RETRY_AFTER), DecodeOn::Cpu, "the CPU tried again");
    }

    #[test]
    fn a_failed_gpu_is_left_until_its_retry_and_a_success_then_counts_alone() {
        let r = DecodeRoute::default();
        let t = Instant::now();
        r.record(DecodeOn::Cpu, MIB, ms(40));
        r.record(DecodeOn::Gpu, MIB, ms(10));
        assert_eq!(r.choose_at(t), DecodeOn::Cpu);
        assert_eq!(r.choose_at(t), DecodeOn::Gpu);
        r.failed();
        assert_eq!(r.choose_at(t + ms(1)), DecodeOn::Cpu, "failed: the CPU, though the GPU measured faster");
        assert_eq!(r.choose_at(t + RETRY_AFTER - ms(1)), DecodeOn::Cpu);
        assert_eq!(r.choose_at(t + RETRY_AFTER), DecodeOn::CpuTryingGpu, "tried again after a while");
        r.record(DecodeOn::Gpu, MIB, ms(10));
        assert_eq!(r.choose_at(t + RETRY_AFTER + ms(1)), DecodeOn::Gpu, "its success counts, not the failure");
    }

    #[test]
    fn a_failure_before_any_success_leaves_the_gpu_too() {
        let r = DecodeRoute::default();
        let t = Instant::now();
        r.record(DecodeOn::Cpu, MIB, ms(40));
        assert_eq!(r.choose_at(t), DecodeOn::CpuTryingGpu);
        r.failed();
        assert_eq!(r.choose_at(t + ms(1)), DecodeOn::Cpu);
        assert_eq!(r.choose_at(t + RETRY_AFTER), DecodeOn::CpuTryingGpu);
    }
}
