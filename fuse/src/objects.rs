//! Reading objects from the store: one suffix GET yields an object's size, ETag, layout and
//! metadata; reads fetch only the frames they touch (pinned to one ETag) and decode them on the
//! CPU pool, or a batch of them on the GPU where the dispatcher says, through the frame cache.

use std::borrow::Cow;
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::{Bytes, BytesMut};
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectMeta, ObjectStore};
use shrinkfs_codec::decoderoute::DecodeOn;
use shrinkfs_codec::format::IndexEntry;
use shrinkfs_codec::format::{FRAME_HEADER_LEN, FrameHeader};
use shrinkfs_codec::format::{FileMeta, Header};
use shrinkfs_codec::reader::SUGGESTED_TAIL;
use shrinkfs_codec::{
    CodecId, Dictionary, Layout, MasterKey, TailProbe, check_raw, decode_frame, open_payload, probe_tail,
};

use crate::cache::{ChunkCache, LayoutCache, ObjectId, Parsed, Recent};
use crate::config::ReaderConfig;
use crate::diskcache::Cached;
use crate::error::{Error, Result};
use crate::inflight::InFlight;
use crate::metrics::Metrics;
use crate::recorded::Recorded;

/// Frames decoded by number.
type Decoded = Vec<(usize, Bytes)>;

/// Reports the end of a try of the GPU on a codec when dropped (`Dispatcher::decode_try_ended`).
struct TryEnded(Arc<shrinkfs_codec::dispatch::Dispatcher>, CodecId);

impl Drop for TryEnded {
    fn drop(&mut self) {
        self.0.decode_try_ended(self.1);
    }
}

/// A batch's decode on the GPU: its codec, and whether it is a try on a copy, to measure the GPU
/// (`DecodeOn::CpuTryingGpu`).
#[derive(Debug, Clone, Copy)]
struct GpuBatch {
    codec: CodecId,
    trying: bool,
}

/// One version of one object, ready to read.
#[derive(Debug, Clone)]
pub struct ObjectInfo {
    /// Identity (key and ETag).
    pub id: ObjectId,
    /// Full key.
    pub path: Path,
    /// Stored size.
    pub stored: u64,
    /// Last modified time in the store.
    pub last_modified: SystemTime,
    /// Plain or framed.
    pub parsed: Parsed,
    /// The whole stored object, when the GET that read its index brought all of it (a small file
    /// about to be read): its frames are taken from here instead of fetched again.
    pub whole: Option<Bytes>,
}

impl ObjectInfo {
    /// Logical size.
    pub fn size(&self) -> u64 {
        match &self.parsed {
            Parsed::Plain => self.stored,
            Parsed::Framed { layout, .. } => layout.logical_size(),
        }
    }

    /// File metadata recorded with the object (none for plain objects).
    pub fn meta(&self) -> FileMeta {
        match &self.parsed {
            Parsed::Plain => FileMeta::default(),
            Parsed::Framed { layout, .. } => layout.meta,
        }
    }

    /// Modification time: the recorded one, else the store's.
    pub fn mtime(&self) -> SystemTime {
        self.meta().mtime.map_or(self.last_modified, crate::stamp::time)
    }

    /// Codec summary: "plain", or the codecs of its frames joined by '+'.
    pub fn codec_summary(&self) -> String {
        match &self.parsed {
            Parsed::Plain => "plain".into(),
            Parsed::Framed { layout, .. } => {
                let names: Vec<String> = layout.codec_usage().iter().map(|u| u.0.to_string()).collect();
                if names.is_empty() { "none".into() } else { names.join("+") }
            }
        }
    }
}

/// What a HEAD says of one object version.
#[derive(Debug, Clone)]
pub struct Head {
    /// The store's metadata (size, ETag, time).
    pub meta: ObjectMeta,
    /// The attributes recorded beside the object, when it has a valid record.
    pub recorded: Option<Recorded>,
}

impl Head {
    /// The ETag (or the identity made up for stores without one) of this version.
    pub fn etag(&self) -> Arc<str> {
        etag_of(&self.meta)
    }

    /// The store's modification time.
    pub fn last_modified(&self) -> SystemTime {
        system_time(&self.meta)
    }
}

