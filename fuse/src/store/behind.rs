//! Deletes done behind the caller: the layer of a mount's store stack that lets an unlink return
//! once its DELETE is queued, and keeps every later request in order with the deletes still
//! running. A request for a key whose delete is queued waits for it; a listing leaves out the
//! keys whose deletes were queued when it started, so nothing this mount deleted comes back.
//! [`Deletes::settle`] waits for the queue (fsync of a directory, unmount) and reports the deletes
//! that failed. The first delete, and every one after a failure, runs in the caller, so a bucket
//! that refuses deletes says so to the unlink. Only this mount's requests are kept in order: a
//! file another writer stores under the name before the queued DELETE runs is deleted by it, so
//! a mount queues deletes only when told the bucket is its own (see `FsConfig::deletes_behind`).

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::list::{PaginatedListOptions, PaginatedListResult, PaginatedListStore};
use object_store::multipart::{MultipartStore, PartId};
use object_store::path::Path;
use object_store::{
    GetOptions, GetResult, ListResult, MultipartId, MultipartUpload, ObjectMeta, ObjectStore, PutMultipartOptions,
    PutOptions, PutPayload, PutResult, Result,
};
use tokio::sync::{Semaphore, watch};

use super::Backend;
use crate::metrics::StoreMetrics;

/// Deletes that may run behind their unlinks at once on a bucket only the mount writes.
pub const DEFAULT_DELETES_BEHIND: usize = 4096;

/// Queued deletes sent to the store at once: a quarter of the mount's default request limit, so
/// a long queue never holds back the reads and writes that come after it.
const DELETES_IN_FLIGHT: usize = 16;

/// Most keys an S3 listing returns per page.
const MAX_PAGE_KEYS: usize = 1000;

/// The queue of deletes running behind their callers, shared by the layer and the filesystem.
pub struct Deletes {
    /// The stack under the layer: where queued deletes go.
    below: Arc<dyn ObjectStore>,
    /// Each queued key, with the signal its delete sends when done.
    pending: Mutex<BTreeMap<String, watch::Receiver<bool>>>,
    /// Entries of `pending` (read without the lock on every request).
    count: AtomicUsize,
    /// One permit per delete that may be queued.
    room: Arc<Semaphore>,
    /// One permit per queued delete sent to the store.
    sending: Semaphore,
    /// A delete succeeded since the last one failed: new deletes may be queued.
    proven: AtomicBool,
    /// Queued deletes that failed, not yet reported by [`Self::settle`].
    failed: Mutex<Vec<(String, String)>>,
    /// Queued deletes that failed, ever.
    failures: AtomicUsize,
    metrics: StoreMetrics,
}

impl std::fmt::Debug for Deletes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Deletes({} queued)", self.count.load(Ordering::Relaxed))
    }
}

/// Why a [`Deletes::settle`] failed: deletes queued behind their unlinks that the store refused.
#[derive(Debug, thiserror::Error)]
#[error(
    "{count} delete(s) queued behind their unlinks failed (first: {key}: {reason}); the object(s) are still in the bucket"
)]
pub struct DeletesFailed {
    /// How many failed.
    pub count: usize,
    /// The first one's key.
    pub key: String,
    /// What the store said.
    pub reason: String,
}

impl Deletes {
    /// Deletes `key`: queued to run behind the caller when a delete has succeeded lately and
    /// there is room (`Ok(true)`), else now (`Ok(false)`, or the store's error). A request for
    /// `key` from here on waits for it.
    pub async fn delete(self: &Arc<Self>, key: &Path) -> Result<bool> {
        if !self.proven.load(Ordering::Acquire) {
            let r = self.wait_then(key, self.below.delete(key)).await;
            self.proven.store(deleted(&r), Ordering::Release);
            return r.map(|()| false);
        }
        let Ok(permit) = self.room.clone().acquire_owned().await else {
            return self.wait_then(key, self.below.delete(key)).await.map(|()| false);
        };
        let (done, rx) = watch::channel(false);
        loop {
            let earlier = {
                let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
                match pending.get(key.as_ref()) {
                    Some(earlier) => earlier.clone(),
                    None => {
                        pending.insert(key.as_ref().to_owned(), rx);
                        break;
                    }
                }
            };
            wait(earlier).await;
        }
        self.count.fetch_add(1, Ordering::AcqRel);
        self.metrics.deletes_behind(1);
        let mut queued = Queued { deletes: self.clone(), key: key.clone(), done, _room: permit, ran: false };
        tokio::spawn(async move {
            let this = queued.deletes.clone();
            let sending = this.sending.acquire().await;
            let r = this.below.delete(&queued.key).await;
            drop(sending);
            queued.ran = true;
            if let (false, Err(e)) = (deleted(&r), &r) {
                this.failed(queued.key.as_ref(), &e.to_string());
            }
        });
        Ok(true)
    }

