//! One GPU, driven through cudarc (dynamically loaded driver) and nVCOMP: batched compression and
//! decompression of frames, host memory to host memory, with device and pinned buffers reused
//! across batches. Only the real compressed bytes travel back.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use cudarc::driver::{CudaContext, CudaStream, result};

use rayon::prelude::*;

use super::buffers::*;
use super::copy::copy_into;
use super::error::cuda;
pub use super::error::{GpuError, GpuUnavailable};
use super::meta::{BatchMeta, Call, Field};
use super::nvcomp::{Algo, DeviceBatch, Nvcomp, Opts, SUCCESS, check};
use super::pinned::PinnedFrames;
use super::sync::{Drained, Events, Phases, Timings, Turn, Turns, on_threads};
use crate::codec::{CodecId, GpuLayout};
use crate::gpuconfig::GpuConfig;
use crate::{lz4frame, zstdstored};

/// How the codec table says a codec's payload is cut for nVCOMP.
fn layout_of(codec: CodecId) -> Result<GpuLayout, GpuError> {
    codec.descriptor().gpu.map(|g| g.layout).ok_or(GpuError::Unsupported(codec))
}

/// Raw bytes per zstd or LZ4 piece on the GPU (see `Gpu::compress_batch`): nVCOMP compresses each chunk
/// of a batch on one thread block, so a 1 MiB frame is one long serial job (about 40 ms on an
/// H100); 64 KiB pieces are the size nVCOMP's own high-level interface uses.
pub const PIECE: usize = 64 << 10;

/// The zstd frames of a payload and the content size each declares; `None` if the bytes are not
/// a sequence of whole zstd frames.
fn zstd_frames(payload: &[u8]) -> Option<Vec<(&[u8], Option<usize>)>> {
    let mut frames = Vec::new();
    let mut at = 0;
    while at < payload.len() {
        let rest = &payload[at..];
        let len = zstd::zstd_safe::find_frame_compressed_size(rest).ok()?;
        if len == 0 || len > rest.len() {
            return None;
        }
        let content = zstd::zstd_safe::get_frame_content_size(&rest[..len]).ok()?.map(|n| n as usize);
        frames.push((&rest[..len], content));
        at += len;
    }
    (!frames.is_empty()).then_some(frames)
}

/// Whether pieces of raw lengths `lens` (sizes an object states, so never trusted) decode end to
/// end into one payload of `raw` bytes: at least one piece, all but the last filling whole
/// alignment units, and their sum `raw` without overflowing.
fn pieces_fit(lens: &[usize], raw: usize) -> bool {
    lens.split_last().is_some_and(|(_, head)| head.iter().all(|l| l % ALIGN == 0))
        && lens.iter().try_fold(0usize, |sum, &l| sum.checked_add(l)) == Some(raw)
}

/// Whether the CUDA driver library (`libcuda.so.1` or another name cudarc knows) can be opened;
/// makes no CUDA call, so no context or device is set up.
pub fn driver_present() -> bool {
    // SAFETY: only tries to open the library (running its initialisers); no CUDA call is made.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// Time and bytes of GPU work, for metrics and benches.
#[derive(Debug, Default, Clone, Copy)]
pub struct GpuStats {
    /// Batches run.
    pub batches: u64,
    /// Chunks in them.
    pub chunks: u64,
    /// Bytes given to the GPU.
    pub bytes_in: u64,
    /// Bytes brought back.
    pub bytes_out: u64,
    /// Wall time inside batch calls, nanoseconds.
    pub nanos: u64,
}

/// A GPU with nVCOMP, ready for batches.
pub struct Gpu {
    ctx: Arc<CudaContext>,
    /// Streams with their own buffers: a large batch runs as equal shares on all lanes at once,
    /// each lane on its own thread, which does its share's host copies itself (compression; a
    /// decode's lanes stage in turn), so one share's kernel and copies overlap the next one's
    /// staging.
    lanes: Vec<Lane>,
    lib: Nvcomp,
    /// Totals: batches, chunks, bytes in, bytes out, nanoseconds (atomics: no lock per batch).
    stats: [AtomicU64; 5],
    /// Bytes per part of a lane's copies (`GpuConfig::part_bytes`; tests change it).
    part_bytes: AtomicUsize,
    /// Whether batched copies are asked for and work here: cleared after the first failure.
    batch_copy: AtomicBool,
    /// Streaming stores in the host copies (`GpuConfig::streaming_copy`).
    streaming: bool,
    /// Every launch fails (`GpuConfig::fail`).
    fail: bool,
    /// Page-locked frame buffers lent to frame producers (`GpuConfig::frame_buffers`).
    frames: Option<Arc<PinnedFrames>>,
    /// Frame buffers registered at warm-up (`GpuConfig::frame_buffers_at_start`).
    frames_at_start: usize,
    /// "NVIDIA H100 80GB HBM3 (nVCOMP from /path)".
    pub describe: String,
}

impl Drop for Gpu {
    fn drop(&mut self) {
        // The lanes' buffers free themselves next; the driver needs the context on this thread.
        // (A bind fails once if an error some drop stored is pending, which it clears: again.)
        if self.ctx.bind_to_thread().is_err() {
            let _ = self.ctx.bind_to_thread();
        }
    }
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe)
    }
}

