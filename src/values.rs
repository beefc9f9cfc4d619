//! Value parsers for command-line flags: every size, duration, count, ratio, URL and name a flag
//! takes is checked here against its accepted range, so a bad value is a usage error when the
//! arguments are parsed (exit 2, one line naming the flag and the range), never a panic later.
//!
//! clap prefixes each message with "invalid value 'V' for '--flag <V>'", so the messages here say
//! only what is accepted.

use std::time::Duration;

use crate::size::parse_size;

/// A size (`64K`, `1M`, `1048576`) between `min` and `max` bytes.
pub fn size_in(min: u64, max: u64) -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync + 'static {
    move |s| {
        let range = || {
            format!(
                "must be a size from {} to {} (a number of bytes, or one followed by K, M, G, T or P)",
                exact(min),
                exact(max)
            )
        };
        let n = parse_size(s).map_err(|e| format!("{e}: {}", range()))?;
        if !(min..=max).contains(&n) {
            return Err(range());
        }
        Ok(n)
    }
}

/// A path, empty allowed (`--config ''` reads no config file).
pub fn path_or_empty(s: &str) -> Result<std::path::PathBuf, String> {
    Ok(s.into())
}

/// A whole number from `min` to `max`, as the flag's type.
pub fn int_in<T>(min: i64, max: i64) -> impl Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static
where
    T: TryFrom<i64>,
{
    move |s| {
        let bad = || format!("must be a whole number from {min} to {max}");
        let n: i64 = s.trim().parse().map_err(|_| bad())?;
        if !(min..=max).contains(&n) {
            return Err(bad());
        }
        T::try_from(n).map_err(|_| bad())
    }
}

/// A codec name (`--codec`): the names of the codec table, each listed in the help with its
/// line there.
pub fn codec() -> impl clap::builder::TypedValueParser<Value = shrinkfs_codec::CodecId> {
    use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
    let names = shrinkfs_codec::CodecId::ALL.iter().map(|c| PossibleValue::new(c.name()).help(c.descriptor().help));
    PossibleValuesParser::new(names).try_map(|name| name.parse::<shrinkfs_codec::CodecId>())
}

/// A byte range given as `START:LEN` (each a size, like `1M:64K`).
pub fn byte_range(s: &str) -> Result<std::ops::Range<u64>, String> {
    let (start, len) = s.split_once(':').ok_or("expected START:LEN, e.g. 1M:64K")?;
    let size = size_in(0, u64::MAX / 2);
    let (start, len) = (size(start)?, size(len)?);
    Ok(start..start + len)
}

/// Any 64-bit whole number (a seed).
pub fn any_u64(s: &str) -> Result<u64, String> {
    s.trim().parse().map_err(|_| format!("must be a whole number from 0 to {}", u64::MAX))
}

/// A socket address to listen on, like `127.0.0.1:9464` or `[::1]:9464`.
pub fn listen_addr(s: &str) -> Result<std::net::SocketAddr, String> {
    s.parse().map_err(|_| "must be an address and port like 127.0.0.1:9464 or [::1]:9464".into())
}

/// A finite decimal number from `min` to `max` (no `inf`, no `nan`).
pub fn number_in(min: f64, max: f64) -> impl Fn(&str) -> Result<f64, String> + Clone + Send + Sync + 'static {
    move |s| {
        let x: f64 = s.trim().parse().map_err(|_| format!("must be a number from {min} to {max}"))?;
        if !x.is_finite() || !(min..=max).contains(&x) {
            return Err(format!("must be a number from {min} to {max}"));
        }
        Ok(x)
    }
}

/// A number of seconds (decimals allowed) from `min` to `max`.
pub fn seconds_in(min: f64, max: f64) -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync + 'static {
    move |s| {
        let bad = || format!("must be a number of seconds from {min} to {max}");
        let x: f64 = s.trim().trim_end_matches('s').parse().map_err(|_| bad())?;
        if !x.is_finite() || !(min..=max).contains(&x) {
            return Err(bad());
        }
        // Finite and within a small range: the conversion cannot fail.
        Duration::try_from_secs_f64(x).map_err(|_| bad())
    }
}

