//! The conformance suite every store of the stack passes, each layer alone and the whole stack,
//! over memory, a local directory and S3 (`rclone serve s3` in the binary's tests): what the
//! filesystem core relies on, and nothing else. Panics with the failed check; call it from a test.

use std::sync::Arc;

use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectStore, PutPayload};

/// Checks `store` under the empty key `base` (it must hold nothing there).
pub async fn run(store: Arc<dyn ObjectStore>, base: &str) {
    let key = |k: &str| -> Path { if base.is_empty() { Path::from(k) } else { Path::from(format!("{base}/{k}")) } };
    let (a, b) = (key("d/a"), key("d/b"));
    let not_found = |r: object_store::Result<_>| matches!(r, Err(object_store::Error::NotFound { .. }));

    // Absent objects are NotFound, for every kind of read.
    assert!(not_found(store.head(&a).await.map(|_| ())), "head of a missing object");
    assert!(not_found(store.get(&a).await.map(|_| ())), "get of a missing object");
    let suffix = GetOptions { range: Some(GetRange::Suffix(16)), ..Default::default() };
    assert!(not_found(store.get_opts(&a, suffix.clone()).await.map(|_| ())), "suffix get of a missing object");

    // Writes and every kind of read.
    let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
    store.put(&a, data.clone().into()).await.unwrap();
    assert_eq!(store.get(&a).await.unwrap().bytes().await.unwrap(), data, "whole get");
    assert_eq!(store.head(&a).await.unwrap().size, data.len() as u64);
    assert_eq!(store.get_range(&a, 10..20_000).await.unwrap(), data[10..20_000], "ranged get");
    let got = store.get_opts(&a, suffix).await.unwrap();
    assert_eq!(got.range, 99_984..100_000, "a suffix's range");
    assert_eq!(got.bytes().await.unwrap(), data[99_984..], "suffix get");
    let long = GetOptions { range: Some(GetRange::Suffix(1 << 20)), ..Default::default() };
    assert_eq!(store.get_opts(&a, long).await.unwrap().bytes().await.unwrap(), data, "a suffix past the start");
    let etag = store.head(&a).await.unwrap().e_tag;
    if let Some(etag) = etag {
        let pinned = GetOptions { if_match: Some(etag), range: Some(GetRange::Bounded(0..4)), ..Default::default() };
        assert_eq!(store.get_opts(&a, pinned).await.unwrap().bytes().await.unwrap(), data[..4], "if-match");
    }

    // (Conditional creates are not checked: the core makes none, and S3-compatible servers differ.)
    store.put(&b, "new".into()).await.unwrap();

    // Listings: flat and by directory.
    store.put(&key("d/sub/c"), PutPayload::from_static(b"c")).await.unwrap();
    let under = key("d");
    let mut all: Vec<_> = store.list(Some(&under)).map_ok(|o| o.location).try_collect().await.unwrap();
    all.sort();
    assert_eq!(all, [a.clone(), b.clone(), key("d/sub/c")], "flat listing");
    let dir = store.list_with_delimiter(Some(&under)).await.unwrap();
    assert_eq!(dir.common_prefixes, [key("d/sub")], "directories of a listing");
    let mut files: Vec<_> = dir.objects.into_iter().map(|o| o.location).collect();
    files.sort();
    assert_eq!(files, [a.clone(), b.clone()], "files of a listing");

    // Copies and deletes.
    store.copy(&a, &key("e/a")).await.unwrap();
    assert_eq!(store.get(&key("e/a")).await.unwrap().bytes().await.unwrap(), data, "copy");
    store.delete(&key("e/a")).await.unwrap();
    assert!(not_found(store.head(&key("e/a")).await.map(|_| ())), "deleted");

    // A multipart upload: its parts in order.
    let mut up = store.put_multipart(&key("m")).await.unwrap();
    let part = vec![b'p'; 5 << 20];
    up.put_part(part.clone().into()).await.unwrap();
    up.put_part(PutPayload::from_static(b"tail")).await.unwrap();
    up.complete().await.unwrap();
    let got = store.get(&key("m")).await.unwrap().bytes().await.unwrap();
    assert!(got.len() == part.len() + 4 && got.ends_with(b"ptail"), "multipart object");

    for k in [a, b, key("d/sub/c"), key("m")] {
        store.delete(&k).await.unwrap();
    }
    let left: Vec<_> = store.list(Some(&under)).try_collect().await.unwrap();
    assert!(left.is_empty(), "everything deleted: {left:?}");
}

#[cfg(test)]
mod tests {
    use object_store::memory::InMemory;

    use super::*;
    use crate::metrics::Metrics;
    use crate::store::fault::FaultStore;
    use crate::store::{Backend, StoreConfig, compat, instrument, limit, prefix, retry};

    fn mem() -> Backend {
        let m = Arc::new(InMemory::new());
        Backend { store: m.clone(), pages: None, multipart: Some(m) }
    }

    #[tokio::test]
    async fn every_layer_alone_passes() {
        let m = Metrics::new();
        let s = || m.store().clone();
        let layers: Vec<Backend> = vec![
            mem(),
            mem().wrap(instrument::Instrumented::new(mem(), s())),
            mem().wrap(retry::Retry::new(mem(), StoreConfig::default().retry, s())),
            mem().wrap(limit::Limit::new(mem(), 2, s())),
            mem().wrap(compat::Compat::new(mem())),
            mem().wrap(prefix::Prefixed::new(mem(), Path::from("pre/fix"))),
            FaultStore::layer(mem(), Arc::default()),
        ];
        for b in layers {
            run(b.store.clone(), "").await;
        }
    }

    #[tokio::test]
    async fn the_whole_stack_passes_over_memory_and_a_local_directory() {
        let cfg = StoreConfig::default();
        let m = Metrics::new();
        run(mem().stack(&Path::from("p"), &cfg, &m).store, "").await;
        let dir = tempfile::tempdir().unwrap();
        let local = Arc::new(crate::localstore::LocalStore::new(dir.path()).unwrap());
        run(Backend::plain(local).stack(&Path::from("p/q"), &cfg, &m).store, "base").await;
        // Three puts in each run, each counted once.
        assert_eq!(m.value("shrinkfs_store_request_duration_seconds_count{kind=\"put\",outcome=\"ok\"}"), 6);
        assert!(m.value("shrinkfs_store_request_duration_seconds_count{kind=\"head\",outcome=\"expected\"}") >= 4);
    }
}
