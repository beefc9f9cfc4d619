//! shrinkfs-fuse: the filesystem core over an object store (kernel-free, async) and the thin
//! fuser adapter that mounts it.

pub mod adapter;
pub mod budget;
pub mod cache;
pub mod connection;
pub mod credentials;
pub mod diskcache;
pub mod error;
pub mod files;
pub mod fs;
pub mod inode;
pub mod listing;
pub mod localstore;
pub mod metrics;
pub mod objects;
pub mod session;
pub mod statfs;
pub mod store;
pub mod upload;
pub mod uploads;

pub use error::{Error, Result};
pub use fs::{DirEntry, FileAttrs, Fs, FsConfig};
