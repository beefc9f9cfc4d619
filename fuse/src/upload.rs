//! Writing one object while its bytes arrive: frames are cut, encoded on the dispatcher (a bounded
//! number in flight), kept in memory until shipped to the store — one PUT for small objects,
//! multipart parts for large ones — and copied, off the writer's thread, to an unlinked spill
//! file, so memory stays within the mount's budget whatever the file size. On a local-directory
//! bucket the spill is the object's own staged file in the bucket, published by fsync and rename:
//! its bytes are written once and never shipped. The object appears under its key only when
//! `finish` completes; an aborted upload leaves nothing visible.
//!
//! Failure never loses bytes: the spill keeps every stored byte until the upload is finished or
//! dropped, so a failed part (or a failed `finish`) only starts shipping again from the first byte
//! with a new multipart upload — at the next write or the retried `finish`, reading back from the
//! spill what is no longer in memory — and `recover_into` can always rebuild the file (but after a
//! frame's encoder stopped without it, a bug that fails the upload, its write and its rebuild). A part
//! failure during a write is not the write's error (its bytes are safe in the spill): it is
//! reported by `finish` if shipping again fails too. An append to the spill that fails (a full
//! staging disk) keeps its bytes in memory and is written again before the next write takes any.
//!
//! Memory: a frame holds budget room for its size from the moment it is cut until its encoded
//! bytes are in the spill (taken from the pipeline, then appended off the writer's thread); a part
//! holds room while it is uploaded (released when its upload task ends). A writer that finds no
//! room first takes its own encoded frames into the spill, so it never waits for room only it
//! could give back; a file no one writes has its encoded frames taken by
//! [`Upload::take_encoded`] (a task of the mount's, every second).

use std::collections::{BTreeMap, VecDeque};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use bytes::Bytes;
use object_store::path::Path;
use object_store::{MultipartUpload, ObjectStore, PutPayload, PutResult};
use shrinkfs_codec::dispatch::Dispatcher;
use shrinkfs_codec::format::FRAME_HEADER_LEN;
use shrinkfs_codec::framebuf::FrameBuf;
use shrinkfs_codec::pipeline::EncodeStream;
use shrinkfs_codec::stream::{Item, StreamDecoder};
use shrinkfs_codec::{
    Codec, EncodeConfig, EncodedFrame, FileMeta, FrameCutter, Layout, ObjectWriter, Version, decode_payload,
};
use tokio::task::JoinSet;

use crate::budget::Budget;
use crate::config::UploadConfig;
use crate::error::{Error, Result};
use crate::localstore::{InPlace, LocalStore};
use crate::metrics::Metrics;

/// Answers a write once its bytes are taken, past every check that could fail it, so the kernel
/// hears back (and the writer sends its next write) while the bytes are still being copied into
/// frames and handed on. The file stays locked until the write returns, so the next write, a
/// read, a flush or an fsync of the file waits for them. Borrowed, so no write allocates one.
#[derive(Default)]
pub struct Taken<'a>(Option<&'a mut (dyn FnMut() + Send)>);

impl<'a> Taken<'a> {
    /// Calls `answer` once the bytes are taken.
    pub fn to(answer: &'a mut (dyn FnMut() + Send)) -> Self {
        Taken(Some(answer))
    }

    /// The bytes are taken: answer now (once).
    pub fn now(&mut self) {
        if let Some(answer) = self.0.take() {
            answer();
        }
    }
}

/// Where an upload's stored bytes wait until shipped: in memory while small, then in an unlinked
/// file in the staging directory — or, for a local-directory bucket, in the object's own staged
/// file in the bucket, which becomes the object when published: its bytes are written once.
enum Spill {
    Memory(Vec<u8>),
    File(File),
    InPlace(InPlace),
}

struct SpillBuf {
    spill: Spill,
    /// A second handle on the spill or in-place file, for appends off the writer's thread.
    writer: Option<Arc<File>>,
    dir: std::path::PathBuf,
    /// Write in place into this local bucket (under `key`) once the bytes outgrow memory.
    in_place: Option<(Arc<LocalStore>, Path)>,
    /// Bytes appended so far.
    len: u64,
    /// Bytes kept only in memory before a file is needed.
    in_memory: usize,
}

impl Spill {
    fn file(&self) -> Option<&File> {
        match self {
            Spill::Memory(_) => None,
            Spill::File(f) => Some(f),
            Spill::InPlace(p) => Some(p.file()),
        }
    }
}

impl SpillBuf {
    /// Whether `n` more bytes still fit in memory (no file was needed yet).
    fn fits_in_memory(&self, n: usize) -> bool {
        matches!(&self.spill, Spill::Memory(v) if v.len() + n <= self.in_memory)
    }

    /// Appends bytes that `fits_in_memory`.
    fn append_in_memory(&mut self, bytes: &[u8]) {
        let Spill::Memory(v) = &mut self.spill else { unreachable!("checked by fits_in_memory") };
        v.extend_from_slice(bytes);
        self.len += bytes.len() as u64;
    }

    /// The bytes outgrew memory: moves them into a spill file (or, for a local bucket, the
    /// object's own staged file) and returns them, so a caller shipping from memory keeps them.
    /// On failure nothing changed.
    fn overflow(&mut self) -> std::io::Result<Bytes> {
        let Spill::Memory(v) = &mut self.spill else { return Ok(Bytes::new()) };
        let spill = match &self.in_place {
            Some((local, key)) => Spill::InPlace(local.write_in_place(key).map_err(|e| {
                crate::localstore::os_error(&e)
                    .map_or_else(|| std::io::Error::other(e), std::io::Error::from_raw_os_error)
            })?),
            None => Spill::File(tempfile::tempfile_in(&self.dir)?),
        };
        let f = spill.file().expect("a file");
        f.write_all_at(v, 0)?;
        self.writer = Some(Arc::new(f.try_clone()?));
        let Spill::Memory(v) = std::mem::replace(&mut self.spill, spill) else { unreachable!("matched above") };
        Ok(Bytes::from(v))
    }

    /// Reads stored bytes from offset `at` into `buf` up to the end of what the spill has (a
    /// file's last appends may have failed: their bytes are still in memory); returns how many.
    fn read_up_to(&self, buf: &mut [u8], at: u64) -> std::io::Result<usize> {
        match &self.spill {
            Spill::Memory(v) => {
                let src = v.get(at as usize..).unwrap_or_default();
                let n = src.len().min(buf.len());
                buf[..n].copy_from_slice(&src[..n]);
                Ok(n)
            }
            Spill::File(_) | Spill::InPlace(_) => {
                let file = self.spill.file().expect("a file");
                let mut done = 0;
                while done < buf.len() {
                    match file.read_at(&mut buf[done..], at + done as u64) {
                        Ok(0) => break,
                        Ok(n) => done += n,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(e),
                    }
                }
                Ok(done)
            }
        }
    }

    /// Once the bytes are in a file: the next `n` bytes' offset, and the handle to write them
    /// through off this thread (the caller writes them; `None` while they are in memory).
    fn reserve(&mut self, n: usize) -> Option<(Arc<File>, u64)> {
        let file = self.writer.clone()?;
        let at = self.len;
        self.len += n as u64;
        Some((file, at))
    }

