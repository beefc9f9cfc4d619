//! Benchmark corpora made by shrinkfs itself: the same kind, size and seed give the same bytes
//! on every machine (except `elf`, which is the running shrinkfs executable).

use clap::ValueEnum;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::io::Write as _;

/// The corpora.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CorpusKind {
    /// nginx-style access log lines.
    Logs,
    /// JSON lines of application events.
    Json,
    /// CSV rows of sales records.
    Csv,
    /// Rust source code (this project's own sources, repeated).
    Source,
    /// ELF machine code (the running shrinkfs executable, repeated).
    Elf,
    /// Typed numeric columns: sorted u32 ids, i64 timestamps, f32 readings.
    Numeric,
    /// Uniform random bytes (incompressible).
    Random,
    /// zstd-compressed logs (already compressed).
    Compressed,
}

impl CorpusKind {
    /// Every corpus, in table order.
    pub const ALL: [CorpusKind; 8] = [
        CorpusKind::Logs,
        CorpusKind::Json,
        CorpusKind::Csv,
        CorpusKind::Source,
        CorpusKind::Elf,
        CorpusKind::Numeric,
        CorpusKind::Random,
        CorpusKind::Compressed,
    ];

    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            CorpusKind::Logs => "logs",
            CorpusKind::Json => "json",
            CorpusKind::Csv => "csv",
            CorpusKind::Source => "source",
            CorpusKind::Elf => "elf",
            CorpusKind::Numeric => "numeric",
            CorpusKind::Random => "random",
            CorpusKind::Compressed => "compressed",
        }
    }
}

const SOURCES: &[&str] = &[
    include_str!("../codec/src/format.rs"),
    include_str!("../codec/src/codec.rs"),
    include_str!("../codec/src/frame.rs"),
    include_str!("../codec/src/reader.rs"),
    include_str!("../codec/src/stream.rs"),
    include_str!("../codec/src/writer.rs"),
    include_str!("pack.rs"),
    include_str!("cli.rs"),
];

const PATHS: &[&str] = &[
    "/",
    "/index.html",
    "/api/v1/items",
    "/api/v1/items/42",
    "/api/v1/users/me",
    "/static/app.js",
    "/static/app.css",
    "/img/logo.png",
    "/login",
    "/logout",
    "/search?q=shoes",
    "/cart",
    "/checkout",
    "/favicon.ico",
    "/robots.txt",
    "/api/v2/orders",
    "/healthz",
    "/metrics",
];
const AGENTS: &[&str] = &[
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_1) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Safari/605.1.15",
    "curl/8.5.0",
    "Prometheus/2.48.0",
    "python-requests/2.31.0",
];
const EVENTS: &[&str] = &["login", "logout", "view_item", "add_to_cart", "purchase", "search", "error"];
const REGIONS: &[&str] = &["north", "south", "east", "west", "central"];

/// Picks from a slice, favouring the front (a rough Zipf), as real traffic does.
fn pick<'a>(r: &mut ChaCha8Rng, items: &[&'a str]) -> &'a str {
    let a = r.random_range(0..items.len());
    let b = r.random_range(0..items.len());
    items[a.min(b)]
}

const KEYWORDS: &[&str] = &[
    "as", "async", "await", "break", "const", "continue", "crate", "else", "enum", "false", "fn", "for", "if", "impl",
    "in", "let", "loop", "match", "mod", "move", "mut", "pub", "ref", "return", "self", "Self", "static", "struct",
    "super", "trait", "true", "type", "unsafe", "use", "where", "while", "u8", "u16", "u32", "u64", "usize", "i64",
    "f64", "bool", "str", "String", "Vec", "Option", "Some", "None", "Result", "Ok", "Err", "Box", "Arc",
];

/// Source code: a tree of many files, each one of the project's sources with its identifiers
/// renamed consistently (as different code in the same language and style reads) and about a
/// fifth of its lines left out. Repeating the same files verbatim would instead reward matching
/// across files far apart, which a real tree does not offer.
fn source(r: &mut ChaCha8Rng, out: &mut Vec<u8>, size: usize) {
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut words: Vec<&str> = Vec::new();
    for s in SOURCES {
        for w in s.split(|c: char| !c.is_ascii_alphanumeric() && c != '_') {
            if w.len() > 2 && w.as_bytes()[0].is_ascii_lowercase() && !KEYWORDS.contains(&w) && !words.contains(&w) {
                words.push(w);
            }
        }
    }
    while out.len() < size {
        for s in SOURCES {
            let mut renamed: std::collections::HashMap<&str, String> = std::collections::HashMap::new();
            let kept: Vec<&str> = s.lines().filter(|_| r.random_bool(0.8)).collect();
            for line in kept {
                let bytes = line.as_bytes();
                let mut i = 0;
                while i < bytes.len() {
                    if !ident(bytes[i]) {
                        out.push(bytes[i]);
                        i += 1;
                        continue;
                    }
                    let start = i;
                    while i < bytes.len() && ident(bytes[i]) {
                        i += 1;
                    }
                    let w = &line[start..i];
                    if KEYWORDS.contains(&w) || w.len() < 3 || w.as_bytes()[0].is_ascii_digit() {
                        out.extend_from_slice(w.as_bytes());
                        continue;
                    }
                    let new = renamed.entry(w).or_insert_with(|| {
                        let parts: Vec<&str> = (0..r.random_range(1..4)).map(|_| pick(r, &words)).collect();
                        let joined = parts.join("_");
                        if w.bytes().all(|b| b.is_ascii_uppercase() || b == b'_' || b.is_ascii_digit()) {
                            joined.to_ascii_uppercase()
                        } else if w.as_bytes()[0].is_ascii_uppercase() {
                            joined
                                .split('_')
                                .filter(|p| !p.is_empty())
                                .map(|p| p[..1].to_ascii_uppercase() + &p[1..])
                                .collect()
                        } else {
                            joined
                        }
                    });
                    out.extend_from_slice(new.as_bytes());
                }
                out.push(b'\n');
            }
        }
    }
}

