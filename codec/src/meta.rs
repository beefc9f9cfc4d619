//! File metadata an object keeps beside its bytes (mode, owner, times) and its block in the index,
//! whose length and fields depend on the format version (docs/FORMAT.md, "Index").

use crate::error::{Error, Result, Rule};
use crate::format::{Version, u32_at, u64_at};

/// File metadata flag: `mode` is present.
const META_MODE: u32 = 1;
/// File metadata flag: `uid` is present.
const META_UID: u32 = 1 << 1;
/// File metadata flag: `gid` is present.
const META_GID: u32 = 1 << 2;
/// File metadata flag: `mtime` is present.
const META_MTIME: u32 = 1 << 3;
/// File metadata flag (version 2): `ctime` is present.
const META_CTIME: u32 = 1 << 4;
/// File metadata flag (version 2): `atime` is present.
const META_ATIME: u32 = 1 << 5;

/// `(flag bit, offset, length, name)` of every metadata field, in offset order. A time is 8 bytes
/// of signed seconds and 4 of nanoseconds. A version's block holds the fields that fit in it:
/// version 1's (32 bytes) ends before ctime.
const FIELDS: [(u32, usize, usize, &str); 6] = [
    (META_MODE, 0, 4, "mode"),
    (META_UID, 4, 4, "uid"),
    (META_GID, 8, 4, "gid"),
    (META_MTIME, 16, 12, "mtime"),
    (META_CTIME, 32, 12, "ctime"),
    (META_ATIME, 44, 12, "atime"),
];

/// Reserved byte ranges of the block, in either version where they fit: 28..32, and 56..64.
const RESERVED: [(usize, usize); 2] = [(28, 32), (56, 64)];

/// The fields of `version`'s metadata block.
fn fields(version: Version) -> impl Iterator<Item = (u32, usize, usize, &'static str)> {
    FIELDS.into_iter().filter(move |&(_, at, len, _)| at + len <= version.meta_len())
}

