//! Writes valid objects into codec/fuzz/corpus/<target>/ so the fuzzers start deep in the format:
//! version 1 objects, and version 2 ones (with ctime and atime, `-v2` in their names).
//! Run from the repository root: `cargo run -p shrinkfs-codec --example fuzz_seeds`.

use shrinkfs_codec::{CodecId, CodecParams, EncodeConfig, FileMeta, MasterKey, encode_all_with};

fn main() -> std::io::Result<()> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
    let text: Vec<u8> = (0..3000u32).flat_map(|i| format!("{i} GET /a/{} 200\n", i % 17).into_bytes()).collect();
    let v2 = FileMeta {
        mode: Some(0o100644),
        mtime: Some((1_700_000_000, 1)),
        ctime: Some((-1, 999_999_999)),
        atime: Some((1_700_000_002, 3)),
        ..Default::default()
    };
    let mut n = 0;
    for codec in [CodecId::None, CodecId::Zstd, CodecId::Lz4, CodecId::Lz4Block] {
        for sealed in [false, true] {
            let objects = [0usize, 1, 4096, text.len()]
                .map(|len| (len, FileMeta::default(), ""))
                .into_iter()
                .chain([0usize, 4096].map(|len| (len, v2, "-v2")));
            for (len, meta, suffix) in objects {
                let cfg = EncodeConfig {
                    params: CodecParams { codec, level: 1, dict: None },
                    frame_size: 4096,
                    key: sealed.then(|| MasterKey::from_bytes(&[0x5a; 32]).expect("32 bytes")),
                };
                let obj = encode_all_with(&cfg, &text[..len], &meta).expect("valid config");
                let targets: &[&str] = if sealed {
                    &["sealed_frame", "stream", "footer", "index"]
                } else {
                    &["frame", "stream", "footer", "index"]
                };
                for t in targets {
                    let dir = root.join(t);
                    std::fs::create_dir_all(&dir)?;
                    std::fs::write(dir.join(format!("seed-{codec}-{sealed}-{len}{suffix}")), &obj)?;
                }
                n += 1;
            }
        }
    }
    println!("wrote {n} seed objects under {}", root.display());
    Ok(())
}