/// One CUDA stream and the buffers its batches use.
struct Lane {
    stream: Arc<CudaStream>,
    bufs: Mutex<Buffers>,
}

/// Chunks below which a batch runs on one lane (shares of fewer would not fill the GPU).
const LANE_SPLIT_MIN: usize = 64;

impl Gpu {
    /// Launches worth running at once from separate threads (`compress_batch_in`): one's host
    /// work (staging, collecting) then overlaps the other's kernels.
    pub const CONCURRENT_BATCHES: usize = 2;

    /// Opens GPU 0 and nVCOMP, set up as `cfg` says; the error says in one line why not (no
    /// driver, no device, no library).
    pub fn probe(cfg: &GpuConfig) -> Result<Self, GpuUnavailable> {
        if !driver_present() {
            return Err(GpuUnavailable::NoDriver);
        }
        let count = cudarc::driver::result::init()
            .and_then(|()| result::device::get_count())
            .map_err(|source| GpuUnavailable::Cuda { what: "init", source })?;
        if count < 1 {
            return Err(GpuUnavailable::NoDevice);
        }
        let lib = Nvcomp::load(cfg.nvcomp_lib.as_deref())?;
        let ctx = CudaContext::new(0).map_err(|source| GpuUnavailable::Cuda { what: "context", source })?;
        // SAFETY: cudarc need not record events on every use of a buffer: each lane's buffers
        // are used on its own stream alone, and each launch waits for its stream (`Drained`)
        // before its lane's buffers are used again, grown or freed.
        unsafe { ctx.disable_event_tracking() };
        let name = ctx.name().unwrap_or_else(|_| "GPU 0".into());
        let describe = format!("{name} (nVCOMP from {})", lib.path);
        let mut lanes = Vec::new();
        for _ in 0..cfg.lanes.clamp(1, GpuConfig::MAX_LANES) {
            let stream = ctx.new_stream().map_err(|source| GpuUnavailable::Cuda { what: "stream", source })?;
            lanes.push(Lane { stream, bufs: Mutex::new(Buffers::empty()) });
        }
        let frames = (cfg.frame_buffers > 0)
            .then(|| Arc::new(PinnedFrames::new(ctx.clone(), cfg.frame_buffer_bytes, cfg.frame_buffers)));
        Ok(Gpu {
            ctx,
            lanes,
            lib,
            stats: Default::default(),
            part_bytes: AtomicUsize::new(cfg.part_bytes.max(1)),
            batch_copy: AtomicBool::new(cfg.batch_copy),
            streaming: cfg.streaming_copy,
            fail: cfg.fail,
            frames,
            frames_at_start: cfg.frame_buffers_at_start,
            describe,
        })
    }

    /// Where frame producers get buffers this GPU copies from directly: its page-locked pool
    /// while it has one free, the heap otherwise (and without a pool).
    pub fn frame_buffers(&self) -> crate::framebuf::Buffers {
        match &self.frames {
            Some(pool) => crate::framebuf::Buffers::from_pool(pool.clone()),
            None => crate::framebuf::Buffers::default(),
        }
    }

    /// Registers the frame buffers asked for at start (`GpuConfig::frame_buffers_at_start`), before
    /// any frame comes: registering one (about 0.16-0.6 ms a MiB) on a thread that cuts frames
    /// held its writer, and launches beside it waited for the driver.
    pub fn register_frame_buffers(&self) {
        if let Some(pool) = &self.frames {
            let started = Instant::now();
            let made = pool.prefill(self.frames_at_start);
            tracing::debug!(made, took_ms = started.elapsed().as_millis() as u64, "frame buffers registered at start");
        }
    }

    /// Page-locked frame buffers registered so far.
    pub fn frame_buffers_registered(&self) -> usize {
        self.frames.as_ref().map_or(0, |pool| pool.made())
    }

