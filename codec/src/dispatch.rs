//! The frame dispatcher: one queue for frames from every open file, taken from by whichever is
//! free first — the CPU workers, a frame at a time, or a batch back end (the GPU, batched nVCOMP
//! launches), as many as are waiting. Idle cores take frames at once; when every core is busy the
//! queue grows and the GPU takes it in large launches, so the GPU adds to what the cores do. On a
//! mount (`DispatchConfig::gpu_first`) a GPU measured at least as fast as the cores comes first
//! instead: the cores leave it enough frames for its next launches (see `Share`); and while many
//! of its files write at once (`DispatchConfig::many_streams`) their frames go to a queue of the
//! GPU's own, launched as they come, as with `--gpu on`. A launch with too few shared frames to pay
//! for itself, any GPU failure, a full queue, or output not smaller than its input sends frames
//! down the CPU path: a write never fails because of the GPU. Every outcome is counted. With `auto` the
//! GPU starts on its own thread while the cores take every frame, and joins once warmed up.
//! Reads' batches are decoded on the GPU with `on`, and with `auto` where it is measured to hand
//! them back sooner than the cores (`crate::decoderoute`).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TrySendError};

use crate::codec::{Codec, CodecId, ZstdCodec};
use crate::decoderoute::{DecodeOn, DecodeRoute};
use crate::frame::{EncodedFrame, ObjectContext, encode_frame_owned, finish_payload};
use crate::framebuf::{Buffers, FrameBuf};

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
    /// Most frames in one launch.
    pub batch_max_items: usize,
    /// How long the GPU lets frames pile up in the shared queue before it leaves them to the CPU;
    /// with `one_stream`, a launch gathers for up to `GATHER_WINDOWS` of these while frames keep
    /// coming.
    pub batch_window: Duration,
    /// Bytes the launches gather, shared by the launches that run at once (with `one_stream`);
    /// a launch goes as soon as its share waits.
    pub batch_floor_bytes: usize,
    /// Frames waiting for the GPU beyond which new ones go to the CPU.
    pub queue_max: usize,
    /// Fewest waiting frames worth a launch; fewer are left to the CPU workers (a launch costs
    /// milliseconds whatever its size). With `GpuPolicy::On` the GPU takes whatever waits.
    pub min_items: usize,
    /// nVCOMP data type hint for Cascaded and Bitcomp (0 bytes, 4 int32, 5 uint32, 6 int64, ...).
    pub data_type: i32,
    /// Bytes the work will compress, where known (a `pack` of a file): with `GpuPolicy::Auto`, less
    /// than [`auto_min_bytes`] for this host's cores does not start the GPU.
    pub expected_bytes: Option<u64>,
    /// Launches run as one stream: two at once, each gathering a full launch while frames keep
    /// coming (a launch takes about as long whatever its size), and the cores go on with the
    /// frames behind them meanwhile. The command line sets it for `pack` (which then keeps
    /// [`Dispatcher::stream_window`] frames in flight) and for mounts (whose writers keep
    /// [`Dispatcher::frames_in_flight`] each). Otherwise one launch at a time takes what waits.
    /// Either way `auto` launches only when a launch is measured to take half the cores' time
    /// for its frames (BENCHMARKS.md §9: on a busy host, launching whenever a full launch waited
    /// made `pack` slower than the cores), unless `gpu_first`.
    pub one_stream: bool,
    /// With `GpuPolicy::Auto`, the GPU comes first once it is measured at least as fast as the
    /// cores: the CPU workers take only what waits beyond its next launches (see `Share`). For
    /// many streams at once (a mount's writers), where a launch holding some streams' frames
    /// leaves the others flowing: on the H100 host 8 writers moved 1.0-1.2x the cores' rate idle
    /// and 1.4-1.6x with 16 busy loops beside, where `auto` had been 0.8-1.0x. One ordered stream
    /// (`pack`) waits for every frame a launch holds, and was slower that way (0.7-0.9x).
    pub gpu_first: bool,
    /// With `GpuPolicy::Auto`, once this many streams write at once (see
    /// [`Dispatcher::stream`]: a mount's files past their first frames, each with a frame sent
    /// within [`STREAM_ACTIVE`]), their zstd frames go to the GPU alone, as with `GpuPolicy::On`:
    /// through a queue of the GPU's own that no CPU turn takes from, launched whatever was
    /// measured, and their writers keep `on`'s window.
    /// Many streams keep full launches coming, and cores that compress beside them slow the
    /// writers' and the launches' host side: on the H100 host 2 to 8 writers moved 1.04-1.54x
    /// what the cores alone moved, where sharing as measured gave 0.95-1.4x (BENCHMARKS.md §9,
    /// session 21). One stream keeps the measured sharing: alone on the GPU one writer moved
    /// 0.6-0.9x the cores' rate. 0: never.
    pub many_streams: usize,
    /// Added to the process's nice value for the thread that starts the GPU and launches on it,
    /// and for the threads it starts (which inherit it): a launch's host side (staging copies,
    /// waits) needs a core at each step, and on a busy host it waited behind every CPU-bound
    /// process (issue 15: `--gpu on` with 16 busy loops beside moved 1.5x more at -10). Only root
    /// or CAP_SYS_NICE may raise a priority; elsewhere the threads keep theirs. 0 asks nothing.
    pub launch_nice: i32,
    /// How long, with `GpuPolicy::Auto`, the way a read's batches are not decoded goes untried
    /// (`crate::decoderoute`).
    pub decode_retry: Duration,
    /// How the GPU back end runs, once started (lanes, copies, where nVCOMP is).
    pub gpu: crate::gpuconfig::GpuConfig,
}

/// Least work for which `GpuPolicy::Auto` starts the GPU: what the cores compress in three to
/// four times what a GPU costs a process whatever it does (its start: driver, context and
/// nVCOMP, 0.23-0.39 s; its warm-up launches, about 0.2 s; the driver's teardown as the process
/// ends, about 0.2 s: 0.65-0.8 s on the H200 host, whose 16 cores pack real files at 2.7-4 GB/s,
/// about 200 MB/s each; BENCHMARKS.md §9, session 22), so a GPU that joins late still has most
/// of the work ahead of it. Below it the cores finish first and the GPU only costs: at 4 GiB on
/// 16 cores, `auto` ran 0.80-1.05x `off` there with a GPU that took no frame.
pub fn auto_min_bytes(cores: usize) -> u64 {
    cores.max(1) as u64 * (512 << 20)
}

impl Default for DispatchConfig {
    fn default() -> Self {
        DispatchConfig {
            policy: GpuPolicy::Auto,
            // nVCOMP works on a batch's chunks in parallel: a launch needs many frames to be
            // efficient (measured on an H100: 16 frames of 1 MiB run at ~0.4 GB/s, 256 at ~5 GB/s),
            // so even 1 MiB frames wait briefly for company.
            batch_max_items: 1024,
            batch_window: Duration::from_millis(5),
            batch_floor_bytes: 256 << 20,
            queue_max: 4096,
            min_items: 32,
            data_type: 0,
            expected_bytes: None,
            one_stream: false,
            gpu_first: false,
            many_streams: 0,
            launch_nice: -10,
            decode_retry: crate::decoderoute::RETRY_AFTER,
            gpu: crate::gpuconfig::GpuConfig::default(),
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
    /// Times the GPU left the waiting frames to the CPU workers: too few waited to pay for a
    /// launch, or the CPU was measured to finish them sooner.
    pub gpu_declined: AtomicU64,
    /// Launches on copies of waiting frames, to measure the back end (their output is dropped).
    pub gpu_tries: AtomicU64,
    /// Wall nanoseconds of the frames the CPU workers took from the shared queue (for routing).
    pub cpu_nanos: AtomicU64,
    /// Frames counted in `cpu_nanos`.
    pub cpu_timed_frames: AtomicU64,
    /// Frames decoded on the GPU (reads).
    pub gpu_decoded_frames: AtomicU64,
    /// Tries of the GPU on a copy of a read batch beside the CPU, to measure it (`auto`),
    /// however they ended.
    pub gpu_decode_tries: AtomicU64,
    /// Read batches sent back to the CPU because GPU decoding failed.
    pub gpu_decode_fallback: AtomicU64,
}

impl Counters {
    /// Mean wall time of a frame the CPU workers took from the shared queue.
    fn cpu_ns_per_frame(&self) -> Option<f64> {
        let n = self.cpu_timed_frames.load(Ordering::Relaxed);
        (n > 0).then(|| self.cpu_nanos.load(Ordering::Relaxed) as f64 / n as f64)
    }

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
            ("gpu_declined", g(&self.gpu_declined)),
            ("gpu_tries", g(&self.gpu_tries)),
            ("gpu_decoded_frames", g(&self.gpu_decoded_frames)),
            ("gpu_decode_tries", g(&self.gpu_decode_tries)),
            ("gpu_decode_fallback", g(&self.gpu_decode_fallback)),
        ]
    }
}