/// Everything needed to read objects.
#[derive(Clone)]
pub struct Reader {
    /// The store.
    pub store: Arc<dyn ObjectStore>,
    /// Decoded frames.
    pub chunks: ChunkCache,
    /// Parsed layouts.
    pub layouts: LayoutCache,
    /// Key for sealed objects.
    pub key: Option<MasterKey>,
    /// zstd dictionaries.
    pub dicts: Vec<Arc<Dictionary>>,
    /// Counters.
    pub metrics: Arc<Metrics>,
    /// Routes large read batches to the GPU when one is in use.
    pub dispatcher: Arc<shrinkfs_codec::dispatch::Dispatcher>,
    /// Stored frames on local disk (`--cache-dir`).
    pub disk: Option<crate::diskcache::DiskCache>,
    /// Room for fetched and decoded frames in the mount's memory budget.
    pub budget: crate::budget::Budget,
    /// Frames being fetched: read-ahead skips them, and reads wait for them.
    inflight: InFlight,
    /// Cache sizes, fetch sizes, and whether unsealed objects are served with a key.
    pub cfg: ReaderConfig,
    /// What HEADs have found: whether any carried a record, and how many did not.
    records: Arc<RecordsSeen>,
    /// Small objects a lookup read whole (index and frames in one GET), for an open that follows
    /// within the metadata TTL (`Reader::recent_whole`).
    small: Recent<ObjectInfo>,
}

/// Bytes of small objects a `Reader` keeps for the opens that follow their lookups.
const SMALL_OBJECTS_BYTES: u64 = 32 << 20;

/// Whether this store returns the records objects carry: a server that drops user metadata, or a
/// bucket of objects from older versions or other tools, makes a HEAD before the footer a wasted
/// request, so after `RECORDLESS_HEADS` HEADs without one (and none with one) lookups read the
/// footer at once.
#[derive(Debug, Default)]
struct RecordsSeen {
    any: std::sync::atomic::AtomicBool,
    without: std::sync::atomic::AtomicU32,
}

/// HEADs without a record, none having had one, after which a lookup reads the footer directly.
const RECORDLESS_HEADS: u32 = 32;

/// Most frames an object may have for [`Reader::kept`] to look for all of them in the cache:
/// small files, whose reads would otherwise cost a request for a few frames.
const KEPT_FRAMES: usize = 4;

/// Frames this small stay in the frame cache when a sequential reader has passed them.
const SMALL_FRAME: usize = 64 << 10;

fn codec_err(path: &Path, source: shrinkfs_codec::Error) -> Error {
    Error::Codec { key: path.to_string(), source }
}

/// Marks an identity made up for a store that returns no ETag; it cannot be sent as If-Match.
const SYNTHETIC: &str = "synthetic:";

fn etag_of(meta: &ObjectMeta) -> Arc<str> {
    // Stores without ETags: size and time identify the version well enough to key caches.
    meta.e_tag
        .clone()
        .unwrap_or_else(|| {
            format!("{SYNTHETIC}{}-{}", meta.size, meta.last_modified.timestamp_nanos_opt().unwrap_or(0))
        })
        .into()
}

