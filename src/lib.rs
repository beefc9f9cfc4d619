//! shrinkfs: the command-line front end and the pieces tests and benches reach (pack/unpack
//! pipelines, corpora, sizes, exit codes).

pub mod bench;
pub mod benchfs;
pub mod cli;
pub mod corpus;
pub mod daemon;
pub mod exit;
pub mod exporter;
pub mod fileio;
pub mod fstab;
pub mod gpuenv;
pub mod inspect;
pub mod keycheck;
pub mod logging;
pub mod manual;
pub mod mount;
pub mod pack;
pub mod pack_io;
pub mod range;
pub mod remote;
pub mod runrecord;
pub mod settings;
pub mod signals;
pub mod size;
pub mod stats;
pub mod values;

use std::io::Write;

use anyhow::Context;

use crate::cli::{Cli, Command};
use crate::fileio::{Input, Output, open_input, progress};

/// Streams `input` through `f` into `output` with a progress bar; the output appears only if `f`
/// succeeds (`pack` and `unpack`).
fn transform(
    input: &std::path::Path,
    output: &std::path::Path,
    s3: &cli::S3Args,
    what: &str,
    f: impl FnOnce(&mut Input, &mut Output, &(dyn Fn(u64) + Sync)) -> anyhow::Result<pack::Totals>,
) -> anyhow::Result<()> {
    let mut source = open_input(input, s3)?;
    let mut out = Output::create(output, s3)?;
    let bar = progress(source.len, what);
    let t = f(&mut source, &mut out, &|n| bar.inc(n)).with_context(|| format!("cannot {what} {}", input.display()))?;
    out.commit()?;
    bar.finish_and_clear();
    tracing::info!(raw = t.raw, stored = t.stored, frames = t.frames, "{what} done");
    Ok(())
}

/// Runs one parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Pack(a) => {
            let config = a.codec.to_config()?;
            // A file's size says how much there is to compress (not known for stdin or a URL).
            let expected = std::fs::metadata(&a.input).ok().filter(|m| m.is_file()).map(|m| m.len());
            let dispatcher = a.codec.dispatcher(expected, None)?;
            transform(&a.input, &a.output, &a.s3, "pack", |input, out, progress| {
                let source = pack_io::Source::of(input, config.frame_size as usize);
                let sink = pack_io::Sink::of(out);
                pack::pack_stream(source, sink, &config, &dispatcher, progress)
            })
        }
        Command::Unpack(a) if a.range.is_some() => {
            let key = a.key.load()?;
            let dicts: Vec<_> = cli::load_dict(&a.dict)?.into_iter().collect();
            let want = range::RangeRead {
                range: a.range.clone().expect("matched"),
                key: key.as_ref(),
                dicts: &dicts,
                allow_unsealed: a.allow_unsealed,
            };
            let bytes = inspect::with_ranges(&a.input, &a.s3, |len, read_at| {
                range::read_range(len, read_at, &want, &mut |frames, stored| {
                    tracing::debug!(?frames, ?stored, "fetched frames");
                })
            })
            .with_context(|| format!("cannot unpack {}", a.input.display()))?;
            let mut out = Output::create(&a.output, &a.s3)?;
            out.write_all(&bytes).context("cannot write output")?;
            out.commit()
        }
        Command::Unpack(a) => {
            let key = a.key.load()?;
            let dicts = cli::load_dict(&a.dict)?.into_iter().collect();
            transform(&a.input, &a.output, &a.s3, "unpack", |input, out, progress| {
                pack::unpack_stream(&mut input.reader, out, key, dicts, a.allow_unsealed, progress)
            })
        }
        Command::Inspect(a) => {
            let report =
                inspect::inspect(&a.file, &a.s3).with_context(|| format!("cannot inspect {}", a.file.display()))?;
            let text = if a.json {
                serde_json::to_string_pretty(&report).expect("report serializes") + "\n"
            } else {
                report.to_text(&a.file.display().to_string())
            };
            std::io::stdout().write_all(text.as_bytes()).context("cannot write to stdout")?;
            Ok(())
        }
        Command::Bench(cli::BenchCommand::Codecs(a)) => {
            if (a.small_count as u64).saturating_mul(a.small_size) > cli::MAX_DATA {
                anyhow::bail!(exit::UsageError(format!(
                    "--small-count times --small-size must be at most {}",
                    size::human(cli::MAX_DATA)
                )));
            }
            bench::run(a)
        }
        Command::Bench(cli::BenchCommand::Fs(a)) => benchfs::run(*a),
        Command::Mount(a) => mount::run_mount(*a),
        Command::Unmount(a) => mount::run_unmount(a),
        Command::Cleanup(a) => mount::run_cleanup(a),
        Command::Stats(a) => stats::run(a),
        Command::PackageFiles(a) => manual::write_package_files(&a.dir),
        Command::Corpus(a) => {
            let size = usize::try_from(a.size).context("size too large for this machine")?;
            let data = corpus::generate(a.kind, size, a.seed);
            let mut out = Output::create(&a.output, &cli::S3Args::default())?;
            out.write_all(&data).context("cannot write corpus")?;
            out.commit()
        }
    }
}
