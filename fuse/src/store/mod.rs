//! The store stack: opening the object store a mount or a CLI command names (a local directory,
//! `s3://bucket/prefix` or `memory://`) and wrapping it in one layer per concern, each an
//! `ObjectStore` that forwards the paged-listing and multipart extensions where the backend has
//! them (see [`Backend`]). From the caller down:
//!
//! `behind` (a mount's deletes done behind its unlinks, where it asks for them) → `instrument`
//! (requests, outcomes, bytes, latency) → `retry` (passing failures, per [`StoreConfig`]) →
//! `limit` (requests in flight) → `compat` (S3 servers' quirks) → `prefix` (the key prefix) → the
//! backend (S3 with `s3`'s options, a local directory, memory; `fault` in tests).

pub mod behind;
pub mod class;
pub mod compat;
pub mod config;
pub mod fault;
pub mod instrument;
pub mod limit;
pub mod prefix;
pub mod retry;
pub mod s3;
pub mod suite;

use std::path::PathBuf;
use std::sync::Arc;

use futures::StreamExt;
use object_store::ObjectStore;
use object_store::list::PaginatedListStore;
use object_store::memory::InMemory;
use object_store::multipart::MultipartStore;
use object_store::path::{Path, PathPart};

pub use config::{DEFAULT_MAX_REQUESTS, RetryPolicy, StoreConfig};
pub use s3::{CustomerKey, CustomerKeyError, Encryption, EndpointError, S3Options, check_endpoint_url, client_options};

use crate::credentials::{self, CredentialsError};
use crate::localstore::{Cleanup, LocalStore};
use crate::metrics::Metrics;
use class::StorageClassStore;

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
    pub fn parse(s: &str) -> Result<Self, SourceError> {
        if let Some(rest) = s.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(SourceError::NoBucket(s.to_owned()));
            }
            return Ok(Source::S3 { bucket: bucket.into(), prefix: prefix.trim_matches('/').into() });
        }
        if s == "memory://" || s == "memory:" {
            return Ok(Source::Memory);
        }
        if s.contains("://") {
            return Err(SourceError::Scheme(s.to_owned()));
        }
        Ok(Source::Local(PathBuf::from(s)))
    }
}

/// Why a SOURCE argument names no store.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    /// `s3://` without a bucket name.
    #[error("{0:?} names no bucket (expected s3://bucket[/prefix])")]
    NoBucket(String),
    /// A URL of a scheme other than `s3://` and `memory://`.
    #[error("{0:?}: unsupported scheme (use a directory path, s3://bucket[/prefix] or memory://)")]
    Scheme(String),
}

/// A store and the extensions some backends have: S3 lists a page at a time and keeps
/// unfinished multipart uploads that can be aborted by id. Each layer of the stack serves the
/// extensions of the layer below it, and no others.
#[derive(Clone)]
pub struct Backend {
    /// The store.
    pub store: Arc<dyn ObjectStore>,
    /// Its page-at-a-time listing, where it has one.
    pub pages: Option<Arc<dyn PaginatedListStore>>,
    /// Its multipart API, where unfinished uploads outlive a crash.
    pub multipart: Option<Arc<dyn MultipartStore>>,
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Backend({}, pages: {}, multipart: {})", self.store, self.pages.is_some(), self.multipart.is_some())
    }
}

impl Backend {
    /// A store without extensions.
    pub fn plain(store: Arc<dyn ObjectStore>) -> Self {
        Backend { store, pages: None, multipart: None }
    }

    /// The stack with `layer` on top of `self`: it serves the extensions `self` has.
    pub fn wrap<L: ObjectStore + PaginatedListStore + MultipartStore>(&self, layer: L) -> Backend {
        let layer = Arc::new(layer);
        Backend {
            store: layer.clone(),
            pages: self.pages.is_some().then(|| layer.clone() as Arc<dyn PaginatedListStore>),
            multipart: self.multipart.is_some().then_some(layer as Arc<dyn MultipartStore>),
        }
    }

    /// The paged listing, for a layer forwarding it (`NotImplemented` where there is none).
    pub(crate) fn paged(&self) -> object_store::Result<&dyn PaginatedListStore> {
        self.pages.as_deref().ok_or(object_store::Error::NotImplemented)
    }

    /// The multipart API, for a layer forwarding it (`NotImplemented` where there is none).
    pub(crate) fn parts(&self) -> object_store::Result<&dyn MultipartStore> {
        self.multipart.as_deref().ok_or(object_store::Error::NotImplemented)
    }

