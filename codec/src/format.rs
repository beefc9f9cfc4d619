//! Byte layout of format versions 1 and 2: object header, frame header, index and footer
//! (docs/FORMAT.md).
//!
//! Everything is little-endian and fixed-size except the index, whose length follows from its
//! entry count and the version (version 2's file metadata block is 64 bytes, version 1's 32). Each
//! structure carries a CRC-32C so a flipped byte is named, never decoded.

use crate::error::{Error, Result, Rule};
use crate::id::CodecId;
pub use crate::meta::{FileMeta, S_IFBLK, S_IFCHR, S_IFDIR, S_IFIFO, S_IFLNK, S_IFMT, S_IFREG, S_IFSOCK};

/// A format version this build reads and writes. The versions differ only in the index's file
/// metadata block: version 2 adds ctime and atime. A writer picks the oldest version that holds
/// the metadata it records (`FileMeta::min_version`), so objects without ctime and atime stay
/// readable by version 1 readers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Version {
    /// Mode, owner, group and mtime: a 32-byte metadata block.
    V1 = 1,
    /// Version 1's fields, ctime and atime: a 64-byte metadata block.
    V2 = 2,
}

impl Version {
    /// The newest version this build reads (and the one errors about newer versions name).
    pub const NEWEST: Version = Version::V2;

    /// The version numbered `n` in a header or footer, if this build reads it.
    pub fn from_u16(n: u16) -> Option<Self> {
        match n {
            1 => Some(Version::V1),
            2 => Some(Version::V2),
            _ => None,
        }
    }

    /// The number stored in the header's and footer's `version` fields.
    pub fn number(self) -> u16 {
        self as u16
    }

    /// Size of the file metadata block in the index.
    pub const fn meta_len(self) -> usize {
        match self {
            Version::V1 => 32,
            Version::V2 => 64,
        }
    }

    /// Size of the index's fixed part before the entries (magic, count, header copy, metadata).
    pub const fn index_fixed_len(self) -> usize {
        8 + HEADER_LEN + self.meta_len()
    }

    /// Length of the smallest object (an empty file): header, index without entries, footer.
    pub const fn min_object_len(self) -> u64 {
        (HEADER_LEN + self.index_fixed_len() + FOOTER_LEN) as u64
    }

    /// Length of the index of `count` entries, with the tag when `sealed`.
    pub fn index_len(self, count: usize, sealed: bool) -> usize {
        self.index_fixed_len() + ENTRY_LEN * count + if sealed { TAG_LEN } else { 0 }
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.number())
    }
}

/// The version a header or footer names, or the error naming `rule` for one this build does not read.
fn read_version(n: u16, rule: Rule) -> Result<Version> {
    Version::from_u16(n).ok_or(Error::UnsupportedVersion { rule, version: n, supported: Version::NEWEST.number() })
}

/// First 8 bytes of every shrinkfs object.
pub const HEAD_MAGIC: [u8; 8] = *b"\x89SHRKFS\n";
/// Last 8 bytes of every shrinkfs object.
pub const FOOT_MAGIC: [u8; 8] = *b"\nSHRKFS\x89";
/// First 4 bytes of the index. `S` (0x53) is never a codec id, so a sequential reader tells
/// the index from the next frame header by its first byte.
pub const INDEX_MAGIC: [u8; 4] = *b"SKIX";

/// Size of the object header.
pub const HEADER_LEN: usize = 64;
/// Size of a frame header.
pub const FRAME_HEADER_LEN: usize = 24;
/// Size of one index entry.
pub const ENTRY_LEN: usize = 32;
/// Size of the footer.
pub const FOOTER_LEN: usize = 48;
/// Size of the AES-GCM tag that ends a sealed frame payload and a sealed index.
pub const TAG_LEN: usize = 16;

/// Header flag: frames and index are sealed with AES-256-GCM.
pub const FLAG_SEALED: u16 = 1;
/// Frame flag: the payload is sealed.
pub const FRAME_FLAG_SEALED: u8 = 1;

