//! AWS credentials as the AWS tools find them: which sources there are, in which order, which one
//! answered (one log line, never a key), and the bridge that hands them to object_store, cached
//! until shortly before they expire.
//!
//! The order, first that is configured wins:
//! 1. the environment (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`), unless a
//!    profile was named on the command line (as the AWS CLI does with `--profile`);
//! 2. the profile (`--profile`, `AWS_PROFILE`, `AWS_DEFAULT_PROFILE`, else "default") in the shared
//!    files (`--credentials-file` / `AWS_SHARED_CREDENTIALS_FILE` / `~/.aws/credentials` and
//!    `--aws-config-file` / `AWS_CONFIG_FILE` / `~/.aws/config`): static keys, `role_arn` (with
//!    `source_profile` or `credential_source`), `web_identity_token_file`, `credential_process`
//!    and SSO, all resolved by aws-config;
//! 3. web identity from the environment (`AWS_WEB_IDENTITY_TOKEN_FILE` with `AWS_ROLE_ARN`);
//! 4. the container endpoint (`AWS_CONTAINER_CREDENTIALS_RELATIVE_URI` or `..._FULL_URI`);
//! 5. instance metadata (169.254.169.254), only when none of the above is configured at all and
//!    `AWS_EC2_METADATA_DISABLED` is not true, with a one-second budget.
//!
//! A source that is configured but fails (a `credential_process` that exits non-zero, a named
//! profile without credentials) ends the search with an error naming every source looked at, as
//! the AWS SDKs do: falling through to another identity would hide the mistake.
//!
//! `~` is the user's home: `HOME`, or where it is missing (mount(8) and systemd clear it) the
//! home directory of the effective uid in the user database. Environment variables are handed in
//! as an [`AwsEnv`] by the binary; aws-config's own providers (container, instance metadata, the
//! child of `credential_process`) see the process environment, which is the same one.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_config::provider_config::ProviderConfig;
use aws_credential_types::Credentials;
use aws_credential_types::provider::error::CredentialsError as SdkError;
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use aws_runtime::env_config::file::{EnvConfigFileKind, EnvConfigFiles};
use aws_smithy_http_client::tls::{Provider, rustls_provider::CryptoMode};
use aws_types::os_shim_internal::{Env, Fs};
use aws_types::region::Region;
use object_store::CredentialProvider;
use object_store::aws::AwsCredential;

/// Region when neither a flag, the environment nor the profile names one.
pub const DEFAULT_REGION: &str = "us-east-1";
/// Longest wait for one source's first answer (a `credential_process`, STS, SSO).
pub const SOURCE_TIMEOUT: Duration = Duration::from_secs(30);
/// Budget of the instance-metadata source: one try, one second to connect, one to answer.
pub const IMDS_TIMEOUT: Duration = Duration::from_secs(1);
/// Credentials are fetched again this long before they expire (or at half their remaining
/// lifetime, if that is shorter).
pub const REFRESH_MARGIN: Duration = Duration::from_secs(300);

/// A snapshot of the process environment, taken by the binary. Its `Debug` shows names only:
/// values hold secrets.
#[derive(Clone, Default)]
pub struct AwsEnv(BTreeMap<String, String>);

impl AwsEnv {
    /// The variables given.
    pub fn new(vars: impl IntoIterator<Item = (String, String)>) -> Self {
        AwsEnv(vars.into_iter().collect())
    }

    /// A variable's value, if set and not empty.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str).filter(|v| !v.is_empty())
    }

    /// Whether a variable is set to `true` (any case).
    pub fn is_true(&self, name: &str) -> bool {
        self.get(name).is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
    }

    /// All variables.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

impl std::fmt::Debug for AwsEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.0.keys()).finish()
    }
}