    /// The whole stack over `self` (the backend), from the bottom up.
    pub fn stack(self, prefix: &Path, cfg: &StoreConfig, metrics: &Metrics) -> Backend {
        let mut b = self;
        if prefix.parts().next().is_some() {
            b = b.wrap(prefix::Prefixed::new(b.clone(), prefix.clone()));
        }
        let b = b.wrap(compat::Compat::new(b.clone()));
        let b = b.wrap(limit::Limit::new(b.clone(), cfg.max_requests, metrics.store().clone()));
        let b = b.wrap(retry::Retry::new(b.clone(), cfg.retry, metrics.store().clone()));
        b.wrap(instrument::Instrumented::new(b.clone(), metrics.store().clone()))
    }
}

/// An opened store: the top of its stack, and what is known of the bucket under it.
#[derive(Clone)]
pub struct Bucket {
    /// The store; keys are relative to the bucket's prefix.
    pub store: Arc<dyn ObjectStore>,
    /// What it was opened from, for messages.
    pub describe: String,
    /// The same store's page-at-a-time listing, where it has one (S3): large directories are then
    /// listed as the reader of the directory gets to them.
    pub pages: Option<Arc<dyn PaginatedListStore>>,
    /// The local-directory store, when the bucket is one (for `cleanup`).
    pub local: Option<Arc<LocalStore>>,
    /// The same store's multipart API, where unfinished uploads outlive a crash (S3): uploads are
    /// then announced by markers in the bucket (`uploads`), so a cleanup can abort them.
    pub multipart: Option<Arc<dyn MultipartStore>>,
    /// Whether new multipart uploads start through `multipart` (announced by markers). False where
    /// they must carry what that API cannot (a storage class): they then start through `store`,
    /// and one a crash interrupts is left to the bucket's lifecycle rule, not to `cleanup`.
    pub tracks_uploads: bool,
    /// Longest key the store takes, in bytes, prefix included: S3's 1,024; for a local directory
    /// 65,535, whatever the directory's own path (its store reaches keys longer than `PATH_MAX`
    /// through directories opened on the way).
    pub max_key_len: usize,
    /// Bytes of the prefix every key has in the backend, with its slash (0 without a prefix).
    pub prefix_len: usize,
    /// The metrics the stack records into (the mount's registry).
    pub metrics: Arc<Metrics>,
    /// How long a request is tried again (`--retry-timeout`; zero: never).
    pub retry_timeout: std::time::Duration,
}

/// Longest S3 object key, in bytes.
pub const S3_MAX_KEY_LEN: usize = 1024;

/// Longest key of a local-directory bucket, in bytes (a bound of this mount's, not the host's).
pub const LOCAL_MAX_KEY_LEN: usize = 65_535;

/// Why a bucket could not be opened or reached. The binary prints the chain of sources, so a
/// message does not repeat its source's text.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// No source gave AWS credentials.
    #[error(transparent)]
    Credentials(#[from] CredentialsError),
    /// A local bucket directory that cannot be read.
    #[error("bucket directory {}", .dir.display())]
    LocalDir {
        /// The directory.
        dir: PathBuf,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
    /// A local bucket path that is not a directory.
    #[error("bucket directory {} is not a directory", .0.display())]
    NotADirectory(PathBuf),
    /// A local bucket directory a read-write mount cannot write to.
    #[error("bucket directory {} cannot be written (mount it with --read-only)", .dir.display())]
    NotWritable {
        /// The directory.
        dir: PathBuf,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
    /// The local-directory store could not open (its staging directory, say).
    #[error("bucket directory {}", .dir.display())]
    LocalStore {
        /// The directory.
        dir: PathBuf,
        /// What the store said.
        #[source]
        source: object_store::Error,
    },
    /// The S3 endpoint given is not a URL object_store can use.
    #[error("{setting} {url:?}")]
    Endpoint {
        /// Where it was given (`--endpoint-url`, `AWS_ENDPOINT`).
        setting: &'static str,
        /// What was given.
        url: String,
        /// What is wrong with it.
        #[source]
        source: s3::EndpointError,
    },
    /// object_store refused the S3 settings.
    #[error("s3://{bucket}")]
    Build {
        /// The bucket.
        bucket: String,
        /// object_store's reason.
        #[source]
        source: object_store::Error,
    },
    /// The key prefix is not a valid object path.
    #[error("prefix {prefix:?}")]
    Prefix {
        /// The prefix.
        prefix: String,
        /// Why it is not a path.
        #[source]
        source: object_store::path::Error,
    },
    /// object_store does not know a server-side encryption setting (a library upgrade renamed it).
    #[error("server-side encryption setting {name:?} unknown to object_store")]
    EncryptionSetting {
        /// The setting's name.
        name: &'static str,
        /// object_store's refusal.
        #[source]
        source: object_store::Error,
    },
    /// The first request got no answer in time, or none but failures it tried again.
    #[error("{describe}: {}", no_answer(.after, .last.as_deref()))]
    NoAnswer {
        /// The bucket.
        describe: String,
        /// How long it waited.
        after: std::time::Duration,
        /// Why the last of its tries failed, where one failed (refused, reset) rather than hung.
        last: Option<String>,
    },
    /// The first request failed: a missing bucket, refused credentials, an unreachable endpoint.
    #[error("{describe}")]
    Unreachable {
        /// The bucket.
        describe: String,
        /// The store's error.
        #[source]
        source: object_store::Error,
    },
}

/// What [`OpenError::NoAnswer`] says: a store that kept failing (a server answering 500, a
/// connection refused) is not one that never answered.
fn no_answer(after: &std::time::Duration, last: Option<&str>) -> String {
    match last {
        Some(e) => format!("the first request kept failing for {} s; the last try failed: {e}", after.as_secs()),
        None => format!("no answer within {} s (is the endpoint reachable?)", after.as_secs()),
    }
}

impl std::fmt::Debug for Bucket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Bucket({}, paged listing: {})", self.describe, self.pages.is_some())
    }
}

