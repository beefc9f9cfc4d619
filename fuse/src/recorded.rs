//! The attributes an object records beside its bytes, as store metadata (S3 user metadata
//! `x-amz-meta-shrinkfs`, an extended attribute of a local-directory bucket's file, an
//! in-memory entry's attributes): logical size, stored size, mode, owner, time, device number
//! and codec, so a HEAD tells what the footer would. The footer stays the source of truth: a
//! record is used only when its stored size is the object's own, and objects without one (older
//! versions, other tools, multipart uploads, sealed mounts) are read through their footer.

use object_store::{Attribute, AttributeValue, Attributes};
use shrinkfs_codec::FileMeta;

/// The metadata key of the record (`x-amz-meta-shrinkfs` on S3).
pub const KEY: &str = "shrinkfs";

/// The record's format version, its first word.
const VERSION: &str = "v1";

/// What an object records of itself beside its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    /// Logical (decoded) size.
    pub size: u64,
    /// Bytes stored: the object's own size, which a record must match to be believed.
    pub stored: u64,
    /// Mode, owner and time, as in the object's index.
    pub meta: FileMeta,
    /// Device number of a device node (its data), 0 otherwise.
    pub rdev: u32,
    /// Codec summary ("zstd", "zstd+none").
    pub codec: String,
}

impl Recorded {
    /// The record of an object of `stored` bytes just written with `layout` (a file's).
    pub fn of(layout: &shrinkfs_codec::Layout, stored: u64) -> Recorded {
        let names: Vec<String> = layout.codec_usage().iter().map(|u| u.0.to_string()).collect();
        Recorded { size: layout.logical_size(), stored, meta: layout.meta, rdev: 0, codec: names.join("+") }
    }

    /// The record as one ASCII value: `v1 size=… stored=… rdev=… mode=… uid=… gid=… mtime=S.NS
    /// ctime=S.NS atime=S.NS codec=…`
    /// (fields without a value are left out).
    pub fn encode(&self) -> String {
        let m = &self.meta;
        let mut s = format!("{VERSION} size={} stored={} rdev={}", self.size, self.stored, self.rdev);
        if let Some(mode) = m.mode {
            s += &format!(" mode={mode}");
        }
        if let Some(uid) = m.uid {
            s += &format!(" uid={uid}");
        }
        if let Some(gid) = m.gid {
            s += &format!(" gid={gid}");
        }
        for (name, t) in [("mtime", m.mtime), ("ctime", m.ctime), ("atime", m.atime)] {
            if let Some((sec, ns)) = t {
                s += &format!(" {name}={sec}.{ns:09}");
            }
        }
        if !self.codec.is_empty() && self.codec.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'+') {
            s += &format!(" codec={}", self.codec);
        }
        s
    }

    /// Parses a record; `None` for anything that is not a whole `v1` record (another version, a
    /// value some other tool wrote).
    pub fn decode(s: &str) -> Option<Recorded> {
        let mut words = s.split(' ');
        if words.next()? != VERSION {
            return None;
        }
        let (mut size, mut stored, mut rdev) = (None, None, 0);
        let (mut meta, mut codec) = (FileMeta::default(), String::new());
        for w in words {
            let (k, v) = w.split_once('=')?;
            match k {
                "size" => size = Some(v.parse().ok()?),
                "stored" => stored = Some(v.parse().ok()?),
                "rdev" => rdev = v.parse().ok()?,
                "mode" => meta.mode = Some(v.parse().ok()?),
                "uid" => meta.uid = Some(v.parse().ok()?),
                "gid" => meta.gid = Some(v.parse().ok()?),
                "mtime" => meta.mtime = Some(time(v)?),
                "ctime" => meta.ctime = Some(time(v)?),
                "atime" => meta.atime = Some(time(v)?),
                "codec" => codec = v.to_owned(),
                _ => {} // A field a later version added.
            }
        }
        Some(Recorded { size: size?, stored: stored?, meta, rdev, codec })
    }

    /// The attributes a PUT carries to record this.
    pub fn attributes(&self) -> Attributes {
        let mut a = Attributes::new();
        a.insert(Attribute::Metadata(KEY.into()), AttributeValue::from(self.encode()));
        a
    }

    /// The record among an object's attributes (a HEAD's or a GET's), if it holds a valid one
    /// for an object of `stored` bytes.
    pub fn from_attributes(a: &Attributes, stored: u64) -> Option<Recorded> {
        let v = a.get(&Attribute::Metadata(KEY.into()))?;
        Recorded::decode(v.as_ref()).filter(|r| r.stored == stored)
    }
}

/// A recorded time, `SECONDS.NANOSECONDS` (nine digits).
fn time(v: &str) -> Option<(i64, u32)> {
    let (sec, ns) = v.split_once('.')?;
    let ns: u32 = ns.parse().ok()?;
    (ns < 1_000_000_000).then_some(())?;
    Some((sec.parse().ok()?, ns))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_roundtrip_and_foreign_values_are_refused() {
        let r = Recorded {
            size: 1 << 40,
            stored: 1234,
            meta: FileMeta {
                mode: Some(0o100640),
                uid: Some(1000),
                gid: None,
                mtime: Some((-5, 999_999_999)),
                ctime: Some((1_700_000_000, 1)),
                atime: None,
            },
            rdev: 7,
            codec: "zstd+none".into(),
        };
        assert_eq!(Recorded::decode(&r.encode()), Some(r.clone()));
        assert_eq!(Recorded::from_attributes(&r.attributes(), 1234), Some(r.clone()));
        assert_eq!(Recorded::from_attributes(&r.attributes(), 1235), None, "another object's record");
        for bad in
            ["", "v2 size=1 stored=1", "v1 size=1", "v1 size=x stored=1", "v1 size=1 stored=1 mtime=1.1000000000"]
        {
            assert_eq!(Recorded::decode(bad), None, "{bad:?}");
        }
        let later = Recorded::decode("v1 size=3 stored=4 rdev=0 colour=blue").unwrap();
        assert_eq!((later.size, later.stored), (3, 4));
    }
}
