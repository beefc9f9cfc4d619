//! Opening the object store a mount or a CLI command names: a local directory, `s3://bucket/prefix`
//! or `memory://`, and checking it is reachable before anything is mounted.

use std::path::PathBuf;
use std::sync::Arc;

use futures::StreamExt;
use object_store::ObjectStore;
use object_store::aws::AmazonS3Builder;
use object_store::list::PaginatedListStore;
use object_store::memory::InMemory;
use object_store::path::Path;

use crate::localstore::{Cleanup, LocalStore};

/// Where the bucket is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A local directory standing in for a bucket.
    Local(PathBuf),
    /// An S3 (or S3-compatible) bucket and key prefix.
    S3 {
        /// Bucket name.
        bucket: String,
        /// Key prefix ("" for the whole bucket), without leading or trailing slash.
        prefix: String,
    },
    /// An in-memory store, empty at start (tests and demos).
    Memory,
}

impl Source {
    /// Parses a SOURCE argument.
    pub fn parse(s: &str) -> Result<Self, String> {
        if let Some(rest) = s.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(format!("{s:?} names no bucket (expected s3://bucket[/prefix])"));
            }
            return Ok(Source::S3 { bucket: bucket.into(), prefix: prefix.trim_matches('/').into() });
        }
        if s == "memory://" || s == "memory:" {
            return Ok(Source::Memory);
        }
        if s.contains("://") {
            return Err(format!("{s:?}: unsupported scheme (use a directory path, s3://bucket[/prefix] or memory://)"));
        }
        Ok(Source::Local(PathBuf::from(s)))
    }
}

/// How to reach an S3-compatible endpoint.
#[derive(Debug, Clone, Default)]
pub struct S3Options {
    /// Endpoint URL for S3-compatible servers (implies path-style addressing).
    pub endpoint_url: Option<String>,
    /// Region; defaults to the AWS environment/profile, then us-east-1.
    pub region: Option<String>,
    /// Allow plain http (implied by an http:// endpoint).
    pub allow_http: bool,
    /// Force path-style addressing.
    pub path_style: bool,
}

/// An opened store and the key prefix everything lives under.
#[derive(Clone)]
pub struct Bucket {
    /// The store.
    pub store: Arc<dyn ObjectStore>,
    /// Prefix of every key (empty for the whole bucket).
    pub prefix: Path,
    /// What it was opened from, for messages.
    pub describe: String,
    /// The same store's page-at-a-time listing, where it has one (S3): large directories are then
    /// listed as the reader of the directory gets to them.
    pub pages: Option<Arc<dyn PaginatedListStore>>,
    /// The local-directory store, when the bucket is one (for `cleanup`).
    pub local: Option<Arc<LocalStore>>,
}

impl std::fmt::Debug for Bucket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Bucket({}, paged listing: {})", self.describe, self.pages.is_some())
    }
}

/// Opens the store a source names. Local directories must exist.
pub fn open(source: &Source, s3: &S3Options) -> Result<Bucket, String> {
    match source {
        Source::Memory => Ok(Bucket::new(Arc::new(InMemory::new()), Path::default(), "memory://")),
        Source::Local(dir) => {
            let meta = std::fs::metadata(dir).map_err(|e| format!("bucket directory {}: {e}", dir.display()))?;
            if !meta.is_dir() {
                return Err(format!("bucket directory {} is not a directory", dir.display()));
            }
            let store = LocalStore::new(dir).map_err(|e| format!("bucket directory {}: {e}", dir.display()))?;
            let store = Arc::new(store);
            let mut bucket = Bucket::new(store.clone(), Path::default(), &dir.display().to_string());
            bucket.local = Some(store);
            Ok(bucket)
        }
        Source::S3 { bucket, prefix } => {
            let mut b = AmazonS3Builder::from_env().with_bucket_name(bucket);
            let profile = aws_profile();
            if std::env::var_os("AWS_ACCESS_KEY_ID").is_none()
                && let (Some(id), Some(secret)) = (&profile.access_key_id, &profile.secret_access_key)
            {
                b = b.with_access_key_id(id).with_secret_access_key(secret);
                if let Some(token) = &profile.session_token {
                    b = b.with_token(token);
                }
            }
            if let Some(region) = &s3.region {
                b = b.with_region(region);
            } else if std::env::var_os("AWS_REGION").is_none() && std::env::var_os("AWS_DEFAULT_REGION").is_none() {
                b = b.with_region(profile.region.as_deref().unwrap_or("us-east-1"));
            }
            if let Some(url) = &s3.endpoint_url {
                b = b.with_endpoint(url).with_virtual_hosted_style_request(false);
                if url.starts_with("http://") {
                    b = b.with_allow_http(true);
                }
            }
            if s3.allow_http {
                b = b.with_allow_http(true);
            }
            if s3.path_style {
                b = b.with_virtual_hosted_style_request(false);
            }
            let store = b.build().map_err(|e| format!("s3://{bucket}: {e}"))?;
            let prefix = Path::parse(prefix).map_err(|e| format!("prefix {prefix:?}: {e}"))?;
            let describe = format!("s3://{bucket}/{prefix}");
            let store = Arc::new(store);
            Ok(Bucket { store: store.clone(), prefix, describe, pages: Some(store), local: None })
        }
    }
}

