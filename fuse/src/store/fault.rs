//! `FaultStore`: the layer of the store stack that makes chosen operations fail — an outage (for
//! good, or for a while: a store that goes away and comes back), the next n calls of one kind, a
//! seeded random share of all calls — or slows them, or cuts GET bodies short, so tests can drive
//! the filesystem core through store failures without editing it. It forwards, and faults, the
//! paged-listing and multipart extensions of the store below it.
//!
//! Injected failures are `object_store::Error::Generic { store: "fault", .. }` with an
//! [`Injected`] source, which the core maps to EIO like any store failure, and which the retry
//! layer treats as passing (like a 503 or a refused connection).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::FutureExt;
use futures::stream::{BoxStream, StreamExt};
use object_store::list::{PaginatedListOptions, PaginatedListResult, PaginatedListStore};
use object_store::multipart::{MultipartStore, PartId};
use object_store::path::Path;
use object_store::{
    GetOptions, GetResult, GetResultPayload, ListResult, MultipartId, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, Result, UploadPart,
};

use super::Backend;
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
    /// Whether trying again may succeed (always, for injected failures: they stand for a 503 or
    /// a refused connection).
    pub transient: bool,
}

/// What to inject, shared (through an `Arc`) by a [`FaultStore`], its uploads and the test that
/// steers them. Nothing is injected until a knob is turned.
#[derive(Debug, Default)]
pub struct FaultControl {
    down: AtomicBool,
    /// The end of a timed outage.
    down_until: Mutex<Option<Instant>>,
    /// Per op: how long each call waits before it runs.
    delay: [Mutex<Duration>; OPS],
    /// How many of the next GET bodies end early.
    truncate: AtomicU32,
    /// Per op: how many of the next calls fail.
    next: [AtomicU32; OPS],
    /// Per op: how many of the next reads answer late, and how late.
    late: [Mutex<(u32, Duration)>; OPS],
    /// Per op: how many of the next calls take effect and then fail, their answer lost.
    lost: [AtomicU32; OPS],
    rate: Mutex<Option<Rate>>,
    calls: [AtomicU64; OPS],
    failures: AtomicU64,
    truncated: AtomicU64,
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

    /// The store goes away now and comes back after `d`: every operation in between fails.
    pub fn outage_for(&self, d: Duration) {
        *self.down_until.lock().unwrap_or_else(PoisonError::into_inner) = Some(Instant::now() + d);
    }

    /// Each call of kind `op` waits `d` before it runs (zero: no wait).
    pub fn delay(&self, op: Op, d: Duration) {
        *self.delay[op as usize].lock().unwrap_or_else(PoisonError::into_inner) = d;
    }

    /// The next `n` reads of kind `op` (`Get` or `Head`) are answered `d` after the store
    /// answered them: what they say was true when asked, and may not be when it arrives (a slow
    /// network, a busy server).
    pub fn late_next(&self, op: Op, n: u32, d: Duration) {
        *self.late[op as usize].lock().unwrap_or_else(PoisonError::into_inner) = (n, d);
    }

    /// Holds the answer of a read of kind `op` as [`Self::late_next`] says.
    async fn answer(&self, op: Op) {
        let d = {
            let mut late = self.late[op as usize].lock().unwrap_or_else(PoisonError::into_inner);
            if late.0 == 0 {
                return;
            }
            late.0 -= 1;
            late.1
        };
        tokio::time::sleep(d).await;
    }

    /// The bodies of the next `n` GETs (ranged or not) end after half their bytes.
    pub fn truncate_next(&self, n: u32) {
        self.truncate.store(n, Ordering::SeqCst);
    }

    /// Bodies cut short so far.
    pub fn truncated(&self) -> u64 {
        self.truncated.load(Ordering::SeqCst)
    }

    /// The next `n` operations of kind `op` fail (replacing any count set before).
    pub fn fail_next(&self, op: Op, n: u32) {
        self.next[op as usize].store(n, Ordering::SeqCst);
    }