    /// Records that the queued delete of `key` failed, for `settle` to report, and makes the
    /// next deletes run inside their unlinks.
    fn failed(&self, key: &str, reason: &str) {
        tracing::error!(key, reason, "a delete queued behind its unlink failed: the object is still in the bucket");
        self.proven.store(false, Ordering::Release);
        self.failed.lock().unwrap_or_else(PoisonError::into_inner).push((key.to_owned(), reason.to_owned()));
        self.failures.fetch_add(1, Ordering::AcqRel);
    }

    /// Queued deletes that failed since the mount started (each left a name in the bucket that
    /// this mount had removed).
    pub fn failures(&self) -> usize {
        self.failures.load(Ordering::Acquire)
    }

    /// Waits for every queued delete, then reports those that failed and that no report took
    /// yet: once, to the first `take` (the next fsync of any directory), and to every other call
    /// until then (the unmount, so its exit status shows them).
    pub async fn settle(&self, take: bool) -> Result<(), DeletesFailed> {
        for (_, rx) in self.under("") {
            wait(rx).await;
        }
        let mut failed = self.failed.lock().unwrap_or_else(PoisonError::into_inner);
        let count = failed.len();
        let first = match take {
            true => failed.drain(..).next(),
            false => failed.first().cloned(),
        };
        match first {
            None => Ok(()),
            Some((key, reason)) => Err(DeletesFailed { count, key, reason }),
        }
    }

    /// Deletes queued now.
    pub fn queued(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }

    /// The queued deletes of keys starting with `prefix`: each key with its signal.
    fn under(&self, prefix: &str) -> Vec<(String, watch::Receiver<bool>)> {
        if self.queued() == 0 {
            return Vec::new();
        }
        let pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        pending
            .range::<str, _>((std::ops::Bound::Included(prefix), std::ops::Bound::Unbounded))
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, rx)| (k.clone(), rx.clone()))
            .collect()
    }

    /// Waits for a queued delete of `key`, if there is one, then runs `f`.
    async fn wait_then<T>(&self, key: &Path, f: impl Future<Output = T>) -> T {
        if self.queued() > 0 {
            let earlier = self.pending.lock().unwrap_or_else(PoisonError::into_inner).get(key.as_ref()).cloned();
            if let Some(rx) = earlier {
                wait(rx).await;
            }
        }
        f.await
    }

    /// What a listing of the keys under `prefix` must leave out: the keys queued for deletion
    /// now. With `grouped` (a listing by directory), it first waits for queued deletes of keys
    /// in subdirectories, which would show as a subdirectory that is about to go.
    async fn hidden(&self, prefix: &str, grouped: bool) -> HashSet<String> {
        if grouped {
            for (_, rx) in self.under(prefix).into_iter().filter(|(k, _)| k[prefix.len()..].contains('/')) {
                wait(rx).await;
            }
        }
        self.under(prefix).into_iter().map(|(k, _)| k).collect()
    }
}

/// A queued delete's place in the queue, given back when its task ends, however it ends (a
/// task dropped with the runtime, or one that panicked, must not leave its key waited for).
struct Queued {
    deletes: Arc<Deletes>,
    key: Path,
    done: watch::Sender<bool>,
    _room: tokio::sync::OwnedSemaphorePermit,
    /// Its DELETE was sent and answered.
    ran: bool,
}

impl Drop for Queued {
    fn drop(&mut self) {
        let d = &self.deletes;
        if !self.ran {
            d.failed(self.key.as_ref(), "never sent (its task ended first: the mount is stopping)");
        }
        d.pending.lock().unwrap_or_else(PoisonError::into_inner).remove(self.key.as_ref());
        d.count.fetch_sub(1, Ordering::AcqRel);
        d.metrics.deletes_behind(-1);
        self.done.send_replace(true);
    }
}

/// Whether a delete's outcome leaves the key absent.
fn deleted(r: &Result<()>) -> bool {
    matches!(r, Ok(()) | Err(object_store::Error::NotFound { .. }))
}

/// Waits until a queued delete is done (or its task is gone).
async fn wait(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|done| *done).await;
}

/// The string prefix of the keys under a listing's `prefix` path.
fn dir_prefix(prefix: Option<&Path>) -> String {
    match prefix {
        Some(p) if !p.as_ref().is_empty() => format!("{p}/"),
        _ => String::new(),
    }
}

