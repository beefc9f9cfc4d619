//! Multipart uploads the bucket itself remembers: on stores that keep unfinished uploads (S3), each
//! one is announced by a small marker object under `.shrinkfs-tmp/uploads/` naming its key and
//! upload id, removed when the upload completes or is aborted. A mount killed mid-write leaves its
//! marker behind, so any later cleanup, on any host, can abort the upload (which S3 would otherwise
//! keep, invisible and billed, forever). A marker is written again as its upload takes parts
//! (every `MARKER_REFRESH` at most), so a cleanup tells a long upload still in progress from one
//! a crash left.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use futures::TryStreamExt;
use object_store::multipart::{MultipartStore, PartId};
use object_store::path::Path;
use object_store::{MultipartId, MultipartUpload, ObjectStore, PutPayload, PutResult, UploadPart};

use crate::localstore::TMP_DIR;

/// Where markers live, below the bucket's prefix.
pub const MARKERS: &str = "uploads";

/// How often at most an upload taking parts writes its marker again: well under the hour a mount's
/// cleanup waits before it takes an upload for a crash's leftover.
pub const MARKER_REFRESH: Duration = Duration::from_secs(600);

/// The marker folder of a bucket whose keys start with `prefix`.
pub fn marker_dir(prefix: &Path) -> Path {
    prefix.child(TMP_DIR).child(MARKERS)
}

/// Starts a multipart upload of `path` and records it under `markers`.
pub async fn start(
    store: Arc<dyn ObjectStore>,
    multipart: Arc<dyn MultipartStore>,
    markers: &Path,
    path: &Path,
) -> object_store::Result<Box<dyn MultipartUpload>> {
    start_refreshing(store, multipart, markers, path, MARKER_REFRESH).await
}

async fn start_refreshing(
    store: Arc<dyn ObjectStore>,
    multipart: Arc<dyn MultipartStore>,
    markers: &Path,
    path: &Path,
    refresh: Duration,
) -> object_store::Result<Box<dyn MultipartUpload>> {
    let id = multipart.create_multipart(path).await?;
    let marker = markers.child(format!("{:016x}{:016x}", rand::random::<u64>(), rand::random::<u64>()));
    if let Err(e) = store.put(&marker, marker_body(path, &id)).await {
        let _ = multipart.abort_multipart(path, &id).await;
        return Err(e);
    }
    let marked = Arc::new(Mutex::new(Instant::now()));
    Ok(Box::new(Tracked { store, multipart, path: path.clone(), id, marker, marked, refresh, parts: Arc::default() }))
}

fn marker_body(path: &Path, id: &MultipartId) -> PutPayload {
    PutPayload::from(format!("{path}\n{id}\n"))
}

/// One multipart upload with its marker.
struct Tracked {
    store: Arc<dyn ObjectStore>,
    multipart: Arc<dyn MultipartStore>,
    path: Path,
    id: MultipartId,
    marker: Path,
    /// When the marker was last written.
    marked: Arc<Mutex<Instant>>,
    /// How often at most it is written again while parts come.
    refresh: Duration,
    /// Each part's id once the store took it, in part order.
    parts: Arc<Mutex<Vec<Option<PartId>>>>,
}

impl std::fmt::Debug for Tracked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tracked({}, {})", self.path, self.marker)
    }
}

#[async_trait::async_trait]
impl MultipartUpload for Tracked {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        let idx = {
            let mut parts = self.parts.lock().expect("parts lock");
            parts.push(None);
            parts.len() - 1
        };
        let (mp, path, id, parts) = (self.multipart.clone(), self.path.clone(), self.id.clone(), self.parts.clone());
        let remark = {
            let mut marked = self.marked.lock().expect("marker lock");
            let due = marked.elapsed() >= self.refresh;
            if due {
                *marked = Instant::now();
            }
            due.then(|| (self.store.clone(), self.marker.clone()))
        };
        Box::pin(async move {
            if let Some((store, marker)) = remark {
                // Best effort: a marker not renewed only lets a later cleanup take the upload
                // for a leftover, and the writer then uploads the file again.
                if let Err(e) = store.put(&marker, marker_body(&path, &id)).await {
                    tracing::debug!(key = %path, error = %e, "upload marker not renewed");
                }
            }
            let part = mp.put_part(&path, &id, idx, data).await?;
            parts.lock().expect("parts lock")[idx] = Some(part);
            Ok(())
        })
    }

    async fn complete(&mut self) -> object_store::Result<PutResult> {
        let parts: Option<Vec<PartId>> = self.parts.lock().expect("parts lock").iter().cloned().collect();
        let Some(parts) = parts else {
            return Err(object_store::Error::Generic {
                store: "shrinkfs",
                source: format!("{}: a part is missing; the upload cannot complete", self.path).into(),
            });
        };
        let done = self.multipart.complete_multipart(&self.path, &self.id, parts).await;
        // Done, or the upload is gone (completed by a try whose answer was lost, or aborted):
        // either way its marker has nothing left to announce.
        if matches!(&done, Ok(_) | Err(object_store::Error::NotFound { .. })) {
            let _ = self.store.delete(&self.marker).await;
        }
        done
    }

    async fn abort(&mut self) -> object_store::Result<()> {
        self.multipart.abort_multipart(&self.path, &self.id).await?;
        let _ = self.store.delete(&self.marker).await;
        Ok(())
    }
}

