//! The `shrinkfs` command: parse arguments, run, print one error chain and exit with its code.

use clap::Parser;

fn main() {
    // Frames are megabyte buffers allocated and freed at a high rate. By default glibc maps each
    // one fresh (256 page faults per MiB, the largest cost of packing incompressible data);
    // serving them from the heap lets freed frames be reused (measured in BENCHMARKS.md).
    // SAFETY: mallopt only tunes the allocator; called before any thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 20);
    }
    let cli = shrinkfs::cli::Cli::parse();
    shrinkfs::logging::init(cli.verbose);
    match shrinkfs::run(cli) {
        Ok(()) => {}
        Err(e) => {
            eprintln!("shrinkfs: error: {e:#}");
            std::process::exit(shrinkfs::exit::code_for(&e));
        }
    }
}
