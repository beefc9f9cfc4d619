//! What the core answers to `statfs`: the capacity a mount reports.

use super::Fs;

/// Longest name the mount takes, in bytes (longer ones fail with ENAMETOOLONG).
pub const NAME_MAX: u32 = 255;

/// A mount's `statfs` answer, in the kernel's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatFs {
    /// Blocks of `fragment_size` bytes in all.
    pub blocks: u64,
    /// Blocks free.
    pub blocks_free: u64,
    /// Blocks free to unprivileged users.
    pub blocks_available: u64,
    /// Inodes in all.
    pub files: u64,
    /// Inodes free.
    pub files_free: u64,
    /// Preferred I/O size.
    pub block_size: u32,
    /// Longest name.
    pub name_max: u32,
    /// Unit of `blocks`.
    pub fragment_size: u32,
}

impl Fs {
    /// The capacity the mount reports. A bucket has no fixed capacity: a large, constant one, so
    /// tools (`df`, installers checking free space) do not refuse to write.
    pub fn statfs(&self) -> StatFs {
        let blocks = 1u64 << 40;
        StatFs {
            blocks,
            blocks_free: blocks,
            blocks_available: blocks,
            files: 1 << 32,
            files_free: 1 << 32,
            block_size: 4096,
            name_max: NAME_MAX,
            fragment_size: 4096,
        }
    }
}
