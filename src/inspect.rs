//! `shrinkfs inspect`: what a stored object is, read from its tail (and head) only.

use std::fs::File;
use std::path::Path;

use anyhow::Context;
use serde::Serialize;
use shrinkfs_codec::format::Header;
use shrinkfs_codec::reader::SUGGESTED_TAIL;
use shrinkfs_codec::{Error as CodecError, Layout, TailProbe, probe_tail};

use crate::size::human;

/// The description `inspect` prints.
#[derive(Debug, Serialize, PartialEq)]
pub struct Report {
    /// "shrinkfs" or "plain".
    pub format: &'static str,
    /// Format version (shrinkfs objects only).
    pub version: Option<u16>,
    /// Bytes stored.
    pub stored_size: u64,
    /// Bytes after decoding.
    pub logical_size: u64,
    /// Number of frames.
    pub frames: u64,
    /// Nominal frame size of the writer.
    pub frame_size: Option<u32>,
    /// Sealed with AES-256-GCM.
    pub sealed: bool,
    /// zstd dictionary id, if one is needed.
    pub dict_id: Option<u32>,
    /// Per codec: frames, raw bytes, stored bytes.
    pub codecs: Vec<CodecUsage>,
}

/// Bytes per codec.
#[derive(Debug, Serialize, PartialEq)]
pub struct CodecUsage {
    /// Codec name.
    pub codec: String,
    /// Frames using it.
    pub frames: usize,
    /// Raw bytes in those frames.
    pub raw: u64,
    /// Stored bytes of those frames.
    pub stored: u64,
}

/// Describes a local file or an `s3://bucket/key` object, reading only its tail (and head).
pub fn inspect(path: &Path, s3: &crate::cli::S3Args) -> anyhow::Result<Report> {
    with_ranges(path, s3, describe)
}

/// Calls `f` with the length of a local file or `s3://bucket/key` object and a function that
/// reads a byte range of it (a ranged GET for objects): for readers that work from the tail.
pub fn with_ranges<T>(
    path: &Path,
    s3: &crate::cli::S3Args,
    f: impl FnOnce(u64, &dyn Fn(std::ops::Range<u64>) -> anyhow::Result<Vec<u8>>) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let text = path.to_string_lossy();
    if crate::remote::is_url(&text) {
        let r = crate::remote::open(&text, s3)?;
        let len = r.rt.block_on(r.store.head(&r.path)).with_context(|| format!("cannot stat {text}"))?.size;
        let read_at = |range: std::ops::Range<u64>| -> anyhow::Result<Vec<u8>> {
            let fut = shrinkfs_fuse::objects::get_range(r.store.as_ref(), &r.path, range, len, None);
            Ok(r.rt.block_on(fut).with_context(|| format!("cannot read {text}"))?.to_vec())
        };
        return f(len, &read_at);
    }
    let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let len = file.metadata().context("cannot stat input")?.len();
    f(len, &|range| {
        let mut b = vec![0; (range.end - range.start) as usize];
        std::os::unix::fs::FileExt::read_exact_at(&file, &mut b, range.start).context("cannot read object")?;
        Ok(b)
    })
}

/// The layout of an object of `len` bytes read from its tail (`None`: plain bytes), the way the
/// mount reads it: the last 64 KiB, more if the index is longer, and the first 8 bytes of an
/// object without a footer (a head that says shrinkfs makes it a truncated object, an error).
pub fn read_layout(
    len: u64,
    read_at: &dyn Fn(std::ops::Range<u64>) -> anyhow::Result<Vec<u8>>,
) -> anyhow::Result<Option<Layout>> {
    let tail = read_at(len.saturating_sub(SUGGESTED_TAIL)..len)?;
    match probe_tail(&tail, len)? {
        TailProbe::Plain => {
            let head = if len <= SUGGESTED_TAIL { tail } else { read_at(0..8)? };
            if Header::has_magic(&head) {
                return Err(CodecError::no_footer(len).into());
            }
            Ok(None)
        }
        TailProbe::Shrinkfs { tail_len, .. } => {
            let tail = if tail_len > tail.len() as u64 { read_at(len - tail_len..len)? } else { tail };
            Ok(Some(Layout::parse(&tail, len)?))
        }
    }
}

/// The report for an object of `len` bytes whose bytes `read_at` returns.
fn describe(len: u64, read_at: &dyn Fn(std::ops::Range<u64>) -> anyhow::Result<Vec<u8>>) -> anyhow::Result<Report> {
    match read_layout(len, read_at)? {
        None => Ok(Report {
            format: "plain",
            version: None,
            stored_size: len,
            logical_size: len,
            frames: 0,
            frame_size: None,
            sealed: false,
            dict_id: None,
            codecs: vec![],
        }),
        Some(layout) => Ok(report_for(&layout)),
    }
}

/// The report for a parsed layout.
pub fn report_for(layout: &Layout) -> Report {
    Report {
        format: "shrinkfs",
        version: Some(layout.header.version.number()),
        stored_size: layout.stored_size(),
        logical_size: layout.logical_size(),
        frames: layout.entries.len() as u64,
        frame_size: Some(layout.header.frame_size),
        sealed: layout.header.sealed(),
        dict_id: (layout.header.dict_id != 0).then_some(layout.header.dict_id),
        codecs: layout
            .codec_usage()
            .into_iter()
            .map(|(c, raw, stored, frames)| CodecUsage { codec: c.to_string(), frames, raw, stored })
            .collect(),
    }
}

impl Report {
    /// Logical size over stored size.
    pub fn ratio(&self) -> f64 {
        if self.stored_size == 0 { 1.0 } else { self.logical_size as f64 / self.stored_size as f64 }
    }

    /// The text form.
    pub fn to_text(&self, name: &str) -> String {
        let mut s = format!("object:        {name}\n");
        match self.version {
            None => s += "format:        plain bytes (not a shrinkfs object; read as is)\n",
            Some(v) => s += &format!("format:        shrinkfs v{v}\n"),
        }
        s += &format!("logical size:  {} ({})\n", self.logical_size, human(self.logical_size));
        s += &format!("stored size:   {} ({})\n", self.stored_size, human(self.stored_size));
        s += &format!("ratio:         {:.3}x\n", self.ratio());
        if self.version.is_some() {
            let fs = self.frame_size.map(|f| human(f as u64)).unwrap_or_default();
            s += &format!("frames:        {} (frame size {fs})\n", self.frames);
            s += &format!("sealed:        {}\n", if self.sealed { "yes (AES-256-GCM)" } else { "no" });
            if let Some(id) = self.dict_id {
                s += &format!("dictionary:    zstd dictionary id {id}\n");
            }
            for c in &self.codecs {
                s += &format!("codec {:<8} {} frames, {} -> {}\n", c.codec, c.frames, human(c.raw), human(c.stored));
            }
        }
        s
    }
}
