//! Command-line arguments (clap derive). Converted into library configs before use, so libraries
//! never see clap.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand, ValueEnum};
use shrinkfs_codec::seal::KEY_LEN;
use shrinkfs_codec::{CodecId, CodecParams, Dictionary, EncodeConfig, MasterKey};

use shrinkfs_fuse::credentials::{AwsEnv, CredentialsConfig};
use shrinkfs_fuse::store::{CustomerKey, Encryption, RetryPolicy, S3Options, StoreConfig};

use crate::corpus::CorpusKind;
use crate::exit::UsageError;
use crate::values;

/// Most bytes a command holds in memory as one corpus (`corpus`, `bench`): larger sizes are
/// refused rather than failing an allocation.
pub const MAX_DATA: u64 = 16 << 30;
/// Smallest frame (`--frame-size`), as the object format allows.
pub const MIN_FRAME: u64 = shrinkfs_codec::format::MIN_FRAME_SIZE as u64;
/// Largest frame (`--frame-size`), as the object format allows.
pub const MAX_FRAME: u64 = shrinkfs_codec::format::MAX_FRAME_SIZE as u64;

/// shrinkfs: a filesystem over an object store that compresses file data transparently.
#[derive(Debug, Parser)]
#[command(name = "shrinkfs", version, about, propagate_version = true)]
pub struct Cli {
    /// More log output (-v info, -vv debug, -vvv trace); RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Settings file (TOML: a section per subcommand, keys are long flag names; see FILES in
    /// shrinkfs(1)). Default: $SHRINKFS_CONFIG, else /etc/shrinkfs/config.toml if it exists; an
    /// empty FILE reads none.
    #[arg(long, global = true, value_name = "FILE", value_parser = values::path_or_empty)]
    pub config: Option<PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Compress a file into a shrinkfs object (`-` for stdin/stdout).
    #[command(allow_negative_numbers = true)]
    Pack(PackArgs),
    /// Decode a shrinkfs object back into the original bytes (plain objects are copied as they are).
    Unpack(UnpackArgs),
    /// Describe a stored object: format version, frames, codecs, sizes and ratio.
    Inspect(InspectArgs),
    /// Mount a bucket (a local directory, s3://bucket[/prefix] or memory://) at a directory.
    #[command(allow_negative_numbers = true)]
    Mount(Box<MountArgs>),
    /// Unmount a shrinkfs mount, then wait for its process to store what is pending and end;
    /// exits with that process's code (3: files it could not store, named in its log).
    Unmount(UnmountArgs),
    /// Remove what interrupted writes left in a bucket (temporary files of a local-directory
    /// bucket); a mount does this itself at start for leftovers older than an hour.
    Cleanup(CleanupArgs),
    /// Show a running mount's throughput, ratio, cache hit rate, store latency and errors, GPU
    /// share, memory and dirty bytes, live (read from the mount's metrics endpoint).
    Stats(StatsArgs),
    /// Write one of the benchmark corpora (deterministic, made by shrinkfs itself).
    Corpus(CorpusArgs),
    /// Measure things.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Write the man pages and shell completions into a directory (for packaging).
    #[command(hide = true)]
    PackageFiles(crate::manual::PackageFilesArgs),
}

/// `shrinkfs stats`.
#[derive(Debug, Args)]
pub struct StatsArgs {
    /// The mount point of a running shrinkfs mount that serves metrics (`--metrics-addr`).
    pub mountpoint: PathBuf,
    /// The mount's metrics address, instead of asking the mount point (e.g. 127.0.0.1:9464).
    #[arg(long, value_parser = values::listen_addr)]
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Seconds between readings; rates are over this span (0.1 to 3600).
    #[arg(long, value_name = "SECONDS", default_value = "1", value_parser = values::seconds_in(0.1, 3600.0))]
    pub interval: Duration,
    /// One reading (two scrapes an interval apart), then exit.
    #[arg(long)]
    pub once: bool,
    /// One JSON object per reading instead of the view.
    #[arg(long)]
    pub json: bool,
}

/// `shrinkfs bench ...`.
#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Ratio and host-to-host GB/s of every CPU and GPU codec, plus the small-object case.
    #[command(allow_negative_numbers = true)]
    Codecs(BenchCodecsArgs),
    /// Run filesystem workloads on mounted directories side by side and report throughput,
    /// latency, the filesystem process's CPU and memory, and the bytes stored.
    #[command(allow_negative_numbers = true)]
    Fs(Box<BenchFsArgs>),
}