    /// Codecs this GPU can run.
    pub fn codecs(&self) -> Vec<CodecId> {
        self.lib.codecs()
    }

    /// Sets the bytes per part of a lane's copies (`GpuConfig::part_bytes` until then); small
    /// values exercise the pipeline in tests.
    pub fn set_part_bytes(&self, bytes: usize) {
        self.part_bytes.store(bytes.max(1), Relaxed);
    }

    /// Totals so far.
    pub fn stats(&self) -> GpuStats {
        let [batches, chunks, bytes_in, bytes_out, nanos] = self.stats.each_ref().map(|a| a.load(Relaxed));
        GpuStats { batches, chunks, bytes_in, bytes_out, nanos }
    }

    fn algo(&self, codec: CodecId, max_chunk: usize) -> Result<Algo, GpuError> {
        let a = self.lib.algo(codec).ok_or(GpuError::Unsupported(codec))?;
        if max_chunk > a.max_chunk {
            return Err(GpuError::Unsupported(codec));
        }
        Ok(a)
    }

    fn record(&self, chunks: usize, bytes_in: usize, bytes_out: usize, start: Instant) {
        let add = [1, chunks as u64, bytes_in as u64, bytes_out as u64, start.elapsed().as_nanos() as u64];
        for (a, n) in self.stats.iter().zip(add) {
            a.fetch_add(n, Relaxed);
        }
    }

    /// Compresses each chunk with `codec`. `None` for a chunk whose output is not smaller than it.
    /// `data_type` is nVCOMP's type hint (0 = bytes) for Cascaded and Bitcomp.
    ///
    /// zstd chunks larger than `PIECE` are compressed as pieces of that size, each its own zstd
    /// frame, concatenated: still one standard zstd payload (every decoder reads concatenated
    /// frames) but many times more parallel on the GPU (BENCHMARKS.md §2). LZ4 chunks always go as
    /// pieces, each a block of one LZ4 frame of independent blocks (`lz4frame`).
    pub fn compress_batch(
        &self,
        codec: CodecId,
        chunks: &[&[u8]],
        data_type: i32,
    ) -> Result<Vec<Option<Vec<u8>>>, GpuError> {
        self.compress_batch_in((0, 1), codec, chunks, data_type)
    }

    /// [`Self::compress_batch`] from caller `slot.0` of `slot.1` calling at once: each uses its
    /// own lanes (every `slot.1`-th, from `slot.0`), so their launches overlap instead of
    /// queueing for the same buffers.
    pub fn compress_batch_in(
        &self,
        slot: (usize, usize),
        codec: CodecId,
        chunks: &[&[u8]],
        data_type: i32,
    ) -> Result<Vec<Option<Vec<u8>>>, GpuError> {
        let n = slot.1.clamp(1, self.lanes.len());
        let lanes: Vec<&Lane> = self.lanes.iter().skip(slot.0 % n).step_by(n).collect();
        let layout = layout_of(codec)?;
        let pieces = match layout {
            GpuLayout::Lz4Frame => true,
            GpuLayout::ZstdFrames => chunks.iter().any(|c| c.len() > PIECE),
            GpuLayout::Whole => false,
        };
        if pieces {
            return self.compress_pieces(&lanes, codec, layout, chunks);
        }
        self.compress_lanes(&lanes, codec, chunks, data_type)
    }

    /// Runs a large batch as equal parts on all of `lanes` at once, each lane on its own thread.
    fn compress_lanes(
        &self,
        lanes: &[&Lane],
        codec: CodecId,
        chunks: &[&[u8]],
        data_type: i32,
    ) -> Result<Vec<Option<Vec<u8>>>, GpuError> {
        let parts = lanes.len().min(chunks.len() / LANE_SPLIT_MIN).max(1);
        if parts == 1 {
            return self.compress_chunks(lanes[0], codec, chunks, data_type);
        }
        let per = chunks.len().div_ceil(parts);
        let jobs = chunks.chunks(per).zip(lanes.iter().copied());
        let outs = on_threads(jobs.map(|(part, lane)| move || self.compress_chunks(lane, codec, part, data_type)));
        let mut out = Vec::with_capacity(chunks.len());
        for o in outs {
            out.extend(o?);
        }
        Ok(out)
    }