    /// Whether the stored bytes are the object's own staged file (nothing to ship in parts).
    fn in_place(&self) -> bool {
        matches!(self.spill, Spill::InPlace(_))
    }

    /// Gives the stored bytes `from..to` back to the staging disk (they read as zeros after).
    fn punch(&self, from: u64, to: u64) -> std::io::Result<()> {
        use nix::fcntl::FallocateFlags;
        // (An in-place file is the object itself: nothing of it is ever given back.)
        let Spill::File(f) = &self.spill else { return Ok(()) };
        let (off, len) = (i64::try_from(from), i64::try_from(to.saturating_sub(from)));
        let (Ok(off), Ok(len)) = (off, len) else { return Err(std::io::ErrorKind::InvalidInput.into()) };
        let mode = FallocateFlags::FALLOC_FL_PUNCH_HOLE | FallocateFlags::FALLOC_FL_KEEP_SIZE;
        Ok(nix::fcntl::fallocate(f, mode, off, len)?)
    }
}

/// What a finished upload produced.
#[derive(Debug)]
pub struct Written {
    /// The store's answer (ETag, version).
    pub put: PutResult,
    /// Bytes stored.
    pub stored: u64,
    /// Layout of the object just written (no need to read it back to serve reads).
    pub layout: Layout,
    /// The file's bytes, when they are one frame of at most 64 KiB (a small file): what reads of
    /// the version just written decode, kept so they need not fetch it.
    pub raw: Option<Bytes>,
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
    /// Multipart uploads announced by markers in this folder, through this API (S3); `None`:
    /// the store's own `put_multipart`.
    pub tracked: Option<(Arc<dyn object_store::multipart::MultipartStore>, Path)>,
    /// The bucket is this local directory (and `store` is it): objects larger than the in-memory
    /// spill are written in place, once, instead of spilled and shipped in parts.
    pub local: Option<Arc<LocalStore>>,
    /// The upload's sizes.
    pub sizes: UploadConfig,
    /// Record each object's attributes beside it (`recorded`), where one PUT or a local file
    /// writes it whole: not on a sealed mount.
    pub record: bool,
    /// How long the store's requests are tried again (zero: never): a part that failed after
    /// trying that long says the store is down, and `Upload::finish` fails at once rather than
    /// start the upload over.
    pub retry_timeout: std::time::Duration,
}

/// Largest file whose bytes an upload keeps for reads of the version it writes ([`Written::raw`]):
/// small files, so a copy of a tree of them does not push the frames readers use out of the
/// frame cache.
const KEPT_RAW_MAX: usize = 64 << 10;

/// How long writes ship no part after shipping failed (see `Upload::ship_again_at`).
const SHIP_PAUSE: std::time::Duration = std::time::Duration::from_secs(30);

/// One object being written.
pub struct Upload {
    sink: Sink,
    path: Path,
    /// Frames handed to the dispatcher, taken back encoded in order.
    encoding: EncodeStream,
    frame_size: u32,
    cutter: FrameCutter,
    writer: ObjectWriter,
    next_frame: u64,
    raw_in: u64,
    /// Header and every frame so far, in order (the index and footer are built by `finish`).
    spill: SpillBuf,
    /// Bytes in `spill`.
    stored: u64,
    /// The last, short frame was cut by `finish`: no more bytes can be appended.
    sealed: bool,
    /// Bytes of `spill` handed to parts of the current multipart upload.
    shipped: u64,
    multipart: Option<Box<dyn MultipartUpload>>,
    parts: JoinSet<PartDone>,
    /// Spill ranges whose parts the store confirmed, not yet joined to `confirmed`.
    done_ranges: BTreeMap<u64, u64>,
    /// The store confirmed the spill from byte 0 up to here.
    confirmed: u64,
    /// Spill bytes given back to a full staging disk (0 unless it filled up). From then on the
    /// upload cannot start again from byte 0, nor be recovered into a staging file.
    released: u64,
    /// A part failed after bytes were given back, or an append was lost: this upload can only fail.
    broken: bool,
    /// A `finish` is under way, or one was cut off (its future dropped before it ended: the next
    /// one ships again from the first byte, see [`Self::finish`]).
    finishing: bool,
    /// The abort of a dropped multipart upload, left running behind the failure that dropped it.
    aborting: Option<tokio::task::JoinHandle<()>>,
    /// Shipping failed (after its retries) while the file was written: writes ship no part
    /// before this time, so a writer is not held a retry timeout per write while the store is
    /// down (the bytes wait in the spill; `finish` ships them).
    ship_again_at: Option<std::time::Instant>,
    /// A frame whose encoder stopped without it (a bug, logged): this upload can only fail.
    lost_frame: Option<u64>,
    /// Stored bytes not shipped yet, in order from their offset on, kept in memory so parts are
    /// shipped from here rather than read back from the spill file (empty for in-place and
    /// in-memory spills), each holding its room in the budget's share for that
    /// (`Budget::try_keep`): where there is none, the bytes are read back from the spill instead.
    recent: VecDeque<(u64, Bytes, crate::budget::Held)>,
    /// Appends to the spill or in-place file in flight.
    appends: JoinSet<Appended>,
    /// Appends handed to `appends` so far.
    appends_sent: u64,
    /// Held by the append writing into the file.
    append_turn: Arc<std::sync::Mutex<()>>,
    /// Appends that failed (a full disk), with their offsets: written again before anything else.
    unstored: Vec<(u64, Bytes)>,
    /// The whole file, when `finish` cut it as its one frame (see [`Written::raw`]).
    whole_raw: Option<Bytes>,
    /// The budget room of each frame handed to the pipeline and not yet taken from it, by frame
    /// number (see the module's notes on memory).
    holding: VecDeque<(u64, crate::budget::Held)>,
}

/// What a part upload reports: the spill range it carried, and how it went.
type PartDone = (std::ops::Range<u64>, object_store::Result<()>, std::time::Duration);

/// What an append to the spill or in-place file reports: its pieces (offset and bytes), how it went.
type Appended = (Vec<(u64, Bytes)>, std::io::Result<()>);

/// Frames a file is cut into before it counts as a stream writing (`EncodeStream::start_stream`):
/// a small file's frames keep the measured sharing, so its close never waits on the GPU alone.
const STREAM_FRAMES: u64 = 8;

/// How long [`Upload::collect_until`] waits for frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Until {
    /// While more frames are in flight than the dispatcher allows.
    Window,
    /// Until at least one frame was taken (or none is in flight).
    One,
    /// Until every frame in flight was taken.
    All,
}

/// Contiguous frames `collect` found ready, for one append into `file`.
#[derive(Default)]
struct Batch {
    file: Option<Arc<File>>,
    pieces: Vec<(u64, Bytes)>,
    bytes: usize,
    /// The budget room of its frames, given back once they are written.
    holds: Vec<crate::budget::Held>,
}

impl Batch {
    /// Most bytes in one append (with `UploadConfig::appends_in_flight` of them, what a file's
    /// encoded frames may hold outside the pipeline while they are written), and most pieces (a
    /// header and a payload a frame; the kernel takes at most 1,024 in one call).
    const MAX_BYTES: usize = 8 << 20;
    const MAX_PIECES: usize = 1024;

