//! The frame dispatcher: one queue for frames from every open file. Frames go to the GPU in
//! batched nVCOMP launches when a GPU is present and the policy allows, and to the CPU worker pool
//! otherwise. Any GPU failure, a full queue, or output not smaller than its input sends that frame
//! down the CPU path: a write never fails because of the GPU. Every outcome is counted.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError, sync_channel};
use std::time::{Duration, Instant};

use crate::codec::{Codec, CodecId, ZstdCodec};
use crate::format::FRAME_HEADER_LEN;
use crate::frame::{EncodedFrame, ObjectContext, encode_frame, finish_frame};

/// Whether to use the GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuPolicy {
    /// Use it when one is found; say why not otherwise.
    Auto,
    /// Require it: starting fails without one.
    On,
    /// Never.
    Off,
}

/// Dispatcher settings; the defaults suit 1 MiB frames on an H100.
#[derive(Debug, Clone)]
pub struct DispatchConfig {
    /// GPU policy.
    pub policy: GpuPolicy,
    /// Frames at least this large launch without waiting for company.
    pub min_bytes: usize,
    /// Most frames in one launch.
    pub batch_max_items: usize,
    /// Longest a small frame waits for others to share its launch.
    pub batch_window: Duration,
    /// A batch launches as soon as this many bytes wait.
    pub batch_floor_bytes: usize,
    /// Frames waiting for the GPU beyond which new ones go to the CPU.
    pub queue_max: usize,
    /// nVCOMP data type hint for Cascaded and Bitcomp (0 bytes, 4 int32, 5 uint32, 6 int64, ...).
    pub data_type: i32,
}

impl Default for DispatchConfig {
    fn default() -> Self {
        DispatchConfig {
            policy: GpuPolicy::Auto,
            // nVCOMP works on a batch's chunks in parallel: a launch needs many frames to be
            // efficient (measured on an H100: 16 frames of 1 MiB run at ~0.4 GB/s, 256 at ~5 GB/s),
            // so even 1 MiB frames wait briefly for company.
            min_bytes: 16 << 20,
            batch_max_items: 1024,
            batch_window: Duration::from_millis(5),
            batch_floor_bytes: 256 << 20,
            queue_max: 4096,
            data_type: 0,
        }
    }
}

/// Counts of what happened to frames.
#[derive(Debug, Default)]
pub struct Counters {
    /// Frames encoded on the CPU by choice (no GPU, policy off, codec without GPU path).
    pub cpu_frames: AtomicU64,
    /// GPU launches.
    pub gpu_batches: AtomicU64,
    /// Frames compressed on the GPU and stored with the GPU's output.
    pub gpu_frames: AtomicU64,
    /// Raw bytes sent to the GPU.
    pub gpu_bytes_in: AtomicU64,
    /// Compressed bytes the GPU returned.
    pub gpu_bytes_out: AtomicU64,
    /// Nanoseconds spent in GPU launches.
    pub gpu_nanos: AtomicU64,
    /// Frames sent back to the CPU because a GPU call failed.
    pub fallback_error: AtomicU64,
    /// Frames sent to the CPU because the GPU queue was full.
    pub fallback_queue_full: AtomicU64,
    /// Frames the GPU could not make smaller (stored as they are).
    pub fallback_not_smaller: AtomicU64,
    /// Frames decoded on the GPU (reads).
    pub gpu_decoded_frames: AtomicU64,
    /// Read batches sent back to the CPU because GPU decoding failed.
    pub gpu_decode_fallback: AtomicU64,
}

impl Counters {
    /// (name, value) pairs, for metrics and reports.
    pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        vec![
            ("cpu_frames", g(&self.cpu_frames)),
            ("gpu_batches", g(&self.gpu_batches)),
            ("gpu_frames", g(&self.gpu_frames)),
            ("gpu_bytes_in", g(&self.gpu_bytes_in)),
            ("gpu_bytes_out", g(&self.gpu_bytes_out)),
            ("gpu_nanos", g(&self.gpu_nanos)),
            ("fallback_error", g(&self.fallback_error)),
            ("fallback_queue_full", g(&self.fallback_queue_full)),
            ("fallback_not_smaller", g(&self.fallback_not_smaller)),
            ("gpu_decoded_frames", g(&self.gpu_decoded_frames)),
            ("gpu_decode_fallback", g(&self.gpu_decode_fallback)),
        ]
    }
}