/// The layer: every request waits for a queued delete of its key; listings leave queued keys out.
#[derive(Debug)]
pub struct Behind {
    inner: Backend,
    deletes: Arc<Deletes>,
}

impl Behind {
    /// The layer over `inner`, at most `max` deletes queued at once, and its queue.
    pub fn new(inner: Backend, max: usize, metrics: StoreMetrics) -> (Self, Arc<Deletes>) {
        let deletes = Arc::new(Deletes {
            below: inner.store.clone(),
            pending: Mutex::default(),
            count: AtomicUsize::new(0),
            room: Arc::new(Semaphore::new(max.max(1))),
            sending: Semaphore::new(DELETES_IN_FLIGHT),
            proven: AtomicBool::new(false),
            failed: Mutex::default(),
            failures: AtomicUsize::new(0),
            metrics,
        });
        (Behind { inner, deletes: deletes.clone() }, deletes)
    }
}

impl std::fmt::Display for Behind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Behind({})", self.inner.store)
    }
}

#[async_trait]
impl ObjectStore for Behind {
    async fn put_opts(&self, location: &Path, payload: PutPayload, opts: PutOptions) -> Result<PutResult> {
        self.deletes.wait_then(location, self.inner.store.put_opts(location, payload, opts)).await
    }

    async fn put_multipart_opts(&self, location: &Path, opts: PutMultipartOptions) -> Result<Box<dyn MultipartUpload>> {
        self.deletes.wait_then(location, self.inner.store.put_multipart_opts(location, opts)).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.deletes.wait_then(location, self.inner.store.get_opts(location, options)).await
    }

    async fn head(&self, location: &Path) -> Result<ObjectMeta> {
        self.deletes.wait_then(location, self.inner.store.head(location)).await
    }

    async fn delete(&self, location: &Path) -> Result<()> {
        self.deletes.wait_then(location, self.inner.store.delete(location)).await
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        let deletes = self.deletes.clone();
        let under = dir_prefix(prefix);
        let list = self.inner.store.list(prefix);
        futures::stream::once(async move {
            let hidden = deletes.hidden(&under, false).await;
            list.filter(move |o| std::future::ready(o.as_ref().map_or(true, |o| !hidden.contains(o.location.as_ref()))))
        })
        .flatten()
        .boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        let hidden = self.deletes.hidden(&dir_prefix(prefix), true).await;
        let mut got = self.inner.store.list_with_delimiter(prefix).await?;
        got.objects.retain(|o| !hidden.contains(o.location.as_ref()));
        Ok(got)
    }

    async fn copy(&self, from: &Path, to: &Path) -> Result<()> {
        let copy = self.deletes.wait_then(to, self.inner.store.copy(from, to));
        self.deletes.wait_then(from, copy).await
    }

    async fn copy_if_not_exists(&self, from: &Path, to: &Path) -> Result<()> {
        let copy = self.deletes.wait_then(to, self.inner.store.copy_if_not_exists(from, to));
        self.deletes.wait_then(from, copy).await
    }
}

#[async_trait]
impl PaginatedListStore for Behind {
    /// A page may hold fewer keys than asked for, and none, with a token for the next: it asks
    /// for as many more as it may leave out (up to S3's 1,000), so a short page is rare.
    async fn list_paginated(
        &self,
        prefix: Option<&str>,
        mut opts: PaginatedListOptions,
    ) -> Result<PaginatedListResult> {
        let hidden = self.deletes.hidden(prefix.unwrap_or(""), opts.delimiter.is_some()).await;
        opts.max_keys = opts.max_keys.map(|k| (k + hidden.len()).min(MAX_PAGE_KEYS).max(k));
        let mut got = self.inner.paged()?.list_paginated(prefix, opts).await?;
        got.result.objects.retain(|o| !hidden.contains(o.location.as_ref()));
        Ok(got)
    }
}

#[async_trait]
impl MultipartStore for Behind {
    async fn create_multipart(&self, path: &Path) -> Result<MultipartId> {
        self.deletes.wait_then(path, self.inner.parts()?.create_multipart(path)).await
    }

    async fn put_part(&self, path: &Path, id: &MultipartId, part_idx: usize, data: PutPayload) -> Result<PartId> {
        self.inner.parts()?.put_part(path, id, part_idx, data).await
    }

    async fn complete_multipart(&self, path: &Path, id: &MultipartId, parts: Vec<PartId>) -> Result<PutResult> {
        self.deletes.wait_then(path, self.inner.parts()?.complete_multipart(path, id, parts)).await
    }

    async fn abort_multipart(&self, path: &Path, id: &MultipartId) -> Result<()> {
        self.inner.parts()?.abort_multipart(path, id).await
    }
}