type Done = Box<dyn FnOnce(EncodedFrame) + Send>;

/// Why a batch back end failed a launch (its frames then go to the CPU).
pub type BackendError = Box<dyn std::error::Error + Send + Sync>;

/// What a batch back end returns for a launch: each chunk's compressed bytes, or `None` where
/// they did not shrink.
pub type BatchResult = Result<Vec<Option<Vec<u8>>>, BackendError>;

/// A compressor of many frames at once beside the CPU workers: the GPU, or a test's stand-in
/// with chosen speeds and failures.
pub trait BatchBackend: Send + Sync + 'static {
    /// Compresses each chunk with `codec` as a standard payload of that codec; `None` for a chunk
    /// whose output would not be smaller.
    fn compress_batch(&self, codec: CodecId, chunks: &[&[u8]], data_type: i32) -> BatchResult;

    /// Does once, before any frame, what a first launch would otherwise pay for (buffers,
    /// kernels), for launches of up to `frames` 1 MiB frames from each of `slots` launching
    /// threads: the first real launch then holds its frames no longer than later ones.
    fn warm_up(&self, slots: usize, frames: usize) {
        let _ = (slots, frames);
    }

    /// Launches that may run at once (each from its own thread), so one launch's host work
    /// (staging, collecting) overlaps another's kernels.
    fn concurrency(&self) -> usize {
        1
    }

    /// [`Self::compress_batch`] from launching thread `slot.0` of `slot.1` running at once, so a
    /// back end can give each its own share of its resources.
    fn compress_batch_in(&self, slot: (usize, usize), codec: CodecId, chunks: &[&[u8]], data_type: i32) -> BatchResult {
        let _ = slot;
        self.compress_batch(codec, chunks, data_type)
    }

    /// Whether it decodes ([`Self::decompress_batch`]); reads' batches are offered to it only
    /// then.
    fn decodes(&self) -> bool {
        false
    }

    /// Decompresses each standard `codec` payload to its `raw_lens` bytes (reads); a back end
    /// that does not decode fails, and its batches are decoded on the CPU.
    fn decompress_batch(
        &self,
        codec: CodecId,
        payloads: &[&[u8]],
        raw_lens: &[usize],
    ) -> Result<Vec<Vec<u8>>, BackendError> {
        let _ = (codec, payloads, raw_lens);
        Err("this back end does not decode".into())
    }
}

#[cfg(feature = "gpu")]
impl BatchBackend for crate::gpu::Gpu {
    fn compress_batch(&self, codec: CodecId, chunks: &[&[u8]], data_type: i32) -> BatchResult {
        crate::gpu::Gpu::compress_batch(self, codec, chunks, data_type).map_err(|e| Box::new(e) as BackendError)
    }

    fn concurrency(&self) -> usize {
        crate::gpu::Gpu::CONCURRENT_BATCHES
    }

    fn compress_batch_in(&self, slot: (usize, usize), codec: CodecId, chunks: &[&[u8]], data_type: i32) -> BatchResult {
        crate::gpu::Gpu::compress_batch_in(self, slot, codec, chunks, data_type)
            .map_err(|e| Box::new(e) as BackendError)
    }

    fn decodes(&self) -> bool {
        true
    }

    fn decompress_batch(
        &self,
        codec: CodecId,
        payloads: &[&[u8]],
        raw_lens: &[usize],
    ) -> Result<Vec<Vec<u8>>, BackendError> {
        crate::gpu::Gpu::decompress_batch(self, codec, payloads, raw_lens, 0).map_err(|e| Box::new(e) as BackendError)
    }

    fn warm_up(&self, slots: usize, frames: usize) {
        // Zeros: the kernels are quick, and the buffers grow to the launches' size (growing them
        // later would put the allocations, page-locked host memory above all, in a launch's way).
        // (zstd, the default, at full size; the buffers then fit LZ4's launches too.)
        self.register_frame_buffers();
        let frame = vec![0u8; 1 << 20];
        for codec in [CodecId::Zstd, CodecId::Lz4].into_iter().filter(|c| self.codecs().contains(c)) {
            let batch = vec![&frame[..]; if codec == CodecId::Zstd { frames.max(1) } else { 1 }];
            for slot in 0..slots.max(1) {
                if let Err(e) = crate::gpu::Gpu::compress_batch_in(self, (slot, slots.max(1)), codec, &batch, 0) {
                    tracing::debug!(error = %e, %codec, "GPU warm-up launch failed");
                }
            }
        }
    }
}

struct Job {
    ctx: Arc<ObjectContext>,
    codec: Arc<dyn Codec>,
    gpu_codec: CodecId,
    frame: u64,
    raw: FrameBuf,
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
    /// The shared queue, both ends: frames go in, and each frame's CPU turn takes one out.
    gpu_tx: Option<(Sender<Job>, Receiver<Job>)>,
    /// `GpuPolicy::On`: the GPU takes every frame it can (the CPU only what it hands back).
    gpu_only: bool,
    /// Fewest waiting frames worth a launch.
    min_items: usize,
    /// Most bytes in one launch (`batch_floor_bytes`), for [`Self::stream_window`].
    launch_bytes: usize,
    /// The batch back end once it has started, or why none did; until then every frame is the
    /// CPU's (`auto` starts the GPU in the background, so nothing waits for it).
    started: Arc<Started>,
    counters: Arc<Counters>,
    /// What the CPU turns and the launching threads agree on (`auto`).
    share: Arc<Share>,
    /// The queue of frames for the GPU alone (many streams, `DispatchConfig::many_streams`),
    /// both ends: no CPU turn takes from it, only the launching threads (and, if they die, the
    /// drain to the cores).
    alone: Option<(Sender<Job>, Receiver<Job>)>,
    /// Streams writing ([`Self::stream`]), and how many at once send their frames to the GPU
    /// alone (`DispatchConfig::many_streams`; 0: never).
    streams: Arc<Streams>,
    many_streams: usize,
    /// Where reads' batches are decoded under `auto` (see [`Self::decode_on`]).
    decode: DecodeRoute,
    /// What the dispatcher is while its back end starts, or why it has none.
    before: String,
}

/// How `auto` shares the waiting frames between the GPU and the CPU workers. With
/// `DispatchConfig::gpu_first`, while the GPU is measured to keep up (see [`Measured::decide`])
/// it comes first: a CPU turn takes a frame only while more than `reserve` frames wait (enough
/// for every launching thread's next launch), so the GPU always finds its next launches waiting
/// and the cores take the rest. (Taking frames as they came free, the cores kept the queue short
/// of a launch and the GPU idle; and busy on every core, they slowed the FUSE threads and the
/// launches' host side: issue 15, BENCHMARKS.md §9.) A launching thread gives the turns it was
/// left back to the workers whenever it does not launch (so a small write that comes after a
/// burst, while the reserve still stands, waits one batch window for the cores), and when it
/// ends however it ends (see [`Launching`]).
#[derive(Default)]
struct Share {
    /// Waiting frames the CPU turns leave to the GPU; 0 while it does not come first.
    reserve: AtomicUsize,
    /// CPU turns that left their frame to the GPU, to be given back.
    deferred: AtomicUsize,
    /// Set once a launching thread has ended (a panic, or the queue closed): turns take their
    /// frames from then on.
    ended: std::sync::atomic::AtomicBool,
}

/// A frame's CPU turn: a worker that comes free takes the oldest waiting frame, unless the GPU
/// took them all first, or (not `forced`) it comes first and no more than its reserve waits.
fn cpu_turn(rx: &Receiver<Job>, c: &Counters, share: &Share, forced: bool) {
    if !forced && !share.ended.load(Ordering::SeqCst) && rx.len() <= share.reserve.load(Ordering::Acquire) {
        share.deferred.fetch_add(1, Ordering::SeqCst);
        // (Counted after the last launching thread gave its turns back, this one would never be
        // given back: then it takes its frame itself. Given back twice, a turn finds nothing.)
        if !share.ended.load(Ordering::SeqCst) {
            return;
        }
    }
    if let Ok(j) = rx.try_recv() {
        let started = Instant::now();
        let frame = encode_frame_owned(&j.ctx, j.codec.as_ref(), j.frame, j.raw);
        c.cpu_nanos.fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        c.cpu_timed_frames.fetch_add(1, Ordering::Relaxed);
        c.cpu_frames.fetch_add(1, Ordering::Relaxed);
        (j.done)(frame);
    }
}

