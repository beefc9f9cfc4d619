//! Building an object: cutting a byte stream into frames, and laying encoded frames out with their
//! index and footer. The caller moves the bytes; nothing here does I/O.

use std::sync::Arc;

use crate::codec::{Codec, CodecParams, Dictionary};
use crate::dispatch::Dispatcher;
use crate::error::{Error, Result};
use crate::format::{
    FOOTER_LEN, FileMeta, Footer, HEADER_LEN, IndexEntry, MAX_FRAME_SIZE, MIN_FRAME_SIZE, Version, checksum, index_body,
};
use crate::frame::{EncodedFrame, ObjectContext};
use crate::framebuf::{Buffers, FrameBuf};
use crate::pipeline::EncodeStream;
use crate::seal::MasterKey;

/// Default raw frame size: 1 MiB. See docs/FORMAT.md ("Choosing the frame size") for the measurements.
pub const DEFAULT_FRAME_SIZE: u32 = 1024 * 1024;

/// Everything an encoder needs to know to write objects.
#[derive(Debug, Clone)]
pub struct EncodeConfig {
    /// Codec, level and dictionary.
    pub params: CodecParams,
    /// Raw bytes per frame (the last frame may be shorter).
    pub frame_size: u32,
    /// Seal frames with a key derived from this one.
    pub key: Option<MasterKey>,
}

impl Default for EncodeConfig {
    fn default() -> Self {
        EncodeConfig { params: CodecParams::default(), frame_size: DEFAULT_FRAME_SIZE, key: None }
    }
}

impl EncodeConfig {
    /// Checks every option and builds the codec it names.
    pub fn codec(&self) -> Result<Box<dyn Codec>> {
        if !(MIN_FRAME_SIZE..=MAX_FRAME_SIZE).contains(&self.frame_size) {
            return Err(Error::InvalidOption(format!(
                "frame size must be between {} KiB and {} MiB, not {} bytes",
                MIN_FRAME_SIZE / 1024,
                MAX_FRAME_SIZE >> 20,
                self.frame_size
            )));
        }
        self.params.cpu_codec()
    }

    /// A fresh context (new object id) for one object written with this configuration, in format
    /// version 1: its metadata can hold neither ctime nor atime (see `new_object_in`).
    pub fn new_object(&self) -> ObjectContext {
        self.new_object_in(Version::V1)
    }

    /// A fresh context for one object written in format `version`. A writer that streams the
    /// object (its header goes out before the metadata is known) and may record ctime or atime
    /// starts it as `Version::V2`; a version 2 object may leave them absent.
    pub fn new_object_in(&self, version: Version) -> ObjectContext {
        ObjectContext::for_writing(self.frame_size, self.key.as_ref(), self.params.dict.clone(), version)
    }

    /// The dictionary, if any.
    pub fn dict(&self) -> Option<&Arc<Dictionary>> {
        self.params.dict.as_ref()
    }
}

/// Cuts a stream of bytes, pushed in pieces of any size, into frames of exactly `size` bytes, each
/// in a buffer from where the caller says ([`Buffers`]: the GPU's pool, or the heap).
#[derive(Debug)]
pub struct FrameCutter {
    size: usize,
    /// The frame being filled, once a byte of it came.
    buf: Option<FrameBuf>,
}

impl FrameCutter {
    /// A cutter producing frames of `size` bytes.
    pub fn new(size: u32) -> Self {
        FrameCutter { size: size as usize, buf: None }
    }

    /// Adds bytes; calls `emit` with every frame that fills up. Each frame's buffer has room for
    /// a GCM tag after the frame (a frame stored as it is becomes its own payload, sealed in
    /// place), and comes from `buffers` when this push fills the whole frame, else from the heap:
    /// a pool's buffer is never held by a frame that waits for more writes.
    pub fn push(&mut self, mut data: &[u8], buffers: &Buffers, mut emit: impl FnMut(FrameBuf)) {
        let size = self.size;
        while !data.is_empty() {
            let whole = data.len() >= size;
            let buf = self.buf.get_or_insert_with(|| {
                let capacity = size + crate::format::TAG_LEN;
                if whole { buffers.get(capacity) } else { Buffers::default().get(capacity) }
            });
            let take = (size - buf.len()).min(data.len());
            buf.extend_from_slice(&data[..take]);
            data = &data[take..];
            if buf.len() == size
                && let Some(full) = self.buf.take()
            {
                emit(full);
            }
        }
    }

