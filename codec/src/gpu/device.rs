//! One GPU, driven through cudarc (dynamically loaded driver) and nVCOMP: batched compression and
//! decompression of frames, host memory to host memory, with device and pinned buffers reused
//! across batches. Only the real compressed bytes travel back.

use std::ffi::c_void;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use cudarc::driver::sys::CUdeviceptr;
use cudarc::driver::{CudaContext, CudaStream, result};

use rayon::prelude::*;

use super::nvcomp::{Algo, Nvcomp, Opts, SUCCESS};
use crate::codec::CodecId;

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
    parts.into_par_iter().zip(chunks.par_iter()).for_each(|(d, s)| d.copy_from_slice(s));
}

/// Raw bytes per zstd piece on the GPU (see `Gpu::compress_batch`): nVCOMP compresses each chunk
/// of a batch on one thread block, so a 1 MiB frame is one long serial job (about 40 ms on an
/// H100); 64 KiB pieces are the size nVCOMP's own high-level interface uses.
pub const ZSTD_PIECE: usize = 64 << 10;

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
    /// Streams with their own buffers: a large batch runs as halves on two lanes at once, so one
    /// half's host copies and transfers overlap the other's kernel.
    lanes: Vec<Lane>,
    lib: Nvcomp,
    stats: Mutex<GpuStats>,
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

/// Chunks above which compressed output comes back in one copy of the whole strided region.
const ONE_COPY_CHUNKS: usize = 512;

/// Chunks below which a batch runs on one lane (halves of fewer would not fill the GPU).
const LANE_SPLIT_MIN: usize = 64;

