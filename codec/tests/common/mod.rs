//! Inputs shared by the GPU tests (which write test vectors on the GPU machine) and the vector
//! check in CI (which regenerates the same inputs to compare the CPU's decoding with).

/// Deterministic input number `i` of the GPU test vectors.
pub fn vector_input(i: usize) -> Vec<u8> {
    match i {
        0 => b"the quick brown fox jumps over the lazy dog\n".repeat(200),
        1 => (0..20_000u32).flat_map(|v| (v * 3).to_le_bytes()).collect(),
        // Text, then 64 KiB that does not compress, then text: a piece the GPU cannot shrink.
        // (A fixed xorshift, not a library generator: checked-in vectors depend on these bytes.)
        3 => {
            let mut x = 0x2545_F491_4F6C_DD1Du64;
            let noise = (0..65_536).map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            });
            let text = || b"GET /a/b 200 512\n".iter().copied().cycle().take(70_000);
            text().chain(noise).chain(text()).collect()
        }
        _ => (0..65_536u32).map(|v| (v % 251) as u8 ^ (v / 4096) as u8).collect(),
    }
}
