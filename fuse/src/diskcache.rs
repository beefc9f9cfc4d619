//! The persistent chunk cache: frames *as stored* (compressed, and still sealed when the mount has a
//! key) kept on local disk, keyed by object identity (key + ETag) and frame number, evicted least
//! recently used by total bytes, keeping a share of the disk free, and found again after a remount.
//! Entries are verified when read (frame header and payload checksums, agreement with the index);
//! a bad entry is deleted and the frame fetched from the store again, never served.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use moka::notification::RemovalCause;
use moka::sync::Cache;

use shrinkfs_codec::format::checksum;

use crate::cache::ObjectId;

/// Disk cache settings.
#[derive(Debug, Clone)]
pub struct DiskCacheConfig {
    /// Directory holding the cache (created if missing).
    pub dir: PathBuf,
    /// Most bytes of frames kept.
    pub max_bytes: u64,
    /// Fraction of the disk's space to leave free (0.05 = 5%): no frame is added below it.
    pub min_free: f64,
}

/// Frames on disk.
#[derive(Clone)]
pub struct DiskCache {
    dir: Arc<PathBuf>,
    index: Cache<String, u32>,
    min_free: f64,
}

impl std::fmt::Debug for DiskCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DiskCache({})", self.dir.display())
    }
}

/// The file name of a frame: a stable hash of the object identity (CRC-32C of key and ETag, and
/// the key's length), then the frame number. A collision can only produce a miss: the caller checks
/// every entry against the object's index and checksums before using it.
fn entry_name(id: &ObjectId, frame: u32) -> String {
    let (k, e) = (checksum(id.key.as_bytes()), checksum(id.etag.as_bytes()));
    format!("{k:08x}{e:08x}{:08x}-{frame}.frame", id.key.len())
}

impl DiskCache {
    /// Opens (or creates) the cache, indexing the frames already on disk.
    pub fn open(cfg: &DiskCacheConfig) -> std::io::Result<Self> {
        fs::create_dir_all(&cfg.dir)?;
        let dir = Arc::new(cfg.dir.clone());
        let evict_dir = dir.clone();
        let index = Cache::builder()
            .max_capacity(cfg.max_bytes)
            .weigher(|_k: &String, v: &u32| *v)
            .eviction_listener(move |name: Arc<String>, _len, cause| {
                if cause != RemovalCause::Replaced {
                    let _ = fs::remove_file(evict_dir.join(name.as_str()));
                }
            })
            .build();
        let cache = DiskCache { dir, index, min_free: cfg.min_free };
        for entry in fs::read_dir(&cfg.dir)?.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let (true, Ok(meta)) = (name.ends_with(".frame"), entry.metadata()) {
                cache.index.insert(name, meta.len().min(u32::MAX as u64) as u32);
            }
        }
        Ok(cache)
    }

    /// The stored bytes of a frame, if cached.
    pub fn get(&self, id: &ObjectId, frame: u32) -> Option<Bytes> {
        let name = entry_name(id, frame);
        self.index.get(&name)?;
        match fs::read(self.dir.join(&name)) {
            Ok(b) => Some(Bytes::from(b)),
            Err(_) => {
                self.index.invalidate(&name);
                None
            }
        }
    }

    /// Keeps the stored bytes of a frame (skipped when the disk is too full).
    pub fn put(&self, id: &ObjectId, frame: u32, stored: &[u8]) {
        if !self.has_room() {
            return;
        }
        let name = entry_name(id, frame);
        let tmp = self.dir.join(format!(".{name}.tmp"));
        // Written aside and renamed, so a crash never leaves a partial entry under the real name.
        if fs::write(&tmp, stored).and_then(|()| fs::rename(&tmp, self.dir.join(&name))).is_ok() {
            self.index.insert(name, stored.len().min(u32::MAX as usize) as u32);
        } else {
            let _ = fs::remove_file(&tmp);
        }
    }

    /// Drops an entry that failed verification.
    pub fn remove(&self, id: &ObjectId, frame: u32) {
        let name = entry_name(id, frame);
        self.index.invalidate(&name);
        let _ = fs::remove_file(self.dir.join(name));
    }

    /// Bytes held (after pending evictions).
    pub fn bytes(&self) -> u64 {
        self.index.run_pending_tasks();
        self.index.weighted_size()
    }

    fn has_room(&self) -> bool {
        free_fraction(&self.dir).is_none_or(|f| f >= self.min_free)
    }
}

fn free_fraction(dir: &Path) -> Option<f64> {
    let st = nix::sys::statvfs::statvfs(dir).ok()?;
    if st.blocks() == 0 {
        return None;
    }
    Some(st.blocks_available() as f64 / st.blocks() as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(e: &str) -> ObjectId {
        ObjectId { key: "k".into(), etag: e.into() }
    }

    #[test]
    fn frames_survive_a_reopen_and_are_evicted_by_size() {
        let d = tempfile::tempdir().unwrap();
        let cfg = DiskCacheConfig { dir: d.path().join("c"), max_bytes: 10_000, min_free: 0.0 };
        let c = DiskCache::open(&cfg).unwrap();
        c.put(&id("a"), 0, &[1; 3000]);
        assert_eq!(c.get(&id("a"), 0).unwrap().len(), 3000);
        assert!(c.get(&id("b"), 0).is_none(), "another version must miss");
        drop(c);
        let c = DiskCache::open(&cfg).unwrap();
        assert_eq!(c.get(&id("a"), 0).unwrap().len(), 3000, "lost across a reopen");
        for f in 1..20 {
            c.put(&id("a"), f, &[2; 3000]);
        }
        assert!(c.bytes() <= 10_000, "{}", c.bytes());
        let files = fs::read_dir(&cfg.dir).unwrap().count();
        assert!(files <= 4, "evicted entries left {files} files");
        c.remove(&id("a"), 19);
        assert!(c.get(&id("a"), 19).is_none());
    }
}
