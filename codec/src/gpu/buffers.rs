//! Device and pinned host memory that a lane reuses across batches, how a batch's chunks are laid
//! out in it, and how they cross the bus: staged up in parts, brought back packed or in parts.

use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::sys::CUdeviceptr;
use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr, PinnedHostSlice, result};

use super::error::{GpuError, cuda};

pub(super) const ALIGN: usize = 256;

pub(super) fn align(n: usize) -> usize {
    n.div_ceil(ALIGN) * ALIGN
}

/// Offsets of buffers of these lengths laid end to end, each aligned, and the total length.
pub(super) fn aligned_offsets(lens: impl Iterator<Item = usize>) -> (Vec<usize>, usize) {
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

/// Copies `chunks` into `dst` at `offsets`, on the calling thread (a lane's own: see
/// `Gpu::compress_chunks`), with streaming stores if `streaming`.
pub(super) fn scatter(dst: &mut [u8], chunks: &[&[u8]], offsets: &[usize], streaming: bool) {
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
    for (d, s) in parts.into_iter().zip(chunks) {
        super::copy::copy(d, s, streaming);
    }
}

/// A device allocation that grows on demand, on its lane's stream (cudarc frees it, ordered on
/// that stream, when it is replaced or dropped).
pub(super) struct DevBuf(Option<CudaSlice<u8>>);

impl DevBuf {
    fn empty() -> Self {
        DevBuf(None)
    }

    /// The buffer's device address, grown first to hold `len` bytes; `stream` is the lane's,
    /// the only one that uses it.
    pub(super) fn ensure(&mut self, stream: &Arc<CudaStream>, len: usize) -> Result<CUdeviceptr, GpuError> {
        if self.0.as_ref().is_none_or(|b| b.len() < len) {
            // (The old buffer goes first: its free is queued after the work that used it.)
            self.0 = None;
            let want = len.next_power_of_two().max(1 << 20);
            // SAFETY: uninitialised device memory; every launch writes what it reads back (its
            // input copied in, its outputs written by the kernels) before reading it.
            self.0 = Some(cuda(unsafe { stream.alloc::<u8>(want) })?);
        }
        let buf = self.0.as_ref().expect("allocated above");
        // (The context tracks no events (`Gpu::probe`): the guard returned beside does nothing.)
        let at = buf.device_ptr(stream).0;
        debug_assert_eq!(at % ALIGN as u64, 0, "nVCOMP needs aligned buffers");
        Ok(at)
    }
}

/// Page-locked host memory that grows on demand (cudarc frees it when replaced or dropped).
pub(super) struct HostBuf(Option<PinnedHostSlice<u8>>);

impl HostBuf {
    fn empty() -> Self {
        HostBuf(None)
    }

    /// The first `len` bytes of the buffer, grown first to hold them.
    pub(super) fn ensure(&mut self, ctx: &Arc<CudaContext>, len: usize) -> Result<&mut [u8], GpuError> {
        if self.0.as_ref().is_none_or(|b| b.len() < len) {
            self.0 = None;
            let want = len.next_power_of_two().max(1 << 20);
            // SAFETY: uninitialised host memory; what is read from it was written first (staged
            // input, copies back from the device). Flags 0, not write-combined: the host reads
            // results back out of it.
            self.0 = Some(cuda(unsafe { ctx.alloc_pinned_with_flags::<u8>(want, 0) })?);
        }
        // (Waits for the buffer's own event, which only cudarc's copies record: none here. It
        // binds the context first, so an error some drop stored in it surfaces here once, failing
        // this batch, whose frames then go to the cores.)
        let all = cuda(self.0.as_mut().expect("allocated above").as_mut_slice())?;
        Ok(&mut all[..len])
    }
}

pub(super) struct Buffers {
    pub(super) d_in: DevBuf,
    pub(super) d_out: DevBuf,
    pub(super) d_temp: DevBuf,
    pub(super) d_meta: DevBuf,
    pub(super) h_in: HostBuf,
    pub(super) h_out: HostBuf,
    pub(super) h_meta: HostBuf,
}

impl Buffers {
    /// Buffers that allocate on first use.
    pub(super) fn empty() -> Self {
        Buffers {
            d_in: DevBuf::empty(),
            d_out: DevBuf::empty(),
            d_temp: DevBuf::empty(),
            d_meta: DevBuf::empty(),
            h_in: HostBuf::empty(),
            h_out: HostBuf::empty(),
            h_meta: HostBuf::empty(),
        }
    }
}

/// Copies `(device address, offset in dst, bytes)` regions into pinned `dst` with one driver call.
pub(super) fn batch_dtoh(
    dst: &mut [u8],
    copies: &[(u64, usize, usize)],
    stream: cudarc::driver::sys::CUstream,
) -> Result<(), GpuError> {
    use cudarc::driver::sys;
    if copies.iter().any(|&(_, at, len)| at + len > dst.len()) {
        return Err(GpuError::CopyOutOfBounds);
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
        .map_err(|source| GpuError::CudaCall { call: "cuMemcpyBatchAsync", source })
    }
}

/// Stages `datas` into pinned `h_in` at `offsets` and sends them to `d_in` in parts of about
/// `part` bytes, so the host copies one part in while the previous one crosses the bus (with
/// streaming stores if `streaming`). Returns the host's staging time.
pub(super) fn stage_upload(
    h_in: &mut [u8],
    d_in: CUdeviceptr,
    datas: &[&[u8]],
    offsets: &[usize],
    (part, streaming): (usize, bool),
    stream: cudarc::driver::sys::CUstream,
) -> Result<std::time::Duration, GpuError> {
    let mut staging = std::time::Duration::ZERO;
    for r in group_parts((0..datas.len()).map(|i| (i..i + 1, datas[i].len())), part) {
        let (lo, hi) = (offsets[r.start], offsets[r.end - 1] + datas[r.end - 1].len());
        let t = Instant::now();
        let rel: Vec<usize> = offsets[r.clone()].iter().map(|o| o - lo).collect();
        scatter(&mut h_in[lo..hi], &datas[r], &rel, streaming);
        staging += t.elapsed();
        // SAFETY: pinned host memory that stays put until the stream is synchronised; d_in holds it.
        unsafe { cuda(result::memcpy_htod_async(d_in + lo as u64, &h_in[lo..hi], stream))? };
    }
    Ok(staging)
}

/// Sends `datas`, which lie in page-locked (registered) host memory, to `d_in` at `offsets`
/// without staging them: one copy per run of them that lies end to end both here and there
/// (the pieces of one frame).
pub(super) fn upload_direct(
    d_in: CUdeviceptr,
    datas: &[&[u8]],
    offsets: &[usize],
    stream: cudarc::driver::sys::CUstream,
) -> Result<(), GpuError> {
    let mut i = 0;
    while i < datas.len() {
        let start = datas[i].as_ptr() as usize;
        let mut len = datas[i].len();
        let mut j = i + 1;
        while j < datas.len() && datas[j].as_ptr() as usize == start + len && offsets[j] == offsets[i] + len {
            len += datas[j].len();
            j += 1;
        }
        // SAFETY: `len` bytes from `start` are the slices i..j, end to end, in registered host
        // memory the caller holds until it synchronises the stream; d_in holds offsets[i] + len.
        unsafe {
            cudarc::driver::sys::cuMemcpyHtoDAsync_v2(d_in + offsets[i] as u64, start as *const _, len, stream)
                .result()
                .map_err(|source| GpuError::CudaCall { call: "cuMemcpyHtoDAsync", source })?;
        }
        i = j;
    }
    Ok(())
}

/// The runs of equal values in `flags`, as index ranges in order.
pub(super) fn runs(flags: &[bool]) -> Vec<std::ops::Range<usize>> {
    let mut out: Vec<std::ops::Range<usize>> = Vec::new();
    for (i, f) in flags.iter().enumerate() {
        match out.last_mut() {
            Some(last) if flags[last.start] == *f => last.end = i + 1,
            _ => out.push(i..i + 1),
        }
    }
    out
}

/// Groups consecutive units `(range, bytes)` into parts of at least `target` bytes each.
pub(super) fn group_parts(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_split_where_the_flag_changes() {
        assert_eq!(runs(&[]), vec![]);
        assert_eq!(runs(&[true, true, false, true]), vec![0..2, 2..3, 3..4]);
        assert_eq!(runs(&[false; 3]), vec![0..3]);
    }

    #[test]
    fn buffers_are_laid_out_aligned() {
        let (offsets, total) = aligned_offsets([1usize, 256, 257, 0].into_iter());
        assert_eq!((offsets, total), (vec![0, 256, 512, 1024], 1024));
    }

    #[test]
    fn scatter_places_every_chunk_at_its_offset() {
        let chunks: Vec<&[u8]> = vec![b"abc", b"", b"defgh"];
        let (offsets, total) = aligned_offsets(chunks.iter().map(|c| c.len()));
        let mut dst = vec![0u8; total];
        scatter(&mut dst, &chunks, &offsets, true);
        for (c, o) in chunks.iter().zip(&offsets) {
            assert_eq!(&dst[*o..*o + c.len()], *c);
        }
    }
    #[test]
    fn parts_group_whole_units_up_to_the_target() {
        let units = [(0..2, 10), (2..3, 5), (3..5, 20), (5..6, 1)];
        assert_eq!(group_parts(units.iter().cloned(), 12), vec![0..3, 3..5, 5..6]);
        assert_eq!(group_parts(units.iter().cloned(), 1000), vec![0..6]);
        assert_eq!(group_parts(units.iter().cloned(), 1), vec![0..2, 2..3, 3..5, 5..6]);
        assert!(group_parts(std::iter::empty(), 1).is_empty());
    }
}