    /// The next `n` operations of kind `op` (only `Complete` for now) take effect in the store,
    /// then fail as if the connection dropped before the answer came.
    pub fn lose_answer_next(&self, op: Op, n: u32) {
        self.lost[op as usize].store(n, Ordering::SeqCst);
    }

    /// After a call of `op` took effect: an injected failure if its answer is to be lost.
    fn lose_answer(&self, op: Op) -> Result<()> {
        if self.lost[op as usize].fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_err() {
            return Ok(());
        }
        self.failures.fetch_add(1, Ordering::SeqCst);
        let source = Box::new(Injected { op, reason: "lost answer", transient: true });
        Err(object_store::Error::Generic { store: "fault", source })
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

    /// Waits the delay set for `op`, then [`Self::check`]s it.
    async fn enter(&self, op: Op) -> Result<()> {
        let d = *self.delay[op as usize].lock().unwrap_or_else(PoisonError::into_inner);
        if !d.is_zero() {
            tokio::time::sleep(d).await;
        }
        self.check(op)
    }

    fn timed_down(&self) -> bool {
        let until = *self.down_until.lock().unwrap_or_else(PoisonError::into_inner);
        until.is_some_and(|t| Instant::now() < t)
    }

    /// Whether this GET's body is to end early.
    fn cut(&self) -> bool {
        let cut = self.truncate.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok();
        if cut {
            self.truncated.fetch_add(1, Ordering::SeqCst);
        }
        cut
    }

    /// Counts one call of `op` and says whether it fails.
    fn check(&self, op: Op) -> Result<()> {
        self.calls[op as usize].fetch_add(1, Ordering::SeqCst);
        let reason = if self.down.load(Ordering::SeqCst) || self.timed_down() {
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
                let source = Box::new(Injected { op, reason, transient: true });
                Err(object_store::Error::Generic { store: "fault", source })
            }
        }
    }
}

/// A store that passes every operation to `inner` unless its [`FaultControl`] makes it fail first.
#[derive(Debug)]
pub struct FaultStore {
    inner: Backend,
    ctl: Arc<FaultControl>,
}

impl FaultStore {
    /// Wraps `inner` with a fresh control (nothing injected).
    pub fn new(inner: Arc<dyn ObjectStore>) -> Self {
        Self::with_control(inner, Arc::default())
    }

    /// Wraps `inner`, steered by `ctl` (which several stores may share).
    pub fn with_control(inner: Arc<dyn ObjectStore>, ctl: Arc<FaultControl>) -> Self {
        FaultStore { inner: Backend::plain(inner), ctl }
    }

    /// The layer over `inner` (and its extensions), steered by `ctl`.
    pub fn layer(inner: Backend, ctl: Arc<FaultControl>) -> Backend {
        inner.wrap(FaultStore { inner: inner.clone(), ctl })
    }

    /// The control that steers this store.
    pub fn control(&self) -> Arc<FaultControl> {
        self.ctl.clone()
    }
}

impl std::fmt::Display for FaultStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FaultStore({})", self.inner.store)
    }
}