/// Opens the store a source names, with the stack `s3.store` describes. Local directories must
/// exist. For S3 this finds the credentials (logging where they came from, once), which may run a
/// `credential_process` or ask STS, SSO or the instance metadata service.
pub async fn open(source: &Source, s3: &S3Options) -> Result<Bucket, OpenError> {
    let cfg = &s3.store;
    match source {
        Source::Memory => {
            Ok(Bucket::stack(Backend::plain(Arc::new(InMemory::new())), &Path::default(), "memory://", cfg))
        }
        Source::Local(dir) => {
            let meta = std::fs::metadata(dir).map_err(|source| OpenError::LocalDir { dir: dir.clone(), source })?;
            if !meta.is_dir() {
                return Err(OpenError::NotADirectory(dir.clone()));
            }
            let store = LocalStore::new(dir).map_err(|source| OpenError::LocalStore { dir: dir.clone(), source })?;
            let store = Arc::new(store);
            let mut bucket =
                Bucket::stack(Backend::plain(store.clone()), &Path::default(), &dir.display().to_string(), cfg);
            bucket.local = Some(store);
            // The store reaches any key relative to the directory, through directories opened on
            // the way where a key is longer than one system call takes.
            bucket.max_key_len = LOCAL_MAX_KEY_LEN;
            Ok(bucket)
        }
        Source::S3 { bucket, prefix } => {
            let b = s3::s3_builder(bucket, s3)?;
            let b = if s3.credentials.env.is_true("AWS_SKIP_SIGNATURE") {
                // Unsigned requests (public buckets): no credentials to look for.
                let env = &s3.credentials.env;
                let region = s3.region.as_deref().or(env.get("AWS_REGION")).or(env.get("AWS_DEFAULT_REGION"));
                b.with_region(region.unwrap_or(credentials::DEFAULT_REGION))
            } else {
                let found = credentials::resolve(&s3.credentials, s3.region.as_deref()).await?;
                b.with_credentials(found.provider).with_region(found.region)
            };
            let store = b.build().map_err(|source| OpenError::Build { bucket: bucket.clone(), source })?;
            let prefix = Path::parse(prefix).map_err(|source| OpenError::Prefix { prefix: prefix.clone(), source })?;
            let describe = format!("s3://{bucket}/{prefix}");
            let s3_store = Arc::new(store);
            let (store, tracks_uploads): (Arc<dyn ObjectStore>, bool) = match &s3.storage_class {
                Some(class) => (Arc::new(StorageClassStore::new(s3_store.clone(), class)), false),
                None => (s3_store.clone(), true),
            };
            let backend = Backend { store, pages: Some(s3_store.clone()), multipart: Some(s3_store) };
            let mut bucket = Bucket::stack(backend, &prefix, &describe, cfg);
            bucket.tracks_uploads = tracks_uploads;
            Ok(bucket)
        }
    }
}

