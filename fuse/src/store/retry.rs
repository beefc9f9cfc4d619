//! Retries of store requests that failed for a passing reason (`compat::is_transient`), backing
//! off per the [`RetryPolicy`]: the one place a request is tried again, for every backend (S3's
//! own client retries are off), so every failed try and every retry is counted. A bounded or
//! suffix GET reads its body inside the retry, so a connection cut mid-body is retried too.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use async_trait::async_trait;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use object_store::list::{PaginatedListOptions, PaginatedListResult, PaginatedListStore};
use object_store::multipart::{MultipartStore, PartId};
use object_store::path::Path;
use object_store::{
    GetOptions, GetResult, GetResultPayload, ListResult, MultipartId, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
};

use super::Backend;
use super::compat::{is_transient, outcome};
use super::config::RetryPolicy;
use crate::metrics::{Outcome, StoreMetrics};

/// Tries requests again per `policy`.
#[derive(Debug)]
pub struct Retry {
    inner: Backend,
    policy: RetryPolicy,
    metrics: StoreMetrics,
    /// Set while the store is taken to be down (see [`again_if`]).
    down: Arc<AtomicBool>,
}

/// How long a request is tried while the store is taken to be down (see [`again_if`]).
const DOWN_RETRY: std::time::Duration = std::time::Duration::from_secs(2);

/// Runs `f` until it succeeds, fails for good, or `policy` allows no more tries.
async fn again<T, F, Fut>(
    policy: RetryPolicy,
    down: &AtomicBool,
    metrics: &StoreMetrics,
    kind: &'static str,
    f: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    again_if(policy, down, metrics, kind, is_transient, f).await
}

/// [`again`] for a request not safe to repeat once it may have reached the server (a single PUT,
/// a DELETE): one that timed out is not sent again, as the server may have applied it and a late
/// copy could land after a newer request (SEMANTICS "Failures and retries").
async fn again_unless_timed_out<T, F, Fut>(
    policy: RetryPolicy,
    down: &AtomicBool,
    metrics: &StoreMetrics,
    kind: &'static str,
    f: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    again_if(policy, down, metrics, kind, |e| is_transient(e) && !timed_out(e), f).await
}

/// Whether a request failed by running out of time once its connection was made (a connect
/// timeout never reached the server). object_store's HTTP errors are transparent, so the words
/// of the causes tell: reqwest's "operation timed out" below a request error, a connect error
/// naming the connection.
fn timed_out(e: &object_store::Error) -> bool {
    let (mut timed, mut connect) = (false, false);
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        // (Injected failures stand for a 503 or a refused connection.)
        if s.is::<super::fault::Injected>() {
            return false;
        }
        let text = s.to_string().to_ascii_lowercase();
        timed |= text.contains("timed out");
        // (hyper's and reqwest's words for a connection not made; not "connect" alone, which a
        // URL or "Connection timed out" holds too.)
        connect |= ["trying to connect", "(connect)", "tcp connect"].iter().any(|w| text.contains(w));
        source = s.source();
    }
    timed && !connect
}

/// [`again`] with the failures worth another try told by `retryable`. While `down` is set (a
/// request got no answer at all for a whole retry timeout, and none has been answered since,
/// even with an error status), a request is tried for [`DOWN_RETRY`] only: an outage then fails
/// each further operation in about one request's time, not in a retry timeout per request,
/// while failures that pass at once (a pooled connection found closed) are still tried again.
async fn again_if<T, F, Fut>(
    policy: RetryPolicy,
    down: &AtomicBool,
    metrics: &StoreMetrics,
    kind: &'static str,
    retryable: impl Fn(&object_store::Error) -> bool,
    mut f: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let start = Instant::now();
    let mut retry = 0;
    let policy = match down.load(Ordering::Relaxed) {
        true => RetryPolicy { timeout: policy.timeout.min(DOWN_RETRY), ..policy },
        false => policy,
    };
    loop {
        let r = f().await;
        if outcome(&r) == Outcome::Error {
            metrics.error(kind);
        }
        match r {
            Err(e) if retryable(&e) && policy.allows(retry + 1, start.elapsed()) => {
                retry += 1;
                metrics.retry(kind, &crate::error::chain(&e));
                tracing::debug!(kind, retry, error = %e, "store request failed; trying again");
                tokio::time::sleep(policy.backoff(retry)).await;
            }
            r => {
                match &r {
                    // No answer (no status) through a whole retry timeout: the store is down.
                    Err(e) if is_transient(e) && !e.to_string().contains("status code") => {
                        if !policy.timeout.is_zero() && start.elapsed() >= policy.timeout {
                            down.store(true, Ordering::Relaxed);
                        }
                    }
                    _ => down.store(false, Ordering::Relaxed),
                }
                return r;
            }
        }
    }
}