/// A time to trust cached metadata: seconds from 0 to `max`, or `indefinite` (for as long as the
/// mount lasts: `Duration::MAX`).
pub fn ttl(max: f64) -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync + 'static {
    let seconds = seconds_in(0.0, max);
    move |s| match s.trim() {
        "indefinite" => Ok(Duration::MAX),
        other => seconds(other).map_err(|e| format!("{e}, or indefinite")),
    }
}

/// An S3 endpoint: `http://` or `https://`, a host, an optional port and path; nothing else.
/// (object_store takes any string here and panics at the first signed request on one that is
/// not a URL.)
pub fn endpoint_url(s: &str) -> Result<String, String> {
    shrinkfs_fuse::store::check_endpoint_url(s).map_err(|e| e.to_string())?;
    Ok(s.to_owned())
}

/// An AWS region name: lowercase letters, digits and dashes (`us-east-1`, `eu-central-2`).
pub fn region(s: &str) -> Result<String, String> {
    let ok = (1..=64).contains(&s.len()) && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !ok {
        return Err("must be a region name like us-east-1 (lowercase letters, digits and dashes)".into());
    }
    Ok(s.to_owned())
}

/// An AWS profile name: no spaces or brackets (it names a `[profile NAME]` section).
pub fn profile_name(s: &str) -> Result<String, String> {
    let ok = (1..=128).contains(&s.len()) && s.chars().all(|c| c.is_ascii_graphic() && c != '[' && c != ']');
    if !ok {
        return Err("must be a profile name like prod (no spaces or brackets)".into());
    }
    Ok(s.to_owned())
}

/// A file that exists (credentials, config and key files named on the command line).
pub fn existing_file(s: &str) -> Result<std::path::PathBuf, String> {
    if s.is_empty() {
        return Err("must be the path of a file".into());
    }
    match std::fs::metadata(s) {
        Ok(m) if m.is_file() => Ok(s.into()),
        Ok(_) => Err("is not a regular file".into()),
        Err(e) => Err(format!("cannot be read: {e}")),
    }
}

/// An S3 storage class: uppercase letters, digits and underscores (`STANDARD_IA`,
/// `INTELLIGENT_TIERING`; S3-compatible servers may name their own).
pub fn storage_class(s: &str) -> Result<String, String> {
    let ok = (1..=64).contains(&s.len()) && s.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
    if !ok {
        return Err(
            "must be a storage class like STANDARD_IA or INTELLIGENT_TIERING (uppercase letters, digits, underscores)"
                .into(),
        );
    }
    Ok(s.to_owned())
}

/// A KMS key id, alias or ARN: no spaces, at most 2048 characters.
pub fn kms_key_id(s: &str) -> Result<String, String> {
    if s.is_empty() || s.len() > 2048 || !s.chars().all(|c| c.is_ascii_graphic()) {
        return Err("must be a KMS key id, alias/NAME or key ARN (no spaces)".into());
    }
    Ok(s.to_owned())
}

/// A mount SOURCE: a directory path, `s3://bucket[/prefix]` or `memory://`.
pub fn source(s: &str) -> Result<String, String> {
    if s.is_empty() {
        return Err("must be a directory, s3://bucket[/prefix] or memory://".into());
    }
    shrinkfs_fuse::store::Source::parse(s).map_err(|e| e.to_string())?;
    Ok(s.to_owned())
}

/// `LABEL=DIR` or `DIR` for `bench fs`, not empty.
pub fn labelled_dir(s: &str) -> Result<(String, std::path::PathBuf), String> {
    if s.is_empty() {
        return Err("expected LABEL=DIR or DIR".into());
    }
    crate::benchfs::labelled(s)
}

