//! Opening the object store a mount or a CLI command names: a local directory, `s3://bucket/prefix`
//! or `memory://`, and checking it is reachable before anything is mounted. For S3: credentials
//! (`credentials`), region, endpoint, addressing, encryption, storage class, requester pays,
//! retries and timeouts, all from [`S3Options`].

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::list::PaginatedListStore;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{BackoffConfig, ClientOptions, ObjectStore, RetryConfig};

use crate::credentials::{self, CredentialsConfig, CredentialsError};
use crate::localstore::{Cleanup, LocalStore};
use crate::storageclass::StorageClassStore;

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
#[derive(Debug, Clone)]
pub struct S3Options {
    /// Endpoint URL for S3-compatible servers (implies path-style addressing).
    pub endpoint_url: Option<String>,
    /// Region; defaults to the AWS environment/profile, then us-east-1.
    pub region: Option<String>,
    /// Allow plain http (implied by an http:// endpoint).
    pub allow_http: bool,
    /// Force path-style addressing.
    pub path_style: bool,
    /// Force virtual-hosted-style addressing (`https://BUCKET.HOST/KEY`), even with an endpoint
    /// URL (which then names the bucket's own host).
    pub virtual_hosted_style: bool,
    /// How long a failed request is retried, from its first try ([`retry_config`]); zero: never.
    pub retry_timeout: Duration,
    /// Most tries after the first of one request (`None`: as many as fit in `retry_timeout`).
    pub max_retries: Option<usize>,
    /// Most time one request may take, body included ([`client_options`]).
    pub request_timeout: Duration,
    /// Most time to wait for a TCP (and TLS) connection.
    pub connect_timeout: Duration,
    /// Storage class of every object written (`None`: the bucket's default, STANDARD on AWS).
    pub storage_class: Option<String>,
    /// Server-side encryption of objects written (and, with a customer key, read).
    pub encryption: Encryption,
    /// Agree to pay for requests to a requester-pays bucket.
    pub requester_pays: bool,
    /// Where the credentials come from.
    pub credentials: CredentialsConfig,
}

/// Server-side encryption requested from S3.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Encryption {
    /// None requested: the bucket's default encryption applies.
    #[default]
    BucketDefault,
    /// SSE-S3 (`AES256`): keys managed by S3.
    S3,
    /// SSE-KMS (`aws:kms`), with this key (`None`: the account's `aws/s3` key).
    Kms(Option<String>),
    /// DSSE-KMS (`aws:kms:dsse`), with this key.
    DsseKms(Option<String>),
    /// SSE-C: S3 encrypts with this key, which every read and write must send.
    Customer(CustomerKey),
}

/// An SSE-C key: 32 bytes, base64. Its `Debug` does not show it.
#[derive(Clone, PartialEq, Eq)]
pub struct CustomerKey(String);

impl CustomerKey {
    /// A key from its base64 text; it must decode to exactly 32 bytes.
    pub fn from_base64(text: &str) -> Result<Self, String> {
        use base64::Engine;
        let text = text.trim();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(|_| "is not base64 text (make one with `head -c 32 /dev/urandom | base64`)".to_owned())?;
        if bytes.len() != 32 {
            return Err(format!("decodes to {} bytes; an SSE-C key is 32 bytes (256 bits)", bytes.len()));
        }
        Ok(CustomerKey(text.to_owned()))
    }
}

impl std::fmt::Debug for CustomerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CustomerKey(..)")
    }
}

/// Default [`S3Options::retry_timeout`]: rides out a server restart or a short network outage.
pub const DEFAULT_RETRY_TIMEOUT: Duration = Duration::from_secs(60);
/// Default [`S3Options::request_timeout`]: an 8 MiB multipart part still fits at 28 KB/s
/// (object_store's own default, 30 s, fails such a part below about 280 KB/s).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(300);
/// Default [`S3Options::connect_timeout`].
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest wait between two tries of a request: once a restarted server is back, requests
/// resume within this.
pub const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// First wait between tries; later waits grow (doubling at most, with jitter) up to [`MAX_BACKOFF`].
pub const INIT_BACKOFF: Duration = Duration::from_millis(100);

