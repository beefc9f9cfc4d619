//! The filesystem's error type, and the one place errors become errno values and log levels.

use shrinkfs_codec::Error as CodecError;

/// What a filesystem operation can fail with. [`Error::disposition`] says, in one place, which
/// errno each becomes and how loudly it is logged.
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
    /// Hard links: an object store has no way to give one object two names.
    #[error("hard links are not supported")]
    HardLink,
    /// An ioctl: shrinkfs answers none (programs probe them, e.g. "is this a terminal?").
    #[error("no ioctl is supported")]
    NoIoctl,
    /// A name no file can have: empty, `.`, `..`, or holding `/` or NUL.
    #[error("invalid file name {0:?}")]
    InvalidName(String),
    /// A name shrinkfs keeps for itself (its directory marker, its staging directory).
    #[error("{0:?} is a name shrinkfs reserves")]
    ReservedName(String),
    /// A name or link target the kernel gave that is not UTF-8 (object keys are).
    #[error("{0} must be UTF-8")]
    NotUtf8(&'static str),
    /// The operation does not apply to this type of file (readlink of a file, mknod of a
    /// directory, truncate of a link).
    #[error("wrong file type: {0}")]
    WrongType(&'static str),
    /// rename of a directory into itself or one of its descendants.
    #[error("cannot move a directory into itself")]
    IntoItself,
    /// A write on a handle opened read-only.
    #[error("file handle not open for writing")]
    NotWritable,
    /// A name longer than 255 bytes or with a character no object key can hold.
    #[error("bad file name")]
    BadName,
    /// An unknown file handle or inode.
    #[error("stale handle")]
    Stale,
    /// Bytes the kernel wrote back from its page cache were refused earlier (the bucket or the
    /// staging disk full or failing): the file's state misses them, so it is neither stored nor
    /// read.
    #[error(
        "a write-back of this file's cached bytes failed earlier: its changes are lost, the previous version stays"
    )]
    LostWrite,
    /// No such extended attribute.
    #[error("no such attribute")]
    NoXattr,
    /// An extended attribute outside `user.*` (SELinux labels, ACLs): the mount keeps none, and
    /// says "not supported", which `ls -l` remembers for the whole mount, where "no such
    /// attribute" made it ask again for every file.
    #[error("extended attributes outside user.* are not supported")]
    NoXattrSupport,
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
    /// A stored object ended before the size it was listed with (changed or cut while read).
    #[error("object {key} ended before its size")]
    ShortObject {
        /// The object's key.
        key: String,
    },
    /// The mount's encoder settings are unusable (a codec level out of range): nothing the
    /// caller did, so it fails as I/O and logs as an error.
    #[error("bad encoder configuration: {0}")]
    Config(#[source] CodecError),
    /// A worker (an encoder or decoder on the pool) went away without answering: it panicked.
    #[error("internal error: the {0} stopped without an answer")]
    Stopped(&'static str),
    /// A task failed: it panicked or was cancelled.
    #[error("internal error: the {task} task failed: {source}")]
    Task {
        /// Which task.
        task: &'static str,
        /// How it ended.
        #[source]
        source: tokio::task::JoinError,
    },
    /// An upload was written to after it was finished: a bug in the caller.
    #[error("internal error: upload written after it finished")]
    UploadFinished,
    /// Local staging storage failed (full disk, permissions).
    #[error("local staging: {0}")]
    Local(#[from] std::io::Error),
}

/// Result alias of the filesystem core.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How loudly an error is logged, and whether it counts as a failure in the metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// An answer the caller asked about (ENOENT on lookup, ENODATA on getxattr): debug, and the
    /// `expected` outcome in the metrics.
    Expected,
    /// A request refused or a failure outside the process (a store error, a full disk): warn.
    Failure,
    /// Corrupt data or a bug in shrinkfs: error.
    Fault,
}

/// What the kernel and the log make of an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Disposition {
    /// The errno the kernel receives.
    pub errno: i32,
    /// How the error is logged and counted.
    pub level: Level,
}

