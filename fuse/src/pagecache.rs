//! What the kernel's page cache may hold of each file: the object version last opened clean for
//! reading, so that opening the same version again lets the kernel keep the pages it cached
//! (`FOPEN_KEEP_CACHE`) instead of reading them through the mount again.
//!
//! The rule is conservative: a version is recorded only by a read-only open that loaded the file
//! from the store (no other handle open), and anything that may have put other bytes in the
//! kernel's pages (a handle open for writing, a change of size or attributes) forgets it. A
//! version differs from the last one recorded whenever the object changed, here or elsewhere.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Inodes whose version is remembered, at most; past that the record starts again (an open then
/// costs the kernel its cached pages once).
const MAX_FILES: usize = 100_000;

/// The version each file's cached pages were read from, by inode.
#[derive(Debug, Default)]
pub struct PageCacheVersions {
    versions: Mutex<HashMap<u64, Arc<str>>>,
}

impl PageCacheVersions {
    /// A read-only open of `ino` loaded version `etag` from the store: whether the kernel may keep
    /// the pages it cached (they were read from this same version). Records the version.
    pub fn opened_clean(&self, ino: u64, etag: &Arc<str>) -> bool {
        let mut v = self.versions.lock().expect("page cache versions lock");
        if v.len() >= MAX_FILES && !v.contains_key(&ino) {
            v.clear();
        }
        v.insert(ino, etag.clone()).is_some_and(|before| before == *etag)
    }

    /// The kernel's pages of `ino` may hold bytes of no stored version (a write, a truncate): the
    /// next open lets the kernel drop them.
    pub fn changed(&self, ino: u64) {
        self.versions.lock().expect("page cache versions lock").remove(&ino);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_same_version_opened_again_keeps_the_pages() {
        let p = PageCacheVersions::default();
        let (v1, v2): (Arc<str>, Arc<str>) = ("v1".into(), "v2".into());
        assert!(!p.opened_clean(7, &v1), "first open: nothing cached from it yet");
        assert!(p.opened_clean(7, &v1));
        assert!(!p.opened_clean(7, &v2), "another version");
        assert!(p.opened_clean(7, &v2));
        p.changed(7);
        assert!(!p.opened_clean(7, &v2), "written or truncated since");
        assert!(!p.opened_clean(8, &v2), "per inode");
    }
}
