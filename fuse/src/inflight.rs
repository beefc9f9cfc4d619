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

/// Frames one fetch has claimed. Dropping it, when the fetch is done, has failed or its task has
/// stopped, releases them and wakes every read waiting for them; each looks in the frame cache
/// then, and fetches what it does not find there.
pub struct Claim {
    inflight: InFlight,
    id: ObjectId,
    frames: Vec<usize>,
    // (Dropped after `drop` has released the frames: closing it is the wake-up.)
    _done: watch::Sender<()>,
}

/// What a read can wait for instead of fetching: the fetches under way of some of its frames.
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
        let (done, waiting) = watch::channel(());
        let mut claimed = Vec::new();
        let mut joined = Joined { frames: Vec::new(), waits: Vec::new() };
        let mut map = self.0.lock().expect("in-flight frames");
        for &f in frames {
            let key = (id.clone(), f as u32);
            if let Some(rx) = map.get(&key) {
                if join {
                    joined.frames.push(f);
                    if !joined.waits.iter().any(|w| w.same_channel(rx)) {
                        joined.waits.push(rx.clone());
                    }
                }
                continue;
            }
            if !admit(f) {
                break;
            }
            map.insert(key, waiting.clone());
            claimed.push(f);
        }
        (Claim { inflight: self.clone(), id: id.clone(), frames: claimed, _done: done }, joined)
    }
}

impl Claim {
    /// The frames claimed.
    pub fn frames(&self) -> &[usize] {
        &self.frames
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        let mut map = self.inflight.0.lock().expect("in-flight frames");
        for &f in &self.frames {
            map.remove(&(self.id.clone(), f as u32));
        }
    }
}

impl Joined {
    /// Waits until every fetch joined has ended, however it ended.
    pub async fn wait(self) {
        for mut rx in self.waits {
            // (Nothing is ever sent: the sender's drop ends the wait.)
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
        assert_eq!(joined.waits.len(), 2, "one wait per fetch");
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