type Done = Box<dyn FnOnce(EncodedFrame) + Send>;

struct Job {
    ctx: Arc<ObjectContext>,
    codec: Arc<dyn Codec>,
    gpu_codec: CodecId,
    frame: u64,
    raw: Vec<u8>,
    done: Done,
}

/// Why a dispatcher could not start.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum DispatchError {
    /// The policy requires a GPU and none is usable; the source says why.
    #[cfg(feature = "gpu")]
    #[error("a GPU is required, but none is usable")]
    GpuRequired(#[source] crate::gpu::GpuUnavailable),
    /// The policy requires a GPU and this build has no GPU back end.
    #[error("a GPU is required, but this build has no GPU back end")]
    NoGpuBackEnd,
    /// The thread that feeds the GPU could not start.
    #[error("cannot start the GPU thread")]
    Thread(#[source] std::io::Error),
}

/// An error and its causes on one line ("CUDA init failed: CUDA_ERROR_NO_DEVICE ..."), for the
/// dispatcher's description and log lines.
#[cfg(feature = "gpu")]
fn one_line(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        next = cause.source();
    }
    text
}

/// Routes frames to the GPU or the CPU pool.
pub struct Dispatcher {
    gpu_tx: Option<SyncSender<Job>>,
    #[cfg(feature = "gpu")]
    gpu: Option<Arc<crate::gpu::Gpu>>,
    counters: Arc<Counters>,
    gpu_codecs: Vec<CodecId>,
    /// What the GPU is, or why none is used.
    pub describe: String,
}

impl std::fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Dispatcher({})", self.describe)
    }
}

/// A CPU codec that writes the same format as `id` — or zstd level 1 for GPU-only formats.
pub fn cpu_equivalent(id: CodecId, level: i32) -> Arc<dyn Codec> {
    let params = crate::codec::CodecParams { codec: id, level, dict: None };
    match params.cpu_codec() {
        Ok(c) => Arc::from(c),
        Err(_) => Arc::new(ZstdCodec::new(1, None).expect("level 1 is valid")),
    }
}

impl Dispatcher {
    /// A dispatcher that only uses the CPU.
    pub fn cpu_only(why: &str) -> Self {
        Dispatcher {
            gpu_tx: None,
            #[cfg(feature = "gpu")]
            gpu: None,
            counters: Arc::default(),
            gpu_codecs: vec![],
            describe: why.to_owned(),
        }
    }

    /// Probes the GPU as the policy says; `Err` only for `GpuPolicy::On` without a usable GPU,
    /// or when the GPU's thread cannot start.
    pub fn new(cfg: DispatchConfig) -> Result<Self, DispatchError> {
        if cfg.policy == GpuPolicy::Off {
            return Ok(Self::cpu_only("GPU off by policy"));
        }
        #[cfg(feature = "gpu")]
        {
            match crate::gpu::Gpu::probe() {
                Ok(gpu) => {
                    let gpu = Arc::new(gpu);
                    let shared = gpu.clone();
                    let describe = gpu.describe.clone();
                    let gpu_codecs = gpu.codecs();
                    let (tx, rx) = sync_channel(cfg.queue_max);
                    let counters: Arc<Counters> = Arc::default();
                    let c = counters.clone();
                    std::thread::Builder::new()
                        .name("shrinkfs-gpu".into())
                        .spawn(move || gpu_loop(gpu, rx, cfg, c))
                        .map_err(DispatchError::Thread)?;
                    tracing::info!(gpu = %describe, "GPU compression enabled");
                    Ok(Dispatcher { gpu_tx: Some(tx), gpu: Some(shared), counters, gpu_codecs, describe })
                }
                Err(why) if cfg.policy == GpuPolicy::On => Err(DispatchError::GpuRequired(why)),
                Err(why) => {
                    let why = one_line(&why);
                    tracing::info!("GPU not used: {why}; compressing on the CPU");
                    Ok(Self::cpu_only(&why))
                }
            }
        }
        #[cfg(not(feature = "gpu"))]
        {
            if cfg.policy == GpuPolicy::On {
                return Err(DispatchError::NoGpuBackEnd);
            }
            Ok(Self::cpu_only("this build has no GPU back end"))
        }
    }