/// Smallest frame size an encoder accepts.
pub const MIN_FRAME_SIZE: u32 = 4 * 1024;
/// Largest raw frame a reader accepts; bounds the memory one frame can make a reader allocate.
pub const MAX_FRAME_SIZE: u32 = 64 * 1024 * 1024;
/// Length below which no object of any version fits: checked before the footer's version is
/// known (a longer minimum of a newer version is checked once it is).
pub const SMALLEST_OBJECT_LEN: u64 = Version::V1.min_object_len();

fn crc(bytes: &[u8]) -> u32 {
    crc32c::crc32c(bytes)
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
pub(crate) fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn need(what: &'static str, bytes: &[u8], len: usize) -> Result<()> {
    if bytes.len() < len {
        return Err(Error::Truncated { what, expected: len as u64, actual: bytes.len() as u64 });
    }
    Ok(())
}

/// The object header: identity and parameters shared by every frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Format version of the object; its footer and the index's header copy name the same one.
    pub version: Version,
    /// Header flags (`FLAG_SEALED`).
    pub flags: u16,
    /// Nominal raw frame size the writer used (informational; frames may be shorter).
    pub frame_size: u32,
    /// Random per-object id: salt of the per-object key and part of every frame's associated data.
    pub object_id: [u8; 16],
    /// First bytes of a value derived from the key, so a wrong key is named before any frame is tried.
    pub key_check: [u8; 8],
    /// zstd dictionary id the frames were compressed with, 0 for none.
    pub dict_id: u32,
}

impl Header {
    /// Whether frames are sealed.
    pub fn sealed(&self) -> bool {
        self.flags & FLAG_SEALED != 0
    }

    /// Serializes the header.
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..8].copy_from_slice(&HEAD_MAGIC);
        b[8..10].copy_from_slice(&self.version.number().to_le_bytes());
        b[10..12].copy_from_slice(&self.flags.to_le_bytes());
        b[12..16].copy_from_slice(&self.frame_size.to_le_bytes());
        b[16..32].copy_from_slice(&self.object_id);
        b[32..40].copy_from_slice(&self.key_check);
        b[40..44].copy_from_slice(&self.dict_id.to_le_bytes());
        // 44..60 reserved, zero.
        let c = crc(&b[..60]);
        b[60..64].copy_from_slice(&c.to_le_bytes());
        b
    }

    /// Whether `head` begins like a shrinkfs object (magic only; no checksum).
    pub fn has_magic(head: &[u8]) -> bool {
        head.len() >= 8 && head[..8] == HEAD_MAGIC
    }

    /// Parses and verifies a header (at offset 0, or its copy in the index), in FORMAT.md's order.
    pub fn parse(b: &[u8]) -> Result<Self> {
        need("header", b, HEADER_LEN)?;
        if b[..8] != HEAD_MAGIC {
            return Err(Error::malformed(Rule::HeaderMagic, "bad magic in header"));
        }
        if crc(&b[..60]) != u32_at(b, 60) {
            return Err(Error::malformed(Rule::HeaderCrc, "header checksum mismatch"));
        }
        let version = read_version(u16_at(b, 8), Rule::HeaderVersion)?;
        let flags = u16_at(b, 10);
        if flags & !FLAG_SEALED != 0 {
            return Err(Error::malformed(Rule::HeaderFlags, format!("unknown header flags {flags:#x}")));
        }
        let key_check: [u8; 8] = b[32..40].try_into().expect("8 bytes");
        if flags & FLAG_SEALED == 0 && key_check != [0; 8] {
            return Err(Error::malformed(Rule::HeaderReserved, "key check set in an unsealed header"));
        }
        if b[44..60].iter().any(|x| *x != 0) {
            return Err(Error::malformed(Rule::HeaderReserved, "reserved header bytes 44..60 are not zero"));
        }
        Ok(Header {
            version,
            flags,
            frame_size: u32_at(b, 12),
            object_id: b[16..32].try_into().expect("16 bytes"),
            key_check,
            dict_id: u32_at(b, 40),
        })
    }
}

