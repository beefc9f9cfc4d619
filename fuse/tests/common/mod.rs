//! Helpers the core's integration tests share.

#![allow(dead_code)]

/// `n` bytes, different for each seed: every `random_every`-th byte random, the others cycling
/// through `text`, so they compress a little.
pub fn data(n: usize, seed: u64, random_every: usize, text: &[u8]) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if i % random_every == 0 { (x >> 56) as u8 } else { text[i % text.len()] }
        })
        .collect()
}

/// The entries of directory `dir` of `fs`, with their sizes, as `readdirplus` gives them one
/// batch at a time ("." and ".." and hidden names left out).
pub async fn entries(fs: &shrinkfs_fuse::Fs, dir: u64) -> Vec<(String, u64)> {
    let fh = fs.opendir(dir).await.unwrap();
    let mut out = Vec::new();
    let mut offset = 0;
    loop {
        let got = fs.readdirplus(fh, dir, offset).await.unwrap();
        let Some(last) = got.last() else { break };
        offset = last.0;
        out.extend(got.into_iter().map(|(_, e, a, _)| (e.name, a.size)).filter(|(n, _)| !n.starts_with('.')));
    }
    fs.releasedir(fh);
    out
}

/// An in-memory store that also lists a page at a time, as S3 does (start-after, a delimiter, a
/// continuation token), never more than `cap` entries a page whatever is asked: a test's stand-in
/// for S3's paged listing, with pages small enough to need several.
#[derive(Debug)]
pub struct PagedMemory {
    /// The objects.
    pub store: std::sync::Arc<object_store::memory::InMemory>,
    /// Most entries (objects and common prefixes) one page holds.
    pub cap: usize,
}

#[async_trait::async_trait]
impl object_store::list::PaginatedListStore for PagedMemory {
    async fn list_paginated(
        &self,
        prefix: Option<&str>,
        opts: object_store::list::PaginatedListOptions,
    ) -> object_store::Result<object_store::list::PaginatedListResult> {
        use futures::TryStreamExt;
        use object_store::ObjectStore;
        let prefix = prefix.unwrap_or("");
        let mut all: Vec<object_store::ObjectMeta> = self.store.list(None).try_collect().await?;
        all.retain(|o| o.location.as_ref().starts_with(prefix));
        all.sort_by(|a, b| a.location.as_ref().cmp(b.location.as_ref()));
        let after = opts.page_token.or(opts.offset).unwrap_or_default();
        let max = opts.max_keys.unwrap_or(1000).min(self.cap);
        let mut result = object_store::ListResult { common_prefixes: Vec::new(), objects: Vec::new() };
        let mut last = None::<String>;
        let mut taken = 0;
        for o in all {
            let key = o.location.as_ref().to_owned();
            // Past the token: a key, or a common prefix ending in the delimiter.
            if !after.is_empty() && (key <= after || (after.ends_with('/') && key.starts_with(&after))) {
                continue;
            }
            let group = opts
                .delimiter
                .as_deref()
                .and_then(|d| key[prefix.len()..].find(d).map(|i| key[..prefix.len() + i + d.len()].to_owned()));
            if let Some(g) = &group
                && last.as_deref() == Some(g.as_str())
            {
                continue;
            }
            if taken == max {
                return Ok(object_store::list::PaginatedListResult { result, page_token: last });
            }
            taken += 1;
            match group {
                Some(g) => {
                    result.common_prefixes.push(object_store::path::Path::from(g.trim_end_matches('/')));
                    last = Some(g);
                }
                None => {
                    result.objects.push(o);
                    last = Some(key);
                }
            }
        }
        Ok(object_store::list::PaginatedListResult { result, page_token: None })
    }
}

/// Multipart uploads into an in-memory store whose parts may arrive in any order: object_store's
/// own `InMemory` uploads panic on a part that arrives two or more places ahead of the others
/// (which retries after an outage make happen).
#[derive(Debug)]
pub struct MemoryParts {
    /// The objects.
    pub store: std::sync::Arc<object_store::memory::InMemory>,
    uploads: std::sync::Mutex<std::collections::HashMap<String, Vec<Option<bytes::Bytes>>>>,
    next: std::sync::atomic::AtomicU64,
}

impl MemoryParts {
    /// Uploads into `store`.
    pub fn new(store: std::sync::Arc<object_store::memory::InMemory>) -> Self {
        MemoryParts { store, uploads: Default::default(), next: Default::default() }
    }
}

#[async_trait::async_trait]
impl object_store::multipart::MultipartStore for MemoryParts {
    async fn create_multipart(&self, _path: &object_store::path::Path) -> object_store::Result<String> {
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed).to_string();
        self.uploads.lock().unwrap().insert(id.clone(), Vec::new());
        Ok(id)
    }

    async fn put_part(
        &self,
        _path: &object_store::path::Path,
        id: &String,
        part_idx: usize,
        data: object_store::PutPayload,
    ) -> object_store::Result<object_store::multipart::PartId> {
        let mut uploads = self.uploads.lock().unwrap();
        let parts = uploads
            .get_mut(id)
            .ok_or_else(|| object_store::Error::NotFound { path: id.clone(), source: "no such upload".into() })?;
        if parts.len() <= part_idx {
            parts.resize(part_idx + 1, None);
        }
        parts[part_idx] = Some(bytes::Bytes::from(data));
        Ok(object_store::multipart::PartId { content_id: part_idx.to_string() })
    }

    async fn complete_multipart(
        &self,
        path: &object_store::path::Path,
        id: &String,
        parts: Vec<object_store::multipart::PartId>,
    ) -> object_store::Result<object_store::PutResult> {
        // (An upload completed or aborted is gone, as S3 answers NoSuchUpload.)
        let held = self
            .uploads
            .lock()
            .unwrap()
            .remove(id)
            .ok_or_else(|| object_store::Error::NotFound { path: id.clone(), source: "no such upload".into() })?;
        let mut whole = Vec::new();
        for p in &parts {
            let idx: usize = p.content_id.parse().unwrap_or(usize::MAX);
            let part = held.get(idx).cloned().flatten().ok_or_else(|| object_store::Error::Generic {
                store: "MemoryParts",
                source: format!("part {idx} missing").into(),
            })?;
            whole.extend_from_slice(&part);
        }
        object_store::ObjectStore::put(self.store.as_ref(), path, whole.into()).await
    }

    async fn abort_multipart(&self, _path: &object_store::path::Path, id: &String) -> object_store::Result<()> {
        self.uploads.lock().unwrap().remove(id);
        Ok(())
    }
}
