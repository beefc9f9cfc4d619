//! The codec table — one row per codec ([`CodecId::descriptor`]): its name, command-line help,
//! levels, CPU back end and nVCOMP mapping, from which the CLI values, the CPU constructor and
//! decoder, the GPU back end and the docs' check are derived — and the CPU codecs behind one
//! `Codec` trait.
//!
//! Compression contexts are kept per thread, so a worker pool compresses frames without
//! allocating a context per frame.

use std::cell::RefCell;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use crate::error::{Error, Result};
pub use crate::id::{CodecId, DecodeFailure};

/// A codec as the rest of the program sees it: everything about a codec but its on-disk id
/// (`id.rs`) and its implementation is here.
#[derive(Debug, Clone, Copy)]
pub struct Descriptor {
    /// Its name on the command line, in `inspect`, in metrics and in docs/FORMAT.md.
    pub name: &'static str,
    /// Its line in `--codec`'s help.
    pub help: &'static str,
    /// The levels it takes, inclusive (`None`: it ignores `--level`).
    pub levels: Option<(i32, i32)>,
    /// Whether a zstd dictionary applies to it.
    pub dictionary: bool,
    /// The CPU back end; `None` for formats only nVCOMP decodes (written as zstd level 1 when no
    /// GPU takes them).
    pub cpu: Option<CpuBackEnd>,
    /// The GPU back end's mapping; `None` where nVCOMP has no such algorithm.
    pub gpu: Option<GpuMapping>,
    /// The levels `shrinkfs bench codecs` measures on the CPU (empty: not measured).
    pub bench_levels: &'static [i32],
}

/// Builds a CPU encoder at a level, with a dictionary where the codec takes one.
pub type NewCodec = fn(i32, Option<Arc<Dictionary>>) -> Result<Box<dyn Codec>>;

/// Decodes one payload (`stored`) into exactly `raw_len` bytes in `out`, with a dictionary where
/// the codec takes one.
pub type DecodePayload =
    fn(stored: &[u8], raw_len: usize, dict: Option<&Dictionary>, out: &mut Vec<u8>) -> Result<(), DecodeFailure>;

/// A codec's CPU back end.
#[derive(Debug, Clone, Copy)]
pub struct CpuBackEnd {
    /// Builds its encoder.
    pub new: NewCodec,
    /// Decodes one payload.
    pub decode: DecodePayload,
}

/// How the GPU back end runs a codec through nVCOMP.
#[derive(Debug, Clone, Copy)]
pub struct GpuMapping {
    /// nVCOMP's name of the algorithm (`nvcompBatched{name}CompressAsync`).
    pub nvcomp: &'static str,
    /// The largest chunk nVCOMP's algorithm takes.
    pub max_chunk: usize,
    /// How a frame's payload is cut for nVCOMP.
    pub layout: GpuLayout,
    /// Which of nVCOMP's options structs the algorithm needs.
    pub options: GpuOptions,
}

/// How a frame's payload is cut into nVCOMP chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuLayout {
    /// One chunk per frame: the payload is nVCOMP's output as it is.
    Whole,
    /// Frames over 64 KiB go as 64 KiB pieces, each its own zstd frame, concatenated.
    ZstdFrames,
    /// Always 64 KiB pieces, each a block of one LZ4 frame of independent blocks.
    Lz4Frame,
}

/// Which options struct an nVCOMP algorithm is given (its layout is `gpu::nvcomp::Opts`'s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuOptions {
    /// All zero: nVCOMP's defaults.
    Default,
    /// Deflate's and GDeflate's: algorithm 1 (high throughput).
    Deflate,
    /// Cascaded's, with the data type hint.
    Cascaded,
    /// Bitcomp's, with the data type hint.
    Bitcomp,
}

/// nVCOMP's largest chunk for LZ4, Snappy, Cascaded, Bitcomp and ANS.
const NVCOMP_16M: usize = 1 << 24;

