//! The `shrinkfs` command: parse arguments, run, print one error chain and exit with its code.

fn main() {
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.first().is_some_and(|a| shrinkfs::fstab::is_helper(a)) {
        // Run by mount(8) as mount.shrinkfs: its arguments become a `shrinkfs mount` command.
        let rest: Vec<String> = args[1..].iter().map(|a| a.to_string_lossy().into_owned()).collect();
        match shrinkfs::fstab::run(&rest) {
            Ok(Some(argv)) => {
                // Runs as that command in a fresh image: this process's own command line holds
                // the fstab options, credentials in `env.` settings among them, and `ps` shows
                // it to every user for the mount's life. (The settings are in the environment.)
                use std::os::unix::process::CommandExt;
                let failed = std::process::Command::new("/proc/self/exe").arg0(&argv[0]).args(&argv[1..]).exec();
                // Only if that could not start (no /proc): the command runs in this process.
                let _ = failed;
                args = argv;
            }
            Ok(None) => std::process::exit(0),
            Err(e) => {
                eprintln!("{}: error: {}", shrinkfs::fstab::HELPER, shrinkfs::exit::message(&e));
                std::process::exit(shrinkfs::exit::code_for(&e));
            }
        }
    }
    // Flags the command line leaves out come from SHRINKFS_* variables and the config file.
    let cli = match shrinkfs::settings::parse_from(args) {
        Ok(cli) => cli,
        // --help, --version, and a bare `shrinkfs` or `shrinkfs bench`: clap prints the help.
        Err(e) if !e.use_stderr() || e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            e.exit()
        }
        Err(e) => {
            eprintln!("shrinkfs: error: {}", shrinkfs::exit::clap_message(&e));
            std::process::exit(shrinkfs::exit::USAGE);
        }
    };
    tune_allocator(matches!(cli.command, shrinkfs::cli::Command::Mount(_)));
    home_from_user_database();
    shrinkfs::logging::init(cli.verbose);
    match shrinkfs::run(cli) {
        Ok(()) => {}
        Err(e) => {
            eprintln!("shrinkfs: error: {}", shrinkfs::exit::message(&e));
            std::process::exit(shrinkfs::exit::code_for(&e));
        }
    }
}

/// A mount started by mount(8) or systemd has no `HOME`: the AWS shared files, the SSO token
/// cache and the program of a `credential_process` (the AWS CLI, say) all look for it, so it is
/// set from the user database, as a login would.
fn home_from_user_database() {
    if std::env::var_os("HOME").is_some() {
        return;
    }
    let Some(home) = shrinkfs_fuse::credentials::home_dir(&Default::default()) else { return };
    // SAFETY: no thread has been started yet, so nothing reads the environment meanwhile.
    unsafe { std::env::set_var("HOME", home) };
}

/// Frames are megabyte buffers allocated and freed at a high rate. By default glibc maps each one
/// fresh (256 page faults per MiB, the largest cost of packing incompressible data); serving them
/// from the heap lets freed frames be reused (measured in BENCHMARKS.md). A mount also keeps to
/// one arena: with one per thread, freed frames strand in many heaps and the resident size grew to
/// 2-3x `--memory-limit` (measured by the memory-limit mount test); with one it stays within it.
fn tune_allocator(mount: bool) {
    // SAFETY: mallopt only tunes the allocator; called before any thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        if mount {
            libc::mallopt(libc::M_ARENA_MAX, 1);
            libc::mallopt(libc::M_TRIM_THRESHOLD, 32 << 20);
        } else {
            libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 20);
        }
    }
}
