//! The one error type of the codec crate: every way stored bytes or options can be wrong.

use crate::id::CodecId;

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
    /// The object breaks one of the format's rules (docs/FORMAT.md, "Conformance"): corrupt,
    /// truncated, tampered with, or written by a broken encoder. The message names the rule.
    #[error("{detail} [{rule}]")]
    Malformed {
        /// The rule broken.
        rule: Rule,
        /// What was found, in words.
        detail: String,
    },
    /// The object names a format version this build does not read (written by a newer shrinkfs).
    #[error("unsupported format version {version} (this build reads versions 1 to {supported}) [{rule}]")]
    UnsupportedVersion {
        /// `HeaderVersion` or `FooterVersion`.
        rule: Rule,
        /// The version found.
        version: u16,
        /// The newest version this build reads.
        supported: u16,
    },
    /// File metadata an object cannot store: its header, written before the metadata was known,
    /// names an older format version than the metadata needs (ctime or atime in version 1).
    #[error("file metadata needs format version {needed}, but the object was started as version {started}")]
    MetaNeedsVersion {
        /// The oldest version that stores the metadata.
        needed: u16,
        /// The version the object's header names.
        started: u16,
    },
    /// A codec id this build does not know.
    #[error("unknown codec id {id} (written by a newer shrinkfs?) [{rule}]")]
    UnknownCodec {
        /// The id found.
        id: u8,
        /// `FrameCodec` or `EntryCodec`.
        rule: Rule,
    },
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
    /// The stored bytes of a frame do not match their CRC-32C.
    #[error("frame {frame}: stored bytes checksum mismatch [{}]", Rule::FramePayloadCrc)]
    FrameChecksum {
        /// Frame number.
        frame: u64,
    },
    /// The decoded bytes of a frame do not match their CRC-32C.
    #[error("frame {frame}: decoded bytes checksum mismatch [{}]", Rule::FrameRawCrc)]
    RawChecksum {
        /// Frame number.
        frame: u64,
    },
    /// Fewer bytes than a structure needs.
    #[error("truncated {what}: expected {expected} bytes, got {actual} [{}]", Rule::Truncated)]
    Truncated {
        /// What was being read.
        what: &'static str,
        /// Bytes needed.
        expected: u64,
        /// Bytes present.
        actual: u64,
    },
    /// A sealed frame failed authentication.
    #[error("frame {frame}: decryption failed (tampered, moved or corrupt frame) [{}]", Rule::FrameTag)]
    Decrypt {
        /// Frame number.
        frame: u64,
    },
    /// The sealed index failed authentication.
    #[error("index authentication failed (tampered or corrupt index) [{}]", Rule::IndexTag)]
    IndexAuth,
    /// The key does not match the one the object was sealed with.
    #[error("wrong key: this object was sealed with a different key [{}]", Rule::KeyCheck)]
    WrongKey,
    /// A key was given, and the object is not sealed: anyone who can write to the bucket could
    /// have put it there. Read only when unsealed objects are allowed explicitly.
    #[error("object is not sealed, but a key was given (allow unsealed objects to read it) [{}]", Rule::SealedOnly)]
    NotSealed,
    /// The object is sealed and no key was given.
    #[error("object is encrypted; pass the key file it was written with")]
    KeyRequired,
    /// A key was given for an object that is not sealed; harmless, reported only when asked.
    #[error("invalid key: {0}")]
    InvalidKey(String),
    /// The payload of a frame did not decode with its codec.
    #[error("frame {frame}: corrupt {codec} data: {detail} [{}]", Rule::FrameDecode)]
    Corrupt {
        /// Frame number.
        frame: u64,
        /// Codec of the frame.
        codec: CodecId,
        /// The decoder's message.
        detail: String,
    },
    /// The object needs a zstd dictionary that was not supplied.
    #[error("object needs zstd dictionary id {0}; pass the dictionary file it was written with [{rule}]", rule = Rule::Dictionary)]
    DictionaryRequired(u32),
    /// An encoder option is out of range.
    #[error("invalid option: {0}")]
    InvalidOption(String),
    /// A frame's encoder or decoder stopped without a result (a bug, logged where it happened).
    #[error("frame {}: its worker stopped without a result (see the log)", .0.0)]
    Lost(#[from] crate::ordered::Lost),
}

