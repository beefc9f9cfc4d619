//! Sans-IO reading of a stored object: recognise it from its tail, parse footer and index, and
//! plan which stored byte ranges a logical range needs. The caller fetches; `frame` decodes.

use std::ops::Range;
use std::sync::Arc;

use crate::codec::{CodecId, Dictionary};
use crate::error::{Error, Result, Rule};
use crate::format::{FOOTER_LEN, FileMeta, Footer, Header, IndexBody, IndexEntry, TAG_LEN, checksum};
use crate::frame::ObjectContext;
use crate::seal::MasterKey;

/// How many tail bytes to fetch first: enough for the footer and the index of about 2,000 frames
/// (2 GiB at the default frame size), so most objects need one request before reading data.
pub const SUGGESTED_TAIL: u64 = 64 * 1024;

/// What the tail of an object says about it.
#[derive(Debug)]
pub enum TailProbe {
    /// No shrinkfs footer: the object is plain bytes, read as they are.
    Plain,
    /// A shrinkfs object; `tail_len` bytes from the end hold its index and footer.
    Shrinkfs {
        /// The parsed footer.
        footer: Footer,
        /// Bytes from the end of the object that hold index and footer.
        tail_len: u64,
    },
}

/// Looks at the last bytes of an object of length `object_len`.
///
/// An object whose tail lacks the footer magic is plain. Callers that also see the head should
/// check `Header::has_magic`: a head that says shrinkfs over a tail that does not is a truncated
/// object, an error rather than plain bytes.
pub fn probe_tail(tail: &[u8], object_len: u64) -> Result<TailProbe> {
    if !Footer::has_magic(tail) {
        return Ok(TailProbe::Plain);
    }
    let footer = Footer::parse(tail, object_len)?;
    Ok(TailProbe::Shrinkfs { footer, tail_len: footer.index_len as u64 + FOOTER_LEN as u64 })
}

/// A fetch the caller should make: one stored byte range holding consecutive frames.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetch {
    /// Stored byte range to GET.
    pub range: Range<u64>,
    /// Frame numbers it holds.
    pub frames: Range<usize>,
}

/// Where every frame of an object lies, parsed from its index and footer.
#[derive(Debug, Clone)]
pub struct Layout {
    /// The footer.
    pub footer: Footer,
    /// The object header (its copy in the index).
    pub header: Header,
    /// One entry per frame.
    pub entries: Vec<IndexEntry>,
    /// File metadata recorded with the object.
    pub meta: FileMeta,
    /// Index body and tag, kept to authenticate a sealed index when a key is supplied.
    sealed_index: Option<(Vec<u8>, [u8; TAG_LEN])>,
}

impl Layout {
    /// Parses the layout from the object's tail. `tail` must hold at least the last
    /// `TailProbe::Shrinkfs::tail_len` bytes of the object.
    pub fn parse(tail: &[u8], object_len: u64) -> Result<Self> {
        let footer = match probe_tail(tail, object_len)? {
            TailProbe::Plain => return Err(Error::NotShrinkfs),
            TailProbe::Shrinkfs { footer, .. } => footer,
        };
        let need = footer.index_len as usize + FOOTER_LEN;
        if tail.len() < need {
            return Err(Error::Truncated { what: "object tail", expected: need as u64, actual: tail.len() as u64 });
        }
        let index = &tail[tail.len() - need..tail.len() - FOOTER_LEN];
        if checksum(index) != footer.index_crc {
            return Err(Error::malformed(Rule::IndexCrc, "index checksum mismatch"));
        }
        let body_len = index.len() - if footer.sealed() { TAG_LEN } else { 0 };
        let body = IndexBody::parse(&index[..body_len], &footer)?;
        let sealed_index = footer.sealed().then(|| {
            let tag: [u8; TAG_LEN] = index[body_len..].try_into().expect("tag length");
            (index[..body_len].to_vec(), tag)
        });
        Ok(Layout { footer, header: body.header, entries: body.entries, meta: body.meta, sealed_index })
    }

    /// Checks the key and dictionary and authenticates a sealed index; the result decodes frames.
    pub fn open(&self, master: Option<&MasterKey>, dicts: &[Arc<Dictionary>]) -> Result<ObjectContext> {
        let ctx = ObjectContext::for_reading(self.header, master, dicts)?;
        if let (Some(key), Some((body, tag))) = (ctx.key(), &self.sealed_index) {
            key.verify_index(body, tag)?;
        }
        for codec in self.entries.iter().map(|e| e.codec).filter(|c| c.descriptor().dictionary) {
            ctx.require_dict(codec)?;
        }
        Ok(ctx)
    }

    /// Length of the decoded file.
    pub fn logical_size(&self) -> u64 {
        self.footer.logical_size
    }

    /// Length of the stored object.
    pub fn stored_size(&self) -> u64 {
        self.footer.index_offset + self.footer.index_len as u64 + FOOTER_LEN as u64
    }

    /// The frame holding logical byte `offset`, if it is inside the file.
    pub fn frame_at(&self, offset: u64) -> Option<usize> {
        if offset >= self.logical_size() {
            return None;
        }
        Some(self.entries.partition_point(|e| e.raw_offset + e.raw_len as u64 <= offset))
    }

    /// Frames that hold any byte of the logical `range` (clipped to the file).
    pub fn frames_for(&self, range: Range<u64>) -> Range<usize> {
        let end = range.end.min(self.logical_size());
        if range.start >= end {
            return 0..0;
        }
        let first = self.frame_at(range.start).expect("start is inside the file");
        let last = self.frame_at(end - 1).expect("end is inside the file");
        first..last + 1
    }

    /// Stored ranges to fetch for `frames` (sorted, distinct frame numbers): neighbouring frames
    /// are merged into one range as long as it stays within `max_fetch` bytes.
    pub fn fetches(&self, frames: &[usize], max_fetch: u64) -> Vec<Fetch> {
        let mut out: Vec<Fetch> = Vec::new();
        for &f in frames {
            let r = self.entries[f].stored_range();
            match out.last_mut() {
                Some(last) if last.frames.end == f && r.end - last.range.start <= max_fetch => {
                    last.range.end = r.end;
                    last.frames.end = f + 1;
                }
                _ => out.push(Fetch { range: r, frames: f..f + 1 }),
            }
        }
        out
    }

    /// Plans a logical read: the fetches that cover every frame the range touches.
    pub fn plan(&self, range: Range<u64>, max_fetch: u64) -> Vec<Fetch> {
        let frames: Vec<usize> = self.frames_for(range).collect();
        self.fetches(&frames, max_fetch)
    }

    /// Raw bytes per codec, for `inspect`.
    pub fn codec_usage(&self) -> Vec<(CodecId, u64, u64, usize)> {
        let mut usage: Vec<(CodecId, u64, u64, usize)> = Vec::new();
        for e in &self.entries {
            match usage.iter_mut().find(|u| u.0 == e.codec) {
                Some(u) => {
                    u.1 += e.raw_len as u64;
                    u.2 += e.stored_len as u64;
                    u.3 += 1;
                }
                None => usage.push((e.codec, e.raw_len as u64, e.stored_len as u64, 1)),
            }
        }
        usage.sort();
        usage
    }
}