    /// Frames a producer should keep in flight so GPU launches can fill up: two batches' worth
    /// of 1 MiB frames, so the next batch gathers while one runs.
    pub fn frames_in_flight(&self) -> usize {
        let cpu = 2 * crate::workers::threads() + 1;
        if self.gpu_tx.is_some() { cpu.max(512) } else { cpu }
    }

    /// Decompresses a batch of checked, unsealed payloads of one codec on the GPU; `None` when
    /// there is no GPU for it or the GPU failed (the caller decodes on the CPU; failures counted).
    pub fn gpu_decompress(&self, codec: CodecId, payloads: &[&[u8]], raw_lens: &[usize]) -> Option<Vec<Vec<u8>>> {
        #[cfg(feature = "gpu")]
        if let Some(gpu) = self.gpu.as_ref().filter(|_| self.gpu_for(codec)) {
            return match gpu.decompress_batch(codec, payloads, raw_lens, 0) {
                Ok(out) => {
                    self.counters.gpu_decoded_frames.fetch_add(out.len() as u64, Ordering::Relaxed);
                    Some(out)
                }
                Err(e) => {
                    tracing::warn!(error = %e, frames = payloads.len(), "GPU decode failed; decoding on the CPU");
                    self.counters.gpu_decode_fallback.fetch_add(1, Ordering::Relaxed);
                    None
                }
            };
        }
        let _ = (codec, payloads, raw_lens);
        None
    }

    /// Whether frames of `codec` can go to the GPU.
    pub fn gpu_for(&self, codec: CodecId) -> bool {
        self.gpu_tx.is_some() && self.gpu_codecs.contains(&codec)
    }

    /// The counters.
    pub fn counters(&self) -> &Arc<Counters> {
        &self.counters
    }

    /// Encodes frame `frame` of an object with `gpu_codec` on the GPU if possible, else with the CPU
    /// `codec`; calls `done` with the result on some worker thread.
    pub fn submit(
        &self,
        ctx: Arc<ObjectContext>,
        codec: Arc<dyn Codec>,
        gpu_codec: CodecId,
        frame: u64,
        raw: Vec<u8>,
        done: impl FnOnce(EncodedFrame) + Send + 'static,
    ) {
        let done: Done = Box::new(done);
        if let Some(tx) = self.gpu_tx.as_ref().filter(|_| self.gpu_for(gpu_codec)) {
            if crate::detect::looks_compressed(&raw) {
                self.counters.fallback_not_smaller.fetch_add(1, Ordering::Relaxed);
                return cpu(ctx, Arc::new(crate::codec::NoneCodec), frame, raw, done);
            }
            match tx.try_send(Job { ctx, codec, gpu_codec, frame, raw, done }) {
                Ok(()) => return,
                Err(TrySendError::Full(j) | TrySendError::Disconnected(j)) => {
                    self.counters.fallback_queue_full.fetch_add(1, Ordering::Relaxed);
                    return cpu(j.ctx, j.codec, j.frame, j.raw, j.done);
                }
            }
        }
        self.counters.cpu_frames.fetch_add(1, Ordering::Relaxed);
        cpu(ctx, codec, frame, raw, done)
    }
}

/// Frames this small are encoded on the submitting thread: a few microseconds of work, less than
/// waking a pool thread (whose idle spinning cost small-file workloads a fifth of the CPU).
pub const INLINE_MAX: usize = 64 << 10;

fn cpu(ctx: Arc<ObjectContext>, codec: Arc<dyn Codec>, frame: u64, raw: Vec<u8>, done: Done) {
    if raw.len() <= INLINE_MAX {
        return done(encode_frame(&ctx, codec.as_ref(), frame, &raw));
    }
    crate::workers::spawn(move || done(encode_frame(&ctx, codec.as_ref(), frame, &raw)));
}

