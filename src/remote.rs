//! Object URLs on the command line (`s3://bucket/key`): blocking `Read` and `Write` over an object
//! store, streamed at any size in bounded memory, so `pack`, `unpack` and `inspect` work on
//! objects in place.

use std::io::{self, Read, Write};
use std::sync::Arc;

use anyhow::Context;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{MultipartUpload, ObjectStore, PutPayload};
use shrinkfs_fuse::store::{self, Bucket, Source};
use tokio::task::JoinSet;

use crate::cli::S3Args;

/// Bytes per multipart part of an object written ([`RemoteWriter`]).
pub const PART_SIZE: usize = 8 << 20;
/// Parts of one object uploading at once. With the part being filled, a writer holds at most
/// `(PARTS_IN_FLIGHT + 1) * PART_SIZE` bytes (40 MiB), whatever the object's size.
pub const PARTS_IN_FLIGHT: usize = 4;

/// An object named on the command line.
pub struct Remote {
    /// Runtime driving the store's futures.
    pub rt: tokio::runtime::Runtime,
    /// The store.
    pub store: Arc<dyn ObjectStore>,
    /// The object's key.
    pub path: Path,
    /// For messages.
    pub url: String,
}

/// Whether an argument names an object rather than a local file.
pub fn is_url(s: &str) -> bool {
    s.starts_with("s3://")
}

/// Opens the store of `s3://bucket/key` (finding the credentials on the way).
pub fn open(url: &str, s3: &S3Args) -> anyhow::Result<Remote> {
    let source = Source::parse(url)?;
    let key = match &source {
        Source::S3 { prefix, .. } if !prefix.is_empty() => prefix.clone(),
        _ => anyhow::bail!(crate::exit::UsageError(format!("{url:?} names no object (expected s3://bucket/key)"))),
    };
    let bucket_only = match &source {
        Source::S3 { bucket, .. } => Source::S3 { bucket: bucket.clone(), prefix: String::new() },
        other => other.clone(),
    };
    let options = s3.options()?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("cannot start the runtime")?;
    let Bucket { store, .. } = rt.block_on(store::open(&bucket_only, &options))?;
    let path = Path::parse(&key).with_context(|| format!("bad key {key:?}"))?;
    Ok(Remote { rt, store, path, url: url.to_owned() })
}

/// A blocking reader over an object's bytes.
pub struct ObjectReader {
    rt: tokio::runtime::Handle,
    stream: BoxStream<'static, object_store::Result<Bytes>>,
    buf: Bytes,
}

impl Remote {
    /// Starts reading the whole object; returns the reader and the object's size.
    pub fn reader(&self) -> anyhow::Result<(ObjectReader, u64)> {
        let got = self.rt.block_on(self.store.get(&self.path)).with_context(|| format!("cannot read {}", self.url))?;
        let size = got.meta.size;
        Ok((ObjectReader { rt: self.rt.handle().clone(), stream: got.into_stream(), buf: Bytes::new() }, size))
    }

    /// Starts writing the object; it appears only when `RemoteWriter::commit` succeeds.
    pub fn writer(&self) -> RemoteWriter {
        RemoteWriter {
            rt: self.rt.handle().clone(),
            store: self.store.clone(),
            path: self.path.clone(),
            buf: Vec::new(),
            upload: None,
            parts: JoinSet::new(),
        }
    }
}

impl Read for ObjectReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        while self.buf.is_empty() {
            match self.rt.block_on(self.stream.next()) {
                None => return Ok(0),
                Some(Ok(b)) => self.buf = b,
                Some(Err(e)) => return Err(io::Error::other(e)),
            }
        }
        let n = out.len().min(self.buf.len());
        out[..n].copy_from_slice(&self.buf.split_to(n));
        Ok(n)
    }
}

/// A blocking writer of one object, in bounded memory: bytes are gathered into parts of
/// [`PART_SIZE`], each uploaded on the runtime while the next fills, [`PARTS_IN_FLIGHT`] at most.
/// An object smaller than one part is one PUT at `commit`. Nothing is visible under the key
/// before `commit` succeeds; a failed part, a failed `commit` or a drop before it aborts the
/// multipart upload, so the store keeps none of its parts.
///
/// (object_store's `WriteMultipart` spawns its part uploads from `write`, which panics outside
/// the runtime, and leaves the upload behind when a part fails; this writer is driven inside the
/// runtime and aborts.)
pub struct RemoteWriter {
    rt: tokio::runtime::Handle,
    store: Arc<dyn ObjectStore>,
    path: Path,
    /// The part being filled.
    buf: Vec<u8>,
    /// The multipart upload, once the first part is full.
    upload: Option<Box<dyn MultipartUpload>>,
    /// Parts uploading.
    parts: JoinSet<object_store::Result<()>>,
}