impl Bucket {
    /// Whether reading an object's recorded attributes costs more than its metadata alone: on a
    /// local directory they are an extended attribute, which ext4 keeps in a block of its own
    /// (one more disk read when cold) once it outgrows the inode; an S3 HEAD brings both.
    pub fn records_cost_extra(&self) -> bool {
        self.local.is_some()
    }

    /// A bucket over `store` whose keys all start with `prefix`, listed without pagination and
    /// never retried (a store in memory, or one a test steers).
    pub fn new(store: Arc<dyn ObjectStore>, prefix: Path, describe: &str) -> Self {
        Bucket::stack(Backend::plain(store), &prefix, describe, &StoreConfig::unretried())
    }

    /// A bucket over the stack `cfg` describes on `backend`, its keys under `prefix`, recording
    /// into a fresh registry.
    pub fn stack(backend: Backend, prefix: &Path, describe: &str, cfg: &StoreConfig) -> Self {
        let metrics = Arc::new(Metrics::new());
        let top = backend.stack(prefix, cfg, &metrics);
        let prefix_len = if prefix.as_ref().is_empty() { 0 } else { prefix.as_ref().len() + 1 };
        Bucket {
            store: top.store,
            describe: describe.to_owned(),
            pages: top.pages,
            local: None,
            multipart: top.multipart,
            tracks_uploads: true,
            max_key_len: S3_MAX_KEY_LEN,
            prefix_len,
            metrics,
            retry_timeout: cfg.retry.timeout,
        }
    }

    /// Lists one key: fails clearly when the bucket is missing, the credentials are refused or
    /// the endpoint cannot be reached, or (naming why the last try failed) when that takes
    /// longer than `after`, retries included.
    pub async fn check_reachable(&self, after: std::time::Duration) -> Result<(), OpenError> {
        let mut list = self.store.list(None);
        let first = tokio::time::timeout(after, list.next()).await;
        let describe = self.describe.clone();
        match first {
            Err(_) => Err(OpenError::NoAnswer { describe, after, last: self.metrics.store().last_retried() }),
            // The store answered, with a key object_store cannot name (another tool's `a//b`):
            // reachable; only that key's directory cannot be listed.
            Ok(Some(Err(object_store::Error::InvalidPath { .. }))) => Ok(()),
            Ok(Some(Err(source))) => Err(OpenError::Unreachable { describe, source }),
            Ok(_) => Ok(()),
        }
    }

    /// For a read-write mount: a local bucket directory this process cannot write to (a read-only
    /// filesystem, its permissions) is an error at once, rather than every write failing later.
    /// S3 buckets are not asked (only a write would tell).
    pub fn check_writable(&self) -> Result<(), OpenError> {
        let Some(local) = &self.local else { return Ok(()) };
        let dir = local.root();
        rustix::fs::access(dir, rustix::fs::Access::WRITE_OK)
            .map_err(|e| OpenError::NotWritable { dir: dir.to_path_buf(), source: e.into() })
    }

    /// Removes what interrupted writes left behind (temporary files of a local-directory bucket
    /// older than `older_than`, so another mount's writes in progress survive). On S3, see
    /// `abort_stale_uploads`.
    pub fn cleanup(&self, older_than: std::time::Duration) -> std::io::Result<Cleanup> {
        match &self.local {
            Some(local) => local.cleanup(older_than),
            None => Ok(Cleanup::default()),
        }
    }

    /// Aborts the multipart uploads that crashed mounts left (their markers older than
    /// `older_than`); returns how many.
    pub async fn abort_stale_uploads(
        &self,
        older_than: std::time::Duration,
    ) -> object_store::Result<crate::uploads::Stale> {
        match &self.multipart {
            Some(mp) => {
                crate::uploads::abort_stale(self.store.as_ref(), mp.as_ref(), &self.upload_markers(), older_than).await
            }
            None => Ok(crate::uploads::Stale::default()),
        }
    }

    /// Where this bucket's upload markers live.
    pub fn upload_markers(&self) -> Path {
        crate::uploads::marker_dir(&Path::default())
    }

