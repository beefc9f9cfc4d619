//! One GPU, driven through cudarc (dynamically loaded driver) and nVCOMP: batched compression and
//! decompression of frames, host memory to host memory, with device and pinned buffers reused
//! across batches. Only the real compressed bytes travel back.

use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use cudarc::driver::sys::CUdeviceptr;
use cudarc::driver::{CudaContext, CudaStream, result};

use rayon::prelude::*;

use super::copy::copy_into;
use super::nvcomp::{Algo, Nvcomp, Opts, SUCCESS};
use crate::codec::CodecId;
use crate::lz4frame;

/// Why a GPU batch failed; the caller falls back to the CPU.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    /// A CUDA driver call failed.
    #[error("CUDA: {0}")]
    Cuda(String),
    /// nVCOMP returned an error status.
    #[error("nVCOMP {call} returned status {status}")]
    Nvcomp {
        /// The call.
        call: &'static str,
        /// Its status.
        status: i32,
    },
    /// nVCOMP has no such algorithm, or a chunk is larger than it accepts.
    #[error("codec {0} cannot run on the GPU for this input")]
    Unsupported(CodecId),
    /// Fault injection (`SHRINKFS_GPU_FAULT=1`) asked this call to fail.
    #[error("injected GPU fault")]
    Injected,
    /// Decoded output had the wrong size (corrupt input that slipped past the checksums).
    #[error("GPU decoded chunk {0} to a wrong size")]
    WrongSize(usize),
}

fn cuda<T>(r: Result<T, cudarc::driver::DriverError>) -> Result<T, GpuError> {
    r.map_err(|e| GpuError::Cuda(e.to_string()))
}

fn check(call: &'static str, status: i32) -> Result<(), GpuError> {
    if status == SUCCESS { Ok(()) } else { Err(GpuError::Nvcomp { call, status }) }
}

const ALIGN: usize = 256;

fn align(n: usize) -> usize {
    n.div_ceil(ALIGN) * ALIGN
}

/// Offsets of buffers of these lengths laid end to end, each aligned, and the total length.
fn aligned_offsets(lens: impl Iterator<Item = usize>) -> (Vec<usize>, usize) {
    let mut total = 0;
    let offsets = lens
        .map(|l| {
            let o = total;
            total += align(l);
            o
        })
        .collect();
    (offsets, total)
}

/// Writes 64-bit little-endian words at the start of `meta` and zeroes the rest (the statuses).
fn put_words(meta: &mut [u8], words: impl Iterator<Item = u64>) {
    let mut at = 0;
    for w in words {
        meta[at..at + 8].copy_from_slice(&w.to_le_bytes());
        at += 8;
    }
    meta[at..].fill(0);
}