impl RemoteWriter {
    /// Uploads the filled part; waits while [`PARTS_IN_FLIGHT`] parts are uploading.
    fn ship(&mut self) -> object_store::Result<()> {
        let part = PutPayload::from(std::mem::take(&mut self.buf));
        let upload = match &mut self.upload {
            Some(u) => u,
            None => self.upload.insert(self.rt.block_on(self.store.put_multipart(&self.path))?),
        };
        self.parts.spawn_on(upload.put_part(part), &self.rt);
        while let Some(done) = self.parts.try_join_next() {
            settle(done)?;
        }
        while self.parts.len() >= PARTS_IN_FLIGHT {
            match self.rt.block_on(self.parts.join_next()) {
                Some(done) => settle(done)?,
                None => break,
            }
        }
        Ok(())
    }

    /// Completes the object: it appears under its key, whole.
    pub fn commit(mut self) -> anyhow::Result<()> {
        let Some(mut upload) = self.upload.take() else {
            let payload = PutPayload::from(std::mem::take(&mut self.buf));
            self.rt.block_on(self.store.put(&self.path, payload)).context("cannot write the object")?;
            return Ok(());
        };
        let rt = self.rt.clone();
        let last = PutPayload::from(std::mem::take(&mut self.buf));
        let mut parts = std::mem::take(&mut self.parts);
        let finished = rt.block_on(async {
            if last.content_length() > 0 {
                parts.spawn(upload.put_part(last));
            }
            while let Some(done) = parts.join_next().await {
                settle(done)?;
            }
            upload.complete().await
        });
        if let Err(e) = finished {
            rt.block_on(async {
                parts.shutdown().await;
                let _ = upload.abort().await;
            });
            return Err(e).context("cannot complete the upload (aborted; nothing was stored)");
        }
        Ok(())
    }
}

/// The result of a part's task.
fn settle(done: Result<object_store::Result<()>, tokio::task::JoinError>) -> object_store::Result<()> {
    done.map_err(|e| object_store::Error::Generic { store: "S3", source: Box::new(e) })?
}