/// `n` with the largest binary unit that divides it exactly: 4K, 64M, 16G.
fn exact(n: u64) -> String {
    for (shift, unit) in [(50, "P"), (40, "T"), (30, "G"), (20, "M"), (10, "K")] {
        if n >= 1 << shift && n.is_multiple_of(1 << shift) {
            return format!("{}{unit}", n >> shift);
        }
    }
    n.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttls_are_seconds_in_range_or_indefinite() {
        let p = ttl(86_400.0);
        assert_eq!(p("2.5"), Ok(Duration::from_millis(2500)));
        assert_eq!(p("0"), Ok(Duration::ZERO));
        assert_eq!(p("indefinite"), Ok(Duration::MAX));
        for bad in ["-1", "86401", "forever", ""] {
            let e = p(bad).unwrap_err();
            assert!(e.contains("0 to 86400") && e.contains("indefinite"), "{bad}: {e}");
        }
    }

    #[test]
    fn sizes_outside_the_range_are_refused_with_the_range() {
        let p = size_in(4 << 10, 64 << 20);
        assert_eq!(p("1M"), Ok(1 << 20));
        let e = p("1K").unwrap_err();
        assert!(e.contains("4K to 64M"), "{e}");
        for bad in ["", "-1", "1e300", "inf", "nan", "99999999999999999999999", "16777216T"] {
            assert!(p(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn seconds_must_be_finite_and_in_range() {
        let p = seconds_in(0.0, 600.0);
        assert_eq!(p("60"), Ok(Duration::from_secs(60)));
        assert_eq!(p("0.5"), Ok(Duration::from_millis(500)));
        assert_eq!(p("5s"), Ok(Duration::from_secs(5)));
        for bad in ["", "-1", "inf", "-inf", "nan", "NaN", "1e300", "601", "x"] {
            let e = p(bad).unwrap_err();
            assert!(e.contains("0 to 600"), "{bad}: {e}");
        }
        let n = number_in(0.0, 0.99);
        assert_eq!(n("0.05"), Ok(0.05));
        assert!(n("1").is_err() && n("nan").is_err() && n("-0.1").is_err());
    }

    #[test]
    fn endpoints_must_be_http_urls_with_a_host() {
        for good in ["http://127.0.0.1:9000", "https://s3.example.com", "http://minio:9000/", "http://[::1]:9000"] {
            assert_eq!(endpoint_url(good).as_deref(), Ok(good), "{good}");
        }
        for bad in [
            "",
            "not a url",
            "127.0.0.1:9000",
            "ftp://host",
            "http://",
            "http://:9000",
            "http://host:0",
            "http://host:99999",
            "http://host:x",
            "http://user:pw@host",
            "http://ho st",
            "http://host?x=1",
            "http://[zz]:1",
            "http://a..b",
        ] {
            assert!(endpoint_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn regions_and_sources_are_checked() {
        assert!(region("eu-west-1").is_ok());
        assert!(region("").is_err() && region("EU WEST").is_err());
        assert!(source("memory://").is_ok() && source("/data").is_ok() && source("s3://b/p").is_ok());
        assert!(source("").is_err() && source("gs://b").is_err() && source("s3://").is_err());
        let threads = int_in::<usize>(1, 1024);
        assert_eq!(threads("16"), Ok(16));
        for bad in ["0", "-1", "1025", "1e300", "99999999999999999999999", "", "nan"] {
            assert_eq!(threads(bad).unwrap_err(), "must be a whole number from 1 to 1024", "{bad}");
        }
        assert!(listen_addr("127.0.0.1:9464").is_ok() && listen_addr("9464").is_err());
        assert!(labelled_dir("").is_err() && labelled_dir("=x").is_err() && labelled_dir("a=/x").is_ok());
    }

    #[test]
    fn s3_option_values_are_checked() {
        assert_eq!(profile_name("prod-eu.1").as_deref(), Ok("prod-eu.1"));
        for bad in ["", "a b", "[x]", "x\n", &"p".repeat(129)] {
            assert!(profile_name(bad).unwrap_err().contains("profile name"), "{bad:?}");
        }
        assert_eq!(storage_class("STANDARD_IA").as_deref(), Ok("STANDARD_IA"));
        for bad in ["", "standard", "STANDARD IA", "GLACIER-IR", &"A".repeat(65)] {
            assert!(storage_class(bad).unwrap_err().contains("storage class"), "{bad:?}");
        }
        assert!(kms_key_id("arn:aws:kms:eu-west-1:111122223333:key/1234abcd").is_ok() && kms_key_id("alias/x").is_ok());
        assert!(kms_key_id("").is_err() && kms_key_id("a b").is_err());
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("f");
        std::fs::write(&f, "x").unwrap();
        assert_eq!(existing_file(f.to_str().unwrap()), Ok(f.clone()));
        assert!(
            existing_file("").is_err() && existing_file(d.path().to_str().unwrap()).unwrap_err().contains("regular")
        );
        assert!(existing_file("/nonexistent/f").unwrap_err().contains("cannot be read"));
    }
}