    /// Bytes waiting for a frame to fill.
    pub fn buffered(&self) -> usize {
        self.pending().len()
    }

    /// The bytes waiting for a frame to fill, without taking them.
    pub fn pending(&self) -> &[u8] {
        self.buf.as_deref().unwrap_or_default()
    }

    /// The last, short frame, if any bytes are left.
    pub fn finish(self) -> Option<FrameBuf> {
        self.buf.filter(|b| !b.is_empty())
    }
}

/// Lays out one object: header, frames in order, then index and footer.
///
/// Invariant: frames are pushed in frame-number order, each exactly once.
#[derive(Debug)]
pub struct ObjectWriter {
    ctx: Arc<ObjectContext>,
    entries: Vec<IndexEntry>,
    stored: u64,
    raw: u64,
}

impl ObjectWriter {
    /// A writer for the object described by `ctx`.
    pub fn new(ctx: Arc<ObjectContext>) -> Self {
        ObjectWriter { ctx, entries: Vec::new(), stored: HEADER_LEN as u64, raw: 0 }
    }

    /// The object's context.
    pub fn context(&self) -> &Arc<ObjectContext> {
        &self.ctx
    }

    /// The bytes that start the object.
    pub fn header_bytes(&self) -> [u8; HEADER_LEN] {
        self.ctx.header.to_bytes()
    }

    /// Number of the next frame to push.
    pub fn next_frame(&self) -> u64 {
        self.entries.len() as u64
    }

    /// Records the next frame; the caller writes the frame (`head`, then `payload`) right after the previous ones.
    pub fn push(&mut self, frame: &EncodedFrame) {
        let e = frame.entry(self.stored, self.raw);
        self.stored = e.stored_range().end;
        self.raw += e.raw_len as u64;
        self.entries.push(e);
    }

    /// Raw bytes pushed so far.
    pub fn raw_len(&self) -> u64 {
        self.raw
    }

    /// Stored bytes so far (header and frames).
    pub fn stored_len(&self) -> u64 {
        self.stored
    }

    /// The index and footer that end the object.
    pub fn finish(self) -> Vec<u8> {
        // Empty metadata fits every version.
        self.tail(&FileMeta::default())
    }

    /// The index and footer that end the object, recording file metadata. Takes the writer by
    /// reference: a caller whose upload failed can build the same tail again (with other metadata).
    ///
    /// Fails when the object's version, named in its header already written, cannot store `meta`
    /// (ctime or atime in a version 1 object: start it with `EncodeConfig::new_object_in`).
    pub fn finish_with(&self, meta: &FileMeta) -> Result<Vec<u8>> {
        let (needed, started) = (meta.min_version(), self.ctx.header.version);
        if needed > started {
            return Err(Error::MetaNeedsVersion { needed: needed.number(), started: started.number() });
        }
        Ok(self.tail(meta))
    }

    /// Index and footer for metadata that fits the object's version.
    fn tail(&self, meta: &FileMeta) -> Vec<u8> {
        let version = self.ctx.header.version;
        let mut out = index_body(&self.ctx.header, meta, &self.entries);
        if let Some(key) = self.ctx.key() {
            let tag = key.index_tag(&out);
            out.extend_from_slice(&tag);
        }
        let footer = Footer {
            version,
            index_offset: self.stored,
            index_len: out.len() as u32,
            frame_count: self.entries.len() as u32,
            logical_size: self.raw,
            index_crc: checksum(&out),
            flags: self.ctx.header.flags,
        };
        out.extend_from_slice(&footer.to_bytes());
        debug_assert_eq!(out.len(), version.index_len(self.entries.len(), self.ctx.key().is_some()) + FOOTER_LEN);
        out
    }
}