/// Where to look for credentials (plain data, built once by the binary).
#[derive(Debug, Clone, Default)]
pub struct CredentialsConfig {
    /// Profile named on the command line (`--profile`): wins over `AWS_PROFILE` and over keys in
    /// the environment.
    pub profile: Option<String>,
    /// Shared credentials file named on the command line; it must exist.
    pub credentials_file: Option<PathBuf>,
    /// Shared config file named on the command line; it must exist.
    pub config_file: Option<PathBuf>,
    /// The user's home directory ([`home_dir`]), for `~/.aws/`.
    pub home: Option<PathBuf>,
    /// The environment.
    pub env: AwsEnv,
}

/// The home directory: `HOME`, else the effective uid's entry in the user database.
pub fn home_dir(env: &AwsEnv) -> Option<PathBuf> {
    if let Some(home) = env.get("HOME") {
        return Some(PathBuf::from(home));
    }
    let user = nix::unistd::User::from_uid(nix::unistd::geteuid()).ok()??;
    Some(user.dir).filter(|d| !d.as_os_str().is_empty())
}

/// No source gave credentials. One line: every source looked at and what it said.
#[derive(Debug, thiserror::Error)]
#[error(
    "no usable AWS credentials ({}); name them with --profile NAME and --credentials-file PATH or --aws-config-file PATH, or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
    .tried.join("; ")
)]
pub struct CredentialsError {
    /// "source: what happened", one per source looked at, in order.
    pub tried: Vec<String>,
}

/// Credentials found, ready for object_store, and the region that goes with them.
#[derive(Debug)]
pub struct Resolved {
    /// The bridge to give `AmazonS3Builder::with_credentials`.
    pub provider: Arc<AwsCredentials>,
    /// Which source answered, for messages ("profile \"dev\" in /root/.aws/config").
    pub source: String,
    /// Region: the one given, else `AWS_REGION`, `AWS_DEFAULT_REGION`, the profile's, us-east-1.
    pub region: String,
}

/// The profile and the shared files it is read from.
struct ProfileChoice {
    name: String,
    /// Named by a flag or a variable (not the implicit "default"): then it must give credentials.
    named: bool,
    files: Vec<(EnvConfigFileKind, PathBuf)>,
    /// The files looked for, for messages when none exists.
    looked_for: Vec<PathBuf>,
}

impl ProfileChoice {
    fn new(cfg: &CredentialsConfig) -> Result<Self, ProfileError> {
        let env = &cfg.env;
        let from_env = env.get("AWS_PROFILE").or_else(|| env.get("AWS_DEFAULT_PROFILE"));
        let name = cfg.profile.as_deref().or(from_env).unwrap_or("default").to_owned();
        let named = cfg.profile.is_some() || from_env.is_some();
        let aws_dir = cfg.home.as_ref().map(|h| h.join(".aws"));
        let mut files = Vec::new();
        let mut looked_for = Vec::new();
        // aws-config's order: the config file, then the credentials file (which wins on a clash).
        for (kind, flag, given, var, default) in [
            (EnvConfigFileKind::Config, "--aws-config-file", &cfg.config_file, "AWS_CONFIG_FILE", "config"),
            (
                EnvConfigFileKind::Credentials,
                "--credentials-file",
                &cfg.credentials_file,
                "AWS_SHARED_CREDENTIALS_FILE",
                "credentials",
            ),
        ] {
            if let Some(path) = given {
                // Named on the command line: a missing file is a mistake, not an absence.
                std::fs::metadata(path).map_err(|source| ProfileError::File { flag, path: path.clone(), source })?;
                files.push((kind, path.clone()));
                continue;
            }
            let path = match (env.get(var), &aws_dir) {
                (Some(p), _) => PathBuf::from(p),
                (None, Some(dir)) => dir.join(default),
                (None, None) => continue,
            };
            if path.is_file() {
                files.push((kind, path));
            } else {
                looked_for.push(path);
            }
        }
        Ok(ProfileChoice { name, named, files, looked_for })
    }