impl Retry {
    /// The layer over `inner`.
    pub fn new(inner: Backend, policy: RetryPolicy, metrics: StoreMetrics) -> Self {
        Retry { inner, policy, metrics, down: Arc::default() }
    }

    async fn again<T, F, Fut>(&self, kind: &'static str, f: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        again(self.policy, &self.down, &self.metrics, kind, f).await
    }
}

impl std::fmt::Display for Retry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Retry({})", self.inner.store)
    }
}

#[async_trait]
impl ObjectStore for Retry {
    async fn put_opts(&self, location: &Path, payload: PutPayload, opts: PutOptions) -> Result<PutResult> {
        let put = || self.inner.store.put_opts(location, payload.clone(), opts.clone());
        again_unless_timed_out(self.policy, &self.down, &self.metrics, "put", put).await
    }

    /// Parts of an upload through this API are not retried one by one (a part cannot be sent
    /// twice through `MultipartUpload`); the writer starts such an upload again instead.
    async fn put_multipart_opts(&self, location: &Path, opts: PutMultipartOptions) -> Result<Box<dyn MultipartUpload>> {
        self.again("multipart_start", || self.inner.store.put_multipart_opts(location, opts.clone())).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let kind = super::instrument::get_kind(&options);
        let buffer = options.range.is_some() && !options.head;
        self.again(kind, || async {
            let fetch = async {
                let got = self.inner.store.get_opts(location, options.clone()).await?;
                if !buffer {
                    return Ok(got);
                }
                let GetResult { payload, meta, range, attributes } = got;
                let bytes =
                    GetResult { payload, meta: meta.clone(), range: range.clone(), attributes: attributes.clone() }
                        .bytes()
                        .await?;
                super::compat::check_body(&range, &bytes)?;
                let stream = futures::stream::once(futures::future::ready(Ok(bytes))).boxed();
                Ok(GetResult { payload: GetResultPayload::Stream(stream), meta, range, attributes })
            };
            fetch.await
        })
        .await
    }

    async fn head(&self, location: &Path) -> Result<ObjectMeta> {
        self.again("head", || self.inner.store.head(location)).await
    }

    async fn delete(&self, location: &Path) -> Result<()> {
        let delete = || self.inner.store.delete(location);
        again_unless_timed_out(self.policy, &self.down, &self.metrics, "delete", delete).await
    }

    /// A listing is retried until its first entry (or its end) arrives; a failure later in a
    /// long listing reaches the caller.
    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        let (store, prefix, policy, metrics, down) =
            (self.inner.store.clone(), prefix.cloned(), self.policy, self.metrics.clone(), self.down.clone());
        futures::stream::once(async move {
            let first = again(policy, &down, &metrics, "list", || {
                let mut s = store.list(prefix.as_ref());
                async move {
                    let first = s.try_next().await?;
                    Ok((first, s))
                }
            })
            .await;
            match first {
                Ok((first, rest)) => futures::stream::iter(first.map(Ok)).chain(rest).boxed(),
                Err(e) => futures::stream::once(futures::future::ready(Err(e))).boxed(),
            }
        })
        .flatten()
        .boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.again("list_delimiter", || self.inner.store.list_with_delimiter(prefix)).await
    }

    async fn copy(&self, from: &Path, to: &Path) -> Result<()> {
        self.again("copy", || self.inner.store.copy(from, to)).await
    }

    async fn copy_if_not_exists(&self, from: &Path, to: &Path) -> Result<()> {
        self.again("copy", || self.inner.store.copy_if_not_exists(from, to)).await
    }
}

#[async_trait]
impl PaginatedListStore for Retry {
    async fn list_paginated(&self, prefix: Option<&str>, opts: PaginatedListOptions) -> Result<PaginatedListResult> {
        let paged = self.inner.paged()?;
        self.again("list_page", || paged.list_paginated(prefix, opts.clone())).await
    }
}

#[async_trait]
impl MultipartStore for Retry {
    async fn create_multipart(&self, path: &Path) -> Result<MultipartId> {
        let mp = self.inner.parts()?;
        self.again("multipart_start", || mp.create_multipart(path)).await
    }

    async fn put_part(&self, path: &Path, id: &MultipartId, part_idx: usize, data: PutPayload) -> Result<PartId> {
        let mp = self.inner.parts()?;
        self.again("put_part", || mp.put_part(path, id, part_idx, data.clone())).await
    }