impl Share {
    /// The GPU stops coming first: the turns left to it run now (as many as frames wait; the
    /// count of those the GPU took meanwhile is dropped, and a turn counted after this call is
    /// given back by a launching thread's next pass, which comes while any frame waits, or, once
    /// none is left, takes its frame itself).
    fn give_back(self: &Arc<Self>, rx: &Receiver<Job>, c: &Arc<Counters>) {
        self.reserve.store(0, Ordering::Release);
        for _ in 0..self.deferred.swap(0, Ordering::SeqCst).min(rx.len()) {
            let (rx, c, share) = (rx.clone(), c.clone(), self.clone());
            crate::workers::spawn(move || cpu_turn(&rx, &c, &share, true));
        }
    }
}

/// A launching thread's hold on the [`Share`]: however the thread ends (the queue closed, or a
/// panic in a launch), turns stop leaving their frames to the GPU and those left run.
struct Launching<'a> {
    share: &'a Arc<Share>,
    rx: &'a Receiver<Job>,
    c: &'a Arc<Counters>,
}

impl Drop for Launching<'_> {
    fn drop(&mut self) {
        self.share.ended.store(true, Ordering::SeqCst);
        self.share.give_back(self.rx, self.c);
    }
}

/// How the start of a batch back end ended, once it has.
#[derive(Default)]
struct Started {
    outcome: OnceLock<Outcome>,
    /// Set when the dispatcher is dropped: a start still under way skips its warm-up.
    stop: std::sync::atomic::AtomicBool,
    /// Set when every launching thread has died (a panic in the back end): frames no longer go
    /// to the GPU's queue, and what waits there goes to the CPU.
    gone: std::sync::atomic::AtomicBool,
    /// Set with `outcome`, for [`Dispatcher::wait_started`].
    done: Mutex<bool>,
    signal: Condvar,
}

/// The codecs a started back end takes and what it is (none, and why, when it did not start).
struct Outcome {
    codecs: Vec<CodecId>,
    describe: String,
    /// Where new frames get their buffers (the GPU's page-locked pool).
    buffers: Buffers,
    /// The started back end, which also decodes reads' batches (see [`Dispatcher::decode_on`]).
    decoder: Option<Arc<dyn BatchBackend>>,
}

impl Started {
    fn finish(&self, outcome: Outcome) {
        let _ = self.outcome.set(outcome);
        *self.done.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = true;
        self.signal.notify_all();
    }
}

/// A batch back end, started: what takes the batches, the codecs it takes and what it is.
pub struct Backend {
    /// Takes the batches.
    pub batches: Arc<dyn BatchBackend>,
    /// Codecs it takes.
    pub codecs: Vec<CodecId>,
    /// What it is, for logs and `describe`.
    pub describe: String,
    /// Where new frames get their buffers while it runs (a pool it copies from directly).
    pub buffers: Buffers,
}

impl Backend {
    /// `batches`, taking frames of `codecs` (tests pass stand-ins with chosen speeds and failures).
    pub fn new(batches: Arc<dyn BatchBackend>, codecs: Vec<CodecId>, describe: &str) -> Self {
        Backend { batches, codecs, describe: describe.to_owned(), buffers: Buffers::default() }
    }

    /// The GPU as a back end.
    #[cfg(feature = "gpu")]
    fn gpu(gpu: crate::gpu::Gpu) -> Self {
        let (codecs, describe, buffers) = (gpu.codecs(), gpu.describe.clone(), gpu.frame_buffers());
        Backend { batches: Arc::new(gpu), codecs, describe, buffers }
    }
}

/// Starts a batch back end, or says in one line why it cannot.
pub type Start = Box<dyn FnOnce() -> Result<Backend, String> + Send>;

impl Drop for Dispatcher {
    /// Waits for a back end still starting: a process must not end while that thread is inside
    /// the GPU driver (ending then crashed the driver's own teardown, measured on an H100).
    fn drop(&mut self) {
        self.started.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        self.wait_started();
    }
}

impl std::fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Dispatcher({})", self.describe())
    }
}

