//! The GPU back end: nVCOMP's batched codecs on an NVIDIA GPU, found at run time. One binary runs
//! on hosts with and without a GPU: `Gpu::probe` says in one line why there is none.

mod buffers;
mod copy;
mod device;
mod error;
pub mod nvcomp;
mod sync;

pub use crate::gpuconfig::GpuConfig;
pub use device::{Gpu, GpuError, GpuStats, GpuUnavailable};
pub use nvcomp::LoadError;
