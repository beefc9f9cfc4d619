//! The `shrinkfs` binary against a local S3-compatible server (rclone serve s3): `pack`, `unpack`
//! and `inspect` of s3:// objects far larger than one multipart part, an upload that fails being
//! aborted, and where the credentials come from when the environment holds nothing (as under
//! mount(8) and systemd): a profile file, a `credential_process`, the user database's home, and the
//! one-line error when no source gives any.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{S3_KEY, S3Server, s3_server};
use shrinkfs::corpus::{CorpusKind, generate};

/// A temporary directory with a server whose bucket `bkt` is the directory `root/bkt`.
struct Fixture {
    dir: tempfile::TempDir,
    server: S3Server,
}

impl Fixture {
    fn start() -> Option<Self> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("s3root/bkt")).unwrap();
        let Some(server) = s3_server(&dir.path().join("s3root")) else {
            println!("SKIPPED: no rclone for a local S3 server (scripts/setup.sh --test installs it)");
            return None;
        };
        Some(Fixture { dir, server })
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Where the server keeps object `key` of bucket `bkt`.
    fn object(&self, key: &str) -> PathBuf {
        self.dir.path().join("s3root/bkt").join(key)
    }

    /// `shrinkfs ARGS --endpoint-url URL` with the server's keys in the environment.
    fn run(&self, args: &[&str]) -> Output {
        let mut cmd = self.bare(args);
        cmd.envs(self.server.env());
        cmd.output().unwrap()
    }

    /// `shrinkfs ARGS --endpoint-url URL` with an empty environment but for what `env` sets: no
    /// HOME, no PATH, no AWS_* (what a boot-time mount gets). The metadata service is switched off
    /// as a safety belt: nothing here may send a packet to 169.254.169.254.
    fn run_bare(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut cmd = self.bare(args);
        cmd.env_clear().env("AWS_EC2_METADATA_DISABLED", "true").envs(env.iter().copied());
        cmd.output().unwrap()
    }

    fn bare(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(common::bin());
        cmd.args(args).args(["--endpoint-url", &self.server.endpoint]);
        cmd
    }
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn assert_ok(o: &Output, what: &str) {
    assert!(o.status.success(), "{what}: {}", stderr(o));
    assert!(!stderr(o).contains("panicked"), "{what}: {}", stderr(o));
}

#[test]
fn a_100_mib_file_packs_to_s3_and_unpacks_back_byte_identical() {
    let Some(f) = Fixture::start() else { return };
    // Incompressible: the packed object is ~100 MiB too, 13 parts of 8 MiB on the way up.
    let data = generate(CorpusKind::Random, 100 << 20, 7);
    let input = f.path("in.bin");
    std::fs::write(&input, &data).unwrap();
    let o = f.run(&["pack", p(&input), "s3://bkt/dir/big.skf"]);
    assert_ok(&o, "pack to s3");
    assert!(std::fs::metadata(f.object("dir/big.skf")).unwrap().len() > 100 << 20);
    // Object to object: 100 MiB written through the multipart writer again.
    let o = f.run(&["unpack", "s3://bkt/dir/big.skf", "s3://bkt/dir/big.raw"]);
    assert_ok(&o, "unpack s3 to s3");
    assert!(std::fs::read(f.object("dir/big.raw")).unwrap() == data, "the object unpacked to s3 differs");
    let back = f.path("back.bin");
    let o = f.run(&["unpack", "s3://bkt/dir/big.skf", p(&back)]);
    assert_ok(&o, "unpack s3 to a file");
    assert!(std::fs::read(&back).unwrap() == data, "the file unpacked from s3 differs");
    // (How much is in flight at once is checked by src/remote.rs's tests: at most 4 parts.)
    let o = f.run(&["inspect", "--json", "s3://bkt/dir/big.skf"]);
    assert_ok(&o, "inspect");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!((v["format"].as_str(), v["logical_size"].as_u64()), (Some("shrinkfs"), Some(100 << 20)));
    // Small objects (one PUT, no multipart) and empty ones too.
    for (name, len) in [("small", 1000), ("empty", 0)] {
        let input = f.path(name);
        std::fs::write(&input, &data[..len]).unwrap();
        let key = format!("s3://bkt/{name}.skf");
        assert_ok(&f.run(&["pack", p(&input), &key]), name);
        let o = f.run(&["unpack", &key, "-"]);
        assert_ok(&o, name);
        assert_eq!(o.stdout, &data[..len], "{name}");
    }
}

