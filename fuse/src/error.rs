//! The filesystem's error type, and the one place errors become errno values and log levels.

use shrinkfs_codec::Error as CodecError;

/// What a filesystem operation can fail with.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No such file or directory.
    #[error("no such file or directory")]
    NotFound,
    /// The name exists already.
    #[error("file exists")]
    Exists,
    /// rmdir on a directory with entries.
    #[error("directory not empty")]
    NotEmpty,
    /// A file where a directory is needed.
    #[error("not a directory")]
    NotDir,
    /// A directory where a file is needed.
    #[error("is a directory")]
    IsDir,
    /// A write on a read-only mount.
    #[error("read-only file system")]
    ReadOnly,
    /// An operation shrinkfs does not support (docs/SEMANTICS.md lists them).
    #[error("not supported: {0}")]
    Unsupported(&'static str),
    /// A bad argument from the caller.
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// A name longer than 255 bytes or with a character no object key can hold.
    #[error("bad file name")]
    BadName,
    /// An unknown file handle or inode.
    #[error("stale handle")]
    Stale,
    /// No such extended attribute.
    #[error("no such attribute")]
    NoXattr,
    /// The caller's buffer is too small.
    #[error("result too large for buffer")]
    Range,
    /// The object store failed.
    #[error("object store: {0}")]
    Store(#[from] object_store::Error),
    /// A stored object could not be decoded.
    #[error("object {key}: {source}")]
    Codec {
        /// The object's key.
        key: String,
        /// What is wrong with it.
        source: CodecError,
    },
    /// Local staging storage failed (full disk, permissions).
    #[error("local staging: {0}")]
    Local(#[from] std::io::Error),
}

/// Result alias of the filesystem core.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The errno the kernel receives.
    pub fn errno(&self) -> i32 {
        match self {
            Error::NotFound => libc::ENOENT,
            Error::Exists => libc::EEXIST,
            Error::NotEmpty => libc::ENOTEMPTY,
            Error::NotDir => libc::ENOTDIR,
            Error::IsDir => libc::EISDIR,
            Error::ReadOnly => libc::EROFS,
            Error::Unsupported(_) => libc::ENOTSUP,
            Error::Invalid(_) => libc::EINVAL,
            Error::BadName => libc::ENAMETOOLONG,
            Error::Stale => libc::ESTALE,
            Error::NoXattr => libc::ENODATA,
            Error::Range => libc::ERANGE,
            Error::Store(object_store::Error::NotFound { .. }) => libc::ENOENT,
            Error::Store(object_store::Error::AlreadyExists { .. }) => libc::EEXIST,
            Error::Store(object_store::Error::Precondition { .. }) => libc::ESTALE,
            // A local-directory bucket's own failure (a full disk, a name too long) says so.
            Error::Store(e) => crate::localstore::os_error(e)
                .filter(|&n| matches!(n, libc::ENOSPC | libc::EDQUOT | libc::ENAMETOOLONG | libc::EROFS))
                .unwrap_or(libc::EIO),
            Error::Codec { source: CodecError::KeyRequired | CodecError::WrongKey | CodecError::NotSealed, .. } => {
                libc::EACCES
            }
            Error::Codec { .. } => libc::EIO,
            Error::Local(e) => e.raw_os_error().unwrap_or(libc::EIO),
        }
    }

    /// Whether this is an answer the caller asked about (a name that does not exist, an
    /// attribute not set, a name taken, a directory not empty, a buffer too small) rather than a
    /// failure: the same errors that log at debug.
    pub fn expected(&self) -> bool {
        matches!(self, Error::NotFound | Error::Exists | Error::NotEmpty | Error::NoXattr | Error::Range)
    }

    /// The outcome label of an operation that ended with `r`.
    pub fn outcome<T>(r: &Result<T>) -> crate::metrics::Outcome {
        use crate::metrics::Outcome;
        match r {
            Ok(_) => Outcome::Ok,
            Err(e) if e.expected() => Outcome::Expected,
            Err(_) => Outcome::Error,
        }
    }

    /// Logs the error at the level it deserves: expected outcomes at debug, failures at warn,
    /// corruption at error; `path` names the file (from the mount root) and `key` its object.
    pub fn log(&self, op: &'static str, path: &str, key: &str) {
        match self {
            e if e.expected() => {
                tracing::debug!(op, path = %path, key = %key, error = %self, "operation failed")
            }
            Error::Codec { .. } => {
                tracing::error!(op, path = %path, key = %key, error = %self, "corrupt or unreadable object")
            }
            _ => tracing::warn!(op, path = %path, key = %key, error = %self, "operation failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_map_to_the_documented_errno() {
        assert_eq!(Error::NotFound.errno(), libc::ENOENT);
        assert_eq!(
            Error::Store(object_store::Error::NotFound { path: "x".into(), source: "y".into() }).errno(),
            libc::ENOENT
        );
        assert_eq!(Error::Codec { key: "k".into(), source: CodecError::WrongKey }.errno(), libc::EACCES);
        assert_eq!(Error::Codec { key: "k".into(), source: CodecError::FrameChecksum { frame: 1 } }.errno(), libc::EIO);
        assert_eq!(Error::Local(std::io::Error::from_raw_os_error(libc::ENOSPC)).errno(), libc::ENOSPC);
    }
}
