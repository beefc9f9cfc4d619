//! `FaultStore`: an object store wrapper that makes chosen operations fail — an outage, the next
//! n calls of one kind, or a seeded random share of all calls — so tests can drive the
//! filesystem core through store failures without editing it.
//!
//! Injected failures are `object_store::Error::Generic { store: "fault", .. }` with an
//! [`Injected`] source, which the core maps to EIO like any store failure.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use bytes::Bytes;
use futures::FutureExt;
use futures::stream::{BoxStream, StreamExt};
use object_store::path::Path;
use object_store::{
    GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore, PutMultipartOptions, PutOptions,
    PutPayload, PutResult, Result, UploadPart,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The kinds of store operation a fault can target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// `put`, and the start of a multipart upload.
    Put,
    /// One multipart part.
    PutPart,
    /// Completing a multipart upload.
    Complete,
    /// `get` and ranged gets.
    Get,
    /// `head`, and a `get` with `head: true`.
    Head,
    /// Every kind of listing.
    List,
    /// `delete`.
    Delete,
    /// `copy` and `copy_if_not_exists` (a rename is a copy and a delete).
    Copy,
}

const OPS: usize = 8;

/// An injected failure: the source of the `object_store::Error::Generic` a [`FaultStore`] returns.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("injected {reason} ({op:?})")]
pub struct Injected {
    /// The operation that failed.
    pub op: Op,
    /// Which knob made it fail: "outage", "failure" (`fail_next`) or "random failure".
    pub reason: &'static str,
}

/// What to inject, shared (through an `Arc`) by a [`FaultStore`], its uploads and the test that
/// steers them. Nothing is injected until a knob is turned.
#[derive(Debug, Default)]
pub struct FaultControl {
    down: AtomicBool,
    /// Per op: how many of the next calls fail.
    next: [AtomicU32; OPS],
    rate: Mutex<Option<Rate>>,
    calls: [AtomicU64; OPS],
    failures: AtomicU64,
}

#[derive(Debug)]
struct Rate {
    p: f64,
    rng: ChaCha8Rng,
}

impl FaultControl {
    /// While `down`, every operation fails ("injected outage").
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    /// The next `n` operations of kind `op` fail (replacing any count set before).
    pub fn fail_next(&self, op: Op, n: u32) {
        self.next[op as usize].store(n, Ordering::SeqCst);
    }

    /// Each operation fails with probability `p`, drawn from a generator seeded with `seed`: the
    /// same sequence of calls fails the same way every run. `p <= 0` turns it off.
    pub fn fail_rate(&self, p: f64, seed: u64) {
        let rate = (p > 0.0).then(|| Rate { p, rng: ChaCha8Rng::seed_from_u64(seed) });
        *self.rate.lock().unwrap_or_else(PoisonError::into_inner) = rate;
    }

    /// Operations of kind `op` attempted so far, failed or not.
    pub fn calls(&self, op: Op) -> u64 {
        self.calls[op as usize].load(Ordering::SeqCst)
    }

    /// Failures injected so far, of every kind.
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::SeqCst)
    }

    /// Counts one call of `op` and says whether it fails.
    fn check(&self, op: Op) -> Result<()> {
        self.calls[op as usize].fetch_add(1, Ordering::SeqCst);
        let reason = if self.down.load(Ordering::SeqCst) {
            Some("outage")
        } else if self.next[op as usize].fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok()
        {
            Some("failure")
        } else {
            let mut rate = self.rate.lock().unwrap_or_else(PoisonError::into_inner);
            rate.as_mut().and_then(|r| (r.rng.random::<f64>() < r.p).then_some("random failure"))
        };
        match reason {
            None => Ok(()),
            Some(reason) => {
                self.failures.fetch_add(1, Ordering::SeqCst);
                Err(object_store::Error::Generic { store: "fault", source: Box::new(Injected { op, reason }) })
            }
        }
    }
}