    fn profile_files(&self) -> EnvConfigFiles {
        let mut b =
            EnvConfigFiles::builder().include_default_config_file(false).include_default_credentials_file(false);
        for (kind, path) in &self.files {
            b = b.with_file(*kind, path);
        }
        b.build()
    }

    fn files_text(&self) -> String {
        let files: Vec<_> = self.files.iter().map(|(_, p)| p.display().to_string()).collect();
        files.join(" and ")
    }

    fn describe(&self) -> String {
        format!("profile {:?} in {}", self.name, self.files_text())
    }
}

/// Why the shared files could not be read. It becomes one entry of [`CredentialsError::tried`],
/// so its message carries its cause.
#[derive(Debug, thiserror::Error)]
enum ProfileError {
    /// A file named on the command line cannot be read.
    #[error("{flag} {}: {source}", .path.display())]
    File {
        /// The flag that named it.
        flag: &'static str,
        /// The file.
        path: PathBuf,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
    /// aws-config could not parse the files.
    #[error("{}", crate::error::chain(.0))]
    Load(#[source] aws_runtime::env_config::error::EnvConfigFileLoadError),
}

/// The region of the profile, and whether the profile exists in the files.
async fn read_profile(choice: &ProfileChoice) -> Result<(Option<String>, bool), ProfileError> {
    if choice.files.is_empty() {
        return Ok((None, false));
    }
    let set = aws_config::profile::load(
        &Fs::real(),
        &Env::from_slice(&[]),
        &choice.profile_files(),
        Some(choice.name.clone().into()),
    )
    .await
    .map_err(ProfileError::Load)?;
    let profile = set.get_profile(&choice.name);
    Ok((profile.and_then(|p| p.get("region")).map(str::to_owned), profile.is_some()))
}

/// Finds credentials: the sources of the module comment, in order. Logs which one answered at
/// info, once; `region` is the `--region` flag, if given.
pub async fn resolve(cfg: &CredentialsConfig, region: Option<&str>) -> Result<Resolved, CredentialsError> {
    let env = &cfg.env;
    let mut tried = Vec::new();
    let fail = |mut tried: Vec<String>, what: String| {
        tried.push(what);
        CredentialsError { tried }
    };
    let choice = ProfileChoice::new(cfg).map_err(|e| fail(Vec::new(), e.to_string()))?;
    let (profile_region, profile_exists) =
        read_profile(&choice).await.map_err(|e| fail(Vec::new(), format!("profile {:?}: {e}", choice.name)))?;
    let region = region
        .or(env.get("AWS_REGION"))
        .or(env.get("AWS_DEFAULT_REGION"))
        .map(str::to_owned)
        .or(profile_region)
        .unwrap_or_else(|| DEFAULT_REGION.to_owned());
    let pc = ProviderConfig::without_region().with_region(Some(Region::new(region.clone()))).with_http_client(
        aws_smithy_http_client::Builder::new().tls_provider(Provider::Rustls(CryptoMode::Ring)).build_https(),
    );
    let found = |provider: SharedCredentialsProvider, first: Credentials, source: String| {
        tracing::info!(region = %region, "AWS credentials from {source}");
        Ok(Resolved { provider: Arc::new(AwsCredentials::new(provider, first)), source, region: region.clone() })
    };
    // 1. The environment.
    match (env.get("AWS_ACCESS_KEY_ID"), env.get("AWS_SECRET_ACCESS_KEY")) {
        _ if cfg.profile.is_some() => tried.push("environment: not used, --profile given".into()),
        (None, _) => tried.push("environment: AWS_ACCESS_KEY_ID not set".into()),
        (Some(_), None) => {
            return Err(fail(tried, "environment: AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not".into()));
        }
        (Some(id), Some(secret)) => {
            let token = env.get("AWS_SESSION_TOKEN").map(str::to_owned);
            let creds = Credentials::new(id, secret, token, None, "Environment");
            return found(SharedCredentialsProvider::new(creds.clone()), creds, "the environment".into());
        }
    }

    // 2. The profile.
    let what = format!("profile {:?}", choice.name);
    if choice.files.is_empty() {
        let looked: Vec<_> = choice.looked_for.iter().map(|p| p.display().to_string()).collect();
        let why = match looked.is_empty() {
            true => "no home directory, and no file named".to_owned(),
            false => format!("no {}", looked.join(" or ")),
        };
        if choice.named {
            return Err(fail(tried, format!("{what}: {why}")));
        }
        tried.push(format!("{what}: {why}"));
    } else if !profile_exists && !choice.named {
        tried.push(format!("{what}: not in {}", choice.files_text()));
    } else {
        let provider = aws_config::profile::ProfileFileCredentialsProvider::builder()
            .configure(&pc)
            .profile_files(choice.profile_files())
            .profile_name(&choice.name)
            .build();
        let provider = SharedCredentialsProvider::new(provider);
        match first(&provider, SOURCE_TIMEOUT).await {
            Ok(creds) => return found(provider, creds, choice.describe()),
            Err(SdkError::CredentialsNotLoaded(_)) if !choice.named => {
                // The implicit default profile holds settings but no credentials (a region,
                // say): an absent source, as the AWS tools treat it.
                tried.push(format!("{what}: no credentials in it"));
            }
            Err(SdkError::CredentialsNotLoaded(_)) => {
                let why = if profile_exists { "has no credentials" } else { "not found" };
                return Err(fail(tried, format!("{} {why}", choice.describe())));
            }
            Err(e) => return Err(fail(tried, format!("{}: {}", choice.describe(), sdk_message(&e)))),
        }
    }

    // 3. Web identity from the environment.
    match (env.get("AWS_WEB_IDENTITY_TOKEN_FILE"), env.get("AWS_ROLE_ARN")) {
        (Some(file), Some(role)) => {
            use aws_config::web_identity_token::{StaticConfiguration, WebIdentityTokenCredentialsProvider};
            let session = env.get("AWS_ROLE_SESSION_NAME").unwrap_or("shrinkfs").to_owned();
            let provider = WebIdentityTokenCredentialsProvider::builder()
                .configure(&pc)
                .static_configuration(StaticConfiguration {
                    web_identity_token_file: file.into(),
                    role_arn: role.to_owned(),
                    session_name: session,
                })
                .build();
            let provider = SharedCredentialsProvider::new(provider);
            let source = format!("web identity (AWS_WEB_IDENTITY_TOKEN_FILE {file}, role {role})");
            match first(&provider, SOURCE_TIMEOUT).await {
                Ok(creds) => return found(provider, creds, source),
                Err(e) => return Err(fail(tried, format!("{source}: {}", sdk_message(&e)))),
            }
        }
        (Some(_), None) => tried.push("web identity: AWS_WEB_IDENTITY_TOKEN_FILE set without AWS_ROLE_ARN".into()),
        (None, _) => tried.push("web identity: AWS_WEB_IDENTITY_TOKEN_FILE not set".into()),
    }

    // 4. The container endpoint.
    if env.get("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI").is_some()
        || env.get("AWS_CONTAINER_CREDENTIALS_FULL_URI").is_some()
    {
        let provider = aws_config::ecs::EcsCredentialsProvider::builder().configure(&pc).build();
        let provider = SharedCredentialsProvider::new(provider);
        let source = "the container endpoint (AWS_CONTAINER_CREDENTIALS_*)".to_owned();
        match first(&provider, SOURCE_TIMEOUT).await {
            Ok(creds) => return found(provider, creds, source),
            Err(e) => return Err(fail(tried, format!("{source}: {}", sdk_message(&e)))),
        }
    }
    tried.push("container: AWS_CONTAINER_CREDENTIALS_RELATIVE_URI and _FULL_URI not set".into());

    // 5. Instance metadata: every source above that is configured has returned by now.
    if env.is_true("AWS_EC2_METADATA_DISABLED") {
        return Err(fail(tried, "instance metadata: disabled by AWS_EC2_METADATA_DISABLED".into()));
    }
    let mut client = aws_config::imds::Client::builder()
        .configure(&pc)
        .max_attempts(1)
        .connect_timeout(IMDS_TIMEOUT)
        .read_timeout(IMDS_TIMEOUT);
    if let Some(url) = env.get("AWS_EC2_METADATA_SERVICE_ENDPOINT") {
        client = client.endpoint(url).map_err(|e| {
            fail(tried.clone(), format!("instance metadata: AWS_EC2_METADATA_SERVICE_ENDPOINT {url:?}: {e}"))
        })?;
    }
    let client = client.build();
    let provider = aws_config::imds::credentials::ImdsCredentialsProvider::builder().configure(&pc).imds_client(client);
    let provider = SharedCredentialsProvider::new(provider.build());
    let source = "instance metadata (169.254.169.254; no other source is configured)".to_owned();
    match first(&provider, IMDS_TIMEOUT * 4).await {
        Ok(creds) => found(provider, creds, source),
        Err(e) => Err(fail(tried, format!("instance metadata: {}", sdk_message(&e)))),
    }
}

/// A source's first answer, within `limit`.
async fn first(provider: &SharedCredentialsProvider, limit: Duration) -> Result<Credentials, SdkError> {
    match tokio::time::timeout(limit, provider.provide_credentials()).await {
        Ok(r) => r,
        Err(_) => Err(SdkError::provider_timed_out(limit)),
    }
}

/// An aws-config error and its causes, on one line.
fn sdk_message(e: &SdkError) -> String {
    if let SdkError::ProviderTimedOut(t) = e {
        return format!("no answer within {} s", t.timeout_duration().as_secs());
    }
    crate::error::chain(e)
}

/// object_store's view of an aws-config provider: the last credentials, fetched again shortly
/// before they expire. One fetch at a time; callers meanwhile wait for its result.
pub struct AwsCredentials {
    provider: SharedCredentialsProvider,
    cached: tokio::sync::Mutex<Cached>,
}

struct Cached {
    credential: Arc<AwsCredential>,
    /// When to fetch again (`None`: never, the credentials do not expire).
    refresh_at: Option<SystemTime>,
}

impl AwsCredentials {
    /// A bridge over `provider`, starting with the credentials it gave first.
    pub fn new(provider: SharedCredentialsProvider, first: Credentials) -> Self {
        AwsCredentials { provider, cached: tokio::sync::Mutex::new(Cached::new(&first, SystemTime::now())) }
    }
}

impl Cached {
    fn new(c: &Credentials, now: SystemTime) -> Self {
        let credential = Arc::new(AwsCredential {
            key_id: c.access_key_id().to_owned(),
            secret_key: c.secret_access_key().to_owned(),
            token: c.session_token().map(str::to_owned),
        });
        Cached { credential, refresh_at: refresh_at(c.expiry(), now) }
    }
}

/// When credentials expiring at `expiry` and fetched at `now` are fetched again.
fn refresh_at(expiry: Option<SystemTime>, now: SystemTime) -> Option<SystemTime> {
    let expiry = expiry?;
    let left = expiry.duration_since(now).unwrap_or_default();
    Some(expiry - REFRESH_MARGIN.min(left / 2))
}

impl std::fmt::Debug for AwsCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the credentials themselves.
        write!(f, "AwsCredentials({:?})", self.provider)
    }
}

