//! S3 compatibility: the one place that looks at error text and server quirks. Some servers (and S3
//! itself for an empty object) refuse a suffix range longer than the object with 416, some know no
//! suffix ranges at all, and some answer a range with the whole object (200): [`Compat`] turns
//! each into the answer that was asked for. [`is_transient`] and [`outcome`] classify errors for
//! the retry and instrument layers.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::list::{PaginatedListOptions, PaginatedListResult, PaginatedListStore};
use object_store::multipart::{MultipartStore, PartId};
use object_store::path::Path;
use object_store::{
    GetOptions, GetRange, GetResult, GetResultPayload, ListResult, MultipartId, MultipartUpload, ObjectMeta,
    ObjectStore, PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
};

use super::Backend;
use crate::metrics::Outcome;

/// A GET body that ended before the bytes its range promised: the connection was cut mid-body.
#[derive(Debug, thiserror::Error)]
#[error("the body ended after {got} of {expected} bytes")]
pub struct TruncatedBody {
    /// Bytes promised by the range.
    pub expected: u64,
    /// Bytes that came.
    pub got: u64,
}

/// Checks that a body read whole is as long as its range said.
pub fn check_body(range: &std::ops::Range<u64>, bytes: &Bytes) -> Result<()> {
    let expected = range.end - range.start;
    if bytes.len() as u64 == expected {
        return Ok(());
    }
    let source = Box::new(TruncatedBody { expected, got: bytes.len() as u64 });
    Err(object_store::Error::Generic { store: "body", source })
}

/// Whether a request failed for a reason that may pass (a refused or reset connection, a
/// timeout, a 5xx or 429 answer, an injected outage): worth trying again.
pub fn is_transient(e: &object_store::Error) -> bool {
    use object_store::Error as E;
    use object_store::client::HttpErrorKind;
    if !matches!(e, E::Generic { .. }) {
        return false;
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if let Some(f) = s.downcast_ref::<super::fault::Injected>() {
            return f.transient;
        }
        if s.is::<TruncatedBody>() {
            return true;
        }
        if let Some(h) = s.downcast_ref::<object_store::client::HttpError>() {
            return matches!(
                h.kind(),
                HttpErrorKind::Connect | HttpErrorKind::Request | HttpErrorKind::Timeout | HttpErrorKind::Interrupted
            );
        }
        source = s.source();
    }
    let text = e.to_string();
    // object_store's texts: a status error ("... returned non-2xx status code: 503 ..."), a
    // transport error ("... - HTTP error: error sending request"; its `HttpError` is not in the
    // source chain, a transparent variant skips it).
    ["status code: 5", "status code: 429", "HTTP error:", "timed out", "connection reset", "Connection refused"]
        .iter()
        .any(|t| text.contains(t))
}

/// How a request that ended with `r` went: a missing object or a failed precondition answers the
/// question asked, it is not a failure of the store.
pub fn outcome<T>(r: &Result<T>) -> Outcome {
    use object_store::Error as E;
    match r {
        Ok(_) => Outcome::Ok,
        Err(E::NotFound { .. } | E::AlreadyExists { .. } | E::Precondition { .. } | E::NotModified { .. }) => {
            Outcome::Expected
        }
        Err(_) => Outcome::Error,
    }
}

/// Whether a suffix GET failed because of how the server treats suffix ranges.
fn suffix_unsupported(e: &object_store::Error) -> bool {
    let s = e.to_string();
    matches!(e, object_store::Error::NotImplemented)
        || s.contains("416")
        || s.contains("non-partial response")
        || (s.contains("Requested ") && s.contains(", got "))
}

/// Whether a ranged GET was answered with the whole object.
fn answered_whole(e: &object_store::Error) -> bool {
    e.to_string().contains("non-partial response")
}

/// Hides the quirks of S3-compatible servers behind the answers `ObjectStore` promises.
#[derive(Debug)]
pub struct Compat {
    inner: Backend,
    /// Set once the server showed it does not answer suffix ranges: later ones go straight to
    /// HEAD and a bounded range.
    no_suffix: Arc<AtomicBool>,
}

impl Compat {
    /// The layer over `inner`.
    pub fn new(inner: Backend) -> Self {
        Compat { inner, no_suffix: Arc::default() }
    }

