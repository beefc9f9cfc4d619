//! The inode table: inode numbers for the names the kernel has looked up, their cached
//! attributes, an index of each directory's children, and the bookkeeping of lookups, renames
//! and forgets (with the inodes kept past the kernel's forget).

use std::collections::{HashMap, VecDeque};
use std::time::{Instant, SystemTime};

/// Inode number of the mount's root.
pub const ROOT: u64 = 1;

/// Inodes kept after the kernel forgot them, at most (about 30 MiB of names and attributes). A
/// kept file's attributes answer its next lookup within the metadata TTL, and name the version a
/// HEAD confirms after it, instead of leaving with the inode (a cache drop, memory pressure).
pub const KEPT_MAX: usize = 65_536;

/// What an inode is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// A regular file (one object).
    File,
    /// A directory (a key prefix).
    Dir,
    /// A symbolic link (an object whose data is the target).
    Symlink,
    /// A FIFO, socket or device node (an object whose metadata holds the type, given here as
    /// its `S_IFMT` bits, and whose data is the device number of a device).
    Special(u32),
}

/// Cached attributes of an inode.
#[derive(Debug, Clone)]
pub struct Attr {
    /// Logical (decoded) size.
    pub size: u64,
    /// Bytes stored in the bucket.
    pub stored: u64,
    /// Modification time.
    pub mtime: SystemTime,
    /// Status change time.
    pub ctime: SystemTime,
    /// Access time.
    pub atime: SystemTime,
    /// Permission bits, when recorded with the object (else the mount's default).
    pub perm: Option<u16>,
    /// Owner, when recorded.
    pub uid: Option<u32>,
    /// Group, when recorded.
    pub gid: Option<u32>,
    /// ETag of the object version these attributes describe.
    pub etag: Option<String>,
    /// Codec summary for `user.shrinkfs.codec` ("zstd", "zstd+none", "plain").
    pub codec: String,
    /// Device number of a device node (0 otherwise).
    pub rdev: u32,
}

impl Attr {
    /// Attributes of something that has no object yet (a new file, a directory).
    pub fn empty() -> Self {
        let now = SystemTime::now();
        Attr {
            size: 0,
            stored: 0,
            mtime: now,
            ctime: now,
            atime: now,
            perm: None,
            uid: None,
            gid: None,
            etag: None,
            codec: String::new(),
            rdev: 0,
        }
    }
}

/// One inode.
#[derive(Debug, Clone)]
pub struct Inode {
    /// Its number.
    pub ino: u64,
    /// Parent directory's inode.
    pub parent: u64,
    /// Name in the parent.
    pub name: String,
    /// Path from the mount root ("" for the root).
    pub path: String,
    /// File, directory or symlink.
    pub kind: Kind,
    /// Cached attributes.
    pub attr: Attr,
    /// When the attributes were read from the store; `None` for local-only state.
    pub fetched: Option<Instant>,
    /// Kernel lookups not yet forgotten.
    pub lookups: u64,
    /// A directory's subdirectories, when known: counted by its latest complete listing, or from
    /// its making here, and kept up as this mount adds, removes and moves them.
    pub subdirs: Option<u32>,
    /// The table's change count when this mount last changed the inode itself (a commit, a
    /// create): an answer from the store asked for before that is older than what is known here.
    pub changed: u64,
}

/// All inodes the kernel knows.
///
/// Invariant: `children[p][n] == ino` exactly when inode `ino` is held, is not the root, and has
/// `parent == p` and `name == n`. An inode whose name went away (unlinked, or replaced by one of
/// another kind) has `parent == 0` and is in no directory's index. So a directory's entries and a
/// moved subtree are found through the index, never by scanning every inode.
#[derive(Debug)]
pub struct InodeTable {
    by_ino: HashMap<u64, Inode>,
    children: HashMap<u64, HashMap<String, u64>>,
    next: u64,
    /// Counts this mount's own changes to inodes (see [`Inode::changed`]).
    changes: u64,
    /// Inodes the kernel forgot that are kept, oldest first (an entry may have been looked up or
    /// freed since: it is skipped when reached).
    kept: VecDeque<u64>,
}