impl Default for S3Options {
    fn default() -> Self {
        S3Options {
            endpoint_url: None,
            region: None,
            allow_http: false,
            path_style: false,
            virtual_hosted_style: false,
            retry_timeout: DEFAULT_RETRY_TIMEOUT,
            max_retries: None,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            storage_class: None,
            encryption: Encryption::BucketDefault,
            requester_pays: false,
            credentials: CredentialsConfig::default(),
        }
    }
}

/// The retry policy of S3 requests: time bounds it, and a count too when one is given.
/// object_store stops retrying once `max_retries` tries were made *or* `retry_timeout` has passed
/// since the first try (it checks before each wait, so the last try may end up to one backoff
/// plus one request later); its default of 10 tries is spent in 2 to 4 s, too soon to outlive a
/// server restart. Without a count, `max_retries` is as many tries as fit in the time at the
/// shortest backoff, so only the time counts.
pub fn retry_config(s3: &S3Options) -> RetryConfig {
    let max_retries = if s3.retry_timeout.is_zero() {
        0
    } else if let Some(n) = s3.max_retries {
        n
    } else {
        (s3.retry_timeout.as_millis() / INIT_BACKOFF.as_millis()) as usize + 1
    };
    RetryConfig {
        backoff: BackoffConfig { init_backoff: INIT_BACKOFF, max_backoff: MAX_BACKOFF, base: 2.0 },
        max_retries,
        retry_timeout: s3.retry_timeout,
    }
}

/// HTTP client options: the `AWS_*` client settings from `env` (proxy, certificates, ...: what
/// `AmazonS3Builder::from_env` would have applied), then the timeouts of `s3`, which win.
pub fn client_options(s3: &S3Options, env: impl IntoIterator<Item = (String, String)>) -> ClientOptions {
    let mut opts = ClientOptions::new();
    for (k, v) in env {
        if k.starts_with("AWS_")
            && let Ok(AmazonS3ConfigKey::Client(key)) = k.to_ascii_lowercase().parse::<AmazonS3ConfigKey>()
        {
            opts = opts.with_config(key, v);
        }
    }
    opts.with_timeout(s3.request_timeout).with_connect_timeout(s3.connect_timeout)
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
    /// The same store's multipart API, where unfinished uploads outlive a crash (S3): uploads are
    /// then announced by markers in the bucket (`uploads`), so a cleanup can abort them.
    pub multipart: Option<Arc<dyn object_store::multipart::MultipartStore>>,
    /// Whether new multipart uploads start through `multipart` (announced by markers). False where
    /// they must carry what that API cannot (a storage class): they then start through `store`,
    /// and one a crash interrupts is left to the bucket's lifecycle rule, not to `cleanup`.
    pub tracks_uploads: bool,
    /// Longest key the store takes, in bytes: S3's 1,024; for a local directory what the host's
    /// `PATH_MAX` leaves after the directory's own path.
    pub max_key_len: usize,
}

/// Longest S3 object key, in bytes.
pub const S3_MAX_KEY_LEN: usize = 1024;

/// Why a bucket could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// No source gave AWS credentials.
    #[error(transparent)]
    Credentials(#[from] CredentialsError),
    /// Anything else: a bad endpoint or prefix, a missing local directory, a builder error.
    #[error("{0}")]
    Other(String),
}

impl From<String> for OpenError {
    fn from(s: String) -> Self {
        OpenError::Other(s)
    }
}

impl std::fmt::Debug for Bucket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Bucket({}, paged listing: {})", self.describe, self.pages.is_some())
    }
}

