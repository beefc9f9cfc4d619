//! The inode table: inode numbers for the names the kernel has looked up, their cached
//! attributes, an index of each directory's children, and the bookkeeping of lookups, renames
//! and forgets.

use std::collections::HashMap;
use std::time::{Instant, SystemTime};

/// Inode number of the mount's root.
pub const ROOT: u64 = 1;

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
        InodeTable { by_ino: HashMap::from([(ROOT, root)]), children: HashMap::new(), next: ROOT + 1, changes: 0 }
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
        if let Some(i) = self.named(parent, name).and_then(|ino| self.by_ino.get_mut(&ino))
            && i.kind == kind
            && i.changed > since
        {
            i.lookups += u64::from(lookup);
            return i.clone();
        }
        self.upsert(parent, name, kind, attr, Some(Instant::now()), lookup)
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

    /// The kernel dropped `n` lookups of `ino`; unreferenced, unnamed inodes are freed.
    pub fn forget(&mut self, ino: u64, n: u64) {
        if ino == ROOT {
            return;
        }
        if let Some(i) = self.by_ino.get_mut(&ino) {
            i.lookups = i.lookups.saturating_sub(n);
            if i.lookups == 0 {
                let (parent, name) = (i.parent, i.name.clone());
                if self.named(parent, &name) == Some(ino) {
                    self.unname(parent, &name);
                }
                self.by_ino.remove(&ino);
            }
        }
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
}
