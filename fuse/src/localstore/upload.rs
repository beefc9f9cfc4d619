//! Multipart uploads into one staged file: each part is written at the offset it will occupy, so
//! parts may finish in any order; `complete` moves the file into place only if every part handed
//! out finished without error.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use futures::FutureExt;
use object_store::{MultipartUpload, PutPayload, PutResult, UploadPart};

use super::root::{Root, Staged};
use super::{LocalError, Result, blocking, generic, io_error, synced};

/// A multipart upload to the key `target`.
#[derive(Debug)]
pub(super) struct LocalUpload {
    root: Arc<Root>,
    target: Arc<str>,
    /// The staged file; `None` once completed or aborted. Dropping it removes the file.
    staged: Option<Staged>,
    parts: Arc<Parts>,
    next_part: u64,
    /// Where the next part starts: the sum of the lengths of the parts handed out before it.
    next_offset: u64,
    /// Makes this part's write fail (tests of the failed-part path).
    #[cfg(test)]
    pub(super) fail_part: Option<u64>,
}

impl LocalUpload {
    /// An upload into `file`, staged as `staged`.
    pub(super) fn new(root: Arc<Root>, target: &str, file: File, staged: Staged) -> LocalUpload {
        LocalUpload {
            root,
            target: target.into(),
            staged: Some(staged),
            parts: Arc::new(Parts { file, unfinished: AtomicU64::new(0), failed: Mutex::new(None) }),
            next_part: 0,
            next_offset: 0,
            #[cfg(test)]
            fail_part: None,
        }
    }
}

/// What the parts of one upload share.
#[derive(Debug)]
struct Parts {
    file: File,
    /// Parts handed out whose write has not finished.
    unfinished: AtomicU64,
    /// Why the first part that failed did.
    failed: Mutex<Option<String>>,
}

impl Parts {
    fn fail(&self, reason: String) {
        self.failed.lock().unwrap_or_else(PoisonError::into_inner).get_or_insert(reason);
    }
}

/// One part in flight: when its future ends, however it ends, the upload knows.
struct PartGuard {
    parts: Arc<Parts>,
    index: u64,
    done: bool,
}

impl PartGuard {
    fn finish(mut self, result: Result<()>) -> Result<()> {
        if let Err(e) = &result {
            self.parts.fail(format!("part {} failed: {e}", self.index));
        }
        self.done = true;
        result
    }
}

impl Drop for PartGuard {
    fn drop(&mut self) {
        if !self.done {
            self.parts.fail(format!("part {} was dropped before it finished", self.index));
        }
        self.parts.unfinished.fetch_sub(1, Ordering::SeqCst);
    }
}