/// Encodes a whole in-memory buffer into one object, compressing frames on all cores.
pub fn encode_all(config: &EncodeConfig, data: &[u8]) -> Result<Vec<u8>> {
    encode_all_with(config, data, &FileMeta::default())
}

/// Like `encode_all`, recording file metadata, in the oldest format version that stores it:
/// version 1 unless ctime or atime is set. Frames go through the ordered encode pipeline on the CPU
/// workers, two per worker in flight.
pub fn encode_all_with(config: &EncodeConfig, data: &[u8], meta: &FileMeta) -> Result<Vec<u8>> {
    let codec: Arc<dyn Codec> = Arc::from(config.codec()?);
    let ctx = Arc::new(config.new_object_in(meta.min_version()));
    let stream = EncodeStream::new(ctx.clone(), codec, config.params.codec);
    let cpu = Dispatcher::cpu_only("encode_all");
    let window = 2 * crate::workers::threads() + 1;
    let mut raw = data.chunks(config.frame_size as usize).zip(0u64..);
    let mut w = ObjectWriter::new(ctx);
    let mut out = Vec::with_capacity(data.len() / 2 + 1024);
    out.extend_from_slice(&w.header_bytes());
    loop {
        while stream.frames().in_flight() < window
            && let Some((frame, k)) = raw.next()
        {
            stream.submit(&cpu, k, frame.to_vec(), ());
        }
        if stream.frames().in_flight() == 0 {
            break;
        }
        let f = stream.frames().wait_next().expect("a frame in flight")?;
        w.push(&f);
        f.put_into(&mut out);
    }
    out.extend_from_slice(&w.finish_with(meta)?);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cutter_makes_full_frames_from_any_pieces() {
        let pool = Arc::new(crate::framebuf::testing::CountingPool::new(4, 4096 + crate::format::TAG_LEN));
        let data: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
        // Small pieces: no push fills a whole frame, so no frame takes a pool's buffer. One piece
        // of it all: the two whole frames do, the rest is cut on the heap.
        for (piece, lent) in [(777, 0), (10_000, 2)] {
            for buffers in [Buffers::default(), Buffers::from_pool(pool.clone())] {
                let mut c = FrameCutter::new(4096);
                let mut frames = Vec::new();
                for piece in data.chunks(piece) {
                    c.push(piece, &buffers, |f| frames.push(f));
                }
                frames.extend(c.finish());
                assert_eq!(frames.iter().map(|f| f.len()).collect::<Vec<_>>(), vec![4096, 4096, 1808]);
                assert_eq!(frames.iter().flat_map(|f| f.iter().copied()).collect::<Vec<u8>>(), data);
                assert_eq!(frames.iter().filter(|f| f.is_lent()).count(), if buffers.is_pool() { lent } else { 0 });
            }
        }
        assert_eq!(pool.lent.load(std::sync::atomic::Ordering::SeqCst), 2);
        assert_eq!(pool.out.load(std::sync::atomic::Ordering::SeqCst), 0, "all given back");
    }

    #[test]
    fn a_version_1_object_refuses_times_and_a_version_2_one_takes_none() {
        let config = EncodeConfig::default();
        let times = FileMeta { ctime: Some((1, 2)), ..Default::default() };
        let w = ObjectWriter::new(Arc::new(config.new_object()));
        assert!(matches!(w.finish_with(&times), Err(Error::MetaNeedsVersion { needed: 2, started: 1 })));
        assert_eq!(w.finish_with(&FileMeta::default()).unwrap().len(), 104 + 48);
        let w = ObjectWriter::new(Arc::new(config.new_object_in(Version::V2)));
        assert_eq!(w.finish_with(&times).unwrap().len(), 136 + 48);
        assert_eq!(w.finish().len(), 136 + 48);
    }

    #[test]
    fn frame_size_out_of_range_is_rejected() {
        let c = EncodeConfig { frame_size: 100, ..Default::default() };
        assert!(matches!(c.codec(), Err(Error::InvalidOption(_))));
    }
}