/// `shrinkfs bench fs`.
#[derive(Debug, Args)]
pub struct BenchFsArgs {
    /// A directory to measure, optionally labelled: `shrinkfs=/mnt/data` (repeatable).
    #[arg(long, required = true, value_parser = values::labelled_dir)]
    pub target: Vec<(String, PathBuf)>,
    /// A directory every target is compared with (a plain local directory, say); labelled "baseline"
    /// unless given as LABEL=DIR.
    #[arg(long, value_parser = values::labelled_dir)]
    pub baseline: Option<(String, PathBuf)>,
    /// Where a target's bytes end up, to count what is stored: LABEL=DIR (repeatable; a plain
    /// directory counts itself).
    #[arg(long, value_parser = values::labelled_dir)]
    pub backend: Vec<(String, PathBuf)>,
    /// The filesystem process of a target, when it cannot be found from the mount point: LABEL=PID.
    #[arg(long, value_parser = crate::benchfs::labelled_pid)]
    pub pid: Vec<(String, u32)>,
    /// Workloads to run (also: par-write, par-read).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "seq-write,seq-read,rand-read,small-files,ls,mixed"
    )]
    pub workloads: Vec<crate::benchfs::Workload>,
    /// Sizes of the large file for sequential write and read.
    #[arg(long, value_delimiter = ',', default_value = "256M", value_parser = values::size_in(4 << 10, MAX_DATA))]
    pub size: Vec<u64>,
    /// What the files contain.
    #[arg(long, value_enum, default_value = "logs")]
    pub data: CorpusKind,
    /// Real content instead: the files are cut from this file (any file, e.g. a tar of /usr; its
    /// first --size bytes, at least 1 MiB, cycled if shorter).
    #[arg(long, value_name = "FILE", conflicts_with = "data")]
    pub data_file: Option<PathBuf>,
    /// Number of small files (created, stat'ed, read, listed with `ls -l`, deleted).
    #[arg(long, default_value_t = 10_000, value_parser = values::int_in::<usize>(1, 10_000_000))]
    pub files: usize,
    /// Size of each small file.
    #[arg(long, default_value = "4K", value_parser = values::size_in(1, 1 << 30))]
    pub file_size: u64,
    /// Most 4 KiB random reads per pass (cold, then warm); one per 1 MiB of the file at most, so
    /// each cold read is the first in its region.
    #[arg(long, default_value_t = 2000, value_parser = values::int_in::<usize>(1, 10_000_000))]
    pub random_reads: usize,
    /// Writers and readers of the par-write and par-read workloads (each its own file of --size).
    #[arg(long, default_value_t = 8, value_parser = values::int_in::<usize>(1, 1024))]
    pub jobs: usize,
    /// Threads of the mixed workload.
    #[arg(long, default_value_t = 4, value_parser = values::int_in::<usize>(1, 1024))]
    pub threads: usize,
    /// Seconds the mixed workload runs.
    #[arg(long, default_value_t = 10.0, value_parser = values::number_in(0.01, 86_400.0))]
    pub mixed_seconds: f64,
    /// Also run the large-file workloads as fio jobs (when fio is installed).
    #[arg(long)]
    pub fio: bool,
    /// Storage price for the cost column, dollars per GB-month (S3 Standard: 0.023).
    #[arg(long, default_value_t = 0.023, value_parser = values::number_in(0.0, 1000.0))]
    pub price_per_gb_month: f64,
    /// Where to write the results as JSON.
    #[arg(long, default_value = "shrinkfs-bench.json")]
    pub json: PathBuf,
    /// Where to write the self-contained HTML report with plots.
    #[arg(long, default_value = "shrinkfs-bench.html")]
    pub html: PathBuf,
    /// Leave out the `zstd -1 -T2` / `zstd -d` rows measured beside the sequential workloads.
    #[arg(long)]
    pub no_reference: bool,
    /// Leave the files written under each target.
    #[arg(long)]
    pub keep: bool,
}

