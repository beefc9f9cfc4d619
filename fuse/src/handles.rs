//! Open handles: the handle table (what each file handle is open on) and the open-file table (each
//! open inode's shared state and the handles counted on it), under one lock each.
//!
//! Every handle, reader or writer, is counted in the open-file table, so the last release is known
//! exactly and a file being closed is never confused with one being reopened.
//!
//! Direct I/O (the kernel's page cache bypassed): a write-only handle gets it when it is the only
//! handle of its file, and every handle opened beside one that has it gets it too. So no page the
//! kernel caches of a file can be left behind by writes that went around the cache: readers that
//! were open first keep the writer on the page cache, and readers that come later read around it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};
use crate::openfile::{FileCell, OpenFile, SharedFile};
use crate::readahead::{Readahead, Step};

/// An open file handle.
#[derive(Debug, Clone)]
pub struct Handle {
    /// Its inode.
    pub ino: u64,
    /// Opened for writing.
    pub write: bool,
    /// The open-file state this handle is counted in.
    pub file: SharedFile,
    /// How far ahead of this handle's reads frames are fetched.
    pub readahead: Readahead,
    /// The process that opened it, where the kernel said (see `Fs::flush_by`).
    pub owner: Option<u32>,
    /// The kernel may keep the pages it cached of the file (see `crate::pagecache`).
    pub keep_cache: bool,
    /// Its reads and writes go around the kernel's page cache (see the module's note).
    pub direct: bool,
    /// Opened with `O_DIRECT`: its reads go around the kernel's page cache too.
    pub uncached: bool,
    /// The generation of its file's state it was opened on (see `FileCell::generation`).
    pub generation: u64,
}

/// One inode in the open-file table: its state and the handles counted on it.
#[derive(Debug)]
pub struct OpenEntry {
    /// The state every handle of the inode shares.
    pub file: SharedFile,
    /// Handles open on it.
    pub handles: u32,
    /// Of those, handles open for writing.
    pub writers: u32,
    /// Of those, handles with direct I/O.
    pub direct: u32,
}

/// The handle and open-file tables.
#[derive(Debug)]
pub struct OpenHandles {
    handles: Mutex<HashMap<u64, Handle>>,
    open: Mutex<HashMap<u64, OpenEntry>>,
    next_fh: AtomicU64,
    /// One lock per inode being opened from the store (see [`Self::opening`]).
    opening: Mutex<HashMap<u64, Arc<tokio::sync::Mutex<()>>>>,
}

impl Default for OpenHandles {
    fn default() -> Self {
        OpenHandles {
            handles: Mutex::default(),
            open: Mutex::default(),
            next_fh: AtomicU64::new(1),
            opening: Mutex::default(),
        }
    }
}

/// Held while inode `ino` is opened from the store (see [`OpenHandles::opening`]).
pub struct Opening<'a> {
    table: &'a OpenHandles,
    ino: u64,
    gate: Arc<tokio::sync::Mutex<()>>,
    held: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl Drop for Opening<'_> {
    fn drop(&mut self) {
        self.held = None;
        let mut gates = self.table.opening.lock().expect("opening lock");
        // Only the table's reference and this one left: nobody waits, the entry goes.
        if Arc::strong_count(&self.gate) == 2 {
            gates.remove(&self.ino);
        }
    }
}

impl OpenHandles {
    /// Whether inode `ino` is open.
    pub fn is_open(&self, ino: u64) -> bool {
        self.open.lock().expect("open lock").contains_key(&ino)
    }

    /// The shared state of open inode `ino`.
    pub fn file(&self, ino: u64) -> Option<SharedFile> {
        self.open.lock().expect("open lock").get(&ino).map(|e| e.file.clone())
    }

