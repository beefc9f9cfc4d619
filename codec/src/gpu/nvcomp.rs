//! Our own declarations of nVCOMP 6's batched low-level C API, resolved at run time (dlopen) from
//! the path the caller gives (`GpuConfig::nvcomp_lib`; the binary's `SHRINKFS_NVCOMP_LIB`), the
//! `nvidia/libnvcomp/lib64` folder of installed Python packages, or the system linker path, and
//! the one place that calls them: a method per call on [`Algo`], taking a typed batch
//! (`BatchMeta`) instead of raw arrays. No nVCOMP header or library is part of this project.

use std::ffi::c_void;
use std::path::{Path, PathBuf};

use cudarc::driver::CudaStream;
use libloading::Library;

use super::error::{GpuError, LoadError};
use super::meta::{BatchMeta, Call, Field};
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

/// The batched entry points of one algorithm, called through its methods.
#[derive(Clone, Copy)]
pub struct Algo {
    compress_temp: CompressGetTempSize,
    max_output: CompressGetMaxOutputChunkSize,
    compress: CompressAsync,
    decompress_temp: DecompressGetTempSize,
    decompress: DecompressAsync,
    /// Largest chunk the algorithm compresses.
    pub max_chunk: usize,
    /// Its options struct.
    pub options: GpuOptions,
}

/// Fails, naming `call`, unless nVCOMP said success.
pub(super) fn check(call: &'static str, status: Status) -> Result<(), GpuError> {
    if status == SUCCESS { Ok(()) } else { Err(GpuError::Nvcomp { call, status }) }
}

fn raw(stream: &CudaStream) -> Stream {
    stream.cu_stream() as Stream
}

/// A batch on the device, ready for a batched call: its metadata, filled as `meta` lays it out
/// and copied whole to device address `meta_at`, and `temp_bytes` of scratch space at `temp_at`.
pub(super) struct DeviceBatch {
    pub(super) meta: BatchMeta,
    pub(super) meta_at: u64,
    pub(super) temp_at: u64,
    pub(super) temp_bytes: usize,
}

impl DeviceBatch {
    fn array(&self, field: Field) -> *mut c_void {
        self.meta.device(self.meta_at, field) as *mut c_void
    }
}

impl Algo {
    /// Worst-case compressed bytes of a chunk of `max_chunk` bytes.
    pub(super) fn max_compressed_chunk(&self, max_chunk: usize, opts: Opts) -> Result<usize, GpuError> {
        let mut out = 0usize;
        // SAFETY: the declaration is nVCOMP 6's; the out-pointer is valid for the call.
        check("CompressGetMaxOutputChunkSize", unsafe { (self.max_output)(max_chunk, opts, &mut out) })?;
        Ok(out)
    }

    /// Scratch bytes a compression of `chunks` chunks of at most `max_chunk` bytes, `total` in all,
    /// needs on the device.
    pub(super) fn compress_temp_bytes(
        &self,
        chunks: usize,
        max_chunk: usize,
        opts: Opts,
        total: usize,
        stream: &CudaStream,
    ) -> Result<usize, GpuError> {
        let mut out = 0usize;
        // SAFETY: the declaration is nVCOMP 6's; the out-pointer is valid for the call, and the
        // stream is alive (borrowed).
        check("CompressGetTempSize", unsafe {
            (self.compress_temp)(chunks, max_chunk, opts, &mut out, total, raw(stream))
        })?;
        Ok(out)
    }

    /// Scratch bytes a decompression of `chunks` chunks of at most `max_raw` decoded bytes,
    /// `total` in all, needs on the device.
    pub(super) fn decompress_temp_bytes(
        &self,
        chunks: usize,
        max_raw: usize,
        opts: Opts,
        total: usize,
        stream: &CudaStream,
    ) -> Result<usize, GpuError> {
        let mut out = 0usize;
        // SAFETY: as in `compress_temp_bytes`.
        check("DecompressGetTempSize", unsafe {
            (self.decompress_temp)(chunks, max_raw, opts, &mut out, total, raw(stream))
        })?;
        Ok(out)
    }

