//! Files whose last handle closed before their changes could be stored: their open state is kept,
//! with all its bytes, so the mount still shows them as written, and they are tried again with a
//! growing wait (and at unmount), as a local filesystem keeps dirty pages and retries writeback.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::openfile::SharedFile;

/// The first wait before a kept file is tried again; it doubles after each failed try.
const FIRST_WAIT: Duration = Duration::from_secs(1);
/// The longest wait between two tries of one kept file.
const LONGEST_WAIT: Duration = Duration::from_secs(60);

/// One kept file: its state and when it is tried next.
#[derive(Debug)]
struct Kept {
    file: SharedFile,
    next: Instant,
    wait: Duration,
}

/// The kept files, by inode.
#[derive(Debug, Default)]
pub(super) struct Unstored {
    kept: Mutex<HashMap<u64, Kept>>,
}

impl Unstored {
    /// Keeps `file`, the state of inode `ino`, whose last handle closed with its changes not
    /// stored; it is tried again after [`FIRST_WAIT`].
    pub(super) fn keep(&self, ino: u64, file: &SharedFile, now: Instant) {
        let kept = Kept { file: file.clone(), next: now + FIRST_WAIT, wait: FIRST_WAIT };
        self.lock().insert(ino, kept);
    }

    /// The kept files due for a try at `now` (every one when `all`).
    pub(super) fn due(&self, now: Instant, all: bool) -> Vec<(u64, SharedFile)> {
        self.lock().iter().filter(|(_, k)| all || k.next <= now).map(|(ino, k)| (*ino, k.file.clone())).collect()
    }

    /// After a try of `file` (inode `ino`) at `now`: forgets it if `done` (stored, or nothing
    /// left to store), else waits twice as long as last time before the next try.
    pub(super) fn tried(&self, ino: u64, file: &SharedFile, done: bool, now: Instant) {
        let mut kept = self.lock();
        let Some(k) = kept.get_mut(&ino).filter(|k| Arc::ptr_eq(&k.file, file)) else { return };
        if done {
            kept.remove(&ino);
        } else {
            k.wait = (k.wait * 2).min(LONGEST_WAIT);
            k.next = now + k.wait;
        }
    }

    /// Stops keeping `file` for inode `ino` (retired: stored, unlinked, or left to a handle's
    /// release); another state kept for `ino` stays.
    pub(super) fn forget(&self, ino: u64, file: &SharedFile) {
        let mut kept = self.lock();
        if kept.get(&ino).is_some_and(|k| Arc::ptr_eq(&k.file, file)) {
            kept.remove(&ino);
        }
    }

    /// Whether `file` is kept for inode `ino`.
    pub(super) fn holds(&self, ino: u64, file: &SharedFile) -> bool {
        self.lock().get(&ino).is_some_and(|k| Arc::ptr_eq(&k.file, file))
    }

    /// Kept files.
    pub(super) fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Kept>> {
        self.kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openfile::{Body, FileCell, OpenFile};

    fn state() -> SharedFile {
        FileCell::new(OpenFile {
            body: Body::Clean,
            ahead: Default::default(),
            meta: Default::default(),
            dirty: true,
            unlinked: false,
            base: None,
            lost_write: false,
        })
    }

    #[test]
    fn a_kept_file_is_due_after_a_wait_that_doubles_with_each_failed_try_up_to_a_minute() {
        let (u, f, t0) = (Unstored::default(), state(), Instant::now());
        u.keep(7, &f, t0);
        assert!(u.due(t0, false).is_empty());
        assert_eq!(u.due(t0, true).len(), 1, "every kept file is due at unmount");
        let mut at = t0 + FIRST_WAIT;
        let mut waits = vec![];
        for _ in 0..9 {
            assert_eq!(u.due(at, false).len(), 1);
            u.tried(7, &f, false, at);
            let wait = (1..=120).map(Duration::from_secs).find(|w| !u.due(at + *w, false).is_empty()).unwrap();
            waits.push(wait.as_secs());
            at += wait;
        }
        assert_eq!(waits, [2, 4, 8, 16, 32, 60, 60, 60, 60]);
        u.tried(7, &f, true, at);
        assert_eq!(u.len(), 0);
    }

    #[test]
    fn a_try_of_a_state_no_longer_kept_changes_nothing() {
        let (u, old, new, t0) = (Unstored::default(), state(), state(), Instant::now());
        u.keep(7, &new, t0);
        u.tried(7, &old, true, t0);
        u.forget(7, &old);
        assert!(u.holds(7, &new) && !u.holds(7, &old));
        u.forget(7, &new);
        assert_eq!(u.len(), 0);
    }
}