/// Generates `size` bytes of corpus `kind`.
pub fn generate(kind: CorpusKind, size: usize, seed: u64) -> Vec<u8> {
    let mut r = ChaCha8Rng::seed_from_u64(seed);
    let mut out = Vec::with_capacity(size + 4096);
    match kind {
        CorpusKind::Logs => logs(&mut r, &mut out, size),
        CorpusKind::Json => {
            let mut ts = 1_795_000_000_000u64;
            while out.len() < size {
                ts += r.random_range(0..2000);
                let line = format!(
                    "{{\"ts\":{ts},\"user_id\":{},\"event\":\"{}\",\"amount\":{:.2},\"region\":\"{}\",\"ok\":{}}}\n",
                    r.random_range(1..50_000),
                    pick(&mut r, EVENTS),
                    r.random_range(0.0..500.0f64),
                    pick(&mut r, REGIONS),
                    r.random_bool(0.97)
                );
                out.extend_from_slice(line.as_bytes());
            }
        }
        CorpusKind::Csv => {
            out.extend_from_slice(b"id,date,region,product,qty,unit_price\n");
            let mut id = 0u64;
            while out.len() < size {
                id += 1;
                let line = format!(
                    "{id},2026-{:02}-{:02},{},SKU-{:05},{},{:.2}\n",
                    r.random_range(1..13),
                    r.random_range(1..29),
                    pick(&mut r, REGIONS),
                    r.random_range(0..20_000),
                    r.random_range(1..10),
                    r.random_range(1.0..200.0f64)
                );
                out.extend_from_slice(line.as_bytes());
            }
        }
        CorpusKind::Source => source(&mut r, &mut out, size),
        CorpusKind::Elf => {
            let exe = std::env::current_exe().and_then(std::fs::read).unwrap_or_default();
            if exe.is_empty() {
                return generate(CorpusKind::Source, size, seed);
            }
            while out.len() < size {
                out.extend_from_slice(&exe);
            }
        }
        CorpusKind::Numeric => {
            // Columns in blocks of 16,384 values, as a column store lays them out.
            let (mut id, mut ts, mut temp) = (0u32, 1_795_000_000_000i64, 20.0f32);
            while out.len() < size {
                for _ in 0..16_384 {
                    id += r.random_range(1..4);
                    out.extend_from_slice(&id.to_le_bytes());
                }
                for _ in 0..16_384 {
                    ts += r.random_range(900..1100);
                    out.extend_from_slice(&ts.to_le_bytes());
                }
                for _ in 0..16_384 {
                    temp += r.random_range(-0.05..0.05f32);
                    let q = (temp * 100.0).round() / 100.0;
                    out.extend_from_slice(&q.to_le_bytes());
                }
            }
        }
        CorpusKind::Random => {
            out.resize(size, 0);
            r.fill(&mut out[..]);
        }
        CorpusKind::Compressed => {
            let mut raw = Vec::new();
            let mut enc = zstd::stream::Encoder::new(&mut out, 3).expect("zstd encoder");
            while enc.get_ref().len() < size {
                raw.clear();
                logs(&mut r, &mut raw, 1 << 20);
                std::io::Write::write_all(&mut enc, &raw).expect("write to memory");
                enc.flush().expect("flush to memory");
            }
            enc.finish().expect("finish to memory");
        }
    }
    out.truncate(size);
    out
}

fn logs(r: &mut ChaCha8Rng, out: &mut Vec<u8>, size: usize) {
    let target = out.len() + size;
    let mut sec = 0u32;
    while out.len() < target {
        sec += r.random_range(0..2);
        let status = match r.random_range(0..100) {
            0..=84 => 200,
            85..=89 => 304,
            90..=95 => 404,
            96..=98 => 302,
            _ => 500,
        };
        let line = format!(
            "10.{}.{}.{} - - [22/Nov/2026:{:02}:{:02}:{:02} +0000] \"{} {} HTTP/1.1\" {status} {} \"-\" \"{}\"\n",
            r.random_range(0..4),
            r.random_range(0..256),
            r.random_range(1..255),
            (sec / 3600) % 24,
            (sec / 60) % 60,
            sec % 60,
            if r.random_bool(0.9) { "GET" } else { "POST" },
            pick(r, PATHS),
            r.random_range(200..60_000),
            pick(r, AGENTS)
        );
        out.extend_from_slice(line.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn corpora_are_deterministic_and_sized() {
        for k in CorpusKind::ALL {
            if k == CorpusKind::Elf {
                continue;
            }
            let a = generate(k, 100_000, 7);
            assert_eq!(a.len(), 100_000, "{k:?}");
            assert_eq!(a, generate(k, 100_000, 7), "{k:?}");
        }
    }

    #[test]
    fn compressible_corpora_compress_and_the_others_do_not() {
        for k in CorpusKind::ALL {
            let data = generate(k, 1 << 20, 1);
            let z = zstd::bulk::compress(&data, 1).unwrap();
            let ratio = data.len() as f64 / z.len() as f64;
            match k {
                CorpusKind::Random | CorpusKind::Compressed => {
                    assert!(ratio < 1.01, "{k:?}: {ratio}")
                }
                _ => assert!(ratio > 1.5, "{k:?}: {ratio}"),
            }
        }
    }
}