impl CodecId {
    /// The codec's row of the codec table.
    pub fn descriptor(self) -> Descriptor {
        const NO_CPU_BENCH: &[i32] = &[];
        let gpu = |nvcomp, max_chunk, layout, options| Some(GpuMapping { nvcomp, max_chunk, layout, options });
        match self {
            CodecId::Zstd => Descriptor {
                name: "zstd",
                help: "zstd (levels 1 to 19; the GPU ignores the level)",
                levels: Some((1, ZstdCodec::MAX_LEVEL)),
                dictionary: true,
                cpu: Some(CpuBackEnd {
                    new: |level, dict| Ok(Box::new(ZstdCodec::new(level, dict)?)),
                    decode: decompress_zstd,
                }),
                gpu: gpu("Zstd", (1 << 31) - 1, GpuLayout::ZstdFrames, GpuOptions::Default),
                bench_levels: &[1, 3],
            },
            CodecId::Lz4 => Descriptor {
                name: "lz4",
                help: "LZ4 frames of 64 KiB blocks, the `lz4` tool's format (fast, lower ratio)",
                levels: None,
                dictionary: false,
                cpu: Some(CpuBackEnd {
                    new: |_, _| Ok(Box::new(Lz4Codec)),
                    decode: |stored, raw_len, _, out| Lz4Codec.decompress(stored, raw_len, out),
                }),
                // LZ4 frames go to nVCOMP as their raw blocks.
                gpu: gpu("LZ4", NVCOMP_16M, GpuLayout::Lz4Frame, GpuOptions::Default),
                bench_levels: &[1],
            },
            CodecId::Lz4Block => Descriptor {
                name: "lz4-block",
                help: "One raw LZ4 block per frame (the format of objects written before LZ4 frames)",
                levels: None,
                dictionary: false,
                cpu: Some(CpuBackEnd {
                    new: |_, _| Ok(Box::new(Lz4BlockCodec)),
                    decode: |stored, raw_len, _, out| Lz4BlockCodec.decompress(stored, raw_len, out),
                }),
                gpu: gpu("LZ4", NVCOMP_16M, GpuLayout::Whole, GpuOptions::Default),
                bench_levels: NO_CPU_BENCH,
            },
            CodecId::Deflate => Descriptor {
                name: "deflate",
                help: "Raw deflate (RFC 1951)",
                levels: Some((1, 9)),
                dictionary: false,
                cpu: Some(CpuBackEnd {
                    new: |level, _| Ok(Box::new(DeflateCodec::new(level))),
                    decode: |stored, raw_len, _, out| DeflateCodec::new(1).decompress(stored, raw_len, out),
                }),
                gpu: gpu("Deflate", 1 << 31, GpuLayout::Whole, GpuOptions::Deflate),
                bench_levels: &[1],
            },
            CodecId::Snappy => Descriptor {
                name: "snappy",
                help: "Snappy",
                levels: None,
                dictionary: false,
                cpu: Some(CpuBackEnd {
                    new: |_, _| Ok(Box::new(SnappyCodec)),
                    decode: |stored, raw_len, _, out| SnappyCodec.decompress(stored, raw_len, out),
                }),
                gpu: gpu("Snappy", NVCOMP_16M, GpuLayout::Whole, GpuOptions::Default),
                bench_levels: &[1],
            },
            CodecId::None => Descriptor {
                name: "none",
                help: "Store frames uncompressed (still framed, checksummed and optionally sealed)",
                levels: None,
                dictionary: false,
                cpu: Some(CpuBackEnd {
                    new: |_, _| Ok(Box::new(NoneCodec)),
                    decode: |stored, raw_len, _, out| NoneCodec.decompress(stored, raw_len, out),
                }),
                gpu: None,
                bench_levels: NO_CPU_BENCH,
            },
            CodecId::GDeflate => Descriptor {
                name: "gdeflate",
                help: "nVCOMP GDeflate (GPU-only format)",
                levels: None,
                dictionary: false,
                cpu: None,
                gpu: gpu("Gdeflate", 1 << 31, GpuLayout::Whole, GpuOptions::Deflate),
                bench_levels: NO_CPU_BENCH,
            },
            CodecId::Cascaded => Descriptor {
                name: "cascaded",
                help: "nVCOMP Cascaded, for typed numeric data (GPU-only format; see --gpu-data-type)",
                levels: None,
                dictionary: false,
                cpu: None,
                gpu: gpu("Cascaded", NVCOMP_16M, GpuLayout::Whole, GpuOptions::Cascaded),
                bench_levels: NO_CPU_BENCH,
            },
            CodecId::Bitcomp => Descriptor {
                name: "bitcomp",
                help: "nVCOMP Bitcomp, for typed numeric data (GPU-only format)",
                levels: None,
                dictionary: false,
                cpu: None,
                gpu: gpu("Bitcomp", NVCOMP_16M, GpuLayout::Whole, GpuOptions::Bitcomp),
                bench_levels: NO_CPU_BENCH,
            },
            CodecId::Ans => Descriptor {
                name: "ans",
                help: "nVCOMP ANS (GPU-only format)",
                levels: None,
                dictionary: false,
                cpu: None,
                gpu: gpu("ANS", NVCOMP_16M, GpuLayout::Whole, GpuOptions::Default),
                bench_levels: NO_CPU_BENCH,
            },
        }
    }