/// `shrinkfs bench codecs`.
#[derive(Debug, Args)]
pub struct BenchCodecsArgs {
    /// Corpora to measure.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "logs,json,numeric,random")]
    pub corpora: Vec<CorpusKind>,
    /// Bytes of each corpus.
    #[arg(long, default_value = "256M", value_parser = values::size_in(4 << 10, MAX_DATA))]
    pub size: u64,
    /// Real files measured after the corpora (a tar of /usr, a database file, logs): each file's
    /// first --size bytes, labelled with the file's name.
    #[arg(long, value_name = "FILE", num_args = 1..)]
    pub input: Vec<PathBuf>,
    /// Frame sizes.
    #[arg(long, value_delimiter = ',', default_value = "64K,1M", value_parser = values::size_in(MIN_FRAME, MAX_FRAME))]
    pub frame_sizes: Vec<u64>,
    /// Runs per figure (the best is kept).
    #[arg(long, default_value_t = 3, value_parser = values::int_in::<usize>(1, 1000))]
    pub runs: usize,
    /// Codec families to measure (e.g. `zstd,lz4`; `lz4` does not include `lz4-block`); all when absent.
    #[arg(long, value_delimiter = ',')]
    pub codecs: Vec<String>,
    /// Number of small objects.
    #[arg(long, default_value_t = 1000, value_parser = values::int_in::<usize>(1, 1_000_000))]
    pub small_count: usize,
    /// Size of each small object.
    #[arg(long, default_value = "8K", value_parser = values::size_in(1, 64 << 20))]
    pub small_size: u64,
    /// Also write the rows as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// `shrinkfs mount`.
#[derive(Debug, Args)]
pub struct MountArgs {
    /// The bucket: a local directory, s3://bucket[/prefix], or memory:// (empty, for tests).
    #[arg(value_parser = values::source)]
    pub source: String,
    /// Where to mount it (an existing directory).
    pub mountpoint: PathBuf,
    #[command(flatten)]
    pub codec: CodecArgs,
    #[command(flatten)]
    pub s3: S3Args,
    /// Mount read-only.
    #[arg(long)]
    pub read_only: bool,
    /// Let other users use the mount.
    #[arg(long)]
    pub allow_other: bool,
    /// Owner of files that record none (default: the mounting user).
    #[arg(long, value_parser = values::int_in::<u32>(0, u32::MAX as i64 - 1))]
    pub uid: Option<u32>,
    /// Group of files that record none (default: the mounting user's group).
    #[arg(long, value_parser = values::int_in::<u32>(0, u32::MAX as i64 - 1))]
    pub gid: Option<u32>,
    /// Permissions of files that record none, octal (default 644).
    #[arg(long, value_parser = crate::mount::mode_arg)]
    pub file_mode: Option<u16>,
    /// Permissions of directories, octal (default 755).
    #[arg(long, value_parser = crate::mount::mode_arg)]
    pub dir_mode: Option<u16>,
    /// Generic mount options for the kernel, comma-separated as in fstab: ro, rw, noexec, exec,
    /// nosuid, suid, nodev, dev, noatime, relatime, strictatime, nodiratime, sync, dirsync.
    /// Default: rw,nosuid,nodev,noatime (reads never update access times on shrinkfs).
    #[arg(short = 'o', long = "options", value_name = "OPTS", value_delimiter = ',')]
    pub options: Vec<String>,
    /// Detach once the mount is ready (without --log-file, the log then goes to the systemd
    /// journal where there is one).
    #[arg(long)]
    pub daemon: bool,
    /// Append the log here; SIGHUP reopens it (for logrotate).
    #[arg(long)]
    pub log_file: Option<PathBuf>,
    /// Memory the mount may use for data: write buffers, uploads, fetches, read-ahead and the frame
    /// cache together. Writers wait instead of growing past it. Default: 1G, or a quarter of the
    /// host's memory if that is less.
    #[arg(long, value_parser = values::size_in(crate::mount::MIN_MEMORY_LIMIT, 16 << 40))]
    pub memory_limit: Option<u64>,
    /// Share of --memory-limit kept as a cache of decoded frames (default: a quarter of it).
    #[arg(long, value_parser = values::size_in(0, 8 << 40))]
    pub memory_cache_size: Option<u64>,
    /// Keep stored (compressed, still sealed) frames in this local directory too; survives remounts.
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
    /// Most bytes the --cache-dir cache holds, evicting least recently used frames.
    #[arg(long, default_value = "10G", value_parser = values::size_in(64 << 20, 1 << 50))]
    pub cache_size: u64,
    /// Share of the cache directory's disk to leave free (0.05 = 5%).
    #[arg(long, default_value_t = 0.05, value_parser = values::number_in(0.0, 0.99))]
    pub cache_min_free: f64,
    /// Seconds attributes and names are trusted before the store is asked again (0 to 86400),
    /// here and in the kernel's caches; `indefinite` for a bucket only this mount writes (changes
    /// by others are then never seen). See "Consistency" in SEMANTICS.md.
    #[arg(long, value_name = "SECONDS", default_value = "1", value_parser = values::ttl(86_400.0))]
    pub metadata_ttl: Duration,
    /// Seconds a name is trusted absent — missing from a complete listing of its directory, or
    /// from a lookup — before the store is asked again (0 to 86400, or `indefinite`; default: the
    /// --metadata-ttl). A file another mount creates shows here at most this long after.
    #[arg(long, value_name = "SECONDS", value_parser = values::ttl(86_400.0))]
    pub negative_metadata_ttl: Option<Duration>,
    /// Seconds a directory's complete listing, kept up with this mount's own changes, answers the
    /// next `ls` of it before the store is listed again (0 to 86400, or `indefinite`; like rclone's
    /// --dir-cache-time). A name another mount adds or removes shows in listings here at most this
    /// long after. Default: `indefinite` with `--metadata-ttl indefinite` (a bucket only this
    /// mount writes) and no finite --negative-metadata-ttl, else 0 (every `ls` lists the store).
    #[arg(long, value_name = "SECONDS", value_parser = values::ttl(86_400.0))]
    pub listing_ttl: Option<Duration>,
    /// Deletes an unlink may leave running behind it on an S3 bucket (0 to 1000000; 0: each
    /// unlink waits for its DELETE). Only for a bucket no one else writes: a file another writer
    /// stores under a removed name before the queued DELETE runs is deleted by it. The name is
    /// gone from this mount at once; fsync of a directory and unmounting wait for the queue.
    /// Default: 4096 with `--metadata-ttl indefinite` (a bucket only this mount writes), else 0.
    #[arg(long, value_name = "N", value_parser = values::int_in::<usize>(0, 1_000_000))]
    pub deletes_behind: Option<usize>,
    /// Directory for files being rewritten at random offsets (default: $TMPDIR). They are held
    /// there decoded, unsealed even with --key-file, while open (unnamed files, gone once stored).
    #[arg(long)]
    pub staging_dir: Option<PathBuf>,
    /// Threads serving kernel requests (1 to 1024).
    #[arg(long, default_value_t = 16, value_parser = values::int_in::<usize>(1, 1024))]
    pub threads: usize,
    /// Added to the mount's nice value for the threads serving kernel requests (-20 to 0; 0
    /// leaves them at the process's). They copy every byte written into the frames being cut,
    /// so on a host whose cores are busy a writer waits behind every CPU-bound process for them
    /// (with 16 busy loops beside, 4 and 8 writers under `--gpu auto` moved 1.06-1.19x more at
    /// -10; BENCHMARKS.md §9, session 27). Frames of more than 64 KiB are compressed at the
    /// process's priority (small ones, and a file's last short frame, on the request thread).
    /// Raising a priority needs CAP_SYS_NICE (root has it outside most containers) or a high
    /// enough RLIMIT_NICE; without, the threads keep the process's.
    #[arg(long, default_value_t = -10, value_parser = values::int_in::<i32>(-20, 0))]
    pub request_nice: i32,
    /// Let the kernel cache writes: write(2) returns once the bytes are in the page cache and
    /// several reach the mount at once (faster single writers); close and fsync still return only
    /// once the file is stored. The kernel then trusts its own size and times of an open file, so
    /// use it only for a bucket no other mount or tool writes (docs/SEMANTICS.md).
    #[arg(long)]
    pub writeback_cache: bool,
    /// Serve Prometheus metrics over HTTP at this address, e.g. 127.0.0.1:9464.
    #[arg(long, value_parser = values::listen_addr)]
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Mount even if the key (or its absence) does not match the sealed objects in the bucket:
    /// for operators migrating a bucket from one key to another. Without it, a mount samples a few
    /// objects and refuses a missing or different key.
    #[arg(long)]
    pub skip_key_check: bool,
    /// With --key-file, also serve objects that are not sealed (plain files, unsealed shrinkfs
    /// objects), e.g. while a bucket is being moved to a key. Off: anyone able to write to the
    /// bucket could otherwise replace a sealed file with content of their choosing.
    #[arg(long)]
    pub allow_unsealed: bool,
}

/// `shrinkfs cleanup`.
#[derive(Debug, Args)]
pub struct CleanupArgs {
    /// The bucket: a local directory or s3://bucket[/prefix].
    #[arg(value_parser = values::source)]
    pub source: String,
    /// Remove only leftovers older than this many seconds (0: all of them; keep the default
    /// while another mount of the bucket may be writing).
    #[arg(long, default_value = "3600", value_parser = values::seconds_in(0.0, 1e9))]
    pub older_than: std::time::Duration,
    #[command(flatten)]
    pub s3: S3Args,
}

/// `shrinkfs unmount`.
#[derive(Debug, Args)]
pub struct UnmountArgs {
    /// The mount point.
    pub mountpoint: PathBuf,
}

/// Whether to compress on the GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GpuChoice {
    /// When one is found (the default), and for `pack`, when the file is large enough (256 MiB per
    /// core) for a GPU to pay for its start; a line in the log says why not otherwise.
    Auto,
    /// Require a GPU: fail at start without one.
    On,
    /// Never.
    Off,
}