/// Adds `by` to the calling thread's nice value (within -20..=19), for it and the threads it
/// starts later (they inherit it); where the process may not raise its priority, the thread
/// keeps its own (logged at debug level, naming `whose` threads).
pub fn ask_priority(by: i32, whose: &str) {
    if by == 0 {
        return;
    }
    // (On Linux a "process" priority with no pid is the calling thread's.)
    let Ok(now) = rustix::process::getpriority_process(None) else { return };
    let want = (now + by).clamp(-20, 19);
    if let Err(e) = rustix::process::setpriority_process(None, want) {
        tracing::debug!(nice = want, error = %e, "{whose} threads keep their priority");
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
        let started = Arc::new(Started::default());
        started.finish(Outcome {
            codecs: vec![],
            describe: why.to_owned(),
            buffers: Buffers::default(),
            decoder: None,
        });
        Dispatcher {
            gpu_tx: None,
            gpu_only: false,
            min_items: 1,
            launch_bytes: 0,
            started,
            counters: Arc::default(),
            share: Arc::default(),
            alone: None,
            streams: Arc::default(),
            many_streams: 0,
            decode: DecodeRoute::default(),
            before: why.into(),
        }
    }

    /// Probes the GPU as the policy says; `Err` only for `GpuPolicy::On` without a usable GPU,
    /// or when the GPU's thread cannot start. With `GpuPolicy::Auto` the GPU starts in the
    /// background (driver, context and nVCOMP take a few hundred milliseconds) while the cores
    /// take every frame; [`Self::wait_started`] waits for it.
    pub fn new(cfg: DispatchConfig) -> Result<Self, DispatchError> {
        if cfg.policy == GpuPolicy::Off {
            return Ok(Self::cpu_only("GPU off by policy"));
        }
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        if cfg.policy == GpuPolicy::Auto
            && let Some(n) = cfg.expected_bytes
            && n < auto_min_bytes(cores)
        {
            let why = format!("{n} bytes to compress: {cores} cores finish them before a GPU would start");
            tracing::info!("GPU not used: {why}");
            return Ok(Self::cpu_only(&why));
        }
        #[cfg(feature = "gpu")]
        {
            use crate::gpu::{Gpu, GpuUnavailable, driver_present};
            if cfg.policy == GpuPolicy::On {
                let backend = Backend::gpu(Gpu::probe(&cfg.gpu).map_err(DispatchError::GpuRequired)?);
                tracing::info!(gpu = %backend.describe, "GPU compression enabled");
                return Self::with_backend(backend, cfg);
            }
            if !driver_present() {
                let why = GpuUnavailable::NoDriver.to_string();
                tracing::info!("GPU not used: {why}; compressing on the CPU");
                return Ok(Self::cpu_only(&why));
            }
            let gpu_cfg = cfg.gpu.clone();
            let start: Start = Box::new(move || match Gpu::probe(&gpu_cfg) {
                Ok(gpu) => {
                    let backend = Backend::gpu(gpu);
                    tracing::info!(gpu = %backend.describe, "GPU compression enabled");
                    Ok(backend)
                }
                Err(why) => {
                    let why = one_line(&why);
                    tracing::info!("GPU not used: {why}; compressing on the CPU");
                    Err(why)
                }
            });
            Self::starting(start, "GPU starting", cfg)
        }
        #[cfg(not(feature = "gpu"))]
        {
            if cfg.policy == GpuPolicy::On {
                return Err(DispatchError::NoGpuBackEnd);
            }
            Ok(Self::cpu_only("this build has no GPU back end"))
        }
    }

    /// A dispatcher that shares its frames between the CPU workers and `backend`, started.
    pub fn with_backend(backend: Backend, cfg: DispatchConfig) -> Result<Self, DispatchError> {
        let d = Self::starting(Box::new(move || Ok(backend)), "starting", cfg)?;
        d.wait_started();
        Ok(d)
    }

    /// A dispatcher whose batch back end `start` brings up on the back end's own thread: until
    /// it has, or if it cannot, the CPU workers take every frame (`before` says what it is
    /// meanwhile).
    pub fn starting(start: Start, before: &str, cfg: DispatchConfig) -> Result<Self, DispatchError> {
        let (gpu_only, min_items, launch_bytes, many_streams) =
            (cfg.policy == GpuPolicy::On, cfg.min_items.max(1), cfg.batch_floor_bytes.max(1), cfg.many_streams);
        let decode_retry = cfg.decode_retry;
        let (tx, rx) = crossbeam_channel::bounded(cfg.queue_max.max(1));
        let (alone_tx, alone_rx) = crossbeam_channel::bounded(cfg.queue_max.max(1));
        let counters: Arc<Counters> = Arc::default();
        let started: Arc<Started> = Arc::default();
        let share: Arc<Share> = Arc::default();
        let (c, batches, outcome, shared) = (counters.clone(), rx.clone(), started.clone(), share.clone());
        let alones = alone_rx.clone();
        let nice = cfg.launch_nice;
        // The CPU workers start now if they have not: threads the GPU's thread started would
        // inherit its priority.
        let _ = crate::workers::threads();
        let start = move || {
            ask_priority(nice, "the GPU's");
            start()
        };
        std::thread::Builder::new()
            .name("shrinkfs-gpu".into())
            .spawn(move || match start() {
                // Dropped while starting (a short `pack`): no frame will come, so the warm-up
                // launches would only delay the exit; the GPU is let go before `done` is said.
                Ok(b) if outcome.stop.load(std::sync::atomic::Ordering::SeqCst) => {
                    drop(b);
                    outcome.finish(Outcome {
                        codecs: vec![],
                        describe: "stopped while starting".into(),
                        buffers: Buffers::default(),
                        decoder: None,
                    });
                }
                Ok(b) => {
                    // Started means warmed up too (until then the CPU workers take every frame),
                    // so a dispatcher dropped after `wait_started` leaves no GPU work running.
                    // One launching thread per launch the back end runs at once (one, unless
                    // `DispatchConfig::one_stream`).
                    let threads = if cfg.one_stream { b.batches.concurrency().max(1) } else { 1 };
                    // (`auto` warms up to the size of its first launches, the ones that measure
                    // the GPU: the GPU may never take a frame, and a full-size warm-up costs the
                    // cores a copy of a few hundred MiB. Where it may come first, a mount's, it
                    // warms up to full launches like `on`: growing its buffers at its first full
                    // launches instead cost 8 writers on a busy H100 host about a tenth of their
                    // rate, BENCHMARKS.md §9.)
                    let full = cfg.one_stream && (cfg.policy == GpuPolicy::On || cfg.gpu_first);
                    let probe = cfg.min_items.max(1).min(launch_frames(&cfg, threads));
                    let frames = if full { launch_frames(&cfg, threads) } else { probe };
                    b.batches.warm_up(threads, frames);
                    outcome.finish(Outcome {
                        codecs: b.codecs,
                        describe: b.describe,
                        buffers: b.buffers,
                        decoder: Some(b.batches.clone()),
                    });
                    let measured = Mutex::new(Measured::default());
                    let alive = AtomicUsize::new(threads);
                    std::thread::scope(|s| {
                        for k in 1..threads {
                            let (batches, cfg, c, shared) = (batches.clone(), cfg.clone(), c.clone(), shared.clone());
                            let alones = alones.clone();
                            let (backend, measured) = (b.batches.as_ref(), &measured);
                            let queues = [batches.clone(), alones.clone()];
                            let dying = Dying { alive: &alive, started: &outcome, queues, c: c.clone() };
                            s.spawn(move || {
                                let _dying = dying;
                                let queues = Queues { shared: batches, alone: alones };
                                batch_loop(backend, queues, &cfg, (k, threads), &c, &shared, measured)
                            });
                        }
                        let queues = [batches.clone(), alones.clone()];
                        let _dying = Dying { alive: &alive, started: &outcome, queues, c: c.clone() };
                        let queues = Queues { shared: batches, alone: alones };
                        batch_loop(b.batches.as_ref(), queues, &cfg, (0, threads), &c, &shared, &measured);
                    });
                }
                Err(why) => outcome.finish(Outcome {
                    codecs: vec![],
                    describe: why,
                    buffers: Buffers::default(),
                    decoder: None,
                }),
            })
            .map_err(DispatchError::Thread)?;
        Ok(Dispatcher {
            gpu_tx: Some((tx, rx)),
            gpu_only,
            min_items,
            launch_bytes,
            started,
            counters,
            share,
            alone: Some((alone_tx, alone_rx)),
            streams: Arc::default(),
            many_streams,
            decode: DecodeRoute::new(decode_retry),
            before: before.into(),
        })
    }

    /// Waits until the batch back end has started, or has failed to (at once without one).
    pub fn wait_started(&self) {
        let mut done = self.started.done.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        while !*done {
            done = self.started.signal.wait(done).unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }

    /// What the GPU (or other batch back end) is, or why none is used, or that it is starting.
    pub fn describe(&self) -> String {
        self.started.outcome.get().map_or_else(|| self.before.clone(), |o| o.describe.clone())
    }

    /// Where a producer gets the buffer of its next frame: the GPU's page-locked pool once the GPU
    /// runs (its launches then copy the frame to the device without staging it), while the
    /// pool has one free; the heap otherwise.
    pub fn buffers(&self) -> Buffers {
        self.started.outcome.get().map(|o| o.buffers.clone()).unwrap_or_default()
    }

    /// Frames a producer should keep in flight: two per CPU worker; with the GPU taking every
    /// frame (`--gpu on`), 512 (four launches of 128 1 MiB frames: two running, two gathering);
    /// shared with the CPU (`auto`), twice `min_items`, enough for the backlog of several
    /// producers to make a launch — more would only hold memory while the cores keep up.
    pub fn frames_in_flight(&self) -> usize {
        let cpu = cores_window();
        match &self.gpu_tx {
            None => cpu,
            Some(_) if self.gpu_only => cpu.max(512),
            Some(_) => cpu.max(2 * self.min_items),
        }
    }

    /// Frames of `frame_size` bytes one long ordered stream (a `pack`, with
    /// [`DispatchConfig::one_stream`]) should keep in flight: with a GPU that may take some, the
    /// cores' share plus twice the launch bytes (`batch_floor_bytes`, shared by the launching
    /// threads: with two, four launches, two running at once, the next gathering, and room for
    /// the frames the cores go on with while launches hold the oldest ones); without one, what
    /// [`Self::frames_in_flight`] says.
    pub fn stream_window(&self, frame_size: usize) -> usize {
        match &self.gpu_tx {
            Some(_) if !self.gpu_only => {
                cores_window() + (2 * self.launch_bytes / frame_size.max(1)).max(self.min_items)
            }
            _ => self.frames_in_flight(),
        }
    }

    /// Decompresses a batch of checked, unsealed payloads of one codec on the GPU; `None` when
    /// there is no GPU for it or the GPU failed (the caller decodes on the CPU; see
    /// [`Self::gpu_decode_failed`]). `trying`: a copy decoded to measure the GPU
    /// ([`DecodeOn::CpuTryingGpu`]). The caller checks the output, then counts what it keeps
    /// ([`Self::gpu_decoded`]).
    pub fn gpu_decompress(
        &self,
        codec: CodecId,
        payloads: &[&[u8]],
        raw_lens: &[usize],
        trying: bool,
    ) -> Option<Vec<Vec<u8>>> {
        let decoder = self.started.outcome.get().and_then(|o| o.decoder.as_ref()).filter(|_| self.gpu_for(codec))?;
        match decoder.decompress_batch(codec, payloads, raw_lens) {
            Ok(out) if out.len() == payloads.len() => Some(out),
            Ok(_) => {
                self.gpu_decode_failed(codec, trying, "a frame missing from its output");
                None
            }
            Err(e) => {
                self.gpu_decode_failed(codec, trying, &e.to_string());
                None
            }
        }
    }

    /// Counts `frames` the GPU decoded that were checked and handed to readers.
    pub fn gpu_decoded(&self, frames: usize) {
        self.counters.gpu_decoded_frames.fetch_add(frames as u64, Ordering::Relaxed);
    }

    /// Records that a GPU decode of `codec` failed (an error, a panic, output that does not
    /// check): a batch decoded for real is counted as sent back to the CPU, and under `auto` the
    /// GPU is left until it is due for a try again.
    pub fn gpu_decode_failed(&self, codec: CodecId, trying: bool, why: &str) {
        if trying {
            tracing::debug!(error = why, "GPU decode tried and failed");
        } else {
            tracing::warn!(error = why, "GPU decode failed; decoding on the CPU");
            self.counters.gpu_decode_fallback.fetch_add(1, Ordering::Relaxed);
        }
        self.decode.record_failure(codec);
    }

    /// Where a batch of `codec` frames read together is decoded: on the GPU with `--gpu on`;
    /// with `auto`, on whichever of the GPU and the CPU workers was last measured to hand back
    /// a batch's bytes sooner (callers report each batch's time to [`Self::decoded`]), the
    /// other tried again now and then, the GPU on a copy beside the CPU while it is not the
    /// faster. `None` without a GPU that decodes the codec: no choice, nothing to report.
    pub fn decode_on(&self, codec: CodecId) -> Option<DecodeOn> {
        let decodes = self.started.outcome.get().and_then(|o| o.decoder.as_ref()).is_some_and(|d| d.decodes());
        if !decodes || !self.gpu_for(codec) {
            None
        } else if self.gpu_only {
            Some(DecodeOn::Gpu)
        } else {
            Some(self.decode.choose(codec))
        }
    }

    /// Reports that a batch of `bytes` decoded bytes of `codec` went `on` and took `took`, from
    /// handing it over until its last frame was back (what [`Self::decode_on`] compares).
    pub fn decoded(&self, codec: CodecId, on: DecodeOn, bytes: u64, took: Duration) {
        self.decode.record(codec, on, bytes, took);
    }

    /// Reports that a try of the GPU on `codec` ([`DecodeOn::CpuTryingGpu`]) has ended, after
    /// its time or its failure was reported: counted, and another may come once due.
    pub fn decode_try_ended(&self, codec: CodecId) {
        self.decode.try_ended(codec);
        self.counters.gpu_decode_tries.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether frames of `codec` can go to the GPU.
    pub fn gpu_for(&self, codec: CodecId) -> bool {
        self.gpu_tx.is_some()
            && !self.started.gone.load(Ordering::SeqCst)
            && self.started.outcome.get().is_some_and(|o| o.codecs.contains(&codec))
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
        raw: FrameBuf,
        done: impl FnOnce(EncodedFrame) + Send + 'static,
    ) {
        self.submit_in(None, ctx, codec, gpu_codec, frame, raw, done)
    }

    /// [`Self::submit`] for a frame of `stream` (see [`Self::stream`]): while enough streams
    /// write (`DispatchConfig::many_streams`), a stream's zstd frames go to the GPU alone.
    #[allow(clippy::too_many_arguments)]
    pub fn submit_in(
        &self,
        stream: Option<&StreamGuard>,
        ctx: Arc<ObjectContext>,
        codec: Arc<dyn Codec>,
        gpu_codec: CodecId,
        frame: u64,
        raw: FrameBuf,
        done: impl FnOnce(EncodedFrame) + Send + 'static,
    ) {
        let done: Done = Box::new(done);
        if let Some(s) = stream {
            s.touch();
        }
        if let Some((tx, rx)) = self.gpu_tx.as_ref().filter(|_| self.gpu_for(gpu_codec)) {
            let job = Job { ctx, codec, gpu_codec, frame, raw, done };
            // Many streams at once: their zstd frames go to the GPU alone, as with `on`, through
            // a queue no CPU turn takes from.
            let alone = self.alone.as_ref().filter(|_| {
                stream.is_some() && gpu_codec == CodecId::Zstd && !self.gpu_only && self.many_streams_now()
            });
            let (sent, queue) = match alone {
                Some((atx, arx)) => (atx.try_send(job), arx),
                None => (tx.try_send(job), rx),
            };
            // (Frames that look compressed are sorted out where the GPU takes them, off the
            // writer's thread; the CPU's encoder checks for itself.)
            match sent {
                Ok(()) => {
                    if self.started.gone.load(Ordering::SeqCst) {
                        // Every launching thread died since the check above: nobody else may
                        // take what waits (this frame too).
                        drain_to_cpu(queue, &self.counters);
                        return;
                    }
                    if self.gpu_only || alone.is_some() {
                        return;
                    }
                    // The frame's CPU turn. (Every frame in the shared queue has a turn still to
                    // come, or one left to the GPU, given back when it stops coming first: none
                    // waits for a GPU that no longer launches. A launch that never returns holds
                    // its own frames and, with `gpu_first`, those left to it; and every frame of
                    // the GPU's own queue, as with `on`.)
                    let (rx, c, share) = (rx.clone(), self.counters.clone(), self.share.clone());
                    crate::workers::spawn(move || cpu_turn(&rx, &c, &share, false));
                    return;
                }
                Err(TrySendError::Full(j) | TrySendError::Disconnected(j)) => {
                    self.counters.fallback_queue_full.fetch_add(1, Ordering::Relaxed);
                    return cpu(j.ctx, j.codec, j.frame, j.raw, j.done);
                }
            }
        }
        self.counters.cpu_frames.fetch_add(1, Ordering::Relaxed);
        cpu(ctx, codec, frame, raw, done)
    }

    /// Marks a stream of frames (a mount's file being written) until the guard is dropped: while
    /// `DispatchConfig::many_streams` of them send frames at once (each within the last
    /// [`STREAM_ACTIVE`]), `auto` sends the zstd frames submitted with a guard
    /// ([`Self::submit_in`]) to the GPU alone; others (a small file's) keep the measured sharing.
    pub fn stream(&self) -> StreamGuard {
        let state = Arc::new(StreamState::default());
        // (Counted only where frames may go to the GPU alone; the list is pruned as it grows, so
        // a mount that never counts keeps no trace of its files.)
        if self.alone.is_some() && !self.gpu_only && self.many_streams > 0 {
            let mut all = self.streams.all.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if all.len() >= 64 && all.len().is_power_of_two() {
                all.retain(|w| w.strong_count() > 0);
            }
            all.push(Arc::downgrade(&state));
        }
        StreamGuard(state)
    }

    /// Frames one stream of [`Self::stream`] should keep in flight: [`Self::frames_in_flight`],
    /// or `--gpu on`'s window while its frames go to the GPU alone.
    pub fn stream_frames_in_flight(&self) -> usize {
        if self.alone.is_some() && !self.gpu_only && self.gpu_for(CodecId::Zstd) && self.many_streams_now() {
            self.frames_in_flight().max(512)
        } else {
            self.frames_in_flight()
        }
    }

    /// Whether enough streams send frames now for theirs to go to the GPU alone.
    fn many_streams_now(&self) -> bool {
        self.many_streams > 0 && self.streams.active() >= self.many_streams
    }
}

/// How recently a stream must have sent a frame to count as writing: a file left open and idle
/// does not make the others' frames go to the GPU alone.
pub const STREAM_ACTIVE: Duration = Duration::from_millis(500);

/// The streams of a dispatcher: every guard given out, and how many sent a frame lately
/// (counted again at most every [`Streams::RECOUNT`]).
#[derive(Default)]
struct Streams {
    all: Mutex<Vec<std::sync::Weak<StreamState>>>,
    active: AtomicUsize,
    /// When `active` was last counted, in [`now_ms`] (0: never).
    counted_ms: std::sync::atomic::AtomicU64,
}

impl Streams {
    const RECOUNT: u64 = 10;

    fn active(&self) -> usize {
        let now = now_ms();
        if now.saturating_sub(self.counted_ms.load(Ordering::Relaxed)) >= Self::RECOUNT
            || self.counted_ms.load(Ordering::Relaxed) == 0
        {
            let mut all = self.all.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            all.retain(|w| w.strong_count() > 0);
            let recent = STREAM_ACTIVE.as_millis() as u64;
            let n = all
                .iter()
                .filter_map(std::sync::Weak::upgrade)
                .filter(|s| {
                    let last = s.last_ms.load(Ordering::Relaxed);
                    last > 0 && now.saturating_sub(last) <= recent
                })
                .count();
            self.active.store(n, Ordering::Relaxed);
            self.counted_ms.store(now.max(1), Ordering::Relaxed);
        }
        self.active.load(Ordering::Relaxed)
    }
}

/// Milliseconds since this process first asked (never 0 once a frame was sent).
fn now_ms() -> u64 {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_millis() as u64 + 1
}

/// One stream's last frame, in milliseconds since [`now_ms`]'s start (0: none yet).
#[derive(Default)]
struct StreamState {
    last_ms: std::sync::atomic::AtomicU64,
}

/// A stream that writes (see [`Dispatcher::stream`]); dropped, it no longer counts.
pub struct StreamGuard(Arc<StreamState>);

impl StreamGuard {
    fn touch(&self) {
        self.0.last_ms.store(now_ms(), Ordering::Relaxed);
    }
}

impl std::fmt::Debug for StreamGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StreamGuard(last frame at {} ms)", self.0.last_ms.load(Ordering::Relaxed))
    }
}

