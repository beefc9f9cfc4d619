//! Frames on their way from the store, claimed by the fetch that brings them (read-ahead's or a
//! read's): read-ahead skips them, and a read that needs one waits for it, and is handed its
//! decoded bytes, instead of fetching and decoding it again.
//!
//! A sequential reader on a machine whose cores are all decoding catches up with its read-ahead:
//! on the 2-core machine a cold read of 1,024 frames decoded 1,052, the difference being frames a
//! read fetched while read-ahead was still decoding them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;

use tokio::sync::watch;

use crate::cache::ObjectId;

/// A frame of one object version.
type FrameKey = (ObjectId, u32);

/// What waiting for a frame gives: its decoded bytes, or `None` once its fetch ended without them.
type Waiting = watch::Receiver<Option<Bytes>>;

/// The frames being fetched, each with a way to wait for it.
#[derive(Clone, Default)]
pub struct InFlight(Arc<Mutex<HashMap<FrameKey, Waiting>>>);

/// Frames one fetch has claimed. Each is released with its bytes as soon as the fetch has them
/// ([`Claim::release`]), and the rest without when the claim is dropped (the fetch is done, has
/// failed, or its task or read was stopped); a release wakes every read waiting for the frame,
/// and one that gets no bytes fetches the frame itself.
pub struct Claim {
    inflight: InFlight,
    id: ObjectId,
    frames: Vec<usize>,
    /// One per frame claimed, in `frames`' order, until it is released.
    done: Vec<Option<watch::Sender<Option<Bytes>>>>,
}

/// What a read can wait for instead of fetching: frames of it that other fetches have on their
/// way, or that were cached by the time it claimed.
pub struct Joined {
    /// Those frames.
    pub frames: Vec<usize>,
    waits: Vec<Waiting>,
}

impl InFlight {
    /// Claims, in order, those of `frames` of `id` that no fetch has claimed and `cached` does
    /// not have, as long as `admit` lets each in (it is asked once per such frame; `false` ends
    /// the claim there). For read-ahead, which leaves alone what is on its way or cached.
    pub fn claim(
        &self,
        id: &ObjectId,
        frames: &[usize],
        cached: impl Fn(usize) -> Option<Bytes>,
        admit: impl FnMut(usize) -> bool,
    ) -> Claim {
        self.claim_joining(id, frames, cached, admit, false).0
    }

    /// Claims those of `frames` of `id` that no fetch has claimed and `cached` does not have,
    /// and joins the others, at once. For a read, which needs them all.
    pub fn claim_or_join(
        &self,
        id: &ObjectId,
        frames: &[usize],
        cached: impl Fn(usize) -> Option<Bytes>,
    ) -> (Claim, Joined) {
        self.claim_joining(id, frames, cached, |_| true, true)
    }

    /// (`cached` is asked with the map held: a fetch puts a frame in the frame cache before it
    /// releases it, so a frame neither in the map nor cached is being fetched by nobody, but a
    /// read whose wait ended without bytes, which fetches it again unclaimed.)
    fn claim_joining(
        &self,
        id: &ObjectId,
        frames: &[usize],
        cached: impl Fn(usize) -> Option<Bytes>,
        mut admit: impl FnMut(usize) -> bool,
        join: bool,
    ) -> (Claim, Joined) {
        let mut claim = Claim { inflight: self.clone(), id: id.clone(), frames: Vec::new(), done: Vec::new() };
        let mut joined = Joined { frames: Vec::new(), waits: Vec::new() };
        let mut map = self.map();
        for &f in frames {
            let key = (id.clone(), f as u32);
            let wait = match map.get(&key) {
                Some(rx) => Some(rx.clone()),
                // (Handed to a read as a frame already released with its bytes.)
                None if join => cached(f).map(|bytes| watch::channel(Some(bytes)).1),
                None if cached(f).is_some() => continue,
                None => None,
            };
            if let Some(wait) = wait {
                if join {
                    joined.frames.push(f);
                    joined.waits.push(wait);
                }
                continue;
            }
            if !admit(f) {
                break;
            }
            let (done, waiting) = watch::channel(None);
            map.insert(key, waiting);
            claim.frames.push(f);
            claim.done.push(Some(done));
        }
        (claim, joined)
    }

    // (A panic elsewhere while the map was held leaves it as consistent as ever: every change
    // to it is one insert or remove.)
    fn map(&self) -> MutexGuard<'_, HashMap<FrameKey, Waiting>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Claim {
    /// The frames claimed.
    pub fn frames(&self) -> &[usize] {
        &self.frames
    }

    /// Frame `f` is decoded to `bytes`: the reads waiting for it go on with them.
    pub fn release(&mut self, f: usize, bytes: &Bytes) {
        if let Some(i) = self.frames.iter().position(|&c| c == f)
            && let Some(done) = self.done[i].take()
        {
            self.inflight.map().remove(&(self.id.clone(), f as u32));
            done.send_replace(Some(bytes.clone()));
        }
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        let mut map = self.inflight.map();
        for (&f, done) in self.frames.iter().zip(&self.done) {
            if done.is_some() {
                map.remove(&(self.id.clone(), f as u32));
            }
        }
        // (The senders left are dropped after this, with the entries already gone: their
        // readers wake with no bytes.)
    }
}

