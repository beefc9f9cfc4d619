//! Writing one object while its bytes arrive: frames are cut, encoded on the dispatcher (a bounded
//! number in flight), appended to an unlinked spill file, and shipped to the store from there — one
//! PUT for small objects, multipart parts for large ones — so memory stays within the mount's
//! budget whatever the file size. The object appears under its key only when `finish` completes;
//! an aborted upload leaves nothing visible.
//!
//! Memory: a raw frame holds budget room from the moment it is cut until it is encoded (released by
//! the encoder, so a writer blocked on the budget never holds room it alone could give back); a part
//! holds room while it is uploaded (released when its upload task ends). Encoded frames waiting to
//! be appended to the spill are bounded per file by the dispatcher's frames in flight.

use std::collections::VecDeque;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use object_store::path::Path;
use object_store::{MultipartUpload, ObjectStore, PutPayload, PutResult};
use shrinkfs_codec::dispatch::Dispatcher;
use shrinkfs_codec::stream::{Item, StreamDecoder};
use shrinkfs_codec::{
    Codec, EncodeConfig, EncodedFrame, FileMeta, FrameCutter, Layout, ObjectContext, ObjectWriter, decode_payload,
};
use tokio::sync::oneshot;
use tokio::task::JoinSet;

use crate::budget::Budget;
use crate::error::{Error, Result};
use crate::metrics::Metrics;

/// Stored bytes an upload keeps in memory before it moves them to a spill file: small files never
/// touch the local disk (creating a file cost more CPU than encoding a small one).
pub const SPILL_IN_MEMORY: usize = 128 << 10;

/// Where an upload's stored bytes wait until shipped: in memory while small, then in an unlinked
/// file in the staging directory.
enum Spill {
    Memory(Vec<u8>),
    File(File),
}

struct SpillBuf {
    spill: Spill,
    dir: std::path::PathBuf,
}

impl SpillBuf {
    fn append(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match &mut self.spill {
            Spill::Memory(v) if v.len() + bytes.len() <= SPILL_IN_MEMORY => v.extend_from_slice(bytes),
            Spill::Memory(v) => {
                let mut f = tempfile::tempfile_in(&self.dir)?;
                f.write_all(v)?;
                f.write_all(bytes)?;
                self.spill = Spill::File(f);
            }
            Spill::File(f) => f.write_all(bytes)?,
        }
        Ok(())
    }

    fn read_exact_at(&self, buf: &mut [u8], at: u64) -> std::io::Result<()> {
        match &self.spill {
            Spill::Memory(v) => {
                let from = at as usize;
                let src = v.get(from..from + buf.len()).ok_or(std::io::ErrorKind::UnexpectedEof)?;
                buf.copy_from_slice(src);
                Ok(())
            }
            Spill::File(f) => f.read_exact_at(buf, at),
        }
    }
}

/// Size of one multipart part (S3 needs at least 5 MiB for all but the last).
pub const PART_SIZE: usize = 8 << 20;
/// Parts uploading at once per object.
const PARTS_IN_FLIGHT: usize = 4;

/// What a finished upload produced.
#[derive(Debug)]
pub struct Written {
    /// The store's answer (ETag, version).
    pub put: PutResult,
    /// Bytes stored.
    pub stored: u64,
    /// Layout of the object just written (no need to read it back to serve reads).
    pub layout: Layout,
}

/// Where an upload's bytes go and what bounds its memory.
#[derive(Clone)]
pub struct Sink {
    /// The store.
    pub store: Arc<dyn ObjectStore>,
    /// Encodes frames.
    pub dispatcher: Arc<Dispatcher>,
    /// The mount's memory budget.
    pub budget: Budget,
    /// Counters.
    pub metrics: Arc<Metrics>,
}

/// One object being written.
pub struct Upload {
    sink: Sink,
    path: Path,
    ctx: Arc<ObjectContext>,
    codec: Arc<dyn Codec>,
    gpu_codec: shrinkfs_codec::CodecId,
    frame_size: u32,
    cutter: FrameCutter,
    writer: ObjectWriter,
    next_frame: u64,
    raw_in: u64,
    pending: VecDeque<oneshot::Receiver<EncodedFrame>>,
    max_pending: usize,
    /// Every stored byte so far, in order (also lets `recover_into` rebuild the file).
    spill: SpillBuf,
    /// Bytes in `spill`.
    stored: u64,
    /// Bytes of `spill` handed to parts.
    shipped: u64,
    multipart: Option<Box<dyn MultipartUpload>>,
    parts: JoinSet<object_store::Result<()>>,
}

impl std::fmt::Debug for Upload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Upload({}, {} bytes in)", self.path, self.raw_in)
    }
}