/// The header in front of every frame's payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// Codec of the payload.
    pub codec: CodecId,
    /// Frame flags (`FRAME_FLAG_SEALED`).
    pub flags: u8,
    /// Length of the decoded bytes.
    pub raw_len: u32,
    /// Length of the payload that follows the header (with the GCM tag when sealed).
    pub stored_len: u32,
    /// CRC-32C of the decoded bytes; 0 when sealed (the GCM tag authenticates them instead).
    pub raw_crc: u32,
    /// CRC-32C of the payload as stored.
    pub stored_crc: u32,
}

impl FrameHeader {
    /// Whether the payload is sealed.
    pub fn sealed(&self) -> bool {
        self.flags & FRAME_FLAG_SEALED != 0
    }

    /// Serializes the frame header.
    pub fn to_bytes(&self) -> [u8; FRAME_HEADER_LEN] {
        let mut b = [0u8; FRAME_HEADER_LEN];
        b[0] = self.codec as u8;
        b[1] = self.flags;
        b[4..8].copy_from_slice(&self.raw_len.to_le_bytes());
        b[8..12].copy_from_slice(&self.stored_len.to_le_bytes());
        b[12..16].copy_from_slice(&self.raw_crc.to_le_bytes());
        b[16..20].copy_from_slice(&self.stored_crc.to_le_bytes());
        let c = crc(&b[..20]);
        b[20..24].copy_from_slice(&c.to_le_bytes());
        b
    }

    /// Parses and verifies the header of frame number `frame` of an object whose header says
    /// `sealed`, in FORMAT.md's order (frame-crc, -reserved, -flags, -codec, -length, -sealed-crc).
    pub fn parse(b: &[u8], frame: u64, sealed: bool) -> Result<Self> {
        need("frame header", b, FRAME_HEADER_LEN)?;
        if crc(&b[..20]) != u32_at(b, 20) {
            return Err(Error::malformed(Rule::FrameCrc, format!("frame {frame}: header checksum mismatch")));
        }
        if u16_at(b, 2) != 0 {
            return Err(Error::malformed(Rule::FrameReserved, format!("frame {frame}: reserved bytes are not zero")));
        }
        let flags = b[1];
        if !flags_fit(flags, sealed) {
            return Err(Error::malformed(
                Rule::FrameFlags,
                format!(
                    "frame {frame}: flags {flags:#x} do not fit a{} object",
                    if sealed { " sealed" } else { "n unsealed" }
                ),
            ));
        }
        let codec = CodecId::from_u8(b[0]).ok_or(Error::UnknownCodec { id: b[0], rule: Rule::FrameCodec })?;
        let h = FrameHeader {
            codec,
            flags,
            raw_len: u32_at(b, 4),
            stored_len: u32_at(b, 8),
            raw_crc: u32_at(b, 12),
            stored_crc: u32_at(b, 16),
        };
        if let Some(why) = lengths_wrong(h.raw_len, h.stored_len, sealed) {
            return Err(Error::malformed(Rule::FrameLength, format!("frame {frame}: {why}")));
        }
        if sealed && h.raw_crc != 0 {
            return Err(Error::malformed(Rule::FrameSealedCrc, format!("frame {frame}: sealed, yet raw checksum set")));
        }
        Ok(h)
    }

    /// Bytes of this header covered by a sealed frame's associated data (codec, flags, lengths).
    pub fn aad_bytes(&self) -> [u8; 12] {
        self.to_bytes()[..12].try_into().expect("12 bytes")
    }
}

/// Whether frame flags (in a frame header or an index entry) fit an object that is `sealed`.
fn flags_fit(flags: u8, sealed: bool) -> bool {
    flags & !FRAME_FLAG_SEALED == 0 && (flags & FRAME_FLAG_SEALED != 0) == sealed
}