/// GPU dispatcher settings.
#[derive(Debug, Clone, Args)]
pub struct GpuArgs {
    /// Use the GPU for compression.
    #[arg(long, value_enum, default_value_t = GpuChoice::Auto)]
    pub gpu: GpuChoice,
    /// Fewest waiting frames worth a GPU launch; fewer are left to the CPU workers.
    #[arg(long, default_value_t = 32, value_parser = values::int_in::<usize>(1, 1_000_000))]
    pub gpu_min_frames: usize,
    /// Most frames in one GPU launch.
    #[arg(long, default_value_t = 1024, value_parser = values::int_in::<usize>(1, 1_000_000))]
    pub gpu_batch_max_items: usize,
    /// How long the GPU lets frames pile up in the shared queue before it leaves them to the CPU
    /// workers (milliseconds); while frames keep coming a launch gathers them for up to ten
    /// times this.
    #[arg(long, default_value_t = 5.0, value_parser = values::number_in(0.0, 10_000.0))]
    pub gpu_batch_window_ms: f64,
    /// Bytes the GPU's launches gather, shared by the launches that run at once (two on the
    /// H100: each launches half); a launch goes as soon as its share waits.
    #[arg(long, default_value = "256M", value_parser = values::size_in(1, MAX_DATA))]
    pub gpu_batch_floor_bytes: u64,
    /// With --gpu auto, files of a mount written at once (each past its first 8 frames) from which
    /// their zstd frames go to the GPU alone, as with --gpu on; fewer share the GPU and the cores
    /// as measured. 0: never.
    #[arg(long, default_value_t = 2, value_parser = values::int_in::<usize>(0, 1_000_000))]
    pub gpu_many_streams: usize,
    /// nVCOMP data type of the data, for cascaded and bitcomp: char, short, int, longlong (and u* forms).
    #[arg(long, default_value = "char", value_parser = ["char", "uchar", "short", "ushort", "int", "uint", "longlong", "ulonglong"])]
    pub gpu_data_type: String,
}