    fn full(&self) -> bool {
        self.bytes >= Self::MAX_BYTES || self.pieces.len() + 2 > Self::MAX_PIECES
    }
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
        let in_place = sink.local.clone().map(|l| (l, path.clone()));
        let mut spill = SpillBuf {
            spill: Spill::Memory(Vec::new()),
            writer: None,
            dir: staging.to_path_buf(),
            in_place,
            len: 0,
            in_memory: sink.sizes.in_memory,
        };
        let codec: Arc<dyn Codec> = Arc::from(config.codec().map_err(Error::Config)?);
        // Version 2: the header goes out before the file's metadata is known, and that may hold
        // ctime and atime, which version 1 cannot store.
        let ctx = Arc::new(config.new_object_in(Version::V2));
        let writer = ObjectWriter::new(ctx.clone());
        let encoding = EncodeStream::new(ctx, codec, config.params.codec);
        let header = writer.header_bytes();
        spill.append_in_memory(&header);
        Ok(Upload {
            sink,
            path,
            encoding,
            frame_size: config.frame_size,
            cutter: FrameCutter::new(config.frame_size),
            writer,
            next_frame: 0,
            raw_in: 0,
            spill,
            stored: header.len() as u64,
            sealed: false,
            shipped: 0,
            multipart: None,
            parts: JoinSet::new(),
            done_ranges: BTreeMap::new(),
            confirmed: 0,
            released: 0,
            broken: false,
            finishing: false,
            ship_again_at: None,
            aborting: None,
            lost_frame: None,
            recent: VecDeque::new(),
            appends: JoinSet::new(),
            appends_sent: 0,
            append_turn: Arc::default(),
            unstored: Vec::new(),
            whole_raw: None,
            holding: VecDeque::new(),
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

    /// Whether bytes can still be appended (`finish` was not tried yet).
    pub fn appendable(&self) -> bool {
        !self.sealed
    }

    /// Where it is being written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends bytes. Waits (backpressure) for room in the memory budget and when too many frames
    /// or parts are in flight. An error (only a local failure — a full staging disk or local
    /// bucket — gets here) means none of the bytes were taken; store failures wait for `finish`.
    /// `taken` is answered once nothing can fail the write any more, before its bytes are copied.
    pub async fn write(&mut self, data: &[u8], taken: &mut Taken<'_>) -> Result<()> {
        if self.sealed {
            return Err(Error::UploadFinished);
        }
        // Frames not stored yet (the disk was full) are stored before more bytes are taken, so a
        // write that fails has taken none of its bytes.
        if !self.unstored.is_empty() {
            self.store_unstored().await?;
        }
        self.collect(false).await?;
        taken.now();
        let mut full = Vec::new();
        // Frames are cut into the GPU's page-locked buffers while it has them free.
        self.cutter.push(data, &self.sink.dispatcher.buffers(), |f| full.push(f));
        self.raw_in += data.len() as u64;
        // From here the bytes are taken: a frame that cannot be stored now waits in the pipeline
        // (at most one request's worth), and the next write or `finish` reports why.
        for f in full {
            self.submit(f).await;
            if let Err(e) = self.collect(false).await {
                tracing::debug!(key = %self.path, error = %e, "frame kept until it can be stored");
            }
        }
        if let Err(e) = self.collect(false).await {
            tracing::debug!(key = %self.path, error = %e, "frame kept until it can be stored");
        }
        self.ship_full_parts().await;
        Ok(())
    }

    async fn submit(&mut self, raw: FrameBuf) {
        // Past its first frames a file counts as a stream writing (`DispatchConfig::many_streams`).
        if !self.sealed && self.next_frame >= STREAM_FRAMES {
            self.encoding.start_stream(&self.sink.dispatcher);
        }
        // Room for the frame's bytes, raw and then encoded, given back once the encoded bytes are
        // in the spill. (Twice the size, for the moment both exist, halved the frames a GPU
        // could have in flight under the default limit: `auto` wrote 15-30% slower.)
        let room = self.room(raw.len() as u64).await;
        self.holding.push_back((self.next_frame, room));
        self.encoding.submit(&self.sink.dispatcher, self.next_frame, raw, ());
        self.next_frame += 1;
    }

    /// Room in the memory budget for `bytes`. Where there is none now, this file's own frames go
    /// to the spill first (their room comes back as they are written), so a writer never waits
    /// for room it holds itself.
    async fn room(&mut self, bytes: u64) -> crate::budget::Held {
        loop {
            if let Some(held) = self.sink.budget.try_take(bytes) {
                return held;
            }
            if self.holding.is_empty() {
                return self.sink.budget.take(bytes).await;
            }
            // The next of its own frames (and any ready behind it) to the spill, then try again:
            // the pipeline stays full rather than drained.
            let before = self.encoding.frames().next_number();
            if let Err(e) = self.collect_until(Until::One).await {
                tracing::debug!(key = %self.path, error = %e, "frame kept until it can be stored");
                // Frames the pipeline still has stay out of the budget rather than wait on themselves.
                self.holding.clear();
            }
            if self.encoding.frames().next_number() == before {
                // (No frame came back: none in flight holds room this file could give back.)
                self.holding.clear();
            }
        }
    }

    /// Takes the frames encoded so far into the spill without waiting for any, so their room in
    /// the budget goes back: for a file open for writing that no one writes now (a task of the
    /// mount's calls this every second). A failure waits for the next write or `finish`, as in a
    /// write.
    pub async fn take_encoded(&mut self) {
        if self.sealed || self.encoding.frames().in_flight() == 0 {
            return;
        }
        if let Err(e) = self.collect(false).await {
            tracing::debug!(key = %self.path, error = %e, "frame kept until it can be stored");
        }
    }

    /// The room of the frames taken from the pipeline (every number before the next one it gives).
    fn taken_room(&mut self) -> Option<crate::budget::Held> {
        let next = self.encoding.frames().next_number();
        let mut room = None;
        while self.holding.front().is_some_and(|(k, _)| *k < next) {
            room = self.holding.pop_front().map(|(_, held)| held);
        }
        room
    }

    /// Moves encoded frames, in order, to the spill; waits for every frame when `all` (else only
    /// while more than the allowed number are in flight). The frames found ready together go to
    /// the file in one append: a launch hands back dozens of a file's frames at once, and one
    /// append each, at most a few in flight, held the writer while they were written in turn.
    async fn collect(&mut self, all: bool) -> Result<()> {
        self.collect_until(if all { Until::All } else { Until::Window }).await
    }

    /// [`Self::collect`], waiting as `until` says.
    async fn collect_until(&mut self, until: Until) -> Result<()> {
        let mut took = false;
        if self.lost_frame.is_some() {
            return Err(Error::Stopped("encoder"));
        }
        let mut batch = Batch::default();
        let res = loop {
            let in_flight = self.encoding.frames().in_flight();
            if in_flight == 0 {
                break Ok(());
            }
            let got = match self.encoding.frames().try_next() {
                // (Frames in flight beyond which a write waits: what the dispatcher says now.)
                None if until == Until::All || (until == Until::One && !took) || in_flight > self.max_pending() => {
                    // What is gathered goes out before waiting, so it is written meanwhile.
                    self.append_batch(&mut batch).await;
                    self.encoding.frames().next().await
                }
                got => got,
            };
            let frame = match got {
                Some(Ok(f)) => f,
                // Not encoded yet (and not waited for), or never promised: nothing to take now.
                None => break Ok(()),
                Some(Err(lost)) => {
                    tracing::error!(key = %self.path, frame = lost.0, "a frame's encoder stopped without it: the file cannot be stored");
                    self.lost_frame = Some(lost.0);
                    break Err(Error::Stopped("encoder"));
                }
            };
            // Its room goes with its bytes: given back once they are written to the file.
            let room = self.taken_room();
            took = true;
            let n = frame.len();
            if self.spill.fits_in_memory(n) {
                self.spill.append_in_memory(&frame.head());
                self.spill.append_in_memory(&frame.payload);
                self.record(&frame);
                continue;
            }
            // The bytes outgrow memory: from now on they go to a file, off the writer's thread.
            // A file that cannot be made keeps the frame for the next try.
            match self.spill.overflow() {
                Ok(kept) if !kept.is_empty() && !self.spill.in_place() => self.keep_recent(0, kept),
                Ok(_) => {}
                Err(e) => {
                    self.encoding.frames().put_back(frame);
                    // Its room stays with it.
                    if let Some(room) = room {
                        self.holding.push_front((self.encoding.frames().next_number(), room));
                    }
                    break Err(e.into());
                }
            }
            if batch.full() {
                self.append_batch(&mut batch).await;
            }
            let (file, at) = self.spill.reserve(n).expect("a file spill after overflow");
            self.record(&frame);
            // Header and payload stay apart: the payload keeps the encoder's buffer (for a frame
            // stored as it is, the buffer its bytes were cut into), with no copy behind a header.
            let pieces = [(at, Bytes::copy_from_slice(&frame.head())), (at + FRAME_HEADER_LEN as u64, frame.payload)];
            if !self.spill.in_place() {
                for (at, bytes) in &pieces {
                    self.keep_recent(*at, bytes.clone());
                }
            }
            // (One file takes every frame after the overflow: a batch never spans two.)
            debug_assert!(batch.file.as_ref().is_none_or(|f| Arc::ptr_eq(f, &file)), "one spill file");
            batch.file = Some(file);
            batch.bytes += n;
            batch.pieces.extend(pieces);
            batch.holds.extend(room);
        };
        self.append_batch(&mut batch).await;
        res
    }

    /// Keeps stored bytes `bytes` (at `at`, right after those kept before) in memory until
    /// they are shipped, where the budget's share for that has room; else lets every kept byte
    /// go (what is kept must run on to the last byte stored), to be read back from the spill. A
    /// payload much smaller than a frame is kept as a copy of its own size, not in the encoder's
    /// buffer (as large as a frame), so the room held is the memory held.
    fn keep_recent(&mut self, at: u64, bytes: Bytes) {
        let bytes = match bytes.len() * 2 < self.frame_size as usize {
            true => Bytes::copy_from_slice(&bytes),
            false => bytes,
        };
        match self.sink.budget.try_keep(bytes.len() as u64) {
            Some(room) => self.recent.push_back((at, bytes, room)),
            None => self.recent.clear(),
        }
    }

    /// Sends what `batch` gathered to the file in one append.
    async fn append_batch(&mut self, batch: &mut Batch) {
        if let Some(file) = batch.file.take() {
            batch.bytes = 0;
            let holds = std::mem::take(&mut batch.holds);
            self.append_off_thread(file, std::mem::take(&mut batch.pieces), holds).await;
        }
    }

    /// Frames in flight (encoding, or encoded and not yet taken) beyond which a write waits: what
    /// the dispatcher says now.
    fn max_pending(&self) -> usize {
        if self.encoding.streams() {
            self.sink.dispatcher.stream_frames_in_flight()
        } else {
            self.sink.dispatcher.frames_in_flight()
        }
    }

    /// Counts a frame whose bytes have their place in the spill, and lists it in the index.
    fn record(&mut self, frame: &EncodedFrame) {
        self.stored += frame.len() as u64;
        self.writer.push(frame);
        self.sink.metrics.frame_encoded(frame.header.codec.name());
    }

    /// Writes `pieces` (each at its offset) into the spill or in-place file on a blocking thread,
    /// a bounded number at once.
    async fn append_off_thread(&mut self, file: Arc<File>, pieces: Vec<(u64, Bytes)>, holds: Vec<crate::budget::Held>) {
        self.appends_sent += 1;
        let turn = self.append_turn.clone();
        self.appends.spawn_blocking(move || {
            // One append into the file at a time: a local file system lets one buffered write
            // into a file at a time anyway (the inode's lock), and the others would spin in the
            // kernel waiting for it.
            let _turn = turn.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let res = write_all_vectored_at(&file, &pieces);
            // The frames' room goes back once they are written; a failed append keeps its bytes
            // in `unstored`, out of the budget, like every frame waiting for a full disk.
            drop(holds);
            (pieces, res)
        });
        while self.appends.len() > self.sink.sizes.appends_in_flight {
            let done = self.appends.join_next().await.expect("appends in flight");
            self.settle_append(done);
        }
        while let Some(done) = self.appends.try_join_next() {
            self.settle_append(done);
        }
    }

    /// Records how an append ended: a failed one is kept to be written again.
    fn settle_append(&mut self, done: std::result::Result<Appended, tokio::task::JoinError>) {
        match done {
            Ok((_, Ok(()))) => {}
            Ok((pieces, Err(e))) => {
                tracing::debug!(key = %self.path, error = %e, "append failed; kept until it can be stored");
                self.unstored.extend(pieces);
            }
            Err(e) => {
                tracing::error!(key = %self.path, error = %e, "an append was lost: this file cannot be stored");
                self.broken = true;
            }
        }
    }

    /// Waits for every append in flight (a failed one is then in `unstored`).
    async fn join_appends(&mut self) {
        while let Some(done) = self.appends.join_next().await {
            self.settle_append(done);
        }
    }

    /// Waits for every append and writes the failed ones again (a full staging disk first gives
    /// back what the store already confirmed): `Ok` once every frame so far is in the file.
    async fn store_unstored(&mut self) -> Result<()> {
        self.join_appends().await;
        if self.broken {
            return Err(Error::Local(std::io::Error::other("an append was lost: the file cannot be stored")));
        }
        let Some(file) = self.spill.writer.clone() else { return Ok(()) };
        self.unstored.sort_by_key(|u| u.0);
        loop {
            // Bytes given back to a full disk are never needed from the spill again.
            let released = self.released;
            self.unstored.retain(|(at, b)| at + b.len() as u64 > released);
            let Some((at, bytes)) = self.unstored.first() else { return Ok(()) };
            match file.write_all_at(bytes, *at) {
                Ok(()) => {
                    self.unstored.remove(0);
                }
                Err(e) if staging_full(&e) && !self.spill.in_place() && self.make_room().await => {}
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Stored bytes `from..to`, as pieces: from memory where they are still kept, else read back
    /// from the spill (after its appends settle; a failed append's bytes are still in memory).
    async fn stored_range(&mut self, from: u64, to: u64) -> Result<Vec<Bytes>> {
        let in_memory_from = self.recent.front().map_or(to, |(at, _, _)| *at).clamp(from, to);
        let mut pieces = Vec::new();
        if from < in_memory_from {
            self.join_appends().await;
            let mut buf = vec![0u8; (in_memory_from - from) as usize];
            // The spill may end early: appends that failed (a full staging disk) left their
            // bytes in `unstored`, the last ones among them past its end.
            let got = self.spill.read_up_to(&mut buf, from)?;
            overlay_unstored(&mut buf, from, got, &self.unstored)?;
            pieces.push(Bytes::from(buf));
        }
        for (at, bytes, _) in &self.recent {
            let (s, e) = ((*at).max(in_memory_from), (at + bytes.len() as u64).min(to));
            if s < e {
                pieces.push(bytes.slice((s - at) as usize..(e - at) as usize));
            }
        }
        Ok(pieces)
    }

    /// Ships every full part of the spill. A failure is not the writer's error (the bytes stay in
    /// the spill): the multipart upload is dropped and the next call, or `finish`, starts again
    /// from the first byte.
    async fn ship_full_parts(&mut self) {
        if self.ship_again_at.is_some_and(|t| std::time::Instant::now() < t) {
            return;
        }
        self.ship_full_parts_now().await;
    }

    /// [`Self::ship_full_parts`], paused or not (a full staging disk has no other way out).
    async fn ship_full_parts_now(&mut self) {
        while !self.broken && !self.spill.in_place() && self.stored - self.shipped >= self.sink.sizes.part_size as u64 {
            if let Err(e) = self.ship(self.sink.sizes.part_size, None).await {
                tracing::warn!(key = %self.path, error = %e, "part upload failed; will upload again from the start");
                self.reset_shipping().await;
                self.ship_again_at = Some(std::time::Instant::now() + SHIP_PAUSE);
                break;
            }
        }
    }

    /// The next `len` unshipped stored bytes (and `tail` after them), holding budget room for them.
    async fn unshipped(&mut self, len: usize, tail: Option<&[u8]>) -> Result<(PutPayload, crate::budget::Held)> {
        let extra = tail.map_or(0, <[u8]>::len);
        let held = self.room((len + extra) as u64).await;
        let mut pieces = self.stored_range(self.shipped, self.shipped + len as u64).await?;
        pieces.extend(tail.map(Bytes::copy_from_slice));
        self.shipped += len as u64;
        while self.recent.front().is_some_and(|(at, b, _)| at + b.len() as u64 <= self.shipped) {
            self.recent.pop_front();
        }
        Ok((pieces.into_iter().collect(), held))
    }

    /// Uploads the next `len` bytes of the spill (then `tail`) as one multipart part; fails if an
    /// earlier part failed.
    async fn ship(&mut self, len: usize, tail: Option<&[u8]>) -> Result<()> {
        if self.multipart.is_none() {
            self.aborted().await;
            self.multipart = Some(match &self.sink.tracked {
                Some((mp, markers)) => {
                    crate::uploads::start(self.sink.store.clone(), mp.clone(), markers, &self.path).await?
                }
                None => self.sink.store.put_multipart(&self.path).await?,
            });
        }
        let start = self.shipped;
        let (payload, held) = self.unshipped(len, tail).await?;
        let range = start..self.shipped;
        let part = self.multipart.as_mut().expect("started above").put_part(payload);
        self.parts.spawn(async move {
            let began = std::time::Instant::now();
            let done = part.await;
            drop(held);
            (range, done, began.elapsed())
        });
        while let Some(done) = self.parts.try_join_next() {
            self.settle(done)?;
        }
        while self.parts.len() > self.sink.sizes.parts_in_flight {
            if let Some(done) = self.parts.join_next().await {
                self.settle(done)?;
            }
        }
        Ok(())
    }

    /// Records how a part upload ended.
    fn settle(&mut self, done: std::result::Result<PartDone, tokio::task::JoinError>) -> Result<()> {
        match done {
            Ok((range, Ok(()), _)) => {
                self.done_ranges.insert(range.start, range.end);
                while let Some(end) = self.done_ranges.remove(&self.confirmed) {
                    self.confirmed = end;
                }
                Ok(())
            }
            Ok((_, Err(e), _)) => Err(e.into()),
            Err(source) => Err(Error::Task { task: "part upload", source }),
        }
    }

    /// Drops the multipart upload in progress (aborting it in the store); shipping starts again
    /// from the first byte of the spill — unless bytes were given back to a full staging disk.
    async fn reset_shipping(&mut self) {
        self.abort_parts(true).await;
        self.done_ranges.clear();
        self.confirmed = 0;
        if self.released > 0 {
            self.broken = true;
        } else {
            self.shipped = 0;
        }
    }

    /// The staging disk is full: ships what can be shipped, waits for the parts in flight, and
    /// gives the bytes the store confirmed back to the disk. Whether any room was made.
    async fn make_room(&mut self) -> bool {
        self.ship_full_parts_now().await;
        while let Some(done) = self.parts.join_next().await {
            if let Err(e) = self.settle(done) {
                tracing::warn!(key = %self.path, error = %e, "part upload failed while the staging disk is full");
                self.reset_shipping().await;
                return false;
            }
        }
        if self.broken || self.confirmed <= self.released {
            return false;
        }
        // (An append still writing below `confirmed` would fill the hole again.)
        self.join_appends().await;
        if let Err(e) = self.spill.punch(self.released, self.confirmed) {
            tracing::warn!(key = %self.path, error = %e, "cannot give spill space back");
            return false;
        }
        if self.released == 0 {
            tracing::warn!(
                key = %self.path,
                "staging disk full: uploaded bytes are dropped from the spill; this upload can no longer be retried from the start"
            );
        }
        self.released = self.confirmed;
        true
    }

    /// Encodes what is left, writes index and footer, and completes the object. On failure nothing
    /// is lost: the upload can be finished again (with the same or other metadata), or recovered.
    /// A call cut off before it ends (its future dropped) may have counted bytes as shipped that
    /// no request took: the next call ships everything again from the first byte (or fails, where
    /// bytes went back to a full staging disk, or the cut came while the last frame was handed on).
    pub async fn finish(&mut self, meta: &FileMeta) -> Result<Written> {
        if std::mem::replace(&mut self.finishing, true) {
            tracing::debug!(key = %self.path, "an earlier upload of this file was cut off: shipping again from the start");
            if !self.sealed {
                self.broken = true;
            }
            self.reset_shipping().await;
        }
        let result = self.finish_once(meta).await;
        self.finishing = false;
        result
    }

    /// [`Self::finish`], once.
    async fn finish_once(&mut self, meta: &FileMeta) -> Result<Written> {
        if !self.sealed {
            let cutter = std::mem::replace(&mut self.cutter, FrameCutter::new(self.frame_size));
            if let Some(rest) = cutter.finish() {
                if self.next_frame == 0 && rest.len() <= KEPT_RAW_MAX {
                    // The whole (small) file is this one short frame.
                    self.whole_raw = Some(Bytes::copy_from_slice(&rest));
                }
                self.submit(rest).await;
            }
            self.sealed = true;
            self.encoding.end_stream();
        }
        if let Err(e) = self.collect(true).await {
            // A closed file waiting for its next try holds no room meanwhile.
            self.holding.clear();
            return Err(e);
        }
        if self.spill.in_place() {
            // The file is the object: every frame must be in it.
            self.store_unstored().await?;
        }
        // Parts shipped while the file was written: one that failed means shipping again from
        // the first byte; but one that kept failing through its retries (the store is down)
        // fails this call at once, so the caller hears of an outage one retry timeout after it
        // began, not after a new upload's too. The next call ships again.
        let mut failed = None;
        while let Some(done) = self.parts.join_next().await {
            let tried = match &done {
                Ok((_, Err(_), tried)) => *tried,
                _ => std::time::Duration::ZERO,
            };
            if let Err(e) = self.settle(done) {
                failed.get_or_insert((e, tried));
            }
        }
        if let Some((e, tried)) = failed {
            self.reset_shipping().await;
            if !self.sink.retry_timeout.is_zero() && tried >= self.sink.retry_timeout {
                tracing::warn!(key = %self.path, error = %e, "part upload failed; the next try uploads again from the start");
                return Err(e);
            }
            tracing::warn!(key = %self.path, error = %e, "part upload failed; uploading again from the start");
        }
        let result = self.complete(meta).await;
        if result.is_err() {
            self.reset_shipping().await;
        }
        result
    }

    async fn complete(&mut self, meta: &FileMeta) -> Result<Written> {
        if self.broken {
            return Err(Error::Local(std::io::Error::other(
                "the file cannot be uploaded again: a part upload failed after the staging disk filled up, or an upload cut off lost its last bytes",
            )));
        }
        let raw = self.writer.raw_len();
        let tail = self.writer.finish_with(meta).map_err(|e| Error::Codec { key: self.path.to_string(), source: e })?;
        let total = self.stored + tail.len() as u64;
        let layout = Layout::parse(&tail, total).map_err(|e| Error::Codec { key: self.path.to_string(), source: e })?;
        let record = self.sink.record.then(|| crate::recorded::Recorded::of(&layout, total).attributes());
        let put = if let Spill::InPlace(object) = &mut self.spill.spill {
            // The tail goes after the last frame (again, if an earlier try failed after it).
            object.file().write_all_at(&tail, self.stored)?;
            object.record(&record.unwrap_or_default());
            crate::store::instrument::in_place(self.sink.metrics.store(), total, || object.publish())?
        } else if self.multipart.is_none() && self.stored < self.sink.sizes.part_size as u64 {
            self.aborted().await;
            let (payload, _held) = self.unshipped((self.stored - self.shipped) as usize, Some(&tail)).await?;
            let opts = object_store::PutOptions { attributes: record.unwrap_or_default(), ..Default::default() };
            self.sink.store.put_opts(&self.path, payload, opts).await?
        } else {
            while self.stored - self.shipped > self.sink.sizes.part_size as u64 {
                self.ship(self.sink.sizes.part_size, None).await?;
            }
            self.ship((self.stored - self.shipped) as usize, Some(&tail)).await?;
            while let Some(done) = self.parts.join_next().await {
                self.settle(done)?;
            }
            let mp = self.multipart.as_mut().expect("a part was shipped above");
            let put = match mp.complete().await {
                Ok(put) => put,
                // A completion that took effect while its answer was lost: the retry finds the
                // upload gone.
                Err(object_store::Error::NotFound { .. }) => {
                    completed_unseen(self.sink.store.as_ref(), &self.path, total, &tail).await?
                }
                Err(e) => return Err(e.into()),
            };
            self.multipart = None;
            put
        };
        self.sink.metrics.object_written(raw);
        Ok(Written { put, stored: total, layout, raw: self.whole_raw.clone() })
    }

    /// Stops the parts in flight and aborts the multipart upload in the store: awaited, or
    /// (`behind`) left to run in the background, so a caller whose upload failed gets its error
    /// without waiting for the abort's own retries against a store that is down (an abort that
    /// never lands leaves its marker for a cleanup).
    async fn abort_parts(&mut self, behind: bool) {
        self.parts.abort_all();
        while self.parts.join_next().await.is_some() {}
        if let Some(mut mp) = self.multipart.take() {
            match behind {
                true => self.aborting = Some(tokio::spawn(async move { drop(mp.abort().await) })),
                false => drop(mp.abort().await),
            }
        }
    }

    /// Waits for an abort left running behind a failure, before anything else is stored under
    /// the key: some S3-compatible servers abort by key, which would take a newer upload too.
    async fn aborted(&mut self) {
        if let Some(abort) = self.aborting.take() {
            let _ = abort.await;
        }
    }

    /// Cancels the upload: nothing appears under the key.
    pub async fn abort(mut self) {
        self.abort_parts(false).await;
    }

    /// Writes every byte accepted so far, decoded, to `out` from offset 0, and returns the length.
    /// The upload itself is left as it was: on failure (a full staging disk) it can still be
    /// finished; on success the caller aborts it.
    pub async fn recover_into(&mut self, out: &File) -> Result<u64> {
        if self.released > 0 {
            tracing::warn!(key = %self.path, "a rewrite needs the whole file, but a full staging disk took part of it");
            return Err(Error::Local(std::io::Error::from_raw_os_error(libc::ENOSPC)));
        }
        self.collect(true).await?;
        let mut dec = StreamDecoder::of_object(self.writer.context().clone());
        let mut at = 0u64;
        let mut raw = Vec::new();
        let mut read = 0u64;
        let key = self.path.to_string();
        let codec_err = |e| Error::Codec { key: key.clone(), source: e };
        while read < self.stored {
            let n = (self.stored - read).min(1 << 20);
            for piece in self.stored_range(read, read + n).await? {
                dec.feed(&piece);
            }
            read += n;
            while let Some(item) = dec.next_item().map_err(codec_err)? {
                if let Item::Frame { frame, header, payload } = item {
                    decode_payload(self.writer.context(), frame, &header, &payload, None, &mut raw)
                        .map_err(codec_err)?;
                    out.write_all_at(&raw, at)?;
                    at += raw.len() as u64;
                }
            }
        }
        let rest = self.cutter.pending();
        out.write_all_at(rest, at)?;
        Ok(at + rest.len() as u64)
    }
}

/// Encodes the first `len` bytes of a local file through `up` and completes the object.
pub async fn upload_file(mut up: Upload, file: &File, len: u64, meta: &FileMeta) -> Result<Written> {
    let mut buf = vec![0u8; up.frame_size as usize];
    let mut at = 0u64;
    let mut holes = Holes::default();
    while at < len {
        let n = ((len - at) as usize).min(buf.len());
        holes.read(file, &mut buf[..n], at)?;
        if let Err(e) = up.write(&buf[..n], &mut Taken::default()).await {
            up.abort().await;
            return Err(e);
        }
        at += n as u64;
    }
    let res = up.finish(meta).await;
    if res.is_err() {
        up.abort().await;
    }
    res
}

/// Where a staged file's next data lies, so the frames of its holes (a file grown by `truncate`,
/// a disk image) are zeros made here: read through the page cache, each hole's pages were
/// zeroed and copied one by one (a 16 GiB image took 14.5 s to store, 64% of it zeroing pages).
/// Only on filesystems whose `SEEK_DATA` is trusted with data not yet written back (tmpfs,
/// ext4, XFS, btrfs; some ZFS releases reported such data as a hole); elsewhere all is read.
#[derive(Default)]
struct Holes {
    /// No data before this offset (from the last `SEEK_DATA`).
    data_from: u64,
    /// Whether the file's filesystem is trusted (`None`: not asked yet).
    trusted: Option<bool>,
}

/// The filesystems whose holes [`Holes`] believes.
const HOLES_TRUSTED: [nix::sys::statfs::FsType; 4] = {
    use nix::sys::statfs::{BTRFS_SUPER_MAGIC, EXT4_SUPER_MAGIC, TMPFS_MAGIC, XFS_SUPER_MAGIC};
    [TMPFS_MAGIC, EXT4_SUPER_MAGIC, XFS_SUPER_MAGIC, BTRFS_SUPER_MAGIC]
};

impl Holes {
    /// Fills `buf` with the file's bytes at `at`.
    fn read(&mut self, file: &File, buf: &mut [u8], at: u64) -> std::io::Result<()> {
        let trusted = *self.trusted.get_or_insert_with(|| {
            nix::sys::statfs::fstatfs(file).is_ok_and(|s| HOLES_TRUSTED.contains(&s.filesystem_type()))
        });
        if trusted && at >= self.data_from {
            use nix::unistd::{Whence, lseek};
            let from = i64::try_from(at).map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
            self.data_from = match lseek(file, from, Whence::SeekData) {
                Ok(next) => next as u64,
                // No data past `at`: a hole to the file's end (and what lies past it is read,
                // which fails: never zeros for bytes the file does not have).
                Err(nix::errno::Errno::ENXIO) => file.metadata()?.len(),
                // (A filesystem that cannot say: everything is data.)
                Err(_) => at,
            };
        }
        if at + buf.len() as u64 <= self.data_from {
            buf.fill(0);
            return Ok(());
        }
        file.read_exact_at(buf, at)
    }
}

/// Completes `buf`, stored bytes from offset `from` of which the spill gave the first `got`,
/// with the bytes of failed appends (`unstored`): within what the spill gave (its holes), and
/// past its end, which they must cover whole.
fn overlay_unstored(buf: &mut [u8], from: u64, got: usize, unstored: &[(u64, Bytes)]) -> std::io::Result<()> {
    let to = from + buf.len() as u64;
    let mut known = from + got as u64;
    let mut overlays: Vec<_> = unstored.iter().collect();
    overlays.sort_by_key(|(at, _)| *at);
    for (at, bytes) in overlays {
        let (s, e) = ((*at).max(from), (at + bytes.len() as u64).min(to));
        if s < e {
            buf[(s - from) as usize..(e - from) as usize].copy_from_slice(&bytes[(s - at) as usize..(e - at) as usize]);
            if s <= known {
                known = known.max(e);
            }
        }
    }
    match known >= to {
        true => Ok(()),
        false => Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof)),
    }
}

/// Whether a local write failed for want of space.
fn staging_full(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
}

/// Writes `pieces`, which follow one another in the file, with one `pwritev` (looping on a short
/// write): one pass through the file's lock instead of one per piece.
fn write_all_vectored_at(file: &File, pieces: &[(u64, Bytes)]) -> std::io::Result<()> {
    let Some(&(start, _)) = pieces.first() else { return Ok(()) };
    debug_assert!(pieces.windows(2).all(|w| w[0].0 + w[0].1.len() as u64 == w[1].0), "pieces must be contiguous");
    let total: usize = pieces.iter().map(|(_, b)| b.len()).sum();
    let mut done = 0usize;
    while done < total {
        let at =
            i64::try_from(start + done as u64).map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
        match nix::sys::uio::pwritev(file, &remaining(pieces, done), at) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => done += n,
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// What is left of `pieces` once their first `done` bytes are written: the pieces not yet
/// reached, the first of them cut short.
fn remaining(pieces: &[(u64, Bytes)], done: usize) -> Vec<std::io::IoSlice<'_>> {
    let mut slices: Vec<std::io::IoSlice<'_>> = pieces.iter().map(|(_, b)| std::io::IoSlice::new(b)).collect();
    let mut left = &mut slices[..];
    std::io::IoSlice::advance_slices(&mut left, done);
    left.to_vec()
}

/// After the store said the upload to `path` is gone when asked to complete it: whether an earlier try
/// of that completion (whose answer was lost) stored the object, which then has this upload's
/// size and ends with the index and footer just written (`tail`); else the upload was lost
/// (an `EIO`, not the store's "not found", which would say the file is missing).
async fn completed_unseen(
    store: &dyn ObjectStore,
    path: &Path,
    total: u64,
    tail: &[u8],
) -> Result<object_store::PutResult> {
    let lost = || {
        let source = "the multipart upload was gone when it was to complete, and the object is not its".into();
        Error::Store(object_store::Error::Generic { store: "upload", source })
    };
    let meta = match store.head(path).await {
        Ok(meta) => meta,
        Err(object_store::Error::NotFound { .. }) => return Err(lost()),
        Err(e) => return Err(e.into()),
    };
    if meta.size != total || (tail.len() as u64) > total {
        return Err(lost());
    }
    let end = store.get_range(path, total - tail.len() as u64..total).await?;
    if end != tail {
        return Err(lost());
    }
    tracing::info!(key = %path, "the upload's completion took effect though its answer was lost: stored");
    Ok(object_store::PutResult { e_tag: meta.e_tag, version: meta.version })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_write_resumes_where_it_stopped() {
        let pieces = [(8, Bytes::from_static(b"head")), (12, Bytes::from_static(b"payload"))];
        let left = |done| remaining(&pieces, done).iter().map(|s| s.to_vec()).collect::<Vec<_>>();
        assert_eq!(left(0), [b"head".to_vec(), b"payload".to_vec()]);
        assert_eq!(left(2), [b"ad".to_vec(), b"payload".to_vec()], "inside the header");
        assert_eq!(left(4), [b"payload".to_vec()], "at the end of the header");
        assert_eq!(left(7), [b"load".to_vec()], "inside the payload");
        assert!(left(11).is_empty(), "all written");
    }

    /// Found by a review: with the bytes kept in memory let go, a part was read back from a
    /// spill whose last appends had failed (a full staging disk) and failed at its end, for good.
    #[test]
    fn bytes_of_failed_appends_complete_a_spill_that_ends_early_or_has_holes() {
        let unstored =
            [(4, Bytes::from_static(b"EF")), (10, Bytes::from_static(b"KL")), (8, Bytes::from_static(b"IJ"))];
        // The spill has bytes 2..8 (a hole at 4..6), then ends: 8..12 come from failed appends.
        let mut buf = *b"cd\0\0gh\0\0\0\0";
        overlay_unstored(&mut buf, 2, 6, &unstored).unwrap();
        assert_eq!(&buf, b"cdEFghIJKL");
        // Past the end with a byte nothing holds: an error, never a zero in its place.
        let mut buf = *b"cd\0\0gh\0\0\0\0\0";
        let e = overlay_unstored(&mut buf, 2, 6, &unstored).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn a_staged_files_holes_read_as_zeros_without_reading_them() {
        let file = tempfile::tempfile_in(std::env::temp_dir()).unwrap();
        const MIB: u64 = 1 << 20;
        file.write_all_at(b"abc", 0).unwrap();
        file.write_all_at(b"xyz", 5 * MIB + 10).unwrap();
        file.set_len(20 * MIB).unwrap();
        let mut holes = Holes::default();
        let (mut got, mut want) = (vec![7u8; MIB as usize], vec![0u8; MIB as usize]);
        let mut skipped = 0;
        for frame in 0..20 {
            holes.read(&file, &mut got, frame * MIB).unwrap();
            file.read_exact_at(&mut want, frame * MIB).unwrap();
            assert!(got == want, "frame {frame}");
            skipped += u64::from(holes.data_from >= (frame + 1) * MIB);
        }
        // Frames 1-4 and 6-19 lie in holes; where the filesystem says so, none was read.
        let says = nix::unistd::lseek(&file, 0, nix::unistd::Whence::SeekHole).is_ok_and(|h| h > 0 && h < 20 << 20);
        assert!(!says || holes.trusted == Some(false) || skipped == 18, "{skipped} frames known to be holes");
        // Past the file's end: an error, not zeros.
        let e = holes.read(&file, &mut got, 20 * MIB).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn pieces_written_with_one_call_land_end_to_end_at_their_offset() {
        let file = tempfile::tempfile().unwrap();
        file.write_all_at(b"0123456789", 0).unwrap();
        let pieces = [(3, Bytes::from_static(b"abc")), (6, Bytes::from_static(b"defgh")), (11, Bytes::new())];
        write_all_vectored_at(&file, &pieces).unwrap();
        let mut back = vec![0u8; 11];
        file.read_exact_at(&mut back, 0).unwrap();
        assert_eq!(&back, b"012abcdefgh");
        write_all_vectored_at(&file, &[]).unwrap();
    }

    /// A sink into an in-memory store whose dispatcher shares its frames with `backend`.
    fn memory_sink(backend: shrinkfs_codec::dispatch::Backend, cfg: shrinkfs_codec::dispatch::DispatchConfig) -> Sink {
        let metrics = Arc::new(Metrics::new());
        Sink {
            store: Arc::new(object_store::memory::InMemory::new()),
            dispatcher: Arc::new(Dispatcher::with_backend(backend, cfg).unwrap()),
            budget: Budget::new(256 << 20, metrics.clone()),
            metrics,
            tracked: None,
            local: None,
            sizes: UploadConfig::default(),
            record: false,
            retry_timeout: std::time::Duration::ZERO,
        }
    }

    /// A batch back end that takes launches of many frames and stores each as it is.
    struct StoresAsIs;

    impl shrinkfs_codec::dispatch::BatchBackend for StoresAsIs {
        fn compress_batch(
            &self,
            _: shrinkfs_codec::CodecId,
            chunks: &[&[u8]],
            _: i32,
        ) -> shrinkfs_codec::dispatch::BatchResult {
            Ok(vec![None; chunks.len()])
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn frames_found_ready_together_go_to_the_file_in_one_append() {
        use shrinkfs_codec::dispatch::{Backend, DispatchConfig, GpuPolicy};
        let backend = Backend::new(Arc::new(StoresAsIs), vec![shrinkfs_codec::CodecId::Zstd], "stores");
        // Launches of 40 frames, gathered for up to a second: the frames come back together.
        let cfg = DispatchConfig {
            policy: GpuPolicy::On,
            min_items: 40,
            batch_max_items: 40,
            batch_window: std::time::Duration::from_secs(1),
            one_stream: true,
            ..DispatchConfig::default()
        };
        let sink = memory_sink(backend, cfg);
        let store = sink.store.clone();
        let staging = tempfile::tempdir().unwrap();
        let config = EncodeConfig { frame_size: 64 << 10, ..EncodeConfig::default() };
        let mut up = Upload::new(sink, Path::from("f"), &config, staging.path()).unwrap();
        let data: Vec<u8> =
            (0..40u32 * (64 << 10) / 4).flat_map(|i| i.wrapping_mul(2_654_435_761).to_le_bytes()).collect();
        up.write(&data, &mut Taken::default()).await.unwrap();
        // Every frame encoded (each gives its budget back just before it is handed on), then the
        // next write finds them all ready together.
        let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while up.sink.budget.in_use() > 0 && std::time::Instant::now() < until {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        up.write(&[], &mut Taken::default()).await.unwrap();
        // The frames past what the spill keeps in memory went to its file in one append (two if
        // the first write's last look found some ready), where one append a frame made 39.
        assert!((1..=2).contains(&up.appends_sent), "{} appends for 40 frames found ready together", up.appends_sent);
        let sent = up.appends_sent;
        up.finish(&FileMeta::default()).await.unwrap();
        assert_eq!(up.appends_sent, sent, "nothing was left for finish");
        let object = store.get(&Path::from("f")).await.unwrap().bytes().await.unwrap();
        assert_eq!(shrinkfs_codec::decode_all(&object, None, &[]).unwrap(), data);
    }

    /// A batch back end whose every launch panics: the frames it took are lost (their encoders
    /// let go of them without a result).
    struct PanickingLaunches;

    impl shrinkfs_codec::dispatch::BatchBackend for PanickingLaunches {
        fn compress_batch(
            &self,
            _: shrinkfs_codec::CodecId,
            _: &[&[u8]],
            _: i32,
        ) -> shrinkfs_codec::dispatch::BatchResult {
            panic!("a launch that panics (test)");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_upload_that_lost_a_frame_is_never_finished_without_it() {
        use shrinkfs_codec::dispatch::{Backend, DispatchConfig, GpuPolicy};
        let backend = Backend::new(Arc::new(PanickingLaunches), vec![shrinkfs_codec::CodecId::Zstd], "panics");
        let cfg = DispatchConfig {
            policy: GpuPolicy::On,
            min_items: 1,
            batch_window: std::time::Duration::from_millis(1),
            ..DispatchConfig::default()
        };
        let sink = memory_sink(backend, cfg);
        let staging = tempfile::tempdir().unwrap();
        let config = EncodeConfig { frame_size: 64 << 10, ..EncodeConfig::default() };
        let mut up = Upload::new(sink, Path::from("f"), &config, staging.path()).unwrap();
        let text = b"a line of a log that compresses well\n".repeat(2_000);
        // Writes go on until one of them meets a lost frame (the panicking launches take the
        // first frames, then the dispatcher gives the rest to the cores).
        let mut failed = false;
        for _ in 0..200 {
            if up.write(&text, &mut Taken::default()).await.is_err() {
                failed = true;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        assert!(failed, "a write met the lost frame");
        // (Bounded: a wait that does not end fails the test instead of hanging it.)
        let finished = tokio::time::timeout(std::time::Duration::from_secs(20), up.finish(&FileMeta::default())).await;
        assert!(
            matches!(finished, Ok(Err(Error::Stopped("encoder")))),
            "finished without the lost frame, or waited on: {finished:?}"
        );
        let out = tempfile::tempfile().unwrap();
        assert!(up.recover_into(&out).await.is_err(), "a file rebuilt without the lost frame");
    }
}