    /// A suffix GET the server would not answer: the size from HEAD, then a bounded range.
    async fn suffix_by_head(&self, location: &Path, n: u64, options: GetOptions) -> Result<GetResult> {
        let meta = self.inner.store.head(location).await?;
        let start = meta.size.saturating_sub(n);
        if start == meta.size {
            return Ok(buffered(meta.clone(), start..start, Bytes::new()));
        }
        self.bounded(location, GetOptions { range: Some(GetRange::Bounded(start..meta.size)), ..options }).await
    }

    /// A bounded GET; a server that answers it with the whole object gets a whole-object GET,
    /// sliced here.
    async fn bounded(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let Some(GetRange::Bounded(range)) = options.range.clone() else {
            return self.inner.store.get_opts(location, options).await;
        };
        match self.inner.store.get_opts(location, options.clone()).await {
            Err(e) if answered_whole(&e) => {
                let got = self.inner.store.get_opts(location, GetOptions { range: None, ..options }).await?;
                let meta = got.meta.clone();
                let all = got.bytes().await?;
                let end = (range.end as usize).min(all.len());
                let start = (range.start as usize).min(end);
                Ok(buffered(meta, start as u64..end as u64, all.slice(start..end)))
            }
            other => other,
        }
    }
}

/// A `GetResult` of bytes already in memory.
fn buffered(meta: ObjectMeta, range: std::ops::Range<u64>, bytes: Bytes) -> GetResult {
    let stream = futures::stream::once(futures::future::ready(Ok(bytes))).boxed();
    GetResult { payload: GetResultPayload::Stream(stream), meta, range, attributes: Default::default() }
}

impl std::fmt::Display for Compat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Compat({})", self.inner.store)
    }
}

#[async_trait]
impl ObjectStore for Compat {
    async fn put_opts(&self, location: &Path, payload: PutPayload, opts: PutOptions) -> Result<PutResult> {
        self.inner.store.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(&self, location: &Path, opts: PutMultipartOptions) -> Result<Box<dyn MultipartUpload>> {
        self.inner.store.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        match options.range.clone() {
            Some(GetRange::Suffix(n)) if !options.head => {
                if self.no_suffix.load(Ordering::Relaxed) {
                    return self.suffix_by_head(location, n, options).await;
                }
                match self.inner.store.get_opts(location, options.clone()).await {
                    Err(e) if suffix_unsupported(&e) => {
                        // A 416 is about this object (longer suffix than object); anything else
                        // is about the server.
                        if !e.to_string().contains("416") {
                            self.no_suffix.store(true, Ordering::Relaxed);
                        }
                        self.suffix_by_head(location, n, options).await
                    }
                    other => other,
                }
            }
            Some(GetRange::Bounded(_)) if !options.head => self.bounded(location, options).await,
            _ => self.inner.store.get_opts(location, options).await,
        }
    }

    async fn head(&self, location: &Path) -> Result<ObjectMeta> {
        self.inner.store.head(location).await
    }

    async fn delete(&self, location: &Path) -> Result<()> {
        self.inner.store.delete(location).await
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.store.list(prefix)
    }

    fn list_with_offset(&self, prefix: Option<&Path>, offset: &Path) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.store.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.inner.store.list_with_delimiter(prefix).await
    }

    async fn copy(&self, from: &Path, to: &Path) -> Result<()> {
        self.inner.store.copy(from, to).await
    }

    async fn copy_if_not_exists(&self, from: &Path, to: &Path) -> Result<()> {
        self.inner.store.copy_if_not_exists(from, to).await
    }
}

#[async_trait]
impl PaginatedListStore for Compat {
    async fn list_paginated(&self, prefix: Option<&str>, opts: PaginatedListOptions) -> Result<PaginatedListResult> {
        self.inner.paged()?.list_paginated(prefix, opts).await
    }
}

#[async_trait]
impl MultipartStore for Compat {
    async fn create_multipart(&self, path: &Path) -> Result<MultipartId> {
        self.inner.parts()?.create_multipart(path).await
    }

    async fn put_part(&self, path: &Path, id: &MultipartId, part_idx: usize, data: PutPayload) -> Result<PartId> {
        self.inner.parts()?.put_part(path, id, part_idx, data).await
    }