impl Default for InodeTable {
    fn default() -> Self {
        Self::new()
    }
}

/// Joins a directory path and a name.
pub fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() { name.to_owned() } else { format!("{dir}/{name}") }
}

impl InodeTable {
    /// A table holding only the root directory.
    pub fn new() -> Self {
        let root = Inode {
            ino: ROOT,
            parent: ROOT,
            name: String::new(),
            path: String::new(),
            kind: Kind::Dir,
            attr: Attr::empty(),
            fetched: None,
            lookups: 1,
            subdirs: None,
            changed: 0,
        };
        InodeTable {
            by_ino: HashMap::from([(ROOT, root)]),
            children: HashMap::new(),
            next: ROOT + 1,
            changes: 0,
            kept: VecDeque::new(),
        }
    }

    fn named(&self, parent: u64, name: &str) -> Option<u64> {
        self.children.get(&parent)?.get(name).copied()
    }

    fn unname(&mut self, parent: u64, name: &str) -> Option<u64> {
        let names = self.children.get_mut(&parent)?;
        let ino = names.remove(name);
        if names.is_empty() {
            self.children.remove(&parent);
        }
        ino
    }

    fn name(&mut self, parent: u64, name: &str, ino: u64) {
        self.children.entry(parent).or_default().insert(name.to_owned(), ino);
    }

    /// The inode with this number.
    pub fn get(&self, ino: u64) -> Option<&Inode> {
        self.by_ino.get(&ino)
    }

    /// The inode with this number, mutable.
    pub fn get_mut(&mut self, ino: u64) -> Option<&mut Inode> {
        self.by_ino.get_mut(&ino)
    }

    /// The inode named `name` in `parent`, if known.
    pub fn child(&self, parent: u64, name: &str) -> Option<&Inode> {
        self.named(parent, name).and_then(|i| self.by_ino.get(&i))
    }

    /// Inodes known under `parent` (from its index: the other inodes are not visited).
    pub fn children(&self, parent: u64) -> impl Iterator<Item = &Inode> {
        self.children.get(&parent).into_iter().flat_map(|names| names.values().filter_map(|i| self.by_ino.get(i)))
    }

    /// Inode `ino` and every inode known below it, found through the index (the rest of the
    /// table is not visited).
    pub fn subtree(&self, ino: u64) -> Vec<u64> {
        let mut out = vec![ino];
        let mut next = 0;
        while let Some(&dir) = out.get(next) {
            next += 1;
            if let Some(names) = self.children.get(&dir) {
                out.extend(names.values().copied());
            }
        }
        out
    }

    /// Records `name` in `parent` with these attributes, keeping its inode number when the kind is
    /// unchanged; counts a kernel lookup when `lookup` is set. Returns the inode.
    pub fn upsert(
        &mut self,
        parent: u64,
        name: &str,
        kind: Kind,
        attr: Attr,
        fetched: Option<Instant>,
        lookup: bool,
    ) -> Inode {
        let path = join(&self.by_ino.get(&parent).map(|p| p.path.clone()).unwrap_or_default(), name);
        let ino = match self.named(parent, name) {
            Some(ino) if self.by_ino.get(&ino).is_some_and(|i| i.kind == kind) => ino,
            other => {
                if let Some(old) = other {
                    // The name now refers to something of another kind: the old inode is orphaned.
                    if let Some(i) = self.by_ino.get_mut(&old) {
                        i.parent = 0;
                    }
                }
                let ino = self.next;
                self.next += 1;
                self.by_ino.insert(
                    ino,
                    Inode {
                        ino,
                        parent,
                        name: name.to_owned(),
                        path: path.clone(),
                        kind,
                        attr: attr.clone(),
                        fetched,
                        lookups: 0,
                        subdirs: None,
                        changed: 0,
                    },
                );
                self.name(parent, name, ino);
                ino
            }
        };
        let i = self.by_ino.get_mut(&ino).expect("inserted above");
        i.attr = attr;
        i.fetched = fetched;
        i.path = path;
        if lookup {
            i.lookups += 1;
        }
        i.clone()
    }

