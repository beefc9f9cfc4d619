//! A bound on the store requests in flight, over the whole mount: the fan-out of a large read
//! (many ranged GETs), of a listing's attribute prefetch and of uploads' parts waits here rather
//! than opening ever more connections. Like object_store's `LimitStore`, but one semaphore covers
//! the paged-listing and multipart extensions too, and the number in flight is a gauge.

use std::sync::Arc;

use async_trait::async_trait;
use futures::stream::BoxStream;
use futures::{FutureExt, StreamExt};
use object_store::list::{PaginatedListOptions, PaginatedListResult, PaginatedListStore};
use object_store::multipart::{MultipartStore, PartId};
use object_store::path::Path;
use object_store::{
    GetOptions, GetResult, GetResultPayload, ListResult, MultipartId, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, Result, UploadPart,
};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::Backend;
use crate::metrics::StoreMetrics;

/// At most `max` requests of the stack below at once.
#[derive(Debug)]
pub struct Limit {
    inner: Backend,
    permits: Arc<Semaphore>,
    metrics: StoreMetrics,
}

/// A permit, counted in the in-flight gauge while held.
struct Slot {
    _permit: OwnedSemaphorePermit,
    metrics: StoreMetrics,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.metrics.in_flight(-1);
    }
}

impl Limit {
    /// The layer over `inner` with `max` requests in flight (at least one).
    pub fn new(inner: Backend, max: usize, metrics: StoreMetrics) -> Self {
        Limit { inner, permits: Arc::new(Semaphore::new(max.max(1))), metrics }
    }

    async fn slot(&self) -> Slot {
        let permit = self.permits.clone().acquire_owned().await.expect("the semaphore is never closed");
        self.metrics.in_flight(1);
        Slot { _permit: permit, metrics: self.metrics.clone() }
    }
}

impl std::fmt::Display for Limit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Limit({})", self.inner.store)
    }
}

/// Holds `slot` until the stream ends or is dropped.
fn hold<T: Send + 'static>(s: BoxStream<'static, T>, slot: Slot) -> BoxStream<'static, T> {
    s.map(move |item| {
        let _ = &slot;
        item
    })
    .boxed()
}

#[async_trait]
impl ObjectStore for Limit {
    async fn put_opts(&self, location: &Path, payload: PutPayload, opts: PutOptions) -> Result<PutResult> {
        let _slot = self.slot().await;
        self.inner.store.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(&self, location: &Path, opts: PutMultipartOptions) -> Result<Box<dyn MultipartUpload>> {
        let upload = {
            let _slot = self.slot().await;
            self.inner.store.put_multipart_opts(location, opts).await?
        };
        Ok(Box::new(LimitUpload { upload, limit: self.permits.clone(), metrics: self.metrics.clone() }))
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let slot = self.slot().await;
        let mut got = self.inner.store.get_opts(location, options).await?;
        // The body is part of the request: the slot is held while it streams.
        got.payload = match got.payload {
            GetResultPayload::Stream(s) => GetResultPayload::Stream(hold(s, slot)),
            file @ GetResultPayload::File(..) => file,
        };
        Ok(got)
    }

    async fn head(&self, location: &Path) -> Result<ObjectMeta> {
        let _slot = self.slot().await;
        self.inner.store.head(location).await
    }

    async fn delete(&self, location: &Path) -> Result<()> {
        let _slot = self.slot().await;
        self.inner.store.delete(location).await
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        let (permits, metrics, inner) = (self.permits.clone(), self.metrics.clone(), self.inner.store.list(prefix));
        futures::stream::once(async move {
            let permit = permits.acquire_owned().await.expect("the semaphore is never closed");
            metrics.in_flight(1);
            hold(inner, Slot { _permit: permit, metrics })
        })
        .flatten()
        .boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        let _slot = self.slot().await;
        self.inner.store.list_with_delimiter(prefix).await
    }

    async fn copy(&self, from: &Path, to: &Path) -> Result<()> {
        let _slot = self.slot().await;
        self.inner.store.copy(from, to).await
    }

    async fn copy_if_not_exists(&self, from: &Path, to: &Path) -> Result<()> {
        let _slot = self.slot().await;
        self.inner.store.copy_if_not_exists(from, to).await
    }
}

/// A multipart upload whose parts each wait for a slot.
#[derive(Debug)]
struct LimitUpload {
    upload: Box<dyn MultipartUpload>,
    limit: Arc<Semaphore>,
    metrics: StoreMetrics,
}

#[async_trait]
impl MultipartUpload for LimitUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        // The part is registered with the upload now (its place in the object), sent once a slot
        // is free.
        let part = self.upload.put_part(data);
        let (limit, metrics) = (self.limit.clone(), self.metrics.clone());
        async move {
            let permit = limit.acquire_owned().await.expect("the semaphore is never closed");
            metrics.in_flight(1);
            let _slot = Slot { _permit: permit, metrics };
            part.await
        }
        .boxed()
    }

    async fn complete(&mut self) -> Result<PutResult> {
        self.upload.complete().await
    }

    async fn abort(&mut self) -> Result<()> {
        self.upload.abort().await
    }
}

#[async_trait]
impl PaginatedListStore for Limit {
    async fn list_paginated(&self, prefix: Option<&str>, opts: PaginatedListOptions) -> Result<PaginatedListResult> {
        let _slot = self.slot().await;
        self.inner.paged()?.list_paginated(prefix, opts).await
    }
}

#[async_trait]
impl MultipartStore for Limit {
    async fn create_multipart(&self, path: &Path) -> Result<MultipartId> {
        let _slot = self.slot().await;
        self.inner.parts()?.create_multipart(path).await
    }

    async fn put_part(&self, path: &Path, id: &MultipartId, part_idx: usize, data: PutPayload) -> Result<PartId> {
        let _slot = self.slot().await;
        self.inner.parts()?.put_part(path, id, part_idx, data).await
    }

    async fn complete_multipart(&self, path: &Path, id: &MultipartId, parts: Vec<PartId>) -> Result<PutResult> {
        let _slot = self.slot().await;
        self.inner.parts()?.complete_multipart(path, id, parts).await
    }

    async fn abort_multipart(&self, path: &Path, id: &MultipartId) -> Result<()> {
        let _slot = self.slot().await;
        self.inner.parts()?.abort_multipart(path, id).await
    }
}
