//! The `shrinkfs` command: parse arguments, run, print one error chain and exit with its code.

use clap::Parser;

fn main() {
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