    /// The codec's name, as used on the command line and in `inspect`.
    pub fn name(self) -> &'static str {
        self.descriptor().name
    }

    /// Whether only nVCOMP on a GPU can decode this codec.
    pub fn gpu_only(self) -> bool {
        self.descriptor().cpu.is_none()
    }
}

impl fmt::Display for CodecId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for CodecId {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Self::ALL
            .iter()
            .copied()
            .find(|c| c.name() == s)
            .ok_or_else(|| Error::InvalidOption(format!("unknown codec {s:?}")))
    }
}

/// A zstd dictionary, identified by the id zstd stores in it.
pub struct Dictionary {
    id: u32,
    bytes: Vec<u8>,
}

impl Dictionary {
    /// Wraps dictionary bytes (as made by `zstd --train`); rejects bytes that are not one.
    pub fn new(bytes: Vec<u8>) -> Result<Self> {
        let id = zstd::zstd_safe::get_dict_id_from_dict(&bytes)
            .map(|id| id.get())
            .ok_or_else(|| Error::InvalidOption("not a zstd dictionary (no dictionary id)".into()))?;
        Ok(Dictionary { id, bytes })
    }

    /// The dictionary id zstd records in frames compressed with it.
    pub fn id(&self) -> u32 {
        self.id
    }
}

impl fmt::Debug for Dictionary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Dictionary(id {}, {} bytes)", self.id, self.bytes.len())
    }
}

/// A frame codec: compresses one frame's bytes, decompresses one payload.
///
/// Every implementation, CPU or GPU, must pass the same conformance suite (`tests/conformance`).
pub trait Codec: Send + Sync {
    /// The id written into frames this codec produces.
    fn id(&self) -> CodecId;

    /// Compresses `raw` into `out` (replacing its contents). Returns `false`, leaving `out`
    /// unspecified, when the result would not be smaller than `raw`.
    fn compress(&self, raw: &[u8], out: &mut Vec<u8>) -> bool;

    /// Decompresses `stored` into `out` (replacing its contents), which must come to exactly
    /// `raw_len` bytes.
    fn decompress(&self, stored: &[u8], raw_len: usize, out: &mut Vec<u8>) -> Result<(), DecodeFailure>;
}

/// Stores bytes as they are.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoneCodec;

impl Codec for NoneCodec {
    fn id(&self) -> CodecId {
        CodecId::None
    }
    fn compress(&self, _raw: &[u8], _out: &mut Vec<u8>) -> bool {
        false
    }
    fn decompress(&self, stored: &[u8], raw_len: usize, out: &mut Vec<u8>) -> Result<(), DecodeFailure> {
        if stored.len() != raw_len {
            return Err(DecodeFailure::Corrupt(format!("{} stored bytes for {raw_len} raw", stored.len())));
        }
        out.clear();
        out.extend_from_slice(stored);
        Ok(())
    }
}

/// zstd at a level from 1 to 19, optionally with a dictionary.
#[derive(Debug, Clone)]
pub struct ZstdCodec {
    level: i32,
    dict: Option<Arc<Dictionary>>,
}

