//! Writing one object while its bytes arrive: frames are cut, encoded on the CPU pool (a bounded
//! number in flight), and streamed to the store — one PUT for small objects, multipart parts
//! for large ones — so memory stays flat whatever the file size. The object appears under its key
//! only when `finish` completes; an aborted upload leaves nothing visible.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use object_store::path::Path;
use object_store::{ObjectStore, PutPayload, PutResult, WriteMultipart};
use shrinkfs_codec::dispatch::Dispatcher;
use shrinkfs_codec::stream::{Item, StreamDecoder};
use shrinkfs_codec::{
    Codec, EncodeConfig, EncodedFrame, FileMeta, FrameCutter, Layout, ObjectContext, ObjectWriter, decode_payload,
};
use tokio::sync::oneshot;

use crate::error::{Error, Result};
use crate::metrics::Metrics;

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

/// One object being written.
pub struct Upload {
    store: Arc<dyn ObjectStore>,
    path: Path,
    metrics: Arc<Metrics>,
    ctx: Arc<ObjectContext>,
    codec: Arc<dyn Codec>,
    gpu_codec: shrinkfs_codec::CodecId,
    dispatcher: Arc<Dispatcher>,
    frame_size: u32,
    cutter: FrameCutter,
    writer: ObjectWriter,
    next_frame: u64,
    raw_in: u64,
    pending: VecDeque<oneshot::Receiver<EncodedFrame>>,
    max_pending: usize,
    buffer: Vec<u8>,
    multipart: Option<WriteMultipart>,
    spill: Option<File>,
    stored: u64,
}

impl std::fmt::Debug for Upload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Upload({}, {} bytes in)", self.path, self.raw_in)
    }
}

impl Upload {
    /// Starts writing `path`. With `spill`, encoded bytes are also kept in that (unlinked) file so
    /// the data written so far can be recovered if the writer stops being sequential.
    pub fn new(
        store: Arc<dyn ObjectStore>,
        path: Path,
        config: &EncodeConfig,
        dispatcher: Arc<Dispatcher>,
        spill: Option<File>,
        metrics: Arc<Metrics>,
    ) -> Result<Self> {
        let codec: Arc<dyn Codec> = Arc::from(config.codec().map_err(|e| Error::Invalid(e.to_string()))?);
        let ctx = Arc::new(config.new_object());
        let writer = ObjectWriter::new(ctx.clone());
        let max_pending = dispatcher.frames_in_flight();
        let mut u = Upload {
            store,
            path,
            metrics,
            codec,
            gpu_codec: config.params.codec,
            dispatcher,
            frame_size: config.frame_size,
            cutter: FrameCutter::new(config.frame_size),
            writer,
            ctx,
            next_frame: 0,
            raw_in: 0,
            pending: VecDeque::new(),
            max_pending,
            buffer: Vec::new(),
            multipart: None,
            spill,
            stored: 0,
        };
        let header = u.writer.header_bytes();
        u.buffer.extend_from_slice(&header);
        if let Some(s) = &mut u.spill {
            s.write_all(&header)?;
        }
        u.stored = header.len() as u64;
        Ok(u)
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

    /// Appends bytes. Waits (backpressure) when too many frames or parts are in flight.
    pub async fn write(&mut self, data: &[u8]) -> Result<()> {
        let mut full = Vec::new();
        self.cutter.push(data, |f| full.push(f));
        self.raw_in += data.len() as u64;
        for f in full {
            self.submit(f);
            self.drain(false).await?;
        }
        self.drain(false).await
    }

    fn submit(&mut self, raw: Vec<u8>) {
        let (tx, rx) = oneshot::channel();
        let (ctx, codec, n) = (self.ctx.clone(), self.codec.clone(), self.next_frame);
        self.next_frame += 1;
        self.dispatcher.submit(ctx, codec, self.gpu_codec, n, raw, move |f| {
            let _ = tx.send(f);
        });
        self.pending.push_back(rx);
    }

    /// Moves encoded frames, in order, to the output; waits for all of them when `all`.
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
            self.metrics.frame_encoded(frame.header.codec.name());
            self.emit(&frame.bytes).await?;
        }
        Ok(())
    }

    async fn emit(&mut self, bytes: &[u8]) -> Result<()> {
        if let Some(s) = &mut self.spill {
            s.write_all(bytes)?;
        }
        self.stored += bytes.len() as u64;
        match &mut self.multipart {
            Some(mp) => {
                mp.write(bytes);
                mp.wait_for_capacity(PARTS_IN_FLIGHT).await?;
            }
            None => {
                self.buffer.extend_from_slice(bytes);
                if self.buffer.len() >= PART_SIZE {
                    self.metrics.store_request("multipart_start");
                    let up = self.store.put_multipart(&self.path).await?;
                    let mut mp = WriteMultipart::new_with_chunk_size(up, PART_SIZE);
                    mp.write(&std::mem::take(&mut self.buffer));
                    self.multipart = Some(mp);
                }
            }
        }
        Ok(())
    }

    /// Encodes what is left, writes index and footer, and completes the object.
    pub async fn finish(mut self, meta: &FileMeta) -> Result<Written> {
        let result = self.finish_inner(meta).await;
        if result.is_err()
            && let Some(mp) = self.multipart.take()
        {
            let _ = mp.abort().await;
        }
        result
    }

    async fn finish_inner(&mut self, meta: &FileMeta) -> Result<Written> {
        let cutter = std::mem::replace(&mut self.cutter, FrameCutter::new(self.frame_size));
        if let Some(rest) = cutter.finish() {
            self.submit(rest);
        }
        self.drain(true).await?;
        let writer = std::mem::replace(&mut self.writer, ObjectWriter::new(self.ctx.clone()));
        let raw = writer.raw_len();
        let tail = writer.finish_with(meta);
        self.emit(&tail).await?;
        let put = match self.multipart.take() {
            Some(mp) => {
                self.metrics.store_request("multipart_complete");
                mp.finish().await?
            }
            None => {
                self.metrics.store_request("put");
                self.store.put(&self.path, PutPayload::from(std::mem::take(&mut self.buffer))).await?
            }
        };
        self.metrics.object_written(raw, self.stored);
        let layout =
            Layout::parse(&tail, self.stored).map_err(|e| Error::Codec { key: self.path.to_string(), source: e })?;
        Ok(Written { put, stored: self.stored, layout })
    }

    /// Cancels the upload: nothing appears under the key.
    pub async fn abort(mut self) {
        if let Some(mp) = self.multipart.take() {
            let _ = mp.abort().await;
        }
    }

    /// Cancels the upload and writes every byte accepted so far, decoded, to `out` from offset 0.
    /// Needs the spill file given to `new`.
    pub async fn recover_into(mut self, out: &File) -> Result<u64> {
        self.drain(true).await?;
        let cutter = std::mem::replace(&mut self.cutter, FrameCutter::new(self.frame_size));
        let rest = cutter.finish().unwrap_or_default();
        let mut spill = self.spill.take().ok_or_else(|| Error::Invalid("upload has no spill file".into()))?;
        if let Some(mp) = self.multipart.take() {
            let _ = mp.abort().await;
        }
        spill.seek(SeekFrom::Start(0))?;
        let mut dec = StreamDecoder::new(None, vec![]);
        let mut at = 0u64;
        let mut chunk = vec![0u8; 1 << 20];
        let mut raw = Vec::new();
        loop {
            let n = spill.read(&mut chunk)?;
            if n == 0 {
                break;
            }
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
