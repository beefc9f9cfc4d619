//! Command-line arguments (clap derive). Converted into library configs before use, so libraries
//! never see clap.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::{Args, Parser, Subcommand, ValueEnum};
use shrinkfs_codec::{CodecId, CodecParams, Dictionary, EncodeConfig, MasterKey};

use crate::corpus::CorpusKind;
use crate::exit::UsageError;

/// shrinkfs: a filesystem over an object store that compresses file data transparently.
#[derive(Debug, Parser)]
#[command(name = "shrinkfs", version, about, propagate_version = true)]
pub struct Cli {
    /// More log output (-v info, -vv debug, -vvv trace); RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Compress a file into a shrinkfs object (`-` for stdin/stdout).
    Pack(PackArgs),
    /// Decode a shrinkfs object back into the original bytes (plain objects are copied as they are).
    Unpack(UnpackArgs),
    /// Describe a stored object: format version, frames, codecs, sizes and ratio.
    Inspect(InspectArgs),
    /// Mount a bucket (a local directory, s3://bucket[/prefix] or memory://) at a directory.
    Mount(Box<MountArgs>),
    /// Unmount a shrinkfs mount (pending files are uploaded first by the mount process).
    Unmount(UnmountArgs),
    /// Write one of the benchmark corpora (deterministic, made by shrinkfs itself).
    Corpus(CorpusArgs),
}

/// `shrinkfs mount`.
#[derive(Debug, Args)]
pub struct MountArgs {
    /// The bucket: a local directory, s3://bucket[/prefix], or memory:// (empty, for tests).
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
    #[arg(long)]
    pub uid: Option<u32>,
    /// Group of files that record none (default: the mounting user's group).
    #[arg(long)]
    pub gid: Option<u32>,
    /// Permissions of files that record none, octal (default 644).
    #[arg(long, value_parser = crate::mount::mode_arg)]
    pub file_mode: Option<u16>,
    /// Permissions of directories, octal (default 755).
    #[arg(long, value_parser = crate::mount::mode_arg)]
    pub dir_mode: Option<u16>,
    /// Detach once the mount is ready.
    #[arg(long)]
    pub daemon: bool,
    /// Memory for decoded frames, e.g. 256M.
    #[arg(long, default_value = "256M", value_parser = crate::size::parse_size)]
    pub cache_size: u64,
    /// Seconds attributes and names are trusted before the store is asked again.
    #[arg(long, default_value_t = 1.0)]
    pub metadata_ttl: f64,
    /// Directory for files being rewritten at random offsets (default: $TMPDIR).
    #[arg(long)]
    pub staging_dir: Option<PathBuf>,
    /// Threads serving kernel requests.
    #[arg(long, default_value_t = 16)]
    pub threads: usize,
}

/// `shrinkfs unmount`.
#[derive(Debug, Args)]
pub struct UnmountArgs {
    /// The mount point.
    pub mountpoint: PathBuf,
}

/// Codecs selectable on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CodecChoice {
    /// zstd (levels 1 to 19).
    Zstd,
    /// LZ4 block format (fast, lower ratio).
    Lz4,
    /// Store frames uncompressed (still framed, checksummed and optionally sealed).
    None,
}

impl From<CodecChoice> for CodecId {
    fn from(c: CodecChoice) -> Self {
        match c {
            CodecChoice::Zstd => CodecId::Zstd,
            CodecChoice::Lz4 => CodecId::Lz4,
            CodecChoice::None => CodecId::None,
        }
    }
}

/// How frames are encoded (shared by `pack` and, later, `mount`).
#[derive(Debug, Clone, Args)]
pub struct CodecArgs {
    /// Codec for new frames.
    #[arg(long, value_enum, default_value_t = CodecChoice::Zstd)]
    pub codec: CodecChoice,
    /// Compression level (zstd: 1 fastest .. 19 smallest).
    #[arg(long, default_value_t = 1)]
    pub level: i32,
    /// Raw bytes per frame, e.g. 256K or 1M (4K .. 64M).
    #[arg(long, default_value = "1M", value_parser = crate::size::parse_size)]
    pub frame_size: u64,
    /// zstd dictionary file (made with `zstd --train`).
    #[arg(long)]
    pub dict: Option<PathBuf>,
    #[command(flatten)]
    pub key: KeyArgs,
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
        let bytes = std::fs::read(path).with_context(|| format!("cannot read key file {}", path.display()))?;
        let key = MasterKey::from_bytes(&bytes).with_context(|| format!("key file {}", path.display()))?;
        Ok(Some(key))
    }
}

/// Reads a zstd dictionary file.
pub fn load_dict(path: &Option<PathBuf>) -> anyhow::Result<Option<Arc<Dictionary>>> {
    let Some(path) = path else { return Ok(None) };
    let bytes = std::fs::read(path).with_context(|| format!("cannot read dictionary {}", path.display()))?;
    let dict = Dictionary::new(bytes).with_context(|| format!("dictionary {}", path.display()))?;
    Ok(Some(Arc::new(dict)))
}

impl CodecArgs {
    /// The encoder configuration these arguments describe, checked.
    pub fn to_config(&self) -> anyhow::Result<EncodeConfig> {
        let frame_size = u32::try_from(self.frame_size)
            .map_err(|_| UsageError(format!("frame size {} is too large", self.frame_size)))?;
        let dict = load_dict(&self.dict)?;
        if dict.is_some() && self.codec != CodecChoice::Zstd {
            return Err(UsageError("--dict works with --codec zstd only".into()).into());
        }
        let config = EncodeConfig {
            params: CodecParams { codec: self.codec.into(), level: self.level, dict },
            frame_size,
            key: self.key.load()?,
        };
        config.codec()?;
        Ok(config)
    }
}

/// How to reach an S3-compatible store (for s3:// sources and object URLs).
#[derive(Debug, Clone, Default, Args)]
pub struct S3Args {
    /// S3-compatible endpoint, e.g. http://127.0.0.1:9000 (path-style addressing).
    #[arg(long)]
    pub endpoint_url: Option<String>,
    /// S3 region (default: AWS_REGION / profile, then us-east-1).
    #[arg(long)]
    pub region: Option<String>,
    /// Allow plain http to the endpoint.
    #[arg(long)]
    pub allow_http: bool,
    /// Use path-style S3 addressing.
    #[arg(long)]
    pub path_style: bool,
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
    /// zstd dictionary the object was written with, if any.
    #[arg(long)]
    pub dict: Option<PathBuf>,
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
    #[arg(value_parser = crate::size::parse_size)]
    pub size: u64,
    /// Output file, or `-` for stdout.
    pub output: PathBuf,
    /// Seed of the generator (same seed, same bytes).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}