/// Longest a batch waits for company, in batch windows.
#[cfg(feature = "gpu")]
const MAX_WAIT_WINDOWS: u32 = 20;

#[cfg(feature = "gpu")]
fn gpu_loop(gpu: Arc<crate::gpu::Gpu>, rx: Receiver<Job>, cfg: DispatchConfig, c: Arc<Counters>) {
    while let Ok(first) = rx.recv() {
        // A batch waits for company while frames keep coming: it launches once none has arrived
        // for the window, or the floor or item count is reached, or it has waited
        // `MAX_WAIT_WINDOWS` windows. (A fixed window from the first frame launched a writer's
        // stream in batches of the few frames that arrived in 5 ms, where a launch of 1 MiB
        // frames needs hundreds to be efficient.)
        let started = Instant::now();
        let mut last = started;
        let mut bytes = first.raw.len();
        let mut urgent = first.raw.len() >= cfg.min_bytes;
        let mut batch = vec![first];
        while batch.len() < cfg.batch_max_items && bytes < cfg.batch_floor_bytes {
            // Large frames launch with whatever is already queued; small ones wait for company.
            let next = if urgent {
                rx.try_recv().map_err(|_| RecvTimeoutError::Timeout)
            } else {
                let deadline = (last + cfg.batch_window).min(started + cfg.batch_window * MAX_WAIT_WINDOWS);
                rx.recv_timeout(deadline.saturating_duration_since(Instant::now()))
            };
            match next {
                Ok(j) => {
                    bytes += j.raw.len();
                    urgent |= j.raw.len() >= cfg.min_bytes;
                    batch.push(j);
                    last = Instant::now();
                }
                Err(_) => break,
            }
        }
        // One launch per codec present in the batch.
        let mut by_codec: Vec<(CodecId, Vec<Job>)> = Vec::new();
        for j in batch {
            match by_codec.iter_mut().find(|(id, _)| *id == j.gpu_codec) {
                Some((_, v)) => v.push(j),
                None => by_codec.push((j.gpu_codec, vec![j])),
            }
        }
        for (id, jobs) in by_codec {
            run_batch(&gpu, id, jobs, cfg.data_type, &c);
        }
    }
}

#[cfg(feature = "gpu")]
fn run_batch(gpu: &crate::gpu::Gpu, id: CodecId, jobs: Vec<Job>, data_type: i32, c: &Counters) {
    let start = Instant::now();
    tracing::debug!(frames = jobs.len(), codec = %id, "GPU batch launching");
    let chunks: Vec<&[u8]> = jobs.iter().map(|j| j.raw.as_slice()).collect();
    let result = gpu.compress_batch(id, &chunks, data_type);
    c.gpu_nanos.fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
    match result {
        Ok(outs) => {
            c.gpu_batches.fetch_add(1, Ordering::Relaxed);
            for (j, out) in jobs.into_iter().zip(outs) {
                c.gpu_bytes_in.fetch_add(j.raw.len() as u64, Ordering::Relaxed);
                match out {
                    Some(payload) => {
                        c.gpu_frames.fetch_add(1, Ordering::Relaxed);
                        c.gpu_bytes_out.fetch_add(payload.len() as u64, Ordering::Relaxed);
                        crate::workers::spawn(move || {
                            let mut bytes =
                                Vec::with_capacity(FRAME_HEADER_LEN + payload.len() + crate::format::TAG_LEN);
                            bytes.resize(FRAME_HEADER_LEN, 0);
                            bytes.extend_from_slice(&payload);
                            (j.done)(finish_frame(&j.ctx, j.frame, &j.raw, id, bytes))
                        });
                    }
                    None => {
                        c.fallback_not_smaller.fetch_add(1, Ordering::Relaxed);
                        cpu(j.ctx, Arc::new(crate::codec::NoneCodec), j.frame, j.raw, j.done);
                    }
                }
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, frames = jobs.len(), "GPU batch failed; compressing on the CPU");
            for j in jobs {
                c.fallback_error.fetch_add(1, Ordering::Relaxed);
                cpu(j.ctx, j.codec, j.frame, j.raw, j.done);
            }
        }
    }
}
