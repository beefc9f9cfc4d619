//! How a filesystem is set up, as plain data: the mount's `FsConfig` and one config per component
//! (namespace, object reader, file writer) holding its tunables, with defaults a user would expect.
//! Nothing here is a live object: those are the `fs::Services` a filesystem is given.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use shrinkfs_codec::{Dictionary, EncodeConfig};

/// How the filesystem behaves; every field has a default a user would expect.
#[derive(Debug, Clone)]
pub struct FsConfig {
    /// How new objects are encoded (codec, level, frame size, key).
    pub encode: EncodeConfig,
    /// zstd dictionaries for reading.
    pub dicts: Vec<Arc<Dictionary>>,
    /// Refuse every change.
    pub read_only: bool,
    /// Bytes that writes, uploads and fetches may hold at once (`--memory-limit` less the cache).
    pub io_budget: u64,
    /// Names, attributes and listings.
    pub namespace: NamespaceConfig,
    /// Reading objects.
    pub reader: ReaderConfig,
    /// Writing files.
    pub writer: WriterConfig,
    /// Deletes an unlink may leave running behind it on an S3 or memory bucket (0: each unlink
    /// waits for its DELETE); a local-directory bucket deletes in place at once. Only for a bucket
    /// no one else writes: a file another writer stores under a removed name before its queued
    /// DELETE runs is deleted by it.
    pub deletes_behind: usize,
}

impl Default for FsConfig {
    fn default() -> Self {
        FsConfig {
            encode: EncodeConfig::default(),
            dicts: Vec::new(),
            read_only: false,
            io_budget: 768 << 20,
            namespace: NamespaceConfig::default(),
            reader: ReaderConfig::default(),
            writer: WriterConfig::default(),
            deletes_behind: 0,
        }
    }
}

/// The namespace: who owns what by default, how long attributes are trusted, how listings page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceConfig {
    /// Owner of files whose objects record none.
    pub uid: u32,
    /// Group of files whose objects record none.
    pub gid: u32,
    /// Permission bits of files whose objects record none.
    pub file_mode: u16,
    /// Permission bits of directories.
    pub dir_mode: u16,
    /// How long attributes and directory entries are trusted before asking the store again
    /// (`Duration::MAX`: for as long as the mount lasts, for a bucket only this mount writes).
    pub metadata_ttl: Duration,
    /// How long a name is trusted absent — missing from a complete listing of its directory, or
    /// found missing by a lookup — before asking the store again (`Duration::MAX`: indefinitely).
    pub negative_ttl: Duration,
    /// How long a directory's complete listing answers the next `opendir` of it, kept up with this
    /// mount's own changes, before the store is listed again (zero: every `opendir` lists;
    /// `Duration::MAX`: for as long as the mount lasts).
    pub listing_ttl: Duration,
    /// Attribute fetches in flight when a listed directory's files are looked up.
    pub prefetch_concurrency: usize,
    /// Keys asked for per listing request.
    pub page_keys: usize,
    /// Most entries one `readdir` call returns (the kernel's buffer takes fewer).
    pub readdir_batch: usize,
}

impl Default for NamespaceConfig {
    fn default() -> Self {
        NamespaceConfig {
            uid: nix::unistd::getuid().as_raw(),
            gid: nix::unistd::getgid().as_raw(),
            file_mode: 0o644,
            dir_mode: 0o755,
            metadata_ttl: Duration::from_secs(1),
            negative_ttl: Duration::from_secs(1),
            listing_ttl: Duration::ZERO,
            prefetch_concurrency: 32,
            page_keys: 1000,
            readdir_batch: 512,
        }
    }
}

/// The object reader: its caches, its fetches, its read-ahead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReaderConfig {
    /// Bytes of decoded frames kept in memory.
    pub cache_bytes: u64,
    /// Bytes of parsed object layouts kept in memory (about 1.5 KiB for a small file's).
    pub layout_bytes: u64,
    /// With a key, serve objects that are not sealed too (refused with EACCES otherwise).
    pub allow_unsealed: bool,
    /// Largest single ranged GET for frames; larger plans are split and fetched concurrently.
    pub max_fetch: u64,
    /// Fewest frames of a GPU codec in a read batch for the GPU to decode it: with `--gpu on`
    /// always, with `auto` where the GPU is measured to hand batches back sooner than the cores.
    pub gpu_decode_min_frames: usize,
    /// Most frames fetched ahead of a sequential reader (16 MiB at the default frame size).
    pub max_readahead_frames: usize,
}

impl Default for ReaderConfig {
    fn default() -> Self {
        ReaderConfig {
            cache_bytes: 256 << 20,
            layout_bytes: 32 << 20,
            allow_unsealed: false,
            max_fetch: 8 << 20,
            gpu_decode_min_frames: 8,
            max_readahead_frames: 16,
        }
    }
}

/// The file writer: where rewritten files are staged, how writes arriving out of order wait, and
/// the sizes of its uploads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriterConfig {
    /// Where files being rewritten at random offsets are staged.
    pub staging_dir: PathBuf,
    /// The kernel caches writes (`--writeback-cache`): writes arriving out of order are expected.
    pub writeback_cache: bool,
    /// How far ahead of a streaming upload's end a write may land and still wait for the writes
    /// before it (the kernel's write-back sends up to `max_background` requests at once, and the
    /// FUSE threads may take them up in any order).
    pub reorder_window: u64,
    /// How long such a write waits for the gap before it to be filled — with the write-back cache
    /// always, else only while another write of the file is in progress; after that the file is
    /// staged and written at any offset (with the write-back cache, a file with a hole pays this
    /// once).
    pub reorder_wait: Duration,
    /// Sizes of each object's upload.
    pub upload: UploadConfig,
}

/// One object's upload: how much of it stays in memory, and how it is cut into parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UploadConfig {
    /// Stored bytes an upload keeps only in memory before it also writes them to a spill file (or,
    /// for a local bucket, its staged file): small files never touch the local disk.
    pub in_memory: usize,
    /// Size of each multipart part (S3 needs at least 5 MiB for all but the last; some services
    /// need every part but the last the same size).
    pub part_size: usize,
    /// Parts of one object uploading at once.
    pub parts_in_flight: usize,
    /// Appends of one object's frames (each the frames found ready together, about 8 MiB at most) handed
    /// to threads that write them into its spill or staged file (one thread writes into the file
    /// at a time; the others wait their turn).
    pub appends_in_flight: usize,
}

impl Default for UploadConfig {
    fn default() -> Self {
        UploadConfig { in_memory: 128 << 10, part_size: 8 << 20, parts_in_flight: 4, appends_in_flight: 4 }
    }
}

impl Default for WriterConfig {
    fn default() -> Self {
        WriterConfig {
            staging_dir: std::env::temp_dir(),
            writeback_cache: false,
            reorder_window: 64 << 20,
            reorder_wait: Duration::from_millis(50),
            upload: UploadConfig::default(),
        }
    }
}
