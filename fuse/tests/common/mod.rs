//! Helpers the core's integration tests share.

#![allow(dead_code)]

/// `n` bytes, different for each seed: every `random_every`-th byte random, the others cycling
/// through `text`, so they compress a little.
pub fn data(n: usize, seed: u64, random_every: usize, text: &[u8]) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if i % random_every == 0 { (x >> 56) as u8 } else { text[i % text.len()] }
        })
        .collect()
}

/// The entries of directory `dir` of `fs`, with their sizes, as `readdirplus` gives them one
/// batch at a time ("." and ".." and hidden names left out).
pub async fn entries(fs: &shrinkfs_fuse::Fs, dir: u64) -> Vec<(String, u64)> {
    let fh = fs.opendir(dir).await.unwrap();
    let mut out = Vec::new();
    let mut offset = 0;
    loop {
        let got = fs.readdirplus(fh, dir, offset).await.unwrap();
        let Some(last) = got.last() else { break };
        offset = last.0;
        out.extend(got.into_iter().map(|(_, e, a, _)| (e.name, a.size)).filter(|(n, _)| !n.starts_with('.')));
    }
    fs.releasedir(fh);
    out
}
