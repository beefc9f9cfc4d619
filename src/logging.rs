//! Installs the tracing subscriber (only the binary does this; libraries only emit) and the
//! controls a running mount has over it: one line per event, colour only on a terminal, syslog
//! priorities when the output is the journal, SIGUSR2 toggling debug, SIGHUP reopening a file.

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::{Format, Full, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::{EnvFilter, Registry, prelude::*, reload};

/// Whether standard error is the systemd journal (then each line starts with its priority).
static JOURNAL: AtomicBool = AtomicBool::new(false);
/// Whether debug logging was switched on by SIGUSR2.
static DEBUG: AtomicBool = AtomicBool::new(false);
/// The filter in force, reloadable.
static FILTER: OnceLock<(reload::Handle<EnvFilter, Registry>, String)> = OnceLock::new();

/// fuser's own messages below error are about requests it answers for us (an unimplemented
/// operation, a failed unmount of what is unmounted already): expected, so kept out of the log.
const QUIET: &str = "fuser=error";

/// The AWS SDK's crates log the credentials they load (the key id; the secret redacted) at info
/// and below, and a failed source at warn: whatever `RUST_LOG` says, they log errors only, so no
/// key reaches the log and a failure is told once. shrinkfs itself says at info which source gave
/// the credentials, and names every source it tried when none did.
const AWS_QUIET: &[&str] = &[
    "aws_config=error",
    "aws_runtime=error",
    "aws_credential_types=error",
    "aws_smithy_runtime=error",
    "aws_smithy_runtime_api=error",
    "aws_sdk_sts=error",
    "aws_sdk_sso=error",
    "aws_sdk_ssooidc=error",
];

/// The filter `spec` describes, with the AWS crates held at error ([`AWS_QUIET`]).
fn filter(spec: &str) -> Result<EnvFilter, tracing_subscriber::filter::ParseError> {
    let mut f = EnvFilter::try_new(spec)?;
    for d in AWS_QUIET {
        f = f.add_directive(d.parse()?);
    }
    Ok(f)
}

/// Logs to stderr at warn (or more with `-v`), overridable with `RUST_LOG`.
pub fn init(verbose: u8) {
    let level = match verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let spec = std::env::var("RUST_LOG").unwrap_or_else(|_| format!("{level},{QUIET}"));
    let filter =
        filter(&spec).or_else(|_| filter(&format!("{level},{QUIET}"))).unwrap_or_else(|_| EnvFilter::new(level));
    let (filter, handle) = reload::Layer::new(filter);
    JOURNAL.store(stderr_is_journal(), Ordering::Relaxed);
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::stderr().is_terminal())
        .event_format(Prefixed(tracing_subscriber::fmt::format()))
        .with_writer(|| OneLine(std::io::stderr()));
    if tracing_subscriber::registry().with(filter).with(fmt).try_init().is_ok() {
        let _ = FILTER.set((handle, spec));
    }
}

/// Whether fd 2 is the stream systemd set up for the journal (`JOURNAL_STREAM` is its
/// device:inode).
fn stderr_is_journal() -> bool {
    let Some(want) = std::env::var_os("JOURNAL_STREAM") else { return false };
    // SAFETY: fstat on fd 2 into a zeroed struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(2, &mut st) } != 0 {
        return false;
    }
    want.to_string_lossy() == format!("{}:{}", st.st_dev, st.st_ino)
}

/// Sends standard error to the journal's stream socket (a `--daemon` without `--log-file` on a
/// systemd host: its log would otherwise be lost). Returns false where there is no journal.
pub fn to_journal() -> bool {
    let Ok(mut sock) = std::os::unix::net::UnixStream::connect("/run/systemd/journal/stdout") else { return false };
    // The stream protocol: identifier, unit, default priority, level prefixes, then three
    // forwarding switches; each on a line.
    if sock.write_all(b"shrinkfs\n\n6\n1\n0\n0\n0\n").is_err() {
        return false;
    }
    use std::os::fd::AsRawFd;
    // SAFETY: dup2 of a connected socket onto stderr.
    if unsafe { libc::dup2(sock.as_raw_fd(), 2) } < 0 {
        return false;
    }
    JOURNAL.store(true, Ordering::Relaxed);
    true
}

/// Reopens the log file onto standard error (SIGHUP, after logrotate moved it away).
pub fn reopen(path: &Path) -> std::io::Result<()> {
    let f = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
    use std::os::fd::AsRawFd;
    // SAFETY: dup2 of a valid open file onto stderr.
    if unsafe { libc::dup2(f.as_raw_fd(), 2) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Switches debug logging on or off (SIGUSR2); returns whether it is now on.
pub fn toggle_debug() -> bool {
    let on = !DEBUG.fetch_xor(true, Ordering::Relaxed);
    if let Some((handle, spec)) = FILTER.get() {
        let spec = if on { format!("debug,{QUIET}") } else { spec.clone() };
        if let Ok(f) = filter(&spec) {
            let _ = handle.reload(f);
        }
    }
    on
}

/// The default format, without the time when the journal adds its own and with the event's
/// syslog priority in front (`<4>` for a warning) for the journal to file it by.
struct Prefixed(Format<Full>);

impl<S, N> FormatEvent<S, N> for Prefixed
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut w: Writer<'_>, event: &Event<'_>) -> std::fmt::Result {
        if JOURNAL.load(Ordering::Relaxed) {
            let prio = match *event.metadata().level() {
                Level::ERROR => 3,
                Level::WARN => 4,
                Level::INFO => 6,
                Level::DEBUG | Level::TRACE => 7,
            };
            write!(w, "<{prio}>")?;
            return self.0.clone().without_time().format_event(ctx, w, event);
        }
        self.0.format_event(ctx, w, event)
    }
}

/// A writer that keeps each event on one line: newlines inside a message (a multi-line error
/// from a library) become " | ".
struct OneLine<W: Write>(W);

impl<W: Write> Write for OneLine<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let body = buf.strip_suffix(b"\n").unwrap_or(buf);
        if !body.contains(&b'\n') {
            return self.0.write(buf);
        }
        let mut line = Vec::with_capacity(buf.len() + 16);
        for (i, part) in body.split(|&b| b == b'\n').enumerate() {
            if i > 0 {
                line.extend_from_slice(b" | ");
            }
            line.extend_from_slice(part.strip_suffix(b"\r").unwrap_or(part));
        }
        if body.len() < buf.len() {
            line.push(b'\n');
        }
        self.0.write_all(&line)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_multi_line_event_is_written_as_one_line() {
        let mut out = OneLine(Vec::new());
        out.write_all(b"WARN failed: first\nsecond\r\nthird\n").unwrap();
        assert_eq!(out.0, b"WARN failed: first | second | third\n");
        let mut out = OneLine(Vec::new());
        out.write_all(b"INFO plain\n").unwrap();
        assert_eq!(out.0, b"INFO plain\n");
    }
}
