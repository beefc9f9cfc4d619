//! Inputs shared by the GPU tests (which write test vectors on the GPU machine) and the vector
//! check in CI (which regenerates the same inputs to compare the CPU's decoding with).

/// Deterministic input number `i` of the GPU test vectors.
pub fn vector_input(i: usize) -> Vec<u8> {
    match i {
        0 => b"the quick brown fox jumps over the lazy dog\n".repeat(200),
        1 => (0..20_000u32).flat_map(|v| (v * 3).to_le_bytes()).collect(),
        _ => (0..65_536u32).map(|v| (v % 251) as u8 ^ (v / 4096) as u8).collect(),
    }
}