/// What is wrong with a frame's lengths (in its header or its entry), if anything.
fn lengths_wrong(raw_len: u32, stored_len: u32, sealed: bool) -> Option<String> {
    if raw_len == 0 || raw_len > MAX_FRAME_SIZE {
        return Some(format!("raw length {raw_len} is outside 1..={MAX_FRAME_SIZE}"));
    }
    let tag = if sealed { TAG_LEN as u32 } else { 0 };
    (stored_len > raw_len.saturating_add(tag) || stored_len < tag)
        .then(|| format!("stored length {stored_len} does not fit raw length {raw_len}"))
}

/// One index entry: where a frame is stored and which logical bytes it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexEntry {
    /// Offset of the frame header in the object.
    pub stored_offset: u64,
    /// Offset of the frame's first byte in the logical (decoded) file.
    pub raw_offset: u64,
    /// Payload length (the frame occupies `FRAME_HEADER_LEN + stored_len` bytes).
    pub stored_len: u32,
    /// Decoded length.
    pub raw_len: u32,
    /// Codec of the frame.
    pub codec: CodecId,
    /// Frame flags, as in the frame header.
    pub flags: u8,
    /// CRC-32C of the decoded bytes (0 when sealed).
    pub raw_crc: u32,
}

impl IndexEntry {
    fn write(&self, b: &mut [u8]) {
        b[0..8].copy_from_slice(&self.stored_offset.to_le_bytes());
        b[8..16].copy_from_slice(&self.raw_offset.to_le_bytes());
        b[16..20].copy_from_slice(&self.stored_len.to_le_bytes());
        b[20..24].copy_from_slice(&self.raw_len.to_le_bytes());
        b[24] = self.codec as u8;
        b[25] = self.flags;
        b[26..28].copy_from_slice(&0u16.to_le_bytes());
        b[28..32].copy_from_slice(&self.raw_crc.to_le_bytes());
    }

    /// Reads entry `i` of an object that is `sealed`, checking the entry rules that concern the
    /// entry alone (codec, flags, reserved, lengths, sealed checksum); tiling is the caller's.
    fn read(b: &[u8], i: usize, sealed: bool) -> Result<Self> {
        let codec = CodecId::from_u8(b[24]).ok_or(Error::UnknownCodec { id: b[24], rule: Rule::EntryCodec })?;
        let flags = b[25];
        if !flags_fit(flags, sealed) {
            return Err(Error::malformed(
                Rule::EntryFlags,
                format!("index entry {i}: flags {flags:#x} do not fit the object"),
            ));
        }
        if u16_at(b, 26) != 0 {
            return Err(Error::malformed(Rule::EntryReserved, format!("index entry {i}: reserved bytes are not zero")));
        }
        let e = IndexEntry {
            stored_offset: u64_at(b, 0),
            raw_offset: u64_at(b, 8),
            stored_len: u32_at(b, 16),
            raw_len: u32_at(b, 20),
            codec,
            flags,
            raw_crc: u32_at(b, 28),
        };
        if let Some(why) = lengths_wrong(e.raw_len, e.stored_len, sealed) {
            return Err(Error::malformed(Rule::EntryLength, format!("index entry {i}: {why}")));
        }
        if sealed && e.raw_crc != 0 {
            return Err(Error::malformed(
                Rule::EntrySealedCrc,
                format!("index entry {i}: sealed, yet raw checksum set"),
            ));
        }
        Ok(e)
    }

    /// Whether this entry describes the same frame as a parsed frame header.
    pub fn matches(&self, h: &FrameHeader) -> bool {
        self.codec == h.codec
            && self.flags == h.flags
            && self.raw_len == h.raw_len
            && self.stored_len == h.stored_len
            && self.raw_crc == h.raw_crc
    }

    /// The stored byte range of the whole frame (header and payload).
    pub fn stored_range(&self) -> std::ops::Range<u64> {
        self.stored_offset..self.stored_offset + FRAME_HEADER_LEN as u64 + self.stored_len as u64
    }

    /// The logical byte range the frame decodes to.
    pub fn raw_range(&self) -> std::ops::Range<u64> {
        self.raw_offset..self.raw_offset + self.raw_len as u64
    }
}

