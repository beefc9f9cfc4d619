//! How `bench fs` results are shown: a terminal table, and a self-contained HTML page with SVG
//! plots (throughput and latency per workload per target, stored bytes) drawn with plotters.

use std::fmt::Write as _;

use plotters::prelude::*;

use super::{Report, Row};

/// Current time, UTC, as RFC 3339 (seconds).
pub fn now_utc() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// Workload names in the order they first ran.
fn workloads(r: &Report) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    for row in &r.rows {
        if !seen.contains(&row.workload) {
            seen.push(row.workload.clone());
        }
    }
    seen
}

/// The figure a row is compared by: MB/s where bytes moved, else operations per second.
fn rate(row: &Row) -> f64 {
    row.mb_per_s.unwrap_or(row.ops_per_s)
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.digits$}"))
}

fn mib(v: Option<u64>) -> String {
    v.map_or_else(|| "-".into(), |b| format!("{:.1}", b as f64 / (1 << 20) as f64))
}

/// Each row's rate against the first target's row of the same workload ("1.00x" for itself).
fn versus(r: &Report, row: &Row) -> String {
    let first = r.rows.iter().find(|x| x.workload == row.workload);
    match first {
        Some(f) if rate(f) > 0.0 => format!("{:.2}x", rate(row) / rate(f)),
        _ => "-".into(),
    }
}

const HEADERS: [&str; 13] = [
    "workload",
    "target",
    "MB/s",
    "ops/s",
    "p50 ms",
    "p99 ms",
    "fs CPU s",
    "fs peak MiB",
    "stored MiB",
    "ratio",
    "$/TiB-month",
    "vs first",
    "",
];

fn cells(r: &Report, row: &Row) -> Vec<String> {
    let ratio = match (row.logical_bytes, row.stored_bytes) {
        (Some(l), Some(s)) if s > 0 => format!("{:.2}", l as f64 / s as f64),
        _ => "-".into(),
    };
    vec![
        row.workload.clone(),
        row.target.clone(),
        opt(row.mb_per_s, 1),
        format!("{:.0}", row.ops_per_s),
        format!("{:.3}", row.p50_ms),
        format!("{:.3}", row.p99_ms),
        opt(row.fs_cpu_s, 2),
        opt(row.fs_peak_mib, 0),
        mib(row.stored_bytes),
        ratio,
        opt(row.usd_per_tib_month, 2),
        versus(r, row),
    ]
}