impl CodecArgs {
    /// What a dispatcher for these arguments serves: a mount with `mount_in_flight` bytes of
    /// budget for frames in flight, or a `pack`.
    pub fn serves(&self, mount_in_flight: Option<u64>) -> Serves {
        let frame_size = self.frame_size as usize;
        match mount_in_flight {
            Some(in_flight) => Serves::Mount { frame_size, in_flight },
            None => Serves::Pack { frame_size },
        }
    }

    /// Starts the dispatcher for these arguments, for `expected` bytes of input where known (with
    /// `--gpu auto`, too little for a GPU to pay for its start keeps it off, unless the codec
    /// needs one), for a mount's many streams (`mount_in_flight`: its budget of bytes in flight)
    /// or one ordered stream (see `DispatchConfig::gpu_first`); warns when a GPU-only codec will
    /// be written as zstd because no GPU is in use.
    pub fn dispatcher(
        &self,
        expected: Option<u64>,
        mount_in_flight: Option<u64>,
    ) -> anyhow::Result<shrinkfs_codec::dispatch::Dispatcher> {
        let id = self.codec;
        let d = self.gpu.dispatcher(expected.filter(|_| !id.gpu_only()), self.serves(mount_in_flight))?;
        if id.gpu_only() {
            // Its frames cannot start on the cores while the GPU starts: wait for it.
            d.wait_started();
            if !d.gpu_for(id) {
                tracing::warn!(
                    "codec {id} needs a GPU ({}); frames are written with zstd level 1 instead",
                    d.describe()
                );
            }
        }
        Ok(d)
    }
}

impl GpuArgs {
    /// Starts the dispatcher these arguments describe, for `expected_bytes` of work where known.
    /// Its GPU launches run as one stream (`DispatchConfig::one_stream`) for `pack` and mounts
    /// alike: with `--gpu on`, mounts with 4 and 8 writers moved 1.25-1.3x more that way
    /// (BENCHMARKS.md §5 round 6), and `auto` and `off` the same. A mount's `auto` lets the GPU
    /// come first (`DispatchConfig::gpu_first`).
    pub fn dispatcher(
        &self,
        expected_bytes: Option<u64>,
        serves: Serves,
    ) -> anyhow::Result<shrinkfs_codec::dispatch::Dispatcher> {
        use shrinkfs_codec::dispatch::{DispatchConfig, DispatchError, Dispatcher, GpuPolicy};
        let data_type = ["char", "uchar", "short", "ushort", "int", "uint", "longlong", "ulonglong"]
            .iter()
            .position(|t| *t == self.gpu_data_type)
            .unwrap_or(0) as i32;
        let cfg = DispatchConfig {
            policy: match self.gpu {
                GpuChoice::Auto => GpuPolicy::Auto,
                GpuChoice::On => GpuPolicy::On,
                GpuChoice::Off => GpuPolicy::Off,
            },
            min_items: self.gpu_min_frames,
            batch_max_items: self.gpu_batch_max_items.max(1),
            // The parser keeps the window finite and within 10 s; a struct built otherwise gets 0.
            batch_window: Duration::try_from_secs_f64(self.gpu_batch_window_ms / 1000.0).unwrap_or_default(),
            batch_floor_bytes: self.gpu_batch_floor_bytes as usize,
            data_type,
            expected_bytes,
            one_stream: true,
            gpu_first: matches!(serves, Serves::Mount { .. }),
            many_streams: if matches!(serves, Serves::Mount { .. }) { self.gpu_many_streams } else { 0 },
            gpu: match serves {
                Serves::Mount { frame_size, in_flight } => crate::gpuenv::mount_config(frame_size, in_flight),
                Serves::Pack { frame_size } => crate::gpuenv::pack_config(frame_size),
            },
            ..DispatchConfig::default()
        };
        Dispatcher::new(cfg).map_err(|e| match e {
            // The GPU asked for is not there: a usage error (exit 2), its cause in the chain.
            DispatchError::Thread(_) => anyhow::Error::new(e),
            _ => anyhow::Error::new(e).context(UsageError("--gpu on".into())),
        })
    }
}

/// What a dispatcher serves: one `pack`'s ordered stream, or a mount's many streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Serves {
    /// A `pack` of `frame_size` frames.
    Pack {
        /// Raw bytes per frame.
        frame_size: usize,
    },
    /// A mount of `frame_size` frames, with a budget of `in_flight` bytes for those in flight.
    Mount {
        /// Raw bytes per frame.
        frame_size: usize,
        /// The mount's budget for bytes in flight (`--memory-limit` less its frame cache).
        in_flight: u64,
    },
}