/// Watches a launching thread: if it dies by a panic (the back end's), and it was the last one,
/// the GPU is marked gone and the frames waiting for it go to the CPU, so none waits for a
/// launch that will never come (with `--gpu on` the cores take no frame from the queue).
struct Dying<'a> {
    alive: &'a AtomicUsize,
    started: &'a Started,
    /// The shared queue and the GPU's own.
    queues: [Receiver<Job>; 2],
    c: Arc<Counters>,
}

impl Drop for Dying<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() && self.alive.fetch_sub(1, Ordering::SeqCst) == 1 {
            tracing::error!("the GPU's launching threads died; compressing on the CPU from now on");
            // Marked first: a frame sent after this drain is drained by its sender (`submit`).
            self.started.gone.store(true, Ordering::SeqCst);
            for queue in &self.queues {
                drain_to_cpu(queue, &self.c);
            }
        }
    }
}

/// Sends every frame waiting in the GPU's queue to the CPU.
fn drain_to_cpu(queue: &Receiver<Job>, c: &Counters) {
    while let Ok(j) = queue.try_recv() {
        c.fallback_error.fetch_add(1, Ordering::Relaxed);
        cpu(j.ctx, j.codec, j.frame, j.raw, j.done);
    }
}

/// Frames this small are encoded on the submitting thread: a few microseconds of work, less than
/// waking a pool thread (whose idle spinning cost small-file workloads a fifth of the CPU).
pub const INLINE_MAX: usize = 64 << 10;