/// The file metadata flag bits defined in `version`: bits 4 and 5 (ctime, atime) only in version 2.
fn defined_flags(version: Version) -> u32 {
    fields(version).fold(0, |flags, (bit, ..)| flags | bit)
}

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
    /// Modification time: seconds since the Unix epoch (negative before it) plus nanoseconds
    /// (below 10^9, counted forward: half a second before the epoch is `(-1, 500_000_000)`).
    pub mtime: Option<(i64, u32)>,
    /// Status change time (ctime), as `mtime`. Stored from format version 2 on.
    pub ctime: Option<(i64, u32)>,
    /// Access time, as `mtime`. Stored from format version 2 on.
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

    /// The oldest format version that stores every field set: version 2 when ctime or atime is.
    pub fn min_version(&self) -> Version {
        if self.ctime.is_some() || self.atime.is_some() { Version::V2 } else { Version::V1 }
    }

    /// Writes the metadata block of `version` into `b` (`version.meta_len()` zero bytes). The
    /// caller has checked that `version` stores every field set (`min_version`).
    pub(crate) fn write(&self, b: &mut [u8], version: Version) {
        debug_assert!(self.min_version() <= version, "{self:?} does not fit a version {version} object");
        let mut flags = 0u32;
        let fields = [(META_MODE, 0, self.mode), (META_UID, 4, self.uid), (META_GID, 8, self.gid)];
        for (bit, at, value) in fields {
            if let Some(v) = value {
                flags |= bit;
                b[at..at + 4].copy_from_slice(&v.to_le_bytes());
            }
        }
        for (bit, at, time) in
            [(META_MTIME, 16, self.mtime), (META_CTIME, 32, self.ctime), (META_ATIME, 44, self.atime)]
        {
            if let Some((s, ns)) = time
                && defined_flags(version) & bit != 0
            {
                flags |= bit;
                b[at..at + 8].copy_from_slice(&s.to_le_bytes());
                b[at + 8..at + 12].copy_from_slice(&ns.to_le_bytes());
            }
        }
        b[12..16].copy_from_slice(&flags.to_le_bytes());
    }

    /// Reads the metadata block of a `version` object, checking the metadata rules in FORMAT.md's
    /// order: flags, absent fields, nanoseconds, reserved bytes.
    pub(crate) fn read(b: &[u8], version: Version) -> Result<Self> {
        let flags = u32_at(b, 12);
        if flags & !defined_flags(version) != 0 {
            return Err(Error::malformed(
                Rule::MetaFlags,
                format!("unknown file metadata flags {flags:#x} in a version {version} object"),
            ));
        }
        for (bit, at, len, name) in fields(version) {
            if flags & bit == 0 && b[at..at + len].iter().any(|x| *x != 0) {
                return Err(Error::malformed(Rule::MetaAbsent, format!("file metadata: absent {name} is not zero")));
            }
        }
        for (_, at, len, name) in fields(version) {
            if len == 12 && u32_at(b, at + 8) >= 1_000_000_000 {
                return Err(Error::malformed(
                    Rule::MetaNanos,
                    format!("file metadata: {name} nanoseconds out of range"),
                ));
            }
        }
        let mut reserved = RESERVED.into_iter().filter(|&(_, end)| end <= version.meta_len());
        if reserved.any(|(start, end)| b[start..end].iter().any(|x| *x != 0)) {
            return Err(Error::malformed(Rule::MetaReserved, "file metadata reserved bytes are not zero"));
        }
        let time = |bit: u32, at: usize| (flags & bit != 0).then(|| (u64_at(b, at) as i64, u32_at(b, at + 8)));
        Ok(FileMeta {
            mode: (flags & META_MODE != 0).then(|| u32_at(b, 0)),
            uid: (flags & META_UID != 0).then(|| u32_at(b, 4)),
            gid: (flags & META_GID != 0).then(|| u32_at(b, 8)),
            mtime: time(META_MTIME, 16),
            ctime: time(META_CTIME, 32),
            atime: time(META_ATIME, 44),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta_block(meta: &FileMeta, version: Version) -> Vec<u8> {
        let mut b = vec![0u8; version.meta_len()];
        meta.write(&mut b, version);
        b
    }

    #[test]
    fn file_meta_roundtrips_in_the_version_it_needs() {
        let v1 =
            FileMeta { mode: Some(0o100644), uid: Some(1000), gid: None, mtime: Some((-5, 7)), ..Default::default() };
        let both = FileMeta { ctime: Some((-1, 999_999_999)), atime: Some((i64::MIN, 0)), ..v1 };
        let ctime_only = FileMeta { ctime: Some((1_700_000_000, 1)), ..Default::default() };
        let atime_only = FileMeta { atime: Some((0, 0)), ..Default::default() };
        assert_eq!(v1.min_version(), Version::V1);
        assert_eq!(FileMeta::default().min_version(), Version::V1);
        for m in [both, ctime_only, atime_only] {
            assert_eq!(m.min_version(), Version::V2);
            assert_eq!(FileMeta::read(&meta_block(&m, Version::V2), Version::V2).unwrap(), m);
        }
        for m in [v1, FileMeta::default()] {
            for version in [Version::V1, Version::V2] {
                let b = meta_block(&m, version);
                assert_eq!(b.len(), version.meta_len());
                assert_eq!(FileMeta::read(&b, version).unwrap(), m);
            }
            // Version 2's block is version 1's followed by 32 zero bytes.
            assert_eq!(meta_block(&m, Version::V2), [meta_block(&m, Version::V1), vec![0; 32]].concat());
        }
        let b = meta_block(&both, Version::V2);
        assert_eq!(u32_at(&b, 12), 0b11_1011);
        assert_eq!(b[32..44], [(-1i64).to_le_bytes().as_slice(), &999_999_999u32.to_le_bytes()].concat());
        assert_eq!(b[44..56], [i64::MIN.to_le_bytes().as_slice(), &[0; 4]].concat());
        assert_eq!(b[56..64], [0; 8]);
    }

    #[test]
    fn file_meta_rules_per_version() {
        let rule = |b: &[u8], v| FileMeta::read(b, v).unwrap_err().rule();
        let set = |b: &mut Vec<u8>, at: usize, v: u32| b[at..at + 4].copy_from_slice(&v.to_le_bytes());
        // Flag bits 4 and 5 (ctime, atime) are unknown in version 1, bit 6 and up in version 2.
        for (version, bit, ok) in [(Version::V1, 4, false), (Version::V1, 5, false), (Version::V2, 5, true)] {
            let mut b = vec![0u8; version.meta_len()];
            set(&mut b, 12, 1 << bit);
            assert_eq!(FileMeta::read(&b, version).is_ok(), ok, "bit {bit}, version {version}");
            if !ok {
                assert_eq!(rule(&b, version), Some(Rule::MetaFlags));
            }
        }
        for bit in 6..32 {
            let mut b = vec![0u8; 64];
            set(&mut b, 12, 1 << bit);
            assert_eq!(rule(&b, Version::V2), Some(Rule::MetaFlags), "bit {bit}");
        }
        // Absent ctime and atime: every byte zero.
        for at in [32, 39, 40, 43, 44, 51, 52, 55] {
            let mut b = vec![0u8; 64];
            b[at] = 1;
            assert_eq!(rule(&b, Version::V2), Some(Rule::MetaAbsent), "byte {at}");
        }
        // Nanoseconds of each time below 10^9.
        for (bit, at) in [(META_MTIME, 24), (META_CTIME, 40), (META_ATIME, 52)] {
            let mut b = vec![0u8; 64];
            set(&mut b, 12, bit);
            set(&mut b, at, 999_999_999);
            assert!(FileMeta::read(&b, Version::V2).is_ok());
            set(&mut b, at, 1_000_000_000);
            assert_eq!(rule(&b, Version::V2), Some(Rule::MetaNanos), "byte {at}");
        }
        // Reserved: 28..32 in both, 56..64 in version 2.
        for at in [28, 31, 56, 63] {
            let mut b = vec![0u8; 64];
            b[at] = 1;
            assert_eq!(rule(&b, Version::V2), Some(Rule::MetaReserved), "byte {at}");
        }
    }
}
