//! Bulk copies between pinned staging buffers and ordinary memory. Staged bytes are not read
//! again by the CPU, so on x86-64 the copies use non-temporal (streaming) stores: they skip the
//! read-for-ownership of each destination line and leave the caches alone, which matters because
//! a GPU batch is bound by host memory bandwidth (BENCHMARKS.md §2).

/// Copies `src` into `dst` (same length), with streaming stores where the CPU has them and
/// `streaming` asks for them (`GpuConfig::streaming_copy`).
pub fn copy(dst: &mut [u8], src: &[u8], streaming: bool) {
    assert_eq!(dst.len(), src.len(), "copy between slices of one length");
    // SAFETY: dst is a live, writable slice of src.len() bytes that cannot overlap src.
    unsafe { copy_raw(dst.as_mut_ptr(), src, streaming) }
}

/// Appends `src` to `v`, copying as [`copy`] does straight into the vector's spare room (no
/// zero-filling first).
pub fn copy_into(v: &mut Vec<u8>, src: &[u8], streaming: bool) {
    v.reserve(src.len());
    let at = v.len();
    // SAFETY: `reserve` made room for src.len() bytes after `at`, which src (borrowed apart from
    // v) cannot overlap; the length grows only once every byte is written.
    unsafe {
        copy_raw(v.as_mut_ptr().add(at), src, streaming);
        v.set_len(at + src.len());
    }
}

/// Below this a plain copy is as fast and the destination is likely read again soon.
const STREAM_MIN: usize = 4096;

/// # Safety
/// `dst` must be valid for writes of `src.len()` bytes and not overlap `src`.
unsafe fn copy_raw(dst: *mut u8, src: &[u8], streaming: bool) {
    #[cfg(target_arch = "x86_64")]
    if src.len() >= STREAM_MIN && streaming {
        // SAFETY: forwarded from the caller.
        return unsafe { stream_x86(dst, src) };
    }
    // SAFETY: forwarded from the caller.
    unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) }
}

/// # Safety
/// As [`copy_raw`].
#[cfg(target_arch = "x86_64")]
unsafe fn stream_x86(dst: *mut u8, src: &[u8]) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
    let len = src.len();
    // Plain copies for the unaligned head and the tail; 64-byte steps of aligned streaming
    // stores in between.
    let head = dst.align_offset(16).min(len);
    let body = (len - head) / 64 * 64;
    // SAFETY: SSE2 is part of x86-64. Every access lies within the `len` bytes both sides have;
    // streaming stores go to 16-byte aligned addresses (dst + head is aligned, steps are 16).
    unsafe {
        std::ptr::copy_nonoverlapping(src.as_ptr(), dst, head);
        let d = dst.add(head);
        let s = src.as_ptr().add(head);
        let mut i = 0;
        while i < body {
            let a = _mm_loadu_si128(s.add(i).cast::<__m128i>());
            let b = _mm_loadu_si128(s.add(i + 16).cast::<__m128i>());
            let c = _mm_loadu_si128(s.add(i + 32).cast::<__m128i>());
            let e = _mm_loadu_si128(s.add(i + 48).cast::<__m128i>());
            _mm_stream_si128(d.add(i).cast::<__m128i>(), a);
            _mm_stream_si128(d.add(i + 16).cast::<__m128i>(), b);
            _mm_stream_si128(d.add(i + 32).cast::<__m128i>(), c);
            _mm_stream_si128(d.add(i + 48).cast::<__m128i>(), e);
            i += 64;
        }
        // Streaming stores are weakly ordered: fence before anyone else reads the bytes.
        _mm_sfence();
        std::ptr::copy_nonoverlapping(s.add(body), d.add(body), len - head - body);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_every_byte_at_any_alignment_and_length() {
        let src: Vec<u8> = (0..20_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        for streaming in [true, false] {
            for off_d in [0, 1, 5, 15, 16] {
                for off_s in [0, 3, 16] {
                    for len in [0, 1, 63, 64, 4095, 4096, 4097, 12_345, 19_000] {
                        let mut dst = vec![0xAAu8; len + off_d + 7];
                        copy(&mut dst[off_d..off_d + len], &src[off_s..off_s + len], streaming);
                        assert_eq!(&dst[off_d..off_d + len], &src[off_s..off_s + len], "{off_d} {off_s} {len}");
                        assert!(dst[..off_d].iter().chain(&dst[off_d + len..]).all(|&b| b == 0xAA), "no stray writes");
                        let mut v = vec![9u8; off_d];
                        copy_into(&mut v, &src[off_s..off_s + len], streaming);
                        assert_eq!(&v[off_d..], &src[off_s..off_s + len]);
                        assert!(v[..off_d].iter().all(|&b| b == 9));
                    }
                }
            }
        }
    }
}
