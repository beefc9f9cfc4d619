//! A zstd frame that holds its bytes as they are (raw blocks, RFC 8878 §3.1.1), written without
//! the zstd library: what the GPU path stores for a 64 KiB piece nVCOMP could not shrink, so the
//! rest of its frame keeps its compression and any zstd decoder still reads the payload.

/// zstd's frame magic number, little-endian on the wire.
const MAGIC: u32 = 0xFD2F_B528;

/// Largest block a frame may hold (the format's `Block_Maximum_Size`).
const BLOCK_MAX: usize = 128 << 10;

/// Window_Descriptor of a 128 KiB window (Exponent 7: 2^(10 + 7) bytes, Mantissa 0).
const WINDOW_128K: u8 = 7 << 3;

/// Appends to `out` one zstd frame whose content is `data`, stored in raw blocks, with its content
/// size (4 bytes; 8 past 4 GiB), no checksum, no dictionary. Up to one block (a GPU piece) it is
/// a single segment, whose window is its content; a longer one declares a 128 KiB window, so no
/// decoder needs more memory for it than for one block.
pub fn push(out: &mut Vec<u8>, data: &[u8]) {
    out.reserve(data.len() + 16 + 3 * data.len().div_ceil(BLOCK_MAX).max(1));
    out.extend_from_slice(&MAGIC.to_le_bytes());
    // Frame_Header_Descriptor: Frame_Content_Size_flag (bits 7-6), Single_Segment_flag (bit 5).
    // A 4-byte Frame_Content_Size takes the low half of the 8-byte one.
    let (size_flag, size_bytes) = if data.len() <= u32::MAX as usize { (0b1000_0000, 4) } else { (0b1100_0000, 8) };
    if data.len() <= BLOCK_MAX {
        out.push(size_flag | 0b0010_0000);
    } else {
        out.extend_from_slice(&[size_flag, WINDOW_128K]);
    }
    out.extend_from_slice(&(data.len() as u64).to_le_bytes()[..size_bytes]);
    let mut blocks = data.chunks(BLOCK_MAX).peekable();
    if blocks.peek().is_none() {
        // An empty frame still has its one (last, empty) block.
        out.extend_from_slice(&[1, 0, 0]);
    }
    while let Some(b) = blocks.next() {
        // Block_Header: Last_Block (bit 0), Block_Type Raw (bits 1-2 = 0), Block_Size (bits 3-23).
        let header = (b.len() as u32) << 3 | u32::from(blocks.peek().is_none());
        out.extend_from_slice(&header.to_le_bytes()[..3]);
        out.extend_from_slice(b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_zstd_library_reads_stored_frames_of_any_length_alone_and_after_compressed_ones() {
        let data: Vec<u8> = (0..300_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        for n in [0, 1, 255, 256, 65_535, 65_536, BLOCK_MAX, BLOCK_MAX + 1, 300_000] {
            let mut one = Vec::new();
            push(&mut one, &data[..n]);
            let header = if n <= BLOCK_MAX { 9 } else { 10 };
            assert_eq!(one.len(), n + header + 3 * n.div_ceil(BLOCK_MAX).max(1), "{n}: headers only");
            if n > BLOCK_MAX {
                // A streaming decoder held to 128 KiB of window reads it too.
                let mut d = zstd::stream::read::Decoder::new(&one[..]).unwrap();
                d.window_log_max(17).unwrap();
                let mut got = Vec::new();
                std::io::Read::read_to_end(&mut d, &mut got).unwrap();
                assert_eq!(got, &data[..n], "{n}");
            }
            assert_eq!(zstd::stream::decode_all(&one[..]).unwrap(), &data[..n], "{n}");
            // As a piece of a GPU payload: concatenated with ordinary zstd frames.
            let mut joined = zstd::bulk::compress(b"text text text text", 1).unwrap();
            push(&mut joined, &data[..n]);
            let mut want = b"text text text text".to_vec();
            want.extend_from_slice(&data[..n]);
            assert_eq!(zstd::stream::decode_all(&joined[..]).unwrap(), want, "{n}");
        }
    }
}