/// Checks an S3 endpoint: `http://` or `https://`, a host, an optional port and path; nothing
/// else. object_store's builder takes any string as the endpoint and panics at the first signed
/// request ("request valid: InvalidUri") on one that is not a URL, so it is checked before.
pub fn check_endpoint_url(s: &str) -> Result<(), String> {
    let bad = |why: &str| format!("{why}; expected http(s)://HOST[:PORT][/PATH], e.g. http://127.0.0.1:9000");
    let Some((scheme, rest)) = s.split_once("://") else {
        return Err(bad("not a URL"));
    };
    if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(bad("a URL has no spaces"));
    }
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return Err(bad(&format!("scheme {scheme:?} is not http or https")));
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if rest[authority.len()..].starts_with(['?', '#']) {
        return Err(bad("must not have a query or fragment"));
    }
    if authority.contains('@') {
        return Err(bad("must not hold credentials (use AWS_ACCESS_KEY_ID or ~/.aws/credentials)"));
    }
    let (host, port) = match authority.strip_prefix('[') {
        // [IPv6]:port
        Some(v6) => {
            let (addr, after) = v6.split_once(']').ok_or_else(|| bad("unclosed '[' in the host"))?;
            addr.parse::<std::net::Ipv6Addr>().map_err(|_| bad(&format!("{addr:?} is not an IPv6 address")))?;
            (addr, after.strip_prefix(':'))
        }
        None => match authority.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        },
    };
    if host.is_empty() {
        return Err(bad("no host"));
    }
    if !authority.starts_with('[')
        && !host.split('.').all(|l| !l.is_empty() && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'))
    {
        return Err(bad(&format!("{host:?} is not a host name")));
    }
    if let Some(p) = port
        && !p.parse::<u16>().is_ok_and(|p| p != 0)
    {
        return Err(bad(&format!("port {p:?} is not 1 to 65535")));
    }
    Ok(())
}

/// Opens the store a source names. Local directories must exist. For S3 this finds the
/// credentials (logging where they came from, once), which may run a `credential_process` or ask
/// STS, SSO or the instance metadata service.
pub async fn open(source: &Source, s3: &S3Options) -> Result<Bucket, OpenError> {
    match source {
        Source::Memory => Ok(Bucket::new(Arc::new(InMemory::new()), Path::default(), "memory://")),
        Source::Local(dir) => {
            let meta = std::fs::metadata(dir).map_err(|e| format!("bucket directory {}: {e}", dir.display()))?;
            if !meta.is_dir() {
                return Err(format!("bucket directory {} is not a directory", dir.display()).into());
            }
            let store = LocalStore::new(dir).map_err(|e| format!("bucket directory {}: {e}", dir.display()))?;
            let store = Arc::new(store);
            let mut bucket = Bucket::new(store.clone(), Path::default(), &dir.display().to_string());
            bucket.local = Some(store);
            // A file's path is the directory's, a slash and the key, within PATH_MAX with its NUL.
            let root = std::path::absolute(dir).map_or(dir.as_os_str().len(), |p| p.as_os_str().len());
            bucket.max_key_len = (libc::PATH_MAX as usize).saturating_sub(root + 2);
            Ok(bucket)
        }
        Source::S3 { bucket, prefix } => {
            let b = s3_builder(bucket, s3)?;
            let b = if s3.credentials.env.is_true("AWS_SKIP_SIGNATURE") {
                // Unsigned requests (public buckets): no credentials to look for.
                let env = &s3.credentials.env;
                let region = s3.region.as_deref().or(env.get("AWS_REGION")).or(env.get("AWS_DEFAULT_REGION"));
                b.with_region(region.unwrap_or(credentials::DEFAULT_REGION))
            } else {
                let found = credentials::resolve(&s3.credentials, s3.region.as_deref()).await?;
                b.with_credentials(found.provider).with_region(found.region)
            };
            let store = b.build().map_err(|e| format!("s3://{bucket}: {}", one_line(&e.to_string())))?;
            let prefix = Path::parse(prefix).map_err(|e| format!("prefix {prefix:?}: {e}"))?;
            let describe = format!("s3://{bucket}/{prefix}");
            let s3_store = Arc::new(store);
            let (store, tracks_uploads): (Arc<dyn ObjectStore>, bool) = match &s3.storage_class {
                Some(class) => (Arc::new(StorageClassStore::new(s3_store.clone(), class)), false),
                None => (s3_store.clone(), true),
            };
            Ok(Bucket {
                store,
                prefix,
                describe,
                pages: Some(s3_store.clone()),
                local: None,
                multipart: Some(s3_store),
                tracks_uploads,
                max_key_len: S3_MAX_KEY_LEN,
            })
        }
    }
}