/// Lanes to open: `SHRINKFS_GPU_LANES` (1-8, for measuring), else 2.
fn lane_count() -> usize {
    std::env::var("SHRINKFS_GPU_LANES").ok().and_then(|v| v.parse().ok()).unwrap_or(2).clamp(1, 8)
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
        Ok(Gpu { ctx, lanes, lib, stats: Mutex::new(GpuStats::default()), describe })
    }

    /// Codecs this GPU can run.
    pub fn codecs(&self) -> Vec<CodecId> {
        self.lib.codecs()
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
    /// zstd chunks larger than `ZSTD_PIECE` are compressed as pieces of that size, each its own
    /// zstd frame, concatenated: still one standard zstd payload (every decoder reads concatenated
    /// frames) but many times more parallel on the GPU (BENCHMARKS.md §2).
    pub fn compress_batch(
        &self,
        codec: CodecId,
        chunks: &[&[u8]],
        data_type: i32,
    ) -> Result<Vec<Option<Vec<u8>>>, GpuError> {
        if codec == CodecId::Zstd && chunks.iter().any(|c| c.len() > ZSTD_PIECE) {
            return self.compress_zstd_pieces(chunks);
        }
        self.compress_lanes(codec, chunks, data_type)
    }

    /// Runs a large batch as equal parts on all lanes at once.
    fn compress_lanes(
        &self,
        codec: CodecId,
        chunks: &[&[u8]],
        data_type: i32,
    ) -> Result<Vec<Option<Vec<u8>>>, GpuError> {
        let parts = self.lanes.len().min(chunks.len() / LANE_SPLIT_MIN).max(1);
        if parts == 1 {
            return self.compress_chunks(&self.lanes[0], codec, chunks, data_type);
        }
        let per = chunks.len().div_ceil(parts);
        let outs: Vec<Result<Vec<Option<Vec<u8>>>, GpuError>> = chunks
            .par_chunks(per)
            .zip(self.lanes.par_iter())
            .map(|(part, lane)| self.compress_chunks(lane, codec, part, data_type))
            .collect();
        let mut out = Vec::with_capacity(chunks.len());
        for o in outs {
            out.extend(o?);
        }
        Ok(out)
    }

    fn compress_zstd_pieces(&self, chunks: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>, GpuError> {
        let mut pieces: Vec<&[u8]> = Vec::new();
        // Each chunk's pieces, as a range of `pieces`.
        let mut ranges = Vec::with_capacity(chunks.len());
        for c in chunks {
            let first = pieces.len();
            pieces.extend(c.chunks(ZSTD_PIECE));
            ranges.push(first..pieces.len());
        }
        let outs = self.compress_lanes(CodecId::Zstd, &pieces, 0)?;
        ranges
            .into_par_iter()
            .zip(chunks.par_iter())
            .map(|(range, chunk)| {
                let mut joined = Vec::with_capacity(chunk.len() / 2);
                for k in range {
                    match &outs[k] {
                        Some(o) => joined.extend_from_slice(o),
                        // A piece the GPU could not shrink: the CPU writes it as a zstd frame too
                        // (raw blocks), so the rest of its chunk keeps its compression.
                        None => joined.extend_from_slice(
                            &zstd::bulk::compress(pieces[k], 1)
                                .map_err(|e| GpuError::Cuda(format!("CPU zstd piece: {e}")))?,
                        ),
                    }
                }
                Ok((joined.len() < chunk.len()).then_some(joined))
            })
            .collect()
    }

    fn compress_chunks(
        &self,
        lane: &Lane,
        codec: CodecId,
        chunks: &[&[u8]],
        data_type: i32,
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
        cuda(self.ctx.bind_to_thread())?;
        let mut b = lane.bufs.lock().expect("buffers lock");
        let mut max_out = 0usize;
        // SAFETY: FFI with valid out-pointers.
        check("CompressGetMaxOutputChunkSize", unsafe { (algo.max_output)(max_chunk, opts, &mut max_out) })?;
        let (in_offsets, in_total) = aligned_offsets(chunks.iter().map(|c| c.len()));
        let out_stride = align(max_out);
        let total_raw: usize = chunks.iter().map(|c| c.len()).sum();
        let mut temp = 0usize;
        // SAFETY: FFI with valid out-pointers.
        check("CompressGetTempSize", unsafe { (algo.compress_temp)(n, max_chunk, opts, &mut temp, total_raw, s) })?;
        let d_in = b.d_in.ensure(in_total)?;
        let d_out = b.d_out.ensure(out_stride * n)?;
        let d_temp = b.d_temp.ensure(temp.max(1))?;
        // Metadata: in_ptrs, in_sizes, out_ptrs, out_sizes (n words each), then statuses.
        let meta_len = 8 * 4 * n + 4 * n;
        let d_meta = b.d_meta.ensure(meta_len)?;
        let t_setup = start.elapsed();
        {
            let h_in = b.h_in.ensure(in_total)?;
            scatter(h_in, chunks, &in_offsets);
        }
        let t_scatter = start.elapsed();
        {
            let h_meta = b.h_meta.ensure(meta_len)?;
            let words = (0..n)
                .map(|i| d_in + in_offsets[i] as u64)
                .chain(chunks.iter().map(|c| c.len() as u64))
                .chain((0..n).map(|i| d_out + (i * out_stride) as u64));
            put_words(h_meta, words);
        }
        let cs = lane.stream.cu_stream();
        // SAFETY: device and pinned buffers are at least as large as the copies; the stream is ours.
        unsafe {
            cuda(result::memcpy_htod_async(d_meta, &b.h_meta.ensure(meta_len)?[..], cs))?;
            cuda(result::memcpy_htod_async(d_in, &b.h_in.ensure(in_total)?[..], cs))?;
            let p = |k: usize| (d_meta + (k * 8 * n) as u64) as *mut c_void;
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
            // Sizes and statuses first, then only the real compressed bytes of useful chunks.
            let h_meta = b.h_meta.ensure(meta_len)?;
            cuda(result::memcpy_dtoh_async(&mut h_meta[24 * n..], d_meta + (24 * n) as u64, cs))?;
            cuda(result::stream::synchronize(cs))?;
        }
        let t_kernel = start.elapsed();
        let h_meta = b.h_meta.ensure(meta_len)?;
        let sizes: Vec<usize> = (0..n)
            .map(|i| u64::from_le_bytes(h_meta[24 * n + i * 8..24 * n + i * 8 + 8].try_into().expect("8")) as usize)
            .collect();
        let statuses: Vec<i32> = (0..n)
            .map(|i| i32::from_le_bytes(h_meta[32 * n + i * 4..32 * n + i * 4 + 4].try_into().expect("4")))
            .collect();
        let useful: Vec<bool> =
            (0..n).map(|i| statuses[i] == SUCCESS && sizes[i] < chunks[i].len() && sizes[i] <= max_out).collect();
        let out_total: usize = (0..n).filter(|&i| useful[i]).map(|i| sizes[i]).sum();
        // Few chunks: copy back only their compressed bytes, one copy each. Many: one copy of the
        // strided output region up to the last useful byte beats thousands of small copies.
        let last = (0..n).rev().find(|&i| useful[i]).map_or(0, |i| i * out_stride + sizes[i]);
        let one_copy = n > ONE_COPY_CHUNKS;
        let mut offsets = Vec::with_capacity(n);
        let h_len = if one_copy { last } else { out_total };
        {
            let h_out = b.h_out.ensure(h_len.max(1))?;
            if one_copy {
                offsets.extend((0..n).map(|i| i * out_stride));
                // SAFETY: h_out has `last` bytes; the device output region is n * out_stride >= last.
                unsafe { cuda(result::memcpy_dtoh_async(&mut h_out[..last], d_out, cs))? };
            } else {
                let mut at = 0;
                for i in 0..n {
                    offsets.push(at);
                    if useful[i] {
                        // SAFETY: h_out has out_total bytes; the device chunk holds sizes[i] bytes.
                        unsafe {
                            cuda(result::memcpy_dtoh_async(
                                &mut h_out[at..at + sizes[i]],
                                d_out + (i * out_stride) as u64,
                                cs,
                            ))?
                        };
                        at += sizes[i];
                    }
                }
            }
            // SAFETY: our stream.
            unsafe { cuda(result::stream::synchronize(cs))? };
        }
        let t_copyback = start.elapsed();
        let h_out: &[u8] = b.h_out.ensure(h_len.max(1))?;
        let out = (0..n)
            .into_par_iter()
            .map(|i| useful[i].then(|| h_out[offsets[i]..offsets[i] + sizes[i]].to_vec()))
            .collect();
        drop(b);
        tracing::debug!(
            chunks = n,
            bytes = total_raw,
            setup_us = t_setup.as_micros() as u64,
            scatter_us = (t_scatter - t_setup).as_micros() as u64,
            h2d_kernel_us = (t_kernel - t_scatter).as_micros() as u64,
            d2h_us = (t_copyback - t_kernel).as_micros() as u64,
            gather_us = (start.elapsed() - t_copyback).as_micros() as u64,
            "GPU compress batch"
        );
        self.record(n, total_raw, out_total, start);
        Ok(out)
    }

    /// Decompresses each payload (already verified against its checksum on the CPU: nVCOMP does
    /// not validate input) into exactly `raw_lens[i]` bytes. A zstd payload of several frames (as
    /// `compress_batch` writes them) is decoded frame by frame, in parallel.
    pub fn decompress_batch(
        &self,
        codec: CodecId,
        payloads: &[&[u8]],
        raw_lens: &[usize],
        data_type: i32,
    ) -> Result<Vec<Vec<u8>>, GpuError> {
        if codec != CodecId::Zstd {
            let spans: Vec<(usize, usize)> = raw_lens.iter().enumerate().map(|(i, &r)| (i, r)).collect();
            return self.decompress_lanes(codec, payloads, raw_lens, data_type, &spans);
        }
        let mut pieces: Vec<&[u8]> = Vec::new();
        let mut piece_lens: Vec<usize> = Vec::new();
        let mut spans = Vec::with_capacity(payloads.len());
        for (i, (p, &raw)) in payloads.iter().zip(raw_lens).enumerate() {
            let frames = zstd_frames(p).ok_or(GpuError::WrongSize(i))?;
            let single = frames.len() == 1;
            spans.push((pieces.len(), raw));
            let mut sum = 0;
            for (f, content) in frames {
                // A lone frame is the whole payload; pieces must say their size, and all but the
                // last must fill whole alignment units so the payload decodes into one run.
                let len = if single { raw } else { content.ok_or(GpuError::WrongSize(i))? };
                if len % ALIGN != 0 && sum + len != raw {
                    return Err(GpuError::WrongSize(i));
                }
                sum += len;
                pieces.push(f);
                piece_lens.push(len);
            }
            if sum != raw {
                return Err(GpuError::WrongSize(i));
            }
        }
        self.decompress_lanes(CodecId::Zstd, &pieces, &piece_lens, data_type, &spans)
    }

    /// Runs a large batch as parts (split between spans) on all lanes at once.
    fn decompress_lanes(
        &self,
        codec: CodecId,
        payloads: &[&[u8]],
        raw_lens: &[usize],
        data_type: i32,
        spans: &[(usize, usize)],
    ) -> Result<Vec<Vec<u8>>, GpuError> {
        let parts = self.lanes.len().min(payloads.len() / LANE_SPLIT_MIN).min(spans.len()).max(1);
        if parts == 1 {
            return self.decompress_chunks(&self.lanes[0], codec, payloads, raw_lens, data_type, spans);
        }
        // Parts cut between spans: (first span, end span, first chunk, end chunk).
        let per = spans.len().div_ceil(parts);
        let cuts: Vec<(usize, usize, usize, usize)> = (0..spans.len())
            .step_by(per)
            .map(|s0| {
                let s1 = (s0 + per).min(spans.len());
                let c1 = spans.get(s1).map_or(payloads.len(), |s| s.0);
                (s0, s1, spans[s0].0, c1)
            })
            .collect();
        let outs: Vec<Result<Vec<Vec<u8>>, GpuError>> = cuts
            .par_iter()
            .zip(self.lanes.par_iter())
            .map(|(&(s0, s1, c0, c1), lane)| {
                let rebased: Vec<(usize, usize)> = spans[s0..s1].iter().map(|&(f, l)| (f - c0, l)).collect();
                self.decompress_chunks(lane, codec, &payloads[c0..c1], &raw_lens[c0..c1], data_type, &rebased)
            })
            .collect();
        let mut out = Vec::with_capacity(spans.len());
        for o in outs {
            out.extend(o?);
        }
        Ok(out)
    }

    /// Decodes every chunk; returns one buffer per span `(first chunk, bytes)`: chunks decode end to
    /// end (aligned), so a span of consecutive chunks whose lengths fill alignment units comes
    /// out as one run.
    fn decompress_chunks(
        &self,
        lane: &Lane,
        codec: CodecId,
        payloads: &[&[u8]],
        raw_lens: &[usize],
        data_type: i32,
        spans: &[(usize, usize)],
    ) -> Result<Vec<Vec<u8>>, GpuError> {
        if fault_injected() {
            return Err(GpuError::Injected);
        }
        let n = payloads.len();
        if n == 0 {
            return Ok(Vec::new());
        }
        let start = Instant::now();
        let max_raw = raw_lens.iter().copied().max().unwrap_or(0).max(1);
        let algo = self.lib.algo(codec).ok_or(GpuError::Unsupported(codec))?;
        let _ = data_type;
        let opts = Opts::decompress(codec);
        let s = lane.stream.cu_stream() as *mut c_void;
        cuda(self.ctx.bind_to_thread())?;
        let mut b = lane.bufs.lock().expect("buffers lock");
        let (in_offsets, in_total) = aligned_offsets(payloads.iter().map(|c| c.len()));
        let (out_offsets, out_total) = aligned_offsets(raw_lens.iter().copied());
        let total_raw: usize = raw_lens.iter().sum();
        let mut temp = 0usize;
        // SAFETY: FFI with valid out-pointers.
        check("DecompressGetTempSize", unsafe { (algo.decompress_temp)(n, max_raw, opts, &mut temp, total_raw, s) })?;
        let d_in = b.d_in.ensure(in_total)?;
        let d_out = b.d_out.ensure(out_total)?;
        let d_temp = b.d_temp.ensure(temp.max(1))?;
        // in_ptrs, in_sizes, out_caps, out_sizes, out_ptrs, statuses
        let meta_len = 8 * 5 * n + 4 * n;
        let d_meta = b.d_meta.ensure(meta_len)?;
        {
            let h_in = b.h_in.ensure(in_total)?;
            scatter(h_in, payloads, &in_offsets);
            let words = (0..n)
                .map(|i| d_in + in_offsets[i] as u64)
                .chain(payloads.iter().map(|c| c.len() as u64))
                .chain(raw_lens.iter().map(|&l| l as u64))
                .chain(std::iter::repeat_n(0, n))
                .chain((0..n).map(|i| d_out + out_offsets[i] as u64));
            put_words(b.h_meta.ensure(meta_len)?, words);
        }
        let cs = lane.stream.cu_stream();
        // SAFETY: buffers sized above; our stream.
        unsafe {
            cuda(result::memcpy_htod_async(d_meta, &b.h_meta.ensure(meta_len)?[..], cs))?;
            cuda(result::memcpy_htod_async(d_in, &b.h_in.ensure(in_total)?[..], cs))?;
            let p = |k: usize| (d_meta + (k * 8 * n) as u64) as *mut c_void;
            check(
                "DecompressAsync",
                (algo.decompress)(
                    p(0) as *const *const c_void,
                    p(1) as *const usize,
                    p(2) as *const usize,
                    p(3) as *mut usize,
                    n,
                    d_temp as *mut c_void,
                    temp,
                    p(4) as *const *mut c_void,
                    opts,
                    (d_meta + (40 * n) as u64) as *mut i32,
                    s,
                ),
            )?;
            let h_meta = b.h_meta.ensure(meta_len)?;
            cuda(result::memcpy_dtoh_async(&mut h_meta[24 * n..32 * n], d_meta + (24 * n) as u64, cs))?;
            cuda(result::memcpy_dtoh_async(&mut h_meta[40 * n..], d_meta + (40 * n) as u64, cs))?;
            let h_out = b.h_out.ensure(out_total)?;
            cuda(result::memcpy_dtoh_async(&mut h_out[..], d_out, cs))?;
            cuda(result::stream::synchronize(cs))?;
        }
        let h_meta = b.h_meta.ensure(meta_len)?.to_vec();
        // Sizes and statuses first; then the copies out, on every core (fresh pages fault in
        // parallel instead of one after another).
        for (i, &want) in raw_lens.iter().enumerate() {
            let size = u64::from_le_bytes(h_meta[24 * n + i * 8..24 * n + i * 8 + 8].try_into().expect("8")) as usize;
            let status = i32::from_le_bytes(h_meta[40 * n + i * 4..40 * n + i * 4 + 4].try_into().expect("4"));
            check("DecompressAsync (chunk)", status)?;
            if size != want {
                return Err(GpuError::WrongSize(i));
            }
        }
        let h_out: &[u8] = b.h_out.ensure(out_total)?;
        let out: Vec<Vec<u8>> = spans
            .par_iter()
            .map(|&(first, len)| h_out[out_offsets[first]..out_offsets[first] + len].to_vec())
            .collect();
        drop(b);
        self.record(n, in_total, total_raw, start);
        Ok(out)
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