    /// This mount's change count now: taken before asking the store, it tells which answers
    /// [`Self::observe`] may apply.
    pub fn changes(&self) -> u64 {
        self.changes
    }

    /// Records that this mount itself just changed inode `ino` (committed it, made it, changed
    /// its entries), so answers from the store asked for earlier leave it alone.
    pub fn changed_here(&mut self, ino: u64) {
        self.changes += 1;
        if let Some(i) = self.by_ino.get_mut(&ino) {
            i.changed = self.changes;
        }
    }

    /// [`Self::upsert`] (fetched now) of what the store said in answer to a request made when the change
    /// count was `since`: an inode of the same kind this mount changed after that keeps its
    /// attributes (the answer may predate the change: a size from before an append would make
    /// the kernel write the next append over it); the lookup is still counted.
    pub fn observe(&mut self, parent: u64, name: &str, kind: Kind, attr: Attr, lookup: bool, since: u64) -> Inode {
        self.observe_at(parent, name, kind, attr, lookup, since, Instant::now())
    }

    /// [`Self::observe`] of an answer that holds as of `at` (a listing's start): the attributes
    /// are trusted from then, not from when the answer came.
    #[allow(clippy::too_many_arguments)]
    pub fn observe_at(
        &mut self,
        parent: u64,
        name: &str,
        kind: Kind,
        attr: Attr,
        lookup: bool,
        since: u64,
        at: Instant,
    ) -> Inode {
        if let Some(i) = self.named(parent, name).and_then(|ino| self.by_ino.get_mut(&ino))
            && i.kind == kind
            && i.changed > since
        {
            i.lookups += u64::from(lookup);
            return i.clone();
        }
        self.upsert(parent, name, kind, attr, Some(at), lookup)
    }

    /// Forgets `name` in `parent` because the store said, in answer to a request made when the
    /// change count was `since`, that it is gone — unless this mount changed it since.
    pub fn observe_gone(&mut self, parent: u64, name: &str, since: u64) {
        if self.child(parent, name).is_none_or(|i| i.changed <= since) {
            self.remove_name(parent, name);
        }
    }

    /// Counts a kernel lookup of `ino` (an entry READDIRPLUS returned); returns the inode.
    pub fn looked_up(&mut self, ino: u64) -> Option<Inode> {
        let i = self.by_ino.get_mut(&ino)?;
        i.lookups += 1;
        Some(i.clone())
    }

    /// Forgets the name `name` in `parent` (after unlink, rmdir, or when the store says it is gone).
    pub fn remove_name(&mut self, parent: u64, name: &str) {
        if let Some(ino) = self.unname(parent, name)
            && let Some(i) = self.by_ino.get_mut(&ino)
        {
            i.parent = 0;
            if i.lookups == 0 {
                self.by_ino.remove(&ino);
            }
        }
    }

    /// Moves a name; the paths of everything below a moved directory follow (found through the
    /// index). Returns the inodes whose path changed: the moved one and those below it.
    pub fn rename(&mut self, parent: u64, name: &str, new_parent: u64, new_name: &str) -> Vec<u64> {
        self.remove_name(new_parent, new_name);
        let Some(ino) = self.unname(parent, name) else {
            return Vec::new();
        };
        let new_path = join(&self.by_ino.get(&new_parent).map(|p| p.path.clone()).unwrap_or_default(), new_name);
        let Some(i) = self.by_ino.get_mut(&ino) else {
            return Vec::new();
        };
        let old_path = std::mem::replace(&mut i.path, new_path.clone());
        i.parent = new_parent;
        i.name = new_name.to_owned();
        self.name(new_parent, new_name, ino);
        let old_prefix = format!("{old_path}/");
        let moved = self.subtree(ino);
        for below in &moved[1..] {
            if let Some(other) = self.by_ino.get_mut(below)
                && let Some(rest) = other.path.strip_prefix(&old_prefix)
            {
                other.path = format!("{new_path}/{rest}");
            }
        }
        moved
    }