/// Serializes an index body (without the seal tag): magic, count, header copy, metadata, entries,
/// laid out as the header's version says. `meta` must fit that version (`FileMeta::min_version`).
pub fn index_body(header: &Header, meta: &FileMeta, entries: &[IndexEntry]) -> Vec<u8> {
    let fixed = header.version.index_fixed_len();
    let mut b = vec![0u8; fixed + ENTRY_LEN * entries.len()];
    b[0..4].copy_from_slice(&INDEX_MAGIC);
    b[4..8].copy_from_slice(&(entries.len() as u32).to_le_bytes());
    b[8..8 + HEADER_LEN].copy_from_slice(&header.to_bytes());
    meta.write(&mut b[8 + HEADER_LEN..fixed], header.version);
    for (i, e) in entries.iter().enumerate() {
        let at = fixed + i * ENTRY_LEN;
        e.write(&mut b[at..at + ENTRY_LEN]);
    }
    b
}

/// A parsed index body; the seal tag (if any) is checked by the caller that holds the key.
#[derive(Debug, Clone)]
pub struct IndexBody {
    /// The copy of the object header kept in the index, so the tail alone is enough to read.
    pub header: Header,
    /// File metadata.
    pub meta: FileMeta,
    /// One entry per frame, in stored order.
    pub entries: Vec<IndexEntry>,
}

impl IndexBody {
    /// Parses an index body (tag excluded) against its footer and checks every index rule in
    /// FORMAT.md's order: magic, count, the header copy, version and flags agreeing with the
    /// footer's, metadata, each entry, then that the entries tile the object and the file. The
    /// footer's version (which `footer-fit` checked the index length against) gives the layout.
    pub fn parse(b: &[u8], footer: &Footer) -> Result<Self> {
        if b.len() < 8 || b[..4] != INDEX_MAGIC {
            return Err(Error::malformed(Rule::IndexMagic, "bad magic in index"));
        }
        let count = footer.frame_count;
        if u32_at(b, 4) != count {
            return Err(Error::malformed(Rule::IndexCount, "index entry count differs from the footer's"));
        }
        let fixed = footer.version.index_fixed_len();
        need("index", b, fixed + ENTRY_LEN * count as usize)?;
        let header = Header::parse(&b[8..8 + HEADER_LEN])?;
        if header.version != footer.version {
            return Err(Error::malformed(
                Rule::VersionAgree,
                format!("footer says version {}, the header copy version {}", footer.version, header.version),
            ));
        }
        if header.flags != footer.flags {
            return Err(Error::malformed(Rule::FlagsAgree, "footer and header flags differ"));
        }
        let meta = FileMeta::read(&b[8 + HEADER_LEN..fixed], footer.version)?;
        let mut entries = Vec::with_capacity(count as usize);
        let mut stored = HEADER_LEN as u64;
        let mut raw = 0u64;
        for i in 0..count as usize {
            let at = fixed + i * ENTRY_LEN;
            let e = IndexEntry::read(&b[at..at + ENTRY_LEN], i, header.sealed())?;
            if e.stored_offset != stored || e.raw_offset != raw {
                return Err(Error::malformed(Rule::EntryTiling, format!("index entry {i} is out of place")));
            }
            stored = e.stored_range().end;
            raw += e.raw_len as u64;
            entries.push(e);
        }
        if stored != footer.index_offset {
            return Err(Error::malformed(Rule::IndexEnd, "frames do not end where the index starts"));
        }
        if raw != footer.logical_size {
            return Err(Error::malformed(Rule::LogicalSize, "frame sizes do not add up to the logical size"));
        }
        Ok(IndexBody { header, meta, entries })
    }
}

/// The footer: the last 48 bytes of an object, pointing at the index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Footer {
    /// Format version; equals the header's.
    pub version: Version,
    /// Offset of the index in the object.
    pub index_offset: u64,
    /// Length of the index, tag included.
    pub index_len: u32,
    /// Number of frames.
    pub frame_count: u32,
    /// Length of the decoded file.
    pub logical_size: u64,
    /// CRC-32C of the whole index, tag included.
    pub index_crc: u32,
    /// The header flags, repeated so `inspect` can say "sealed" from the footer alone.
    pub flags: u16,
}

