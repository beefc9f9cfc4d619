//! `unpack --range`: part of an object read from its tail, as the mount reads it — footer and
//! index first, then only the frames that hold the range, each checked before its bytes are used.

use std::ops::Range;
use std::sync::Arc;

use shrinkfs_codec::{Dictionary, Error as CodecError, MasterKey, decode_frame};

/// Largest single read of frames.
const MAX_FETCH: u64 = 8 << 20;

/// What to read and how to open it.
pub struct RangeRead<'a> {
    /// Logical bytes wanted (clipped to the file).
    pub range: Range<u64>,
    /// The key, if objects are sealed.
    pub key: Option<&'a MasterKey>,
    /// zstd dictionaries.
    pub dicts: &'a [Arc<Dictionary>],
    /// With a key, also read objects that are not sealed.
    pub allow_unsealed: bool,
}

/// The logical bytes `want.range` of an object of `len` bytes whose stored bytes `read_at`
/// returns; `on_fetch` hears of every stored range read for frames (frame numbers, stored range).
pub fn read_range(
    len: u64,
    read_at: &dyn Fn(Range<u64>) -> anyhow::Result<Vec<u8>>,
    want: &RangeRead,
    on_fetch: &mut dyn FnMut(Range<usize>, Range<u64>),
) -> anyhow::Result<Vec<u8>> {
    let refuse_unsealed = want.key.is_some() && !want.allow_unsealed;
    let Some(layout) = crate::inspect::read_layout(len, read_at)? else {
        if refuse_unsealed {
            return Err(CodecError::NotSealed.into());
        }
        let end = want.range.end.min(len);
        return if want.range.start >= end { Ok(Vec::new()) } else { read_at(want.range.start..end) };
    };
    if refuse_unsealed && !layout.header.sealed() {
        return Err(CodecError::NotSealed.into());
    }
    let ctx = layout.open(want.key, want.dicts)?;
    let end = want.range.end.min(layout.logical_size());
    let mut out = Vec::with_capacity(end.saturating_sub(want.range.start) as usize);
    let mut raw = Vec::new();
    for fetch in layout.plan(want.range.clone(), MAX_FETCH) {
        on_fetch(fetch.frames.clone(), fetch.range.clone());
        let stored = read_at(fetch.range.clone())?;
        for f in fetch.frames {
            let e = &layout.entries[f];
            let r = e.stored_range();
            let at = (r.start - fetch.range.start) as usize..(r.end - fetch.range.start) as usize;
            decode_frame(&ctx, f as u64, &stored[at], Some(e), &mut raw)?;
            let from = want.range.start.max(e.raw_offset) - e.raw_offset;
            let to = end.min(e.raw_offset + e.raw_len as u64) - e.raw_offset;
            out.extend_from_slice(&raw[from as usize..to as usize]);
        }
    }
    Ok(out)
}