/// Per-thread zstd contexts, rebuilt only when the level or dictionary changes.
struct ZstdContexts {
    compressor: Option<(zstd::bulk::Compressor<'static>, i32, u32)>,
    decompressor: Option<(zstd::bulk::Decompressor<'static>, u32)>,
}

thread_local! {
    static ZSTD: RefCell<ZstdContexts> = const { RefCell::new(ZstdContexts { compressor: None, decompressor: None }) };
}

impl ZstdCodec {
    /// Highest level accepted.
    pub const MAX_LEVEL: i32 = 19;

    /// A zstd codec at `level` (1..=19).
    pub fn new(level: i32, dict: Option<Arc<Dictionary>>) -> Result<Self> {
        if !(1..=Self::MAX_LEVEL).contains(&level) {
            return Err(Error::InvalidOption(format!("zstd level must be 1 to 19, not {level}")));
        }
        Ok(ZstdCodec { level, dict })
    }

    fn dict_id(&self) -> u32 {
        self.dict.as_ref().map_or(0, |d| d.id)
    }
}

impl Codec for ZstdCodec {
    fn id(&self) -> CodecId {
        CodecId::Zstd
    }

    fn compress(&self, raw: &[u8], out: &mut Vec<u8>) -> bool {
        ZSTD.with(|z| {
            let mut z = z.borrow_mut();
            let want = (self.level, self.dict_id());
            let fresh = !matches!(&z.compressor, Some((_, l, d)) if (*l, *d) == want);
            if fresh {
                let bytes = self.dict.as_ref().map_or(&[][..], |d| &d.bytes[..]);
                match zstd::bulk::Compressor::with_dictionary(self.level, bytes) {
                    Ok(c) => z.compressor = Some((c, want.0, want.1)),
                    Err(_) => return false,
                }
            }
            let (c, _, _) = z.compressor.as_mut().expect("set above");
            out.clear();
            // Room for one byte less than the input: zstd stops with "destination too small"
            // as soon as the frame would not be smaller, which is also the cheapest way out.
            out.reserve_exact(raw.len().saturating_sub(1));
            match c.compress_to_buffer(raw, out) {
                Ok(n) => n < raw.len(),
                Err(_) => false,
            }
        })
    }

    fn decompress(&self, stored: &[u8], raw_len: usize, out: &mut Vec<u8>) -> Result<(), DecodeFailure> {
        decompress_zstd(stored, raw_len, self.dict.as_deref(), out)
    }
}

/// Decompresses one zstd frame of exactly `raw_len` bytes, with an optional dictionary.
fn decompress_zstd(
    stored: &[u8],
    raw_len: usize,
    dict: Option<&Dictionary>,
    out: &mut Vec<u8>,
) -> Result<(), DecodeFailure> {
    ZSTD.with(|z| {
        let mut z = z.borrow_mut();
        let want = dict.map_or(0, |d| d.id);
        if !matches!(&z.decompressor, Some((_, d)) if *d == want) {
            let bytes = dict.map_or(&[][..], |d| &d.bytes[..]);
            let d = zstd::bulk::Decompressor::with_dictionary(bytes)
                .map_err(|e| DecodeFailure::Corrupt(format!("zstd context: {e}")))?;
            z.decompressor = Some((d, want));
        }
        let (d, _) = z.decompressor.as_mut().expect("set above");
        out.clear();
        out.reserve_exact(raw_len);
        let n = d.decompress_to_buffer(stored, out).map_err(|e| DecodeFailure::Corrupt(e.to_string()))?;
        if n != raw_len {
            return Err(DecodeFailure::Corrupt(format!("decoded {n} bytes, expected {raw_len}")));
        }
        Ok(())
    })
}

/// LZ4 frames of independent 64 KiB blocks: the format of the `lz4` tool, and one the GPU splits
/// into parallel pieces.
#[derive(Debug, Default, Clone, Copy)]
pub struct Lz4Codec;

impl Codec for Lz4Codec {
    fn id(&self) -> CodecId {
        CodecId::Lz4
    }

    fn compress(&self, raw: &[u8], out: &mut Vec<u8>) -> bool {
        crate::lz4frame::compress(raw, out)
    }

    fn decompress(&self, stored: &[u8], raw_len: usize, out: &mut Vec<u8>) -> Result<(), DecodeFailure> {
        crate::lz4frame::decompress(stored, raw_len, out)
    }
}

/// One raw LZ4 block per frame, as nVCOMP's LZ4 writes a chunk.
#[derive(Debug, Default, Clone, Copy)]
pub struct Lz4BlockCodec;

impl Codec for Lz4BlockCodec {
    fn id(&self) -> CodecId {
        CodecId::Lz4Block
    }

    fn compress(&self, raw: &[u8], out: &mut Vec<u8>) -> bool {
        out.clear();
        out.resize(lz4_flex::block::get_maximum_output_size(raw.len()), 0);
        match lz4_flex::block::compress_into(raw, out) {
            Ok(n) if n < raw.len() => {
                out.truncate(n);
                true
            }
            _ => false,
        }
    }

    fn decompress(&self, stored: &[u8], raw_len: usize, out: &mut Vec<u8>) -> Result<(), DecodeFailure> {
        out.clear();
        out.resize(raw_len, 0);
        let n = lz4_flex::block::decompress_into(stored, out).map_err(|e| DecodeFailure::Corrupt(e.to_string()))?;
        if n != raw_len {
            return Err(DecodeFailure::Corrupt(format!("decoded {n} bytes, expected {raw_len}")));
        }
        Ok(())
    }
}

/// Raw deflate (RFC 1951), the format nVCOMP's Deflate writes, so either side decodes the other's.
#[derive(Debug, Clone, Copy)]
pub struct DeflateCodec {
    level: u32,
}

impl DeflateCodec {
    /// Deflate at `level` (1..=9).
    pub fn new(level: i32) -> Self {
        DeflateCodec { level: level.clamp(1, 9) as u32 }
    }
}

impl Codec for DeflateCodec {
    fn id(&self) -> CodecId {
        CodecId::Deflate
    }

    fn compress(&self, raw: &[u8], out: &mut Vec<u8>) -> bool {
        let mut c = flate2::Compress::new(flate2::Compression::new(self.level), false);
        out.clear();
        out.reserve_exact(raw.len());
        match c.compress_vec(raw, out, flate2::FlushCompress::Finish) {
            Ok(flate2::Status::StreamEnd) => out.len() < raw.len(),
            _ => false,
        }
    }

    fn decompress(&self, stored: &[u8], raw_len: usize, out: &mut Vec<u8>) -> Result<(), DecodeFailure> {
        let mut d = flate2::Decompress::new(false);
        out.clear();
        out.reserve_exact(raw_len);
        match d.decompress_vec(stored, out, flate2::FlushDecompress::Finish) {
            Ok(flate2::Status::StreamEnd) if out.len() == raw_len && d.total_in() as usize == stored.len() => Ok(()),
            Ok(flate2::Status::StreamEnd) if out.len() == raw_len => Err(DecodeFailure::Corrupt(format!(
                "{} bytes after the deflate stream's end",
                stored.len() - d.total_in() as usize
            ))),
            Ok(_) => Err(DecodeFailure::Corrupt(format!("decoded {} bytes, expected {raw_len}", out.len()))),
            Err(e) => Err(DecodeFailure::Corrupt(e.to_string())),
        }
    }
}

/// Raw Snappy blocks, the format nVCOMP's Snappy writes.
#[derive(Debug, Default, Clone, Copy)]
pub struct SnappyCodec;

impl Codec for SnappyCodec {
    fn id(&self) -> CodecId {
        CodecId::Snappy
    }

    fn compress(&self, raw: &[u8], out: &mut Vec<u8>) -> bool {
        out.clear();
        out.resize(snap::raw::max_compress_len(raw.len()), 0);
        match snap::raw::Encoder::new().compress(raw, out) {
            Ok(n) if n < raw.len() => {
                out.truncate(n);
                true
            }
            _ => false,
        }
    }

    fn decompress(&self, stored: &[u8], raw_len: usize, out: &mut Vec<u8>) -> Result<(), DecodeFailure> {
        match snap::raw::decompress_len(stored) {
            Ok(n) if n == raw_len => {}
            Ok(n) => return Err(DecodeFailure::Corrupt(format!("block says {n} bytes, expected {raw_len}"))),
            Err(e) => return Err(DecodeFailure::Corrupt(e.to_string())),
        }
        out.clear();
        out.resize(raw_len, 0);
        snap::raw::Decoder::new().decompress(stored, out).map(|_| ()).map_err(|e| DecodeFailure::Corrupt(e.to_string()))
    }
}

/// What an encoder should compress with.
#[derive(Debug, Clone)]
pub struct CodecParams {
    /// The codec to try first (frames that do not shrink are stored with `none`).
    pub codec: CodecId,
    /// Compression level (zstd: 1..=19; ignored by the others).
    pub level: i32,
    /// Optional zstd dictionary.
    pub dict: Option<Arc<Dictionary>>,
}

impl Default for CodecParams {
    fn default() -> Self {
        CodecParams { codec: CodecId::Zstd, level: 1, dict: None }
    }
}

impl CodecParams {
    /// Builds the CPU codec these parameters name. GPU-only formats get zstd level 1, which every
    /// host reads: the CPU path (no GPU, or a GPU fallback) writes that instead.
    pub fn cpu_codec(&self) -> Result<Box<dyn Codec>> {
        match self.codec.descriptor().cpu {
            Some(cpu) => (cpu.new)(self.level, self.dict.clone()),
            None => Ok(Box::new(ZstdCodec::new(1, None)?)),
        }
    }
}

/// Decodes a payload of any codec this host can decode on the CPU.
pub fn decompress_cpu(
    codec: CodecId,
    stored: &[u8],
    raw_len: usize,
    dict: Option<&Dictionary>,
    out: &mut Vec<u8>,
) -> Result<(), DecodeFailure> {
    match codec.descriptor().cpu {
        Some(cpu) => (cpu.decode)(stored, raw_len, dict, out),
        None => Err(DecodeFailure::Unavailable("it is a GPU-only codec; decode on a host with nVCOMP")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_roundtrip_through_bytes_and_names() {
        for &c in CodecId::ALL {
            assert_eq!(CodecId::from_u8(c as u8).unwrap(), c);
            assert_eq!(c.name().parse::<CodecId>().unwrap(), c);
        }
        assert_eq!(CodecId::from_u8(0x53), None);
    }

    #[test]
    fn the_table_keeps_the_format_rules() {
        let mut names: Vec<&str> = CodecId::ALL.iter().map(|c| c.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), CodecId::ALL.len(), "codec names are unique");
        for &c in CodecId::ALL {
            let d = c.descriptor();
            // FORMAT.md: ids from 16 are the GPU-only formats, and only they.
            assert_eq!(c as u8 >= 16, d.cpu.is_none(), "{c}");
            assert!(d.cpu.is_some() || d.gpu.is_some(), "{c}: nothing can write it");
            assert!(!d.dictionary || c == CodecId::Zstd, "{c}: only zstd frames carry a dictionary id");
            if let Some((lo, hi)) = d.levels {
                assert!(1 <= lo && lo <= hi, "{c}");
            }
            for &level in d.bench_levels {
                let params = CodecParams { codec: c, level, dict: None };
                assert_eq!(params.cpu_codec().unwrap().id(), c, "{c} at level {level}");
            }
        }
    }

    #[test]
    fn every_cpu_back_end_writes_its_own_id_and_gpu_only_formats_fall_back_to_zstd() {
        for &c in CodecId::ALL {
            let made = CodecParams { codec: c, level: 1, dict: None }.cpu_codec().unwrap();
            let want = if c.gpu_only() { CodecId::Zstd } else { c };
            assert_eq!(made.id(), want, "{c}");
        }
    }

    #[test]
    fn zstd_level_out_of_range_is_an_option_error() {
        assert!(ZstdCodec::new(0, None).is_err());
        assert!(ZstdCodec::new(20, None).is_err());
    }
}