// Methods left to their defaults (get, get_ranges, put, put_multipart, delete_stream, rename…)
// come back through the ones below, so every call is counted once, under the kind it really is.
#[async_trait]
impl ObjectStore for FaultStore {
    async fn put_opts(&self, location: &Path, payload: PutPayload, opts: PutOptions) -> Result<PutResult> {
        self.ctl.enter(Op::Put).await?;
        self.inner.store.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(&self, location: &Path, opts: PutMultipartOptions) -> Result<Box<dyn MultipartUpload>> {
        self.ctl.enter(Op::Put).await?;
        let inner = self.inner.store.put_multipart_opts(location, opts).await?;
        Ok(Box::new(FaultUpload { inner, ctl: self.ctl.clone() }))
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let head = options.head;
        let op = if head { Op::Head } else { Op::Get };
        self.ctl.enter(op).await?;
        let got = self.inner.store.get_opts(location, options).await;
        self.ctl.answer(op).await;
        let mut got = got?;
        if !head && self.ctl.cut() {
            let GetResult { payload, meta, range, attributes } = got;
            let whole = GetResult { payload, meta: meta.clone(), range: range.clone(), attributes: attributes.clone() };
            let bytes = whole.bytes().await?;
            let half = bytes.slice(..bytes.len() / 2);
            let stream = futures::stream::once(futures::future::ready(Ok(half))).boxed();
            got = GetResult { payload: GetResultPayload::Stream(stream), meta, range, attributes };
        }
        Ok(got)
    }

    async fn head(&self, location: &Path) -> Result<ObjectMeta> {
        self.ctl.enter(Op::Head).await?;
        let got = self.inner.store.head(location).await;
        self.ctl.answer(Op::Head).await;
        got
    }

    async fn delete(&self, location: &Path) -> Result<()> {
        self.ctl.enter(Op::Delete).await?;
        self.inner.store.delete(location).await
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        match self.ctl.check(Op::List) {
            Ok(()) => self.inner.store.list(prefix),
            Err(e) => futures::stream::once(futures::future::ready(Err(e))).boxed(),
        }
    }

    fn list_with_offset(&self, prefix: Option<&Path>, offset: &Path) -> BoxStream<'static, Result<ObjectMeta>> {
        match self.ctl.check(Op::List) {
            Ok(()) => self.inner.store.list_with_offset(prefix, offset),
            Err(e) => futures::stream::once(futures::future::ready(Err(e))).boxed(),
        }
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.ctl.enter(Op::List).await?;
        self.inner.store.list_with_delimiter(prefix).await
    }

    async fn copy(&self, from: &Path, to: &Path) -> Result<()> {
        self.ctl.enter(Op::Copy).await?;
        self.inner.store.copy(from, to).await
    }

    async fn copy_if_not_exists(&self, from: &Path, to: &Path) -> Result<()> {
        self.ctl.enter(Op::Copy).await?;
        self.inner.store.copy_if_not_exists(from, to).await
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
        self.ctl.enter(Op::Complete).await?;
        self.inner.complete().await
    }

    async fn abort(&mut self) -> Result<()> {
        self.inner.abort().await
    }
}

#[async_trait]
impl PaginatedListStore for FaultStore {
    async fn list_paginated(&self, prefix: Option<&str>, opts: PaginatedListOptions) -> Result<PaginatedListResult> {
        self.ctl.enter(Op::List).await?;
        self.inner.paged()?.list_paginated(prefix, opts).await
    }
}

/// The multipart API: starting is a `Put`, parts and completion as through `put_multipart`;
/// `abort` is never failed, so cleanup always runs.
#[async_trait]
impl MultipartStore for FaultStore {
    async fn create_multipart(&self, path: &Path) -> Result<MultipartId> {
        self.ctl.enter(Op::Put).await?;
        self.inner.parts()?.create_multipart(path).await
    }

    async fn put_part(&self, path: &Path, id: &MultipartId, part_idx: usize, data: PutPayload) -> Result<PartId> {
        self.ctl.enter(Op::PutPart).await?;
        self.inner.parts()?.put_part(path, id, part_idx, data).await
    }

    async fn complete_multipart(&self, path: &Path, id: &MultipartId, parts: Vec<PartId>) -> Result<PutResult> {
        self.ctl.enter(Op::Complete).await?;
        let done = self.inner.parts()?.complete_multipart(path, id, parts).await?;
        self.ctl.lose_answer(Op::Complete)?;
        Ok(done)
    }

    async fn abort_multipart(&self, path: &Path, id: &MultipartId) -> Result<()> {
        self.inner.parts()?.abort_multipart(path, id).await
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

    async fn read(store: &FaultStore, key: &Path) -> bytes::Bytes {
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
        assert_eq!(injected(store.head(&key).await), Injected { op: Op::Head, reason: "outage", transient: true });
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
        assert_eq!(injected(store.get(&key).await), Injected { op: Op::Get, reason: "failure", transient: true });
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
