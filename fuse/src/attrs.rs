//! What the kernel is told of a node: its attributes (`FileAttrs`) and directory entries
//! (`DirEntry`), and the attributes an object version records.

use std::time::SystemTime;

use shrinkfs_codec::FileMeta;

use shrinkfs_codec::format::{S_IFBLK, S_IFCHR, S_IFIFO, S_IFLNK, S_IFMT, S_IFSOCK};

use crate::inode::{Attr, Kind};
use crate::objects::{Head, ObjectInfo};
use crate::recorded::Recorded;
use crate::stamp;

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
    /// Status change time.
    pub ctime: SystemTime,
    /// Access time.
    pub atime: SystemTime,
    /// Permission bits.
    pub perm: u16,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Device number of a device node.
    pub rdev: u32,
    /// Links: for a directory 2 and one per subdirectory (1 while that is unknown), 1 for anything
    /// else, 0 for a file unlinked while open.
    pub nlink: u32,
}

/// What a `setattr` changes (`chmod`, `chown`, `truncate`, `utimensat`); `None` leaves a field.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SetAttr {
    /// New length.
    pub size: Option<u64>,
    /// New permission bits.
    pub mode: Option<u32>,
    /// New owner.
    pub uid: Option<u32>,
    /// New group.
    pub gid: Option<u32>,
    /// New access time.
    pub atime: Option<SystemTime>,
    /// New modification time.
    pub mtime: Option<SystemTime>,
}

impl SetAttr {
    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        *self == SetAttr::default()
    }
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
    let (mtime, ctime, atime) = times(&meta, info.mtime());
    let attr = Attr {
        size: info.size(),
        stored: info.stored,
        mtime,
        ctime,
        atime,
        perm: meta.mode.map(|m| (m & 0o7777) as u16),
        uid: meta.uid,
        gid: meta.gid,
        etag: Some(info.id.etag.to_string()),
        codec: info.codec_summary(),
        rdev: 0,
    };
    (kind, attr)
}

/// Modification, change and access times an object records; the store's time stands in for a
/// modification time it does not, and the modification time for the others.
fn times(meta: &FileMeta, stored: SystemTime) -> (SystemTime, SystemTime, SystemTime) {
    let mtime = meta.mtime.map_or(stored, stamp::time);
    (mtime, meta.ctime.map_or(mtime, stamp::time), meta.atime.map_or(mtime, stamp::time))
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
    let (mtime, ctime, atime) = times(&r.meta, head.last_modified());
    let attr = Attr {
        size: r.size,
        stored: r.stored,
        mtime,
        ctime,
        atime,
        perm: r.meta.mode.map(|m| (m & 0o7777) as u16),
        uid: r.meta.uid,
        gid: r.meta.gid,
        etag: Some(head.etag().to_string()),
        codec: r.codec.clone(),
        rdev: r.rdev,
    };
    (kind_of(r.meta.mode), attr)
}