fn cpu(ctx: Arc<ObjectContext>, codec: Arc<dyn Codec>, frame: u64, raw: FrameBuf, done: Done) {
    if raw.len() <= INLINE_MAX {
        return done(encode_frame_owned(&ctx, codec.as_ref(), frame, raw));
    }
    crate::workers::spawn(move || done(encode_frame_owned(&ctx, codec.as_ref(), frame, raw)));
}

/// How often a back end judged slower than the CPU is tried again (the host's load changes).
const PROBE_EVERY: Duration = Duration::from_secs(5);

/// What a failed launch or try counts as: a very slow one, so a failing back end is tried again
/// later, as a slow one is.
const FAILED_LAUNCH: Duration = Duration::from_secs(3600);

/// Most batch windows one stream spends gathering a launch while frames keep coming (50 ms by
/// default: at 3 GB/s, about 150 frames arrive in that time).
const GATHER_WINDOWS: u32 = 10;

/// Launches that may still be cold: a launch larger than any before it from its launching thread
/// grows that thread's buffers (device memory, pinned staging), which no launch of that size
/// pays again. Measured on the H100 host: a mount's first launch took 350 ms where the next ones
/// took 60-70, and that one figure kept `auto` off the GPU for good. Such a launch, and each of
/// the first this many, counts only if it is the fastest yet; until this many are seen the next
/// is tried after [`PROBE_SOON`].
const COLD_LAUNCHES: u32 = 4;
const PROBE_SOON: Duration = Duration::from_millis(50);

/// Frames the CPU workers keep busy with: two each, and one more.
fn cores_window() -> usize {
    2 * crate::workers::threads() + 1
}

/// 1 MiB frames in one launch of one of `threads` launching threads (their share of
/// `batch_floor_bytes`), never fewer than `min_items`.
fn launch_frames(cfg: &DispatchConfig, threads: usize) -> usize {
    (cfg.batch_floor_bytes / threads.max(1) / (1 << 20)).max(cfg.min_items.max(1)).min(cfg.batch_max_items.max(1))
}

/// How fast, against all the cores together, the GPU must be measured to do frames (its launching
/// threads' launches at once) for it to come first (`DispatchConfig::gpu_first`); the cores take
/// what waits beyond its launches meanwhile. Slower, its launches would hold the streams their
/// frames belong to for longer than the cores would take to reach those frames.
const GPU_FIRST_SPEED: f64 = 1.0;

/// Otherwise, how much faster than all the cores one launch must be measured to do its frames:
/// the frames of a launch hold up every ordered stream they belong to until the whole launch is
/// done, which the estimate does not see.
const LAUNCH_MARGIN: f64 = 2.0;

/// What the batch thread has measured of the back end: the wall time of its launches.
#[derive(Default)]
struct Measured {
    /// A launch's wall time, in nanoseconds: the fastest of the first [`COLD_LAUNCHES`], then
    /// an exponentially weighted mean.
    launch_ns: Option<f64>,
    /// When the back end last launched.
    last_launch: Option<Instant>,
    /// Launches measured.
    launches: u32,
    /// The most frames each launching thread has launched at once (its buffers' size).
    largest: Vec<usize>,
}

impl Measured {
    /// What to do with a launch of `frames` waiting frames when `launchers` launches run at once:
    /// launch them if the GPU is measured to do frames at least `speed` times as fast as all the
    /// CPU workers (their measured CPU time spread over the workers); else leave them to the
    /// CPU, but try a few now and then (unmeasured, or not tried for a while: the host's load
    /// changes).
    fn decide(&self, frames: usize, launchers: usize, speed: f64, c: &Counters) -> Decision {
        let (Some(launch), Some(last), Some(per_frame)) = (self.launch_ns, self.last_launch, c.cpu_ns_per_frame())
        else {
            return Decision::Try;
        };
        let cpu = per_frame * frames as f64 / crate::workers::threads() as f64;
        let probe = if self.launches < COLD_LAUNCHES { PROBE_SOON } else { PROBE_EVERY };
        if launch * speed < cpu * launchers.max(1) as f64 {
            Decision::Launch
        } else if last.elapsed() >= probe {
            Decision::Try
        } else {
            Decision::Leave
        }
    }

    /// Records a launch of `frames` frames by launching thread `slot` that took `took`.
    fn launched(&mut self, slot: usize, frames: usize, took: Duration) {
        let ns = took.as_nanos() as f64;
        self.launches = self.launches.saturating_add(1);
        if self.largest.len() <= slot {
            self.largest.resize(slot + 1, 0);
        }
        let grew = frames > self.largest[slot];
        self.largest[slot] = self.largest[slot].max(frames);
        self.launch_ns = Some(match self.launch_ns {
            None => ns,
            Some(m) if grew || self.launches <= COLD_LAUNCHES => m.min(ns),
            Some(m) => 0.7 * m + 0.3 * ns,
        });
        self.last_launch = Some(Instant::now());
    }
}

/// What the batch thread does with the frames waiting.
enum Decision {
    /// Launch as many as a batch takes.
    Launch,
    /// Launch copies of a few, to measure (the frames themselves go to the CPU).
    Try,
    /// Leave them to the CPU workers.
    Leave,
}

