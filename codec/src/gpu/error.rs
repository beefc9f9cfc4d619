//! How a GPU batch fails (the caller then falls back to the CPU), and the CUDA driver's errors
//! turned into it.

use crate::id::CodecId;

/// Why a GPU batch failed; the caller falls back to the CPU.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    /// A CUDA driver call failed.
    #[error("CUDA: {0}")]
    Cuda(String),
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
    /// Fault injection (`SHRINKFS_GPU_FAULT=1`) asked this call to fail.
    #[error("injected GPU fault")]
    Injected,
    /// Decoded output had the wrong size (corrupt input that slipped past the checksums).
    #[error("GPU decoded chunk {0} to a wrong size")]
    WrongSize(usize),
}

pub(super) fn cuda<T>(r: Result<T, cudarc::driver::DriverError>) -> Result<T, GpuError> {
    r.map_err(|e| GpuError::Cuda(e.to_string()))
}