impl Upload {
    /// Starts writing `path`; stored bytes wait in memory, then in an unlinked file in `staging`,
    /// until they are uploaded.
    pub fn new(sink: Sink, path: Path, config: &EncodeConfig, staging: &std::path::Path) -> Result<Self> {
        let mut spill = SpillBuf { spill: Spill::Memory(Vec::new()), dir: staging.to_path_buf() };
        let codec: Arc<dyn Codec> = Arc::from(config.codec().map_err(|e| Error::Invalid(e.to_string()))?);
        let ctx = Arc::new(config.new_object());
        let writer = ObjectWriter::new(ctx.clone());
        let max_pending = sink.dispatcher.frames_in_flight();
        let header = writer.header_bytes();
        spill.append(&header)?;
        Ok(Upload {
            sink,
            path,
            codec,
            gpu_codec: config.params.codec,
            frame_size: config.frame_size,
            cutter: FrameCutter::new(config.frame_size),
            writer,
            ctx,
            next_frame: 0,
            raw_in: 0,
            pending: VecDeque::new(),
            max_pending,
            spill,
            stored: header.len() as u64,
            shipped: 0,
            multipart: None,
            parts: JoinSet::new(),
        })
    }

    /// Logical bytes accepted so far.
    pub fn len(&self) -> u64 {
        self.raw_in
    }

    /// Whether no bytes were written yet.
    pub fn is_empty(&self) -> bool {
        self.raw_in == 0
    }

    /// Where it is being written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends bytes. Waits (backpressure) for room in the memory budget and when too many frames
    /// or parts are in flight.
    pub async fn write(&mut self, data: &[u8]) -> Result<()> {
        let mut full = Vec::new();
        self.cutter.push(data, |f| full.push(f));
        self.raw_in += data.len() as u64;
        for f in full {
            self.submit(f).await;
            self.drain(false).await?;
        }
        self.drain(false).await
    }

    async fn submit(&mut self, raw: Vec<u8>) {
        let held = self.sink.budget.take(raw.len() as u64).await;
        let (tx, rx) = oneshot::channel();
        let (ctx, codec, n) = (self.ctx.clone(), self.codec.clone(), self.next_frame);
        self.next_frame += 1;
        self.sink.dispatcher.submit(ctx, codec, self.gpu_codec, n, raw, move |f| {
            drop(held);
            let _ = tx.send(f);
        });
        self.pending.push_back(rx);
    }

    /// Moves encoded frames, in order, to the spill and ships full parts; waits for every frame
    /// when `all`.
    async fn drain(&mut self, all: bool) -> Result<()> {
        loop {
            let wait = all || self.pending.len() > self.max_pending;
            let Some(front) = self.pending.front_mut() else {
                break;
            };
            let frame = if wait {
                front.await.map_err(|_| Error::Invalid("encoder stopped".into()))?
            } else {
                match front.try_recv() {
                    Ok(f) => f,
                    Err(oneshot::error::TryRecvError::Empty) => break,
                    Err(oneshot::error::TryRecvError::Closed) => {
                        return Err(Error::Invalid("encoder stopped".into()));
                    }
                }
            };
            self.pending.pop_front();
            self.writer.push(&frame);
            self.sink.metrics.frame_encoded(frame.header.codec.name());
            self.append(&frame.bytes)?;
        }
        while self.stored - self.shipped >= PART_SIZE as u64 {
            self.ship(PART_SIZE).await?;
        }
        Ok(())
    }

    fn append(&mut self, bytes: &[u8]) -> Result<()> {
        self.spill.append(bytes)?;
        self.stored += bytes.len() as u64;
        Ok(())
    }

    /// Reads the next `len` unshipped bytes of the spill, holding budget room for them.
    async fn unshipped(&mut self, len: usize) -> Result<(PutPayload, crate::budget::Held)> {
        let held = self.sink.budget.take(len as u64).await;
        let mut buf = vec![0u8; len];
        self.spill.read_exact_at(&mut buf, self.shipped)?;
        self.shipped += len as u64;
        Ok((PutPayload::from(buf), held))
    }

    /// Uploads the next `len` bytes of the spill as one multipart part.
    async fn ship(&mut self, len: usize) -> Result<()> {
        if self.multipart.is_none() {
            self.sink.metrics.store_request("multipart_start");
            self.multipart = Some(self.sink.store.put_multipart(&self.path).await?);
        }
        let (payload, held) = self.unshipped(len).await?;
        let part = self.multipart.as_mut().expect("started above").put_part(payload);
        self.sink.metrics.store_request("multipart_part");
        self.parts.spawn(async move {
            let done = part.await;
            drop(held);
            done
        });
        while let Some(done) = self.parts.try_join_next() {
            part_result(done)?;
        }
        while self.parts.len() > PARTS_IN_FLIGHT {
            if let Some(done) = self.parts.join_next().await {
                part_result(done)?;
            }
        }
        Ok(())
    }

