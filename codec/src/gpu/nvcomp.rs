//! Our own declarations of nVCOMP 6's batched low-level C API, resolved at run time (dlopen) from
//! the path the caller gives (`GpuConfig::nvcomp_lib`; the binary's `SHRINKFS_NVCOMP_LIB`), the
//! `nvidia/libnvcomp/lib64` folder of installed Python packages, or the system linker path. No
//! nVCOMP header or library is part of this project.

use std::ffi::c_void;
use std::path::{Path, PathBuf};

use libloading::Library;

use crate::codec::{CodecId, GpuMapping, GpuOptions};

/// `nvcompStatus_t`.
pub type Status = i32;
/// `nvcompSuccess`.
pub const SUCCESS: Status = 0;
/// `cudaStream_t` (the same handle as a driver `CUstream`).
pub type Stream = *mut c_void;

/// Every nVCOMP 6 options struct of the batched API is 64 bytes; all-zero is the default
/// (byte data type, default backend, no bitshuffle) for every algorithm we use.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Opts(pub [u8; 64]);

impl Opts {
    fn put(&mut self, at: usize, bytes: &[u8]) {
        self.0[at..at + bytes.len()].copy_from_slice(bytes);
    }

    /// Compression options of an algorithm, laid out as nVCOMP 6's structs (offsets from its
    /// headers). `data_type` is the `nvcompType_t` hint for Cascaded and Bitcomp (0 = let
    /// shrinkfs choose).
    pub fn compress(options: GpuOptions, data_type: i32) -> Self {
        let mut o = Opts([0; 64]);
        match options {
            GpuOptions::Default => {}
            // int algorithm: 1 = nVCOMP's default (high throughput); 0 is entropy-only (ratio ~1.5).
            GpuOptions::Deflate => o.put(0, &1i32.to_le_bytes()),
            GpuOptions::Cascaded => {
                // common_opts {type, mode = asymmetric, terminal = bitpack, coarse = none},
                // fine = delta|rle|for, compression_level = 3: nVCOMP's defaults.
                let dt = if data_type == 0 { 5 } else { data_type };
                o.put(0, &dt.to_le_bytes());
                o.put(4, &1u32.to_le_bytes());
                o.put(8, &1u64.to_le_bytes());
                o.put(24, &7u64.to_le_bytes());
                o.put(32, &[3u8]);
            }
            // int algorithm = 0, nvcompType_t data_type, double delta = 0, mode = lossless.
            GpuOptions::Bitcomp => o.put(4, &(if data_type == 0 { 1 } else { data_type }).to_le_bytes()),
        }
        o
    }

    /// Decompression options of an algorithm (default backend).
    pub fn decompress(options: GpuOptions) -> Self {
        let mut o = Opts([0; 64]);
        match options {
            GpuOptions::Default | GpuOptions::Deflate | GpuOptions::Bitcomp => {}
            // common_opts after the backend: data type BITS lets the stream say its own type.
            GpuOptions::Cascaded => o.put(8, &0xffi32.to_le_bytes()),
        }
        o
    }
}

type CompressGetTempSize = unsafe extern "C" fn(usize, usize, Opts, *mut usize, usize, Stream) -> Status;
type CompressGetMaxOutputChunkSize = unsafe extern "C" fn(usize, Opts, *mut usize) -> Status;
type CompressAsync = unsafe extern "C" fn(
    *const *const c_void,
    *const usize,
    usize,
    usize,
    *mut c_void,
    usize,
    *const *mut c_void,
    *mut usize,
    Opts,
    *mut Status,
    Stream,
) -> Status;
type DecompressGetTempSize = unsafe extern "C" fn(usize, usize, Opts, *mut usize, usize, Stream) -> Status;
type DecompressAsync = unsafe extern "C" fn(
    *const *const c_void,
    *const usize,
    *const usize,
    *mut usize,
    usize,
    *mut c_void,
    usize,
    *const *mut c_void,
    Opts,
    *mut Status,
    Stream,
) -> Status;

/// The batched entry points of one algorithm.
#[derive(Clone, Copy)]
pub struct Algo {
    /// Compression scratch size.
    pub compress_temp: CompressGetTempSize,
    /// Worst-case compressed size of one chunk.
    pub max_output: CompressGetMaxOutputChunkSize,
    /// Batched compression.
    pub compress: CompressAsync,
    /// Decompression scratch size.
    pub decompress_temp: DecompressGetTempSize,
    /// Batched decompression.
    pub decompress: DecompressAsync,
    /// Largest chunk the algorithm compresses.
    pub max_chunk: usize,
    /// Its options struct.
    pub options: GpuOptions,
}