impl Error {
    /// The errno and log level of this error: the one place both are decided.
    pub fn disposition(&self) -> Disposition {
        use Level::{Expected, Failure, Fault};
        let (errno, level) = match self {
            Error::NotFound => (libc::ENOENT, Expected),
            Error::Exists => (libc::EEXIST, Expected),
            Error::NotEmpty => (libc::ENOTEMPTY, Expected),
            Error::NoXattr => (libc::ENODATA, Expected),
            Error::NoXattrSupport => (libc::ENOTSUP, Expected),
            Error::Range => (libc::ERANGE, Expected),
            Error::NoIoctl => (libc::ENOTTY, Expected),
            Error::NotDir => (libc::ENOTDIR, Failure),
            Error::IsDir => (libc::EISDIR, Failure),
            Error::ReadOnly => (libc::EROFS, Failure),
            // Documented as unsupported: programs probe for these (a punched hole, an exchange
            // rename) and fall back.
            Error::Unsupported(_) => (libc::ENOTSUP, Expected),
            // Programs that try a hard link first (git, lock files) fall back to other ways.
            Error::HardLink => (libc::EPERM, Expected),
            Error::InvalidName(_)
            | Error::ReservedName(_)
            | Error::NotUtf8(_)
            | Error::WrongType(_)
            | Error::IntoItself => (libc::EINVAL, Failure),
            Error::NotWritable => (libc::EBADF, Failure),
            Error::BadName => (libc::ENAMETOOLONG, Failure),
            Error::Stale => (libc::ESTALE, Failure),
            Error::LostWrite => (libc::EIO, Fault),
            Error::Store(object_store::Error::NotFound { .. }) => (libc::ENOENT, Failure),
            Error::Store(object_store::Error::AlreadyExists { .. }) => (libc::EEXIST, Failure),
            Error::Store(object_store::Error::Precondition { .. }) => (libc::ESTALE, Failure),
            // A local-directory bucket's own failure (a full disk, a name too long) says so.
            Error::Store(e) => {
                let errno = crate::localstore::os_error(e)
                    .filter(|&n| matches!(n, libc::ENOSPC | libc::EDQUOT | libc::ENAMETOOLONG | libc::EROFS))
                    .unwrap_or(libc::EIO);
                (errno, Failure)
            }
            Error::Codec { source: CodecError::KeyRequired | CodecError::WrongKey | CodecError::NotSealed, .. } => {
                (libc::EACCES, Fault)
            }
            Error::Codec { .. } | Error::ShortObject { .. } => (libc::EIO, Fault),
            Error::Config(_) | Error::Stopped(_) | Error::Task { .. } | Error::UploadFinished => (libc::EIO, Fault),
            Error::Local(e) => (e.raw_os_error().unwrap_or(libc::EIO), Failure),
        };
        Disposition { errno, level }
    }

    /// The errno the kernel receives.
    pub fn errno(&self) -> i32 {
        self.disposition().errno
    }

    /// Whether this is an answer the caller asked about (a name that does not exist, an
    /// attribute not set, a name taken, a directory not empty, a buffer too small, an operation
    /// documented as unsupported) rather than a failure: the same errors that log at debug.
    pub fn expected(&self) -> bool {
        self.disposition().level == Level::Expected
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

    /// Logs the error at the level it deserves ([`Error::disposition`]); `path` names the file
    /// (from the mount root) and `key` its object.
    pub fn log(&self, op: &'static str, path: &str, key: &str) {
        match self.disposition().level {
            Level::Expected => tracing::debug!(op, path = %path, key = %key, error = %self, "operation failed"),
            Level::Failure => tracing::warn!(op, path = %path, key = %key, error = %self, "operation failed"),
            Level::Fault => match self {
                Error::Codec { .. } | Error::ShortObject { .. } => {
                    tracing::error!(op, path = %path, key = %key, error = %self, "corrupt or unreadable object")
                }
                _ => tracing::error!(op, path = %path, key = %key, error = %self, "operation failed"),
            },
        }
    }
}

/// An error and its causes as "error: cause: cause", on one line.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut parts = vec![e.to_string()];
    let mut next = e.source();
    while let Some(cause) = next {
        let text = cause.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        next = cause.source();
    }
    parts.join(": ").split_whitespace().collect::<Vec<_>>().join(" ")
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
        assert_eq!(Error::Range.errno(), libc::ERANGE);
        assert_eq!(Error::HardLink.errno(), libc::EPERM);
        assert_eq!(Error::NoIoctl.errno(), libc::ENOTTY);
        assert_eq!(Error::NotWritable.errno(), libc::EBADF);
    }

    #[test]
    fn internal_failures_are_eio_logged_as_faults() {
        let stopped = Error::Stopped("decoder");
        let panicked = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(async { tokio::spawn(async { panic!("boom") }).await.unwrap_err() });
        let task = Error::Task { task: "part upload", source: panicked };
        let config = Error::Config(CodecError::InvalidOption("zstd level 20".into()));
        for e in [stopped, task, config, Error::UploadFinished] {
            assert_eq!(e.disposition(), Disposition { errno: libc::EIO, level: Level::Fault }, "{e}");
            assert!(!e.expected());
        }
    }

    #[test]
    fn expected_answers_log_at_debug_and_count_as_expected() {
        for e in [
            Error::NotFound,
            Error::Exists,
            Error::NotEmpty,
            Error::NoXattr,
            Error::NoXattrSupport,
            Error::Range,
            Error::NoIoctl,
            Error::Unsupported("fallocate modes other than allocating"),
        ] {
            assert_eq!(e.disposition().level, Level::Expected, "{e}");
            assert_eq!(Error::outcome::<()>(&Err(e)), crate::metrics::Outcome::Expected);
        }
        assert_eq!(
            Error::InvalidName("a/b".into()).disposition(),
            Disposition { errno: libc::EINVAL, level: Level::Failure }
        );
    }
}