/// What [`abort_stale`] did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Stale {
    /// Uploads aborted (their markers removed, as are those of uploads the store no longer has).
    pub aborted: u64,
    /// Uploads the store refused to abort: their markers stay, for a later cleanup.
    pub refused: u64,
    /// The first refused upload's key and the store's reason.
    pub first_refusal: Option<(String, String)>,
}

/// Aborts the uploads whose markers under `markers` are older than `older_than`, and removes the
/// markers of those aborted or already gone (completed, aborted, forgotten by the store). A
/// marker whose abort the store refuses (a permission missing, an outage) stays, so the upload is
/// not left without a name to find it by.
pub async fn abort_stale(
    store: &dyn ObjectStore,
    multipart: &dyn MultipartStore,
    markers: &Path,
    older_than: Duration,
) -> object_store::Result<Stale> {
    let now = SystemTime::now();
    let listed: Vec<_> = store.list(Some(markers)).try_collect().await?;
    let mut done = Stale::default();
    for meta in listed {
        let age = now.duration_since(meta.last_modified.into()).unwrap_or_default();
        if age < older_than {
            continue;
        }
        let body = store.get(&meta.location).await?.bytes().await?;
        let text = String::from_utf8_lossy(&body);
        let mut lines = text.lines();
        // The key as it was written (`Path::from` would encode its `~`, `#`, `%`…).
        if let (Some(Ok(key)), Some(id)) = (lines.next().map(Path::parse), lines.next()) {
            match multipart.abort_multipart(&key, &id.to_owned()).await {
                Ok(()) => done.aborted += 1,
                // Already completed or aborted, or a server that forgot it: nothing to do.
                Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => {
                    tracing::warn!(%key, error = %e, "the store refused to abort an interrupted upload; its marker stays");
                    done.refused += 1;
                    done.first_refusal.get_or_insert_with(|| (key.to_string(), e.to_string()));
                    continue;
                }
            }
        }
        store.delete(&meta.location).await?;
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;

    #[tokio::test]
    async fn markers_come_and_go_with_their_uploads_and_stale_ones_are_aborted() {
        let mem = Arc::new(InMemory::new());
        let markers = marker_dir(&Path::from("pre"));
        let count = || async { mem.list(Some(&markers)).try_collect::<Vec<_>>().await.unwrap().len() };
        // Completed: object there, marker gone.
        let mut up = start(mem.clone(), mem.clone(), &markers, &Path::from("pre/a")).await.unwrap();
        assert_eq!(count().await, 1);
        up.put_part(PutPayload::from_static(b"hello ")).await.unwrap();
        up.put_part(PutPayload::from_static(b"world")).await.unwrap();
        up.complete().await.unwrap();
        assert_eq!(count().await, 0);
        let got = mem.get(&Path::from("pre/a")).await.unwrap().bytes().await.unwrap();
        assert_eq!(&got[..], b"hello world");
        // Aborted: marker gone.
        let mut up = start(mem.clone(), mem.clone(), &markers, &Path::from("pre/b")).await.unwrap();
        up.abort().await.unwrap();
        assert_eq!(count().await, 0);
        // A crash: the marker stays until a cleanup old enough removes it.
        let up = start(mem.clone(), mem.clone(), &markers, &Path::from("pre/c")).await.unwrap();
        drop(up);
        assert_eq!(
            abort_stale(mem.as_ref(), mem.as_ref(), &markers, Duration::from_secs(3600)).await.unwrap().aborted,
            0
        );
        assert_eq!(count().await, 1, "a young marker may be another mount's upload in progress");
        assert_eq!(abort_stale(mem.as_ref(), mem.as_ref(), &markers, Duration::ZERO).await.unwrap().aborted, 1);
        assert_eq!(count().await, 0);
        assert!(mem.head(&Path::from("pre/c")).await.is_err(), "nothing published");
    }

    /// An upload that keeps taking parts renews its marker, so a cleanup that takes markers of
    /// its age for leftovers leaves it alone; one that stopped does not.
    #[tokio::test]
    async fn a_long_upload_in_progress_is_never_taken_for_a_leftover() {
        let mem = Arc::new(InMemory::new());
        let markers = marker_dir(&Path::default());
        let every = Duration::from_millis(50);
        let (busy_key, idle_key) = (Path::from("busy"), Path::from("idle"));
        let mut busy = start_refreshing(mem.clone(), mem.clone(), &markers, &busy_key, every).await.unwrap();
        let mut idle = start_refreshing(mem.clone(), mem.clone(), &markers, &idle_key, every).await.unwrap();
        busy.put_part(PutPayload::from_static(b"1")).await.unwrap();
        idle.put_part(PutPayload::from_static(b"1")).await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        busy.put_part(PutPayload::from_static(b"2")).await.unwrap();
        assert_eq!(
            abort_stale(mem.as_ref(), mem.as_ref(), &markers, Duration::from_millis(200)).await.unwrap().aborted,
            1
        );
        busy.complete().await.unwrap();
        assert_eq!(&mem.get(&Path::from("busy")).await.unwrap().bytes().await.unwrap()[..], b"12");
        assert!(idle.complete().await.is_err(), "the idle one was aborted");
    }

    /// A store that refuses aborts (a permission missing; s3rver answers 405): the marker stays,
    /// and the refusal is counted and named. Found by a black-box probe.
    #[tokio::test]
    async fn a_refused_abort_keeps_its_marker_and_is_reported() {
        #[derive(Debug)]
        struct Refusing(Arc<InMemory>);
        #[async_trait::async_trait]
        impl MultipartStore for Refusing {
            async fn create_multipart(&self, path: &Path) -> object_store::Result<MultipartId> {
                self.0.create_multipart(path).await
            }
            async fn put_part(
                &self,
                path: &Path,
                id: &MultipartId,
                part_idx: usize,
                data: PutPayload,
            ) -> object_store::Result<PartId> {
                self.0.put_part(path, id, part_idx, data).await
            }
            async fn complete_multipart(
                &self,
                path: &Path,
                id: &MultipartId,
                parts: Vec<PartId>,
            ) -> object_store::Result<PutResult> {
                self.0.complete_multipart(path, id, parts).await
            }
            async fn abort_multipart(&self, _: &Path, _: &MultipartId) -> object_store::Result<()> {
                Err(object_store::Error::Generic { store: "refusing", source: "405 Method Not Allowed".into() })
            }
        }
        let mem = Arc::new(InMemory::new());
        let refusing = Arc::new(Refusing(mem.clone()));
        let markers = marker_dir(&Path::default());
        drop(start(mem.clone(), refusing.clone(), &markers, &Path::from("k1")).await.unwrap());
        let count = || async { mem.list(Some(&markers)).try_collect::<Vec<_>>().await.unwrap().len() };
        let done = abort_stale(mem.as_ref(), refusing.as_ref(), &markers, Duration::ZERO).await.unwrap();
        assert_eq!((done.aborted, done.refused), (0, 1));
        let (key, reason) = done.first_refusal.unwrap();
        assert!(key == "k1" && reason.contains("405"), "{key}: {reason}");
        assert_eq!(count().await, 1, "the marker stays for the next cleanup");
        assert_eq!(abort_stale(mem.as_ref(), mem.as_ref(), &markers, Duration::ZERO).await.unwrap().aborted, 1);
        assert_eq!(count().await, 0);
    }

    #[tokio::test]
    async fn an_upload_with_a_missing_part_never_completes() {
        let mem = Arc::new(InMemory::new());
        let markers = marker_dir(&Path::default());
        let mut up = start(mem.clone(), mem.clone(), &markers, &Path::from("x")).await.unwrap();
        // A part whose upload never ran (its future dropped): complete refuses.
        drop(up.put_part(PutPayload::from_static(b"aaa")));
        assert!(up.complete().await.is_err());
        assert!(mem.head(&Path::from("x")).await.is_err());
    }
}
