//! Exit codes: which kind of failure a whole error chain is, decided in one place.

use shrinkfs_codec::Error as CodecError;

/// Success.
pub const OK: i32 = 0;
/// Anything not classified below.
pub const OTHER: i32 = 1;
/// Bad command line or option value (clap also exits with 2).
pub const USAGE: i32 = 2;
/// Reading or writing a file or object failed.
pub const IO: i32 = 3;
/// The input is corrupt, truncated, undecryptable or needs a codec/dictionary/key that is missing.
pub const CORRUPT: i32 = 4;

/// Marks an error as a usage error (bad option value found after parsing).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// The exit code for an error chain: the first classifiable cause decides.
pub fn code_for(e: &anyhow::Error) -> i32 {
    for cause in e.chain() {
        if cause.is::<UsageError>() {
            return USAGE;
        }
        if let Some(c) = cause.downcast_ref::<CodecError>() {
            return match c {
                CodecError::InvalidOption(_) | CodecError::InvalidKey(_) => USAGE,
                _ => CORRUPT,
            };
        }
        if cause.is::<std::io::Error>() {
            return IO;
        }
    }
    OTHER
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    #[test]
    fn the_first_known_cause_decides() {
        let e = Err::<(), _>(CodecError::WrongKey).context("unpack a.skf").unwrap_err();
        assert_eq!(code_for(&e), CORRUPT);
        let e = Err::<(), _>(std::io::Error::other("disk full")).context("write").unwrap_err();
        assert_eq!(code_for(&e), IO);
        let e = Err::<(), _>(CodecError::InvalidOption("level".into())).context("pack").unwrap_err();
        assert_eq!(code_for(&e), USAGE);
        assert_eq!(code_for(&anyhow::anyhow!("other")), OTHER);
    }
}