/// Copies `chunks` into `dst` at `offsets` on every core (one core's memcpy would cap a batch).
fn scatter(dst: &mut [u8], chunks: &[&[u8]], offsets: &[usize]) {
    use rayon::prelude::*;
    let mut parts: Vec<&mut [u8]> = Vec::with_capacity(chunks.len());
    let mut rest = dst;
    let mut at = 0;
    for (c, &o) in chunks.iter().zip(offsets) {
        let (_, tail) = rest.split_at_mut(o - at);
        let (part, tail) = tail.split_at_mut(c.len());
        parts.push(part);
        rest = tail;
        at = o + c.len();
    }
    parts.into_par_iter().zip(chunks.par_iter()).for_each(|(d, s)| super::copy::copy(d, s));
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

/// A device allocation that grows on demand and is freed on drop.
struct DevBuf {
    ptr: CUdeviceptr,
    len: usize,
}

impl DevBuf {
    fn ensure(&mut self, len: usize) -> Result<CUdeviceptr, GpuError> {
        if self.len < len {
            if self.ptr != 0 {
                // SAFETY: ptr came from malloc_sync and no work using it is in flight (callers synchronise).
                unsafe { cuda(result::free_sync(self.ptr))? };
                self.ptr = 0;
            }
            let want = len.next_power_of_two().max(1 << 20);
            // SAFETY: plain device allocation.
            self.ptr = unsafe { cuda(result::malloc_sync(want))? };
            self.len = want;
        }
        Ok(self.ptr)
    }
}

/// Pinned host memory that grows on demand.
struct HostBuf {
    ptr: *mut u8,
    len: usize,
}

impl HostBuf {
    fn ensure(&mut self, len: usize) -> Result<&mut [u8], GpuError> {
        if self.len < len {
            if !self.ptr.is_null() {
                // SAFETY: ptr came from malloc_host; nothing uses it now.
                unsafe { cuda(result::free_host(self.ptr.cast()))? };
                self.ptr = std::ptr::null_mut();
            }
            let want = len.next_power_of_two().max(1 << 20);
            // SAFETY: page-locked host allocation.
            self.ptr = unsafe { cuda(result::malloc_host(want, 0))? }.cast();
            self.len = want;
        }
        // SAFETY: ptr points to self.len bytes we own.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.ptr, len) })
    }
}

struct Buffers {
    d_in: DevBuf,
    d_out: DevBuf,
    d_temp: DevBuf,
    d_meta: DevBuf,
    h_in: HostBuf,
    h_out: HostBuf,
    h_meta: HostBuf,
}

// SAFETY: the raw pointers are only used while the Mutex around Buffers is held.
unsafe impl Send for Buffers {}

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
    /// each lane on its own thread, staging in turn, so one share's kernel and copies overlap the
    /// next one's staging.
    lanes: Vec<Lane>,
    lib: Nvcomp,
    stats: Mutex<GpuStats>,
    /// Bytes per part of a lane's copies.
    part_bytes: AtomicUsize,
    /// "NVIDIA H100 80GB HBM3 (nVCOMP from /path)".
    pub describe: String,
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

/// Lanes to open: `SHRINKFS_GPU_LANES` (1-8, for measuring), else 4 — the best of 2, 3, 4 and 6
/// measured on an H100 (BENCHMARKS.md §2): a lane's kernel and copies overlap the next lanes'
/// staging, and four shares keep the last lane's tail short.
fn lane_count() -> usize {
    std::env::var("SHRINKFS_GPU_LANES").ok().and_then(|v| v.parse().ok()).unwrap_or(4).clamp(1, 8)
}

fn fault_injected() -> bool {
    std::env::var("SHRINKFS_GPU_FAULT").is_ok_and(|v| v == "1")
}

impl Gpu {
    /// Opens GPU 0 and nVCOMP; the error is one line saying why not (no driver, no device, no library).
    pub fn probe() -> Result<Self, String> {
        // SAFETY: only checks whether the driver library can be opened.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return Err("no NVIDIA driver (libcuda.so.1 not found)".into());
        }
        let count = cudarc::driver::result::init()
            .and_then(|()| result::device::get_count())
            .map_err(|e| format!("CUDA: {e}"))?;
        if count < 1 {
            return Err("no CUDA device".into());
        }
        let lib = Nvcomp::load()?;
        let ctx = CudaContext::new(0).map_err(|e| format!("CUDA context: {e}"))?;
        let name = ctx.name().unwrap_or_else(|_| "GPU 0".into());
        let describe = format!("{name} (nVCOMP from {})", lib.path);
        let empty = || DevBuf { ptr: 0, len: 0 };
        let host = || HostBuf { ptr: std::ptr::null_mut(), len: 0 };
        let mut lanes = Vec::new();
        for _ in 0..lane_count() {
            let stream = ctx.new_stream().map_err(|e| format!("CUDA stream: {e}"))?;
            let bufs = Buffers {
                d_in: empty(),
                d_out: empty(),
                d_temp: empty(),
                d_meta: empty(),
                h_in: host(),
                h_out: host(),
                h_meta: host(),
            };
            lanes.push(Lane { stream, bufs: Mutex::new(bufs) });
        }
        Ok(Gpu {
            ctx,
            lanes,
            lib,
            stats: Mutex::new(GpuStats::default()),
            part_bytes: AtomicUsize::new(part_bytes_from_env()),
            describe,
        })
    }

    /// Codecs this GPU can run.
    pub fn codecs(&self) -> Vec<CodecId> {
        self.lib.codecs()
    }

    /// Sets the bytes per part of a lane's copies (default 16 MiB or `SHRINKFS_GPU_PART_MIB`);
    /// small values exercise the pipeline in tests.
    pub fn set_part_bytes(&self, bytes: usize) {
        self.part_bytes.store(bytes.max(1), Relaxed);
    }

    /// Totals so far.
    pub fn stats(&self) -> GpuStats {
        *self.stats.lock().expect("stats lock")
    }

    fn algo(&self, codec: CodecId, max_chunk: usize) -> Result<Algo, GpuError> {
        let a = self.lib.algo(codec).ok_or(GpuError::Unsupported(codec))?;
        if max_chunk > a.max_chunk {
            return Err(GpuError::Unsupported(codec));
        }
        Ok(a)
    }

    fn record(&self, chunks: usize, bytes_in: usize, bytes_out: usize, start: Instant) {
        let mut s = self.stats.lock().expect("stats lock");
        s.batches += 1;
        s.chunks += chunks as u64;
        s.bytes_in += bytes_in as u64;
        s.bytes_out += bytes_out as u64;
        s.nanos += start.elapsed().as_nanos() as u64;
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
        let pieces = codec == CodecId::Lz4 || (codec == CodecId::Zstd && chunks.iter().any(|c| c.len() > PIECE));
        if pieces {
            return self.compress_pieces(codec, chunks);
        }
        self.compress_lanes(codec, chunks, data_type)
    }

    /// Runs a large batch as equal parts on all lanes at once, each lane on its own thread.
    fn compress_lanes(
        &self,
        codec: CodecId,
        chunks: &[&[u8]],
        data_type: i32,
    ) -> Result<Vec<Option<Vec<u8>>>, GpuError> {
        let parts = self.lanes.len().min(chunks.len() / LANE_SPLIT_MIN).max(1);
        if parts == 1 {
            return self.compress_chunks(&self.lanes[0], codec, chunks, data_type, Turn::solo());
        }
        let per = chunks.len().div_ceil(parts);
        let turns = Turns::default();
        let jobs = chunks.chunks(per).zip(&self.lanes).enumerate();
        let outs = on_threads(jobs.map(|(k, (part, lane))| {
            let turn = turns.turn(k);
            move || self.compress_chunks(lane, codec, part, data_type, turn)
        }));
        let mut out = Vec::with_capacity(chunks.len());
        for o in outs {
            out.extend(o?);
        }
        Ok(out)
    }

    fn compress_pieces(&self, codec: CodecId, chunks: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>, GpuError> {
        let mut pieces: Vec<&[u8]> = Vec::new();
        // Each chunk's pieces, as a range of `pieces`.
        let mut ranges = Vec::with_capacity(chunks.len());
        for c in chunks {
            let first = pieces.len();
            pieces.extend(c.chunks(PIECE));
            ranges.push(first..pieces.len());
        }
        let outs = self.compress_lanes(codec, &pieces, 0)?;
        ranges
            .into_par_iter()
            .zip(chunks.par_iter())
            .map(|(range, chunk)| {
                let mut joined = Vec::with_capacity(chunk.len() / 2);
                if codec == CodecId::Lz4 {
                    lz4frame::begin(chunk.len() as u64, &mut joined);
                    for k in range {
                        // A piece the GPU could not shrink is stored as an uncompressed block.
                        lz4frame::push_block(&mut joined, outs[k].as_deref(), pieces[k]);
                    }
                    lz4frame::end(&mut joined);
                } else {
                    for k in range {
                        match &outs[k] {
                            Some(o) => joined.extend_from_slice(o),
                            // A piece the GPU could not shrink: the CPU writes it as a zstd frame
                            // too (raw blocks), so the rest of its chunk keeps its compression.
                            None => joined.extend_from_slice(
                                &zstd::bulk::compress(pieces[k], 1)
                                    .map_err(|e| GpuError::Cuda(format!("CPU zstd piece: {e}")))?,
                            ),
                        }
                    }
                }
                Ok((joined.len() < chunk.len()).then_some(joined))
            })
            .collect()
    }

    /// Compresses `chunks` on one lane in one launch. The input crosses the bus in parts, so the
    /// host stages one part while the previous one is copied; only the real compressed bytes
    /// come back (one batched copy).
    fn compress_chunks(
        &self,
        lane: &Lane,
        codec: CodecId,
        chunks: &[&[u8]],
        data_type: i32,
        turn: Turn<'_>,
    ) -> Result<Vec<Option<Vec<u8>>>, GpuError> {
        if fault_injected() {
            return Err(GpuError::Injected);
        }
        if chunks.is_empty() {
            return Ok(Vec::new());
        }
        let start = Instant::now();
        let n = chunks.len();
        let max_chunk = chunks.iter().map(|c| c.len()).max().unwrap_or(0).max(1);
        let algo = self.algo(codec, max_chunk)?;
        let opts = Opts::compress(codec, data_type);
        let s = lane.stream.cu_stream() as *mut c_void;
        let cs = lane.stream.cu_stream();
        cuda(self.ctx.bind_to_thread())?;
        let mut guard = lane.bufs.lock().expect("buffers lock");
        let b = &mut *guard;
        let mut max_out = 0usize;
        // SAFETY: FFI with valid out-pointers.
        check("CompressGetMaxOutputChunkSize", unsafe { (algo.max_output)(max_chunk, opts, &mut max_out) })?;
        let (in_offsets, in_total) = aligned_offsets(chunks.iter().map(|c| c.len()));
        let stride = align(max_out);
        let total_raw: usize = chunks.iter().map(|c| c.len()).sum();
        let mut temp = 0usize;
        // SAFETY: FFI with valid out-pointers.
        check("CompressGetTempSize", unsafe { (algo.compress_temp)(n, max_chunk, opts, &mut temp, total_raw, s) })?;
        let d_in = b.d_in.ensure(in_total)?;
        let d_out = b.d_out.ensure(stride * n)?;
        let d_temp = b.d_temp.ensure(temp.max(1))?;
        // Metadata: in_ptrs, in_sizes, out_ptrs, out_sizes (n words each), then statuses.
        let meta_len = 8 * 4 * n + 4 * n;
        let d_meta = b.d_meta.ensure(meta_len)?;
        let h_meta = b.h_meta.ensure(meta_len)?;
        let words = (0..n)
            .map(|i| d_in + in_offsets[i] as u64)
            .chain(chunks.iter().map(|c| c.len() as u64))
            .chain((0..n).map(|i| d_out + (i * stride) as u64));
        put_words(h_meta, words);
        let phases = Phases::new()?;
        let t_setup = start.elapsed();
        Phases::mark(&phases, 0, cs)?;
        // SAFETY: our stream; pinned host memory that stays put until the stream is synchronised.
        unsafe { cuda(result::memcpy_htod_async(d_meta, &h_meta[..], cs))? };
        let part = self.part_bytes.load(Relaxed);
        turn.wait();
        let t_stage = stage_upload(b.h_in.ensure(in_total)?, d_in, chunks, &in_offsets, part, cs)?;
        turn.pass();
        Phases::mark(&phases, 1, cs)?;
        let p = |k: usize| (d_meta + (k * 8 * n) as u64) as *mut c_void;
        // SAFETY: device buffers sized above; our stream.
        unsafe {
            check(
                "CompressAsync",
                (algo.compress)(
                    p(0) as *const *const c_void,
                    p(1) as *const usize,
                    max_chunk,
                    n,
                    d_temp as *mut c_void,
                    temp,
                    p(2) as *const *mut c_void,
                    p(3) as *mut usize,
                    opts,
                    (d_meta + (32 * n) as u64) as *mut i32,
                    s,
                ),
            )?;
        }
        Phases::mark(&phases, 2, cs)?;
        let t = Instant::now();
        let done = Events::new(2)?;
        // SAFETY: sizes and statuses into pinned memory; our stream.
        unsafe { cuda(result::memcpy_dtoh_async(&mut h_meta[24 * n..], d_meta + (24 * n) as u64, cs))? };
        done.record(0, cs)?;
        done.wait(0)?;
        let t_wait = t.elapsed();
        let useful: Vec<Option<usize>> = (0..n)
            .map(|i| {
                let size = word_at(h_meta, 24 * n, i) as usize;
                let status = i32::from_le_bytes(h_meta[32 * n + 4 * i..32 * n + 4 * i + 4].try_into().expect("4"));
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
        let packed = copies.len() > 1 && BATCH_COPY.load(Relaxed) && {
            let h_out = b.h_out.ensure(kept.max(1))?;
            match batch_dtoh(h_out, &copies, cs) {
                Ok(()) => true,
                Err(e) => {
                    tracing::debug!("batched copies unavailable ({e}); copying the strided output region");
                    BATCH_COPY.store(false, Relaxed);
                    false
                }
            }
        };
        let region = (0..n).rev().find(|&i| useful[i].is_some()).map_or(0, |i| i * stride + useful[i].unwrap_or(0));
        if !packed {
            let h_out = b.h_out.ensure(region.max(1))?;
            // SAFETY: the device output region holds n * stride >= region bytes.
            unsafe { cuda(result::memcpy_dtoh_async(&mut h_out[..region], d_out, cs))? };
        }
        Phases::mark(&phases, 3, cs)?;
        done.record(1, cs)?;
        done.wait(1)?;
        let t_back = t.elapsed() - t_wait;
        let t = Instant::now();
        let h_out: &[u8] = b.h_out.ensure(if packed { kept.max(1) } else { region.max(1) })?;
        let out = (0..n)
            .into_par_iter()
            .map(|i| {
                useful[i].map(|size| {
                    let at = if packed { packed_at[i] } else { i * stride };
                    h_out[at..at + size].to_vec()
                })
            })
            .collect();
        let t_collect = t.elapsed();
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
        let mut pieces: Vec<Piece<'_>> = Vec::with_capacity(payloads.len());
        let mut spans = Vec::with_capacity(payloads.len());
        for (i, (p, &raw)) in payloads.iter().zip(raw_lens).enumerate() {
            spans.push((pieces.len(), raw));
            let first = pieces.len();
            match codec {
                CodecId::Zstd => {
                    let frames = zstd_frames(p).ok_or(GpuError::WrongSize(i))?;
                    let single = frames.len() == 1;
                    for (f, content) in frames {
                        // A lone frame is the whole payload; pieces must say their size.
                        let len = if single { raw } else { content.ok_or(GpuError::WrongSize(i))? };
                        pieces.push(Piece { data: f, raw: len, stored: false });
                    }
                }
                CodecId::Lz4 => {
                    // A frame laid out otherwise (linked blocks, checksums) is left to the CPU.
                    let blocks = lz4frame::blocks(p, raw).ok_or(GpuError::Unsupported(codec))?;
                    for (block, len) in blocks {
                        pieces.push(match block {
                            lz4frame::Block::Compressed(data) => Piece { data, raw: len, stored: false },
                            lz4frame::Block::Stored(data) => Piece { data, raw: len, stored: true },
                        });
                    }
                }
                _ => pieces.push(Piece { data: p, raw, stored: false }),
            }
            // The pieces of a payload decode end to end into one run: all but the last must fill
            // whole alignment units, and together they must make the raw length.
            let lens: Vec<usize> = pieces[first..].iter().map(|p| p.raw).collect();
            let fits = lens.iter().sum::<usize>() == raw && lens[..lens.len() - 1].iter().all(|l| l % ALIGN == 0);
            if !fits || pieces[first..].iter().any(|p| p.stored && p.data.len() != p.raw) {
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
        if fault_injected() {
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
        let opts = Opts::decompress(codec);
        let s = lane.stream.cu_stream() as *mut c_void;
        let cs = lane.stream.cu_stream();
        cuda(self.ctx.bind_to_thread())?;
        let mut guard = lane.bufs.lock().expect("buffers lock");
        let b = &mut *guard;
        let (in_offsets, in_total) = aligned_offsets(gpu.iter().map(|p| p.data.len()));
        let (out_offsets, out_total) = aligned_offsets(pieces.iter().map(|p| p.raw));
        let gpu_raw: usize = gpu.iter().map(|p| p.raw).sum();
        let total_raw: usize = spans.iter().map(|s| s.1).sum();
        let mut temp = 0usize;
        // SAFETY: FFI with valid out-pointers.
        check("DecompressGetTempSize", unsafe {
            (algo.decompress_temp)(m.max(1), max_raw, opts, &mut temp, gpu_raw.max(1), s)
        })?;
        let d_in = b.d_in.ensure(in_total.max(1))?;
        let d_out = b.d_out.ensure(out_total)?;
        let d_temp = b.d_temp.ensure(temp.max(1))?;
        // in_ptrs, in_sizes, out_caps, out_sizes, out_ptrs (m words each), statuses
        let meta_len = (8 * 5 + 4) * m.max(1);
        let d_meta = b.d_meta.ensure(meta_len)?;
        let h_meta = b.h_meta.ensure(meta_len)?;
        let words = (0..m)
            .map(|g| d_in + in_offsets[g] as u64)
            .chain(gpu.iter().map(|p| p.data.len() as u64))
            .chain(gpu.iter().map(|p| p.raw as u64))
            .chain(std::iter::repeat_n(0, m))
            .chain(gpu_index.iter().map(|&i| d_out + out_offsets[i] as u64));
        put_words(h_meta, words);
        let phases = Phases::new()?;
        let t_setup = start.elapsed();
        Phases::mark(&phases, 0, cs)?;
        let mut t_stage = std::time::Duration::ZERO;
        if m > 0 {
            // SAFETY: our stream; pinned host memory that stays put until the stream is synchronised.
            unsafe { cuda(result::memcpy_htod_async(d_meta, &h_meta[..], cs))? };
            let datas: Vec<&[u8]> = gpu.iter().map(|p| p.data).collect();
            let part = self.part_bytes.load(Relaxed);
            turn.wait();
            t_stage = stage_upload(b.h_in.ensure(in_total)?, d_in, &datas, &in_offsets, part, cs)?;
        }
        turn.pass();
        Phases::mark(&phases, 1, cs)?;
        if m > 0 {
            let p = |k: usize| (d_meta + (k * 8 * m) as u64) as *mut c_void;
            // SAFETY: device buffers sized above; our stream; sizes and statuses into pinned memory.
            unsafe {
                check(
                    "DecompressAsync",
                    (algo.decompress)(
                        p(0) as *const *const c_void,
                        p(1) as *const usize,
                        p(2) as *const usize,
                        p(3) as *mut usize,
                        m,
                        d_temp as *mut c_void,
                        temp,
                        p(4) as *const *mut c_void,
                        opts,
                        (d_meta + (40 * m) as u64) as *mut i32,
                        s,
                    ),
                )?;
                cuda(result::memcpy_dtoh_async(&mut h_meta[24 * m..32 * m], d_meta + (24 * m) as u64, cs))?;
                cuda(result::memcpy_dtoh_async(&mut h_meta[40 * m..44 * m], d_meta + (40 * m) as u64, cs))?;
            }
        }
        Phases::mark(&phases, 2, cs)?;
        // Output in parts of whole spans, each with an event the host waits on before copying out.
        let span_end = |k: usize| spans.get(k + 1).map_or(n, |s| s.0);
        let parts = sub_batches((0..spans.len()).map(|k| (k..k + 1, spans[k].1)), self.part_bytes.load(Relaxed));
        let events = Events::new(parts.len())?;
        let h_out = b.h_out.ensure(out_total)?;
        for (k, sr) in parts.iter().enumerate() {
            let (p0, p1) = (spans[sr.start].0, span_end(sr.end - 1));
            let (lo, hi) = (out_offsets[p0], out_offsets[p1 - 1] + pieces[p1 - 1].raw);
            if m > 0 {
                // SAFETY: h_out and d_out hold out_total bytes; our stream.
                unsafe { cuda(result::memcpy_dtoh_async(&mut h_out[lo..hi], d_out + lo as u64, cs))? };
            }
            events.record(k, cs)?;
        }
        Phases::mark(&phases, 3, cs)?;
        let h_out: &[u8] = h_out;
        let mut out: Vec<Vec<u8>> = Vec::with_capacity(spans.len());
        let (mut t_wait, mut t_collect) = (std::time::Duration::ZERO, std::time::Duration::ZERO);
        for (k, sr) in parts.iter().enumerate() {
            let t = Instant::now();
            events.wait(k)?;
            t_wait += t.elapsed();
            if k == 0 {
                for g in 0..m {
                    let status = i32::from_le_bytes(h_meta[40 * m + 4 * g..40 * m + 4 * g + 4].try_into().expect("4"));
                    check("DecompressAsync (chunk)", status)?;
                    if word_at(h_meta, 24 * m, g) as usize != gpu[g].raw {
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
                    copy_into(&mut v, decoded(k));
                    place_stored(k, &mut v);
                    v
                })
                .collect();
            out.extend(got);
            t_collect += t.elapsed();
        }
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

/// Where one lane's batch spent its time, logged at debug level: host set-up, staging into pinned
/// memory, waiting on the GPU, bringing results back, copying them out; and from CUDA events the
/// milliseconds of host-to-device copies, kernel and copies back.
struct Timings {
    setup: std::time::Duration,
    stage: std::time::Duration,
    wait: std::time::Duration,
    back: std::time::Duration,
    collect: std::time::Duration,
    gpu: [f32; 3],
}

impl Timings {
    fn log(&self, what: &'static str, chunks: usize, bytes: usize, start: Instant) {
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

/// One unit of GPU decoding: compressed bytes for nVCOMP, or bytes stored as they are (an
/// uncompressed LZ4 block), copied into place on the host.
struct Piece<'a> {
    data: &'a [u8],
    raw: usize,
    stored: bool,
}

/// Reads the little-endian word `i` of the array at byte `base` of `meta`.
fn word_at(meta: &[u8], base: usize, i: usize) -> u64 {
    u64::from_le_bytes(meta[base + 8 * i..base + 8 * i + 8].try_into().expect("8 bytes"))
}

/// Lets the lanes of one batch stage their input one after another. Staging (copying into
/// pinned memory) uses every core, so staging lanes at once gains nothing, while staging them in
/// turn lets the first lane's copies and kernel start after its own share is staged and run while
/// the next lanes stage.
#[derive(Default)]
struct Turns {
    next: Mutex<usize>,
    cv: std::sync::Condvar,
}

impl Turns {
    fn turn(&self, k: usize) -> Turn<'_> {
        Turn { turns: Some(self), k }
    }
}

/// Lane `k`'s place in its batch's `Turns`; passes the turn on when dropped, so a lane that
/// fails early never holds up the others.
struct Turn<'a> {
    turns: Option<&'a Turns>,
    k: usize,
}

impl Turn<'_> {
    /// A lane alone: never waits.
    fn solo() -> Turn<'static> {
        Turn { turns: None, k: 0 }
    }

    fn wait(&self) {
        if let Some(t) = self.turns {
            let mut next = t.next.lock().expect("turns lock");
            while *next < self.k {
                next = t.cv.wait(next).expect("turns lock");
            }
        }
    }

    fn pass(&self) {
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

/// Runs each job on its own thread (lanes block on their streams and on each other's turns,
/// which must not happen on the rayon pool their staging and collecting use) and returns the
/// results in order.
fn on_threads<T: Send, F: FnOnce() -> Result<T, GpuError> + Send>(
    jobs: impl Iterator<Item = F>,
) -> Vec<Result<T, GpuError>> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = jobs.map(|job| scope.spawn(job)).collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(GpuError::Cuda("a GPU lane thread panicked".into()))))
            .collect()
    })
}

/// Bytes per part of a lane's copies: input goes up and output comes back in parts, so the host
/// works on one part while another crosses the bus (`SHRINKFS_GPU_PART_MIB` for measuring).
fn part_bytes_from_env() -> usize {
    std::env::var("SHRINKFS_GPU_PART_MIB").ok().and_then(|v| v.parse::<usize>().ok()).unwrap_or(16).max(1) << 20
}

/// Whether batched copies (`cuMemcpyBatchAsync`) work here; cleared after the first failure.
static BATCH_COPY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// Copies `(device address, offset in dst, bytes)` regions into pinned `dst` with one driver call.
fn batch_dtoh(
    dst: &mut [u8],
    copies: &[(u64, usize, usize)],
    stream: cudarc::driver::sys::CUstream,
) -> Result<(), GpuError> {
    use cudarc::driver::sys;
    if std::env::var("SHRINKFS_GPU_BATCH_COPY").is_ok_and(|v| v == "0") {
        return Err(GpuError::Cuda("batched copies turned off (SHRINKFS_GPU_BATCH_COPY=0)".into()));
    }
    if copies.iter().any(|&(_, at, len)| at + len > dst.len()) {
        return Err(GpuError::Cuda("batched copy outside its destination".into()));
    }
    let base = dst.as_mut_ptr() as u64;
    let mut dsts: Vec<sys::CUdeviceptr> = copies.iter().map(|&(_, at, _)| base + at as u64).collect();
    let mut srcs: Vec<sys::CUdeviceptr> = copies.iter().map(|c| c.0).collect();
    let mut sizes: Vec<usize> = copies.iter().map(|c| c.2).collect();
    let loc = |type_| sys::CUmemLocation { type_, id: 0 };
    let mut attrs = sys::CUmemcpyAttributes {
        srcAccessOrder: sys::CUmemcpySrcAccessOrder::CU_MEMCPY_SRC_ACCESS_ORDER_STREAM,
        srcLocHint: loc(sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE),
        dstLocHint: loc(sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST),
        flags: 0,
    };
    let mut attr_index = [0usize];
    // SAFETY: arrays of `copies.len()` entries; destinations lie inside pinned `dst` (checked
    // above), sources inside the device output buffer; our stream.
    unsafe {
        sys::cuMemcpyBatchAsync_v2(
            dsts.as_mut_ptr(),
            srcs.as_mut_ptr(),
            sizes.as_mut_ptr(),
            copies.len(),
            &mut attrs,
            attr_index.as_mut_ptr(),
            1,
            stream,
        )
        .result()
        .map_err(|e| GpuError::Cuda(format!("cuMemcpyBatchAsync: {e}")))
    }
}

/// Stages `datas` into pinned `h_in` at `offsets` and sends them to `d_in` in parts of about
/// `part` bytes, so the host copies one part in while the previous one crosses the bus. Returns
/// the host's staging time.
fn stage_upload(
    h_in: &mut [u8],
    d_in: CUdeviceptr,
    datas: &[&[u8]],
    offsets: &[usize],
    part: usize,
    stream: cudarc::driver::sys::CUstream,
) -> Result<std::time::Duration, GpuError> {
    let mut staging = std::time::Duration::ZERO;
    for r in sub_batches((0..datas.len()).map(|i| (i..i + 1, datas[i].len())), part) {
        let (lo, hi) = (offsets[r.start], offsets[r.end - 1] + datas[r.end - 1].len());
        let t = Instant::now();
        let rel: Vec<usize> = offsets[r.clone()].iter().map(|o| o - lo).collect();
        scatter(&mut h_in[lo..hi], &datas[r], &rel);
        staging += t.elapsed();
        // SAFETY: pinned host memory that stays put until the stream is synchronised; d_in holds it.
        unsafe { cuda(result::memcpy_htod_async(d_in + lo as u64, &h_in[lo..hi], stream))? };
    }
    Ok(staging)
}

/// Groups consecutive units `(range, bytes)` into parts of at least `target` bytes each.
fn sub_batches(
    units: impl Iterator<Item = (std::ops::Range<usize>, usize)>,
    target: usize,
) -> Vec<std::ops::Range<usize>> {
    let mut out: Vec<std::ops::Range<usize>> = Vec::new();
    let mut bytes = 0;
    for (r, len) in units {
        match out.last_mut() {
            Some(last) if bytes < target => last.end = r.end,
            _ => {
                out.push(r);
                bytes = 0;
            }
        }
        bytes += len;
    }
    out
}

/// CUDA events, one per sub-batch, destroyed on drop.
struct Events(Vec<cudarc::driver::sys::CUevent>);

impl Events {
    /// Events to wait on. Waiting sleeps instead of spinning (blocking sync): several lanes
    /// spinning would take the cores the host's copies need.
    fn new(n: usize) -> Result<Self, GpuError> {
        use cudarc::driver::sys::CUevent_flags::{CU_EVENT_BLOCKING_SYNC, CU_EVENT_DISABLE_TIMING};
        Self::with_flags(n, CU_EVENT_BLOCKING_SYNC as u32 | CU_EVENT_DISABLE_TIMING as u32)
    }

    fn with_flags(n: usize, flags: u32) -> Result<Self, GpuError> {
        let mut e = Events(Vec::with_capacity(n));
        for _ in 0..n {
            let mut ev = std::mem::MaybeUninit::uninit();
            // SAFETY: cuEventCreate writes the event on success.
            unsafe {
                cuda(cudarc::driver::sys::cuEventCreate(ev.as_mut_ptr(), flags).result())?;
                e.0.push(ev.assume_init());
            }
        }
        Ok(e)
    }

    fn record(&self, j: usize, stream: cudarc::driver::sys::CUstream) -> Result<(), GpuError> {
        // SAFETY: a live event and our stream.
        unsafe { cuda(result::event::record(self.0[j], stream)) }
    }

    fn wait(&self, j: usize) -> Result<(), GpuError> {
        // SAFETY: a live event.
        unsafe { cuda(result::event::synchronize(self.0[j])) }
    }
}

/// Where a lane's GPU time goes: marks before the host-to-device copies, after them, after the
/// kernel and after the copies back. Only made when debug logging is on.
struct Phases(Events);

impl Phases {
    fn new() -> Result<Option<Self>, GpuError> {
        if !tracing::enabled!(tracing::Level::DEBUG) {
            return Ok(None);
        }
        Ok(Some(Phases(Events::with_flags(4, cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT as u32)?)))
    }

    fn mark(phases: &Option<Self>, k: usize, stream: cudarc::driver::sys::CUstream) -> Result<(), GpuError> {
        phases.as_ref().map_or(Ok(()), |p| p.0.record(k, stream))
    }

    /// Milliseconds of host-to-device copies, kernel and copies back (after the stream is done).
    fn totals(phases: &Option<Self>) -> [f32; 3] {
        let mut t = [0f32; 3];
        if let Some(p) = phases {
            for (k, slot) in t.iter_mut().enumerate() {
                // SAFETY: live events recorded on a finished stream.
                *slot = unsafe { result::event::elapsed(p.0.0[k], p.0.0[k + 1]) }.unwrap_or(0.0);
            }
        }
        t
    }
}

impl Drop for Events {
    fn drop(&mut self) {
        for &e in &self.0 {
            // SAFETY: created by us; callers have waited on (or abandoned) the work that records it.
            let _ = unsafe { result::event::destroy(e) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_laid_out_aligned_and_metadata_zero_padded() {
        let (offsets, total) = aligned_offsets([1usize, 256, 257, 0].into_iter());
        assert_eq!((offsets, total), (vec![0, 256, 512, 1024], 1024));
        let mut meta = vec![0xaa; 8 * 3 + 4 * 2];
        put_words(&mut meta, [1u64, 2].into_iter());
        assert_eq!(&meta[..8], &1u64.to_le_bytes());
        assert_eq!(&meta[8..16], &2u64.to_le_bytes());
        assert!(meta[16..].iter().all(|&b| b == 0), "sizes and statuses start at zero");
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

    #[test]
    fn sub_batches_group_whole_units_up_to_the_target() {
        let units = [(0..2, 10), (2..3, 5), (3..5, 20), (5..6, 1)];
        assert_eq!(sub_batches(units.iter().cloned(), 12), vec![0..3, 3..5, 5..6]);
        assert_eq!(sub_batches(units.iter().cloned(), 1000), vec![0..6]);
        assert_eq!(sub_batches(units.iter().cloned(), 1), vec![0..2, 2..3, 3..5, 5..6]);
        assert!(sub_batches(std::iter::empty(), 1).is_empty());
    }

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

    #[test]
    fn scatter_places_every_chunk_at_its_offset() {
        let chunks: Vec<&[u8]> = vec![b"abc", b"", b"defgh"];
        let (offsets, total) = aligned_offsets(chunks.iter().map(|c| c.len()));
        let mut dst = vec![0u8; total];
        scatter(&mut dst, &chunks, &offsets);
        for (c, o) in chunks.iter().zip(&offsets) {
            assert_eq!(&dst[*o..*o + c.len()], *c);
        }
    }
}