/// Credentials and region from the AWS shared files (`~/.aws/credentials`, `~/.aws/config`, or
/// `AWS_SHARED_CREDENTIALS_FILE` / `AWS_CONFIG_FILE`), for the profile `AWS_PROFILE` (default
/// "default"). Environment variables, read by object_store itself, take precedence.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct AwsProfile {
    /// aws_access_key_id
    pub access_key_id: Option<String>,
    /// aws_secret_access_key
    pub secret_access_key: Option<String>,
    /// aws_session_token
    pub session_token: Option<String>,
    /// region
    pub region: Option<String>,
}

/// Reads the profile named by `AWS_PROFILE` from the shared files; missing files give nothing.
pub fn aws_profile() -> AwsProfile {
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_default();
    let creds =
        std::env::var_os("AWS_SHARED_CREDENTIALS_FILE").map(PathBuf::from).unwrap_or(home.join(".aws/credentials"));
    let config = std::env::var_os("AWS_CONFIG_FILE").map(PathBuf::from).unwrap_or(home.join(".aws/config"));
    let name = std::env::var("AWS_PROFILE").unwrap_or_else(|_| "default".into());
    read_profile(&creds, &config, &name)
}

/// Reads profile `name` from a credentials file and a config file (sections `[name]` and
/// `[profile name]`, as the AWS CLI writes them).
pub fn read_profile(creds: &std::path::Path, config: &std::path::Path, name: &str) -> AwsProfile {
    let get = |path: &std::path::Path, sections: &[String], key: &str| -> Option<String> {
        let ini = ini::Ini::load_from_file(path).ok()?;
        sections.iter().find_map(|s| ini.section(Some(s.as_str()))?.get(key).map(|v| v.trim().to_owned()))
    };
    let cred_sections = [name.to_owned()];
    let config_sections = [format!("profile {name}"), name.to_owned()];
    let either = |key: &str| get(creds, &cred_sections, key).or_else(|| get(config, &config_sections, key));
    AwsProfile {
        access_key_id: either("aws_access_key_id"),
        secret_access_key: either("aws_secret_access_key"),
        session_token: either("aws_session_token"),
        region: get(config, &config_sections, "region").or_else(|| get(creds, &cred_sections, "region")),
    }
}

impl Bucket {
    /// A bucket over `store` whose keys all start with `prefix`, listed without pagination.
    pub fn new(store: Arc<dyn ObjectStore>, prefix: Path, describe: &str) -> Self {
        Bucket { store, prefix, describe: describe.to_owned(), pages: None, local: None }
    }