    fn compress_pieces(
        &self,
        lanes: &[&Lane],
        codec: CodecId,
        layout: GpuLayout,
        chunks: &[&[u8]],
    ) -> Result<Vec<Option<Vec<u8>>>, GpuError> {
        let mut pieces: Vec<&[u8]> = Vec::new();
        // Each chunk's pieces, as a range of `pieces`.
        let mut ranges = Vec::with_capacity(chunks.len());
        for c in chunks {
            let first = pieces.len();
            pieces.extend(c.chunks(PIECE));
            ranges.push(first..pieces.len());
        }
        let outs = self.compress_lanes(lanes, codec, &pieces, 0)?;
        // On this thread, as the lanes' copies are (see `compress_chunks`).
        Ok(ranges
            .into_iter()
            .zip(chunks)
            .map(|(range, chunk)| {
                let mut joined = Vec::with_capacity(chunk.len() / 2);
                match layout {
                    GpuLayout::Lz4Frame => {
                        lz4frame::begin(chunk.len() as u64, &mut joined);
                        for k in range {
                            // A piece the GPU could not shrink is stored as an uncompressed block.
                            lz4frame::push_block(&mut joined, outs[k].as_deref(), pieces[k]);
                        }
                        lz4frame::end(&mut joined);
                    }
                    // (`Whole` payloads are never cut into pieces: see `compress_batch`.)
                    GpuLayout::ZstdFrames | GpuLayout::Whole => {
                        for k in range {
                            match &outs[k] {
                                Some(o) => joined.extend_from_slice(o),
                                // A piece the GPU could not shrink is stored in a zstd frame of raw
                                // blocks, so the rest of its chunk keeps its compression.
                                None => zstdstored::push(&mut joined, pieces[k]),
                            }
                        }
                    }
                }
                (joined.len() < chunk.len()).then_some(joined)
            })
            .collect())
    }