impl Write for RemoteWriter {
    fn write(&mut self, mut buf: &[u8]) -> io::Result<usize> {
        let len = buf.len();
        while !buf.is_empty() {
            if self.buf.capacity() == 0 {
                self.buf.reserve_exact(PART_SIZE);
            }
            let n = buf.len().min(PART_SIZE - self.buf.len());
            self.buf.extend_from_slice(&buf[..n]);
            buf = &buf[n..];
            if self.buf.len() == PART_SIZE {
                self.ship().map_err(io::Error::other)?;
            }
        }
        Ok(len)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for RemoteWriter {
    fn drop(&mut self) {
        // Not committed (an error on the way): no part of it may stay in the store.
        if let Some(mut upload) = self.upload.take() {
            let mut parts = std::mem::take(&mut self.parts);
            self.rt.block_on(async {
                parts.shutdown().await;
                if let Err(e) = upload.abort().await {
                    tracing::warn!(error = %e, "could not abort the multipart upload");
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    use object_store::memory::InMemory;
    use object_store::{
        GetOptions, GetResult, ListResult, ObjectMeta, PutMultipartOptions, PutOptions, PutResult, UploadPart,
    };

    use super::*;

    /// An in-memory store whose parts take a while and count the bytes uploading at once.
    #[derive(Debug, Default)]
    struct Slow {
        inner: InMemory,
        watch: Arc<Watch>,
    }

    #[derive(Debug, Default)]
    struct Watch {
        in_flight: AtomicUsize,
        peak: AtomicUsize,
        aborted: AtomicBool,
        /// Fails this part (0-based).
        fail_part: Option<usize>,
    }

    impl std::fmt::Display for Slow {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("Slow")
        }
    }

    #[async_trait::async_trait]
    impl ObjectStore for Slow {
        async fn put_opts(&self, p: &Path, b: PutPayload, o: PutOptions) -> object_store::Result<PutResult> {
            self.inner.put_opts(p, b, o).await
        }
        async fn put_multipart_opts(
            &self,
            p: &Path,
            o: PutMultipartOptions,
        ) -> object_store::Result<Box<dyn MultipartUpload>> {
            let inner = self.inner.put_multipart_opts(p, o).await?;
            Ok(Box::new(SlowUpload { inner, next: 0, watch: self.watch.clone() }))
        }
        async fn get_opts(&self, p: &Path, o: GetOptions) -> object_store::Result<GetResult> {
            self.inner.get_opts(p, o).await
        }
        async fn head(&self, p: &Path) -> object_store::Result<ObjectMeta> {
            self.inner.head(p).await
        }
        async fn delete(&self, p: &Path) -> object_store::Result<()> {
            self.inner.delete(p).await
        }
        fn list(&self, p: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
            self.inner.list(p)
        }
        async fn list_with_delimiter(&self, p: Option<&Path>) -> object_store::Result<ListResult> {
            self.inner.list_with_delimiter(p).await
        }
        async fn copy(&self, a: &Path, b: &Path) -> object_store::Result<()> {
            self.inner.copy(a, b).await
        }
        async fn copy_if_not_exists(&self, a: &Path, b: &Path) -> object_store::Result<()> {
            self.inner.copy_if_not_exists(a, b).await
        }
    }

    #[derive(Debug)]
    struct SlowUpload {
        inner: Box<dyn MultipartUpload>,
        next: usize,
        watch: Arc<Watch>,
    }

    #[async_trait::async_trait]
    impl MultipartUpload for SlowUpload {
        fn put_part(&mut self, data: PutPayload) -> UploadPart {
            let len = data.content_length();
            let now = self.watch.in_flight.fetch_add(len, Ordering::SeqCst) + len;
            self.watch.peak.fetch_max(now, Ordering::SeqCst);
            let fail = self.watch.fail_part == Some(self.next);
            self.next += 1;
            let part = self.inner.put_part(data);
            let watch = self.watch.clone();
            Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(20)).await;
                watch.in_flight.fetch_sub(len, Ordering::SeqCst);
                if fail {
                    return Err(object_store::Error::Generic { store: "Slow", source: "part refused".into() });
                }
                part.await
            })
        }
        async fn complete(&mut self) -> object_store::Result<PutResult> {
            self.inner.complete().await
        }
        async fn abort(&mut self) -> object_store::Result<()> {
            self.watch.aborted.store(true, Ordering::SeqCst);
            self.inner.abort().await
        }
    }

    use std::time::Duration;

    fn remote(watch: Watch) -> (Remote, Arc<Watch>) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let store = Slow { inner: InMemory::new(), watch: Arc::new(watch) };
        let watch = store.watch.clone();
        (Remote { rt, store: Arc::new(store), path: Path::from("k"), url: "s3://b/k".into() }, watch)
    }

    fn stored(r: &Remote) -> Option<Vec<u8>> {
        let got = r.rt.block_on(r.store.get(&r.path)).ok()?;
        Some(r.rt.block_on(got.bytes()).unwrap().to_vec())
    }

    #[test]
    fn a_large_object_goes_up_in_parts_with_bounded_bytes_in_flight() {
        let (r, watch) = remote(Watch::default());
        let data: Vec<u8> = (0..12 * PART_SIZE + 12345).map(|i| (i * 7 % 251) as u8).collect();
        let mut w = r.writer();
        // Called from outside the runtime, as the CLI does (this once panicked: "no reactor").
        for chunk in data.chunks(1 << 20) {
            w.write_all(chunk).unwrap();
        }
        w.commit().unwrap();
        assert!(stored(&r).unwrap() == data);
        let peak = watch.peak.load(Ordering::SeqCst);
        assert!(peak <= PARTS_IN_FLIGHT * PART_SIZE, "{} MiB uploading at once", peak >> 20);
        assert!(peak >= 2 * PART_SIZE, "parts went up one at a time ({} MiB)", peak >> 20);
        assert!(!watch.aborted.load(Ordering::SeqCst));
    }

    #[test]
    fn a_failed_part_aborts_the_upload_and_stores_nothing() {
        for fail_part in [1, 5] {
            let (r, watch) = remote(Watch { fail_part: Some(fail_part), ..Watch::default() });
            let mut w = r.writer();
            let mut failed = false;
            for _ in 0..7 {
                if w.write_all(&vec![1u8; PART_SIZE]).is_err() {
                    failed = true;
                    break;
                }
            }
            // Failed while writing (dropped: aborted) or at the end (commit aborts).
            let committed = if failed {
                drop(w);
                Err(anyhow::anyhow!("write"))
            } else {
                w.commit()
            };
            assert!(committed.is_err(), "part {fail_part}");
            assert!(watch.aborted.load(Ordering::SeqCst), "part {fail_part}: not aborted");
            assert!(stored(&r).is_none(), "part {fail_part}: an object appeared");
        }
    }

    #[test]
    fn small_and_empty_objects_are_one_put() {
        for len in [0, 1, PART_SIZE - 1] {
            let (r, watch) = remote(Watch::default());
            let mut w = r.writer();
            w.write_all(&vec![9u8; len]).unwrap();
            w.commit().unwrap();
            assert_eq!(stored(&r).unwrap().len(), len);
            assert_eq!(watch.peak.load(Ordering::SeqCst), 0, "no multipart upload for {len} bytes");
        }
    }
}