    /// Waits until no other open of `ino` is reading its state from the store, and keeps others
    /// waiting until the returned guard is dropped. While it is held and `ino` is not open, no
    /// commit of `ino` can happen (every commit is made through an open state), so the state
    /// read from the store is the latest: without it, a state read just before another handle's
    /// commit and closing would be attached after it, and the next append would overwrite.
    pub async fn opening(&self, ino: u64) -> Opening<'_> {
        let gate = self.opening.lock().expect("opening lock").entry(ino).or_default().clone();
        let held = Some(gate.clone().lock_owned().await);
        Opening { table: self, ino, gate, held }
    }

    /// Counts a new handle on `ino`: on the state already open, or on `fresh` when there is none.
    pub fn attach(&self, ino: u64, write: bool, fresh: Option<OpenFile>) -> Option<SharedFile> {
        let mut open = self.open.lock().expect("open lock");
        let entry = match (open.get_mut(&ino), fresh) {
            (Some(e), _) => e,
            (None, Some(of)) => {
                open.entry(ino).or_insert(OpenEntry { file: FileCell::new(of), handles: 0, writers: 0, direct: 0 })
            }
            (None, None) => return None,
        };
        entry.handles += 1;
        entry.writers += u32::from(write);
        Some(entry.file.clone())
    }

    /// Opens `ino`, just created, as `of` with one writer: a state left for this inode (an
    /// unlinked file of the same name) is not this file's.
    pub fn attach_new(&self, ino: u64, of: OpenFile) -> SharedFile {
        let file = FileCell::new(of);
        self.open
            .lock()
            .expect("open lock")
            .insert(ino, OpenEntry { file: file.clone(), handles: 1, writers: 1, direct: 0 });
        file
    }

    /// A new handle number for a handle on `ino` counted in `file`.
    pub fn new_handle(&self, ino: u64, write: bool, file: SharedFile) -> u64 {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        let h = Handle {
            ino,
            write,
            file,
            readahead: Readahead::default(),
            owner: None,
            keep_cache: false,
            direct: false,
            uncached: false,
            generation: 0,
        };
        self.handles.lock().expect("handles lock").insert(fh, h);
        fh
    }

    /// Handle `fh`.
    pub fn handle(&self, fh: u64) -> Result<Handle> {
        self.handles.lock().expect("handles lock").get(&fh).cloned().ok_or(Error::Stale)
    }

    /// Records the process that opened handle `fh`.
    pub fn set_owner(&self, fh: u64, process: u32) {
        if let Some(h) = self.handles.lock().expect("handles lock").get_mut(&fh) {
            h.owner = Some(process);
        }
    }

    /// Records that handle `fh` was opened with `O_DIRECT`.
    pub fn set_uncached(&self, fh: u64) {
        if let Some(h) = self.handles.lock().expect("handles lock").get_mut(&fh) {
            h.uncached = true;
        }
    }

    /// Lets the kernel keep the pages it cached of handle `fh`'s file.
    pub fn set_keep_cache(&self, fh: u64) {
        if let Some(h) = self.handles.lock().expect("handles lock").get_mut(&fh) {
            h.keep_cache = true;
        }
    }

    /// Decides whether handle `fh`, just opened (`write_only`: for writing alone), bypasses the
    /// kernel's page cache, as the module's note says; returns whether it does.
    pub fn choose_direct(&self, fh: u64, write_only: bool) -> bool {
        let mut handles = self.handles.lock().expect("handles lock");
        let Some(h) = handles.get_mut(&fh) else { return false };
        let mut open = self.open.lock().expect("open lock");
        let Some(e) = open.get_mut(&h.ino).filter(|e| Arc::ptr_eq(&e.file, &h.file)) else { return false };
        if !h.direct && (e.direct > 0 || (write_only && e.handles == 1)) {
            h.direct = true;
            e.direct += 1;
        }
        h.direct
    }

    /// Records a read of `offset..end` through `fh`; returns the frames to fetch ahead and what
    /// the reader passed. Nothing is passed through a handle that bypasses the kernel's page
    /// cache, nor while other handles share the handle's open state: they may still read it
    /// from the frame cache.
    pub fn read_ahead(&self, fh: u64, offset: u64, end: u64, max: usize) -> Step {
        let mut handles = self.handles.lock().expect("handles lock");
        let Some(h) = handles.get_mut(&fh) else { return Step { window: 0, passed: 0..0 } };
        let mut step = h.readahead.advance(offset, end, max);
        let alone = || {
            let open = self.open.lock().expect("open lock");
            open.get(&h.ino).filter(|e| Arc::ptr_eq(&e.file, &h.file)).is_some_and(|e| e.handles <= 1)
        };
        if h.direct || h.uncached || (!step.passed.is_empty() && !alone()) {
            step.passed = 0..0;
        }
        step
    }

    /// Drops handle `fh`; returns it, and whether it was the last one counted on its state.
    pub fn release(&self, fh: u64) -> Result<(Handle, bool)> {
        let h = self.handles.lock().expect("handles lock").remove(&fh).ok_or(Error::Stale)?;
        let mut open = self.open.lock().expect("open lock");
        let last = match open.get_mut(&h.ino) {
            Some(e) if Arc::ptr_eq(&e.file, &h.file) => {
                e.handles = e.handles.saturating_sub(1);
                e.writers = e.writers.saturating_sub(u32::from(h.write));
                e.direct = e.direct.saturating_sub(u32::from(h.direct));
                e.handles == 0
            }
            _ => true,
        };
        Ok((h, last))
    }

    /// After the last handle on `file` was released: frees the state of `ino` unless it was
    /// opened again meanwhile; returns whether `file` is retired (no longer in the table).
    pub fn retire(&self, ino: u64, file: &SharedFile) -> bool {
        let mut open = self.open.lock().expect("open lock");
        match open.get(&ino) {
            Some(e) if Arc::ptr_eq(&e.file, file) && e.handles == 0 => {
                open.remove(&ino);
                true
            }
            Some(e) if Arc::ptr_eq(&e.file, file) => false,
            _ => true,
        }
    }

    /// Handles open for writing on `ino`.
    pub fn writers(&self, ino: u64) -> u32 {
        self.open.lock().expect("open lock").get(&ino).map_or(0, |e| e.writers)
    }

    /// Records that handle `fh` was opened on generation `g` of its file's state.
    pub fn set_generation(&self, fh: u64, g: u64) {
        if let Some(h) = self.handles.lock().expect("handles lock").get_mut(&fh) {
            h.generation = g;
        }
    }

    /// Every open inode: its state and how many writers hold it.
    pub fn open_files(&self) -> Vec<(u64, SharedFile, u32)> {
        self.open.lock().expect("open lock").iter().map(|(ino, e)| (*ino, e.file.clone(), e.writers)).collect()
    }

    /// Empties the open-file table (when the mount ends), returning what it held.
    pub fn drain(&self) -> Vec<(u64, SharedFile)> {
        self.open.lock().expect("open lock").drain().map(|(ino, e)| (ino, e.file)).collect()
    }

    /// Open files, of those open for writing, and handles.
    pub fn counts(&self) -> (usize, usize, usize) {
        let (files, writers) = {
            let open = self.open.lock().expect("open lock");
            (open.len(), open.values().filter(|e| e.writers > 0).count())
        };
        (files, writers, self.handles.lock().expect("handles lock").len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openfile::Body;

    fn clean() -> OpenFile {
        OpenFile {
            body: Body::Clean,
            ahead: Default::default(),
            meta: Default::default(),
            dirty: false,
            unlinked: false,
            base: None,
            lost_write: false,
        }
    }

    /// Opens a handle on `ino` (`write`, `write_only`) and says whether it goes around the cache.
    fn open(t: &OpenHandles, ino: u64, write: bool, write_only: bool) -> (u64, bool) {
        let file = t.attach(ino, write, Some(clean())).expect("attached");
        let fh = t.new_handle(ino, write, file);
        (fh, t.choose_direct(fh, write_only))
    }

    #[test]
    fn a_write_only_handle_alone_goes_around_the_cache_and_so_does_every_handle_beside_it() {
        let t = OpenHandles::default();
        let (w, direct) = open(&t, 7, true, true);
        assert!(direct, "a write-only handle alone on its file");
        let (r, direct) = open(&t, 7, false, false);
        assert!(direct, "a reader opened beside it");
        assert!(!open(&t, 8, false, false).1, "a reader of another file");
        t.release(w).unwrap();
        let (r2, direct) = open(&t, 7, false, false);
        assert!(direct, "a reader beside a reader that went around the cache");
        assert!(!t.choose_direct(w, true), "a released handle has no say");
        t.release(r).unwrap();
        t.release(r2).unwrap();
        // The entry lingers until retired: with every direct handle gone, a new reader stays on
        // the cache, and a new write-only handle alone goes around it again.
        let (r3, direct) = open(&t, 7, false, false);
        assert!(!direct, "a reader after every direct handle was released");
        t.release(r3).unwrap();
        assert!(open(&t, 7, true, true).1, "a write-only handle alone again");
    }

    #[test]
    fn a_writer_opened_beside_another_handle_or_for_reading_too_stays_on_the_cache() {
        let t = OpenHandles::default();
        let (r, direct) = open(&t, 7, false, false);
        assert!(!direct, "a reader alone");
        assert!(!open(&t, 7, true, true).1, "a write-only handle beside a reader open before it");
        assert!(!open(&t, 9, true, false).1, "a read-write handle alone");
        let (_, last) = t.release(r).unwrap();
        assert!(!last, "the writer is still counted");
    }

    #[test]
    fn a_handle_counted_on_a_replaced_state_has_no_say_in_the_new_one() {
        let t = OpenHandles::default();
        let old = open(&t, 7, false, false).0;
        // A new file takes the inode's place (`attach_new`): the old handle is not counted on it.
        let file = t.attach_new(7, clean());
        let w = t.new_handle(7, true, file);
        assert!(t.choose_direct(w, true), "the new file's writer is alone on its state");
        assert!(!t.choose_direct(old, false), "a handle on the replaced state");
    }
}
