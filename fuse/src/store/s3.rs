//! How to reach S3: the options of an S3 (or S3-compatible) bucket, the checks of its endpoint, and
//! the object_store builder they make (credentials aside, see `credentials`).

use std::time::Duration;

use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::{ClientOptions, RetryConfig};

use super::OpenError;
use super::config::StoreConfig;
use crate::credentials::CredentialsConfig;

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
    /// Retries, timeouts and concurrency of the store stack (every backend's; the timeouts
    /// reach S3's HTTP client through [`client_options`]).
    pub store: StoreConfig,
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
    pub fn from_base64(text: &str) -> Result<Self, CustomerKeyError> {
        use base64::Engine;
        let text = text.trim();
        let bytes = base64::engine::general_purpose::STANDARD.decode(text).map_err(CustomerKeyError::NotBase64)?;
        if bytes.len() != 32 {
            return Err(CustomerKeyError::Length(bytes.len()));
        }
        Ok(CustomerKey(text.to_owned()))
    }
}

/// Why text is not an SSE-C key.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CustomerKeyError {
    /// Not base64.
    #[error("is not base64 text (make one with `head -c 32 /dev/urandom | base64`)")]
    NotBase64(#[source] base64::DecodeError),
    /// Base64 of the wrong number of bytes.
    #[error("decodes to {0} bytes; an SSE-C key is 32 bytes (256 bits)")]
    Length(usize),
}

impl std::fmt::Debug for CustomerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CustomerKey(..)")
    }
}

impl Default for S3Options {
    fn default() -> Self {
        S3Options {
            endpoint_url: None,
            region: None,
            allow_http: false,
            path_style: false,
            virtual_hosted_style: false,
            store: StoreConfig::default(),
            storage_class: None,
            encryption: Encryption::BucketDefault,
            requester_pays: false,
            credentials: CredentialsConfig::default(),
        }
    }
}

/// object_store's own retries are off: the stack's retry layer (`retry`) retries every backend
/// alike, and counts what it does; two layers retrying would multiply the waits.
pub fn retry_config() -> RetryConfig {
    RetryConfig { max_retries: 0, retry_timeout: Duration::ZERO, ..RetryConfig::default() }
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
    opts.with_timeout(s3.store.request_timeout).with_connect_timeout(s3.store.connect_timeout)
}

/// What a valid endpoint looks like, said after every endpoint error.
const ENDPOINT_FORM: &str = "expected http(s)://HOST[:PORT][/PATH], e.g. http://127.0.0.1:9000";

/// Why a string is not an S3 endpoint URL.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    /// No `scheme://`.
    #[error("not a URL; {ENDPOINT_FORM}")]
    NotUrl,
    /// Spaces or control characters.
    #[error("a URL has no spaces; {ENDPOINT_FORM}")]
    Whitespace,
    /// A scheme other than http and https.
    #[error("scheme {0:?} is not http or https; {ENDPOINT_FORM}")]
    Scheme(String),
    /// A `?query` or `#fragment`.
    #[error("must not have a query or fragment; {ENDPOINT_FORM}")]
    QueryOrFragment,
    /// `user:password@` in the URL.
    #[error("must not hold credentials (use AWS_ACCESS_KEY_ID or ~/.aws/credentials); {ENDPOINT_FORM}")]
    Credentials,
    /// `[` without `]`.
    #[error("unclosed '[' in the host; {ENDPOINT_FORM}")]
    UnclosedBracket,
    /// `[...]` that is not an IPv6 address.
    #[error("{0:?} is not an IPv6 address; {ENDPOINT_FORM}")]
    Ipv6(String),
    /// No host.
    #[error("no host; {ENDPOINT_FORM}")]
    NoHost,
    /// A host that is not a DNS name or IPv4 address.
    #[error("{0:?} is not a host name; {ENDPOINT_FORM}")]
    Host(String),
    /// A port outside 1..=65535.
    #[error("port {0:?} is not 1 to 65535; {ENDPOINT_FORM}")]
    Port(String),
}

/// Checks an S3 endpoint: `http://` or `https://`, a host, an optional port and path; nothing
/// else. object_store's builder takes any string as the endpoint and panics at the first signed
/// request ("request valid: InvalidUri") on one that is not a URL, so it is checked before.
pub fn check_endpoint_url(s: &str) -> Result<(), EndpointError> {
    let Some((scheme, rest)) = s.split_once("://") else {
        return Err(EndpointError::NotUrl);
    };
    if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(EndpointError::Whitespace);
    }
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return Err(EndpointError::Scheme(scheme.to_owned()));
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if rest[authority.len()..].starts_with(['?', '#']) {
        return Err(EndpointError::QueryOrFragment);
    }
    if authority.contains('@') {
        return Err(EndpointError::Credentials);
    }
    let (host, port) = match authority.strip_prefix('[') {
        // [IPv6]:port
        Some(v6) => {
            let (addr, after) = v6.split_once(']').ok_or(EndpointError::UnclosedBracket)?;
            addr.parse::<std::net::Ipv6Addr>().map_err(|_| EndpointError::Ipv6(addr.to_owned()))?;
            (addr, after.strip_prefix(':'))
        }
        None => match authority.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        },
    };
    if host.is_empty() {
        return Err(EndpointError::NoHost);
    }
    if !authority.starts_with('[')
        && !host.split('.').all(|l| !l.is_empty() && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'))
    {
        return Err(EndpointError::Host(host.to_owned()));
    }
    if let Some(p) = port
        && !p.parse::<u16>().is_ok_and(|p| p != 0)
    {
        return Err(EndpointError::Port(p.to_owned()));
    }
    Ok(())
}

/// object_store's setting of the server-side encryption type.
pub(super) const SSE_TYPE: &str = "aws_server_side_encryption";
/// object_store's setting of the KMS key.
pub(super) const SSE_KMS_KEY_ID: &str = "aws_sse_kms_key_id";

/// The S3 builder for `bucket` with everything of `s3` but the credentials and region: first the
/// `AWS_*` settings of the environment (what `AmazonS3Builder::from_env` would apply), then the
/// options, which win.
pub(super) fn s3_builder(bucket: &str, s3: &S3Options) -> Result<AmazonS3Builder, OpenError> {
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
    b = b.with_bucket_name(bucket).with_retry(retry_config()).with_client_options(client_options(s3, env_pairs));
    if s3.endpoint_url.is_none()
        && let Some(url) = b.get_config_value(&AmazonS3ConfigKey::Endpoint)
    {
        check_endpoint_url(&url).map_err(|source| OpenError::Endpoint { setting: "AWS_ENDPOINT", url, source })?;
    }
    if let Some(url) = &s3.endpoint_url {
        check_endpoint_url(url).map_err(|source| OpenError::Endpoint {
            setting: "--endpoint-url",
            url: url.clone(),
            source,
        })?;
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
    let sse = |b: AmazonS3Builder, kind: &str, key: &Option<String>| -> Result<AmazonS3Builder, OpenError> {
        let config = |name: &'static str| {
            name.parse::<AmazonS3ConfigKey>().map_err(|source| OpenError::EncryptionSetting { name, source })
        };
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