#[async_trait]
impl MultipartUpload for LocalUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        let (index, offset) = (self.next_part, self.next_offset);
        self.next_part += 1;
        self.next_offset += data.content_length() as u64;
        self.parts.unfinished.fetch_add(1, Ordering::SeqCst);
        let guard = PartGuard { parts: self.parts.clone(), index, done: false };
        let parts = self.parts.clone();
        let path = self.root.display(&self.target);
        #[cfg(test)]
        let inject = self.fail_part == Some(index);
        async move {
            let written = blocking(data.content_length() as u64, move || {
                #[cfg(test)]
                if inject {
                    return Err(io_error("write part to", &path, std::io::Error::other("injected")));
                }
                let mut at = offset;
                for chunk in data.iter() {
                    parts.file.write_all_at(chunk, at).map_err(|e| io_error("write part to", &path, e))?;
                    at += chunk.len() as u64;
                }
                Ok(())
            })
            .await;
            guard.finish(written)
        }
        .boxed()
    }

    async fn complete(&mut self) -> Result<PutResult> {
        let path = self.root.display(&self.target);
        let incomplete = |reason: String| generic(LocalError::Incomplete { path: path.clone(), reason });
        let Some(staged) = self.staged.take() else {
            return Err(incomplete("already completed or aborted".into()));
        };
        let failed = self.parts.failed.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let unfinished = self.parts.unfinished.load(Ordering::SeqCst);
        if let Some(reason) = failed.or_else(|| (unfinished > 0).then(|| format!("{unfinished} part(s) not finished")))
        {
            drop(staged);
            return Err(incomplete(reason));
        }
        let (root, parts, target, expected) =
            (self.root.clone(), self.parts.clone(), self.target.clone(), self.next_offset);
        blocking(expected, move || {
            let info = synced(&parts.file, &staged)?;
            let len = info.size;
            if len != expected {
                let reason = format!("staged {len} bytes, parts add up to {expected}");
                return Err(generic(LocalError::Incomplete { path: root.display(&target), reason }));
            }
            root.place(staged, &target, false)?;
            Ok(PutResult { e_tag: Some(info.e_tag()), version: None })
        })
        .await
    }

    async fn abort(&mut self) -> Result<()> {
        match self.staged.take() {
            Some(staged) => {
                let path = staged.display();
                blocking(0, move || staged.close().map_err(|e| io_error("remove staged file", &path, e))).await
            }
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use object_store::ObjectStore;
    use object_store::path::Path;

    use super::*;
    use crate::localstore::tests::{is_not_found, read, staged, store};

    #[tokio::test]
    async fn multipart_parts_finishing_out_of_order_reassemble_exactly() {
        let (_dir, store) = store();
        let key = Path::from("a/big");
        let parts = [vec![1u8; 3000], vec![2u8; 5000], vec![3u8; 1000], vec![4u8; 7]];
        let mut up = store.put_multipart(&key).await.unwrap();
        let writes: Vec<_> = parts.iter().map(|p| up.put_part(p.clone().into())).collect();
        // Work starts when a part is polled: the last part is written first, the first last.
        for write in writes.into_iter().rev() {
            write.await.unwrap();
        }
        let put = up.complete().await.unwrap();
        assert_eq!(read(&store, &key).await, parts.concat());
        assert_eq!(put.e_tag, store.head(&key).await.unwrap().e_tag);
        assert_eq!(staged(&store), 0);
    }

    #[tokio::test]
    async fn a_failed_part_fails_complete_and_writes_nothing() {
        let (_dir, mut store) = store();
        store.fail_part = Some(1);
        let key = Path::from("holed");
        let mut up = store.put_multipart(&key).await.unwrap();
        let (a, b, c) = (up.put_part("aaa".into()), up.put_part("bbb".into()), up.put_part("ccc".into()));
        a.await.unwrap();
        assert!(b.await.is_err());
        c.await.unwrap();
        let e = up.complete().await.unwrap_err();
        assert!(e.to_string().contains("part 1 failed"), "{e}");
        assert!(is_not_found(store.head(&key).await));
        assert_eq!(staged(&store), 0);
    }

    #[tokio::test]
    async fn a_part_not_finished_or_dropped_fails_complete() {
        let (_dir, store) = store();
        let key = Path::from("k");
        let mut up = store.put_multipart(&key).await.unwrap();
        up.put_part("a".into()).await.unwrap();
        let pending = up.put_part("b".into());
        let e = up.complete().await.unwrap_err();
        assert!(e.to_string().contains("1 part(s) not finished"), "{e}");
        drop(pending);

        let mut up = store.put_multipart(&key).await.unwrap();
        drop(up.put_part("a".into()));
        let e = up.complete().await.unwrap_err();
        assert!(e.to_string().contains("part 0 was dropped"), "{e}");
        assert!(is_not_found(store.head(&key).await));
        assert_eq!(staged(&store), 0);
    }

    #[tokio::test]
    async fn abort_and_drop_leave_no_staged_file() {
        let (_dir, store) = store();
        let key = Path::from("k");
        let mut up = store.put_multipart(&key).await.unwrap();
        up.put_part("a".into()).await.unwrap();
        assert_eq!(staged(&store), 1);
        up.abort().await.unwrap();
        assert_eq!(staged(&store), 0);
        up.abort().await.unwrap();
        assert!(up.complete().await.is_err());

        let mut up = store.put_multipart(&key).await.unwrap();
        up.put_part("a".into()).await.unwrap();
        drop(up);
        assert_eq!(staged(&store), 0);
        assert!(is_not_found(store.head(&key).await));
    }
}