#[test]
fn an_upload_that_fails_halfway_is_aborted_and_nothing_appears_under_the_key() {
    let Some(f) = Fixture::start() else { return };
    let data = generate(CorpusKind::Random, 40 << 20, 3);
    let packed = f.path("p.skf");
    let input = f.path("in");
    std::fs::write(&input, &data).unwrap();
    assert_ok(&f.run(&["pack", p(&input), p(&packed)]), "pack");
    // A flipped byte in a frame at 30 MiB: unpacking fails after three parts went up.
    let mut bad = std::fs::read(&packed).unwrap();
    bad[30 << 20] ^= 0x40;
    std::fs::write(&packed, &bad).unwrap();
    let o = f.run(&["unpack", p(&packed), "s3://bkt/out.raw"]);
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
    assert!(!f.object("out.raw").exists(), "a half-written object is visible");
    let o = f.run(&["inspect", "s3://bkt/out.raw"]);
    assert!(!o.status.success(), "the key exists");
    // A server that goes away: the error says so, exit 3, nothing written.
    let mut f = f;
    f.server.stop();
    let o = f.run(&["pack", "--retry-timeout", "0", p(&input), "s3://bkt/gone.skf"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
}

#[test]
fn s3_options_reach_a_real_server_without_breaking_requests() {
    let Some(f) = Fixture::start() else { return };
    let input = f.path("in");
    std::fs::write(&input, generate(CorpusKind::Logs, 9 << 20, 1)).unwrap();
    let common = ["--storage-class", "STANDARD_IA", "--requester-pays", "--retries", "3", "--connect-timeout", "2"];
    let o = f.run(&[&["pack"][..], &common, &[p(&input), "s3://bkt/opts.skf"]].concat());
    assert_ok(&o, "pack with S3 options");
    let o = f.run(&[&["unpack"][..], &common, &["s3://bkt/opts.skf", "-"]].concat());
    assert_ok(&o, "unpack with S3 options");
    assert!(o.stdout == std::fs::read(&input).unwrap());
}

/// Writes `name` in the fixture's directory and returns its path.
fn write(f: &Fixture, name: &str, text: &str) -> PathBuf {
    let path = f.path(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// Checks a run that logged at info: it succeeded, and said once where its credentials came from
/// (`source`), never showing the keys.
fn assert_one_source_line(o: &Output, source: &str) {
    assert_ok(o, source);
    let err = stderr(o);
    let lines: Vec<_> = err.lines().filter(|l| l.contains("AWS credentials from")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].contains(source), "{err}");
    assert!(!err.contains(S3_KEY.1) && !err.contains(S3_KEY.0), "a key reached the log: {err}");
}

#[test]
fn with_an_empty_environment_credentials_come_from_the_profile_file_named() {
    let Some(f) = Fixture::start() else { return };
    let (id, secret) = S3_KEY;
    let creds = write(
        &f,
        "credentials",
        &format!(
            "[default]\naws_access_key_id = {id}\naws_secret_access_key = {secret}\n[tests]\naws_access_key_id={id}\naws_secret_access_key={secret}\n"
        ),
    );
    let input = write(&f, "in.txt", "hello from a boot-time mount\n");
    // --credentials-file and --profile.
    let o = f
        .run_bare(&["-v", "pack", "--credentials-file", p(&creds), "--profile", "tests", p(&input), "s3://bkt/a"], &[]);
    assert_one_source_line(&o, &format!("profile \"tests\" in {}", p(&creds)));
    // The file's default profile.
    let o = f.run_bare(&["-v", "unpack", "--credentials-file", p(&creds), "s3://bkt/a", "-"], &[]);
    assert_one_source_line(&o, "profile \"default\"");
    assert_eq!(o.stdout, b"hello from a boot-time mount\n");
    // The same through the variables the AWS tools read: AWS_PROFILE, AWS_DEFAULT_PROFILE.
    for var in ["AWS_PROFILE", "AWS_DEFAULT_PROFILE"] {
        let env = [("AWS_SHARED_CREDENTIALS_FILE", p(&creds)), (var, "tests")];
        let o = f.run_bare(&["-v", "inspect", "s3://bkt/a"], &env);
        assert_one_source_line(&o, "profile \"tests\"");
    }
    // Keys in the environment still come first, unless --profile names another source.
    let env = [("AWS_ACCESS_KEY_ID", id), ("AWS_SECRET_ACCESS_KEY", secret)];
    assert_one_source_line(&f.run_bare(&["-v", "inspect", "s3://bkt/a"], &env), "the environment");
}

#[test]
fn a_credential_process_profile_runs_its_program() {
    let Some(f) = Fixture::start() else { return };
    let marker = f.path("ran");
    // PATH is empty for it, as under mount(8): builtins only.
    let script = write(
        &f,
        "creds.sh",
        &format!(
            "#!/bin/sh\n: > '{}'\necho '{{\"Version\": 1, \"AccessKeyId\": \"{}\", \"SecretAccessKey\": \"{}\"}}'\n",
            p(&marker),
            S3_KEY.0,
            S3_KEY.1
        ),
    );
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let config =
        write(&f, "config", &format!("[profile proc]\nregion = us-east-1\ncredential_process = {}\n", p(&script)));
    let input = write(&f, "in.txt", "made with keys from a program\n");
    let o =
        f.run_bare(&["-v", "pack", "--aws-config-file", p(&config), "--profile", "proc", p(&input), "s3://bkt/c"], &[]);
    assert_one_source_line(&o, "profile \"proc\"");
    assert!(marker.exists(), "the credential_process program was not run");
    assert!(f.object("c").exists());
}

#[test]
fn a_profile_without_credentials_is_one_line_naming_the_sources_and_exits_2_at_once() {
    let Some(f) = Fixture::start() else { return };
    let config = write(&f, "config", "[profile empty]\nregion = eu-west-1\n");
    let input = write(&f, "in.txt", "x");
    let start = Instant::now();
    let o = f.run_bare(&["pack", "--aws-config-file", p(&config), "--profile", "empty", p(&input), "s3://bkt/x"], &[]);
    let took = start.elapsed();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.starts_with("shrinkfs: error: no usable AWS credentials") && err.trim_end().lines().count() == 1,
        "{err}"
    );
    for s in ["environment: not used, --profile given", "profile \"empty\"", "has no credentials", "--profile NAME"] {
        assert!(err.contains(s), "{s}: {err}");
    }
    assert!(took < Duration::from_secs(5), "took {took:?}");
    assert!(!f.object("x").exists());
}

#[test]
fn without_home_the_user_databases_home_is_searched_and_every_source_is_named() {
    let Some(f) = Fixture::start() else { return };
    // SAFETY: getpwuid of our own uid; the entry is read at once.
    let home = unsafe {
        let pw = libc::getpwuid(libc::geteuid());
        assert!(!pw.is_null(), "no user database entry for this uid");
        std::ffi::CStr::from_ptr((*pw).pw_dir).to_string_lossy().into_owned()
    };
    let aws = Path::new(&home).join(".aws");
    if aws.exists() {
        println!("SKIPPED: {} exists on this machine; the test needs a home without AWS files", aws.display());
        return;
    }
    let input = write(&f, "in.txt", "x");
    let start = Instant::now();
    let o = f.run_bare(&["pack", p(&input), "s3://bkt/x"], &[]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.trim_end().lines().count() == 1, "{err}");
    // The files it looked for are under the home of the user database (HOME is not set).
    assert!(err.contains(&format!("{}/config", aws.display())), "{err}");
    assert!(err.contains(&format!("{}/credentials", aws.display())), "{err}");
    for s in ["environment: AWS_ACCESS_KEY_ID not set", "web identity", "container", "instance metadata: disabled"] {
        assert!(err.contains(s), "{s}: {err}");
    }
    assert!(start.elapsed() < Duration::from_secs(5));
}

#[test]
fn every_s3_setting_is_an_fstab_option_of_the_mount_helper() {
    use clap::Parser;
    use shrinkfs::fstab::{Helper, translate};
    let dir = tempfile::tempdir().unwrap();
    let (creds, config, key) = (dir.path().join("credentials"), dir.path().join("config"), dir.path().join("ssec"));
    std::fs::write(&creds, "").unwrap();
    std::fs::write(&config, "").unwrap();
    std::fs::write(&key, "MDEyMzQ1Njc4OTAxMjM0NTY3ODkwMTIzNDU2Nzg5MDE=\n").unwrap();
    let options = format!(
        "_netdev,profile=prod,credentials_file={},aws-config-file={},storage-class=INTELLIGENT_TIERING,sse-c-key-file={},requester_pays,retries=7,virtual-hosted-style,region=eu-west-1,env.AWS_EC2_METADATA_DISABLED=true",
        p(&creds),
        p(&config),
        p(&key)
    );
    let args: Vec<String> = ["s3://b/p", "/mnt/x", "-o", &options].map(str::to_owned).into();
    let (helper, env) = translate(&args).unwrap();
    assert_eq!(env, [("AWS_EC2_METADATA_DISABLED".to_string(), "true".to_string())]);
    let Helper::Mount(argv) = helper else { panic!("{helper:?}") };
    let cli = shrinkfs::cli::Cli::try_parse_from(&argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    let shrinkfs::cli::Command::Mount(m) = cli.command else { panic!("not a mount: {argv:?}") };
    let s3 = &m.s3;
    assert_eq!((s3.profile.as_deref(), s3.region.as_deref()), (Some("prod"), Some("eu-west-1")));
    assert_eq!((s3.credentials_file.as_deref(), s3.aws_config_file.as_deref()), (Some(&*creds), Some(&*config)));
    assert_eq!(s3.storage_class.as_deref(), Some("INTELLIGENT_TIERING"));
    assert_eq!((s3.requester_pays, s3.retries, s3.virtual_hosted_style), (true, Some(7), true));
    let o = s3.options().unwrap();
    assert!(matches!(o.encryption, shrinkfs_fuse::store::Encryption::Customer(_)));
}
