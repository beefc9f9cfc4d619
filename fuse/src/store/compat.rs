//! S3 compatibility: the one place that looks at error text and server quirks. Some servers (and S3
//! itself for an empty object) refuse a suffix range longer than the object with 416, some know no
//! suffix ranges at all, and some answer a range with the whole object (200): [`Compat`] turns
//! each into the answer that was asked for. Some (rclone's) list ETags bare and quote them in
//! HTTP headers: listed ETags are then quoted alike. [`is_transient`] and [`outcome`] classify
//! errors for the retry and instrument layers.

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
    /// Set once a HEAD or GET answered with a quoted ETag (as HTTP headers carry them): a bare
    /// ETag in a listing is then quoted alike, so the listing names a version as a HEAD did.
    quoted: Arc<AtomicBool>,
}

impl Compat {
    /// The layer over `inner`.
    pub fn new(inner: Backend) -> Self {
        Compat { inner, no_suffix: Arc::default(), quoted: Arc::default() }
    }

    /// Notes how an answer's headers quote ETags.
    fn answered<T>(&self, meta: impl FnOnce(&T) -> &ObjectMeta, r: Result<T>) -> Result<T> {
        if let Ok(t) = &r
            && meta(t).e_tag.as_deref().is_some_and(|e| e.starts_with('"'))
        {
            self.quoted.store(true, Ordering::Relaxed);
        }
        r
    }

    /// A GET with the quirks hidden (see the module's line).
    async fn get_answered(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
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

/// A listed object's ETag quoted as the server's headers quote them (see `Compat::quoted`).
fn listed(quoted: &AtomicBool, mut meta: ObjectMeta) -> ObjectMeta {
    if let Some(e) = &meta.e_tag
        && !e.starts_with('"')
        && !e.starts_with("W/")
        && quoted.load(Ordering::Relaxed)
    {
        meta.e_tag = Some(format!("\"{e}\""));
    }
    meta
}

/// Longest a read (a GET, a HEAD) waits for the server's answer to begin: a connection the
/// network dropped silently then fails as timed out, and is tried again (a read is safe to
/// repeat) within the retry timeout, where `--request-timeout` is sized for a part's upload. This
/// layer is below the request limit, so a wait for a slot does not count; a body, once it comes,
/// takes as long as it needs.
pub const ANSWER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// `f`, failed as timed out when no answer has begun within [`ANSWER_TIMEOUT`].
async fn begun<T>(f: impl std::future::Future<Output = Result<T>>) -> Result<T> {
    match tokio::time::timeout(ANSWER_TIMEOUT, f).await {
        Ok(r) => r,
        Err(_) => Err(object_store::Error::Generic {
            store: "store",
            source: format!("no answer within {} s: timed out", ANSWER_TIMEOUT.as_secs()).into(),
        }),
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
        let got = begun(self.get_answered(location, options)).await;
        self.answered(|g: &GetResult| &g.meta, got)
    }

    async fn head(&self, location: &Path) -> Result<ObjectMeta> {
        let got = begun(self.inner.store.head(location)).await;
        self.answered(|m| m, got)
    }

    async fn delete(&self, location: &Path) -> Result<()> {
        self.inner.store.delete(location).await
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        let quoted = self.quoted.clone();
        self.inner.store.list(prefix).map(move |m| m.map(|m| listed(&quoted, m))).boxed()
    }

    fn list_with_offset(&self, prefix: Option<&Path>, offset: &Path) -> BoxStream<'static, Result<ObjectMeta>> {
        let quoted = self.quoted.clone();
        self.inner.store.list_with_offset(prefix, offset).map(move |m| m.map(|m| listed(&quoted, m))).boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        let mut r = self.inner.store.list_with_delimiter(prefix).await?;
        r.objects = r.objects.into_iter().map(|m| listed(&self.quoted, m)).collect();
        Ok(r)
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
        let mut r = self.inner.paged()?.list_paginated(prefix, opts).await?;
        r.result.objects = std::mem::take(&mut r.result.objects).into_iter().map(|m| listed(&self.quoted, m)).collect();
        Ok(r)
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

    /// rclone's quirk: listings carry ETags bare, HEADs quote them.
    #[derive(Debug)]
    struct BareListings(InMemory);

    impl std::fmt::Display for BareListings {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("BareListings")
        }
    }

    fn quote(mut m: ObjectMeta) -> ObjectMeta {
        m.e_tag = m.e_tag.map(|e| format!("\"{e}\""));
        m
    }

    #[async_trait]
    impl ObjectStore for BareListings {
        async fn put_opts(&self, l: &Path, p: PutPayload, o: PutOptions) -> Result<PutResult> {
            self.0.put_opts(l, p, o).await
        }
        async fn put_multipart_opts(&self, l: &Path, o: PutMultipartOptions) -> Result<Box<dyn MultipartUpload>> {
            self.0.put_multipart_opts(l, o).await
        }
        async fn get_opts(&self, l: &Path, o: GetOptions) -> Result<GetResult> {
            let mut got = self.0.get_opts(l, o).await?;
            got.meta = quote(got.meta);
            Ok(got)
        }
        async fn head(&self, l: &Path) -> Result<ObjectMeta> {
            self.0.head(l).await.map(quote)
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
    async fn bare_listed_etags_are_quoted_as_the_servers_heads_quote_them() {
        use futures::TryStreamExt;
        let store = Compat::new(Backend::plain(Arc::new(BareListings(InMemory::new()))));
        let key = Path::from("d/k");
        store.put(&key, "bytes".into()).await.unwrap();
        let bare = store.list(None).try_collect::<Vec<_>>().await.unwrap()[0].e_tag.clone().unwrap();
        assert!(!bare.starts_with('"'), "left as listed until a HEAD shows the server's form");
        let head = store.head(&key).await.unwrap().e_tag.unwrap();
        assert_eq!(head, format!("\"{bare}\""));
        let listed = store.list(None).try_collect::<Vec<_>>().await.unwrap();
        assert_eq!(listed[0].e_tag.as_deref(), Some(&*head));
        let dir = store.list_with_delimiter(Some(&Path::from("d"))).await.unwrap();
        assert_eq!(dir.objects[0].e_tag.as_deref(), Some(&*head));
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