/// The batch thread: waits for frames to pile up in the shared queue (the CPU workers take from
/// it too, so a queue they keep empty never reaches the GPU), and launches them when enough wait
/// and the launch is likely to finish them before the CPU would.
/// Frames in the GPU's own queue (many streams) are launched whatever was measured, before those
/// of the shared queue.
/// This loop is number `slot.0` of `slot.1` that share the queues and what is measured; each
/// launches at most its share of `batch_floor_bytes`.
fn batch_loop(
    backend: &dyn BatchBackend,
    queues: Queues,
    cfg: &DispatchConfig,
    slot: (usize, usize),
    c: &Arc<Counters>,
    share: &Arc<Share>,
    measured: &Mutex<Measured>,
) {
    let min_items = cfg.min_items.max(1);
    let most_bytes = (cfg.batch_floor_bytes / slot.1.max(1)).max(1);
    // One stream gathers a full launch while frames keep coming (a launch lasts about as long
    // whatever its size, so small ones waste the GPU); otherwise a launch's worth of waiting.
    let target = if cfg.one_stream { launch_frames(cfg, slot.1) } else { min_items };
    let (launch_size, reserve) =
        if cfg.one_stream { (target, target * slot.1.max(1)) } else { (cfg.batch_max_items.max(1), min_items) };
    // (Never the whole queue: beyond it frames go straight to the CPU, and none would be taken.)
    let reserve = reserve.min(cfg.queue_max / 2);
    let Queues { shared: rx, alone } = queues;
    let _launching = Launching { share, rx: &rx, c };
    loop {
        // Until a frame waits in either queue (without taking it); closed, empty queues end the
        // thread.
        let mut ready = crossbeam_channel::Select::new();
        ready.recv(&rx);
        ready.recv(&alone);
        ready.ready();
        if !alone.is_empty() {
            // The GPU's own frames: gathered as a stream's, and launched. Meanwhile it serves no
            // shared frame: turns left to it run now (a small file's close never waits for the
            // streams to pause).
            if !rx.is_empty() {
                share.give_back(&rx, c);
            }
            gather(&alone, target, cfg.batch_window, true);
            let batch = take_batch(&alone, launch_size, most_bytes);
            launch(backend, batch, cfg, slot, c, measured);
            continue;
        }
        if rx.is_empty() {
            match rx.try_recv() {
                Err(crossbeam_channel::TryRecvError::Disconnected) if alone.is_empty() => return,
                Err(_) => continue,
                Ok(j) => cpu(j.ctx, j.codec, j.frame, j.raw, j.done),
            }
            continue;
        }
        // A window for a backlog to form, or for the CPU workers to take what waits; one stream
        // waits on while the backlog still grows, but no longer than GATHER_WINDOWS windows in
        // all (with `--gpu on` the waiting frames have no CPU turn: a small file's close waits).
        let deadline = gather(&rx, target, cfg.batch_window, cfg.one_stream);
        // Another launching thread took the launch this one gathered for: gather again while
        // frames still come, rather than launch the few left.
        if cfg.one_stream && rx.len() < min_items && !rx.is_empty() && Instant::now() < deadline {
            continue;
        }
        let waiting = rx.len();
        let decision = match cfg.policy {
            GpuPolicy::On => Decision::Launch,
            _ if waiting < min_items => Decision::Leave,
            _ => {
                let (d, launch_ns) = {
                    let m = measured.lock().expect("measurements");
                    let d = if cfg.gpu_first {
                        let launchers = if cfg.one_stream { slot.1 } else { 1 };
                        m.decide(waiting.min(launch_size), launchers, GPU_FIRST_SPEED, c)
                    } else {
                        m.decide(waiting.min(cfg.batch_max_items), 1, LAUNCH_MARGIN, c)
                    };
                    (d, m.launch_ns)
                };
                if matches!(d, Decision::Leave) {
                    tracing::debug!(
                        waiting,
                        launch_ms = launch_ns.unwrap_or(0.0) / 1e6,
                        cpu_frame_ms = c.cpu_ns_per_frame().unwrap_or(0.0) / 1e6,
                        "GPU launch declined: the cores are expected to finish these first"
                    );
                }
                d
            }
        };
        match decision {
            Decision::Launch if cfg.policy == GpuPolicy::Auto && cfg.gpu_first => {
                share.reserve.store(reserve, Ordering::Release);
            }
            Decision::Launch => {}
            Decision::Try | Decision::Leave => share.give_back(&rx, c),
        }
        let most = match decision {
            Decision::Launch => launch_size,
            Decision::Try => min_items,
            Decision::Leave => {
                // Left to the CPU workers (each waiting frame has its turn to come).
                c.gpu_declined.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(cfg.batch_window);
                continue;
            }
        };
        let batch = take_batch(&rx, most, most_bytes);
        if batch.is_empty() {
            continue;
        }
        if matches!(decision, Decision::Try) {
            // A try measures the back end on copies: the frames themselves go to the CPU at once,
            // so a back end slower than hoped holds up no stream.
            let copies: Vec<(CodecId, Vec<u8>)> = batch.iter().map(|j| (j.gpu_codec, j.raw.to_vec())).collect();
            for j in batch {
                c.cpu_frames.fetch_add(1, Ordering::Relaxed);
                cpu(j.ctx, j.codec, j.frame, j.raw, j.done);
            }
            let id = copies[0].0;
            let chunks: Vec<&[u8]> = copies.iter().filter(|(c, _)| *c == id).map(|(_, raw)| raw.as_slice()).collect();
            c.gpu_tries.fetch_add(1, Ordering::Relaxed);
            // (Timed from here: the copies, and frames small enough to be compressed inline by
            // `cpu` above, are not the back end's time.)
            let started = Instant::now();
            let ok = backend.compress_batch_in(slot, id, &chunks, cfg.data_type).is_ok();
            let took = if ok { started.elapsed() } else { FAILED_LAUNCH };
            // (A failing back end is tried again later, like a slow one.)
            measured.lock().expect("measurements").launched(slot.0, chunks.len(), took);
            continue;
        }
        launch(backend, batch, cfg, slot, c, measured);
    }
}

/// The two queues a launching thread takes from: the one shared with the CPU workers' turns, and
/// the GPU's own (frames of many streams, `DispatchConfig::many_streams`).
struct Queues {
    shared: Receiver<Job>,
    alone: Receiver<Job>,
}

/// Waits up to `window` for `target` frames to wait in `queue` (or for it to empty); while frames
/// keep coming and `stream`, a window longer each time, but no more than `GATHER_WINDOWS` windows in
/// all. Returns when the last window ends.
fn gather(queue: &Receiver<Job>, target: usize, window: Duration, stream: bool) -> Instant {
    let first = Instant::now();
    let (mut seen, mut deadline) = (queue.len(), first + window);
    let last_call = first + window * GATHER_WINDOWS;
    while queue.len() < target && !queue.is_empty() && Instant::now() < deadline {
        std::thread::sleep(window / 8);
        if stream && queue.len() > seen {
            (seen, deadline) = (queue.len(), (Instant::now() + window).min(last_call));
        }
    }
    deadline
}

/// Up to `most` frames, and `most_bytes` bytes, of those waiting in `queue`.
fn take_batch(queue: &Receiver<Job>, most: usize, most_bytes: usize) -> Vec<Job> {
    let mut batch = Vec::new();
    let mut bytes = 0;
    while batch.len() < most && bytes < most_bytes {
        let Ok(j) = queue.try_recv() else { break };
        bytes += j.raw.len();
        batch.push(j);
    }
    batch
}

/// Launches `batch` on the back end (by launching thread `slot`) and measures the launch: frames
/// that look already compressed are stored as they are, without a launch; one launch per codec
/// present in the rest.
fn launch(
    backend: &dyn BatchBackend,
    batch: Vec<Job>,
    cfg: &DispatchConfig,
    slot: (usize, usize),
    c: &Arc<Counters>,
    measured: &Mutex<Measured>,
) {
    // Frames that look already compressed are stored as they are, without a launch; one
    // launch per codec present in the rest.
    let mut by_codec: Vec<(CodecId, Vec<Job>)> = Vec::new();
    for j in batch {
        if crate::detect::looks_compressed(&j.raw) {
            c.fallback_not_smaller.fetch_add(1, Ordering::Relaxed);
            cpu(j.ctx, Arc::new(crate::codec::NoneCodec), j.frame, j.raw, j.done);
            continue;
        }
        match by_codec.iter_mut().find(|(id, _)| *id == j.gpu_codec) {
            Some((_, v)) => v.push(j),
            None => by_codec.push((j.gpu_codec, vec![j])),
        }
    }
    // Only launches that ran and succeeded say what a launch costs (a failed one counts as
    // a very slow one, as a failed try does; none ran when every frame looked compressed).
    let started = Instant::now();
    let mut ran = (0, true);
    for (id, jobs) in by_codec {
        let n = jobs.len();
        let ok = run_batch(backend, slot, id, jobs, cfg.data_type, c);
        ran = (ran.0 + n, ran.1 && ok);
    }
    if ran.0 > 0 {
        let took = if ran.1 { started.elapsed() } else { FAILED_LAUNCH };
        measured.lock().expect("measurements").launched(slot.0, ran.0, took);
    }
}

