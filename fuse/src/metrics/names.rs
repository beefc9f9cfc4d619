//! Every metric name of a mount, in one place. A counter's family is named without `_total`: the
//! encoder adds it to its samples (the name Prometheus shows). docs/OPERATING.md lists them all,
//! and a test keeps that list and this file equal.

/// FUSE operations: latency by `op` and `outcome` (ok, expected, error).
pub const FUSE_OP_DURATION: &str = "shrinkfs_fuse_op_duration_seconds";
/// Store requests as the filesystem made them (retries included): latency by `kind` and `outcome`.
pub const STORE_REQUEST_DURATION: &str = "shrinkfs_store_request_duration_seconds";
/// The kinds of store request (the `kind` label), each counted from zero.
pub const STORE_KINDS: [&str; 14] = [
    "get",
    "get_range",
    "head",
    "put",
    "put_part",
    "put_in_place",
    "multipart_start",
    "multipart_complete",
    "multipart_abort",
    "list",
    "list_page",
    "list_delimiter",
    "copy",
    "delete",
];
/// Store request tries that failed, by `kind` (each try of a retried request counts).
pub const STORE_ERRORS: &str = "shrinkfs_store_errors";
/// Store requests tried again after a passing failure, by `kind`.
pub const STORE_RETRIES: &str = "shrinkfs_store_retries";
/// Store requests in flight (bounded by the concurrency limit).
pub const STORE_IN_FLIGHT: &str = "shrinkfs_store_requests_in_flight";
/// Deletes an unlink queued and returned before (S3 buckets), not done yet.
pub const DELETES_BEHIND: &str = "shrinkfs_store_deletes_behind";
/// Bytes of object bodies read from the store.
pub const STORE_READ_BYTES: &str = "shrinkfs_store_read_bytes";
/// Bytes of objects and parts written to the store.
pub const STORE_WRITTEN_BYTES: &str = "shrinkfs_store_written_bytes";
/// Logical (uncompressed) bytes of objects written.
pub const LOGICAL_WRITTEN_BYTES: &str = "shrinkfs_logical_written_bytes";
/// Logical (uncompressed) bytes read from objects.
pub const LOGICAL_READ_BYTES: &str = "shrinkfs_logical_read_bytes";
/// Frame cache hits.
pub const CACHE_HITS: &str = "shrinkfs_cache_hits";
/// Frame cache misses.
pub const CACHE_MISSES: &str = "shrinkfs_cache_misses";
/// Frames found in the disk cache.
pub const DISK_CACHE_HITS: &str = "shrinkfs_disk_cache_hits";
/// Frames not found in the disk cache.
pub const DISK_CACHE_MISSES: &str = "shrinkfs_disk_cache_misses";
/// Disk cache entries that failed their check and were fetched again.
pub const DISK_CACHE_BAD: &str = "shrinkfs_disk_cache_bad_entries";
/// Frames fetched and decoded.
pub const FRAMES_DECODED: &str = "shrinkfs_frames_decoded";
/// Frames fetched ahead for sequential readers.
pub const FRAMES_PREFETCHED: &str = "shrinkfs_frames_prefetched";
/// Read-ahead frames not fetched because the memory budget was full.
pub const PREFETCH_SKIPPED: &str = "shrinkfs_prefetch_skipped";
/// Frames encoded, by the `codec` they were stored with.
pub const FRAMES_ENCODED: &str = "shrinkfs_frames_encoded";
/// Bytes of the memory budget in use.
pub const BUDGET_USED: &str = "shrinkfs_memory_budget_used_bytes";
/// Size of the memory budget.
pub const BUDGET_LIMIT: &str = "shrinkfs_memory_budget_limit_bytes";
/// Waits for room in the memory budget.
pub const BUDGET_WAITS: &str = "shrinkfs_memory_budget_waits";
/// Logical bytes written to open files and not yet stored.
pub const DIRTY_BYTES: &str = "shrinkfs_dirty_bytes";
/// Frames the codec dispatcher encoded on the CPU.
pub const CPU_FRAMES: &str = "shrinkfs_codec_cpu_frames";
/// GPU launches.
pub const GPU_BATCHES: &str = "shrinkfs_gpu_batches";
/// Frames compressed on the GPU and stored as it made them.
pub const GPU_FRAMES: &str = "shrinkfs_gpu_frames";
/// Frames decoded on the GPU.
pub const GPU_DECODED_FRAMES: &str = "shrinkfs_gpu_decoded_frames";
/// Tries of the GPU on a copy of a read batch, to measure it, however they ended.
pub const GPU_DECODE_TRIES: &str = "shrinkfs_gpu_decode_tries";
/// Raw bytes sent to the GPU.
pub const GPU_INPUT_BYTES: &str = "shrinkfs_gpu_input_bytes";
/// Bytes the GPU gave back.
pub const GPU_OUTPUT_BYTES: &str = "shrinkfs_gpu_output_bytes";
/// Seconds spent in GPU launches.
pub const GPU_SECONDS: &str = "shrinkfs_gpu_seconds";
/// Frames or batches sent back to the CPU, by `reason`.
pub const GPU_FALLBACKS: &str = "shrinkfs_gpu_fallbacks";
/// Version and commit of the binary (an info metric).
pub const BUILD: &str = "shrinkfs_build";
/// What is mounted where (an info metric).
pub const MOUNT: &str = "shrinkfs_mount";
/// CPU time of the process.
pub const PROCESS_CPU_SECONDS: &str = "process_cpu_seconds";
/// Resident memory of the process.
pub const PROCESS_RESIDENT_BYTES: &str = "process_resident_memory_bytes";
/// Virtual memory of the process.
pub const PROCESS_VIRTUAL_BYTES: &str = "process_virtual_memory_bytes";
/// Open file descriptors of the process.
pub const PROCESS_OPEN_FDS: &str = "process_open_fds";
/// Threads of the process.
pub const PROCESS_THREADS: &str = "process_threads";
/// Start time of the process, seconds since the epoch.
pub const PROCESS_START_TIME: &str = "process_start_time_seconds";
