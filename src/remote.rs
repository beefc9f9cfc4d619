//! Object URLs on the command line (`s3://bucket/key`, `memory://`-less): blocking `Read` and
//! `Write` over an object store, so `pack`, `unpack` and `inspect` work on objects in place.

use std::io::{self, Read, Write};
use std::sync::Arc;

use anyhow::Context;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{ObjectStore, WriteMultipart};
use shrinkfs_fuse::store::{self, Bucket, OpenError, Source};

use crate::cli::S3Args;

/// An object named on the command line.
pub struct Remote {
    /// Runtime driving the store's futures.
    pub rt: tokio::runtime::Runtime,
    /// The store.
    pub store: Arc<dyn ObjectStore>,
    /// The object's key.
    pub path: Path,
    /// For messages.
    pub url: String,
}

/// Whether an argument names an object rather than a local file.
pub fn is_url(s: &str) -> bool {
    s.starts_with("s3://")
}

/// Why a bucket could not be opened, as the error its exit code is decided by: no usable
/// credentials is a usage error (2), anything else the bucket being unavailable (3).
pub fn open_error(e: OpenError) -> anyhow::Error {
    match e {
        OpenError::Credentials(c) => c.into(),
        other => crate::mount::Unavailable(other.to_string()).into(),
    }
}

/// Opens the store of `s3://bucket/key` (finding the credentials on the way).
pub fn open(url: &str, s3: &S3Args) -> anyhow::Result<Remote> {
    let source = Source::parse(url).map_err(|e| anyhow::anyhow!(e))?;
    let key = match &source {
        Source::S3 { prefix, .. } if !prefix.is_empty() => prefix.clone(),
        _ => anyhow::bail!(crate::exit::UsageError(format!("{url:?} names no object (expected s3://bucket/key)"))),
    };
    let bucket_only = match &source {
        Source::S3 { bucket, .. } => Source::S3 { bucket: bucket.clone(), prefix: String::new() },
        other => other.clone(),
    };
    let options = s3.options()?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("cannot start the runtime")?;
    let Bucket { store, .. } = rt.block_on(store::open(&bucket_only, &options)).map_err(open_error)?;
    let path = Path::parse(&key).with_context(|| format!("bad key {key:?}"))?;
    Ok(Remote { rt, store, path, url: url.to_owned() })
}

/// A blocking reader over an object's bytes.
pub struct ObjectReader {
    rt: tokio::runtime::Handle,
    stream: BoxStream<'static, object_store::Result<Bytes>>,
    buf: Bytes,
}

impl Remote {
    /// Starts reading the whole object; returns the reader and the object's size.
    pub fn reader(&self) -> anyhow::Result<(ObjectReader, u64)> {
        let got = self.rt.block_on(self.store.get(&self.path)).with_context(|| format!("cannot read {}", self.url))?;
        let size = got.meta.size;
        Ok((ObjectReader { rt: self.rt.handle().clone(), stream: got.into_stream(), buf: Bytes::new() }, size))
    }

    /// Starts writing the object; it appears only when `RemoteWriter::commit` succeeds.
    pub fn writer(&self) -> anyhow::Result<RemoteWriter> {
        let up = self
            .rt
            .block_on(self.store.put_multipart(&self.path))
            .with_context(|| format!("cannot write {}", self.url))?;
        Ok(RemoteWriter { rt: self.rt.handle().clone(), mp: Some(WriteMultipart::new_with_chunk_size(up, 8 << 20)) })
    }
}

impl Read for ObjectReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        while self.buf.is_empty() {
            match self.rt.block_on(self.stream.next()) {
                None => return Ok(0),
                Some(Ok(b)) => self.buf = b,
                Some(Err(e)) => return Err(io::Error::other(e)),
            }
        }
        let n = out.len().min(self.buf.len());
        out[..n].copy_from_slice(&self.buf.split_to(n));
        Ok(n)
    }
}

/// A blocking multipart writer; aborts the upload if dropped before `commit`.
pub struct RemoteWriter {
    rt: tokio::runtime::Handle,
    mp: Option<WriteMultipart>,
}

impl RemoteWriter {
    /// Completes the upload: the object appears under its key.
    pub fn commit(mut self) -> anyhow::Result<()> {
        let mp = self.mp.take().expect("committed once");
        self.rt.block_on(mp.finish()).context("cannot complete the upload")?;
        Ok(())
    }
}

impl Write for RemoteWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mp = self.mp.as_mut().expect("not committed");
        mp.write(buf);
        self.rt.block_on(mp.wait_for_capacity(4)).map_err(io::Error::other)?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for RemoteWriter {
    fn drop(&mut self) {
        if let Some(mp) = self.mp.take() {
            let _ = self.rt.block_on(mp.abort());
        }
    }
}
