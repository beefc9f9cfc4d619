//! The one error type of the codec crate: every way stored bytes or options can be wrong.

use crate::codec::CodecId;

/// What went wrong while encoding or decoding a shrinkfs object.
///
/// Variants name the failing structure so a user can tell corruption from a wrong key or a
/// missing codec without reading code.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The object's tail carries no shrinkfs footer: it is plain bytes written by another tool.
    #[error("not a shrinkfs object")]
    NotShrinkfs,
    /// A structure did not start (or end) with its magic bytes.
    #[error("bad magic in {what}")]
    BadMagic {
        /// The structure: "header", "index" or "footer".
        what: &'static str,
    },
    /// The object was written by a newer format version than this build reads.
    #[error("unsupported format version {0} (this build reads version {v})", v = crate::format::VERSION)]
    UnsupportedVersion(u16),
    /// A codec id this build does not know.
    #[error("unknown codec id {0} (written by a newer shrinkfs?)")]
    UnknownCodec(u8),
    /// A known codec that cannot run on this host (for example a GPU-only codec without a GPU).
    #[error("frame {frame} uses codec {codec}, which this host cannot decode: {why}")]
    CodecUnavailable {
        /// Frame number.
        frame: u64,
        /// The codec the frame needs.
        codec: CodecId,
        /// What is missing.
        why: &'static str,
    },
    /// A fixed-size structure failed its CRC-32C.
    #[error("{what} checksum mismatch")]
    HeaderChecksum {
        /// "header", "frame header", "index" or "footer".
        what: &'static str,
    },
    /// A frame header failed its CRC-32C.
    #[error("frame {frame}: header checksum mismatch")]
    FrameHeaderChecksum {
        /// Frame number.
        frame: u64,
    },
    /// The stored bytes of a frame do not match their CRC-32C.
    #[error("frame {frame}: stored bytes checksum mismatch")]
    FrameChecksum {
        /// Frame number.
        frame: u64,
    },
    /// The decoded bytes of a frame do not match their CRC-32C.
    #[error("frame {frame}: decoded bytes checksum mismatch")]
    RawChecksum {
        /// Frame number.
        frame: u64,
    },
    /// Fewer bytes than a structure needs.
    #[error("truncated {what}: expected {expected} bytes, got {actual}")]
    Truncated {
        /// What was being read.
        what: &'static str,
        /// Bytes needed.
        expected: u64,
        /// Bytes present.
        actual: u64,
    },
    /// A sealed frame failed authentication.
    #[error("frame {frame}: decryption failed (tampered, moved or corrupt frame)")]
    Decrypt {
        /// Frame number.
        frame: u64,
    },
    /// The sealed index failed authentication.
    #[error("index authentication failed (tampered or corrupt index)")]
    IndexAuth,
    /// The key does not match the one the object was sealed with.
    #[error("wrong key: this object was sealed with a different key")]
    WrongKey,
    /// A key was given, and the object is not sealed: anyone who can write to the bucket could
    /// have put it there. Read only when unsealed objects are allowed explicitly.
    #[error("object is not sealed, but a key was given (allow unsealed objects to read it)")]
    NotSealed,
    /// The object is sealed and no key was given.
    #[error("object is encrypted; pass the key file it was written with")]
    KeyRequired,
    /// A key was given for an object that is not sealed; harmless, reported only when asked.
    #[error("invalid key: {0}")]
    InvalidKey(String),
    /// The payload of a frame did not decode with its codec.
    #[error("frame {frame}: corrupt {codec} data: {detail}")]
    Corrupt {
        /// Frame number.
        frame: u64,
        /// Codec of the frame.
        codec: CodecId,
        /// The decoder's message.
        detail: String,
    },
    /// Structures that each parse but disagree with one another (offsets, counts, sizes).
    #[error("inconsistent object: {0}")]
    Inconsistent(String),
    /// The object needs a zstd dictionary that was not supplied.
    #[error("object needs zstd dictionary id {0}; pass the dictionary file it was written with")]
    DictionaryRequired(u32),
    /// An encoder option is out of range.
    #[error("invalid option: {0}")]
    InvalidOption(String),
}

/// Result alias for the codec crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
