//! Codec ids as stored in frames and the index (one byte each), and how a payload fails to
//! decode: the vocabulary the format, the errors and every codec share. What each codec is
//! (name, back ends) is the codec table's (`codec.rs`); this file only numbers them.

/// Declares `CodecId` and `CodecId::ALL` from one list, so no codec can be missing from `ALL`.
macro_rules! codec_ids {
    ($($(#[$doc:meta])* $variant:ident = $id:literal,)*) => {
        /// Codec of a stored frame, as written in the frame header and index (one byte).
        ///
        /// Ids below 16 are standard formats any host decodes; ids from 16 are GPU-only formats.
        /// Everything else about a codec (its name, CPU and GPU back ends) is in its row of the
        /// codec table, [`CodecId::descriptor`] in `codec.rs`.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u8)]
        pub enum CodecId {
            $($(#[$doc])* $variant = $id,)*
        }

        impl CodecId {
            /// Every codec this build knows, in the order the command line lists them.
            pub const ALL: &[CodecId] = &[$(CodecId::$variant),*];
        }
    };
}

codec_ids! {
    /// A standard zstd frame (RFC 8878) with the content size set.
    Zstd = 1,
    /// A standard LZ4 frame; shrinkfs writes independent 64 KiB blocks (see `lz4frame`).
    Lz4 = 5,
    /// A raw LZ4 block (no LZ4 frame header); the raw length comes from the frame header.
    /// Read forever; written only on request (`lz4` writes LZ4 frames).
    Lz4Block = 2,
    /// A raw deflate stream (RFC 1951).
    Deflate = 3,
    /// A raw Snappy block.
    Snappy = 4,
    /// Stored as is.
    None = 0,
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
    /// Reads a stored codec byte.
    pub fn from_u8(v: u8) -> Option<Self> {
        Self::ALL.iter().copied().find(|c| *c as u8 == v)
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
