//! The top of the stack: every request the filesystem makes is recorded once, by kind and
//! outcome, with its latency (retries included) and the bytes it moved. Nothing in the core
//! counts store requests itself.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use async_trait::async_trait;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::{FutureExt, StreamExt};
use object_store::list::{PaginatedListOptions, PaginatedListResult, PaginatedListStore};
use object_store::multipart::{MultipartStore, PartId};
use object_store::path::Path;
use object_store::{
    GetOptions, GetResult, GetResultPayload, ListResult, MultipartId, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, Result, UploadPart,
};

use super::Backend;
use super::compat::outcome;
use crate::metrics::{Outcome, StoreMetrics};

/// The kind label of a GET: `head`, `get_range` (any range) or `get`.
pub fn get_kind(options: &GetOptions) -> &'static str {
    match (options.head, &options.range) {
        (true, _) => "head",
        (false, Some(_)) => "get_range",
        (false, None) => "get",
    }
}

/// Records the publication of an object written in place in a local-directory bucket into
/// `metrics`: a `put_in_place` request whose `total` bytes went to the bucket's disk without a
/// store request.
pub fn in_place<T>(
    metrics: &StoreMetrics,
    total: u64,
    publish: impl FnOnce() -> object_store::Result<T>,
) -> object_store::Result<T> {
    let start = Instant::now();
    let r = publish();
    metrics.request("put_in_place", outcome(&r), start.elapsed());
    if r.is_ok() {
        metrics.written(total);
    }
    r
}

/// Records every request into `metrics`.
#[derive(Debug)]
pub struct Instrumented {
    inner: Backend,
    metrics: StoreMetrics,
}

impl Instrumented {
    /// The layer over `inner`.
    pub fn new(inner: Backend, metrics: StoreMetrics) -> Self {
        Instrumented { inner, metrics }
    }

    async fn timed<T>(&self, kind: &'static str, f: impl Future<Output = Result<T>>) -> Result<T> {
        timed(&self.metrics, kind, f).await
    }
}

async fn timed<T>(metrics: &StoreMetrics, kind: &'static str, f: impl Future<Output = Result<T>>) -> Result<T> {
    let start = Instant::now();
    let r = f.await;
    metrics.request(kind, outcome(&r), start.elapsed());
    r
}

impl std::fmt::Display for Instrumented {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Instrumented({})", self.inner.store)
    }
}

/// Records a listing when its stream ends or is dropped: an error anywhere makes it one.
struct ListRecord {
    metrics: StoreMetrics,
    start: Instant,
    failed: Arc<AtomicBool>,
}

impl Drop for ListRecord {
    fn drop(&mut self) {
        let outcome = if self.failed.load(Ordering::Relaxed) { Outcome::Error } else { Outcome::Ok };
        self.metrics.request("list", outcome, self.start.elapsed());
    }
}

#[async_trait]
impl ObjectStore for Instrumented {
    async fn put_opts(&self, location: &Path, payload: PutPayload, opts: PutOptions) -> Result<PutResult> {
        let n = payload.content_length() as u64;
        let r = self.timed("put", self.inner.store.put_opts(location, payload, opts)).await;
        if r.is_ok() {
            self.metrics.written(n);
        }
        r
    }

    async fn put_multipart_opts(&self, location: &Path, opts: PutMultipartOptions) -> Result<Box<dyn MultipartUpload>> {
        let upload = self.timed("multipart_start", self.inner.store.put_multipart_opts(location, opts)).await?;
        Ok(Box::new(Upload { upload, metrics: self.metrics.clone() }))
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let kind = get_kind(&options);
        let mut got = self.timed(kind, self.inner.store.get_opts(location, options)).await?;
        let metrics = self.metrics.clone();
        got.payload = match got.payload {
            GetResultPayload::Stream(s) => GetResultPayload::Stream(
                s.inspect(move |chunk| {
                    if let Ok(b) = chunk {
                        metrics.read(b.len() as u64);
                    }
                })
                .boxed(),
            ),
            // A local file is read whole by its reader (`bytes`): counted here, by its range.
            file @ GetResultPayload::File(..) => {
                metrics.read(got.range.end - got.range.start);
                file
            }
        };
        Ok(got)
    }

    async fn head(&self, location: &Path) -> Result<ObjectMeta> {
        self.timed("head", self.inner.store.head(location)).await
    }

    async fn delete(&self, location: &Path) -> Result<()> {
        self.timed("delete", self.inner.store.delete(location)).await
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        let failed = Arc::new(AtomicBool::new(false));
        let record = ListRecord { metrics: self.metrics.clone(), start: Instant::now(), failed: failed.clone() };
        self.inner
            .store
            .list(prefix)
            .map(move |item| {
                let _ = &record;
                if item.is_err() {
                    failed.store(true, Ordering::Relaxed);
                }
                item
            })
            .boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.timed("list_delimiter", self.inner.store.list_with_delimiter(prefix)).await
    }

    async fn copy(&self, from: &Path, to: &Path) -> Result<()> {
        self.timed("copy", self.inner.store.copy(from, to)).await
    }

    async fn copy_if_not_exists(&self, from: &Path, to: &Path) -> Result<()> {
        self.timed("copy", self.inner.store.copy_if_not_exists(from, to)).await
    }
}

/// An upload through `put_multipart`, its parts and completion recorded.
#[derive(Debug)]
struct Upload {
    upload: Box<dyn MultipartUpload>,
    metrics: StoreMetrics,
}

#[async_trait]
impl MultipartUpload for Upload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        let n = data.content_length() as u64;
        let part: BoxFuture<'static, Result<()>> = self.upload.put_part(data);
        let metrics = self.metrics.clone();
        async move {
            let r = timed(&metrics, "put_part", part).await;
            if r.is_ok() {
                metrics.written(n);
            }
            r
        }
        .boxed()
    }

    async fn complete(&mut self) -> Result<PutResult> {
        timed(&self.metrics, "multipart_complete", self.upload.complete()).await
    }

    async fn abort(&mut self) -> Result<()> {
        timed(&self.metrics, "multipart_abort", self.upload.abort()).await
    }
}

#[async_trait]
impl PaginatedListStore for Instrumented {
    async fn list_paginated(&self, prefix: Option<&str>, opts: PaginatedListOptions) -> Result<PaginatedListResult> {
        self.timed("list_page", self.inner.paged()?.list_paginated(prefix, opts)).await
    }
}

#[async_trait]
impl MultipartStore for Instrumented {
    async fn create_multipart(&self, path: &Path) -> Result<MultipartId> {
        self.timed("multipart_start", self.inner.parts()?.create_multipart(path)).await
    }

    async fn put_part(&self, path: &Path, id: &MultipartId, part_idx: usize, data: PutPayload) -> Result<PartId> {
        let n = data.content_length() as u64;
        let r = self.timed("put_part", self.inner.parts()?.put_part(path, id, part_idx, data)).await;
        if r.is_ok() {
            self.metrics.written(n);
        }
        r
    }

    async fn complete_multipart(&self, path: &Path, id: &MultipartId, parts: Vec<PartId>) -> Result<PutResult> {
        self.timed("multipart_complete", self.inner.parts()?.complete_multipart(path, id, parts)).await
    }

    async fn abort_multipart(&self, path: &Path, id: &MultipartId) -> Result<()> {
        self.timed("multipart_abort", self.inner.parts()?.abort_multipart(path, id)).await
    }
}