/// Why nVCOMP could not be loaded.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// No candidate path opened.
    #[error("libnvcomp.so.6 not found (set SHRINKFS_NVCOMP_LIB; tried {tried} places)")]
    NotFound {
        /// How many paths were tried.
        tried: usize,
        /// Why the last one did not open.
        #[source]
        last: Option<libloading::Error>,
    },
    /// A library opened, but it is not nVCOMP 6 (none of the batched entry points we use).
    #[error("{path} has none of nVCOMP 6's batched functions")]
    NoBatchedApi {
        /// Where it was loaded from.
        path: String,
    },
}

/// The loaded library.
pub struct Nvcomp {
    _lib: Library,
    algos: Vec<(CodecId, Algo)>,
    /// Where it was loaded from.
    pub path: String,
}

/// Where to look for the library: `explicit` first, then Python packages (`pip install
/// nvidia-libnvcomp-cu13` puts it under site-packages: the system's, the user's, an active
/// virtual environment's), then the linker's path.
fn candidates(explicit: Option<&Path>) -> Vec<PathBuf> {
    let mut c: Vec<PathBuf> = explicit.map(Path::to_path_buf).into_iter().collect();
    let mut roots: Vec<PathBuf> = ["/usr/local/lib", "/usr/lib", "/opt/conda/lib"].iter().map(PathBuf::from).collect();
    if let Some(home) = std::env::var_os("HOME") {
        roots.push(PathBuf::from(home).join(".local/lib"));
    }
    if let Some(venv) = std::env::var_os("VIRTUAL_ENV") {
        roots.push(PathBuf::from(venv).join("lib"));
    }
    for root in roots {
        let Ok(dirs) = std::fs::read_dir(&root) else { continue };
        for d in dirs.flatten() {
            let name = d.file_name();
            if name.to_string_lossy().starts_with("python3") {
                for pkgs in ["site-packages", "dist-packages"] {
                    c.push(d.path().join(pkgs).join("nvidia/libnvcomp/lib64/libnvcomp.so.6"));
                }
            }
        }
    }
    c.push(PathBuf::from("libnvcomp.so.6"));
    c.push(PathBuf::from("libnvcomp.so"));
    c
}

impl Nvcomp {
    /// Loads nVCOMP from `explicit`, else the first place searched where it opens; the error says
    /// what was tried.
    pub fn load(explicit: Option<&Path>) -> Result<Self, LoadError> {
        let mut tried = 0;
        let mut last = None;
        for path in candidates(explicit) {
            // SAFETY: loading a shared library runs its initialisers; nVCOMP's are benign.
            match unsafe { Library::new(&path) } {
                Ok(lib) => return Self::bind(lib, path.display().to_string()),
                Err(e) => {
                    tried += 1;
                    last = Some(e);
                }
            }
        }
        Err(LoadError::NotFound { tried, last })
    }

    fn bind(lib: Library, path: String) -> Result<Self, LoadError> {
        let mut algos = Vec::new();
        // Every codec the codec table maps to an nVCOMP algorithm.
        let mapped = CodecId::ALL.iter().filter_map(|&id| id.descriptor().gpu.map(|g| (id, g)));
        for (id, GpuMapping { nvcomp: name, max_chunk, options, .. }) in mapped {
            // SAFETY: the symbol types are the declarations of nVCOMP 6.0's batched API.
            let algo = unsafe {
                let sym = |suffix: &str| format!("nvcompBatched{name}{suffix}\0");
                let get = |s: String| lib.get::<*const c_void>(s.as_bytes()).map(|p| *p);
                let ct = get(sym("CompressGetTempSize"));
                let mo = get(sym("CompressGetMaxOutputChunkSize"));
                let c = get(sym("CompressAsync"));
                let dt = get(sym("DecompressGetTempSize"));
                let d = get(sym("DecompressAsync"));
                match (ct, mo, c, dt, d) {
                    (Ok(ct), Ok(mo), Ok(c), Ok(dt), Ok(d)) => Algo {
                        compress_temp: std::mem::transmute::<*const c_void, CompressGetTempSize>(ct),
                        max_output: std::mem::transmute::<*const c_void, CompressGetMaxOutputChunkSize>(mo),
                        compress: std::mem::transmute::<*const c_void, CompressAsync>(c),
                        decompress_temp: std::mem::transmute::<*const c_void, DecompressGetTempSize>(dt),
                        decompress: std::mem::transmute::<*const c_void, DecompressAsync>(d),
                        max_chunk,
                        options,
                    },
                    _ => continue,
                }
            };
            algos.push((id, algo));
        }
        if algos.is_empty() {
            return Err(LoadError::NoBatchedApi { path });
        }
        Ok(Nvcomp { _lib: lib, algos, path })
    }

    /// The entry points for a codec, if nVCOMP has it.
    pub fn algo(&self, id: CodecId) -> Option<Algo> {
        self.algos.iter().find(|a| a.0 == id).map(|a| a.1)
    }

    /// Codecs available.
    pub fn codecs(&self) -> Vec<CodecId> {
        self.algos.iter().map(|a| a.0).collect()
    }
}
