//! Codec ids as stored in frames and the index (one byte each), and how a payload fails to
//! decode: the vocabulary the format, the errors and every codec share.

use std::fmt;

/// Codec of a stored frame, as written in the frame header and index (one byte).
///
/// Ids below 16 are standard formats any host decodes; ids from 16 are GPU-only formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum CodecId {
    /// Stored as is.
    None = 0,
    /// A standard zstd frame (RFC 8878) with the content size set.
    Zstd = 1,
    /// A raw LZ4 block (no LZ4 frame header); the raw length comes from the frame header.
    /// Read forever; written only on request (`lz4` writes LZ4 frames).
    Lz4Block = 2,
    /// A raw deflate stream (RFC 1951).
    Deflate = 3,
    /// A raw Snappy block.
    Snappy = 4,
    /// A standard LZ4 frame; shrinkfs writes independent 64 KiB blocks (see `lz4frame`).
    Lz4 = 5,
    /// nVCOMP GDeflate (GPU only).
    GDeflate = 16,
    /// nVCOMP Cascaded (GPU only).
    Cascaded = 17,
    /// nVCOMP Bitcomp (GPU only).
    Bitcomp = 18,
    /// nVCOMP ANS (GPU only).
    Ans = 19,
}

impl CodecId {
    /// All codec ids this build knows.
    pub const ALL: [CodecId; 10] = [
        CodecId::None,
        CodecId::Zstd,
        CodecId::Lz4Block,
        CodecId::Deflate,
        CodecId::Snappy,
        CodecId::Lz4,
        CodecId::GDeflate,
        CodecId::Cascaded,
        CodecId::Bitcomp,
        CodecId::Ans,
    ];

    /// Reads a stored codec byte.
    pub fn from_u8(v: u8) -> Option<Self> {
        Self::ALL.into_iter().find(|c| *c as u8 == v)
    }

    /// The codec's name, as used on the command line and in `inspect`.
    pub fn name(self) -> &'static str {
        match self {
            CodecId::None => "none",
            CodecId::Zstd => "zstd",
            CodecId::Lz4Block => "lz4-block",
            CodecId::Deflate => "deflate",
            CodecId::Snappy => "snappy",
            CodecId::Lz4 => "lz4",
            CodecId::GDeflate => "gdeflate",
            CodecId::Cascaded => "cascaded",
            CodecId::Bitcomp => "bitcomp",
            CodecId::Ans => "ans",
        }
    }

    /// Whether only nVCOMP on a GPU can decode this codec.
    pub fn gpu_only(self) -> bool {
        (self as u8) >= 16
    }
}

impl fmt::Display for CodecId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a payload did not decode.
#[derive(Debug)]
pub enum DecodeFailure {
    /// This host has no decoder for the codec.
    Unavailable(&'static str),
    /// The payload is not valid data of the codec.
    Corrupt(String),
}
