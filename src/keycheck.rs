//! The key check before a mount: a few objects of the bucket are sampled, so that a missing or
//! different `--key-file` is refused instead of mounting a sealed bucket and writing new files
//! with another key (or none) beside the old ones.

use futures::StreamExt;
use object_store::ObjectMeta;
use shrinkfs_codec::reader::SUGGESTED_TAIL;
use shrinkfs_codec::{Error as CodecError, Layout, MasterKey, TailProbe, probe_tail};
use shrinkfs_fuse::Error as FsError;
use shrinkfs_fuse::fs::DIR_MARKER;
use shrinkfs_fuse::store::Bucket;

/// Most objects read (one tail each) before mounting.
pub const SAMPLE: usize = 8;

/// Most keys listed while looking for objects to sample, so a bucket full of directory markers
/// and plain files does not hold the mount up.
const MAX_LISTED: usize = 1000;

/// Directory of uploads in progress: their objects are not files of the bucket.
const TMP_DIR: &str = ".shrinkfs-tmp";

/// The mount's key does not fit the bucket (exit code 4).
#[derive(Debug, thiserror::Error)]
pub enum KeyMismatch {
    /// A sampled object is sealed and the mount has no key.
    #[error("bucket holds sealed objects (e.g. {0}); pass --key-file (or --skip-key-check)")]
    KeyRequired(String),
    /// A sampled object is sealed with a different key.
    #[error("--key-file does not match the key of {0} (or pass --skip-key-check)")]
    WrongKey(String),
    /// No object could be sampled: the listing met a key that cannot be named.
    #[error(
        "cannot check the key: the bucket's listing holds a key shrinkfs cannot name ({0}), and no file beside it could be sampled; pass --skip-key-check to mount anyway"
    )]
    Unchecked(String),
}

/// What the sample showed, when the key fits.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct KeyCheck {
    /// Sealed objects the key opened.
    pub sealed: usize,
    /// shrinkfs objects that are not sealed.
    pub unsealed: usize,
    /// Objects that are not shrinkfs objects (plain bytes) or could not be parsed.
    pub other: usize,
    /// Something to log: a key given for a bucket whose sampled objects are all unsealed (plain
    /// files or unsealed shrinkfs objects).
    pub warning: Option<String>,
}

/// Samples up to [`SAMPLE`] objects under the bucket's prefix (directory markers and uploads in
/// progress left out) and checks `key` against the sealed ones. A store error fails the check;
/// a damaged object is counted in `other` and left to the reads that meet it.
///
/// A key object_store cannot name (another tool's `a//b`, `./`, a control character) ends a
/// listing with an error (on S3 with its whole page): the check then samples the bucket's top
/// directories one listing each, and refuses to pass having sampled nothing (exit 4, naming the
/// key: `--skip-key-check` mounts anyway), since a sealed bucket would otherwise mount without
/// its key.
pub async fn check_key(bucket: &Bucket, key: Option<&MasterKey>) -> anyhow::Result<KeyCheck> {
    let mut s = Sampling { key, check: KeyCheck::default(), sampled: 0, first_unsealed: None };
    let mut listed = 0;
    let mut unnamed = None;
    let mut list = bucket.store.list(None);
    while let Some(meta) = list.next().await {
        listed += 1;
        let meta = match meta {
            Err(object_store::Error::InvalidPath { source }) => {
                tracing::warn!(error = %source, "key check: the bucket holds a key shrinkfs cannot name; it is passed over");
                unnamed.get_or_insert(source.to_string());
                continue;
            }
            m => m.map_err(|e| anyhow::anyhow!("{}: cannot list: {e}", bucket.describe))?,
        };
        if listed > MAX_LISTED || s.sampled >= SAMPLE {
            break;
        }
        s.judge(bucket, &meta).await?;
    }
    if s.sampled == 0
        && let Some(why) = unnamed
    {
        // The listing ended at that key: the top directories, one listing each.
        let top = bucket.store.list_with_delimiter(None).await;
        let mut objects = top.as_ref().map(|t| t.objects.clone()).unwrap_or_default();
        for p in top.map(|t| t.common_prefixes).unwrap_or_default().iter().take(32) {
            if objects.len() >= MAX_LISTED {
                break;
            }
            objects.extend(bucket.store.list_with_delimiter(Some(p)).await.map(|l| l.objects).unwrap_or_default());
        }
        for meta in &objects {
            if s.sampled >= SAMPLE {
                break;
            }
            s.judge(bucket, meta).await?;
        }
        if s.sampled == 0 {
            return Err(KeyMismatch::Unchecked(why).into());
        }
    }
    let Sampling { mut check, first_unsealed, .. } = s;
    // (Plain files, which another program wrote, are not sealed either.)
    if key.is_some() && check.sealed == 0 && check.unsealed + check.other > 0 {
        check.warning = Some(format!(
            "--key-file given but the bucket's objects are not sealed (e.g. {}); new files will be sealed; the unsealed ones are refused (EACCES) unless --allow-unsealed",
            first_unsealed.unwrap_or_default()
        ));
    }
    tracing::debug!(sealed = check.sealed, unsealed = check.unsealed, other = check.other, "key check");
    Ok(check)
}