/// The comparison as a plain-text table.
pub fn table(r: &Report) -> String {
    let mut lines: Vec<Vec<String>> = vec![HEADERS[..12].iter().map(|h| h.to_string()).collect()];
    for w in workloads(r) {
        lines.extend(r.rows.iter().filter(|x| x.workload == w).map(|row| cells(r, row)));
    }
    let widths: Vec<usize> = (0..12).map(|c| lines.iter().map(|l| l[c].chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for (i, l) in lines.iter().enumerate() {
        let cols: Vec<String> = l
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(c, (v, w))| if c < 2 { format!("{v:<w$}") } else { format!("{v:>w$}") })
            .collect();
        let _ = writeln!(out, "{}", cols.join("  ").trim_end());
        if i == 0 {
            let _ = writeln!(out, "{}", widths.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>().join("  "));
        }
    }
    for n in &r.notes {
        let _ = writeln!(out, "note: {n}");
    }
    out
}

const COLORS: [RGBColor; 6] = [
    RGBColor(0x4c, 0x72, 0xb0),
    RGBColor(0xdd, 0x84, 0x52),
    RGBColor(0x55, 0xa8, 0x68),
    RGBColor(0xc4, 0x4e, 0x52),
    RGBColor(0x81, 0x72, 0xb3),
    RGBColor(0x93, 0x78, 0x60),
];

/// A bar per target; `back` (drawn lighter, behind) is the p99 of a latency chart.
fn bars(title: &str, unit: &str, items: &[(String, f64, Option<f64>)]) -> anyhow::Result<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (560, 260)).into_drawing_area();
        root.fill(&WHITE)?;
        let top = items.iter().map(|i| i.1.max(i.2.unwrap_or(0.0))).fold(0.0, f64::max).max(1e-9) * 1.15;
        let n = items.len().max(1);
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 15))
            .margin(8)
            .x_label_area_size(28)
            .y_label_area_size(58)
            .build_cartesian_2d((0..n - 1).into_segmented(), 0.0..top)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .light_line_style(WHITE)
            .y_desc(unit)
            .x_label_formatter(&|x| match x {
                SegmentValue::CenterOf(i) => items.get(*i).map(|it| it.0.clone()).unwrap_or_default(),
                _ => String::new(),
            })
            .draw()?;
        let rect = |i: usize, v: f64, style: ShapeStyle| {
            let mut r = Rectangle::new([(SegmentValue::Exact(i), 0.0), (SegmentValue::Exact(i + 1), v)], style);
            r.set_margin(0, 0, 10, 10);
            r
        };
        chart.draw_series(
            items.iter().enumerate().filter_map(|(i, it)| it.2.map(|b| rect(i, b, COLORS[i % 6].mix(0.35).filled()))),
        )?;
        chart.draw_series(items.iter().enumerate().map(|(i, it)| rect(i, it.1, COLORS[i % 6].filled())))?;
        root.present()?;
    }
    Ok(svg)
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// The self-contained HTML report.
pub fn html(r: &Report) -> anyhow::Result<String> {
    let mut h = String::new();
    h.push_str("<!doctype html><html><head><meta charset=\"utf-8\"><title>shrinkfs bench fs</title><style>");
    h.push_str("body{font-family:sans-serif;margin:2em;color:#222}table{border-collapse:collapse;font-size:13px}");
    h.push_str("td,th{border:1px solid #ccc;padding:3px 7px;text-align:right}td:nth-child(-n+2),th{text-align:left}");
    h.push_str(".w{display:flex;flex-wrap:wrap;gap:8px;align-items:flex-start}.w h3{width:100%;margin:1.2em 0 0}");
    h.push_str("</style></head><body><h1>shrinkfs bench fs</h1>");
    let _ = write!(
        h,
        "<p>{} &middot; {} &middot; data: {}</p><p><code>{}</code></p><ul>",
        esc(&r.date),
        esc(&r.host),
        esc(&r.data),
        esc(&r.command)
    );
    for t in &r.targets {
        let _ = write!(
            h,
            "<li><b>{}</b>: {} ({}{}{})</li>",
            esc(&t.label),
            esc(&t.dir.display().to_string()),
            if t.fuse { "FUSE mount" } else { "not a FUSE mount" },
            t.pid.map(|p| format!(", process {p}")).unwrap_or_default(),
            t.backend.as_ref().map(|b| format!(", stored in {}", esc(&b.display().to_string()))).unwrap_or_default()
        );
    }
    h.push_str("</ul>");
    for n in &r.notes {
        let _ = write!(h, "<p><b>Note:</b> {}</p>", esc(n));
    }
    h.push_str("<div class=\"w\">");
    for w in workloads(r) {
        let rows: Vec<&Row> = r.rows.iter().filter(|x| x.workload == w).collect();
        let _ = write!(h, "<h3>{}</h3>", esc(&w));
        let by_bytes = rows.iter().all(|x| x.mb_per_s.is_some());
        let thr: Vec<_> = rows.iter().map(|x| (x.target.clone(), rate(x), None)).collect();
        h.push_str(&bars("throughput (higher is better)", if by_bytes { "MB/s" } else { "ops/s" }, &thr)?);
        let lat: Vec<_> = rows.iter().map(|x| (x.target.clone(), x.p50_ms, Some(x.p99_ms))).collect();
        h.push_str(&bars("latency p50, p99 light (lower is better)", "ms", &lat)?);
        if rows.iter().any(|x| x.stored_bytes.is_some()) {
            let st: Vec<_> = rows
                .iter()
                .map(|x| (x.target.clone(), x.stored_bytes.unwrap_or(0) as f64 / (1 << 20) as f64, None))
                .collect();
            h.push_str(&bars("bytes stored (lower is better)", "MiB", &st)?);
        }
    }
    h.push_str("</div><h2>All figures</h2><table><tr>");
    for c in &HEADERS[..12] {
        let _ = write!(h, "<th>{c}</th>");
    }
    h.push_str("</tr>");
    for w in workloads(r) {
        for row in r.rows.iter().filter(|x| x.workload == w) {
            h.push_str("<tr>");
            for c in cells(r, row) {
                let _ = write!(h, "<td>{}</td>", esc(&c));
            }
            h.push_str("</tr>");
        }
    }
    h.push_str("</table><p>fs CPU s and fs peak MiB are the filesystem process's (none for a plain directory: the kernel does that work). \"vs first\" compares each target's rate with the first row of its workload: the zstd command line on the same bytes for the sequential rows (zstd -1 -T2 writing, zstd -d reading), else the first target (the baseline when one is given). Warm random reads drop the kernel's copy of the file's pages first, so they measure the filesystem's own caches.</p></body></html>\n");
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_rfc3339() {
        let d = now_utc();
        assert_eq!(d.len(), 20, "{d}");
        assert!(d.starts_with("20") && d.ends_with('Z'), "{d}");
    }
}