    /// The kernel dropped `n` lookups of `ino`. An inode it no longer references is kept while
    /// it still describes a stored version under its name (a file with an ETag, or a directory
    /// with entries kept below it), up to [`KEPT_MAX`] of them, the oldest freed first; any other
    /// is freed.
    pub fn forget(&mut self, ino: u64, n: u64) {
        if ino == ROOT {
            return;
        }
        let Some(i) = self.by_ino.get_mut(&ino) else { return };
        i.lookups = i.lookups.saturating_sub(n);
        if i.lookups > 0 {
            return;
        }
        let (parent, name) = (i.parent, i.name.clone());
        let worth = match i.kind {
            Kind::Dir => self.children.contains_key(&ino),
            _ => i.fetched.is_some() && i.attr.etag.is_some(),
        };
        let named = self.named(parent, &name) == Some(ino);
        if named && worth {
            self.kept.push_back(ino);
            while self.kept.len() > KEPT_MAX {
                let Some(old) = self.kept.pop_front() else { break };
                self.free(old);
            }
        } else {
            self.free(ino);
        }
    }

    /// Frees inode `ino` and the inodes kept below it, if none of them is referenced by the
    /// kernel (or by the caller of an open file, which holds a lookup).
    fn free(&mut self, ino: u64) {
        let below = self.subtree(ino);
        if ino == ROOT || below.iter().any(|b| self.by_ino.get(b).is_some_and(|i| i.lookups > 0)) {
            return;
        }
        for b in below.iter().rev() {
            self.children.remove(b);
            if let Some(i) = self.by_ino.remove(b)
                && self.named(i.parent, &i.name) == Some(*b)
            {
                self.unname(i.parent, &i.name);
            }
        }
    }

    /// Number of inodes kept after the kernel forgot them (some may have been looked up since).
    pub fn kept(&self) -> usize {
        self.kept.len()
    }

    /// Number of inodes held.
    pub fn len(&self) -> usize {
        self.by_ino.len()
    }