/// How frames are encoded (shared by `pack` and, later, `mount`).
#[derive(Debug, Clone, Args)]
pub struct CodecArgs {
    /// Codec for new frames. zstd, lz4, deflate and snappy run on the GPU when one is used
    /// (`--gpu`) and on the CPU otherwise, in the same format; the GPU-only formats need nVCOMP to
    /// decode and fall back to zstd level 1 when written without a GPU.
    #[arg(long, default_value = "zstd", value_parser = values::codec())]
    pub codec: CodecId,
    /// Compression level (zstd: 1 fastest .. 19 smallest; deflate uses 1 to 9).
    #[arg(long, default_value_t = 1, value_parser = values::int_in::<i32>(1, 19))]
    pub level: i32,
    /// Raw bytes per frame, e.g. 256K or 1M (4K .. 64M).
    #[arg(long, default_value = "1M", value_parser = values::size_in(MIN_FRAME, MAX_FRAME))]
    pub frame_size: u64,
    /// zstd dictionary file (made with `zstd --train`).
    #[arg(long)]
    pub dict: Option<PathBuf>,
    #[command(flatten)]
    pub key: KeyArgs,
    #[command(flatten)]
    pub gpu: GpuArgs,
}

/// The encryption key.
#[derive(Debug, Clone, Args)]
pub struct KeyArgs {
    /// File holding exactly 32 random bytes: frames are sealed with AES-256-GCM
    /// (make one with `head -c 32 /dev/urandom > key`).
    #[arg(long)]
    pub key_file: Option<PathBuf>,
}

impl KeyArgs {
    /// Reads the key file, if one was given.
    pub fn load(&self) -> anyhow::Result<Option<MasterKey>> {
        let Some(path) = &self.key_file else {
            return Ok(None);
        };
        // (At most one byte more than a key: `--key-file /dev/urandom` must fail at once.)
        let bytes = read_at_most(path, KEY_LEN as u64 + 1)
            .with_context(|| format!("cannot read key file {}", path.display()))?;
        if bytes.len() > KEY_LEN {
            let why = format!("a key file holds exactly {KEY_LEN} bytes (no newline), this one holds more");
            return Err(shrinkfs_codec::Error::InvalidKey(why)).with_context(|| format!("key file {}", path.display()));
        }
        let key = MasterKey::from_bytes(&bytes).with_context(|| format!("key file {}", path.display()))?;
        if let Ok(m) = std::fs::metadata(path)
            && m.is_file()
            && m.permissions().mode() & 0o044 != 0
        {
            tracing::warn!(
                "key file {} can be read by other users (mode {:o}): `chmod 600` it",
                path.display(),
                m.permissions().mode() & 0o777
            );
        }
        Ok(Some(key))
    }
}

/// The largest dictionary file read (zstd's own trainer makes 110 KiB ones by default).
const DICT_MAX: u64 = 64 << 20;

/// The first `most` bytes of file `path` (all of it if shorter): a device or an endless file
/// named by mistake is not read into memory whole.
fn read_at_most(path: &std::path::Path, most: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut out = Vec::new();
    std::fs::File::open(path)?.take(most).read_to_end(&mut out)?;
    Ok(out)
}

/// Reads a zstd dictionary file.
pub fn load_dict(path: &Option<PathBuf>) -> anyhow::Result<Option<Arc<Dictionary>>> {
    let Some(path) = path else { return Ok(None) };
    let bytes =
        read_at_most(path, DICT_MAX + 1).with_context(|| format!("cannot read dictionary {}", path.display()))?;
    if bytes.len() as u64 > DICT_MAX {
        let why = format!("larger than {} MiB, more than this accepts", DICT_MAX >> 20);
        return Err(shrinkfs_codec::Error::InvalidOption(why))
            .with_context(|| format!("dictionary {}", path.display()));
    }
    let dict = Dictionary::new(bytes).with_context(|| format!("dictionary {}", path.display()))?;
    Ok(Some(Arc::new(dict)))
}

impl CodecArgs {
    /// The encoder configuration these arguments describe, checked.
    pub fn to_config(&self) -> anyhow::Result<EncodeConfig> {
        let frame_size = u32::try_from(self.frame_size)
            .map_err(|_| UsageError(format!("frame size {} is too large", self.frame_size)))?;
        let dict = load_dict(&self.dict)?;
        if self.codec.gpu_only() && self.gpu.gpu == GpuChoice::Off {
            return Err(UsageError(format!("codec {} needs the GPU; drop --gpu off", self.codec)).into());
        }
        if dict.is_some() && !self.codec.descriptor().dictionary {
            return Err(UsageError(format!("--dict does not apply to --codec {}", self.codec)).into());
        }
        let config = EncodeConfig {
            params: CodecParams { codec: self.codec, level: self.level, dict },
            frame_size,
            key: self.key.load()?,
        };
        config.codec()?;
        Ok(config)
    }
}

