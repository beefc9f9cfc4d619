//! Moving objects to new keys for renames (a copy, then a delete of the old key) without deleting
//! a version that another mount or tool stored at the old key after the copy was made.

use object_store::path::Path;

use super::Fs;
use crate::error::Result;

/// Copies a move makes of an object that keeps changing under it before it leaves the newest
/// version at the old key too.
const MOVE_TRIES: usize = 3;

/// Whether two ETags name one version: servers differ in quoting them (rclone lists them bare
/// and quotes them in a HEAD's answer).
pub(crate) fn same_etag(a: Option<&str>, b: Option<&str>) -> bool {
    a.map(|e| e.trim_matches('"')) == b.map(|e| e.trim_matches('"'))
}

impl Fs {
    /// Moves the object at `from` to `to`, whose version at `from` was last seen as ETag `seen`
    /// (None: asked first).
    pub(super) async fn move_object(&self, from: &Path, to: &Path, seen: Option<String>) -> Result<()> {
        let seen = match seen {
            Some(e) => Some(e),
            None => self.bucket.store.head(from).await?.e_tag,
        };
        self.bucket.store.copy(from, to).await?;
        self.finish_move(from, to, seen).await
    }

    /// Ends a move whose copy at `to` was made while `from` held the version with ETag `copied`
    /// (as seen before the copy): deletes `from` if it still holds that version (a HEAD says). A
    /// version stored there meanwhile is copied in its turn and checked again, so it follows the
    /// move instead of being deleted; one that keeps changing is left at `from` too, whole, and
    /// said in the log. Only a version stored between the last HEAD and the DELETE, one request's
    /// time, is deleted unseen (a DELETE takes no condition through object_store). An object
    /// gone meanwhile (removed elsewhere) needs no delete.
    pub(super) async fn finish_move(&self, from: &Path, to: &Path, mut copied: Option<String>) -> Result<()> {
        let store = &self.bucket.store;
        for _ in 0..MOVE_TRIES {
            let now = match store.head(from).await {
                Ok(meta) => meta.e_tag,
                Err(object_store::Error::NotFound { .. }) => return Ok(()),
                Err(e) => return Err(e.into()),
            };
            if same_etag(copied.as_deref(), now.as_deref()) {
                store.delete(from).await?;
                return Ok(());
            }
            tracing::debug!(from = %from, to = %to, "stored anew under its old key while it moved: copied again");
            store.copy(from, to).await?;
            copied = now;
        }
        tracing::warn!(
            from = %from,
            to = %to,
            "another writer kept storing it under its old key while it moved: its newest version is left there too"
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::same_etag;

    #[test]
    fn etags_compare_with_or_without_quotes() {
        assert!(same_etag(Some("\"abc\""), Some("abc")));
        assert!(same_etag(Some("abc"), Some("abc")));
        assert!(!same_etag(Some("abc"), Some("abd")));
        assert!(!same_etag(None, Some("abc")));
        assert!(same_etag(None, None));
    }
}