/// What the sample has shown so far.
struct Sampling<'k> {
    key: Option<&'k MasterKey>,
    check: KeyCheck,
    sampled: usize,
    first_unsealed: Option<String>,
}

impl Sampling<'_> {
    /// Reads `meta`'s tail, if it is a file worth sampling, and judges the key by it.
    async fn judge(&mut self, bucket: &Bucket, meta: &ObjectMeta) -> anyhow::Result<()> {
        if !sampleable(meta) {
            return Ok(());
        }
        let name = meta.location.to_string();
        let layout = match examine(bucket, meta).await {
            // Gone since the listing, or a key the listing names without its trailing `/`
            // (another tool's folder object that holds bytes): not a file to judge the key by.
            Err(FsError::NotFound | FsError::Store(object_store::Error::NotFound { .. })) => {
                tracing::debug!(object = %name, "key check: a listed object cannot be read by its name; passed over");
                return Ok(());
            }
            r => r.map_err(|e| anyhow::anyhow!("cannot read {}: {e}", meta.location))?,
        };
        self.sampled += 1;
        match layout {
            None => {
                self.check.other += 1;
                self.first_unsealed.get_or_insert(name);
            }
            Some(layout) if !layout.header.sealed() => {
                self.check.unsealed += 1;
                self.first_unsealed.get_or_insert(name);
            }
            Some(layout) => {
                let Some(key) = self.key else { return Err(KeyMismatch::KeyRequired(name).into()) };
                match layout.open(Some(key), &[]) {
                    Err(CodecError::WrongKey) => return Err(KeyMismatch::WrongKey(name).into()),
                    // The key check passed; the object needs a dictionary or is damaged, which
                    // is for reads to report.
                    Ok(_) | Err(_) => self.check.sealed += 1,
                }
            }
        }
        Ok(())
    }
}

/// Whether an object of a listing is a file worth sampling.
fn sampleable(meta: &ObjectMeta) -> bool {
    meta.size > 0
        && meta.location.filename() != Some(DIR_MARKER)
        && !meta.location.parts().any(|p| p.as_ref() == TMP_DIR)
}