/// object_store's setting of the server-side encryption type.
const SSE_TYPE: &str = "aws_server_side_encryption";
/// object_store's setting of the KMS key.
const SSE_KMS_KEY_ID: &str = "aws_sse_kms_key_id";

/// The S3 builder for `bucket` with everything of `s3` but the credentials and region: first the
/// `AWS_*` settings of the environment (what `AmazonS3Builder::from_env` would apply), then the
/// options, which win.
fn s3_builder(bucket: &str, s3: &S3Options) -> Result<AmazonS3Builder, String> {
    let env = &s3.credentials.env;
    let mut b = AmazonS3Builder::new();
    for (k, v) in env.iter() {
        if k.starts_with("AWS_")
            && let Ok(key) = k.to_ascii_lowercase().parse::<AmazonS3ConfigKey>()
        {
            b = b.with_config(key, v);
        }
    }
    let env_pairs = env.iter().map(|(k, v)| (k.to_owned(), v.to_owned()));
    b = b.with_bucket_name(bucket).with_retry(retry_config(s3)).with_client_options(client_options(s3, env_pairs));
    if s3.endpoint_url.is_none()
        && let Some(url) = b.get_config_value(&AmazonS3ConfigKey::Endpoint)
    {
        check_endpoint_url(&url).map_err(|e| format!("AWS_ENDPOINT {url:?}: {e}"))?;
    }
    if let Some(url) = &s3.endpoint_url {
        check_endpoint_url(url).map_err(|e| format!("--endpoint-url {url:?}: {e}"))?;
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
    if s3.virtual_hosted_style {
        b = b.with_virtual_hosted_style_request(true);
    }
    if s3.requester_pays {
        b = b.with_request_payer(true);
    }
    // object_store names these settings by string only (its key type for them is private).
    let sse = |b: AmazonS3Builder, kind: &str, key: &Option<String>| -> Result<AmazonS3Builder, String> {
        let config = |name: &str| name.parse::<AmazonS3ConfigKey>().map_err(|e| e.to_string());
        let b = b.with_config(config(SSE_TYPE)?, kind);
        Ok(match key {
            Some(k) => b.with_config(config(SSE_KMS_KEY_ID)?, k),
            None => b,
        })
    };
    match &s3.encryption {
        Encryption::BucketDefault => Ok(b),
        Encryption::S3 => sse(b, "AES256", &None),
        Encryption::Kms(key) => sse(b, "aws:kms", key),
        Encryption::DsseKms(key) => sse(b, "aws:kms:dsse", key),
        Encryption::Customer(CustomerKey(key)) => Ok(b.with_ssec_encryption(key)),
    }
}

impl Bucket {
    /// A bucket over `store` whose keys all start with `prefix`, listed without pagination.
    pub fn new(store: Arc<dyn ObjectStore>, prefix: Path, describe: &str) -> Self {
        Bucket {
            store,
            prefix,
            describe: describe.to_owned(),
            pages: None,
            local: None,
            multipart: None,
            tracks_uploads: true,
            max_key_len: S3_MAX_KEY_LEN,
        }
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
    pub async fn abort_stale_uploads(&self, older_than: std::time::Duration) -> object_store::Result<u64> {
        match &self.multipart {
            Some(mp) => {
                crate::uploads::abort_stale(self.store.as_ref(), mp.as_ref(), &self.upload_markers(), older_than).await
            }
            None => Ok(0),
        }
    }

    /// Where this bucket's upload markers live.
    pub fn upload_markers(&self) -> Path {
        crate::uploads::marker_dir(&self.prefix)
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
    fn retries_are_bounded_by_time_not_by_count() {
        let s3 = S3Options { retry_timeout: Duration::from_secs(90), ..S3Options::default() };
        let r = retry_config(&s3);
        assert_eq!(r.retry_timeout, Duration::from_secs(90));
        assert_eq!((r.backoff.init_backoff, r.backoff.max_backoff), (INIT_BACKOFF, MAX_BACKOFF));
        // Every try at the shortest backoff still fits: the count never ends retries first.
        assert!(r.max_retries as u128 * INIT_BACKOFF.as_millis() >= 90_000, "{}", r.max_retries);
        let none = retry_config(&S3Options { retry_timeout: Duration::ZERO, ..S3Options::default() });
        assert_eq!(none.max_retries, 0);
        // A count bounds them too, when given.
        let three = retry_config(&S3Options { max_retries: Some(3), ..S3Options::default() });
        assert_eq!((three.max_retries, three.retry_timeout), (3, DEFAULT_RETRY_TIMEOUT));
        let d = retry_config(&S3Options::default());
        assert_eq!(d.retry_timeout, DEFAULT_RETRY_TIMEOUT);
        assert!(DEFAULT_RETRY_TIMEOUT >= Duration::from_secs(60));
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
            request_timeout: Duration::from_secs(300),
            connect_timeout: Duration::from_millis(2500),
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
            let e = open(&s3b, &s3).await.unwrap_err().to_string();
            assert!(e.contains("--endpoint-url") && e.contains("http(s)://HOST"), "{bad}: {e}");
        }
        let s3 = with_keys(S3Options { endpoint_url: Some("http://127.0.0.1:9000".into()), ..S3Options::default() });
        assert!(open(&s3b, &s3).await.is_ok());
    }

    #[tokio::test]
    async fn every_s3_option_reaches_the_builder() {
        let s3b = Source::S3 { bucket: "b".into(), prefix: "p".into() };
        let key = CustomerKey::from_base64(&"QUFB".repeat(8)).unwrap_err();
        assert!(key.contains("24 bytes"), "{key}");
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
                max_retries: Some(2),
                ..S3Options::default()
            });
            let b = open(&s3b, &s3).await.unwrap_or_else(|e| panic!("{encryption:?}: {e}"));
            assert!(!b.tracks_uploads, "a storage class starts uploads through the classed store");
            assert!(b.store.to_string().contains("STANDARD_IA"), "{}", b.store);
        }
        let b = s3_builder("b", &S3Options { encryption: Encryption::Kms(Some("k1".into())), ..S3Options::default() })
            .unwrap();
        let get = |k: &str| b.get_config_value(&k.parse().unwrap());
        assert_eq!(get(SSE_TYPE).as_deref(), Some("aws:kms"));
        assert_eq!(get(SSE_KMS_KEY_ID).as_deref(), Some("k1"));
        let b = s3_builder("b", &S3Options { requester_pays: true, ..S3Options::default() }).unwrap();
        assert_eq!(b.get_config_value(&AmazonS3ConfigKey::RequestPayer).as_deref(), Some("true"));
    }

    #[tokio::test]
    async fn a_missing_local_bucket_is_a_clear_error() {
        let e = open(&Source::Local("/nonexistent/bucket".into()), &S3Options::default()).await.unwrap_err();
        assert!(e.to_string().contains("/nonexistent/bucket"), "{e}");
    }
}