    /// Queues the compression of `batch` on `stream`: each chunk's output size and status arrive
    /// in its `OutSizes` and statuses.
    ///
    /// # Safety
    /// `batch.meta` is a [`Call::Compress`] layout, and at `batch.meta_at` the device holds it
    /// filled: for each chunk the address and size (at most `max_chunk`) of its input and the
    /// address of room for [`Self::max_compressed_chunk`] bytes of output, all in device memory.
    /// `batch.temp_bytes` at `batch.temp_at` are at least [`Self::compress_temp_bytes`] for this
    /// batch, with the same `opts` (which [`Self::max_compressed_chunk`] was given too). Inputs and
    /// outputs start on nVCOMP's alignment (the lanes' buffers align each to 256 bytes). The
    /// stream's CUDA context is current on this thread. Every buffer stays allocated, and nothing
    /// else writes to it, until `stream` has done this work.
    pub(super) unsafe fn compress_async(
        &self,
        batch: &DeviceBatch,
        max_chunk: usize,
        opts: Opts,
        stream: &CudaStream,
    ) -> Result<(), GpuError> {
        debug_assert_eq!(batch.meta.call(), Call::Compress);
        let statuses = batch.meta.device_statuses(batch.meta_at) as *mut Status;
        // SAFETY: the caller's promise above; the argument order is nVCOMP 6's declaration.
        let status = unsafe {
            (self.compress)(
                batch.array(Field::InPtrs) as *const *const c_void,
                batch.array(Field::InSizes) as *const usize,
                max_chunk,
                batch.meta.chunks(),
                batch.temp_at as *mut c_void,
                batch.temp_bytes,
                batch.array(Field::OutPtrs) as *const *mut c_void,
                batch.array(Field::OutSizes) as *mut usize,
                opts,
                statuses,
                raw(stream),
            )
        };
        check("CompressAsync", status)
    }

    /// Queues the decompression of `batch` on `stream`: each chunk's decoded size and status
    /// arrive in its `OutSizes` and statuses.
    ///
    /// # Safety
    /// `batch.meta` is a [`Call::Decompress`] layout, and at `batch.meta_at` the device holds it
    /// filled: for each chunk the address and size of its compressed input, and the address and
    /// room (`OutCaps`) of its output, all in device memory. The inputs were checked on the CPU
    /// first (nVCOMP does not validate them). `batch.temp_bytes` at `batch.temp_at` are at least
    /// [`Self::decompress_temp_bytes`] for this batch, with the same `opts`. Inputs and outputs
    /// start on nVCOMP's alignment (256 bytes in the lanes' buffers). The stream's CUDA context is
    /// current on this thread. Every buffer stays allocated, and nothing else writes to it, until
    /// `stream` has done this work.
    pub(super) unsafe fn decompress_async(
        &self,
        batch: &DeviceBatch,
        opts: Opts,
        stream: &CudaStream,
    ) -> Result<(), GpuError> {
        debug_assert_eq!(batch.meta.call(), Call::Decompress);
        let statuses = batch.meta.device_statuses(batch.meta_at) as *mut Status;
        // SAFETY: the caller's promise above; the argument order is nVCOMP 6's declaration.
        let status = unsafe {
            (self.decompress)(
                batch.array(Field::InPtrs) as *const *const c_void,
                batch.array(Field::InSizes) as *const usize,
                batch.array(Field::OutCaps) as *const usize,
                batch.array(Field::OutSizes) as *mut usize,
                batch.meta.chunks(),
                batch.temp_at as *mut c_void,
                batch.temp_bytes,
                batch.array(Field::OutPtrs) as *const *mut c_void,
                opts,
                statuses,
                raw(stream),
            )
        };
        check("DecompressAsync", status)
    }
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