    /// Lists one key under the prefix: fails clearly when the bucket is missing, the credentials
    /// are refused or the endpoint cannot be reached.
    pub async fn check_reachable(&self) -> Result<(), String> {
        let mut list = self.store.list(Some(&self.prefix));
        let first = tokio::time::timeout(std::time::Duration::from_secs(30), list.next()).await;
        match first {
            Err(_) => Err(format!("{}: no answer within 30 s (is the endpoint reachable?)", self.describe)),
            Ok(Some(Err(e))) => Err(format!("{}: {}", self.describe, one_line(&e.to_string()))),
            Ok(_) => Ok(()),
        }
    }

    /// Removes what interrupted writes left behind (temporary files of a local-directory bucket
    /// older than `older_than`, so another mount's writes in progress survive). S3 keeps
    /// unfinished multipart uploads itself: a bucket lifecycle rule removes those (docs/SEMANTICS.md).
    pub fn cleanup(&self, older_than: std::time::Duration) -> std::io::Result<Cleanup> {
        match &self.local {
            Some(local) => local.cleanup(older_than),
            None => Ok(Cleanup::default()),
        }
    }

    /// The full key of a path relative to the prefix.
    pub fn key(&self, rel: &str) -> Path {
        let mut parts: Vec<object_store::path::PathPart<'static>> =
            self.prefix.parts().map(|p| p.as_ref().to_owned().into()).collect();
        parts
            .extend(rel.split('/').filter(|s| !s.is_empty()).map(|s| object_store::path::PathPart::from(s.to_owned())));
        Path::from_iter(parts)
    }

    /// The path relative to the prefix of a full key.
    pub fn rel(&self, key: &Path) -> Option<String> {
        let parts: Vec<_> = key.prefix_match(&self.prefix)?.map(|p| p.as_ref().to_owned()).collect();
        Some(parts.join("/"))
    }
}

/// Squeezes a multi-line error into one line.
pub fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_parse() {
        assert_eq!(Source::parse("s3://b/p/q/").unwrap(), Source::S3 { bucket: "b".into(), prefix: "p/q".into() });
        assert_eq!(Source::parse("s3://b").unwrap(), Source::S3 { bucket: "b".into(), prefix: "".into() });
        assert_eq!(Source::parse("memory://").unwrap(), Source::Memory);
        assert_eq!(Source::parse("/data").unwrap(), Source::Local("/data".into()));
        assert!(Source::parse("s3://").is_err());
        assert!(Source::parse("gs://x").is_err());
    }

    #[test]
    fn keys_join_prefix_and_relative_path() {
        let b = Bucket::new(Arc::new(InMemory::new()), Path::from("base/dir"), "");
        assert_eq!(b.key("a/b.txt").as_ref(), "base/dir/a/b.txt");
        assert_eq!(b.rel(&Path::from("base/dir/a/b.txt")).unwrap(), "a/b.txt");
        assert!(b.rel(&Path::from("other/x")).is_none());
    }

    #[test]
    fn profiles_come_from_the_shared_files() {
        let d = tempfile::tempdir().unwrap();
        let (creds, config) = (d.path().join("credentials"), d.path().join("config"));
        std::fs::write(&creds, "[default]\naws_access_key_id = AKDEF\naws_secret_access_key = s1\n[work]\naws_access_key_id=AKWORK\naws_secret_access_key=s2\naws_session_token=t\n").unwrap();
        std::fs::write(&config, "[default]\nregion = eu-west-1\n[profile work]\nregion = ap-south-1\n").unwrap();
        let p = read_profile(&creds, &config, "work");
        assert_eq!(p.access_key_id.as_deref(), Some("AKWORK"));
        assert_eq!(p.session_token.as_deref(), Some("t"));
        assert_eq!(p.region.as_deref(), Some("ap-south-1"));
        let p = read_profile(&creds, &config, "default");
        assert_eq!((p.access_key_id.as_deref(), p.region.as_deref()), (Some("AKDEF"), Some("eu-west-1")));
        assert_eq!(read_profile(&d.path().join("none"), &d.path().join("none"), "x"), AwsProfile::default());
    }

    #[test]
    fn a_missing_local_bucket_is_a_clear_error() {
        let e = open(&Source::Local("/nonexistent/bucket".into()), &S3Options::default()).unwrap_err();
        assert!(e.contains("/nonexistent/bucket"), "{e}");
    }
}