    /// Encodes what is left, writes index and footer, and completes the object.
    pub async fn finish(mut self, meta: &FileMeta) -> Result<Written> {
        let result = self.finish_inner(meta).await;
        if result.is_err() {
            self.abort_parts().await;
        }
        result
    }

    async fn finish_inner(&mut self, meta: &FileMeta) -> Result<Written> {
        let cutter = std::mem::replace(&mut self.cutter, FrameCutter::new(self.frame_size));
        if let Some(rest) = cutter.finish() {
            self.submit(rest).await;
        }
        self.drain(true).await?;
        let writer = std::mem::replace(&mut self.writer, ObjectWriter::new(self.ctx.clone()));
        let raw = writer.raw_len();
        let tail = writer.finish_with(meta);
        self.append(&tail)?;
        let rest = (self.stored - self.shipped) as usize;
        let put = if self.multipart.is_none() {
            let (payload, _held) = self.unshipped(rest).await?;
            self.sink.metrics.store_request("put");
            self.sink.store.put(&self.path, payload).await?
        } else {
            if rest > 0 {
                self.ship(rest).await?;
            }
            while let Some(done) = self.parts.join_next().await {
                part_result(done)?;
            }
            self.sink.metrics.store_request("multipart_complete");
            let mp = self.multipart.as_mut().expect("multipart checked above");
            let put = mp.complete().await?;
            self.multipart = None;
            put
        };
        self.sink.metrics.object_written(raw, self.stored);
        let layout =
            Layout::parse(&tail, self.stored).map_err(|e| Error::Codec { key: self.path.to_string(), source: e })?;
        Ok(Written { put, stored: self.stored, layout })
    }

    async fn abort_parts(&mut self) {
        self.parts.abort_all();
        while self.parts.join_next().await.is_some() {}
        if let Some(mut mp) = self.multipart.take() {
            let _ = mp.abort().await;
        }
    }

    /// Cancels the upload: nothing appears under the key.
    pub async fn abort(mut self) {
        self.abort_parts().await;
    }

    /// Cancels the upload and writes every byte accepted so far, decoded, to `out` from offset 0.
    pub async fn recover_into(mut self, out: &File) -> Result<u64> {
        self.drain(true).await?;
        let cutter = std::mem::replace(&mut self.cutter, FrameCutter::new(self.frame_size));
        let rest = cutter.finish().unwrap_or_default();
        self.abort_parts().await;
        let mut dec = StreamDecoder::new(None, vec![]);
        let mut at = 0u64;
        let mut chunk = vec![0u8; 1 << 20];
        let mut raw = Vec::new();
        let mut read = 0u64;
        while read < self.stored {
            let n = ((self.stored - read) as usize).min(chunk.len());
            self.spill.read_exact_at(&mut chunk[..n], read)?;
            read += n as u64;
            dec.feed(&chunk[..n]);
            while let Some(item) =
                dec.next_item().map_err(|e| Error::Codec { key: self.path.to_string(), source: e })?
            {
                if let Item::Frame { frame, header, payload } = item {
                    decode_payload(&self.ctx, frame, &header, &payload, None, &mut raw)
                        .map_err(|e| Error::Codec { key: self.path.to_string(), source: e })?;
                    out.write_all_at(&raw, at)?;
                    at += raw.len() as u64;
                }
            }
        }
        out.write_all_at(&rest, at)?;
        Ok(at + rest.len() as u64)
    }
}

/// Encodes the first `len` bytes of a local file through `up` and completes the object.
pub async fn upload_file(mut up: Upload, file: &File, len: u64, meta: &FileMeta) -> Result<Written> {
    let mut buf = vec![0u8; up.frame_size as usize];
    let mut at = 0u64;
    while at < len {
        let n = ((len - at) as usize).min(buf.len());
        file.read_exact_at(&mut buf[..n], at)?;
        if let Err(e) = up.write(&buf[..n]).await {
            up.abort().await;
            return Err(e);
        }
        at += n as u64;
    }
    up.finish(meta).await
}

fn part_result(done: std::result::Result<object_store::Result<()>, tokio::task::JoinError>) -> Result<()> {
    match done {
        Ok(r) => Ok(r?),
        Err(e) => Err(Error::Invalid(format!("part upload stopped: {e}"))),
    }
}