impl Footer {
    /// Serializes the footer.
    pub fn to_bytes(&self) -> [u8; FOOTER_LEN] {
        let mut b = [0u8; FOOTER_LEN];
        b[0..8].copy_from_slice(&self.index_offset.to_le_bytes());
        b[8..12].copy_from_slice(&self.index_len.to_le_bytes());
        b[12..16].copy_from_slice(&self.frame_count.to_le_bytes());
        b[16..24].copy_from_slice(&self.logical_size.to_le_bytes());
        b[24..28].copy_from_slice(&self.index_crc.to_le_bytes());
        b[28..30].copy_from_slice(&self.version.number().to_le_bytes());
        b[30..32].copy_from_slice(&self.flags.to_le_bytes());
        // 32..36 reserved, zero.
        let c = crc(&b[..36]);
        b[36..40].copy_from_slice(&c.to_le_bytes());
        b[40..48].copy_from_slice(&FOOT_MAGIC);
        b
    }

    /// Whether `tail` (the last bytes of an object) ends with the footer magic.
    pub fn has_magic(tail: &[u8]) -> bool {
        tail.len() >= 8 && tail[tail.len() - 8..] == FOOT_MAGIC
    }

    /// Parses the footer from the last `FOOTER_LEN` bytes of `tail`, and checks it against the
    /// total object length, in FORMAT.md's order.
    pub fn parse(tail: &[u8], object_len: u64) -> Result<Self> {
        if !Self::has_magic(tail) {
            return Err(Error::NotShrinkfs);
        }
        let too_short = |min: u64, of: &str| {
            Error::malformed(
                Rule::ObjectLength,
                format!("object of {object_len} bytes ends with the footer magic; {of} has at least {min}"),
            )
        };
        if object_len < SMALLEST_OBJECT_LEN {
            return Err(too_short(SMALLEST_OBJECT_LEN, "a shrinkfs object"));
        }
        need("footer", tail, FOOTER_LEN)?;
        let b = &tail[tail.len() - FOOTER_LEN..];
        if crc(&b[..36]) != u32_at(b, 36) {
            return Err(Error::malformed(Rule::FooterCrc, "footer checksum mismatch"));
        }
        let version = read_version(u16_at(b, 28), Rule::FooterVersion)?;
        if object_len < version.min_object_len() {
            return Err(too_short(version.min_object_len(), &format!("a version {version} object")));
        }
        let flags = u16_at(b, 30);
        if flags & !FLAG_SEALED != 0 {
            return Err(Error::malformed(Rule::FooterFlags, format!("unknown footer flags {flags:#x}")));
        }
        if u32_at(b, 32) != 0 {
            return Err(Error::malformed(Rule::FooterReserved, "reserved footer bytes are not zero"));
        }
        let f = Footer {
            version,
            index_offset: u64_at(b, 0),
            index_len: u32_at(b, 8),
            frame_count: u32_at(b, 12),
            logical_size: u64_at(b, 16),
            index_crc: u32_at(b, 24),
            flags: u16_at(b, 30),
        };
        let sealed = f.flags & FLAG_SEALED != 0;
        let fits = version.index_len(f.frame_count as usize, sealed) as u64 == f.index_len as u64
            && f.index_offset >= HEADER_LEN as u64
            && f.index_offset.checked_add(f.index_len as u64 + FOOTER_LEN as u64) == Some(object_len);
        if !fits {
            return Err(Error::malformed(Rule::FooterFit, "footer does not fit the object's length"));
        }
        Ok(f)
    }

    /// Stored byte range of the index.
    pub fn index_range(&self) -> std::ops::Range<u64> {
        self.index_offset..self.index_offset + self.index_len as u64
    }

    /// Whether the object is sealed.
    pub fn sealed(&self) -> bool {
        self.flags & FLAG_SEALED != 0
    }
}