    /// Whether only the root is held.
    pub fn is_empty(&self) -> bool {
        self.by_ino.len() <= 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inode_numbers_are_stable_and_renames_move_subtrees() {
        let mut t = InodeTable::new();
        let d = t.upsert(ROOT, "d", Kind::Dir, Attr::empty(), None, true);
        let f = t.upsert(d.ino, "f", Kind::File, Attr::empty(), None, true);
        assert_eq!(t.upsert(d.ino, "f", Kind::File, Attr::empty(), None, true).ino, f.ino);
        assert_eq!(t.get(f.ino).unwrap().path, "d/f");
        t.rename(ROOT, "d", ROOT, "e");
        assert_eq!(t.get(f.ino).unwrap().path, "e/f");
        assert!(t.child(ROOT, "d").is_none());
        assert_eq!(t.child(ROOT, "e").unwrap().ino, d.ino);
        t.forget(f.ino, 2);
        assert!(t.get(f.ino).is_none());
    }

    /// Every (parent, name) the index holds, checked against the inodes themselves.
    fn indexed(t: &InodeTable) -> usize {
        let mut n = 0;
        for (parent, names) in &t.children {
            for (name, ino) in names {
                let i = t.get(*ino).expect("the index names a held inode");
                assert_eq!((i.parent, &i.name), (*parent, name));
                n += 1;
            }
        }
        n
    }

    #[test]
    fn listing_and_renaming_a_directory_visit_only_its_own_entries() {
        let mut t = InodeTable::new();
        // A large table: 5,000 files in one directory, and a small directory beside it.
        let big = t.upsert(ROOT, "big", Kind::Dir, Attr::empty(), None, true);
        for k in 0..5000 {
            t.upsert(big.ino, &format!("f{k}"), Kind::File, Attr::empty(), None, true);
        }
        let d = t.upsert(ROOT, "d", Kind::Dir, Attr::empty(), None, true);
        let sub = t.upsert(d.ino, "sub", Kind::Dir, Attr::empty(), None, true);
        let a = t.upsert(d.ino, "a", Kind::File, Attr::empty(), None, true);
        let b = t.upsert(sub.ino, "b", Kind::File, Attr::empty(), None, true);
        assert_eq!(t.children.get(&d.ino).map(HashMap::len), Some(2), "d's index holds its two entries");
        let mut names: Vec<_> = t.children(d.ino).map(|i| i.name.clone()).collect();
        names.sort();
        assert_eq!(names, ["a", "sub"]);
        assert_eq!(t.children(ROOT).count(), 2);

        // The rename walks d's subtree through the index: 4 inodes, not the 5,000 others.
        let mut moved = t.rename(ROOT, "d", big.ino, "e");
        moved.sort();
        let mut want = vec![d.ino, sub.ino, a.ino, b.ino];
        want.sort();
        assert_eq!(moved, want);
        assert_eq!(t.get(b.ino).unwrap().path, "big/e/sub/b");
        assert_eq!(t.get(a.ino).unwrap().path, "big/e/a");
        assert!(t.children.get(&ROOT).is_some_and(|n| !n.contains_key("d")));
        assert_eq!(t.child(big.ino, "e").unwrap().ino, d.ino);
        assert_eq!(t.children(big.ino).count(), 5001);

        // Unlink, replacement by another kind and forget keep the index exact.
        t.remove_name(sub.ino, "b");
        assert!(!t.children.contains_key(&sub.ino), "an emptied directory leaves the index");
        t.upsert(d.ino, "a", Kind::Dir, Attr::empty(), None, false);
        assert_eq!(t.get(a.ino).unwrap().parent, 0, "the replaced file is orphaned");
        t.forget(sub.ino, 1);
        assert!(t.child(d.ino, "sub").is_none());
        assert_eq!(indexed(&t), t.len() - 1 - 2, "all but the root and the two orphans are indexed");
    }

    fn stored(etag: &str) -> Attr {
        Attr { etag: Some(etag.into()), ..Attr::empty() }
    }

    #[test]
    fn forgotten_inodes_that_describe_a_stored_version_are_kept_up_to_a_bound() {
        let mut t = InodeTable::new();
        let d = t.upsert(ROOT, "d", Kind::Dir, Attr::empty(), Some(Instant::now()), true);
        let f = t.upsert(d.ino, "f", Kind::File, stored("e1"), Some(Instant::now()), true);
        let local = t.upsert(d.ino, "new", Kind::File, Attr::empty(), None, true);
        t.forget(f.ino, 1);
        t.forget(local.ino, 1);
        t.forget(d.ino, 1);
        assert!(t.get(local.ino).is_none(), "a file with no stored version is freed");
        assert_eq!(t.child(ROOT, "d").map(|i| i.ino), Some(d.ino), "a directory with kept entries is kept");
        let again = t.upsert(d.ino, "f", Kind::File, stored("e1"), Some(Instant::now()), true);
        assert_eq!((again.ino, again.lookups), (f.ino, 1), "the kept inode is found again");
        t.forget(f.ino, 1);

        // Past the bound the oldest go first, a directory with everything kept below it.
        let e = t.upsert(ROOT, "e", Kind::Dir, Attr::empty(), Some(Instant::now()), true);
        let mut last = 0;
        for k in 0..KEPT_MAX {
            let i = t.upsert(e.ino, &format!("g{k}"), Kind::File, stored("e"), Some(Instant::now()), true);
            t.forget(i.ino, 1);
            last = i.ino;
        }
        assert!(t.get(f.ino).is_none() && t.get(d.ino).is_none(), "the oldest, d and the file below it, are freed");
        assert!(t.child(ROOT, "d").is_none() && !t.children.contains_key(&d.ino));
        assert_eq!(t.get(last).map(|i| i.lookups), Some(0), "the newest are kept");
        assert!(t.kept() <= KEPT_MAX);
        assert_eq!(indexed(&t), t.len() - 1, "every held inode but the root is indexed");
    }
}
