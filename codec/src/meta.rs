//! File metadata an object keeps beside its bytes (mode, owner, times) and its block in the index
//! (docs/FORMAT.md, "Index").

use crate::error::{Error, Result, Rule};
use crate::format::{u32_at, u64_at};

/// File metadata kept with an object: what a filesystem needs beyond the bytes.
///
/// Every field is optional; a reader falls back to its own defaults for fields not set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FileMeta {
    /// POSIX `st_mode`: file type bits and permission bits.
    pub mode: Option<u32>,
    /// Owner.
    pub uid: Option<u32>,
    /// Group.
    pub gid: Option<u32>,
    /// Modification time: seconds and nanoseconds since the Unix epoch.
    pub mtime: Option<(i64, u32)>,
    /// Status change time (ctime), as `mtime`.
    pub ctime: Option<(i64, u32)>,
    /// Access time, as `mtime`.
    pub atime: Option<(i64, u32)>,
}

/// `st_mode` file type of a symbolic link (its target is the object's data).
pub const S_IFLNK: u32 = 0o120000;
/// `st_mode` file type of a regular file.
pub const S_IFREG: u32 = 0o100000;
/// `st_mode` file type of a directory (a directory's marker object, whose data is empty).
pub const S_IFDIR: u32 = 0o040000;
/// `st_mode` file type of a FIFO (named pipe); its data is empty.
pub const S_IFIFO: u32 = 0o010000;
/// `st_mode` file type of a Unix socket; its data is empty.
pub const S_IFSOCK: u32 = 0o140000;
/// `st_mode` file type of a character device; its data is the device number (8 bytes, LE).
pub const S_IFCHR: u32 = 0o020000;
/// `st_mode` file type of a block device; its data is the device number (8 bytes, LE).
pub const S_IFBLK: u32 = 0o060000;
/// Mask of the file type bits.
pub const S_IFMT: u32 = 0o170000;

impl FileMeta {
    /// Whether the object is a symbolic link.
    pub fn is_symlink(&self) -> bool {
        self.mode.is_some_and(|m| m & S_IFMT == S_IFLNK)
    }

    pub(crate) fn write(&self, b: &mut [u8]) {
        let mut flags = 0u32;
        if let Some(m) = self.mode {
            flags |= 1;
            b[0..4].copy_from_slice(&m.to_le_bytes());
        }
        if let Some(u) = self.uid {
            flags |= 2;
            b[4..8].copy_from_slice(&u.to_le_bytes());
        }
        if let Some(g) = self.gid {
            flags |= 4;
            b[8..12].copy_from_slice(&g.to_le_bytes());
        }
        if let Some((s, ns)) = self.mtime {
            flags |= 8;
            b[16..24].copy_from_slice(&s.to_le_bytes());
            b[24..28].copy_from_slice(&ns.to_le_bytes());
        }
        b[12..16].copy_from_slice(&flags.to_le_bytes());
    }

    pub(crate) fn read(b: &[u8]) -> Result<Self> {
        let flags = u32_at(b, 12);
        if flags & !0xf != 0 {
            return Err(Error::malformed(Rule::MetaFlags, format!("unknown file metadata flags {flags:#x}")));
        }
        let fields: [(u32, std::ops::Range<usize>, &str); 4] =
            [(1, 0..4, "mode"), (2, 4..8, "uid"), (4, 8..12, "gid"), (8, 16..28, "mtime")];
        for (bit, range, name) in fields {
            if flags & bit == 0 && b[range].iter().any(|x| *x != 0) {
                return Err(Error::malformed(Rule::MetaAbsent, format!("file metadata: absent {name} is not zero")));
            }
        }
        let ns = u32_at(b, 24);
        if ns >= 1_000_000_000 {
            return Err(Error::malformed(Rule::MetaNanos, "file metadata nanoseconds out of range"));
        }
        if u32_at(b, 28) != 0 {
            return Err(Error::malformed(Rule::MetaReserved, "file metadata reserved bytes are not zero"));
        }
        Ok(FileMeta {
            mode: (flags & 1 != 0).then(|| u32_at(b, 0)),
            uid: (flags & 2 != 0).then(|| u32_at(b, 4)),
            gid: (flags & 4 != 0).then(|| u32_at(b, 8)),
            mtime: (flags & 8 != 0).then(|| (u64_at(b, 16) as i64, ns)),
            ctime: None,
            atime: None,
        })
    }
}