    async fn complete_multipart(&self, path: &Path, id: &MultipartId, parts: Vec<PartId>) -> Result<PutResult> {
        self.inner.parts()?.complete_multipart(path, id, parts).await
    }

    async fn abort_multipart(&self, path: &Path, id: &MultipartId) -> Result<()> {
        self.inner.parts()?.abort_multipart(path, id).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;

    /// A server with the quirks: no suffix ranges (416 on every one), ranges answered whole.
    #[derive(Debug)]
    struct Quirky(InMemory);

    impl std::fmt::Display for Quirky {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("Quirky")
        }
    }

    fn status(text: &str) -> object_store::Error {
        object_store::Error::Generic { store: "quirky", source: text.to_owned().into() }
    }

    #[async_trait]
    impl ObjectStore for Quirky {
        async fn put_opts(&self, l: &Path, p: PutPayload, o: PutOptions) -> Result<PutResult> {
            self.0.put_opts(l, p, o).await
        }
        async fn put_multipart_opts(&self, l: &Path, o: PutMultipartOptions) -> Result<Box<dyn MultipartUpload>> {
            self.0.put_multipart_opts(l, o).await
        }
        async fn get_opts(&self, l: &Path, o: GetOptions) -> Result<GetResult> {
            match o.range {
                Some(GetRange::Suffix(_)) => Err(status("Server returned non-2xx status code: 416")),
                Some(GetRange::Bounded(_)) => Err(status("Received non-partial response when range requested")),
                _ => self.0.get_opts(l, o).await,
            }
        }
        async fn delete(&self, l: &Path) -> Result<()> {
            self.0.delete(l).await
        }
        fn list(&self, p: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
            self.0.list(p)
        }
        async fn list_with_delimiter(&self, p: Option<&Path>) -> Result<ListResult> {
            self.0.list_with_delimiter(p).await
        }
        async fn copy(&self, f: &Path, t: &Path) -> Result<()> {
            self.0.copy(f, t).await
        }
        async fn copy_if_not_exists(&self, f: &Path, t: &Path) -> Result<()> {
            self.0.copy_if_not_exists(f, t).await
        }
    }

    #[tokio::test]
    async fn suffix_and_range_quirks_get_the_bytes_asked_for() {
        let store = Compat::new(Backend::plain(Arc::new(Quirky(InMemory::new()))));
        let key = Path::from("k");
        store.put(&key, "0123456789".into()).await.unwrap();
        store.put(&Path::from("empty"), PutPayload::default()).await.unwrap();
        let suffix = |n| GetOptions { range: Some(GetRange::Suffix(n)), ..Default::default() };
        let got = store.get_opts(&key, suffix(4)).await.unwrap();
        assert_eq!((got.range.clone(), got.meta.size), (6..10, 10));
        assert_eq!(got.bytes().await.unwrap(), "6789");
        let all = store.get_opts(&key, suffix(64)).await.unwrap().bytes().await.unwrap();
        assert_eq!(all, "0123456789", "a suffix longer than the object is the object");
        let none = store.get_opts(&Path::from("empty"), suffix(64)).await.unwrap();
        assert!(none.bytes().await.unwrap().is_empty());
        assert_eq!(store.get_range(&key, 2..5).await.unwrap(), "234");
        assert!(matches!(
            store.get_opts(&Path::from("gone"), suffix(4)).await,
            Err(object_store::Error::NotFound { .. })
        ));
    }

    #[test]
    fn transient_and_expected_errors_are_told_apart() {
        let nf = object_store::Error::NotFound { path: "x".into(), source: "gone".into() };
        assert!(!is_transient(&nf));
        assert_eq!(outcome::<()>(&Err(nf)), Outcome::Expected);
        assert!(is_transient(&status("Server returned non-2xx status code: 503 Service Unavailable")));
        assert!(is_transient(&status("Server returned non-2xx status code: 429")));
        let refused =
            "Error performing POST http://127.0.0.1:1/b/k?uploads= in 3ms - HTTP error: error sending request";
        assert!(is_transient(&status(refused)));
        assert!(!is_transient(&status("Server returned non-2xx status code: 403 Forbidden")));
        assert_eq!(outcome::<()>(&Err(status("boom"))), Outcome::Error);
        assert_eq!(outcome(&Ok(())), Outcome::Ok);
    }
}