/// CRC-32C as used throughout the format.
pub fn checksum(bytes: &[u8]) -> u32 {
    crc(bytes)
}

impl Error {
    /// An object of `len` bytes that starts with the header magic and has no footer.
    pub fn no_footer(len: u64) -> Self {
        Error::Truncated {
            what: "object (it starts like a shrinkfs object and has no footer)",
            expected: len + FOOTER_LEN as u64,
            actual: len,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Header {
        Header {
            version: Version::V1,
            flags: 0,
            frame_size: 1 << 20,
            object_id: [7; 16],
            key_check: [0; 8],
            dict_id: 0,
        }
    }

    fn with_crc(mut b: [u8; HEADER_LEN]) -> [u8; HEADER_LEN] {
        let c = crc(&b[..60]);
        b[60..64].copy_from_slice(&c.to_le_bytes());
        b
    }

    #[test]
    fn header_roundtrips_and_names_flipped_bytes() {
        for version in [Version::V1, Version::V2] {
            let h = Header { version, ..header() };
            let b = h.to_bytes();
            assert_eq!(u16_at(&b, 8), version.number());
            assert_eq!(Header::parse(&b).unwrap(), h);
            for i in 0..HEADER_LEN {
                let mut c = b;
                c[i] ^= 0x40;
                assert!(Header::parse(&c).is_err(), "flip at {i} went unnoticed");
            }
        }
    }

    fn empty_footer(version: Version) -> Footer {
        Footer {
            version,
            index_offset: 64,
            index_len: version.index_len(0, false) as u32,
            frame_count: 0,
            logical_size: 0,
            index_crc: 0,
            flags: 0,
        }
    }

    #[test]
    fn footer_rejects_wrong_object_length() {
        for (version, min) in [(Version::V1, 216), (Version::V2, 248)] {
            assert_eq!(version.min_object_len(), min);
            let f = empty_footer(version);
            let b = f.to_bytes();
            assert_eq!(Footer::parse(&b, min).unwrap(), f);
            assert_eq!(Footer::parse(&b, min + 1).unwrap_err().rule(), Some(Rule::FooterFit));
            assert_eq!(Footer::parse(&b, min - 1).unwrap_err().rule(), Some(Rule::ObjectLength));
        }
        // Below the smallest object of any version, before the footer's checksum or version is read.
        let mut b = empty_footer(Version::V2).to_bytes();
        b[0] ^= 1;
        assert_eq!(Footer::parse(&b, 215).unwrap_err().rule(), Some(Rule::ObjectLength));
        assert_eq!(Footer::parse(&b, 248).unwrap_err().rule(), Some(Rule::FooterCrc));
    }

    #[test]
    fn index_lengths_per_version() {
        assert_eq!(Version::V1.index_len(3, false), 104 + 96);
        assert_eq!(Version::V2.index_len(3, false), 136 + 96);
        assert_eq!(Version::V2.index_len(0, true), 136 + 16);
    }

    #[test]
    fn checksum_is_crc32c_as_documented() {
        assert_eq!(checksum(b"123456789"), 0xE306_9283);
    }

    #[test]
    fn newer_version_is_named() {
        let mut b = header().to_bytes();
        b[8] = 3;
        let e = Header::parse(&with_crc(b)).unwrap_err();
        assert!(matches!(e, Error::UnsupportedVersion { rule: Rule::HeaderVersion, version: 3, supported: 2 }));
        assert_eq!(e.to_string(), "unsupported format version 3 (this build reads versions 1 to 2) [header-version]");
        b[8] = 0;
        assert!(matches!(Header::parse(&with_crc(b)), Err(Error::UnsupportedVersion { version: 0, .. })));
        let mut f = empty_footer(Version::V1).to_bytes();
        f[28] = 3;
        let c = crc(&f[..36]);
        f[36..40].copy_from_slice(&c.to_le_bytes());
        assert!(matches!(
            Footer::parse(&f, 216),
            Err(Error::UnsupportedVersion { rule: Rule::FooterVersion, version: 3, supported: 2 })
        ));
    }
}
