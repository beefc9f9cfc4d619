//! Human sizes on the command line: `4096`, `64K`, `1MiB`, `2G` (binary multiples).

/// Parses a size with an optional K/M/G/T suffix (binary multiples; `KiB`/`KB`/`k` also accepted).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num.parse().map_err(|_| format!("{s:?} is not a size (try 1048576, 64K or 1MiB)"))?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(format!("{s:?} has an unknown unit (use K, M, G or T)")),
    };
    n.checked_mul(1u64 << shift).ok_or_else(|| format!("{s:?} is too large"))
}

/// Formats bytes with a binary unit, one decimal.
pub fn human(bytes: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 { format!("{bytes} B") } else { format!("{v:.1} {}", units[u]) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_units() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64K"), Ok(65536));
        assert_eq!(parse_size("1MiB"), Ok(1 << 20));
        assert_eq!(parse_size("2g"), Ok(2 << 30));
        assert!(parse_size("1X").is_err());
        assert!(parse_size("").is_err());
        assert!(parse_size("-1").is_err());
    }
}
