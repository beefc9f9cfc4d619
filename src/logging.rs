//! Installs the tracing subscriber: only the binary does this; libraries only emit.

use tracing_subscriber::EnvFilter;

/// Logs to stderr at warn (or more with `-v`), overridable with `RUST_LOG`.
pub fn init(verbose: u8) {
    let level = match verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    // fuser warns that it could not unmount after every clean `shrinkfs unmount` (it is unmounted
    // already); its other messages stay visible.
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(format!("{level},fuser::session=error")));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
}