/// How to reach an S3-compatible store (for s3:// sources and object URLs). Every setting is a
/// long flag (`--name VALUE`, or `--name` for a switch), so `mount -o name=value` reaches it.
#[derive(Debug, Clone, Args)]
pub struct S3Args {
    /// S3-compatible endpoint, e.g. http://127.0.0.1:9000 (path-style addressing).
    #[arg(long, value_name = "URL", value_parser = values::endpoint_url)]
    pub endpoint_url: Option<String>,
    /// S3 region (default: AWS_REGION, AWS_DEFAULT_REGION, the profile's region, then us-east-1).
    #[arg(long, value_parser = values::region)]
    pub region: Option<String>,
    /// AWS profile for credentials and region (default: AWS_PROFILE, AWS_DEFAULT_PROFILE, then
    /// "default"); given here, it wins over keys in the environment, as with the AWS CLI.
    #[arg(long, value_name = "NAME", value_parser = values::profile_name)]
    pub profile: Option<String>,
    /// AWS shared credentials file (default: AWS_SHARED_CREDENTIALS_FILE, then ~/.aws/credentials,
    /// where ~ is HOME or, without it, the user's home in the user database).
    #[arg(long, value_name = "PATH", value_parser = values::existing_file)]
    pub credentials_file: Option<PathBuf>,
    /// AWS shared config file, with profiles' region, role_arn, credential_process, sso_*
    /// (default: AWS_CONFIG_FILE, then ~/.aws/config).
    #[arg(long, value_name = "PATH", value_parser = values::existing_file)]
    pub aws_config_file: Option<PathBuf>,
    /// Allow plain http to the endpoint.
    #[arg(long)]
    pub allow_http: bool,
    /// Use path-style S3 addressing (https://HOST/BUCKET/KEY; the default with --endpoint-url).
    #[arg(long)]
    pub path_style: bool,
    /// Use virtual-hosted-style S3 addressing (https://BUCKET.HOST/KEY); with --endpoint-url, the
    /// URL is then the bucket's own host.
    #[arg(long, conflicts_with = "path_style")]
    pub virtual_hosted_style: bool,
    /// Storage class of every object written (mount and pack): STANDARD, STANDARD_IA, ONEZONE_IA,
    /// INTELLIGENT_TIERING, GLACIER_IR, ... (default: the bucket's, STANDARD on AWS).
    #[arg(long, value_name = "CLASS", value_parser = values::storage_class)]
    pub storage_class: Option<String>,
    /// Server-side encryption of objects written: AES256 (SSE-S3), aws:kms (SSE-KMS) or
    /// aws:kms:dsse (DSSE-KMS) (default: the bucket's own setting).
    #[arg(long, value_name = "TYPE", ignore_case = true, value_parser = ["AES256", "aws:kms", "aws:kms:dsse"])]
    pub sse: Option<String>,
    /// KMS key (id, alias or ARN) for --sse aws:kms or aws:kms:dsse; alone it means aws:kms
    /// (default: the account's aws/s3 key).
    #[arg(long, value_name = "ID", value_parser = values::kms_key_id)]
    pub sse_kms_key_id: Option<String>,
    /// SSE-C: a file holding a base64 256-bit key (`head -c 32 /dev/urandom | base64 > F`); S3
    /// encrypts with it and every read must send it too.
    #[arg(long, value_name = "PATH", value_parser = values::existing_file, conflicts_with_all = ["sse", "sse_kms_key_id"])]
    pub sse_c_key_file: Option<PathBuf>,
    /// Pay for the requests to a requester-pays bucket.
    #[arg(long)]
    pub requester_pays: bool,
    /// Seconds a failed S3 request is retried for (connection refused or reset, 5xx, 429, and
    /// timeouts of requests that are safe to repeat), backing off up to 5 s between tries;
    /// 0 = no retries (0 to 600).
    #[arg(long, value_name = "SECONDS", default_value = "60", value_parser = values::seconds_in(0.0, 600.0))]
    pub retry_timeout: Duration,
    /// Most retries of one failed S3 request, within --retry-timeout (0 to 1000; default: as many
    /// as fit in --retry-timeout).
    #[arg(long, value_name = "N", value_parser = values::int_in::<usize>(0, 1000))]
    pub retries: Option<usize>,
    /// Seconds one S3 request may take, body included: a 8 MiB part needs 300 s at 28 KB/s
    /// (1 to 3600).
    #[arg(long, value_name = "SECONDS", default_value = "300", value_parser = values::seconds_in(1.0, 3600.0))]
    pub request_timeout: Duration,
    /// Seconds to wait for a connection to the S3 endpoint (0.1 to 300).
    #[arg(long, value_name = "SECONDS", default_value = "5", value_parser = values::seconds_in(0.1, 300.0))]
    pub connect_timeout: Duration,
    /// Most requests to the bucket in flight at once, all operations together (1 to 4096); more
    /// wait their turn (the wait shows in the store latency metrics).
    #[arg(long, value_name = "N", default_value_t = shrinkfs_fuse::store::DEFAULT_MAX_REQUESTS, value_parser = values::int_in::<usize>(1, 4096))]
    pub max_requests: usize,
}

impl Default for S3Args {
    /// The defaults of the flags (for commands that take no S3 flags but may name an object).
    fn default() -> Self {
        let o = shrinkfs_fuse::store::S3Options::default();
        S3Args {
            endpoint_url: None,
            region: None,
            profile: None,
            credentials_file: None,
            aws_config_file: None,
            allow_http: false,
            path_style: false,
            virtual_hosted_style: false,
            storage_class: None,
            sse: None,
            sse_kms_key_id: None,
            sse_c_key_file: None,
            requester_pays: false,
            retry_timeout: o.store.retry.timeout,
            retries: None,
            request_timeout: o.store.request_timeout,
            connect_timeout: o.store.connect_timeout,
            max_requests: o.store.max_requests,
        }
    }
}

