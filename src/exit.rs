//! Exit codes: which kind of failure a whole error chain is, decided in one place.

use shrinkfs_codec::Error as CodecError;
use shrinkfs_fuse::connection::{MountpointError, UnmountError};
use shrinkfs_fuse::store::{OpenError, SourceError};

/// Success.
pub const OK: i32 = 0;
/// Anything not classified below.
pub const OTHER: i32 = 1;
/// Bad command line or option value (clap also exits with 2), or no usable AWS credentials.
pub const USAGE: i32 = 2;
/// Reading or writing a file or object failed.
pub const IO: i32 = 3;
/// The input is corrupt, truncated, undecryptable or needs a codec/dictionary/key that is missing.
pub const CORRUPT: i32 = 4;

/// Marks an error as a usage error (bad option value found after parsing).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// A command-line error from clap as one line: what is wrong and the flag (clap's own text, up to
/// its tips and usage lines), e.g. "invalid value '-1' for '--metadata-ttl <SECONDS>': must be a
/// number of seconds from 0 to 86400". Printed after "shrinkfs: error: ", with exit code 2.
pub fn clap_message(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let first: Vec<&str> = text.lines().map(str::trim).take_while(|l| !l.is_empty()).collect();
    let line = first.join(" ");
    line.strip_prefix("error: ").unwrap_or(&line).to_owned()
}

/// An error chain as the one line printed after "shrinkfs: error: ": each cause after the
/// first, unless an earlier message already says it (object_store's errors repeat their
/// source's text), and line breaks squeezed out.
pub fn message(e: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
    }
    parts.join(": ").split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The exit code for an error chain: the first classifiable cause decides.
pub fn code_for(e: &anyhow::Error) -> i32 {
    for cause in e.chain() {
        if cause.is::<UsageError>() {
            return USAGE;
        }
        if cause.is::<crate::keycheck::KeyMismatch>() {
            return CORRUPT;
        }
        if cause.is::<shrinkfs_fuse::credentials::CredentialsError>() {
            return USAGE;
        }
        if let Some(e) = cause.downcast_ref::<crate::runrecord::Ended>() {
            return e.code();
        }
        if cause.is::<crate::mount::Unavailable>() {
            return IO;
        }
        if cause.is::<SourceError>() {
            return USAGE;
        }
        if let Some(o) = cause.downcast_ref::<OpenError>() {
            return match o {
                OpenError::Credentials(_) => USAGE,
                _ => IO,
            };
        }
        if let Some(m) = cause.downcast_ref::<MountpointError>() {
            return match m {
                MountpointError::Busy { .. } | MountpointError::NotDir(_) => USAGE,
                MountpointError::Io { .. } => IO,
            };
        }
        if let Some(u) = cause.downcast_ref::<UnmountError>() {
            return match u {
                UnmountError::NotMounted(_) | UnmountError::NotShrinkfs { .. } => USAGE,
                UnmountError::Busy(_) | UnmountError::Io { .. } => IO,
            };
        }
        if let Some(c) = cause.downcast_ref::<CodecError>() {
            return match c {
                CodecError::InvalidOption(_) | CodecError::InvalidKey(_) => USAGE,
                _ => CORRUPT,
            };
        }
        // The store's answers (a missing key or bucket, refused access, an unreachable endpoint)
        // are I/O, as the same failures of a local directory are.
        if cause.is::<std::io::Error>() || cause.is::<object_store::Error>() {
            return IO;
        }
    }
    OTHER
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;
    use clap::Parser;

    #[test]
    fn clap_errors_become_one_line_naming_the_flag() {
        let e =
            crate::cli::Cli::try_parse_from(["shrinkfs", "mount", "memory://", "/m", "--metadata-ttl=-1"]).unwrap_err();
        let m = clap_message(&e);
        assert!(!m.contains('\n') && m.contains("--metadata-ttl") && m.contains("0 to 86400"), "{m}");
        // A negative number given as the next word is the flag's (bad) value, not an unknown flag.
        let e = crate::cli::Cli::try_parse_from(["shrinkfs", "mount", "memory://", "/m", "--metadata-ttl", "-5"])
            .unwrap_err();
        let m = clap_message(&e);
        assert!(!m.contains('\n') && m.contains("--metadata-ttl") && m.contains("0 to 86400"), "{m}");
        let e = crate::cli::Cli::try_parse_from(["shrinkfs", "bench", "fs", "--files", "-3"]).unwrap_err();
        assert!(clap_message(&e).contains("--files"), "{}", clap_message(&e));
        let e = crate::cli::Cli::try_parse_from(["shrinkfs", "pack", "--codec", "brotli", "a", "b"]).unwrap_err();
        let m = clap_message(&e);
        assert!(!m.contains('\n') && m.contains("--codec") && m.contains("possible values"), "{m}");
        let e = crate::cli::Cli::try_parse_from(["shrinkfs", "mount", "memory://"]).unwrap_err();
        let m = clap_message(&e);
        assert!(!m.contains('\n') && m.contains("MOUNTPOINT"), "{m}");
    }

    #[test]
    fn the_first_known_cause_decides() {
        let e = Err::<(), _>(CodecError::WrongKey).context("unpack a.skf").unwrap_err();
        assert_eq!(code_for(&e), CORRUPT);
        let e = Err::<(), _>(std::io::Error::other("disk full")).context("write").unwrap_err();
        assert_eq!(code_for(&e), IO);
        let e = Err::<(), _>(CodecError::InvalidOption("level".into())).context("pack").unwrap_err();
        assert_eq!(code_for(&e), USAGE);
        assert_eq!(code_for(&anyhow::anyhow!("other")), OTHER);
        let e = anyhow::Error::new(SourceError::Scheme("gs://b".into()));
        assert_eq!(code_for(&e), USAGE);
        let e = anyhow::Error::new(OpenError::NotADirectory("/f".into()));
        assert_eq!(code_for(&e), IO);
        let missing = object_store::Error::NotFound { path: "k".into(), source: "404".into() };
        assert_eq!(code_for(&anyhow::Error::new(missing).context("inspect s3://b/k")), IO);
    }

    #[test]
    fn a_chain_prints_as_one_line_without_repeats() {
        #[derive(Debug, thiserror::Error)]
        #[error("outer: {0}")]
        struct Repeats(#[source] std::io::Error);
        let e = anyhow::Error::new(Repeats(std::io::Error::other("disk\nfull"))).context("cannot write x");
        assert_eq!(message(&e), "cannot write x: outer: disk full");
    }
}
