//! Caches of the read path, hiding moka: decoded frames (byte-bounded) and parsed object layouts,
//! both keyed by object identity (key and ETag), so a changed object is never served from the cache.

use std::sync::Arc;

use bytes::Bytes;
use moka::sync::Cache;
use shrinkfs_codec::{Layout, ObjectContext};

/// Identity of one version of one object.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ObjectId {
    /// Full key.
    pub key: Arc<str>,
    /// ETag (or version) of this version.
    pub etag: Arc<str>,
}

/// A parsed object: plain bytes or a shrinkfs layout with its opened context.
#[derive(Debug, Clone)]
pub enum Parsed {
    /// Written by another tool: read as is.
    Plain,
    /// A shrinkfs object.
    Framed {
        /// Frame map.
        layout: Arc<Layout>,
        /// Key and dictionary, ready to decode.
        ctx: Arc<ObjectContext>,
    },
}

/// Decoded frames, bounded by their total size in bytes.
#[derive(Clone)]
pub struct ChunkCache {
    frames: Cache<(ObjectId, u32), Bytes>,
}

impl ChunkCache {
    /// A cache holding up to `bytes` of decoded frames.
    pub fn new(bytes: u64) -> Self {
        // Least recently used, not moka's default TinyLFU: a frame read by many small reads of a
        // sequential scan would otherwise outrank, and keep out, every frame a random reader
        // touched once — and a random reader's second touch is the one a cache is for.
        let frames = Cache::builder()
            .eviction_policy(moka::policy::EvictionPolicy::lru())
            .max_capacity(bytes)
            .weigher(|_k, v: &Bytes| v.len().min(u32::MAX as usize) as u32)
            .build();
        ChunkCache { frames }
    }

    /// A decoded frame, if cached.
    pub fn get(&self, id: &ObjectId, frame: u32) -> Option<Bytes> {
        self.frames.get(&(id.clone(), frame))
    }

    /// Keeps a decoded frame.
    pub fn insert(&self, id: &ObjectId, frame: u32, bytes: Bytes) {
        self.frames.insert((id.clone(), frame), bytes);
        // Evict now rather than at moka's next maintenance: frames are large, and the cache is
        // part of the mount's memory limit.
        self.frames.run_pending_tasks();
    }

    /// Drops a decoded frame (its memory goes at the next insert's maintenance, at the latest).
    pub fn forget(&self, id: &ObjectId, frame: u32) {
        self.frames.invalidate(&(id.clone(), frame));
    }

    /// Bytes currently held (approximate until moka runs its maintenance).
    pub fn weighted_size(&self) -> u64 {
        self.frames.run_pending_tasks();
        self.frames.weighted_size()
    }
}

/// Parsed layouts by object version, bounded by the memory they hold (a count let a mount that
/// stored a hundred thousand small files hold 250 MB of them).
#[derive(Clone)]
pub struct LayoutCache {
    layouts: Cache<ObjectId, Parsed>,
}

/// What one cached layout holds besides its frame entries: the layout and its opened context,
/// their `Arc`s, the key's two strings and the cache's own entry (measured at about 1.4 KiB for a
/// small file's, with heaptrack).
const LAYOUT_OVERHEAD: usize = 1024;

impl LayoutCache {
    /// A cache of layouts holding about `bytes` in all.
    pub fn new(bytes: u64) -> Self {
        let weigh = |id: &ObjectId, parsed: &Parsed| {
            let entries = match parsed {
                Parsed::Plain => 0,
                Parsed::Framed { layout, .. } => {
                    layout.entries.len() * std::mem::size_of::<shrinkfs_codec::format::IndexEntry>()
                }
            };
            u32::try_from(LAYOUT_OVERHEAD + id.key.len() + id.etag.len() + entries).unwrap_or(u32::MAX)
        };
        LayoutCache { layouts: Cache::builder().max_capacity(bytes).weigher(weigh).build() }
    }