impl S3Args {
    /// The connection options, with the process environment (read here, at the edge) for the
    /// credentials and the `AWS_*` settings. Reads the --sse-c-key-file.
    pub fn options(&self) -> anyhow::Result<S3Options> {
        let env = std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)));
        self.options_with(AwsEnv::new(env))
    }

    /// The connection options with the environment `env`.
    pub fn options_with(&self, env: AwsEnv) -> anyhow::Result<S3Options> {
        let encryption = match (self.sse.as_deref().map(str::to_ascii_lowercase).as_deref(), &self.sse_kms_key_id) {
            _ if self.sse_c_key_file.is_some() => Encryption::Customer(self.customer_key()?),
            (None, None) => Encryption::BucketDefault,
            (Some("aes256"), None) => Encryption::S3,
            (Some("aes256"), Some(_)) => {
                return Err(
                    UsageError("--sse-kms-key-id needs --sse aws:kms or aws:kms:dsse, not AES256".into()).into()
                );
            }
            (Some("aws:kms:dsse"), key) => Encryption::DsseKms(key.clone()),
            (_, key) => Encryption::Kms(key.clone()),
        };
        let credentials = CredentialsConfig {
            profile: self.profile.clone(),
            credentials_file: self.credentials_file.clone(),
            config_file: self.aws_config_file.clone(),
            home: shrinkfs_fuse::credentials::home_dir(&env),
            env,
        };
        Ok(S3Options {
            endpoint_url: self.endpoint_url.clone(),
            region: self.region.clone(),
            allow_http: self.allow_http,
            path_style: self.path_style,
            virtual_hosted_style: self.virtual_hosted_style,
            store: StoreConfig {
                retry: RetryPolicy { timeout: self.retry_timeout, max_retries: self.retries, ..RetryPolicy::default() },
                request_timeout: self.request_timeout,
                connect_timeout: self.connect_timeout,
                max_requests: self.max_requests,
            },
            storage_class: self.storage_class.clone(),
            encryption,
            requester_pays: self.requester_pays,
            credentials,
        })
    }

    /// The SSE-C key of --sse-c-key-file.
    fn customer_key(&self) -> anyhow::Result<CustomerKey> {
        let Some(path) = &self.sse_c_key_file else { anyhow::bail!("no --sse-c-key-file") };
        let bad = |why: String| UsageError(format!("--sse-c-key-file {}: {why}", path.display()));
        let text = read_at_most(path, 1024).map_err(|e| bad(e.to_string()))?;
        if text.len() >= 1024 {
            return Err(bad("is far longer than a base64 key".into()).into());
        }
        let text = String::from_utf8(text).map_err(|_| bad("is not base64 text".into()))?;
        CustomerKey::from_base64(&text).map_err(|e| bad(e.to_string()).into())
    }
}

/// `shrinkfs pack`.
#[derive(Debug, Args)]
pub struct PackArgs {
    #[command(flatten)]
    pub codec: CodecArgs,
    #[command(flatten)]
    pub s3: S3Args,
    /// Input file, s3://bucket/key, or `-` for stdin.
    pub input: PathBuf,
    /// Output file, s3://bucket/key, or `-` for stdout. Appears only when complete.
    pub output: PathBuf,
}

/// `shrinkfs unpack`.
#[derive(Debug, Args)]
pub struct UnpackArgs {
    #[command(flatten)]
    pub key: KeyArgs,
    /// With --key-file, also decode input that is not sealed (refused by default, exit 4).
    #[arg(long)]
    pub allow_unsealed: bool,
    /// zstd dictionary the object was written with, if any.
    #[arg(long)]
    pub dict: Option<PathBuf>,
    /// Only these logical bytes, `START:LEN` (sizes like 1M allowed), read from the object's tail
    /// and the frames that hold them, as the mount reads (a file or s3:// input, not `-`).
    #[arg(long, value_name = "START:LEN", value_parser = values::byte_range)]
    pub range: Option<std::ops::Range<u64>>,
    #[command(flatten)]
    pub s3: S3Args,
    /// Input object: a file, s3://bucket/key, or `-` for stdin.
    pub input: PathBuf,
    /// Output file, s3://bucket/key, or `-` for stdout. Appears only when complete.
    pub output: PathBuf,
}

/// `shrinkfs inspect`.
#[derive(Debug, Args)]
pub struct InspectArgs {
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub s3: S3Args,
    /// The object to describe: a file or s3://bucket/key.
    pub file: PathBuf,
}

/// `shrinkfs corpus`.
#[derive(Debug, Args)]
pub struct CorpusArgs {
    /// Which corpus.
    #[arg(value_enum)]
    pub kind: CorpusKind,
    /// How many bytes, e.g. 64M.
    #[arg(allow_hyphen_values = true, value_parser = values::size_in(0, MAX_DATA))]
    pub size: u64,
    /// Output file, or `-` for stdout.
    pub output: PathBuf,
    /// Seed of the generator (same seed, same bytes).
    #[arg(long, default_value_t = 1, value_parser = values::any_u64)]
    pub seed: u64,
}
