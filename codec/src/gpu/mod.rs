//! The GPU back end: nVCOMP's batched codecs on an NVIDIA GPU, found at run time. One binary runs
//! on hosts with and without a GPU: `Gpu::probe` says in one line why there is none.
//!
//! Every `unsafe` of the project's GPU work is in this module (but for a measuring example,
//! `codec/examples/gpu_register_cost.rs`): `nvcomp` declares nVCOMP's C functions and calls
//! them, one method each, on a typed batch (`meta`); `buffers` owns device and pinned
//! allocations; `pinned` the page-locked frame buffers lent to frame producers; `copy` the host
//! copies with streaming stores; `sync` CUDA events; and `device` queues a launch's copies
//! between them. Settings come in as a [`GpuConfig`]; only the
//! search for nVCOMP's library reads the environment (`HOME`, `VIRTUAL_ENV`), as a linker would.

mod buffers;
mod copy;
mod device;
mod error;
mod meta;
pub mod nvcomp;
mod pinned;
mod sync;

pub use crate::gpuconfig::GpuConfig;
pub use device::{Gpu, GpuError, GpuStats, GpuUnavailable, PIECE, driver_present};
pub use error::LoadError;
