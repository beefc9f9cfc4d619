//! shrinkfs-fuse: the filesystem core over an object store (kernel-free, async) and the thin
//! fuser adapter that mounts it.
//!
//! No `unsafe` here: system calls go through nix and rustix.

#![forbid(unsafe_code)]

pub mod adapter;
pub mod attrs;
pub mod blocking;
pub mod budget;
pub mod cache;
pub mod config;
pub mod connection;
pub mod credentials;
pub mod diskcache;
pub mod error;
pub mod fs;
pub mod handles;
pub mod inflight;
pub mod inode;
pub mod localstore;
pub mod metrics;
pub mod namespace;
pub mod objects;
pub mod openfile;
pub mod pagecache;
pub mod procstat;
pub mod readahead;
pub mod recorded;
pub mod session;
pub mod stamp;
pub mod store;
pub mod upload;
pub mod uploads;
pub mod writer;

pub use config::{FsConfig, NamespaceConfig, ReaderConfig, WriterConfig};
pub use error::{Error, Result};
pub use fs::{DirEntry, FileAttrs, Fs, Services, SetAttr};
