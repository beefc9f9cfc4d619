//! What a caller sets of the GPU back end, passed in whole: the codec library reads no
//! environment for it (the `shrinkfs` binary reads its `SHRINKFS_GPU_*` variables, for measuring).

use std::path::PathBuf;

/// Settings of the GPU back end; the defaults are what measured best on the H100 host
/// (BENCHMARKS.md §2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuConfig {
    /// CUDA streams ("lanes") a large launch is split over, each with its own buffers, 1 to 8:
    /// one lane's kernel and copies overlap the next lanes' staging. 4 was the best of 2, 3, 4
    /// and 6: four shares keep the last lane's tail short.
    pub lanes: usize,
    /// Bytes per part of a lane's copies: input goes up and output comes back in parts, so the
    /// host works on one part while another crosses the bus.
    pub part_bytes: usize,
    /// Compressed output comes back in one batched copy (`cuMemcpyBatchAsync`) where the driver
    /// has it; otherwise as one copy of the region the launch wrote.
    pub batch_copy: bool,
    /// Copies into and out of pinned memory use streaming (non-temporal) stores on x86-64.
    pub streaming_copy: bool,
    /// Every launch fails at once: fault injection, for tests of the CPU fallback.
    pub fail: bool,
    /// nVCOMP's library, tried before the places searched (`nvcomp::Nvcomp::load`).
    pub nvcomp_lib: Option<PathBuf>,
    /// Most page-locked frame buffers the GPU lends to frame producers (the cutters of a mount's
    /// files, `pack`'s readers), registered with the driver (about 0.16-0.6 ms per MiB, once;
    /// `frame_buffers_at_start` of them when the GPU starts, the rest as they are first needed)
    /// and kept: launches copy frames in them to the device directly instead of staging them
    /// first. 0 (the default): none, every frame is staged.
    pub frame_buffers: usize,
    /// Bytes of each (frames up to this size, with a GCM tag, take them; larger ones are cut on
    /// the heap).
    pub frame_buffer_bytes: usize,
    /// Frame buffers registered when the GPU warms up, before any frame comes; the rest are
    /// registered as frames first need them.
    pub frame_buffers_at_start: usize,
}

impl GpuConfig {
    /// Most lanes a GPU opens.
    pub const MAX_LANES: usize = 8;
}

impl Default for GpuConfig {
    fn default() -> Self {
        GpuConfig {
            lanes: 4,
            part_bytes: 16 << 20,
            batch_copy: true,
            streaming_copy: true,
            fail: false,
            nvcomp_lib: None,
            frame_buffers: 0,
            frame_buffer_bytes: crate::writer::DEFAULT_FRAME_SIZE as usize + crate::format::TAG_LEN,
            frame_buffers_at_start: 0,
        }
    }
}