impl Error {
    /// A `Malformed` error.
    pub fn malformed(rule: Rule, detail: impl Into<String>) -> Self {
        Error::Malformed { rule, detail: detail.into() }
    }

    /// The format rule this error reports broken, if it is about a malformed object.
    pub fn rule(&self) -> Option<Rule> {
        match self {
            Error::Malformed { rule, .. }
            | Error::UnsupportedVersion { rule, .. }
            | Error::UnknownCodec { rule, .. } => Some(*rule),
            Error::FrameChecksum { .. } => Some(Rule::FramePayloadCrc),
            Error::RawChecksum { .. } => Some(Rule::FrameRawCrc),
            Error::Truncated { .. } => Some(Rule::Truncated),
            Error::Decrypt { .. } => Some(Rule::FrameTag),
            Error::IndexAuth => Some(Rule::IndexTag),
            Error::WrongKey => Some(Rule::KeyCheck),
            Error::NotSealed => Some(Rule::SealedOnly),
            Error::Corrupt { .. } => Some(Rule::FrameDecode),
            Error::DictionaryRequired(_) => Some(Rule::Dictionary),
            Error::NotShrinkfs
            | Error::CodecUnavailable { .. }
            | Error::KeyRequired
            | Error::InvalidKey(_)
            | Error::MetaNeedsVersion { .. }
            | Error::InvalidOption(_)
            | Error::Lost(_) => None,
        }
    }
}

/// Declares `Rule`: each variant with the name FORMAT.md gives it, in its table's order.
macro_rules! rules {
    ($($variant:ident => $name:literal,)*) => {
        /// A rule of docs/FORMAT.md ("Conformance") that an object can break; shown by its name there.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Rule {
            $(
                #[doc = $name]
                $variant,
            )*
        }

        impl Rule {
            /// Every rule, in the order of FORMAT.md's conformance table.
            pub const ALL: &[Rule] = &[$(Rule::$variant),*];

            /// The rule's name in FORMAT.md, as errors show it (`footer-crc`).
            pub fn name(self) -> &'static str {
                match self {
                    $(Rule::$variant => $name,)*
                }
            }
        }
    };
}

rules! {
    ObjectKind => "object-kind",
    ObjectLength => "object-length",
    Truncated => "truncated",
    FooterCrc => "footer-crc",
    FooterVersion => "footer-version",
    FooterFlags => "footer-flags",
    FooterReserved => "footer-reserved",
    FooterFit => "footer-fit",
    IndexCrc => "index-crc",
    IndexMagic => "index-magic",
    IndexCount => "index-count",
    HeaderMagic => "header-magic",
    HeaderCrc => "header-crc",
    HeaderVersion => "header-version",
    HeaderFlags => "header-flags",
    HeaderReserved => "header-reserved",
    VersionAgree => "version-agree",
    FlagsAgree => "flags-agree",
    MetaFlags => "meta-flags",
    MetaAbsent => "meta-absent",
    MetaNanos => "meta-nanos",
    MetaReserved => "meta-reserved",
    EntryCodec => "entry-codec",
    EntryFlags => "entry-flags",
    EntryReserved => "entry-reserved",
    EntryLength => "entry-length",
    EntrySealedCrc => "entry-sealed-crc",
    EntryTiling => "entry-tiling",
    IndexEnd => "index-end",
    LogicalSize => "logical-size",
    KeyCheck => "key-check",
    IndexTag => "index-tag",
    SealedOnly => "sealed-only",
    Dictionary => "dictionary",
    FrameCrc => "frame-crc",
    FrameReserved => "frame-reserved",
    FrameFlags => "frame-flags",
    FrameCodec => "frame-codec",
    FrameLength => "frame-length",
    FrameSealedCrc => "frame-sealed-crc",
    FrameEntry => "frame-entry",
    FramePayloadCrc => "frame-payload-crc",
    FrameTag => "frame-tag",
    FrameDecode => "frame-decode",
    FrameRawCrc => "frame-raw-crc",
    HeaderCopy => "header-copy",
    StreamIndex => "stream-index",
    TrailingBytes => "trailing-bytes",
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Result alias for the codec crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
