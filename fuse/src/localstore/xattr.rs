//! An object's user metadata (`Attribute::Metadata`), kept in extended attributes of its file.

use std::fs::File;
use std::time::SystemTime;

use object_store::{Attribute, AttributeValue, Attributes, Result};
use rustix::fs::XattrFlags;

use super::root::FileInfo;

/// The extended attributes of an object's file that hold its user metadata
/// (`Attribute::Metadata`), one per key, named with this prefix.
const META_XATTR: &str = "user.object_store.meta.";

/// The extended attribute that ties the metadata to the file's bytes: their modification time
/// (nanoseconds since the epoch) when the metadata was recorded. A program that rewrites the file
/// in place keeps its extended attributes but moves that time, and the metadata is then not
/// returned (shrinkfs reads the object's footer instead of believing a size recorded for other
/// bytes).
const WRITTEN_XATTR: &str = "user.object_store.written";

/// Refuses attributes other than user metadata: a local file has no content type or storage
/// class to keep them in.
pub(super) fn metadata_only(a: &Attributes) -> Result<()> {
    match a.iter().all(|(k, _)| matches!(k, Attribute::Metadata(_))) {
        true => Ok(()),
        false => Err(object_store::Error::NotImplemented),
    }
}

/// Keeps `a`'s user metadata in extended attributes of `file`. Metadata is what an object says of
/// itself beside its bytes, never the only copy (shrinkfs keeps it in the footer too): a
/// filesystem without user extended attributes (or full ones) keeps the object without it.
pub(super) fn write_metadata(file: &File, a: &Attributes) {
    for (k, v) in a.iter() {
        if let Attribute::Metadata(name) = k
            && let Err(e) =
                rustix::fs::fsetxattr(file, format!("{META_XATTR}{name}"), v.as_ref().as_bytes(), XattrFlags::empty())
        {
            tracing::debug!(error = %e, "object metadata not kept: no extended attributes");
            return;
        }
    }
    // Last, once the bytes are written: setting an extended attribute leaves the time as it is.
    if !a.is_empty()
        && let Ok(info) = FileInfo::of_file(file)
    {
        let _ = rustix::fs::fsetxattr(file, WRITTEN_XATTR, stamp(info.mtime).as_bytes(), XattrFlags::empty());
    }
}

/// Stamps the metadata recorded with `file`, if any, with the file's modification time now (set
/// after the metadata was recorded).
pub(super) fn restamp(file: &File) {
    let mut written = [0u8; 40];
    if rustix::fs::fgetxattr(file, WRITTEN_XATTR, &mut written[..]).is_ok()
        && let Ok(info) = FileInfo::of_file(file)
    {
        let _ = rustix::fs::fsetxattr(file, WRITTEN_XATTR, stamp(info.mtime).as_bytes(), XattrFlags::empty());
    }
}

fn stamp(mtime: SystemTime) -> String {
    mtime.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_nanos().to_string()
}

/// The user metadata kept in `file`'s extended attributes (none where the filesystem has none,
/// and none when the file's bytes, last modified at `mtime`, changed after it was recorded).
pub(super) fn read_metadata(file: &File, mtime: SystemTime) -> Attributes {
    let mut out = Attributes::new();
    let mut written = [0u8; 40];
    let stamped = rustix::fs::fgetxattr(file, WRITTEN_XATTR, &mut written[..]);
    if stamped.map_or(true, |n| written[..n] != *stamp(mtime).as_bytes()) {
        return out;
    }
    let mut names = vec![0u8; 4096];
    let Ok(n) = rustix::fs::flistxattr(file, &mut names[..]) else { return out };
    for name in names[..n].split(|&b| b == 0).filter_map(|n| std::str::from_utf8(n).ok()) {
        let Some(key) = name.strip_prefix(META_XATTR) else { continue };
        let mut value = vec![0u8; 4096];
        if let Ok(len) = rustix::fs::fgetxattr(file, name, &mut value[..])
            && let Ok(v) = String::from_utf8(value[..len].to_vec())
        {
            out.insert(Attribute::Metadata(key.to_owned().into()), AttributeValue::from(v));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::fs::File;
    use std::os::unix::fs::FileExt;

    use object_store::path::Path;
    use object_store::{GetOptions, GetRange, ObjectStore, PutOptions};

    use super::*;
    use crate::localstore::tests::store;

    #[tokio::test]
    async fn user_metadata_is_kept_in_extended_attributes_and_other_attributes_refused() {
        let (dir, store) = store();
        let probe = File::create(dir.path().join("probe")).unwrap();
        if let Err(e) = rustix::fs::fsetxattr(&probe, "user.probe", b"1", XattrFlags::empty()) {
            println!("SKIPPED: {} has no user extended attributes ({e})", dir.path().display());
            return;
        }
        let key = Path::from("m/eta");
        let mut a = Attributes::new();
        a.insert(Attribute::Metadata("shrinkfs".into()), "v1 size=3 stored=3".into());
        let opts = PutOptions { attributes: a.clone(), ..Default::default() };
        store.put_opts(&key, "abc".into(), opts).await.unwrap();
        let head = GetOptions { head: true, ..Default::default() };
        assert_eq!(store.get_opts(&key, head.clone()).await.unwrap().attributes, a, "a HEAD returns them");
        assert_eq!(store.get_opts(&key, GetOptions::default()).await.unwrap().attributes, a, "and a whole GET");
        let ranged = GetOptions { range: Some(GetRange::Suffix(2)), ..Default::default() };
        let got = store.get_opts(&key, ranged).await.unwrap();
        assert!(got.attributes.is_empty(), "a ranged GET brings the bytes alone");
        assert_eq!(got.bytes().await.unwrap(), "bc");
        // An object written in place carries them too.
        let mut ip = store.write_in_place(&Path::from("m/ip")).unwrap();
        ip.file().write_all_at(b"xyz", 0).unwrap();
        ip.record(&a);
        ip.publish().unwrap();
        assert_eq!(store.get_opts(&Path::from("m/ip"), head.clone()).await.unwrap().attributes, a);
        // A rename (copy, then delete) keeps them: the copy is a hard link.
        store.copy(&key, &Path::from("m/copy")).await.unwrap();
        assert_eq!(store.get_opts(&Path::from("m/copy"), head.clone()).await.unwrap().attributes, a);
        // Bytes rewritten in place by another program (the attributes stay with the inode) at
        // another time: the metadata no longer describes them and is not returned.
        let path = dir.path().join("m/eta");
        std::fs::OpenOptions::new().write(true).open(&path).unwrap().write_all_at(b"xyz", 0).unwrap();
        let old = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
        File::options().write(true).open(&path).unwrap().set_modified(old).unwrap();
        assert!(store.get_opts(&key, head.clone()).await.unwrap().attributes.is_empty(), "stale metadata");
        store.put_opts(&key, "abc".into(), PutOptions { attributes: a.clone(), ..Default::default() }).await.unwrap();
        assert_eq!(store.get_opts(&key, head.clone()).await.unwrap().attributes, a, "written again");
        let mut other = Attributes::new();
        other.insert(Attribute::ContentType, "text/plain".into());
        let opts = PutOptions { attributes: other, ..Default::default() };
        assert!(matches!(store.put_opts(&key, "abc".into(), opts).await, Err(object_store::Error::NotImplemented)));
    }
}