/// Launches `jobs` of codec `id` and hands each frame on (a failure sends them to the CPU);
/// returns whether the launch succeeded.
fn run_batch(
    backend: &dyn BatchBackend,
    slot: (usize, usize),
    id: CodecId,
    jobs: Vec<Job>,
    data_type: i32,
    c: &Counters,
) -> bool {
    let start = Instant::now();
    tracing::debug!(frames = jobs.len(), codec = %id, "GPU batch launching");
    let chunks: Vec<&[u8]> = jobs.iter().map(|j| &j.raw[..]).collect();
    let result = backend.compress_batch_in(slot, id, &chunks, data_type);
    c.gpu_nanos.fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
    let ok = result.is_ok();
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
                            let Job { ctx, frame, raw, done, .. } = j;
                            let encoded = finish_payload(&ctx, frame, &raw, id, payload);
                            // The raw frame's buffer goes back (to a pool that lent it) before
                            // the frame is handed on.
                            drop(raw);
                            done(encoded);
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
    ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn turns_leave_the_gpu_its_reserve_and_get_their_frames_back_when_it_stops_coming_first() {
        let (tx, rx) = crossbeam_channel::unbounded::<Job>();
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let ctx = Arc::new(crate::EncodeConfig::default().new_object());
        let push = |frame: u64| {
            let done_tx = done_tx.clone();
            let done: Done = Box::new(move |_| done_tx.send(frame).unwrap());
            let codec = cpu_equivalent(CodecId::Zstd, 1);
            tx.send(Job { ctx: ctx.clone(), codec, gpu_codec: CodecId::Zstd, frame, raw: vec![7; 1000].into(), done })
                .unwrap();
        };
        let (c, share) = (Arc::new(Counters::default()), Arc::new(Share::default()));
        share.reserve.store(3, Ordering::Release);
        for f in 0..4 {
            push(f);
        }
        // Four wait, three are the GPU's: the first turn takes the oldest, the next ones leave.
        cpu_turn(&rx, &c, &share, false);
        assert_eq!(done_rx.try_recv(), Ok(0));
        for _ in 0..3 {
            cpu_turn(&rx, &c, &share, false);
        }
        assert_eq!((rx.len(), share.deferred.load(Ordering::Acquire)), (3, 3));
        assert!(done_rx.try_recv().is_err(), "nothing more was encoded");
        // The GPU stops coming first: the three turns it was left run, on the workers.
        share.give_back(&rx, &c);
        let mut back: Vec<u64> = (0..3).map(|_| done_rx.recv_timeout(Duration::from_secs(10)).unwrap()).collect();
        back.sort_unstable();
        assert_eq!(back, [1, 2, 3]);
        assert_eq!((share.reserve.load(Ordering::Acquire), share.deferred.load(Ordering::Acquire)), (0, 0));
        // With no reserve, a turn always takes its frame.
        push(4);
        cpu_turn(&rx, &c, &share, false);
        assert_eq!(done_rx.try_recv(), Ok(4));
        assert_eq!(c.cpu_frames.load(Ordering::Relaxed), 5);
    }

    /// A back end whose every launch takes 100 ms and shrinks nothing.
    struct Slow;

    impl BatchBackend for Slow {
        fn compress_batch(&self, _: CodecId, chunks: &[&[u8]], _: i32) -> BatchResult {
            std::thread::sleep(Duration::from_millis(100));
            Ok(vec![None; chunks.len()])
        }
    }

    #[test]
    fn a_launching_thread_busy_with_its_own_queue_gives_back_the_turns_left_to_it() {
        let ctx = Arc::new(crate::EncodeConfig::default().new_object());
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let job = |frame: u64, tag: &'static str| {
            let done_tx = done_tx.clone();
            let done: Done = Box::new(move |_| done_tx.send(tag).unwrap());
            let codec = cpu_equivalent(CodecId::Zstd, 1);
            Job { ctx: ctx.clone(), codec, gpu_codec: CodecId::Zstd, frame, raw: vec![frame as u8; 1000].into(), done }
        };
        let (tx, rx) = crossbeam_channel::unbounded::<Job>();
        let (alone_tx, alone_rx) = crossbeam_channel::unbounded::<Job>();
        let (c, share) = (Arc::new(Counters::default()), Arc::new(Share::default()));
        // The cores left the GPU its reserve: three small frames' turns deferred to it.
        share.reserve.store(8, Ordering::Release);
        for f in 0..3 {
            tx.send(job(f, "small")).unwrap();
            cpu_turn(&rx, &c, &share, false);
        }
        assert_eq!((rx.len(), share.deferred.load(Ordering::Acquire)), (3, 3));
        // Its own queue holds 40 frames of streams: ten launches of 4, a second at least.
        for f in 0..40 {
            alone_tx.send(job(f, "stream")).unwrap();
        }
        let cfg = DispatchConfig {
            min_items: 4,
            batch_max_items: 4,
            batch_window: Duration::from_millis(1),
            ..DispatchConfig::default()
        };
        let launcher = {
            let (c, share) = (c.clone(), share.clone());
            std::thread::spawn(move || {
                let queues = Queues { shared: rx, alone: alone_rx };
                batch_loop(&Slow, queues, &cfg, (0, 1), &c, &share, &Mutex::new(Measured::default()))
            })
        };
        // The small frames come back at once (their turns given back), not after the streams'.
        let first: Vec<&str> = (0..3).map(|_| done_rx.recv_timeout(Duration::from_secs(10)).unwrap()).collect();
        assert_eq!(first, ["small"; 3], "the turns left to a GPU busy with its own queue came back");
        drop((tx, alone_tx));
        launcher.join().unwrap();
        let rest = (0..40).filter(|_| done_rx.recv_timeout(Duration::from_secs(10)) == Ok("stream")).count();
        assert_eq!(rest, 40, "and every stream frame after them");
    }

    #[test]
    fn the_gpu_comes_first_once_its_launches_at_once_keep_up_with_the_cores() {
        let threads = crate::workers::threads() as f64;
        let ms = |n: f64| Duration::from_nanos((n * 1e6) as u64);
        // A frame takes a core 4 ms: 128 frames take all the cores 512/threads ms.
        let c = Counters::default();
        c.cpu_nanos.store(4_000_000, Ordering::Relaxed);
        c.cpu_timed_frames.store(1, Ordering::Relaxed);
        let cores = 512.0 / threads;
        let measured = |launch_ms: f64| {
            let mut m = Measured::default();
            for _ in 0..COLD_LAUNCHES {
                m.launched(0, 128, ms(launch_ms));
            }
            m
        };
        let launches = |d: Decision| matches!(d, Decision::Launch);
        // Two launches at once, each 1.5x the cores' time: together faster than the cores, so the
        // GPU comes first; alone, or against twice the cores' speed, it does not.
        let m = measured(1.5 * cores);
        assert!(launches(m.decide(128, 2, GPU_FIRST_SPEED, &c)));
        assert!(!launches(m.decide(128, 1, GPU_FIRST_SPEED, &c)));
        assert!(!launches(m.decide(128, 2, LAUNCH_MARGIN, &c)));
        // Without `gpu_first` (one launch, twice as fast as the cores) only a fast GPU launches.
        assert!(launches(measured(0.4 * cores).decide(128, 1, LAUNCH_MARGIN, &c)));
    }

    #[test]
    fn a_slow_first_launch_is_set_aside_and_the_gpu_tried_again_soon() {
        let mut m = Measured::default();
        let ms = |n: u64| Duration::from_millis(n);
        // The first launch grew its buffers; the next ones are what launches cost.
        m.launched(0, 32, ms(350));
        assert!(m.launches < COLD_LAUNCHES, "still cold after one launch");
        m.launched(0, 32, ms(60));
        m.launched(1, 32, ms(70));
        assert_eq!(m.launch_ns, Some(60e6), "the fastest of the cold launches counts");
        m.launched(1, 32, ms(55));
        assert_eq!(m.launch_ns, Some(55e6), "the fourth launch is still cold");
        // Past the cold launches, a launch larger than its thread's before grows its buffers:
        // it counts only if it is the fastest yet.
        m.launched(0, 128, ms(400));
        assert_eq!(m.launch_ns, Some(55e6), "a launch that grew the buffers");
        // Launches of sizes seen before: a mean that moves with each.
        m.launched(0, 128, ms(160));
        let mean = m.launch_ns.unwrap();
        assert!(mean > 55e6 && mean < 160e6, "{mean}");
        // A back end judged slower is tried again after PROBE_SOON while cold, PROBE_EVERY after.
        let c = Counters::default();
        c.cpu_nanos.store(1_000_000, Ordering::Relaxed);
        c.cpu_timed_frames.store(1, Ordering::Relaxed);
        let mut cold = Measured::default();
        for n in 1..=COLD_LAUNCHES {
            cold.launched(0, 32, ms(350));
            cold.last_launch = Some(Instant::now() - PROBE_SOON);
            let d = cold.decide(1, 1, LAUNCH_MARGIN, &c);
            if n < COLD_LAUNCHES {
                assert!(matches!(d, Decision::Try), "tried again soon after {n} launches");
            } else {
                assert!(matches!(d, Decision::Leave), "left alone once {n} launches are measured");
            }
        }
    }
}
