//! What the kernel is told of a node: its attributes (`FileAttrs`) and directory entries
//! (`DirEntry`), and the attributes an object version records.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use shrinkfs_codec::format::{S_IFBLK, S_IFCHR, S_IFIFO, S_IFLNK, S_IFMT, S_IFSOCK};

use crate::inode::{Attr, Kind};
use crate::objects::{Head, ObjectInfo};
use crate::recorded::Recorded;

/// Attributes as the kernel sees them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileAttrs {
    /// Inode number.
    pub ino: u64,
    /// File, directory, symlink or special node.
    pub kind: Kind,
    /// Logical size.
    pub size: u64,
    /// Bytes stored, in 512-byte blocks (what `du` reports: the compressed size).
    pub blocks: u64,
    /// Modification time.
    pub mtime: SystemTime,
    /// Permission bits.
    pub perm: u16,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Device number of a device node.
    pub rdev: u32,
    /// Links: 2 for a directory, 1 for anything else, 0 for a file unlinked while open.
    pub nlink: u32,
}

/// One directory entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// Inode number.
    pub ino: u64,
    /// Kind.
    pub kind: Kind,
    /// Name.
    pub name: String,
}

/// Kind and attributes of an object version, from what it records (its mode, owner and time)
/// and what the store says (its size and ETag).
pub fn attr_from_object(info: &ObjectInfo) -> (Kind, Attr) {
    let meta = info.meta();
    let kind = kind_of(meta.mode);
    let attr = Attr {
        size: info.size(),
        stored: info.stored,
        mtime: info.mtime(),
        perm: meta.mode.map(|m| (m & 0o7777) as u16),
        uid: meta.uid,
        gid: meta.gid,
        etag: Some(info.id.etag.to_string()),
        codec: info.codec_summary(),
        rdev: 0,
    };
    (kind, attr)
}

/// What a recorded mode says an object is.
fn kind_of(mode: Option<u32>) -> Kind {
    match mode.map(|m| m & S_IFMT) {
        Some(S_IFLNK) => Kind::Symlink,
        Some(t @ (S_IFIFO | S_IFSOCK | S_IFCHR | S_IFBLK)) => Kind::Special(t),
        _ => Kind::File,
    }
}

/// Kind and attributes of an object version from what a HEAD says of it and the record it
/// carries (see `recorded`): the same as its footer gives, without reading it.
pub fn attr_from_head(head: &Head, r: &Recorded) -> (Kind, Attr) {
    let mtime = match r.meta.mtime {
        Some((s, ns)) if s >= 0 => UNIX_EPOCH + Duration::new(s as u64, ns),
        _ => head.last_modified(),
    };
    let attr = Attr {
        size: r.size,
        stored: r.stored,
        mtime,
        perm: r.meta.mode.map(|m| (m & 0o7777) as u16),
        uid: r.meta.uid,
        gid: r.meta.gid,
        etag: Some(head.etag().to_string()),
        codec: r.codec.clone(),
        rdev: r.rdev,
    };
    (kind_of(r.meta.mode), attr)
}