impl Reader {
    /// A reader of `store` as `cfg` says, decoding with `key` and `dicts` on `dispatcher`'s GPU
    /// or the CPU pool, keeping stored frames in `disk` too, within `budget`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        store: Arc<dyn ObjectStore>,
        cfg: ReaderConfig,
        key: Option<MasterKey>,
        dicts: Vec<Arc<Dictionary>>,
        metrics: Arc<Metrics>,
        dispatcher: Arc<shrinkfs_codec::dispatch::Dispatcher>,
        disk: Option<crate::diskcache::DiskCache>,
        budget: crate::budget::Budget,
    ) -> Self {
        Reader {
            store,
            chunks: ChunkCache::new(cfg.cache_bytes),
            layouts: LayoutCache::new(cfg.layout_bytes),
            key,
            dicts,
            metrics,
            dispatcher,
            disk,
            budget,
            inflight: InFlight::default(),
            cfg,
            records: Arc::default(),
            small: Recent::new(SMALL_OBJECTS_BYTES, |i: &ObjectInfo| {
                i.whole.as_ref().map_or(0, |w| w.len().min(u32::MAX as usize) as u32)
            }),
        }
    }

    /// Reads a small object's identity, layout and bytes in one suffix GET, as
    /// [`Self::stat_for_reading`] does, and keeps them for an open that follows
    /// ([`Self::recent_whole`]) when the GET brought the whole object.
    pub async fn stat_small(&self, path: &Path) -> Result<Option<ObjectInfo>> {
        let got = self.stat_keeping(path, true).await?;
        match &got {
            Some(info) if info.whole.is_some() => self.small.insert(path.as_ref(), info.clone()),
            _ => self.small.remove(path.as_ref()),
        }
        Ok(got)
    }

    /// The object at `path` as [`Self::stat_small`] read it less than `age` ago, if that was the
    /// version whose ETag is `etag`.
    pub fn recent_whole(&self, path: &Path, etag: &str, age: Duration) -> Option<ObjectInfo> {
        self.small.get(path.as_ref(), age).filter(|i| *i.id.etag == *etag)
    }

    /// Version `etag` of the object at `path` (last modified at `mtime`) from what is kept here
    /// alone: its layout, and every one of its frames decoded. `None` when reading it would need
    /// a request.
    pub fn kept(&self, path: &Path, etag: &str, mtime: SystemTime) -> Option<ObjectInfo> {
        let id = ObjectId { key: path.as_ref().into(), etag: etag.into() };
        let parsed = self.layouts.get(&id)?;
        let Parsed::Framed { layout, .. } = &parsed else { return None };
        let frames = layout.entries.len();
        if frames > KEPT_FRAMES || !(0..frames).all(|f| self.chunks.get(&id, f as u32).is_some()) {
            return None;
        }
        let stored = layout.stored_size();
        Some(ObjectInfo { id, path: path.clone(), stored, last_modified: mtime, parsed, whole: None })
    }

    /// Reads an object's identity and layout: one suffix GET (plus one more for objects whose
    /// index is larger than the first fetch, or whose head must be checked). `None` if absent.
    pub async fn stat(&self, path: &Path) -> Result<Option<ObjectInfo>> {
        self.stat_keeping(path, false).await
    }

    /// Like `stat`, for an object about to be read: when the suffix GET brought the whole object
    /// (a small file), the result keeps those bytes, so reading it costs no further request.
    pub async fn stat_for_reading(&self, path: &Path) -> Result<Option<ObjectInfo>> {
        self.stat_keeping(path, true).await
    }

    async fn stat_keeping(&self, path: &Path, keep: bool) -> Result<Option<ObjectInfo>> {
        // Servers that answer no suffix ranges are the store stack's concern (`store::compat`).
        let opts = GetOptions { range: Some(GetRange::Suffix(SUGGESTED_TAIL)), ..Default::default() };
        let (meta, range, tail) = match self.store.get_opts(path, opts).await {
            Ok(got) => {
                let (meta, range) = (got.meta.clone(), got.range.clone());
                (meta, range, got.bytes().await?)
            }
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let id = ObjectId { key: path.as_ref().into(), etag: etag_of(&meta) };
        let whole = (keep && range.start == 0 && range.end >= meta.size).then(|| tail.clone());
        let parsed = match self.layouts.get(&id) {
            Some(p) => p,
            None => {
                let p = self.parse(path, &meta, &id, range, tail).await?;
                self.check_sealed(path, &p)?;
                self.layouts.insert(id.clone(), p.clone());
                p
            }
        };
        Ok(Some(ObjectInfo {
            id,
            path: path.clone(),
            stored: meta.size,
            last_modified: system_time(&meta),
            parsed,
            whole,
        }))
    }

    /// What a HEAD tells of the object at `path`: the store's metadata and, on a mount without a
    /// key, the attributes it records beside its bytes (`recorded`). `None` if absent. A sealed
    /// mount believes no record: one is plain text anyone able to write could have put there, and
    /// sealed objects record none (their attributes are not published in the clear).
    pub async fn head(&self, path: &Path) -> Result<Option<Head>> {
        let opts = GetOptions { head: true, ..Default::default() };
        match self.store.get_opts(path, opts).await {
            Ok(got) => {
                let recorded = match self.key {
                    Some(_) => None,
                    None => Recorded::from_attributes(&got.attributes, got.meta.size),
                };
                use std::sync::atomic::Ordering::Relaxed;
                match recorded {
                    Some(_) => self.records.any.store(true, Relaxed),
                    None => {
                        self.records.without.fetch_add(1, Relaxed);
                    }
                }
                Ok(Some(Head { meta: got.meta, recorded }))
            }
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Whether the object at `path` is still the version whose ETag is `etag`, from its metadata
    /// alone (no record read); `None` if it is gone.
    pub async fn is_version(&self, path: &Path, etag: &str) -> Result<Option<bool>> {
        match self.store.head(path).await {
            Ok(meta) => Ok(Some(*etag_of(&meta) == *etag)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Whether a HEAD is likely to describe an object by itself (its record): never on a sealed
    /// mount; else until `RECORDLESS_HEADS` HEADs found none and none found one.
    pub fn expects_records(&self) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        self.key.is_none() && (self.records.any.load(Relaxed) || self.records.without.load(Relaxed) < RECORDLESS_HEADS)
    }

    /// With a key nothing unsealed is served: anyone able to write to the bucket could have put
    /// it there. Checked before a layout enters the cache, so `known` never serves one either.
    fn check_sealed(&self, path: &Path, parsed: &Parsed) -> Result<()> {
        let sealed = matches!(parsed, Parsed::Framed { layout, .. } if layout.header.sealed());
        if self.key.is_some() && !self.cfg.allow_unsealed && !sealed {
            return Err(codec_err(path, shrinkfs_codec::Error::NotSealed));
        }
        Ok(())
    }

    /// What the layout cache already knows of the object version a listing or HEAD describes:
    /// its attributes without another request.
    pub fn known(&self, meta: &ObjectMeta) -> Option<ObjectInfo> {
        let id = ObjectId { key: meta.location.as_ref().into(), etag: etag_of(meta) };
        let parsed = self.layouts.get(&id)?;
        Some(ObjectInfo {
            id,
            path: meta.location.clone(),
            stored: meta.size,
            last_modified: system_time(meta),
            parsed,
            whole: None,
        })
    }

    async fn parse(
        &self,
        path: &Path,
        meta: &ObjectMeta,
        id: &ObjectId,
        range: Range<u64>,
        tail: Bytes,
    ) -> Result<Parsed> {
        let len = meta.size;
        match probe_tail(&tail, len).map_err(|e| codec_err(path, e))? {
            TailProbe::Plain => {
                let head_magic = if range.start == 0 {
                    Header::has_magic(&tail)
                } else {
                    let head = self.get_range(path, id, 0..8, len).await?;
                    Header::has_magic(&head)
                };
                if head_magic {
                    return Err(codec_err(path, shrinkfs_codec::Error::no_footer(len)));
                }
                Ok(Parsed::Plain)
            }
            TailProbe::Shrinkfs { tail_len, .. } => {
                let tail = if tail_len > tail.len() as u64 {
                    self.get_range(path, id, len - tail_len..len, len).await?
                } else {
                    tail
                };
                let layout = Layout::parse(&tail, len).map_err(|e| codec_err(path, e))?;
                let ctx = layout.open(self.key.as_ref(), &self.dicts).map_err(|e| codec_err(path, e))?;
                Ok(Parsed::Framed { layout: Arc::new(layout), ctx: Arc::new(ctx) })
            }
        }
    }

    /// A ranged GET that fails (ESTALE) if the object is no longer the version `id` names.
    async fn get_range(&self, path: &Path, id: &ObjectId, range: Range<u64>, object_len: u64) -> Result<Bytes> {
        let if_match = (!id.etag.starts_with(SYNTHETIC)).then(|| id.etag.to_string());
        Ok(get_range(self.store.as_ref(), path, range, object_len, if_match).await?)
    }

    /// Stored bytes `range` of one object version: from the whole object when the lookup kept
    /// it, else one ranged GET.
    async fn stored_bytes(&self, info: &ObjectInfo, range: Range<u64>) -> Result<Bytes> {
        match &info.whole {
            Some(w) if range.end <= w.len() as u64 => Ok(w.slice(range.start as usize..range.end as usize)),
            _ => self.get_range(&info.path, &info.id, range, info.stored).await,
        }
    }

    /// Reads logical bytes `range` of one object version.
    pub async fn read(&self, info: &ObjectInfo, range: Range<u64>) -> Result<Bytes> {
        let end = range.end.min(info.size());
        if range.start >= end {
            return Ok(Bytes::new());
        }
        let (layout, ctx) = match &info.parsed {
            Parsed::Plain => {
                let bytes = match &info.whole {
                    Some(w) if end <= w.len() as u64 => w.slice(range.start as usize..end as usize),
                    _ => self.get_range(&info.path, &info.id, range.start..end, info.stored).await?,
                };
                self.metrics.logical_read(bytes.len() as u64);
                return Ok(bytes);
            }
            Parsed::Framed { layout, ctx } => (layout, ctx),
        };
        let frames = layout.frames_for(range.start..end);
        let mut decoded: Vec<Option<Bytes>> = frames.clone().map(|f| self.chunks.get(&info.id, f as u32)).collect();
        let missing: Vec<usize> = frames.clone().filter(|f| decoded[f - frames.start].is_none()).collect();
        self.metrics.cache(frames.len() - missing.len(), missing.len());
        if !missing.is_empty() {
            // (Room for every missing frame is taken before any is claimed, so a read waiting
            // for another's frames holds no claim that waits for room.)
            let _room = self.budget.take(missing.iter().map(|&f| frame_cost(&layout.entries[f])).sum()).await;
            // Frames another fetch (read-ahead, mostly) has on their way are waited for, and
            // those cached meanwhile (while this read waited for room, say) taken from the cache;
            // the others are fetched meanwhile. One whose fetch ended without it (failed, or
            // stopped) is fetched here after all.
            let (claim, joined) =
                self.inflight.claim_or_join(&info.id, &missing, |f| self.chunks.get(&info.id, f as u32));
            let fetch = async {
                let mut claim = claim;
                let own = claim.frames().to_vec();
                if own.is_empty() {
                    return Ok(Vec::new());
                }
                self.fetch_frames(info, layout, ctx, &own, |f, bytes| claim.release(f, bytes)).await
            };
            let (fetched, waited) = futures::join!(fetch, joined.wait());
            let mut fetched = fetched?;
            let mut again = Vec::new();
            for (f, bytes) in waited {
                match bytes {
                    Some(bytes) => decoded[f - frames.start] = Some(bytes),
                    None => again.push(f),
                }
            }
            if !again.is_empty() {
                fetched.extend(self.fetch_frames(info, layout, ctx, &again, |_, _| {}).await?);
            }
            for (f, bytes) in fetched {
                decoded[f - frames.start] = Some(bytes);
            }
        }
        let mut parts = frames.zip(decoded).map(|(f, bytes)| {
            let e = &layout.entries[f];
            let bytes = bytes.expect("every frame fetched or cached");
            let from = range.start.max(e.raw_offset) - e.raw_offset;
            let to = end.min(e.raw_offset + e.raw_len as u64) - e.raw_offset;
            bytes.slice(from as usize..to as usize)
        });
        // A read within one frame (the kernel's aligned readahead, usually) is a view of it.
        let first = parts.next().expect("a non-empty range covers a frame");
        self.metrics.logical_read(end - range.start);
        let Some(second) = parts.next() else { return Ok(first) };
        let mut out = BytesMut::with_capacity((end - range.start) as usize);
        for part in [first, second].into_iter().chain(parts) {
            out.extend_from_slice(&part);
        }
        Ok(out.freeze())
    }

    /// Fetches and decodes `frames` (sorted), filling the cache; ranged GETs run concurrently.
    /// `cached` is given each frame once it is in the cache.
    pub async fn fetch_frames(
        &self,
        info: &ObjectInfo,
        layout: &Arc<Layout>,
        ctx: &Arc<shrinkfs_codec::ObjectContext>,
        frames: &[usize],
        mut cached: impl FnMut(usize, &Bytes),
    ) -> Result<Vec<(usize, Bytes)>> {
        let mut slices = Vec::with_capacity(frames.len());
        let mut missing = Vec::with_capacity(frames.len());
        let mut from_disk = Vec::new();
        for &f in frames {
            match self.disk.as_ref().map_or(Cached::Miss, |d| d.get(&info.id, f, layout)) {
                Cached::Verified(b) => {
                    from_disk.push(f);
                    slices.push((f, b));
                }
                Cached::Damaged => {
                    // A damaged or foreign entry (the cache dropped it): fetch the frame again.
                    self.metrics.disk_cache_bad();
                    missing.push(f);
                }
                Cached::Miss => missing.push(f),
            }
        }
        if self.disk.is_some() {
            self.metrics.disk_cache(slices.len(), missing.len());
        }
        // Frames that may be served as views of what was fetched: from the disk cache (one frame
        // each), or from a fetch stored as it is throughout (a view then keeps no other frame's
        // bytes alive beyond what the frame cache counts).
        let mut views: Vec<usize> = slices.iter().map(|(f, _)| *f).collect();
        let fetches = layout.fetches(&missing, self.cfg.max_fetch);
        for fetch in &fetches {
            if fetch.frames.clone().all(|f| layout.entries[f].codec == CodecId::None) {
                views.extend(fetch.frames.clone());
            }
        }
        let gets = fetches.iter().map(|f| self.stored_bytes(info, f.range.clone()));
        let blobs = futures::future::try_join_all(gets).await?;
        let mut fetched = Vec::with_capacity(missing.len());
        for (fetch, blob) in fetches.into_iter().zip(blobs) {
            for f in fetch.frames.clone() {
                let r = layout.entries[f].stored_range();
                fetched.push((
                    f,
                    blob.slice((r.start - fetch.range.start) as usize..(r.end - fetch.range.start) as usize),
                ));
            }
        }
        if let Some(disk) = &self.disk
            && !fetched.is_empty()
        {
            let (disk, id, copy) = (disk.clone(), info.id.clone(), fetched.clone());
            tokio::task::spawn_blocking(move || {
                for (f, b) in copy {
                    disk.put(&id, f as u32, &b);
                }
            });
        }
        slices.extend(fetched);
        slices.sort_by_key(|s| s.0);
        // A batch of enough frames of a codec the GPU takes goes where the dispatcher says; its
        // time, from handing it over until its last frame is back, is reported either way.
        let bytes: u64 = slices.iter().map(|(f, _)| layout.entries[*f].raw_len as u64).sum();
        let route = self.gpu_codec(layout, ctx, &slices).and_then(|c| self.dispatcher.decode_on(c).map(|on| (c, on)));
        let began = std::time::Instant::now();
        if let Some((codec, DecodeOn::CpuTryingGpu)) = route {
            // The GPU on a copy, beside the CPU workers, to measure it: no reader waits for it.
            // (It holds the batch's fetched bytes and its output until it ends, outside the
            // memory budget: one try per codec at a time, see `DecodeRoute`.)
            let (me, info, layout, ctx) = (self.clone(), info.clone(), layout.clone(), ctx.clone());
            let (copy, views) = (slices.clone(), views.clone());
            tokio::spawn(async move {
                // However the try ends (a panic too), the next may come once due.
                let _ended = TryEnded(me.dispatcher.clone(), codec);
                let began = std::time::Instant::now();
                if let Ok(Some(_)) =
                    me.gpu_decode(&info, &layout, &ctx, &copy, &views, GpuBatch { codec, trying: true }).await
                {
                    me.dispatcher.decoded(codec, DecodeOn::Gpu, bytes, began.elapsed());
                }
            });
        }
        if let Some((codec, DecodeOn::Gpu)) = route
            && let Some(decoded) =
                self.gpu_decode(info, layout, ctx, &slices, &views, GpuBatch { codec, trying: false }).await?
        {
            let mut out = Vec::with_capacity(decoded.len());
            for (f, bytes) in decoded {
                self.metrics.frame_decoded();
                self.chunks.insert(&info.id, f as u32, bytes.clone());
                cached(f, &bytes);
                out.push((f, bytes));
            }
            self.dispatcher.decoded(codec, DecodeOn::Gpu, bytes, began.elapsed());
            return Ok(out);
        }
        let began = std::time::Instant::now();
        let mut jobs = Vec::new();
        {
            for (f, slice) in slices {
                let small = layout.entries[f].raw_len as usize <= shrinkfs_codec::dispatch::INLINE_MAX;
                let (layout, ctx, path) = (layout.clone(), ctx.clone(), info.path.clone());
                let (tx, rx) = tokio::sync::oneshot::channel();
                let view = views.contains(&f);
                let job = move || {
                    let res = decode_to_bytes(&ctx, f as u64, &slice, &layout.entries[f], view)
                        .map_err(|e| codec_err(&path, e));
                    let _ = tx.send(res);
                };
                // Small frames decode here: cheaper than waking a pool thread.
                if small {
                    job();
                } else {
                    shrinkfs_codec::workers::spawn(job);
                }
                jobs.push((f, rx));
            }
        }
        let mut out = Vec::with_capacity(jobs.len());
        for (f, rx) in jobs {
            let bytes = match rx.await.map_err(|_| Error::Stopped("decoder"))? {
                Ok(bytes) => bytes,
                // A disk-cache entry that passed its checks yet does not decode (a sealed frame
                // carries no checksum of its plain bytes the cache could compare, so another
                // object's frame under the same entry name gets this far): dropped, and the frame
                // fetched from the store.
                Err(e) if from_disk.contains(&f) => {
                    tracing::warn!(path = %info.path, frame = f, error = %e, "a cached frame does not decode: fetched again");
                    if let Some(disk) = &self.disk {
                        disk.remove(&info.id, f as u32);
                    }
                    self.metrics.disk_cache_bad();
                    let e = &layout.entries[f];
                    let stored = self.stored_bytes(info, e.stored_range()).await?;
                    decode_to_bytes(ctx, f as u64, &stored, e, false).map_err(|e| codec_err(&info.path, e))?
                }
                Err(e) => return Err(e),
            };
            self.metrics.frame_decoded();
            self.chunks.insert(&info.id, f as u32, bytes.clone());
            cached(f, &bytes);
            out.push((f, bytes));
        }
        if let Some((codec, DecodeOn::Cpu | DecodeOn::CpuTryingGpu)) = route {
            self.dispatcher.decoded(codec, DecodeOn::Cpu, bytes, began.elapsed());
        }
        Ok(out)
    }

    /// The GPU codec of a batch worth a choice between the GPU and the CPU workers: at least
    /// `gpu_decode_min_frames` frames of one codec the GPU may take, the others stored as they
    /// are, and no dictionary (nVCOMP takes none). A sealed object's frames carry no checksum of
    /// their decoded bytes (the seal covers what is stored), so what a GPU makes of them could be
    /// checked by length only: they stay on the CPU, `--gpu on` too.
    fn gpu_codec(
        &self,
        layout: &Layout,
        ctx: &shrinkfs_codec::ObjectContext,
        slices: &[(usize, Bytes)],
    ) -> Option<CodecId> {
        if ctx.dict().is_some() || ctx.header.sealed() {
            return None;
        }
        let (mut codec, mut frames) = (None, 0);
        for (f, _) in slices {
            match layout.entries[*f].codec {
                CodecId::None => {}
                c if codec.is_none_or(|k| k == c) => {
                    codec = Some(c);
                    frames += 1;
                }
                _ => return None,
            }
        }
        codec.filter(|_| frames >= self.cfg.gpu_decode_min_frames)
    }

    /// Decodes a batch's `codec` frames on the GPU in one call, and its frames stored as they are
    /// on this blocking thread first: checksums and seals are checked on the CPU before (nVCOMP
    /// does not validate its input), the decoded bytes after. `None`: the GPU failed (an error,
    /// a panic, or output that does not check, all counted as its failures), decode on the CPU
    /// instead. `trying`: a copy, to measure the GPU.
    async fn gpu_decode(
        &self,
        info: &ObjectInfo,
        layout: &Arc<Layout>,
        ctx: &Arc<shrinkfs_codec::ObjectContext>,
        slices: &[(usize, Bytes)],
        views: &[usize],
        how: GpuBatch,
    ) -> Result<Option<Decoded>> {
        let GpuBatch { codec, trying } = how;
        let (slices, layout, ctx, path, dispatcher) =
            (slices.to_vec(), layout.clone(), ctx.clone(), info.path.clone(), self.dispatcher.clone());
        let views = views.to_vec();
        let job = move || -> Result<Option<Decoded>> {
            let err = |e| codec_err(&path, e);
            let (gpu, stored): (Vec<_>, Vec<_>) = slices.iter().partition(|(f, _)| layout.entries[*f].codec == codec);
            let mut heads = Vec::with_capacity(gpu.len());
            let mut payloads = Vec::with_capacity(gpu.len());
            for (f, blob) in &gpu {
                let h = FrameHeader::parse(blob, *f as u64, ctx.header.sealed()).map_err(err)?;
                let p = open_payload(&ctx, *f as u64, &h, &blob[FRAME_HEADER_LEN..], Some(&layout.entries[*f]))
                    .map_err(err)?;
                heads.push(h);
                payloads.push(p);
            }
            let mut out = Vec::with_capacity(slices.len());
            for (f, blob) in stored {
                let view = views.contains(f);
                out.push((*f, decode_to_bytes(&ctx, *f as u64, blob, &layout.entries[*f], view).map_err(err)?));
            }
            let refs: Vec<&[u8]> = payloads.iter().map(|p| p.as_ref()).collect();
            let lens: Vec<usize> = heads.iter().map(|h| h.raw_len as usize).collect();
            let Some(raws) = dispatcher.gpu_decompress(codec, &refs, &lens, trying) else { return Ok(None) };
            for (((f, _), h), raw) in gpu.iter().zip(&heads).zip(raws) {
                // (The payload checked before, output that does not check is the decoder's fault.)
                if let Err(e) = check_raw(*f as u64, h, &raw) {
                    dispatcher.gpu_decode_failed(codec, trying, &format!("frame {f}: {e}"));
                    return Ok(None);
                }
                out.push((*f, Bytes::from(raw)));
            }
            if !trying {
                dispatcher.gpu_decoded(gpu.len());
            }
            out.sort_by_key(|(f, _)| *f);
            Ok(Some(out))
        };
        match tokio::task::spawn_blocking(job).await {
            Ok(done) => done,
            Err(e) => {
                self.dispatcher.gpu_decode_failed(codec, trying, &format!("the decode task ended: {e}"));
                Ok(None)
            }
        }
    }

    /// Fetches and decodes, in the background, up to `frames` frames from the first that begins
    /// at or after logical offset `from`, those neither cached nor already being fetched.
    pub fn prefetch(&self, info: &ObjectInfo, from: u64, frames: usize) {
        let Parsed::Framed { layout, ctx } = &info.parsed else { return };
        let Some(mut first) = layout.frame_at(from) else { return };
        // A frame that begins before `from` is the reader's own (its read ends inside it).
        if layout.entries[first].raw_offset < from {
            first += 1;
        }
        let last = (first + frames).min(layout.entries.len());
        let candidates: Vec<usize> = (first..last).filter(|&f| self.chunks.get(&info.id, f as u32).is_none()).collect();
        // Read-ahead only takes room that is free, never waiting for it, and gives each frame's
        // room back as soon as the frame is cached.
        let (mut room, mut starved) = (Vec::new(), false);
        let cached = |f: usize| self.chunks.get(&info.id, f as u32);
        let claim = self.inflight.claim(&info.id, &candidates, cached, |f| {
            match self.budget.try_take(frame_cost(&layout.entries[f])) {
                Some(held) => {
                    room.push(Some(held));
                    true
                }
                None => {
                    starved = true;
                    false
                }
            }
        });
        let wanted = claim.frames().to_vec();
        if starved {
            self.metrics.prefetch_skipped(candidates.len() - wanted.len());
        }
        if wanted.is_empty() {
            return;
        }
        self.metrics.prefetched(wanted.len());
        let (me, info, layout, ctx) = (self.clone(), info.clone(), layout.clone(), ctx.clone());
        tokio::spawn(async move {
            let mut claim = claim;
            // (`room` is in `wanted`'s order: one hold per frame claimed.)
            let cached = |f, bytes: &Bytes| {
                claim.release(f, bytes);
                if let Some(i) = wanted.iter().position(|&w| w == f) {
                    room[i] = None;
                }
            };
            if let Err(e) = me.fetch_frames(&info, &layout, &ctx, &wanted, cached).await {
                tracing::debug!(error = %e, "prefetch failed; reads will fetch on demand");
            }
        });
    }

    /// A sequential reader has passed logical bytes `behind` (see `readahead::Step`): the
    /// frames larger than [`SMALL_FRAME`] that end there leave the frame cache. The kernel's
    /// page cache keeps what was read; a scan through the mount then holds only the frames ahead
    /// of it, and the memory of those behind it is reused for the next ones. Filling the cache
    /// with frames behind it, each in fresh memory that faults in page by page, cost a 2-core
    /// machine's cold read of 1 GiB about 7% of its time (BENCHMARKS.md §5). Files of up to
    /// `KEPT_FRAMES` frames keep theirs for their next open (`Reader::kept`), and small frames
    /// cost little.
    pub fn passed(&self, info: &ObjectInfo, behind: Range<u64>) {
        let Parsed::Framed { layout, .. } = &info.parsed else { return };
        if layout.entries.len() <= KEPT_FRAMES {
            return;
        }
        for f in layout.frames_for(behind.clone()) {
            let e = &layout.entries[f];
            let end = e.raw_offset + e.raw_len as u64;
            // (Every frame `frames_for` gives ends after `behind.start`.)
            if end <= behind.end && e.raw_len as usize > SMALL_FRAME {
                self.chunks.forget(&info.id, f as u32);
            }
        }
    }

    /// Reads a whole object version (symlink targets, staging a file for rewrite).
    pub async fn read_all(&self, info: &ObjectInfo) -> Result<Vec<u8>> {
        Ok(self.read(info, 0..info.size()).await?.to_vec())
    }
}

/// The store's time of an object (before 1970 too: a file another program dated 1960 shows 1960).
fn system_time(meta: &ObjectMeta) -> std::time::SystemTime {
    crate::stamp::time((meta.last_modified.timestamp(), meta.last_modified.timestamp_subsec_nanos()))
}

/// Memory a frame takes while fetched and decoded: its stored and its raw bytes.
fn frame_cost(e: &shrinkfs_codec::format::IndexEntry) -> u64 {
    e.stored_range().end - e.stored_range().start + e.raw_len as u64
}

/// A ranged GET of `range` of an object of `object_len` bytes; a range covering the whole object
/// is sent as a plain GET. Fewer or more bytes than asked for (a store that clips the range to a
/// shorter object put under the key meanwhile, and ignores `if_match`) are an error, never a short
/// answer.
pub async fn get_range(
    store: &dyn ObjectStore,
    path: &Path,
    range: Range<u64>,
    object_len: u64,
    if_match: Option<String>,
) -> object_store::Result<Bytes> {
    let whole = range.start == 0 && range.end >= object_len;
    let expected = if whole { 0..object_len } else { range.clone() };
    let opts = GetOptions { range: (!whole).then_some(GetRange::Bounded(range)), if_match, ..Default::default() };
    let bytes = store.get_opts(path, opts).await?.bytes().await?;
    crate::store::compat::check_body(&expected, &bytes)?;
    Ok(bytes)
}

/// Decodes stored frame `frame`, checked against its index entry. A frame stored as it is
/// (codec none, unsealed) becomes, when `view`, a view of `stored` after its checks instead of a
/// copy.
fn decode_to_bytes(
    ctx: &shrinkfs_codec::ObjectContext,
    frame: u64,
    stored: &Bytes,
    entry: &IndexEntry,
    view: bool,
) -> shrinkfs_codec::Result<Bytes> {
    if view && entry.codec == CodecId::None {
        let header = FrameHeader::parse(stored, frame, ctx.header.sealed())?;
        if let Cow::Borrowed(raw) = open_payload(ctx, frame, &header, &stored[FRAME_HEADER_LEN..], Some(entry))? {
            check_raw(frame, &header, raw)?;
            return Ok(stored.slice_ref(raw));
        }
    }
    let mut out = Vec::new();
    decode_frame(ctx, frame, stored, Some(entry), &mut out)?;
    Ok(out.into())
}

#[cfg(test)]
mod tests {
    use object_store::memory::InMemory;

    use super::*;

    #[test]
    fn a_store_time_before_1970_keeps_its_date() {
        let t = crate::stamp::time((-315_619_200, 500_000_000));
        assert_eq!(
            std::time::UNIX_EPOCH.duration_since(t).unwrap(),
            Duration::from_millis(315_619_199_500),
            "1960-01-01 00:00:00.5"
        );
        assert_eq!(crate::stamp::time((5, 1)), std::time::UNIX_EPOCH + Duration::new(5, 1));
    }

    /// A store that answers a range past the end of a (shorter, replaced) object with what it has
    /// gives an error, not fewer bytes.
    #[tokio::test]
    async fn a_range_answered_short_is_an_error() {
        let store = InMemory::new();
        let path = Path::from("k");
        store.put(&path, vec![7u8; 100].into()).await.unwrap();
        assert_eq!(get_range(&store, &path, 10..60, 300, None).await.unwrap().len(), 50);
        assert!(get_range(&store, &path, 50..200, 300, None).await.is_err(), "clipped to the object");
        assert!(get_range(&store, &path, 0..300, 300, None).await.is_err(), "whole, but shorter");
        assert_eq!(get_range(&store, &path, 0..100, 100, None).await.unwrap().len(), 100);
    }
}
