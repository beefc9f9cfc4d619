//! Frames on their way from the store for read-ahead: a window is not fetched twice, and a read
//! that needs a frame already on its way waits for it instead of fetching and decoding it again.
//!
//! A sequential reader on a machine whose cores are all decoding catches up with its read-ahead:
//! on the 2-core machine a cold read of 1,024 frames decoded 1,052, the difference being frames a
//! read fetched while read-ahead was still decoding them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use crate::cache::ObjectId;

/// A frame of one object version.
type FrameKey = (ObjectId, u32);

/// The frames being fetched, each with a way to wait for the end of its fetch.
#[derive(Clone, Default)]
pub struct InFlight(Arc<Mutex<HashMap<FrameKey, watch::Receiver<()>>>>);

/// Frames one fetch has claimed. Each is released when the fetch has put it in the frame cache
/// ([`Claim::release`]), and the rest when the claim is dropped (the fetch is done, has failed or
/// its task has stopped); a release wakes every read waiting for the frame, which looks in the
/// frame cache then and fetches the frame itself if it is not there.
pub struct Claim {
    inflight: InFlight,
    id: ObjectId,
    frames: Vec<usize>,
    /// One per frame claimed, in `frames`' order, until it is released: dropping it is the
    /// wake-up (nothing is ever sent).
    done: Vec<Option<watch::Sender<()>>>,
}

/// What a read can wait for instead of fetching: frames of it that other fetches have on their way.
pub struct Joined {
    /// The frames being fetched.
    pub frames: Vec<usize>,
    waits: Vec<watch::Receiver<()>>,
}

impl InFlight {
    /// Claims, in order, those of `frames` of `id` that no fetch has claimed, as long as `admit`
    /// lets each in (it is asked once per unclaimed frame; `false` ends the claim there). For
    /// read-ahead, which leaves alone what is on its way.
    pub fn claim(&self, id: &ObjectId, frames: &[usize], admit: impl FnMut(usize) -> bool) -> Claim {
        self.claim_joining(id, frames, admit, false).0
    }

    /// Claims those of `frames` of `id` that no fetch has claimed, and joins the fetches of the
    /// others, at once. For a read, which needs them all.
    pub fn claim_or_join(&self, id: &ObjectId, frames: &[usize]) -> (Claim, Joined) {
        self.claim_joining(id, frames, |_| true, true)
    }

    fn claim_joining(
        &self,
        id: &ObjectId,
        frames: &[usize],
        mut admit: impl FnMut(usize) -> bool,
        join: bool,
    ) -> (Claim, Joined) {
        let mut claim = Claim { inflight: self.clone(), id: id.clone(), frames: Vec::new(), done: Vec::new() };
        let mut joined = Joined { frames: Vec::new(), waits: Vec::new() };
        let mut map = self.0.lock().expect("in-flight frames");
        for &f in frames {
            let key = (id.clone(), f as u32);
            if let Some(rx) = map.get(&key) {
                if join {
                    joined.frames.push(f);
                    joined.waits.push(rx.clone());
                }
                continue;
            }
            if !admit(f) {
                break;
            }
            let (done, waiting) = watch::channel(());
            map.insert(key, waiting);
            claim.frames.push(f);
            claim.done.push(Some(done));
        }
        (claim, joined)
    }
}

impl Claim {
    /// The frames claimed.
    pub fn frames(&self) -> &[usize] {
        &self.frames
    }

    /// Frame `f` is in the frame cache: the reads waiting for it go on.
    pub fn release(&mut self, f: usize) {
        if let Some(i) = self.frames.iter().position(|&c| c == f)
            && let Some(done) = self.done[i].take()
        {
            self.inflight.0.lock().expect("in-flight frames").remove(&(self.id.clone(), f as u32));
            drop(done);
        }
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        let mut map = self.inflight.0.lock().expect("in-flight frames");
        for (&f, done) in self.frames.iter().zip(&self.done) {
            if done.is_some() {
                map.remove(&(self.id.clone(), f as u32));
            }
        }
        // (The senders left are dropped after this, with the entries already gone.)
    }
}

impl Joined {
    /// Waits until every frame joined has been released, however its fetch ended.
    pub async fn wait(self) {
        for mut rx in self.waits {
            while rx.changed().await.is_ok() {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(etag: &str) -> ObjectId {
        ObjectId { key: "k".into(), etag: etag.into() }
    }

    #[tokio::test]
    async fn a_frame_is_claimed_once_and_its_waiters_wake_when_the_claim_ends() {
        let inflight = InFlight::default();
        let first = inflight.claim(&id("a"), &[1, 2, 3], |_| true);
        assert_eq!(first.frames(), [1, 2, 3]);
        // Claimed frames are skipped; admission stops a claim where it says no.
        let second = inflight.claim(&id("a"), &[2, 3, 4, 5, 6], |f| f < 6);
        assert_eq!(second.frames(), [4, 5]);
        assert_eq!(inflight.claim(&id("b"), &[1], |_| true).frames(), [1], "another version's frames are apart");
        // A read claims what nobody fetches and joins the fetches of the rest, one wait each.
        let (read, joined) = inflight.claim_or_join(&id("a"), &[0, 1, 4, 7]);
        assert_eq!((read.frames(), &joined.frames[..]), (&[0, 7][..], &[1, 4][..]));
        assert_eq!(joined.waits.len(), 2, "one wait per frame");
        assert!(inflight.claim(&id("a"), &[0, 7], |_| true).frames().is_empty(), "the read's frames are on their way");
        let waiter = tokio::spawn(joined.wait());
        tokio::task::yield_now().await;
        drop(first);
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "frame 4's fetch is still under way");
        assert!(inflight.claim_or_join(&id("a"), &[1, 2, 3]).1.frames.is_empty(), "released");
        drop(second);
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter).await.expect("woken").unwrap();
        drop(read);
        assert_eq!(inflight.claim(&id("a"), &[0, 1, 4, 7], |_| true).frames(), [0, 1, 4, 7], "claimable again");
    }

    #[tokio::test]
    async fn a_frame_released_wakes_its_readers_before_the_rest_of_its_fetch_is_done() {
        let inflight = InFlight::default();
        let mut fetch = inflight.claim(&id("a"), &[3, 4], |_| true);
        let (_, first) = inflight.claim_or_join(&id("a"), &[3]);
        let (_, second) = inflight.claim_or_join(&id("a"), &[4]);
        let (first, second) = (tokio::spawn(first.wait()), tokio::spawn(second.wait()));
        fetch.release(3);
        tokio::time::timeout(std::time::Duration::from_secs(5), first).await.expect("woken").unwrap();
        assert!(!second.is_finished(), "frame 4 is still on its way");
        assert_eq!(inflight.claim(&id("a"), &[3, 4], |_| true).frames(), [3], "frame 3 released, 4 not");
        fetch.release(3);
        drop(fetch);
        tokio::time::timeout(std::time::Duration::from_secs(5), second).await.expect("woken").unwrap();
    }

    #[tokio::test]
    async fn a_claim_dropped_by_a_task_that_panicked_still_wakes_its_waiters() {
        let inflight = InFlight::default();
        let claim = inflight.claim(&id("a"), &[0], |_| true);
        let (_, joined) = inflight.claim_or_join(&id("a"), &[0]);
        let fetch = tokio::spawn(async move {
            let _claim = claim;
            panic!("a fetch that fails badly");
        });
        assert!(fetch.await.is_err());
        tokio::time::timeout(std::time::Duration::from_secs(5), joined.wait()).await.expect("woken");
        assert!(inflight.claim_or_join(&id("a"), &[0]).1.frames.is_empty());
    }
}