    /// The bucket with the [`behind::Behind`] layer on top, at most `max` deletes queued behind
    /// their callers, and that queue; `None` for a local-directory bucket, which deletes in place
    /// at once.
    pub fn with_deletes_behind(mut self, max: usize) -> (Bucket, Option<Arc<behind::Deletes>>) {
        if self.local.is_some() || max == 0 {
            return (self, None);
        }
        let below = Backend { store: self.store.clone(), pages: self.pages.clone(), multipart: self.multipart.clone() };
        let (layer, deletes) = behind::Behind::new(below.clone(), max, self.metrics.store().clone());
        let top = below.wrap(layer);
        (self.store, self.pages, self.multipart) = (top.store, top.pages, top.multipart);
        (self, Some(deletes))
    }

    /// The key of a path of the filesystem (relative to the prefix, like every key of `store`):
    /// its names as they are, so `notes~` is stored, listed and browsed as `notes~` (object_store
    /// percent-encodes `~`, `#`, `%`, `[`… in parts it builds itself, which listings then show
    /// encoded). A name only an encoding can carry (control characters) gets one; `check_name`
    /// refuses such names before any key is made of them.
    pub fn key(&self, rel: &str) -> Path {
        let part = |s| PathPart::parse(s).unwrap_or_else(|_| PathPart::from(s));
        Path::from_iter(rel.split('/').filter(|s| !s.is_empty()).map(part))
    }