impl Joined {
    /// Waits until every frame joined has been released, however its fetch ended: each frame
    /// with its bytes, or `None` if its fetch ended without them.
    pub async fn wait(self) -> Vec<(usize, Option<Bytes>)> {
        let mut got = Vec::with_capacity(self.frames.len());
        for (f, mut rx) in self.frames.into_iter().zip(self.waits) {
            // (`changed` fails once the sender is gone, whether or not it sent the bytes first.)
            let _ = rx.wait_for(Option::is_some).await;
            let bytes = rx.borrow().clone();
            got.push((f, bytes));
        }
        got
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(etag: &str) -> ObjectId {
        ObjectId { key: "k".into(), etag: etag.into() }
    }

    const WOKEN: std::time::Duration = std::time::Duration::from_secs(5);

    fn none(_: usize) -> Option<Bytes> {
        None
    }

    #[tokio::test]
    async fn a_frame_is_claimed_once_and_its_readers_get_its_bytes_or_none() {
        let inflight = InFlight::default();
        let mut first = inflight.claim(&id("a"), &[1, 2, 3], none, |_| true);
        assert_eq!(first.frames(), [1, 2, 3]);
        // Claimed frames are skipped; admission stops a claim where it says no.
        let second = inflight.claim(&id("a"), &[2, 3, 4, 5, 6], none, |f| f < 6);
        assert_eq!(second.frames(), [4, 5]);
        assert_eq!(inflight.claim(&id("b"), &[1], none, |_| true).frames(), [1], "another version's frames are apart");
        // A read claims what nobody fetches and joins the fetches of the rest.
        let (read, joined) = inflight.claim_or_join(&id("a"), &[0, 1, 4, 7], none);
        assert_eq!((read.frames(), &joined.frames[..]), (&[0, 7][..], &[1, 4][..]));
        assert!(
            inflight.claim(&id("a"), &[0, 7], none, |_| true).frames().is_empty(),
            "the read's frames are on their way"
        );
        let waiter = tokio::spawn(joined.wait());
        tokio::task::yield_now().await;
        first.release(1, &Bytes::from_static(b"one"));
        drop(first);
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "frame 4's fetch is still under way");
        assert!(inflight.claim_or_join(&id("a"), &[1, 2, 3], none).1.frames.is_empty(), "released");
        // A claim dropped without its bytes (a fetch that failed) wakes its readers with none.
        drop(second);
        let got = tokio::time::timeout(WOKEN, waiter).await.expect("woken").unwrap();
        assert_eq!(got, [(1, Some(Bytes::from_static(b"one"))), (4, None)]);
        drop(read);
        assert_eq!(inflight.claim(&id("a"), &[0, 1, 4, 7], none, |_| true).frames(), [0, 1, 4, 7], "claimable again");
    }

    #[tokio::test]
    async fn a_frame_released_wakes_its_readers_before_the_rest_of_its_fetch_is_done() {
        let inflight = InFlight::default();
        let mut fetch = inflight.claim(&id("a"), &[3, 4], none, |_| true);
        let (_, first) = inflight.claim_or_join(&id("a"), &[3], none);
        let (_, second) = inflight.claim_or_join(&id("a"), &[4], none);
        let (first, second) = (tokio::spawn(first.wait()), tokio::spawn(second.wait()));
        fetch.release(3, &Bytes::from_static(b"three"));
        let got = tokio::time::timeout(WOKEN, first).await.expect("woken").unwrap();
        assert_eq!(got, [(3, Some(Bytes::from_static(b"three")))]);
        assert!(!second.is_finished(), "frame 4 is still on its way");
        assert_eq!(inflight.claim(&id("a"), &[3, 4], none, |_| true).frames(), [3], "frame 3 released, 4 not");
        fetch.release(3, &Bytes::from_static(b"again"));
        drop(fetch);
        assert_eq!(tokio::time::timeout(WOKEN, second).await.expect("woken").unwrap(), [(4, None)]);
    }

    #[tokio::test]
    async fn a_cached_frame_is_neither_claimed_nor_fetched_but_handed_over() {
        let inflight = InFlight::default();
        let cached = |f: usize| (f == 2).then(|| Bytes::from_static(b"two"));
        assert_eq!(inflight.claim(&id("a"), &[1, 2, 3], cached, |_| true).frames(), [1, 3], "read-ahead skips it");
        let (read, joined) = inflight.claim_or_join(&id("a"), &[2, 5], cached);
        assert_eq!((read.frames(), &joined.frames[..]), (&[5][..], &[2][..]));
        assert_eq!(
            tokio::time::timeout(WOKEN, joined.wait()).await.expect("at once"),
            [(2, Some(Bytes::from_static(b"two")))]
        );
    }

    #[tokio::test]
    async fn a_claim_dropped_by_a_task_that_panicked_still_wakes_its_waiters() {
        let inflight = InFlight::default();
        let claim = inflight.claim(&id("a"), &[0], none, |_| true);
        let (_, joined) = inflight.claim_or_join(&id("a"), &[0], none);
        let fetch = tokio::spawn(async move {
            let _claim = claim;
            panic!("a fetch that fails badly");
        });
        assert!(fetch.await.is_err());
        assert_eq!(tokio::time::timeout(WOKEN, joined.wait()).await.expect("woken"), [(0, None)]);
        assert!(inflight.claim_or_join(&id("a"), &[0], none).1.frames.is_empty());
    }
}
