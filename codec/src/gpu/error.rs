//! How the GPU back end fails: why there is no GPU to use ([`GpuUnavailable`]), and how a batch
//! fails ([`GpuError`], after which the caller falls back to the CPU).

use cudarc::driver::DriverError;

use crate::id::CodecId;

/// Why no GPU is used: one line a user can act on (no driver, no device, no nVCOMP).
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum GpuUnavailable {
    /// The CUDA driver library is not installed.
    #[error("no NVIDIA driver (libcuda.so.1 not found)")]
    NoDriver,
    /// The driver is there and reports no device.
    #[error("no CUDA device")]
    NoDevice,
    /// A CUDA call made while opening the GPU failed.
    #[error("CUDA {what} failed")]
    Cuda {
        /// What was being done ("init", "context", "stream").
        what: &'static str,
        /// The driver's error.
        #[source]
        source: DriverError,
    },
    /// nVCOMP could not be loaded.
    #[error(transparent)]
    Nvcomp(#[from] LoadError),
}

/// Why a GPU batch failed; the caller falls back to the CPU. These end in a log line, so each
/// message carries its cause.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    /// A CUDA driver call failed.
    #[error("CUDA: {0}")]
    Cuda(#[from] DriverError),
    /// A named CUDA driver call failed.
    #[error("CUDA {call}: {source}")]
    CudaCall {
        /// The call.
        call: &'static str,
        /// The driver's error.
        #[source]
        source: DriverError,
    },
    /// nVCOMP returned an error status.
    #[error("nVCOMP {call} returned status {status}")]
    Nvcomp {
        /// The call.
        call: &'static str,
        /// Its status.
        status: i32,
    },
    /// nVCOMP has no such algorithm, or a chunk is larger than it accepts.
    #[error("codec {0} cannot run on the GPU for this input")]
    Unsupported(CodecId),
    /// Fault injection (`GpuConfig::fail`) asked this call to fail.
    #[error("injected GPU fault")]
    Injected,
    /// Decoded output had the wrong size (corrupt input that slipped past the checksums).
    #[error("GPU decoded chunk {0} to a wrong size")]
    WrongSize(usize),
    /// A batched copy would write outside its destination (a bug in the caller's offsets).
    #[error("batched copy outside its destination")]
    CopyOutOfBounds,
    /// A lane's thread panicked.
    #[error("a GPU lane thread panicked")]
    LanePanicked,
}

pub(super) fn cuda<T>(r: Result<T, DriverError>) -> Result<T, GpuError> {
    r.map_err(GpuError::Cuda)
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
