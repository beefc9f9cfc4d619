//! The key prefix of a bucket (`s3://bucket/prefix`): object_store's `PrefixStore` for the store
//! itself, and the same joining and stripping for the paged listing and multipart extensions,
//! which `PrefixStore` does not carry.

use std::sync::Arc;

use async_trait::async_trait;
use futures::stream::BoxStream;
use object_store::list::{PaginatedListOptions, PaginatedListResult, PaginatedListStore};
use object_store::multipart::{MultipartStore, PartId};
use object_store::path::Path;
use object_store::prefix::PrefixStore;
use object_store::{
    GetOptions, GetResult, ListResult, MultipartId, MultipartUpload, ObjectMeta, ObjectStore, PutMultipartOptions,
    PutOptions, PutPayload, PutResult, Result,
};

use super::Backend;

/// Keys relative to `prefix` above, full keys below.
#[derive(Debug)]
pub struct Prefixed {
    inner: Backend,
    prefix: Path,
    store: PrefixStore<Arc<dyn ObjectStore>>,
}

impl Prefixed {
    /// The layer over `inner`, every key under `prefix`.
    pub fn new(inner: Backend, prefix: Path) -> Self {
        let store = PrefixStore::new(inner.store.clone(), prefix.clone());
        Prefixed { inner, prefix, store }
    }

    fn full(&self, path: &Path) -> Path {
        self.prefix.parts().chain(path.parts()).collect()
    }

    fn strip(&self, path: Path) -> Result<Path> {
        match path.prefix_match(&self.prefix) {
            Some(rest) => Ok(rest.collect()),
            None => Err(object_store::Error::Generic {
                store: "prefix",
                source: format!("{path} is outside the prefix {}", self.prefix).into(),
            }),
        }
    }
}

impl std::fmt::Display for Prefixed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Prefixed({}, {})", self.prefix, self.inner.store)
    }
}

#[async_trait]
impl ObjectStore for Prefixed {
    async fn put_opts(&self, location: &Path, payload: PutPayload, opts: PutOptions) -> Result<PutResult> {
        self.store.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(&self, location: &Path, opts: PutMultipartOptions) -> Result<Box<dyn MultipartUpload>> {
        self.store.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.store.get_opts(location, options).await
    }

    async fn head(&self, location: &Path) -> Result<ObjectMeta> {
        self.store.head(location).await
    }

    async fn delete(&self, location: &Path) -> Result<()> {
        self.store.delete(location).await
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.store.list(prefix)
    }

    fn list_with_offset(&self, prefix: Option<&Path>, offset: &Path) -> BoxStream<'static, Result<ObjectMeta>> {
        self.store.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.store.list_with_delimiter(prefix).await
    }

    async fn copy(&self, from: &Path, to: &Path) -> Result<()> {
        self.store.copy(from, to).await
    }

    async fn copy_if_not_exists(&self, from: &Path, to: &Path) -> Result<()> {
        self.store.copy_if_not_exists(from, to).await
    }
}

#[async_trait]
impl PaginatedListStore for Prefixed {
    async fn list_paginated(
        &self,
        prefix: Option<&str>,
        mut opts: PaginatedListOptions,
    ) -> Result<PaginatedListResult> {
        // Paged listing takes raw strings: "dir/" lists below dir, "" everything.
        let full = format!("{}/{}", self.prefix, prefix.unwrap_or_default());
        opts.offset = opts.offset.map(|o| format!("{}/{o}", self.prefix));
        let mut got = self.inner.paged()?.list_paginated(Some(&full), opts).await?;
        let objects = std::mem::take(&mut got.result.objects);
        got.result.objects = objects
            .into_iter()
            .map(|mut o| {
                o.location = self.strip(o.location)?;
                Ok(o)
            })
            .collect::<Result<_>>()?;
        let prefixes = std::mem::take(&mut got.result.common_prefixes);
        got.result.common_prefixes = prefixes.into_iter().map(|p| self.strip(p)).collect::<Result<_>>()?;
        Ok(got)
    }
}

#[async_trait]
impl MultipartStore for Prefixed {
    async fn create_multipart(&self, path: &Path) -> Result<MultipartId> {
        self.inner.parts()?.create_multipart(&self.full(path)).await
    }

    async fn put_part(&self, path: &Path, id: &MultipartId, part_idx: usize, data: PutPayload) -> Result<PartId> {
        self.inner.parts()?.put_part(&self.full(path), id, part_idx, data).await
    }

    async fn complete_multipart(&self, path: &Path, id: &MultipartId, parts: Vec<PartId>) -> Result<PutResult> {
        self.inner.parts()?.complete_multipart(&self.full(path), id, parts).await
    }

    async fn abort_multipart(&self, path: &Path, id: &MultipartId) -> Result<()> {
        self.inner.parts()?.abort_multipart(&self.full(path), id).await
    }
}