    /// The path of the filesystem a key names.
    pub fn rel(&self, key: &Path) -> String {
        key.as_ref().to_owned()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use object_store::aws::AmazonS3ConfigKey;

    use super::*;
    use crate::credentials::CredentialsConfig;

    #[test]
    fn sources_parse() {
        assert_eq!(Source::parse("s3://b/p/q/").unwrap(), Source::S3 { bucket: "b".into(), prefix: "p/q".into() });
        assert_eq!(Source::parse("s3://b").unwrap(), Source::S3 { bucket: "b".into(), prefix: "".into() });
        assert_eq!(Source::parse("memory://").unwrap(), Source::Memory);
        assert_eq!(Source::parse("/data").unwrap(), Source::Local("/data".into()));
        assert!(Source::parse("s3://").is_err());
        assert!(Source::parse("gs://x").is_err());
    }

    #[tokio::test]
    async fn a_store_that_keeps_failing_at_the_start_is_reported_with_its_last_failure() {
        use fault::FaultControl;
        let ctl = Arc::new(FaultControl::default());
        let backend = fault::FaultStore::layer(Backend::plain(Arc::new(InMemory::new())), ctl.clone());
        let b = Bucket::stack(backend, &Path::default(), "s3://b/", &StoreConfig::default());
        ctl.set_down(true);
        let e = b.check_reachable(Duration::from_millis(300)).await.unwrap_err();
        let m = e.to_string();
        assert!(matches!(e, OpenError::NoAnswer { .. }), "{e:?}");
        assert!(
            m.starts_with("s3://b/: the first request kept failing for 0 s; the last try failed: ")
                && !m.contains("reachable")
                && m.contains("injected outage"),
            "{m}"
        );
        ctl.set_down(false);
        b.check_reachable(Duration::from_secs(30)).await.unwrap();
    }

    #[tokio::test]
    async fn keys_are_relative_and_the_prefix_is_the_stack_s() {
        let mem = Arc::new(InMemory::new());
        let b = Bucket::new(mem.clone(), Path::from("base/dir"), "");
        assert_eq!(b.key("a/b.txt").as_ref(), "a/b.txt");
        assert_eq!(b.rel(&Path::from("a/b.txt")), "a/b.txt");
        assert_eq!(b.prefix_len, "base/dir/".len());
        b.store.put(&b.key("a/b.txt"), "x".into()).await.unwrap();
        assert!(mem.head(&Path::from("base/dir/a/b.txt")).await.is_ok(), "stored under the prefix");
    }

    /// Options with static keys in their environment: opening a bucket looks no further for
    /// credentials (and never at the instance metadata service).
    fn with_keys(s3: S3Options) -> S3Options {
        let env = [("AWS_ACCESS_KEY_ID", "AKTEST"), ("AWS_SECRET_ACCESS_KEY", "secret")];
        let env = crate::credentials::AwsEnv::new(env.map(|(k, v)| (k.to_owned(), v.to_owned())));
        S3Options { credentials: CredentialsConfig { env, ..CredentialsConfig::default() }, ..s3 }
    }

    #[tokio::test]
    async fn timeouts_reach_the_client_options_and_environment_settings_are_kept() {
        use object_store::ClientConfigKey;
        let s3 = S3Options {
            store: StoreConfig {
                request_timeout: Duration::from_secs(300),
                connect_timeout: Duration::from_millis(2500),
                ..StoreConfig::default()
            },
            ..S3Options::default()
        };
        let env = [
            ("AWS_PROXY_URL".to_string(), "http://proxy:3128".to_string()),
            ("AWS_TIMEOUT".to_string(), "1s".to_string()),
            ("AWS_REGION".to_string(), "eu-west-1".to_string()),
            ("HOME".to_string(), "/root".to_string()),
        ];
        let o = client_options(&s3, env);
        assert_eq!(
            o.get_config_value(&ClientConfigKey::Timeout).as_deref(),
            Some("5m"),
            "the flag wins over AWS_TIMEOUT"
        );
        assert_eq!(o.get_config_value(&ClientConfigKey::ConnectTimeout).as_deref(), Some("2s 500ms"));
        assert_eq!(o.get_config_value(&ClientConfigKey::ProxyUrl).as_deref(), Some("http://proxy:3128"));
        // And the builder takes them: an S3 bucket opens with them without error.
        let b = open(&Source::S3 { bucket: "b".into(), prefix: "p".into() }, &with_keys(s3)).await.unwrap();
        assert!(b.pages.is_some() && b.tracks_uploads);
    }

    #[tokio::test]
    async fn an_endpoint_that_is_not_a_url_is_an_error_not_a_panic_later() {
        let s3b = Source::S3 { bucket: "b".into(), prefix: String::new() };
        for bad in ["not a url", "localhost:9000", "ftp://h", "http://", "http://h:99999"] {
            let s3 = with_keys(S3Options { endpoint_url: Some(bad.into()), ..S3Options::default() });
            let e = open(&s3b, &s3).await.unwrap_err();
            let OpenError::Endpoint { setting: "--endpoint-url", source, .. } = &e else { panic!("{bad}: {e:?}") };
            assert!(e.to_string().contains(bad) && source.to_string().contains("http(s)://HOST"), "{bad}: {e:?}");
        }
        let s3 = with_keys(S3Options { endpoint_url: Some("http://127.0.0.1:9000".into()), ..S3Options::default() });
        assert!(open(&s3b, &s3).await.is_ok());
    }

    #[tokio::test]
    async fn every_s3_option_reaches_the_builder() {
        let s3b = Source::S3 { bucket: "b".into(), prefix: "p".into() };
        let key = CustomerKey::from_base64(&"QUFB".repeat(8)).unwrap_err();
        assert_eq!(key, CustomerKeyError::Length(24));
        assert!(key.to_string().contains("24 bytes"), "{key}");
        let key = CustomerKey::from_base64("MDEyMzQ1Njc4OTAxMjM0NTY3ODkwMTIzNDU2Nzg5MDE=\n").unwrap();
        assert_eq!(format!("{key:?}"), "CustomerKey(..)");
        for encryption in [
            Encryption::S3,
            Encryption::Kms(None),
            Encryption::Kms(Some("arn:aws:kms:us-east-1:1:key/k".into())),
            Encryption::DsseKms(None),
            Encryption::Customer(key),
        ] {
            let s3 = with_keys(S3Options {
                encryption: encryption.clone(),
                storage_class: Some("STANDARD_IA".into()),
                requester_pays: true,
                virtual_hosted_style: true,
                ..S3Options::default()
            });
            let b = open(&s3b, &s3).await.unwrap_or_else(|e| panic!("{encryption:?}: {e}"));
            assert!(!b.tracks_uploads, "a storage class starts uploads through the classed store");
            assert!(b.store.to_string().contains("STANDARD_IA"), "{}", b.store);
        }
        let b =
            s3::s3_builder("b", &S3Options { encryption: Encryption::Kms(Some("k1".into())), ..S3Options::default() })
                .unwrap();
        let get = |k: &str| b.get_config_value(&k.parse().unwrap());
        assert_eq!(get(s3::SSE_TYPE).as_deref(), Some("aws:kms"));
        assert_eq!(get(s3::SSE_KMS_KEY_ID).as_deref(), Some("k1"));
        let b = s3::s3_builder("b", &S3Options { requester_pays: true, ..S3Options::default() }).unwrap();
        assert_eq!(b.get_config_value(&AmazonS3ConfigKey::RequestPayer).as_deref(), Some("true"));
    }

    #[tokio::test]
    async fn a_missing_local_bucket_is_a_clear_error() {
        let e = open(&Source::Local("/nonexistent/bucket".into()), &S3Options::default()).await.unwrap_err();
        assert!(e.to_string().contains("/nonexistent/bucket"), "{e}");
    }
}