#[async_trait::async_trait]
impl CredentialProvider for AwsCredentials {
    type Credential = AwsCredential;

    async fn get_credential(&self) -> object_store::Result<Arc<AwsCredential>> {
        let mut cached = self.cached.lock().await;
        let now = SystemTime::now();
        if cached.refresh_at.is_none_or(|t| now < t) {
            return Ok(cached.credential.clone());
        }
        match self.provider.provide_credentials().await {
            Ok(c) => {
                tracing::debug!("AWS credentials refreshed");
                *cached = Cached::new(&c, now);
                Ok(cached.credential.clone())
            }
            Err(e) => Err(object_store::Error::Generic {
                store: "S3",
                source: format!("cannot refresh the AWS credentials: {}", sdk_message(&e)).into(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn env(vars: &[(&str, &str)]) -> AwsEnv {
        AwsEnv::new(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())))
    }

    fn cfg(dir: &Path, vars: &[(&str, &str)]) -> CredentialsConfig {
        CredentialsConfig { home: Some(dir.to_owned()), env: env(vars), ..CredentialsConfig::default() }
    }

    #[tokio::test]
    async fn environment_keys_come_first_and_the_region_falls_back_in_order() {
        let d = tempfile::tempdir().unwrap();
        let c = cfg(d.path(), &[("AWS_ACCESS_KEY_ID", "AKENV"), ("AWS_SECRET_ACCESS_KEY", "s")]);
        let r = resolve(&c, None).await.unwrap();
        assert_eq!((r.source.as_str(), r.region.as_str()), ("the environment", DEFAULT_REGION));
        assert_eq!(r.provider.get_credential().await.unwrap().key_id, "AKENV");
        let c = cfg(
            d.path(),
            &[("AWS_ACCESS_KEY_ID", "A"), ("AWS_SECRET_ACCESS_KEY", "s"), ("AWS_DEFAULT_REGION", "eu-west-3")],
        );
        assert_eq!(resolve(&c, None).await.unwrap().region, "eu-west-3");
        assert_eq!(resolve(&c, Some("ap-south-1")).await.unwrap().region, "ap-south-1");
        let c = cfg(d.path(), &[("AWS_ACCESS_KEY_ID", "A")]);
        let e = resolve(&c, None).await.unwrap_err().to_string();
        assert!(e.contains("AWS_SECRET_ACCESS_KEY is not"), "{e}");
    }

    #[tokio::test]
    async fn profiles_come_from_the_shared_files_under_home() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join(".aws")).unwrap();
        std::fs::write(
            d.path().join(".aws/credentials"),
            "[default]\naws_access_key_id = AKDEF\naws_secret_access_key = s1\n[work]\naws_access_key_id=AKWORK\naws_secret_access_key=s2\naws_session_token=t\n",
        )
        .unwrap();
        std::fs::write(
            d.path().join(".aws/config"),
            "[default]\nregion = eu-west-1\n[profile work]\nregion = ap-south-1\n",
        )
        .unwrap();
        let r = resolve(&cfg(d.path(), &[]), None).await.unwrap();
        assert_eq!(r.region, "eu-west-1");
        assert!(r.source.starts_with("profile \"default\" in "), "{}", r.source);
        assert_eq!(r.provider.get_credential().await.unwrap().key_id, "AKDEF");
        for vars in [&[("AWS_PROFILE", "work")][..], &[("AWS_DEFAULT_PROFILE", "work")]] {
            let r = resolve(&cfg(d.path(), vars), None).await.unwrap();
            let c = r.provider.get_credential().await.unwrap();
            assert_eq!((c.key_id.as_str(), c.token.as_deref(), r.region.as_str()), ("AKWORK", Some("t"), "ap-south-1"));
        }
        // --profile wins over AWS_PROFILE and over keys in the environment.
        let mut c =
            cfg(d.path(), &[("AWS_PROFILE", "nope"), ("AWS_ACCESS_KEY_ID", "E"), ("AWS_SECRET_ACCESS_KEY", "e")]);
        c.profile = Some("work".into());
        assert_eq!(resolve(&c, None).await.unwrap().provider.get_credential().await.unwrap().key_id, "AKWORK");
    }

    #[tokio::test]
    async fn a_named_profile_without_credentials_is_an_error_naming_the_sources() {
        let d = tempfile::tempdir().unwrap();
        let config = d.path().join("config");
        std::fs::write(&config, "[profile empty]\nregion = eu-west-1\n").unwrap();
        let mut c = cfg(d.path(), &[]);
        c.config_file = Some(config.clone());
        c.profile = Some("empty".into());
        let e = resolve(&c, None).await.unwrap_err().to_string();
        assert!(e.contains("environment: not used") && e.contains("has no credentials"), "{e}");
        assert!(!e.contains('\n') && e.contains(config.to_str().unwrap()), "{e}");
        c.profile = Some("missing".into());
        let e = resolve(&c, None).await.unwrap_err().to_string();
        assert!(e.contains("\"missing\"") && e.contains("not found"), "{e}");
        c.credentials_file = Some(d.path().join("nonexistent"));
        let e = resolve(&c, None).await.unwrap_err().to_string();
        assert!(e.contains("--credentials-file") && e.contains("nonexistent"), "{e}");
    }

    #[tokio::test]
    async fn with_nothing_configured_and_metadata_disabled_every_source_is_named() {
        let d = tempfile::tempdir().unwrap();
        let e = resolve(&cfg(d.path(), &[("AWS_EC2_METADATA_DISABLED", "true")]), None).await.unwrap_err();
        let text = e.to_string();
        for s in ["environment", "profile \"default\"", "web identity", "container", "instance metadata: disabled"] {
            assert!(text.contains(s), "{s}: {text}");
        }
        assert_eq!(e.tried.len(), 5, "{text}");
    }

    #[tokio::test]
    async fn a_silent_metadata_service_costs_seconds_not_minutes() {
        // A listener that never answers (the kernel completes the handshakes, nobody reads),
        // standing in for an instance-metadata address that drops packets.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", silent.local_addr().unwrap());
        let d = tempfile::tempdir().unwrap();
        let start = std::time::Instant::now();
        let e = resolve(&cfg(d.path(), &[("AWS_EC2_METADATA_SERVICE_ENDPOINT", &url)]), None).await.unwrap_err();
        assert!(start.elapsed() < IMDS_TIMEOUT * 5, "{:?}", start.elapsed());
        let last = e.tried.last().unwrap();
        assert!(last.starts_with("instance metadata: "), "{e}");
        assert_eq!(e.to_string().lines().count(), 1, "{e}");
    }

    #[test]
    fn credentials_are_refreshed_before_they_expire() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        assert_eq!(refresh_at(None, now), None);
        let hour = now + Duration::from_secs(3600);
        assert_eq!(refresh_at(Some(hour), now), Some(hour - REFRESH_MARGIN));
        // Short-lived: at half the lifetime.
        let minute = now + Duration::from_secs(60);
        assert_eq!(refresh_at(Some(minute), now), Some(now + Duration::from_secs(30)));
        assert_eq!(refresh_at(Some(now), now), Some(now));
    }

    #[tokio::test]
    async fn expired_credentials_are_fetched_again_and_debug_shows_no_secret() {
        let first = Credentials::new("OLD", "oldsecret", None, Some(SystemTime::now()), "test");
        let next = Credentials::new("NEW", "newsecret", None, None, "test");
        let bridge = AwsCredentials::new(SharedCredentialsProvider::new(next), first);
        assert_eq!(bridge.get_credential().await.unwrap().key_id, "NEW");
        let shown = format!("{bridge:?} {:?}", env(&[("AWS_SECRET_ACCESS_KEY", "topsecret")]));
        assert!(!shown.contains("secret\"") && !shown.contains("topsecret"), "{shown}");
    }

    #[test]
    fn home_falls_back_to_the_user_database() {
        assert_eq!(home_dir(&env(&[("HOME", "/h")])), Some(PathBuf::from("/h")));
        let uid = nix::unistd::geteuid();
        let want = nix::unistd::User::from_uid(uid).ok().flatten().map(|u| u.dir);
        assert_eq!(home_dir(&env(&[])), want);
    }
}
