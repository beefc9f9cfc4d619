//! The LZ4 frame format (what the `lz4` tool reads and writes) as a frame payload: writing frames of
//! independent 64 KiB blocks, reading any valid frame, and the block map the GPU decodes in parallel.
//!
//! A frame of independent blocks is what lets the GPU (nVCOMP compresses and decodes each chunk of
//! a batch on one thread block) work on a 1 MiB frame as 16 parallel pieces while the payload
//! stays a standard format any LZ4 decoder reads.

use std::io::Read;

use crate::id::DecodeFailure;

/// Raw bytes per block in frames shrinkfs writes.
pub const BLOCK: usize = 64 << 10;

const MAGIC: u32 = 0x184D_2204;
/// Version 01, independent blocks, content size present, no checksums, no dictionary.
const FLG: u8 = 0b0110_1000;
/// Block maximum size 64 KiB.
const BD: u8 = 4 << 4;
const FLG_VERSION_MASK: u8 = 0b1100_0000;
const FLG_INDEPENDENT: u8 = 0b0010_0000;
const FLG_BLOCK_CHECKSUM: u8 = 0b0001_0000;
const FLG_CONTENT_SIZE: u8 = 0b0000_1000;
const FLG_CONTENT_CHECKSUM: u8 = 0b0000_0100;
const FLG_DICT_ID: u8 = 0b0000_0001;
/// Set in a block's size word when the block is stored uncompressed.
const STORED: u32 = 1 << 31;

/// Header bytes of the frames written here (magic, FLG, BD, content size, header checksum).
pub const HEADER_LEN: usize = 4 + 2 + 8 + 1;