    /// Compresses `chunks` on one lane in one launch. The input crosses the bus in parts, so the
    /// host stages one part while the previous one is copied; only the real compressed bytes
    /// come back (one batched copy). The host copies run on the calling thread, which holds the
    /// launching thread's priority: spread over a thread pool, they waited for a core at every
    /// step on a busy host (issue 15: with 16 busy loops beside, staging 64 MiB took 56 ms where
    /// this thread alone takes 12).
    fn compress_chunks(
        &self,
        lane: &Lane,
        codec: CodecId,
        chunks: &[&[u8]],
        data_type: i32,
    ) -> Result<Vec<Option<Vec<u8>>>, GpuError> {
        if self.fail {
            return Err(GpuError::Injected);
        }
        if chunks.is_empty() {
            return Ok(Vec::new());
        }
        let start = Instant::now();
        let n = chunks.len();
        let max_chunk = chunks.iter().map(|c| c.len()).max().unwrap_or(0).max(1);
        let algo = self.algo(codec, max_chunk)?;
        let opts = Opts::compress(algo.options, data_type);
        let cs = lane.stream.cu_stream();
        cuda(self.ctx.bind_to_thread())?;
        let mut guard = lane.bufs.lock().expect("buffers lock");
        // (Dropped before the lock on an early return: the copies queued so far end first.)
        let drained = Drained(&lane.stream);
        let b = &mut *guard;
        let max_out = algo.max_compressed_chunk(max_chunk, opts)?;
        let (in_offsets, in_total) = aligned_offsets(chunks.iter().map(|c| c.len()));
        let stride = align(max_out);
        let total_raw: usize = chunks.iter().map(|c| c.len()).sum();
        let temp = algo.compress_temp_bytes(n, max_chunk, opts, total_raw, &lane.stream)?;
        let d_in = b.d_in.ensure(&lane.stream, in_total)?;
        let d_out = b.d_out.ensure(&lane.stream, stride * n)?;
        let d_temp = b.d_temp.ensure(&lane.stream, temp.max(1))?;
        let meta = BatchMeta::new(Call::Compress, n);
        let d_meta = b.d_meta.ensure(&lane.stream, meta.len())?;
        let h_meta = b.h_meta.ensure(&self.ctx, meta.len())?;
        meta.fill(
            h_meta,
            [
                (Field::InPtrs, &|i| d_in + in_offsets[i] as u64),
                (Field::InSizes, &|i| chunks[i].len() as u64),
                (Field::OutPtrs, &|i| d_out + (i * stride) as u64),
            ],
        );
        let batch = DeviceBatch { meta, meta_at: d_meta, temp_at: d_temp, temp_bytes: temp };
        let phases = Phases::new(&self.ctx)?;
        let t_setup = start.elapsed();
        Phases::mark(&phases, 0, &lane.stream)?;
        // SAFETY: our stream; pinned host memory that stays put until the stream is synchronised.
        unsafe { cuda(result::memcpy_htod_async(d_meta, &h_meta[..], cs))? };
        let part = self.part_bytes.load(Relaxed);
        // Chunks in the page-locked pool cross as they are; runs of others are staged first.
        let pinned = self.frames.as_ref().map_or_else(|| vec![false; n], |f| f.holds(chunks));
        let mut t_stage = std::time::Duration::ZERO;
        for run in runs(&pinned) {
            if pinned[run.start] {
                upload_direct(d_in, &chunks[run.clone()], &in_offsets[run], cs)?;
            } else {
                let h_in = b.h_in.ensure(&self.ctx, in_total)?;
                let (datas, offsets) = (&chunks[run.clone()], &in_offsets[run]);
                t_stage += stage_upload(h_in, d_in, datas, offsets, (part, self.streaming), cs)?;
            }
        }
        Phases::mark(&phases, 1, &lane.stream)?;
        // SAFETY: the metadata just copied (on this stream, before the launch) holds each chunk's
        // input in d_in, copied or staged above, and room for max_out bytes of output in d_out; d_temp
        // holds temp bytes; the lane's buffers stay put (its lock is held) until the stream is
        // synchronised below.
        unsafe { algo.compress_async(&batch, max_chunk, opts, &lane.stream)? };
        Phases::mark(&phases, 2, &lane.stream)?;
        let t = Instant::now();
        let done = Events::new(&self.ctx, 2)?;
        // Output sizes and statuses come back, in one copy: a compression's layout ends with them.
        let back = meta.range(Field::OutSizes).start..meta.statuses().end;
        debug_assert_eq!(meta.range(Field::OutSizes).end, meta.statuses().start);
        // SAFETY: sizes and statuses into pinned memory; our stream.
        unsafe { cuda(result::memcpy_dtoh_async(&mut h_meta[back.clone()], d_meta + back.start as u64, cs))? };
        done.record(0, &lane.stream)?;
        done.wait(0)?;
        let t_wait = t.elapsed();
        let useful: Vec<Option<usize>> = (0..n)
            .map(|i| {
                let size = meta.word(h_meta, Field::OutSizes, i) as usize;
                let status = meta.status(h_meta, i);
                (status == SUCCESS && size < chunks[i].len() && size <= max_out).then_some(size)
            })
            .collect();
        // Packed: useful outputs end to end (offsets into h_out); else the strided region.
        let mut packed_at = Vec::with_capacity(n);
        let mut kept = 0usize;
        for u in &useful {
            packed_at.push(kept);
            kept += u.unwrap_or(0);
        }
        let copies: Vec<(u64, usize, usize)> =
            (0..n).filter_map(|i| useful[i].map(|size| (d_out + (i * stride) as u64, packed_at[i], size))).collect();
        let packed = copies.len() > 1 && self.batch_copy.load(Relaxed) && {
            let h_out = b.h_out.ensure(&self.ctx, kept.max(1))?;
            match batch_dtoh(h_out, &copies, cs) {
                Ok(()) => true,
                Err(e) => {
                    tracing::debug!("batched copies unavailable ({e}); copying the strided output region");
                    self.batch_copy.store(false, Relaxed);
                    false
                }
            }
        };
        let region = (0..n).rev().find(|&i| useful[i].is_some()).map_or(0, |i| i * stride + useful[i].unwrap_or(0));
        if !packed {
            let h_out = b.h_out.ensure(&self.ctx, region.max(1))?;
            // SAFETY: the device output region holds n * stride >= region bytes.
            unsafe { cuda(result::memcpy_dtoh_async(&mut h_out[..region], d_out, cs))? };
        }
        Phases::mark(&phases, 3, &lane.stream)?;
        done.record(1, &lane.stream)?;
        done.wait(1)?;
        let t_back = t.elapsed() - t_wait;
        let t = Instant::now();
        let h_out: &[u8] = b.h_out.ensure(&self.ctx, if packed { kept.max(1) } else { region.max(1) })?;
        let out = (0..n)
            .map(|i| {
                useful[i].map(|size| {
                    let at = if packed { packed_at[i] } else { i * stride };
                    h_out[at..at + size].to_vec()
                })
            })
            .collect();
        let t_collect = t.elapsed();
        drained.waited();
        drop(guard);
        Timings {
            setup: t_setup,
            stage: t_stage,
            wait: t_wait,
            back: t_back,
            collect: t_collect,
            gpu: Phases::totals(&phases),
        }
        .log("GPU compress batch", n, total_raw, start);
        self.record(n, total_raw, kept, start);
        Ok(out)
    }

