//! The persistent chunk cache: frames *as stored* (compressed, and still sealed when the mount has a
//! key) kept on local disk, keyed by object identity (key + ETag) and frame number, evicted least
//! recently used by total bytes, keeping a share of the disk free, and found again after a remount.
//! The cache verifies its own entries when they are read (frame header and payload checksums,
//! agreement with the object's index): `get` answers a checked frame, a miss, or `Damaged` after
//! deleting the bad entry — never unchecked bytes.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use moka::notification::RemovalCause;
use moka::sync::Cache;

use shrinkfs_codec::Layout;
use shrinkfs_codec::format::{FRAME_HEADER_LEN, FrameHeader, checksum};

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

/// What the cache has for a frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cached {
    /// The stored frame, checked against the object's index and its checksum.
    Verified(Bytes),
    /// Not cached.
    Miss,
    /// An entry was there but failed its checks (damaged, or another object's): it is deleted.
    Damaged,
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
/// the key's length), then the frame number. A collision can only produce a miss: `get` checks
/// every entry against the object's index and checksums before answering it.
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
            if name.starts_with('.') && name.ends_with(".frame.tmp") {
                // A frame being written when a mount ended without finishing it (a crash, a kill).
                let _ = fs::remove_file(entry.path());
            } else if let (true, Ok(meta)) = (name.ends_with(".frame"), entry.metadata()) {
                cache.index.insert(name, meta.len().min(u32::MAX as u64) as u32);
            }
        }
        cache.index.run_pending_tasks();
        Ok(cache)
    }

    /// Stored frame `frame` of object version `id`, whose layout is `layout`, checked before it is
    /// answered; a damaged entry is deleted.
    pub fn get(&self, id: &ObjectId, frame: usize, layout: &Layout) -> Cached {
        let Some(stored) = self.read(id, frame as u32) else { return Cached::Miss };
        if stored_frame_ok(&stored, frame, layout) {
            Cached::Verified(stored)
        } else {
            self.remove(id, frame as u32);
            Cached::Damaged
        }
    }

    /// The bytes of an entry as they are on disk, unchecked.
    fn read(&self, id: &ObjectId, frame: u32) -> Option<Bytes> {
        let name = entry_name(id, frame);
        self.index.get(&name)?;
        match read_regular(&self.dir.join(&name)) {
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
        // (A new file: whatever else is there, a FIFO say, is not written into.)
        let _ = fs::remove_file(&tmp);
        let written = fs::OpenOptions::new().write(true).create_new(true).open(&tmp).and_then(|mut f| {
            use std::io::Write;
            f.write_all(stored)
        });
        if written.and_then(|()| fs::rename(&tmp, self.dir.join(&name))).is_ok() {
            self.index.insert(name, stored.len().min(u32::MAX as usize) as u32);
            // Evictions now, not at some later call: the files stay within the size asked for.
            self.index.run_pending_tasks();
        } else {
            let _ = fs::remove_file(&tmp);
        }
    }

    /// Drops an entry (one that passed its checks here but did not decode: a sealed frame of
    /// another object whose entry has the same name and lengths).
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

/// Cheap checks of a stored frame before it is decoded: its header parses, agrees with the index,
/// and its payload matches its checksum.
fn stored_frame_ok(b: &[u8], frame: usize, layout: &Layout) -> bool {
    let Some(entry) = layout.entries.get(frame) else { return false };
    match FrameHeader::parse(b, frame as u64, layout.header.sealed()) {
        Ok(h) => {
            entry.matches(&h)
                && b.len() == FRAME_HEADER_LEN + h.stored_len as usize
                && checksum(&b[FRAME_HEADER_LEN..]) == h.stored_crc
        }
        Err(_) => false,
    }
}

fn free_fraction(dir: &Path) -> Option<f64> {
    let st = nix::sys::statvfs::statvfs(dir).ok()?;
    if st.blocks() == 0 {
        return None;
    }
    Some(st.blocks_available() as f64 / st.blocks() as f64)
}

/// The bytes of the regular file at `path`; anything else there (a FIFO, a device, a link) is
/// refused without waiting on it (a FIFO's open would block until a writer came).
fn read_regular(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW).open(path)?;
    if !f.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut out = Vec::new();
    f.read_to_end(&mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(e: &str) -> ObjectId {
        ObjectId { key: "k".into(), etag: e.into() }
    }

    /// An object of 4 KiB frames, its layout, and its stored frames.
    fn object() -> (Layout, Vec<Bytes>) {
        let cfg = shrinkfs_codec::EncodeConfig { frame_size: 4096, ..Default::default() };
        let data: Vec<u8> = (0..40_000u32).map(|i| (i % 251) as u8).collect();
        let obj = shrinkfs_codec::encode_all_with(&cfg, &data, &Default::default()).unwrap();
        let layout = Layout::parse(&obj, obj.len() as u64).unwrap();
        let frames = layout
            .entries
            .iter()
            .map(|e| Bytes::copy_from_slice(&obj[e.stored_range().start as usize..e.stored_range().end as usize]))
            .collect();
        (layout, frames)
    }

    #[test]
    fn frames_survive_a_reopen_and_are_evicted_by_size() {
        let d = tempfile::tempdir().unwrap();
        let cfg = DiskCacheConfig { dir: d.path().join("c"), max_bytes: 10_000, min_free: 0.0 };
        let c = DiskCache::open(&cfg).unwrap();
        c.put(&id("a"), 0, &[1; 3000]);
        assert_eq!(c.read(&id("a"), 0).unwrap().len(), 3000);
        assert!(c.read(&id("b"), 0).is_none(), "another version must miss");
        drop(c);
        // What a mount that ended in the middle of a put left.
        let leftover = cfg.dir.join(format!(".{}.tmp", entry_name(&id("a"), 7)));
        fs::write(&leftover, [3; 100]).unwrap();
        let c = DiskCache::open(&cfg).unwrap();
        assert!(!leftover.exists(), "a frame left half-written is removed at open");
        assert_eq!(c.read(&id("a"), 0).unwrap().len(), 3000, "lost across a reopen");
        for f in 1..20 {
            c.put(&id("a"), f, &[2; 3000]);
            // Counted before anything else runs the cache's pending work.
            let files = fs::read_dir(&cfg.dir).unwrap().count();
            assert!(files <= 4, "after frame {f}: evicted entries left {files} files");
        }
        assert!(c.bytes() <= 10_000, "{}", c.bytes());
        c.remove(&id("a"), 19);
        assert!(c.read(&id("a"), 19).is_none());
    }

    /// A FIFO in an entry's place (found by a black-box probe: the read waited for a writer
    /// forever) is a miss, and the next put replaces it.
    #[test]
    fn a_fifo_in_an_entrys_place_is_a_miss_not_a_wait() {
        let d = tempfile::tempdir().unwrap();
        let cfg = DiskCacheConfig { dir: d.path().join("c"), max_bytes: 1 << 20, min_free: 0.0 };
        let c = DiskCache::open(&cfg).unwrap();
        c.put(&id("a"), 0, &[1; 3000]);
        let path = cfg.dir.join(entry_name(&id("a"), 0));
        fs::remove_file(&path).unwrap();
        rustix::fs::mknodat(rustix::fs::CWD, &path, rustix::fs::FileType::Fifo, rustix::fs::Mode::from(0o600), 0)
            .unwrap();
        let start = std::time::Instant::now();
        assert!(c.read(&id("a"), 0).is_none());
        assert!(start.elapsed() < std::time::Duration::from_secs(5));
        c.put(&id("a"), 0, &[2; 3000]);
        assert_eq!(c.read(&id("a"), 0).unwrap(), vec![2u8; 3000]);
    }

    #[test]
    fn only_checked_frames_are_served_and_a_bad_entry_is_deleted() {
        let d = tempfile::tempdir().unwrap();
        let cfg = DiskCacheConfig { dir: d.path().join("c"), max_bytes: 1 << 20, min_free: 0.0 };
        let c = DiskCache::open(&cfg).unwrap();
        let (layout, frames) = object();
        assert!(frames.len() >= 3);
        assert_eq!(c.get(&id("a"), 0, &layout), Cached::Miss);
        c.put(&id("a"), 0, &frames[0]);
        assert_eq!(c.get(&id("a"), 0, &layout), Cached::Verified(frames[0].clone()));
        // A flipped payload byte, and another frame's bytes under this frame's name.
        let mut bad = frames[1].to_vec();
        *bad.last_mut().unwrap() ^= 1;
        c.put(&id("a"), 1, &bad);
        c.put(&id("a"), 2, &frames[0]);
        for f in [1, 2] {
            assert_eq!(c.get(&id("a"), f, &layout), Cached::Damaged, "frame {f}");
            assert_eq!(c.get(&id("a"), f, &layout), Cached::Miss, "frame {f}: the bad entry stays");
        }
        assert_eq!(c.get(&id("a"), 99, &layout), Cached::Miss, "a frame the layout has not");
    }
}
