//! The two text formats a scraper may ask for: OpenMetrics 1.0 (what `prometheus_client`
//! writes) and Prometheus text 0.0.4, derived from it line by line; and which one an `Accept`
//! header asks for.

use std::collections::HashMap;

/// A text exposition format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `application/openmetrics-text; version=1.0.0`.
    OpenMetrics,
    /// `text/plain; version=0.0.4`.
    Prometheus,
}

impl Format {
    /// The `Content-Type` of a body in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::Prometheus => "text/plain; version=0.0.4; charset=utf-8",
        }
    }

    /// The format an `Accept` header asks for: OpenMetrics when it names
    /// `application/openmetrics-text` with a non-zero quality at least that of any plain-text
    /// entry; Prometheus text otherwise (also without a header).
    pub fn negotiate(accept: Option<&str>) -> Format {
        let (mut om, mut plain) = (None::<f32>, None::<f32>);
        for entry in accept.unwrap_or_default().split(',') {
            let mut parts = entry.split(';').map(str::trim);
            let media = parts.next().unwrap_or_default().to_ascii_lowercase();
            let q = parts.filter_map(|p| p.strip_prefix("q=")).find_map(|q| q.parse::<f32>().ok()).unwrap_or(1.0);
            let slot = match media.as_str() {
                "application/openmetrics-text" => &mut om,
                "text/plain" | "text/*" | "*/*" => &mut plain,
                _ => continue,
            };
            *slot = Some(slot.map_or(q, |s| s.max(q)));
        }
        match om {
            Some(q) if q > 0.0 && q >= plain.unwrap_or(0.0) => Format::OpenMetrics,
            _ => Format::Prometheus,
        }
    }
}

/// Rewrites an OpenMetrics body as Prometheus text 0.0.4: a counter family `x` has samples
/// `x_total`, so its HELP and TYPE name `x_total` (else Prometheus's parser sees an empty `x` and
/// an untyped `x_total`); an info family `x` becomes gauge `x_info`; UNIT and EOF lines go.
pub fn to_prometheus(open_metrics: &str) -> String {
    let types: HashMap<&str, &str> =
        open_metrics.lines().filter_map(|l| l.strip_prefix("# TYPE ")).filter_map(|l| l.split_once(' ')).collect();
    let mut out = String::with_capacity(open_metrics.len());
    for line in open_metrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let meta =
            line.strip_prefix("# HELP ").map(|r| ("HELP", r)).or(line.strip_prefix("# TYPE ").map(|r| ("TYPE", r)));
        match meta {
            Some((what, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                let (name, tail) = match (types.get(name).copied(), what) {
                    (Some("counter"), _) => (format!("{name}_total"), tail),
                    (Some("info"), "TYPE") => (format!("{name}_info"), "gauge"),
                    (Some("info"), _) => (format!("{name}_info"), tail),
                    _ => (name.to_owned(), tail),
                };
                out.push_str(&format!("# {what} {name} {tail}\n"));
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

/// Sum of the values of the samples whose line starts with `prefix` (comments skipped).
pub fn sum(body: &str, prefix: &str) -> f64 {
    body.lines()
        .filter(|l| !l.starts_with('#') && l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_headers_choose_the_format() {
        let open = "application/openmetrics-text; version=1.0.0";
        assert_eq!(Format::negotiate(None), Format::Prometheus);
        assert_eq!(Format::negotiate(Some("text/plain")), Format::Prometheus);
        assert_eq!(Format::negotiate(Some("*/*")), Format::Prometheus);
        assert_eq!(Format::negotiate(Some(open)), Format::OpenMetrics);
        // What Prometheus itself sends.
        let prom = "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,\
                    text/plain;version=0.0.4;q=0.3,*/*;q=0.2";
        assert_eq!(Format::negotiate(Some(prom)), Format::OpenMetrics);
        assert_eq!(Format::negotiate(Some("application/openmetrics-text;q=0.1, text/plain")), Format::Prometheus);
        assert_eq!(Format::negotiate(Some("application/openmetrics-text;q=0")), Format::Prometheus);
    }

    #[test]
    fn counters_and_infos_are_renamed_and_open_metrics_only_lines_go() {
        let om = "# HELP a Things.\n# TYPE a counter\na_total{k=\"v\"} 3\n# HELP g Level.\n# TYPE g gauge\ng 1\n\
                  # HELP b Build.\n# TYPE b info\nb_info{version=\"1\"} 1\n# HELP h Time.\n# TYPE h histogram\n\
                  # UNIT h seconds\nh_sum 0.5\nh_count 1\nh_bucket{le=\"+Inf\"} 1\n# EOF\n";
        let p = to_prometheus(om);
        assert_eq!(
            p,
            "# HELP a_total Things.\n# TYPE a_total counter\na_total{k=\"v\"} 3\n# HELP g Level.\n# TYPE g gauge\ng 1\n\
             # HELP b_info Build.\n# TYPE b_info gauge\nb_info{version=\"1\"} 1\n# HELP h Time.\n# TYPE h histogram\n\
             h_sum 0.5\nh_count 1\nh_bucket{le=\"+Inf\"} 1\n"
        );
        assert_eq!(sum(&p, "a_total"), 3.0);
        assert_eq!(sum(&p, "h_"), 2.5);
    }
}
