//! `StorageClassStore`: an object store wrapper that writes every object with one storage class
//! (S3's `x-amz-storage-class`), whole-object PUTs and multipart uploads alike; reads, listings
//! and deletes pass through untouched.
//!
//! object_store carries a storage class only as an attribute of `put_opts` and
//! `put_multipart_opts`: `MultipartStore::create_multipart` and `copy` take none, so a bucket
//! opened with a class starts its uploads through this store (see `Bucket::tracks_uploads`), and
//! an object copied by a rename gets the bucket's default class (docs/SEMANTICS.md).

use std::ops::Range;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    Attribute, AttributeValue, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
};

/// Writes every object through `inner` with the storage class `class`.
#[derive(Debug)]
pub struct StorageClassStore {
    inner: Arc<dyn ObjectStore>,
    class: AttributeValue,
}

impl StorageClassStore {
    /// A store over `inner` that gives each object it writes the storage class `class`.
    pub fn new(inner: Arc<dyn ObjectStore>, class: &str) -> Self {
        StorageClassStore { inner, class: AttributeValue::from(class.to_owned()) }
    }
}

impl std::fmt::Display for StorageClassStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StorageClassStore({}, {})", self.class.as_ref(), self.inner)
    }
}

#[async_trait]
impl ObjectStore for StorageClassStore {
    async fn put_opts(&self, location: &Path, payload: PutPayload, mut opts: PutOptions) -> Result<PutResult> {
        opts.attributes.insert(Attribute::StorageClass, self.class.clone());
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        mut opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        opts.attributes.insert(Attribute::StorageClass, self.class.clone());
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    async fn get_range(&self, location: &Path, range: Range<u64>) -> Result<Bytes> {
        self.inner.get_range(location, range).await
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        self.inner.get_ranges(location, ranges).await
    }

    async fn head(&self, location: &Path) -> Result<ObjectMeta> {
        self.inner.head(location).await
    }

    async fn delete(&self, location: &Path) -> Result<()> {
        self.inner.delete(location).await
    }

    fn delete_stream<'a>(&'a self, locations: BoxStream<'a, Result<Path>>) -> BoxStream<'a, Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    fn list_with_offset(&self, prefix: Option<&Path>, offset: &Path) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy(&self, from: &Path, to: &Path) -> Result<()> {
        self.inner.copy(from, to).await
    }

    async fn copy_if_not_exists(&self, from: &Path, to: &Path) -> Result<()> {
        self.inner.copy_if_not_exists(from, to).await
    }
}

#[cfg(test)]
mod tests {
    use object_store::memory::InMemory;

    use super::*;

    #[tokio::test]
    async fn every_write_carries_the_class_and_reads_pass_through() {
        let mem = Arc::new(InMemory::new());
        let store = StorageClassStore::new(mem.clone(), "STANDARD_IA");
        store.put(&Path::from("a"), "one".into()).await.unwrap();
        let mut up = store.put_multipart(&Path::from("b")).await.unwrap();
        up.put_part("two".into()).await.unwrap();
        up.complete().await.unwrap();
        for key in ["a", "b"] {
            let got = mem.get(&Path::from(key)).await.unwrap();
            assert_eq!(got.attributes.get(&Attribute::StorageClass).map(|v| v.as_ref()), Some("STANDARD_IA"), "{key}");
        }
        assert_eq!(store.get(&Path::from("b")).await.unwrap().bytes().await.unwrap().as_ref(), b"two");
        assert_eq!(store.head(&Path::from("a")).await.unwrap().size, 3);
        store.delete(&Path::from("a")).await.unwrap();
        assert!(store.head(&Path::from("a")).await.is_err());
    }
}