/// Reads an object's tail: its layout, or `None` for plain bytes and objects whose tail does not
/// parse.
async fn examine(bucket: &Bucket, meta: &ObjectMeta) -> Result<Option<Layout>, FsError> {
    let len = meta.size;
    let read = |range: std::ops::Range<u64>| async move {
        // As the mount reads (through the store stack, which serves quirky servers too).
        shrinkfs_fuse::objects::get_range(bucket.store.as_ref(), &meta.location, range, len, None).await
    };
    let mut tail = read(len.saturating_sub(SUGGESTED_TAIL)..len).await?;
    let need = match probe_tail(&tail, len) {
        Ok(TailProbe::Shrinkfs { tail_len, .. }) => tail_len,
        Ok(TailProbe::Plain) | Err(_) => return Ok(None),
    };
    if need > tail.len() as u64 {
        tail = read(len - need.min(len)..len).await?;
    }
    Ok(Layout::parse(&tail, len).ok())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use object_store::memory::InMemory;
    use object_store::path::Path;
    use object_store::{ObjectStore, PutPayload};
    use shrinkfs_codec::{EncodeConfig, encode_all};

    use super::*;

    fn key(b: u8) -> MasterKey {
        MasterKey::from_bytes(&[b; 32]).unwrap()
    }

    fn object(key: Option<MasterKey>) -> Vec<u8> {
        let cfg = EncodeConfig { frame_size: 4096, key, ..Default::default() };
        encode_all(&cfg, &vec![7u8; 10_000]).unwrap()
    }

    /// A bucket under prefix `p` holding `objects` (key, bytes), plus a directory marker and an
    /// upload in progress that the check must skip.
    fn bucket(objects: &[(&str, Vec<u8>)]) -> Bucket {
        let store = Arc::new(InMemory::new());
        let rt = runtime();
        rt.block_on(async {
            for (k, v) in objects {
                store.put(&Path::from(format!("p/{k}")), PutPayload::from(v.clone())).await.unwrap();
            }
            store.put(&Path::from(format!("p/d/{DIR_MARKER}")), PutPayload::new()).await.unwrap();
            store.put(&Path::from("p/.shrinkfs-tmp/x"), PutPayload::from(b"partial".to_vec())).await.unwrap();
        });
        Bucket::new(store, Path::from("p"), "memory://")
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap()
    }

    fn check(b: &Bucket, k: Option<MasterKey>) -> anyhow::Result<KeyCheck> {
        runtime().block_on(check_key(b, k.as_ref()))
    }

    fn sealed_bucket() -> Bucket {
        bucket(&[("a.log", object(Some(key(0xA)))), ("d/b.log", object(Some(key(0xA)))), ("plain.txt", b"hi".to_vec())])
    }

    /// A bucket whose listing, as an S3 server gives it, holds a key object_store cannot name
    /// (`a//b`) and one it names without its trailing `/`, so a read of it finds nothing.
    #[derive(Debug)]
    struct OddKeys(Arc<InMemory>, bool);

    impl std::fmt::Display for OddKeys {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("odd keys")
        }
    }

    #[async_trait::async_trait]
    impl ObjectStore for OddKeys {
        async fn put_opts(
            &self,
            location: &Path,
            payload: PutPayload,
            opts: object_store::PutOptions,
        ) -> object_store::Result<object_store::PutResult> {
            self.0.put_opts(location, payload, opts).await
        }
        async fn put_multipart_opts(
            &self,
            location: &Path,
            opts: object_store::PutMultipartOptions,
        ) -> object_store::Result<Box<dyn object_store::MultipartUpload>> {
            self.0.put_multipart_opts(location, opts).await
        }
        async fn get_opts(
            &self,
            location: &Path,
            options: object_store::GetOptions,
        ) -> object_store::Result<object_store::GetResult> {
            self.0.get_opts(location, options).await
        }
        async fn delete(&self, location: &Path) -> object_store::Result<()> {
            self.0.delete(location).await
        }
        fn list(&self, prefix: Option<&Path>) -> futures::stream::BoxStream<'static, object_store::Result<ObjectMeta>> {
            let invalid = object_store::path::Path::parse("p/a//b").unwrap_err();
            let folder = ObjectMeta {
                location: Path::from("p/folder"),
                last_modified: Default::default(),
                size: 5,
                e_tag: None,
                version: None,
            };
            // (After the real objects: a listing that meets an error may end there, as
            // object_store's paged S3 listing does.)
            let odd = futures::stream::iter([Ok(folder), Err(object_store::Error::InvalidPath { source: invalid })]);
            match self.1 {
                // As S3 gives it: the page holding the key fails whole, and the listing ends.
                true => odd.boxed(),
                false => self.0.list(prefix).chain(odd).boxed(),
            }
        }
        async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<object_store::ListResult> {
            self.0.list_with_delimiter(prefix).await
        }
        async fn copy(&self, from: &Path, to: &Path) -> object_store::Result<()> {
            self.0.copy(from, to).await
        }
        async fn copy_if_not_exists(&self, from: &Path, to: &Path) -> object_store::Result<()> {
            self.0.copy_if_not_exists(from, to).await
        }
    }

    /// Found by a black-box probe: one such key among the first 1,000 kept the whole bucket from
    /// mounting; now the check passes them over and judges the key by the others.
    #[test]
    fn keys_the_store_cannot_name_or_read_are_passed_over() {
        let inner = Arc::new(InMemory::new());
        runtime().block_on(async {
            inner.put(&Path::from("p/a.log"), PutPayload::from(object(Some(key(0xA))))).await.unwrap();
        });
        let b = Bucket::new(Arc::new(OddKeys(inner.clone(), false)), Path::from("p"), "odd://");
        let c = check(&b, Some(key(0xA))).unwrap();
        assert_eq!((c.sealed, c.unsealed, c.other), (1, 0, 0), "{c:?}");
        let e = check(&b, Some(key(0xB))).unwrap_err();
        assert!(matches!(e.downcast_ref::<KeyMismatch>(), Some(KeyMismatch::WrongKey(_))), "{e}");
        // The listing's first page failing whole, its other objects lost with it (S3): the store
        // answered, so it is reachable, and the key is judged by the top directories' objects.
        let b = Bucket::new(Arc::new(OddKeys(inner, true)), Path::from("p"), "odd://");
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        rt.block_on(b.check_reachable(std::time::Duration::from_secs(5))).unwrap();
        assert_eq!(check(&b, Some(key(0xA))).unwrap().sealed, 1);
        let e = check(&b, None).unwrap_err();
        assert!(matches!(e.downcast_ref::<KeyMismatch>(), Some(KeyMismatch::KeyRequired(_))), "{e}");
        // Nothing found to sample: refused, never passed unchecked.
        let b = Bucket::new(Arc::new(OddKeys(Arc::new(InMemory::new()), true)), Path::from("p"), "odd://");
        let e = check(&b, None).unwrap_err();
        assert!(matches!(e.downcast_ref::<KeyMismatch>(), Some(KeyMismatch::Unchecked(_))), "{e}");
        assert!(e.to_string().contains("--skip-key-check"), "{e}");
        assert_eq!(crate::exit::code_for(&e), crate::exit::CORRUPT);
    }

    #[test]
    fn a_sealed_bucket_without_a_key_is_refused() {
        let e = check(&sealed_bucket(), None).unwrap_err();
        let m = e.downcast_ref::<KeyMismatch>().expect("a key mismatch");
        // Keys are named as the mount shows them: relative to the bucket's prefix.
        assert!(matches!(m, KeyMismatch::KeyRequired(k) if k == "a.log" || k == "d/b.log"), "{m}");
        assert!(e.to_string().contains("pass --key-file"), "{e}");
        assert_eq!(crate::exit::code_for(&e), crate::exit::CORRUPT);
    }

    #[test]
    fn a_sealed_bucket_with_another_key_is_refused() {
        let e = check(&sealed_bucket(), Some(key(0xB))).unwrap_err();
        assert!(matches!(e.downcast_ref::<KeyMismatch>(), Some(KeyMismatch::WrongKey(_))), "{e}");
        assert!(e.to_string().contains("--key-file does not match the key of a.log"), "{e}");
        assert_eq!(crate::exit::code_for(&e), crate::exit::CORRUPT);
    }

    #[test]
    fn a_sealed_bucket_with_its_key_mounts() {
        let c = check(&sealed_bucket(), Some(key(0xA))).unwrap();
        assert_eq!((c.sealed, c.unsealed, c.other, c.warning), (2, 0, 1, None));
    }

    #[test]
    fn an_unsealed_bucket_with_a_key_mounts_with_a_warning() {
        let b = bucket(&[("a.log", object(None)), ("b.log", object(None))]);
        let c = check(&b, Some(key(0xA))).unwrap();
        assert_eq!((c.sealed, c.unsealed), (0, 2));
        assert!(c.warning.as_deref().is_some_and(|w| w.contains("not sealed") && w.contains("(e.g. a.log)")), "{c:?}");
        let c = check(&b, None).unwrap();
        assert_eq!((c.unsealed, c.warning), (2, None));
        // Plain files another program wrote are not sealed either.
        let b = bucket(&[("notes.txt", b"plain".to_vec())]);
        let c = check(&b, Some(key(0xA))).unwrap();
        assert_eq!((c.sealed, c.other), (0, 1));
        assert!(c.warning.as_deref().is_some_and(|w| w.contains("(e.g. notes.txt)")), "{c:?}");
        assert_eq!(check(&b, None).unwrap().warning, None);
    }

    #[test]
    fn an_empty_bucket_mounts_with_or_without_a_key() {
        let b = bucket(&[]);
        assert_eq!(check(&b, None).unwrap(), KeyCheck::default());
        assert_eq!(check(&b, Some(key(0xA))).unwrap(), KeyCheck::default());
    }

    #[test]
    fn large_indexes_and_many_objects_are_sampled_correctly() {
        // An index larger than the first tail read, and more objects than the sample: the wrong
        // key is still found among the first ones.
        let cfg = EncodeConfig { frame_size: 4096, key: Some(key(0xA)), ..Default::default() };
        let big = encode_all(&cfg, &vec![1u8; 4096 * 3000]).unwrap();
        let mut objects: Vec<(String, Vec<u8>)> = vec![("0-big".into(), big)];
        objects.extend((1..20).map(|i| (format!("{i:02}"), object(Some(key(0xA))))));
        let refs: Vec<(&str, Vec<u8>)> = objects.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
        let b = bucket(&refs);
        assert_eq!(check(&b, Some(key(0xA))).unwrap().sealed, SAMPLE);
        assert!(check(&b, Some(key(0xB))).is_err());
    }
}