    /// Decompresses each payload (already verified against its checksum on the CPU: nVCOMP does
    /// not validate input) into exactly `raw_lens[i]` bytes. A zstd payload of several frames and
    /// an LZ4 frame of several blocks (as `compress_batch` writes them) decode piece by piece, in
    /// parallel.
    pub fn decompress_batch(
        &self,
        codec: CodecId,
        payloads: &[&[u8]],
        raw_lens: &[usize],
        data_type: i32,
    ) -> Result<Vec<Vec<u8>>, GpuError> {
        let _ = data_type;
        let layout = layout_of(codec)?;
        let mut pieces: Vec<Piece<'_>> = Vec::with_capacity(payloads.len());
        let mut spans = Vec::with_capacity(payloads.len());
        for (i, (p, &raw)) in payloads.iter().zip(raw_lens).enumerate() {
            spans.push((pieces.len(), raw));
            let first = pieces.len();
            match layout {
                GpuLayout::ZstdFrames => {
                    let frames = zstd_frames(p).ok_or(GpuError::WrongSize(i))?;
                    let single = frames.len() == 1;
                    for (f, content) in frames {
                        // A lone frame is the whole payload; pieces must say their size.
                        let len = if single { raw } else { content.ok_or(GpuError::WrongSize(i))? };
                        pieces.push(Piece { data: f, raw: len, stored: false });
                    }
                }
                GpuLayout::Lz4Frame => {
                    // A frame laid out otherwise (linked blocks, checksums) is left to the CPU.
                    let blocks = lz4frame::blocks(p, raw).ok_or(GpuError::Unsupported(codec))?;
                    for (block, len) in blocks {
                        pieces.push(match block {
                            lz4frame::Block::Compressed(data) => Piece { data, raw: len, stored: false },
                            lz4frame::Block::Stored(data) => Piece { data, raw: len, stored: true },
                        });
                    }
                }
                GpuLayout::Whole => pieces.push(Piece { data: p, raw, stored: false }),
            }
            // The pieces of a payload decode end to end into one run: all but the last must fill
            // whole alignment units, and together they must make the raw length.
            let lens: Vec<usize> = pieces[first..].iter().map(|p| p.raw).collect();
            if !pieces_fit(&lens, raw) || pieces[first..].iter().any(|p| p.stored && p.data.len() != p.raw) {
                return Err(GpuError::WrongSize(i));
            }
        }
        self.decompress_lanes(codec, &pieces, &spans)
    }