/// A store that passes every operation to `inner` unless its [`FaultControl`] makes it fail first.
#[derive(Debug)]
pub struct FaultStore {
    inner: Arc<dyn ObjectStore>,
    ctl: Arc<FaultControl>,
}

impl FaultStore {
    /// Wraps `inner` with a fresh control (nothing injected).
    pub fn new(inner: Arc<dyn ObjectStore>) -> Self {
        Self::with_control(inner, Arc::default())
    }

    /// Wraps `inner`, steered by `ctl` (which several stores may share).
    pub fn with_control(inner: Arc<dyn ObjectStore>, ctl: Arc<FaultControl>) -> Self {
        FaultStore { inner, ctl }
    }

    /// The control that steers this store.
    pub fn control(&self) -> Arc<FaultControl> {
        self.ctl.clone()
    }
}

impl std::fmt::Display for FaultStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FaultStore({})", self.inner)
    }
}

// Methods left to their defaults (get, get_ranges, put, put_multipart, delete_stream, rename…)
// come back through the ones below, so every call is counted once, under the kind it really is.
#[async_trait]
impl ObjectStore for FaultStore {
    async fn put_opts(&self, location: &Path, payload: PutPayload, opts: PutOptions) -> Result<PutResult> {
        self.ctl.check(Op::Put)?;
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(&self, location: &Path, opts: PutMultipartOptions) -> Result<Box<dyn MultipartUpload>> {
        self.ctl.check(Op::Put)?;
        let inner = self.inner.put_multipart_opts(location, opts).await?;
        Ok(Box::new(FaultUpload { inner, ctl: self.ctl.clone() }))
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.ctl.check(if options.head { Op::Head } else { Op::Get })?;
        self.inner.get_opts(location, options).await
    }

    async fn get_range(&self, location: &Path, range: Range<u64>) -> Result<Bytes> {
        self.ctl.check(Op::Get)?;
        self.inner.get_range(location, range).await
    }

    async fn head(&self, location: &Path) -> Result<ObjectMeta> {
        self.ctl.check(Op::Head)?;
        self.inner.head(location).await
    }

    async fn delete(&self, location: &Path) -> Result<()> {
        self.ctl.check(Op::Delete)?;
        self.inner.delete(location).await
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        match self.ctl.check(Op::List) {
            Ok(()) => self.inner.list(prefix),
            Err(e) => futures::stream::once(futures::future::ready(Err(e))).boxed(),
        }
    }

    fn list_with_offset(&self, prefix: Option<&Path>, offset: &Path) -> BoxStream<'static, Result<ObjectMeta>> {
        match self.ctl.check(Op::List) {
            Ok(()) => self.inner.list_with_offset(prefix, offset),
            Err(e) => futures::stream::once(futures::future::ready(Err(e))).boxed(),
        }
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.ctl.check(Op::List)?;
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy(&self, from: &Path, to: &Path) -> Result<()> {
        self.ctl.check(Op::Copy)?;
        self.inner.copy(from, to).await
    }

    async fn copy_if_not_exists(&self, from: &Path, to: &Path) -> Result<()> {
        self.ctl.check(Op::Copy)?;
        self.inner.copy_if_not_exists(from, to).await
    }
}

/// A multipart upload whose parts and completion can fail. A failed part never reaches the
/// inner upload: the object then completes without it, which is why a caller must not complete
/// after a failed part. `abort` is never failed, so cleanup always runs.
#[derive(Debug)]
struct FaultUpload {
    inner: Box<dyn MultipartUpload>,
    ctl: Arc<FaultControl>,
}

#[async_trait]
impl MultipartUpload for FaultUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        match self.ctl.check(Op::PutPart) {
            Ok(()) => self.inner.put_part(data),
            Err(e) => futures::future::ready(Err(e)).boxed(),
        }
    }

    async fn complete(&mut self) -> Result<PutResult> {
        self.ctl.check(Op::Complete)?;
        self.inner.complete().await
    }

    async fn abort(&mut self) -> Result<()> {
        self.inner.abort().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::TryStreamExt;
    use object_store::memory::InMemory;

    fn store() -> (FaultStore, Arc<FaultControl>) {
        let store = FaultStore::new(Arc::new(InMemory::new()));
        let ctl = store.control();
        (store, ctl)
    }

    fn injected(r: Result<impl std::fmt::Debug>) -> Injected {
        match r {
            Err(object_store::Error::Generic { store: "fault", source }) => match source.downcast_ref::<Injected>() {
                Some(i) => i.clone(),
                None => panic!("not injected: {source}"),
            },
            other => panic!("expected an injected failure, got {other:?}"),
        }
    }

    async fn read(store: &FaultStore, key: &Path) -> Bytes {
        store.get(key).await.unwrap().bytes().await.unwrap()
    }

    #[tokio::test]
    async fn with_nothing_injected_every_operation_reaches_the_inner_store() {
        let (store, ctl) = store();
        let (a, b) = (Path::from("d/a"), Path::from("d/b"));
        store.put(&a, "one".into()).await.unwrap();
        assert_eq!(read(&store, &a).await, "one");
        assert_eq!(store.get_range(&a, 1..3).await.unwrap(), "ne");
        assert_eq!(store.head(&a).await.unwrap().size, 3);
        store.copy(&a, &b).await.unwrap();
        store.copy_if_not_exists(&a, &Path::from("d/c")).await.unwrap();
        let listed: Vec<_> = store.list(Some(&Path::from("d"))).try_collect().await.unwrap();
        assert_eq!(listed.len(), 3);
        assert_eq!(store.list_with_delimiter(None).await.unwrap().common_prefixes, vec![Path::from("d")]);
        let mut up = store.put_multipart(&b).await.unwrap();
        up.put_part("x".into()).await.unwrap();
        up.put_part("y".into()).await.unwrap();
        up.complete().await.unwrap();
        assert_eq!(read(&store, &b).await, "xy");
        store.delete(&a).await.unwrap();

        let counts: Vec<_> = [Op::Put, Op::PutPart, Op::Complete, Op::Get, Op::Head, Op::List, Op::Delete, Op::Copy]
            .into_iter()
            .map(|op| ctl.calls(op))
            .collect();
        assert_eq!(counts, [2, 2, 1, 3, 1, 2, 1, 2]);
        assert_eq!(ctl.failures(), 0);
        assert_eq!(store.to_string(), "FaultStore(InMemory)");
    }

    #[tokio::test]
    async fn an_outage_fails_everything_until_it_ends() {
        let (store, ctl) = store();
        let key = Path::from("k");
        store.put(&key, "v".into()).await.unwrap();
        ctl.set_down(true);
        let e = store.get(&key).await.unwrap_err();
        assert!(e.to_string().contains("injected outage"), "{e}");
        assert_eq!(injected(store.head(&key).await), Injected { op: Op::Head, reason: "outage" });
        assert_eq!(injected(store.put(&key, "w".into()).await).op, Op::Put);
        assert_eq!(injected(store.list(None).try_collect::<Vec<_>>().await).op, Op::List);
        assert_eq!(injected(store.list_with_delimiter(None).await).op, Op::List);
        assert_eq!(injected(store.copy(&key, &Path::from("c")).await).op, Op::Copy);
        assert_eq!(injected(store.delete(&key).await).op, Op::Delete);
        assert!(store.put_multipart(&key).await.is_err());
        assert_eq!(ctl.failures(), 8);
        ctl.set_down(false);
        assert_eq!(read(&store, &key).await, "v");
        assert_eq!(ctl.calls(Op::Get), 2);
    }

    #[tokio::test]
    async fn fail_next_fails_exactly_n_calls_of_one_kind() {
        let (store, ctl) = store();
        let key = Path::from("k");
        store.put(&key, "v".into()).await.unwrap();
        ctl.fail_next(Op::Get, 2);
        assert_eq!(injected(store.get(&key).await), Injected { op: Op::Get, reason: "failure" });
        store.head(&key).await.unwrap();
        assert_eq!(injected(store.get_range(&key, 0..1).await).op, Op::Get);
        assert_eq!(read(&store, &key).await, "v");
        assert_eq!((ctl.calls(Op::Get), ctl.failures()), (3, 2));
        ctl.fail_next(Op::Delete, 5);
        ctl.fail_next(Op::Delete, 0);
        store.delete(&key).await.unwrap();
    }

    #[tokio::test]
    async fn a_fail_rate_is_about_right_and_the_same_for_a_seed() {
        let pattern = |p: f64, seed: u64| async move {
            let (store, ctl) = store();
            store.put(&Path::from("k"), "v".into()).await.unwrap();
            ctl.fail_rate(p, seed);
            let mut fails = Vec::new();
            for _ in 0..1000 {
                fails.push(store.head(&Path::from("k")).await.is_err());
            }
            assert_eq!(ctl.failures(), fails.iter().filter(|f| **f).count() as u64);
            fails
        };
        let a = pattern(0.25, 7).await;
        let n = a.iter().filter(|f| **f).count();
        assert!((180..320).contains(&n), "{n} of 1000 failed at p = 0.25");
        assert_eq!(a, pattern(0.25, 7).await);
        assert_ne!(a, pattern(0.25, 8).await);
        assert!(!pattern(0.0, 7).await.contains(&true));
        assert!(!pattern(1.0, 7).await.contains(&false));
    }

    #[tokio::test]
    async fn a_failed_part_is_never_written_and_complete_keeps_only_the_others() {
        let (store, ctl) = store();
        let key = Path::from("holed");
        let mut up = store.put_multipart(&key).await.unwrap();
        let a = up.put_part("aaa".into());
        ctl.fail_next(Op::PutPart, 1);
        let b = up.put_part("bbb".into());
        let c = up.put_part("ccc".into());
        a.await.unwrap();
        assert_eq!(injected(b.await).op, Op::PutPart);
        c.await.unwrap();
        // The bug class the core must avoid: completing after a failed part loses its bytes.
        up.complete().await.unwrap();
        assert_eq!(read(&store, &key).await, "aaaccc");
        assert_eq!((ctl.calls(Op::PutPart), ctl.calls(Op::Complete), ctl.failures()), (3, 1, 1));
    }

    #[tokio::test]
    async fn a_failed_complete_can_still_be_aborted() {
        let (store, ctl) = store();
        let key = Path::from("k");
        let mut up = store.put_multipart(&key).await.unwrap();
        up.put_part("a".into()).await.unwrap();
        ctl.fail_next(Op::Complete, 1);
        assert_eq!(injected(up.complete().await).op, Op::Complete);
        ctl.set_down(true);
        up.abort().await.unwrap();
        ctl.set_down(false);
        assert!(matches!(store.head(&key).await, Err(object_store::Error::NotFound { .. })));
    }

    #[tokio::test]
    async fn injected_failures_reach_the_filesystem_as_eio() {
        let (store, ctl) = store();
        ctl.set_down(true);
        let e = store.head(&Path::from("k")).await.unwrap_err();
        assert_eq!(crate::Error::Store(e).errno(), libc::EIO);
    }

    #[tokio::test]
    async fn stores_can_share_one_control() {
        let ctl = Arc::new(FaultControl::default());
        let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let (s1, s2) =
            (FaultStore::with_control(inner.clone(), ctl.clone()), FaultStore::with_control(inner, ctl.clone()));
        s1.put(&Path::from("k"), "v".into()).await.unwrap();
        ctl.fail_next(Op::Get, 1);
        assert!(s2.get(&Path::from("k")).await.is_err());
        assert_eq!(read(&s1, &Path::from("k")).await, "v");
        assert_eq!(ctl.calls(Op::Get), 2);
    }
}