/// One block of a frame: LZ4-compressed bytes, or bytes stored as they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Block<'a> {
    /// A raw LZ4 block.
    Compressed(&'a [u8]),
    /// Uncompressed bytes.
    Stored(&'a [u8]),
}

/// Starts a frame of `content_size` raw bytes in `out` (appending).
pub fn begin(content_size: u64, out: &mut Vec<u8>) {
    out.extend_from_slice(&MAGIC.to_le_bytes());
    let desc_at = out.len();
    out.extend_from_slice(&[FLG, BD]);
    out.extend_from_slice(&content_size.to_le_bytes());
    let hc = header_checksum(&out[desc_at..]);
    out.push(hc);
}

/// Appends one block: `compressed` when it is smaller than `raw`, else `raw` stored as is.
pub fn push_block(out: &mut Vec<u8>, compressed: Option<&[u8]>, raw: &[u8]) {
    match compressed.filter(|c| c.len() < raw.len()) {
        Some(c) => {
            out.extend_from_slice(&(c.len() as u32).to_le_bytes());
            out.extend_from_slice(c);
        }
        None => {
            out.extend_from_slice(&(raw.len() as u32 | STORED).to_le_bytes());
            out.extend_from_slice(raw);
        }
    }
}

/// Ends a frame (the end mark).
pub fn end(out: &mut Vec<u8>) {
    out.extend_from_slice(&0u32.to_le_bytes());
}

/// Bytes of the frame descriptor's checksum: the second byte of xxHash32 (seed 0) of FLG..fields.
fn header_checksum(descriptor: &[u8]) -> u8 {
    (twox_hash::XxHash32::oneshot(0, descriptor) >> 8) as u8
}

/// Compresses `raw` into `out` (replacing it) as an LZ4 frame of independent 64 KiB blocks.
/// Returns `false` when the frame would not be smaller than `raw`.
pub fn compress(raw: &[u8], out: &mut Vec<u8>) -> bool {
    out.clear();
    let blocks = raw.len().div_ceil(BLOCK);
    if HEADER_LEN + 4 * blocks + 4 >= raw.len() {
        return false;
    }
    out.reserve(HEADER_LEN + blocks * (4 + lz4_flex::block::get_maximum_output_size(BLOCK)) + 4);
    begin(raw.len() as u64, out);
    for block in raw.chunks(BLOCK) {
        let at = out.len();
        out.resize(at + 4 + lz4_flex::block::get_maximum_output_size(block.len()), 0);
        match lz4_flex::block::compress_into(block, &mut out[at + 4..]) {
            Ok(n) if n < block.len() => {
                out[at..at + 4].copy_from_slice(&(n as u32).to_le_bytes());
                out.truncate(at + 4 + n);
            }
            _ => {
                out.truncate(at);
                push_block(out, None, block);
            }
        }
        if out.len() >= raw.len() {
            return false;
        }
    }
    end(out);
    out.len() < raw.len()
}

/// The blocks of `payload` and the raw bytes each decodes to, when the frame is laid out as
/// shrinkfs writes it (independent blocks, no checksums or dictionary, every block but the last
/// full) for `raw_len` raw bytes; `None` for any other frame (which [`decompress`] still reads).
pub fn blocks(payload: &[u8], raw_len: usize) -> Option<Vec<(Block<'_>, usize)>> {
    let magic = u32::from_le_bytes(payload.get(..4)?.try_into().ok()?);
    let (flg, bd) = (*payload.get(4)?, *payload.get(5)?);
    let plain = FLG_BLOCK_CHECKSUM | FLG_CONTENT_CHECKSUM | FLG_DICT_ID;
    if magic != MAGIC || flg & FLG_VERSION_MASK != 0x40 || flg & FLG_INDEPENDENT == 0 || flg & plain != 0 {
        return None;
    }
    let max_block = match (bd >> 4) & 7 {
        4 => 64 << 10,
        5 => 256 << 10,
        6 => 1 << 20,
        7 => 4 << 20,
        _ => return None,
    };
    let mut at = 6;
    if flg & FLG_CONTENT_SIZE != 0 {
        let size = u64::from_le_bytes(payload.get(at..at + 8)?.try_into().ok()?);
        if size != raw_len as u64 {
            return None;
        }
        at += 8;
    }
    if *payload.get(at)? != header_checksum(&payload[4..at]) {
        return None;
    }
    at += 1;
    let mut out = Vec::with_capacity(raw_len.div_ceil(max_block));
    let mut left = raw_len;
    loop {
        let word = u32::from_le_bytes(payload.get(at..at + 4)?.try_into().ok()?);
        at += 4;
        if word == 0 {
            break;
        }
        let len = (word & !STORED) as usize;
        let data = payload.get(at..at + len)?;
        at += len;
        let raw = left.min(max_block);
        if raw == 0 || len > max_block {
            return None;
        }
        left -= raw;
        out.push((if word & STORED != 0 { Block::Stored(data) } else { Block::Compressed(data) }, raw));
    }
    (at == payload.len() && left == 0).then_some(out)
}

/// The length of the LZ4 frame `payload` starts with, from its header and block sizes (its blocks
/// are not decoded); `None` if it is cut short or does not start with a frame.
fn frame_len(payload: &[u8]) -> Option<usize> {
    if u32::from_le_bytes(payload.get(..4)?.try_into().ok()?) != MAGIC {
        return None;
    }
    let flg = *payload.get(4)?;
    let descriptor = 2 + if flg & FLG_CONTENT_SIZE != 0 { 8 } else { 0 } + if flg & FLG_DICT_ID != 0 { 4 } else { 0 };
    // Magic, descriptor, header checksum.
    let mut at = 4 + descriptor + 1;
    let block_sum = if flg & FLG_BLOCK_CHECKSUM != 0 { 4 } else { 0 };
    loop {
        let word = u32::from_le_bytes(payload.get(at..at + 4)?.try_into().ok()?);
        at += 4;
        if word == 0 {
            break;
        }
        at = at.checked_add((word & !STORED) as usize + block_sum)?;
    }
    at += if flg & FLG_CONTENT_CHECKSUM != 0 { 4 } else { 0 };
    (at <= payload.len()).then_some(at)
}

/// Decodes an LZ4 frame of exactly `raw_len` bytes into `out` (replacing it).
pub fn decompress(payload: &[u8], raw_len: usize, out: &mut Vec<u8>) -> Result<(), DecodeFailure> {
    out.clear();
    if let Some(blocks) = blocks(payload, raw_len) {
        out.resize(raw_len, 0);
        let mut at = 0;
        let mut fast = true;
        for (block, raw) in blocks {
            let dst = &mut out[at..at + raw];
            match block {
                Block::Stored(data) if data.len() == raw => dst.copy_from_slice(data),
                Block::Compressed(data) if lz4_flex::block::decompress_into(data, dst).ok() == Some(raw) => {}
                // A block that is not full: a valid frame laid out otherwise; the general reader decides.
                _ => {
                    fast = false;
                    break;
                }
            }
            at += raw;
        }
        if fast {
            return Ok(());
        }
        out.clear();
    }
    // A payload is one frame and nothing after it (the general reader would go on to the next).
    match frame_len(payload) {
        Some(n) if n == payload.len() => {}
        Some(n) => {
            return Err(DecodeFailure::Corrupt(format!("{} bytes after the lz4 frame's end", payload.len() - n)));
        }
        None => return Err(DecodeFailure::Corrupt("lz4 frame: cut short or not a frame".into())),
    }
    let mut reader = lz4_flex::frame::FrameDecoder::new(payload).take(raw_len as u64 + 1);
    out.reserve_exact(raw_len);
    reader.read_to_end(out).map_err(|e| DecodeFailure::Corrupt(format!("lz4 frame: {e}")))?;
    if out.len() != raw_len {
        return Err(DecodeFailure::Corrupt(format!("decoded {} bytes, expected {raw_len}", out.len())));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(n: usize) -> Vec<u8> {
        b"GET /index.html 200 1234 \"Mozilla/5.0\"\n".iter().copied().cycle().take(n).collect()
    }

    fn noise(n: usize) -> Vec<u8> {
        use rand::{RngCore, SeedableRng};
        let mut v = vec![0u8; n];
        rand::rngs::StdRng::seed_from_u64(7).fill_bytes(&mut v);
        v
    }

    #[test]
    fn frames_roundtrip_and_map_into_full_blocks() {
        for n in [100, BLOCK, BLOCK + 1, 5 * BLOCK + 7] {
            let raw = text(n);
            let mut stored = Vec::new();
            assert!(compress(&raw, &mut stored), "{n}");
            let blocks = blocks(&stored, n).expect("our own layout");
            assert_eq!(blocks.len(), n.div_ceil(BLOCK));
            assert!(blocks[..blocks.len() - 1].iter().all(|b| b.1 == BLOCK));
            let mut back = Vec::new();
            decompress(&stored, n, &mut back).unwrap();
            assert!(back == raw, "{n}");
        }
    }

    #[test]
    fn a_block_that_does_not_shrink_is_stored_and_the_frame_still_decodes() {
        let raw = [text(BLOCK), noise(BLOCK), text(100)].concat();
        let mut stored = Vec::new();
        assert!(compress(&raw, &mut stored));
        let kinds: Vec<bool> =
            blocks(&stored, raw.len()).unwrap().iter().map(|b| matches!(b.0, Block::Stored(_))).collect();
        assert_eq!(kinds, [false, true, false]);
        let mut back = Vec::new();
        decompress(&stored, raw.len(), &mut back).unwrap();
        assert!(back == raw);
        assert!(!compress(&noise(3 * BLOCK), &mut stored), "noise does not shrink");
    }

    #[test]
    fn frames_of_the_reference_layout_tools_write_are_read_too() {
        // lz4_flex's own writer: linked 4 MiB... blocks, content checksum — a frame another tool made.
        use std::io::Write;
        let raw = text(300_000);
        let info = lz4_flex::frame::FrameInfo::new()
            .block_size(lz4_flex::frame::BlockSize::Max256KB)
            .block_mode(lz4_flex::frame::BlockMode::Linked)
            .content_checksum(true);
        let mut w = lz4_flex::frame::FrameEncoder::with_frame_info(info, Vec::new());
        w.write_all(&raw).unwrap();
        let foreign = w.finish().unwrap();
        assert!(blocks(&foreign, raw.len()).is_none(), "not the layout the GPU splits");
        let mut back = Vec::new();
        decompress(&foreign, raw.len(), &mut back).unwrap();
        assert!(back == raw);
        // And a frame we write is read by that general reader as well.
        let mut ours = Vec::new();
        assert!(compress(&raw, &mut ours));
        let mut general = Vec::new();
        lz4_flex::frame::FrameDecoder::new(&ours[..]).read_to_end(&mut general).unwrap();
        assert!(general == raw);
    }

    #[test]
    fn bytes_after_the_frame_are_an_error_whatever_follows() {
        let raw = text(200_000);
        let mut payload = Vec::new();
        assert!(compress(&raw, &mut payload));
        let mut out = Vec::new();
        decompress(&payload, raw.len(), &mut out).unwrap();
        let mut second = Vec::new();
        assert!(compress(&raw[..1000], &mut second));
        // (A skippable frame and a bare magic number were read past without a word before.)
        let skippable = [&0x184D_2A50u32.to_le_bytes()[..], &4u32.to_le_bytes(), b"skip"].concat();
        for tail in [&b"\xde\xad\xbe\xef"[..], &second, &[0u8], &skippable, &MAGIC.to_le_bytes()] {
            let mut longer = payload.clone();
            longer.extend_from_slice(tail);
            let e = decompress(&longer, raw.len(), &mut out).unwrap_err();
            assert!(format!("{e:?}").contains("after the lz4 frame's end"), "{e:?}");
        }
        // The general reader's path too: a frame laid out otherwise (blocks of 4 MiB here).
        let mut other = Vec::new();
        let mut w = lz4_flex::frame::FrameEncoder::with_frame_info(
            lz4_flex::frame::FrameInfo::new().block_size(lz4_flex::frame::BlockSize::Max4MB),
            &mut other,
        );
        std::io::Write::write_all(&mut w, &raw).unwrap();
        w.finish().unwrap();
        decompress(&other, raw.len(), &mut out).unwrap();
        assert_eq!(out, raw);
        other.extend_from_slice(b"junk");
        assert!(decompress(&other, raw.len(), &mut out).is_err());
    }

    #[test]
    fn damaged_frames_are_errors_not_panics() {
        let raw = text(3 * BLOCK);
        let mut stored = Vec::new();
        assert!(compress(&raw, &mut stored));
        let mut out = Vec::new();
        assert!(decompress(&stored, raw.len() + 1, &mut out).is_err(), "wrong length");
        for cut in [0, 3, HEADER_LEN, stored.len() / 2, stored.len() - 1] {
            assert!(blocks(&stored[..cut], raw.len()).is_none(), "cut at {cut}");
        }
        // The general reader (lz4_flex) forgives a missing end mark once all bytes are there; a cut
        // into the data is an error either way. (Frame checksums catch any cut before decoding.)
        for cut in [0, 3, HEADER_LEN, stored.len() / 2, stored.len() - 5] {
            assert!(decompress(&stored[..cut], raw.len(), &mut out).is_err(), "cut at {cut}");
        }
        let mut bad = stored.clone();
        bad[6] ^= 1; // content size no longer matches the header checksum
        assert!(blocks(&bad, raw.len()).is_none());
        assert!(decompress(&bad, raw.len(), &mut out).is_err());
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_or_damaged_frame_decodes_or_errs_without_panicking(
            noise in proptest::collection::vec(proptest::num::u8::ANY, 0..300),
            flips in proptest::collection::vec((0usize..4096, proptest::num::u8::ANY), 0..6),
        ) {
            let mut out = Vec::new();
            let _ = decompress(&noise, noise.len() * 3, &mut out);
            let raw = text(3 * BLOCK + 11);
            let mut stored = Vec::new();
            proptest::prop_assert!(compress(&raw, &mut stored));
            for (at, x) in flips {
                let at = at % stored.len();
                stored[at] ^= x;
            }
            if decompress(&stored, raw.len(), &mut out).is_ok() {
                proptest::prop_assert_eq!(out.len(), raw.len());
            }
        }
    }
}