    /// Lets go of a version's layout (one replaced or deleted: no reader needs it any more, and a
    /// reader that does parses it again).
    pub fn forget(&self, id: &ObjectId) {
        self.layouts.invalidate(id);
    }

    /// The parsed form of an object version, if cached.
    pub fn get(&self, id: &ObjectId) -> Option<Parsed> {
        self.layouts.get(id)
    }

    /// Keeps a parsed object version.
    pub fn insert(&self, id: ObjectId, parsed: Parsed) {
        self.layouts.insert(id, parsed);
    }
}

/// Values learned recently, by key, with when: bounded by a weight (bytes), each trusted by its
/// reader only for as long as it chooses.
#[derive(Clone)]
pub struct Recent<V: Clone + Send + Sync + 'static> {
    entries: Cache<Arc<str>, (std::time::Instant, V)>,
}

impl<V: Clone + Send + Sync + 'static> Recent<V> {
    /// A cache of up to `weight` in total, each value weighing what `weigh` says.
    pub fn new(weight: u64, weigh: fn(&V) -> u32) -> Self {
        let entries = Cache::builder()
            .max_capacity(weight)
            .weigher(move |_k, v: &(std::time::Instant, V)| weigh(&v.1).max(1))
            .build();
        Recent { entries }
    }

    /// Keeps `value` for `key`, learned now.
    pub fn insert(&self, key: &str, value: V) {
        self.entries.insert(key.into(), (std::time::Instant::now(), value));
    }

    /// The value for `key` if it was learned less than `age` ago.
    pub fn get(&self, key: &str, age: std::time::Duration) -> Option<V> {
        self.entries.get(key).filter(|(at, _)| at.elapsed() < age).map(|(_, v)| v)
    }

    /// Forgets `key`.
    pub fn remove(&self, key: &str) {
        self.entries.invalidate(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_are_bounded_by_the_memory_they_hold_and_a_forgotten_one_goes() {
        let cache = LayoutCache::new(64 << 10);
        let id = |k: usize| ObjectId { key: format!("dir/file-{k}").into(), etag: "\"e\"".into() };
        for k in 0..1000 {
            cache.insert(id(k), Parsed::Plain);
        }
        cache.layouts.run_pending_tasks();
        assert!(cache.layouts.weighted_size() <= 64 << 10, "{}", cache.layouts.weighted_size());
        assert!(cache.layouts.entry_count() <= 64, "{} layouts of about 1 KiB in 64 KiB", cache.layouts.entry_count());
        cache.insert(id(5000), Parsed::Plain);
        assert!(cache.get(&id(5000)).is_some());
        cache.forget(&id(5000));
        assert!(cache.get(&id(5000)).is_none());
    }

    #[test]
    fn the_frame_cache_is_bounded_by_bytes() {
        let c = ChunkCache::new(10 * 1024);
        let id = ObjectId { key: "k".into(), etag: "e".into() };
        for f in 0..100 {
            c.insert(&id, f, Bytes::from(vec![0; 1024]));
        }
        assert!(c.weighted_size() <= 10 * 1024, "{}", c.weighted_size());
        let other = ObjectId { key: "k".into(), etag: "e2".into() };
        assert!(c.get(&other, 99).is_none(), "another version must not hit");
    }

    #[test]
    fn a_frame_touched_once_displaces_the_least_recent_however_often_it_was_read() {
        let c = ChunkCache::new(10 * 1024);
        let id = ObjectId { key: "k".into(), etag: "e".into() };
        for f in 0..10 {
            c.insert(&id, f, Bytes::from(vec![0; 1024]));
            for _ in 0..8 {
                assert!(c.get(&id, f).is_some());
            }
        }
        c.insert(&id, 100, Bytes::from(vec![0; 1024]));
        assert!(c.get(&id, 100).is_some(), "the newest frame is kept");
        assert!(c.get(&id, 0).is_none(), "the least recently used frame went");
    }
}