    /// Runs a large batch as parts (split between spans) on all lanes at once.
    fn decompress_lanes(
        &self,
        codec: CodecId,
        pieces: &[Piece<'_>],
        spans: &[(usize, usize)],
    ) -> Result<Vec<Vec<u8>>, GpuError> {
        let parts = self.lanes.len().min(pieces.len() / LANE_SPLIT_MIN).min(spans.len()).max(1);
        if parts == 1 {
            return self.decompress_chunks(&self.lanes[0], codec, pieces, spans, Turn::solo());
        }
        // Parts cut between spans: (first span, end span, first piece, end piece).
        let per = spans.len().div_ceil(parts);
        let cuts: Vec<(usize, usize, usize, usize)> = (0..spans.len())
            .step_by(per)
            .map(|s0| {
                let s1 = (s0 + per).min(spans.len());
                let c1 = spans.get(s1).map_or(pieces.len(), |s| s.0);
                (s0, s1, spans[s0].0, c1)
            })
            .collect();
        let turns = Turns::default();
        let outs = on_threads(cuts.iter().zip(&self.lanes).enumerate().map(|(k, (&(s0, s1, c0, c1), lane))| {
            let turn = turns.turn(k);
            move || {
                let rebased: Vec<(usize, usize)> = spans[s0..s1].iter().map(|&(f, l)| (f - c0, l)).collect();
                self.decompress_chunks(lane, codec, &pieces[c0..c1], &rebased, turn)
            }
        }));
        let mut out = Vec::with_capacity(spans.len());
        for o in outs {
            out.extend(o?);
        }
        Ok(out)
    }

    /// Decodes every piece on one lane in one launch; returns one buffer per span `(first piece,
    /// bytes)`. Pieces decode end to end (aligned), so a span's pieces come out as one run; stored
    /// pieces are copied into place on the host. Output comes back in parts, so the host copies
    /// one part out while the next crosses the bus.
    fn decompress_chunks(
        &self,
        lane: &Lane,
        codec: CodecId,
        pieces: &[Piece<'_>],
        spans: &[(usize, usize)],
        turn: Turn<'_>,
    ) -> Result<Vec<Vec<u8>>, GpuError> {
        if self.fail {
            return Err(GpuError::Injected);
        }
        let n = pieces.len();
        if n == 0 {
            return Ok(Vec::new());
        }
        let start = Instant::now();
        let gpu: Vec<&Piece<'_>> = pieces.iter().filter(|p| !p.stored).collect();
        let gpu_index: Vec<usize> = (0..n).filter(|&i| !pieces[i].stored).collect();
        let m = gpu.len();
        let max_raw = gpu.iter().map(|p| p.raw).max().unwrap_or(0).max(1);
        let algo = self.lib.algo(codec).ok_or(GpuError::Unsupported(codec))?;
        let opts = Opts::decompress(algo.options);
        let cs = lane.stream.cu_stream();
        cuda(self.ctx.bind_to_thread())?;
        let mut guard = lane.bufs.lock().expect("buffers lock");
        // (Dropped before the lock on an early return: the copies queued so far end first.)
        let drained = Drained(&lane.stream);
        let b = &mut *guard;
        let (in_offsets, in_total) = aligned_offsets(gpu.iter().map(|p| p.data.len()));
        let (out_offsets, out_total) = aligned_offsets(pieces.iter().map(|p| p.raw));
        let gpu_raw: usize = gpu.iter().map(|p| p.raw).sum();
        let total_raw: usize = spans.iter().map(|s| s.1).sum();
        let temp = algo.decompress_temp_bytes(m.max(1), max_raw, opts, gpu_raw.max(1), &lane.stream)?;
        let d_in = b.d_in.ensure(&lane.stream, in_total.max(1))?;
        let d_out = b.d_out.ensure(&lane.stream, out_total)?;
        let d_temp = b.d_temp.ensure(&lane.stream, temp.max(1))?;
        let meta = BatchMeta::new(Call::Decompress, m);
        let d_meta = b.d_meta.ensure(&lane.stream, meta.len())?;
        let h_meta = b.h_meta.ensure(&self.ctx, meta.len())?;
        meta.fill(
            h_meta,
            [
                (Field::InPtrs, &|g| d_in + in_offsets[g] as u64),
                (Field::InSizes, &|g| gpu[g].data.len() as u64),
                (Field::OutCaps, &|g| gpu[g].raw as u64),
                (Field::OutPtrs, &|g| d_out + out_offsets[gpu_index[g]] as u64),
            ],
        );
        let batch = DeviceBatch { meta, meta_at: d_meta, temp_at: d_temp, temp_bytes: temp };
        let phases = Phases::new(&self.ctx)?;
        let t_setup = start.elapsed();
        Phases::mark(&phases, 0, &lane.stream)?;
        let mut t_stage = std::time::Duration::ZERO;
        if m > 0 {
            // SAFETY: our stream; pinned host memory that stays put until the stream is synchronised.
            unsafe { cuda(result::memcpy_htod_async(d_meta, &h_meta[..], cs))? };
            let datas: Vec<&[u8]> = gpu.iter().map(|p| p.data).collect();
            let part = self.part_bytes.load(Relaxed);
            turn.wait();
            t_stage = stage_upload(
                b.h_in.ensure(&self.ctx, in_total)?,
                d_in,
                &datas,
                &in_offsets,
                (part, self.streaming),
                cs,
            )?;
        }
        turn.pass();
        Phases::mark(&phases, 1, &lane.stream)?;
        if m > 0 {
            let (sizes, statuses) = (meta.range(Field::OutSizes), meta.statuses());
            // SAFETY: the metadata copied above (on this stream, before the launch) holds each
            // piece's input in d_in, staged above and checked on the CPU before this batch was
            // asked for, and its place and room in d_out; d_temp holds temp bytes; the lane's
            // buffers stay put (its lock is held) until the stream is synchronised below. Sizes
            // and statuses come back into pinned memory on the same stream.
            unsafe {
                algo.decompress_async(&batch, opts, &lane.stream)?;
                cuda(result::memcpy_dtoh_async(&mut h_meta[sizes.clone()], d_meta + sizes.start as u64, cs))?;
                cuda(result::memcpy_dtoh_async(&mut h_meta[statuses.clone()], d_meta + statuses.start as u64, cs))?;
            }
        }
        Phases::mark(&phases, 2, &lane.stream)?;
        // Output in parts of whole spans, each with an event the host waits on before copying out.
        let span_end = |k: usize| spans.get(k + 1).map_or(n, |s| s.0);
        let parts = group_parts((0..spans.len()).map(|k| (k..k + 1, spans[k].1)), self.part_bytes.load(Relaxed));
        let events = Events::new(&self.ctx, parts.len())?;
        let h_out = b.h_out.ensure(&self.ctx, out_total)?;
        for (k, sr) in parts.iter().enumerate() {
            let (p0, p1) = (spans[sr.start].0, span_end(sr.end - 1));
            let (lo, hi) = (out_offsets[p0], out_offsets[p1 - 1] + pieces[p1 - 1].raw);
            if m > 0 {
                // SAFETY: h_out and d_out hold out_total bytes; our stream.
                unsafe { cuda(result::memcpy_dtoh_async(&mut h_out[lo..hi], d_out + lo as u64, cs))? };
            }
            events.record(k, &lane.stream)?;
        }
        Phases::mark(&phases, 3, &lane.stream)?;
        let h_out: &[u8] = h_out;
        let mut out: Vec<Vec<u8>> = Vec::with_capacity(spans.len());
        let (mut t_wait, mut t_collect) = (std::time::Duration::ZERO, std::time::Duration::ZERO);
        for (k, sr) in parts.iter().enumerate() {
            let t = Instant::now();
            events.wait(k)?;
            t_wait += t.elapsed();
            if k == 0 {
                for (g, piece) in gpu.iter().enumerate() {
                    check("DecompressAsync (chunk)", meta.status(h_meta, g))?;
                    if meta.word(h_meta, Field::OutSizes, g) as usize != piece.raw {
                        return Err(GpuError::WrongSize(g));
                    }
                }
            }
            let t = Instant::now();
            // Stored pieces (uncompressed LZ4 blocks) go into place over what the GPU left there.
            let place_stored = |k: usize, v: &mut [u8]| {
                let (first, _) = spans[k];
                for i in first..span_end(k) {
                    if pieces[i].stored {
                        let at = out_offsets[i] - out_offsets[first];
                        v[at..at + pieces[i].raw].copy_from_slice(pieces[i].data);
                    }
                }
            };
            let decoded = |k: usize| &h_out[out_offsets[spans[k].0]..][..spans[k].1];
            let got: Vec<Vec<u8>> = sr
                .clone()
                .into_par_iter()
                .map(|k| {
                    let mut v = Vec::with_capacity(spans[k].1);
                    copy_into(&mut v, decoded(k), self.streaming);
                    place_stored(k, &mut v);
                    v
                })
                .collect();
            out.extend(got);
            t_collect += t.elapsed();
        }
        drained.waited();
        drop(guard);
        let back = std::time::Duration::ZERO;
        Timings {
            setup: t_setup,
            stage: t_stage,
            wait: t_wait,
            back,
            collect: t_collect,
            gpu: Phases::totals(&phases),
        }
        .log("GPU decompress batch", n, total_raw, start);
        self.record(n, in_total, total_raw, start);
        Ok(out)
    }
}

/// One unit of GPU decoding: compressed bytes for nVCOMP, or bytes stored as they are (an
/// uncompressed LZ4 block), copied into place on the host.
struct Piece<'a> {
    data: &'a [u8],
    raw: usize,
    stored: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_fit_only_when_they_tile_the_payload_without_overflow() {
        let unit = ALIGN;
        assert!(pieces_fit(&[unit, unit, 5], 2 * unit + 5));
        assert!(pieces_fit(&[7], 7));
        assert!(!pieces_fit(&[], 0), "no piece");
        assert!(!pieces_fit(&[unit + 1, 5], unit + 6), "a piece before the last leaves a gap");
        assert!(!pieces_fit(&[unit, 5], unit + 6), "short");
        // Sizes an object states that wrap around to the payload's length.
        assert!(!pieces_fit(&[usize::MAX - unit + 1, unit + 6], 6));
    }

    #[test]
    fn zstd_frames_splits_concatenated_frames_with_their_sizes() {
        let a = zstd::bulk::compress(&[1u8; 70_000], 1).unwrap();
        let b = zstd::bulk::compress(b"tail", 1).unwrap();
        let joined = [a.clone(), b.clone()].concat();
        let frames = zstd_frames(&joined).unwrap();
        assert_eq!(frames.len(), 2);
        assert_eq!((frames[0].0, frames[0].1), (&a[..], Some(70_000)));
        assert_eq!((frames[1].0, frames[1].1), (&b[..], Some(4)));
        assert!(zstd_frames(&joined[..joined.len() - 1]).is_none(), "a cut frame is not a frame");
        assert!(zstd_frames(b"not zstd").is_none());
        // Any zstd decoder reads the concatenation as one stream.
        let mut all = vec![1u8; 70_000];
        all.extend_from_slice(b"tail");
        assert_eq!(zstd::bulk::decompress(&joined, all.len()).unwrap(), all);
    }
}
