//! Opening the object store a mount or a CLI command names: a local directory, `s3://bucket/prefix`
//! or `memory://`, and checking it is reachable before anything is mounted.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::list::PaginatedListStore;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{BackoffConfig, ClientOptions, ObjectStore, RetryConfig};

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
    /// How long a failed request is retried, from its first try ([`retry_config`]); zero: never.
    pub retry_timeout: Duration,
    /// Most time one request may take, body included ([`client_options`]).
    pub request_timeout: Duration,
    /// Most time to wait for a TCP (and TLS) connection.
    pub connect_timeout: Duration,
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
            retry_timeout: DEFAULT_RETRY_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
        }
    }
}

/// The retry policy of S3 requests: time, not a count, bounds it. object_store stops retrying
/// once `max_retries` tries were made *or* `retry_timeout` has passed since the first try (it
/// checks before each wait, so the last try may end up to one backoff plus one request later);
/// its default of 10 tries is spent in 2 to 4 s, too soon to outlive a server restart. Here
/// `max_retries` is as many tries as fit in the time at the shortest backoff, so only the
/// time counts.
pub fn retry_config(s3: &S3Options) -> RetryConfig {
    let max_retries = if s3.retry_timeout.is_zero() {
        0
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
            let env = std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)));
            let mut b = AmazonS3Builder::from_env()
                .with_bucket_name(bucket)
                .with_retry(retry_config(s3))
                .with_client_options(client_options(s3, env));
            if s3.endpoint_url.is_none()
                && let Some(url) = b.get_config_value(&AmazonS3ConfigKey::Endpoint)
            {
                check_endpoint_url(&url).map_err(|e| format!("AWS_ENDPOINT {url:?}: {e}"))?;
            }
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
            let store = b.build().map_err(|e| format!("s3://{bucket}: {e}"))?;
            let prefix = Path::parse(prefix).map_err(|e| format!("prefix {prefix:?}: {e}"))?;
            let describe = format!("s3://{bucket}/{prefix}");
            let store = Arc::new(store);
            Ok(Bucket {
                store: store.clone(),
                prefix,
                describe,
                pages: Some(store.clone()),
                local: None,
                multipart: Some(store),
            })
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
        Bucket { store, prefix, describe: describe.to_owned(), pages: None, local: None, multipart: None }
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
    fn retries_are_bounded_by_time_not_by_count() {
        let s3 = S3Options { retry_timeout: Duration::from_secs(90), ..S3Options::default() };
        let r = retry_config(&s3);
        assert_eq!(r.retry_timeout, Duration::from_secs(90));
        assert_eq!((r.backoff.init_backoff, r.backoff.max_backoff), (INIT_BACKOFF, MAX_BACKOFF));
        // Every try at the shortest backoff still fits: the count never ends retries first.
        assert!(r.max_retries as u128 * INIT_BACKOFF.as_millis() >= 90_000, "{}", r.max_retries);
        let none = retry_config(&S3Options { retry_timeout: Duration::ZERO, ..S3Options::default() });
        assert_eq!(none.max_retries, 0);
        let d = retry_config(&S3Options::default());
        assert_eq!(d.retry_timeout, DEFAULT_RETRY_TIMEOUT);
        assert!(DEFAULT_RETRY_TIMEOUT >= Duration::from_secs(60));
    }

    #[test]
    fn timeouts_reach_the_client_options_and_environment_settings_are_kept() {
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
        let b = open(&Source::S3 { bucket: "b".into(), prefix: "p".into() }, &s3).unwrap();
        assert!(b.pages.is_some());
    }

    #[test]
    fn an_endpoint_that_is_not_a_url_is_an_error_not_a_panic_later() {
        let s3b = Source::S3 { bucket: "b".into(), prefix: String::new() };
        for bad in ["not a url", "localhost:9000", "ftp://h", "http://", "http://h:99999"] {
            let s3 = S3Options { endpoint_url: Some(bad.into()), ..S3Options::default() };
            let e = open(&s3b, &s3).unwrap_err();
            assert!(e.contains("--endpoint-url") && e.contains("http(s)://HOST"), "{bad}: {e}");
        }
        let s3 = S3Options { endpoint_url: Some("http://127.0.0.1:9000".into()), ..S3Options::default() };
        assert!(open(&s3b, &s3).is_ok());
    }

    #[test]
    fn a_missing_local_bucket_is_a_clear_error() {
        let e = open(&Source::Local("/nonexistent/bucket".into()), &S3Options::default()).unwrap_err();
        assert!(e.contains("/nonexistent/bucket"), "{e}");
    }
}