    async fn complete_multipart(&self, path: &Path, id: &MultipartId, parts: Vec<PartId>) -> Result<PutResult> {
        let mp = self.inner.parts()?;
        self.again("multipart_complete", || mp.complete_multipart(path, id, parts.clone())).await
    }

    async fn abort_multipart(&self, path: &Path, id: &MultipartId) -> Result<()> {
        let mp = self.inner.parts()?;
        self.again("multipart_abort", || mp.abort_multipart(path, id)).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    fn timeout_error() -> object_store::Error {
        object_store::Error::Generic { store: "S3", source: "error sending request: operation timed out".into() }
    }

    /// An error as object_store passes reqwest's on: the top line says nothing of time, a cause
    /// does.
    #[derive(Debug)]
    struct Outer(&'static str, std::io::Error);

    impl std::fmt::Display for Outer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.1)
        }
    }

    fn nested(top: &'static str, cause: &'static str) -> object_store::Error {
        let inner = std::io::Error::new(std::io::ErrorKind::TimedOut, cause);
        object_store::Error::Generic { store: "S3", source: Box::new(Outer(top, inner)) }
    }

    /// After a request got no answer for a whole retry timeout, the next are tried for
    /// `DOWN_RETRY` only, until one is answered (an error status counts).
    #[tokio::test]
    async fn once_a_request_went_unanswered_for_the_retry_timeout_the_next_are_tried_briefly() {
        let policy = RetryPolicy {
            timeout: Duration::from_secs(3),
            max_retries: None,
            init_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_millis(50),
        };
        let (metrics, down) = (crate::metrics::Metrics::new().store().clone(), AtomicBool::new(false));
        let failing = || async { Err::<(), _>(nested("HTTP error: error sending request", "connection reset")) };
        let start = std::time::Instant::now();
        assert!(again(policy, &down, &metrics, "head", failing).await.is_err());
        assert!(start.elapsed() >= Duration::from_secs(3), "tried for the retry timeout");
        assert!(down.load(Ordering::Relaxed));
        let start = std::time::Instant::now();
        assert!(again(policy, &down, &metrics, "head", failing).await.is_err());
        let took = start.elapsed();
        assert!(took >= DOWN_RETRY && took < Duration::from_secs(3), "tried briefly while down: {took:?}");
        let status = || async {
            let e =
                object_store::Error::Generic { store: "S3", source: "Server returned non-2xx status code: 503".into() };
            Err::<(), _>(e)
        };
        let _ = again(RetryPolicy { timeout: Duration::ZERO, ..policy }, &down, &metrics, "head", status).await;
        assert!(!down.load(Ordering::Relaxed), "an error status is an answer");
        down.store(true, Ordering::Relaxed);
        assert!(again(policy, &down, &metrics, "head", || async { Ok(()) }).await.is_ok());
        assert!(!down.load(Ordering::Relaxed), "so is a success");
    }

    /// Counts the tries of every request, each of which times out.
    #[tokio::test]
    async fn a_timed_out_put_or_delete_is_not_sent_again_and_a_timed_out_head_is() {
        let tries = Arc::new(AtomicUsize::new(0));
        let counted = |tries: &Arc<AtomicUsize>| {
            tries.fetch_add(1, Ordering::Relaxed);
            Err::<(), _>(timeout_error())
        };
        let policy = RetryPolicy {
            timeout: Duration::from_millis(200),
            max_retries: Some(3),
            init_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(1),
        };
        let metrics = crate::metrics::Metrics::new().store().clone();
        assert!(timed_out(&timeout_error()));
        assert!(timed_out(&nested("error sending request for url (http://h/b/k)", "operation timed out")));
        assert!(!timed_out(&nested("error trying to connect", "operation timed out")), "never reached the server");
        let url = "error sending request for url (http://h/iot-connect/Connections.csv)";
        assert!(timed_out(&nested(url, "operation timed out")), "a URL's words are not a connect error");
        assert!(!timed_out(&object_store::Error::Generic { store: "S3", source: "connection reset".into() }));
        let r = again_unless_timed_out(policy, &AtomicBool::new(false), &metrics, "put", || async { counted(&tries) })
            .await;
        assert!(r.is_err());
        assert_eq!(tries.swap(0, Ordering::Relaxed), 1, "a PUT or DELETE that timed out: one try");
        let r = again(policy, &AtomicBool::new(false), &metrics, "head", || async { counted(&tries) }).await;
        assert!(r.is_err());
        assert_eq!(tries.load(Ordering::Relaxed), 4, "a HEAD: tried again");
    }
}
